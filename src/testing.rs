//! Helpers for the unit tests.

/// A small deterministic random source (xorshift64): `rng(seed)(n)` is in `0..n`. Tests that
/// feed random operation sequences use it so that a failure replays exactly.
pub fn rng(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}

use std::sync::Arc;

use crate::cache::Snapshot;
use crate::config::content_hash;
use crate::resource::{Resource, ResourceType};

/// A resource whose content is `content` (equal content, equal version). A cluster warms with
/// the ClusterLoadAssignment of its own name (P28).
pub fn resource(kind: ResourceType, name: &str, content: &str) -> Resource {
    Resource::new(
        kind,
        name,
        content_hash([name.as_bytes(), content.as_bytes()]),
        format!("{name}:{content}").into_bytes(),
        (kind == ResourceType::Cluster).then(|| name.to_string()),
    )
}

/// A snapshot of `(type, name, content)` resources.
pub fn snapshot(items: &[(ResourceType, &str, &str)]) -> Arc<Snapshot> {
    let items: Vec<_> = items
        .iter()
        .map(|(k, n, c)| Arc::new(resource(*k, n, c)))
        .collect();
    Arc::new(Snapshot::from_resources(&items))
}

/// A stream report of node `node` from `peer` on `stream` (sotw, nothing sent yet).
pub fn stream_report(node: &str, peer: &str, stream: &str) -> crate::fleet::StreamReport {
    crate::fleet::StreamReport {
        node_id: node.into(),
        node_cluster: "c".into(),
        user_agent: "envoy".into(),
        user_agent_version: String::new(),
        client_features: vec![],
        peer: peer.into(),
        stream: stream.into(),
        protocol: "sotw",
        connected_since: std::time::SystemTime::UNIX_EPOCH,
        types: Default::default(),
        generation: 0,
        plan: None,
    }
}
