//! Text for language models: the Shakespeare corpus (`shared/data/shakespeare`, one gzipped
//! Project Gutenberg text per work, never downloaded) split by whole works, and
//! [`TokenWindows`], a [`Dataset`] of fixed-length windows of tokens with their next-token
//! targets.

use crate::core::tokenizer::CharTokenizer;
use crate::core::{Device, Error, Result, Tensor};
use crate::data::augment::SplitMix64;
use crate::data::loader::Dataset;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Environment variable naming the corpus directory when `--data` is not given.
pub const DIR_ENV: &str = "KILN_SHAKESPEARE_DIR";
/// Works held out for validation (the corpus README's suggestion): loss on them measures
/// generalisation to unseen plays, not memorised lines.
pub const HELD_OUT: [&str; 3] = ["hamlet_gut", "macbeth_gut", "tempest_gut"];

/// A corpus split by whole works.
#[derive(Clone, Debug, PartialEq)]
pub struct Corpus {
    /// The training works, joined by blank lines.
    pub train: String,
    /// The held-out works, joined by blank lines.
    pub valid: String,
    /// File stems of the held-out works.
    pub held_out: Vec<String>,
}

impl Corpus {
    /// Reads every `*.txt.gz` (or `*.txt`) under `dir` (or `dir/plays`), in name order; the
    /// works whose stem is in `held_out` go to `valid`.
    pub fn load(dir: &Path, held_out: &[&str]) -> Result<Corpus> {
        let plays = if dir.join("plays").is_dir() {
            dir.join("plays")
        } else {
            dir.to_path_buf()
        };
        let err = |e: std::io::Error| Error::io("corpus", format!("{}: {e}", plays.display()));
        let mut files: Vec<PathBuf> = std::fs::read_dir(&plays)
            .map_err(err)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let n = p.to_string_lossy();
                n.ends_with(".txt.gz") || n.ends_with(".txt")
            })
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(Error::io(
                "corpus",
                format!(
                    "expected .txt or .txt.gz files in {}, found none (the corpus is never \
                     downloaded; pass --data DIR or set {DIR_ENV})",
                    plays.display()
                ),
            ));
        }
        let mut corpus = Corpus {
            train: String::new(),
            valid: String::new(),
            held_out: Vec::new(),
        };
        for path in &files {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let stem = name
                .as_deref()
                .unwrap_or("")
                .trim_end_matches(".gz")
                .trim_end_matches(".txt")
                .to_string();
            let text = read_text(path)?;
            let into = if held_out.contains(&stem.as_str()) {
                corpus.held_out.push(stem);
                &mut corpus.valid
            } else {
                &mut corpus.train
            };
            if !into.is_empty() {
                into.push_str("\n\n");
            }
            into.push_str(&text);
        }
        if let Some(missing) = held_out
            .iter()
            .find(|h| !corpus.held_out.iter().any(|s| s == *h))
        {
            return Err(Error::invalid(
                "corpus",
                format!(
                    "expected the held-out work {missing} in {}, found no such file",
                    plays.display()
                ),
            ));
        }
        if corpus.train.is_empty() {
            return Err(Error::invalid(
                "corpus",
                "expected training text besides the held-out works, found none",
            ));
        }
        Ok(corpus)
    }
}

/// One text file, gunzipped when it ends in `.gz`, checked to be UTF-8.
fn read_text(path: &Path) -> Result<String> {
    let err = |e: std::io::Error| Error::io("corpus", format!("{}: {e}", path.display()));
    let bytes = std::fs::read(path).map_err(err)?;
    let bytes = if path.extension().is_some_and(|e| e == "gz") {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_end(&mut out)
            .map_err(err)?;
        out
    } else {
        bytes
    };
    String::from_utf8(bytes).map_err(|e| {
        Error::format(
            "corpus",
            format!("{}: expected UTF-8 text: {e}", path.display()),
        )
    })
}

/// The corpus directory: `explicit` (`--data`), else `$KILN_SHAKESPEARE_DIR`, else the first
/// `shared/data/shakespeare` found walking up from the current directory.
pub fn data_dir(explicit: Option<&Path>) -> Result<PathBuf> {
    crate::data::shared_dir(explicit, DIR_ENV, "shakespeare", "corpus")
}

/// Windows of `context` tokens and their targets (the same window shifted by one token).
/// Window `i` of epoch `e` starts at `i * context + offset(e)`, the offset drawn per epoch
/// from the seed so that each epoch cuts the text at other places.
#[derive(Clone, Debug)]
pub struct TokenWindows {
    tokens: Vec<u32>,
    context: usize,
    seed: Option<u64>,
}

/// A batch of [`TokenWindows`]: `rows` windows of `context` token ids and their targets.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenBatch {
    /// Input ids, `rows * context`.
    pub inputs: Vec<i32>,
    /// Next-token ids, `rows * context`.
    pub targets: Vec<i32>,
    /// Windows in the batch.
    pub rows: usize,
    /// Tokens per window.
    pub context: usize,
}

impl TokenBatch {
    /// (`[rows, context]` inputs, `[rows, context]` targets) as i32 tensors on `device`.
    pub fn to_device(&self, device: &Device) -> Result<(Tensor, Tensor)> {
        let shape = [self.rows, self.context];
        Ok((
            Tensor::from_vec(self.inputs.clone(), shape, device)?,
            Tensor::from_vec(self.targets.clone(), shape, device)?,
        ))
    }
}

impl TokenWindows {
    /// Windows over `tokens`; `seed` shifts the cuts each epoch (`None`: always at 0, for
    /// evaluation).
    pub fn new(tokens: Vec<u32>, context: usize, seed: Option<u64>) -> Result<Self> {
        if context == 0 || tokens.len() < 2 * context + 1 {
            return Err(Error::invalid(
                "text windows",
                format!(
                    "expected at least {} tokens for windows of {context}, found {}",
                    2 * context + 1,
                    tokens.len()
                ),
            ));
        }
        Ok(TokenWindows {
            tokens,
            context,
            seed,
        })
    }

    /// The text of `text` tokenized by `tok`, as windows.
    pub fn from_text(
        tok: &CharTokenizer,
        text: &str,
        context: usize,
        seed: Option<u64>,
    ) -> Result<Self> {
        Self::new(tok.encode(text)?, context, seed)
    }

    fn offset(&self, epoch: u64) -> usize {
        match self.seed {
            Some(s) => {
                let r = SplitMix64::new(s ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15)).next_u64();
                (r % self.context as u64) as usize
            }
            None => 0,
        }
    }
}

impl Dataset for TokenWindows {
    type Batch = TokenBatch;
    fn len(&self) -> usize {
        // Every offset leaves room for a whole window and its target after it.
        (self.tokens.len() - self.context - 1) / self.context
    }
    fn batch(&self, idx: &[usize], epoch: u64) -> Result<TokenBatch> {
        let (c, off) = (self.context, self.offset(epoch));
        let mut b = TokenBatch {
            inputs: Vec::with_capacity(idx.len() * c),
            targets: Vec::with_capacity(idx.len() * c),
            rows: idx.len(),
            context: c,
        };
        for &i in idx {
            let start = i * c + off;
            let window = self.tokens.get(start..start + c + 1).ok_or_else(|| {
                Error::index("text windows", format!("window {i} of {}", self.len()))
            })?;
            b.inputs.extend(window[..c].iter().map(|&t| t as i32));
            b.targets.extend(window[1..].iter().map(|&t| t as i32));
        }
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_shift_by_one_and_move_with_the_epoch() {
        let tok = CharTokenizer::from_text("abcdefghij");
        let text = "abcdefghij".repeat(5);
        let w = TokenWindows::from_text(&tok, &text, 4, Some(3)).unwrap();
        assert_eq!(w.len(), (50 - 5) / 4);
        let b = w.batch(&[0, 2], 0).unwrap();
        assert_eq!(b.inputs[1..4], b.targets[..3]);
        let decoded = tok
            .decode(&b.inputs.iter().map(|&t| t as u32).collect::<Vec<_>>())
            .unwrap();
        let off = w.offset(0);
        assert_eq!(&decoded[..4], &text[off..off + 4]);
        assert_eq!(&decoded[4..], &text[8 + off..12 + off]);
        // The last window of every epoch fits, whatever the offset.
        for epoch in 0..20 {
            w.batch(&[w.len() - 1], epoch).unwrap();
        }
        assert!((0..20).any(|e| w.offset(e) != off));
        let fixed = TokenWindows::from_text(&tok, &text, 4, None).unwrap();
        assert_eq!(fixed.batch(&[1], 7).unwrap().inputs, [4, 5, 6, 7]);
        assert!(TokenWindows::from_text(&tok, "abc", 4, None).is_err());
    }

    #[test]
    fn the_shakespeare_corpus_splits_by_work() {
        let Ok(dir) = data_dir(None) else {
            eprintln!("skipped: no corpus");
            return;
        };
        let c = Corpus::load(&dir, &HELD_OUT).unwrap();
        assert_eq!(c.held_out.len(), 3);
        assert!(
            c.valid.contains("To be, or not to be") && !c.train.contains("To be, or not to be")
        );
        assert!(c.train.len() > 4_000_000, "{}", c.train.len());
        let e = Corpus::load(&dir, &["no_such_play"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("no_such_play"), "{e}");
    }
}
