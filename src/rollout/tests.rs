//! The rollout's decisions, without a server (tests/rollout_e2e.rs runs two real Envoys).

use super::*;

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

#[test]
fn a_policy_needs_a_canary() {
    assert!(Policy::new(None, None, BAKE).is_err());
    let p = Policy::new(None, Some("canary".into()), BAKE).expect("policy");
    assert!(p.is_canary("any", "canary") && !p.is_canary("any", "edge"));
}
