//! The kiln model file.
