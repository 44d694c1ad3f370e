//! Winograd F(4x4, 3x3) convolution of f32 for 3x3 kernels at stride 1 without dilation: each
//! 4x4 output tile costs 36 multiply-adds per input channel instead of 144. The input's 6x6
//! tiles (overlapping by 2) and the filters are transformed into 36 planes, the planes are
//! multiplied by 36 GEMMs (`[o, c] x [c, tiles]`) and each output tile is transformed back from
//! its 36 products (Lavin and Gray's matrices, interpolation points 0, ±1, ±2). The planes run
//! along the tiles, so both transforms work on four neighbouring tiles per vector.

use super::gemm::{PANEL_ROWS, TILE_COLS, pack_rows, product_tile};
use super::lanes::F4;
use super::par;
use super::tail::Tail;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

/// Side of an input tile in the transformed domain.
const S: usize = 6;
/// Values per tile in the transformed domain (6x6).
const P: usize = S * S;

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

/// `B^T d` for six inputs `d` (the input transform along one axis).
#[inline(always)]
fn input_1d(d: [F4; S]) -> [F4; S] {
    let (four, two, five) = (F4::splat(4.0), F4::splat(2.0), F4::splat(5.0));
    let (s12, d12) = (d[1].add(d[2]), d[1].sub(d[2]));
    let (s34, d43, d42, d31) = (
        d[3].add(d[4]),
        d[4].sub(d[3]),
        d[4].sub(d[2]),
        d[3].sub(d[1]),
    );
    [
        d[4].sub(d[2].mul(five)).mul_add(d[0], four),
        s34.sub(s12.mul(four)),
        d43.mul_add(d12, four),
        d42.mul_add(d31, two),
        d42.sub(d31.mul(two)),
        d[5].sub(d[3].mul(five)).mul_add(d[1], four),
    ]
}

/// `A^T m` for six products `m` (the output transform along one axis).
#[inline(always)]
fn output_1d(m: [F4; S]) -> [F4; 4] {
    let (s12, d12) = (m[1].add(m[2]), m[1].sub(m[2]));
    let (s34, d34) = (m[3].add(m[4]), m[3].sub(m[4]));
    [
        m[0].add(s12).add(s34),
        d12.mul_add(d34, F4::splat(2.0)),
        s12.mul_add(s34, F4::splat(4.0)),
        d12.add(m[5]).mul_add(d34, F4::splat(8.0)),
    ]
}

/// The filters of one convolution transformed (`U = G g G^T`), as `[groups][36]` planes of
/// `[og, cg]` products' left operands packed for the GEMM's micro-kernel ([`pack_rows`]): the
/// 36 products per image then pack nothing.
pub(super) struct Filters {
    u: Vec<f32>,
    og: usize,
    cg: usize,
}

/// Elements from one plane of [`Filters`] to the next: one cache line more than its packed
/// filters, so that a filter's 36 values are not a power of two apart (which puts them in one
/// cache set).
fn plane_len(og: usize, cg: usize) -> usize {
    og.next_multiple_of(PANEL_ROWS) * cg + 16
}

impl Filters {
    /// Elements from one plane of `u` to the next.
    fn plane(&self) -> usize {
        plane_len(self.og, self.cg)
    }
    /// Transforms OIHW 3x3 weights `w` (`[groups * og, cg, 3, 3]`).
    pub(super) fn new(w: &[f32], groups: usize, og: usize, cg: usize) -> Self {
        // G t for three values t (by reciprocals: products are cheaper than divisions).
        let g6 = |t: [f32; 3]| {
            let (sixth, twelfth) = (1.0 / 6.0, 1.0 / 12.0);
            let (even, odd) = (t[0] + t[2], t[1]);
            let quarter_even = (t[0] * 0.25 + t[2]) * (2.0 * twelfth);
            [
                t[0] * 0.25,
                -(even + odd) * sixth,
                -(even - odd) * sixth,
                quarter_even + odd * twelfth,
                quarter_even - odd * twelfth,
                t[2],
            ]
        };
        // Row-major `[groups][36][og, cg]` first, then each plane packed.
        let mut unpacked = vec![0.0; groups * P * og * cg];
        for (f, k) in w.chunks_exact(9).enumerate().take(groups * og * cg) {
            let (gi, at) = (f / (og * cg), f % (og * cg));
            // G along each column of k, then along each resulting row.
            let cols: [[f32; S]; 3] = core::array::from_fn(|j| g6([k[j], k[3 + j], k[6 + j]]));
            for i in 0..S {
                for (j, v) in g6([cols[0][i], cols[1][i], cols[2][i]])
                    .into_iter()
                    .enumerate()
                {
                    unpacked[(gi * P + S * i + j) * og * cg + at] = v;
                }
            }
        }
        let plane = plane_len(og, cg);
        let mut u = vec![0.0; groups * P * plane];
        for (src, dst) in unpacked
            .chunks_exact(og * cg)
            .zip(u.chunks_exact_mut(plane))
        {
            pack_rows(og, cg, src, cg, dst);
        }
        Filters { u, og, cg }
    }
    /// [`Filters::new`], from [`CACHE`] when these weights were transformed lately.
    pub(super) fn cached(w: &[f32], groups: usize, og: usize, cg: usize) -> Arc<Self> {
        let w = &w[..groups * og * cg * 9];
        let fits = |e: &Cached| e.groups == groups && e.f.og == og && same_bits(&e.w, w);
        {
            let mut cache = CACHE.lock();
            if let Some(i) = cache.iter().position(fits) {
                let e = cache.remove(i);
                let f = e.f.clone();
                cache.push(e);
                return f;
            }
        }
        let f = Arc::new(Filters::new(w, groups, og, cg));
        let need = entry_bytes(w.len(), f.u.len());
        // weights too big to keep are not copied (a large layer would be, every call)
        if need > CACHE_BYTES {
            return f;
        }
        let mut cache = CACHE.lock();
        let mut bytes = need + cache.iter().map(Cached::bytes).sum::<usize>();
        while bytes > CACHE_BYTES && !cache.is_empty() {
            bytes -= cache.remove(0).bytes();
        }
        cache.push(Cached {
            w: w.to_vec(),
            groups,
            f: f.clone(),
        });
        f
    }
}

/// A transform kept with a copy of the weights it came from.
struct Cached {
    w: Vec<f32>,
    groups: usize,
    f: Arc<Filters>,
}

/// Transforms of recent weights, the most recently used last: a model's forward would otherwise
/// transform each weight on every call (at batch 1, about as long as the convolution itself).
/// An entry serves only weights equal to its copy bit for bit, whatever buffer holds them, so a
/// weight changed in place (`Tensor::write_at`, an optimizer step) is transformed again.
static CACHE: spin::Mutex<Vec<Cached>> = spin::Mutex::new(Vec::new());

/// Bytes of weights and transforms [`CACHE`] holds at most; the least recently used go first.
const CACHE_BYTES: usize = 8 << 20;

/// Whether `a` and `b` hold the same bits (one branch per 64 values, so that it vectorizes).
fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && (a.chunks(64).zip(b.chunks(64))).all(|(x, y)| {
            x.iter()
                .zip(y)
                .fold(0, |d, (p, q)| d | (p.to_bits() ^ q.to_bits()))
                == 0
        })
}

impl Cached {
    fn bytes(&self) -> usize {
        entry_bytes(self.w.len(), self.f.u.len())
    }
}

/// Bytes a cache entry of `w` weights and `u` transformed values takes.
fn entry_bytes(w: usize, u: usize) -> usize {
    4 * (w + u)
}

/// One image's geometry: input `[h, w]` with `pad` zeros around, output `[oh, ow]`, and its
/// `th` rows of `tw` tiles. The transforms take four tiles at a time along a row; a row's last
/// group reaches into the next row (which is written after it) or, for the last row, into
/// three or more spare tiles at the end (`ld` >= tiles + 3 per plane row).
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
            th: oh.div_ceil(4),
            tw: ow.div_ceil(4),
        }
    }
    /// Tiles per transformed plane row, with room for a last group of four, rounded up to the
    /// GEMM's micro-tiles, which then store whole vectors (the MNIST CNN's conv2: 36 products
    /// of [64, 32] x [32, 39 -> 40], 185 -> 170 us in Node) and read `V` in place.
    fn ld(&self) -> usize {
        (self.th * self.tw + 3).next_multiple_of(TILE_COLS)
    }
    /// Tiles per row, including those of the last group past the row's end.
    fn tw4(&self) -> usize {
        self.tw.next_multiple_of(4)
    }
    /// The padded input plane's width: every tile's 6 columns inside it.
    fn pw(&self) -> usize {
        4 * self.tw4() + 2
    }
    fn plane_len(&self) -> usize {
        (4 * self.th + 2) * self.pw()
    }
    /// Elements of scratch one image needs for `og` outputs and `cg` inputs per group.
    pub(super) fn scratch_len(&self, og: usize, cg: usize) -> usize {
        // The output transform's rows: one set per thread.
        self.plane_len() + P * (cg + og) * self.ld() + 16 * self.tw4() * par::threads()
    }
}

/// `dst` (`[groups * og, oh, ow]`) = the convolution of one image `img` (`[groups * cg, h, w]`)
/// with `f`; `scratch` has [`Tiles::scratch_len`] elements. `threaded`: the products and the
/// output transform are spread over the thread pool by output channels, each task transforming
/// the products it made (one parallel region per image and group).
pub(super) fn conv_image(
    f: &Filters,
    t: &Tiles,
    img: &[f32],
    dst: &mut [f32],
    scratch: &mut [f32],
    threaded: bool,
    tail: Option<&Tail<'_>>,
) {
    let (og, cg, n, pw) = (f.og, f.cg, t.ld(), t.pw());
    let (plane, rest) = scratch.split_at_mut(t.plane_len());
    let (v, rest) = rest.split_at_mut(P * cg * n);
    let (m, rows) = rest.split_at_mut(P * og * n);
    let split = threaded && par::worth_splitting(P * og * cg * n / 4);
    // Output channels per task: one task per thread, in whole panels of filters.
    let per = if split {
        og.div_ceil(par::threads())
            .next_multiple_of(PANEL_ROWS)
            .min(og)
    } else {
        og
    };
    let (ohw, rows_len) = (t.oh * t.ow, 16 * t.tw4());
    // The zero border stays: every channel writes the same interior.
    plane.fill(0.0);
    let groups = f.u.len() / (P * f.plane());
    for gi in 0..groups {
        for c in 0..cg {
            let src = &img[(gi * cg + c) * t.h * t.w..][..t.h * t.w];
            for (y, row) in src.chunks_exact(t.w).enumerate() {
                let d = (y + t.pad[0]) * pw + t.pad[1];
                plane[d..d + t.w].copy_from_slice(row);
            }
            input_transform(t, plane, &mut v[c * n..], cg * n);
        }
        let v = &*v;
        // Plane xi's products for the output channels `os` (from a whole panel of filters)
        // into `mx`, tile by tile of the micro-kernel, `V` read in place. The spare tiles are
        // multiplied too: M keeps V's row stride, a whole number of tiles.
        let product = |xi: usize, os: Range<usize>, mx: &mut [f32]| {
            let u = &f.u[(gi * P + xi) * f.plane()..];
            let b = &v[xi * cg * n..][..cg * n];
            let mx = &mut mx[..os.len() * n];
            for o in os.clone().step_by(PANEL_ROWS) {
                let (pa, mr) = (&u[o * cg..][..PANEL_ROWS * cg], PANEL_ROWS.min(os.end - o));
                let c = &mut mx[(o - os.start) * n..][..mr * n];
                for j in (0..n).step_by(TILE_COLS) {
                    // SAFETY: `pa` is one packed panel of cg steps; `b` has cg rows of n >= j
                    // + TILE_COLS values (n is a whole number of tiles); `c` mr rows of n.
                    unsafe {
                        product_tile(
                            cg,
                            pa.as_ptr(),
                            b.as_ptr().add(j),
                            n,
                            c.as_mut_ptr().add(j),
                            n,
                            mr,
                        )
                    };
                }
            }
        };
        let out = &mut dst[gi * og * ohw..][..og * ohw];
        if split {
            // M as [og / per][36][per][n]: a task's products are one chunk.
            let tasks: Vec<_> = (out.chunks_mut(per * ohw))
                .zip(m[..P * og * n].chunks_mut(P * per * n))
                .zip(rows.chunks_exact_mut(rows_len))
                .enumerate()
                .collect();
            par::for_each(tasks, |(i, ((out, mp), rows))| {
                let os = i * per..i * per + out.len() / ohw;
                for (xi, mx) in mp.chunks_exact_mut(os.len() * n).enumerate() {
                    product(xi, os.clone(), mx);
                }
                for (o, plane_out) in out.chunks_exact_mut(ohw).enumerate() {
                    let tail = tail.map(|t| (t, gi * og + os.start + o));
                    output_transform(t, &mp[o * n..], os.len() * n, plane_out, rows, tail);
                }
            });
        } else {
            // M as [36][og][n].
            for (xi, mx) in m[..P * og * n].chunks_exact_mut(og * n).enumerate() {
                product(xi, 0..og, mx);
            }
            for (o, plane_out) in out.chunks_exact_mut(ohw).enumerate() {
                let tail = tail.map(|t| (t, gi * og + o));
                output_transform(t, &m[o * n..], og * n, plane_out, rows, tail);
            }
        }
    }
}

/// Writes the 36 transformed values (`V = B^T d B`) of every tile of the padded input `plane`
/// to `v[xi * stride + tile]`, four tiles per vector.
fn input_transform(t: &Tiles, plane: &[f32], v: &mut [f32], stride: usize) {
    let pw = t.pw();
    for ty in 0..t.th {
        let rows = &plane[4 * ty * pw..][..S * pw];
        for q in (0..t.tw).step_by(4) {
            // Per row r of the four tiles' 6x6 inputs: d B, from the tiles' columns 0..6
            // (column j of tile l is at 4 (q + l) + j: two 4x4 transposes).
            let db: [[F4; S]; S] = core::array::from_fn(|r| {
                let s = &rows[r * pw + 4 * q..][..18];
                let [c0, c1, c2, c3] =
                    F4::transpose([load(s), load(&s[4..]), load(&s[8..]), load(&s[12..])]);
                let [_, _, c4, c5] =
                    F4::transpose([load(&s[2..]), load(&s[6..]), load(&s[10..]), load(&s[14..])]);
                input_1d([c0, c1, c2, c3, c4, c5])
            });
            let at = ty * t.tw + q;
            // One check for the 36 stores (each check would cost module bytes).
            assert!((P - 1) * stride + at + 4 <= v.len());
            let base = v.as_mut_ptr().wrapping_add(at);
            // Column j of d B across the rows: B^T (d B).
            let columns: [[F4; S]; S] =
                core::array::from_fn(|j| core::array::from_fn(|r| db[r][j]));
            for (j, column) in columns.into_iter().enumerate() {
                for (i, x) in input_1d(column).into_iter().enumerate() {
                    // SAFETY: inside `v`, per the assert above.
                    unsafe { x.store(base.add((S * i + j) * stride)) };
                }
            }
        }
    }
}

/// Writes one output plane `out` (`[oh, ow]`) from its tiles' 36 products
/// (`m[xi * stride + tile]`): `Y = A^T M A`, four output rows per tile row, built in `rows`;
/// then `tail`, when given, on the plane's rows as output channel `.1`, each just written.
fn output_transform(
    t: &Tiles,
    m: &[f32],
    stride: usize,
    out: &mut [f32],
    rows: &mut [f32],
    tail: Option<(&Tail<'_>, usize)>,
) {
    let (tw, rw) = (t.tw, 4 * t.tw4());
    for ty in 0..t.th {
        for q in (0..tw).step_by(4) {
            let at = ty * tw + q;
            assert!((P - 1) * stride + at + 4 <= m.len());
            // SAFETY: inside `m`, per the assert above.
            let mv: [F4; P] =
                core::array::from_fn(|xi| unsafe { F4::load(m.as_ptr().add(xi * stride + at)) });
            // A^T M along the columns: am[j][r] = row r of column j.
            let am: [[F4; 4]; S] =
                core::array::from_fn(|j| output_1d(core::array::from_fn(|i| mv[S * i + j])));
            for r in 0..4 {
                // Row r of the four tiles, one tile per vector after the transpose.
                let y = output_1d(core::array::from_fn(|j| am[j][r]));
                for (l, x) in F4::transpose(y).into_iter().enumerate() {
                    store(x, &mut rows[r * rw + 4 * (q + l)..]);
                }
            }
        }
        for r in 0..4.min(t.oh - 4 * ty) {
            let row = &mut out[(4 * ty + r) * t.ow..][..t.ow];
            row.copy_from_slice(&rows[r * rw..][..t.ow]);
            if let Some((tail, channel)) = tail {
                tail.apply(channel, row);
            }
        }
    }
}
