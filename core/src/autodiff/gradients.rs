//! The result of a backward pass: one gradient per tensor, keyed by [`TensorId`].

use crate::{Tensor, TensorId};
use alloc::collections::BTreeMap;

/// Gradients from [`Tensor::backward`], keyed by the id of the tensor they belong to.
///
/// It holds the gradient of every leaf that requires grad and that the output depends on
/// (tensors made with [`Tensor::require_grad`]), each with its leaf's shape and dtype. The
/// gradients carry no history, the tensors they belong to are left untouched, and the container
/// is `Send + Sync`, so it can be handed to another thread (an optimizer, a gradient all-reduce).
///
/// ```
/// use kiln_core::{Device, DType, Tensor};
/// let dev = Device::cpu();
/// let w = Tensor::from_vec(vec![0.5f64, -1.0], [2], &dev)?.require_grad();
/// let mut grads = w.mul_scalar(3.0)?.sum_all()?.backward()?;
/// assert_eq!(grads.len(), 1);
/// let g = grads.remove(&w).unwrap();
/// assert_eq!(g.to_vec::<f64>()?, vec![3.0, 3.0]);
/// assert!(grads.is_empty());
/// # Ok::<(), kiln_core::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Gradients {
    grads: BTreeMap<TensorId, Tensor>,
}

impl Gradients {
    /// An empty container.
    pub fn new() -> Self {
        Self::default()
    }
    /// The gradient of `tensor`, if the backward pass reached it.
    pub fn get(&self, tensor: &Tensor) -> Option<&Tensor> {
        self.grads.get(&tensor.id())
    }
    /// The gradient of the tensor with id `id`.
    pub fn get_id(&self, id: TensorId) -> Option<&Tensor> {
        self.grads.get(&id)
    }
    /// Takes the gradient of `tensor` out of the container.
    pub fn remove(&mut self, tensor: &Tensor) -> Option<Tensor> {
        self.grads.remove(&tensor.id())
    }
    /// Sets the gradient of `tensor`, returning the one it replaces.
    pub fn insert(&mut self, tensor: &Tensor, grad: Tensor) -> Option<Tensor> {
        self.grads.insert(tensor.id(), grad)
    }
    /// Every `(id, gradient)` pair, in id order (the order the tensors were made).
    pub fn iter(&self) -> impl Iterator<Item = (TensorId, &Tensor)> {
        self.grads.iter().map(|(id, g)| (*id, g))
    }
    /// Number of gradients held.
    pub fn len(&self) -> usize {
        self.grads.len()
    }
    /// `true` when no gradient is held.
    pub fn is_empty(&self) -> bool {
        self.grads.is_empty()
    }
    /// Whether `tensor` has a gradient here.
    pub fn contains(&self, tensor: &Tensor) -> bool {
        self.grads.contains_key(&tensor.id())
    }
}

impl IntoIterator for Gradients {
    type Item = (TensorId, Tensor);
    type IntoIter = alloc::collections::btree_map::IntoIter<TensorId, Tensor>;
    fn into_iter(self) -> Self::IntoIter {
        self.grads.into_iter()
    }
}
