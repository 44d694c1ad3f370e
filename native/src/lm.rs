//! `kiln train text`: a character-level [`Gpt`] trained by the [`Learner`] on a text corpus
//! split by whole works (Shakespeare by default), with AdamW, linear warm-up then cosine decay,
//! gradient clipping, periodic validation loss (nats per character) on the held-out works and
//! a generated sample in each evaluation line of the log.

use crate::core::nn::{Init, Module};
use crate::core::optim::{Adam, Cosine, Warmup};
use crate::core::tokenizer::CharTokenizer;
use crate::core::{Device, Result};
use crate::data::loader::DataLoader;
use crate::data::text::{Corpus, TokenBatch, TokenWindows};
use crate::learn::{Learner, LearnerConfig, Output};
use crate::models::gpt::{Gpt, GptConfig, Sampling, generate};
use std::path::PathBuf;

/// How to train (the `kiln train text` options).
#[derive(Clone, Debug, PartialEq)]
pub struct TextConfig {
    /// Tokens per window (the model's context).
    pub context: usize,
    /// Width of the residual stream.
    pub dim: usize,
    /// Transformer blocks.
    pub layers: usize,
    /// Attention heads.
    pub heads: usize,
    /// Dropout probability.
    pub dropout: f64,
    /// Windows per step.
    pub batch_size: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Steps of linear warm-up.
    pub warmup: usize,
    /// AdamW's decoupled weight decay.
    pub weight_decay: f64,
    /// Gradient clipping (joint L2 norm).
    pub clip: f64,
    /// Passes over the training windows.
    pub epochs: usize,
    /// Stop after this many steps (the schedule still spans every epoch).
    pub max_steps: Option<u64>,
    /// Evaluate (and sample) every this many steps.
    pub eval_every: u64,
    /// Validation windows per evaluation (from the start of the held-out text).
    pub eval_windows: usize,
    /// Characters generated for the sample in each evaluation line (0: none).
    pub sample_chars: usize,
    /// Seeds weights, shuffles, window offsets and dropout.
    pub seed: u64,
    /// Where checkpoints go.
    pub checkpoint_dir: PathBuf,
    /// Checkpoints kept.
    pub keep_last: usize,
}

impl Default for TextConfig {
    /// The ~10M-parameter model of the issue: 6 layers, 6 heads, 384 wide, context 256.
    fn default() -> Self {
        TextConfig {
            context: 256,
            dim: 384,
            layers: 6,
            heads: 6,
            dropout: 0.2,
            batch_size: 64,
            lr: 1e-3,
            warmup: 100,
            weight_decay: 0.1,
            clip: 1.0,
            epochs: 1,
            max_steps: None,
            eval_every: 250,
            eval_windows: 128,
            sample_chars: 200,
            seed: 0,
            checkpoint_dir: PathBuf::from("gpt.ckpt"),
            keep_last: 3,
        }
    }
}

/// The tokenizer (every character of the corpus) and the training and validation loaders.
pub fn prepare(
    corpus: &Corpus,
    cfg: &TextConfig,
) -> Result<(
    CharTokenizer,
    DataLoader<TokenWindows>,
    DataLoader<TokenWindows>,
)> {
    let tok = CharTokenizer::from_text(&format!("{}{}", corpus.train, corpus.valid));
    let train = TokenWindows::from_text(&tok, &corpus.train, cfg.context, Some(cfg.seed))?;
    let valid_tokens = tok.encode(&corpus.valid)?;
    // The first `eval_windows` windows (and the token after them) of the held-out text.
    let keep = ((cfg.eval_windows + 1) * cfg.context + 1).min(valid_tokens.len());
    let valid = TokenWindows::new(valid_tokens[..keep].to_vec(), cfg.context, None)?;
    Ok((
        tok,
        DataLoader::new(train, cfg.batch_size).shuffle(cfg.seed),
        DataLoader::new(valid, cfg.batch_size),
    ))
}

/// A fresh GPT, AdamW and the warm-up + cosine schedule, with a generated sample in every
/// evaluation.
pub fn learner(
    cfg: &TextConfig,
    tok: &CharTokenizer,
    train: &DataLoader<TokenWindows>,
    device: &Device,
) -> Result<Learner<Gpt>> {
    let gpt = GptConfig {
        vocab: tok.vocab_size(),
        context: cfg.context,
        dim: cfg.dim,
        layers: cfg.layers,
        heads: cfg.heads,
        dropout: cfg.dropout,
    };
    let model = Gpt::new(gpt, &mut Init::new(device, cfg.seed), cfg.seed)?;
    let config = LearnerConfig {
        epochs: cfg.epochs,
        max_steps: cfg.max_steps,
        clip_grad_norm: Some(cfg.clip),
        eval_every: Some(cfg.eval_every),
        checkpoint_dir: Some(cfg.checkpoint_dir.clone()),
        keep_last: cfg.keep_last,
        valid_name: "valid".into(),
        ..LearnerConfig::default()
    };
    let total = config.steps_per_epoch(train) as usize * cfg.epochs;
    let schedule = Warmup::new(
        cfg.warmup,
        Cosine::new(
            cfg.lr,
            cfg.lr / 10.0,
            total.saturating_sub(cfg.warmup).max(1),
        ),
    );
    let mut learner =
        Learner::new(model, Adam::adamw(cfg.lr, cfg.weight_decay), config).schedule(schedule);
    if cfg.sample_chars > 0 {
        let (tok, n, seed) = (tok.clone(), cfg.sample_chars, cfg.seed);
        learner = learner.sampler(move |model: &mut Gpt| sample(model, &tok, "\n", n, seed));
    }
    Ok(learner)
}

/// `n` characters generated after `prompt` (temperature 0.8, top-k 40), in evaluation mode.
pub fn sample(
    model: &mut Gpt,
    tok: &CharTokenizer,
    prompt: &str,
    n: usize,
    seed: u64,
) -> Result<String> {
    model.set_training(false);
    let sampling = Sampling {
        temperature: 0.8,
        top_k: Some(40),
        seed,
    };
    let ids = generate(model, &tok.encode(prompt)?, n, &sampling, |_| Ok(()));
    model.set_training(true);
    tok.decode(&ids?)
}

/// The language-model step: uploads a batch, returns its mean cross-entropy over every token.
pub fn step(device: &Device) -> impl FnMut(&mut Gpt, &TokenBatch) -> Result<Output> + use<> {
    let device = device.clone();
    move |model, b| {
        let (x, y) = b.to_device(&device)?;
        Ok(Output::new(model.loss(&x, &y)?, b.rows * b.context))
    }
}
