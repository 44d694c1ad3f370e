//! The recorded expression of a fused region: an SSA list of elementwise table ops whose leaves
//! are real storages of the inner device (seen through their layouts) or constants.

use kiln_core::{BinaryOp, CmpOp, DType, Layout, Shape, Storage, UnaryOp, View};

/// At most this many distinct real inputs per generated kernel: WebGPU guarantees 8 storage
/// buffers per stage, and the params header and the output take two.
pub const MAX_LEAVES: usize = 6;
/// At most this many nodes per generated kernel (keeps kernels and their compile time small).
pub const MAX_NODES: usize = 48;

/// One SSA node; operands are indices of earlier nodes.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// Real input `i` of the expression.
    Leaf(usize),
    /// Constant `i` of the expression (its value is a launch parameter, not part of the key).
    Const(usize),
    Unary(UnaryOp, usize),
    Binary(BinaryOp, usize, usize),
    Compare(CmpOp, usize, usize),
    Where(usize, usize, usize),
    /// A conversion to the node's dtype.
    Cast(usize),
}

/// A real input: a storage of the inner device seen through `layout`, whose shape broadcasts
/// (right-aligned) against the kernel's output shape; broadcast axes have size 1.
#[derive(Clone, Debug)]
pub struct Leaf {
    pub storage: Storage,
    pub layout: Layout,
    pub dtype: DType,
}

impl Leaf {
    /// The view a kernel reads this leaf through.
    pub fn view(&self) -> View<'_> {
        View {
            storage: &self.storage,
            layout: &self.layout,
            dtype: self.dtype,
        }
    }

    /// A leaf from a view: axes that a stride of 0 repeats become size 1, so the kernel reads
    /// the un-expanded data and broadcasts it itself.
    pub fn new(storage: Storage, layout: &Layout, dtype: DType) -> Leaf {
        let dims = layout
            .shape()
            .dims()
            .iter()
            .zip(layout.strides())
            .map(|(&d, &s)| if s == 0 { 1 } else { d })
            .collect();
        let layout =
            Layout::from_parts(Shape::new(dims), layout.strides().to_vec(), layout.offset());
        Leaf {
            storage,
            layout,
            dtype,
        }
    }

    fn same(&self, other: &Leaf) -> bool {
        self.storage.same(&other.storage)
            && self.layout == other.layout
            && self.dtype == other.dtype
    }
}

/// An expression: `nodes` (each with its dtype), the last one the result, of `shape`.
#[derive(Clone, Debug)]
pub struct Expr {
    pub nodes: Vec<(Node, DType)>,
    pub leaves: Vec<Leaf>,
    /// Constant values as the device's 4-byte words (f32 bits, i32 bits, u32, bool 0/1).
    pub consts: Vec<u32>,
    pub shape: Shape,
}

impl Expr {
    /// A constant `value` of `dtype` and `shape`.
    pub fn constant(value: f64, dtype: DType, shape: Shape) -> Expr {
        Expr {
            nodes: vec![(Node::Const(0), dtype)],
            leaves: vec![],
            consts: vec![crate::plan::bits(value, dtype)],
            shape,
        }
    }

    /// A single real input (with room for the op reading it, as [`Expr::extendable`]).
    pub fn leaf(leaf: Leaf, shape: Shape) -> Expr {
        let mut leaves = Vec::with_capacity(1 + ROOM.1);
        leaves.push(leaf);
        Expr {
            nodes: with_room(&[(Node::Leaf(0), leaves[0].dtype)], ROOM.0),
            leaves,
            consts: Vec::with_capacity(ROOM.2),
            shape,
        }
    }

    /// The result's dtype.
    pub fn dtype(&self) -> DType {
        self.nodes.last().map_or(DType::F32, |n| n.1)
    }

    /// `true` when every element has the same value (no real input).
    pub fn uniform(&self) -> bool {
        self.leaves.is_empty()
    }

    /// A copy with room for the next op's nodes, inputs and constants ([`ROOM`]).
    pub fn extendable(&self) -> Expr {
        Expr {
            nodes: with_room(&self.nodes, ROOM.0),
            leaves: with_room(&self.leaves, ROOM.1),
            consts: with_room(&self.consts, ROOM.2),
            shape: self.shape.clone(),
        }
    }

    /// The same expression seen as `shape` (same element order, e.g. a reshape), if its leaves
    /// allow it: leaves that are whole and contiguous or single elements.
    pub fn reshaped(&self, shape: &Shape) -> Option<Expr> {
        if shape == &self.shape {
            return Some(self.extendable());
        }
        let n = self.shape.numel();
        let mut out = self.extendable();
        for leaf in &mut out.leaves {
            let l = &leaf.layout;
            let new_shape = if l.shape().numel() == 1 {
                Shape::scalar()
            } else if l.shape().numel() == n && l.is_contiguous() {
                shape.clone()
            } else {
                return None;
            };
            leaf.layout = Layout::from_parts(
                new_shape.clone(),
                new_shape.contiguous_strides(),
                l.offset(),
            );
        }
        out.shape = shape.clone();
        Some(out)
    }

    /// Appends `other`'s nodes (leaves shared where they are the same view) and returns the
    /// index of its result.
    pub fn append(&mut self, other: &Expr) -> usize {
        let leaf_map: Vec<usize> = other
            .leaves
            .iter()
            .map(|l| match self.leaves.iter().position(|m| m.same(l)) {
                Some(i) => i,
                None => {
                    self.leaves.push(l.clone());
                    self.leaves.len() - 1
                }
            })
            .collect();
        let const_base = self.consts.len();
        self.consts.extend_from_slice(&other.consts);
        // where each of `other`'s nodes is in `self`
        let mut at: Vec<usize> = Vec::with_capacity(other.nodes.len());
        for (node, dtype) in &other.nodes {
            let node = match *node {
                Node::Leaf(i) => Node::Leaf(leaf_map[i]),
                Node::Const(i) => Node::Const(const_base + i),
                Node::Unary(u, a) => Node::Unary(u, at[a]),
                Node::Binary(b, x, y) => Node::Binary(b, at[x], at[y]),
                Node::Compare(c, x, y) => Node::Compare(c, at[x], at[y]),
                Node::Where(c, x, y) => Node::Where(at[c], at[x], at[y]),
                Node::Cast(a) => Node::Cast(at[a]),
            };
            // a node computed twice (a leaf read twice, an input inlined twice) is one node
            let existing = self.nodes.iter().position(|n| n.0 == node && n.1 == *dtype);
            at.push(existing.unwrap_or_else(|| {
                self.nodes.push((node, *dtype));
                self.nodes.len() - 1
            }));
        }
        at.last().copied().unwrap_or(0)
    }

    /// The number of nodes that compute something (leaves and constants are free).
    pub fn ops(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| !matches!(n.0, Node::Leaf(_) | Node::Const(_)))
            .count()
    }

    /// Whether a kernel of this expression fits the limits.
    pub fn fits(&self) -> bool {
        self.leaves.len() <= MAX_LEAVES && self.nodes.len() <= MAX_NODES
    }

    /// The structural key: the op chain, dtypes, constant slots, each leaf's dtype and how it is
    /// read against `out` (whole, one element, or broadcast). Not the sizes nor the constants'
    /// values. Built once per kernel run, so written without `core::fmt`: its `write!`s cost
    /// about 550 instructions each, 10k per composed GELU's key, a fifth of recording the GELU.
    pub fn key(&self, out: &Shape) -> String {
        let mut s = String::with_capacity(16 * (self.leaves.len() + self.nodes.len()));
        let node = |s: &mut String, i: usize| {
            s.push('n');
            push_number(s, i as u64);
        };
        for (j, l) in self.leaves.iter().enumerate() {
            s.push_str("in");
            push_number(&mut s, j as u64);
            for part in [l.dtype.name(), read_kind(l.layout.shape(), out).name()] {
                s.push(':');
                s.push_str(part);
            }
            s.push(' ');
        }
        if vectorized(&self.kinds(out), out) {
            s.push_str("vec4 ");
        }
        for (i, (n, dtype)) in self.nodes.iter().enumerate() {
            node(&mut s, i);
            s.push(':');
            s.push_str(dtype.name());
            s.push('=');
            let args: &[usize] = match n {
                Node::Leaf(j) => {
                    s.push_str("in");
                    push_number(&mut s, *j as u64);
                    &[]
                }
                Node::Const(k) => {
                    s.push('k');
                    push_number(&mut s, *k as u64);
                    &[]
                }
                Node::Unary(u, a) => {
                    s.push_str(u.name());
                    // the unary consts (powf, clamp) are part of the op and so of the key
                    if u.consts() != [0.0; 2] {
                        for c in u.consts() {
                            s.push('#');
                            push_number(&mut s, c.to_bits());
                        }
                    }
                    core::slice::from_ref(a)
                }
                Node::Binary(b, x, y) => {
                    s.push_str(b.name());
                    &[*x, *y]
                }
                Node::Compare(c, x, y) => {
                    s.push_str(c.name());
                    &[*x, *y]
                }
                Node::Where(c, x, y) => {
                    s.push_str("where");
                    &[*c, *x, *y]
                }
                Node::Cast(a) => {
                    s.push_str("cast");
                    core::slice::from_ref(a)
                }
            };
            if !args.is_empty() {
                for (k, &a) in args.iter().enumerate() {
                    s.push(if k == 0 { '(' } else { ',' });
                    node(&mut s, a);
                }
                s.push(')');
            }
            s.push(' ');
        }
        s
    }

    /// How the kernel reads each leaf for an output of `out` shape.
    pub fn kinds(&self, out: &Shape) -> Vec<ReadKind> {
        self.leaves
            .iter()
            .map(|l| read_kind(l.layout.shape(), out))
            .collect()
    }

    /// A short readable op chain for the log (`erf(div(in0,k0))`-like, node by node).
    pub fn chain(&self) -> String {
        let names: Vec<String> = self
            .nodes
            .iter()
            .filter_map(|(n, _)| match n {
                Node::Unary(u, _) => Some(u.name().to_string()),
                Node::Binary(b, ..) => Some(b.name().to_string()),
                Node::Compare(c, ..) => Some(c.name().to_string()),
                Node::Where(..) => Some("where".to_string()),
                Node::Cast(_) => Some("cast".to_string()),
                _ => None,
            })
            .collect();
        names.join(" -> ")
    }
}

/// Room for the nodes, inputs and constants an op appends to an operand's copy, which it grows
/// into its own expression: copies of exact size were reallocated on each append (composed GELU
/// on wgpu through lavapipe, host instructions per GELU: 121.2k against 117.0k).
const ROOM: (usize, usize, usize) = (4, 1, 2);

/// A copy of `v` with capacity for `room` more.
fn with_room<T: Clone>(v: &[T], room: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(v.len() + room);
    out.extend_from_slice(v);
    out
}

/// Appends `n` in decimal.
pub fn push_number(s: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    s.extend(digits[at..].iter().map(|&d| char::from(d)));
}

/// How a kernel reads a leaf of `leaf` shape for an output of `out` shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadKind {
    /// element `i` (as many elements as the output)
    Whole,
    /// element 0
    One,
    /// broadcast over leading axes only (a bias `[C]` on `[N, C]`): element `i % m`, `m` its
    /// element count
    Inner,
    /// broadcast over trailing axes only (a row mean `[N, 1]` on `[N, C]`): element `i / m`,
    /// `m` the output's elements per input element
    Outer,
    /// broadcast over leading and trailing axes (a causal mask's row index `[T, 1]` on
    /// `[B, H, T, T]`): element `(i / d) % m`, `m` its element count, `d` the output's elements
    /// per step of it
    Middle,
    /// any other broadcast: index from the output's coordinates (a division per axis)
    Broadcast,
}

impl ReadKind {
    pub fn name(self) -> &'static str {
        match self {
            ReadKind::Whole => "whole",
            ReadKind::One => "one",
            ReadKind::Inner => "inner",
            ReadKind::Outer => "outer",
            ReadKind::Middle => "middle",
            ReadKind::Broadcast => "bcast",
        }
    }
}

/// How a leaf of `leaf` shape is read for an output of `out` shape.
pub fn read_kind(leaf: &Shape, out: &Shape) -> ReadKind {
    if leaf.numel() == out.numel() {
        ReadKind::Whole
    } else if leaf.numel() == 1 {
        ReadKind::One
    } else {
        // right-aligned: which axes the leaf spans (its size) and which it broadcasts (1)
        let pad = out.rank().saturating_sub(leaf.rank());
        let spans: Vec<bool> = (0..out.rank())
            .filter(|&d| out.dims()[d] != 1)
            .map(|d| d >= pad && leaf.dims()[d - pad] != 1)
            .collect();
        // one run of broadcast axes, then one of spanned axes (or the reverse), or spanned
        // axes between two broadcast runs
        let switches = spans.windows(2).filter(|w| w[0] != w[1]).count();
        match (switches, spans.first()) {
            (1, Some(false)) => ReadKind::Inner,
            (1, Some(true)) => ReadKind::Outer,
            (2, Some(false)) => ReadKind::Middle,
            _ => ReadKind::Broadcast,
        }
    }
}

/// Whether the kernel computes 4 elements per invocation, storing whole vec4s of output: when
/// at least one input is read whole (as vec4s); the others are read a lane at a time.
pub fn vectorized(kinds: &[ReadKind], out: &Shape) -> bool {
    out.numel().is_multiple_of(4) && kinds.contains(&ReadKind::Whole)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasts_over_leading_or_trailing_axes_read_with_one_division() {
        let kind = |leaf: &[usize], out: &[usize]| read_kind(&Shape::from(leaf), &Shape::from(out));
        assert_eq!(kind(&[2, 3, 4], &[2, 3, 4]), ReadKind::Whole);
        assert_eq!(kind(&[1], &[2, 3, 4]), ReadKind::One);
        // a bias, with or without its leading 1s, and across axes of size 1
        assert_eq!(kind(&[4], &[2, 3, 4]), ReadKind::Inner);
        assert_eq!(kind(&[1, 3, 4], &[2, 3, 4]), ReadKind::Inner);
        assert_eq!(kind(&[3, 1, 4], &[2, 3, 1, 4]), ReadKind::Inner);
        // a row statistic
        assert_eq!(kind(&[2, 3, 1], &[2, 3, 4]), ReadKind::Outer);
        assert_eq!(kind(&[2, 1, 1], &[2, 3, 4]), ReadKind::Outer);
        // spanned axes between broadcast ones (a mask's row index), and the reverse
        assert_eq!(kind(&[1, 3, 1], &[2, 3, 4]), ReadKind::Middle);
        assert_eq!(kind(&[5, 1], &[2, 3, 5, 4]), ReadKind::Middle);
        assert_eq!(kind(&[2, 1, 4], &[2, 3, 4]), ReadKind::Broadcast);
    }

    #[test]
    fn keys_tell_structures_apart_but_not_sizes_or_constant_values() {
        let dev = kiln_core::Device::cpu();
        let leaf = |dims: &[usize]| {
            let t = kiln_core::Tensor::zeros(dims, DType::F32, &dev).unwrap();
            let layout = Layout::contiguous(Shape::from(dims));
            Expr::leaf(
                Leaf::new(t.storage().clone(), &layout, DType::F32),
                Shape::from(dims),
            )
        };
        // `x op c` (a constant) then a unary function, over an output of `dims`
        let chain = |dims: &[usize], c: f64, u: UnaryOp| {
            let mut e = leaf(dims);
            let k = e.append(&Expr::constant(c, DType::F32, Shape::scalar()));
            e.nodes
                .push((Node::Binary(BinaryOp::Div, 0, k), DType::F32));
            let last = e.nodes.len() - 1;
            e.nodes.push((Node::Unary(u, last), DType::F32));
            e.key(&Shape::from(dims))
        };
        let gelu_like = chain(&[3, 5], 1.5, UnaryOp::Erf);
        assert_eq!(
            gelu_like,
            "in0:f32:whole n0:f32=in0 n1:f32=k0 n2:f32=div(n0,n1) n3:f32=erf(n2) "
        );
        // sizes and constants' values are launch parameters
        assert_eq!(chain(&[7, 11], -2.0, UnaryOp::Erf), gelu_like);
        // a vectorized kernel (4 elements per invocation) is another kernel
        assert!(chain(&[4, 4], 1.5, UnaryOp::Erf).contains("vec4 "));
        assert_ne!(chain(&[3, 5], 1.5, UnaryOp::Exp), gelu_like);
        // a unary op's own constants are part of its code
        let (p2, p3) = (UnaryOp::Powf(2.0), UnaryOp::Powf(3.0));
        assert_ne!(chain(&[3, 5], 1.5, p2), chain(&[3, 5], 1.5, p3));
        assert_eq!(chain(&[3, 5], 1.5, p2), chain(&[9], 4.0, p2));
    }
}
