//! Data sets and images read from disk, and the loader that batches them.

pub mod augment;
pub mod csv;
pub mod image;
pub mod loader;
pub mod mnist;
pub mod text;
