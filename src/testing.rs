//! Helpers for the unit tests.
//!
//! Must not: be more than fixtures: a test's assertions are its own.

/// Run `run` on `cases` tapes of random choices. proptest makes the tapes and, when a run
/// panics, shrinks its tape to a minimal failing one (towards fewer, smaller choices) and
/// reports it. `run` reads its choices with `rand(n)` (in `0..n`), in turn from the tape,
/// round and round. The RNG is fixed and nothing is persisted, so a failure replays exactly.
pub fn on_tapes(cases: u32, run: impl Fn(&mut dyn FnMut(u64) -> u64)) {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let tapes = proptest::collection::vec(any::<u64>(), 16..400);
    let result = runner.run(&tapes, |tape| {
        let mut at = 0;
        let mut rand = |n: u64| {
            let choice = tape[at % tape.len()];
            at += 1;
            choice % n.max(1)
        };
        run(&mut rand);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
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
        facts: Arc::new(crate::config::selector::NodeFacts::new(node, "c")),
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
        polls: None,
        unknown_types: Default::default(),
    }
}

/// A config loaded from these files (name, text), written to a temporary directory.
pub fn load_files(files: &[(&str, &str)]) -> crate::config::Config {
    let dir = tempfile::tempdir().expect("tmp");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write");
    }
    crate::config::load(
        &[dir.path().to_path_buf()],
        &crate::config::LoadOptions::default(),
    )
    .expect("loads")
}

/// A resource's name, version, and whether it was new to the client.
pub type Named = (String, String, bool);

/// What a NACKed state says the rejected response changed: the list itself, and each
/// entry's (name, version, added). Panics on a state that is not NACKed.
pub fn rejected_changes(
    state: &crate::protocol::SyncState,
) -> (Arc<[crate::protocol::Changed]>, Vec<Named>) {
    let crate::protocol::SyncState::Nacked { nack, .. } = state else {
        panic!("not NACKed: {state:?}");
    };
    let changed = &nack.changed;
    let named = changed
        .iter()
        .map(|c| (c.resource.name.clone(), c.resource.version.clone(), c.added))
        .collect();
    (Arc::clone(changed), named)
}
