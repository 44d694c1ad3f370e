//! kiln-web: the JS API (being built).
