//! Loading again and again: each file's result kept with what identifies its content on
//! disk, so a reload parses only the files that changed (on every core), and the
//! configuration put together from the kept results, checked across files (duplicates,
//! references).
//!
//! Must not: parse a file itself (`parse`) or find the files (`walk`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::hash::content_hash;
use super::parse::{load_file, FileLoad, PerFile};
use super::walk::snapshot_files;
use super::{references, Config, ConfigError, LoadFailure, LoadOptions, SnapshotFile};
use crate::resource::ResourceType;

/// Loads again and again, parsing only the files that changed since its last load: each
/// file's result (its resources, or its errors) is kept with what identifies the file's
/// content on disk (modification time, size, inode), and the configuration is put together
/// from the kept results. Files that did change are parsed in parallel, one thread per core.
/// Documents from a source (etcd keys) are kept the same way, by name, with their text.
#[derive(Debug, Default)]
pub struct Loader {
    files: BTreeMap<PathBuf, Parsed>,
    /// Documents from a source that is not a directory, by name ([`Loader::load_documents`]).
    documents: BTreeMap<String, ParsedDocument>,
}

/// One document's load, kept with the text it came from: the text is its identity (a
/// document has no stamp on disk).
#[derive(Debug)]
struct ParsedDocument {
    content: Content,
    under: PerFile,
    result: Result<SnapshotFile, Vec<ConfigError>>,
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
    /// The files on this host its secrets name (`switchyard_files`), stamped after the
    /// read (`None`: unreadable then).
    secret_files: Vec<(PathBuf, Option<FileStamp>)>,
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
        (!racy || (self.digest.is_some() && read_digest(path) == self.digest))
            && self.secret_files_fresh()
    }

    /// Whether the files its secrets name are as they were read: same stamp, and not
    /// modified so close to the read that a change may not show in the stamp.
    fn secret_files_fresh(&self) -> bool {
        self.secret_files.iter().all(|(path, then)| {
            let now = FileStamp::of(path);
            now == *then
                && now
                    .and_then(|s| s.modified)
                    .is_some_and(|modified| modified + RACY < self.read_at)
        })
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

    /// The files on this host that the secrets of the files loaded last name (read or not):
    /// a change of one of them is a reason to load again.
    pub fn secret_files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = self
            .files
            .values()
            .flat_map(|kept| kept.secret_files.iter().map(|(p, _)| p.clone()))
            .collect();
        files.sort();
        files.dedup();
        files
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
            match snapshot_files(root) {
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
        for ((path, stamp), load) in stale.into_iter().zip(parsed) {
            let FileLoad {
                digest,
                secret_files,
                result,
            } = load;
            match stamp {
                Some(stamp) => {
                    // Stamped after the read: a secret file changed since is then either
                    // stamped anew later, or modified within RACY of the read (see `fresh`).
                    let secret_files = secret_files
                        .into_iter()
                        .map(|p| {
                            let stamp = FileStamp::of(&p);
                            (p, stamp)
                        })
                        .collect();
                    self.files.insert(
                        path.clone(),
                        Parsed {
                            stamp,
                            under: PerFile::of(options),
                            read_at,
                            digest,
                            secret_files,
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
        (
            assemble(loaded, errors, options, &std::collections::HashMap::new()),
            work,
        )
    }
}

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
                FileLoad {
                    digest: None,
                    secret_files: Vec::new(),
                    result: Err(vec![failed]),
                }
            })
        })
        .collect()
}

/// The configuration from loaded files (in path order) and the errors so far: duplicates
/// and references checked across every file.
/// `texts`: each loaded file's text by its index, where the caller holds it (documents from a
/// source other than a directory); files are read again for positions otherwise.
fn assemble(
    loaded: Vec<SnapshotFile>,
    mut errors: Vec<ConfigError>,
    options: &LoadOptions,
    texts: &std::collections::HashMap<usize, &str>,
) -> Result<Config, LoadFailure> {
    errors.extend(duplicates(&loaded));
    errors.extend(duplicate_addresses(&loaded));
    errors.extend(super::regex_programs::judge(
        &loaded,
        texts,
        options.re2_max_program_size,
    ));
    if options.envoy_rules {
        errors.extend(super::server_secrets::judge(&loaded, texts));
    }
    errors.extend(foreign_authorities(&loaded, &options.authorities));

    // References are checked only across a complete set of files: with a file missing, its
    // resources would look undefined.
    let mut warnings: Vec<ConfigError> = loaded
        .iter()
        .flat_map(|f| f.warnings.iter().cloned())
        .collect();
    let problems = if errors.is_empty() {
        let count = loaded.iter().map(|f| f.resources.len()).sum();
        let mut checks = references::Checker::with_capacity(count);
        for (index, file) in loaded.iter().enumerate() {
            for resource in &file.resources {
                checks.add(index, resource);
            }
        }
        checks.run(&loaded, texts)
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

/// A snapshot document from a source that is not a directory (each etcd key under a prefix
/// holds one): the name its errors give it (the key, say), and its content as the source
/// holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Document {
    pub name: String,
    pub content: Content,
}

/// A document's content, as the source holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    /// Text in the format of a snapshot file (YAML or JSON).
    Text(String),
    /// Bytes that are not UTF-8 text: no document can be read from them. Kept as they are:
    /// the loader refuses them as a bad document naming it (never a failure of the source
    /// that holds them), and a copy of the documents carries them unchanged.
    NotText(Vec<u8>),
}

impl Document {
    /// A document of `text`.
    pub fn text(name: impl Into<String>, text: impl Into<String>) -> Document {
        Document {
            name: name.into(),
            content: Content::Text(text.into()),
        }
    }

    /// A document of what a source holds: text when `bytes` are UTF-8, else kept as bytes.
    pub fn from_bytes(name: impl Into<String>, bytes: Vec<u8>) -> Document {
        let content = match String::from_utf8(bytes) {
            Ok(text) => Content::Text(text),
            Err(e) => Content::NotText(e.into_bytes()),
        };
        Document {
            name: name.into(),
            content,
        }
    }

    /// Its text, if it is text.
    pub fn as_text(&self) -> Option<&str> {
        match &self.content {
            Content::Text(text) => Some(text),
            Content::NotText(_) => None,
        }
    }

    /// Its bytes, as the source holds them.
    pub fn bytes(&self) -> &[u8] {
        match &self.content {
            Content::Text(text) => text.as_bytes(),
            Content::NotText(bytes) => bytes,
        }
    }
}

/// Load named documents as the snapshot files they would be: each parsed as a file is (its
/// errors named `NAME:LINE:COLUMN`), all checked across one another as files are (the same
/// name twice, duplicates, listener addresses, RE2 limits, references), in name order. The
/// same texts give the same resources and versions as files do, so a proxy served from
/// either is sent nothing new. Either the whole configuration, or every error.
pub fn load_documents(
    documents: &[Document],
    options: &LoadOptions,
) -> Result<Config, LoadFailure> {
    Loader::default().load_documents(documents, options).0
}

impl Loader {
    /// [`load_documents`], parsing only the documents whose text (or the options they were
    /// parsed under) changed since this loader's previous load of documents; the rest are
    /// reused, and the whole set is checked across documents again. How many were parsed
    /// and reused comes with it.
    pub fn load_documents(
        &mut self,
        documents: &[Document],
        options: &LoadOptions,
    ) -> (Result<Config, LoadFailure>, LoadWork) {
        let under = PerFile::of(options);
        let mut sorted: Vec<&Document> = documents.iter().collect();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        // Forget documents that are gone.
        let wanted: std::collections::BTreeSet<&str> =
            sorted.iter().map(|d| d.name.as_str()).collect();
        self.documents
            .retain(|name, _| wanted.contains(name.as_str()));
        let mut errors = Vec::new();
        let mut loaded = Vec::new();
        let mut texts = std::collections::HashMap::new();
        let mut work = LoadWork::default();
        for (i, document) in sorted.iter().enumerate() {
            let path = PathBuf::from(&document.name);
            if i > 0 && sorted[i - 1].name == document.name {
                errors.push(ConfigError::Read {
                    path,
                    message: "a second document of this name".into(),
                });
                continue;
            }
            let fresh = self
                .documents
                .get(&document.name)
                .is_some_and(|kept| kept.under == under && kept.content == document.content);
            if fresh {
                work.reused += 1;
            } else {
                work.parsed += 1;
                let result = parse_document(document, path, options);
                self.documents.insert(
                    document.name.clone(),
                    ParsedDocument {
                        content: document.content.clone(),
                        under,
                        result,
                    },
                );
            }
            match self.documents.get(&document.name).map(|kept| &kept.result) {
                Some(Ok(file)) => {
                    if let Some(text) = document.as_text() {
                        texts.insert(loaded.len(), text);
                    }
                    loaded.push(file.clone());
                }
                Some(Err(file_errors)) => errors.extend(file_errors.iter().cloned()),
                None => {}
            }
        }
        (assemble(loaded, errors, options, &texts), work)
    }
}

/// One document parsed as a snapshot file named `path`, within the size limit.
fn parse_document(
    document: &Document,
    path: PathBuf,
    options: &LoadOptions,
) -> Result<SnapshotFile, Vec<ConfigError>> {
    let size = document.bytes().len() as u64;
    if size > options.max_file_bytes {
        return Err(vec![ConfigError::Read {
            path,
            message: format!(
                "the document is {size} bytes, more than the limit of {} (--max-file-size)",
                options.max_file_bytes
            ),
        }]);
    }
    let text = match &document.content {
        Content::Text(text) => text,
        Content::NotText(bytes) => {
            let why = std::str::from_utf8(bytes)
                .err()
                .map_or_else(|| "not UTF-8".to_string(), |e| e.to_string());
            return Err(vec![ConfigError::Read {
                path,
                message: format!("the document is not UTF-8 text ({why}): no snapshot can be read from it; put text there, or delete the key"),
            }]);
        }
    };
    let source = std::sync::Arc::new(crate::resource::SourceFile {
        path,
        modified: None,
    });
    super::parse::load_text_naming(source, text, options.envoy_rules, &mut Vec::new())
}

/// P35: resources named for an xdstp authority this server does not answer for
/// (`--authority`; none given: any).
fn foreign_authorities(files: &[SnapshotFile], authorities: &[String]) -> Vec<ConfigError> {
    if authorities.is_empty() {
        return Vec::new();
    }
    let mut errors = Vec::new();
    for file in files {
        for r in &file.resources {
            let Some(Ok(name)) = crate::resource::xdstp::Xdstp::parse(&r.name) else {
                continue;
            };
            if !authorities.iter().any(|a| a == name.authority) {
                let index = r.origin().map_or(0, |(_, i)| i);
                errors.push(ConfigError::Resource {
                    path: file.path.clone(),
                    resource: format!("{}[{index}] {:?}", r.kind.file_key(), r.name),
                    field: r.kind.name_field().into(),
                    message: format!(
                        "names authority {:?}, which this server does not answer for \
                         (--authority {})",
                        name.authority,
                        authorities.join(", --authority ")
                    ),
                    at: None,
                });
            }
        }
    }
    errors
}

/// Two listeners on one address, port and protocol that a node could both get (in one file,
/// or in two whose node selectors a node could both match): Envoy's listener manager refuses
/// the second, in these words. Port 0 (a port the system picks) is never a duplicate.
fn duplicate_addresses(files: &[SnapshotFile]) -> Vec<ConfigError> {
    use prost_reflect::DynamicMessage;
    // By (protocol, address, port): each file index and listener on it.
    type Places<'a> = Vec<(usize, &'a crate::resource::Resource)>;
    let mut seen: BTreeMap<(i32, String, u32), Places> = BTreeMap::new();
    for (i, file) in files.iter().enumerate() {
        for r in file
            .resources
            .iter()
            .filter(|r| r.kind == ResourceType::Listener)
        {
            let Ok(listener) =
                DynamicMessage::decode(super::descriptors::message(r.kind), r.body.clone())
            else {
                continue;
            };
            let Some(socket) = super::fields::message(&listener, "address")
                .and_then(|a| super::fields::message(&a, "socket_address"))
            else {
                continue;
            };
            let port = socket
                .get_field_by_name("port_value")
                .and_then(|v| v.as_u32())
                .unwrap_or(0);
            if port == 0 {
                continue;
            }
            let protocol = socket
                .get_field_by_name("protocol")
                .and_then(|v| v.as_enum_number())
                .unwrap_or(0);
            let host = super::fields::string(&socket, "address");
            let host = match host.parse::<std::net::IpAddr>() {
                Ok(ip) => ip.to_string(),
                Err(_) => host,
            };
            seen.entry((protocol, host, port)).or_default().push((i, r));
        }
    }
    let mut errors = Vec::new();
    for ((_, host, port), places) in seen {
        for (n, &(a, first)) in places.iter().enumerate() {
            let Some(&(b, second)) = places[n + 1..].iter().find(|(b, _)| {
                a == *b || files[a].selector.common_node(&files[*b].selector).is_some()
            }) else {
                continue;
            };
            let address = match host.parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V6(v6)) => format!("[{v6}]:{port}"),
                _ => format!("{host}:{port}"),
            };
            let resource = second.origin().map_or_else(
                || second.name.clone(),
                |(_, index)| format!("listeners[{index}] {:?}", second.name),
            );
            errors.push(ConfigError::Resource {
                path: files[b].path.clone(),
                resource,
                field: "address".into(),
                message: format!(
                    "on the address of listener {:?} ({}), for the same nodes. Envoy would \
                     reject it with: error adding listener: '{}' has duplicate address '{address}' \
                     as existing listener, to check if the listener has duplicated addresses \
                     with other listeners or 'enable_reuse_port' is set to 'false' for the \
                     listener",
                    first.name,
                    files[a].path.display(),
                    second.name
                ),
                at: None,
            });
        }
    }
    errors
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
                let common = (a != b)
                    .then(|| fa.selector.common_node(&fb.selector))
                    .flatten();
                if a == b || common.is_some() {
                    let why = match common {
                        None => String::new(),
                        Some(node) => format!(
                            " (their node selectors both match a node with {}: {} / {})",
                            node.describe(),
                            fa.selector.describe(),
                            fb.selector.describe()
                        ),
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
