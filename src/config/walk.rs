//! Finding the snapshot files a `--config` path names (the directory walk is `walkdir`'s,
//! following symlinks, with its loop detection).
//!
//! Must not: read what is in them (`parse`).

use std::path::{Path, PathBuf};

use walkdir::WalkDir;

use super::ConfigError;

/// The snapshot files a `--config` path names, in no particular order: the file itself, or
/// every `*.yaml`, `*.yml` and `*.json` below a directory, through symlinks, skipping hidden
/// entries (so a Kubernetes ConfigMap mount's `..data` and `..2024_...` entries are read
/// once, through the visible links).
pub fn snapshot_files(root: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let meta = std::fs::metadata(root).map_err(|e| ConfigError::Read {
        path: root.to_path_buf(),
        message: format!("cannot read config path: {e}"),
    })?;
    if meta.is_file() {
        return Ok(vec![root.to_path_buf()]);
    }
    let entries = WalkDir::new(root)
        .follow_links(true)
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.'));
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(walk_error)?;
        let path = entry.path();
        if entry.file_type().is_dir() {
            if is_snapshot_file(path) {
                // A snapshot file that became a directory (a bad deploy) is not an empty
                // config.
                return Err(ConfigError::Read {
                    path: path.to_path_buf(),
                    message: "is a directory, not a snapshot file".into(),
                });
            }
        } else if is_snapshot_file(path) {
            out.push(entry.into_path());
        }
    }
    Ok(out)
}

/// What went wrong where in the walk: a symlink loop, a link that leads nowhere (ConfigMap
/// files are links into `..data`, swapped atomically, so that is a broken deploy, not a file
/// with nothing in it), or a directory that cannot be listed.
fn walk_error(e: walkdir::Error) -> ConfigError {
    let path = e.path().map(Path::to_path_buf).unwrap_or_default();
    let message = if let Some(ancestor) = e.loop_ancestor() {
        format!(
            "a symlink loop: it leads back to {}, which is being read",
            ancestor.display()
        )
    } else {
        let cause = e
            .io_error()
            .map_or_else(|| e.to_string(), ToString::to_string);
        match std::fs::read_link(&path) {
            Ok(target) => format!(
                "a symlink to {}, which cannot be read: {cause}",
                target.display()
            ),
            Err(_) if path.is_dir() => format!("cannot list directory: {cause}"),
            Err(_) => format!("cannot read: {cause}"),
        }
    };
    ConfigError::Read { path, message }
}

/// Whether a path names a snapshot file by its extension.
fn is_snapshot_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}
