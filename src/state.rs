//! The last good configuration, kept on disk (`serve --state-dir`), so that a restart with
//! broken snapshot files serves what was serving instead of refusing to start.
//!
//! Owns: copying the snapshot files of a good load into the state directory, atomically: a
//! new generation directory is written, checked by loading it, and only then made current
//! by renaming a symlink over `current`; older generations are removed after. Must not:
//! parse files itself (that is `config`, used to check the copy) or publish (`publish`).

use std::path::{Path, PathBuf};

use crate::config::{self, LoadOptions};

/// The symlink to the current generation.
const CURRENT: &str = "current";
/// The file that keeps the last generation number this server published, so that numbers
/// never repeat across restarts.
const NUMBERED: &str = "generation";

/// The state directory failed.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{}: {message}", .path.display())]
    Io { path: PathBuf, message: String },
    #[error("the copy in {} does not load: {message}", .path.display())]
    Unloadable { path: PathBuf, message: String },
    #[error("the files changed since generation {expected} was loaded; the copy is not kept")]
    Changed { expected: String },
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> StateError + '_ {
    move |e| StateError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// A state directory.
#[derive(Debug)]
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// Use `dir`, creating it if needed.
    pub fn open(dir: &Path) -> Result<StateDir, StateError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        Ok(StateDir {
            dir: dir.to_path_buf(),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The last generation number published with this state directory (0: none yet, or a
    /// file that does not read as a number).
    pub fn last_generation(&self) -> u64 {
        std::fs::read_to_string(self.dir.join(NUMBERED))
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Keep `generation` as the last number published (written aside and renamed, so a crash
    /// leaves the old number or the new one).
    pub fn record_generation(&self, generation: u64) -> Result<(), StateError> {
        let path = self.dir.join(NUMBERED);
        let tmp = self.dir.join(".generation.tmp");
        std::fs::write(&tmp, format!("{generation}\n")).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io(&path))
    }

    /// The roots (one per `--config` path, in order) of the last good copy, if there is one.
    pub fn last_good(&self) -> Option<Vec<PathBuf>> {
        let current = self.dir.join(CURRENT);
        let generation = std::fs::canonicalize(&current).ok()?;
        let mut roots: Vec<PathBuf> = std::fs::read_dir(&generation)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("root-"))
            })
            .collect();
        roots.sort_by_key(|p| root_index(p));
        (!roots.is_empty()).then_some(roots)
    }

    /// Copy the snapshot files under `roots` into a new generation, check that it loads
    /// with `options` (and, with `expect`, that it has that `Config::content_version`: what
    /// was promoted, not a later edit), and make it the current one.
    pub fn persist(
        &self,
        roots: &[PathBuf],
        options: &LoadOptions,
        expect: Option<&str>,
    ) -> Result<(), StateError> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let generation = self.dir.join(format!("gen-{stamp}"));
        let mut copied = Vec::with_capacity(roots.len());
        for (i, root) in roots.iter().enumerate() {
            let target = generation.join(format!("root-{i}"));
            std::fs::create_dir_all(&target).map_err(io(&target))?;
            let files = config::snapshot_files(root).map_err(|e| StateError::Io {
                path: root.clone(),
                message: e.to_string(),
            })?;
            for file in files {
                let relative = file
                    .strip_prefix(root)
                    .ok()
                    .filter(|r| !r.as_os_str().is_empty())
                    .map(Path::to_path_buf)
                    .or_else(|| file.file_name().map(PathBuf::from))
                    .unwrap_or_else(|| PathBuf::from("snapshot.yaml"));
                let to = target.join(relative);
                if let Some(parent) = to.parent() {
                    std::fs::create_dir_all(parent).map_err(io(parent))?;
                }
                std::fs::copy(&file, &to).map_err(io(&file))?;
            }
            copied.push(target);
        }
        // A copy that does not load (a file changed between the load and the copy) is not
        // kept: the previous generation stays current.
        let check = LoadOptions {
            allow_empty: true,
            ..options.clone()
        };
        match config::load(&copied, &check) {
            Err(failure) => {
                let _ = std::fs::remove_dir_all(&generation);
                return Err(StateError::Unloadable {
                    path: generation,
                    message: failure.to_string(),
                });
            }
            Ok(copy) => {
                if let Some(expected) = expect.filter(|v| *v != copy.content_version()) {
                    let _ = std::fs::remove_dir_all(&generation);
                    return Err(StateError::Changed {
                        expected: expected.to_string(),
                    });
                }
            }
        }
        let link = self.dir.join(".current.tmp");
        let _ = std::fs::remove_file(&link);
        let name = generation
            .file_name()
            .map(PathBuf::from)
            .unwrap_or_default();
        std::os::unix::fs::symlink(&name, &link).map_err(io(&link))?;
        std::fs::rename(&link, self.dir.join(CURRENT)).map_err(io(&self.dir))?;
        self.remove_other_generations(&name);
        Ok(())
    }

    fn remove_other_generations(&self, keep: &Path) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name.to_string_lossy().starts_with("gen-") && Path::new(&name) != keep {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

fn root_index(path: &Path) -> usize {
    path.file_name()
        .and_then(|n| n.to_string_lossy().strip_prefix("root-")?.parse().ok())
        .unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persists_what_loaded_and_keeps_the_last_good_on_a_bad_copy() {
        let files = tempfile::tempdir().expect("tmp");
        let state = tempfile::tempdir().expect("tmp");
        let sub = files.path().join("team");
        std::fs::create_dir(&sub).expect("mkdir");
        std::fs::write(sub.join("a.yaml"), "clusters: [{name: a}]\n").expect("write");
        let elsewhere = tempfile::tempdir().expect("tmp");
        let single = elsewhere.path().join("single.json");
        std::fs::write(&single, r#"{"clusters": [{"name": "b"}]}"#).expect("write");
        let roots = vec![files.path().to_path_buf(), single];
        let dir = StateDir::open(state.path()).expect("opens");
        assert_eq!(dir.last_good(), None);
        dir.persist(&roots, &LoadOptions::default(), None)
            .expect("persists");
        let copy = dir.last_good().expect("a copy");
        assert_eq!(copy.len(), 2);
        let loaded = config::load(&copy, &LoadOptions::default()).expect("the copy loads");
        assert_eq!(loaded.resource_count(), 2, "{loaded:?}");
        // A broken file is not persisted; the last good copy stays.
        std::fs::write(sub.join("a.yaml"), "clusters: [{name: a, bad: 1}]\n").expect("write");
        assert!(dir.persist(&roots, &LoadOptions::default(), None).is_err());
        let still = dir.last_good().expect("still a copy");
        assert!(config::load(&still, &LoadOptions::default()).is_ok());
        let generations = std::fs::read_dir(state.path())
            .expect("list")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("gen-"))
            .count();
        assert_eq!(generations, 1, "one generation kept");
    }

    /// With an expected content version (what was promoted), files edited since are not kept.
    #[test]
    fn a_copy_of_files_changed_since_the_promotion_is_not_kept() {
        let files = tempfile::tempdir().expect("tmp");
        let state = tempfile::tempdir().expect("tmp");
        let file = files.path().join("a.yaml");
        std::fs::write(&file, "clusters: [{name: a}]\n").expect("write");
        let roots = vec![files.path().to_path_buf()];
        let promoted = config::load(&roots, &LoadOptions::default())
            .expect("loads")
            .content_version();
        let dir = StateDir::open(state.path()).expect("opens");
        dir.persist(&roots, &LoadOptions::default(), Some(&promoted))
            .expect("the same content is kept, under another path");
        std::fs::write(&file, "clusters: [{name: b}]\n").expect("write");
        let err = dir
            .persist(&roots, &LoadOptions::default(), Some(&promoted))
            .expect_err("changed since");
        assert!(matches!(err, StateError::Changed { .. }), "{err}");
        let kept = dir.last_good().expect("the promoted copy stays");
        let loaded = config::load(&kept, &LoadOptions::default()).expect("loads");
        assert_eq!(loaded.content_version(), promoted);
    }
}
