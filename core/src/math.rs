//! `sqrt`, `floor`, `ceil` and `rint` (round half to even) of f64 and f32: with `std`, its
//! methods (LLVM intrinsics: one instruction each on wasm32), else libm. libm's own wasm32
//! instructions need its unstable feature, so the web package carried software versions of
//! these (issue 18, bytes). Not inlined on wasm32: inlined, LLVM vectorised every kernel loop
//! over them, which the page's models do not run (+4 KB of kernels); a call to one instruction
//! is still faster than libm's software versions it replaces.

macro_rules! std_or_libm {
    ($($name:ident($t:ty) => $method:ident;)*) => {$(
        #[cfg_attr(target_arch = "wasm32", inline(never))]
        pub(crate) fn $name(x: $t) -> $t {
            #[cfg(feature = "std")]
            return x.$method();
            #[cfg(not(feature = "std"))]
            return libm::$name(x);
        }
    )*};
}

std_or_libm! {
    sqrt(f64) => sqrt;
    floor(f64) => floor;
    ceil(f64) => ceil;
    rint(f64) => round_ties_even;
    sqrtf(f32) => sqrt;
    floorf(f32) => floor;
    ceilf(f32) => ceil;
    rintf(f32) => round_ties_even;
}
