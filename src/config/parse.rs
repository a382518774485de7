//! Reading one snapshot file: its size limit, YAML or JSON, the top level (`nodes` and each
//! type's list under its file key), each item decoded (`decode`).
//!
//! Must not: look at other files (duplicates and references are `loader`'s).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::decode::decode_resource;
use super::hash::content_hash;
use super::{ConfigError, LoadOptions, NodeMatch, Selector, SnapshotFile};
use crate::resource::{ResourceType, SourceFile};

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

/// Parse one file's text (YAML as Envoy reads it, or JSON when the name ends in `.json`)
/// into its top level, and the keys given twice.
fn parse_file(path: &Path, text: &str) -> Result<(RawFile, Vec<ConfigError>), ConfigError> {
    let is_json = path.extension().and_then(|e| e.to_str()) == Some("json");
    let mut warnings = Vec::new();
    let value: serde_yaml::Value = if is_json {
        serde_json::from_str(text).map_err(|e| ConfigError::Syntax {
            path: path.to_path_buf(),
            message: format!("invalid JSON: {e}"),
        })?
    } else {
        let (value, duplicates) = super::yaml::parse(text).map_err(|e| ConfigError::Syntax {
            path: path.to_path_buf(),
            message: format!("invalid YAML: {e}"),
        })?;
        warnings.extend(duplicates.into_iter().map(|d| ConfigError::DuplicateKey {
            path: path.to_path_buf(),
            key: d.key,
            first_line: d.first_line,
            second_line: d.second_line,
        }));
        value
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
    Ok((RawFile::from_mapping(path, mapping)?, warnings))
}

/// The options that decide one file's own result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct PerFile {
    pub(super) max_bytes: u64,
    pub(super) envoy_rules: bool,
}

impl PerFile {
    pub(super) fn of(options: &LoadOptions) -> PerFile {
        PerFile {
            max_bytes: options.max_file_bytes,
            envoy_rules: options.envoy_rules,
        }
    }
}

/// What loading one file gives: a digest of the bytes read (if read), the files on this host
/// its secrets name (read or not: a fix of one of them is a reason to load it again), and the
/// result.
#[derive(Debug)]
pub(super) struct FileLoad {
    pub digest: Option<String>,
    pub secret_files: Vec<PathBuf>,
    pub result: Result<SnapshotFile, Vec<ConfigError>>,
}

impl FileLoad {
    fn failed(error: ConfigError) -> FileLoad {
        FileLoad {
            digest: None,
            secret_files: Vec::new(),
            result: Err(vec![error]),
        }
    }
}

/// Load one file: its selector and its resources (every error in the file), and a digest of
/// the bytes read.
pub(super) fn load_file(path: &Path, under: PerFile) -> FileLoad {
    let max_bytes = under.max_bytes;
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if size > max_bytes {
        let too_big = ConfigError::Read {
            path: path.to_path_buf(),
            message: format!(
                "the file is {size} bytes, more than the limit of {max_bytes} (--max-file-size)"
            ),
        };
        return FileLoad::failed(too_big);
    }
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) => {
            let unreadable = ConfigError::Read {
                path: path.to_path_buf(),
                message: format!("cannot read file: {e}"),
            };
            return FileLoad::failed(unreadable);
        }
    };
    let digest = Some(content_hash([bytes.as_slice()]));
    let mut secret_files = Vec::new();
    let result = match String::from_utf8(bytes) {
        Ok(text) => {
            let source = Arc::new(SourceFile {
                path: path.to_path_buf(),
                modified: std::fs::metadata(path).and_then(|m| m.modified()).ok(),
            });
            load_text_naming(source, &text, under.envoy_rules, &mut secret_files)
        }
        Err(e) => Err(vec![ConfigError::Read {
            path: path.to_path_buf(),
            message: format!("cannot read file: not UTF-8 text ({e})"),
        }]),
    };
    FileLoad {
        digest,
        secret_files,
        result,
    }
}

/// One snapshot file's text, as if read from `path` (whose extension says YAML or JSON):
/// its selector and its resources, or every error in it. The loader's core, without the
/// file system (the fuzz target feeds it arbitrary text).
pub fn load_text(path: &Path, text: &str) -> Result<SnapshotFile, Vec<ConfigError>> {
    load_text_judged(path, text, super::checks::re2::DEFAULT_MAX_PROGRAM_SIZE)
}

/// [`load_text`], with RE2 programs judged against `re2_max_program_size` where the file's
/// runtimes set no limit (`LoadOptions::re2_max_program_size`).
pub fn load_text_judged(
    path: &Path,
    text: &str,
    re2_max_program_size: u64,
) -> Result<SnapshotFile, Vec<ConfigError>> {
    let file = load_text_with(path, text, true)?;
    // A regex's program, judged with the limit the file's own runtimes set.
    let texts = std::collections::HashMap::from([(0, text)]);
    let errors =
        super::regex_programs::judge(std::slice::from_ref(&file), &texts, re2_max_program_size);
    if errors.is_empty() {
        Ok(file)
    } else {
        Err(errors)
    }
}

/// [`load_text`], checking Envoy's field rules or not.
pub fn load_text_with(
    path: &Path,
    text: &str,
    envoy_rules: bool,
) -> Result<SnapshotFile, Vec<ConfigError>> {
    let source = Arc::new(SourceFile {
        path: path.to_path_buf(),
        modified: None,
    });
    load_text_naming(source, text, envoy_rules, &mut Vec::new())
}

/// [`load_text_with`], adding to `secret_files` each file on this host a secret names.
pub(super) fn load_text_naming(
    origin: Arc<SourceFile>,
    text: &str,
    envoy_rules: bool,
    secret_files: &mut Vec<PathBuf>,
) -> Result<SnapshotFile, Vec<ConfigError>> {
    let path = origin.path.as_path();
    let (mut raw, warnings) = parse_file(path, text).map_err(|e| vec![e])?;
    let mut errors = Vec::new();
    let mut warnings = warnings;
    for (i, entry) in raw.nodes.iter().flatten().enumerate() {
        for (field, why) in entry.bare_prefixes() {
            warnings.push(ConfigError::Structure {
                path: path.to_path_buf(),
                at: format!("nodes[{i}].{field}"),
                message: why,
            });
        }
    }
    let selector = match raw.nodes.take() {
        None => Selector::all(),
        Some(entries) => Selector::new(entries).unwrap_or_else(|e| {
            errors.push(ConfigError::Structure {
                path: path.to_path_buf(),
                at: "nodes".into(),
                message: e.to_string(),
            });
            Selector::all()
        }),
    };
    let mut resources = Vec::new();
    let mut read_files = Vec::new();
    let mut certificates = Vec::new();
    for kind in ResourceType::ALL {
        for (index, item) in raw.take(kind).into_iter().enumerate() {
            match decode_resource(path, kind, index, &item, envoy_rules, secret_files) {
                Ok((resource, filled)) => {
                    if let Some(filled) = filled {
                        let label = format!("{}[{index}] {:?}", kind.file_key(), resource.name);
                        warnings.extend(filled.warnings.into_iter().map(|(field, message)| {
                            ConfigError::Resource {
                                path: path.to_path_buf(),
                                resource: label.clone(),
                                field,
                                message,
                                at: None,
                            }
                        }));
                        read_files.extend(filled.read);
                        certificates.extend(filled.certificates);
                    }
                    resources.push(Arc::new(resource.with_origin(Arc::clone(&origin), index)));
                }
                Err(e) => errors.push(e),
            }
        }
    }
    // Where in the file each thing reported is, found only when there is something to
    // report (a good file never pays for it).
    let reported = |e: &ConfigError| matches!(e, ConfigError::Resource { at: None, .. });
    if errors.iter().chain(&warnings).any(reported) {
        let positions = super::yaml::positions(text);
        for e in errors.iter_mut().chain(warnings.iter_mut()) {
            locate(e, &positions);
        }
    }
    if errors.is_empty() {
        Ok(SnapshotFile::new(path.to_path_buf(), selector, resources)
            .with_warnings(warnings)
            .with_secret_files(read_files, certificates))
    } else {
        Err(errors)
    }
}

/// Give a resource's error the line and column of its field in the file (see
/// `yaml::position_of`).
fn locate(error: &mut ConfigError, positions: &super::yaml::Positions) {
    let ConfigError::Resource {
        resource,
        field,
        at: at @ None,
        ..
    } = error
    else {
        return;
    };
    // `clusters[1] "web"`: the item is `clusters[1]`.
    let item = resource.split(' ').next().unwrap_or_default();
    let path = if field == "." {
        item.to_string()
    } else {
        format!("{item}.{field}")
    };
    *at = super::yaml::position_of(positions, &path);
}
