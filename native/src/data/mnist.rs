//! MNIST from its original IDX files (gzipped or plain), read by a checking parser.
//!
//! IDX: a big-endian header `00 00 <type> <ndims>` followed by one `u32` per dimension, then the
//! elements. MNIST images are type `0x08` (u8) with 3 dims (magic 2051), labels u8 with 1 dim
//! (magic 2049). Nothing is ever downloaded: the files must be on disk.

use crate::core::{Device, Error, Result, Tensor};
use crate::data::augment::{Augment, image_seed};
use crate::data::loader::Dataset;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Magic number of an IDX file of u8 images (`n x rows x cols`).
pub const IMAGES_MAGIC: u32 = 0x0803;
/// Magic number of an IDX file of u8 labels (`n`).
pub const LABELS_MAGIC: u32 = 0x0801;
/// Environment variable naming the MNIST directory when `--data` is not given.
pub const DIR_ENV: &str = "KILN_MNIST_DIR";
/// Mean and standard deviation of MNIST pixels scaled to [0, 1] (the usual normalisation).
pub const MEAN: f32 = 0.1307;
/// See [`MEAN`].
pub const STD: f32 = 0.3081;

/// One split of MNIST: `len` images of `rows x cols` u8 pixels (row-major) and their labels.
#[derive(Clone, Debug, PartialEq)]
pub struct Split {
    /// Pixels, `len * rows * cols` bytes, 0 = background.
    pub images: Vec<u8>,
    /// One label in `0..=9` per image.
    pub labels: Vec<u8>,
    /// Image height.
    pub rows: usize,
    /// Image width.
    pub cols: usize,
}

impl Split {
    /// Number of examples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }
    /// `true` when the split holds no example.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
    /// Pixels per image.
    pub fn image_size(&self) -> usize {
        self.rows * self.cols
    }
    /// The pixels of image `i`.
    pub fn image(&self, i: usize) -> Option<&[u8]> {
        let n = self.image_size();
        self.images.get(i * n..(i + 1) * n)
    }
    /// The first `n` examples (all of them when `n >= len`).
    pub fn truncated(mut self, n: usize) -> Split {
        let n = n.min(self.len());
        self.labels.truncate(n);
        self.images.truncate(n * self.image_size());
        self
    }
    /// Reads images and labels from two IDX files and checks that they agree.
    pub fn load(images: &Path, labels: &Path) -> Result<Split> {
        let (pixels, rows, cols) = read_images(images)?;
        let labels_v = read_labels(labels)?;
        let n = pixels.len() / (rows * cols).max(1);
        if n != labels_v.len() {
            return Err(Error::format(
                "mnist",
                format!(
                    "{} holds {n} images but {} holds {} labels; expected equal counts",
                    images.display(),
                    labels.display(),
                    labels_v.len()
                ),
            ));
        }
        Ok(Split {
            images: pixels,
            labels: labels_v,
            rows,
            cols,
        })
    }
}

/// The MNIST training (60,000) and test (10,000) sets.
#[derive(Clone, Debug, PartialEq)]
pub struct Mnist {
    /// The training set.
    pub train: Split,
    /// The test set.
    pub test: Split,
}

impl Mnist {
    /// Loads the four files from `dir` (`train-images-idx3-ubyte[.gz]`, `train-labels-idx1-ubyte[.gz]`,
    /// `t10k-images-idx3-ubyte[.gz]`, `t10k-labels-idx1-ubyte[.gz]`).
    pub fn load(dir: &Path) -> Result<Mnist> {
        let file = |stem: &str| find_file(dir, stem);
        Ok(Mnist {
            train: Split::load(
                &file("train-images-idx3-ubyte")?,
                &file("train-labels-idx1-ubyte")?,
            )?,
            test: Split::load(
                &file("t10k-images-idx3-ubyte")?,
                &file("t10k-labels-idx1-ubyte")?,
            )?,
        })
    }
}

/// `dir/stem.gz`, else `dir/stem`.
fn find_file(dir: &Path, stem: &str) -> Result<PathBuf> {
    let gz = dir.join(format!("{stem}.gz"));
    let plain = dir.join(stem);
    [gz.clone(), plain.clone()]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| {
            Error::io(
                "mnist",
                format!(
                    "expected {} or {}, found neither (MNIST is never downloaded; \
                     pass --data DIR or set {DIR_ENV})",
                    gz.display(),
                    plain.display()
                ),
            )
        })
}

/// The MNIST directory: `explicit` (`--data`), else `$KILN_MNIST_DIR`, else the first
/// `shared/data/mnist` found walking up from the current directory.
pub fn data_dir(explicit: Option<&Path>) -> Result<PathBuf> {
    crate::data::shared_dir(explicit, DIR_ENV, "mnist", "mnist")
}

/// A parsed IDX file of u8 elements.
#[derive(Clone, Debug, PartialEq)]
pub struct Idx {
    /// The magic number (`0x08_00 | ndims` for u8 data).
    pub magic: u32,
    /// The dimensions from the header.
    pub dims: Vec<usize>,
    /// The elements, `dims.product()` bytes.
    pub data: Vec<u8>,
}

/// Reads an IDX file of u8 elements whose magic must be `magic`; gzip is detected from its bytes.
pub fn read_idx(path: &Path, magic: u32) -> Result<Idx> {
    let raw = std::fs::read(path)
        .map_err(|e| Error::io("mnist", format!("cannot read {}: {e}", path.display())))?;
    let bytes = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(raw.as_slice())
            .read_to_end(&mut out)
            .map_err(|e| {
                Error::format(
                    "mnist",
                    format!("{}: corrupt or truncated gzip stream: {e}", path.display()),
                )
            })?;
        out
    } else {
        raw
    };
    parse_idx(&bytes, magic).map_err(|e| e.context(path.display()))
}

/// Parses IDX bytes (already decompressed) whose magic must be `magic`.
pub fn parse_idx(bytes: &[u8], magic: u32) -> Result<Idx> {
    let ndims = (magic & 0xff) as usize;
    let header = 4 + 4 * ndims;
    let word = |i: usize| {
        bytes
            .get(4 * i..4 * i + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    let found = word(0).ok_or_else(|| {
        Error::format(
            "mnist",
            format!(
                "expected a 4-byte magic number {magic}, found a file of {} bytes",
                bytes.len()
            ),
        )
    })?;
    if found != magic {
        return Err(Error::format(
            "mnist",
            format!(
                "expected magic number {magic} ({}), found {found} (0x{found:08x})",
                describe(magic)
            ),
        ));
    }
    if bytes.len() < header {
        return Err(Error::format(
            "mnist",
            format!(
                "expected a {header}-byte header ({ndims} dimensions), found {} bytes",
                bytes.len()
            ),
        ));
    }
    let dims: Vec<usize> = (1..=ndims).map(|i| word(i).unwrap_or(0) as usize).collect();
    let want = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::format("mnist", format!("dimensions {dims:?} overflow")))?;
    let have = bytes.len() - header;
    if have != want {
        return Err(Error::format(
            "mnist",
            format!(
                "dimensions {dims:?} need {want} data bytes, found {have} ({})",
                if have < want {
                    "truncated"
                } else {
                    "trailing bytes"
                }
            ),
        ));
    }
    Ok(Idx {
        magic,
        dims,
        data: bytes[header..].to_vec(),
    })
}

fn describe(magic: u32) -> &'static str {
    match magic {
        IMAGES_MAGIC => "u8 images, 3 dimensions",
        LABELS_MAGIC => "u8 labels, 1 dimension",
        _ => "IDX",
    }
}

/// Reads an images file: `(pixels, rows, cols)`.
pub fn read_images(path: &Path) -> Result<(Vec<u8>, usize, usize)> {
    let idx = read_idx(path, IMAGES_MAGIC)?;
    match idx.dims[..] {
        [_, rows, cols] if rows > 0 && cols > 0 => Ok((idx.data, rows, cols)),
        _ => Err(Error::format(
            "mnist",
            format!(
                "{}: expected images of at least 1x1 pixels, found dimensions {:?}",
                path.display(),
                idx.dims
            ),
        )),
    }
}

/// Reads a labels file, checking every label is a digit `0..=9`.
pub fn read_labels(path: &Path) -> Result<Vec<u8>> {
    let idx = read_idx(path, LABELS_MAGIC)?;
    if let Some((i, &l)) = idx.data.iter().enumerate().find(|(_, l)| **l > 9) {
        return Err(Error::format(
            "mnist",
            format!(
                "{}: expected labels 0..=9, found {l} at index {i}",
                path.display()
            ),
        ));
    }
    Ok(idx.data)
}

/// A pixel in `[0, 255]` normalised as the model expects: `(x / 255 - MEAN) / STD`.
pub fn normalize(pixel: f32) -> f32 {
    (pixel / 255.0 - MEAN) / STD
}

/// A split as a [`Dataset`] of normalised images, each augmented per epoch when `augment` is
/// set: image `i` of epoch `e` is drawn from [`image_seed`]`(seed, e, i)`, so its pixels depend
/// on nothing else (not the batch, not the order of work).
#[derive(Clone, Debug)]
pub struct Digits {
    /// The images and labels.
    pub split: Split,
    /// How training images are augmented ([`Augment::none`] for evaluation).
    pub augment: Augment,
    /// The run's seed.
    pub seed: u64,
}

impl Digits {
    /// The images of `split`, unaugmented.
    pub fn plain(split: Split) -> Self {
        Digits {
            split,
            augment: Augment::none(),
            seed: 0,
        }
    }
}

/// A batch of [`Digits`] on the host.
#[derive(Clone, Debug, PartialEq)]
pub struct DigitBatch {
    /// Normalised pixels, `len * rows * cols`.
    pub pixels: Vec<f32>,
    /// One label per image.
    pub labels: Vec<i32>,
    /// Image height.
    pub rows: usize,
    /// Image width.
    pub cols: usize,
}

impl DigitBatch {
    /// (`[B, 1, rows, cols]` pixels, `[B]` i32 labels) on `device`.
    pub fn to_device(&self, device: &Device) -> Result<(Tensor, Tensor)> {
        let b = self.labels.len();
        let x = Tensor::from_vec(self.pixels.clone(), [b, 1, self.rows, self.cols], device)?;
        let y = Tensor::from_vec(self.labels.clone(), [b], device)?;
        Ok((x, y))
    }
}

impl Dataset for Digits {
    type Batch = DigitBatch;
    fn len(&self) -> usize {
        self.split.len()
    }
    fn batch(&self, idx: &[usize], epoch: u64) -> Result<DigitBatch> {
        let augment = (!self.augment.is_none()).then_some((&self.augment, self.seed, epoch));
        host_batch(&self.split, idx, augment)
    }
}

/// The images `idx` of `split`, unaugmented, as a normalised `[B, 1, rows, cols]` f32 tensor
/// and their labels as a `[B]` i32 tensor on `device`.
pub fn batch(split: &Split, idx: &[usize], device: &Device) -> Result<(Tensor, Tensor)> {
    host_batch(split, idx, None)?.to_device(device)
}

/// The images `idx` of `split`, augmented when `augment` gives the setting, the run's seed and
/// the epoch.
fn host_batch(
    split: &Split,
    idx: &[usize],
    augment: Option<(&Augment, u64, u64)>,
) -> Result<DigitBatch> {
    let size = split.image_size();
    let mut pixels = Vec::with_capacity(idx.len() * size);
    let mut labels = Vec::with_capacity(idx.len());
    let mut scratch = vec![0u8; size];
    for &i in idx {
        let (img, label) = split.image(i).zip(split.labels.get(i)).ok_or_else(|| {
            Error::index(
                "batch",
                format!("image {i} of a split of {} images", split.len()),
            )
        })?;
        let img = match augment {
            Some((aug, seed, epoch)) => {
                aug.apply(
                    img,
                    split.rows,
                    split.cols,
                    image_seed(seed, epoch, i as u64),
                    &mut scratch,
                )?;
                &scratch[..]
            }
            None => img,
        };
        pixels.extend(img.iter().map(|&p| normalize(p as f32)));
        labels.push(*label as i32);
    }
    Ok(DigitBatch {
        pixels,
        labels,
        rows: split.rows,
        cols: split.cols,
    })
}

#[cfg(test)]
mod digits_tests {
    use super::*;

    #[test]
    fn augmented_batches_depend_on_seed_epoch_and_index_only() {
        let Ok(data) = data_dir(None).and_then(|d| Mnist::load(&d)) else {
            eprintln!("skipped: no MNIST data");
            return;
        };
        let digits = |augment| Digits {
            split: data.train.clone().truncated(20),
            augment,
            seed: 1,
        };
        let aug = digits(Augment::digits());
        let ab = aug.batch(&[3, 9], 0).unwrap();
        let ba = aug.batch(&[9, 3], 0).unwrap();
        let n = 28 * 28;
        assert_eq!(ab.pixels[..n], ba.pixels[n..]);
        assert_eq!(ab.labels, [ba.labels[1], ba.labels[0]]);
        assert_ne!(
            aug.batch(&[3], 1).unwrap().pixels,
            aug.batch(&[3], 0).unwrap().pixels
        );
        let plain = digits(Augment::none()).batch(&[3], 0).unwrap();
        assert_ne!(plain.pixels, aug.batch(&[3], 0).unwrap().pixels);
        assert_eq!(plain, host_batch(&data.train, &[3], None).unwrap());
        let e = aug.batch(&[20], 0).unwrap_err().to_string();
        assert!(e.contains("image 20 of a split of 20 images"), "{e}");
    }
}
