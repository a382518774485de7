//! The last generations this server published, for `/status`, the page and
//! `switchyard history`: when, from which etcd revision, what changed (files, and resources
//! by type and name), and how many nodes ACKed or NACKed each (counted by `fleet`).
//!
//! Owns: the record of each publication, kept in memory (the last [`KEPT`]) and, with
//! `--state-dir`, in `history.json` there so that it survives a restart. Must not: decide
//! what is published (`publish`) or count ACKs itself (`fleet::Fleet::tally`).

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::config::{Config, SnapshotFile};

/// How many generations are kept (their ACKs are counted as long).
pub const KEPT: usize = crate::fleet::TALLIED;
/// How many names of each kind of change an entry lists (the counts are whole).
const NAMES: usize = 20;
/// The file in the state directory.
const FILE: &str = "history.json";

/// One published generation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub generation: u64,
    /// When it was published (RFC 3339).
    pub at: String,
    /// `--source`: the etcd revision its documents were read at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// What it serves (`Config::content_version`).
    pub version: String,
    /// Files (or documents) added, changed and deleted: `add NAME`, `change NAME`,
    /// `delete NAME`.
    pub files: Vec<String>,
    /// Resources added, changed and removed (`CDS backend`), at most 20 named of each.
    pub added: Vec<String>,
    pub changed: Vec<String>,
    pub removed: Vec<String>,
    /// How many resources were added, changed and removed in all.
    pub counts: [usize; 3],
    /// How many nodes ACKed it (every type synced on it) and NACKed it, so far.
    pub acked: usize,
    pub nacked: usize,
    /// `--source`: who wrote its documents and why, as `apply --author` and `--message`
    /// said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `--source`: written by `rollback REVISION` (this revision's documents written back),
    /// and with `--now` (every node got it at once: no canary, no bake).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<i64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub now: bool,
}

impl Entry {
    /// Its files for a line: how many were added, changed and deleted, and the first
    /// `limit` paths, sorted (the rest counted).
    pub fn files_summary(&self, limit: usize) -> String {
        let mut files = self.files.clone();
        files.sort();
        let count = |action: &str| {
            files
                .iter()
                .filter(|f| f.starts_with(&format!("{action} ")))
                .count()
        };
        let counts: Vec<String> = ["add", "change", "delete"]
            .iter()
            .map(|a| (a, count(a)))
            .filter(|(_, n)| *n > 0)
            .map(|(a, n)| format!("{a} {n}"))
            .collect();
        let text = crate::diff::first_of(&files, limit);
        if files.len() > limit {
            format!("{} file(s) ({}): {text}", files.len(), counts.join(", "))
        } else {
            text
        }
    }
    /// The entry for publishing `new` as generation `generation` over `old`.
    pub fn of(old: &Config, new: &Config, generation: u64, revision: Option<i64>) -> Entry {
        let mut entry = Entry {
            generation,
            at: crate::fleet::format_time(SystemTime::now()),
            revision,
            version: new.content_version(),
            ..Entry::default()
        };
        // Files by path, with their digest (of their selector's resources): only those that
        // differ are looked into, so a publication costs what it changed, not the snapshot.
        fn files(c: &Config) -> BTreeMap<&std::path::Path, &SnapshotFile> {
            c.files.iter().map(|f| (f.path.as_path(), f)).collect()
        }
        let (before, after) = (files(old), files(new));
        let same = |a: &SnapshotFile, b: &SnapshotFile| {
            a.digest() == b.digest() && a.selector == b.selector
        };
        let mut touched: [Vec<&SnapshotFile>; 2] = [Vec::new(), Vec::new()];
        for (path, file) in &after {
            match before.get(path) {
                None => entry.files.push(format!("add {}", path.display())),
                Some(was) if !same(was, file) => {
                    entry.files.push(format!("change {}", path.display()));
                    touched[0].push(was);
                }
                Some(_) => continue,
            }
            touched[1].push(file);
        }
        for (path, was) in before.iter().filter(|(p, _)| !after.contains_key(*p)) {
            entry.files.push(format!("delete {}", path.display()));
            touched[0].push(was);
        }
        // Their resources by node group, type and name: versions are content hashes, so a
        // resource moved between two of them is not a change.
        let resources = |files: &[&SnapshotFile]| {
            let mut by: BTreeMap<(String, &'static str, String), String> = BTreeMap::new();
            for f in files {
                let group = format!("{:?}", f.selector);
                for r in &f.resources {
                    by.insert(
                        (group.clone(), r.kind.short_name(), r.name.clone()),
                        r.version.clone(),
                    );
                }
            }
            by
        };
        let (before, after) = (resources(&touched[0]), resources(&touched[1]));
        let note = |list: &mut Vec<String>,
                    count: &mut usize,
                    (_, kind, name): &(String, &str, String)| {
            *count += 1;
            let name = format!("{kind} {name}");
            if list.len() < NAMES && !list.contains(&name) {
                list.push(name);
            }
        };
        let [added, changed, removed] = &mut entry.counts;
        for (key, version) in &after {
            match before.get(key) {
                None => note(&mut entry.added, added, key),
                Some(v) if v != version => note(&mut entry.changed, changed, key),
                Some(_) => {}
            }
        }
        for key in before.keys().filter(|k| !after.contains_key(*k)) {
            note(&mut entry.removed, removed, key);
        }
        entry
    }
}

/// The last generations published.
#[derive(Debug, Default)]
pub struct History {
    entries: Mutex<VecDeque<Entry>>,
    /// `--state-dir`: where they are kept.
    file: Option<PathBuf>,
}

impl History {
    /// A history kept in `dir` (`--state-dir`) as well as in memory, starting from what it
    /// kept before (a file that does not read starts it afresh, with a warning).
    pub fn kept_in(dir: &Path) -> History {
        let file = dir.join(FILE);
        let entries = match std::fs::read(&file) {
            Ok(bytes) => serde_json::from_slice::<VecDeque<Entry>>(&bytes).unwrap_or_else(|e| {
                tracing::warn!(file = %file.display(), error = %e, "The history kept in --state-dir does not read; starting it afresh.");
                VecDeque::new()
            }),
            Err(_) => VecDeque::new(),
        };
        History {
            entries: Mutex::new(entries),
            file: Some(file),
        }
    }

    /// Record a publication; with a state directory, write the history there (aside and
    /// renamed), with `counts` (ACKs and NACKs so far, by generation) for the earlier ones.
    pub fn record(&self, entry: Entry, counts: impl Fn(u64) -> Option<(usize, usize)>) {
        self.update(Some(entry), counts);
    }

    /// Write the history with the counts as they are now (at shutdown: a restart shows how
    /// many nodes took the last generations).
    pub fn save(&self, counts: impl Fn(u64) -> Option<(usize, usize)>) {
        self.update(None, counts);
    }

    fn update(&self, entry: Option<Entry>, counts: impl Fn(u64) -> Option<(usize, usize)>) {
        let snapshot = {
            let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            for e in entries.iter_mut() {
                if let Some((acked, nacked)) = counts(e.generation) {
                    (e.acked, e.nacked) = (acked, nacked);
                }
            }
            entries.extend(entry);
            while entries.len() > KEPT {
                entries.pop_front();
            }
            self.file.as_ref().map(|_| entries.clone())
        };
        if let (Some(file), Some(entries)) = (&self.file, snapshot) {
            let tmp = file.with_extension("json.tmp");
            let written = serde_json::to_vec(&entries)
                .map_err(std::io::Error::other)
                .and_then(|bytes| std::fs::write(&tmp, bytes))
                .and_then(|()| std::fs::rename(&tmp, file));
            if let Err(e) = written {
                tracing::warn!(file = %file.display(), error = %e, "Cannot keep the history in --state-dir.");
            }
        }
    }

    /// The entries, newest first, with `counts` (ACKs and NACKs by generation, where known).
    pub fn entries(&self, counts: impl Fn(u64) -> Option<(usize, usize)>) -> Vec<Entry> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .iter()
            .rev()
            .map(|e| {
                let mut e = e.clone();
                if let Some((acked, nacked)) = counts(e.generation) {
                    (e.acked, e.nacked) = (acked, nacked);
                }
                e
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
