//! The protobuf descriptor pool behind the YAML/JSON mapping.
//!
//! Owns: the process-wide [`DescriptorPool`]: Envoy 1.40's API as `build.rs` selected it
//! (`proto/envoy-<version>.descriptor-set.bin`, built by `scripts/envoy-descriptors.py`),
//! plus the operator's own descriptor sets (`--descriptor-set`, custom and contrib
//! extensions), added once at start by [`install`]. Must not: know about files of
//! resources.

use std::path::PathBuf;
use std::sync::OnceLock;

use prost::Message;
use prost_reflect::{DescriptorPool, FileDescriptor, MessageDescriptor};

use crate::resource::ResourceType;

static DESCRIPTOR_SET: &[u8] = include_bytes!(env!("SWITCHYARD_DESCRIPTOR_SET"));

/// The Envoy release whose API the pool holds (`switchyard --version`, `/status`).
pub const ENVOY_API_VERSION: &str = env!("SWITCHYARD_ENVOY_API_VERSION");

/// The `envoy-types` version whose generated structs Switchyard decodes requests with.
pub const ENVOY_TYPES_VERSION: &str = env!("SWITCHYARD_ENVOY_TYPES_VERSION");

/// What went wrong adding a descriptor set.
#[derive(Debug, thiserror::Error)]
pub enum DescriptorError {
    #[error("{}: cannot read the descriptor set: {message}", path.display())]
    Read { path: PathBuf, message: String },
    #[error(
        "{}: not a FileDescriptorSet ({message}); write one with `protoc --include_imports \
         --descriptor_set_out=FILE ...`",
        path.display()
    )]
    Decode { path: PathBuf, message: String },
    #[error(
        "{}: `{name}` (in {file}) is already defined by {builtin}: a descriptor set may add \
         types, not redefine them",
        path.display()
    )]
    Clash {
        path: PathBuf,
        name: String,
        file: String,
        builtin: String,
    },
    #[error(
        "{}: `{name}` is defined in both {file} and {other} (in {})",
        path.display(),
        other_path.display()
    )]
    ClashBetweenSets {
        path: PathBuf,
        name: String,
        file: String,
        other: String,
        other_path: PathBuf,
    },
    #[error("{}: the descriptors do not fit together: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
    #[error(
        "descriptor sets must be added before anything is loaded (this process already uses \
         {installed:?}, asked for {asked:?})"
    )]
    TooLate {
        installed: Vec<PathBuf>,
        asked: Vec<PathBuf>,
    },
}

/// The pool, and the sets it was given beyond the built-in one.
struct Installed {
    pool: DescriptorPool,
    sets: Vec<PathBuf>,
}

static POOL: OnceLock<Installed> = OnceLock::new();

fn built_in() -> DescriptorPool {
    // The set is compiled into the binary and checked by the tests below; failing to decode
    // it is a build defect, not something a user can cause.
    DescriptorPool::decode(DESCRIPTOR_SET)
        .expect("the compiled-in Envoy descriptor set decodes (see build.rs)")
}

/// The process-wide pool: Envoy's API and whatever [`install`] added.
pub fn pool() -> &'static DescriptorPool {
    &POOL
        .get_or_init(|| Installed {
            pool: built_in(),
            sets: Vec::new(),
        })
        .pool
}

/// Add the operator's descriptor sets (FileDescriptorSets, as `protoc --include_imports
/// --descriptor_set_out` writes them) to the pool. Call once, before anything is loaded;
/// calling again with the same sets is a no-op. A file of the same name as a built-in one
/// (an Envoy or Google file that `--include_imports` copied in) is skipped: the built-in one
/// wins. A type defined again by another file is an error naming both files.
pub fn install(sets: &[PathBuf]) -> Result<(), DescriptorError> {
    if let Some(installed) = POOL.get() {
        return if installed.sets == sets {
            Ok(())
        } else {
            Err(DescriptorError::TooLate {
                installed: installed.sets.clone(),
                asked: sets.to_vec(),
            })
        };
    }
    let pool = with_sets(built_in(), sets)?;
    let installed = Installed {
        pool,
        sets: sets.to_vec(),
    };
    if POOL.set(installed).is_err() {
        // Another thread initialized it in between: the same rule as above.
        let installed = POOL.get().map(|i| i.sets.clone()).unwrap_or_default();
        if installed != sets {
            return Err(DescriptorError::TooLate {
                installed,
                asked: sets.to_vec(),
            });
        }
    }
    Ok(())
}

/// The sets [`install`] added (for `/status`).
pub fn installed_sets() -> Vec<PathBuf> {
    POOL.get().map(|i| i.sets.clone()).unwrap_or_default()
}

/// A FileDescriptorSet read as its files' raw bytes (so that the options of each file,
/// validate rules among them, survive: prost-reflect keeps extension options only when it
/// decodes the bytes itself).
#[derive(Clone, PartialEq, prost::Message)]
struct RawSet {
    #[prost(bytes = "bytes", repeated, tag = "1")]
    file: Vec<bytes::Bytes>,
}

/// `base` with the files of `sets` added.
pub fn with_sets(
    mut base: DescriptorPool,
    sets: &[PathBuf],
) -> Result<DescriptorPool, DescriptorError> {
    // Every type name added so far by the operator's sets: (file, set).
    let mut added: std::collections::HashMap<String, (String, PathBuf)> = Default::default();
    for path in sets {
        let bytes = std::fs::read(path).map_err(|e| DescriptorError::Read {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let decode = |message: String| DescriptorError::Decode {
            path: path.clone(),
            message,
        };
        let raw = RawSet::decode(bytes.as_slice()).map_err(|e| decode(e.to_string()))?;
        if raw.file.is_empty() {
            return Err(decode("it holds no files".into()));
        }
        let mut keep = RawSet::default();
        for blob in raw.file {
            let file = prost_reflect::prost_types::FileDescriptorProto::decode(blob.clone())
                .map_err(|e| decode(e.to_string()))?;
            let name = file.name().to_string();
            if base.get_file_by_name(&name).is_some() {
                continue;
            }
            for type_name in defined_names(&file) {
                if let Some(existing) = defined_by(&base, &type_name) {
                    return Err(match added.get(&type_name) {
                        Some((other, other_path)) => DescriptorError::ClashBetweenSets {
                            path: path.clone(),
                            name: type_name,
                            file: name,
                            other: other.clone(),
                            other_path: other_path.clone(),
                        },
                        None => DescriptorError::Clash {
                            path: path.clone(),
                            name: type_name,
                            file: name,
                            builtin: existing,
                        },
                    });
                }
                added.insert(type_name, (name.clone(), path.clone()));
            }
            keep.file.push(blob);
        }
        base.decode_file_descriptor_set(keep.encode_to_vec().as_slice())
            .map_err(|e| DescriptorError::Invalid {
                path: path.clone(),
                message: e.to_string(),
            })?;
    }
    Ok(base)
}

/// The full names of the messages, enums, services and extensions a file defines.
fn defined_names(file: &prost_reflect::prost_types::FileDescriptorProto) -> Vec<String> {
    use prost_reflect::prost_types::DescriptorProto;
    fn messages(prefix: &str, list: &[DescriptorProto], out: &mut Vec<String>) {
        for m in list {
            let name = format!("{prefix}.{}", m.name());
            out.extend(m.enum_type.iter().map(|e| format!("{name}.{}", e.name())));
            out.extend(m.extension.iter().map(|e| format!("{name}.{}", e.name())));
            messages(&name, &m.nested_type, out);
            out.push(name);
        }
    }
    let prefix = match file.package() {
        "" => String::new(),
        package => package.to_string(),
    };
    let join = |n: &str| {
        if prefix.is_empty() {
            n.to_string()
        } else {
            format!("{prefix}.{n}")
        }
    };
    let mut out = Vec::new();
    let mut top = Vec::new();
    messages(&prefix, &file.message_type, &mut top);
    out.extend(
        top.into_iter()
            .map(|n| n.trim_start_matches('.').to_string()),
    );
    out.extend(file.enum_type.iter().map(|e| join(e.name())));
    out.extend(file.service.iter().map(|s| join(s.name())));
    out.extend(file.extension.iter().map(|e| join(e.name())));
    out
}

/// The file of `pool` that defines `name`, if any.
fn defined_by(pool: &DescriptorPool, name: &str) -> Option<String> {
    let file = |f: FileDescriptor| f.name().to_string();
    pool.get_message_by_name(name)
        .map(|m| file(m.parent_file()))
        .or_else(|| pool.get_enum_by_name(name).map(|e| file(e.parent_file())))
        .or_else(|| {
            pool.get_service_by_name(name)
                .map(|s| file(s.parent_file()))
        })
        .or_else(|| {
            pool.get_extension_by_name(name)
                .map(|e| file(e.parent_file()))
        })
}

/// The message descriptor of a resource type.
pub fn message(kind: ResourceType) -> MessageDescriptor {
    pool()
        .get_message_by_name(kind.message_name())
        .expect("every served resource type is in the descriptor set (tested)")
}

/// The descriptor of a message by full name (`envoy.service.discovery.v3.DiscoveryRequest`).
pub fn message_named(name: &str) -> Option<MessageDescriptor> {
    pool().get_message_by_name(name)
}

#[cfg(test)]
mod tests;
