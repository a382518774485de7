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

use super::checks;
use super::{descriptors, ConfigError, SnapshotFile};
use crate::resource::ResourceType;

/// Each secret a listener serves that Envoy would refuse as a server certificate, as an
/// error naming where it is written. `texts`: the files' texts where the caller has them.
pub(super) fn judge(files: &[SnapshotFile], texts: &HashMap<usize, &str>) -> Vec<ConfigError> {
    let decode = |r: &crate::resource::Resource| {
        DynamicMessage::decode(descriptors::message(r.kind), r.body.clone()).ok()
    };
    let served: HashSet<String> = files
        .iter()
        .flat_map(|f| &f.resources)
        .filter(|r| r.kind == ResourceType::Listener)
        .filter_map(|r| decode(r))
        .flat_map(|listener| checks::server_secret_names(&listener))
        .collect();
    if served.is_empty() {
        return Vec::new();
    }
    let mut errors = Vec::new();
    for (i, file) in files.iter().enumerate() {
        let mut positions = None;
        for r in &file.resources {
            if r.kind != ResourceType::Secret || !served.contains(&r.name) {
                continue;
            }
            let Some(secret) = decode(r) else { continue };
            let Err(refusal) = checks::judge_server_secret(&secret) else {
                continue;
            };
            let index = r.origin().map_or(0, |(_, index)| index);
            let item = format!("{}[{index}]", r.kind.file_key());
            let positions = positions.get_or_insert_with(|| match texts.get(&i) {
                Some(text) => super::yaml::positions(text),
                None => std::fs::read_to_string(&file.path)
                    .map(|text| super::yaml::positions(&text))
                    .unwrap_or_default(),
            });
            errors.push(ConfigError::Resource {
                path: file.path.clone(),
                resource: format!("{item} {:?}", r.name),
                field: refusal.path.clone(),
                message: format!("served by a listener as its certificate: {refusal}"),
                at: super::yaml::position_of(positions, &format!("{item}.{}", refusal.path)),
            });
        }
    }
    errors
}
