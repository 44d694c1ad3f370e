//! kiln's own f32 GEMM, for the builds without the `gemm` crate (wasm32 in a page, `no_std`):
//! BLIS-style blocking with packed panels of `A` (`MR` rows) and `B` (`NR` columns) and a
//! register-blocked `MR x NR` micro-kernel over 4-lane vectors, which are SIMD128 `v128` on
//! wasm32 and plain arrays elsewhere (so the blocking and packing are tested natively).
//! Products with a few rows against a transposed `B` (a linear layer's batch of one) skip the
//! packing: they are dot products along contiguous memory, bound by reading `B` once.

use super::lanes::F4;
use alloc::vec::Vec;

/// Rows of the micro-kernel's tile. Each step loads `MR` values of `A` as two vectors and
/// broadcasts their lanes by shuffles, cheaper in V8 than scalar loads and splats (in Node on
/// the conv2 GEMM of the MNIST CNN, 64x288x576: 8x8 this way 24.8 GFLOP/s, 6x8 with splats 19.9).
const MR: usize = 8;
/// Columns of the micro-kernel's tile: two 4-lane vectors. Equal to `MR`, so that one [`pack`]
/// serves both operands.
const NR: usize = MR;
/// Reduction depth of one packed block: a `KC x NR` panel of `B` (9 KiB) stays in L1 while the
/// kernel runs down the packed `A` block.
const KC: usize = 288;
/// Rows of `A` packed at once (`MC x KC`, 72 KiB: L2).
const MC: usize = 64;
/// Columns of `B` packed at once (`KC x NC`, 1.1 MiB at most).
const NC: usize = 1024;
/// Rows up to which a product against a column-contiguous `B` is computed as dot products.
const DOT_ROWS: usize = 4;

/// `c = alpha * a b + beta * c` for `a: m x k`, `b: k x n`, `c: m x n` with arbitrary (row,
/// column) strides; `c` is not read when `beta` is 0. The signature of `matrixmultiply::sgemm`.
///
/// # Safety
/// Every element addressed by the dimensions and strides must lie inside its buffer, and `c`
/// must not alias `a` or `b`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn sgemm(
    m: usize,
    k: usize,
    n: usize,
    alpha: f32,
    a: *const f32,
    rsa: isize,
    csa: isize,
    b: *const f32,
    rsb: isize,
    csb: isize,
    beta: f32,
    c: *mut f32,
    rsc: isize,
    csc: isize,
) {
    if m == 0 || n == 0 {
        return;
    }
    let c = Out {
        p: c,
        rs: rsc,
        cs: csc,
    };
    if k == 0 {
        // SAFETY (here and below): every address is inside the buffers per the caller.
        unsafe { c.scale(m, n, beta) };
        return;
    }
    if m <= DOT_ROWS && csa == 1 && rsb == 1 {
        unsafe { dots(m, k, n, alpha, a, rsa, b, csb, beta, c) };
        return;
    }
    // Packed blocks, written before they are read (never zeroed: every slot is written).
    let mut pb = Vec::<f32>::with_capacity(KC.min(k) * NC.min(n).next_multiple_of(NR));
    let mut pa = Vec::<f32>::with_capacity(KC.min(k) * MC.min(m).next_multiple_of(MR));
    let (pa, pb) = (pa.as_mut_ptr(), pb.as_mut_ptr());
    for j0 in (0..n).step_by(NC) {
        let nc = NC.min(n - j0);
        for p0 in (0..k).step_by(KC) {
            let kc = KC.min(k - p0);
            // Later reduction blocks add to what the first wrote.
            let beta = if p0 == 0 { beta } else { 1.0 };
            for jp in (0..nc).step_by(NR) {
                // SAFETY: rows p0..p0+kc and columns j0+jp.. of `b`; the panel's slots lie
                // inside `pb`'s capacity (kc * nc rounded up to NR).
                unsafe {
                    pack(
                        kc,
                        NR.min(nc - jp),
                        b.offset(p0 as isize * rsb + (j0 + jp) as isize * csb),
                        csb,
                        rsb,
                        pb.add(jp * kc),
                    )
                };
            }
            for i0 in (0..m).step_by(MC) {
                let mc = MC.min(m - i0);
                for ip in (0..mc).step_by(MR) {
                    // SAFETY: as for `b` above.
                    unsafe {
                        pack(
                            kc,
                            MR.min(mc - ip),
                            a.offset((i0 + ip) as isize * rsa + p0 as isize * csa),
                            rsa,
                            csa,
                            pa.add(ip * kc),
                        )
                    };
                }
                for jp in (0..nc).step_by(NR) {
                    for ip in (0..mc).step_by(MR) {
                        let tile = c.at(i0 + ip, j0 + jp);
                        let (mr, nr) = (MR.min(mc - ip), NR.min(nc - jp));
                        // SAFETY: both panels were packed above with kc steps; the tile's
                        // mr x nr elements lie inside `c`.
                        unsafe {
                            kernel(
                                kc,
                                pa.add(ip * kc),
                                pb.add(jp * kc),
                                NR,
                                alpha,
                                beta,
                                tile,
                                mr,
                                nr,
                            )
                        };
                    }
                }
            }
        }
    }
}

/// Rows of `A` per panel of [`pack_rows`]: the height of [`product_tile`]'s tile.
pub(super) const PANEL_ROWS: usize = MR;
/// Columns of [`product_tile`]'s tile.
pub(super) const TILE_COLS: usize = NR;

/// Packs the row-major `m x k` matrix `a` (row stride `lda`) into `dst` as [`product_tile`]
/// reads it: panels of [`PANEL_ROWS`] rows, each `k` groups of one value per row (rows past
/// `m` zero). `dst` holds `m.next_multiple_of(PANEL_ROWS) * k` values. For operands used in
/// many products (Winograd's transformed filters), which then skip packing.
pub(super) fn pack_rows(m: usize, k: usize, a: &[f32], lda: usize, dst: &mut [f32]) {
    let dst = &mut dst[..m.next_multiple_of(MR) * k];
    assert!(m == 0 || k == 0 || (m - 1) * lda + k <= a.len());
    for (i, panel) in dst.chunks_exact_mut(MR * k).enumerate() {
        // SAFETY: rows i*MR.. (at most MR, fewer at the end) of `k` values each lie inside
        // `a` per the assert; the panel holds k groups of MR.
        unsafe {
            pack(
                k,
                MR.min(m - i * MR),
                a.as_ptr().add(i * MR * lda),
                lda as isize,
                1,
                panel.as_mut_ptr(),
            )
        };
    }
}

/// `c = pa b` for one tile: `pa` a panel of [`pack_rows`] (`kc` steps), `b` the first of
/// [`TILE_COLS`] columns of a row-major `kc x n` matrix with row stride `ldb`, read in place,
/// and `c` the first of `mr <= PANEL_ROWS` rows of [`TILE_COLS`] values, row stride `ldc`.
///
/// # Safety
/// `pa` must hold `kc * PANEL_ROWS` values, `b` reach `kc` rows of `TILE_COLS` values, and
/// `c` `mr` rows of `TILE_COLS` values.
#[inline(always)]
pub(super) unsafe fn product_tile(
    kc: usize,
    pa: *const f32,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    mr: usize,
) {
    let c = Out {
        p: c,
        rs: ldc as isize,
        cs: 1,
    };
    // SAFETY: forwarded.
    unsafe { kernel(kc, pa, b, ldb, 1.0, 0.0, c, mr, NR) }
}

/// A strided output matrix.
#[derive(Clone, Copy)]
struct Out {
    p: *mut f32,
    rs: isize,
    cs: isize,
}

impl Out {
    fn at(self, i: usize, j: usize) -> Out {
        Out {
            p: self
                .p
                .wrapping_offset(i as isize * self.rs + j as isize * self.cs),
            ..self
        }
    }
    /// Writes `alpha * v + beta * c` at `(i, j)` (`c` unread when `beta` is 0).
    ///
    /// # Safety
    /// `(i, j)` must be inside the matrix.
    #[inline(always)]
    unsafe fn set(self, i: usize, j: usize, v: f32, alpha: f32, beta: f32) {
        // SAFETY: forwarded.
        unsafe {
            let p = self.at(i, j).p;
            *p = if beta == 0.0 {
                alpha * v
            } else {
                alpha * v + beta * *p
            };
        }
    }
    /// `c = beta * c` over `m x n`.
    ///
    /// # Safety
    /// As [`Out::set`] for every element.
    unsafe fn scale(self, m: usize, n: usize, beta: f32) {
        for i in 0..m {
            for j in 0..n {
                // SAFETY: forwarded.
                unsafe { self.set(i, j, 0.0, 0.0, beta) };
            }
        }
    }
}

/// Packs `w <= W` lines of `kc` elements (line `l`, step `p` at `src[l * ls + p * ps]`) as `kc`
/// groups of `W`, zeros past `w`: `A`'s panels are its rows, `B`'s its columns (`MR == NR`).
///
/// # Safety
/// The `w x kc` elements must lie inside `src`; `dst` must be valid for `kc * W` writes.
#[inline(always)]
unsafe fn pack(kc: usize, w: usize, src: *const f32, ls: isize, ps: isize, dst: *mut f32) {
    const W: usize = MR;
    let mut p0 = 0;
    if ps == 1 && ls != 1 && w == W {
        // Lines along memory (A row-major, B transposed): 4x4 blocks transposed in registers.
        while p0 + 4 <= kc {
            for h in 0..W / 4 {
                // SAFETY: steps p0..p0+4 of lines 4h..4h+4 < w are inside `src`; groups
                // p0..p0+4 are inside `dst`.
                unsafe {
                    let line =
                        |l: usize| F4::load(src.offset((4 * h + l) as isize * ls + p0 as isize));
                    let groups = F4::transpose([line(0), line(1), line(2), line(3)]);
                    for (i, g) in groups.into_iter().enumerate() {
                        g.store(dst.add((p0 + i) * W + 4 * h));
                    }
                }
            }
            p0 += 4;
        }
    }
    for p in p0..kc {
        // SAFETY: per the contract; lines past `w` are not read.
        unsafe {
            let (s, d) = (src.offset(p as isize * ps), dst.add(p * W));
            if w == W && ls == 1 {
                F4::load(s).store(d);
                F4::load(s.add(4)).store(d.add(4));
            } else {
                for l in 0..W {
                    let v = if l < w {
                        *s.offset(l as isize * ls)
                    } else {
                        0.0
                    };
                    d.add(l).write(v);
                }
            }
        }
    }
}

/// One `MR x NR` tile: `c = alpha * pa pb + beta * c` over `kc` steps, of which the `mr x nr`
/// top-left part is stored. `pa` is a packed panel; step `p` of `pb` is at `pb + p * ldb`
/// (`NR` for a packed panel, a row stride for a row-major `B` read in place).
///
/// # Safety
/// `pa` must hold `kc` packed groups and `pb` `kc` steps of `NR` values; the `mr x nr` elements
/// at `c` must be inside it.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn kernel(
    kc: usize,
    pa: *const f32,
    pb: *const f32,
    ldb: usize,
    alpha: f32,
    beta: f32,
    c: Out,
    mr: usize,
    nr: usize,
) {
    let mut acc = [[F4::splat(0.0); 2]; MR];
    for p in 0..kc {
        // SAFETY: step p of both panels is inside them.
        unsafe {
            let (b0, b1) = (F4::load(pb.add(p * ldb)), F4::load(pb.add(p * ldb + 4)));
            let a = [F4::load(pa.add(p * MR)), F4::load(pa.add(p * MR + 4))];
            for (i, row) in acc.iter_mut().enumerate() {
                let ai = a[i / 4].lane(i % 4);
                row[0] = row[0].mul_add(ai, b0);
                row[1] = row[1].mul_add(ai, b1);
            }
        }
    }
    let alpha4 = F4::splat(alpha);
    if mr == MR && nr == NR && c.cs == 1 {
        let beta4 = F4::splat(beta);
        for (i, row) in acc.iter().enumerate() {
            let p = c.at(i, 0).p;
            for (h, v) in row.iter().enumerate() {
                // SAFETY: the full tile is inside `c`, its rows contiguous.
                unsafe {
                    let q = p.add(4 * h);
                    let r = v.mul(alpha4);
                    if beta == 0.0 {
                        r
                    } else {
                        r.mul_add(beta4, F4::load(q))
                    }
                    .store(q);
                }
            }
        }
        return;
    }
    for (i, row) in acc.iter().enumerate().take(mr) {
        let v = [row[0].to_array(), row[1].to_array()];
        for j in 0..nr {
            // SAFETY: (i, j) is inside the stored part.
            unsafe { c.set(i, j, v[j / 4][j % 4], alpha, beta) };
        }
    }
}

/// `c = alpha * a b + beta * c` as `m * n` dot products, for rows of `a` and columns of `b`
/// that are both contiguous: four columns at a time, so that each load of `a` serves four of
/// them (a linear layer's batch of one, 9216 x 128: loads were half the kernel's instructions).
///
/// # Safety
/// As [`sgemm`], with `a`'s column stride and `b`'s row stride 1.
#[allow(clippy::too_many_arguments)]
unsafe fn dots(
    m: usize,
    k: usize,
    n: usize,
    alpha: f32,
    a: *const f32,
    rsa: isize,
    b: *const f32,
    csb: isize,
    beta: f32,
    c: Out,
) {
    let cols = |j: usize, jn: usize| {
        (0..m).for_each(|i| {
            let ai = a.wrapping_offset(i as isize * rsa);
            let bj = b.wrapping_offset(j as isize * csb);
            // SAFETY: forwarded; (i, j..j + jn) is inside `c`.
            let t = unsafe {
                if jn == 4 {
                    dot_cols::<4, 2>(k, ai, bj, csb)
                } else {
                    dot_cols::<1, 4>(k, ai, bj, csb)
                }
            };
            for (jj, t) in t.into_iter().take(jn).enumerate() {
                // SAFETY: (i, j + jj) is inside `c`.
                unsafe { c.set(i, j + jj, t, alpha, beta) };
            }
        })
    };
    let n4 = n - n % 4;
    (0..n4).step_by(4).for_each(|j| cols(j, 4));
    (n4..n).for_each(|j| cols(j, 1));
}

/// The dot products of the row `a` with the `J` columns `b`, `b + csb`, ... (`k` elements
/// each), with `V` independent vector sums per column to hide the latency of the adds.
///
/// # Safety
/// The `k` elements of `a` and of each column must lie inside their buffers.
#[inline(always)]
unsafe fn dot_cols<const J: usize, const V: usize>(
    k: usize,
    a: *const f32,
    b: *const f32,
    csb: isize,
) -> [f32; 4] {
    let step = 4 * V;
    let kv = k - k % step;
    let col = |j: usize| b.wrapping_offset(j as isize * csb);
    let mut s = [[F4::splat(0.0); V]; J];
    for p in (0..kv).step_by(step) {
        // SAFETY: p + step <= k elements of the row and of each column.
        unsafe {
            let av: [F4; V] = core::array::from_fn(|h| F4::load(a.add(p + 4 * h)));
            for (j, s) in s.iter_mut().enumerate() {
                for (h, s) in s.iter_mut().enumerate() {
                    *s = s.mul_add(av[h], F4::load(col(j).add(p + 4 * h)));
                }
            }
        }
    }
    let mut out = [0.0; 4];
    for (j, s) in s.iter().enumerate() {
        let mut t = 0.0;
        for v in s {
            t += v.to_array().iter().sum::<f32>();
        }
        for p in kv..k {
            // SAFETY: p < k.
            t += unsafe { *a.add(p) * *col(j).add(p) };
        }
        out[j] = t;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SplitMix64;
    use alloc::vec;

    fn random(n: usize, seed: u64) -> Vec<f32> {
        let mut r = SplitMix64::new(seed);
        (0..n).map(|_| r.next_f32() * 2.0 - 1.0).collect()
    }

    /// The f64 sum of the `k` products `x * y` that `term(p)` gives, and how far an f32 sum of
    /// them may be from it.
    fn reference(k: usize, term: impl Fn(usize) -> (f32, f32)) -> (f64, f64) {
        let (mut s, mut mag) = (0.0f64, 0.0f64);
        for p in 0..k {
            let (x, y) = term(p);
            let t = x as f64 * y as f64;
            s += t;
            mag += t.abs();
        }
        (
            s,
            4.0 * f32::EPSILON as f64 * (k as f64 + 2.0) * (mag + 1.0),
        )
    }

    /// Checks `sgemm` against an f64 reference with `a` and `b` stored row- or column-major
    /// (`ta`, `tb`) and `c` with row stride `ldc >= n`, for beta 0 (c starts as NaN) and 1.5.
    fn check(m: usize, k: usize, n: usize, ta: bool, tb: bool) {
        let (a, b) = (random(m * k, 1 + m as u64), random(k * n, 2 + n as u64));
        let (rsa, csa) = if ta { (1, m) } else { (k, 1) };
        let (rsb, csb) = if tb { (1, k) } else { (n, 1) };
        let ldc = n + 3;
        for beta in [0.0f32, 1.5] {
            let c0 = random(m * ldc, 3);
            let mut c = if beta == 0.0 {
                vec![f32::NAN; m * ldc]
            } else {
                c0.clone()
            };
            // SAFETY: the strides address exactly the m x k, k x n and m x n matrices.
            unsafe {
                sgemm(
                    m,
                    k,
                    n,
                    0.5,
                    a.as_ptr(),
                    rsa as isize,
                    csa as isize,
                    b.as_ptr(),
                    rsb as isize,
                    csb as isize,
                    beta,
                    c.as_mut_ptr(),
                    ldc as isize,
                    1,
                )
            };
            for i in 0..m {
                for j in 0..n {
                    let (s, tol) = reference(k, |p| (a[i * rsa + p * csa], b[p * rsb + j * csb]));
                    let want = 0.5 * s + beta as f64 * c0[i * ldc + j] as f64;
                    let got = c[i * ldc + j] as f64;
                    assert!(
                        (got - want).abs() <= tol,
                        "{m}x{k}x{n} ta={ta} tb={tb} beta={beta} at ({i},{j}): {got} vs {want}"
                    );
                }
                // The padding between rows is never written.
                for j in n..ldc {
                    let got = c[i * ldc + j];
                    assert!(got.is_nan() && beta == 0.0 || got == c0[i * ldc + j]);
                }
            }
        }
    }

    #[test]
    fn matches_f64_reference_on_odd_shapes_and_strides() {
        let shapes = [
            (1, 1, 1),
            (7, 13, 5),
            (3, 40, 17),
            (6, 8, 8),
            (65, 129, 33),
            (13, 300, 9),
            (80, 5, 1030),
            (4, 21, 11),
            (2, 7, 6),
            (1, 300, 9),
        ];
        for (m, k, n) in shapes {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                check(m, k, n, ta, tb);
            }
        }
    }

    #[test]
    fn empty_reduction_scales_c() {
        let mut c = vec![2.0f32, -4.0, 6.0];
        // SAFETY: k = 0 reads nothing; c is 1 x 3.
        unsafe {
            sgemm(
                1,
                0,
                3,
                1.0,
                [].as_ptr(),
                0,
                1,
                [].as_ptr(),
                3,
                1,
                0.5,
                c.as_mut_ptr(),
                3,
                1,
            )
        };
        assert_eq!(c, [1.0, -2.0, 3.0]);
    }

    /// `pack_rows` then `product_tile` per tile (Winograd's path) against an f64 reference: `A`
    /// with a row stride past its width and row counts that leave a partial panel, `B` read in
    /// place with a row stride past the tiles used, and `c`'s rows past `mr` left alone.
    #[test]
    fn packed_tiles_match_f64_reference() {
        for (m, k) in [(1, 1), (5, 7), (8, 32), (13, 9), (21, 20)] {
            let (lda, n, ldb) = (k + 2, 2 * TILE_COLS, 2 * TILE_COLS + 5);
            let (a, b) = (
                random(m * lda, 7 + m as u64),
                random(k * ldb, 11 + k as u64),
            );
            let mut packed = vec![f32::NAN; m.next_multiple_of(PANEL_ROWS) * k];
            pack_rows(m, k, &a, lda, &mut packed);
            let mut c = vec![f32::NAN; m.next_multiple_of(PANEL_ROWS) * n];
            for (p, panel) in packed.chunks_exact(PANEL_ROWS * k).enumerate() {
                let mr = PANEL_ROWS.min(m - p * PANEL_ROWS);
                for j in (0..n).step_by(TILE_COLS) {
                    // SAFETY: one packed panel of k steps; k rows of b reaching column j +
                    // TILE_COLS <= ldb; mr rows of n from row p * PANEL_ROWS inside c.
                    unsafe {
                        product_tile(
                            k,
                            panel.as_ptr(),
                            b.as_ptr().add(j),
                            ldb,
                            c.as_mut_ptr().add(p * PANEL_ROWS * n + j),
                            n,
                            mr,
                        )
                    };
                }
            }
            for i in 0..m.next_multiple_of(PANEL_ROWS) {
                for j in 0..n {
                    let got = c[i * n + j];
                    if i >= m {
                        assert!(got.is_nan(), "{m}x{k}: row {i} past m was written");
                        continue;
                    }
                    let (want, tol) = reference(k, |p| (a[i * lda + p], b[p * ldb + j]));
                    assert!(
                        (got as f64 - want).abs() <= tol,
                        "{m}x{k} at ({i},{j}): {got} vs {want}"
                    );
                }
            }
        }
    }
}
