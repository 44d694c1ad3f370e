//! Data augmentation of u8 images (MNIST digits): random affine maps, stroke thickness changes
//! and elastic distortion, each drawn from a seed so that a run, its reruns and its `--resume`
//! see exactly the same images.
//!
//! One call of [`Augment::apply`] transforms one `rows x cols` image:
//!
//! 1. **Geometry, in one resampling pass.** An affine map about the image's centre of mass
//!    (its geometric centre when blank) — rotation by up to `rotate` degrees, scaling by a factor
//!    in `1 ± scale`, a horizontal shear by up to `shear` degrees, then a shift of up to `shift`
//!    pixels along each axis — plus, when `elastic > 0`, a smooth random displacement field
//!    (after Simard, Steinkraus and Platt, *Best practices for convolutional neural networks
//!    applied to visual document analysis*, 2003): a uniform `[-1, 1)` field per axis smoothed
//!    by a Gaussian of standard deviation `sigma` pixels and scaled by `elastic` (their α).
//!    Every output pixel is inverse-mapped to the input and sampled bilinearly (zero outside).
//! 2. **Stroke thickness.** With probability `thickness`, a grey-level dilation (3x3 maximum)
//!    or erosion (3x3 minimum), one of the two with equal odds.
//!
//! Every strength is a bound of a uniform draw; 0 turns its transform off, and with all of them
//! 0 the image is copied unchanged. The command line reads an [`Augment`] from a spec such as
//! `digits` or `shift=2,rotate=15` ([`Augment::parse`]).

use crate::core::{Error, Result};
use std::fmt;
use std::str::FromStr;

pub use crate::core::random::SplitMix64;

/// The seed of image `index`'s augmentation in `epoch` of a run seeded by `seed`: the same
/// triple always gives the same seed, wherever the image falls in the shuffled batches.
pub fn image_seed(seed: u64, epoch: u64, index: u64) -> u64 {
    // A salt keeps these streams apart from the shuffles' (seeded by `seed` too).
    let s = SplitMix64::mix(seed ^ 0x6A09_E667_F3BC_C909);
    let s = SplitMix64::mix(s ^ epoch.wrapping_mul(0xD1B5_4A32_D192_ED03));
    SplitMix64::mix(s ^ index.wrapping_mul(SplitMix64::GAMMA))
}

/// How to augment training images: the strength of each transform, 0 turning it off.
///
/// ```
/// use kiln::data::augment::Augment;
///
/// // A 28x28 image with a vertical stroke.
/// let mut image = vec![0u8; 28 * 28];
/// for y in 6..22 {
///     image[y * 28 + 13] = 255;
///     image[y * 28 + 14] = 255;
/// }
/// // The preset for hand-drawn digits, with stronger rotation.
/// let aug: Augment = "digits,rotate=20".parse()?;
/// assert_eq!(aug.rotate, 20.0);
/// let seed = kiln::data::augment::image_seed(0, 0, 7);
/// let out = aug.augmented(&image, 28, 28, seed)?;
/// assert_eq!(out, aug.augmented(&image, 28, 28, seed)?); // deterministic
/// assert_eq!(Augment::none().augmented(&image, 28, 28, seed)?, image); // identity
/// # Ok::<(), kiln::core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Augment {
    /// Largest shift along each axis, in pixels.
    pub shift: f32,
    /// Largest rotation, in degrees either way (at most 180).
    pub rotate: f32,
    /// Largest relative change of size: the scale factor is uniform in `[1 - scale, 1 + scale)`
    /// (at most 0.9).
    pub scale: f32,
    /// Largest horizontal shear, in degrees either way (at most 60).
    pub shear: f32,
    /// Probability of a stroke thickness change (dilation or erosion, even odds), in `[0, 1]`.
    pub thickness: f32,
    /// Elastic distortion α: the smoothed unit field is scaled by it (Simard et al. used 34 with
    /// σ = 4 on MNIST; the displacements are then about 1.5 px at most).
    pub elastic: f32,
    /// Elastic distortion σ: the standard deviation, in pixels, of the Gaussian smoothing the
    /// displacement field (above 0; only used when `elastic > 0`).
    pub sigma: f32,
}

impl Default for Augment {
    fn default() -> Self {
        Augment::none()
    }
}

/// The keys of a spec, with what each one takes.
const KEYS: &str = "shift (pixels), rotate (degrees, <= 180), scale (relative, <= 0.9), \
                    shear (degrees, <= 60), thickness (probability, <= 1), elastic (alpha), \
                    sigma (pixels, in (0, 100])";

impl Augment {
    /// No augmentation: images pass unchanged.
    pub const fn none() -> Augment {
        Augment {
            shift: 0.0,
            rotate: 0.0,
            scale: 0.0,
            shear: 0.0,
            thickness: 0.0,
            elastic: 0.0,
            sigma: 4.0,
        }
    }

    /// The preset for digits drawn on the demo page's pad (spec `digits`), tuned on such drawings
    /// (`tests/web/drawn-digits.mjs`): `shift=2,rotate=12,scale=0.12,shear=10,thickness=0.5,
    /// elastic=16,sigma=4`.
    pub const fn digits() -> Augment {
        Augment {
            shift: 2.0,
            rotate: 12.0,
            scale: 0.12,
            shear: 10.0,
            thickness: 0.5,
            elastic: 16.0,
            sigma: 4.0,
        }
    }

    /// `true` when every transform is off.
    pub fn is_none(&self) -> bool {
        !self.geometric() && self.thickness <= 0.0
    }

    fn geometric(&self) -> bool {
        self.shift > 0.0
            || self.rotate > 0.0
            || self.scale > 0.0
            || self.shear > 0.0
            || self.elastic > 0.0
    }

    /// Reads a spec: `none`, `digits` ([`Augment::digits`]), or a comma-separated list of
    /// `key=value` settings over no augmentation (`shift=2,rotate=15`), or over the preset when
    /// the list starts with `digits` (`digits,rotate=20`). Keys: `shift`, `rotate`, `scale`,
    /// `shear`, `thickness`, `elastic`, `sigma`.
    pub fn parse(spec: &str) -> Result<Augment> {
        let bad = |msg: String| Error::invalid("augment", msg);
        let spec = spec.trim();
        let mut parts = spec.split(',').map(str::trim).peekable();
        let mut aug = match parts.peek() {
            Some(&"none") if spec == "none" => return Ok(Augment::none()),
            Some(&"digits") => {
                parts.next();
                Augment::digits()
            }
            _ => Augment::none(),
        };
        for part in parts {
            let Some((key, value)) = part.split_once('=') else {
                return Err(bad(format!(
                    "expected `none`, `digits` or key=value settings in {spec:?}, found {part:?}; \
                     keys: {KEYS}"
                )));
            };
            let (key, value) = (key.trim(), value.trim());
            let v: f32 = value.parse().map_err(|_| {
                bad(format!(
                    "expected a number for {key:?} in {spec:?}, found {value:?}"
                ))
            })?;
            let field = match key {
                "shift" => &mut aug.shift,
                "rotate" => &mut aug.rotate,
                "scale" => &mut aug.scale,
                "shear" => &mut aug.shear,
                "thickness" => &mut aug.thickness,
                "elastic" => &mut aug.elastic,
                "sigma" => &mut aug.sigma,
                _ => {
                    return Err(bad(format!(
                        "unknown key {key:?} in {spec:?}; expected one of: {KEYS}"
                    )));
                }
            };
            *field = v;
        }
        aug.check()?;
        Ok(aug)
    }

    /// Checks every strength is in its range.
    pub fn check(&self) -> Result<()> {
        let fields = [
            ("shift", self.shift, f32::INFINITY, "finite and >= 0"),
            ("rotate", self.rotate, 180.0, "in [0, 180]"),
            ("scale", self.scale, 0.9, "in [0, 0.9]"),
            ("shear", self.shear, 60.0, "in [0, 60]"),
            ("thickness", self.thickness, 1.0, "in [0, 1]"),
            ("elastic", self.elastic, f32::INFINITY, "finite and >= 0"),
            ("sigma", self.sigma, 100.0, "in (0, 100]"),
        ];
        for (key, v, max, range) in fields {
            let ok = v.is_finite() && v >= 0.0 && v <= max && (key != "sigma" || v > 0.0);
            if !ok {
                return Err(Error::invalid(
                    "augment",
                    format!("expected {key} {range}, found {v}"),
                ));
            }
        }
        Ok(())
    }

    /// `image` (`rows x cols` u8 pixels, row-major) transformed with the draws of `seed`.
    pub fn augmented(&self, image: &[u8], rows: usize, cols: usize, seed: u64) -> Result<Vec<u8>> {
        let mut out = vec![0; image.len()];
        self.apply(image, rows, cols, seed, &mut out)?;
        Ok(out)
    }

    /// Writes `image` (`rows x cols` u8 pixels, row-major) transformed with the draws of `seed`
    /// to `out` (as long as `image`). Out-of-range strengths are an error ([`Augment::check`]).
    pub fn apply(
        &self,
        image: &[u8],
        rows: usize,
        cols: usize,
        seed: u64,
        out: &mut [u8],
    ) -> Result<()> {
        let n = rows * cols;
        if image.len() != n || out.len() != n {
            return Err(Error::shape(
                "augment",
                format!(
                    "expected {rows}x{cols} = {n} pixels in and out, found {} and {}",
                    image.len(),
                    out.len()
                ),
            ));
        }
        self.check()?;
        // Every draw is made whether or not its transform is on, so turning one transform off
        // leaves the others' draws as they were.
        let mut rng = SplitMix64::new(seed);
        let (tx, ty) = (rng.symmetric(self.shift), rng.symmetric(self.shift));
        let angle = rng.symmetric(self.rotate).to_radians();
        let factor = 1.0 + rng.symmetric(self.scale);
        let shear = rng.symmetric(self.shear).to_radians();
        let change_thickness = rng.next_f32() < self.thickness;
        let dilate = rng.next_f32() < 0.5;

        if self.geometric() {
            let field = (self.elastic > 0.0)
                .then(|| elastic_field(rows, cols, self.elastic, self.sigma, &mut rng));
            // Output p' = c + t + R (factor * Shear) (p - c); sampling needs its inverse,
            // p = c + Shear^-1 R^-1 (p' - c - t) / factor.
            let (c, s) = (angle.cos(), angle.sin());
            let k = shear.tan();
            let (cx, cy) = centre_of_mass(image, rows, cols);
            for y in 0..rows {
                for x in 0..cols {
                    let (dx, dy) = (x as f32 - cx - tx, y as f32 - cy - ty);
                    // R^-1 of the screen rotation (y down, positive = anticlockwise).
                    let (rx, ry) = (c * dx - s * dy, s * dx + c * dy);
                    let (mut sx, mut sy) = ((rx - k * ry) / factor + cx, ry / factor + cy);
                    if let Some((fx, fy)) = &field {
                        sx += fx[y * cols + x];
                        sy += fy[y * cols + x];
                    }
                    out[y * cols + x] = bilinear(image, rows, cols, sx, sy);
                }
            }
        } else {
            out.copy_from_slice(image);
        }
        if change_thickness {
            morph3x3(out, rows, cols, dilate);
        }
        Ok(())
    }
}

impl FromStr for Augment {
    type Err = Error;
    fn from_str(spec: &str) -> Result<Augment> {
        Augment::parse(spec)
    }
}

/// The spec that [`Augment::parse`] reads back to the same value (`none` when off).
impl fmt::Display for Augment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Augment::none() {
            return f.write_str("none");
        }
        write!(
            f,
            "shift={},rotate={},scale={},shear={},thickness={},elastic={},sigma={}",
            self.shift,
            self.rotate,
            self.scale,
            self.shear,
            self.thickness,
            self.elastic,
            self.sigma
        )
    }
}

/// `(x, y)` of the ink's centre of mass in pixel-index coordinates; the centre when blank.
fn centre_of_mass(image: &[u8], rows: usize, cols: usize) -> (f32, f32) {
    let (mut m, mut mx, mut my) = (0u64, 0u64, 0u64);
    for (i, &v) in image.iter().enumerate() {
        let v = v as u64;
        m += v;
        mx += v * (i % cols) as u64;
        my += v * (i / cols) as u64;
    }
    if m == 0 {
        return (
            (cols as f32 - 1.0) / 2.0,
            (rows as f32 - 1.0).max(0.0) / 2.0,
        );
    }
    (mx as f32 / m as f32, my as f32 / m as f32)
}

/// Bilinear sample at `(x, y)` (pixel-index coordinates), 0 outside the image.
fn bilinear(image: &[u8], rows: usize, cols: usize, x: f32, y: f32) -> u8 {
    let (x0, y0) = (x.floor(), y.floor());
    let (fx, fy) = (x - x0, y - y0);
    let at = |xi: f32, yi: f32| -> f32 {
        if xi >= 0.0 && yi >= 0.0 && xi < cols as f32 && yi < rows as f32 {
            image[yi as usize * cols + xi as usize] as f32
        } else {
            0.0
        }
    };
    let top = at(x0, y0) * (1.0 - fx) + at(x0 + 1.0, y0) * fx;
    let bottom = at(x0, y0 + 1.0) * (1.0 - fx) + at(x0 + 1.0, y0 + 1.0) * fx;
    let v = top * (1.0 - fy) + bottom * fy;
    // NaN (from NaN coordinates) casts to 0.
    v.round().clamp(0.0, 255.0) as u8
}

/// Two displacement fields (x and y), each uniform noise in `[-1, 1)` smoothed by a normalised
/// Gaussian of standard deviation `sigma` (zero beyond the edges) and scaled by `alpha`.
fn elastic_field(
    rows: usize,
    cols: usize,
    alpha: f32,
    sigma: f32,
    rng: &mut SplitMix64,
) -> (Vec<f32>, Vec<f32>) {
    let radius = ((3.0 * sigma).ceil() as usize).min(rows.max(cols));
    let mut kernel: Vec<f32> = (0..=2 * radius)
        .map(|i| {
            let d = i as f32 - radius as f32;
            (-d * d / (2.0 * sigma * sigma)).exp()
        })
        .collect();
    let total: f32 = kernel.iter().sum();
    kernel.iter_mut().for_each(|k| *k /= total);
    let mut field = || {
        let noise: Vec<f32> = (0..rows * cols).map(|_| rng.symmetric(1.0)).collect();
        // Rows, then columns.
        let along_rows = smooth_axis(&noise, rows, cols, &kernel, false);
        let mut out = smooth_axis(&along_rows, rows, cols, &kernel, true);
        out.iter_mut().for_each(|v| *v *= alpha);
        out
    };
    let fx = field();
    let fy = field();
    (fx, fy)
}

/// `src` (`rows x cols`) convolved with the odd-length `kernel` along each row
/// (`vertical == false`) or each column, with zeros beyond the edges.
fn smooth_axis(src: &[f32], rows: usize, cols: usize, kernel: &[f32], vertical: bool) -> Vec<f32> {
    let radius = kernel.len() / 2;
    let (len, step) = if vertical { (rows, cols) } else { (cols, 1) };
    let mut out = vec![0.0f32; rows * cols];
    for y in 0..rows {
        for x in 0..cols {
            let (pos, base) = if vertical { (y, x) } else { (x, y * cols) };
            let mut acc = 0.0;
            for (j, k) in kernel.iter().enumerate() {
                let i = pos + j;
                if i >= radius && i - radius < len {
                    acc += k * src[base + (i - radius) * step];
                }
            }
            out[y * cols + x] = acc;
        }
    }
    out
}

/// Grey-level 3x3 dilation (maximum) or erosion (minimum) in place; pixels beyond the edges are
/// left out of the window.
fn morph3x3(image: &mut [u8], rows: usize, cols: usize, dilate: bool) {
    let src = image.to_vec();
    for y in 0..rows {
        for x in 0..cols {
            let mut v = src[y * cols + x];
            for yi in y.saturating_sub(1)..(y + 2).min(rows) {
                for xi in x.saturating_sub(1)..(x + 2).min(cols) {
                    let w = src[yi * cols + xi];
                    v = if dilate { v.max(w) } else { v.min(w) };
                }
            }
            image[y * cols + x] = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::mnist::{self, Mnist};
    use std::sync::OnceLock;

    /// The first 200 MNIST test images, or `None` (with a notice) when the data is absent.
    fn digits() -> Option<&'static (Vec<u8>, usize, usize)> {
        static DATA: OnceLock<Option<(Vec<u8>, usize, usize)>> = OnceLock::new();
        DATA.get_or_init(|| {
            let data = mnist::data_dir(None).and_then(|d| Mnist::load(&d));
            match data {
                Ok(m) => {
                    let t = m.test.truncated(200);
                    Some((t.images, t.rows, t.cols))
                }
                Err(e) => {
                    eprintln!("skipped: no MNIST data ({e})");
                    None
                }
            }
        })
        .as_ref()
    }

    fn ink(image: &[u8]) -> u64 {
        image.iter().map(|&v| v as u64).sum()
    }

    /// Applies `aug` to each test image with its own seed: (input, output) pairs.
    fn each(aug: &Augment, seed: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
        let Some((images, rows, cols)) = digits() else {
            return Vec::new();
        };
        images
            .chunks(rows * cols)
            .enumerate()
            .map(|(i, img)| {
                let out = aug
                    .augmented(img, *rows, *cols, image_seed(seed, 0, i as u64))
                    .unwrap();
                (img.to_vec(), out)
            })
            .collect()
    }

    #[test]
    fn same_seed_same_bytes_other_seed_other_bytes() {
        let aug = Augment::digits();
        let a = each(&aug, 3);
        if a.is_empty() {
            return;
        }
        assert_eq!(a, each(&aug, 3));
        let b = each(&aug, 4);
        let differ = a.iter().zip(&b).filter(|(x, y)| x.1 != y.1).count();
        assert_eq!(differ, a.len());
        // Epoch and index change the draws too.
        assert_ne!(image_seed(3, 0, 5), image_seed(3, 1, 5));
        assert_ne!(image_seed(3, 0, 5), image_seed(3, 0, 6));
        assert_ne!(image_seed(3, 0, 5), image_seed(4, 0, 5));
    }

    #[test]
    fn all_strengths_zero_is_the_identity() {
        // Sigma alone turns nothing on.
        let aug = Augment {
            sigma: 2.0,
            ..Augment::none()
        };
        assert!(aug.is_none());
        for (img, out) in each(&aug, 1) {
            assert_eq!(img, out);
        }
    }

    /// Each transform alone: how many of the images it changes and the ratios of ink after/before.
    fn effect(aug: Augment) -> (usize, usize, Vec<f64>) {
        let pairs = each(&aug, 11);
        let changed = pairs.iter().filter(|(a, b)| a != b).count();
        let ratios = pairs
            .iter()
            .map(|(a, b)| ink(b) as f64 / ink(a) as f64)
            .collect();
        (changed, pairs.len(), ratios)
    }

    fn mean(v: &[f64]) -> f64 {
        v.iter().sum::<f64>() / v.len().max(1) as f64
    }

    #[test]
    fn each_transform_changes_images_and_keeps_ink_plausible() {
        if digits().is_none() {
            return;
        }
        let none = Augment::none();
        let cases = [
            // (transform, lowest and highest ink ratio of one image)
            // A shift loses only ink pushed over the edge (a few digits reach row 26).
            (Augment { shift: 2.0, ..none }, 0.94, 1.01),
            (
                Augment {
                    rotate: 15.0,
                    ..none
                },
                0.98,
                1.01,
            ),
            (
                Augment {
                    shear: 10.0,
                    ..none
                },
                0.98,
                1.01,
            ),
            // Elastic fields compress and stretch strokes locally.
            (
                Augment {
                    elastic: 16.0,
                    ..none
                },
                0.7,
                1.45,
            ),
            // Area grows and shrinks with the square of the factor (0.85^2 to 1.15^2).
            (
                Augment {
                    scale: 0.15,
                    ..none
                },
                0.68,
                1.4,
            ),
        ];
        for (aug, lo, hi) in cases {
            let (changed, n, ratios) = effect(aug);
            assert!(changed >= n * 95 / 100, "{aug}: changed {changed} of {n}");
            for r in &ratios {
                assert!((lo..=hi).contains(r), "{aug}: ink ratio {r}");
            }
            assert!(
                (mean(&ratios) - 1.0).abs() < 0.05,
                "{aug}: {}",
                mean(&ratios)
            );
        }
        // Thickness: applied to about half of the images, dilation adds ink, erosion removes it.
        let thick = Augment {
            thickness: 0.5,
            ..none
        };
        let (changed, n, ratios) = effect(thick);
        assert!(
            (n * 35 / 100..=n * 65 / 100).contains(&changed),
            "{changed} of {n}"
        );
        let grown = ratios.iter().filter(|&&r| r > 1.2).count();
        let shrunk = ratios.iter().filter(|&&r| r < 0.8).count();
        assert_eq!(grown + shrunk, changed, "{ratios:?}");
        assert!(grown > n / 10 && shrunk > n / 10, "{grown} {shrunk}");
        let always = Augment {
            thickness: 1.0,
            ..none
        };
        assert_eq!(effect(always).0, n);
    }

    #[test]
    fn dilation_adds_ink_and_erosion_removes_it() {
        let Some((images, rows, cols)) = digits() else {
            return;
        };
        for img in images.chunks(rows * cols).take(50) {
            let mut d = img.to_vec();
            morph3x3(&mut d, *rows, *cols, true);
            let mut e = img.to_vec();
            morph3x3(&mut e, *rows, *cols, false);
            assert!(ink(&d) as f64 > 1.3 * ink(img) as f64);
            assert!((ink(&e) as f64) < 0.7 * ink(img) as f64);
            assert!(d.iter().zip(img).all(|(a, b)| a >= b));
            assert!(e.iter().zip(img).all(|(a, b)| a <= b));
        }
    }

    /// Centre of mass of the ink with `x` beyond `cx` (side > 0) or before it.
    fn half_com(image: &[u8], cols: usize, cx: f32, side: f32) -> (f32, f32) {
        let (mut m, mut mx, mut my) = (0.0, 0.0, 0.0);
        for (i, &v) in image.iter().enumerate() {
            let (x, y) = ((i % cols) as f32, (i / cols) as f32);
            if (x - cx) * side > 0.0 {
                m += v as f32;
                mx += v as f32 * x;
                my += v as f32 * y;
            }
        }
        (mx / m, my / m)
    }

    #[test]
    fn rotation_turns_about_the_centre_of_mass() {
        // Two equal 3x3 blobs centred on (8, 14) and (20, 14): their centre of mass is (14, 14).
        let mut img = vec![0u8; 28 * 28];
        for (bx, by) in [(8, 14), (20, 14)] {
            for y in by - 1..=by + 1 {
                for x in bx - 1..=bx + 1 {
                    img[y * 28 + x] = 200;
                }
            }
        }
        assert_eq!(centre_of_mass(&img, 28, 28), (14.0, 14.0));
        for deg in [30.0f32, -30.0, 60.0] {
            // A seed whose rotation draw (the third) is within 0.05 degree of `deg`.
            let aug = Augment {
                rotate: deg.abs(),
                ..Augment::none()
            };
            let seed = (0..100_000u64)
                .find(|&s| {
                    let mut r = SplitMix64::new(s);
                    let _ = (r.symmetric(0.0), r.symmetric(0.0));
                    (r.symmetric(aug.rotate) - deg).abs() < 0.05
                })
                .unwrap();
            let out = aug.augmented(&img, 28, 28, seed).unwrap();
            let (cx, cy) = centre_of_mass(&out, 28, 28);
            assert!(
                (cx - 14.0).abs() < 0.1 && (cy - 14.0).abs() < 0.1,
                "{cx} {cy}"
            );
            // Anticlockwise on screen (y down): the right blob goes up for a positive angle.
            let t = deg.to_radians();
            let (rx, ry) = half_com(&out, 28, 14.0, 1.0);
            let (ex, ey) = (14.0 + 6.0 * t.cos(), 14.0 - 6.0 * t.sin());
            assert!(
                (rx - ex).abs() < 0.2 && (ry - ey).abs() < 0.2,
                "{deg}: ({rx}, {ry}) vs ({ex}, {ey})"
            );
            let (lx, ly) = half_com(&out, 28, 14.0, -1.0);
            assert!(
                (lx - (28.0 - ex)).abs() < 0.2 && (ly - (28.0 - ey)).abs() < 0.2,
                "{deg}: ({lx}, {ly})"
            );
        }
    }

    #[test]
    fn shift_moves_the_centre_of_mass_by_the_drawn_offset() {
        let Some((images, rows, cols)) = digits() else {
            return;
        };
        let aug = Augment {
            shift: 3.0,
            ..Augment::none()
        };
        let mut checked = 0;
        for (i, img) in images.chunks(rows * cols).enumerate() {
            // Only digits at least 4 px from every edge: a shift keeps all of their ink.
            let inside = |p: usize| {
                (4..rows - 4).contains(&(p / cols)) && (4..cols - 4).contains(&(p % cols))
            };
            if (0..img.len()).any(|p| img[p] > 0 && !inside(p)) {
                continue;
            }
            checked += 1;
            let seed = image_seed(0, 0, i as u64);
            let mut r = SplitMix64::new(seed);
            let (tx, ty) = (r.symmetric(3.0), r.symmetric(3.0));
            let out = aug.augmented(img, *rows, *cols, seed).unwrap();
            let (ax, ay) = centre_of_mass(img, *rows, *cols);
            let (bx, by) = centre_of_mass(&out, *rows, *cols);
            let (ex, ey) = (bx - ax - tx, by - ay - ty);
            assert!(
                ex.abs() < 0.1 && ey.abs() < 0.1,
                "{i}: ({ax}, {ay}) -> ({bx}, {by}), shift ({tx}, {ty})"
            );
        }
        assert!(checked > 30, "{checked}");
    }

    #[test]
    fn parser_reads_presets_and_lists() {
        assert_eq!(Augment::parse("none").unwrap(), Augment::none());
        assert_eq!(Augment::parse("digits").unwrap(), Augment::digits());
        assert_eq!(Augment::parse(" digits ").unwrap(), Augment::digits());
        let a =
            Augment::parse("shift=2,rotate=15,scale=0.1,shear=10,thickness=0.5,elastic=8").unwrap();
        assert_eq!(
            a,
            Augment {
                shift: 2.0,
                rotate: 15.0,
                scale: 0.1,
                shear: 10.0,
                thickness: 0.5,
                elastic: 8.0,
                sigma: 4.0
            }
        );
        let b = Augment::parse("digits, rotate = 20").unwrap();
        assert_eq!(
            b,
            Augment {
                rotate: 20.0,
                ..Augment::digits()
            }
        );
        assert_eq!(Augment::parse("rotate=0").unwrap(), Augment::none());
        // Display round-trips.
        for a in [Augment::none(), Augment::digits(), a, b] {
            assert_eq!(Augment::parse(&a.to_string()).unwrap(), a);
        }
    }

    #[test]
    fn parser_errors_name_the_bad_key_or_value() {
        let err = |s: &str| Augment::parse(s).unwrap_err().to_string();
        let e = err("shift=2,twist=3");
        assert!(
            e.contains("\"twist\"") && e.contains("rotate") && e.contains("elastic"),
            "{e}"
        );
        let e = err("rotate=abc");
        assert!(e.contains("\"rotate\"") && e.contains("\"abc\""), "{e}");
        let e = err("digitz");
        assert!(e.contains("\"digitz\"") && e.contains("shift"), "{e}");
        let e = err("none,shift=1");
        assert!(e.contains("\"none\""), "{e}");
        assert!(err("thickness=1.5").contains("thickness"));
        assert!(err("scale=1").contains("scale"));
        assert!(err("shift=-1").contains("shift"));
        assert!(err("sigma=0").contains("sigma"));
        assert!(err("elastic=inf").contains("elastic"));
        assert!(err("shear=nan").contains("shear"));
        assert!(err("").contains("keys"));
    }

    #[test]
    fn random_specs_never_panic() {
        let mut rng = SplitMix64::new(99);
        let alphabet: Vec<char> = "shiftrotaescldgiknm=,.-+0123456789eEnaN ,,==\u{e9}\u{1F600}\0"
            .chars()
            .collect();
        let words = [
            "shift", "rotate", "digits", "none", "=", ",", "1e9", "-0", "0.5", "inf",
        ];
        let img: Vec<u8> = (0..28 * 28).map(|i| (i * 7 % 256) as u8).collect();
        for _ in 0..5000 {
            let len = rng.next_u64() % 24;
            let s: String = (0..len)
                .map(|_| {
                    if rng.next_u64().is_multiple_of(3) {
                        words[(rng.next_u64() % words.len() as u64) as usize].to_string()
                    } else {
                        alphabet[(rng.next_u64() % alphabet.len() as u64) as usize].to_string()
                    }
                })
                .collect();
            if let Ok(a) = Augment::parse(&s) {
                // Whatever parses, applies.
                a.augmented(&img, 28, 28, rng.next_u64()).unwrap();
            }
        }
    }

    #[test]
    fn bad_sizes_and_strengths_are_errors() {
        let aug = Augment::digits();
        assert!(aug.augmented(&[0; 10], 28, 28, 0).is_err());
        let mut out = [0u8; 3];
        assert!(aug.apply(&[0; 4], 2, 2, 0, &mut out).is_err());
        let nan = Augment {
            rotate: f32::NAN,
            ..aug
        };
        assert!(nan.augmented(&[0; 4], 2, 2, 0).is_err());
        // Tiny and empty images are fine.
        aug.augmented(&[9; 1], 1, 1, 0).unwrap();
        aug.augmented(&[], 0, 0, 0).unwrap();
    }
}
