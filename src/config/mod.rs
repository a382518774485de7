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
//! Must not: serve, or cache per node; swapping configs is the cache's job, watching files
//! is `watch`'s.

pub mod descriptors;
mod references;
pub mod rules;
pub mod selector;
mod sensitive;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use prost_reflect::{DeserializeOptions, DynamicMessage};
use sha2::{Digest, Sha256};

use crate::resource::{Resource, ResourceType};
pub use selector::{NodeMatch, Selector};

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
    /// A digest of its resources' kinds, names and versions, computed once when it loads.
    digest: String,
}

impl SnapshotFile {
    pub fn new(path: PathBuf, selector: Selector, resources: Vec<Arc<Resource>>) -> Self {
        let parts: Vec<String> = resources
            .iter()
            .map(|r| format!("{} {} {}", r.kind, r.name, r.version))
            .collect();
        SnapshotFile {
            path,
            selector,
            resources,
            digest: content_hash(parts.iter().map(|s| s.as_bytes())),
        }
    }
}

impl Config {
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
    #[error("{}: {resource}: {field}: {message}", .path.display())]
    Resource {
        path: PathBuf,
        /// `clusters[2]`, with the name where it could be read: `clusters[2] "backend"`.
        resource: String,
        /// Field path inside the resource (`load_assignment.endpoints[0]`), `.` for the
        /// resource itself.
        field: String,
        message: String,
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
    #[error("{}: {kind} {name:?}: {message}", .path.display())]
    Reference {
        path: PathBuf,
        kind: ResourceType,
        name: String,
        message: String,
    },
}

/// Load every snapshot file under `paths`. Either the whole configuration, or every error.
pub fn load(paths: &[PathBuf], options: &LoadOptions) -> Result<Config, LoadFailure> {
    Loader::default().load(paths, options)
}

/// Loads again and again, parsing only the files that changed since its last load: each
/// file's result (its resources, or its errors) is kept with what identifies the file's
/// content on disk (modification time, size, inode), and the configuration is put together
/// from the kept results. Files that did change are parsed in parallel, one thread per core.
#[derive(Debug, Default)]
pub struct Loader {
    files: BTreeMap<PathBuf, Parsed>,
}

/// One file's load, and the stamp of the file it came from.
#[derive(Debug)]
struct Parsed {
    stamp: FileStamp,
    /// The options it was loaded under (a file over the limit is an error under a lower one).
    under: PerFile,
    /// When the file was read, and a digest of what was read (`None`: it could not be).
    read_at: std::time::SystemTime,
    digest: Option<String>,
    result: Result<SnapshotFile, Vec<ConfigError>>,
}

/// A file modified this close to when it was read may have changed again within the file
/// system's timestamp granularity (a coarse clock tick, or seconds on some file systems)
/// without its stamp showing it: its content is compared instead.
const RACY: Duration = Duration::from_secs(2);

impl Parsed {
    /// Whether this is still the load of the file at `path`, now stamped `stamp`.
    fn fresh(&self, path: &Path, stamp: &FileStamp, under: PerFile) -> bool {
        if self.stamp != *stamp || self.under != under {
            return false;
        }
        let racy = match stamp.modified {
            Some(modified) => modified + RACY >= self.read_at,
            None => true,
        };
        !racy || (self.digest.is_some() && read_digest(path) == self.digest)
    }
}

/// A digest of a file's bytes, if it can be read.
fn read_digest(path: &Path) -> Option<String> {
    std::fs::read(path)
        .ok()
        .map(|b| content_hash([b.as_slice()]))
}

/// What identifies a file's content on disk without reading it: modification time, size,
/// and (on Unix) device and inode, so a rename-over or a symlink swap is a new file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileStamp {
    modified: Option<std::time::SystemTime>,
    len: u64,
    device: u64,
    inode: u64,
}

impl FileStamp {
    fn of(path: &Path) -> Option<FileStamp> {
        let meta = std::fs::metadata(path).ok()?;
        #[cfg(unix)]
        let (device, inode) = {
            use std::os::unix::fs::MetadataExt;
            (meta.dev(), meta.ino())
        };
        #[cfg(not(unix))]
        let (device, inode) = (0, 0);
        Some(FileStamp {
            modified: meta.modified().ok(),
            len: meta.len(),
            device,
            inode,
        })
    }
}

/// How many files were parsed, and how many reused, by the latest [`Loader::load`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadWork {
    pub parsed: usize,
    pub reused: usize,
}

impl Loader {
    /// Load every snapshot file under `paths`, parsing only files that changed since this
    /// loader's previous load. Either the whole configuration, or every error.
    pub fn load(
        &mut self,
        paths: &[PathBuf],
        options: &LoadOptions,
    ) -> Result<Config, LoadFailure> {
        self.load_counting(paths, options).0
    }

    /// [`Loader::load`], and how many files it parsed and reused.
    pub fn load_counting(
        &mut self,
        paths: &[PathBuf],
        options: &LoadOptions,
    ) -> (Result<Config, LoadFailure>, LoadWork) {
        let mut errors = Vec::new();
        let mut files = Vec::new();
        for root in paths {
            match discover(root) {
                Ok(found) => files.extend(found),
                Err(e) => errors.push(e),
            }
        }
        files.sort();
        files.dedup();

        // Forget files that are gone; find those that changed.
        let wanted: std::collections::BTreeSet<&PathBuf> = files.iter().collect();
        self.files.retain(|path, _| wanted.contains(path));
        let stamps: Vec<Option<FileStamp>> = files.iter().map(|p| FileStamp::of(p)).collect();
        let stale: Vec<(&PathBuf, Option<FileStamp>)> = files
            .iter()
            .zip(&stamps)
            .filter(|(path, stamp)| match (self.files.get(*path), stamp) {
                (Some(kept), Some(stamp)) => !kept.fresh(path, stamp, PerFile::of(options)),
                _ => true,
            })
            .map(|(path, stamp)| (path, *stamp))
            .collect();
        let work = LoadWork {
            parsed: stale.len(),
            reused: files.len() - stale.len(),
        };
        let read_at = std::time::SystemTime::now();
        let parsed = parse_in_parallel(&stale, PerFile::of(options));
        for ((path, stamp), (digest, result)) in stale.into_iter().zip(parsed) {
            match stamp {
                Some(stamp) => {
                    self.files.insert(
                        path.clone(),
                        Parsed {
                            stamp,
                            under: PerFile::of(options),
                            read_at,
                            digest,
                            result,
                        },
                    );
                }
                // Gone between listing and reading: report it, keep nothing.
                None => {
                    self.files.remove(path);
                    errors.extend(result.err().unwrap_or_default());
                }
            }
        }

        let mut loaded = Vec::new();
        for path in &files {
            match self.files.get(path).map(|kept| &kept.result) {
                Some(Ok(file)) => loaded.push(file.clone()),
                Some(Err(file_errors)) => errors.extend(file_errors.iter().cloned()),
                None => {}
            }
        }
        (assemble(loaded, errors, options), work)
    }
}

/// The options that decide one file's own result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PerFile {
    max_bytes: u64,
    envoy_rules: bool,
}

impl PerFile {
    fn of(options: &LoadOptions) -> PerFile {
        PerFile {
            max_bytes: options.max_file_bytes,
            envoy_rules: options.envoy_rules,
        }
    }
}

/// What loading one file gives: a digest of the bytes read (if read), and the result.
type FileLoad = (Option<String>, Result<SnapshotFile, Vec<ConfigError>>);

/// Load `files` (with their stamps; no stamp: unreadable), on up to one thread per core.
fn parse_in_parallel(files: &[(&PathBuf, Option<FileStamp>)], under: PerFile) -> Vec<FileLoad> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(files.len());
    if threads <= 1 {
        return files
            .iter()
            .map(|(path, _)| load_file(path, under))
            .collect();
    }
    // Files go to threads in turn (a large file does not hold up a whole share).
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut results: Vec<Option<FileLoad>> = files.iter().map(|_| None).collect();
    let done = std::sync::Mutex::new(&mut results);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let at = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((path, _)) = files.get(at) else {
                    break;
                };
                let result = load_file(path, under);
                done.lock().unwrap_or_else(|p| p.into_inner())[at] = Some(result);
            });
        }
    });
    results
        .into_iter()
        .zip(files)
        .map(|(result, (path, _))| {
            result.unwrap_or_else(|| {
                let failed = ConfigError::Read {
                    path: path.to_path_buf(),
                    message: "was not loaded (a loader thread failed)".into(),
                };
                (None, Err(vec![failed]))
            })
        })
        .collect()
}

/// The configuration from loaded files (in path order) and the errors so far: duplicates
/// and references checked across every file.
fn assemble(
    loaded: Vec<SnapshotFile>,
    mut errors: Vec<ConfigError>,
    options: &LoadOptions,
) -> Result<Config, LoadFailure> {
    errors.extend(duplicates(&loaded));

    // References are checked only across a complete set of files: with a file missing, its
    // resources would look undefined.
    let mut warnings = Vec::new();
    let problems = if errors.is_empty() {
        let count = loaded.iter().map(|f| f.resources.len()).sum();
        let mut checks = references::Checker::with_capacity(count);
        for (index, file) in loaded.iter().enumerate() {
            for resource in &file.resources {
                checks.add(index, resource);
            }
        }
        checks.run(&loaded)
    } else {
        Vec::new()
    };
    for problem in problems {
        if options.strict {
            errors.push(problem);
        } else {
            warnings.push(problem);
        }
    }
    if errors.is_empty() {
        Ok(Config {
            files: loaded,
            warnings,
        })
    } else {
        Err(LoadFailure { errors, warnings })
    }
}

/// The snapshot files a `--config` path names (see `discover`), in no particular order.
pub fn snapshot_files(root: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    discover(root)
}

/// The snapshot files a `--config` path names: the file itself, or every `*.yaml`, `*.yml`
/// and `*.json` below a directory, skipping hidden entries (so a Kubernetes ConfigMap mount's
/// `..data` and `..2024_...` entries are read once, through the visible links).
fn discover(root: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let meta = std::fs::metadata(root).map_err(|e| ConfigError::Read {
        path: root.to_path_buf(),
        message: format!("cannot read config path: {e}"),
    })?;
    if meta.is_file() {
        return Ok(vec![root.to_path_buf()]);
    }
    if is_snapshot_file(root) {
        // A snapshot file that became a directory (a bad deploy) is not an empty config.
        return Err(ConfigError::Read {
            path: root.to_path_buf(),
            message: "is a directory, not a snapshot file".into(),
        });
    }
    let mut out = Vec::new();
    walk(root, 0, &mut out)?;
    Ok(out)
}

/// Directory depth past which we stop (symlink loops).
const MAX_DEPTH: usize = 16;

fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<(), ConfigError> {
    let read_err = |e: std::io::Error| ConfigError::Read {
        path: dir.to_path_buf(),
        message: format!("cannot list directory: {e}"),
    };
    if depth > MAX_DEPTH {
        return Err(ConfigError::Read {
            path: dir.to_path_buf(),
            message: format!("directories nested deeper than {MAX_DEPTH} (a symlink loop?)"),
        });
    }
    for entry in std::fs::read_dir(dir).map_err(read_err)? {
        let entry = entry.map_err(read_err)?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        // Follow symlinks: ConfigMap files are links into `..data`, swapped atomically, so
        // a link that leads nowhere is a broken deploy, not a file with nothing in it.
        let meta = std::fs::metadata(&path).map_err(|e| ConfigError::Read {
            path: path.clone(),
            message: match std::fs::read_link(&path) {
                Ok(target) => format!(
                    "a symlink to {}, which cannot be read: {e}",
                    target.display()
                ),
                Err(_) => format!("cannot read: {e}"),
            },
        })?;
        if meta.is_dir() && is_snapshot_file(&path) {
            return Err(ConfigError::Read {
                path,
                message: "is a directory, not a snapshot file".into(),
            });
        }
        if meta.is_dir() {
            walk(&path, depth + 1, out)?;
        } else if is_snapshot_file(&path) {
            out.push(path);
        }
    }
    Ok(())
}

fn is_snapshot_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

/// The top level of a snapshot file: `nodes`, and each type's list under its file key (the
/// table in `resource`).
#[derive(Debug, Default)]
struct RawFile {
    nodes: Option<Vec<NodeMatch>>,
    lists: [Vec<serde_yaml::Value>; ResourceType::ALL.len()],
}

impl RawFile {
    fn take(&mut self, kind: ResourceType) -> Vec<serde_yaml::Value> {
        std::mem::take(&mut self.lists[kind.index()])
    }

    /// Read the top-level mapping: `nodes` and the file keys, nothing else.
    fn from_mapping(path: &Path, mapping: serde_yaml::Mapping) -> Result<RawFile, ConfigError> {
        let structure = |at: String, message: String| ConfigError::Structure {
            path: path.to_path_buf(),
            at,
            message,
        };
        // Where in `value` (under `key`) deserializing it failed, and why.
        fn field<T: serde::de::DeserializeOwned>(
            key: &str,
            value: serde_yaml::Value,
        ) -> Result<T, (String, String)> {
            serde_path_to_error::deserialize(value).map_err(|e| {
                let inner = e.path().to_string();
                let at = match inner.as_str() {
                    "." => key.to_string(),
                    _ if inner.starts_with('[') => format!("{key}{inner}"),
                    _ => format!("{key}.{inner}"),
                };
                (at, e.into_inner().to_string())
            })
        }
        let mut raw = RawFile::default();
        for (key, value) in mapping {
            let Some(key) = key.as_str() else {
                return Err(structure(
                    "top level".into(),
                    format!("keys must be strings, found {key:?}"),
                ));
            };
            if key == "nodes" {
                raw.nodes = field(key, value).map_err(|(at, m)| structure(at, m))?;
            } else if let Some(kind) = ResourceType::ALL.into_iter().find(|t| t.file_key() == key) {
                let list: Option<Vec<serde_yaml::Value>> =
                    field(key, value).map_err(|(at, m)| structure(at, m))?;
                raw.lists[kind.index()] = list.unwrap_or_default();
            } else {
                let expected: Vec<String> = std::iter::once("nodes")
                    .chain(ResourceType::ALL.map(ResourceType::file_key))
                    .map(|k| format!("`{k}`"))
                    .collect();
                return Err(structure(
                    "top level".into(),
                    format!(
                        "unknown field `{key}`, expected one of {}",
                        expected.join(", ")
                    ),
                ));
            }
        }
        Ok(raw)
    }
}

/// Parse one file's text (YAML, or JSON when the name ends in `.json`) into its top level.
fn parse_file(path: &Path, text: &str) -> Result<RawFile, ConfigError> {
    let is_json = path.extension().and_then(|e| e.to_str()) == Some("json");
    let value: serde_yaml::Value = if is_json {
        serde_json::from_str(text).map_err(|e| ConfigError::Syntax {
            path: path.to_path_buf(),
            message: format!("invalid JSON: {e}"),
        })?
    } else {
        serde_yaml::from_str(text).map_err(|e| ConfigError::Syntax {
            path: path.to_path_buf(),
            message: format!("invalid YAML: {e}"),
        })?
    };
    if value.is_null() {
        // Truncated by a failed copy or a half-finished write, more often than meant: a file
        // that defines nothing says so.
        return Err(ConfigError::Structure {
            path: path.to_path_buf(),
            at: "top level".into(),
            message: "the file is empty (or only comments); write `{}` for a file that defines \
                      nothing"
                .into(),
        });
    }
    let serde_yaml::Value::Mapping(mapping) = value else {
        return Err(ConfigError::Structure {
            path: path.to_path_buf(),
            at: "top level".into(),
            message:
                "expected a mapping with `nodes` and resource lists (clusters, listeners, ...)"
                    .into(),
        });
    };
    RawFile::from_mapping(path, mapping)
}

/// Load one file: its selector and its resources. Collects every error in the file.
/// Load one file, and a digest of the bytes read.
fn load_file(path: &Path, under: PerFile) -> FileLoad {
    let max_bytes = under.max_bytes;
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if size > max_bytes {
        let too_big = ConfigError::Read {
            path: path.to_path_buf(),
            message: format!(
                "the file is {size} bytes, more than the limit of {max_bytes} (--max-file-size)"
            ),
        };
        return (None, Err(vec![too_big]));
    }
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) => {
            let unreadable = ConfigError::Read {
                path: path.to_path_buf(),
                message: format!("cannot read file: {e}"),
            };
            return (None, Err(vec![unreadable]));
        }
    };
    let digest = Some(content_hash([bytes.as_slice()]));
    let result = match String::from_utf8(bytes) {
        Ok(text) => load_text_with(path, &text, under.envoy_rules),
        Err(e) => Err(vec![ConfigError::Read {
            path: path.to_path_buf(),
            message: format!("cannot read file: not UTF-8 text ({e})"),
        }]),
    };
    (digest, result)
}

/// One snapshot file's text, as if read from `path` (whose extension says YAML or JSON):
/// its selector and its resources, or every error in it. The loader's core, without the
/// file system (the fuzz target feeds it arbitrary text).
pub fn load_text(path: &Path, text: &str) -> Result<SnapshotFile, Vec<ConfigError>> {
    load_text_with(path, text, true)
}

/// [`load_text`], checking Envoy's field rules or not.
pub fn load_text_with(
    path: &Path,
    text: &str,
    envoy_rules: bool,
) -> Result<SnapshotFile, Vec<ConfigError>> {
    let mut raw = parse_file(path, text).map_err(|e| vec![e])?;
    let mut errors = Vec::new();
    let selector = match raw.nodes.take() {
        None => Selector::all(),
        Some(entries) => Selector::new(entries).unwrap_or_else(|message| {
            errors.push(ConfigError::Structure {
                path: path.to_path_buf(),
                at: "nodes".into(),
                message,
            });
            Selector::all()
        }),
    };
    let mut resources = Vec::new();
    for kind in ResourceType::ALL {
        for (index, item) in raw.take(kind).into_iter().enumerate() {
            match decode_resource(path, kind, index, &item, envoy_rules) {
                Ok(resource) => resources.push(Arc::new(resource)),
                Err(e) => errors.push(e),
            }
        }
    }
    if errors.is_empty() {
        Ok(SnapshotFile::new(path.to_path_buf(), selector, resources))
    } else {
        Err(errors)
    }
}

/// Map one list item to its protobuf, encode it once and hash it.
fn decode_resource(
    path: &Path,
    kind: ResourceType,
    index: usize,
    item: &serde_yaml::Value,
    envoy_rules: bool,
) -> Result<Resource, ConfigError> {
    // Name the resource in errors by the name the item gives, even when it does not decode.
    let claimed = item
        .get(kind.name_field())
        .or_else(|| item.get(camel_case(kind.name_field())))
        .and_then(|v| v.as_str());
    let label = match claimed {
        Some(name) => format!("{}[{index}] {name:?}", kind.file_key()),
        None => format!("{}[{index}]", kind.file_key()),
    };
    let error = |field: String, message: String| ConfigError::Resource {
        path: path.to_path_buf(),
        resource: label.clone(),
        field,
        message,
    };

    // `ttl` sits beside the resource's own fields (no resource type has a field of that
    // name; a test checks): take it out before the item is decoded as the message.
    let mut item = item.clone();
    let ttl = match item.as_mapping_mut().and_then(|m| m.remove(TTL_KEY)) {
        None => None,
        Some(value) => Some(parse_ttl(&value).map_err(|message| error(TTL_KEY.into(), message))?),
    };

    let mut track = serde_path_to_error::Track::new();
    let message = DynamicMessage::deserialize_with_options(
        descriptors::message(kind),
        serde_path_to_error::Deserializer::new(&item, &mut track),
        &DeserializeOptions::new(),
    )
    .map_err(|e| {
        let path = track.path();
        let mut message = e.to_string();
        if sensitive::at_sensitive(descriptors::message(kind), &item, &path) {
            message = sensitive::hidden(&message);
        }
        error(path.to_string(), message)
    })?;

    let name = message
        .get_field_by_name(kind.name_field())
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    if name.is_empty() {
        return Err(error(
            kind.name_field().into(),
            format!(
                "missing `{}`: every resource needs a name",
                kind.name_field()
            ),
        ));
    }
    // Envoy's own field rules: what every proxy would NACK stops here, with its words.
    if envoy_rules {
        rules::check(&message).map_err(|v| error(v.path.clone(), v.to_string()))?;
    }
    // Versions hash the canonical JSON, not the bytes: map fields (Struct metadata, runtime
    // layers) encode in HashMap order, which differs between processes, while serde_json's
    // map is sorted. So the same files give the same versions in every process.
    let json = serde_json::to_value(&message)
        .map_err(|e| error(".".into(), format!("cannot be represented as JSON: {e}")))?;
    let canonical = serde_json::to_vec(&json).map_err(|e| error(".".into(), e.to_string()))?;
    // The TTL is part of the version: changing it re-sends the resource (P25).
    let ttl_text = ttl.map(|t| t.as_millis().to_string()).unwrap_or_default();
    let version = content_hash([canonical.as_slice(), ttl_text.as_bytes()]);
    let warms_with = match kind {
        ResourceType::Cluster => references::eds_service_name(&name, &json),
        _ => None,
    };
    let aliases = match kind {
        ResourceType::VirtualHost => {
            vhds_aliases(&name, &json).map_err(|m| error("name".into(), m))?
        }
        _ => Vec::new(),
    };
    let references = references::of(kind, &name, &json, warms_with.as_deref());
    // Each resource's forms without secret material are encoded once, here, like the
    // resource itself.
    let without = |audience| {
        let mut copy = message.clone();
        crate::redact::redact(&mut copy, audience).then(|| prost::Message::encode_to_vec(&copy))
    };
    let (for_proxy, for_operator) = (
        without(crate::redact::Audience::Proxy),
        without(crate::redact::Audience::Operator),
    );
    let body = prost::Message::encode_to_vec(&message);
    let resource = Resource::new(kind, name, version, body, warms_with)
        .with_ttl(ttl)
        .with_aliases(aliases)
        .with_references(references)
        .with_redactions(for_proxy, for_operator);
    Ok(resource)
}

/// The key beside a resource's fields that gives its TTL (P25).
pub const TTL_KEY: &str = "ttl";
/// The shortest TTL accepted: heartbeats go out at a third of it, to every client.
pub const MIN_TTL: Duration = Duration::from_secs(1);

/// A TTL: a number with a unit, `ms`, `s`, `m` or `h` (`30s`, `1.5s`, `2m`).
fn parse_ttl(value: &serde_yaml::Value) -> Result<Duration, String> {
    let bad = || {
        format!(
            "expected a duration such as \"30s\", \"1.5s\", \"500ms\" or \"2m\", got {}",
            serde_yaml::to_string(value).unwrap_or_default().trim()
        )
    };
    let text = value.as_str().ok_or_else(bad)?.trim();
    let (number, unit) = text
        .find(|c: char| c.is_ascii_alphabetic())
        .map(|i| text.split_at(i))
        .ok_or_else(bad)?;
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(bad()),
    };
    let number: f64 = number.trim().parse().map_err(|_| bad())?;
    let ttl = Duration::try_from_secs_f64(number * scale).map_err(|_| bad())?;
    if ttl < MIN_TTL {
        return Err(format!(
            "a TTL must be at least {}s, got {text:?}",
            MIN_TTL.as_secs()
        ));
    }
    Ok(ttl)
}

/// A VHDS virtual host is named `<route-config>/<vhost>` and is also known as
/// `<route-config>/<domain>` for each of its domains: Envoy subscribes to the route
/// configuration's name as a namespace, and asks on demand by `<route-config>/<host>` (P24).
fn vhds_aliases(name: &str, json: &serde_json::Value) -> Result<Vec<String>, String> {
    let Some((route_config, vhost)) = name.rsplit_once('/') else {
        return Err(format!(
            "a VHDS virtual host is named `<route-config-name>/<virtual-host-name>`, got {name:?}"
        ));
    };
    if route_config.is_empty() || vhost.is_empty() {
        return Err(format!(
            "a VHDS virtual host is named `<route-config-name>/<virtual-host-name>`, got {name:?}"
        ));
    }
    Ok(json
        .get("domains")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(serde_json::Value::as_str)
        .map(|domain| format!("{route_config}/{domain}"))
        .filter(|alias| alias != name)
        .collect())
}

/// `cluster_name` -> `clusterName`.
fn camel_case(snake: &str) -> String {
    let mut out = String::with_capacity(snake.len());
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// A short, stable hex digest of byte strings (fed in order, each length-prefixed).
pub fn content_hash<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    let digest = hasher.finalize();
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The same type and name in two files that a node could both match (or twice in one file).
fn duplicates(files: &[SnapshotFile]) -> Vec<ConfigError> {
    // A VHDS alias (`<route-config>/<domain>`) must name one virtual host too (P24).
    // Most names are defined once: the first place is kept apart, and only names seen again
    // get a list (in (type, name) order, so errors come in a stable order).
    let count = files.iter().map(|f| f.resources.len()).sum();
    let mut first: rustc_hash::FxHashMap<(ResourceType, &str), usize> =
        rustc_hash::FxHashMap::with_capacity_and_hasher(count, Default::default());
    let mut again: BTreeMap<(ResourceType, &str), Vec<usize>> = BTreeMap::new();
    for (i, file) in files.iter().enumerate() {
        for r in &file.resources {
            for name in std::iter::once(&r.name).chain(&r.aliases) {
                let key = (r.kind, name.as_str());
                match first.entry(key) {
                    std::collections::hash_map::Entry::Vacant(e) => {
                        e.insert(i);
                    }
                    std::collections::hash_map::Entry::Occupied(e) => {
                        again.entry(key).or_insert_with(|| vec![*e.get()]).push(i);
                    }
                }
            }
        }
    }
    let mut errors = Vec::new();
    for ((kind, name), places) in again {
        for (n, &a) in places.iter().enumerate() {
            for &b in &places[n + 1..] {
                let (fa, fb) = (&files[a], &files[b]);
                if a == b || !fa.selector.is_disjoint(&fb.selector) {
                    let why = if a == b {
                        String::new()
                    } else {
                        format!(
                            " (their node selectors can match the same node: {} / {})",
                            fa.selector.describe(),
                            fb.selector.describe()
                        )
                    };
                    errors.push(ConfigError::Duplicate {
                        kind,
                        name: name.to_string(),
                        first: fa.path.clone(),
                        second: fb.path.clone(),
                        why,
                    });
                }
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests;
