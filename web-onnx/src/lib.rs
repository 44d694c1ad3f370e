//! # kiln-web-onnx
//!
//! The second WebAssembly module of the npm package `kiln-ml`: it converts an ONNX file into a
//! kiln model file, which the main module (`kiln-web`) then loads onto any device. It is kept out
//! of the main module because the ONNX importer (the protobuf parser and one import per ONNX op)
//! would take that module over its size budget; `kiln-ml` loads this one only when a page first
//! meets an ONNX file (`Model.load("model.onnx")` or `convertOnnx(bytes)` in `npm/index.js`).
//!
//! The conversion is [`kiln_onnx::OnnxModel::load`] on kiln's CPU backend, then
//! [`kiln_onnx::OnnxModel::to_kiln`], which traces the graph once on a sample input of the
//! declared (or given) shape. There is no WebGPU backend in this module: nothing runs here but
//! that one trace.
//!
//! ```js
//! import init, { convertOnnx } from "./kiln_web_onnx.js";
//! await init();
//! const kilnFile = convertOnnx(onnxBytes, [1, 3, 224, 224]); // Uint8Array
//! ```

use js_sys::{Error as JsErr, Reflect};
use kiln_core::{Device, Error};
use kiln_onnx::OnnxModel;
use wasm_bindgen::prelude::*;

/// What the conversion reports its argument errors as.
const OP: &str = "convertOnnx";

/// Converts ONNX file bytes into kiln model file bytes (safetensors weights with kiln's graph).
///
/// `input_shape` sets the sample input the graph is traced on, batch axis first; without it,
/// the model's declared input shape is used, with every symbolic dimension 1. The batch axis of
/// the result stays free when the ONNX file leaves the input's first dimension symbolic. Only
/// models of one input and one output convert. Every failure (not ONNX, an op kiln does not
/// import, a bad shape) is an error whose message names what was wrong.
pub fn convert(bytes: &[u8], input_shape: Option<&[usize]>) -> kiln_core::Result<Vec<u8>> {
    let device = Device::cpu();
    let model = OnnxModel::load(bytes, &device)?;
    let sample = model.sample_input(input_shape)?;
    model.to_kiln(&sample)
}

/// An input shape given from JavaScript as numbers: each must be a whole number of at least 1.
pub fn input_shape(dims: &[f64]) -> kiln_core::Result<Vec<usize>> {
    dims.iter()
        .map(|&d| {
            if d.fract() == 0.0 && d >= 1.0 && d <= u32::MAX as f64 {
                Ok(d as usize)
            } else {
                Err(Error::invalid(
                    OP,
                    format!(
                        "inputShape must hold whole numbers of at least 1, got {d} in {dims:?}"
                    ),
                ))
            }
        })
        .collect()
}

/// The JS `Error` for a kiln error: kiln's message, `name = "KilnError"` and the `kind` and `op`
/// properties, as the main module (`web/src/error.rs`) makes them.
fn to_js(e: &Error) -> JsValue {
    let err = JsErr::new(&e.to_string());
    err.set_name("KilnError");
    let kind = e.kind().name();
    // Setting plain data properties on a fresh Error object cannot fail.
    let _ = Reflect::set(&err, &"kind".into(), &kind.into());
    let _ = Reflect::set(&err, &"op".into(), &e.op().into());
    err.into()
}

/// The JS export: ONNX bytes (`Uint8Array`) to kiln model file bytes (`Uint8Array`); see
/// [`convert`]. `inputShape` (an array of numbers, or `undefined`) sets the traced input's shape.
#[wasm_bindgen(js_name = convertOnnx)]
pub fn convert_onnx(bytes: &[u8], input_shape: Option<Vec<f64>>) -> Result<Vec<u8>, JsValue> {
    let shape = input_shape
        .as_deref()
        .map(self::input_shape)
        .transpose()
        .map_err(|e| to_js(&e))?;
    convert(bytes, shape.as_deref()).map_err(|e| to_js(&e))
}

/// Runs once when the module is instantiated: a panic (a kiln bug) becomes a readable JS
/// exception instead of wasm's bare `RuntimeError: unreachable`.
#[wasm_bindgen(start)]
pub fn start() {
    #[cfg(target_arch = "wasm32")]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            std::panic::set_hook(Box::new(|info| {
                wasm_bindgen::throw_str(&format!(
                    "kiln: internal error converting an ONNX file (a bug; please report it): {info}"
                ));
            }));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_core::Tensor;
    use kiln_core::model::Model;
    use kiln_onnx::proto::{GraphProto, ModelProto, NodeProto, ValueInfoProto};
    use prost::Message;

    /// `y = Sigmoid(x)` with the input declared as given (no declared shape: `None`).
    fn sigmoid_model() -> Vec<u8> {
        let vi = |n: &str| ValueInfoProto {
            name: Some(n.into()),
            ..Default::default()
        };
        let graph = GraphProto {
            node: vec![NodeProto {
                op_type: Some("Sigmoid".into()),
                input: vec!["x".into()],
                output: vec!["y".into()],
                ..Default::default()
            }],
            input: vec![vi("x")],
            output: vec![vi("y")],
            ..Default::default()
        };
        ModelProto {
            ir_version: Some(8),
            graph: Some(graph),
            ..Default::default()
        }
        .encode_to_vec()
    }

    #[test]
    fn converts_to_a_kiln_file_that_runs() {
        let file = convert(&sigmoid_model(), Some(&[2, 3])).unwrap();
        assert_eq!(
            file[8], b'{',
            "a safetensors file: its JSON header starts at byte 8"
        );
        let dev = Device::cpu();
        let model = Model::load(&file, &dev).unwrap();
        let x = Tensor::from_slice(&[0.0f32, 1.0, -1.0, 2.0, -2.0, 0.5], [2, 3], &dev).unwrap();
        let y = model.run(&[x]).unwrap()[0].to_vec::<f32>().unwrap();
        let want = [0.0f32, 1.0, -1.0, 2.0, -2.0, 0.5].map(|v| 1.0 / (1.0 + (-v).exp()));
        for (a, b) in y.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{y:?} vs {want:?}");
        }
    }

    #[test]
    fn errors_name_what_was_wrong() {
        let no_shape = convert(&sigmoid_model(), None).unwrap_err();
        assert!(
            no_shape.to_string().contains("declares no shape"),
            "{no_shape}"
        );
        let garbage = convert(b"\x08\x07\x3a\xff", None).unwrap_err();
        assert_eq!(garbage.kind(), kiln_core::ErrorKind::Format, "{garbage}");
        assert!(garbage.to_string().contains("ONNX"), "{garbage}");
        let bad = input_shape(&[1.0, 2.5]).unwrap_err();
        assert!(bad.to_string().contains("2.5"), "{bad}");
        assert_eq!(input_shape(&[1.0, 28.0]).unwrap(), [1, 28]);
        assert!(input_shape(&[0.0]).is_err());
        assert!(input_shape(&[f64::NAN]).is_err());
    }
}
