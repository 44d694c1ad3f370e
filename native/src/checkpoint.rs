//! Training checkpoints: one safetensors file holding the model's tensors (`model.<name>`), the
//! optimizer's tensors (`optim.<name>`) and, in the metadata, the optimizer's configuration and
//! where training stands. Written atomically so a crash never leaves a half-written file.

use crate::core::model::{decode_safetensors, encode_safetensors};
use crate::core::optim::OptimizerState;
use crate::core::{Device, Error, Result, Tensor};
use crate::train::Progress;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// Metadata key of the checkpoint description.
const META_KEY: &str = "kiln.checkpoint";
/// Version of the checkpoint layout.
const FORMAT: u32 = 1;

#[derive(serde::Serialize, serde::Deserialize)]
struct Meta {
    format: u32,
    progress: Progress,
    optimizer: String,
}

/// Everything needed to resume training.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    /// The model's parameters and buffers by name.
    pub model: BTreeMap<String, Tensor>,
    /// The optimizer's state.
    pub optimizer: OptimizerState,
    /// Where training stands.
    pub progress: Progress,
}

impl Checkpoint {
    /// Writes the checkpoint to `path` atomically (temporary file, fsync, rename).
    pub fn write(&self, path: &Path) -> Result<()> {
        let mut tensors = Vec::new();
        for (prefix, map) in [("model", &self.model), ("optim", &self.optimizer.tensors)] {
            for (name, t) in map {
                tensors.push((format!("{prefix}.{name}"), t.to_data()?));
            }
        }
        let meta = Meta {
            format: FORMAT,
            progress: self.progress.clone(),
            optimizer: self.optimizer.config.clone(),
        };
        let json = serde_json::to_string(&meta).map_err(|e| Error::format("checkpoint", e.to_string()))?;
        let bytes = encode_safetensors(&tensors, &BTreeMap::from([(META_KEY.to_string(), json)]))?;
        write_atomic(path, &bytes)
    }

    /// Reads a checkpoint written by [`Checkpoint::write`], placing its tensors on `device`.
    pub fn read(path: &Path, device: &Device) -> Result<Checkpoint> {
        let op = format!("checkpoint {}", path.display());
        let bytes = std::fs::read(path).map_err(|e| Error::io("checkpoint", format!("cannot read {}: {e}", path.display())))?;
        let file = decode_safetensors(&bytes).map_err(|e| e.context(&op))?;
        let json = file.metadata.get(META_KEY).ok_or_else(|| {
            Error::format(op.clone(), format!("expected a kiln checkpoint (metadata key {META_KEY}), found none"))
        })?;
        let meta: Meta = serde_json::from_str(json).map_err(|e| Error::format(op.clone(), format!("bad {META_KEY}: {e}")))?;
        if meta.format != FORMAT {
            return Err(Error::format(op, format!("expected checkpoint format {FORMAT}, found {}", meta.format)));
        }
        let mut model = BTreeMap::new();
        let mut optim = BTreeMap::new();
        for (name, t) in file.to_device(device)? {
            match name.split_once('.') {
                Some(("model", rest)) => model.insert(rest.to_string(), t),
                Some(("optim", rest)) => optim.insert(rest.to_string(), t),
                _ => return Err(Error::format(op, format!("expected tensors named model.* or optim.*, found {name}"))),
            };
        }
        Ok(Checkpoint {
            model,
            optimizer: OptimizerState { tensors: optim, config: meta.optimizer },
            progress: meta.progress,
        })
    }
}

/// Writes `bytes` to `path` so that readers see the old file or the new one, never a mix:
/// a temporary file in the same directory, fsync, rename over `path`, fsync the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let err = |what: &str, e: std::io::Error| Error::io("write", format!("{what} {}: {e}", path.display()));
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| err("cannot create the directory of", e))?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
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
