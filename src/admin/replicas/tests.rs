use super::*;
use crate::admin::standing::{fleet_standing, replica_standing, Standing};
use crate::admin::view::{notes, rows, Tone};

fn summarize(status: &Status, replica: &str) -> ReplicaSummary {
    super::summarize(status, replica, replica_standing(status))
}

/// A replica's `/status`: nodes `(id, generation, CDS state)`, serving generation 2 read
/// at `revision` with content `version`, and the other replicas' `summaries`.
fn status(nodes: &[(&str, u64, &str)], revision: i64, version: &str) -> Status {
    let nodes: Vec<serde_json::Value> = nodes
        .iter()
        .map(|(id, generation, state)| {
            let error = (*state == "NACKED").then_some("cluster a: bad");
            serde_json::json!({
                "node_id": id, "node_cluster": "edge", "user_agent": "envoy",
                "user_agent_version": "", "client_features": [], "generation": generation,
                "streams": [],
                "types": {"CDS": {"state": state, "version_sent": "v2", "version_acked": "v1",
                                  "nonce": "1", "last_change": "t", "error": error}}
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "at": "2026-12-04T10:00:00.000Z",
        "nodes": nodes,
        "config": {"ok": true, "at": "t", "generation": 2, "errors": [], "warnings": [],
                   "revision": revision},
        "generation": 2,
        "history": [{"generation": 2, "at": "t", "revision": revision, "version": version,
                     "files": [], "added": [], "changed": [], "removed": [],
                     "counts": [0, 0, 0], "acked": 0, "nacked": 0}]
    }))
    .expect("a status")
}

/// `status` seen from replica `a`, with every replica's summary (`a`'s own too).
fn seen_from_a(mut status: Status, others: Vec<ReplicaSummary>) -> Status {
    let mut replicas = vec![summarize(&status, "a")];
    replicas.extend(others);
    status.replicas = Some(ReplicasStatus {
        store: crate::admin::replicas::Store::Etcd,
        this: "a".into(),
        read_at: "2026-12-04T10:00:00.000Z".into(),
        error: None,
        stale: false,
        against: status.config.as_ref().and_then(|c| c.revision),
        behind: Vec::new(),
        source_ahead: None,
        replicas,
        vanished: Vec::new(),
    });
    status
}

#[test]
fn a_summary_counts_every_proxy_and_lists_those_with_a_problem_first() {
    let s = summarize(
        &status(
            &[
                ("e-1", 2, "SYNCED"),
                ("e-2", 2, "NACKED"),
                ("e-3", 1, "SYNCED"),
            ],
            7,
            "v7",
        ),
        "a",
    );
    assert_eq!((s.proxies, s.synced, s.nacked, s.omitted), (3, 1, 1, 0));
    let order: Vec<&str> = s.nodes.iter().map(|n| n.node_id.as_str()).collect();
    assert_eq!(order, ["e-2", "e-3", "e-1"]);
    assert_eq!(
        s.nodes[0].types["CDS"].error.as_deref(),
        Some("cluster a: bad")
    );
    assert_eq!((s.revision, s.version.as_str()), (Some(7), "v7"));
    assert_eq!(s.standing, Standing::Nacked);
    assert_eq!(s.at, "2026-12-04T10:00:00.000Z");
}

/// etcd's requests are bounded: a replica of 10,000 proxies lists what fits and counts
/// the rest, its NACKs among the listed.
#[test]
fn a_summary_of_many_proxies_stays_small_and_keeps_its_nacks() {
    let ids: Vec<String> = (0..10_000).map(|i| format!("edge-{i:05}")).collect();
    let mut nodes: Vec<(&str, u64, &str)> =
        ids.iter().map(|id| (id.as_str(), 2, "SYNCED")).collect();
    nodes[9_999].2 = "NACKED";
    let s = summarize(&status(&nodes, 7, "v7"), "a");
    let bytes = serde_json::to_string(&s).expect("json").len();
    assert!(bytes < 300 * 1024, "{bytes} bytes");
    assert!(s.omitted > 0 && s.nodes.len() + s.omitted == 10_000);
    assert_eq!(s.nodes[0].node_id, "edge-09999");
    assert_eq!((s.proxies, s.nacked), (10_000, 1));
}

#[test]
fn from_files_the_view_is_this_replicas_alone() {
    let mut s = status(&[("e-1", 2, "SYNCED")], 7, "v7");
    s.replicas = Some(ReplicasStatus::unshared());
    assert_eq!(fleet_standing(&s), (Standing::Done, Vec::new()));
}

#[test]
fn another_replicas_nack_is_the_fleets_and_names_the_replica_and_the_node() {
    let b = summarize(&status(&[("e-9", 2, "NACKED")], 7, "v7"), "b");
    let s = seen_from_a(status(&[("e-1", 2, "SYNCED")], 7, "v7"), vec![b]);
    let (standing, lagging) = fleet_standing(&s);
    assert_eq!(standing, Standing::Nacked);
    assert_eq!(lagging.len(), 1);
    assert_eq!(lagging[0].replica, "b");
    assert!(
        lagging[0].why.contains("e-9 rejected CDS: cluster a: bad"),
        "{}",
        lagging[0].why
    );
}

/// This replica loaded revision 9. Another that has not loaded the same documents (its
/// last load is older and the documents changed since: `behind`) is updating, whatever its
/// proxies said of older documents, and a failed load of older documents too: its report
/// counts once it is about revision 9 (a fix applied after a failed load is not failed by
/// the failure before it). Summaries compared with an older load of this replica's prove
/// nothing yet, but of a replica whose own load read revision 9 or newer.
#[test]
fn a_replica_that_has_not_loaded_the_newest_documents_is_still_updating() {
    let a = || status(&[("e-1", 2, "SYNCED")], 9, "v9");
    let b = |state: &str| summarize(&status(&[("e-2", 2, state)], 7, "v7"), "b");
    let behind = |mut s: Status| {
        if let Some(r) = s.replicas.as_mut() {
            r.behind = vec!["b".into()];
        }
        s
    };
    let (standing, lagging) = fleet_standing(&behind(seen_from_a(a(), vec![b("SYNCED")])));
    assert_eq!(standing, Standing::Updating);
    assert!(
        lagging[0]
            .why
            .contains("has not loaded the documents this replica loaded at revision 9 (its last load read revision 7)"),
        "{}",
        lagging[0].why
    );
    assert_eq!(
        fleet_standing(&behind(seen_from_a(a(), vec![b("NACKED")]))).0,
        Standing::Updating,
        "a NACK of older documents"
    );
    let mut failed = b("SYNCED");
    failed.standing = Standing::LoadFailed;
    failed.errors = vec!["the old error".into()];
    assert_eq!(
        fleet_standing(&behind(seen_from_a(a(), vec![failed.clone()]))).0,
        Standing::Updating,
        "a failed load of older documents is not the answer for revision 9"
    );
    let mut failed_now = failed.clone();
    failed_now.revision = Some(9);
    let (standing, lagging) = fleet_standing(&seen_from_a(a(), vec![failed_now.clone()]));
    assert_eq!(
        standing,
        Standing::LoadFailed,
        "a failed load of revision 9 is"
    );
    assert!(
        lagging[0].why.contains("the old error"),
        "{}",
        lagging[0].why
    );
    let mut away = b("SYNCED");
    away.standing = Standing::SourceDown;
    assert_eq!(
        fleet_standing(&behind(seen_from_a(a(), vec![away]))).0,
        Standing::SourceDown,
        "a source away from it is about now"
    );
    assert_eq!(
        fleet_standing(&seen_from_a(a(), vec![b("SYNCED")])).0,
        Standing::Done
    );
    let mut stale = seen_from_a(a(), vec![b("SYNCED")]);
    if let Some(r) = stale.replicas.as_mut() {
        r.against = Some(7);
    }
    assert_eq!(
        fleet_standing(&stale).0,
        Standing::Updating,
        "compared with an older load"
    );
    let mut compared_before = seen_from_a(a(), vec![failed]);
    if let Some(r) = compared_before.replicas.as_mut() {
        r.against = Some(7);
    }
    assert_eq!(
        fleet_standing(&compared_before).0,
        Standing::Updating,
        "an old failure, compared with an older load of this replica's"
    );
    let mut compared_before = seen_from_a(a(), vec![failed_now]);
    if let Some(r) = compared_before.replicas.as_mut() {
        r.against = Some(7);
    }
    assert_eq!(
        fleet_standing(&compared_before).0,
        Standing::LoadFailed,
        "its own load read revision 9: it counts"
    );
}

/// Liveness is the lease, never a clock: a summary however old by its writer's clock is
/// judged by what it says; a replica whose lease ended (vanished) is named with its orphaned
/// proxies but holds no gate; a view this replica cannot follow is stale, and not done.
#[test]
fn clocks_do_not_judge_a_replica_and_a_vanished_one_holds_no_gate() {
    let mut b = summarize(&status(&[("e-2", 2, "SYNCED")], 7, "v7"), "b");
    b.at = "2026-12-04T09:54:00.000Z".into();
    assert_eq!(
        fleet_standing(&seen_from_a(status(&[], 7, "v7"), vec![b.clone()])),
        (Standing::Done, Vec::new()),
        "a summary six minutes old by the other host's clock"
    );
    b.at = "2026-12-04T10:05:00.000Z".into();
    assert_eq!(
        fleet_standing(&seen_from_a(status(&[], 7, "v7"), vec![b.clone()])).0,
        Standing::Done,
        "one from the future"
    );
    let mut gone = seen_from_a(status(&[("e-1", 2, "SYNCED")], 7, "v7"), vec![]);
    if let Some(r) = gone.replicas.as_mut() {
        r.vanished = orphaned(
            &[Vanished {
                replica: "b".into(),
                since: "2026-12-04T09:59:50.000Z".into(),
                proxies: 3,
                nodes: vec!["e-2".into(), "e-1".into(), "e-3".into()],
                ..Vanished::default()
            }],
            &r.replicas,
        );
    }
    assert_eq!(fleet_standing(&gone).0, Standing::Done);
    let said = notes(&gone);
    assert_eq!(said.len(), 1, "{said:?}");
    assert_eq!(said[0].0, "REPLICA b VANISHED");
    assert!(
        said[0].1.contains("of its 3 proxies, 2 no replica serves now (orphaned: they hold no gate until they reconnect): e-2, e-3"),
        "e-1 reconnected to a: {}",
        said[0].1
    );
    let mut left = b.clone();
    left.left = true;
    left.standing = Standing::Nacked;
    assert_eq!(
        fleet_standing(&seen_from_a(status(&[], 7, "v7"), vec![left])).0,
        Standing::Done,
        "a replica that left is not judged"
    );
    let mut unread = seen_from_a(status(&[], 7, "v7"), vec![b]);
    if let Some(r) = unread.replicas.as_mut() {
        r.error = Some("etcd does not answer (connection refused)".into());
        r.stale = true;
    }
    let (standing, lagging) = fleet_standing(&unread);
    assert_eq!(standing, Standing::ReplicaUnseen);
    assert!(
        lagging[0].why.contains("this replica cannot follow"),
        "{}",
        lagging[0].why
    );
    let rows = rows(unread.replicas.as_ref().expect("replicas"));
    let b_row = rows.iter().find(|r| r.replica == "b").expect("b's row");
    assert_eq!(
        (b_row.standing.as_str(), b_row.tone),
        ("DONE (stale)", Tone::Stale)
    );
    let a_row = rows.iter().find(|r| r.this).expect("a's row");
    assert_eq!(
        a_row.tone,
        Tone::Good,
        "this replica's own row is its own word"
    );
    assert_eq!(
        notes(&unread)[0].0,
        "VIEW STALE",
        "not this replica named as unseen"
    );
}

/// The worst standing wins: this replica's failed load over another's NACK, another's NACK
/// over this one's update in progress.
#[test]
fn the_fleet_stands_where_its_worst_replica_does() {
    let b = summarize(&status(&[("e-9", 2, "NACKED")], 7, "v7"), "b");
    let mut failed = status(&[("e-1", 2, "SYNCED")], 7, "v7");
    if let Some(c) = failed.config.as_mut() {
        c.ok = false;
    }
    assert_eq!(
        fleet_standing(&seen_from_a(failed, vec![b.clone()])).0,
        Standing::LoadFailed
    );
    let updating = status(&[("e-1", 2, "STALE")], 7, "v7");
    assert_eq!(
        fleet_standing(&seen_from_a(updating, vec![b])).0,
        Standing::Nacked
    );
    for s in Standing::ALL {
        assert_eq!(Standing::from_name(s.name()), Some(s));
    }
}

/// A one-off poll (P36: a person with curl, a probe) answered with what serves holds no
/// gate: nothing will say it took it; one answered an older generation holds it a few
/// seconds only. A poller with a cadence still does until its next poll says it took it,
/// as a stream's unACKed response does.
#[test]
fn p36_a_one_off_poll_answered_with_what_serves_holds_no_gate() {
    let poller = |polls: serde_json::Value| {
        let mut s = status(&[("curl", 2, "STALE")], 7, "v7");
        let stream: crate::admin::StreamStatus = serde_json::from_value(serde_json::json!({
            "peer": "127.0.0.1:5000", "stream": "REST", "protocol": "rest",
            "connected_since": "t", "polls": polls
        }))
        .expect("a stream");
        s.nodes[0].streams = vec![stream];
        s
    };
    let once = poller(serde_json::json!("once"));
    assert_eq!(once.nodes[0].streams[0].label(), "REST/rest (one poll)");
    assert_eq!(replica_standing(&once), Standing::Done);
    let polling = poller(serde_json::json!({"every_ms": 1004}));
    assert_eq!(polling.nodes[0].streams[0].label(), "REST/rest (every 1s)");
    assert_eq!(replica_standing(&polling), Standing::Updating);
    // Answered an older generation: it holds the gate until `holds_gate_until` (a few
    // seconds after its poll or the newest generation, for a poller to poll again), then
    // no more.
    let mut older = poller(serde_json::json!("once"));
    older.nodes[0].generation = 1;
    older.at = "2026-12-07T10:00:02.000Z".into();
    older.nodes[0].streams[0].holds_gate_until = Some("2026-12-07T10:00:03.000Z".into());
    assert_eq!(
        replica_standing(&older),
        Standing::Updating,
        "answered with an older generation, a moment ago"
    );
    older.at = "2026-12-07T10:00:03.000Z".into();
    assert_eq!(
        replica_standing(&older),
        Standing::Done,
        "no poll since: a one-off poll, holding nothing"
    );
    // A poller with a cadence on an older generation is waited for.
    let mut behind = poller(serde_json::json!({"every_ms": 1004}));
    behind.nodes[0].generation = 1;
    behind.at = older.at.clone();
    assert_eq!(replica_standing(&behind), Standing::Updating);
}

/// States travel typed: what a newer replica says in words this release does not know (a
/// standing, a rollout state, a store) reads as `Unknown` rather than failing, and is
/// judged as updating (never done, never halted).
#[test]
fn words_of_a_newer_release_read_as_unknown_and_are_judged_updating() {
    let mut newer = summarize(&status(&[], 7, "v7"), "b");
    newer.revision = Some(7);
    let mut json = serde_json::to_value(&newer).expect("json");
    json["standing"] = "DEGRADED_SOMEHOW".into();
    let read: ReplicaSummary = serde_json::from_value(json).expect("reads");
    assert_eq!(read.standing, Standing::Unknown);
    let (standing, lagging) = fleet_standing(&seen_from_a(status(&[], 7, "v7"), vec![read]));
    assert_eq!(standing, Standing::Updating, "{lagging:?}");
    let state: crate::admin::RolloutState =
        serde_json::from_value("PAUSED_BY_A_NEWER_RELEASE".into()).expect("reads");
    assert_eq!(state, crate::admin::RolloutState::Unknown);
    let store: crate::admin::replicas::Store =
        serde_json::from_value("consul".into()).expect("reads");
    assert_eq!(store, crate::admin::replicas::Store::Unknown);
    // And what this release says reads back as it was.
    for s in Standing::ALL {
        let back: Standing =
            serde_json::from_value(serde_json::to_value(s).expect("json")).expect("reads");
        assert_eq!(back, s);
        assert_eq!(serde_json::to_value(s).expect("json"), s.name());
    }
}
