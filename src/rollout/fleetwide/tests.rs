//! The fleet's rollout decisions, without etcd (tests/etcd.rs runs them against a real etcd
//! with two replicas, tests/etcd_envoy.rs with real Envoys).

use super::*;

const BAKE: Duration = Duration::from_secs(30);
const T0: u64 = 1_000_000;

fn mark(revision: i64, version: &str) -> Mark {
    Mark {
        revision,
        version: version.into(),
    }
}

fn verdict(candidate: &str, canaries: usize, synced: usize) -> Verdict {
    Verdict {
        candidate: candidate.into(),
        canaries,
        synced,
        nacked: None,
    }
}

fn first() -> Shared {
    propose(None, &mark(5, "a"), 2, T0).expect("the first load makes a state")
}

#[test]
fn the_first_load_is_promoted_and_later_ones_become_the_candidate() {
    let shared = first();
    assert_eq!(
        (shared.stable.clone(), shared.candidate.clone()),
        (mark(5, "a"), None)
    );
    // The same content read at a later revision proposes nothing.
    assert_eq!(propose(Some(&shared), &mark(9, "a"), 2, T0), None);
    let next = propose(Some(&shared), &mark(9, "b"), 2, T0 + 1).expect("a new edit");
    let candidate = next.candidate.clone().expect("a candidate");
    assert_eq!(
        (candidate.mark, candidate.phase),
        (mark(9, "b"), SharedPhase::Canary)
    );
    assert_eq!(next.stable, mark(5, "a"), "the stable generation stays");
    // A replica that read an older revision (or the same content) proposes nothing: the
    // state is written once however many replicas load the edit.
    assert_eq!(propose(Some(&next), &mark(8, "c"), 2, T0), None);
    assert_eq!(propose(Some(&next), &mark(10, "b"), 2, T0), None);
    // A newer edit replaces the candidate; an edit back to the stable content ends it.
    let newer = propose(Some(&next), &mark(12, "c"), 2, T0).expect("newer");
    assert_eq!(newer.candidate.expect("candidate").mark, mark(12, "c"));
    let back = propose(Some(&next), &mark(12, "a"), 2, T0).expect("back");
    assert_eq!((back.stable, back.candidate), (mark(5, "a"), None));
}

/// The issue's "a canary on replica A promotes or halts the edge nodes on replica B": the
/// verdicts of every replica are summed, so a replica with no canary takes part.
#[test]
fn verdicts_from_every_replica_decide_once() {
    let shared = propose(Some(&first()), &mark(9, "b"), 2, T0).expect("edit");
    let now = Instant::now();
    // Replica A has the canary, synced; replica B has none.
    let verdicts = [verdict("b", 1, 1), verdict("b", 0, 0), verdict("old", 3, 0)];
    let seen = sum(&verdicts, "b");
    assert_eq!(
        (seen.canaries, seen.synced),
        (1, 1),
        "a verdict on another candidate does not count"
    );
    let (baking, how) = step(&shared, &seen, now, T0, BAKE).expect("bakes");
    assert_eq!(
        baking.candidate.as_ref().map(|c| c.phase.clone()),
        Some(SharedPhase::Baking {
            until_ms: T0 + 30_000
        })
    );
    assert!(matches!(how, Stepped::Entered(Phase::Baking { .. })));
    // Another replica, reading the same state later, sees the same deadline on its clock.
    assert_eq!(
        step(&baking, &seen, now + BAKE / 2, T0 + 15_000, BAKE),
        None
    );
    let (promoted, how) = step(&baking, &seen, now + BAKE, T0 + 30_000, BAKE).expect("promotes");
    assert_eq!(how, Stepped::Promoted);
    assert_eq!(
        (promoted.stable.clone(), promoted.candidate.clone()),
        (mark(9, "b"), None)
    );
    // A canary rejecting it on any replica halts it for the fleet.
    let nacked = Verdict {
        nacked: Some(("canary-1".into(), "CDS".into(), "bad cluster".into())),
        ..verdict("b", 1, 0)
    };
    let seen = sum(&[verdict("b", 2, 2), nacked], "b");
    let (halted, _) = step(&baking, &seen, now, T0, BAKE).expect("halts");
    assert!(matches!(
        halted.candidate.expect("kept").phase,
        SharedPhase::Halted { ref reason } if reason.contains("bad cluster")
    ));
    // No canary connected anywhere: it waits.
    assert_eq!(
        step(&shared, &sum(&[verdict("b", 0, 0)], "b"), now, T0, BAKE),
        None
    );
}

#[test]
fn an_operator_promotes_or_aborts_and_an_aborted_edit_is_not_proposed_again() {
    let shared = propose(Some(&first()), &mark(9, "b"), 2, T0).expect("edit");
    let promoted = end(&shared, true, T0).expect("promote");
    assert_eq!(
        (promoted.stable.clone(), promoted.promoted_by.as_str()),
        (mark(9, "b"), "an operator")
    );
    assert!(end(&promoted, true, T0).is_err(), "nothing left to promote");
    let aborted = end(&shared, false, T0).expect("abort");
    assert_eq!(
        (aborted.stable.clone(), aborted.candidate.clone()),
        (mark(5, "a"), None)
    );
    assert_eq!(
        propose(Some(&aborted), &mark(11, "b"), 2, T0),
        None,
        "the aborted content again"
    );
    assert!(
        propose(Some(&aborted), &mark(11, "c"), 2, T0).is_some(),
        "a new edit"
    );
}

#[test]
fn a_replica_follows_the_state_in_the_fewest_steps() {
    let now = Instant::now();
    let shared = propose(Some(&first()), &mark(9, "b"), 2, T0).expect("edit");
    let local = |stable: &str, candidate: Option<(&str, &'static str)>| Local {
        stable: stable.into(),
        candidate: candidate.map(|(v, p)| (v.to_string(), p)),
    };
    // In step: nothing to do.
    assert_eq!(
        follow(&local("a", Some(("b", "CANARY"))), &shared, now, T0),
        vec![]
    );
    // A new candidate: load and publish it.
    assert_eq!(
        follow(&local("a", None), &shared, now, T0),
        vec![Follow::Publish(mark(9, "b"))]
    );
    // Promoted: the candidate this replica holds becomes stable.
    let promoted = end(&shared, true, T0).expect("promote");
    assert_eq!(
        follow(&local("a", Some(("b", "BAKING"))), &promoted, now, T0),
        vec![Follow::Promote]
    );
    // Aborted: the canaries go back.
    let aborted = end(&shared, false, T0).expect("abort");
    assert_eq!(
        follow(&local("a", Some(("b", "HALTED"))), &aborted, now, T0),
        vec![Follow::Abort]
    );
    // Halted elsewhere: the phase follows.
    let mut halted = shared.clone();
    halted.candidate.as_mut().expect("c").phase = SharedPhase::Halted { reason: "r".into() };
    assert_eq!(
        follow(&local("a", Some(("b", "CANARY"))), &halted, now, T0),
        vec![Follow::Phase(Phase::Halted { reason: "r".into() })]
    );
    // A replica that missed two promotions while etcd was away: the promoted generation is
    // loaded and made stable, then the candidate published, in that order.
    let later = propose(Some(&promoted), &mark(14, "c"), 2, T0).expect("edit");
    assert_eq!(
        follow(&local("z", Some(("y", "CANARY"))), &later, now, T0),
        vec![
            Follow::Publish(mark(9, "b")),
            Follow::Promote,
            Follow::Publish(mark(14, "c"))
        ]
    );
}

#[test]
fn the_state_reads_back_as_written() {
    let mut shared = propose(Some(&first()), &mark(9, "b"), 2, T0).expect("edit");
    shared.candidate.as_mut().expect("c").phase = SharedPhase::Baking { until_ms: 7 };
    let text = serde_json::to_string(&shared).expect("json");
    assert!(
        text.contains(r#""phase":{"name":"baking","until_ms":7}"#),
        "{text}"
    );
    let back: Shared = serde_json::from_str(&text).expect("reads");
    assert_eq!(back, shared);
}
