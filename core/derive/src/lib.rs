//! `#[derive(Module)]` for kiln (placeholder until the nn issue fills it).
