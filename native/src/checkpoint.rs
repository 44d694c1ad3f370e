//! Training checkpoints: kiln-core's checkpoint file (model tensors, `optim.*` optimizer state)
//! with where training stands in its metadata, written atomically so that a crash never leaves
//! a half-written file.

use crate::core::model::{load_checkpoint, save_checkpoint};
use crate::core::nn::Module;
use crate::core::optim::Optimizer;
use crate::core::{Device, Error, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// Metadata key of where training stands (JSON).
const KEY_STATE: &str = "kiln_train_state";

/// Writes `model`, `optimizer` and `progress` (where training stands) to `path` atomically.
pub fn save(
    path: &Path,
    model: &dyn Module,
    optimizer: &dyn Optimizer,
    progress: &impl Serialize,
) -> Result<()> {
    let json =
        serde_json::to_string(progress).map_err(|e| Error::format("checkpoint", e.to_string()))?;
    let bytes = save_checkpoint(
        model,
        Some(optimizer),
        &BTreeMap::from([(KEY_STATE.to_string(), json)]),
    )?;
    write_atomic(path, &bytes)
}

/// Restores `model` and `optimizer` from a checkpoint written by [`save`], returning its progress.
pub fn load<P: DeserializeOwned>(
    path: &Path,
    model: &mut dyn Module,
    optimizer: &mut dyn Optimizer,
    device: &Device,
) -> Result<P> {
    let op = format!("checkpoint {}", path.display());
    let bytes = std::fs::read(path)
        .map_err(|e| Error::io("checkpoint", format!("cannot read {}: {e}", path.display())))?;
    let meta =
        load_checkpoint(&bytes, model, Some(optimizer), device).map_err(|e| e.context(&op))?;
    let json = meta.get(KEY_STATE).ok_or_else(|| {
        Error::format(
            op.clone(),
            format!("expected a kiln training checkpoint (metadata key {KEY_STATE}), found none"),
        )
    })?;
    serde_json::from_str(json).map_err(|e| Error::format(op, format!("bad {KEY_STATE}: {e}")))
}

/// Writes `bytes` to `path` so that readers see the old file or the new one, never a mix:
/// a temporary file in the same directory, fsync, rename over `path`, fsync the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let err = |what: &str, e: std::io::Error| {
        Error::io("write", format!("{what} {}: {e}", path.display()))
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| err("cannot create the directory of", e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        // Persist the rename itself (directories cannot be opened for sync on every platform).
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        err("cannot write", e)
    })
}
