//! ONNX's narrow element types, which no kiln dtype holds: `BFLOAT16`, the `FLOAT8*` family,
//! `FLOAT8E8M0`, `FLOAT6*`, `FLOAT4E2M1` and the `[U]INT4` / `[U]INT2` integers.
//!
//! A value of such a type is carried as a kiln tensor of the type's values (floats in f32,
//! which holds every one of them exactly; the integers in i32) tagged with its ONNX type
//! ([`crate::Value::Narrow`]). This module is where those values are made: [`decode`] turns a
//! stored code into its value, and [`round`] turns any number into the nearest value of a
//! narrow type as ONNX's `Cast` defines it (round to nearest even, the `saturate` attribute,
//! NaN and infinities, `round_mode` for `FLOAT8E8M0`, wrapping for the small integers).

use crate::DataType;
use alloc::format;
use kiln_core::{Error, Result};

/// How a cast to `FLOAT8E8M0` (a power of two) rounds: ONNX's `round_mode` attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoundMode {
    /// To the next power of two away from zero (`"up"`, the default).
    Up,
    /// To the power of two toward zero (`"down"`).
    Down,
    /// To the nearest power of two, ties up (`"nearest"`).
    Nearest,
}

impl RoundMode {
    /// The mode an ONNX `round_mode` string names, or an error naming what was found.
    pub fn parse(s: &str) -> Result<RoundMode> {
        match s {
            "up" => Ok(RoundMode::Up),
            "down" => Ok(RoundMode::Down),
            "nearest" => Ok(RoundMode::Nearest),
            other => Err(Error::invalid(
                "onnx",
                format!("round_mode must be \"up\", \"down\" or \"nearest\", got \"{other}\""),
            )),
        }
    }
}

/// Whether `t` is one of the narrow types this module handles.
pub fn is_narrow(t: DataType) -> bool {
    t == DataType::Bfloat16
        || t == DataType::Float8e8m0
        || int_bits(t).is_some()
        || format(t).is_some()
}

/// Whether narrow type `t` is an integer type (its values are carried in i32).
pub fn is_int(t: DataType) -> bool {
    int_bits(t).is_some()
}

/// The width and signedness of the narrow integer types.
fn int_bits(t: DataType) -> Option<(u32, bool)> {
    match t {
        DataType::Int4 => Some((4, true)),
        DataType::Uint4 => Some((4, false)),
        DataType::Int2 => Some((2, true)),
        DataType::Uint2 => Some((2, false)),
        _ => None,
    }
}

/// The smallest and largest value of narrow integer type `t` (`None` for other types).
pub fn int_range(t: DataType) -> Option<(i64, i64)> {
    let (bits, signed) = int_bits(t)?;
    Some(if signed {
        (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1)
    } else {
        (0, (1i64 << bits) - 1)
    })
}

/// What a float format has beyond its finite values.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Special {
    /// IEEE-like: the top exponent holds the infinities (mantissa 0) and NaNs (`E5M2`).
    Ieee,
    /// Finite with NaN: only the all-ones exponent and mantissa is NaN (`E4M3FN`).
    Fn,
    /// Finite, NaN, unsigned zero: the code with only the sign bit set is the one NaN, and
    /// there is no negative zero (`*FNUZ`).
    Fnuz,
    /// Finite only: no NaN, no infinities (`FLOAT4E2M1`, `FLOAT6*`).
    None,
}

/// A small binary float format: 1 sign bit, `exp` exponent bits, `man` mantissa bits.
#[derive(Clone, Copy)]
struct Format {
    exp: u32,
    man: u32,
    bias: i32,
    special: Special,
}

fn format(t: DataType) -> Option<Format> {
    let f = |exp, man, bias, special| {
        Some(Format {
            exp,
            man,
            bias,
            special,
        })
    };
    match t {
        DataType::Float8e4m3fn => f(4, 3, 7, Special::Fn),
        DataType::Float8e4m3fnuz => f(4, 3, 8, Special::Fnuz),
        DataType::Float8e5m2 => f(5, 2, 15, Special::Ieee),
        DataType::Float8e5m2fnuz => f(5, 2, 16, Special::Fnuz),
        DataType::Float4e2m1 => f(2, 1, 1, Special::None),
        DataType::Float6e2m3 => f(2, 3, 1, Special::None),
        DataType::Float6e3m2 => f(3, 2, 3, Special::None),
        _ => None,
    }
}

impl Format {
    /// The sign bit.
    fn sign(self) -> u8 {
        1 << (self.exp + self.man)
    }

    /// The largest code of a finite positive value.
    fn max_code(self) -> u8 {
        let all = self.sign() - 1;
        match self.special {
            Special::Ieee => all - (1 << self.man), // below the infinity
            Special::Fn => all - 1,                 // below the NaN
            Special::Fnuz | Special::None => all,
        }
    }

    /// The code's value.
    fn decode(self, code: u8) -> f64 {
        let code = code & (self.sign() | (self.sign() - 1));
        let neg = code & self.sign() != 0;
        let mag = code & (self.sign() - 1);
        let e = u32::from(mag >> self.man);
        let m = f64::from(mag & ((1 << self.man) - 1));
        let top = (1 << self.exp) - 1;
        match self.special {
            Special::Fnuz if neg && mag == 0 => return f64::NAN,
            Special::Fn if mag == self.sign() - 1 => return f64::NAN,
            Special::Ieee if e == top => {
                return match (m == 0.0, neg) {
                    (true, false) => f64::INFINITY,
                    (true, true) => f64::NEG_INFINITY,
                    _ => f64::NAN,
                };
            }
            _ => {}
        }
        let scale = f64::from(1u32 << self.man);
        let v = if e == 0 {
            m / scale * pow2(1 - self.bias)
        } else {
            (1.0 + m / scale) * pow2(e as i32 - self.bias)
        };
        if neg { -v } else { v }
    }

    /// The code of `x` rounded to nearest, ties to the even code.
    fn encode(self, x: f64, saturate: bool) -> u8 {
        let max = self.max_code();
        let overflow = |neg: bool| -> u8 {
            let s = if neg { self.sign() } else { 0 };
            match (saturate, self.special) {
                (true, _) | (_, Special::None) => s | max,
                (false, Special::Ieee) => s | (max + 1), // the infinity
                (false, Special::Fn) => s | (self.sign() - 1),
                (false, Special::Fnuz) => self.sign(),
            }
        };
        if x.is_nan() {
            return match self.special {
                Special::Ieee => (self.sign() - 1) - 1, // a NaN with a nonzero mantissa
                Special::Fn => self.sign() - 1,
                Special::Fnuz => self.sign(),
                // no NaN: ONNX's reference gives the code of negative zero
                Special::None => self.sign(),
            };
        }
        let neg = x.is_sign_negative();
        let a = libm::fabs(x);
        let top = self.decode(max);
        let code = if a > top {
            // beyond the largest finite value: the next step up would be one ulp above it
            let ulp = top - self.decode(max - 1);
            let half = top + ulp / 2.0;
            if a < half || (a == half && max.is_multiple_of(2)) {
                max
            } else {
                return overflow(neg);
            }
        } else {
            // the first code whose value is at least `a`, then the nearer of it and the one below
            let (mut lo, mut hi) = (0u8, max);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if self.decode(mid) < a {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            if lo == 0 {
                0
            } else {
                let (below, above) = (self.decode(lo - 1), self.decode(lo));
                let (d_lo, d_hi) = (a - below, above - a);
                if d_lo < d_hi || (d_lo == d_hi && (lo - 1).is_multiple_of(2)) {
                    lo - 1
                } else {
                    lo
                }
            }
        };
        if neg && !(code == 0 && self.special == Special::Fnuz) {
            code | self.sign()
        } else {
            code
        }
    }
}

/// 2^e as f64 (for the small exponents of the narrow formats).
fn pow2(e: i32) -> f64 {
    f64::from_bits(((1023 + i64::from(e)) as u64) << 52)
}

/// The value of stored code `code` of narrow type `t`: a float type's value (NaN and the
/// infinities included), an integer type's value (sign-extended for `INT4`/`INT2`).
/// `BFLOAT16`'s 16-bit patterns go through [`bf16_value`] instead.
pub fn decode(t: DataType, code: u8) -> Result<f64> {
    if let Some((bits, signed)) = int_bits(t) {
        let v = i64::from(code & ((1u8 << bits) - 1));
        let v = if signed && v >= 1 << (bits - 1) {
            v - (1 << bits)
        } else {
            v
        };
        return Ok(v as f64);
    }
    if t == DataType::Float8e8m0 {
        return Ok(if code == 0xFF {
            f64::NAN
        } else {
            pow2(i32::from(code) - 127)
        });
    }
    match format(t) {
        Some(f) => Ok(f.decode(code)),
        None => Err(not_narrow(t)),
    }
}

/// The value of a `BFLOAT16` bit pattern.
pub fn bf16_value(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// `x` as `BFLOAT16`'s bit pattern: rounded to nearest even (a NaN stays a quiet NaN, out of
/// range goes to infinity). An f64 is first rounded to f32.
pub fn bf16_bits(x: f64) -> u16 {
    let x = x as f32;
    if x.is_nan() {
        return if x.is_sign_negative() { 0xFFC0 } else { 0x7FC0 };
    }
    let b = x.to_bits();
    let odd = (b >> 16) & 1;
    (b.wrapping_add(0x7FFF + odd) >> 16) as u16
}

/// `x` as a `FLOAT8E8M0` code: the sign is dropped, the magnitude rounded to a power of two as
/// `mode` says, clamped to 2^-127 at the bottom (zero included); NaN is code 0xFF, as is a value
/// beyond 2^127 (an infinity too) unless `saturate`, which makes it 2^127 (0xFE).
pub fn e8m0_code(x: f64, saturate: bool, mode: RoundMode) -> u8 {
    if x.is_nan() {
        return 0xFF;
    }
    let a = libm::fabs(x);
    if a.is_infinite() {
        return if saturate { 0xFE } else { 0xFF };
    }
    if a <= pow2(-127) {
        return 0;
    }
    // a = 2^e * (1 + f), f in [0, 1)
    let mut e = libm::floor(libm::log2(a)) as i32;
    if pow2(e) > a {
        e -= 1;
    } else if pow2(e + 1) <= a {
        e += 1;
    }
    let exact = pow2(e) == a;
    let e = match mode {
        RoundMode::Down => e,
        RoundMode::Up if exact => e,
        RoundMode::Up => e + 1,
        RoundMode::Nearest if a >= 1.5 * pow2(e) => e + 1,
        RoundMode::Nearest => e,
    };
    let code = e + 127;
    if code >= 0xFF {
        if saturate { 0xFE } else { 0xFF }
    } else {
        code.max(0) as u8
    }
}

/// The code of `x` in narrow float type `t` (not `BFLOAT16` or `FLOAT8E8M0`, which have
/// [`bf16_bits`] and [`e8m0_code`]): round to nearest even; beyond the largest finite value
/// (infinities included), that value when `saturate`, else the type's infinity (`E5M2`) or NaN.
/// The types without NaN or infinities (`FLOAT4E2M1`, `FLOAT6*`) always saturate, and take
/// NaN to negative zero as ONNX's reference does.
pub fn float_code(t: DataType, x: f64, saturate: bool) -> Result<u8> {
    match format(t) {
        Some(f) => Ok(f.encode(x, saturate)),
        None => Err(not_narrow(t)),
    }
}

/// `x` cast to narrow type `t`, as the value it becomes: ONNX `Cast` with its `saturate` and
/// `round_mode` attributes. The integer types take `x` truncated toward zero and wrapped into
/// their range (two's complement), as a cast to int8 does; NaN becomes 0.
pub fn round(t: DataType, x: f64, saturate: bool, mode: RoundMode) -> Result<f64> {
    if let Some((bits, signed)) = int_bits(t) {
        let v = if x.is_nan() { 0 } else { libm::trunc(x) as i64 };
        let m = v & ((1 << bits) - 1);
        return Ok(if signed && m >= 1 << (bits - 1) {
            m - (1 << bits)
        } else {
            m
        } as f64);
    }
    match t {
        DataType::Bfloat16 => Ok(f64::from(bf16_value(bf16_bits(x)))),
        DataType::Float8e8m0 => decode(t, e8m0_code(x, saturate, mode)),
        _ => decode(t, float_code(t, x, saturate)?),
    }
}

/// `x` rounded to nearest even and clamped into narrow type `t`: what `QuantizeLinear` does
/// (the integer types saturate there instead of wrapping; float types round as a saturating
/// [`round`]).
pub fn quantize(t: DataType, x: f64, saturate: bool) -> Result<f64> {
    match int_range(t) {
        Some((lo, hi)) => Ok(round_even(x).clamp(lo as f64, hi as f64)),
        None => round(t, x, saturate, RoundMode::Up),
    }
}

/// `x` rounded to the nearest integer, ties to even (NaN stays NaN).
pub fn round_even(x: f64) -> f64 {
    let r = libm::round(x); // half away from zero
    if libm::fabs(r - x) == 0.5 && r % 2.0 != 0.0 {
        // a tie that went to the odd neighbour: take the even one
        if x > 0.0 { r - 1.0 } else { r + 1.0 }
    } else {
        r
    }
}

fn not_narrow(t: DataType) -> Error {
    Error::unsupported(
        "onnx",
        format!("element type {} is not a narrow type", t.as_str_name()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use DataType as D;

    fn code(t: DataType, x: f64) -> u8 {
        float_code(t, x, true).unwrap()
    }

    fn nosat(t: DataType, x: f64) -> u8 {
        float_code(t, x, false).unwrap()
    }

    fn val(t: DataType, c: u8) -> f64 {
        decode(t, c).unwrap()
    }

    #[test]
    fn e4m3fn_codes() {
        // s.eeee.mmm, bias 7: 0x7E = 1.110b * 2^8 = 448, the largest; 0x7F and 0xFF are NaN
        assert_eq!(val(D::Float8e4m3fn, 0x7E), 448.0);
        assert_eq!(val(D::Float8e4m3fn, 0xFE), -448.0);
        assert!(val(D::Float8e4m3fn, 0x7F).is_nan());
        assert!(val(D::Float8e4m3fn, 0xFF).is_nan());
        assert_eq!(val(D::Float8e4m3fn, 0x38), 1.0); // exponent 7 = bias
        // subnormals: 0.mmm * 2^-6, the smallest 2^-9
        assert_eq!(val(D::Float8e4m3fn, 0x01), 2f64.powi(-9));
        assert_eq!(val(D::Float8e4m3fn, 0x07), 7.0 * 2f64.powi(-9));
        assert_eq!(val(D::Float8e4m3fn, 0x08), 2f64.powi(-6));
        // -0 exists
        assert!(val(D::Float8e4m3fn, 0x80).is_sign_negative());
        for c in 0..=255u8 {
            let v = val(D::Float8e4m3fn, c);
            if !v.is_nan() {
                assert_eq!(code(D::Float8e4m3fn, v), c, "code {c:#x} round trips");
            }
        }
    }

    #[test]
    fn e4m3fn_rounding_and_saturation() {
        let t = D::Float8e4m3fn;
        // 1 + 1/16 lies halfway between 1 (0x38) and 1.125 (0x39): ties to the even code
        assert_eq!(code(t, 1.0625), 0x38);
        // 1.125 + 1/16 lies halfway between 0x39 and 0x3A: to 0x3A
        assert_eq!(code(t, 1.1875), 0x3A);
        assert_eq!(code(t, 1.07), 0x39);
        // 464 is halfway between 448 and the next step (480): 448's mantissa 110 is even
        assert_eq!(nosat(t, 464.0), 0x7E);
        assert_eq!(nosat(t, 465.0), 0x7F); // overflow without saturation is NaN
        assert_eq!(code(t, 1e6), 0x7E);
        assert_eq!(code(t, f64::INFINITY), 0x7E);
        assert_eq!(code(t, f64::NEG_INFINITY), 0xFE);
        assert_eq!(nosat(t, f64::INFINITY) & 0x7F, 0x7F);
        assert_eq!(code(t, f64::NAN) & 0x7F, 0x7F);
        // below half the smallest subnormal: signed zero
        assert_eq!(code(t, 2f64.powi(-11)), 0x00);
        assert_eq!(code(t, -1e-7), 0x80);
        // exactly half the smallest subnormal ties to zero (even); above it, to 2^-9
        assert_eq!(code(t, 2f64.powi(-10)), 0x00);
        assert_eq!(code(t, 2f64.powi(-10) * 1.01), 0x01);
    }

    #[test]
    fn fnuz_types() {
        // E4M3FNUZ: bias 8, 0x80 is the only NaN, no negative zero, 0x7F = 1.111b * 2^7 = 240
        let t = D::Float8e4m3fnuz;
        assert_eq!(val(t, 0x7F), 240.0);
        assert!(val(t, 0x80).is_nan());
        assert_eq!(val(t, 0x40), 1.0);
        assert_eq!(val(t, 0x01), 2f64.powi(-10));
        assert_eq!(code(t, -1e-7), 0x00);
        assert_eq!(code(t, -0.0), 0x00);
        assert_eq!(code(t, f64::INFINITY), 0x7F);
        assert_eq!(code(t, f64::NEG_INFINITY), 0xFF);
        assert_eq!(nosat(t, f64::INFINITY), 0x80);
        assert_eq!(nosat(t, 1e6), 0x80);
        assert_eq!(code(t, f64::NAN), 0x80);
        // E5M2FNUZ: bias 16, 0x7F = 1.11b * 2^15 = 57344
        let t = D::Float8e5m2fnuz;
        assert_eq!(val(t, 0x7F), 57344.0);
        assert_eq!(val(t, 0x40), 1.0);
        assert!(val(t, 0x80).is_nan());
        assert_eq!(val(t, 0x01), 2f64.powi(-17));
    }

    #[test]
    fn e5m2() {
        // IEEE-like: bias 15, 0x7B = 1.11b * 2^15 = 57344, 0x7C infinity, 0x7D-0x7F NaN
        let t = D::Float8e5m2;
        assert_eq!(val(t, 0x7B), 57344.0);
        assert_eq!(val(t, 0x7C), f64::INFINITY);
        assert_eq!(val(t, 0xFC), f64::NEG_INFINITY);
        assert!(val(t, 0x7E).is_nan());
        assert_eq!(val(t, 0x3C), 1.0);
        assert_eq!(val(t, 0x01), 2f64.powi(-16));
        assert_eq!(code(t, f64::INFINITY), 0x7B);
        assert_eq!(nosat(t, f64::INFINITY), 0x7C);
        assert_eq!(nosat(t, f64::NEG_INFINITY), 0xFC);
        // 57344 + 4096 is halfway to the next step (65536); 57344's mantissa 11 is odd, so
        // the tie goes up: infinity without saturation
        assert_eq!(nosat(t, 61440.0), 0x7C);
        assert_eq!(nosat(t, 61439.0), 0x7B);
        assert_eq!(code(t, 61440.0), 0x7B);
        assert!(val(t, code(t, f64::NAN)).is_nan());
    }

    #[test]
    fn float4e2m1() {
        // s.ee.m, bias 1: 0, 0.5, 1, 1.5, 2, 3, 4, 6
        let t = D::Float4e2m1;
        let want = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
        for (c, w) in want.iter().enumerate() {
            assert_eq!(val(t, c as u8), *w);
            assert_eq!(val(t, c as u8 | 8), -*w);
        }
        assert_eq!(code(t, 0.25), 0); // tie to even
        assert_eq!(code(t, 0.75), 2); // tie between 0.5 (1) and 1 (2)
        assert_eq!(code(t, -3.5), 0xE); // tie between 3 (5) and 4 (6)
        assert_eq!(code(t, 5.0), 6); // tie between 4 (6) and 6 (7)
        assert_eq!(nosat(t, 100.0), 7); // no infinity: saturates anyway
        assert_eq!(code(t, f64::NEG_INFINITY), 0xF);
    }

    #[test]
    fn bfloat16() {
        assert_eq!(bf16_bits(1.0), 0x3F80);
        assert_eq!(bf16_value(0x3F80), 1.0);
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to even (1)
        assert_eq!(bf16_bits(1.0 + 2f64.powi(-8)), 0x3F80);
        // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up
        assert_eq!(bf16_bits(1.0 + 3.0 * 2f64.powi(-8)), 0x3F82);
        assert_eq!(bf16_bits(f64::INFINITY), 0x7F80);
        assert_eq!(bf16_bits(f64::NAN), 0x7FC0);
        assert_eq!(bf16_bits(f64::from(f32::MAX)), 0x7F80); // rounds past the largest
    }

    #[test]
    fn e8m0() {
        use RoundMode::*;
        assert_eq!(val(D::Float8e8m0, 127), 1.0);
        assert_eq!(val(D::Float8e8m0, 0), 2f64.powi(-127));
        assert_eq!(val(D::Float8e8m0, 0xFE), 2f64.powi(127));
        assert!(val(D::Float8e8m0, 0xFF).is_nan());
        assert_eq!(e8m0_code(1.0, true, Up), 127);
        assert_eq!(e8m0_code(1.1, true, Up), 128);
        assert_eq!(e8m0_code(1.1, true, Down), 127);
        assert_eq!(e8m0_code(1.4, true, Nearest), 127);
        assert_eq!(e8m0_code(1.5, true, Nearest), 128);
        assert_eq!(e8m0_code(-4.0, true, Up), 129);
        assert_eq!(e8m0_code(0.0, true, Up), 0);
        assert_eq!(e8m0_code(f64::NAN, true, Up), 0xFF);
        assert_eq!(e8m0_code(f64::INFINITY, true, Up), 0xFE);
        assert_eq!(e8m0_code(f64::INFINITY, false, Up), 0xFF);
        // f32's largest value is above 2^127: up goes past the largest code
        let big = f64::from(f32::MAX);
        assert_eq!(e8m0_code(big, true, Up), 0xFE);
        assert_eq!(e8m0_code(big, false, Up), 0xFF);
        assert_eq!(e8m0_code(big, false, Down), 0xFE);
    }

    #[test]
    fn small_integers() {
        let r = |t, x| round(t, x, true, RoundMode::Up).unwrap();
        assert_eq!(val(D::Int4, 0x8), -8.0);
        assert_eq!(val(D::Int4, 0xF), -1.0);
        assert_eq!(val(D::Uint4, 0xF), 15.0);
        assert_eq!(val(D::Int2, 0x2), -2.0);
        assert_eq!(val(D::Uint2, 0x3), 3.0);
        // casts wrap (two's complement), as ONNX's int4 cast tests expect: -9 -> 7, 8 -> -8
        assert_eq!(r(D::Int4, -9.0), 7.0);
        assert_eq!(r(D::Int4, 8.0), -8.0);
        assert_eq!(r(D::Uint4, -1.0), 15.0);
        assert_eq!(r(D::Int2, -3.0), 1.0);
        assert_eq!(r(D::Uint2, 5.0), 1.0);
        assert_eq!(r(D::Int4, 2.7), 2.0);
        // quantization saturates and rounds half to even
        assert_eq!(quantize(D::Int4, 9.0, true).unwrap(), 7.0);
        assert_eq!(quantize(D::Uint4, -3.0, true).unwrap(), 0.0);
        assert_eq!(quantize(D::Int4, 2.5, true).unwrap(), 2.0);
        assert_eq!(quantize(D::Int4, -3.5, true).unwrap(), -4.0);
        assert_eq!(round_even(0.5), 0.0);
        assert_eq!(round_even(1.5), 2.0);
        assert_eq!(round_even(-2.5), -2.0);
    }
}
