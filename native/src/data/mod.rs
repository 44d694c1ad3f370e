//! Data sets read from disk.

pub mod mnist;
