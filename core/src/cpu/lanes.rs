//! Four f32 lanes, `F4`: a SIMD128 `v128` on wasm32 and a plain array elsewhere, so that the
//! kernels written on them (the GEMM, Winograd's transforms) also run and are tested natively.

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod imp {
    use core::arch::wasm32::*;

    /// Four f32 lanes in one SIMD128 register.
    #[derive(Clone, Copy)]
    pub(in crate::cpu) struct F4(v128);

    impl F4 {
        #[inline(always)]
        pub(in crate::cpu) fn splat(v: f32) -> F4 {
            F4(f32x4_splat(v))
        }
        /// # Safety
        /// `p` must be valid for reading four f32s (any alignment).
        #[inline(always)]
        pub(in crate::cpu) unsafe fn load(p: *const f32) -> F4 {
            // SAFETY: forwarded; v128_load has no alignment requirement.
            F4(unsafe { v128_load(p.cast()) })
        }
        /// # Safety
        /// `p` must be valid for writing four f32s (any alignment).
        #[inline(always)]
        pub(in crate::cpu) unsafe fn store(self, p: *mut f32) {
            // SAFETY: forwarded; v128_store has no alignment requirement.
            unsafe { v128_store(p.cast(), self.0) }
        }
        /// `self + a * b` (no fused multiply-add in SIMD128).
        #[inline(always)]
        pub(in crate::cpu) fn mul_add(self, a: F4, b: F4) -> F4 {
            F4(f32x4_add(self.0, f32x4_mul(a.0, b.0)))
        }
        /// `self + o`.
        #[inline(always)]
        pub(in crate::cpu) fn add(self, o: F4) -> F4 {
            F4(f32x4_add(self.0, o.0))
        }
        /// `self - o`.
        #[inline(always)]
        pub(in crate::cpu) fn sub(self, o: F4) -> F4 {
            F4(f32x4_sub(self.0, o.0))
        }
        #[inline(always)]
        pub(in crate::cpu) fn mul(self, o: F4) -> F4 {
            F4(f32x4_mul(self.0, o.0))
        }
        /// The larger lane of each pair, NaN where either is and `self`'s on ties, as
        /// `Float::maximum` (`f32x4_max` would give +0 for -0 against +0).
        #[inline(always)]
        pub(in crate::cpu) fn maximum(self, o: F4) -> F4 {
            let keep = v128_or(f32x4_ne(self.0, self.0), f32x4_le(o.0, self.0));
            F4(v128_bitselect(self.0, o.0, keep))
        }
        /// The even lanes of `self` then `o`, and their odd lanes: neighbouring pairs split.
        #[inline(always)]
        pub(in crate::cpu) fn unzip(self, o: F4) -> (F4, F4) {
            (
                F4(i32x4_shuffle::<0, 2, 4, 6>(self.0, o.0)),
                F4(i32x4_shuffle::<1, 3, 5, 7>(self.0, o.0)),
            )
        }
        /// Rows of a 4x4 block as its columns.
        #[inline(always)]
        pub(in crate::cpu) fn transpose([a, b, c, d]: [F4; 4]) -> [F4; 4] {
            let lo = |x: F4, y: F4| i32x4_shuffle::<0, 4, 1, 5>(x.0, y.0);
            let hi = |x: F4, y: F4| i32x4_shuffle::<2, 6, 3, 7>(x.0, y.0);
            let (t0, t1, t2, t3) = (lo(a, b), lo(c, d), hi(a, b), hi(c, d));
            [
                F4(i32x4_shuffle::<0, 1, 4, 5>(t0, t1)),
                F4(i32x4_shuffle::<2, 3, 6, 7>(t0, t1)),
                F4(i32x4_shuffle::<0, 1, 4, 5>(t2, t3)),
                F4(i32x4_shuffle::<2, 3, 6, 7>(t2, t3)),
            ]
        }
        /// Lane `l` in every lane (`l` is a constant once the kernel's loops are unrolled).
        #[inline(always)]
        pub(in crate::cpu) fn lane(self, l: usize) -> F4 {
            F4(match l {
                0 => i32x4_shuffle::<0, 0, 0, 0>(self.0, self.0),
                1 => i32x4_shuffle::<1, 1, 1, 1>(self.0, self.0),
                2 => i32x4_shuffle::<2, 2, 2, 2>(self.0, self.0),
                _ => i32x4_shuffle::<3, 3, 3, 3>(self.0, self.0),
            })
        }
        #[inline(always)]
        pub(in crate::cpu) fn to_array(self) -> [f32; 4] {
            [
                f32x4_extract_lane::<0>(self.0),
                f32x4_extract_lane::<1>(self.0),
                f32x4_extract_lane::<2>(self.0),
                f32x4_extract_lane::<3>(self.0),
            ]
        }
    }
}

#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
mod imp {
    /// Four f32 lanes: the portable stand-in for a SIMD register.
    #[derive(Clone, Copy)]
    pub(in crate::cpu) struct F4([f32; 4]);

    impl F4 {
        #[inline(always)]
        pub(in crate::cpu) fn splat(v: f32) -> F4 {
            F4([v; 4])
        }
        /// # Safety
        /// `p` must be valid for reading four f32s.
        #[inline(always)]
        pub(in crate::cpu) unsafe fn load(p: *const f32) -> F4 {
            // SAFETY: forwarded.
            F4(unsafe { p.cast::<[f32; 4]>().read_unaligned() })
        }
        /// # Safety
        /// `p` must be valid for writing four f32s.
        #[inline(always)]
        pub(in crate::cpu) unsafe fn store(self, p: *mut f32) {
            // SAFETY: forwarded.
            unsafe { p.cast::<[f32; 4]>().write_unaligned(self.0) }
        }
        /// `self + a * b`, unfused as on SIMD128.
        #[inline(always)]
        pub(in crate::cpu) fn mul_add(self, a: F4, b: F4) -> F4 {
            F4(core::array::from_fn(|i| self.0[i] + a.0[i] * b.0[i]))
        }
        /// `self + o`.
        #[inline(always)]
        pub(in crate::cpu) fn add(self, o: F4) -> F4 {
            F4(core::array::from_fn(|i| self.0[i] + o.0[i]))
        }
        /// `self - o`.
        #[inline(always)]
        pub(in crate::cpu) fn sub(self, o: F4) -> F4 {
            F4(core::array::from_fn(|i| self.0[i] - o.0[i]))
        }
        #[inline(always)]
        pub(in crate::cpu) fn mul(self, o: F4) -> F4 {
            F4(core::array::from_fn(|i| self.0[i] * o.0[i]))
        }
        /// The larger lane of each pair, NaN where either is and `self`'s on ties.
        #[inline(always)]
        pub(in crate::cpu) fn maximum(self, o: F4) -> F4 {
            use crate::cpu::num::Num;
            F4(core::array::from_fn(|i| Num::maximum(self.0[i], o.0[i])))
        }
        /// The even lanes of `self` then `o`, and their odd lanes: neighbouring pairs split.
        #[inline(always)]
        pub(in crate::cpu) fn unzip(self, o: F4) -> (F4, F4) {
            let at = |j: usize| if j < 4 { self.0[j] } else { o.0[j - 4] };
            (
                F4(core::array::from_fn(|i| at(2 * i))),
                F4(core::array::from_fn(|i| at(2 * i + 1))),
            )
        }
        /// Rows of a 4x4 block as its columns.
        #[inline(always)]
        pub(in crate::cpu) fn transpose(r: [F4; 4]) -> [F4; 4] {
            core::array::from_fn(|i| F4(core::array::from_fn(|j| r[j].0[i])))
        }
        /// Lane `l` in every lane.
        #[inline(always)]
        pub(in crate::cpu) fn lane(self, l: usize) -> F4 {
            F4([self.0[l]; 4])
        }
        #[inline(always)]
        pub(in crate::cpu) fn to_array(self) -> [f32; 4] {
            self.0
        }
    }
}

pub(super) use imp::F4;
