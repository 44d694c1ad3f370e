//! A dataset of image files, one folder per class, trained with the `Learner`. The example first
//! writes MNIST digits as PNG files, `<dir>/{train,valid}/<label>/<n>.png` (100 per class for
//! training, 20 for validation by default), then defines `ImageFolder`: it scans the class
//! folders (sorted by name: the label of a folder is its position), and decodes each PNG to
//! normalised grayscale when a batch asks for it, so the images never all sit in memory. A bad
//! file is an error naming it. An MLP trains on it with `Output::classification`, which adds the
//! accuracy to the loss; the validation accuracy is printed at the end.
//!
//! ```sh
//! cargo run --release -p kiln --example image_folder
//! cargo run --release -p kiln --example image_folder -- --dir digits --train-per-class 500 --steps 400
//! ```
//!
//! `--steps N` (or `KILN_EXAMPLE_STEPS`) stops after N optimizer steps (default: 10 epochs),
//! `--dir DIR` keeps the images (default: a temporary directory), `--device` picks cpu, wgpu or
//! cuda. MNIST is read from `--data DIR`, `$KILN_MNIST_DIR` or `shared/data/mnist` in a parent
//! directory.

use kiln::core::nn::{Forward, Init, Linear, loss};
use kiln::core::optim::Adam;
use kiln::core::{Error, Result, Tensor};
use kiln::data::image::read_png_gray;
use kiln::data::loader::{DataLoader, Dataset};
use kiln::data::mnist::{DigitBatch, Mnist, Split, data_dir, normalize};
use kiln::learn::report::Console;
use kiln::learn::{Learner, LearnerConfig, Output};
use std::path::{Path, PathBuf};

/// Labelled PNG files: `root/<class>/<file>.png`.
#[derive(Debug)]
pub struct ImageFolder {
    /// Class names (the folders' names), sorted; a label is an index into it.
    pub classes: Vec<String>,
    /// Every image with its label, by class then file name.
    pub files: Vec<(PathBuf, usize)>,
    /// The size every image must have, `(width, height)`.
    pub size: (usize, usize),
}

impl ImageFolder {
    /// Lists the `.png` files of each subfolder of `root`; images must be `width x height`.
    pub fn scan(root: &Path, width: usize, height: usize) -> Result<ImageFolder> {
        let list = |dir: &Path| -> Result<Vec<PathBuf>> {
            let entries = std::fs::read_dir(dir)
                .map_err(|e| Error::io("image folder", format!("{}: {e}", dir.display())))?;
            let mut paths: Vec<PathBuf> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
            paths.sort();
            Ok(paths)
        };
        let mut classes = Vec::new();
        let mut files = Vec::new();
        for class_dir in list(root)?.into_iter().filter(|p| p.is_dir()) {
            let label = classes.len();
            let pngs = list(&class_dir)?
                .into_iter()
                .filter(|p| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("png")));
            files.extend(pngs.map(|p| (p, label)));
            classes.push(
                class_dir
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into(),
            );
        }
        if files.is_empty() {
            return Err(Error::io(
                "image folder",
                format!(
                    "expected <class>/<image>.png files in {}, found {} class folders and no PNG",
                    root.display(),
                    classes.len()
                ),
            ));
        }
        Ok(ImageFolder {
            classes,
            files,
            size: (width, height),
        })
    }

    /// Image `i`'s grayscale pixels normalised as MNIST's.
    fn pixels(&self, i: usize) -> Result<Vec<f32>> {
        let path = &self.files[i].0;
        // read_png_gray's messages name the file already; the op says who read it.
        let (pixels, w, h) =
            read_png_gray(path).map_err(|e| Error::format("image folder", e.message()))?;
        if (w, h) != self.size {
            return Err(Error::shape(
                "image folder",
                format!(
                    "{}: expected a {}x{} image, found {w}x{h}",
                    path.display(),
                    self.size.0,
                    self.size.1
                ),
            ));
        }
        Ok(pixels.into_iter().map(|p| normalize(p as f32)).collect())
    }
}

impl Dataset for ImageFolder {
    type Batch = DigitBatch;
    fn len(&self) -> usize {
        self.files.len()
    }
    fn batch(&self, idx: &[usize], _epoch: u64) -> Result<DigitBatch> {
        let mut pixels = Vec::with_capacity(idx.len() * self.size.0 * self.size.1);
        let mut labels = Vec::with_capacity(idx.len());
        for &i in idx {
            if i >= self.len() {
                return Err(Error::index(
                    "image folder",
                    format!("expected an image below {}, found {i}", self.len()),
                ));
            }
            pixels.extend(self.pixels(i)?);
            labels.push(self.files[i].1 as i32);
        }
        Ok(DigitBatch {
            pixels,
            labels,
            rows: self.size.1,
            cols: self.size.0,
        })
    }
}

/// Writes an 8-bit grayscale PNG.
pub fn write_png(path: &Path, pixels: &[u8], width: usize, height: usize) -> Result<()> {
    let err =
        |e: &dyn std::fmt::Display| Error::io("image folder", format!("{}: {e}", path.display()));
    let file = std::fs::File::create(path).map_err(|e| err(&e))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), width as u32, height as u32);
    enc.set_color(png::ColorType::Grayscale);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header().map_err(|e| err(&e))?;
    writer.write_image_data(pixels).map_err(|e| err(&e))
}

/// Writes the first `per_class` images of each digit of `split` as `dir/<digit>/<n>.png`.
pub fn write_digits(split: &Split, dir: &Path, per_class: usize) -> Result<()> {
    let mut written = [0usize; 10];
    for (i, &label) in split.labels.iter().enumerate() {
        let n = &mut written[label as usize];
        if *n == per_class {
            continue;
        }
        let class = dir.join(label.to_string());
        std::fs::create_dir_all(&class)?;
        let img = split.image(i).expect("an image per label");
        write_png(
            &class.join(format!("{n:04}.png")),
            img,
            split.cols,
            split.rows,
        )?;
        *n += 1;
    }
    Ok(())
}

/// 784 -> 128 -> 10 with a ReLU.
#[derive(kiln::core::nn::Module)]
pub struct Mlp {
    fc1: Linear,
    fc2: Linear,
}

impl Forward for Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.fc1.forward(&x.flatten(1, -1)?)?.relu()?;
        self.fc2.forward(&h)
    }
}

/// Writes the image folders, trains and returns the validation accuracy.
pub fn run(args: &[String]) -> Result<f64> {
    let opt = |name: &str| arg(args, name);
    let count = |name: &str, default: u64| opt(name).map_or(Ok(default), |s| number(name, s));
    let max_steps = opt("--steps")
        .map(str::to_string)
        .or(std::env::var("KILN_EXAMPLE_STEPS").ok())
        .map(|s| number("--steps", &s))
        .transpose()?;
    let (train_n, valid_n) = (
        count("--train-per-class", 100)?,
        count("--valid-per-class", 20)?,
    );
    let device = kiln::device::select(opt("--device").unwrap_or("cpu"))?;
    let tmp = tempfile::tempdir()?;
    let dir = opt("--dir").map_or_else(|| tmp.path().to_path_buf(), PathBuf::from);

    let mnist = Mnist::load(&data_dir(opt("--data").map(Path::new))?)?;
    write_digits(&mnist.train, &dir.join("train"), train_n as usize)?;
    write_digits(&mnist.test, &dir.join("valid"), valid_n as usize)?;
    let train = ImageFolder::scan(&dir.join("train"), 28, 28)?;
    let valid = ImageFolder::scan(&dir.join("valid"), 28, 28)?;
    println!(
        "{}: {} training and {} validation images of classes {:?}",
        dir.display(),
        train.len(),
        valid.len(),
        train.classes
    );

    let mut init = Init::new(&device, 0);
    let model = Mlp {
        fc1: Linear::new(&mut init, 784, 128)?,
        fc2: Linear::new(&mut init, 128, 10)?,
    };
    let config = LearnerConfig {
        epochs: 10,
        max_steps,
        // With a step limit, evaluate when it is reached (it may fall inside an epoch).
        eval_every: max_steps,
        valid_name: "valid".into(),
        ..LearnerConfig::default()
    };
    let mut learner = Learner::new(model, Adam::new(1e-3), config).reporter(Console::new());
    let train = DataLoader::new(train, 32).shuffle(0);
    let valid = DataLoader::new(valid, 100);
    learner.fit(&train, Some(&valid), |model, batch| {
        let (x, y) = batch.to_device(&device)?;
        let logits = model.forward(&x)?;
        Output::classification(loss::cross_entropy(&logits, &y, 0.0)?, &logits, &y)
    })?;
    let acc = learner
        .state
        .last_eval
        .get("valid_acc")
        .copied()
        .unwrap_or(0.0);
    println!(
        "validation accuracy {acc:.4} after {} steps",
        learner.state.step
    );
    Ok(acc)
}

/// The value after `name` in `args`.
fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).map(String::as_str)
}

fn number(name: &str, value: &str) -> Result<u64> {
    value.parse().map_err(|_| {
        Error::invalid(
            "image_folder",
            format!("{name}: expected a number, found {value:?}"),
        )
    })
}

#[allow(dead_code)] // a module of the examples test, which calls `run`
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
