//! kiln's random numbers. Random tensors come from counter-based Philox-4x32-10, written with
//! 32-bit integer arithmetic only so that GPU kernels (WGSL has no 64-bit integers) reproduce it
//! bit for bit; draws made on the host (shuffles, augmentation, token sampling) come from
//! [`SplitMix64`].
//!
//! Element `i` of a random tensor with seed `s` uses one Philox block:
//!
//! ```text
//! key     = [s as u32, (s >> 32) as u32]
//! counter = [i as u32, (i >> 32) as u32, 0, 0]
//! [x0, x1, x2, x3] = philox4x32_10(counter, key)
//! ```
//!
//! * **uniform**: `u = (x0 >> 8) * 2^-24`, in `[0, 1)` and exact in f32; the element is
//!   `low + (high - low) * u` (computed in f64, then rounded to the dtype).
//! * **normal** (Box–Muller on the block's first pair): `u1 = ((x0 >> 8) + 1) * 2^-24` in `(0, 1]`,
//!   `u2 = (x1 >> 8) * 2^-24`, `z = sqrt(-2 ln u1) * cos(2π u2)`; the element is `mean + std * z`
//!   (computed in f64, then rounded). Words `x2`, `x3` are unused.
//!
//! Each element depends only on `(seed, i)`, so any backend can generate any slice in parallel.
//! The integer words and uniforms match exactly across backends; normals match to float tolerance
//! (GPU `log`/`cos` are not correctly rounded).
//!
//! ```
//! use kiln_core::random::{uniform_f32, normal_f64, philox4x32_10};
//! // Random123's known-answer vector for a zero counter and key.
//! assert_eq!(philox4x32_10([0; 4], [0; 2]), [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]);
//! let u = uniform_f32(42, 7);
//! assert!((0.0..1.0).contains(&u));
//! assert!(normal_f64(42, 7).is_finite());
//! ```

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// The high and low 32 bits of `a * b`, from 16-bit halves so that a GPU port needs only u32
/// operations (every partial product below fits in 32 bits).
pub fn mulhilo32(a: u32, b: u32) -> (u32, u32) {
    let (a0, a1) = (a & 0xffff, a >> 16);
    let (b0, b1) = (b & 0xffff, b >> 16);
    let (p00, p01, p10, p11) = (a0 * b0, a0 * b1, a1 * b0, a1 * b1);
    let mid = (p00 >> 16) + (p01 & 0xffff) + (p10 & 0xffff);
    let hi = p11 + (p01 >> 16) + (p10 >> 16) + (mid >> 16);
    (hi, a.wrapping_mul(b))
}

/// The Philox-4x32 bijection with 10 rounds (Salmon et al., "Parallel random numbers: as easy as
/// 1, 2, 3", SC 2011).
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let [mut c0, mut c1, mut c2, mut c3] = counter;
    let [mut k0, mut k1] = key;
    for round in 0..10 {
        if round > 0 {
            k0 = k0.wrapping_add(W0);
            k1 = k1.wrapping_add(W1);
        }
        let (hi0, lo0) = mulhilo32(M0, c0);
        let (hi1, lo1) = mulhilo32(M1, c2);
        (c0, c1, c2, c3) = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0);
    }
    [c0, c1, c2, c3]
}

/// The four random words of element `index` for `seed`.
pub fn bits(seed: u64, index: u64) -> [u32; 4] {
    philox4x32_10(
        [index as u32, (index >> 32) as u32, 0, 0],
        [seed as u32, (seed >> 32) as u32],
    )
}

/// The top 24 bits of `x` scaled to `[0, 1)` (exact in f32).
fn unit(x: u32) -> f32 {
    (x >> 8) as f32 * (1.0 / 16_777_216.0)
}

/// Element `index`'s uniform value in `[0, 1)` for `seed`.
pub fn uniform_f32(seed: u64, index: u64) -> f32 {
    unit(bits(seed, index)[0])
}

/// Element `index`'s standard normal value for `seed` (Box–Muller, computed in f64).
pub fn normal_f64(seed: u64, index: u64) -> f64 {
    let [x0, x1, ..] = bits(seed, index);
    let u1 = unit(x0) as f64 + 1.0 / 16_777_216.0;
    let u2 = unit(x1) as f64;
    crate::math::sqrt(-2.0 * libm::log(u1)) * libm::cos(2.0 * core::f64::consts::PI * u2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mulhilo_matches_64_bit_product() {
        let mut x = 0x1234_5678u32;
        for _ in 0..10_000 {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let y = x.rotate_left(13) ^ 0xdead_beef;
            let p = x as u64 * y as u64;
            assert_eq!(mulhilo32(x, y), ((p >> 32) as u32, p as u32));
        }
        assert_eq!(mulhilo32(u32::MAX, u32::MAX), (u32::MAX - 1, 1));
    }

    #[test]
    fn philox_known_answers() {
        // Random123's kat_vectors for philox4x32_10.
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            philox4x32_10(
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0]
            ),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

    #[test]
    fn uniform_and_normal_moments() {
        let n = 200_000u64;
        let (mut s, mut s2, mut z1, mut z2) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
        for i in 0..n {
            let u = uniform_f32(9, i) as f64;
            assert!((0.0..1.0).contains(&u));
            s += u;
            s2 += u * u;
            let z = normal_f64(9, i);
            z1 += z;
            z2 += z * z;
        }
        let nf = n as f64;
        assert!((s / nf - 0.5).abs() < 0.005, "uniform mean {}", s / nf);
        assert!((s2 / nf - 1.0 / 3.0).abs() < 0.005);
        assert!((z1 / nf).abs() < 0.01, "normal mean {}", z1 / nf);
        assert!((z2 / nf - 1.0).abs() < 0.01, "normal variance {}", z2 / nf);
        // Different seeds give different streams.
        assert_ne!(uniform_f32(1, 0), uniform_f32(2, 0));
    }
}

/// splitmix64 (Steele, Lea and Flood 2014): a tiny seeded generator, well spread even for
/// consecutive seeds. kiln's shuffles, augmentations and token sampling draw from it.
///
/// ```
/// use kiln_core::random::SplitMix64;
/// let mut a = SplitMix64::new(7);
/// let x = a.next_f32();
/// assert!((0.0..1.0).contains(&x));
/// assert_eq!(SplitMix64::new(7).next_f32(), x);
/// ```
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// The golden-ratio increment of the state.
    pub const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

    /// A generator whose first output is `mix(seed + GAMMA)`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// splitmix64's output function: a bijective scramble of `z`.
    pub fn mix(z: u64) -> u64 {
        let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(Self::GAMMA);
        Self::mix(self.state)
    }

    /// Uniform in `[0, 1)` (24 random bits).
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in `[-bound, bound)`.
    pub fn symmetric(&mut self, bound: f32) -> f32 {
        (2.0 * self.next_f32() - 1.0) * bound
    }

    /// Uniform in `[0, 1)` (53 random bits).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` up to a modulo bias below `n / 2^64` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}
