//! `TextModel`: a GPT model file from `kiln train text` (weights, shape and tokenizer in one
//! file), loaded onto a device and generating text token by token, streamed to a callback and
//! never blocking the page: each token's logits are awaited, and the event loop runs between
//! tokens.

use crate::device::{self, Device, Wanted, kind_of};
use crate::error::{IntoJs, JsResult, invalid};
use crate::model::source_bytes;
use crate::{js, ledger};
use kiln_core::error::Num;
use kiln_core::nn::Module;
use kiln_core::nn::gpt::{Generator, Gpt, Sampling};
use kiln_core::tokenizer::CharTokenizer;
use std::cell::RefCell;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

#[wasm_bindgen]
extern "C" {
    /// A `MessageChannel` (window, worker or Node).
    type MessageChannel;
    #[wasm_bindgen(catch, constructor)]
    fn new() -> Result<MessageChannel, JsValue>;
    #[wasm_bindgen(method, getter)]
    fn port1(this: &MessageChannel) -> MessagePort;
    #[wasm_bindgen(method, getter)]
    fn port2(this: &MessageChannel) -> MessagePort;

    type MessagePort;
    #[wasm_bindgen(method, setter)]
    fn set_onmessage(this: &MessagePort, f: &js_sys::Function);
    #[wasm_bindgen(method, js_name = postMessage)]
    fn post_message(this: &MessagePort, v: &JsValue);
    #[wasm_bindgen(method)]
    fn close(this: &MessagePort);
}

/// A language model and its tokenizer on a device.
#[wasm_bindgen]
pub struct TextModel {
    // Shared with running `generate` calls, which keep it alive until they end.
    inner: RefCell<Option<Rc<(Gpt, CharTokenizer)>>>,
    device: Device,
    weights: u32,
}

impl Drop for TextModel {
    fn drop(&mut self) {
        ledger::remove(self.weights);
    }
}

/// Turns of the event loop between tokens, so that the page can paint and handle input: a
/// message through a channel is a task of its own, which `setTimeout(0)` is too but clamped to
/// 4 ms once nested (every token's was), 5 ms a token that capped the text demo's model at about
/// 200 tokens/s in the page. Closed when dropped, which lets Node exit.
struct Turns(MessageChannel);

impl Turns {
    fn new() -> JsResult<Turns> {
        MessageChannel::new().map(Turns)
    }

    /// Resolves on a later turn of the event loop.
    async fn next(&self) -> JsResult<()> {
        let p = js_sys::Promise::new(&mut |resolve, _| {
            self.0.port1().set_onmessage(&resolve);
            self.0.port2().post_message(&JsValue::NULL);
        });
        JsFuture::from(p).await.map(drop)
    }
}

impl Drop for Turns {
    fn drop(&mut self) {
        self.0.port1().close();
        self.0.port2().close();
    }
}

#[wasm_bindgen]
impl TextModel {
    /// Loads a GPT model file (from `kiln train text`) from a URL or bytes onto
    /// `options.device` (default: the CPU; `"auto"`: WebGPU on a hardware adapter, else the CPU).
    pub async fn load(source: JsValue, options: JsValue) -> JsResult<TextModel> {
        let device = match Device::wanted(&options, "TextModel.load")? {
            Wanted::Given(d) => d,
            Wanted::Auto { fusion } => device::auto(fusion).await,
        };
        let bytes = source_bytes(&source, "TextModel.load").await?;
        let (model, tok) = Gpt::from_file(&bytes, device.inner()).js()?;
        let tensors = model.named_tensors();
        let size: u64 = tensors.iter().map(|(_, t)| ledger::tensor_bytes(t)).sum();
        let weights = ledger::insert_weights(kind_of(device.inner()).into(), tensors.len(), size);
        Ok(TextModel {
            inner: RefCell::new(Some(Rc::new((model, tok)))),
            device,
            weights,
        })
    }

    /// Continues `prompt` with `options.tokens` tokens (default 100) and resolves to the
    /// generated text (without the prompt). `options.temperature` (default 0.8; 0 is greedy and
    /// deterministic), `options.topK` (all tokens when absent), `options.seed` (default 0) and
    /// `options.onToken(text)`, called with each token's text as soon as it is chosen.
    pub async fn generate(&self, prompt: String, options: JsValue) -> JsResult<String> {
        let op = "TextModel.generate";
        let tokens = js::num(&options, "tokens").unwrap_or(100.0);
        let temperature = js::num(&options, "temperature").unwrap_or(0.8);
        let top_k = js::num(&options, "topK");
        let seed = js::num(&options, "seed").unwrap_or(0.0);
        for (name, v) in [
            ("tokens", Some(tokens)),
            ("topK", top_k),
            ("seed", Some(seed)),
        ] {
            if let Some(v) = v.filter(|v| !(v.fract() == 0.0 && *v >= 0.0 && *v <= 9e15)) {
                return Err(invalid(
                    op,
                    format_args!("options.{name} must be a whole number >= 0, got {}", Num(v)),
                ));
            }
        }
        if !(temperature >= 0.0 && temperature.is_finite()) {
            return Err(invalid(
                op,
                format_args!("options.temperature must be >= 0, got {}", Num(temperature)),
            ));
        }
        let on_token = js::get(&options, "onToken");
        let on_token = match on_token.dyn_ref::<js_sys::Function>() {
            Some(f) => Some(f.clone()),
            None if on_token.is_undefined() || on_token.is_null() => None,
            None => {
                return Err(invalid(
                    op,
                    format_args!("options.onToken must be a function"),
                ));
            }
        };
        let sampling = Sampling {
            temperature,
            top_k: top_k.map(|k| k as usize),
            seed: seed as u64,
        };
        let held = self.inner.borrow().clone();
        let Some(held) = held else {
            return Err(invalid(op, format_args!("this TextModel was disposed")));
        };
        let (model, tok) = &*held;
        let mut g = Generator::new(model, &tok.encode(&prompt).js()?, sampling).js()?;
        let mut text = String::new();
        let turns = Turns::new()?;
        for _ in 0..tokens as usize {
            let logits = g.logits().js()?.data().await.js()?;
            let next = g.choose(&logits.to_vec::<f32>().js()?);
            let piece = tok.decode(&[next]).js()?;
            if let Some(f) = &on_token {
                f.call1(&JsValue::NULL, &JsValue::from_str(&piece))?;
            }
            text.push_str(&piece);
            turns.next().await?;
        }
        Ok(text)
    }

    /// Tokens in the vocabulary.
    #[wasm_bindgen(getter)]
    pub fn vocab(&self) -> JsResult<usize> {
        self.with(|m, _| m.config.vocab)
    }

    /// The longest sequence the model attends over.
    #[wasm_bindgen(getter)]
    pub fn context(&self) -> JsResult<usize> {
        self.with(|m, _| m.config.context)
    }

    /// The device the weights live on.
    #[wasm_bindgen(getter)]
    pub fn device(&self) -> Device {
        self.device.clone()
    }

    /// Frees the weights now; using the model afterwards is an error. Disposing while
    /// `generate` runs is an error too.
    pub fn dispose(&self) -> JsResult<()> {
        let mut inner = self.inner.try_borrow_mut().map_err(|_| {
            invalid(
                "TextModel.dispose",
                format_args!("cannot dispose while generate() is running"),
            )
        })?;
        inner.take();
        ledger::remove(self.weights);
        Ok(())
    }
}

impl TextModel {
    fn with<T>(&self, f: impl FnOnce(&Gpt, &CharTokenizer) -> T) -> JsResult<T> {
        match self.inner.borrow().as_deref() {
            Some((m, t)) => Ok(f(m, t)),
            None => Err(invalid(
                "TextModel",
                format_args!("this TextModel was disposed"),
            )),
        }
    }
}
