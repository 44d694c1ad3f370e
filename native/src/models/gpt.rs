//! A GPT: token and position embeddings, pre-norm transformer blocks, a final layer norm and
//! an output layer tied to the token embedding; generation with a KV cache so that each new
//! token costs one position. The model file holds the weights, the [`GptConfig`] and the
//! tokenizer, so generation needs nothing else.

use crate::core::model::{load_safetensors, save_safetensors};
use crate::core::nn::{
    Embedding, Forward, Init, KvCache, LayerNorm, Module, Param, TransformerBlock, loss,
};
use crate::core::tokenizer::{self, CharTokenizer};
use crate::core::{DType, Device, Error, Result, Tensor};
use crate::data::augment::SplitMix64;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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

/// A decoder-only transformer language model.
#[derive(kiln_core::nn::Module)]
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
            return Err(Error::invalid(
                "Gpt",
                format!("expected a non-zero vocabulary, context and depth, found {c:?}"),
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
            return Err(Error::shape(
                "Gpt",
                format!(
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
            return Err(Error::invalid(
                "Gpt",
                format!(
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

    /// The model file: weights, config and tokenizer.
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
        save_safetensors(&self.named_tensors(), &meta)
    }

    /// Reads a file written by [`Gpt::to_file`] onto `device`.
    pub fn from_file(bytes: &[u8], device: &Device) -> Result<(Gpt, CharTokenizer)> {
        let file = load_safetensors(bytes)?;
        let get = |key: &str| {
            file.metadata.get(key).ok_or_else(|| {
                Error::format(
                    "Gpt",
                    format!("expected a GPT model file (metadata key {key}), found none"),
                )
            })
        };
        let config: GptConfig = serde_json::from_str(get(CONFIG_KEY)?)
            .map_err(|e| Error::format("Gpt", format!("bad {CONFIG_KEY}: {e}")))?;
        let tok = CharTokenizer::from_json(get(tokenizer::METADATA_KEY)?)?;
        if tok.vocab_size() != config.vocab {
            return Err(Error::format(
                "Gpt",
                format!(
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
    let mut order: Vec<usize> = (0..logits.len()).collect();
    // Largest first; ties by index so the choice is the same everywhere.
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    if sampling.temperature <= 0.0 || order.len() <= 1 {
        return order.first().copied().unwrap_or(0);
    }
    let k = sampling.top_k.unwrap_or(order.len()).clamp(1, order.len());
    let top = &order[..k];
    let max = logits[top[0]] as f64;
    let weights: Vec<f64> = top
        .iter()
        .map(|&i| ((logits[i] as f64 - max) / sampling.temperature).exp())
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

/// Generates `tokens` tokens after `prompt` (batch 1), calling `on_token` with each as it is
/// chosen. Each token costs one position through the KV cache; when the context is full, the
/// caches are rebuilt from the last half of the context.
pub fn generate(
    model: &Gpt,
    prompt: &[u32],
    tokens: usize,
    sampling: &Sampling,
    mut on_token: impl FnMut(u32) -> Result<()>,
) -> Result<Vec<u32>> {
    if prompt.is_empty() {
        return Err(Error::invalid(
            "generate",
            "expected a prompt of at least one token, found none",
        ));
    }
    let device = model.tok.weight.tensor().device().clone();
    let context = model.config.context;
    let mut caches: Vec<KvCache> = model.blocks.iter().map(|_| KvCache::new()).collect();
    let mut rng = SplitMix64::new(sampling.seed);
    let mut all: Vec<u32> = prompt.to_vec();
    // The prompt's last `context` tokens fill the caches first.
    let mut feed: Vec<u32> = prompt[prompt.len().saturating_sub(context)..].to_vec();
    let mut out = Vec::with_capacity(tokens);
    for _ in 0..tokens {
        if caches[0].len() + feed.len() > context {
            caches.iter_mut().for_each(KvCache::clear);
            feed = all[all.len() - context / 2..].to_vec();
        }
        let ids: Vec<i32> = feed.iter().map(|&t| t as i32).collect();
        let n = ids.len();
        let ids = Tensor::from_vec(ids, [1, n], &device)?;
        let logits = crate::core::autodiff::no_grad(|| model.forward_cached(&ids, &mut caches))?;
        let last = logits.narrow(1, n - 1, 1)?.to_vec::<f32>()?;
        let next = choose(&last, sampling, rng.next_f32()) as u32;
        on_token(next)?;
        all.push(next);
        out.push(next);
        feed = vec![next];
    }
    Ok(out)
}
