//! The rollout's decisions, without a server (tests/rollout_e2e.rs runs two real Envoys).

use super::*;
use crate::fleet::{SyncStatus, TypeReport};

const BAKE: Duration = Duration::from_secs(30);

fn seen(canaries: usize, synced: usize) -> Observation {
    Observation {
        canaries,
        synced,
        nacked: None,
    }
}

#[test]
fn bakes_once_every_canary_has_it_then_promotes() {
    let t0 = Instant::now();
    assert_eq!(
        decide(&Phase::Canary, &seen(2, 1), t0, BAKE),
        Decision::Stay
    );
    let until = t0 + BAKE;
    assert_eq!(
        decide(&Phase::Canary, &seen(2, 2), t0, BAKE),
        Decision::Enter(Phase::Baking { until })
    );
    let baking = Phase::Baking { until };
    assert_eq!(
        decide(&baking, &seen(2, 2), t0 + BAKE / 2, BAKE),
        Decision::Stay
    );
    assert_eq!(decide(&baking, &seen(2, 2), until, BAKE), Decision::Promote);
}

#[test]
fn no_canary_connected_means_no_promotion() {
    let t0 = Instant::now();
    assert_eq!(
        decide(&Phase::Canary, &seen(0, 0), t0, BAKE),
        Decision::Stay
    );
    let baking = Phase::Baking { until: t0 };
    assert_eq!(
        decide(&baking, &seen(0, 0), t0 + BAKE, BAKE),
        Decision::Enter(Phase::Canary),
        "the last canary left: wait for one, then bake again"
    );
}

#[test]
fn a_canary_nack_halts_and_nothing_moves_it_on() {
    let t0 = Instant::now();
    let nack = Observation {
        canaries: 1,
        synced: 0,
        nacked: Some(("canary-1".into(), "CDS".into(), "bad cluster".into())),
    };
    let halted = Phase::Halted {
        reason: "canary \"canary-1\" rejected CDS: bad cluster".into(),
    };
    assert_eq!(
        decide(&Phase::Canary, &nack, t0, BAKE),
        Decision::Enter(halted.clone())
    );
    assert_eq!(
        decide(&Phase::Baking { until: t0 }, &nack, t0 + BAKE, BAKE),
        Decision::Enter(halted.clone()),
        "a NACK during the bake halts, though the bake is over"
    );
    assert_eq!(
        decide(&halted, &seen(1, 1), t0 + BAKE * 10, BAKE),
        Decision::Stay
    );
}

fn report(node: &str, generation: u64, cds: &str) -> StreamReport {
    StreamReport {
        facts: std::sync::Arc::new(crate::config::selector::NodeFacts::new(node, "")),
        node_id: node.into(),
        node_cluster: String::new(),
        user_agent: "envoy".into(),
        user_agent_version: String::new(),
        client_features: vec![],
        peer: String::new(),
        stream: "ADS".into(),
        protocol: "sotw",
        connected_since: SystemTime::now(),
        types: [(
            "CDS",
            Box::new(TypeReport {
                state: SyncStatus::from_name(cds).expect("a state"),
                version_sent: "v".into(),
                version_acked: "v".into(),
                nonce: "1".into(),
                nack: (cds == "NACKED").then(|| {
                    Box::new(crate::fleet::NackReport {
                        error: "no".into(),
                        rejected_version: "v".into(),
                        rejected_changes: Vec::new(),
                    })
                }),
                oversized_bytes: None,
                not_found: Default::default(),
                last_change: SystemTime::now(),
            }),
        )]
        .into(),
        generation,
        plan: None,
        unknown_types: Default::default(),
    }
}

#[test]
fn observations_count_canary_nodes_on_the_candidate() {
    let policy = Policy::new(Some("canary-*".into()), None, BAKE).expect("policy");
    let reports = [
        report("canary-1", 5, "SYNCED"),
        report("canary-2", 5, "STALE"),
        report("canary-3", 4, "SYNCED"),
        report("edge-1", 4, "NACKED"),
    ];
    let seen = Observation::of(&reports, &policy, 5);
    assert_eq!((seen.canaries, seen.synced, seen.nacked), (3, 1, None));
    // A NACK counts only on the candidate: a canary still on the old generation that
    // rejects something rejects the old config, not this rollout.
    let reports = [
        report("canary-1", 4, "NACKED"),
        report("canary-2", 5, "NACKED"),
    ];
    let seen = Observation::of(&reports, &policy, 5);
    assert_eq!(
        seen.nacked,
        Some(("canary-2".into(), "CDS".into(), "no".into()))
    );
}

#[test]
fn a_policy_needs_a_canary() {
    assert!(Policy::new(None, None, BAKE).is_err());
    let p = Policy::new(None, Some("canary".into()), BAKE).expect("policy");
    assert!(p.is_canary("any", "canary") && !p.is_canary("any", "edge"));
}
