//! The CPU reference backend: correct for every op, the oracle other backends are tested against.

use crate::backend::{Backend, ReadFuture, View};
use crate::op::Op;
use crate::{DType, Device, Error, Result, Shape, Storage, TensorData};
use alloc::string::String;

/// The CPU backend.
#[derive(Debug, Default)]
pub struct CpuBackend;

/// The shared CPU device.
pub(crate) fn device() -> Device {
    static CPU: spin::Once<Device> = spin::Once::new();
    CPU.call_once(|| Device::new(CpuBackend)).clone()
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        "cpu".into()
    }
    fn upload(&self, data: &TensorData) -> Result<Storage> {
        Ok(Storage::new(data.clone()))
    }
    fn execute(
        &self,
        op: &Op,
        _inputs: &[View<'_>],
        _out_dtype: DType,
        _out_shape: &Shape,
    ) -> Result<Storage> {
        Err(Error::unsupported(
            op.name(),
            "not yet implemented on the cpu backend",
        ))
    }
    fn read(&self, _input: View<'_>) -> ReadFuture {
        alloc::boxed::Box::pin(core::future::ready(Err(Error::unsupported("read", "todo"))))
    }
}
