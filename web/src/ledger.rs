//! The live-object ledger: every JS `Tensor` is a handle into this table, so `dispose()`, the
//! FinalizationRegistry (through `Drop`) and `kiln.memory()` all see one source of truth.

use crate::error::JsResult;
use crate::js;
use kiln_core::{SortedMap, Tensor as KTensor};
use std::cell::RefCell;
use wasm_bindgen::prelude::*;

/// What one handle holds: a tensor (from JS or a model's output) or a model's weights.
enum Entry {
    Tensor(KTensor),
    Weights {
        device: String,
        tensors: usize,
        bytes: u64,
    },
}

#[derive(Default)]
struct Ledger {
    next: u32,
    // Handles only grow (until they wrap), so inserts land at the end; a sorted list, not a
    // HashMap, whose hashing and table code the module would carry for this alone.
    entries: SortedMap<u32, Entry>,
}

thread_local! {
    static LEDGER: RefCell<Ledger> = RefCell::new(Ledger::default());
}

/// Bytes a tensor's elements take (views counted at their own size).
pub fn tensor_bytes(t: &KTensor) -> u64 {
    (t.numel() * t.dtype().size_in_bytes()) as u64
}

/// Registers a tensor and returns its handle.
pub fn insert(t: KTensor) -> u32 {
    insert_entry(Entry::Tensor(t))
}

/// Registers a model's weights and returns the handle to release them with.
pub fn insert_weights(device: String, tensors: usize, bytes: u64) -> u32 {
    insert_entry(Entry::Weights {
        device,
        tensors,
        bytes,
    })
}

fn insert_entry(e: Entry) -> u32 {
    LEDGER.with_borrow_mut(|l| {
        l.next = l.next.wrapping_add(1).max(1);
        while l.entries.get(&l.next).is_some() {
            l.next = l.next.wrapping_add(1).max(1);
        }
        let h = l.next;
        l.entries.get_or_insert_with(h, || e);
        h
    })
}

/// The tensor behind a handle, or an error naming `op` when it was disposed.
pub fn get(handle: u32, op: &'static str) -> JsResult<KTensor> {
    LEDGER.with_borrow(|l| match l.entries.get(&handle) {
        Some(Entry::Tensor(t)) => Ok(t.clone()),
        _ => Err(crate::error::invalid(
            op,
            format_args!(
                "this Tensor was disposed; create a new one or keep it alive until you are done"
            ),
        )),
    })
}

/// `true` while the handle is registered.
pub fn contains(handle: u32) -> bool {
    LEDGER.with_borrow(|l| l.entries.get(&handle).is_some())
}

/// Releases a handle (a no-op when already released).
pub fn remove(handle: u32) {
    // Dropping the tensor outside the borrow keeps a backend's Drop free to touch the ledger.
    let gone = LEDGER.with_borrow_mut(|l| l.entries.remove(&handle));
    drop(gone);
}

/// Live tensors and their bytes, in total and per device:
/// `{ tensors, bytes, devices: { cpu: { tensors, bytes, allocatedBytes? }, webgpu: {...} } }`.
/// Model weights count as tensors of the model's device. `allocatedBytes` is what the backend
/// itself reports holding (WebGPU buffers, including its reuse pool), when it tracks that.
/// (Exported as `memoryReport`: the wasm module's own `memory` export owns that name; the npm
/// entry point re-exports it as `memory`.)
#[wasm_bindgen(js_name = memoryReport)]
pub fn memory_report() -> JsValue {
    #[derive(Default)]
    struct Sum {
        tensors: usize,
        bytes: u64,
        allocated: Option<u64>,
    }
    // Per device, in name order (a SortedMap, not a BTreeMap, whose code this report alone
    // would bring into the module).
    let mut per: SortedMap<String, Sum> = SortedMap::new();
    LEDGER.with_borrow(|l| {
        for (_, e) in l.entries.iter() {
            let (dev, n, b) = match e {
                Entry::Tensor(t) => {
                    let dev = crate::device::kind_of(t.device()).to_string();
                    per.get_or_insert_with(dev.clone(), Sum::default).allocated =
                        t.device().backend().allocated_bytes();
                    (dev, 1, tensor_bytes(t))
                }
                Entry::Weights {
                    device,
                    tensors,
                    bytes,
                } => (device.clone(), *tensors, *bytes),
            };
            let s = per.get_or_insert_with(dev, Sum::default);
            s.tensors += n;
            s.bytes += b;
        }
    });
    let devices = js_sys::Object::new();
    let (mut tensors, mut bytes) = (0, 0);
    for (name, s) in per.iter() {
        tensors += s.tensors;
        bytes += s.bytes;
        let o = js::object(&[
            ("tensors", (s.tensors as f64).into()),
            ("bytes", (s.bytes as f64).into()),
        ]);
        if let Some(a) = s.allocated {
            js::set(&o, "allocatedBytes", (a as f64).into());
        }
        js::set(&devices, name, o.into());
    }
    js::object(&[
        ("tensors", (tensors as f64).into()),
        ("bytes", (bytes as f64).into()),
        ("devices", devices.into()),
    ])
    .into()
}
