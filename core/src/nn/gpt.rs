//! A GPT: token and position embeddings, pre-norm transformer blocks, a final layer norm and
//! an output layer tied to the token embedding; generation with a KV cache so that each new
//! token costs one position. The model file holds the weights, the [`GptConfig`] and the
//! tokenizer, so generation needs nothing else.

use crate::error::{ErrorKind, fail};
use crate::model::load_safetensors;
use crate::nn::{
    Embedding, Forward, Init, KvCache, LayerNorm, Module, Param, TransformerBlock, loss,
};
use crate::op::json::Fields;
use crate::random::SplitMix64;
use crate::tokenizer::{self, CharTokenizer};
use crate::{DType, Device, Error, Result, Tensor};
#[cfg(feature = "std")]
use alloc::collections::BTreeMap;
#[cfg(feature = "std")]
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

/// Metadata key of the [`GptConfig`] in a model file.
pub const CONFIG_KEY: &str = "kiln_gpt";

/// The shape of a [`Gpt`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GptConfig {
    /// Tokens in the vocabulary.
    pub vocab: usize,
    /// Longest sequence (positions embedded).
    pub context: usize,
    /// Width of the residual stream.
    pub dim: usize,
    /// Transformer blocks.
    pub layers: usize,
    /// Attention heads per block.
    pub heads: usize,
    /// Dropout probability in training.
    pub dropout: f64,
}

impl GptConfig {
    /// Reads the config's JSON as its derived `Deserialize` would, but through a
    /// `serde_json::Value` and op/json.rs's [`Fields`]: the web package then has one JSON
    /// decoding path (the derived decoder over the text was a second one).
    fn from_json(json: &str) -> core::result::Result<GptConfig, crate::op::json::Error> {
        let mut f = Fields::of(serde_json::from_str(json)?, "GptConfig")?;
        let config = GptConfig {
            vocab: f.get("vocab"),
            context: f.get("context"),
            dim: f.get("dim"),
            layers: f.get("layers"),
            heads: f.get("heads"),
            dropout: f.get("dropout"),
        };
        f.finish(config)
    }
}

/// A decoder-only transformer language model.
#[derive(kiln_derive::Module)]
pub struct Gpt {
    /// Token embedding, also the output layer (weight tying).
    pub tok: Embedding,
    /// Position embedding.
    pub pos: Embedding,
    /// The transformer blocks.
    pub blocks: Vec<TransformerBlock>,
    /// The final layer norm.
    pub ln_f: LayerNorm,
    /// The shape.
    #[module(skip)]
    pub config: GptConfig,
}

impl Gpt {
    /// A freshly initialised model (embeddings N(0, 0.02), as GPT-2).
    pub fn new(config: GptConfig, init: &mut Init, seed: u64) -> Result<Gpt> {
        let c = &config;
        if c.vocab == 0 || c.context == 0 || c.layers == 0 {
            return Err(fail(
                ErrorKind::InvalidArgument,
                "Gpt",
                format_args!(
                    "expected a non-zero vocabulary, context and depth, found vocab {}, \
                     context {} and {} layers",
                    c.vocab, c.context, c.layers
                ),
            ));
        }
        let embedding = |init: &mut Init, n| -> Result<Embedding> {
            Ok(Embedding {
                weight: Param::new(init.normal([n, c.dim], 0.02)?),
            })
        };
        let tok = embedding(init, c.vocab)?;
        let pos = embedding(init, c.context)?;
        let blocks = (0..c.layers)
            .map(|i| {
                TransformerBlock::new(init, c.dim, c.heads, c.dropout, seed.wrapping_add(i as u64))
            })
            .collect::<Result<Vec<_>>>()?;
        let ln_f = LayerNorm::new(init, &[c.dim])?;
        Ok(Gpt {
            tok,
            pos,
            blocks,
            ln_f,
            config,
        })
    }

    /// Token plus position embeddings of `ids` `[B, T]` placed at positions `start..start+T`.
    fn embed(&self, ids: &Tensor, start: usize) -> Result<Tensor> {
        let t = ids.dim(-1)?;
        if start + t > self.config.context {
            return Err(fail(
                ErrorKind::Shape,
                "Gpt",
                format_args!(
                    "expected at most {} positions, found {} (start {start})",
                    self.config.context,
                    start + t
                ),
            ));
        }
        let positions = Tensor::arange(
            start as f64,
            (start + t) as f64,
            1.0,
            DType::I32,
            ids.device(),
        )?;
        self.tok.forward(ids)?.add(&self.pos.forward(&positions)?)
    }

    /// Logits `[.., V]` of hidden states `[.., C]`: the final norm, then the tied embedding.
    fn head(&self, h: &Tensor) -> Result<Tensor> {
        self.ln_f.forward(h)?.matmul(&self.tok.weight.tensor().t()?)
    }

    /// Logits `[B, T, V]` for `ids` `[B, T]`, appending to each block's cache: the positions
    /// continue from the caches' length.
    pub fn forward_cached(&self, ids: &Tensor, caches: &mut [KvCache]) -> Result<Tensor> {
        if caches.len() != self.blocks.len() {
            return Err(fail(
                ErrorKind::InvalidArgument,
                "Gpt",
                format_args!(
                    "expected {} caches, found {}",
                    self.blocks.len(),
                    caches.len()
                ),
            ));
        }
        let mut h = self.embed(ids, caches[0].len())?;
        for (block, cache) in self.blocks.iter().zip(caches.iter_mut()) {
            h = block.forward_cached(&h, cache)?;
        }
        self.head(&h)
    }

    /// Mean cross-entropy (nats per token) of predicting `targets` `[B, T]` from `ids`.
    pub fn loss(&self, ids: &Tensor, targets: &Tensor) -> Result<Tensor> {
        let logits = self.forward(ids)?;
        let v = self.config.vocab;
        loss::cross_entropy(
            &logits.reshape([targets.numel(), v])?,
            &targets.reshape([targets.numel()])?,
            0.0,
        )
    }

    /// The model file: weights, config and tokenizer. Native only (reads the weights back).
    #[cfg(feature = "std")]
    pub fn to_file(
        &self,
        tok: &CharTokenizer,
        extra: &BTreeMap<String, String>,
    ) -> Result<Vec<u8>> {
        let mut meta = extra.clone();
        let config =
            serde_json::to_string(&self.config).map_err(|e| Error::format("Gpt", e.to_string()))?;
        meta.insert(CONFIG_KEY.into(), config);
        meta.insert(tokenizer::METADATA_KEY.into(), tok.to_json());
        crate::model::save_safetensors(&self.named_tensors(), &meta)
    }

    /// Reads a file written by [`Gpt::to_file`] onto `device`.
    pub fn from_file(bytes: &[u8], device: &Device) -> Result<(Gpt, CharTokenizer)> {
        let file = load_safetensors(bytes)?;
        let get = |key: &str| {
            file.metadata.get(key).ok_or_else(|| {
                fail(
                    ErrorKind::Format,
                    "Gpt",
                    format_args!("expected a GPT model file (metadata key {key}), found none"),
                )
            })
        };
        let config = GptConfig::from_json(get(CONFIG_KEY)?).map_err(|e| {
            fail(
                ErrorKind::Format,
                "Gpt",
                format_args!("bad {CONFIG_KEY}: {e}"),
            )
        })?;
        let tok = CharTokenizer::from_json(get(tokenizer::METADATA_KEY)?)?;
        if tok.vocab_size() != config.vocab {
            return Err(fail(
                ErrorKind::Format,
                "Gpt",
                format_args!(
                    "the tokenizer has {} tokens but the model {}",
                    tok.vocab_size(),
                    config.vocab
                ),
            ));
        }
        let mut model = Gpt::new(config, &mut Init::new(device, 0), 0)?;
        model.load_named(&file.to_device(device)?)?;
        model.set_training(false);
        Ok((model, tok))
    }
}

impl Forward for Gpt {
    /// Logits `[B, T, V]` for token ids `[B, T]` (positions from 0).
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let mut h = self.embed(ids, 0)?;
        for block in &self.blocks {
            h = block.forward(&h)?;
        }
        self.head(&h)
    }
}

/// How the next token is chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// Softmax temperature; 0 picks the most likely token (greedy, deterministic).
    pub temperature: f64,
    /// Draw among the `k` most likely tokens only.
    pub top_k: Option<usize>,
    /// Seed of the draws.
    pub seed: u64,
}

/// Index of `logits` chosen by `sampling` with the uniform draw `u` in [0, 1).
pub fn choose(logits: &[f32], sampling: &Sampling, u: f32) -> usize {
    // Largest first; ties by index so the choice is the same everywhere: one u64 key per
    // logit, its `total_cmp` rank (the bits with the magnitude flipped for negatives, then the
    // sign, as unsigned), inverted, above its index, so that a heapsort of plain integers
    // (the web package's smallest sort) orders them.
    let mut keys: Vec<u64> = logits
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let bits = x.to_bits() as i32;
            let rank = (bits ^ (((bits >> 31) as u32) >> 1) as i32) as u32 ^ 0x8000_0000;
            u64::from(!rank) << 32 | i as u64
        })
        .collect();
    crate::sorted::heapsort(&mut keys);
    let order: Vec<usize> = keys.iter().map(|k| *k as u32 as usize).collect();
    if sampling.temperature <= 0.0 || order.len() <= 1 {
        return order.first().copied().unwrap_or(0);
    }
    let k = sampling.top_k.unwrap_or(order.len()).clamp(1, order.len());
    let top = &order[..k];
    let max = logits[top[0]] as f64;
    let weights: Vec<f64> = top
        .iter()
        .map(|&i| libm::exp((logits[i] as f64 - max) / sampling.temperature))
        .collect();
    let mut target = u as f64 * weights.iter().sum::<f64>();
    for (&i, w) in top.iter().zip(&weights) {
        target -= w;
        if target < 0.0 {
            return i;
        }
    }
    top[k - 1]
}

/// Generation one token at a time at batch 1, through the KV cache: [`Generator::logits`]
/// runs the model on what is new since the last token, the caller reads the logits (at once
/// natively, awaiting them in a page) and hands them to [`Generator::choose`]. When the
/// context is full, the caches are rebuilt from its last half.
pub struct Generator<'a> {
    model: &'a Gpt,
    caches: Vec<KvCache>,
    tokens: Vec<u32>,
    feed: Vec<u32>,
    rng: SplitMix64,
    sampling: Sampling,
}

impl<'a> Generator<'a> {
    /// A generator continuing `prompt` (at least one token).
    pub fn new(model: &'a Gpt, prompt: &[u32], sampling: Sampling) -> Result<Self> {
        if prompt.is_empty() {
            return Err(Error::invalid(
                "generate",
                "expected a prompt of at least one token, found none",
            ));
        }
        let context = model.config.context;
        Ok(Generator {
            model,
            caches: model.blocks.iter().map(|_| KvCache::new(context)).collect(),
            tokens: prompt.to_vec(),
            // The prompt's last `context` tokens fill the caches first.
            feed: prompt[prompt.len().saturating_sub(context)..].to_vec(),
            rng: SplitMix64::new(sampling.seed),
            sampling,
        })
    }

    /// The next token's logits `[V]`, still on the model's device.
    pub fn logits(&mut self) -> Result<Tensor> {
        let context = self.model.config.context;
        if self.caches[0].len() + self.feed.len() > context {
            self.caches.iter_mut().for_each(KvCache::clear);
            self.feed = self.tokens[self.tokens.len() - context / 2..].to_vec();
        }
        let ids: Vec<i32> = self.feed.iter().map(|&t| t as i32).collect();
        let n = ids.len();
        let device = self.model.tok.weight.tensor().device().clone();
        let ids = Tensor::from_vec(ids, [1, n], &device)?;
        let logits =
            crate::autodiff::no_grad(|| self.model.forward_cached(&ids, &mut self.caches))?;
        logits
            .narrow(1, n - 1, 1)?
            .reshape([self.model.config.vocab])
    }

    /// Picks the next token from `logits` (read back from [`Generator::logits`]) and appends it.
    pub fn choose(&mut self, logits: &[f32]) -> u32 {
        let next = choose(logits, &self.sampling, self.rng.next_f32()) as u32;
        self.tokens.push(next);
        self.feed = vec![next];
        next
    }
}

/// Generates `tokens` tokens after `prompt` (batch 1), calling `on_token` with each as it is
/// chosen (a [`Generator`] whose logits are read back at once). Native only: a page awaits
/// the logits instead.
#[cfg(feature = "std")]
pub fn generate(
    model: &Gpt,
    prompt: &[u32],
    tokens: usize,
    sampling: &Sampling,
    mut on_token: impl FnMut(u32) -> Result<()>,
) -> Result<Vec<u32>> {
    let mut g = Generator::new(model, prompt, *sampling)?;
    let mut out = Vec::with_capacity(tokens);
    for _ in 0..tokens {
        let logits = g.logits()?.to_vec::<f32>()?;
        let next = g.choose(&logits);
        on_token(next)?;
        out.push(next);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `choose`'s integer keys order the logits as `total_cmp` does, largest first, ties by index.
    #[test]
    fn choose_orders_as_total_cmp() {
        let logits = [
            0.5f32,
            -0.0,
            0.0,
            f32::NAN,
            -f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -3.25,
            0.5,
            1e-40,
            -1e-40,
            7.0,
        ];
        let mut want: Vec<usize> = (0..logits.len()).collect();
        want.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        // With a NaN on top every weight is NaN, so a draw among the top i + 1 falls through to
        // the last of them: the i-th.
        for (i, &w) in want.iter().enumerate() {
            let greedy = Sampling {
                temperature: 0.0,
                top_k: None,
                seed: 0,
            };
            assert_eq!(choose(&logits, &greedy, 0.0), want[0]);
            let top = Sampling {
                temperature: 1e30,
                top_k: Some(i + 1),
                seed: 0,
            };
            assert_eq!(choose(&logits, &top, 0.999_999), w, "rank {i}");
        }
    }

    /// The config's hand decoder reads what the derived `Serialize` writes, and rejects
    /// malformed JSON with a message naming what was wrong.
    #[test]
    fn config_round_trips_and_malformed_is_an_error() {
        let c = GptConfig {
            vocab: 65,
            context: 64,
            dim: 32,
            layers: 2,
            heads: 4,
            dropout: 0.1,
        };
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(GptConfig::from_json(&json).unwrap(), c);
        for (bad, want) in [
            ("", "EOF"),
            ("[1]", "GptConfig expects an object of fields"),
            ("{\"vocab\":65}", "missing field `context`"),
            (
                "{\"vocab\":-1,\"context\":1,\"dim\":1,\"layers\":1,\"heads\":1,\"dropout\":0}",
                "-1",
            ),
            (
                "{\"vocab\":1,\"context\":1,\"dim\":1,\"layers\":1,\"heads\":1,\"dropout\":\"x\"}",
                "\"x\"",
            ),
        ] {
            let err = GptConfig::from_json(bad).unwrap_err().to_string();
            assert!(err.contains(want), "{bad}: {err}");
        }
    }
}
