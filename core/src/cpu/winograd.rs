//! Winograd convolution of f32 for 3x3 kernels at stride 1 without dilation, in two sizes:
//! F(4x4, 3x3), whose 4x4 output tile costs 36 multiply-adds per input channel instead of 144,
//! and F(6x6, 3x3), whose 6x6 tile costs 64 instead of 324. Each convolution takes the one with
//! fewer products for its output size ([`Tiles::new`]). The input's tiles (overlapping by 2) and
//! the filters are transformed into planes, the planes are multiplied by one GEMM each (`[o, c]
//! x [c, tiles]`) and each output tile is transformed back from its products (Lavin and Gray's
//! matrices; interpolation points 0, ±1, ±2, and for F(6x6) also ±1/2). The planes run along the
//! tiles, so both transforms work on four neighbouring tiles per vector.

use super::gemm::{PANEL_ROWS, TILE_COLS, pack_rows, product_tile};
use super::lanes::F4;
use super::par;
use super::tail::Tail;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

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

/// One Winograd algorithm F(M x M, 3x3): `S = M + 2` inputs per axis of a tile. Its
/// transforms along one axis; each 2-D transform applies them along both.
trait Algorithm<const S: usize, const M: usize> {
    /// `B^T d`: the input transform of `S` inputs.
    fn input(d: [F4; S]) -> [F4; S];
    /// `A^T m`: `M` outputs from `S` products.
    fn output(m: [F4; S]) -> [F4; M];
    /// `G t`: the filter transform of three taps.
    fn filter(t: [f32; 3]) -> [f32; S];
}

/// F(4x4, 3x3).
struct F4x4;

impl Algorithm<6, 4> for F4x4 {
    #[inline(always)]
    fn input(d: [F4; 6]) -> [F4; 6] {
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
    #[inline(always)]
    fn output(m: [F4; 6]) -> [F4; 4] {
        let (s12, d12) = (m[1].add(m[2]), m[1].sub(m[2]));
        let (s34, d34) = (m[3].add(m[4]), m[3].sub(m[4]));
        [
            m[0].add(s12).add(s34),
            d12.mul_add(d34, F4::splat(2.0)),
            s12.mul_add(s34, F4::splat(4.0)),
            d12.add(m[5]).mul_add(d34, F4::splat(8.0)),
        ]
    }
    fn filter(t: [f32; 3]) -> [f32; 6] {
        // By reciprocals: products are cheaper than divisions.
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
    }
}

/// F(6x6, 3x3): the interpolation points of [`F4x4`] and ±1/2; the rows of `B^T` for each pair
/// of opposite points share their even and odd parts.
struct F6x6;

impl Algorithm<8, 6> for F6x6 {
    #[inline(always)]
    fn input(d: [F4; 8]) -> [F4; 8] {
        let k = F4::splat;
        // Even and odd parts for the points ±1, ±1/2 and ±2.
        let e1 = d[2].add(d[6]).mul_add(d[4], k(-4.25));
        let o1 = d[1].add(d[5]).mul_add(d[3], k(-4.25));
        let e2 = d[6].mul_add(d[2], k(0.25)).mul_add(d[4], k(-1.25));
        let o2 = d[1]
            .mul(k(0.5))
            .mul_add(d[3], k(-2.5))
            .mul_add(d[5], k(2.0));
        let e3 = d[6].mul_add(d[2], k(4.0)).mul_add(d[4], k(-5.0));
        let o3 = d[1]
            .mul(k(2.0))
            .mul_add(d[3], k(-2.5))
            .mul_add(d[5], k(0.5));
        [
            d[0].sub(d[6]).mul_add(d[4].sub(d[2]), k(5.25)),
            e1.add(o1),
            e1.sub(o1),
            e2.add(o2),
            e2.sub(o2),
            e3.add(o3),
            e3.sub(o3),
            d[7].sub(d[1]).mul_add(d[3].sub(d[5]), k(5.25)),
        ]
    }
    #[inline(always)]
    fn output(m: [F4; 8]) -> [F4; 6] {
        let k = F4::splat;
        let (s1, d1) = (m[1].add(m[2]), m[1].sub(m[2]));
        let (s2, d2) = (m[3].add(m[4]), m[3].sub(m[4]));
        let (s3, d3) = (m[5].add(m[6]), m[5].sub(m[6]));
        [
            m[0].add(s1).add(s2).add(s3),
            d1.mul_add(d2, k(2.0)).mul_add(d3, k(0.5)),
            s1.mul_add(s2, k(4.0)).mul_add(s3, k(0.25)),
            d1.mul_add(d2, k(8.0)).mul_add(d3, k(0.125)),
            s1.mul_add(s2, k(16.0)).mul_add(s3, k(0.0625)),
            d1.add(m[7]).mul_add(d2, k(32.0)).mul_add(d3, k(0.03125)),
        ]
    }
    fn filter(t: [f32; 3]) -> [f32; 8] {
        // Even and odd parts for the points ±1, ±1/2 (scaled by 4) and ±2 (scaled by 1/4).
        let (e1, o1) = (t[0] + t[2], t[1]);
        let (e2, e3, o23) = (t[0] + 4.0 * t[2], 4.0 * t[0] + t[2], 2.0 * t[1]);
        [
            t[0],
            -(e1 + o1) * (2.0 / 9.0),
            -(e1 - o1) * (2.0 / 9.0),
            (e2 + o23) * (1.0 / 90.0),
            (e2 - o23) * (1.0 / 90.0),
            (e3 + o23) * (8.0 / 45.0),
            (e3 - o23) * (8.0 / 45.0),
            t[2],
        ]
    }
}

/// The filters of one convolution transformed (`U = G g G^T`) for one algorithm, as
/// `[groups][planes]` planes of `[og, cg]` products' left operands packed for the GEMM's
/// micro-kernel ([`pack_rows`]): the products per image then pack nothing.
pub(super) struct Filters {
    u: Vec<f32>,
    og: usize,
    cg: usize,
    /// Side of the algorithm's output tile (4 or 6).
    m: usize,
}

/// Elements from one plane of [`Filters`] to the next: one cache line more than its packed
/// filters, so that a filter's transformed values are not a power of two apart (which puts them
/// in one cache set).
fn plane_len(og: usize, cg: usize) -> usize {
    og.next_multiple_of(PANEL_ROWS) * cg + 16
}

impl Filters {
    /// Elements from one plane of `u` to the next.
    fn plane(&self) -> usize {
        plane_len(self.og, self.cg)
    }
    /// Transforms OIHW 3x3 weights `w` (`[groups * og, cg, 3, 3]`) for the algorithm of
    /// output tile `m` ([`Tiles::tile`]).
    pub(super) fn new(w: &[f32], groups: usize, og: usize, cg: usize, m: usize) -> Self {
        let u = if m == 4 {
            transform_filters::<6, 4, F4x4>(w, groups, og, cg)
        } else {
            transform_filters::<8, 6, F6x6>(w, groups, og, cg)
        };
        Filters { u, og, cg, m }
    }
    /// [`Filters::new`], from [`CACHE`] when these weights were transformed lately.
    pub(super) fn cached(w: &[f32], groups: usize, og: usize, cg: usize, m: usize) -> Arc<Self> {
        let w = &w[..groups * og * cg * 9];
        let fits =
            |e: &Cached| e.groups == groups && e.f.og == og && e.f.m == m && same_bits(&e.w, w);
        {
            let mut cache = CACHE.lock();
            if let Some(i) = cache.iter().position(fits) {
                let e = cache.remove(i);
                let f = e.f.clone();
                cache.push(e);
                return f;
            }
        }
        let f = Arc::new(Filters::new(w, groups, og, cg, m));
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

/// [`Filters`]' packed planes of `w` for the algorithm `A`.
fn transform_filters<const S: usize, const M: usize, A: Algorithm<S, M>>(
    w: &[f32],
    groups: usize,
    og: usize,
    cg: usize,
) -> Vec<f32> {
    let planes = S * S;
    // Row-major `[groups][planes][og, cg]` first, then each plane packed.
    let mut unpacked = vec![0.0; groups * planes * og * cg];
    for (f, k) in w.chunks_exact(9).enumerate().take(groups * og * cg) {
        let (gi, at) = (f / (og * cg), f % (og * cg));
        // G along each column of k, then along each resulting row.
        let cols: [[f32; S]; 3] = core::array::from_fn(|j| A::filter([k[j], k[3 + j], k[6 + j]]));
        for i in 0..S {
            for (j, v) in A::filter([cols[0][i], cols[1][i], cols[2][i]])
                .into_iter()
                .enumerate()
            {
                unpacked[(gi * planes + S * i + j) * og * cg + at] = v;
            }
        }
    }
    let plane = plane_len(og, cg);
    let mut u = vec![0.0; groups * planes * plane];
    for (src, dst) in unpacked
        .chunks_exact(og * cg)
        .zip(u.chunks_exact_mut(plane))
    {
        pack_rows(og, cg, src, cg, dst);
    }
    u
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
/// `th` rows of `tw` output tiles of side `m`. The transforms take four tiles at a time along a
/// row; a row's last group reaches into the next row (which is written after it) or, for the
/// last row, into spare tiles at the end of each plane row ([`Tiles::ld`]).
#[derive(Clone, Copy)]
pub(super) struct Tiles {
    pad: [usize; 2],
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    th: usize,
    tw: usize,
    m: usize,
}

impl Tiles {
    /// The tiling of an `h x w` input padded by `pad` (the output is `(h + 2 pad - 2)` wide) for
    /// the algorithm with fewer products: F(6x6, 3x3) where the output is tiled about as well
    /// by 6 as by 4 (the MNIST CNN's 24x24: 64 x 16 products per channel pair against 36 x 40),
    /// F(4x4, 3x3) for small outputs (7x7: 64 x 8 against 36 x 8).
    pub(super) fn new(h: usize, w: usize, pad: [usize; 2]) -> Self {
        let (four, six) = (Self::by(4, h, w, pad), Self::by(6, h, w, pad));
        if six.products() < four.products() {
            six
        } else {
            four
        }
    }
    /// The tiling for the algorithm of output tile `m`.
    fn by(m: usize, h: usize, w: usize, pad: [usize; 2]) -> Self {
        let (oh, ow) = (h + 2 * pad[0] - 2, w + 2 * pad[1] - 2);
        Tiles {
            pad,
            h,
            w,
            oh,
            ow,
            th: oh.div_ceil(m),
            tw: ow.div_ceil(m),
            m,
        }
    }
    /// Side of the output tile, which names the algorithm (4 or 6).
    pub(super) fn tile(&self) -> usize {
        self.m
    }
    /// Transformed planes: the input tile's area.
    fn planes(&self) -> usize {
        (self.m + 2) * (self.m + 2)
    }
    /// Products per pair of input and output channels.
    fn products(&self) -> usize {
        self.planes() * self.ld(self.th)
    }
    /// Tiles per transformed plane row for `rows` rows of tiles: up to the end of the last
    /// row's last group of four, rounded up to the GEMM's micro-tiles, which then store whole
    /// vectors (the MNIST CNN's conv2 by F(4x4): products of [64, 32] x [32, 38 -> 40], 185 ->
    /// 170 us in Node) and read `V` in place.
    fn ld(&self, rows: usize) -> usize {
        (rows.saturating_sub(1) * self.tw + self.tw4()).next_multiple_of(TILE_COLS)
    }
    /// Tiles per row, including those of the last group past the row's end.
    fn tw4(&self) -> usize {
        self.tw.next_multiple_of(4)
    }
    /// The padded input plane's width: every tile's columns inside it.
    fn pw(&self) -> usize {
        self.m * self.tw4() + 2
    }
    /// Elements of the padded input rows under `rows` rows of tiles.
    fn plane_len(&self, rows: usize) -> usize {
        (self.m * rows + 2) * self.pw()
    }
    /// Scratch elements of one part of `rows` rows of tiles ([`conv_image`]): its padded input
    /// plane, `V`, the products and the output transform's rows (`m` rows of whole groups).
    fn part_len(&self, rows: usize, og: usize, cg: usize) -> usize {
        self.plane_len(rows) + self.planes() * (cg + og) * self.ld(rows) + self.m * self.rows_len()
    }
    /// Elements of one output row in the output transform: whole groups of four tiles.
    fn rows_len(&self) -> usize {
        self.m * self.tw4()
    }
    /// The parts one image's tile rows are split into: one per thread when `threaded` and the
    /// products are worth it, else one; and the tile rows per part.
    fn parts(&self, threaded: bool, og: usize, cg: usize) -> (usize, usize) {
        let parts = if threaded && par::worth_splitting(self.products() * og * cg / 4) {
            par::threads().min(self.th)
        } else {
            1
        };
        let rows = self.th.div_ceil(parts);
        (self.th.div_ceil(rows), rows)
    }
    /// Elements of scratch one image needs for `og` outputs and `cg` inputs per group, split
    /// into parts or not.
    pub(super) fn scratch_len(&self, og: usize, cg: usize) -> usize {
        [false, true]
            .map(|threaded| {
                let (parts, rows) = self.parts(threaded, og, cg);
                parts * self.part_len(rows, og, cg)
            })
            .into_iter()
            .max()
            .unwrap_or(0)
    }
}

/// `dst` (`[groups * og, oh, ow]`, or with a max pool in `tail` `[groups * og, oh / 2, ow / 2]`)
/// = the convolution of one image `img` (`[groups * cg, h, w]`) with `f`, transformed for `t`'s
/// algorithm; `scratch` has [`Tiles::scratch_len`] elements.
/// `threaded`: the image's rows of tiles are split into a part per thread, each transforming
/// its tiles' inputs, multiplying them by all the filters and transforming its products back
/// into its rows of the output (one parallel region per image and group; nothing is shared but
/// the filters).
pub(super) fn conv_image(
    f: &Filters,
    t: &Tiles,
    img: &[f32],
    dst: &mut [f32],
    scratch: &mut [f32],
    threaded: bool,
    tail: Option<&Tail<'_>>,
) {
    debug_assert_eq!(f.m, t.m);
    let (og, cg) = (f.og, f.cg);
    let (parts, rows) = t.parts(threaded, og, cg);
    // Output rows of a row of tiles, and their width: half as many and half as wide pooled.
    let shrink = if tail.is_some_and(|t| t.max_pool) {
        2
    } else {
        1
    };
    let (tile_rows, width) = (t.m / shrink, t.ow / shrink);
    let (ohw, part_len) = (t.oh / shrink * width, t.part_len(rows, og, cg));
    let groups = f.u.len() / (t.planes() * f.plane());
    for gi in 0..groups {
        // Each part's rows of every output plane of the group.
        let mut outs: Vec<Vec<&mut [f32]>> = (0..parts).map(|_| Vec::with_capacity(og)).collect();
        for plane in dst[gi * og * ohw..][..og * ohw].chunks_exact_mut(ohw) {
            let mut rest = plane;
            for out in &mut outs {
                let (mine, next) = rest.split_at_mut((tile_rows * rows * width).min(rest.len()));
                out.push(mine);
                rest = next;
            }
        }
        let tasks: Vec<_> = (outs.into_iter().zip(scratch.chunks_exact_mut(part_len)))
            .enumerate()
            .collect();
        par::for_each(tasks, |(i, (outs, scratch))| {
            let part = Part {
                gi,
                rows: i * rows..((i + 1) * rows).min(t.th),
            };
            conv_part(f, t, &part, img, outs, scratch, tail)
        });
    }
}

/// The tiles one task of [`conv_image`] computes: rows `rows` of tiles of group `gi`.
struct Part {
    gi: usize,
    rows: Range<usize>,
}

/// One part of [`conv_image`]: `outs` are the part's rows of each output plane of the group,
/// `scratch` has [`Tiles::part_len`] elements. Only the transforms depend on the algorithm.
fn conv_part(
    f: &Filters,
    t: &Tiles,
    part: &Part,
    img: &[f32],
    outs: Vec<&mut [f32]>,
    scratch: &mut [f32],
    tail: Option<&Tail<'_>>,
) {
    let (og, cg, pw, planes, gi) = (f.og, f.cg, t.pw(), t.planes(), part.gi);
    let (th, n) = (part.rows.len(), t.ld(part.rows.len()));
    let (plane, rest) = scratch.split_at_mut(t.plane_len(th));
    let (v, rest) = rest.split_at_mut(planes * cg * n);
    let (m, rows) = rest.split_at_mut(planes * og * n);
    // The padded input rows under the part's tiles; the zero border stays, as every channel
    // writes the same interior.
    plane.fill(0.0);
    let first = t.m * part.rows.start;
    let inside = |r: usize| (first + r).checked_sub(t.pad[0]).filter(|&y| y < t.h);
    for c in 0..cg {
        let src = &img[(gi * cg + c) * t.h * t.w..][..t.h * t.w];
        for (r, dst) in plane.chunks_exact_mut(pw).enumerate() {
            if let Some(y) = inside(r) {
                dst[t.pad[1]..][..t.w].copy_from_slice(&src[y * t.w..][..t.w]);
            }
        }
        if t.m == 4 {
            input_transform::<6, 4, F4x4>(t, th, plane, &mut v[c * n..], cg * n);
        } else {
            input_transform::<8, 6, F6x6>(t, th, plane, &mut v[c * n..], cg * n);
        }
    }
    // Plane xi's products for all output channels, panel of filters by panel and tile by tile
    // of the micro-kernel, `V` read in place: M as [planes][og][n]. The spare tiles are
    // multiplied too: M keeps V's row stride, a whole number of tiles.
    for (xi, mx) in m.chunks_exact_mut(og * n).take(planes).enumerate() {
        let u = &f.u[(gi * planes + xi) * f.plane()..];
        let b = &v[xi * cg * n..][..cg * n];
        for o in (0..og).step_by(PANEL_ROWS) {
            let (pa, mr) = (&u[o * cg..][..PANEL_ROWS * cg], PANEL_ROWS.min(og - o));
            let c = &mut mx[o * n..][..mr * n];
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
    }
    for (o, out) in outs.into_iter().enumerate() {
        let tail = tail.map(|t| (t, gi * og + o));
        let m = &m[o * n..];
        if t.m == 4 {
            output_transform::<6, 4, F4x4>(t, th, m, og * n, out, rows, tail);
        } else {
            output_transform::<8, 6, F6x6>(t, th, m, og * n, out, rows, tail);
        }
    }
}

/// Writes the `S x S` transformed values (`V = B^T d B`) of the tiles of `th` rows over the
/// padded input rows `plane` to `v[xi * stride + tile]`, four tiles per vector.
fn input_transform<const S: usize, const M: usize, A: Algorithm<S, M>>(
    t: &Tiles,
    th: usize,
    plane: &[f32],
    v: &mut [f32],
    stride: usize,
) {
    let pw = t.pw();
    for ty in 0..th {
        let rows = &plane[M * ty * pw..][..S * pw];
        for q in (0..t.tw).step_by(4) {
            // Per row r of the four tiles' inputs: d B, from the tiles' columns 0..S (column j
            // of tile l is at M (q + l) + j: two 4x4 transposes, of columns 0..4 and S-4..S).
            let db: [[F4; S]; S] = core::array::from_fn(|r| {
                let s = &rows[r * pw + M * q..][..3 * M + S];
                let low = F4::transpose(core::array::from_fn(|l| load(&s[M * l..])));
                let high = F4::transpose(core::array::from_fn(|l| load(&s[M * l + S - 4..])));
                A::input(core::array::from_fn(|j| {
                    if j < 4 { low[j] } else { high[j + 4 - S] }
                }))
            });
            let at = ty * t.tw + q;
            // One check for the stores (each check would cost module bytes).
            assert!((S * S - 1) * stride + at + 4 <= v.len());
            let base = v.as_mut_ptr().wrapping_add(at);
            // Column j of d B across the rows: B^T (d B).
            let columns: [[F4; S]; S] =
                core::array::from_fn(|j| core::array::from_fn(|r| db[r][j]));
            for (j, column) in columns.into_iter().enumerate() {
                for (i, x) in A::input(column).into_iter().enumerate() {
                    // SAFETY: inside `v`, per the assert above.
                    unsafe { x.store(base.add((S * i + j) * stride)) };
                }
            }
        }
    }
}

/// Writes the output rows `out` (`[.., ow]`, up to `M` per row of tiles) of `th` rows of tiles
/// from their `S x S` products (`m[xi * stride + tile]`): `Y = A^T M A`, built in `rows`; then
/// `tail`, when given, on each row as output channel `.1`, just written. With a max pool in the
/// tail, `out` holds the pooled rows (`[.., ow / 2]`, `M / 2` per row of tiles), pooled from the
/// rows built once the tail is applied to them.
fn output_transform<const S: usize, const M: usize, A: Algorithm<S, M>>(
    t: &Tiles,
    th: usize,
    m: &[f32],
    stride: usize,
    out: &mut [f32],
    rows: &mut [f32],
    tail: Option<(&Tail<'_>, usize)>,
) {
    let (tw, rw) = (t.tw, t.rows_len());
    let pool = tail.is_some_and(|(t, _)| t.max_pool);
    let width = if pool { t.ow / 2 } else { t.ow };
    let per_tile = if pool { M / 2 } else { M };
    for (ty, out) in out.chunks_mut(per_tile * width).take(th).enumerate() {
        for q in (0..tw).step_by(4) {
            let at = ty * tw + q;
            assert!((S * S - 1) * stride + at + 4 <= m.len());
            let base = m.as_ptr().wrapping_add(at);
            // A^T M along the columns: am[j][r] = row r of column j.
            let am: [[F4; M]; S] = core::array::from_fn(|j| {
                // SAFETY: inside `m`, per the assert above.
                A::output(core::array::from_fn(|i| unsafe {
                    F4::load(base.add((S * i + j) * stride))
                }))
            });
            for r in 0..M {
                // Row r of the four tiles, one tile per vector after the transposes (of
                // columns 0..4 and, for wider tiles, M-4..M).
                let y = A::output(core::array::from_fn(|j| am[j][r]));
                let row = &mut rows[r * rw + M * q..][..4 * M];
                for (l, x) in F4::transpose(core::array::from_fn(|c| y[c]))
                    .into_iter()
                    .enumerate()
                {
                    store(x, &mut row[M * l..]);
                }
                if M > 4 {
                    let high = F4::transpose(core::array::from_fn(|c| y[M - 4 + c]));
                    for (l, x) in high.into_iter().enumerate() {
                        store(x, &mut row[M * l + M - 4..]);
                    }
                }
            }
        }
        match tail {
            Some((tail, channel)) if pool => {
                for built in rows.chunks_exact_mut(rw).take(2 * out.len() / width) {
                    tail.apply(channel, &mut built[..t.ow]);
                }
                super::pool::max_2x2(rows, rw, out, width);
            }
            _ => {
                for (row, built) in out.chunks_exact_mut(t.ow).zip(rows.chunks_exact(rw)) {
                    row.copy_from_slice(&built[..t.ow]);
                    if let Some((tail, channel)) = tail {
                        tail.apply(channel, row);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both algorithms against a direct convolution in f64, on odd sizes (partial tiles in both
    /// axes, a row of tiles not a multiple of four), padding, groups and random values, on one
    /// thread and split into parts (with 2+ threads; unequal parts for 15x20); the error bound
    /// follows the magnitude of each output's terms, as f32 rounding does.
    #[test]
    fn both_algorithms_match_direct_convolution() {
        let mut seed = 7u64;
        let mut rand = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
                })
                .collect()
        };
        for (h, w, pad, groups, og, cg) in [
            (13, 17, [1, 1], 1, 7, 5),
            (9, 26, [0, 2], 2, 9, 3),
            (26, 26, [0, 0], 1, 32, 16),
            (15, 20, [1, 1], 1, 24, 16),
        ] {
            let img = rand(groups * cg * h * w);
            let wt = rand(groups * og * cg * 9);
            let (oh, ow) = (h + 2 * pad[0] - 2, w + 2 * pad[1] - 2);
            for (m, threaded) in [(4, false), (6, false), (4, true), (6, true)] {
                let t = Tiles::by(m, h, w, pad);
                let f = Filters::new(&wt, groups, og, cg, m);
                let mut dst = vec![f32::NAN; groups * og * oh * ow];
                let mut scratch = vec![0.0; t.scratch_len(og, cg)];
                conv_image(&f, &t, &img, &mut dst, &mut scratch, threaded, None);
                for (i, &got) in dst.iter().enumerate() {
                    let (o, y, x) = (i / (oh * ow), i / ow % oh, i % ow);
                    let (mut want, mut terms) = (0.0f64, 0.0f64);
                    for c in 0..cg {
                        for (k, &wk) in wt[(o * cg + c) * 9..][..9].iter().enumerate() {
                            let (iy, ix) = ((y + k / 3) as isize, (x + k % 3) as isize);
                            let (iy, ix) = (iy - pad[0] as isize, ix - pad[1] as isize);
                            if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                continue;
                            }
                            let ci = (o / og) * cg + c;
                            let v = f64::from(img[(ci * h + iy as usize) * w + ix as usize]);
                            want += f64::from(wk) * v;
                            terms += (f64::from(wk) * v).abs();
                        }
                    }
                    assert!(
                        (f64::from(got) - want).abs() <= 5e-6 * (1.0 + terms),
                        "F({m}x{m}) on {h}x{w} (threaded: {threaded}), output {i}: got {got}, want {want}"
                    );
                }
            }
        }
    }

    /// Each output size takes the algorithm with fewer products.
    #[test]
    fn tiling_picks_the_algorithm_with_fewer_products() {
        // 24x24 (the MNIST CNN's conv2): 64 x 16 against 36 x 40.
        assert_eq!(Tiles::new(26, 26, [0, 0]).tile(), 6);
        // 7x7: 64 x 8 against 36 x 8.
        assert_eq!(Tiles::new(7, 7, [1, 1]).tile(), 4);
        for (h, w) in [(5, 5), (12, 30), (56, 56), (3, 40)] {
            let t = Tiles::new(h, w, [1, 1]);
            let other = Tiles::by(10 - t.tile(), h, w, [1, 1]);
            assert!(t.products() <= other.products(), "{h}x{w}");
        }
    }
}
