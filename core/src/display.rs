//! `Display` for tensors and tensor data, in the style of PyTorch.
