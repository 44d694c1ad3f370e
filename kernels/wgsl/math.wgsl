// Float helpers WGSL lacks or defines loosely (#include "math.wgsl" in f32 kernels).

// erf by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7).
fn erf_(x: f32) -> f32 {
    let a = abs(x);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t
        + 0.254829592) * t;
    return sign(x) * (1.0 - poly * exp(-a * a));
}

// tanh saturates at |x| = 15 in f32; clamping keeps exp-based implementations from inf/inf.
fn tanh_(x: f32) -> f32 {
    return tanh(clamp(x, -15.0, 15.0));
}

// x^p as Rust's powf: defined for negative x with integral p, and x^0 = 1 (WGSL's pow is not).
fn pow_(x: f32, p: f32) -> f32 {
    if (p == 0.0) {
        return 1.0;
    }
    if (x < 0.0 && floor(p) == p) {
        let r = pow(-x, p);
        return select(r, -r, abs(p % 2.0) == 1.0);
    }
    return pow(x, p);
}

// NaN test on the bits: drivers that assume no NaNs fold `x != x` to false.
fn is_nan_(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}
