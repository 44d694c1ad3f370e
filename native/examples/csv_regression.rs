//! Regression on a CSV file with the `Learner`: the example writes a made-up but plausible
//! house-price table (area, rooms, age, distance to the centre, a quoted district name, the
//! price; 2,000 rows with seeded noise), reads it back with `CsvTable`, keeps four feature
//! columns, splits 80/20, standardises with the training statistics, trains an MLP with Adam
//! and a cosine schedule, and prints the validation RMSE in euros next to the spread of the
//! prices (what always predicting the mean would score).
//!
//! ```sh
//! cargo run --release -p kiln --example csv_regression
//! cargo run --release -p kiln --example csv_regression -- --out houses.csv --log log.jsonl --steps 300
//! ```
//!
//! `--steps N` (or `KILN_EXAMPLE_STEPS`) stops after N optimizer steps (default: 40 epochs),
//! `--out PATH` keeps the CSV (default: a temporary directory), `--log PATH` writes the
//! JSON-lines log, `--device` picks cpu, wgpu or cuda.

use kiln::core::autodiff::no_grad;
use kiln::core::nn::{Forward, Init, Linear, loss};
use kiln::core::optim::{Adam, Cosine};
use kiln::core::{Error, Result, Tensor};
use kiln::data::augment::SplitMix64;
use kiln::data::csv::{CsvBatch, CsvDataset, CsvTable, Scaler};
use kiln::data::loader::{DataLoader, Dataset};
use kiln::learn::report::{Console, JsonLines};
use kiln::learn::{Learner, LearnerConfig, Output};
use std::fmt::Write as _;
use std::path::PathBuf;

const FEATURES: [&str; 4] = ["area_m2", "rooms", "age_years", "distance_km"];

/// 4 -> 64 -> 64 -> 1 with ReLUs.
#[derive(kiln::core::nn::Module)]
pub struct Regressor {
    fc1: Linear,
    fc2: Linear,
    out: Linear,
}

impl Forward for Regressor {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.fc1.forward(x)?.relu()?;
        self.out.forward(&self.fc2.forward(&h)?.relu()?)
    }
}

/// What a run measured, in euros.
#[derive(Debug)]
pub struct Report {
    /// Root mean squared error of the predicted prices on the validation rows.
    pub rmse: f64,
    /// Standard deviation of the validation prices: the RMSE of predicting their mean.
    pub price_std: f64,
}

/// The house-price table as CSV text: `rows` houses from `seed`.
pub fn house_prices(rows: usize, seed: u64) -> String {
    let mut rng = SplitMix64::new(seed);
    let mut uniform = |lo: f64, hi: f64| lo + (hi - lo) * rng.next_f32() as f64;
    let districts = [
        "Old Town, north",
        "Riverside",
        "The \"Heights\"",
        "Station, east",
    ];
    let mut text = String::from("id,district,area_m2,rooms,age_years,distance_km,price_eur\n");
    for id in 0..rows {
        let area = uniform(30.0, 200.0);
        let rooms = (area / 28.0 + uniform(-1.0, 1.0)).round().clamp(1.0, 8.0);
        let age = uniform(0.0, 100.0);
        let distance = uniform(0.3, 30.0);
        // Box-Muller noise of 15,000 euros.
        let noise = (-2.0 * uniform(1e-9, 1.0).ln()).sqrt()
            * (std::f64::consts::TAU * uniform(0.0, 1.0)).cos()
            * 15_000.0;
        // Central, large, new houses cost more; the centre's premium decays with distance.
        let price = 20_000.0
            + area * 2_600.0 * (-distance / 25.0).exp() * (1.0 - 0.004 * age)
            + rooms * 8_000.0
            + noise;
        let district = districts[(distance / 7.6) as usize % districts.len()].replace('"', "\"\"");
        let _ = writeln!(
            text,
            "{id},\"{district}\",{area:.1},{rooms},{age:.0},{distance:.2},{:.0}",
            price.max(10_000.0)
        );
    }
    text
}

/// Writes the table, trains and evaluates with the options in `args`.
pub fn run(args: &[String]) -> Result<Report> {
    let opt = |name: &str| arg(args, name);
    let max_steps = steps(args)?;
    let device = kiln::device::select(opt("--device").unwrap_or("cpu"))?;
    let tmp = tempfile::tempdir()?;
    let path = opt("--out").map_or_else(|| tmp.path().join("houses.csv"), PathBuf::from);
    std::fs::write(&path, house_prices(2000, 7))
        .map_err(|e| Error::io("csv_regression", format!("{}: {e}", path.display())))?;
    println!("wrote {}", path.display());

    // Split first, then standardise both parts with the training part's statistics.
    let table = CsvTable::read(&path)?;
    let (train, valid) = CsvDataset::new(&table, &FEATURES, &["price_eur"])?.split(0.8, 1)?;
    let train = train.standardize();
    let valid = valid.standardize_with(train.scaler().expect("standardised"))?;
    // The model predicts standardised prices; this turns them back into euros.
    let price = Scaler::fit(train.targets(), 1);
    println!(
        "{} rows: {} train, {} valid; features {FEATURES:?}, mean price {:.0}, std {:.0}",
        table.len(),
        train.len(),
        valid.len(),
        price.mean[0],
        price.std[0]
    );
    let train_loader = DataLoader::new(train, 64).shuffle(3);
    let valid_loader = DataLoader::new(valid, 400);

    let mut init = Init::new(&device, 0);
    let model = Regressor {
        fc1: Linear::new(&mut init, FEATURES.len(), 64)?,
        fc2: Linear::new(&mut init, 64, 64)?,
        out: Linear::new(&mut init, 64, 1)?,
    };
    let config = LearnerConfig {
        epochs: 40,
        max_steps,
        valid_name: "valid".into(),
        ..LearnerConfig::default()
    };
    let total = config.total_steps(&train_loader) as usize;
    let mut learner = Learner::new(model, Adam::new(3e-3), config)
        .schedule(Cosine::new(3e-3, 1e-5, total))
        .reporter(Console::new());
    if let Some(log) = opt("--log") {
        learner = learner.reporter(JsonLines::new(log));
    }
    let (mean, std) = (price.mean[0] as f64, price.std[0] as f64);
    let step_device = device.clone();
    learner.fit(
        &train_loader,
        Some(&valid_loader),
        move |model, b: &CsvBatch| {
            let (x, y) = b.to_device(&step_device)?;
            let y = y.sub_scalar(mean)?.div_scalar(std)?;
            Ok(Output::new(loss::mse(&model.forward(&x)?, &y)?, b.rows))
        },
    )?;

    // Predict every validation row and measure the error in euros.
    let valid = valid_loader.dataset();
    let all: Vec<usize> = (0..valid.len()).collect();
    let (x, _) = valid.batch(&all, 0)?.to_device(&device)?;
    let mut predicted = no_grad(|| learner.model.forward(&x))?.to_vec::<f32>()?;
    price.invert(&mut predicted);
    let rmse = rms(predicted.iter().zip(valid.targets()).map(|(p, t)| p - t));
    let mean_valid = valid.targets().iter().sum::<f32>() / valid.len() as f32;
    let price_std = rms(valid.targets().iter().map(|t| t - mean_valid));
    println!(
        "validation RMSE {rmse:.0} EUR after {} steps (predicting the mean: {price_std:.0} EUR)",
        learner.state.step
    );
    Ok(Report { rmse, price_std })
}

fn rms(errors: impl Iterator<Item = f32>) -> f64 {
    let (sum, n) = errors.fold((0.0, 0usize), |(s, n), e| (s + (e as f64).powi(2), n + 1));
    (sum / n.max(1) as f64).sqrt()
}

/// The value after `name` in `args`.
fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).map(String::as_str)
}

/// `--steps N`, else `$KILN_EXAMPLE_STEPS`.
fn steps(args: &[String]) -> Result<Option<u64>> {
    let env = std::env::var("KILN_EXAMPLE_STEPS").ok();
    let Some(s) = arg(args, "--steps").or(env.as_deref()) else {
        return Ok(None);
    };
    s.parse().map(Some).map_err(|_| {
        Error::invalid(
            "csv_regression",
            format!("--steps: expected a number, found {s:?}"),
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
