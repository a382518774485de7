//! The cache: generations, node groups, snapshots and staged rollouts.

mod changes;

use super::*;

fn node(id: &str, cluster: &str) -> NodeFacts {
    NodeFacts::new(id, cluster)
}
use crate::config::{NodeMatch, Selector, SnapshotFile};
use bytes::Bytes;

fn res(kind: ResourceType, name: &str, content: &str) -> Arc<Resource> {
    Arc::new(Resource::new(
        kind,
        name,
        content_hash([content.as_bytes()]),
        content.as_bytes().to_vec(),
        None,
    ))
}

fn file(selector: Selector, resources: Vec<Arc<Resource>>) -> SnapshotFile {
    SnapshotFile::new("f.yaml".into(), selector, resources)
}

fn id_glob(glob: &str) -> Selector {
    Selector::new(vec![NodeMatch {
        id: Some(glob.into()),
        ..NodeMatch::default()
    }])
    .expect("valid")
}

#[test]
fn type_version_follows_content_only() {
    let a = Snapshot::from_resources(&[res(ResourceType::Cluster, "a", "1")]);
    let a2 = Snapshot::from_resources(&[res(ResourceType::Cluster, "a", "1")]);
    let b = Snapshot::from_resources(&[res(ResourceType::Cluster, "a", "2")]);
    let c = Snapshot::from_resources(&[
        res(ResourceType::Cluster, "a", "1"),
        res(ResourceType::Listener, "l", "1"),
    ]);
    let cds = |s: &Snapshot| s.get(ResourceType::Cluster).version.clone();
    assert_eq!(cds(&a), cds(&a2));
    assert_ne!(cds(&a), cds(&b));
    // Another type changing leaves CDS's version alone.
    assert_eq!(cds(&a), cds(&c));
    assert_ne!(
        a.get(ResourceType::Listener).version,
        c.get(ResourceType::Listener).version
    );
}

/// A new generation's snapshot takes the types that did not change from the one before
/// (the same `Arc`, so streams see it by a pointer compare); a changed type is its own.
/// Looking sorted names up by a merge (many of them) or one by one (few) finds the same.
#[test]
fn sorted_names_are_found_by_a_merge_or_a_lookup_each_alike() {
    let items: Vec<_> = (0..64)
        .map(|i| {
            let name = format!("gs-{:03}", i * 2);
            Arc::new(Resource::new(
                ResourceType::Endpoint,
                &name,
                "1",
                vec![],
                None,
            ))
        })
        .collect();
    let snapshot = Snapshot::from_resources(&items);
    let eds = snapshot.get(ResourceType::Endpoint);
    let check = |names: Vec<String>| {
        let got: Vec<Option<&str>> = eds
            .get_sorted(&names)
            .into_iter()
            .map(|r| r.map(|r| r.name.as_str()))
            .collect();
        let want: Vec<Option<&str>> = names
            .iter()
            .map(|n| eds.resources.get(n).map(|r| r.name.as_str()))
            .collect();
        assert_eq!(got, want, "{names:?}");
        got.iter().filter(|r| r.is_some()).count()
    };
    // Every other name exists: dense (a merge) and sparse (lookups).
    let dense: Vec<String> = (0..128).map(|i| format!("gs-{i:03}")).collect();
    assert!(merge_is_cheaper(dense.len(), 64));
    assert_eq!(check(dense), 64);
    let sparse = vec![
        "gs-000".to_string(),
        "gs-063".to_string(),
        "gs-126".to_string(),
    ];
    assert!(!merge_is_cheaper(sparse.len(), 64));
    assert_eq!(check(sparse), 2);
    assert_eq!(
        check(vec!["a".into(), "zz".into()]),
        0,
        "before and after all"
    );
    assert_eq!(check(Vec::new()), 0);
}

#[test]
fn unchanged_types_are_shared_with_the_generation_before() {
    let cache = Cache::new();
    let config = |endpoints: &str| Config {
        files: vec![file(
            Selector::all(),
            vec![
                res(ResourceType::Cluster, "c", "c1"),
                res(ResourceType::Endpoint, "c", endpoints),
            ],
        )],
        ..Config::default()
    };
    let n = node("n", "");
    let first = cache.publish(config("e1")).snapshot_for(&n);
    let second = cache.publish(config("e2")).snapshot_for(&n);
    let kept = |kind| Arc::ptr_eq(first.get(kind), second.get(kind));
    assert!(
        kept(ResourceType::Cluster),
        "rewritten, but the same content"
    );
    assert!(kept(ResourceType::Listener), "empty in both");
    assert!(!kept(ResourceType::Endpoint), "changed");
    assert_ne!(
        first.get(ResourceType::Endpoint).version,
        second.get(ResourceType::Endpoint).version
    );
    // Nothing is reused from a snapshot no stream holds any more once its generation
    // is no longer among the recent ones the cache keeps, nor through a generation whose
    // group was never built.
    drop(second);
    assert_eq!(
        cache.serving().recent.len(),
        1,
        "the first is kept, for reconnects"
    );
    for _ in 0..DEFAULT_KEPT {
        cache.publish(config("e2"));
    }
    assert!(cache.serving().recent.iter().all(|g| g.group_count() == 0));
    let third = cache.publish(config("e2")).snapshot_for(&n);
    assert!(!Arc::ptr_eq(
        first.get(ResourceType::Cluster),
        third.get(ResourceType::Cluster)
    ));
    let unbuilt = cache.publish(config("e2"));
    let fifth = cache.publish(config("e2")).snapshot_for(&n);
    assert_eq!(unbuilt.group_count(), 0);
    assert!(!Arc::ptr_eq(
        third.get(ResourceType::Cluster),
        fifth.get(ResourceType::Cluster)
    ));
    assert_eq!(
        third.get(ResourceType::Endpoint).version,
        fifth.get(ResourceType::Endpoint).version
    );
}

#[test]
fn node_groups_are_unions_of_matching_files_built_once() {
    let cache = Cache::new();
    cache.publish(Config {
        files: vec![
            file(
                Selector::all(),
                vec![res(ResourceType::Cluster, "shared", "x")],
            ),
            file(
                id_glob("edge-*"),
                vec![res(ResourceType::Cluster, "edge", "x")],
            ),
        ],
        warnings: vec![],
    });
    let generation = cache.current();
    let edge = generation.snapshot_for(&node("edge-1", ""));
    let names: Vec<_> = edge
        .get(ResourceType::Cluster)
        .resources
        .keys()
        .cloned()
        .collect();
    assert_eq!(names, ["edge", "shared"]);
    let core = generation.snapshot_for(&node("core-1", ""));
    assert_eq!(core.get(ResourceType::Cluster).resources.len(), 1);
    // Same group, same Arc: built once, shared.
    assert!(Arc::ptr_eq(
        &edge,
        &generation.snapshot_for(&node("edge-2", ""))
    ));
    assert_eq!(generation.group_count(), 2);
    // Resource bytes are shared between groups, not copied.
    assert!(Arc::ptr_eq(
        &edge.get(ResourceType::Cluster).resources["shared"],
        &core.get(ResourceType::Cluster).resources["shared"]
    ));
}

#[tokio::test]
async fn publish_wakes_subscribers() {
    let cache = Cache::new();
    let mut rx = cache.subscribe();
    assert_eq!(rx.borrow().stable.number, 0);
    cache.publish(Config::default());
    rx.changed().await.expect("sender alive");
    assert_eq!(rx.borrow_and_update().stable.number, 1);
}

/// A rollout: the first generation goes to every node; later ones to the canaries
/// only, until promoted (everyone) or aborted (the canaries go back). A newer edit
/// during a rollout replaces the candidate and keeps the stable generation.
#[tokio::test]
async fn rollouts_serve_the_candidate_to_canaries_until_promoted_or_aborted() {
    let policy =
        Policy::new(Some("canary-*".into()), None, std::time::Duration::ZERO).expect("policy");
    let cache = Cache::with_rollouts(policy);
    let mut rx = cache.subscribe();
    cache.publish(Config::default());
    assert_eq!(cache.for_node(&node("canary-1", "")).number, 1);
    assert_eq!(cache.for_node(&node("edge-1", "")).number, 1);
    assert!(
        cache.serving().rollout.is_none(),
        "the first load goes everywhere"
    );

    cache.publish(Config::default());
    assert_eq!(cache.for_node(&node("canary-1", "")).number, 2);
    assert_eq!(cache.for_node(&node("edge-1", "")).number, 1);
    assert_eq!(cache.current().number, 2, "the newest generation");
    cache.publish(Config::default());
    assert_eq!(cache.for_node(&node("canary-1", "")).number, 3);
    assert_eq!(
        cache.for_node(&node("edge-1", "")).number,
        1,
        "stable kept across edits"
    );

    rx.borrow_and_update();
    cache.set_phase(3, Phase::Halted { reason: "r".into() });
    assert!(
        !rx.has_changed().expect("alive"),
        "a phase change wakes no stream"
    );
    assert_eq!(
        cache.serving().rollout.as_ref().map(|r| r.phase.name()),
        Some("HALTED")
    );
    cache.set_phase(2, Phase::Canary);
    assert_eq!(
        cache.serving().rollout.as_ref().map(|r| r.phase.name()),
        Some("HALTED"),
        "a phase for an older candidate is ignored"
    );

    assert_eq!(cache.abort().expect("in progress"), 1);
    assert!(rx.has_changed().expect("alive"));
    assert_eq!(cache.for_node(&node("canary-1", "")).number, 1);
    assert_eq!(cache.abort().expect_err("none").stable, 1);

    cache.publish(Config::default());
    assert_eq!(cache.for_node(&node("canary-1", "")).number, 4);
    assert_eq!(cache.promote().expect("in progress"), 4);
    assert_eq!(cache.for_node(&node("edge-1", "")).number, 4);
    assert!(cache.serving().rollout.is_none());
}

/// Model-based check: a snapshot built from random resources equals a plain BTreeMap
/// model (last write wins per type and name), and from one snapshot to the next its
/// version changes exactly when the model's content does.
#[test]
fn snapshot_matches_btreemap_model() {
    /// (type index, name) -> content
    type Model = BTreeMap<(usize, String), String>;
    crate::testing::on_tapes(200, |next| {
        // Two snapshots in turn: the second's versions against the first's.
        let mut previous: Option<(Model, Snapshot)> = None;
        for _ in 0..2 {
            let mut model = BTreeMap::new();
            let mut items = Vec::new();
            for _ in 0..next(12) {
                let kind = ResourceType::ALL[next(3) as usize];
                let name = format!("r{}", next(5));
                let content = format!("c{}", next(3));
                model.insert((kind.index(), name.clone()), content.clone());
                items.push(res(kind, &name, &content));
            }
            let snap = Snapshot::from_resources(&items);
            for kind in ResourceType::ALL {
                let got: BTreeMap<_, _> = snap
                    .get(kind)
                    .resources
                    .iter()
                    .map(|(n, r)| (n.clone(), r.body.clone()))
                    .collect();
                let want: BTreeMap<_, _> = model
                    .iter()
                    .filter(|((k, _), _)| *k == kind.index())
                    .map(|((_, n), c)| (n.clone(), Bytes::from(c.clone())))
                    .collect();
                assert_eq!(got, want);
            }
            if let Some((prev_model, prev_snap)) = &previous {
                for kind in ResourceType::ALL {
                    let same_model = prev_model
                        .iter()
                        .filter(|((k, _), _)| *k == kind.index())
                        .eq(model.iter().filter(|((k, _), _)| *k == kind.index()));
                    assert_eq!(
                        same_model,
                        prev_snap.get(kind).version == snap.get(kind).version
                    );
                }
            }
            previous = Some((model, snap));
        }
    });
}
