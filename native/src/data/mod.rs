//! Data sets and images read from disk, and the loader that batches them.

pub mod augment;
pub mod csv;
pub mod image;
pub mod loader;
pub mod mnist;
pub mod text;

use crate::core::{Error, Result};
use std::path::{Path, PathBuf};

/// A dataset's directory: `explicit` (`--data`), else the environment variable `env`, else the
/// first `shared/data/<name>` found walking up from the current directory. `op` names the
/// dataset in the error.
pub fn shared_dir(
    explicit: Option<&Path>,
    env: &str,
    name: &str,
    op: &'static str,
) -> Result<PathBuf> {
    if let Some(dir) = explicit {
        return Ok(dir.to_path_buf());
    }
    if let Some(dir) = std::env::var_os(env) {
        return Ok(PathBuf::from(dir));
    }
    let cwd =
        std::env::current_dir().map_err(|e| Error::io(op, format!("no current directory: {e}")))?;
    let sub = Path::new("shared").join("data").join(name);
    cwd.ancestors()
        .map(|a| a.join(&sub))
        .find(|d| d.is_dir())
        .ok_or_else(|| {
            Error::io(
                op,
                format!(
                    "no {op} directory: expected {} in {} or a parent; pass --data DIR or set {env}",
                    sub.display(),
                    cwd.display()
                ),
            )
        })
}
