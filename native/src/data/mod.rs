//! Data sets and images read from disk.

pub mod augment;
pub mod image;
pub mod mnist;
