//! CSV tables of numbers, read by a hand-written RFC 4180 parser, and a [`Dataset`] of chosen
//! feature and target columns.
//!
//! The text has a header row naming the columns, fields separated by commas, records by `\n` or
//! `\r\n`. A field in double quotes may hold commas, line breaks and quotes (doubled: `""`).
//! Blank lines are skipped. Cells stay text until a column is used, so a table may hold columns
//! of names or dates that no dataset selects; a selected column must hold finite numbers.
//! Every error names the line (of the text, 1-based; a record spanning lines is named by its
//! first) and what was expected and found.
//!
//! ```
//! use kiln::data::csv::{CsvDataset, CsvTable};
//! use kiln::data::loader::Dataset;
//! let table = CsvTable::parse("city,area,price\n\"Paris, FR\",50,400\nLyon,70,300\nNice,60,350\n")?;
//! let data = CsvDataset::new(&table, &["area"], &["price"])?.standardize();
//! assert_eq!(data.len(), 3);
//! let batch = data.batch(&[1], 0)?;
//! assert_eq!(batch.targets, [300.0]);
//! assert!((batch.features[0] - 1.2247).abs() < 1e-3); // (70 - 60) / std
//! // A validation set reuses the training statistics:
//! let valid = CsvDataset::new(&table, &["area"], &["price"])?.standardize_with(data.scaler().unwrap())?;
//! assert_eq!(valid.features(), data.features());
//! # Ok::<(), kiln::core::Error>(())
//! ```

use crate::core::{Device, Error, Result, Tensor};
use crate::data::loader::{Dataset, permutation};
use std::path::Path;

fn format_err(line: usize, what: impl std::fmt::Display) -> Error {
    Error::format("csv", format!("line {line}: {what}"))
}

/// A CSV text's header and records, cells as text.
#[derive(Clone, Debug, PartialEq)]
pub struct CsvTable {
    columns: Vec<String>,
    rows: Vec<Vec<String>>,
    /// The line of the text each record starts on, for error messages.
    lines: Vec<usize>,
}

impl CsvTable {
    /// Reads and parses the file at `path` (errors are prefixed with the path).
    pub fn read(path: impl AsRef<Path>) -> Result<CsvTable> {
        let path = path.as_ref();
        let bytes = std::fs::read(path)
            .map_err(|e| Error::io("csv", format!("cannot read {}: {e}", path.display())))?;
        let text = String::from_utf8(bytes).map_err(|e| {
            let line = 1 + e.as_bytes()[..e.utf8_error().valid_up_to()]
                .iter()
                .filter(|&&b| b == b'\n')
                .count();
            format_err(line, "expected UTF-8 text, found an invalid byte sequence")
        });
        text.and_then(|t| CsvTable::parse(&t))
            .map_err(|e| e.context(path.display()))
    }

    /// Parses CSV text: a header row, then at least one record with as many fields.
    pub fn parse(text: &str) -> Result<CsvTable> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut records = parse_records(text)?.into_iter();
        let Some((_, columns)) = records.next() else {
            return Err(format_err(1, "expected a header row, found an empty text"));
        };
        for (i, name) in columns.iter().enumerate() {
            if let Some(j) = columns[..i].iter().position(|c| c == name) {
                return Err(format_err(
                    1,
                    format!(
                        "expected distinct column names, found {name:?} as columns {} and {}",
                        j + 1,
                        i + 1
                    ),
                ));
            }
        }
        let (mut lines, mut rows) = (Vec::new(), Vec::new());
        for (line, fields) in records {
            if fields.len() != columns.len() {
                return Err(format_err(
                    line,
                    format!(
                        "expected {} fields (as in the header), found {}",
                        columns.len(),
                        fields.len()
                    ),
                ));
            }
            lines.push(line);
            rows.push(fields);
        }
        if rows.is_empty() {
            return Err(format_err(
                2,
                "expected at least one record after the header, found none",
            ));
        }
        Ok(CsvTable {
            columns,
            rows,
            lines,
        })
    }

    /// The column names, from the header.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }
    /// Number of records (the header not counted).
    pub fn len(&self) -> usize {
        self.rows.len()
    }
    /// `true` when there is no record (never for a parsed table).
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
    /// The text of record `row`'s cell in column `col` (unquoted, escapes resolved).
    pub fn cell(&self, row: usize, col: usize) -> Option<&str> {
        self.rows.get(row)?.get(col).map(String::as_str)
    }

    /// The position of column `name`.
    pub fn column_index(&self, name: &str) -> Result<usize> {
        self.columns.iter().position(|c| c == name).ok_or_else(|| {
            Error::invalid(
                "csv",
                format!(
                    "expected a column named {name:?}, found columns {}",
                    self.columns.join(", ")
                ),
            )
        })
    }

    /// Column `name` as numbers (surrounding spaces allowed).
    pub fn column(&self, name: &str) -> Result<Vec<f32>> {
        let col = self.column_index(name)?;
        self.rows
            .iter()
            .zip(&self.lines)
            .map(|(row, &line)| {
                let cell = row[col].trim();
                cell.parse::<f32>()
                    .ok()
                    .filter(|v| v.is_finite())
                    .ok_or_else(|| {
                        format_err(
                            line,
                            format!("column {name:?}: expected a finite number, found {cell:?}"),
                        )
                    })
            })
            .collect()
    }
}

/// The records of `text` with the line each starts on. Works on bytes: the delimiters are
/// ASCII, and UTF-8 never uses ASCII bytes inside a multi-byte character, so every slice taken
/// here is on a character boundary.
fn parse_records(text: &str) -> Result<Vec<(usize, Vec<String>)>> {
    let b = text.as_bytes();
    let crlf = |i: usize| b[i] == b'\r' && b.get(i + 1) == Some(&b'\n');
    let end_of_field = |i: usize| b[i] == b',' || b[i] == b'\n' || crlf(i);
    let (mut records, mut line, mut i) = (Vec::new(), 1, 0);
    while i < b.len() {
        // A blank line is no record.
        if b[i] == b'\n' || crlf(i) {
            i += if b[i] == b'\n' { 1 } else { 2 };
            line += 1;
            continue;
        }
        let start_line = line;
        let mut fields = Vec::new();
        loop {
            let mut field = String::new();
            if b.get(i) == Some(&b'"') {
                let open_line = line;
                i += 1;
                let mut seg = i;
                loop {
                    match b.get(i) {
                        None => {
                            return Err(format_err(
                                open_line,
                                "expected a closing quote for the field opened here, \
                                 found the end of the text",
                            ));
                        }
                        Some(b'"') if b.get(i + 1) == Some(&b'"') => {
                            field.push_str(&text[seg..=i]);
                            i += 2;
                            seg = i;
                        }
                        Some(b'"') => break,
                        Some(c) => {
                            line += usize::from(*c == b'\n');
                            i += 1;
                        }
                    }
                }
                field.push_str(&text[seg..i]);
                i += 1;
                if i < b.len() && !end_of_field(i) {
                    let found = text[i..].chars().next().unwrap_or_default();
                    return Err(format_err(
                        line,
                        format!(
                            "expected a comma or the end of the line after a closing quote, \
                             found {found:?}"
                        ),
                    ));
                }
            } else {
                let seg = i;
                while i < b.len() && !end_of_field(i) {
                    if b[i] == b'"' {
                        return Err(format_err(
                            line,
                            "expected no quote inside an unquoted field, found one \
                             (quote the whole field and double the quotes in it)",
                        ));
                    }
                    i += 1;
                }
                field.push_str(&text[seg..i]);
            }
            fields.push(field);
            match b.get(i) {
                Some(b',') => i += 1,
                Some(b'\n') => {
                    i += 1;
                    line += 1;
                    break;
                }
                Some(_) => {
                    i += 2; // \r\n
                    line += 1;
                    break;
                }
                None => break,
            }
        }
        records.push((start_line, fields));
    }
    Ok(records)
}

/// Per-column mean and standard deviation: `(x - mean) / std`.
#[derive(Clone, Debug, PartialEq)]
pub struct Scaler {
    /// Mean per column.
    pub mean: Vec<f32>,
    /// Population standard deviation per column (1 for a constant column, so it maps to 0).
    pub std: Vec<f32>,
}

impl Scaler {
    /// The statistics of the `cols` columns of row-major `values` (accumulated in f64).
    pub fn fit(values: &[f32], cols: usize) -> Scaler {
        let rows = (values.len() / cols.max(1)).max(1) as f64;
        let mut mean = vec![0f64; cols];
        let mut sq = vec![0f64; cols];
        for row in values.chunks_exact(cols.max(1)) {
            for (j, &v) in row.iter().enumerate() {
                mean[j] += v as f64;
                sq[j] += v as f64 * v as f64;
            }
        }
        let mean: Vec<f64> = mean.iter().map(|s| s / rows).collect();
        let std = sq
            .iter()
            .zip(&mean)
            .map(|(s, m)| {
                let sd = (s / rows - m * m).max(0.0).sqrt();
                if sd > 1e-12 { sd as f32 } else { 1.0 }
            })
            .collect();
        Scaler {
            mean: mean.into_iter().map(|m| m as f32).collect(),
            std,
        }
    }
    /// Number of columns.
    pub fn cols(&self) -> usize {
        self.mean.len()
    }
    /// Standardises row-major `values` in place.
    pub fn apply(&self, values: &mut [f32]) {
        for row in values.chunks_exact_mut(self.cols().max(1)) {
            for ((v, m), s) in row.iter_mut().zip(&self.mean).zip(&self.std) {
                *v = (*v - m) / s;
            }
        }
    }
    /// Undoes [`Scaler::apply`] in place (predictions back in the data's units).
    pub fn invert(&self, values: &mut [f32]) {
        for row in values.chunks_exact_mut(self.cols().max(1)) {
            for ((v, m), s) in row.iter_mut().zip(&self.mean).zip(&self.std) {
                *v = *v * s + m;
            }
        }
    }
}

/// Feature and target columns of a [`CsvTable`] as a [`Dataset`] of rows.
#[derive(Clone, Debug, PartialEq)]
pub struct CsvDataset {
    feature_names: Vec<String>,
    target_names: Vec<String>,
    /// Row-major, `len * feature_names.len()`.
    features: Vec<f32>,
    /// Row-major, `len * target_names.len()`.
    targets: Vec<f32>,
    scaler: Option<Scaler>,
}

impl CsvDataset {
    /// The columns `features` and `targets` of `table` (at least one of each, no column in both).
    pub fn new(table: &CsvTable, features: &[&str], targets: &[&str]) -> Result<CsvDataset> {
        if features.is_empty() || targets.is_empty() {
            return Err(Error::invalid(
                "csv dataset",
                format!(
                    "expected at least one feature and one target column, found {} and {}",
                    features.len(),
                    targets.len()
                ),
            ));
        }
        if let Some(both) = features.iter().find(|f| targets.contains(f)) {
            return Err(Error::invalid(
                "csv dataset",
                format!("expected disjoint feature and target columns, found {both:?} in both"),
            ));
        }
        let gather = |names: &[&str]| -> Result<Vec<f32>> {
            let cols = names
                .iter()
                .map(|n| table.column(n))
                .collect::<Result<Vec<_>>>()?;
            Ok((0..table.len())
                .flat_map(|r| cols.iter().map(move |c| c[r]))
                .collect())
        };
        let owned = |names: &[&str]| names.iter().map(|s| s.to_string()).collect();
        Ok(CsvDataset {
            features: gather(features)?,
            targets: gather(targets)?,
            feature_names: owned(features),
            target_names: owned(targets),
            scaler: None,
        })
    }

    /// Standardises the features with this dataset's own mean and standard deviation (see
    /// [`CsvDataset::scaler`] to apply them to a validation set).
    pub fn standardize(self) -> CsvDataset {
        let scaler = Scaler::fit(&self.features, self.feature_cols());
        self.scaled(scaler)
    }

    /// Standardises the features with given statistics (the training set's).
    pub fn standardize_with(self, scaler: &Scaler) -> Result<CsvDataset> {
        if scaler.cols() != self.feature_cols() || scaler.std.len() != scaler.cols() {
            return Err(Error::shape(
                "csv dataset",
                format!(
                    "expected statistics of {} feature columns, found {}",
                    self.feature_cols(),
                    scaler.cols()
                ),
            ));
        }
        Ok(self.scaled(scaler.clone()))
    }

    fn scaled(mut self, scaler: Scaler) -> CsvDataset {
        if let Some(old) = &self.scaler {
            old.invert(&mut self.features);
        }
        scaler.apply(&mut self.features);
        self.scaler = Some(scaler);
        self
    }

    /// The statistics the features were standardised with, if they were.
    pub fn scaler(&self) -> Option<&Scaler> {
        self.scaler.as_ref()
    }

    /// A seeded random split into `(train, valid)`, `fraction` of the rows (rounded) in
    /// `train`; both must get at least one row. Standardisation, if any, carries over.
    pub fn split(&self, fraction: f64, seed: u64) -> Result<(CsvDataset, CsvDataset)> {
        let n = self.len();
        let k = (fraction * n as f64).round();
        if !(k >= 1.0 && k < n as f64) {
            return Err(Error::invalid(
                "csv dataset",
                format!(
                    "expected a split fraction leaving rows on both sides, found {fraction} of {n} rows"
                ),
            ));
        }
        let order = permutation(n, seed, 0);
        let (a, b) = order.split_at(k as usize);
        let part = |idx: &[usize]| {
            let mut sorted = idx.to_vec();
            sorted.sort_unstable(); // keep the file's order within each part
            let batch = self.gather(&sorted);
            CsvDataset {
                features: batch.features,
                targets: batch.targets,
                feature_names: self.feature_names.clone(),
                target_names: self.target_names.clone(),
                scaler: self.scaler.clone(),
            }
        };
        Ok((part(a), part(b)))
    }

    /// Names of the feature columns.
    pub fn feature_names(&self) -> &[String] {
        &self.feature_names
    }
    /// Names of the target columns.
    pub fn target_names(&self) -> &[String] {
        &self.target_names
    }
    /// Features per row.
    pub fn feature_cols(&self) -> usize {
        self.feature_names.len()
    }
    /// Targets per row.
    pub fn target_cols(&self) -> usize {
        self.target_names.len()
    }
    /// All features, row-major (standardised when [`CsvDataset::scaler`] is set).
    pub fn features(&self) -> &[f32] {
        &self.features
    }
    /// All targets, row-major, as in the file.
    pub fn targets(&self) -> &[f32] {
        &self.targets
    }

    /// Rows `idx` (checked by the caller).
    fn gather(&self, idx: &[usize]) -> CsvBatch {
        let (f, t) = (self.feature_cols(), self.target_cols());
        CsvBatch {
            features: idx
                .iter()
                .flat_map(|&i| &self.features[i * f..(i + 1) * f])
                .copied()
                .collect(),
            targets: idx
                .iter()
                .flat_map(|&i| &self.targets[i * t..(i + 1) * t])
                .copied()
                .collect(),
            rows: idx.len(),
            feature_cols: f,
            target_cols: t,
        }
    }
}

impl Dataset for CsvDataset {
    type Batch = CsvBatch;
    fn len(&self) -> usize {
        self.targets.len() / self.target_cols().max(1)
    }
    fn batch(&self, idx: &[usize], _epoch: u64) -> Result<CsvBatch> {
        if let Some(&bad) = idx.iter().find(|&&i| i >= self.len()) {
            return Err(Error::index(
                "csv dataset",
                format!("expected a row below {}, found {bad}", self.len()),
            ));
        }
        Ok(self.gather(idx))
    }
}

/// Rows of a [`CsvDataset`] on the host.
#[derive(Clone, Debug, PartialEq)]
pub struct CsvBatch {
    /// Row-major `rows * feature_cols`.
    pub features: Vec<f32>,
    /// Row-major `rows * target_cols`.
    pub targets: Vec<f32>,
    /// Rows in the batch.
    pub rows: usize,
    /// Features per row.
    pub feature_cols: usize,
    /// Targets per row.
    pub target_cols: usize,
}

impl CsvBatch {
    /// (`[rows, feature_cols]` features, `[rows, target_cols]` targets) as f32 on `device`.
    pub fn to_device(&self, device: &Device) -> Result<(Tensor, Tensor)> {
        let x = Tensor::from_vec(
            self.features.clone(),
            [self.rows, self.feature_cols],
            device,
        )?;
        let y = Tensor::from_vec(self.targets.clone(), [self.rows, self.target_cols], device)?;
        Ok((x, y))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::augment::SplitMix64;

    const SAMPLE: &str = "id,\"note, free text\",x1,x2,y\r\n\
        1,\"said \"\"hi\"\"\",1.5,-2,10\r\n\
        \n\
        2,\"two\nlines\", 2.5 ,0,20\n\
        3,,3.5,2e0,30";

    fn err(text: &str) -> String {
        CsvTable::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn parses_quotes_escapes_blank_lines_and_crlf() {
        let t = CsvTable::parse(SAMPLE).unwrap();
        assert_eq!(t.columns(), ["id", "note, free text", "x1", "x2", "y"]);
        assert_eq!(t.len(), 3);
        assert_eq!(t.cell(0, 1), Some("said \"hi\""));
        assert_eq!(t.cell(1, 1), Some("two\nlines"));
        assert_eq!(t.cell(2, 1), Some(""));
        assert_eq!(t.column("x1").unwrap(), [1.5, 2.5, 3.5]);
        assert_eq!(t.column("x2").unwrap(), [-2.0, 0.0, 2.0]);
        // Records are named by the line they start on: record 3 follows a two-line record.
        assert_eq!(t.lines, [2, 4, 6]);
        // A trailing comma is an empty last field; a BOM is not part of the first name.
        let t = CsvTable::parse("\u{feff}a,b\n1,\n").unwrap();
        assert_eq!((t.columns()[0].as_str(), t.cell(0, 1)), ("a", Some("")));
    }

    #[test]
    fn every_failure_names_its_line_and_what_was_found() {
        for (text, want) in [
            (
                "a,b\n1,2\n3\n",
                "line 3: expected 2 fields (as in the header), found 1",
            ),
            (
                "a,b\n1,2,3\n",
                "line 2: expected 2 fields (as in the header), found 3",
            ),
            ("a,b\n1,\"2\n3,4\n", "line 2: expected a closing quote"),
            (
                "a,b\n1,\"2\"x\n",
                "line 2: expected a comma or the end of the line after a closing quote, found 'x'",
            ),
            (
                "a,b\n1,2\"\n",
                "line 2: expected no quote inside an unquoted field",
            ),
            ("", "line 1: expected a header row, found an empty text"),
            ("\n\r\n", "expected a header row"),
            (
                "a,b\n",
                "line 2: expected at least one record after the header, found none",
            ),
            (
                "a,a\n1,2\n",
                "expected distinct column names, found \"a\" as columns 1 and 2",
            ),
        ] {
            let e = err(text);
            assert!(e.starts_with("csv: ") && e.contains(want), "{text:?}: {e}");
        }
        let t = CsvTable::parse(SAMPLE).unwrap();
        let e = t
            .column("id")
            .map(drop)
            .and(t.column("note, free text"))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "csv: line 2: column \"note, free text\": expected a finite number, found \"said \\\"hi\\\"\""
        );
        let e = CsvTable::parse("a,b\n1,2\n3,inf\n")
            .unwrap()
            .column("b")
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("line 3: column \"b\": expected a finite number, found \"inf\""),
            "{e}"
        );
        let e = CsvDataset::new(&t, &["x1", "nope"], &["y"]).unwrap_err();
        assert!(
            e.to_string().contains(
                "expected a column named \"nope\", found columns id, note, free text, x1, x2, y"
            ),
            "{e}"
        );
        assert!(
            CsvDataset::new(&t, &["y"], &["y"])
                .unwrap_err()
                .to_string()
                .contains("\"y\" in both")
        );
        assert!(CsvDataset::new(&t, &[], &["y"]).is_err());
    }

    #[test]
    fn read_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.csv");
        std::fs::write(&path, b"a\n1\n\xff\n").unwrap();
        let e = CsvTable::read(&path).unwrap_err().to_string();
        assert!(
            e.contains("bad.csv") && e.contains("line 3: expected UTF-8"),
            "{e}"
        );
        std::fs::write(&path, "a,b\n1,2\n").unwrap();
        assert_eq!(CsvTable::read(&path).unwrap().len(), 1);
        let e = CsvTable::read(dir.path().join("missing.csv")).unwrap_err();
        assert!(e.to_string().contains("cannot read") && e.to_string().contains("missing.csv"));
    }

    #[test]
    fn dataset_batches_standardises_and_splits() {
        let mut text = String::from("a,b,y\n");
        for i in 0..100 {
            text += &format!("{},{},{}\n", i, 5, 2 * i);
        }
        let t = CsvTable::parse(&text).unwrap();
        let d = CsvDataset::new(&t, &["a", "b"], &["y"]).unwrap();
        let b = d.batch(&[3, 7], 0).unwrap();
        assert_eq!(
            (b.features, b.targets),
            (vec![3.0, 5.0, 7.0, 5.0], vec![6.0, 14.0])
        );
        let (x, y) = d
            .batch(&[0, 1, 2], 0)
            .unwrap()
            .to_device(&Device::cpu())
            .unwrap();
        assert_eq!((x.dims(), y.dims()), (&[3, 2][..], &[3, 1][..]));
        assert!(
            d.batch(&[100], 0)
                .unwrap_err()
                .to_string()
                .contains("below 100, found 100")
        );

        let (train, valid) = d.split(0.8, 4).unwrap();
        assert_eq!((train.len(), valid.len()), (80, 20));
        let mut all: Vec<f32> = train
            .targets()
            .iter()
            .chain(valid.targets())
            .copied()
            .collect();
        all.sort_by(f32::total_cmp);
        assert_eq!(all, d.targets());
        assert_ne!(d.split(0.8, 5).unwrap().1, valid);
        assert!(
            d.split(1.0, 0).is_err() && d.split(0.001, 0).is_err() && d.split(f64::NAN, 0).is_err()
        );

        let train = train.standardize();
        let s = train.scaler().unwrap().clone();
        assert_eq!(s.std[1], 1.0); // constant column
        let col = |d: &CsvDataset| {
            d.features()
                .iter()
                .step_by(2)
                .copied()
                .collect::<Vec<f32>>()
        };
        let mean = col(&train).iter().sum::<f32>() / 80.0;
        let var = col(&train).iter().map(|v| (v - mean).powi(2)).sum::<f32>() / 80.0;
        assert!(
            mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-4,
            "{mean} {var}"
        );
        let valid = valid.standardize_with(&s).unwrap();
        let raw: Vec<f32> = d.split(0.8, 4).unwrap().1.features().to_vec();
        assert!((valid.features()[0] - (raw[0] - s.mean[0]) / s.std[0]).abs() < 1e-6);
        // Restandardising starts from the raw values, not the standardised ones.
        let again = valid.clone().standardize_with(&s).unwrap();
        assert_eq!(again, valid);
        let mut back = valid.features().to_vec();
        s.invert(&mut back);
        assert!(back.iter().zip(&raw).all(|(a, b)| (a - b).abs() < 1e-4));
        let one = CsvDataset::new(&t, &["a"], &["y"]).unwrap();
        assert!(
            one.standardize_with(&s)
                .unwrap_err()
                .to_string()
                .contains("of 1 feature columns, found 2")
        );
    }

    /// Random byte edits of a valid text never panic: each parses (and its columns convert or
    /// fail cleanly) or is an error naming a line.
    #[test]
    fn fuzzed_texts_parse_or_fail_without_panicking() {
        let base = format!("{SAMPLE}\n4,\"é, ü\",1,2,3\n");
        let alphabet = b"\",\n\r 0123456789.-eEaz\xc3\xa9\xff";
        let mut rng = SplitMix64::new(2024);
        let (mut ok, mut failed) = (0, 0);
        for _ in 0..5000 {
            let mut bytes = base.clone().into_bytes();
            for _ in 0..1 + rng.next_u64() % 6 {
                let at = (rng.next_u64() as usize) % (bytes.len() + 1);
                let byte = match rng.next_u64() % 3 {
                    0 => alphabet[(rng.next_u64() as usize) % alphabet.len()],
                    _ => rng.next_u64() as u8,
                };
                match rng.next_u64() % 3 {
                    0 if at < bytes.len() => bytes[at] = byte,
                    1 if at < bytes.len() => drop(bytes.remove(at)),
                    _ => bytes.insert(at, byte),
                }
            }
            let text = String::from_utf8_lossy(&bytes);
            match CsvTable::parse(&text) {
                Ok(t) => {
                    ok += 1;
                    for name in t.columns() {
                        if let Err(e) = t.column(name) {
                            assert!(e.to_string().contains("line "), "{e}");
                        }
                    }
                }
                Err(e) => {
                    failed += 1;
                    assert!(e.to_string().starts_with("csv: line "), "{e}");
                }
            }
        }
        // Both outcomes are exercised.
        assert!(ok > 100 && failed > 100, "{ok} parsed, {failed} failed");
    }
}
