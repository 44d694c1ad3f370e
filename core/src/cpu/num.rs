//! The arithmetic the kernels are generic over: `Num` for f64/f32/i32/u32 (integers wrap, as
//! PyTorch's do), `Float` for f64/f32 (f16 is computed as f32).

use super::storage::CpuElem;

/// A numeric element. Sums and products of floats accumulate in f64 (the oracle should be the
/// most accurate backend); integers accumulate in their own type, wrapping.
pub(crate) trait Num: CpuElem + PartialOrd {
    /// The accumulator type of sums and products.
    type Acc: Copy + Send + Sync;
    const ZERO: Self;
    const ONE: Self;
    const ACC_ZERO: Self::Acc;
    const ACC_ONE: Self::Acc;
    fn acc(self) -> Self::Acc;
    fn from_acc(a: Self::Acc) -> Self;
    fn acc_add(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    fn acc_mul(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    /// Floats: IEEE. Integers: truncating, and 0 for a zero divisor.
    fn div(self, o: Self) -> Self;
    fn neg(self) -> Self;
    fn abs(self) -> Self;
    fn is_nan(self) -> bool {
        false
    }
    /// -1, 0 or 1 (NaN stays NaN).
    fn sign(self) -> Self;
    /// The larger value, NaN if either is.
    #[inline(always)]
    fn maximum(self, o: Self) -> Self {
        if self.is_nan() || o <= self { self } else { o }
    }
    /// The smaller value, NaN if either is.
    #[inline(always)]
    fn minimum(self, o: Self) -> Self {
        if self.is_nan() || o >= self { self } else { o }
    }
    /// Sum of a slice in the accumulator type, in eight independent lanes (faster, and more
    /// accurate than one chain).
    fn sum_acc(x: &[Self]) -> Self::Acc {
        let mut lanes = [Self::ACC_ZERO; 8];
        let chunks = x.chunks_exact(8);
        let rest = chunks.remainder();
        for c in chunks {
            for (l, &v) in lanes.iter_mut().zip(c) {
                *l = Self::acc_add(*l, v.acc());
            }
        }
        let mut s = Self::ACC_ZERO;
        for l in lanes {
            s = Self::acc_add(s, l);
        }
        for &v in rest {
            s = Self::acc_add(s, v.acc());
        }
        s
    }
}

macro_rules! float_num {
    ($($t:ty),*) => {$(
        impl Num for $t {
            type Acc = f64;
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const ACC_ZERO: f64 = 0.0;
            const ACC_ONE: f64 = 1.0;
            #[inline(always)] fn acc(self) -> f64 { self as f64 }
            #[inline(always)] fn from_acc(a: f64) -> Self { a as $t }
            #[inline(always)] fn acc_add(a: f64, b: f64) -> f64 { a + b }
            #[inline(always)] fn acc_mul(a: f64, b: f64) -> f64 { a * b }
            #[inline(always)] fn add(self, o: Self) -> Self { self + o }
            #[inline(always)] fn sub(self, o: Self) -> Self { self - o }
            #[inline(always)] fn mul(self, o: Self) -> Self { self * o }
            #[inline(always)] fn div(self, o: Self) -> Self { self / o }
            #[inline(always)] fn neg(self) -> Self { -self }
            #[inline(always)] fn abs(self) -> Self { if self < 0.0 { -self } else if self == 0.0 { 0.0 } else { self } }
            #[inline(always)] fn is_nan(self) -> bool { self != self }
            #[inline(always)] fn sign(self) -> Self {
                if self > 0.0 { 1.0 } else if self < 0.0 { -1.0 } else { self }
            }
        }
    )*};
}
float_num!(f32, f64);

impl Num for i32 {
    type Acc = i32;
    const ZERO: Self = 0;
    const ONE: Self = 1;
    const ACC_ZERO: i32 = 0;
    const ACC_ONE: i32 = 1;
    #[inline(always)]
    fn acc(self) -> i32 {
        self
    }
    #[inline(always)]
    fn from_acc(a: i32) -> Self {
        a
    }
    #[inline(always)]
    fn acc_add(a: i32, b: i32) -> i32 {
        a.wrapping_add(b)
    }
    #[inline(always)]
    fn acc_mul(a: i32, b: i32) -> i32 {
        a.wrapping_mul(b)
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        self.wrapping_sub(o)
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        self.wrapping_mul(o)
    }
    #[inline(always)]
    fn div(self, o: Self) -> Self {
        if o == 0 { 0 } else { self.wrapping_div(o) }
    }
    #[inline(always)]
    fn neg(self) -> Self {
        self.wrapping_neg()
    }
    #[inline(always)]
    fn abs(self) -> Self {
        self.wrapping_abs()
    }
    #[inline(always)]
    fn sign(self) -> Self {
        self.signum()
    }
}

impl Num for u32 {
    type Acc = u32;
    const ZERO: Self = 0;
    const ONE: Self = 1;
    const ACC_ZERO: u32 = 0;
    const ACC_ONE: u32 = 1;
    #[inline(always)]
    fn acc(self) -> u32 {
        self
    }
    #[inline(always)]
    fn from_acc(a: u32) -> Self {
        a
    }
    #[inline(always)]
    fn acc_add(a: u32, b: u32) -> u32 {
        a.wrapping_add(b)
    }
    #[inline(always)]
    fn acc_mul(a: u32, b: u32) -> u32 {
        a.wrapping_mul(b)
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        self.wrapping_sub(o)
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        self.wrapping_mul(o)
    }
    #[inline(always)]
    fn div(self, o: Self) -> Self {
        self.checked_div(o).unwrap_or(0)
    }
    #[inline(always)]
    fn neg(self) -> Self {
        self.wrapping_neg()
    }
    #[inline(always)]
    fn abs(self) -> Self {
        self
    }
    #[inline(always)]
    fn sign(self) -> Self {
        (self > 0) as u32
    }
}

/// Adds every `len`-element block of `parts` after the first into the first: the per-thread
/// partial results of a product split along its reduction.
pub(crate) fn sum_into_first<T: Float>(parts: &mut [T], len: usize) {
    if let Some((first, rest)) = parts.split_at_mut_checked(len) {
        for part in rest.chunks_exact(len.max(1)) {
            for (d, &v) in first.iter_mut().zip(part) {
                *d = *d + v;
            }
        }
    }
}

/// A float element the kernels compute in (f16 is promoted to f32 before reaching them).
pub(crate) trait Float:
    Num<Acc = f64>
    + Into<f64>
    + core::ops::Add<Output = Self>
    + core::ops::Sub<Output = Self>
    + core::ops::Mul<Output = Self>
    + core::ops::Div<Output = Self>
    + core::ops::Neg<Output = Self>
{
    fn from_f(v: f64) -> Self;
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn sqrt(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn tanh(self) -> Self;
    fn erf(self) -> Self;
    fn floor(self) -> Self;
    fn ceil(self) -> Self;
    /// Round half to even.
    fn rint(self) -> Self;
    fn powf(self, p: Self) -> Self;
    /// `if m { a } else { b }` on the bits: never a branch, which mispredicts on data.
    fn select(m: bool, a: Self, b: Self) -> Self;
    /// `max(self, 0)`, NaN staying NaN: the table's ReLU and a product's fused one.
    #[inline(always)]
    fn relu(self) -> Self {
        if self > Self::ZERO || self.is_nan() {
            self
        } else {
            Self::ZERO
        }
    }
    /// The GEMM of the no_std and wasm32 builds, where the `gemm` crate is too large: kiln's
    /// SIMD128 kernel ([`super::gemm`]) for f32, matrixmultiply's for f64.
    #[cfg_attr(all(feature = "std", not(target_arch = "wasm32")), allow(dead_code))]
    const PORTABLE_GEMM: MatrixMultiply<Self>;
    /// The values as f32 when this type is f32: the kernels written for f32 alone take them
    /// (Winograd's convolution, [`super::winograd`], whose transforms' rounding f32 absorbs;
    /// f64 keeps the direct product as the reference).
    fn as_f32(v: &[Self]) -> Option<&[f32]>;
    /// The values as f32, writable, when `Self` is f32.
    fn as_f32_mut(v: &mut [Self]) -> Option<&mut [f32]>;
    /// `c = a b + beta * c` with arbitrary strides: the `gemm` crate on native `std` builds,
    /// [`Float::PORTABLE_GEMM`] elsewhere. `parallel`: spread it over the thread pool (callers already
    /// running one GEMM per thread pass `false`).
    ///
    /// # Safety
    /// Every element addressed by the dimensions and strides must lie inside the buffers, and
    /// `c` must not alias `a` or `b`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        beta: Self,
        c: *mut Self,
        rsc: isize,
        csc: isize,
        parallel: bool,
    ) {
        // SAFETY (both arms): forwarded from the caller's contract.
        #[cfg(all(feature = "std", not(target_arch = "wasm32")))]
        unsafe {
            fast_gemm(
                m,
                k,
                n,
                [a, b],
                [rsa, csa, rsb, csb],
                beta,
                c,
                [rsc, csc],
                parallel,
            )
        }
        #[cfg(not(all(feature = "std", not(target_arch = "wasm32"))))]
        unsafe {
            portable_gemm(
                m,
                k,
                n,
                [a, b],
                [rsa, csa, rsb, csb],
                beta,
                c,
                [rsc, csc],
                parallel,
            )
        }
    }
}

/// [`Float::PORTABLE_GEMM`]; with `parallel` and more than one thread (the threaded wasm32
/// build), `c`'s rows (or columns, when it is wider than tall) are cut into one block per
/// thread, each its own product.
///
/// # Safety
/// As [`Float::gemm`].
#[cfg(not(all(feature = "std", not(target_arch = "wasm32"))))]
#[allow(clippy::too_many_arguments)]
unsafe fn portable_gemm<T: Float>(
    m: usize,
    k: usize,
    n: usize,
    [a, b]: [*const T; 2],
    [rsa, csa, rsb, csb]: [isize; 4],
    beta: T,
    c: *mut T,
    [rsc, csc]: [isize; 2],
    parallel: bool,
) {
    let threads = if parallel && super::par::worth_splitting(m * k * n / 4) {
        super::par::threads()
    } else {
        1
    };
    let len = m.max(n);
    // Whole micro-kernel tiles (8x8, gemm.rs) per block.
    let piece = len.div_ceil(threads).next_multiple_of(8);
    if piece >= len {
        // SAFETY: forwarded from the caller's contract.
        unsafe { (T::PORTABLE_GEMM)(m, k, n, T::ONE, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc) };
        return;
    }
    /// The operands, shared by the threads: each writes its own block of `c`.
    struct Operands<T>([*const T; 2], *mut T);
    // SAFETY: the blocks of `c` are disjoint, and `a` and `b` are only read.
    unsafe impl<T> Sync for Operands<T> {}
    impl<T> Operands<T> {
        // A method, so that closures capture the whole (Sync) struct, not its pointer fields.
        fn get(&self) -> ([*const T; 2], *mut T) {
            (self.0, self.1)
        }
    }
    let ops = Operands([a, b], c);
    let rows = m >= n;
    super::par::for_each((0..len).step_by(piece).collect(), |s: usize| {
        let ([a, b], c) = ops.get();
        let l = piece.min(len - s);
        let s = s as isize;
        // SAFETY: rows (or columns) s..s+l of the caller's product, inside its buffers.
        unsafe {
            if rows {
                let (a, c) = (a.offset(s * rsa), c.offset(s * rsc));
                (T::PORTABLE_GEMM)(l, k, n, T::ONE, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc)
            } else {
                let (b, c) = (b.offset(s * csb), c.offset(s * csc));
                (T::PORTABLE_GEMM)(m, k, l, T::ONE, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc)
            }
        }
    });
}

/// The signature of `matrixmultiply::{sgemm, dgemm}` (and of `gemm::sgemm`).
pub(crate) type MatrixMultiply<T> = unsafe fn(
    usize,
    usize,
    usize,
    T,
    *const T,
    isize,
    isize,
    *const T,
    isize,
    isize,
    T,
    *mut T,
    isize,
    isize,
);

/// `c = beta * c + a @ b` through the `gemm` crate, which picks AVX-512, AVX2 or NEON kernels at
/// run time and splits the work over rayon's threads (about 1.2-1.8x matrixmultiply's speed on an
/// AVX-512 machine).
///
/// # Safety
/// As [`Float::gemm`].
#[cfg(all(feature = "std", not(target_arch = "wasm32")))]
#[allow(clippy::too_many_arguments)]
unsafe fn fast_gemm<T: Float>(
    m: usize,
    k: usize,
    n: usize,
    [a, b]: [*const T; 2],
    [rsa, csa, rsb, csb]: [isize; 4],
    beta: T,
    c: *mut T,
    [rsc, csc]: [isize; 2],
    parallel: bool,
) {
    // gemm computes dst = alpha * dst + beta * lhs @ rhs, with column strides first.
    let read_dst = beta != T::ZERO;
    // SAFETY: forwarded from the caller's contract.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c,
            csc,
            rsc,
            read_dst,
            a,
            csa,
            rsa,
            b,
            csb,
            rsb,
            beta,
            T::ONE,
            false,
            false,
            false,
            if parallel {
                gemm::Parallelism::Rayon(0)
            } else {
                gemm::Parallelism::None
            },
        )
    }
}

// f32's exp, log, sin, cos, tanh, erf and pow are libm's f64 ones, rounded: one set of software
// functions in the web package instead of two (3.4 KB of the gzipped CPU-only module, issue 18,
// bytes), and at least as accurate. The page's hot loops do not call them (softmax already
// computes in f64).
impl Float for f32 {
    #[inline(always)]
    fn select(m: bool, a: Self, b: Self) -> Self {
        let m = u32::from(m).wrapping_neg();
        Self::from_bits((a.to_bits() & m) | (b.to_bits() & !m))
    }
    fn from_f(v: f64) -> Self {
        v as f32
    }
    fn exp(self) -> Self {
        libm::exp(self.into()) as f32
    }
    fn ln(self) -> Self {
        libm::log(self.into()) as f32
    }
    fn sqrt(self) -> Self {
        crate::math::sqrtf(self)
    }
    fn sin(self) -> Self {
        libm::sin(self.into()) as f32
    }
    fn cos(self) -> Self {
        libm::cos(self.into()) as f32
    }
    fn tanh(self) -> Self {
        libm::tanh(self.into()) as f32
    }
    fn erf(self) -> Self {
        libm::erf(self.into()) as f32
    }
    fn floor(self) -> Self {
        crate::math::floorf(self)
    }
    fn ceil(self) -> Self {
        crate::math::ceilf(self)
    }
    fn rint(self) -> Self {
        crate::math::rintf(self)
    }
    fn powf(self, p: Self) -> Self {
        libm::pow(self.into(), p.into()) as f32
    }
    const PORTABLE_GEMM: MatrixMultiply<f32> = super::gemm::sgemm;
    fn as_f32(v: &[f32]) -> Option<&[f32]> {
        Some(v)
    }
    fn as_f32_mut(v: &mut [f32]) -> Option<&mut [f32]> {
        Some(v)
    }
}

impl Float for f64 {
    #[inline(always)]
    fn select(m: bool, a: Self, b: Self) -> Self {
        let m = u64::from(m).wrapping_neg();
        Self::from_bits((a.to_bits() & m) | (b.to_bits() & !m))
    }
    fn from_f(v: f64) -> Self {
        v
    }
    fn exp(self) -> Self {
        libm::exp(self)
    }
    fn ln(self) -> Self {
        libm::log(self)
    }
    fn sqrt(self) -> Self {
        crate::math::sqrt(self)
    }
    fn sin(self) -> Self {
        libm::sin(self)
    }
    fn cos(self) -> Self {
        libm::cos(self)
    }
    fn tanh(self) -> Self {
        libm::tanh(self)
    }
    fn erf(self) -> Self {
        libm::erf(self)
    }
    fn floor(self) -> Self {
        crate::math::floor(self)
    }
    fn ceil(self) -> Self {
        crate::math::ceil(self)
    }
    fn rint(self) -> Self {
        crate::math::rint(self)
    }
    fn powf(self, p: Self) -> Self {
        libm::pow(self, p)
    }
    const PORTABLE_GEMM: MatrixMultiply<f64> = matrixmultiply::dgemm;
    fn as_f32(_: &[f64]) -> Option<&[f32]> {
        None
    }
    fn as_f32_mut(_: &mut [f64]) -> Option<&mut [f32]> {
        None
    }
}
