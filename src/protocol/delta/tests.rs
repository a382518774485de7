//! Unit tests of the delta state machine, named by rule (P1..P3, P12, P15..P25, P28).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use envoy_types::pb::google::rpc::Status;

use super::{DeltaResponse, DeltaStream};
use crate::cache::Snapshot;
use crate::protocol::{Event, ProtocolError, SyncState, Variant, FEATURE_RESOURCE_TTL};
use crate::resource::ResourceType;

use ResourceType::{Cluster, Endpoint, LbEndpoint, Listener, VirtualHost};

fn node(features: &[&str]) -> Node {
    Node {
        id: "n1".into(),
        cluster: "test".into(),
        client_features: features.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

use crate::testing::{resource as res, snapshot as snap};

/// The next event other than a subscription change.
fn event(s: &mut DeltaStream) -> Option<Event> {
    std::iter::from_fn(|| s.poll_event()).find(|e| !matches!(e, Event::Subscribed { .. }))
}

fn version(kind: ResourceType, name: &str, content: &str) -> String {
    res(kind, name, content).version
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn req(
    kind: ResourceType,
    subscribe: &[&str],
    unsubscribe: &[&str],
    nonce: &str,
) -> DeltaDiscoveryRequest {
    DeltaDiscoveryRequest {
        node: Some(node(&[])),
        type_url: kind.type_url().into(),
        resource_names_subscribe: strings(subscribe),
        resource_names_unsubscribe: strings(unsubscribe),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

fn nack(kind: ResourceType, nonce: &str, error: &str) -> DeltaDiscoveryRequest {
    DeltaDiscoveryRequest {
        error_detail: Some(Status {
            code: 3,
            message: error.into(),
            details: vec![],
        }),
        ..req(kind, &[], &[], nonce)
    }
}

/// Drain every response.
fn drain(s: &mut DeltaStream, now: Instant) -> Vec<DeltaResponse> {
    std::iter::from_fn(|| s.poll_response(now)).collect()
}

fn one(s: &mut DeltaStream) -> DeltaResponse {
    let mut all = drain(s, Instant::now());
    assert_eq!(all.len(), 1, "expected one response, got {all:#?}");
    all.remove(0)
}

fn none(s: &mut DeltaStream) {
    let all = drain(s, Instant::now());
    assert!(all.is_empty(), "expected no response, got {all:#?}");
}

fn names(r: &DeltaResponse) -> Vec<&str> {
    r.resources
        .iter()
        .map(|d| d.resource.name.as_str())
        .collect()
}

fn ack(s: &mut DeltaStream, r: &DeltaResponse) {
    let mut request = req(r.kind, &[], &[], &r.nonce);
    request.node = None; // later requests may omit the node (P1)
    s.handle_request(request).expect("ack");
}

fn ads() -> DeltaStream {
    DeltaStream::new(Variant::Aggregated)
}

/// An Incremental ADS stream without make-before-break ordering: a change that removes a
/// cluster goes out in one response (with ordering the removal is a later step; see
/// `plan::tests`).
fn ads_unordered() -> DeltaStream {
    DeltaStream::with_ordering(Variant::Aggregated, crate::protocol::Ordering::off())
}

const ABC: &[(ResourceType, &str, &str)] = &[
    (Cluster, "a", "1"),
    (Cluster, "b", "1"),
    (Cluster, "c", "1"),
];

#[test]
fn p1_first_request_needs_a_node_and_it_may_not_change() {
    let mut s = ads();
    let mut r = req(Cluster, &[], &[], "");
    r.node = None;
    assert_eq!(s.handle_request(r), Err(ProtocolError::MissingNode));
    s.handle_request(req(Cluster, &[], &[], "")).expect("first");
    let mut later = req(Cluster, &["x"], &[], "");
    later.node = None;
    s.handle_request(later)
        .expect("a later request may omit the node");
    let mut other = req(Cluster, &[], &[], "");
    other.node = Some(Node {
        id: "n2".into(),
        ..Default::default()
    });
    assert!(matches!(
        s.handle_request(other),
        Err(ProtocolError::NodeChanged { .. })
    ));
}

#[test]
fn p3_untyped_and_wrong_types_are_errors() {
    let mut s = ads();
    let mut r = req(Cluster, &[], &[], "");
    r.type_url = String::new();
    assert_eq!(s.handle_request(r), Err(ProtocolError::NoType));
    let mut s = DeltaStream::new(Variant::Single(Endpoint));
    assert!(matches!(
        s.handle_request(req(Cluster, &[], &[], "")),
        Err(ProtocolError::WrongType { .. })
    ));
}

#[test]
fn p15_legacy_wildcard_sends_everything_with_versions_and_system_version() {
    let mut s = ads();
    s.handle_request(req(Cluster, &[], &[], "")).expect("ok");
    let snapshot = snap(ABC);
    s.handle_snapshot(Arc::clone(&snapshot));
    let r = one(&mut s);
    assert_eq!(names(&r), ["a", "b", "c"]);
    assert_eq!(r.resources[0].resource.version, version(Cluster, "a", "1"));
    assert_eq!(r.system_version, snapshot.get(Cluster).version);
    assert!(r.removed.is_empty());
    assert_eq!(
        s.state(Cluster),
        &SyncState::Sent {
            nonce: r.nonce.clone(),
            version: r.system_version.clone()
        }
    );
    ack(&mut s, &r);
    assert_eq!(
        s.state(Cluster),
        &SyncState::Acked {
            version: r.system_version.clone()
        }
    );
    assert_eq!(
        event(&mut s),
        Some(Event::Acked {
            kind: Cluster,
            version: r.system_version
        })
    );
    none(&mut s);
}

#[test]
fn p15_wildcard_with_an_empty_snapshot_still_answers_once() {
    let mut s = ads();
    s.handle_request(req(Listener, &[], &[], "")).expect("ok");
    s.handle_snapshot(snap(&[]));
    let r = one(&mut s);
    assert!(r.resources.is_empty() && r.removed.is_empty());
    ack(&mut s, &r);
    none(&mut s);
}

#[test]
fn p16_delta_wildcard_then_explicit_then_unsubscribe_star_then_name() {
    let mut s = ads();
    s.handle_snapshot(snap(ABC));
    s.handle_request(req(Cluster, &[], &[], "")).expect("ok");
    let r = one(&mut s);
    ack(&mut s, &r);
    // [A] on top of the wildcard: P21 sends it again.
    s.handle_request(req(Cluster, &["a"], &[], "")).expect("ok");
    let r = one(&mut s);
    assert_eq!(names(&r), ["a"]);
    ack(&mut s, &r);
    // Unsubscribe [*]: a only; the client drops b and c itself, nothing to send.
    s.handle_request(req(Cluster, &[], &["*"], "")).expect("ok");
    none(&mut s);
    assert_eq!(s.held(Cluster).keys().copied().collect::<Vec<_>>(), ["a"]);
    // A change to b is not for this client any more.
    s.handle_snapshot(snap(&[
        (Cluster, "a", "1"),
        (Cluster, "b", "2"),
        (Cluster, "c", "1"),
    ]));
    none(&mut s);
    s.handle_request(req(Cluster, &[], &["a"], "")).expect("ok");
    none(&mut s);
    assert!(s.held(Cluster).is_empty());
}

#[test]
fn p17_nack_records_error_nonce_and_what_the_client_still_runs() {
    let mut s = ads_unordered();
    s.handle_snapshot(snap(ABC));
    s.handle_request(req(Cluster, &[], &[], "")).expect("ok");
    let first = one(&mut s);
    ack(&mut s, &first);
    event(&mut s);
    s.handle_snapshot(snap(&[(Cluster, "a", "2"), (Cluster, "b", "1")]));
    let bad = one(&mut s);
    assert_eq!(names(&bad), ["a"]);
    assert_eq!(bad.removed, ["c"]);
    s.handle_request(nack(Cluster, &bad.nonce, "a is broken"))
        .expect("nack");
    let (changed, named) = crate::testing::rejected_changes(s.state(Cluster));
    // What the rejected response changed: `a` (its removal of `c` brought nothing).
    assert_eq!(named, [("a".into(), version(Cluster, "a", "2"), false)]);
    // What it still runs, by content: everything as before the rejected response, `c` too
    // (P5), found exactly in the first snapshot and not in the rejected one.
    let SyncState::Nacked { nack, .. } = s.state(Cluster) else {
        panic!("not NACKed: {:?}", s.state(Cluster));
    };
    let runs = nack.runs.clone().expect("the stream knows what it runs");
    let held: Vec<(&str, &str)> = runs
        .resources
        .iter()
        .map(|r| (r.name.as_str(), r.version.as_str()))
        .collect();
    let (a, b, c) = (
        version(Cluster, "a", "1"),
        version(Cluster, "b", "1"),
        version(Cluster, "c", "1"),
    );
    assert_eq!(
        held,
        [("a", a.as_str()), ("b", b.as_str()), ("c", c.as_str())]
    );
    assert!(runs.served_by(snap(ABC).get(Cluster)));
    assert!(!runs.served_by(snap(&[(Cluster, "a", "2"), (Cluster, "b", "1")]).get(Cluster)));
    assert_eq!(
        s.state(Cluster),
        &SyncState::Nacked {
            nonce: bad.nonce.clone(),
            rejected_version: bad.system_version.clone(),
            accepted_version: first.system_version.clone(),
            nack: Arc::new(crate::protocol::Nack {
                error: "a is broken".into(),
                changed: Arc::clone(&changed),
                runs: Some(runs),
            }),
        }
    );
    assert_eq!(
        event(&mut s),
        Some(Event::Nacked {
            kind: Cluster,
            rejected_version: bad.system_version.clone(),
            error: "a is broken".into(),
            changed,
        })
    );
    // It still runs a, b and c at their first versions.
    let want: BTreeMap<&str, String> = [("a", "1"), ("b", "1"), ("c", "1")]
        .iter()
        .map(|(n, c)| (*n, version(Cluster, n, c)))
        .collect();
    let held: BTreeMap<&str, String> = s
        .held(Cluster)
        .into_iter()
        .map(|(n, v)| (n, v.to_string()))
        .collect();
    assert_eq!(held, want);
    // P5 in spirit: the rejected content is not pushed again until it changes.
    none(&mut s);
    s.handle_snapshot(snap(&[(Cluster, "a", "3"), (Cluster, "b", "1")]));
    let fixed = one(&mut s);
    assert_eq!(names(&fixed), ["a"]);
}

/// P5, P17: a NACKed response's removals may or may not have
/// been applied (Envoy applies them; a client that rejects the whole response does not). With
/// the type's next change such a name goes again: sent if it is back, even at the version the
/// client had, else removed again. Before, the server took the client to still hold it, and a
/// name back at its old version was never sent to an Envoy that had removed it.
#[test]
fn p5_p17_a_rejected_response_s_removals_go_again_with_the_next_change() {
    let mut s = ads_unordered();
    s.handle_snapshot(snap(ABC));
    s.handle_request(req(Cluster, &[], &[], "")).expect("ok");
    let first = one(&mut s);
    ack(&mut s, &first);
    s.handle_snapshot(snap(&[(Cluster, "a", "2"), (Cluster, "b", "1")]));
    let bad = one(&mut s);
    assert_eq!(bad.removed, ["c"]);
    s.handle_request(nack(Cluster, &bad.nonce, "a is broken"))
        .expect("nack");
    none(&mut s);
    // c is back at the version the client had: it goes, with the fix.
    s.handle_snapshot(snap(&[
        (Cluster, "a", "3"),
        (Cluster, "b", "1"),
        (Cluster, "c", "1"),
    ]));
    let next = one(&mut s);
    assert_eq!(names(&next), ["a", "c"]);
    ack(&mut s, &next);
    // The same, with c still gone: it is removed again.
    s.handle_snapshot(snap(&[(Cluster, "a", "4"), (Cluster, "b", "1")]));
    let bad = one(&mut s);
    assert_eq!(bad.removed, ["c"]);
    s.handle_request(nack(Cluster, &bad.nonce, "a is broken"))
        .expect("nack");
    s.handle_snapshot(snap(&[(Cluster, "a", "5"), (Cluster, "b", "1")]));
    let next = one(&mut s);
    assert_eq!(names(&next), ["a"]);
    assert_eq!(next.removed, ["c"]);
}

/// P5, P17: after a NACK, a fix that takes the rejected resource back to the version the
/// client still runs (an edit undone) goes out with the type's change: the client answers it,
/// and its state leaves NACKED (found by the conformance matrix with a real Envoy: before,
/// nothing was sent, and `/status` said NACKED for good while Envoy ran what the files say).
#[test]
fn p5_p17_an_undone_edit_after_a_nack_goes_again_and_its_ack_ends_the_nack() {
    let mut s = ads_unordered();
    s.handle_snapshot(snap(ABC));
    s.handle_request(req(Cluster, &[], &[], "")).expect("ok");
    let first = one(&mut s);
    ack(&mut s, &first);
    s.handle_snapshot(snap(&[
        (Cluster, "a", "bad"),
        (Cluster, "b", "1"),
        (Cluster, "c", "1"),
    ]));
    let bad = one(&mut s);
    assert_eq!(names(&bad), ["a"]);
    s.handle_request(nack(Cluster, &bad.nonce, "a is broken"))
        .expect("nack");
    none(&mut s);
    // The edit undone: `a` is back at the version the client kept.
    s.handle_snapshot(snap(ABC));
    let again = one(&mut s);
    assert_eq!(names(&again), ["a"]);
    ack(&mut s, &again);
    assert!(
        matches!(s.state(Cluster), SyncState::Acked { .. }),
        "{:?}",
        s.state(Cluster)
    );
    none(&mut s);
}

/// The same when the rejected response added a resource and the fix deletes it: the client
/// never took it, and is told it is removed (harmless), so that its answer ends the NACK.
#[test]
fn p5_p17_a_fix_that_deletes_what_a_nacked_response_added_ends_the_nack() {
    let mut s = ads_unordered();
    s.handle_snapshot(snap(ABC));
    s.handle_request(req(Cluster, &[], &[], "")).expect("ok");
    let first = one(&mut s);
    ack(&mut s, &first);
    let mut with_d = ABC.to_vec();
    with_d.push((Cluster, "d", "bad"));
    s.handle_snapshot(snap(&with_d));
    let bad = one(&mut s);
    assert_eq!(names(&bad), ["d"]);
    s.handle_request(nack(Cluster, &bad.nonce, "d is broken"))
        .expect("nack");
    s.handle_snapshot(snap(ABC));
    let again = one(&mut s);
    assert!(again.resources.is_empty());
    assert_eq!(again.removed, ["d"]);
    ack(&mut s, &again);
    assert!(matches!(s.state(Cluster), SyncState::Acked { .. }));
}

/// P20, P32, and `/status` following the proxy: a name it unsubscribes from leaves the
/// names reported not found at once.
#[test]
fn p20_p32_a_name_unsubscribed_leaves_the_names_not_found() {
    let mut s = ads_unordered();
    s.handle_snapshot(snap(ABC));
    s.handle_request(req(Endpoint, &["x", "y"], &[], ""))
        .expect("ok");
    let r = one(&mut s);
    assert_eq!(r.not_found, ["x", "y"]);
    ack(&mut s, &r);
    assert_eq!(s.status(Endpoint).expect("asked").not_found, ["x", "y"]);
    s.handle_request(req(Endpoint, &[], &["y"], ""))
        .expect("ok");
    drain(&mut s, Instant::now());
    assert_eq!(s.status(Endpoint).expect("asked").not_found, ["x"]);
    s.handle_request(req(Endpoint, &[], &["x"], ""))
        .expect("ok");
    drain(&mut s, Instant::now());
    assert!(s.status(Endpoint).expect("asked").not_found.is_empty());
}

/// The held names of `kind`, with their versions.
fn held(s: &DeltaStream, kind: ResourceType) -> BTreeMap<String, String> {
    s.held(kind)
        .into_iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

fn versions(items: &[(&str, &str)]) -> BTreeMap<String, String> {
    items
        .iter()
        .map(|(n, c)| (n.to_string(), version(Endpoint, n, c)))
        .collect()
}

#[test]
fn p19_a_stream_holding_what_it_subscribes_to_keeps_the_snapshot_and_gets_only_changes() {
    let mut s = ads_unordered();
    s.handle_snapshot(snap(&[
        (Endpoint, "x", "1"),
        (Endpoint, "y", "1"),
        (Endpoint, "w", "1"),
    ]));
    s.handle_request(req(Endpoint, &["x", "y", "z"], &[], ""))
        .expect("ok");
    let r = one(&mut s);
    assert_eq!(names(&r), ["x", "y"]);
    assert!(
        !s.given(Endpoint),
        "z is answered removed (P20): name by name"
    );
    ack(&mut s, &r);
    assert!(s.given(Endpoint), "it holds what it subscribes to");
    // x changes, y goes, z (subscribed, missing) comes; w and v are not subscribed to.
    s.handle_snapshot(snap(&[
        (Endpoint, "x", "2"),
        (Endpoint, "z", "1"),
        (Endpoint, "w", "2"),
        (Endpoint, "v", "1"),
    ]));
    let r = one(&mut s);
    assert_eq!(names(&r), ["x", "z"]);
    assert_eq!(r.removed, ["y"]);
    assert!(
        r.not_found.contains(&"y".to_string()),
        "P32: named and gone"
    );
    assert_eq!(held(&s, Endpoint), versions(&[("x", "2"), ("z", "1")]));
    ack(&mut s, &r);
    assert!(s.given(Endpoint), "and still does after the push");
    none(&mut s);
    // Unchanged content: nothing; a change of what it does not subscribe to: nothing.
    s.handle_snapshot(snap(&[
        (Endpoint, "x", "2"),
        (Endpoint, "z", "1"),
        (Endpoint, "w", "3"),
    ]));
    none(&mut s);
    assert!(s.given(Endpoint));
    // A subscription change is taken name by name, and answered (P21).
    s.handle_request(req(Endpoint, &["w"], &["z"], ""))
        .expect("ok");
    assert!(!s.given(Endpoint));
    assert_eq!(held(&s, Endpoint), versions(&[("x", "2")]), "z is dropped");
    let r = one(&mut s);
    assert_eq!(names(&r), ["w"]);
    ack(&mut s, &r);
    assert!(s.given(Endpoint));
    assert_eq!(held(&s, Endpoint), versions(&[("w", "3"), ("x", "2")]));
}

#[test]
fn p17_a_first_response_of_exactly_the_selection_is_held_as_its_snapshot_and_a_nack_undoes_it() {
    let items = snap(&[
        (Endpoint, "x", "1"),
        (Endpoint, "y", "1"),
        (Endpoint, "w", "1"),
    ]);
    let start = |s: &mut DeltaStream| {
        s.handle_snapshot(Arc::clone(&items));
        s.handle_request(req(Endpoint, &["x", "y"], &[], ""))
            .expect("ok");
        let r = one(s);
        assert_eq!(names(&r), ["x", "y"]);
        assert!(s.given(Endpoint), "at once: no set built");
        assert_eq!(held(s, Endpoint), versions(&[("x", "1"), ("y", "1")]));
        r
    };
    let mut acked = ads_unordered();
    let r = start(&mut acked);
    ack(&mut acked, &r);
    assert!(acked.given(Endpoint));
    none(&mut acked);
    // Rejected: the client runs nothing of the type (P17), and both are recorded as added.
    let mut nacked = ads_unordered();
    let r = start(&mut nacked);
    nacked
        .handle_request(nack(Endpoint, &r.nonce, "no"))
        .expect("nack");
    assert!(!nacked.given(Endpoint));
    assert!(held(&nacked, Endpoint).is_empty());
    let (_, named) = crate::testing::rejected_changes(nacked.state(Endpoint));
    assert_eq!(
        named,
        [
            ("x".into(), version(Endpoint, "x", "1"), true),
            ("y".into(), version(Endpoint, "y", "1"), true)
        ]
    );
}

#[test]
fn p17_a_nack_of_a_push_from_the_given_form_restores_what_the_client_had_after_a_subscription_change(
) {
    let mut s = ads_unordered();
    s.handle_snapshot(snap(&[(Endpoint, "x", "1"), (Endpoint, "y", "1")]));
    s.handle_request(req(Endpoint, &["x", "y"], &[], ""))
        .expect("ok");
    let r = one(&mut s);
    ack(&mut s, &r);
    assert!(s.given(Endpoint));
    s.handle_snapshot(snap(&[(Endpoint, "x", "2"), (Endpoint, "q", "1")]));
    let bad = one(&mut s);
    assert_eq!(names(&bad), ["x"]);
    assert_eq!(bad.removed, ["y"]);
    // Before answering, the client subscribes to q: what it holds is now kept name by name,
    // with what the push in flight changed.
    s.handle_request(req(Endpoint, &["q"], &[], ""))
        .expect("ok");
    assert!(!s.given(Endpoint));
    s.handle_request(nack(Endpoint, &bad.nonce, "x is broken"))
        .expect("nack");
    let (_, named) = crate::testing::rejected_changes(s.state(Endpoint));
    assert_eq!(named, [("x".into(), version(Endpoint, "x", "2"), false)]);
    assert_eq!(
        held(&s, Endpoint),
        versions(&[("x", "1"), ("y", "1")]),
        "it runs what it had (P17)"
    );
    // q goes out; the rejected x does not go again until it changes (P5).
    let r = one(&mut s);
    assert_eq!(names(&r), ["q"]);
    ack(&mut s, &r);
    assert_eq!(
        held(&s, Endpoint),
        versions(&[("q", "1"), ("x", "1"), ("y", "1")])
    );
    assert!(
        !s.given(Endpoint),
        "it holds x at another version than the snapshot's"
    );
}

#[test]
fn p18_subscription_changes_with_a_stale_nonce_are_honoured() {
    let mut s = ads();
    s.handle_snapshot(snap(&[(Endpoint, "x", "1"), (Endpoint, "y", "1")]));
    s.handle_request(req(Endpoint, &["x"], &[], ""))
        .expect("ok");
    let r = one(&mut s);
    ack(&mut s, &r);
    event(&mut s);
    s.handle_request(req(Endpoint, &["y"], &[], "old-nonce"))
        .expect("not rejected");
    assert_eq!(
        event(&mut s),
        Some(Event::Stale {
            kind: Endpoint,
            nonce: "old-nonce".into()
        })
    );
    let r = one(&mut s);
    assert_eq!(names(&r), ["y"]);
}

#[test]
fn p19_only_changes_go_out_and_deletions_are_removed_resources() {
    let mut s = ads_unordered();
    s.handle_snapshot(snap(ABC));
    s.handle_request(req(Cluster, &[], &[], "")).expect("ok");
    let r = one(&mut s);
    ack(&mut s, &r);
    s.handle_snapshot(snap(&[
        (Cluster, "a", "1"),
        (Cluster, "b", "2"),
        (Cluster, "d", "1"),
    ]));
    let r = one(&mut s);
    assert_eq!(names(&r), ["b", "d"]);
    assert_eq!(r.removed, ["c"]);
    ack(&mut s, &r);
    // The same content again: nothing.
    s.handle_snapshot(snap(&[
        (Cluster, "a", "1"),
        (Cluster, "b", "2"),
        (Cluster, "d", "1"),
    ]));
    none(&mut s);
}

#[test]
fn p20_missing_names_are_removed_at_once_and_sent_when_they_appear() {
    let mut s = ads();
    s.handle_snapshot(snap(&[(Endpoint, "x", "1")]));
    s.handle_request(req(Endpoint, &["x", "ghost"], &[], ""))
        .expect("ok");
    let r = one(&mut s);
    assert_eq!(names(&r), ["x"]);
    assert_eq!(r.removed, ["ghost"]);
    ack(&mut s, &r);
    s.handle_snapshot(snap(&[(Endpoint, "x", "1"), (Endpoint, "ghost", "1")]));
    let r = one(&mut s);
    assert_eq!(names(&r), ["ghost"]);
    assert!(r.removed.is_empty());
}

#[test]
fn p21_resubscribed_names_are_sent_even_if_unchanged() {
    let mut s = ads();
    s.handle_snapshot(snap(&[(Endpoint, "x", "1")]));
    s.handle_request(req(Endpoint, &["x"], &[], ""))
        .expect("ok");
    let r = one(&mut s);
    ack(&mut s, &r);
    s.handle_request(req(Endpoint, &["x"], &[], ""))
        .expect("ok");
    let r = one(&mut s);
    assert_eq!(names(&r), ["x"]);
}

#[test]
fn subscription_changes_are_events_without_phantoms() {
    let mut s = ads();
    s.handle_request(req(Endpoint, &["x", "y"], &[], ""))
        .expect("ok");
    s.handle_request(req(Endpoint, &["x"], &["y", "never"], ""))
        .expect("ok");
    let all: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
    assert_eq!(
        all,
        [
            Event::Subscribed {
                kind: Endpoint,
                wildcard: false,
                subscribed: strings(&["x", "y"]),
                unsubscribed: vec![],
            },
            // x again is not a change; `never` was never subscribed (P22).
            Event::Subscribed {
                kind: Endpoint,
                wildcard: false,
                subscribed: vec![],
                unsubscribed: strings(&["y"]),
            },
        ]
    );
}

#[test]
fn p22_unsubscribe_only_needs_no_response_and_phantoms_are_ignored() {
    let mut s = ads();
    s.handle_snapshot(snap(&[(Endpoint, "x", "1"), (Endpoint, "y", "1")]));
    s.handle_request(req(Endpoint, &["x", "y"], &[], ""))
        .expect("ok");
    let r = one(&mut s);
    ack(&mut s, &r);
    s.handle_request(req(Endpoint, &[], &["y", "never-subscribed"], ""))
        .expect("ok");
    none(&mut s);
    // y is no longer the client's: its change is not sent.
    s.handle_snapshot(snap(&[(Endpoint, "x", "1"), (Endpoint, "y", "2")]));
    none(&mut s);
}

#[test]
fn p22_wildcard_plus_explicit_unsubscribe_answers_with_resource_or_removal() {
    let mut s = ads();
    s.handle_snapshot(snap(&[(Cluster, "a", "1")]));
    s.handle_request(req(Cluster, &["*", "a", "ghost"], &[], ""))
        .expect("ok");
    let r = one(&mut s);
    assert_eq!(names(&r), ["a"]);
    assert_eq!(r.removed, ["ghost"]);
    ack(&mut s, &r);
    s.handle_request(req(Cluster, &[], &["a", "ghost"], ""))
        .expect("ok");
    let r = one(&mut s);
    assert_eq!(names(&r), ["a"], "still covered by the wildcard");
    assert_eq!(r.removed, ["ghost"], "not covered: not there");
}

#[test]
fn p23_initial_resource_versions_are_not_sent_again() {
    let mut s = ads();
    s.handle_snapshot(snap(&[
        (Cluster, "a", "1"),
        (Cluster, "b", "2"),
        (Cluster, "d", "1"),
    ]));
    let mut r = req(Cluster, &["*"], &[], "");
    r.initial_resource_versions = HashMap::from([
        ("a".to_string(), version(Cluster, "a", "1")),
        ("b".to_string(), version(Cluster, "b", "1")),
        ("c".to_string(), version(Cluster, "c", "1")),
    ]);
    s.handle_request(r).expect("ok");
    let r = one(&mut s);
    assert_eq!(names(&r), ["b", "d"], "a unchanged is not re-sent");
    assert_eq!(r.removed, ["c"], "c was deleted meanwhile");

    // By name: the restated names it already holds are not forced (P23 over P21).
    let mut s = ads();
    s.handle_snapshot(snap(&[(Endpoint, "x", "1")]));
    let mut r = req(Endpoint, &["x"], &[], "");
    r.initial_resource_versions = HashMap::from([("x".to_string(), version(Endpoint, "x", "1"))]);
    s.handle_request(r).expect("ok");
    none(&mut s);
    // Kept as the snapshot's own resource, not as the claimed copy.
    assert_eq!(s.claimed(Endpoint), 0);
    assert_eq!(s.held(Endpoint)["x"], version(Endpoint, "x", "1"));
}

/// A client back with exactly what the snapshot has (a failover to a replica
/// serving the same files) is sent nothing and holds the type's version: ACKed, as a SotW
/// client's P13; one that lacks something is not, until it ACKs what it is sent.
#[test]
fn p23_a_client_back_with_exactly_the_snapshot_is_acked_at_its_version() {
    let snapshot = snap(&[(Cluster, "a", "1"), (Cluster, "b", "2")]);
    let mut s = ads();
    s.handle_snapshot(Arc::clone(&snapshot));
    let mut r = req(Cluster, &["*"], &[], "");
    r.initial_resource_versions = HashMap::from([
        ("a".to_string(), version(Cluster, "a", "1")),
        ("b".to_string(), version(Cluster, "b", "2")),
    ]);
    s.handle_request(r).expect("ok");
    none(&mut s);
    let type_version = snapshot.get(Cluster).version.clone();
    assert_eq!(
        s.state(Cluster),
        &SyncState::Acked {
            version: type_version.clone()
        }
    );
    // One claim short: it is sent the rest, and not taken as ACKed before it answers.
    let mut s = ads();
    s.handle_snapshot(snapshot);
    let mut r = req(Cluster, &["*"], &[], "");
    r.initial_resource_versions = HashMap::from([("a".to_string(), version(Cluster, "a", "1"))]);
    s.handle_request(r).expect("ok");
    let sent = one(&mut s);
    assert_eq!(names(&sent), ["b"]);
    assert!(matches!(s.state(Cluster), SyncState::Sent { .. }));
}

#[test]
fn p23_a_claim_the_snapshot_matches_is_kept_as_its_shared_resource() {
    let mut s = ads();
    s.handle_snapshot(snap(&[(Cluster, "a", "1"), (Cluster, "b", "2")]));
    let mut r = req(Cluster, &["*"], &[], "");
    r.initial_resource_versions = HashMap::from([
        ("a".to_string(), version(Cluster, "a", "1")),
        ("b".to_string(), version(Cluster, "b", "1")),
    ]);
    s.handle_request(r).expect("ok");
    assert_eq!(s.claimed(Cluster), 2);
    let r = one(&mut s);
    assert_eq!(names(&r), ["b"]);
    // a: held as claimed and unchanged, now the snapshot's own; b: sent.
    assert_eq!(s.claimed(Cluster), 0);
    assert_eq!(s.held(Cluster).len(), 2);
    ack(&mut s, &r);
    assert_eq!(s.claimed(Cluster), 0);
}

#[test]
fn p24_virtual_hosts_by_alias_and_by_route_config_namespace() {
    let vh = |name: &str, content: &str, aliases: &[&str]| {
        Arc::new(res(VirtualHost, name, content).with_aliases(strings(aliases)))
    };
    let items = [
        vh("rc/shop", "1", &["rc/shop.example.com"]),
        vh("rc/blog", "1", &["rc/blog.example.com"]),
    ];
    let mut s = ads();
    s.handle_snapshot(Arc::new(Snapshot::from_resources(&items)));
    s.handle_request(req(
        VirtualHost,
        &["rc/shop.example.com", "rc/none.example.com"],
        &[],
        "",
    ))
    .expect("ok");
    let r = one(&mut s);
    assert_eq!(names(&r), ["rc/shop", "rc/none.example.com"]);
    assert_eq!(r.resources[0].aliases, ["rc/shop.example.com"]);
    assert!(r.resources[0].body);
    // An alias nothing answers to: a bodiless Resource listing it, as Envoy's on-demand VHDS
    // expects (not removed_resources, which would leave Envoy's request waiting).
    assert_eq!(r.resources[1].aliases, ["rc/none.example.com"]);
    assert!(!r.resources[1].body);
    assert!(r.removed.is_empty());
    ack(&mut s, &r);
    s.handle_request(req(VirtualHost, &["rc"], &[], ""))
        .expect("ok");
    let r = one(&mut s);
    assert_eq!(
        names(&r),
        ["rc/blog", "rc/shop"],
        "the namespace covers both"
    );
}

#[test]
fn p24_unsubscribe_by_alias_forgets_the_resource() {
    let items = [Arc::new(
        res(VirtualHost, "rc/shop", "1").with_aliases(strings(&["rc/shop.example.com"])),
    )];
    let mut s = ads();
    s.handle_snapshot(Arc::new(Snapshot::from_resources(&items)));
    s.handle_request(req(VirtualHost, &["rc/shop.example.com"], &[], ""))
        .expect("ok");
    let r = one(&mut s);
    ack(&mut s, &r);
    assert_eq!(s.held(VirtualHost).len(), 1);
    s.handle_request(req(VirtualHost, &[], &["rc/shop.example.com"], ""))
        .expect("ok");
    none(&mut s);
    assert!(s.held(VirtualHost).is_empty(), "no longer the client's");
    // A change to it is not sent.
    let changed = [Arc::new(
        res(VirtualHost, "rc/shop", "2").with_aliases(strings(&["rc/shop.example.com"])),
    )];
    s.handle_snapshot(Arc::new(Snapshot::from_resources(&changed)));
    none(&mut s);
}

#[test]
fn p25_ttl_and_heartbeats_only_for_clients_that_support_them() {
    let ttl = Duration::from_secs(3);
    let items = [
        Arc::new(res(Cluster, "a", "1").with_ttl(Some(ttl))),
        Arc::new(res(Cluster, "b", "1")),
    ];
    let snapshot = Arc::new(Snapshot::from_resources(&items));
    let t0 = Instant::now();

    let mut s = ads();
    let mut first = req(Cluster, &[], &[], "");
    first.node = Some(node(&[FEATURE_RESOURCE_TTL]));
    s.handle_request(first).expect("ok");
    s.handle_snapshot(Arc::clone(&snapshot));
    let r = s.poll_response(t0).expect("a response");
    assert_eq!(r.resources[0].ttl, Some(ttl));
    assert_eq!(r.resources[1].ttl, None);
    ack(&mut s, &r);
    let due = s.poll_timeout().expect("a heartbeat is scheduled");
    assert_eq!(due, t0 + ttl / 3);
    assert!(
        s.poll_response(due - Duration::from_millis(1)).is_none(),
        "not before it is due"
    );
    let hb = s.poll_response(due).expect("a heartbeat");
    assert_eq!(
        s.poll_timeout(),
        None,
        "nothing to wake for until the heartbeat's ACK"
    );
    assert!(
        s.poll_response(due + ttl).is_none(),
        "one response in flight"
    );
    assert_eq!(names(&hb), ["a"]);
    assert!(!hb.resources[0].body, "a heartbeat has no body");
    assert_eq!(hb.resources[0].ttl, Some(ttl));
    assert!(hb.removed.is_empty());
    ack(&mut s, &hb);
    assert_eq!(s.poll_timeout(), Some(due + ttl / 3));

    // P27: a client without the feature never sees a TTL or a heartbeat.
    let mut s = ads();
    s.handle_request(req(Cluster, &[], &[], "")).expect("ok");
    s.handle_snapshot(snapshot);
    let r = s.poll_response(t0).expect("a response");
    assert!(r.resources.iter().all(|d| d.ttl.is_none()));
    ack(&mut s, &r);
    assert_eq!(s.poll_timeout(), None);
    assert!(s.poll_response(t0 + Duration::from_secs(3600)).is_none());
}

#[test]
fn p23_p25_a_ttl_resource_claimed_on_reconnect_gets_a_heartbeat_at_once() {
    let ttl = Duration::from_secs(3);
    let a = Arc::new(res(Cluster, "a", "1").with_ttl(Some(ttl)));
    let mut s = ads();
    s.handle_snapshot(Arc::new(Snapshot::from_resources(&[Arc::clone(&a)])));
    let mut first = req(Cluster, &["*"], &[], "");
    first.node = Some(node(&[FEATURE_RESOURCE_TTL]));
    first.initial_resource_versions = HashMap::from([("a".to_string(), a.version.clone())]);
    s.handle_request(first).expect("ok");
    let t0 = Instant::now();
    let r = s.poll_response(t0).expect("a heartbeat, not the resource");
    assert_eq!(names(&r), ["a"]);
    assert!(!r.resources[0].body);
    assert_eq!(r.resources[0].ttl, Some(ttl));
    ack(&mut s, &r);
    assert_eq!(s.poll_timeout(), Some(t0 + ttl / 3));
}

#[test]
fn p25_removing_a_ttl_sends_the_resource_without_one() {
    let t0 = Instant::now();
    let with = Arc::new(Snapshot::from_resources(&[Arc::new(
        res(Cluster, "a", "1").with_ttl(Some(Duration::from_secs(3))),
    )]));
    let mut without_res = res(Cluster, "a", "1");
    without_res.version = "other".into(); // the loader puts the TTL in the version
    let without = Arc::new(Snapshot::from_resources(&[Arc::new(without_res)]));
    let mut s = ads();
    let mut first = req(Cluster, &[], &[], "");
    first.node = Some(node(&[FEATURE_RESOURCE_TTL]));
    s.handle_request(first).expect("ok");
    s.handle_snapshot(with);
    let r = s.poll_response(t0).expect("sent");
    ack(&mut s, &r);
    s.handle_snapshot(without);
    let r = s.poll_response(t0).expect("sent again");
    assert_eq!(r.resources[0].ttl, None);
    assert!(r.resources[0].body);
    ack(&mut s, &r);
    assert_eq!(s.poll_timeout(), None, "no more heartbeats");
}

#[test]
fn one_response_in_flight_per_type_and_changes_accumulate() {
    let mut s = ads();
    s.handle_snapshot(snap(ABC));
    s.handle_request(req(Cluster, &[], &[], "")).expect("ok");
    let r = one(&mut s);
    s.handle_snapshot(snap(&[
        (Cluster, "a", "2"),
        (Cluster, "b", "1"),
        (Cluster, "c", "1"),
    ]));
    none(&mut s);
    s.handle_snapshot(snap(&[
        (Cluster, "a", "2"),
        (Cluster, "b", "2"),
        (Cluster, "c", "1"),
    ]));
    none(&mut s);
    ack(&mut s, &r);
    let r = one(&mut s);
    assert_eq!(names(&r), ["a", "b"]);
}

#[test]
fn p28_a_changed_cluster_is_followed_by_its_load_assignment() {
    let mut s = ads();
    s.handle_snapshot(snap(&[(Cluster, "a", "1"), (Endpoint, "a", "1")]));
    s.handle_request(req(Cluster, &[], &[], "")).expect("ok");
    s.handle_request(req(Endpoint, &["a"], &[], ""))
        .expect("ok");
    let all = drain(&mut s, Instant::now());
    assert_eq!(
        all.iter().map(|r| r.kind).collect::<Vec<_>>(),
        [Cluster, Endpoint]
    );
    for r in &all {
        ack(&mut s, r);
    }
    s.handle_snapshot(snap(&[(Cluster, "a", "2"), (Endpoint, "a", "1")]));
    let all = drain(&mut s, Instant::now());
    assert_eq!(all.len(), 2, "{all:#?}");
    assert_eq!((all[0].kind, names(&all[0])), (Cluster, vec!["a"]));
    assert_eq!(
        (all[1].kind, names(&all[1])),
        (Endpoint, vec!["a"]),
        "unchanged, re-sent for warming"
    );
}

#[test]
fn p28_from_the_given_form_what_the_client_holds_goes_again_and_a_nack_of_it_is_recorded() {
    let mut s = ads();
    let items = |c: &'static str| {
        snap(&[
            (Cluster, "a", c),
            (Cluster, "b", c),
            (Endpoint, "a", "1"),
            (Endpoint, "b", "1"),
        ])
    };
    s.handle_snapshot(items("1"));
    s.handle_request(req(Cluster, &[], &[], "")).expect("ok");
    s.handle_request(req(Endpoint, &["a"], &[], ""))
        .expect("ok");
    for r in drain(&mut s, Instant::now()) {
        ack(&mut s, &r);
    }
    assert!(s.given(Cluster) && s.given(Endpoint));
    // Both clusters change; the client holds only a's endpoints, which go again unchanged.
    s.handle_snapshot(items("2"));
    let all = drain(&mut s, Instant::now());
    assert_eq!(all.len(), 2, "{all:#?}");
    assert_eq!((all[0].kind, names(&all[0])), (Cluster, vec!["a", "b"]));
    assert_eq!((all[1].kind, names(&all[1])), (Endpoint, vec!["a"]));
    assert!(all[1].removed.is_empty());
    ack(&mut s, &all[0]);
    assert!(s.given(Cluster));
    s.handle_request(nack(Endpoint, &all[1].nonce, "bad a"))
        .expect("nack");
    let (_, named) = crate::testing::rejected_changes(s.state(Endpoint));
    assert_eq!(
        named,
        [("a".into(), version(Endpoint, "a", "1"), false)],
        "what the response sent again, as it was held"
    );
    assert_eq!(held(&s, Endpoint), versions(&[("a", "1")]));
    // Again, and ACKed: the given form again.
    s.handle_snapshot(items("3"));
    let all = drain(&mut s, Instant::now());
    assert_eq!((all[1].kind, names(&all[1])), (Endpoint, vec!["a"]));
    for r in &all {
        ack(&mut s, r);
    }
    assert!(s.given(Cluster), "nothing rejected of CDS");
}

#[test]
fn p19_p28_streams_holding_the_same_are_sent_one_shared_list_of_the_changes_and_of_the_resends() {
    let items = |c: &'static str| {
        snap(&[
            (Cluster, "a", c),
            (Cluster, "b", c),
            (Cluster, "c", c),
            (Endpoint, "a", "1"),
            (Endpoint, "b", "1"),
            (Endpoint, "c", "1"),
        ])
    };
    let first = items("1");
    let mut streams: Vec<DeltaStream> = (0..2).map(|_| ads()).collect();
    for s in &mut streams {
        s.handle_snapshot(Arc::clone(&first));
        s.handle_request(req(Cluster, &[], &[], "")).expect("ok");
        s.handle_request(req(Endpoint, &["a", "b"], &[], ""))
            .expect("ok");
        for r in drain(s, Instant::now()) {
            ack(s, &r);
        }
        assert!(s.given(Cluster) && s.given(Endpoint));
    }
    // Every cluster changes (P19); the endpoints each client holds go again (P28).
    let next = items("2");
    let pushed: Vec<Vec<DeltaResponse>> = streams
        .iter_mut()
        .map(|s| {
            s.handle_snapshot(Arc::clone(&next));
            drain(s, Instant::now())
        })
        .collect();
    for all in &pushed {
        assert_eq!(all.len(), 2, "{all:#?}");
        assert_eq!(
            (all[0].kind, names(&all[0])),
            (Cluster, vec!["a", "b", "c"])
        );
        assert_eq!((all[1].kind, names(&all[1])), (Endpoint, vec!["a", "b"]));
        assert!(all.iter().all(|r| r.removed.is_empty()));
    }
    for (a, b) in pushed[0].iter().zip(&pushed[1]) {
        let (a, b) = (
            a.resources.as_shared().expect("one shared list"),
            b.resources.as_shared().expect("one shared list"),
        );
        assert!(Arc::ptr_eq(a, b), "the same list, not the same names twice");
    }
    for (s, all) in streams.iter_mut().zip(&pushed) {
        for r in all {
            ack(s, r);
        }
        assert!(s.given(Cluster) && s.given(Endpoint));
        assert_eq!(held(s, Endpoint), versions(&[("a", "1"), ("b", "1")]));
    }
    // A stream subscribing to other endpoints shares the clusters' list, and is sent the
    // endpoints it holds.
    let mut other = ads();
    other.handle_snapshot(Arc::clone(&first));
    other
        .handle_request(req(Cluster, &[], &[], ""))
        .expect("ok");
    let r = one(&mut other);
    ack(&mut other, &r);
    other
        .handle_request(req(Endpoint, &["a"], &[], ""))
        .expect("ok");
    let r = one(&mut other);
    ack(&mut other, &r);
    other.handle_snapshot(Arc::clone(&next));
    let all = drain(&mut other, Instant::now());
    assert_eq!(names(&all[0]), ["a", "b", "c"]);
    assert!(
        Arc::ptr_eq(
            all[0].resources.as_shared().expect("shared"),
            pushed[0][0].resources.as_shared().expect("shared")
        ),
        "the same clusters: the same list"
    );
    assert_eq!((all[1].kind, names(&all[1])), (Endpoint, vec!["a"]));
}

#[test]
fn per_type_streams_serve_only_their_type() {
    let mut s = DeltaStream::new(Variant::Single(Endpoint));
    s.handle_snapshot(snap(&[(Cluster, "a", "1"), (Endpoint, "a", "1")]));
    let mut r = req(Endpoint, &["a"], &[], "");
    r.type_url = String::new();
    s.handle_request(r)
        .expect("an empty type_url names the service's type");
    let r = one(&mut s);
    assert_eq!((r.kind, names(&r)), (Endpoint, vec!["a"]));
}

/// Model-based check: a simulated client applies every response (resources replace,
/// removals delete) and ACKs, or in some runs NACKs at random (keeping what it had); random
/// steps change the snapshot and subscribe or unsubscribe. After each step the server's view
/// of what the client runs must be exactly what it runs (P17), and, in runs without NACKs,
/// that must be what its subscription covers at current versions. Steps after which the
/// stream keeps what the client holds as its snapshot (`Holding`'s given form) are counted:
/// the model must reach that form too.
#[test]
fn model_client_converges_to_its_subscription() {
    let given_steps = std::cell::Cell::new((0, 0));
    crate::testing::on_tapes(300, |next| {
        let nacks = next(2) == 0;
        let mut s = ads();
        let mut client: BTreeMap<String, String> = BTreeMap::new();
        let mut wildcard = next(2) == 0;
        let mut subscribed: std::collections::BTreeSet<String> = Default::default();
        let first = if wildcard {
            vec![]
        } else {
            vec!["r0".to_string()]
        };
        subscribed.extend(first.iter().cloned());
        let mut current = snap(&[]);
        // Names unsubscribed under the wildcard, which the server answers for (P22).
        let mut told: std::collections::BTreeSet<String> = Default::default();
        // Names in responses the client NACKed (sent or removed): Envoy applies the valid
        // part of a response it rejects, so the server may tell it of their removal too.
        let mut nacked: std::collections::BTreeSet<String> = Default::default();
        s.handle_snapshot(Arc::clone(&current));
        let mut request = req(Cluster, &[], &[], "");
        request.resource_names_subscribe = first;
        s.handle_request(request).expect("ok");
        for _ in 0..20 {
            match next(4) {
                0 | 1 => {
                    let items: Vec<(ResourceType, String, String)> = (0..next(6))
                        .map(|_| (Cluster, format!("r{}", next(6)), format!("{}", next(3))))
                        .collect();
                    let items: Vec<_> = items
                        .iter()
                        .map(|(k, n, c)| (*k, n.as_str(), c.as_str()))
                        .collect();
                    current = snap(&items);
                    s.handle_snapshot(Arc::clone(&current));
                }
                2 => {
                    let name = format!("r{}", next(6));
                    subscribed.insert(name.clone());
                    s.handle_request(req(Cluster, &[&name], &[], ""))
                        .expect("ok");
                }
                _ => {
                    let name = if next(3) == 0 {
                        "*".to_string()
                    } else {
                        format!("r{}", next(6))
                    };
                    if name == "*" {
                        wildcard = false;
                    } else if subscribed.remove(&name) && wildcard {
                        // P22: the client drops it and is told again, though it only
                        // unsubscribed.
                        told.insert(name.clone());
                        client.remove(&name);
                    }
                    s.handle_request(req(Cluster, &[], &[&name], ""))
                        .expect("ok");
                    // The client forgets what it no longer subscribes to.
                    client.retain(|n, _| wildcard || subscribed.contains(n));
                }
            }
            while let Some(r) = s.poll_response(Instant::now()) {
                if nacks && next(3) == 0 {
                    nacked.extend(r.resources.iter().map(|d| d.resource.name.clone()));
                    // And its removals, which the client may or may not have applied: they
                    // go again with the type's next change.
                    nacked.extend(r.removed.iter().cloned());
                    s.handle_request(nack(Cluster, &r.nonce, "no"))
                        .expect("nack");
                    continue;
                }
                for d in &r.resources {
                    // Only what the client subscribes to (P14, P15).
                    assert!(wildcard || subscribed.contains(&d.resource.name));
                    client.insert(d.resource.name.clone(), d.resource.version.clone());
                }
                for n in &r.removed {
                    // Only what it holds, or a name it asked for that is not there (P19, P20),
                    // or one it was sent and rejected (and may hold).
                    assert!(
                        client.contains_key(n)
                            || subscribed.contains(n)
                            || told.contains(n)
                            || nacked.contains(n),
                        "removed {n}"
                    );
                    client.remove(n);
                }
                ack(&mut s, &r);
            }
            told.clear();
            let held: BTreeMap<String, String> = s
                .held(Cluster)
                .into_iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect();
            assert_eq!(held, client, "the server knows what the client runs (P17)");
            let (given, steps) = given_steps.get();
            given_steps.set((given + usize::from(s.given(Cluster)), steps + 1));
            if nacks {
                continue;
            }
            let want: BTreeMap<String, String> = current
                .get(Cluster)
                .resources
                .values()
                .filter(|r| wildcard || subscribed.contains(&r.name))
                .map(|r| (r.name.clone(), r.version.clone()))
                .collect();
            assert_eq!(client, want);
        }
    });
    let (given, steps) = given_steps.get();
    assert!(
        given * 4 > steps,
        "the given form after {given} of {steps} steps"
    );
}

#[test]
fn a_stream_past_its_name_limit_ends_with_a_limit_error() {
    let mut s = DeltaStream::new(Variant::Aggregated).with_name_limit(3);
    s.handle_snapshot(snap(ABC));
    s.handle_request(req(Cluster, &["a", "b"], &[], ""))
        .expect("within");
    s.handle_request(req(Endpoint, &["a"], &[], ""))
        .expect("three in all");
    let err = s
        .handle_request(req(Endpoint, &["b"], &[], ""))
        .expect_err("four is past the limit");
    assert_eq!(err, ProtocolError::TooManyNames { names: 4, limit: 3 });
    assert!(err.is_limit());
    // A wildcard (names the server chooses) does not count, however large the type.
    let mut wide = DeltaStream::new(Variant::Aggregated).with_name_limit(1);
    wide.handle_snapshot(snap(ABC));
    wide.handle_request(req(Cluster, &[], &[], ""))
        .expect("wildcard");
    let r = one(&mut wide);
    assert_eq!(r.resources.len(), 3);
    ack(&mut wide, &r);
}

#[test]
fn p23_a_client_back_with_what_it_has_gets_no_empty_announcement() {
    let snapshot = snap(ABC);
    // A first connection: the wildcard is announced even when there is nothing new.
    let mut fresh = ads();
    fresh.handle_snapshot(Arc::clone(&snapshot));
    fresh
        .handle_request(req(Cluster, &[], &[], ""))
        .expect("ok");
    let first = one(&mut fresh);
    assert_eq!(first.resources.len(), 3);
    // Back after a restart, listing everything at its current version: nothing at all.
    let mut back = ads();
    back.handle_snapshot(snapshot);
    let mut r = req(Cluster, &[], &[], "");
    r.initial_resource_versions = ABC
        .iter()
        .map(|(k, n, c)| (n.to_string(), version(*k, n, c)))
        .collect::<HashMap<_, _>>();
    back.handle_request(r).expect("ok");
    none(&mut back);
}

// === Responses over the response limit (--max-response-bytes) ===

/// P17/P19: a delta response over the limit goes in parts, each after the client's answer to
/// the one before: removals with the first, every resource once; what the client holds is
/// what the parts it ACKed brought, and a NACK of a part leaves the rest to follow.
#[test]
fn p17_p19_a_delta_response_over_the_limit_is_split_and_the_rest_follows_each_answer() {
    const LIMIT: usize = 2048;
    let body = "x".repeat(300);
    let five: Vec<(ResourceType, &str, &str)> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|n| (Endpoint, *n, body.as_str()))
        .collect();
    let mut s = ads_unordered().with_response_limit(LIMIT);
    s.handle_snapshot(snap(&[(Endpoint, "old", "1")]));
    s.handle_request(req(Endpoint, &["a", "b", "c", "d", "e", "old"], &[], ""))
        .expect("ok");
    let first = one(&mut s);
    assert_eq!(names(&first), ["old"]);
    ack(&mut s, &first);
    assert!(
        s.given(Endpoint),
        "it holds what it subscribes to: split from the given form"
    );
    // `old` goes and five large ones come.
    s.handle_snapshot(snap(&five));
    let part1 = one(&mut s);
    assert_eq!(names(&part1), ["a", "b"]);
    assert_eq!(part1.removed, ["old"], "removals go with the first part");
    none(&mut s);
    s.handle_request(nack(Endpoint, &part1.nonce, "bad a"))
        .expect("nack");
    let part2 = one(&mut s);
    assert_eq!(names(&part2), ["c", "d"]);
    assert!(part2.removed.is_empty());
    ack(&mut s, &part2);
    let part3 = one(&mut s);
    assert_eq!(names(&part3), ["e"]);
    ack(&mut s, &part3);
    none(&mut s);
    // The client holds what it ACKed (P17): not a and b, whose part it rejected, and still
    // `old`, whose removal went with that part.
    let held: Vec<&str> = s.held(Endpoint).into_keys().collect();
    assert_eq!(held, ["c", "d", "e", "old"]);
    let splits: Vec<_> = std::iter::from_fn(|| s.poll_event())
        .filter_map(|e| match e {
            Event::Split { sent, left, .. } => Some((sent, left)),
            _ => None,
        })
        .collect();
    assert_eq!(splits, [(2, 3), (2, 1)]);
}

// === P33: a type the server does not serve, on Incremental ADS ===

fn unknown(subscribe: &[&str], unsubscribe: &[&str], nonce: &str) -> DeltaDiscoveryRequest {
    DeltaDiscoveryRequest {
        type_url: "type.googleapis.com/foo.Bar".into(),
        ..req(Cluster, subscribe, unsubscribe, nonce)
    }
}

#[test]
fn p33_an_unknown_type_is_answered_removed_and_not_found_and_the_stream_goes_on() {
    let mut s = ads();
    s.handle_snapshot(snap(&[(Cluster, "c", "1")]));
    // A wildcard: told at once that there is nothing.
    s.handle_request(unknown(&[], &[], "")).expect("goes on");
    assert!(matches!(event(&mut s), Some(Event::UnknownType { .. })));
    let r = s.poll_unknown().expect("answered");
    assert!(r.not_found.is_empty());
    s.handle_request(unknown(&[], &[], &r.nonce)).expect("ack");
    assert_eq!(s.poll_unknown(), None);
    // Names: each not found (P32) and removed (P20, in the wire response).
    s.handle_request(unknown(&["a", "b"], &[], ""))
        .expect("names");
    let r = s.poll_unknown().expect("answered");
    assert_eq!(r.not_found, ["a", "b"]);
    s.handle_request(unknown(&[], &[], &r.nonce)).expect("ack");
    // Only what is new is answered; an unsubscribe needs nothing.
    s.handle_request(unknown(&["b", "c"], &["a"], ""))
        .expect("more");
    assert_eq!(
        s.poll_unknown().map(|r| r.not_found),
        Some(strings(&["b", "c"]))
    );
    s.handle_request(unknown(&[], &["b"], "")).expect("less");
    assert_eq!(s.poll_unknown(), None);
    assert_eq!(s.unknown_status()[0].names, ["c"]);
    // The served types go on.
    s.handle_request(req(Cluster, &[], &[], "")).expect("cds");
    assert_eq!(one(&mut s).resources.len(), 1);
}

// === P32: resource errors ===

#[test]
fn p32_a_named_resource_that_does_not_exist_is_not_found_once_and_again_when_deleted() {
    let mut s = ads();
    s.handle_snapshot(snap(&[(Cluster, "c", "1")]));
    s.handle_request(req(Cluster, &["c", "x"], &[], ""))
        .expect("cds");
    let r = one(&mut s);
    assert_eq!(r.removed, ["x"], "P20");
    assert_eq!(r.not_found, ["x"], "P32");
    s.handle_request(req(Cluster, &[], &[], &r.nonce))
        .expect("ack");
    assert_eq!(
        s.status(Cluster).map(|t| t.not_found),
        Some(strings(&["x"]))
    );
    // Appears: sent, no longer not found.
    s.handle_snapshot(snap(&[(Cluster, "c", "1"), (Cluster, "x", "1")]));
    let r = one(&mut s);
    assert_eq!(r.resources.len(), 1);
    assert!(r.not_found.is_empty());
    s.handle_request(req(Cluster, &[], &[], &r.nonce))
        .expect("ack");
    assert_eq!(s.status(Cluster).map(|t| t.not_found), Some(vec![]));
    // Deleted while subscribed: removed and not found again.
    s.handle_snapshot(snap(&[(Cluster, "c", "1")]));
    let r = one(&mut s);
    assert_eq!(
        (r.removed.clone(), r.not_found.clone()),
        (strings(&["x"]), strings(&["x"]))
    );
    s.handle_request(req(Cluster, &[], &[], &r.nonce))
        .expect("ack");
    // Unsubscribed: no longer reported.
    s.handle_request(req(Cluster, &[], &["x"], ""))
        .expect("drop");
    assert_eq!(s.status(Cluster).map(|t| t.not_found), Some(vec![]));
}

#[test]
fn p32_what_only_a_wildcard_covered_is_removed_without_an_error() {
    let mut s = ads();
    s.handle_snapshot(snap(&[(Cluster, "c", "1"), (Cluster, "d", "1")]));
    s.handle_request(req(Cluster, &["*"], &[], ""))
        .expect("cds");
    let r = one(&mut s);
    s.handle_request(req(Cluster, &[], &[], &r.nonce))
        .expect("ack");
    s.handle_snapshot(snap(&[(Cluster, "c", "1")]));
    let r = one(&mut s);
    assert_eq!(r.removed, ["d"]);
    assert!(r.not_found.is_empty());
}

// === P35: xdstp names ===

#[test]
fn p35_an_xdstp_name_is_subscribed_and_unsubscribed_in_canonical_form() {
    let name = "xdstp://a.test/envoy.config.cluster.v3.Cluster/c?a=1&b=2";
    let mut s = ads();
    s.handle_snapshot(snap(&[(Cluster, name, "1")]));
    s.handle_request(req(
        Cluster,
        &["xdstp://a.test/envoy.config.cluster.v3.Cluster/c?b=2&a=1"],
        &[],
        "",
    ))
    .expect("cds");
    let r = one(&mut s);
    assert_eq!(r.resources[0].resource.name, name);
    s.handle_request(req(Cluster, &[], &[], &r.nonce))
        .expect("ack");
    s.handle_request(req(
        Cluster,
        &[],
        &["xdstp://a.test/envoy.config.cluster.v3.Cluster/c?b=2&a=1"],
        "",
    ))
    .expect("unsubscribe");
    assert!(s.held(Cluster).is_empty());
}

// === P34: LEDS over Incremental ADS ===

const LEDS: &str = "xdstp://test/envoy.config.endpoint.v3.LbEndpoint/c1";

fn member(id: &str) -> String {
    format!("{LEDS}/{id}")
}

#[test]
fn p34_a_glob_subscription_gets_each_member_and_one_removed_name_per_removed_host() {
    let glob = format!("{LEDS}/*");
    let (h1, h2, other) = (member("h1"), member("h2"), format!("{LEDS}x/h9"));
    let mut s = ads();
    s.handle_snapshot(snap(&[
        (LbEndpoint, &h1, "1"),
        (LbEndpoint, &h2, "1"),
        // Another collection, and a member with other context parameters: not in the glob.
        (LbEndpoint, &other, "1"),
        (LbEndpoint, &format!("{}?p=1", member("h3")), "1"),
    ]));
    s.handle_request(req(LbEndpoint, &[&glob], &[], ""))
        .expect("leds");
    let r = one(&mut s);
    let sent: Vec<&str> = r
        .resources
        .iter()
        .map(|d| d.resource.name.as_str())
        .collect();
    assert_eq!(
        sent,
        [h1.as_str(), h2.as_str()],
        "each member by its full URL"
    );
    assert!(r.not_found.is_empty());
    s.handle_request(req(LbEndpoint, &[], &[], &r.nonce))
        .expect("ack");
    // One host changed: one resource. One removed: exactly one removed name.
    s.handle_snapshot(snap(&[(LbEndpoint, &h1, "2"), (LbEndpoint, &h2, "1")]));
    let r = one(&mut s);
    assert_eq!(r.resources.len(), 1);
    assert_eq!(r.resources[0].resource.name, h1);
    assert!(r.removed.is_empty());
    s.handle_request(req(LbEndpoint, &[], &[], &r.nonce))
        .expect("ack");
    s.handle_snapshot(snap(&[(LbEndpoint, &h1, "2")]));
    let r = one(&mut s);
    assert!(r.resources.is_empty());
    assert_eq!(r.removed, std::slice::from_ref(&h2));
    assert!(r.not_found.is_empty(), "a member goes as a removal");
    // A new member of the collection is sent.
    s.handle_request(req(LbEndpoint, &[], &[], &r.nonce))
        .expect("ack");
    s.handle_snapshot(snap(&[
        (LbEndpoint, &h1, "2"),
        (LbEndpoint, &member("h4"), "1"),
    ]));
    let r = one(&mut s);
    assert_eq!(r.resources[0].resource.name, member("h4"));
}

#[test]
fn p34_an_empty_collection_is_answered_at_once_and_is_not_an_error() {
    let glob = format!("{LEDS}/*");
    let mut s = ads();
    s.handle_snapshot(snap(&[(Cluster, "c", "1")]));
    s.handle_request(req(LbEndpoint, &[&glob], &[], ""))
        .expect("leds");
    let r = one(&mut s);
    assert!(r.resources.is_empty());
    assert!(r.not_found.is_empty(), "{r:?}");
    assert_eq!(s.status(LbEndpoint).map(|t| t.not_found), Some(vec![]));
}

/// A response's resources settle as a map inserted in the order of the reasons would: one
/// per name, in name order, a change over a heartbeat (P25) over a rejected one sent again
/// (P5).
#[test]
fn what_to_send_settles_to_one_entry_per_name_the_strongest_reason_kept() {
    use super::{settle, Why::*};
    let r = |name: &str| {
        Arc::new(crate::resource::Resource::new(
            Endpoint,
            name,
            "1",
            vec![],
            None,
        ))
    };
    let (a, b, c) = (r("a"), r("b"), r("c"));
    let mut send = vec![
        (&b, Again),
        (&a, Heartbeat),
        (&a, Send),
        (&c, Heartbeat),
        (&b, Heartbeat),
        (&c, Again),
        (&a, Again),
    ];
    settle(&mut send);
    let settled: Vec<(&str, super::Why)> = send
        .iter()
        .map(|(r, how)| (r.name.as_str(), *how))
        .collect();
    assert_eq!(settled, [("a", Send), ("b", Heartbeat), ("c", Heartbeat)]);
}

/// P30: as SotW's, a delta client holding the step's endpoints in the given form (exactly
/// what it subscribes to of one snapshot) holds each one it subscribes to, known from the
/// version (`Flavor::holds_all`); a changed subscription leaves the given form.
#[test]
fn p30_a_client_holding_the_steps_endpoints_given_whole_holds_them_all() {
    use crate::protocol::stream::Flavor;
    let mut s = ads();
    let first = snap(&[(Cluster, "a", "1"), (Endpoint, "a", "1")]);
    s.handle_snapshot(Arc::clone(&first));
    s.handle_request(req(Cluster, &[], &[], "")).expect("ok");
    s.handle_request(req(Endpoint, &["a"], &[], ""))
        .expect("ok");
    for r in drain(&mut s, Instant::now()) {
        ack(&mut s, &r);
    }
    assert!(s.flavor().holds_all(Endpoint, first.get(Endpoint)));
    let second = snap(&[(Cluster, "a", "1"), (Endpoint, "a", "2")]);
    assert!(!s.flavor().holds_all(Endpoint, second.get(Endpoint)));
    s.handle_request(req(Endpoint, &["b"], &[], ""))
        .expect("ok");
    assert!(!s.flavor().holds_all(Endpoint, first.get(Endpoint)));
}

/// P20, P21: a first request naming names, from a client that holds nothing, is sent all
/// its subscription selects, in name order and each once, and each name that does not exist
/// removed (and not found, P32); the client then holds exactly that (the given form).
/// Names subscribed again before the response go with it, once.
#[test]
fn p21_a_first_request_naming_names_gets_their_selection_and_p20_the_rest_removed() {
    use crate::protocol::stream::Flavor;
    let mut s = ads();
    let snapshot = snap(&[
        (Cluster, "a", "1"),
        (Endpoint, "a", "1"),
        (Endpoint, "b", "1"),
        (Endpoint, "c", "1"),
    ]);
    s.handle_snapshot(Arc::clone(&snapshot));
    s.handle_request(req(Endpoint, &["c", "a", "gone"], &[], ""))
        .expect("ok");
    // Another name before the response: the first request's selection and it, once each.
    s.handle_request(req(Endpoint, &["b", "a"], &[], ""))
        .expect("ok");
    let all = drain(&mut s, Instant::now());
    let eds: Vec<_> = all.iter().filter(|r| r.kind == Endpoint).collect();
    assert_eq!(eds.len(), 1, "{all:#?}");
    assert_eq!(names(eds[0]), ["a", "b", "c"]);
    assert_eq!(eds[0].removed, ["gone"]);
    assert_eq!(eds[0].not_found, ["gone"]);
    ack(&mut s, eds[0]);
    assert!(s.flavor().holds_all(Endpoint, snapshot.get(Endpoint)));
}

/// P25: a type's heartbeats are kept in a map only while some TTL'd resource is held; the
/// last one gone frees it (every delta stream keeps this per type).
#[test]
fn p25_heartbeats_are_kept_while_any_is_held_and_freed_with_the_last() {
    let mut heartbeats = super::Heartbeats::default();
    assert!(heartbeats.is_empty() && heartbeats.0.is_none());
    let now = Instant::now();
    heartbeats.insert("a".into(), now);
    heartbeats.insert("b".into(), now + Duration::from_secs(1));
    assert!(heartbeats.contains_key("a") && !heartbeats.contains_key("c"));
    assert_eq!(heartbeats.values().min(), Some(&now));
    heartbeats.remove("a");
    assert!(!heartbeats.is_empty() && heartbeats.iter().map(|(n, _)| n.as_str()).eq(["b"]));
    heartbeats.retain(|_, _| false);
    assert!(
        heartbeats.0.is_none(),
        "the last one gone by retain frees the map"
    );
    heartbeats.insert("c".into(), now);
    heartbeats.remove("c");
    assert!(heartbeats.0.is_none(), "the last one removed frees the map");
    heartbeats.remove("c");
    assert!(heartbeats.is_empty());
}
