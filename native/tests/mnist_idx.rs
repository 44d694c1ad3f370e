//! The IDX parser on real MNIST and on broken files written to a temporary directory.

use kiln::core::ErrorKind;
use kiln::data::mnist::{self, IMAGES_MAGIC, LABELS_MAGIC, Mnist, Split};
use std::io::Write;
use std::path::{Path, PathBuf};

fn idx(magic: u32, dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut v = magic.to_be_bytes().to_vec();
    for d in dims {
        v.extend(d.to_be_bytes());
    }
    v.extend(data);
    v
}

fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// Odd-sized random images (3 of 5x7) and labels, deterministic.
fn sample() -> (Vec<u8>, Vec<u8>) {
    let mut s = 0x1234_5678u32;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        s
    };
    let pixels = (0..3 * 5 * 7).map(|_| next() as u8).collect();
    let labels = (0..3).map(|_| (next() % 10) as u8).collect();
    (pixels, labels)
}

#[test]
fn plain_and_gzipped_files_parse_to_the_same_split() {
    let dir = tempfile::tempdir().unwrap();
    let (pixels, labels) = sample();
    let img = idx(IMAGES_MAGIC, &[3, 5, 7], &pixels);
    let lab = idx(LABELS_MAGIC, &[3], &labels);
    let a = Split::load(&write(dir.path(), "i", &img), &write(dir.path(), "l", &lab)).unwrap();
    let b = Split::load(
        &write(dir.path(), "i.gz", &gz(&img)),
        &write(dir.path(), "l.gz", &gz(&lab)),
    )
    .unwrap();
    assert_eq!(a, b);
    assert_eq!((a.len(), a.rows, a.cols), (3, 5, 7));
    assert_eq!(a.image(2).unwrap(), &pixels[70..105]);
    assert_eq!(a.labels, labels);
    assert!(a.image(3).is_none());
}

fn load_err(img: &[u8], lab: &[u8]) -> kiln::core::Error {
    let dir = tempfile::tempdir().unwrap();
    let i = write(dir.path(), "imgs.gz", &gz(img));
    let l = write(dir.path(), "labs", lab);
    Split::load(&i, &l).unwrap_err()
}

#[test]
fn wrong_magic_names_the_file_and_both_numbers() {
    let (pixels, labels) = sample();
    // Labels file given where images are expected.
    let e = load_err(
        &idx(LABELS_MAGIC, &[3], &labels),
        &idx(LABELS_MAGIC, &[3], &labels),
    );
    let msg = e.to_string();
    assert_eq!(e.kind(), ErrorKind::Format);
    assert!(msg.contains("imgs.gz"), "{msg}");
    assert!(
        msg.contains("expected magic number 2051") && msg.contains("found 2049"),
        "{msg}"
    );
    // Images file given where labels are expected.
    let img = idx(IMAGES_MAGIC, &[3, 5, 7], &pixels);
    let msg = load_err(&img, &img).to_string();
    assert!(
        msg.contains("labs") && msg.contains("expected magic number 2049"),
        "{msg}"
    );
}

#[test]
fn truncated_files_are_errors() {
    let (pixels, labels) = sample();
    let lab = idx(LABELS_MAGIC, &[3], &labels);
    let full = idx(IMAGES_MAGIC, &[3, 5, 7], &pixels);
    // Data cut short.
    let msg = load_err(&full[..full.len() - 1], &lab).to_string();
    assert!(
        msg.contains("need 105 data bytes, found 104") && msg.contains("truncated"),
        "{msg}"
    );
    // Header cut short.
    let msg = load_err(&full[..10], &lab).to_string();
    assert!(
        msg.contains("expected a 16-byte header") && msg.contains("found 10 bytes"),
        "{msg}"
    );
    // Empty file.
    let msg = load_err(&[], &lab).to_string();
    assert!(msg.contains("found a file of 0 bytes"), "{msg}");
    // Trailing bytes.
    let mut long = full.clone();
    long.push(7);
    assert!(load_err(&long, &lab).to_string().contains("trailing bytes"));
    // A gzip stream cut in the middle.
    let dir = tempfile::tempdir().unwrap();
    let z = gz(&full);
    let i = write(dir.path(), "cut.gz", &z[..z.len() / 2]);
    let l = write(dir.path(), "l", &lab);
    let msg = Split::load(&i, &l).unwrap_err().to_string();
    assert!(msg.contains("cut.gz") && msg.contains("gzip"), "{msg}");
}

#[test]
fn counts_and_labels_are_checked() {
    let (pixels, mut labels) = sample();
    let img = idx(IMAGES_MAGIC, &[3, 5, 7], &pixels);
    let msg = load_err(&img, &idx(LABELS_MAGIC, &[2], &labels[..2])).to_string();
    assert!(
        msg.contains("3 images") && msg.contains("2 labels"),
        "{msg}"
    );
    labels[1] = 10;
    let msg = load_err(&img, &idx(LABELS_MAGIC, &[3], &labels)).to_string();
    assert!(
        msg.contains("expected labels 0..=9, found 10 at index 1"),
        "{msg}"
    );
}

#[test]
fn missing_directory_says_what_it_looked_for() {
    let dir = tempfile::tempdir().unwrap();
    let msg = Mnist::load(dir.path()).unwrap_err().to_string();
    assert!(
        msg.contains("train-images-idx3-ubyte.gz") && msg.contains("never downloaded"),
        "{msg}"
    );
}

#[test]
fn real_mnist_loads_with_the_published_counts() {
    let data = Mnist::load(&mnist::data_dir(None).unwrap()).unwrap();
    assert_eq!((data.train.len(), data.test.len()), (60_000, 10_000));
    assert_eq!((data.train.rows, data.train.cols), (28, 28));
    let mut counts = [0usize; 10];
    data.test
        .labels
        .iter()
        .for_each(|&l| counts[l as usize] += 1);
    assert_eq!(
        counts,
        [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    );
    // Images hold ink: mean pixel of the test set is near the well-known 0.1325 * 255.
    let mean =
        data.test.images.iter().map(|&p| p as f64).sum::<f64>() / data.test.images.len() as f64;
    assert!((mean / 255.0 - 0.1325).abs() < 0.002, "{mean}");
}
