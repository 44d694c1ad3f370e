//! Typed kernel headers: binding 0 of every kernel is a WGSL struct whose members are, in
//! order, the fields of one of the Rust structs here (every field a `u32` or another header,
//! nested in WGSL as in Rust), optionally followed by a runtime-sized `tail: array<u32>` for
//! the variable-length part (shapes, strides, tables). The test `typed_headers_match_rust`
//! (`kernels/tests/naga_targets.rs`) reads every planned kernel variant with naga and checks that the WGSL struct's
//! member names and byte offsets are exactly these fields', so the two cannot drift.
//!
//! ```
//! use kiln_kernels::header::{Header, Gemm};
//! let g = Gemm { m: 2, n: 3, k: 4, tiles_m: 1, batches: 1, k_chunk: 4, splits: 1, epilogue: 0 };
//! assert_eq!(g.to_words(), [2, 3, 4, 1, 1, 4, 1, 0]);
//! assert_eq!(Gemm::field_names()[6], "splits");
//! ```

use alloc::string::String;
use alloc::vec::Vec;

/// A kernel's parameter block, or a part of one: fixed u32 words in declaration order.
pub trait Header {
    /// Appends this header's words, fields in order (nested headers flattened).
    fn write(&self, out: &mut Vec<u32>);
    /// Appends the dotted path of every word (`"conv.kh"`), in the order [`Header::write`] uses.
    fn fields(prefix: &str, out: &mut Vec<String>);

    /// The words, for a kernel whose header has no tail.
    fn to_words(&self) -> Vec<u32> {
        let mut v = Vec::new();
        self.write(&mut v);
        v
    }

    /// The header's words followed by the `tail: array<u32>` words.
    fn with_tail(&self, tail: impl IntoIterator<Item = u32>) -> Vec<u32> {
        let mut v = self.to_words();
        v.extend(tail);
        v
    }

    /// Every word's dotted path.
    fn field_names() -> Vec<String> {
        let mut v = Vec::new();
        Self::fields("", &mut v);
        v
    }
}

impl Header for u32 {
    fn write(&self, out: &mut Vec<u32>) {
        out.push(*self);
    }
    fn fields(prefix: &str, out: &mut Vec<String>) {
        out.push(prefix.into());
    }
}

/// Declares header structs (all fields public) and [`wgsl_struct_fields`], which finds a
/// header's field paths by the struct's name, as the WGSL struct of the same name spells it.
macro_rules! headers {
    ($($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $field:ident: $ty:ty),* $(,)? })*) => {
        $(
            $(#[$m])*
            #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
            #[allow(missing_docs)] // the struct's doc describes its fields
            pub struct $name { $($(#[$fm])* pub $field: $ty),* }

            impl Header for $name {
                fn write(&self, out: &mut Vec<u32>) {
                    $(self.$field.write(out);)*
                }
                fn fields(prefix: &str, out: &mut Vec<String>) {
                    $(
                        let path = if prefix.is_empty() {
                            String::from(stringify!($field))
                        } else {
                            alloc::format!("{prefix}.{}", stringify!($field))
                        };
                        <$ty as Header>::fields(&path, out);
                    )*
                }
            }
        )*

        /// The field paths of the header struct called `name` (a WGSL struct of binding 0 has
        /// the same name), or `None` for a name that is no header.
        pub fn wgsl_struct_fields(name: &str) -> Option<Vec<String>> {
            match name {
                $(stringify!($name) => Some($name::field_names()),)*
                _ => None,
            }
        }
    };
}

headers! {
    /// The shape of a gemm.wgsl launch, shared by every mode: C is `batches` of M x N, K long,
    /// computed in `tiles_m` row tiles and `splits` chunks of K of `k_chunk` each. `epilogue`
    /// is where a fused epilogue's words start in the tail (0 without one: see
    /// `fusion::epilogue`).
    Gemm {
        m: u32, n: u32, k: u32, tiles_m: u32, batches: u32, k_chunk: u32, splits: u32,
        epilogue: u32,
    }

    /// gemm.wgsl in mode `matmul`: A `[.., M, K]` and B `[.., K, N]` as strided views. The tail
    /// is the coalesced batch shape (`batch_rank` words), then A's batch view and B's batch view
    /// (an offset, always 0, and `batch_rank` strides each).
    MatmulParams {
        gemm: Gemm,
        batch_rank: u32,
        a_offset: u32, a_row_stride: u32, a_col_stride: u32,
        b_offset: u32, b_row_stride: u32, b_col_stride: u32,
    }

    /// Conv2d geometry in conv2d's own terms: x is (n, ci, h, w), the weight (co, ci / groups,
    /// kh, kw), y (n, co, oh, ow); stride (sh, sw), padding (ph, pw), dilation (dh, dw).
    ConvGeometry {
        n: u32, ci: u32, h: u32, w: u32, co: u32, oh: u32, ow: u32, kh: u32, kw: u32,
        sh: u32, sw: u32, ph: u32, pw: u32, dh: u32, dw: u32, groups: u32,
    }

    /// gemm.wgsl in the convolution modes (`conv`, `conv_t`, `conv_wgrad`). The tail is the
    /// planner's table of K steps, 4 words per entry (see `plan.rs`, `ConvGeometry::k_steps`).
    ConvParams { gemm: Gemm, conv: ConvGeometry, a_offset: u32, b_offset: u32 }

    /// A 2-D pooling window over NCHW input (n, c, h, w) and output (oh, ow); `include_pad` is
    /// 1 when padding counts in an average's divisor.
    PoolGeometry {
        n: u32, c: u32, h: u32, w: u32, oh: u32, ow: u32, kh: u32, kw: u32,
        sh: u32, sw: u32, ph: u32, pw: u32, dh: u32, dw: u32, include_pad: u32,
    }

    /// pool.wgsl: `numel` invocations over `pool`; x and dy start at their offsets. No tail.
    PoolParams { numel: u32, pool: PoolGeometry, x_offset: u32, dy_offset: u32 }

    /// map.wgsl (unary, cast, copy): `numel` elements of a `rank`-D shape; `c0`, `c1` are a unary
    /// op's constants as bits of its input type (0 for cast and copy). The tail is the shape
    /// (`rank` words), then the out view and the x view (an offset and `rank` strides each).
    MapParams { numel: u32, rank: u32, c0: u32, c1: u32 }

    /// binary.wgsl (binary ops, comparisons, where): as [`MapParams`], with the views of a, b
    /// (and, for where, cond before them) after out's in the tail. `period` and `inner` describe
    /// a BCAST launch's repeating input (element e reads its element (e / inner) % period);
    /// 0 otherwise.
    BinaryParams { numel: u32, rank: u32, period: u32, inner: u32 }

    /// reduce.wgsl: `n_out` outputs, each reducing `len` elements; `correction` is var's. The
    /// tail is the kept shape (`rank_keep` words), the reduced shape (`rank_red`), the kept view
    /// (x's offset and `rank_keep` strides) and the reduced view (0 and `rank_red` strides).
    ReduceParams { n_out: u32, rank_keep: u32, rank_red: u32, len: u32, correction: u32 }

    /// columns.wgsl: a `[rows, cols]` view reduced down its columns, `chunk_rows` rows per
    /// workgroup; `cols`, `row_stride` and `offset` in units of the kernel's vector; `scale`
    /// the f32 bits of a mean's `1 / rows` (1.0 otherwise).
    ColumnsParams { cols: u32, rows: u32, row_stride: u32, offset: u32, chunk_rows: u32, scale: u32 }

    /// rows.wgsl: `n_rows` rows of `len` elements; `reverse` (0/1) is cumsum's. The tail is the
    /// kept shape (`rank_keep` words), then x's and out's views, each an offset, `rank_keep`
    /// strides and the stride along the op's axis.
    /// `causal` is softmax's `Tq` for causal rows (row `r` sees its first
    /// `len - Tq + r % Tq + 1` entries), else 0; `eps` the f32 bits of normalize's epsilon.
    /// normalize_backward's gradient view follows the output's in the tail.
    RowsParams { n_rows: u32, rank_keep: u32, len: u32, reverse: u32, causal: u32, eps: u32 }

    /// index.wgsl in mode `gather` (gather, index_select): `numel` outputs; `axis_len` is x's
    /// length along `axis` (indices outside it read 0). The tail is the output shape (`rank`
    /// words), then x's view and the index view (an offset and `rank` strides each).
    GatherParams { numel: u32, rank: u32, axis: u32, axis_len: u32 }

    /// index.wgsl in mode `scatter_add`: `numel` outputs, each summing `chunk` positions of the
    /// index axis per invocation (chunk c of output o is invocation c * numel + o; chunk 0 adds
    /// x). The tail is the output shape and the index shape (`rank` words each), then the views
    /// of x, index and src (an offset and `rank` strides each).
    ScatterAddParams { numel: u32, rank: u32, axis: u32, chunk: u32 }

    /// index.wgsl in mode `one_hot`: `numel` outputs of `classes` each per index, the indices
    /// contiguous from `index_offset`. No tail.
    OneHotParams { numel: u32, classes: u32, index_offset: u32 }

    /// fill.wgsl in mode `full`: `numel` copies of `value` (bits of the element type). No tail.
    FullParams { numel: u32, value: u32 }

    /// fill.wgsl in mode `arange`: element i is `start + i * step` (bits of the element type).
    /// No tail.
    ArangeParams { numel: u32, start: u32, step: u32 }

    /// fill.wgsl in mode `eye`: `numel` elements of rows of `columns`. No tail.
    EyeParams { numel: u32, columns: u32 }

    /// random.wgsl: `numel` f32s from the 64-bit seed (`seed_lo`, `seed_hi`); `a` and `b` are
    /// f32 bits of (low, high) for uniform and (mean, std) for normal. No tail.
    RandomParams { numel: u32, seed_lo: u32, seed_hi: u32, a: u32, b: u32 }

    /// adam.wgsl: `numel` elements of param, grad and the moments, each contiguous from its
    /// offset, and the gradient's scale at `s_offset` (with SCALED); then f32 bits of the
    /// constants (`step_size` is lr / (1 - b1^t), `inv_sqrt_bc2` 1 / sqrt(1 - b2^t), `shrink`
    /// 1 - lr * weight_decay) and `decoupled` (0/1: AdamW). No tail.
    AdamStepParams {
        numel: u32,
        w_offset: u32, g_offset: u32, m_offset: u32, v_offset: u32, s_offset: u32,
        beta1: u32, beta2: u32, eps: u32, weight_decay: u32,
        step_size: u32, inv_sqrt_bc2: u32, shrink: u32, decoupled: u32,
    }
}
