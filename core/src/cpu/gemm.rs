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

/// One `MR x NR` tile: `c = alpha * pa pb + beta * c` over `kc` packed steps, of which the
/// `mr x nr` top-left part is stored.
///
/// # Safety
/// `pa` and `pb` must hold `kc` packed groups; the `mr x nr` elements at `c` must be inside it.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn kernel(
    kc: usize,
    pa: *const f32,
    pb: *const f32,
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
            let (b0, b1) = (F4::load(pb.add(p * NR)), F4::load(pb.add(p * NR + 4)));
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
/// that are both contiguous.
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
    let k16 = k - k % 16;
    for j in 0..n {
        let bj = b.wrapping_offset(j as isize * csb);
        for i in 0..m {
            let ai = a.wrapping_offset(i as isize * rsa);
            // Four independent sums hide the latency of the adds.
            let mut s = [F4::splat(0.0); 4];
            for p in (0..k16).step_by(16) {
                for (h, s) in s.iter_mut().enumerate() {
                    // SAFETY: p + 4h + 4 <= k elements of the row and of the column.
                    unsafe {
                        *s = s.mul_add(F4::load(ai.add(p + 4 * h)), F4::load(bj.add(p + 4 * h)))
                    };
                }
            }
            let mut t = 0.0;
            for s in s {
                t += s.to_array().iter().sum::<f32>();
            }
            for p in k16..k {
                // SAFETY: p < k.
                t += unsafe { *ai.add(p) * *bj.add(p) };
            }
            // SAFETY: (i, j) is inside `c`.
            unsafe { c.set(i, j, t, alpha, beta) };
        }
    }
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
                    let (mut s, mut mag) = (0.0f64, 0.0f64);
                    for p in 0..k {
                        let t = a[i * rsa + p * csa] as f64 * b[p * rsb + j * csb] as f64;
                        s += t;
                        mag += t.abs();
                    }
                    let want = 0.5 * s + beta as f64 * c0[i * ldc + j] as f64;
                    let got = c[i * ldc + j] as f64;
                    let tol = 4.0 * f32::EPSILON as f64 * (k as f64 + 2.0) * (mag + 1.0);
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
}
