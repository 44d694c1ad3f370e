//! A character-level tokenizer: one token per character of a fixed vocabulary, stored as JSON
//! in a model file's metadata (key [`METADATA_KEY`]) so that a page or the CLI can encode
//! prompts and decode generated tokens from the model file alone.
//!
//! ```
//! use kiln_core::tokenizer::CharTokenizer;
//! let tok = CharTokenizer::from_text("to be or not to be");
//! let ids = tok.encode("not to be")?;
//! assert_eq!(tok.decode(&ids)?, "not to be");
//! assert_eq!(tok.vocab_size(), 7); // " ", b, e, n, o, r, t
//! let back = CharTokenizer::from_json(&tok.to_json())?;
//! assert_eq!(back, tok);
//! # Ok::<(), kiln_core::Error>(())
//! ```

use crate::error::{ErrorKind, fail};
use crate::op::json::Fields;
use crate::{Error, Result, SortedMap};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde::Serialize;

/// Metadata key of the tokenizer in a model file.
pub const METADATA_KEY: &str = "kiln_tokenizer";

/// Characters as tokens: token `i` is the `i`-th character of the sorted vocabulary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CharTokenizer {
    chars: Vec<char>,
    /// Each character's id (a `SortedMap`, not a `BTreeMap`: see [`crate::sorted`]).
    ids: SortedMap<char, u32>,
}

#[derive(Serialize)]
struct Stored {
    kind: String,
    vocab: String,
}

impl CharTokenizer {
    /// The tokenizer of every distinct character in `text`, in code-point order.
    pub fn from_text(text: &str) -> Self {
        Self::from_chars(crate::sorted_unique(text.chars()))
    }

    fn from_chars(chars: Vec<char>) -> Self {
        // The characters are distinct, so each is inserted.
        let mut ids = SortedMap::new();
        for (i, &c) in chars.iter().enumerate() {
            ids.get_or_insert_with(c, || i as u32);
        }
        CharTokenizer { chars, ids }
    }

    /// Number of tokens.
    pub fn vocab_size(&self) -> usize {
        self.chars.len()
    }

    /// The tokens of `text`; a character outside the vocabulary is an error naming it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        text.chars()
            .map(|c| {
                self.ids.get(&c).copied().ok_or_else(|| {
                    fail(
                        ErrorKind::InvalidArgument,
                        "tokenizer",
                        format_args!(
                            "expected characters of the model's vocabulary ({} characters), \
                             found {c:?}",
                            self.chars.len()
                        ),
                    )
                })
            })
            .collect()
    }

    /// The text of `ids`; an id outside the vocabulary is an error.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        ids.iter()
            .map(|&i| {
                self.chars.get(i as usize).copied().ok_or_else(|| {
                    fail(
                        ErrorKind::Index,
                        "tokenizer",
                        format_args!("token {i} of a vocabulary of {}", self.chars.len()),
                    )
                })
            })
            .collect()
    }

    /// The JSON stored in model files: `{"kind":"chars","vocab":"..."}`.
    pub fn to_json(&self) -> String {
        let stored = Stored {
            kind: "chars".into(),
            vocab: self.chars.iter().collect(),
        };
        serde_json::to_string(&stored).unwrap_or_default()
    }

    /// Reads [`CharTokenizer::to_json`]'s JSON; other kinds, repeated characters and bad JSON
    /// are errors.
    pub fn from_json(json: &str) -> Result<Self> {
        let bad = |m: String| Error::format("tokenizer", m);
        // Through a `serde_json::Value` and op/json.rs's `Fields`, not `Stored`'s derived
        // decoder over the text: one JSON decoding path in the web package.
        let stored = |json| -> core::result::Result<Stored, crate::op::json::Error> {
            let mut f = Fields::of(serde_json::from_str(json)?, "tokenizer")?;
            let stored = Stored {
                kind: f.get("kind"),
                vocab: f.get("vocab"),
            };
            f.finish(stored)
        };
        let s = stored(json).map_err(|e| {
            bad(format!(
                "expected {{\"kind\":\"chars\",\"vocab\":...}}: {e}"
            ))
        })?;
        if s.kind != "chars" {
            return Err(bad(format!(
                "expected a tokenizer of kind \"chars\", found {:?}",
                s.kind
            )));
        }
        let chars: Vec<char> = s.vocab.chars().collect();
        if crate::sorted_unique(chars.iter()).len() != chars.len() || chars.is_empty() {
            return Err(bad(
                "expected a non-empty vocabulary of distinct characters".to_string(),
            ));
        }
        Ok(Self::from_chars(chars))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_what_it_cannot_read() {
        let tok = CharTokenizer::from_text("ROMEO:\nBut, soft! what light");
        let ids = tok.encode("soft light").unwrap();
        assert_eq!(tok.decode(&ids).unwrap(), "soft light");
        assert!(
            tok.encode("Zounds")
                .unwrap_err()
                .to_string()
                .contains("'Z'")
        );
        let n = tok.vocab_size() as u32;
        assert!(tok.decode(&[0, n]).is_err());
        assert_eq!(CharTokenizer::from_json(&tok.to_json()).unwrap(), tok);
        for bad in [
            "",
            "{}",
            "{\"kind\":\"bpe\",\"vocab\":\"ab\"}",
            "{\"kind\":\"chars\",\"vocab\":\"aba\"}",
            "{\"kind\":\"chars\",\"vocab\":\"\"}",
            "[\"chars\"]",
            "{\"kind\":1,\"vocab\":\"ab\"}",
            "{\"kind\":\"chars\"}",
        ] {
            assert!(CharTokenizer::from_json(bad).is_err(), "{bad}");
        }
    }
}
