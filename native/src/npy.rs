//! NumPy `.npy` files as tensors (through the `npyz` crate), for `kiln run`.
//!
//! ```
//! use kiln::core::{Device, Tensor};
//! let dev = Device::cpu();
//! let t = Tensor::from_slice(&[1.5f32, -2.0, 3.0], [3, 1], &dev)?;
//! let bytes = kiln::npy::encode(&t)?;
//! let back = kiln::npy::decode(&bytes, "t.npy", &dev)?;
//! assert_eq!(back.dims(), [3, 1]);
//! assert_eq!(back.to_vec::<f32>()?, [1.5, -2.0, 3.0]);
//! # Ok::<(), kiln::core::Error>(())
//! ```

use kiln_core::{DType, Device, Error, Result, Shape, Tensor, TensorData};

/// The tensor in `.npy` bytes (`what` names the file in errors). float32, float64, int32,
/// int64 (as i32, range-checked: devices hold no 64-bit integers), uint8 (as i32) and bool
/// arrays read; others are an error naming their type.
pub fn decode(bytes: &[u8], what: &str, device: &Device) -> Result<Tensor> {
    let bad = |e: std::io::Error| Error::io("npy", format!("{what}: {e}"));
    let file = npyz::NpyFile::new(bytes).map_err(bad)?;
    let dims: Vec<usize> = file.shape().iter().map(|&d| d as usize).collect();
    let shape = Shape::from(dims);
    let descr = file.dtype().descr();
    let data = match descr.trim_matches('\'') {
        "<f4" => TensorData::new(file.into_vec::<f32>().map_err(bad)?, shape)?,
        "<f8" => TensorData::new(file.into_vec::<f64>().map_err(bad)?, shape)?,
        "<i4" => TensorData::new(file.into_vec::<i32>().map_err(bad)?, shape)?,
        "|u1" => {
            let v: Vec<i32> = file
                .into_vec::<u8>()
                .map_err(bad)?
                .into_iter()
                .map(i32::from)
                .collect();
            TensorData::new(v, shape)?
        }
        "<i8" => {
            let v = file.into_vec::<i64>().map_err(bad)?;
            let narrowed = v
                .iter()
                .map(|&x| {
                    i32::try_from(x).map_err(|_| {
                        Error::unsupported(
                            "npy",
                            format!("{what}: int64 value {x} does not fit i32"),
                        )
                    })
                })
                .collect::<Result<Vec<i32>>>()?;
            TensorData::new(narrowed, shape)?
        }
        "|b1" => {
            let v: Vec<u8> = file
                .into_vec::<bool>()
                .map_err(bad)?
                .into_iter()
                .map(u8::from)
                .collect();
            TensorData::from_bytes(v, DType::Bool, shape)?
        }
        other => {
            return Err(Error::unsupported(
                "npy",
                format!(
                    "{what}: arrays of {other} are not supported (float32, float64, int32, int64, uint8 and bool are)"
                ),
            ));
        }
    };
    Tensor::from_data(&data, device)
}

/// `t` as `.npy` bytes (float32, float64, int32 or bool; f16 is written as float32).
pub fn encode(t: &Tensor) -> Result<Vec<u8>> {
    use npyz::WriterBuilder;
    let data = t.to_data()?;
    let shape: Vec<u64> = t.dims().iter().map(|&d| d as u64).collect();
    let mut out = Vec::new();
    let io = |e: std::io::Error| Error::io("npy", e.to_string());
    macro_rules! write_as {
        ($ty:ty, $values:expr) => {{
            let mut w = npyz::WriteOptions::<$ty>::new()
                .default_dtype()
                .shape(&shape)
                .writer(&mut out)
                .begin_nd()
                .map_err(io)?;
            w.extend($values).map_err(io)?;
            w.finish().map_err(io)?;
        }};
    }
    match data.dtype() {
        DType::F64 => write_as!(f64, data.to_vec::<f64>()?),
        DType::I32 => write_as!(i32, data.to_vec::<i32>()?),
        DType::U32 => write_as!(u32, data.to_vec::<u32>()?),
        DType::Bool => write_as!(bool, data.as_bytes().iter().map(|&b| b != 0)),
        DType::F32 | DType::F16 => write_as!(f32, data.convert(DType::F32).to_vec::<f32>()?),
    }
    Ok(out)
}
