//! What the CUDA and HIP backends share: compiled-kernel caches keyed by variant, the
//! translation of a variant, the kernel arguments of a launch, and the mapping of a matmul's
//! views onto a BLAS GEMM. Each backend keeps only its API calls.

use kiln_core::{Error, Result, Shape, View};
use kiln_kernels::cuda::{Kernel, Options, ParamKind};
use kiln_kernels::exec::Launch;
use kiln_kernels::plan::KernelKey;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Alignment of each dispatch's params within a plan's one params upload.
pub(crate) const PARAMS_ALIGN: usize = 256;

/// The source of variant `key` translated with `options` and its one kernel; errors name
/// `backend`.
pub(crate) fn translate(
    key: &KernelKey,
    options: Options,
    backend: &str,
) -> Result<(String, Kernel)> {
    let label = key.label();
    let wgsl = key.wgsl()?;
    let m = kiln_kernels::cuda::translate_with(&wgsl, &label, options)?;
    let kernel = m.kernels.into_iter().next().ok_or_else(|| {
        Error::invalid(
            backend.to_string(),
            format!("{label}: no compute entry point"),
        )
    })?;
    Ok((m.source, kernel))
}

/// Each variant's builds, looked up by reference: a launch clones no key.
type Builds<T> = HashMap<KernelKey, Vec<(u32, Arc<T>)>>;

/// Compiled kernels by variant and build (a backend's own flavour of one variant, such as the
/// size of the params CUDA passes by value; 0 where there is one), each compiled once.
pub(crate) struct KernelCache<T> {
    map: Mutex<Builds<T>>,
    backend: &'static str,
}

impl<T> KernelCache<T> {
    pub(crate) fn new(backend: &'static str) -> Self {
        KernelCache {
            map: Mutex::new(HashMap::new()),
            backend,
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Builds<T>>> {
        self.map
            .lock()
            .map_err(|_| Error::device(self.backend, "a kernel-cache lock was poisoned by a panic"))
    }

    fn find(map: &Builds<T>, key: &KernelKey, build: u32) -> Option<Arc<T>> {
        let builds = map.get(key)?;
        builds
            .iter()
            .find(|(b, _)| *b == build)
            .map(|(_, k)| k.clone())
    }

    /// Build `build` of `key`, from `compile` on first use. Compiling runs outside the lock;
    /// when another thread compiled the same build meanwhile, its kernel is kept and ours goes
    /// to `discard`.
    pub(crate) fn get_or_compile(
        &self,
        key: &KernelKey,
        build: u32,
        compile: impl FnOnce() -> Result<T>,
        discard: impl FnOnce(T),
    ) -> Result<Arc<T>> {
        if let Some(k) = Self::find(&*self.lock()?, key, build) {
            return Ok(k);
        }
        let compiled = compile()?;
        let mut map = self.lock()?;
        if let Some(k) = Self::find(&map, key, build) {
            discard(compiled);
            return Ok(k);
        }
        let compiled = Arc::new(compiled);
        map.entry(key.clone())
            .or_default()
            .push((build, compiled.clone()));
        Ok(compiled)
    }

    /// Empties the cache (on the backend's drop), handing every kernel to `release`.
    pub(crate) fn drain(&mut self, mut release: impl FnMut(Arc<T>)) {
        if let Ok(map) = self.map.get_mut() {
            for (_, k) in map.drain().flat_map(|(_, builds)| builds) {
                release(k);
            }
        }
    }
}

/// Every dispatch's params as one upload, each at a multiple of [`PARAMS_ALIGN`] bytes, and
/// the (offset, bytes) of each dispatch's share.
pub(crate) fn pack_params<B>(dispatches: &[Launch<'_, B>]) -> (Vec<u8>, Vec<(u64, u64)>) {
    let mut words: Vec<u8> = Vec::new();
    let mut at = Vec::with_capacity(dispatches.len());
    for d in dispatches {
        words.resize(words.len().next_multiple_of(PARAMS_ALIGN), 0);
        at.push((words.len() as u64, 4 * d.params.len() as u64));
        words.extend(d.params.iter().flat_map(|w| w.to_le_bytes()));
    }
    (words, at)
}

/// The values of `kernel`'s parameters for dispatch `d` of `op`, one u64 each (pointers, and
/// u32 lengths in the low bytes: little-endian launches read the first 4). `buffer(b)` gives
/// the (device address, bytes) bound at binding `b` (0: the dispatch's params). The params
/// passed by value ([`ParamKind::Inline`]) are bytes the launch passes itself: 0 stands in.
pub(crate) fn kernel_args<B>(
    op: &str,
    d: &Launch<'_, B>,
    kernel: &Kernel,
    params: (u64, u64),
    buffer: impl Fn(&B) -> (u64, u64),
) -> Result<Vec<u64>> {
    let binding = |b: u32| -> Result<(u64, u64)> {
        if b == 0 {
            return Ok(params);
        }
        d.buffers
            .get(b as usize - 1)
            .map(|buf| buffer(buf))
            .ok_or_else(|| {
                Error::invalid(
                    op.to_string(),
                    format!(
                        "{}: binding {b} has no buffer in the plan",
                        d.kernel.label()
                    ),
                )
            })
    };
    kernel
        .params
        .iter()
        .map(|p| match p.kind {
            ParamKind::Storage { binding: b, .. } => Ok(binding(b)?.0),
            ParamKind::Inline { .. } => Ok(0),
            ParamKind::ArrayLength {
                binding: b,
                offset,
                stride,
                ..
            } => {
                let bytes = binding(b)?.1;
                Ok(
                    (bytes.saturating_sub(u64::from(offset)) / u64::from(stride.max(1))) as u32
                        as u64,
                )
            }
            ParamKind::Uniform { .. } => Err(Error::unsupported(
                op.to_string(),
                format!(
                    "{}: uniform buffers are not used by kiln's plans",
                    d.kernel.label()
                ),
            )),
        })
        .collect()
}

/// A row-major f32 matmul (possibly batched) as one column-major strided-batched GEMM:
/// `C^T = B^T A^T`, the form cuBLAS and rocBLAS take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Gemm {
    /// Rows of the output, columns of the output, the inner dimension.
    pub m: i32,
    pub n: i32,
    pub k: i32,
    /// Whether A (the left input) and B are transposed, and their leading dimensions.
    pub ta: bool,
    pub lda: i32,
    pub tb: bool,
    pub ldb: i32,
    /// Matrices in the batch, and the element strides between them in A, B and C.
    pub batch: i32,
    pub stride_a: i64,
    pub stride_b: i64,
    pub stride_c: i64,
    /// Element offsets of A and B in their buffers.
    pub offset_a: u64,
    pub offset_b: u64,
    /// A second batch axis whose strides do not coalesce with `batch`'s: attention's
    /// `[B, H]` over heads read in place from `[B, T, H, D]`. Such a batch is not one
    /// strided call; cuBLAS takes it as arrays of matrix pointers ([`Gemm::offsets`]).
    pub outer: Option<Outer>,
}

/// The outer of two batch axes of a [`Gemm`]: its length and element strides in A, B and C.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Outer {
    pub count: i32,
    pub stride_a: i64,
    pub stride_b: i64,
    pub stride_c: i64,
}

/// (transposed, leading dimension) of a `rows x cols` row-major view with strides `(sr, sc)`,
/// seen as the column-major transpose BLAS consumes.
fn operand(rows: usize, cols: usize, sr: isize, sc: isize) -> Option<(bool, usize)> {
    let (sr, sc) = (usize::try_from(sr).ok()?, usize::try_from(sc).ok()?);
    if sc == 1 || cols == 1 {
        let ld = if rows == 1 { cols.max(1) } else { sr };
        if ld >= cols.max(1) {
            return Some((false, ld));
        }
    }
    if sr == 1 || rows == 1 {
        let ld = if cols == 1 { rows.max(1) } else { sc };
        if ld >= rows.max(1) {
            return Some((true, ld));
        }
    }
    None
}

impl Gemm {
    /// The GEMM of an f32 matmul of `inputs` into a fresh contiguous `out`, or `None` when the
    /// views do not map to one (the planned kernels run it then): each operand's last two axes
    /// row- or column-contiguous, batch axes that coalesce to at most two strides (see
    /// [`Gemm::outer`]), sizes that fit `i32`.
    pub(crate) fn of(inputs: &[View<'_>], out: &Shape) -> Option<Gemm> {
        let (x, y) = (inputs.first()?, inputs.get(1)?);
        let (xd, yd) = (x.layout.shape().dims(), y.layout.shape().dims());
        if xd.len() < 2 || yd.len() < 2 || x.dtype != kiln_core::DType::F32 {
            return None;
        }
        let (xs, ys) = (x.layout.strides(), y.layout.strides());
        let (m, k, n) = (xd[xd.len() - 2], xd[xd.len() - 1], yd[yd.len() - 1]);
        if m == 0 || n == 0 || k == 0 {
            return None;
        }
        let (ta, lda) = operand(m, k, xs[xs.len() - 2], xs[xs.len() - 1])?;
        let (tb, ldb) = operand(k, n, ys[ys.len() - 2], ys[ys.len() - 1])?;
        // Batch axes: broadcast strides of each operand against the output's batch shape.
        let od = out.dims();
        let nb = od.len() - 2;
        let batch_strides = |d: &[usize], s: &[isize]| -> Option<Vec<usize>> {
            let off = nb + 2 - d.len();
            (0..nb)
                .map(|i| {
                    if i < off || d[i - off] == 1 {
                        Some(0)
                    } else {
                        usize::try_from(s[i - off]).ok()
                    }
                })
                .collect()
        };
        let (xb, yb) = (batch_strides(xd, xs)?, batch_strides(yd, ys)?);
        let ob: Vec<usize> = {
            let mut acc = m * n;
            let mut v = vec![0; nb];
            for i in (0..nb).rev() {
                v[i] = acc;
                acc *= od[i];
            }
            v
        };
        let (dims, strides) = kiln_kernels::plan::coalesce(&od[..nb], vec![xb, yb, ob]);
        if dims.len() > 2 {
            return None;
        }
        // The inner batch axis is the last one; `axis` picks an axis's strides in A, B and C.
        let axis = |a: usize| (strides[0][a], strides[1][a], strides[2][a]);
        let batch = dims.last().copied().unwrap_or(1);
        let (sa, sb, sc) = if batch == 1 {
            (0, 0, m * n)
        } else {
            axis(dims.len() - 1)
        };
        let int = |v: usize| i32::try_from(v).ok();
        let long = |v: usize| i64::try_from(v).ok();
        let outer = match dims.len() {
            2 => {
                let (oa, ob, oc) = axis(0);
                Some(Outer {
                    count: int(dims[0])?,
                    stride_a: long(oa)?,
                    stride_b: long(ob)?,
                    stride_c: long(oc)?,
                })
            }
            _ => None,
        };
        // A batch of row-major A's stacked without gaps against one shared B (a linear layer
        // on [B, T, K]) is one product over all B·T rows: cuBLAS's strided-batched call on
        // 64 blocks of 256 rows picks smaller tiles than one GEMM of 16,384 rows.
        let fold = outer.is_none() && batch > 1 && sb == 0 && !ta && sa == m * lda && sc == m * n;
        let (m, batch, sa) = if fold {
            (m * batch, 1, 0)
        } else {
            (m, batch, sa)
        };
        Some(Gemm {
            m: int(m)?,
            n: int(n)?,
            k: int(k)?,
            ta,
            lda: int(lda)?,
            tb,
            ldb: int(ldb)?,
            batch: int(batch)?,
            stride_a: long(sa)?,
            stride_b: long(sb)?,
            stride_c: long(sc)?,
            offset_a: x.layout.offset() as u64,
            offset_b: y.layout.offset() as u64,
            outer,
        })
    }

    /// Matrices in the whole batch.
    fn matrices(&self) -> u64 {
        self.batch as u64 * self.outer.map_or(1, |o| o.count as u64)
    }

    /// Bytes of the output.
    pub(crate) fn out_bytes(&self) -> u64 {
        4 * self.matrices() * self.m as u64 * self.n as u64
    }

    /// The element offsets of every matrix of the batch in A, B and C, the outer axis slowest
    /// (the order of the output's matrices).
    pub(crate) fn offsets(&self) -> impl Iterator<Item = [u64; 3]> + '_ {
        let outer = self.outer.unwrap_or(Outer {
            count: 1,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
        });
        let at = move |o: i64, i: i64| {
            [
                self.offset_a as i64 + o * outer.stride_a + i * self.stride_a,
                self.offset_b as i64 + o * outer.stride_b + i * self.stride_b,
                o * outer.stride_c + i * self.stride_c,
            ]
            .map(|v| v as u64)
        };
        let batch = i64::from(self.batch);
        (0..i64::from(outer.count)).flat_map(move |o| (0..batch).map(move |i| at(o, i)))
    }
}

#[cfg(test)]
mod tests {
    use super::{Gemm, operand};
    use kiln_core::{DType, Layout, Shape, Storage, View};

    /// The GEMM of `x @ y` for views of the given dims, strides and offsets.
    fn gemm(x: (&[usize], &[isize]), y: (&[usize], &[isize]), out: &[usize]) -> Option<Gemm> {
        let storage = Storage::new(());
        let layout =
            |(d, s): (&[usize], &[isize])| Layout::from_parts(Shape::from(d), s.to_vec(), 0);
        let (lx, ly) = (layout(x), layout(y));
        let view = |layout| View {
            storage: &storage,
            layout,
            dtype: DType::F32,
        };
        Gemm::of(&[view(&lx), view(&ly)], &Shape::from(out))
    }

    #[test]
    fn a_batch_against_a_shared_matrix_is_one_product() {
        // [4, 5, 3] @ [3, 2]: 20 rows in one GEMM
        let g = gemm((&[4, 5, 3], &[15, 3, 1]), (&[3, 2], &[2, 1]), &[4, 5, 2]).unwrap();
        assert_eq!((g.m, g.n, g.k, g.batch), (20, 2, 3, 1));
        // the same through a transposed weight (Linear's x @ w^T)
        let g = gemm((&[4, 5, 3], &[15, 3, 1]), (&[3, 2], &[1, 3]), &[4, 5, 2]).unwrap();
        assert_eq!((g.m, g.batch, g.tb), (20, 1, true));
        // rows with gaps between the blocks, a transposed A, or a B per batch stay batched
        let g = gemm((&[4, 5, 3], &[16, 3, 1]), (&[3, 2], &[2, 1]), &[4, 5, 2]).unwrap();
        assert_eq!((g.m, g.batch), (5, 4));
        let g = gemm((&[4, 5, 3], &[15, 1, 5]), (&[3, 2], &[2, 1]), &[4, 5, 2]).unwrap();
        assert_eq!((g.m, g.batch, g.ta), (5, 4, true));
        let g = gemm(
            (&[4, 5, 3], &[15, 3, 1]),
            (&[4, 3, 2], &[6, 2, 1]),
            &[4, 5, 2],
        )
        .unwrap();
        assert_eq!((g.m, g.batch), (5, 4));
    }

    #[test]
    fn batch_axes_that_do_not_coalesce_give_every_matrix_its_offsets() {
        // Heads read in place: q [B=2, T=4, H=3, D=5] seen as [B, H, T, D], times k's transpose.
        let (q, kt) = (
            (&[2, 3, 4, 5][..], &[60, 5, 15, 1][..]),
            (&[2, 3, 5, 4][..], &[60, 5, 1, 15][..]),
        );
        let g = gemm(q, kt, &[2, 3, 4, 4]).unwrap();
        assert_eq!(
            (g.m, g.n, g.k, g.batch, g.ta, g.tb),
            (4, 4, 5, 3, false, true)
        );
        assert_eq!((g.lda, g.ldb), (15, 15));
        let outer = g.outer.unwrap();
        assert_eq!((outer.count, outer.stride_a, outer.stride_c), (2, 60, 48));
        let want: Vec<[u64; 3]> = (0..2)
            .flat_map(|b| (0..3).map(move |h| [60 * b + 5 * h, 60 * b + 5 * h, 48 * b + 16 * h]))
            .collect();
        assert_eq!(g.offsets().collect::<Vec<_>>(), want);
        assert_eq!(g.out_bytes(), 4 * 2 * 3 * 16);
        // one batch axis has no outer, and three that do not coalesce are not a GEMM
        assert_eq!(
            gemm((&[4, 5, 3], &[15, 3, 1]), (&[3, 2], &[2, 1]), &[4, 5, 2])
                .unwrap()
                .outer,
            None
        );
        let x = (&[2, 2, 2, 3, 3][..], &[100, 40, 10, 3, 1][..]);
        assert!(gemm(x, (&[3, 3][..], &[3, 1][..]), &[2, 2, 2, 3, 3]).is_none());
    }

    #[test]
    fn operands_map_to_blas_layouts() {
        assert_eq!(operand(3, 4, 4, 1), Some((false, 4))); // row-major
        assert_eq!(operand(3, 4, 1, 3), Some((true, 3))); // column-major (a transposed view)
        assert_eq!(operand(3, 4, 8, 1), Some((false, 8))); // a slice of wider rows
        assert_eq!(operand(1, 4, 0, 1), Some((false, 4))); // a broadcast single row
        assert_eq!(operand(3, 4, 2, 2), None); // neither axis contiguous
        assert_eq!(operand(3, 4, -4, 1), None);
    }
}
