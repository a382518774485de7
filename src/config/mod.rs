//! Loading and validating snapshot files.
//!
//! Owns: finding the files under each `--config` path, parsing YAML/JSON, mapping each item
//! to its Envoy protobuf through the descriptor pool (proto3 canonical JSON, `Any` by
//! `"@type"`), encoding each resource once and giving it a content-hash version, node
//! selectors, duplicate and reference checks, and (in a [`Loader`]) each file's result
//! between loads, so that a reload parses only the files that changed, on every core. A load
//! either yields a whole new [`Config`] or every error found, never a partial result.
//! Errors in sensitive fields leave the value out (`sensitive`).
//!
//! By concern: `walk` finds the files, `parse` reads one (its YAML as Envoy reads YAML,
//! `yaml`), `decode` turns one item into a resource (protobuf's JSON mapping with Envoy's
//! leniencies, `json`, over Envoy 1.40's API and the operator's descriptor sets,
//! `descriptors`; then Envoy's field rules, `rules`, and its checks beyond them, `checks`),
//! `keys` reads what files add to Envoy's fields (TTLs, VHDS aliases), `secret_files` the
//! PEM files a secret names on this host, `redact` which fields are secret (read from the
//! descriptors) and each resource's forms without them, `hash` gives versions, `loader`
//! keeps results between loads and checks across files (`references`, duplicates, RE2
//! programs per node group in `regex_programs`, the secrets listeners serve judged as server
//! certificates in `server_secrets`). This
//! module holds the types they share.
//!
//! Must not: serve, or cache per node; swapping configs is the cache's job, watching files
//! is `source::files`'.

pub mod checks;
mod decode;
pub mod descriptors;
pub mod fields;
mod hash;
pub mod json;
mod keys;
mod loader;
mod parse;
pub mod redact;
mod references;
mod regex_programs;
pub mod rules;
pub mod secret_files;
pub mod selector;
mod sensitive;
mod server_secrets;
mod suggest;
mod walk;
pub mod yaml;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::resource::{Resource, ResourceType};
pub use hash::content_hash;
pub use keys::{MIN_TTL, TTL_KEY};
pub use loader::{load_documents, Content, Document, LoadWork, Loader};
pub use parse::{load_text, load_text_judged, load_text_with};
pub use secret_files::{CertificateInfo, ReadFile, FILES_KEY};
pub use selector::{NodeMatch, Selector};
pub use walk::snapshot_files;

/// Options of a load.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Reference problems (a route naming a missing cluster, ...) are errors, not warnings.
    pub strict: bool,
    /// A reload may leave a connected node group without any listener or cluster (refused
    /// otherwise: see `Cache::emptied_groups`).
    pub allow_empty: bool,
    /// The largest snapshot file read; a larger one is a load error.
    pub max_file_bytes: u64,
    /// Check Envoy's own field rules (`rules`) on every resource (on by default; off only
    /// for clients that do not apply them, such as proxyless gRPC, with resources Envoy
    /// would reject).
    pub envoy_rules: bool,
    /// `--authority`: the xdstp authorities this server answers for (P35); a resource named
    /// for another is a load error. Empty: any.
    pub authorities: Vec<String>,
    /// `--re2-max-program-size`: the RE2 program size a regex may have where no RTDS runtime
    /// in the files sets `re2.max_program_size.error_level` (what the proxies' bootstraps
    /// set; Envoy's default, 100, if they set nothing).
    pub re2_max_program_size: u64,
}

/// The largest snapshot file read, by default.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 << 20;

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            strict: false,
            allow_empty: false,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            envoy_rules: true,
            authorities: Vec::new(),
            re2_max_program_size: checks::re2::DEFAULT_MAX_PROGRAM_SIZE,
        }
    }
}

/// A whole, valid configuration: every file read, in path order.
#[derive(Debug, Default)]
pub struct Config {
    pub files: Vec<SnapshotFile>,
    /// Problems that do not stop the load (reference checks without `--strict`).
    pub warnings: Vec<ConfigError>,
}

/// One snapshot file after loading. Cloning shares its resources.
#[derive(Clone, Debug)]
pub struct SnapshotFile {
    pub path: PathBuf,
    pub selector: Selector,
    pub resources: Vec<Arc<Resource>>,
    /// What in the file loads but deserves a word (a key given twice, a certificate about
    /// to expire).
    pub warnings: Vec<ConfigError>,
    /// The PEM files its secrets name on this host (`switchyard_files`), as read.
    pub secret_files: Vec<ReadFile>,
    /// The certificates among them, with their expiry.
    pub certificates: Vec<CertificateInfo>,
    /// A digest of its resources' kinds, names and versions, computed once when it loads.
    digest: String,
}

impl SnapshotFile {
    /// Its name in a node group's label (the metrics' `group`, a node's group): the file
    /// name, or the whole path when it has none.
    pub fn label(&self) -> String {
        self.path.file_name().map_or_else(
            || self.path.display().to_string(),
            |n| n.to_string_lossy().into(),
        )
    }

    pub fn new(path: PathBuf, selector: Selector, resources: Vec<Arc<Resource>>) -> Self {
        let parts: Vec<String> = resources
            .iter()
            .map(|r| format!("{} {} {}", r.kind, r.name, r.version))
            .collect();
        SnapshotFile {
            path,
            selector,
            resources,
            warnings: Vec::new(),
            secret_files: Vec::new(),
            certificates: Vec::new(),
            digest: content_hash(parts.iter().map(|s| s.as_bytes())),
        }
    }

    /// A digest of its resources' kinds, names and versions (and so of what it serves).
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The same, with warnings.
    pub fn with_warnings(mut self, warnings: Vec<ConfigError>) -> Self {
        self.warnings = warnings;
        self
    }

    /// The same, with the files its secrets were read from.
    pub fn with_secret_files(
        mut self,
        files: Vec<ReadFile>,
        certificates: Vec<CertificateInfo>,
    ) -> Self {
        self.secret_files = files;
        self.certificates = certificates;
        self
    }
}

impl Config {
    /// The certificates its secrets are read from (`switchyard_files`), file by file.
    pub fn certificates(&self) -> impl Iterator<Item = &CertificateInfo> {
        self.files.iter().flat_map(|f| f.certificates.iter())
    }

    /// How many resources all files hold.
    pub fn resource_count(&self) -> usize {
        self.files.iter().map(|f| f.resources.len()).sum()
    }

    /// A digest of everything loaded (files, selectors, every resource's kind, name and
    /// version): equal exactly when two loads would serve the same. From each file's digest,
    /// computed when the file loaded, so it costs a line per file.
    pub fn version(&self) -> String {
        let parts: Vec<String> = self
            .files
            .iter()
            .map(|f| format!("file {} {:?} {}", f.path.display(), f.selector, f.digest))
            .collect();
        content_hash(parts.iter().map(|s| s.as_bytes()))
    }

    /// A digest of what would be served, whatever the files are called or where they are
    /// (each file's selector and resources): equal for a copy of the same files.
    pub fn content_version(&self) -> String {
        let mut parts: Vec<String> = self
            .files
            .iter()
            .map(|f| format!("{:?} {}", f.selector, f.digest))
            .collect();
        parts.sort();
        content_hash(parts.iter().map(|s| s.as_bytes()))
    }
}

/// Why a load failed: every error found, and the warnings seen on the way.
#[derive(Debug)]
pub struct LoadFailure {
    pub errors: Vec<ConfigError>,
    pub warnings: Vec<ConfigError>,
}

impl fmt::Display for LoadFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.errors.len();
        write!(f, "{n} error{}", if n == 1 { "" } else { "s" })?;
        for e in &self.errors {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for LoadFailure {}

/// `:LINE:COLUMN` after a file's path, or nothing.
fn line_and_column(at: &Option<(usize, usize)>) -> String {
    at.map(|(line, column)| format!(":{line}:{column}"))
        .unwrap_or_default()
}

/// One problem in the configuration, naming the file and, where there is one, the resource
/// and the field path.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: {message}", .path.display())]
    Read { path: PathBuf, message: String },
    #[error("{}: {message}", .path.display())]
    Syntax { path: PathBuf, message: String },
    #[error("{}: {at}: {message}", .path.display())]
    Structure {
        path: PathBuf,
        at: String,
        message: String,
    },
    #[error("{}{}: {resource}: {field}: {message}", .path.display(), line_and_column(.at))]
    Resource {
        path: PathBuf,
        /// `clusters[2]`, with the name where it could be read: `clusters[2] "backend"`.
        resource: String,
        /// Field path inside the resource (`load_assignment.endpoints[0]`), `.` for the
        /// resource itself.
        field: String,
        message: String,
        /// Where in the file (line, column, from 1): the field, or the nearest part of the
        /// resource the file has (an unknown name at its key), when known.
        at: Option<(usize, usize)>,
    },
    #[error("{kind} {name:?} is defined twice: in {} and in {}{why}", .first.display(), .second.display())]
    Duplicate {
        kind: ResourceType,
        name: String,
        first: PathBuf,
        second: PathBuf,
        why: String,
    },
    #[error(
        "this load would remove every {} from the nodes like {:?} (cluster {:?}), which have {} now; \
         refused, the last good snapshot keeps serving (if that is intended, serve with \
         --allow-empty)", references::noun(*.kind), .node.0, .node.1, .now
    )]
    WouldEmpty {
        kind: ResourceType,
        node: (String, String),
        now: usize,
    },
    /// `--preflight-envoy`: the real Envoy rejects a node group's snapshot (or cannot be
    /// run, which fails closed).
    #[error("Envoy rejects the {group}: {message}")]
    Preflight { group: String, message: String },
    /// A YAML mapping key given twice: Envoy keeps the last value, and so does the loader.
    #[error(
        "{}: line {second_line}: `{key}` is given twice (first at line {first_line}); the last \
         one counts, as in Envoy", .path.display()
    )]
    DuplicateKey {
        path: PathBuf,
        key: String,
        first_line: usize,
        second_line: usize,
    },
    #[error("{}{}: {kind} {name:?}: {message}", .path.display(), line_and_column(.at))]
    Reference {
        path: PathBuf,
        kind: ResourceType,
        name: String,
        message: String,
        /// Where the resource that refers is written (line, column, from 1), when known.
        at: Option<(usize, usize)>,
    },
}

/// Load every snapshot file under `paths`. Either the whole configuration, or every error.
pub fn load(paths: &[PathBuf], options: &LoadOptions) -> Result<Config, LoadFailure> {
    Loader::default().load(paths, options)
}

#[cfg(test)]
mod tests;
