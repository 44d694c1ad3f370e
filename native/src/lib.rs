//! kiln: the native crate (being built).
