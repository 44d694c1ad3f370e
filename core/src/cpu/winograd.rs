//! Winograd F(2x2, 3x3) convolution of f32 for 3x3 kernels at stride 1 without dilation: each
//! 2x2 output tile costs 16 multiply-adds per input channel instead of 36. The input's 4x4
//! tiles and the filters are transformed into 16 planes, the planes are multiplied by 16 GEMMs
//! (`[o, c] x [c, tiles]`) and each output tile is transformed back from its 16 products. The
//! planes run along the tiles, so both transforms work on four neighbouring tiles per vector.

use super::conv::gemm;
use super::lanes::F4;
use alloc::vec;
use alloc::vec::Vec;

/// Values per tile in the transformed domain (4x4).
const P: usize = 16;

/// Four values from the start of `s`.
#[inline(always)]
fn load(s: &[f32]) -> F4 {
    let s = &s[..4];
    // SAFETY: `s` holds the four values read.
    unsafe { F4::load(s.as_ptr()) }
}

/// Writes `v` to the start of `d`.
#[inline(always)]
fn store(v: F4, d: &mut [f32]) {
    let d = &mut d[..4];
    // SAFETY: `d` holds the four values written.
    unsafe { v.store(d.as_mut_ptr()) }
}

/// The filters of one convolution transformed as `[groups][16][og][cg]` (`U = G g G^T`).
pub(super) struct Filters {
    u: Vec<f32>,
    og: usize,
    cg: usize,
}

impl Filters {
    /// Transforms OIHW 3x3 weights `w` (`[groups * og, cg, 3, 3]`).
    pub(super) fn new(w: &[f32], groups: usize, og: usize, cg: usize) -> Self {
        let mut u = vec![0.0; groups * P * og * cg];
        // G t for three values t: [t0, (t0 + t1 + t2) / 2, (t0 - t1 + t2) / 2, t2].
        let g4 = |t: [f32; 3]| {
            [
                t[0],
                (t[0] + t[1] + t[2]) * 0.5,
                (t[0] - t[1] + t[2]) * 0.5,
                t[2],
            ]
        };
        for (oc, k) in w.chunks_exact(9).enumerate().take(groups * og * cg) {
            let (gi, o, c) = (oc / (og * cg), oc / cg % og, oc % cg);
            // G k along the columns (each column of k), then G along each resulting row.
            let cols: [[f32; 4]; 3] = core::array::from_fn(|j| g4([k[j], k[3 + j], k[6 + j]]));
            for i in 0..4 {
                for (j, v) in g4([cols[0][i], cols[1][i], cols[2][i]])
                    .into_iter()
                    .enumerate()
                {
                    u[((gi * P + 4 * i + j) * og + o) * cg + c] = v;
                }
            }
        }
        Filters { u, og, cg }
    }
}

/// One image's geometry: input `[h, w]` with `pad` zeros around, output `[oh, ow]`, and its
/// `th` rows of `tw` tiles (a multiple of 4; the tiles past the output are computed, not stored).
#[derive(Clone, Copy)]
pub(super) struct Tiles {
    pad: [usize; 2],
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    th: usize,
    tw: usize,
}

impl Tiles {
    /// The tiling of an `h x w` input padded by `pad` (the output is `(h + 2 pad - 2)` wide).
    pub(super) fn new(h: usize, w: usize, pad: [usize; 2]) -> Self {
        let (oh, ow) = (h + 2 * pad[0] - 2, w + 2 * pad[1] - 2);
        Tiles {
            pad,
            h,
            w,
            oh,
            ow,
            th: oh.div_ceil(2),
            tw: ow.div_ceil(2).next_multiple_of(4),
        }
    }
    fn count(&self) -> usize {
        self.th * self.tw
    }
    /// The padded input plane's width: every tile's 4 columns inside it.
    fn pw(&self) -> usize {
        2 * self.tw + 2
    }
    fn plane_len(&self) -> usize {
        (2 * self.th + 2) * self.pw()
    }
    /// Elements of scratch one image needs for `og` outputs and `cg` inputs per group.
    pub(super) fn scratch_len(&self, og: usize, cg: usize) -> usize {
        self.plane_len() + P * (cg + og) * self.count() + 4 * self.tw
    }
}

/// `dst` (`[groups * og, oh, ow]`) = the convolution of one image `img` (`[groups * cg, h, w]`)
/// with `f`; `scratch` has [`Tiles::scratch_len`] elements. `threaded`: the GEMMs may use the
/// thread pool.
pub(super) fn conv_image(
    f: &Filters,
    t: &Tiles,
    img: &[f32],
    dst: &mut [f32],
    scratch: &mut [f32],
    threaded: bool,
) {
    let (og, cg, n, pw) = (f.og, f.cg, t.count(), t.pw());
    let (plane, rest) = scratch.split_at_mut(t.plane_len());
    let (v, rest) = rest.split_at_mut(P * cg * n);
    let (m, rows) = rest.split_at_mut(P * og * n);
    // The zero border stays: every channel writes the same interior.
    plane.fill(0.0);
    let groups = f.u.len() / (P * og * cg).max(1);
    for gi in 0..groups {
        for c in 0..cg {
            let src = &img[(gi * cg + c) * t.h * t.w..][..t.h * t.w];
            for (y, row) in src.chunks_exact(t.w).enumerate() {
                let d = (y + t.pad[0]) * pw + t.pad[1];
                plane[d..d + t.w].copy_from_slice(row);
            }
            input_transform(t, plane, &mut v[c * n..], cg * n);
        }
        for xi in 0..P {
            gemm(
                og,
                cg,
                n,
                &f.u[(gi * P + xi) * og * cg..],
                [cg as isize, 1],
                &v[xi * cg * n..],
                [n as isize, 1],
                false,
                &mut m[xi * og * n..],
                threaded,
            );
        }
        let out = &mut dst[gi * og * t.oh * t.ow..][..og * t.oh * t.ow];
        for (o, plane_out) in out.chunks_exact_mut(t.oh * t.ow).enumerate() {
            output_transform(t, &m[o * n..], og * n, plane_out, rows);
        }
    }
}

/// Writes the 16 transformed values (`V = B^T d B`) of every tile of the padded input `plane`
/// to `v[xi * stride + tile]`, four tiles per vector.
fn input_transform(t: &Tiles, plane: &[f32], v: &mut [f32], stride: usize) {
    let pw = t.pw();
    for ty in 0..t.th {
        let rows = &plane[2 * ty * pw..][..4 * pw];
        for q in (0..t.tw).step_by(4) {
            // Per row r of the four tiles' 4x4 inputs: d B, from the tiles' columns 0..4.
            let db: [[F4; 4]; 4] = core::array::from_fn(|r| {
                let s = &rows[r * pw + 2 * q..][..10];
                let [c0, c1] = F4::deinterleave(load(s), load(&s[4..]));
                let [c2, c3] = F4::deinterleave(load(&s[2..]), load(&s[6..]));
                [c0.sub(c2), c1.add(c2), c2.sub(c1), c1.sub(c3)]
            });
            let at = ty * t.tw + q;
            for j in 0..4 {
                let (r0, r1, r2, r3) = (db[0][j], db[1][j], db[2][j], db[3][j]);
                let col = [r0.sub(r2), r1.add(r2), r2.sub(r1), r1.sub(r3)];
                for (i, x) in col.into_iter().enumerate() {
                    store(x, &mut v[(4 * i + j) * stride + at..]);
                }
            }
        }
    }
}

/// Writes one output plane `out` (`[oh, ow]`) from its tiles' 16 products
/// (`m[xi * stride + tile]`): `Y = A^T M A`, two output rows per tile row, built in `rows`.
fn output_transform(t: &Tiles, m: &[f32], stride: usize, out: &mut [f32], rows: &mut [f32]) {
    let tw = t.tw;
    let (r0, r1) = rows[..4 * tw].split_at_mut(2 * tw);
    for ty in 0..t.th {
        for q in (0..tw).step_by(4) {
            let at = ty * tw + q;
            let mv: [F4; P] = core::array::from_fn(|xi| load(&m[xi * stride + at..]));
            // A^T M: rows 0 + 1 + 2 and 1 - 2 - 3; then the same along the columns.
            let s0: [F4; 4] = core::array::from_fn(|j| mv[j].add(mv[4 + j]).add(mv[8 + j]));
            let s1: [F4; 4] = core::array::from_fn(|j| mv[4 + j].sub(mv[8 + j]).sub(mv[12 + j]));
            for (s, r) in [(s0, &mut *r0), (s1, &mut *r1)] {
                let y0 = s[0].add(s[1]).add(s[2]);
                let y1 = s[1].sub(s[2]).sub(s[3]);
                let [lo, hi] = F4::interleave(y0, y1);
                store(lo, &mut r[2 * q..]);
                store(hi, &mut r[2 * q + 4..]);
            }
        }
        let y = 2 * ty;
        out[y * t.ow..][..t.ow].copy_from_slice(&r0[..t.ow]);
        if y + 1 < t.oh {
            out[(y + 1) * t.ow..][..t.ow].copy_from_slice(&r1[..t.ow]);
        }
    }
}
