//! Reductions over axes (`ReduceSum`, `ReduceMean`, ...) and index reductions (`ArgMax`, ...).

use super::OpFn;

pub(super) const OPS: &[(&str, OpFn)] = &[];
