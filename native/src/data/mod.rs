//! Data sets and images read from disk.

pub mod image;
pub mod mnist;
