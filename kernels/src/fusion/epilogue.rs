//! GEMM epilogues: an elementwise chain on a matmul's or convolution's output runs inside the
//! gemm.wgsl launch that computes it (its `put_c`), so the product is never stored nor read
//! back: a layer's bias and activation, a residual add.
//!
//! The decorator defers matmul, conv2d and conv_transpose2d (a lazy holding the op). A chain
//! that reads the deferred output whole, when nothing else holds that output, runs as a call of
//! an [`EpilogueOp`]: the product's two inputs, then the chain's other inputs. The planner
//! ([`crate::plan`]) plans the product and appends the chain to its last launch when that is
//! the GEMM writing the output. Otherwise (split-K's reduction writes it) the product goes to
//! scratch and the chain runs after it as its own fused kernel, as it also does after a
//! product that a runtime's library computes (cuBLAS, cuDNN: `exec.rs`).

use super::codegen::{self, EpilogueRead, epilogue_source};
use super::expr::{Expr, ReadKind};
use kiln_core::op::custom::{Attrs, CustomCall, CustomOp};
use kiln_core::{
    DType, Device, Error, Layout, Meta, Op, Result, Shape, Storage, Tensor, TensorData, View,
};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A chain fused into the GEMM of its product. Registered once per structure (the chain's, where
/// the product enters it, and the product op); sizes and constants come with each call, in the
/// attributes of the chain's own kernel.
pub struct EpilogueOp {
    name: String,
    /// `Op::Matmul`, `Op::Conv2d` or `Op::ConvTranspose2d`
    product: Op,
    /// the chain's own kernel (a [`codegen::FusedOp`]), whose input `at` is the product
    chain: String,
    at: usize,
    reads: Vec<EpilogueRead>,
    nconsts: usize,
    dtype: DType,
    /// what gemm.wgsl appends for it
    wgsl: String,
}

/// The epilogues of this process: by name (the planner and the executors look them up), and
/// their names by structural key.
static EPILOGUES: Mutex<Registry> = Mutex::new(Registry {
    by_name: BTreeMap::new(),
    by_key: BTreeMap::new(),
});

struct Registry {
    by_name: BTreeMap<String, Arc<EpilogueOp>>,
    by_key: BTreeMap<String, String>,
}

/// Where epilogues' names start (kiln's reserved [`kiln_core::op::custom::KILN_PREFIX`], then
/// `epilogue.`): other custom calls, planned once per launch, skip the lookup.
const PREFIX: &str = "kiln.epilogue.";

/// The epilogue named `name`, if it is one.
pub fn lookup(name: &str) -> Option<Arc<EpilogueOp>> {
    if !name.starts_with(PREFIX) {
        return None;
    }
    let known = EPILOGUES.lock().unwrap_or_else(|e| e.into_inner());
    known.by_name.get(name).cloned()
}

/// The names of the epilogues this process has registered.
pub fn names() -> Vec<String> {
    let known = EPILOGUES.lock().unwrap_or_else(|e| e.into_inner());
    known.by_name.keys().cloned().collect()
}

/// The appended WGSL of the epilogue named `name` (a gemm.wgsl `EPILOGUE` define).
pub fn source(name: &str) -> Result<String> {
    lookup(name)
        .map(|ep| ep.wgsl.clone())
        .ok_or_else(|| Error::invalid("gemm.wgsl", format!("no fused epilogue named {name}")))
}

/// Whether `e`'s input `at` (a product) can take the rest of `e` as its epilogue: the chain
/// computes something in f32 from it read whole, and every other input fits the bindings left
/// after the GEMM's four and is read without a per-axis broadcast.
pub fn fits(e: &Expr, at: usize) -> bool {
    let kinds = e.kinds(&e.shape);
    e.ops() > 0
        && e.dtype() == DType::F32
        && kinds[at] == ReadKind::Whole
        && e.leaves.len() <= 1 + MAX_INPUTS
        && !kinds.contains(&ReadKind::Broadcast)
}

/// The chain's inputs besides the product: WebGPU guarantees 8 storage buffers per stage, and
/// the GEMM's params, A, B and C take four.
const MAX_INPUTS: usize = 4;

/// The call running `e` as the epilogue of `product` (its input `at`), registered on first use
/// of its structure. Its inputs: the product's two, then `e`'s leaves but `at`.
pub fn call(e: &Expr, at: usize, product: &Op) -> Result<CustomCall> {
    let chain = super::register(e, None)?;
    // the product seen in its own shape (the planner checks that it is, `reads_hold`): a bias
    // may be read at the GEMM's row or column
    let own = e.leaves[at].layout.shape() == &e.shape;
    let mut key = format!("{chain} at in{at} of {} reads", product_key(product));
    let reads: Vec<EpilogueRead> = (e.leaves.iter().zip(e.kinds(&e.shape)))
        .map(|(l, kind)| {
            let gemm = own.then(|| gemm_read(product, l.layout.shape(), &e.shape));
            let read = gemm.flatten().unwrap_or(EpilogueRead::Kind(kind));
            key.push(' ');
            key.push_str(read.name());
            read
        })
        .collect();
    let attrs = codegen::attrs(e, &e.shape, None);
    let mut known = EPILOGUES.lock().unwrap_or_else(|x| x.into_inner());
    if let Some(name) = known.by_key.get(&key) {
        return Ok(CustomCall::new(name.clone(), attrs));
    }
    let name = format!("{PREFIX}{:016x}", super::hash(&key));
    let dtypes: Vec<DType> = e.leaves.iter().map(|l| l.dtype).collect();
    let nconsts = e.consts.len();
    let wgsl = epilogue_source(&name, &e.nodes, &dtypes, &reads, nconsts, at)?;
    let ep = Arc::new(EpilogueOp {
        name: name.clone(),
        product: product.clone(),
        chain,
        at,
        reads,
        nconsts,
        dtype: e.dtype(),
        wgsl,
    });
    super::log(|| format!("{name}: {} after {}", ep.chain, product.name()));
    kiln_core::op::custom::register_op(ep.clone())?;
    known.by_name.insert(name.clone(), ep);
    known.by_key.insert(key, name.clone());
    Ok(CustomCall::new(name, attrs))
}

/// The row or column of the GEMM computing `product` (of output `out`) at which an input of
/// `leaf` shape is read: where the input spans one axis of the output, whole, and broadcasts
/// over the others, and that axis is a convolution's channel (the row of C over the groups) or
/// a matmul's last (the column).
fn gemm_read(product: &Op, leaf: &Shape, out: &Shape) -> Option<EpilogueRead> {
    let (axis, read) = match product {
        Op::Matmul => (out.rank().checked_sub(1)?, EpilogueRead::Col),
        // a convolution's NCHW
        _ if out.rank() == 4 => (1, EpilogueRead::Row),
        _ => return None,
    };
    let (pad, size) = (out.rank().checked_sub(leaf.rank())?, out.dims()[axis]);
    // right-aligned, 1 on every axis but that one; neither one element nor the whole output
    let ones = (leaf.dims().iter().enumerate()).all(|(d, &n)| n == 1 || d + pad == axis);
    (ones && leaf.numel() == size && size > 1 && size < out.numel()).then_some(read)
}

/// What a product adds to an epilogue's key: its op and a convolution's parameters (not the
/// `Debug` of `Op`, whose code for every variant cost the page's module 3.8 KiB gzipped).
fn product_key(op: &Op) -> String {
    let (c, output_padding) = match op {
        Op::Conv2d(c) => (c, [0, 0]),
        Op::ConvTranspose2d {
            params,
            output_padding,
        } => (params, *output_padding),
        other => return other.name().to_string(),
    };
    let (name, [s, p, d]) = (op.name(), [c.stride, c.padding, c.dilation]);
    format!("{name} {s:?} {p:?} {d:?} {} {output_padding:?}", c.groups)
}

impl EpilogueOp {
    /// The product op.
    pub fn product(&self) -> &Op {
        &self.product
    }

    /// The product's dtype and shape for its two inputs.
    pub fn product_meta(&self, inputs: &[Meta]) -> Result<Meta> {
        let mut out = self.product.infer(inputs.get(..2).unwrap_or(inputs))?;
        out.pop()
            .ok_or_else(|| Error::invalid(self.name.clone(), "the product has no output"))
    }

    /// The chain's own kernel's call (the same attributes).
    pub fn chain_call(&self, call: &CustomCall) -> CustomCall {
        CustomCall::new(self.chain.clone(), call.attrs.clone())
    }

    /// Where the product enters the chain's inputs.
    pub fn at(&self) -> usize {
        self.at
    }

    /// The words gemm.wgsl reads from `params.gemm.epilogue` on, for an output of `out`
    /// and the chain's other inputs of `others` (in order).
    pub fn words(&self, attrs: &Attrs, others: &[Meta], out: &Meta) -> Result<Vec<u32>> {
        let consts = codegen::const_words(attrs, self.nconsts, &self.name)?;
        let mut shapes: Vec<_> = others.iter().map(|m| m.1.clone()).collect();
        shapes.insert(self.at, out.1.clone());
        Ok(codegen::epilogue_words(
            &consts,
            &self.reads,
            &shapes,
            &out.1,
            self.at,
        ))
    }

    /// Whether the inputs read at the GEMM's row or column are so for these inputs (the
    /// product's two, then the chain's others), product and output: the product seen in its
    /// own shape (the key knows the shape it is seen in, not the product's), a matmul's by a
    /// matrix (by a vector its last axis is the rows), each such input spanning its axis. Where
    /// not, the chain runs after the product as its own kernel.
    pub fn reads_hold(&self, inputs: &[Meta], product: &Meta, out: &Meta) -> bool {
        let by_vector =
            matches!(self.product, Op::Matmul) && inputs.get(1).is_none_or(|b| b.1.rank() < 2);
        let own = product.1 == out.1 && !by_vector;
        let others = inputs.get(2..).unwrap_or_default();
        // (the product, input `at`, is read whole)
        let other = |j: usize| others.get(j - usize::from(j > self.at));
        (self.reads.iter().enumerate()).all(|(j, &read)| match read {
            EpilogueRead::Kind(_) => true,
            _ => {
                own && other(j)
                    .is_some_and(|m| gemm_read(&self.product, &m.1, &out.1) == Some(read))
            }
        })
    }

    /// The chain's inputs: `others` with the product (seen as the output's shape) at its place.
    pub fn chain_inputs<'a>(
        &self,
        product: &'a Storage,
        layout: &'a Layout,
        others: &[View<'a>],
    ) -> Vec<View<'a>> {
        let mut views = others.to_vec();
        let view = View {
            storage: product,
            layout,
            dtype: self.dtype,
        };
        views.insert(self.at.min(views.len()), view);
        views
    }
}

impl CustomOp for EpilogueOp {
    fn name(&self) -> &str {
        &self.name
    }

    fn infer(&self, attrs: &Attrs, inputs: &[Meta]) -> Result<Meta> {
        let want = 1 + self.reads.len();
        if inputs.len() != want {
            return Err(Error::invalid(
                self.name.clone(),
                format!("takes {want} inputs, got {}", inputs.len()),
            ));
        }
        let mut chain = inputs[2..].to_vec();
        chain.insert(self.at, self.product_meta(inputs)?);
        kiln_core::op::custom::lookup(&self.chain)?
            .op
            .infer(attrs, &chain)
    }

    /// The product on the CPU, then the chain's own reference.
    fn cpu(&self, attrs: &Attrs, inputs: &[TensorData], output: &Meta) -> Result<TensorData> {
        let cpu = Device::cpu();
        let [a, b] = [0, 1].map(|i| inputs.get(i).map(|d| Tensor::from_data(d, &cpu)));
        let (Some(a), Some(b)) = (a, b) else {
            return Err(Error::invalid(
                self.name.clone(),
                "takes the product's two inputs first",
            ));
        };
        let product = Tensor::apply(self.product.clone(), &[&a?, &b?])?;
        let product = product.reshape(output.1.clone())?.to_data()?;
        let mut chain = inputs[2..].to_vec();
        chain.insert(self.at, product);
        kiln_core::op::custom::lookup(&self.chain)?
            .op
            .cpu(attrs, &chain, output)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_in_kilns_reserved_prefix() {
        assert!(super::PREFIX.starts_with(kiln_core::op::custom::KILN_PREFIX));
    }

    #[test]
    fn biases_by_channel_or_column_read_at_the_gemms_row_or_column() {
        use super::{EpilogueRead, gemm_read};
        use kiln_core::{Op, Shape};
        let conv = Op::Conv2d(Default::default());
        let read = |op: &Op, leaf: &[usize], out: &[usize]| {
            gemm_read(op, &Shape::from(leaf.to_vec()), &Shape::from(out.to_vec()))
        };
        let out = [2, 5, 7, 3];
        for leaf in [&[5, 1, 1][..], &[1, 5, 1, 1]] {
            assert_eq!(read(&conv, leaf, &out), Some(EpilogueRead::Row), "{leaf:?}");
        }
        // another axis, two axes, one element, the whole output
        for leaf in [&[7, 1][..], &[3], &[5, 7, 1], &[1], &[2, 5, 7, 3]] {
            assert_eq!(read(&conv, leaf, &out), None, "{leaf:?}");
        }
        // a single image's: the whole output but its plane
        assert_eq!(
            read(&conv, &[4, 1, 1], &[1, 4, 2, 2]),
            Some(EpilogueRead::Row)
        );
        let out = [3, 5, 9];
        assert_eq!(read(&Op::Matmul, &[9], &out), Some(EpilogueRead::Col));
        assert_eq!(read(&Op::Matmul, &[1, 1, 9], &out), Some(EpilogueRead::Col));
        for leaf in [&[5, 1][..], &[5, 9], &[3, 1, 9], &[1]] {
            assert_eq!(read(&Op::Matmul, leaf, &out), None, "{leaf:?}");
        }
    }
}
