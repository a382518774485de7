//! The secrets listeners serve as their server certificates (a `DownstreamTlsContext`'s
//! `tls_certificate_sds_secret_configs`), judged as server certificates across files: what
//! a secret alone cannot tell, because it depends on where it is used (a server's
//! certificate names the server by a CN or a DNS, URI or IP SAN; its OCSP staple is its own,
//! or present where the certificate must be stapled), in Envoy's words
//! (`checks::judge_server_secret`).
//!
//! Must not: judge a secret by itself (`checks` does, at load) or follow node selectors: a
//! secret any listener in the files serves is judged, as Envoy judges it wherever it is
//! served.

use std::collections::{HashMap, HashSet};

use prost_reflect::DynamicMessage;

use super::checks::{self, memo::Memo};
use super::{descriptors, ConfigError, SnapshotFile};
use crate::resource::ResourceType;

/// Each secret a listener serves that Envoy would refuse as a server certificate, as an
/// error naming where it is written. `texts`: the files' texts where the caller has them.
///
/// Every load runs this over every file, so it decodes only what can matter: the listeners
/// that name a secret the files define (each once per content version), and the secrets they
/// serve.
pub(super) fn judge(files: &[SnapshotFile], texts: &HashMap<usize, &str>) -> Vec<ConfigError> {
    let decode = |r: &crate::resource::Resource| {
        DynamicMessage::decode(descriptors::message(r.kind), r.body.clone()).ok()
    };
    let resources = || files.iter().flat_map(|f| &f.resources);
    let secrets: HashSet<&str> = resources()
        .filter(|r| r.kind == ResourceType::Secret)
        .map(|r| r.name.as_str())
        .collect();
    if secrets.is_empty() {
        return Vec::new();
    }
    // Each served secret, and the first listener (in file order) that serves it.
    let mut served: HashMap<String, &str> = HashMap::new();
    let listeners = resources()
        .filter(|r| r.kind == ResourceType::Listener)
        .filter(|r| {
            r.references.iter().any(|(kind, name)| {
                *kind == ResourceType::Secret && secrets.contains(name.as_str())
            })
        });
    for listener in listeners {
        for name in served_by(listener, || decode(listener)) {
            served.entry(name).or_insert(listener.name.as_str());
        }
    }
    if served.is_empty() {
        return Vec::new();
    }
    let mut errors = Vec::new();
    for (i, file) in files.iter().enumerate() {
        let mut positions = None;
        for r in &file.resources {
            if r.kind != ResourceType::Secret {
                continue;
            }
            let Some(listener) = served.get(&r.name) else {
                continue;
            };
            let Some(refusal) = refused(r, || decode(r)) else {
                continue;
            };
            let index = r.origin().map_or(0, |(_, index)| index);
            let item = format!("{}[{index}]", r.kind.file_key());
            let positions = positions.get_or_insert_with(|| {
                super::yaml::positions_of_file(texts.get(&i).copied(), &file.path)
            });
            errors.push(ConfigError::Resource {
                path: file.path.clone(),
                resource: format!("{item} {:?}", r.name),
                field: refusal.path.clone(),
                message: format!("served by listener {listener:?} as its certificate: {refusal}"),
                at: super::yaml::position_of(positions, &format!("{item}.{}", refusal.path)),
            });
        }
    }
    errors
}

/// The secrets a listener serves as its certificates, read once per listener version.
fn served_by(
    listener: &crate::resource::Resource,
    decode: impl FnOnce() -> Option<DynamicMessage>,
) -> Vec<String> {
    static READ: Memo<Vec<String>> = Memo::new();
    READ.get(&[listener.version.as_bytes()], || {
        decode()
            .map(|message| checks::server_secret_names(&message))
            .unwrap_or_default()
    })
}

/// Envoy's refusal of a secret served as a server's certificate, judged once per secret
/// version.
fn refused(
    secret: &crate::resource::Resource,
    decode: impl FnOnce() -> Option<DynamicMessage>,
) -> Option<checks::Refusal> {
    static JUDGED: Memo<Option<checks::Refusal>> = Memo::new();
    JUDGED.get(&[secret.version.as_bytes()], || {
        decode().and_then(|message| checks::judge_server_secret(&message).err())
    })
}
