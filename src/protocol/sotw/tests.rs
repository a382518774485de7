//! Unit tests of the SotW state machine, one or more per rule (P1..P16, P28, P30).

use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use envoy_types::pb::google::rpc::Status;

use super::SotwStream;
use crate::cache::Snapshot;
use crate::protocol::{Event, ProtocolError, Resources, Response, SyncState, Variant};
use crate::resource::{Resource, ResourceType};

use ResourceType::{Cluster, Endpoint, Listener, Route};

fn node(id: &str) -> Node {
    Node {
        id: id.into(),
        cluster: "test".into(),
        ..Default::default()
    }
}

use crate::testing::snapshot as snap;

fn req(kind: ResourceType, names: &[&str], version: &str, nonce: &str) -> DiscoveryRequest {
    DiscoveryRequest {
        version_info: version.into(),
        node: Some(node("n1")),
        resource_names: names.iter().map(|s| s.to_string()).collect(),
        type_url: kind.type_url().into(),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

fn nack(kind: ResourceType, version: &str, nonce: &str, error: &str) -> DiscoveryRequest {
    DiscoveryRequest {
        error_detail: Some(Status {
            code: 3,
            message: error.into(),
            details: vec![],
        }),
        ..req(kind, &[], version, nonce)
    }
}

/// Names in a response.
fn names(r: &Response) -> Vec<String> {
    r.resources.iter().map(|r| r.name.clone()).collect()
}

fn drain(s: &mut SotwStream) -> Vec<Response> {
    std::iter::from_fn(|| s.poll_response(Instant::now())).collect()
}

/// An ADS stream that has been sent wildcard CDS and ACKed it.
fn ads_with_acked_cds(snapshot: Arc<Snapshot>) -> (SotwStream, Response) {
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snapshot);
    s.handle_request(req(Cluster, &[], "", "")).expect("ok");
    let r = s.poll_response(Instant::now()).expect("CDS response");
    s.handle_request(req(Cluster, &[], &r.version, &r.nonce))
        .expect("ok");
    (s, r)
}

// === P1: the node ===

#[test]
fn p1_first_request_must_carry_node() {
    let mut s = SotwStream::new(Variant::Aggregated);
    let mut r = req(Cluster, &[], "", "");
    r.node = None;
    assert_eq!(s.handle_request(r), Err(ProtocolError::MissingNode));
}

#[test]
fn p1_later_requests_may_omit_node_but_not_change_it() {
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_request(req(Cluster, &[], "", "")).expect("first");
    let mut omitted = req(Listener, &[], "", "");
    omitted.node = None;
    s.handle_request(omitted)
        .expect("omitting node later is fine");
    let mut other = req(Route, &["r"], "", "");
    other.node = Some(node("n2"));
    assert!(matches!(
        s.handle_request(other),
        Err(ProtocolError::NodeChanged { .. })
    ));
    assert_eq!(s.node().map(|n| n.id.as_str()), Some("n1"));
}

/// P1 with an Envoy's node: its extensions are not kept, yet a later node that differs in
/// them alone is still a changed node, and one that repeats them is the same.
#[test]
fn p1_a_node_is_compared_with_its_extensions_which_are_not_kept() {
    use envoy_types::pb::envoy::config::core::v3::Extension;
    let with = |names: &[&str]| {
        let mut n = node("n1");
        n.extensions = names
            .iter()
            .map(|name| Extension {
                name: name.to_string(),
                category: "envoy.filters.http".into(),
                ..Default::default()
            })
            .collect();
        n
    };
    let mut s = SotwStream::new(Variant::Aggregated);
    let mut first = req(Cluster, &[], "", "");
    first.node = Some(with(&["a", "b"]));
    s.handle_request(first).expect("first");
    assert_eq!(s.node().map(|n| n.extensions.len()), Some(0), "not kept");
    let mut same = req(Listener, &[], "", "");
    same.node = Some(with(&["a", "b"]));
    s.handle_request(same).expect("the same node");
    for changed in [
        with(&["a"]),
        with(&["b", "a"]),
        with(&["a", "c"]),
        node("n1"),
    ] {
        let mut other = req(Route, &["r"], "", "");
        other.node = Some(changed);
        assert!(matches!(
            s.handle_request(other),
            Err(ProtocolError::NodeChanged { .. })
        ));
    }
}

// === P2: nonces ===

#[test]
fn p2_every_response_has_a_fresh_nonce_per_type() {
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[(Cluster, "c", "1"), (Listener, "l", "1")]));
    s.handle_request(req(Cluster, &[], "", "")).expect("ok");
    s.handle_request(req(Listener, &[], "", "")).expect("ok");
    let first = drain(&mut s);
    assert_eq!(first.len(), 2);
    assert_ne!(first[0].nonce, first[1].nonce);
    // ACK CDS and change it: the new CDS response has yet another nonce.
    s.handle_request(req(Cluster, &[], &first[0].version, &first[0].nonce))
        .expect("ok");
    s.handle_snapshot(snap(&[(Cluster, "c", "2"), (Listener, "l", "1")]));
    let second = drain(&mut s);
    assert_eq!(second.len(), 1);
    assert!(!first.iter().any(|r| r.nonce == second[0].nonce));
}

// === P3: types ===

#[test]
fn p3_a_request_on_ads_without_a_type_is_an_error() {
    let mut s = SotwStream::new(Variant::Aggregated);
    let mut r = req(Cluster, &[], "", "");
    r.type_url = String::new();
    assert_eq!(s.handle_request(r), Err(ProtocolError::NoType));
}

// === P33: a type the server does not serve, on ADS ===

const UNKNOWN: &str = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpointX";

fn unknown(names: &[&str], version: &str, nonce: &str) -> DiscoveryRequest {
    DiscoveryRequest {
        type_url: UNKNOWN.into(),
        ..req(Cluster, names, version, nonce)
    }
}

#[test]
fn p33_an_unknown_type_on_ads_is_answered_as_not_existing_and_the_stream_goes_on() {
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[(Cluster, "c", "1")]));
    s.handle_request(unknown(&["a", "b"], "", ""))
        .expect("an unknown type does not end the stream");
    assert_eq!(
        s.poll_event(),
        Some(Event::UnknownType {
            type_url: UNKNOWN.into()
        })
    );
    let r = s.poll_unknown().expect("answered");
    assert_eq!(r.type_url, UNKNOWN);
    assert_eq!(r.not_found, ["a", "b"]);
    assert_eq!(s.poll_unknown(), None, "one answer per request");
    // Its ACK asks for nothing new: no answer; the other types go on.
    s.handle_request(unknown(&["a", "b"], &r.version, &r.nonce))
        .expect("ack");
    assert_eq!(s.poll_unknown(), None);
    s.handle_request(req(Cluster, &[], "", "")).expect("cds");
    assert_eq!(names(&drain(&mut s)[0]), ["c"]);
    // A name more: answered again, with every name; the type is reported once.
    s.handle_request(unknown(&["a", "b", "c"], &r.version, &r.nonce))
        .expect("more names");
    let again = s.poll_unknown().expect("answered");
    assert_ne!(again.nonce, r.nonce, "P2");
    assert_eq!(again.not_found, ["a", "b", "c"]);
    assert!(!std::iter::from_fn(|| s.poll_event()).any(|e| matches!(e, Event::UnknownType { .. })));
    // A stale nonce is ignored (P6).
    s.handle_request(unknown(&["z"], &r.version, &r.nonce))
        .expect("stale");
    assert_eq!(s.poll_unknown(), None);
    // Operators see it, with its names and its ACK.
    let status = s.unknown_status();
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].names, ["a", "b", "c"]);
    assert!(matches!(status[0].state, SyncState::Sent { .. }));
}

#[test]
fn p33_unknown_types_are_bounded_per_stream_and_their_names_count_towards_the_limit() {
    let mut s = SotwStream::new(Variant::Aggregated);
    for i in 0..crate::protocol::MAX_UNKNOWN_TYPES {
        let mut r = unknown(&[], "", "");
        r.type_url = format!("type.googleapis.com/x.T{i}");
        s.handle_request(r).expect("within the bound");
    }
    let mut r = unknown(&[], "", "");
    r.type_url = "type.googleapis.com/x.OneTooMany".into();
    let e = s.handle_request(r).expect_err("past the bound");
    assert!(
        matches!(e, ProtocolError::TooManyUnknownTypes { .. }),
        "{e}"
    );
    assert!(e.is_limit());

    let mut s = SotwStream::new(Variant::Aggregated).with_name_limit(2);
    let e = s
        .handle_request(unknown(&["a", "b", "c"], "", ""))
        .expect_err("three names");
    assert!(matches!(e, ProtocolError::TooManyNames { names: 3, .. }));
}

// === P32: resource errors ===

#[test]
fn p32_a_named_resource_that_does_not_exist_is_answered_not_found_at_once() {
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[(Listener, "l", "1")]));
    // Before P32 nothing went out for a name that does not exist (P11).
    s.handle_request(req(Listener, &["l", "missing"], "", ""))
        .expect("lds");
    let r = s.poll_response(Instant::now()).expect("answered at once");
    assert_eq!(names(&r), ["l"]);
    assert_eq!(r.not_found, ["missing"]);
    s.handle_request(req(Listener, &["l", "missing"], &r.version, &r.nonce))
        .expect("ack");
    assert_eq!(
        s.status(Listener).map(|t| t.not_found),
        Some(vec!["missing".to_string()])
    );
    assert!(
        drain(&mut s).is_empty(),
        "told once: nothing more until a change"
    );
    // A non-full-state type: a response with nothing in it but the error.
    s.handle_request(req(Route, &["r"], "", "")).expect("rds");
    let r = s.poll_response(Instant::now()).expect("answered at once");
    assert!(r.resources.is_empty());
    assert_eq!(r.not_found, ["r"]);
    s.handle_request(req(Route, &["r"], &r.version, &r.nonce))
        .expect("ack");
    // When it appears it is sent as usual (P11), and no longer reported.
    s.handle_snapshot(snap(&[(Listener, "l", "1"), (Route, "r", "1")]));
    let r = drain(&mut s);
    assert_eq!(r.len(), 1);
    assert_eq!(names(&r[0]), ["r"]);
    assert!(r[0].not_found.is_empty());
    assert_eq!(s.status(Route).map(|t| t.not_found), Some(vec![]));
    s.handle_request(req(Route, &["r"], &r[0].version, &r[0].nonce))
        .expect("ack");
    // Deleted while subscribed: the error again.
    s.handle_snapshot(snap(&[(Listener, "l", "1")]));
    let r = drain(&mut s);
    let rds: Vec<_> = r.iter().filter(|r| r.kind == Route).collect();
    assert_eq!(rds.len(), 1, "{r:?}");
    assert_eq!(rds[0].not_found, ["r"]);
}

#[test]
fn p32_a_wildcard_alone_has_nothing_not_found_and_a_reconnect_with_a_missing_name_is_told() {
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[(Cluster, "c", "1")]));
    s.handle_request(req(Cluster, &[], "", "")).expect("cds");
    let r = s.poll_response(Instant::now()).expect("cds");
    assert!(r.not_found.is_empty());
    // Wildcard plus a name that does not exist.
    s.handle_request(req(Cluster, &["*", "x"], &r.version, &r.nonce))
        .expect("more");
    let r = s.poll_response(Instant::now()).expect("the name is news");
    assert_eq!(names(&r), ["c"]);
    assert_eq!(r.not_found, ["x"]);
    // P13: back on a new stream with the version of what it has; a missing name still
    // needs its answer.
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[(Endpoint, "e", "1")]));
    s.handle_request(req(Endpoint, &["e"], "", ""))
        .expect("eds");
    let first = s.poll_response(Instant::now()).expect("eds");
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[(Endpoint, "e", "1")]));
    s.handle_request(req(Endpoint, &["e", "gone"], &first.version, ""))
        .expect("eds");
    let r = s.poll_response(Instant::now()).expect("told");
    assert_eq!(r.not_found, ["gone"]);
}

#[test]
fn p3_per_type_service_serves_only_its_type() {
    let mut s = SotwStream::new(Variant::Single(Cluster));
    assert!(matches!(
        s.handle_request(req(Listener, &[], "", "")),
        Err(ProtocolError::WrongType { .. })
    ));
    let mut s = SotwStream::new(Variant::Single(Cluster));
    let mut r = req(Cluster, &[], "", "");
    r.type_url.clear();
    s.handle_request(r)
        .expect("empty type_url means the service's type");
    s.handle_snapshot(snap(&[(Cluster, "c", "1"), (Listener, "l", "1")]));
    let out = drain(&mut s);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].kind, Cluster);
}

// === P4, P5: ACK and NACK ===

#[test]
fn p4_ack_records_the_version() {
    let (s, r) = ads_with_acked_cds(snap(&[(Cluster, "c", "1")]));
    assert_eq!(
        s.state(Cluster),
        &SyncState::Acked {
            version: r.version.clone()
        }
    );
}

/// P4: an ACK is an event (counted, logged); once the events are taken, the stream keeps no
/// buffer for them: an idle stream holds none.
#[test]
fn p4_events_taken_leave_no_buffer_behind() {
    let (mut s, r) = ads_with_acked_cds(snap(&[(Cluster, "c", "1")]));
    assert!(s.event_room() > 0, "the ACK's event waits to be taken");
    let events: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Acked { version, .. } if *version == r.version)),
        "{events:?}"
    );
    assert_eq!(s.event_room(), 0);
    // The next input's events come in a new buffer, and go with it.
    s.handle_request(nack(Cluster, "", "stale", "old"))
        .expect("ok");
    let stale: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
    assert!(
        stale.iter().any(|e| matches!(e, Event::Stale { .. })),
        "{stale:?}"
    );
    assert_eq!(s.event_room(), 0);
}

#[test]
fn p5_nack_records_error_and_the_rejected_content_is_not_resent() {
    let (mut s, v1) = ads_with_acked_cds(snap(&[(Cluster, "c", "1")]));
    s.handle_snapshot(snap(&[(Cluster, "c", "bad")]));
    let v2 = s.poll_response(Instant::now()).expect("v2");
    s.handle_request(nack(Cluster, &v1.version, &v2.nonce, "bad cluster"))
        .expect("nack");
    let (changed, named) = crate::testing::rejected_changes(s.state(Cluster));
    // What the rejected response changed against what the client ran: `c`, not added.
    let bad = crate::testing::resource(Cluster, "c", "bad").version;
    assert_eq!(named, [("c".into(), bad, false)]);
    let SyncState::Nacked { nack, .. } = s.state(Cluster) else {
        panic!("not NACKed: {:?}", s.state(Cluster));
    };
    // What it still runs, by content: `c` as it was.
    let runs = nack.runs.clone().expect("the stream knows what it runs");
    assert_eq!(
        runs.resources,
        [Arc::new(crate::testing::resource(Cluster, "c", "1"))]
    );
    assert_eq!(
        s.state(Cluster),
        &SyncState::Nacked {
            nonce: v2.nonce.clone(),
            rejected_version: v2.version.clone(),
            accepted_version: v1.version.clone(),
            nack: Arc::new(crate::protocol::Nack {
                error: "bad cluster".into(),
                changed: Arc::clone(&changed),
                runs: Some(runs),
            }),
        }
    );
    let events: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
    assert!(events.contains(&Event::Nacked {
        kind: Cluster,
        rejected_version: v2.version.clone(),
        error: "bad cluster".into(),
        changed,
    }));
    // Same content again (a reload that changed nothing): nothing is sent.
    s.handle_snapshot(snap(&[(Cluster, "c", "bad")]));
    assert!(s.poll_response(Instant::now()).is_none());
    // A change of that type is sent.
    s.handle_snapshot(snap(&[(Cluster, "c", "fixed")]));
    let v3 = s.poll_response(Instant::now()).expect("v3 after a fix");
    assert_ne!(v3.version, v2.version);
}

/// P5, the way back: a NACK says what the client still runs by content (the resources it
/// holds, and how it subscribes), whatever changed in between of other types or of
/// resources it does not subscribe to: four unrelated changes, then a bad route; the
/// snapshot just before the bad one serves exactly what it runs, the bad one does not. A
/// NACK after another NACK of the same accepted version keeps what the first said.
#[test]
fn p5_a_nack_says_what_the_client_runs_whatever_changed_in_between() {
    let mut s = SotwStream::new(Variant::Aggregated);
    let at = |cluster: &str, route: &str| {
        snap(&[
            (Cluster, "c", cluster),
            (Route, "main", route),
            (Route, "other", cluster),
        ])
    };
    s.handle_snapshot(at("1", "good"));
    s.handle_request(req(Route, &["main"], "", "")).expect("ok");
    let r = s.poll_response(Instant::now()).expect("RDS");
    s.handle_request(req(Route, &["main"], &r.version, &r.nonce))
        .expect("ack");
    let mut last_good = at("1", "good");
    for unrelated in ["2", "3", "4", "5"] {
        last_good = at(unrelated, "good");
        s.handle_snapshot(Arc::clone(&last_good));
        assert!(s.poll_response(Instant::now()).is_none(), "nothing of RDS");
    }
    let bad = at("5", "bad");
    s.handle_snapshot(Arc::clone(&bad));
    let rejected = s.poll_response(Instant::now()).expect("the bad route");
    s.handle_request(DiscoveryRequest {
        resource_names: vec!["main".into()],
        ..nack(Route, &r.version, &rejected.nonce, "bad route")
    })
    .expect("nack");
    let runs = |s: &SotwStream| match s.state(Route) {
        SyncState::Nacked { nack, .. } => nack.runs.clone().expect("known"),
        other => panic!("not NACKed: {other:?}"),
    };
    let first = runs(&s);
    assert_eq!(
        first.resources,
        [Arc::new(crate::testing::resource(Route, "main", "good"))]
    );
    assert!(first.served_by(last_good.get(Route)), "the way back");
    assert!(first.served_by(at("1", "good").get(Route)));
    assert!(!first.served_by(bad.get(Route)));
    // Rejected again (another bad route): it still runs what it ran at the first NACK.
    s.handle_snapshot(at("5", "worse"));
    let again = s.poll_response(Instant::now()).expect("another bad route");
    s.handle_request(DiscoveryRequest {
        resource_names: vec!["main".into()],
        ..nack(Route, &r.version, &again.nonce, "still bad")
    })
    .expect("nack");
    assert_eq!(runs(&s), first);
}

// === P6, P7: stale nonces, superseded requests ===

#[test]
fn p6_a_request_with_a_stale_nonce_gets_no_response() {
    let (mut s, v1) = ads_with_acked_cds(snap(&[(Cluster, "c", "1")]));
    s.handle_snapshot(snap(&[(Cluster, "c", "2")]));
    let v2 = s.poll_response(Instant::now()).expect("v2");
    // A late request carrying v1's nonce: ignored, no ACK recorded, nothing sent.
    s.handle_request(req(Cluster, &[], &v1.version, &v1.nonce))
        .expect("stale is not an error");
    assert!(s.poll_response(Instant::now()).is_none());
    assert!(matches!(s.state(Cluster), SyncState::Sent { .. }));
    assert!(std::iter::from_fn(|| s.poll_event()).any(|e| matches!(e, Event::Stale { .. })));
    s.handle_request(req(Cluster, &[], &v2.version, &v2.nonce))
        .expect("ack");
    assert!(matches!(s.state(Cluster), SyncState::Acked { .. }));
}

#[test]
fn p7_the_latest_request_supersedes_earlier_ones() {
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[(Endpoint, "a", "1"), (Endpoint, "b", "1")]));
    s.handle_request(req(Endpoint, &["a"], "", "")).expect("ok");
    s.handle_request(req(Endpoint, &["b"], "", "")).expect("ok");
    let out = drain(&mut s);
    assert_eq!(out.len(), 1, "one answer, to the latest request");
    assert_eq!(names(&out[0]), ["b"]);
}

/// P7: an ACK whose names the server left undecoded because they repeat those taken in
/// last keeps the subscription as it was, and is still an ACK (P4); a stale one (P6), or one
/// of a type the server does not serve (P33), is not one whose names the stream took in.
#[test]
fn p7_repeated_names_keep_the_subscription_and_say_which_type_took_them() {
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[(Endpoint, "a", "1"), (Endpoint, "b", "1")]));
    let took = s.handle_request_repeating(req(Endpoint, &["a"], "", ""), false);
    assert_eq!(took, Ok(Some(Endpoint)));
    let r1 = s.poll_response(Instant::now()).expect("a");
    assert_eq!(names(&r1), ["a"]);
    let repeat = |version: &str, nonce: &str| req(Endpoint, &[], version, nonce);
    let took = s.handle_request_repeating(repeat(&r1.version, &r1.nonce), true);
    assert_eq!(took, Ok(Some(Endpoint)));
    assert!(
        matches!(s.state(Endpoint), SyncState::Acked { .. }),
        "an ACK"
    );
    // Still "a" alone: a change to "b" sends nothing, one to "a" sends it.
    s.handle_snapshot(snap(&[(Endpoint, "a", "1"), (Endpoint, "b", "2")]));
    assert!(s.poll_response(Instant::now()).is_none());
    s.handle_snapshot(snap(&[(Endpoint, "a", "2"), (Endpoint, "b", "2")]));
    let r2 = s.poll_response(Instant::now()).expect("a again");
    assert_eq!(names(&r2), ["a"]);
    // An answer to the older response: its names were not taken in.
    let took = s.handle_request_repeating(repeat(&r1.version, &r1.nonce), true);
    assert_eq!(took, Ok(None));
    assert!(matches!(s.state(Endpoint), SyncState::Sent { .. }));
    let took = s.handle_request_repeating(repeat(&r2.version, &r2.nonce), true);
    assert_eq!(took, Ok(Some(Endpoint)));
    let took = s.handle_request_repeating(unknown(&["x"], "", ""), false);
    assert_eq!(
        took,
        Ok(None),
        "an unknown type's names are not a served type's"
    );
    // Names listed again are taken in as ever: now "b" alone.
    let took = s.handle_request_repeating(req(Endpoint, &["b"], &r2.version, ""), false);
    assert_eq!(took, Ok(Some(Endpoint)));
    let r3 = s.poll_response(Instant::now()).expect("b");
    assert_eq!(names(&r3), ["b"]);
}

// === P8, P9: when to send ===

#[test]
fn p8_no_unprompted_resend_of_an_identical_set() {
    let (mut s, _) = ads_with_acked_cds(snap(&[(Cluster, "c", "1"), (Listener, "l", "1")]));
    s.handle_snapshot(snap(&[(Cluster, "c", "1"), (Listener, "l", "1")]));
    assert!(s.poll_response(Instant::now()).is_none());
    // A change to a type the client does not subscribe to: nothing.
    s.handle_snapshot(snap(&[(Cluster, "c", "1"), (Listener, "l", "2")]));
    assert!(s.poll_response(Instant::now()).is_none());
}

#[test]
fn p8_named_subscription_ignores_changes_to_other_names() {
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[(Endpoint, "a", "1"), (Endpoint, "b", "1")]));
    s.handle_request(req(Endpoint, &["a"], "", "")).expect("ok");
    let r = s.poll_response(Instant::now()).expect("a");
    s.handle_request(req(Endpoint, &["a"], &r.version, &r.nonce))
        .expect("ack");
    s.handle_snapshot(snap(&[(Endpoint, "a", "1"), (Endpoint, "b", "2")]));
    assert!(s.poll_response(Instant::now()).is_none());
}

#[test]
fn p9_a_grown_name_set_gets_the_new_names_even_if_sent_before() {
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[(Endpoint, "a", "1"), (Endpoint, "b", "1")]));
    s.handle_request(req(Endpoint, &["a"], "", "")).expect("ok");
    let r1 = s.poll_response(Instant::now()).expect("a");
    s.handle_request(req(Endpoint, &["a", "b"], &r1.version, &r1.nonce))
        .expect("grow");
    let r2 = s.poll_response(Instant::now()).expect("b is new");
    assert_eq!(names(&r2), ["b"], "EDS carries what the client lacks (P10)");
    // Drop b, then ask for it again: it is sent again though unchanged.
    s.handle_request(req(Endpoint, &["a"], &r2.version, &r2.nonce))
        .expect("shrink");
    assert!(
        s.poll_response(Instant::now()).is_none(),
        "shrinking needs no response"
    );
    s.handle_request(req(Endpoint, &["a", "b"], &r2.version, &r2.nonce))
        .expect("grow again");
    let r3 = s.poll_response(Instant::now()).expect("b again");
    assert_eq!(names(&r3), ["b"]);
}

// === P10, P11, P12: contents ===

#[test]
fn p10_lds_and_cds_carry_the_full_set_and_absence_deletes() {
    let (mut s, r1) = ads_with_acked_cds(snap(&[(Cluster, "a", "1"), (Cluster, "b", "1")]));
    assert_eq!(names(&r1), ["a", "b"]);
    s.handle_snapshot(snap(&[(Cluster, "a", "1")]));
    let r2 = s
        .poll_response(Instant::now())
        .expect("deletion is a change");
    assert_eq!(names(&r2), ["a"]);
    s.handle_request(req(Cluster, &[], &r2.version, &r2.nonce))
        .expect("ack");
    s.handle_snapshot(snap(&[]));
    let r3 = s
        .poll_response(Instant::now())
        .expect("empty set deletes all");
    assert!(r3.resources.is_empty());
}

#[test]
fn p10_other_types_deletion_needs_no_response() {
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[(Route, "r1", "1"), (Route, "r2", "1")]));
    s.handle_request(req(Route, &["r1", "r2"], "", ""))
        .expect("ok");
    let r = s.poll_response(Instant::now()).expect("routes");
    s.handle_request(req(Route, &["r1", "r2"], &r.version, &r.nonce))
        .expect("ack");
    s.handle_snapshot(snap(&[(Route, "r1", "1")]));
    // No resource goes again: the only news is r2's NOT_FOUND (P32).
    let gone = s.poll_response(Instant::now()).expect("r2 not found");
    assert!(gone.resources.is_empty());
    assert_eq!(gone.not_found, ["r2"]);
    s.handle_request(req(Route, &["r1", "r2"], &gone.version, &gone.nonce))
        .expect("ack");
    assert!(s.poll_response(Instant::now()).is_none());
    // ... and when r2 comes back it is sent (the client may have dropped it).
    s.handle_snapshot(snap(&[(Route, "r1", "1"), (Route, "r2", "1")]));
    let back = s.poll_response(Instant::now()).expect("r2 back");
    assert_eq!(names(&back), ["r2"]);
}

#[test]
fn p10_other_types_carry_only_what_changed() {
    let mut s = SotwStream::new(Variant::Aggregated);
    let many: Vec<_> = (0..50).map(|i| format!("e{i}")).collect();
    fn items<'a>(names: &'a [String], e7: &'a str) -> Vec<(ResourceType, &'a str, &'a str)> {
        names
            .iter()
            .map(|n| (Endpoint, n.as_str(), if n == "e7" { e7 } else { "1" }))
            .collect()
    }
    let wanted: Vec<&str> = many.iter().map(String::as_str).collect();
    s.handle_snapshot(snap(&items(&many, "1")));
    s.handle_request(req(Endpoint, &wanted, "", ""))
        .expect("ok");
    let all = s
        .poll_response(Instant::now())
        .expect("first response: everything subscribed");
    assert_eq!(all.resources.len(), 50);
    s.handle_request(req(Endpoint, &wanted, &all.version, &all.nonce))
        .expect("ack");
    s.handle_snapshot(snap(&items(&many, "2")));
    let one = s.poll_response(Instant::now()).expect("e7 changed");
    assert_eq!(names(&one), ["e7"]);
    assert_ne!(one.version, all.version);
}

#[test]
fn p11_a_missing_name_is_remembered_and_sent_when_it_appears() {
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[]));
    s.handle_request(req(Endpoint, &["later"], "", ""))
        .expect("ok");
    // P32: told at once that it does not exist, with nothing else.
    let missing = s.poll_response(Instant::now()).expect("not found");
    assert!(missing.resources.is_empty());
    assert_eq!(missing.not_found, ["later"]);
    s.handle_request(req(Endpoint, &["later"], &missing.version, &missing.nonce))
        .expect("ack");
    assert!(s.poll_response(Instant::now()).is_none());
    s.handle_snapshot(snap(&[(Endpoint, "later", "1")]));
    let r = s
        .poll_response(Instant::now())
        .expect("sent when it appears");
    assert_eq!(names(&r), ["later"]);
}

#[test]
fn p12_a_name_is_never_twice_in_one_response() {
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[(Cluster, "a", "1")]));
    s.handle_request(req(Cluster, &["a", "a", "*", "a"], "", ""))
        .expect("ok");
    let r = s.poll_response(Instant::now()).expect("a");
    assert_eq!(names(&r), ["a"]);
}

// === P13: reconnecting ===

#[test]
fn p13_reconnect_with_current_version_resends_nothing_until_a_change() {
    let (_, r) = ads_with_acked_cds(snap(&[(Cluster, "a", "1")]));
    // A new stream, the client says it has r's version.
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[(Cluster, "a", "1")]));
    s.handle_request(req(Cluster, &[], &r.version, ""))
        .expect("ok");
    assert!(s.poll_response(Instant::now()).is_none());
    assert_eq!(
        s.state(Cluster),
        &SyncState::Acked {
            version: r.version.clone()
        }
    );
    s.handle_snapshot(snap(&[(Cluster, "a", "2")]));
    assert!(
        s.poll_response(Instant::now()).is_some(),
        "a change is sent"
    );
}

#[test]
fn p13_reconnect_with_an_old_version_gets_the_current_set() {
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[(Cluster, "a", "2")]));
    s.handle_request(req(Cluster, &[], "some-old-version", ""))
        .expect("ok");
    assert!(s.poll_response(Instant::now()).is_some());
}

#[test]
fn p13_named_types_are_resent_on_a_new_stream() {
    let mut s = SotwStream::new(Variant::Aggregated);
    let snapshot = snap(&[(Endpoint, "a", "1")]);
    let version = snapshot.get(Endpoint).version.clone();
    s.handle_snapshot(snapshot);
    s.handle_request(req(Endpoint, &["a"], &version, ""))
        .expect("ok");
    assert!(s.poll_response(Instant::now()).is_some());
}

/// P9, P13 for named types: a client back on a new stream with the version of exactly the
/// names it asks for is sent them all the same. Envoy forgets what it stops asking for and
/// keeps the version: here it dropped `b`, asked for it again, and the stream ended before
/// the answer; it comes back with `[a, b]` at the version that had `b`, and holds no `b`.
#[test]
fn p9_p13_a_named_selection_at_its_version_is_sent_again_on_a_new_stream() {
    let snapshot = snap(&[
        (Endpoint, "a", "1"),
        (Endpoint, "b", "1"),
        (Endpoint, "c", "1"),
    ]);
    let mut first = SotwStream::new(Variant::Aggregated);
    first.handle_snapshot(Arc::clone(&snapshot));
    first
        .handle_request(req(Endpoint, &["a", "b"], "", ""))
        .expect("ok");
    let r = first.poll_response(Instant::now()).expect("sent");
    assert_ne!(
        r.version,
        snapshot.get(Endpoint).version,
        "not the type's version"
    );
    first
        .handle_request(req(Endpoint, &["a", "b"], &r.version, &r.nonce))
        .expect("ack");
    // It drops `b`, then asks for it again: on this stream `b` goes again (P9)...
    first
        .handle_request(req(Endpoint, &["a"], &r.version, &r.nonce))
        .expect("ok");
    assert!(first.poll_response(Instant::now()).is_none());
    first
        .handle_request(req(Endpoint, &["a", "b"], &r.version, &r.nonce))
        .expect("ok");
    let again = first.poll_response(Instant::now()).expect("b again");
    assert_eq!(names(&again), ["b"]);
    // ...but the stream ends before it arrives.
    let mut back = SotwStream::new(Variant::Aggregated);
    back.handle_snapshot(Arc::clone(&snapshot));
    back.handle_request(req(Endpoint, &["a", "b"], &r.version, ""))
        .expect("ok");
    let sent = back.poll_response(Instant::now()).expect("sent whole");
    assert_eq!(names(&sent), ["a", "b"]);
    assert_eq!(
        sent.version, r.version,
        "the same selection, the same version"
    );
}

/// P6, P9: names a stale request drops are forgotten too: dropped and asked for again while
/// a newer response was on its way, a name goes again.
#[test]
fn p6_p9_a_name_dropped_by_a_stale_request_goes_again_when_asked_for() {
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[(Endpoint, "a", "1"), (Endpoint, "b", "1")]));
    s.handle_request(req(Endpoint, &["a", "b"], "", ""))
        .expect("ok");
    let r1 = s.poll_response(Instant::now()).expect("sent");
    s.handle_request(req(Endpoint, &["a", "b"], &r1.version, &r1.nonce))
        .expect("ack");
    s.handle_snapshot(snap(&[(Endpoint, "a", "2"), (Endpoint, "b", "1")]));
    let r2 = s.poll_response(Instant::now()).expect("a changed");
    assert_eq!(names(&r2), ["a"]);
    // Before it takes r2 it drops `b` and asks for it again, both with r1's nonce (stale).
    s.handle_request(req(Endpoint, &["a"], &r1.version, &r1.nonce))
        .expect("stale");
    s.handle_request(req(Endpoint, &["a", "b"], &r1.version, &r1.nonce))
        .expect("stale");
    assert!(
        s.poll_response(Instant::now()).is_none(),
        "P6: not answered"
    );
    s.handle_request(req(Endpoint, &["a", "b"], &r2.version, &r2.nonce))
        .expect("ack");
    let r3 = s.poll_response(Instant::now()).expect("b again");
    assert_eq!(names(&r3), ["b"]);
}

/// P13 for named types, the other side: a client back with one more name (whose resource
/// did not change), or with a version of a selection that changed since, is sent its whole
/// selection: a version proves only the exact selection it was computed from.
#[test]
fn p13_one_more_name_or_a_changed_selection_is_sent_on_a_new_stream() {
    let snapshot = snap(&[(Endpoint, "a", "1"), (Endpoint, "b", "1")]);
    let mut first = SotwStream::new(Variant::Aggregated);
    first.handle_snapshot(Arc::clone(&snapshot));
    first
        .handle_request(req(Endpoint, &["a"], "", ""))
        .expect("ok");
    let r = first.poll_response(Instant::now()).expect("sent");

    let mut more = SotwStream::new(Variant::Aggregated);
    more.handle_snapshot(Arc::clone(&snapshot));
    more.handle_request(req(Endpoint, &["a", "b"], &r.version, ""))
        .expect("ok");
    let sent = more.poll_response(Instant::now()).expect("sent");
    assert_eq!(names(&sent), ["a", "b"]);

    let mut changed = SotwStream::new(Variant::Aggregated);
    changed.handle_snapshot(snap(&[(Endpoint, "a", "2"), (Endpoint, "b", "1")]));
    changed
        .handle_request(req(Endpoint, &["a"], &r.version, ""))
        .expect("ok");
    let sent = changed.poll_response(Instant::now()).expect("sent");
    assert_eq!(names(&sent), ["a"]);
}

/// Model over random reconnects (P13, P8, P9): a simulated Envoy subscribes to random names,
/// applies and ACKs responses (not always as soon as they are sent: a stream may end with
/// some on the way), and now and then reconnects on a new stream, asking for its names with
/// the version it last accepted, while the snapshot changes. Envoy forgets what it no longer
/// asks for and keeps its version: so a name dropped and asked for again, the stream gone
/// before the answer came, comes back with a version that names it. On a new stream every
/// name it asks for that exists goes again (P9: the set grows from nothing); once quiet it
/// holds every name it asks for that exists, at the current version.
#[test]
fn p9_p13_model_no_client_is_left_without_a_resource_it_asks_for() {
    let resent = std::cell::Cell::new(0);
    crate::testing::on_tapes(300, |rand| {
        resent.set(resent.get() + p13_model_run(rand));
    });
    assert!(
        resent.get() > 50,
        "too few reconnects to mean much: {}",
        resent.get()
    );
}

/// One run of the reconnect model; panics on a violation. Returns how many reconnects were
/// answered with every name asked for.
fn p13_model_run(rand: &mut dyn FnMut(u64) -> u64) -> usize {
    use std::collections::{BTreeMap, VecDeque};
    let mut resent = 0;
    let pick = |rand: &mut dyn FnMut(u64) -> u64| -> Vec<&'static str> {
        let all = ["a", "b", "c", "d"];
        let mut names: Vec<&str> = all.iter().copied().filter(|_| rand(2) == 0).collect();
        if names.is_empty() {
            names.push(all[rand(4) as usize]);
        }
        names
    };
    let random_snapshot = |rand: &mut dyn FnMut(u64) -> u64| {
        let mut items: Vec<(ResourceType, &str, &str)> = Vec::new();
        for n in ["a", "b", "c", "d"] {
            if rand(4) > 0 {
                items.push((Endpoint, n, ["1", "2"][rand(2) as usize]));
            }
        }
        snap(&items)
    };
    // The server decides after every input (as `server` drives a stream); what it sends
    // waits in `inbox` until the client takes it.
    let drain = |stream: &mut SotwStream, inbox: &mut VecDeque<Response>| {
        while let Some(r) = stream.poll_response(Instant::now()) {
            inbox.push_back(r);
        }
    };
    let mut current = random_snapshot(rand);
    let mut stream = SotwStream::new(Variant::Aggregated);
    let mut inbox = VecDeque::new();
    stream.handle_snapshot(Arc::clone(&current));
    let mut wanted = pick(rand);
    let mut held: BTreeMap<String, String> = BTreeMap::new();
    let mut accepted = String::new();
    let mut nonce = String::new();
    stream
        .handle_request(req(Endpoint, &wanted, "", ""))
        .expect("ok");
    drain(&mut stream, &mut inbox);
    for round in 0..12 {
        match rand(3) {
            0 => {
                current = random_snapshot(rand);
                stream.handle_snapshot(Arc::clone(&current));
            }
            1 => {
                wanted = pick(rand);
                // Envoy forgets what it no longer asks for.
                held.retain(|n, _| wanted.contains(&n.as_str()));
                stream
                    .handle_request(req(Endpoint, &wanted, &accepted, &nonce))
                    .expect("ok");
            }
            _ => {
                // A new stream (a server restart, say): the same names, the version it last
                // accepted, what it holds kept; what was on the way is lost.
                inbox.clear();
                stream = SotwStream::new(Variant::Aggregated);
                stream.handle_snapshot(Arc::clone(&current));
                stream
                    .handle_request(req(Endpoint, &wanted, &accepted, ""))
                    .expect("ok");
                nonce.clear();
                let exist: Vec<&str> = wanted
                    .iter()
                    .copied()
                    .filter(|n| current.get(Endpoint).resources.contains_key(*n))
                    .collect();
                if !exist.is_empty() {
                    let r = stream
                        .poll_response(Instant::now())
                        .expect("what it asks for goes again (P9)");
                    assert_eq!(names(&r), exist);
                    inbox.push_back(r);
                    resent += 1;
                }
            }
        }
        drain(&mut stream, &mut inbox);
        // Answers are not always taken at once: a stream may end before.
        if rand(2) == 0 && round < 11 {
            continue;
        }
        while let Some(r) = inbox.pop_front() {
            for res in &r.resources {
                held.insert(res.name.clone(), res.version.clone());
            }
            accepted = r.version.clone();
            nonce = r.nonce.clone();
            stream
                .handle_request(req(Endpoint, &wanted, &accepted, &nonce))
                .expect("ack");
            drain(&mut stream, &mut inbox);
        }
        for name in &wanted {
            if let Some(r) = current.get(Endpoint).resources.get(*name) {
                assert_eq!(
                    held.get(*name),
                    Some(&r.version),
                    "asks for {name}, which exists at {}, and holds {:?}",
                    r.version,
                    held.get(*name)
                );
            }
        }
    }
    resent
}

// === P14..P16: wildcards ===

#[test]
fn p14_p15_legacy_wildcard_gets_everything_and_empty_cds_is_sent() {
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[]));
    s.handle_request(req(Cluster, &[], "", "")).expect("ok");
    let r = s
        .poll_response(Instant::now())
        .expect("an empty CDS answer tells there are none");
    assert!(r.resources.is_empty());
    s.handle_request(req(Cluster, &[], &r.version, &r.nonce))
        .expect("ack");
    s.handle_snapshot(snap(&[(Cluster, "x", "1"), (Cluster, "y", "1")]));
    assert_eq!(
        names(&s.poll_response(Instant::now()).expect("all")),
        ["x", "y"]
    );
}

#[test]
fn p16_sotw_wildcard_sequence_on_a_stream() {
    let all = snap(&[(Cluster, "a", "1"), (Cluster, "b", "1")]);
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(all);
    s.handle_request(req(Cluster, &[], "", "")).expect("[]");
    let r1 = s.poll_response(Instant::now()).expect("wildcard");
    assert_eq!(names(&r1), ["a", "b"]);
    s.handle_request(req(Cluster, &["*", "a"], &r1.version, &r1.nonce))
        .expect("[*, a]");
    assert!(s.poll_response(Instant::now()).is_none(), "same set");
    let last = r1;
    s.handle_request(req(Cluster, &["a"], &last.version, &last.nonce))
        .expect("[a]");
    let r2 = s
        .poll_response(Instant::now())
        .expect("CDS shrinks to a: full state");
    assert_eq!(names(&r2), ["a"]);
    s.handle_request(req(Cluster, &[], &r2.version, &r2.nonce))
        .expect("[] now means nothing");
    let r3 = s.poll_response(Instant::now()).expect("nothing");
    assert!(r3.resources.is_empty());
}

// === P28, P30: warming and order ===

#[test]
fn p30_ads_sends_types_in_make_before_break_order() {
    let mut s = SotwStream::new(Variant::Aggregated);
    // Requests arrive in the "wrong" order; responses still come out CDS, EDS, LDS, RDS.
    s.handle_request(req(Route, &["r"], "", "")).expect("ok");
    s.handle_request(req(Listener, &[], "", "")).expect("ok");
    s.handle_request(req(Endpoint, &["c"], "", "")).expect("ok");
    s.handle_request(req(Cluster, &[], "", "")).expect("ok");
    s.handle_snapshot(snap(&[
        (Route, "r", "1"),
        (Listener, "l", "1"),
        (Endpoint, "c", "1"),
        (Cluster, "c", "1"),
    ]));
    let order: Vec<_> = drain(&mut s).into_iter().map(|r| r.kind).collect();
    assert_eq!(order, [Cluster, Endpoint, Listener, Route]);
}

#[test]
fn p28_a_changed_cluster_is_followed_by_its_unchanged_endpoints() {
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[
        (Cluster, "c", "1"),
        (Cluster, "d", "1"),
        (Endpoint, "c", "e"),
        (Endpoint, "d", "e"),
    ]));
    s.handle_request(req(Cluster, &[], "", "")).expect("ok");
    s.handle_request(req(Endpoint, &["c", "d"], "", ""))
        .expect("ok");
    for r in drain(&mut s) {
        let kind = r.kind;
        s.handle_request(req(
            kind,
            if kind == Cluster { &[] } else { &["c", "d"] },
            &r.version,
            &r.nonce,
        ))
        .expect("ack");
    }
    // Only cluster c's content changes (say, its connect_timeout); endpoints do not.
    s.handle_snapshot(snap(&[
        (Cluster, "c", "2"),
        (Cluster, "d", "1"),
        (Endpoint, "c", "e"),
        (Endpoint, "d", "e"),
    ]));
    let out = drain(&mut s);
    assert_eq!(out.len(), 2, "CDS, then EDS right after");
    assert_eq!(out[0].kind, Cluster);
    assert_eq!(out[1].kind, Endpoint);
    assert!(names(&out[1]).contains(&"c".to_string()));
    // Once sent, no further re-send.
    s.handle_request(req(Endpoint, &["c", "d"], &out[1].version, &out[1].nonce))
        .expect("ack");
    assert!(s.poll_response(Instant::now()).is_none());
}

#[test]
fn p10_p28_streams_selecting_the_same_are_sent_the_selection_as_one_shared_list() {
    let items = |c: &'static str| {
        snap(&[
            (Cluster, "c", c),
            (Cluster, "d", c),
            (Endpoint, "c", "e"),
            (Endpoint, "d", "e"),
        ])
    };
    let (first, next) = (items("1"), items("2"));
    // Both alive at once: streams share what they name while one holds it.
    let mut streams: Vec<SotwStream> = (0..2)
        .map(|_| SotwStream::new(Variant::Aggregated))
        .collect();
    let pushed: Vec<Vec<Response>> = streams
        .iter_mut()
        .map(|s| {
            s.handle_snapshot(Arc::clone(&first));
            s.handle_request(req(Cluster, &[], "", "")).expect("ok");
            s.handle_request(req(Endpoint, &["c", "d"], "", ""))
                .expect("ok");
            for r in drain(s) {
                let names: &[&str] = if r.kind == Cluster { &[] } else { &["c", "d"] };
                s.handle_request(req(r.kind, names, &r.version, &r.nonce))
                    .expect("ack");
            }
            // Every cluster changes: the whole set (P10), then every endpoint again (P28).
            s.handle_snapshot(Arc::clone(&next));
            drain(s)
        })
        .collect();
    for out in &pushed {
        assert_eq!(out.len(), 2, "{out:#?}");
        assert_eq!(
            (out[0].kind, names(&out[0])),
            (Cluster, vec!["c".into(), "d".into()])
        );
        assert_eq!(
            (out[1].kind, names(&out[1])),
            (Endpoint, vec!["c".into(), "d".into()])
        );
    }
    for (a, b) in pushed[0].iter().zip(&pushed[1]) {
        match (&a.resources, &b.resources) {
            (Resources::Shared(a), Resources::Shared(b)) => {
                assert!(Arc::ptr_eq(a, b), "one list, not the same names twice")
            }
            other => panic!("not shared: {other:#?}"),
        }
    }
}

#[test]
fn p28_only_endpoints_the_client_has_go_again_and_what_it_lacks_goes_once_asked_for() {
    let mut s = SotwStream::new(Variant::Aggregated);
    let items = |d: &'static str| {
        snap(&[
            (Cluster, "c", "1"),
            (Cluster, "d", d),
            (Endpoint, "c", "e"),
            (Endpoint, "d", "e"),
        ])
    };
    s.handle_snapshot(items("1"));
    s.handle_request(req(Cluster, &[], "", "")).expect("ok");
    s.handle_request(req(Endpoint, &["c"], "", "")).expect("ok");
    for r in drain(&mut s) {
        let names: &[&str] = if r.kind == Cluster { &[] } else { &["c"] };
        s.handle_request(req(r.kind, names, &r.version, &r.nonce))
            .expect("ack");
    }
    // Cluster d changes: the client does not take d's endpoints, so EDS has nothing.
    s.handle_snapshot(items("2"));
    let out = drain(&mut s);
    assert_eq!(out.len(), 1, "{out:#?}");
    assert_eq!(out[0].kind, Cluster);
    s.handle_request(req(Cluster, &[], &out[0].version, &out[0].nonce))
        .expect("ack");
    // Asked for later, d's endpoints come (new to it), and c's do not come again.
    let eds_version = s.state(Endpoint).sent_version().unwrap_or("").to_string();
    s.handle_request(req(Endpoint, &["c", "d"], &eds_version, ""))
        .expect("ok");
    let r = s.poll_response(Instant::now()).expect("d's endpoints");
    assert_eq!((r.kind, names(&r)), (Endpoint, vec!["d".to_string()]));
    s.handle_request(req(Endpoint, &["c", "d"], &r.version, &r.nonce))
        .expect("ack");
    assert!(s.poll_response(Instant::now()).is_none());
}

#[test]
fn p28_endpoints_wait_for_the_pending_request_then_go() {
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[(Cluster, "c", "1"), (Endpoint, "c", "e")]));
    s.handle_request(req(Cluster, &[], "", "")).expect("ok");
    s.handle_request(req(Endpoint, &["c"], "", "")).expect("ok");
    let first = drain(&mut s);
    let (cds, eds) = (&first[0], &first[1]);
    s.handle_request(req(Cluster, &[], &cds.version, &cds.nonce))
        .expect("ack cds");
    // EDS not ACKed yet; the cluster changes.
    s.handle_snapshot(snap(&[(Cluster, "c", "2"), (Endpoint, "c", "e")]));
    let out = drain(&mut s);
    assert_eq!(out.len(), 1, "only CDS: EDS has a response in flight");
    s.handle_request(req(Endpoint, &["c"], &eds.version, &eds.nonce))
        .expect("ack eds");
    let eds2 = s
        .poll_response(Instant::now())
        .expect("endpoints re-sent once EDS may send");
    assert_eq!(eds2.kind, Endpoint);
}

// === Random sequences ===

/// Random sequences of requests (ACK, NACK, stale nonce, new names, garbage types) and
/// snapshots: never a panic, never a response without a pending request, never a
/// duplicate name or nonce.
#[test]
fn random_sequences_keep_the_invariants() {
    crate::testing::on_tapes(300, |rand| {
        let variant = if rand(2) == 0 {
            Variant::Aggregated
        } else {
            Variant::Single(ResourceType::ALL[rand(4) as usize])
        };
        let mut s = SotwStream::new(variant);
        let mut nonces = std::collections::HashSet::new();
        let mut sent: Vec<Response> = Vec::new();
        for _ in 0..40 {
            match rand(4) {
                0 => {
                    let items: Vec<_> = (0..rand(6))
                        .map(|_| {
                            let kind = ResourceType::ALL[rand(4) as usize];
                            (
                                kind,
                                ["a", "b", "c"][rand(3) as usize],
                                ["1", "2"][rand(2) as usize],
                            )
                        })
                        .collect();
                    s.handle_snapshot(snap(&items));
                }
                _ => {
                    let kind = ResourceType::ALL[rand(4) as usize];
                    let names: Vec<&str> = (0..rand(3))
                        .map(|_| ["a", "b", "c", "*"][rand(4) as usize])
                        .collect();
                    let nonce = match rand(3) {
                        0 => String::new(),
                        _ if sent.is_empty() => "nope".into(),
                        _ => sent[rand(sent.len() as u64) as usize].nonce.clone(),
                    };
                    let mut r = req(kind, &names, "v", &nonce);
                    if rand(5) == 0 {
                        r.error_detail = Some(Status::default());
                    }
                    if rand(20) == 0 {
                        r.type_url = "type.googleapis.com/garbage".into();
                    }
                    let _ = s.handle_request(r);
                }
            }
            for r in drain(&mut s) {
                assert!(nonces.insert(r.nonce.clone()), "duplicate nonce");
                let mut n = names(&r);
                let len = n.len();
                n.dedup();
                assert_eq!(n.len(), len, "duplicate name");
                if let Variant::Single(kind) = variant {
                    assert_eq!(r.kind, kind);
                }
                sent.push(r);
            }
            assert!(
                s.poll_response(Instant::now()).is_none(),
                "drained means drained"
            );
        }
    });
}

// === Model-based: a simulated client converges to the snapshot ===

/// A client that applies responses the way clients do (P10, P14: a response to a wildcard
/// replaces the whole set, whatever the type, as Envoy takes it; LDS and CDS replace it for
/// names too, as gRPC takes them; otherwise a response adds and updates) and ACKs each with
/// its current names. After any random sequence of snapshot and subscription changes, once
/// nothing more is sent, its view of every type must be exactly what its names select from
/// the snapshot (computed here independently of `Subscription`) where responses replace the
/// set, and contain it otherwise. A response that left out something the client should keep
/// would lose it from the view.
#[test]
fn model_client_view_converges_to_the_selection() {
    use std::collections::BTreeMap;
    // Every type SotW serves (VHDS and LEDS are Incremental only), some named, some wildcard.
    let kinds = [
        Cluster,
        Endpoint,
        Listener,
        Route,
        ResourceType::ScopedRoute,
        ResourceType::Secret,
        ResourceType::Runtime,
        ResourceType::ExtensionConfig,
    ];
    let pick = |rand: &mut dyn FnMut(u64) -> u64| kinds[rand(kinds.len() as u64) as usize];
    crate::testing::on_tapes(200, |rand| {
        let mut s = SotwStream::new(Variant::Aggregated);
        let mut view: BTreeMap<ResourceType, BTreeMap<String, String>> = BTreeMap::new();
        let mut names: BTreeMap<ResourceType, Vec<&str>> = BTreeMap::new();
        let mut named_ever: BTreeMap<ResourceType, bool> = BTreeMap::new();
        let mut last: BTreeMap<ResourceType, (String, String)> = BTreeMap::new();
        let mut current = snap(&[]);
        s.handle_snapshot(Arc::clone(&current));
        for _step in 0..30 {
            if rand(3) == 0 {
                let items: Vec<_> = (0..rand(8))
                    .map(|_| {
                        (
                            pick(rand),
                            ["a", "b", "c", "d"][rand(4) as usize],
                            ["1", "2", "3"][rand(3) as usize],
                        )
                    })
                    .collect();
                current = snap(&items);
                s.handle_snapshot(Arc::clone(&current));
            } else {
                let kind = pick(rand);
                let list: Vec<&str> = (0..rand(4))
                    .map(|_| ["a", "b", "c", "d", "*"][rand(5) as usize])
                    .collect();
                if !list.is_empty() {
                    named_ever.insert(kind, true);
                }
                names.insert(kind, list.clone());
                let (version, nonce) = last.get(&kind).cloned().unwrap_or_default();
                s.handle_request(req(kind, &list, &version, &nonce))
                    .expect("valid");
            }
            // Run to quiescence: apply and ACK every response.
            let mut steps = 0;
            while let Some(r) = s.poll_response(Instant::now()) {
                steps += 1;
                assert!(steps < 50, "never quiesces");
                let v = view.entry(r.kind).or_default();
                let list = names.get(&r.kind).cloned().unwrap_or_default();
                let wildcard = list.contains(&"*")
                    || (list.is_empty() && !named_ever.get(&r.kind).copied().unwrap_or(false));
                if wildcard || matches!(r.kind, Cluster | Listener) {
                    v.clear();
                }
                for res in &r.resources {
                    v.insert(res.name.clone(), res.version.clone());
                }
                last.insert(r.kind, (r.version.clone(), r.nonce.clone()));
                let list = names.get(&r.kind).cloned().unwrap_or_default();
                s.handle_request(req(r.kind, &list, &r.version, &r.nonce))
                    .expect("ack");
            }
            // Compare with the model's selection.
            for kind in kinds {
                let Some(list) = names.get(&kind) else {
                    continue; // never requested
                };
                let wildcard = list.contains(&"*")
                    || (list.is_empty() && !named_ever.get(&kind).copied().unwrap_or(false));
                let expected: BTreeMap<String, String> = current
                    .get(kind)
                    .resources
                    .iter()
                    .filter(|(n, _)| wildcard || list.contains(&n.as_str()))
                    .map(|(n, r)| (n.clone(), r.version.clone()))
                    .collect();
                // P32: the names it asks for that do not exist, and only those, are what
                // the stream reports not found (none it no longer asks for).
                let mut missing: Vec<String> = list
                    .iter()
                    .filter(|n| **n != "*" && !current.get(kind).resources.contains_key(**n))
                    .map(|n| n.to_string())
                    .collect();
                missing.sort();
                missing.dedup();
                let reported = s.status(kind).map(|t| t.not_found).unwrap_or_default();
                assert_eq!(
                    reported,
                    missing,
                    "{kind}: names not found; asks {list:?}; has {:?}",
                    current.get(kind).resources.keys().collect::<Vec<_>>()
                );
                let have = view.get(&kind).cloned().unwrap_or_default();
                if wildcard || matches!(kind, Cluster | Listener) {
                    // Before any response, a client with a named subscription to nothing
                    // that exists has an empty view, which is also right.
                    assert_eq!(have, expected, "{kind}: a whole set must match exactly");
                } else {
                    for (n, v) in &expected {
                        assert_eq!(have.get(n), Some(v), "{kind}: {n} missing or stale");
                    }
                }
            }
        }
    });
}

#[test]
fn p26_ttl_wrapping_and_refresh_only_for_resource_in_sotw_clients() {
    use crate::protocol::{FEATURE_RESOURCE_IN_SOTW, FEATURE_RESOURCE_TTL};
    use std::time::Duration;
    let ttl = Duration::from_secs(3);
    let items = [
        Arc::new(Resource::new(Endpoint, "a", "1", vec![], None).with_ttl(Some(ttl))),
        Arc::new(Resource::new(Endpoint, "b", "1", vec![], None)),
    ];
    let snapshot = Arc::new(Snapshot::from_resources(&items));
    let t0 = Instant::now();
    for (features, wraps) in [
        (vec![FEATURE_RESOURCE_TTL, FEATURE_RESOURCE_IN_SOTW], true),
        (vec![FEATURE_RESOURCE_TTL], false),
        (vec![], false),
    ] {
        let mut s = SotwStream::new(Variant::Aggregated);
        let mut first = req(Endpoint, &["a", "b"], "", "");
        first.node = Some(Node {
            client_features: features.iter().map(|f| f.to_string()).collect(),
            ..node("n1")
        });
        s.handle_request(first).expect("ok");
        s.handle_snapshot(Arc::clone(&snapshot));
        let r = s.poll_response(t0).expect("a response");
        assert_eq!(r.wrap_ttl, wraps, "{features:?}");
        let mut ack = req(Endpoint, &["a", "b"], &r.version, &r.nonce);
        ack.node = None;
        s.handle_request(ack).expect("ack");
        if wraps {
            let due = s.poll_timeout().expect("a refresh is scheduled");
            assert_eq!(due, t0 + ttl / 3);
            assert!(s.poll_response(t0).is_none(), "not before it is due");
            let refresh = s.poll_response(due).expect("refresh");
            assert_eq!(
                s.poll_timeout(),
                None,
                "nothing to wake for until the next request"
            );
            let names: Vec<_> = refresh.resources.iter().map(|r| r.name.as_str()).collect();
            assert_eq!(names, ["a"], "EDS: only the TTL'd resource, same version");
            assert_eq!(refresh.version, r.version);
        } else {
            assert_eq!(s.poll_timeout(), None, "{features:?}");
            assert!(s.poll_response(t0 + Duration::from_secs(3600)).is_none());
        }
    }
}

#[test]
fn p13_p26_a_reconnecting_client_with_the_current_version_gets_its_ttls_refreshed_at_once() {
    use crate::protocol::{FEATURE_RESOURCE_IN_SOTW, FEATURE_RESOURCE_TTL};
    use std::time::Duration;
    let items = [Arc::new(
        Resource::new(Cluster, "a", "1", vec![], None).with_ttl(Some(Duration::from_secs(3))),
    )];
    let snapshot = Arc::new(Snapshot::from_resources(&items));
    let version = snapshot.get(Cluster).version.clone();
    let mut s = SotwStream::new(Variant::Aggregated);
    let mut first = req(Cluster, &[], &version, "");
    first.node = Some(Node {
        client_features: vec![FEATURE_RESOURCE_TTL.into(), FEATURE_RESOURCE_IN_SOTW.into()],
        ..node("n1")
    });
    s.handle_request(first).expect("ok");
    s.handle_snapshot(snapshot);
    let t0 = Instant::now();
    assert!(s.poll_response(t0).is_none(), "P13: nothing new to send");
    assert_eq!(
        s.poll_timeout(),
        Some(t0),
        "but the TTL is refreshed at once"
    );
    let r = s.poll_response(t0).expect("the refresh");
    assert_eq!(r.version, version);
    assert!(r.wrap_ttl);
}

#[test]
fn p26_a_due_refresh_with_nothing_ttld_left_is_not_left_in_the_past() {
    use crate::protocol::{FEATURE_RESOURCE_IN_SOTW, FEATURE_RESOURCE_TTL};
    use std::time::Duration;
    let ttl = Duration::from_secs(3);
    let with = Arc::new(Snapshot::from_resources(&[Arc::new(
        Resource::new(Endpoint, "a", "1", vec![], None).with_ttl(Some(ttl)),
    )]));
    let mut s = SotwStream::new(Variant::Aggregated);
    let mut first = req(Endpoint, &["a"], "", "");
    first.node = Some(Node {
        client_features: vec![FEATURE_RESOURCE_TTL.into(), FEATURE_RESOURCE_IN_SOTW.into()],
        ..node("n1")
    });
    s.handle_request(first).expect("ok");
    s.handle_snapshot(with);
    let t0 = Instant::now();
    let r = s.poll_response(t0).expect("sent");
    let mut ack = req(Endpoint, &["a"], &r.version, &r.nonce);
    ack.node = None;
    s.handle_request(ack).expect("ack");
    // The client now asks for nothing; the refresh falls due with nothing to send.
    let mut other = req(Endpoint, &[], &r.version, &r.nonce);
    other.node = None;
    s.handle_request(other).expect("ok");
    let later = t0 + ttl;
    while s.poll_response(later).is_some() {}
    assert!(
        s.poll_timeout().is_none_or(|at| at > later),
        "a refresh time in the past would wake the stream in a loop"
    );
}

// === Responses over the response limit (--max-response-bytes) ===

/// Five ClusterLoadAssignments of about 450 bytes each, against a limit that takes two.
fn big_endpoints() -> (Arc<Snapshot>, Vec<&'static str>) {
    let body = "x".repeat(300);
    let names = vec!["a", "b", "c", "d", "e"];
    let items: Vec<(ResourceType, &str, &str)> = names
        .iter()
        .map(|n| (Endpoint, *n, body.as_str()))
        .collect();
    (snap(&items), names)
}

const LIMIT: usize = 2048;

/// P4/P7/P13: an EDS response over the limit goes in parts, each after the client's ACK of
/// the one before; each part's version is that of what the client then holds (never the
/// whole selection's until the last), and every resource goes exactly once.
#[test]
fn p4_p13_an_eds_response_over_the_limit_is_split_and_the_rest_follows_each_ack() {
    let (snapshot, names) = big_endpoints();
    let mut s = SotwStream::new(Variant::Aggregated).with_response_limit(LIMIT);
    s.handle_snapshot(Arc::clone(&snapshot));
    s.handle_request(req(Endpoint, &names, "", "")).expect("ok");
    let mut got = Vec::new();
    let mut versions = Vec::new();
    for _ in 0..3 {
        let parts = drain(&mut s);
        assert_eq!(parts.len(), 1, "one part at a time: {parts:?}");
        let part = &parts[0];
        assert!(
            part.resources.len() <= 2,
            "{} resources",
            part.resources.len()
        );
        got.extend(part.resources.iter().map(|r| r.name.clone()));
        versions.push(part.version.clone());
        s.handle_request(req(Endpoint, &names, &part.version, &part.nonce))
            .expect("ack");
    }
    assert_eq!(got, names, "each once, in order");
    assert!(drain(&mut s).is_empty(), "nothing after the last part");
    let whole =
        super::selection_version(snapshot.get(Endpoint).resources.values().map(Arc::as_ref));
    assert_ne!(versions[0], whole);
    assert_ne!(versions[1], whole);
    assert_eq!(
        versions[2], whole,
        "the last part's version is the selection's"
    );
    assert_eq!(
        s.state(Endpoint),
        &SyncState::Acked {
            version: whole.clone()
        }
    );
    let events: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
    let splits: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::Split { sent, left, .. } => Some((*sent, *left)),
            _ => None,
        })
        .collect();
    assert_eq!(splits, [(2, 3), (2, 1)]);

    // P13: a client back on a new stream with a part's version is sent everything.
    let mut again = SotwStream::new(Variant::Aggregated).with_response_limit(1 << 20);
    again.handle_snapshot(Arc::clone(&snapshot));
    again
        .handle_request(req(Endpoint, &names, &versions[0], ""))
        .expect("ok");
    assert_eq!(drain(&mut again)[0].resources.len(), 5);
}

/// A NACK of a part names only what that part brought; the rest still follows.
#[test]
fn p5_a_nack_of_a_part_names_that_part_and_the_rest_follows() {
    let (snapshot, wanted) = big_endpoints();
    let mut s = SotwStream::new(Variant::Aggregated).with_response_limit(LIMIT);
    s.handle_snapshot(snapshot);
    s.handle_request(req(Endpoint, &wanted, "", ""))
        .expect("ok");
    let first = drain(&mut s).remove(0);
    let rejected = DiscoveryRequest {
        error_detail: nack(Endpoint, "", &first.nonce, "bad").error_detail,
        ..req(Endpoint, &wanted, "", &first.nonce)
    };
    s.handle_request(rejected).expect("nack");
    let (_, named) = crate::testing::rejected_changes(s.state(Endpoint));
    let named: Vec<&str> = named.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(named, ["a", "b"]);
    let next = drain(&mut s);
    assert_eq!(names(&next[0]), ["c", "d"]);
}

/// P10: a CDS response carries the whole set, so over the limit it goes whole, reported in
/// an event and the type's status.
#[test]
fn p10_a_cds_response_over_the_limit_goes_whole_and_is_reported() {
    let body = "x".repeat(500);
    let items: Vec<(ResourceType, &str, &str)> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|n| (Cluster, *n, body.as_str()))
        .collect();
    let mut s = SotwStream::new(Variant::Aggregated).with_response_limit(LIMIT);
    s.handle_snapshot(snap(&items));
    s.handle_request(req(Cluster, &[], "", "")).expect("ok");
    let all = drain(&mut s);
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].resources.len(), 5);
    let events: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
    assert!(
        events.iter().any(|e| matches!(
            e,
            Event::Oversized {
                kind: Cluster,
                limit: LIMIT,
                ..
            }
        )),
        "{events:?}"
    );
    assert!(s
        .status(Cluster)
        .and_then(|t| t.oversized)
        .is_some_and(|b| b > LIMIT));
}

// === P35: xdstp names ===

#[test]
fn p35_an_xdstp_name_is_subscribed_in_canonical_form() {
    let name = "xdstp://a.test/envoy.config.listener.v3.Listener/l?a=1&b=2";
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[(Listener, name, "1")]));
    s.handle_request(req(
        Listener,
        &["xdstp://a.test/envoy.config.listener.v3.Listener/l?b=2&a=1"],
        "",
        "",
    ))
    .expect("lds");
    let r = s.poll_response(Instant::now()).expect("found");
    assert_eq!(names(&r), [name]);
    assert!(r.not_found.is_empty());
}

// === P34: LEDS is Incremental only ===

#[test]
fn p34_over_sotw_an_lb_endpoint_is_never_sent() {
    let name = "xdstp://test/envoy.config.endpoint.v3.LbEndpoint/c1/h1";
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[(ResourceType::LbEndpoint, name, "1")]));
    s.handle_request(req(ResourceType::LbEndpoint, &[name], "", ""))
        .expect("asks");
    let r = s.poll_response(Instant::now()).expect("answered");
    assert!(
        r.resources.is_empty(),
        "an LbEndpoint carries no name a SotW client could match"
    );
    assert_eq!(r.not_found, [name]);
    // A glob collection too: told at once.
    let glob = "xdstp://test/envoy.config.endpoint.v3.LbEndpoint/c1/*";
    s.handle_request(req(ResourceType::LbEndpoint, &[glob], &r.version, &r.nonce))
        .expect("asks");
    let r = s.poll_response(Instant::now()).expect("answered");
    assert_eq!(r.not_found, [glob]);
}

// === P10, P14: whole sets by subscription, not by type ===

/// Every type SotW serves (VHDS and LEDS are Incremental only).
const SOTW_TYPES: [ResourceType; 8] = [
    Cluster,
    Endpoint,
    Listener,
    Route,
    ResourceType::ScopedRoute,
    ResourceType::Secret,
    ResourceType::Runtime,
    ResourceType::ExtensionConfig,
];

/// A stream subscribed to `kind` by `names` (`[]`: the legacy wildcard), sent and ACKed the
/// first response for `first`.
fn acked(kind: ResourceType, names: &[&str], first: Arc<Snapshot>) -> (SotwStream, Response) {
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(first);
    s.handle_request(req(kind, names, "", "")).expect("ok");
    let r = s.poll_response(Instant::now()).expect("first response");
    s.handle_request(req(kind, names, &r.version, &r.nonce))
        .expect("ack");
    (s, r)
}

/// The scenario that broke Envoy's scopes: Envoy subscribes to SRDS by wildcard and takes
/// every SotW response as the whole set, removing each scope it leaves out. A change to one
/// scoped route configuration goes with every other scope; a removal is the set without it.
#[test]
fn p10_p14_a_change_to_one_wildcard_srds_scope_sends_every_scope() {
    use ResourceType::ScopedRoute as Srds;
    let three = |s2: &str| snap(&[(Srds, "s1", "1"), (Srds, "s2", s2), (Srds, "s3", "1")]);
    let (mut s, first) = acked(Srds, &[], three("1"));
    assert_eq!(names(&first), ["s1", "s2", "s3"]);
    s.handle_snapshot(three("2"));
    let changed = s.poll_response(Instant::now()).expect("s2 changed");
    assert_eq!(names(&changed), ["s1", "s2", "s3"], "the whole set");
    assert_ne!(changed.version, first.version);
    s.handle_request(req(Srds, &[], &changed.version, &changed.nonce))
        .expect("ack");
    s.handle_snapshot(snap(&[(Srds, "s1", "1"), (Srds, "s2", "2")]));
    let removed = s.poll_response(Instant::now()).expect("s3 removed");
    assert_eq!(names(&removed), ["s1", "s2"], "the set without s3");
    s.handle_request(req(Srds, &[], &removed.version, &removed.nonce))
        .expect("ack");
    // The plan's last step may follow; then an empty set deletes all.
    drain(&mut s);
    s.handle_snapshot(snap(&[]));
    let all = drain(&mut s);
    assert!(
        all.last().is_some_and(|r| r.resources.is_empty()),
        "no scope left: {all:?}"
    );
}

/// The same for every type: a wildcard subscription is answered with the whole set whatever
/// the type, and one changed resource resends the others with it.
#[test]
fn p10_p14_a_wildcard_of_any_type_gets_the_whole_set_on_every_change() {
    for kind in SOTW_TYPES {
        let two = |b: &str| snap(&[(kind, "a", "1"), (kind, "b", b)]);
        let (mut s, _) = acked(kind, &[], two("1"));
        s.handle_snapshot(two("2"));
        let changed = drain(&mut s);
        let last = changed.last().expect("a response");
        assert_eq!(names(last), ["a", "b"], "{kind}: the whole set");
        // `["*"]` is a wildcard too (P16).
        let (mut s, _) = acked(kind, &["*"], two("1"));
        s.handle_snapshot(two("2"));
        let changed = drain(&mut s);
        assert_eq!(names(changed.last().expect("sent")), ["a", "b"], "{kind}");
    }
}

/// By name, the types Envoy names (EDS, RDS, SRDS, SDS, RTDS, ECDS) get only what changed;
/// LDS and CDS get every name asked for (P10; gRPC deletes a listener or cluster left out).
#[test]
fn p10_names_get_what_changed_and_lds_cds_every_name_asked_for() {
    for kind in SOTW_TYPES {
        let two = |b: &str| snap(&[(kind, "a", "1"), (kind, "b", b)]);
        let (mut s, _) = acked(kind, &["a", "b"], two("1"));
        s.handle_snapshot(two("2"));
        let changed = drain(&mut s);
        let last = changed.last().expect("a response");
        let want: &[&str] = if matches!(kind, Cluster | Listener) {
            &["a", "b"]
        } else {
            &["b"]
        };
        assert_eq!(names(last), want, "{kind}");
    }
}

/// P9, P14: a client that held names and now asks for the wildcard gets the whole set at
/// once, even where it holds every name of it: it was never told which of the names it held
/// were deleted, and takes this response as all it has.
#[test]
fn p9_p14_a_subscription_that_becomes_a_wildcard_gets_the_whole_set() {
    use ResourceType::ScopedRoute as Srds;
    let (mut s, _) = acked(
        Srds,
        &["a", "gone"],
        snap(&[(Srds, "a", "1"), (Srds, "gone", "1")]),
    );
    s.handle_snapshot(snap(&[(Srds, "a", "1")]));
    let told = drain(&mut s);
    assert!(told.iter().all(|r| r.resources.is_empty()), "{told:?}");
    s.handle_request(req(Srds, &["*"], "", "")).expect("ok");
    let whole = s.poll_response(Instant::now()).expect("the whole set");
    assert_eq!(names(&whole), ["a"]);
}

/// P10, P28: the first answer to a wildcard of any type is sent even when the set is empty:
/// it is the whole set (none), and Envoy waits for it to finish its initial fetch (a
/// listener with scoped routes warms until its SRDS answer arrives).
#[test]
fn p10_an_empty_wildcard_is_answered_for_every_type() {
    for kind in SOTW_TYPES {
        let mut s = SotwStream::new(Variant::Aggregated);
        s.handle_snapshot(snap(&[]));
        s.handle_request(req(kind, &[], "", "")).expect("ok");
        let r = s.poll_response(Instant::now());
        assert!(
            r.as_ref().is_some_and(|r| r.resources.is_empty()),
            "{kind}: {r:?}"
        );
    }
}

/// P13 for any wildcard type: a client back on a new stream with the version of the whole
/// set it holds is sent nothing until a change, and then the whole set.
#[test]
fn p13_a_wildcard_srds_back_at_the_current_version_is_sent_nothing_until_a_change() {
    use ResourceType::ScopedRoute as Srds;
    let current = snap(&[(Srds, "s1", "1"), (Srds, "s2", "1")]);
    let (_, r) = acked(Srds, &[], Arc::clone(&current));
    let mut s = SotwStream::new(Variant::Single(Srds));
    s.handle_snapshot(Arc::clone(&current));
    s.handle_request(req(Srds, &[], &r.version, ""))
        .expect("ok");
    assert!(s.poll_response(Instant::now()).is_none(), "it has it");
    s.handle_snapshot(snap(&[(Srds, "s1", "2"), (Srds, "s2", "1")]));
    let changed = s.poll_response(Instant::now()).expect("a change");
    assert_eq!(names(&changed), ["s1", "s2"]);
}

/// A whole set is never split for the response limit (what it left out would be deleted);
/// a partial one is.
#[test]
fn p10_a_wildcard_response_over_the_limit_goes_whole_and_names_are_split() {
    use ResourceType::ScopedRoute as Srds;
    let many: Vec<(ResourceType, String)> = (0..40).map(|i| (Srds, format!("s{i:02}"))).collect();
    let items: Vec<(ResourceType, &str, &str)> =
        many.iter().map(|(k, n)| (*k, n.as_str(), "x")).collect();
    let current = snap(&items);
    let mut whole = SotwStream::new(Variant::Aggregated).with_response_limit(200);
    whole.handle_snapshot(Arc::clone(&current));
    whole.handle_request(req(Srds, &[], "", "")).expect("ok");
    let r = whole.poll_response(Instant::now()).expect("sent");
    assert_eq!(r.resources.len(), 40, "whole, over the limit");
    let mut named = SotwStream::new(Variant::Aggregated).with_response_limit(200);
    named.handle_snapshot(current);
    let all: Vec<&str> = many.iter().map(|(_, n)| n.as_str()).collect();
    named.handle_request(req(Srds, &all, "", "")).expect("ok");
    let r = named.poll_response(Instant::now()).expect("sent");
    assert!(r.resources.len() < 40, "split: {}", r.resources.len());
}

/// P32, and `/status` following the proxy: names a client asked for that do not exist are
/// reported not found; once it stops asking for them (here: `[]`, nothing), they leave the
/// report at once, though no response goes out (nothing it asks for changed). Before, they
/// stayed listed for good (found by the model above, as it was seen with a real Envoy).
#[test]
fn p32_a_name_no_longer_asked_for_leaves_the_names_not_found_at_once() {
    use ResourceType::ScopedRoute as Srds;
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[(Srds, "c", "1")]));
    s.handle_request(req(Srds, &["a", "b", "c"], "", ""))
        .expect("ok");
    let r = s
        .poll_response(Instant::now())
        .expect("c, and a and b not found");
    assert_eq!(r.not_found, ["a", "b"]);
    s.handle_request(req(Srds, &["a", "b", "c"], &r.version, &r.nonce))
        .expect("ack");
    assert_eq!(s.status(Srds).expect("asked").not_found, ["a", "b"]);
    // It drops b: b leaves the report.
    s.handle_request(req(Srds, &["a", "c"], &r.version, &r.nonce))
        .expect("ok");
    drain(&mut s);
    assert_eq!(s.status(Srds).expect("asked").not_found, ["a"]);
    // It asks for nothing: nothing is reported, and nothing is sent.
    s.handle_request(req(Srds, &[], &r.version, &r.nonce))
        .expect("ok");
    assert!(drain(&mut s).is_empty());
    assert!(s.status(Srds).expect("asked").not_found.is_empty());
}

/// P9, P14: a client that narrows a wildcard to names and widens it again before the server
/// answered gets the whole set: it forgot what the names left out (for a partial type, and
/// for LDS and CDS, whose narrower set would have gone whole).
#[test]
fn p9_p14_narrowed_then_widened_before_an_answer_gets_the_whole_set_again() {
    for kind in [ResourceType::Secret, Cluster] {
        let both = snap(&[(kind, "a", "1"), (kind, "b", "1")]);
        let (mut s, first) = acked(kind, &["*"], Arc::clone(&both));
        assert_eq!(names(&first), ["a", "b"]);
        s.handle_request(req(kind, &["a"], &first.version, &first.nonce))
            .expect("narrowed");
        s.handle_request(req(kind, &["*"], &first.version, &first.nonce))
            .expect("widened");
        let again = drain(&mut s);
        assert_eq!(
            again.last().map(names),
            Some(vec!["a".to_string(), "b".to_string()]),
            "{kind}"
        );
    }
}

/// P9, P10: a client naming listeners (as gRPC's xDS client does) that stops naming one
/// and names it again before anything was sent gets it again: it forgot it when it stopped
/// naming it, though the whole set it then asks for equals what it was given.
#[test]
fn p9_p10_a_listener_dropped_and_named_again_before_an_answer_goes_again() {
    let mut s = SotwStream::new(Variant::Aggregated);
    s.handle_snapshot(snap(&[(Listener, "a", "1"), (Listener, "b", "1")]));
    s.handle_request(req(Listener, &["a", "b"], "", ""))
        .expect("ok");
    let r = s.poll_response(Instant::now()).expect("sent");
    assert_eq!(names(&r), ["a", "b"]);
    s.handle_request(req(Listener, &["a", "b"], &r.version, &r.nonce))
        .expect("ack");
    assert!(s.poll_response(Instant::now()).is_none(), "it has them");
    s.handle_request(req(Listener, &["b"], &r.version, &r.nonce))
        .expect("drops a");
    s.handle_request(req(Listener, &["a", "b"], &r.version, &r.nonce))
        .expect("names a again");
    let again = s.poll_response(Instant::now()).expect("a goes again");
    assert_eq!(names(&again), ["a", "b"]);
}

/// P30: a make-before-break step is known done from the type's version, once per step: a
/// client given the step's endpoints for the names it asks for now holds every one it asks
/// for (`Flavor::holds_all`); a changed subscription, or a newer snapshot, is asked name by
/// name again.
#[test]
fn p30_a_client_given_the_steps_endpoints_for_its_names_holds_them_all() {
    use crate::protocol::stream::Flavor;
    let mut s = SotwStream::new(Variant::Aggregated);
    let first = snap(&[(Cluster, "c", "1"), (Endpoint, "c", "e")]);
    s.handle_snapshot(Arc::clone(&first));
    s.handle_request(req(Cluster, &[], "", "")).expect("ok");
    s.handle_request(req(Endpoint, &["c"], "", "")).expect("ok");
    assert!(!s.flavor().holds_all(Endpoint, first.get(Endpoint)));
    for r in drain(&mut s) {
        let names: &[&str] = if r.kind == Cluster { &[] } else { &["c"] };
        s.handle_request(req(r.kind, names, &r.version, &r.nonce))
            .expect("ack");
    }
    assert!(s.flavor().holds_all(Endpoint, first.get(Endpoint)));
    assert!(
        s.flavor().holds_all(Cluster, first.get(Cluster)),
        "a wildcard too"
    );
    // Another version of the type: not known so.
    let second = snap(&[(Cluster, "c", "1"), (Endpoint, "c", "f")]);
    assert!(!s.flavor().holds_all(Endpoint, second.get(Endpoint)));
    // Asking for a name more: what it holds is asked name by name until it is sent.
    let r = s.poll_response(Instant::now());
    assert!(r.is_none());
    s.handle_request(req(Endpoint, &["c", "d"], "", ""))
        .expect("ok");
    assert!(!s.flavor().holds_all(Endpoint, first.get(Endpoint)));
}
