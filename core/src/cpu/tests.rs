//! Focused tests of the trickier CPU kernels against naive loops.
