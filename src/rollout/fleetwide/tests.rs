//! The fleet's rollout decisions, without etcd (tests/etcd.rs runs them against a real etcd
//! with two replicas, tests/etcd_envoy.rs with real Envoys).

use std::collections::BTreeMap;

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

fn first() -> FleetState {
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
        (mark(9, "b"), FleetPhase::Canary)
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

/// `rollback --now`: the rollback is promoted at once, ending a rollout (even a halted
/// one) and an abort's memory; a replica that read it late, or an older revision, proposes
/// nothing. Every replica then follows it as stable in one load.
#[test]
fn a_rollback_now_is_promoted_at_once_for_the_fleet() {
    let by = || "rollback --now to revision 5 by alice".to_string();
    let mut halted = propose(Some(&first()), &mark(9, "b"), 2, T0).expect("a candidate");
    if let Some(c) = halted.candidate.as_mut() {
        c.phase = FleetPhase::Halted {
            reason: "canary-1 rejected CDS".into(),
        };
    }
    let now = promote_now(Some(&halted), &mark(11, "a"), 2, T0 + 5, by()).expect("promoted");
    assert_eq!(
        (now.stable.clone(), now.candidate.clone()),
        (mark(11, "a"), None)
    );
    assert_eq!(
        (now.promoted_by.as_str(), now.promoted_ms, now.documents),
        (by().as_str(), T0 + 5, 2)
    );
    assert_eq!(promote_now(Some(&now), &mark(11, "a"), 2, T0, by()), None);
    assert_eq!(promote_now(Some(&halted), &mark(9, "c"), 2, T0, by()), None);
    let serving_b = Local {
        stable: "a".into(),
        candidate: Some(("b".into(), "HALTED")),
    };
    assert_eq!(
        follow(&serving_b, &now, Instant::now(), None),
        vec![Follow::Abort],
        "back to what the other nodes serve: the canaries go back to it"
    );
    let older = promote_now(Some(&halted), &mark(11, "z"), 2, T0 + 5, by()).expect("promoted");
    assert_eq!(
        follow(&serving_b, &older, Instant::now(), None),
        vec![Follow::Publish(mark(11, "z")), Follow::Promote],
        "other content goes to every node at once"
    );
}

/// A canary on replica A promotes or halts the edge nodes on replica B: the
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
    let (baking, how) = step(&shared, &seen, now, T0, None, BAKE).expect("bakes");
    assert_eq!(
        baking.candidate.as_ref().map(|c| c.phase.clone()),
        Some(FleetPhase::Baking {
            until_ms: T0 + 30_000
        })
    );
    assert!(matches!(how, Stepped::Entered(Phase::Baking { .. })));
    // While etcd keeps the bake key, the bake goes on, whatever any replica's clock says:
    // one five minutes ahead (its `now_ms` past `until_ms`) waits as the others do.
    for now_ms in [T0 + 15_000, T0 + 330_000] {
        assert_eq!(
            step(
                &baking,
                &seen,
                now + BAKE,
                now_ms,
                Some(Duration::from_millis(250)),
                BAKE
            ),
            None,
            "the bake key is there: the bake is on (now_ms {now_ms})"
        );
    }
    // Once etcd deleted the key (its lease ended), any replica promotes, even one whose
    // clock is minutes behind.
    let (promoted, how) = step(&baking, &seen, now, T0 - 300_000, None, BAKE).expect("promotes");
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
    let (halted, _) = step(&baking, &seen, now, T0, Some(BAKE), BAKE).expect("halts");
    assert!(matches!(
        halted.candidate.expect("kept").phase,
        FleetPhase::Halted { ref reason } if reason.contains("bad cluster")
    ));
    // No canary connected anywhere: it waits.
    assert_eq!(
        step(
            &shared,
            &sum(&[verdict("b", 0, 0)], "b"),
            now,
            T0,
            None,
            BAKE
        ),
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
        follow(&local("a", Some(("b", "CANARY"))), &shared, now, None),
        vec![]
    );
    // A new candidate: load and publish it.
    assert_eq!(
        follow(&local("a", None), &shared, now, None),
        vec![Follow::Publish(mark(9, "b"))]
    );
    // Promoted: the candidate this replica holds becomes stable.
    let promoted = end(&shared, true, T0).expect("promote");
    assert_eq!(
        follow(&local("a", Some(("b", "BAKING"))), &promoted, now, None),
        vec![Follow::Promote]
    );
    // Aborted: the canaries go back.
    let aborted = end(&shared, false, T0).expect("abort");
    assert_eq!(
        follow(&local("a", Some(("b", "HALTED"))), &aborted, now, None),
        vec![Follow::Abort]
    );
    // Halted elsewhere: the phase follows.
    let mut halted = shared.clone();
    halted.candidate.as_mut().expect("c").phase = FleetPhase::Halted { reason: "r".into() };
    assert_eq!(
        follow(&local("a", Some(("b", "CANARY"))), &halted, now, None),
        vec![Follow::Phase(Phase::Halted { reason: "r".into() })]
    );
    // A replica that missed two promotions while etcd was away: the promoted generation is
    // loaded and made stable, then the candidate published, in that order.
    let later = propose(Some(&promoted), &mark(14, "c"), 2, T0).expect("edit");
    assert_eq!(
        follow(&local("z", Some(("y", "CANARY"))), &later, now, None),
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
    shared.candidate.as_mut().expect("c").phase = FleetPhase::Baking { until_ms: 7 };
    let text = serde_json::to_string(&shared).expect("json");
    assert!(
        text.contains(r#""phase":{"name":"baking","until_ms":7}"#),
        "{text}"
    );
    let back: FleetState = serde_json::from_str(&text).expect("reads");
    assert_eq!(back, shared);
}

/// A seeded random schedule of the fleet's rollout (edits, replicas loading them late,
/// proposals and steps racing through compare-and-swap, the watch delivering late, canary
/// verdicts, operator aborts, replica restarts) against a model of what the nodes hold: an
/// edge node (not a canary) is only ever served a generation the fleet promoted, a
/// generation a canary rejected is never promoted, and once every replica has caught up they
/// all serve what the state says. Run with SWITCHYARD_FLEET_SEED=N to replay one seed.
#[test]
fn random_schedules_never_serve_an_edge_node_an_unvetted_generation() {
    let seeds: Vec<u64> = match std::env::var("SWITCHYARD_FLEET_SEED") {
        Ok(s) => vec![s.parse().expect("a number")],
        Err(_) => (1..=300).collect(),
    };
    let (mut promotions, mut halts) = (0, 0);
    for seed in &seeds {
        let (p, h) = run_schedule(*seed);
        promotions += p;
        halts += h;
    }
    // The schedules exercise what they check: edits promoted, and edits halted.
    if seeds.len() > 1 {
        assert!(
            promotions > 100 && halts > 100,
            "{promotions} promotions, {halts} halts"
        );
    }
}

/// A replica's cache after `steps` (as the driver takes them: a publication over nothing
/// serves every node, a later one is the candidate).
fn apply(local: &Local, steps: Vec<Follow>) -> Local {
    let mut next = local.clone();
    for step in steps {
        match step {
            Follow::Publish(m) if next.stable.is_empty() => next.stable = m.version,
            Follow::Publish(m) => next.candidate = Some((m.version, "CANARY")),
            Follow::Promote => {
                if let Some((v, _)) = next.candidate.take() {
                    next.stable = v;
                }
            }
            Follow::Abort => next.candidate = None,
            Follow::Phase(p) => {
                if let Some(c) = next.candidate.as_mut() {
                    c.1 = p.name();
                }
            }
        }
    }
    next
}

struct Replica {
    /// What its cache serves (None: not started yet).
    local: Option<Local>,
    /// The state as its watch last delivered it, and its modification.
    known: Option<(FleetState, u64)>,
    /// Revisions it has read but not loaded yet, and the one it loaded last.
    unread: Vec<Mark>,
    head: Option<Mark>,
    /// Whether canaries are connected to it.
    canaries: bool,
}

struct Schedule(u64);

impl Schedule {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

/// One schedule; how many generations were promoted after the first, and how many halted.
fn run_schedule(seed: u64) -> (usize, usize) {
    let mut random = Schedule(seed);
    let base = Instant::now();
    let mut now_ms = T0;
    let bake = Duration::from_millis(100);
    // The store: the state and its modification counter.
    let mut store: Option<(FleetState, u64)> = None;
    let mut modified = 0u64;
    // The bake key as etcd keeps it: the version baking, and when (etcd's time, the
    // schedule's `now_ms`) its lease ends.
    let mut bake_key: Option<(String, u64)> = None;
    // Each replica's wall clock: one five minutes ahead, one five minutes behind. Only
    // what is written for people may differ by it; no decision does.
    let skew = |i: usize| [0i64, 300_000, -300_000][i];
    let mut verdicts: BTreeMap<usize, Verdict> = BTreeMap::new();
    let mut replicas: Vec<Replica> = (0..3)
        .map(|i| Replica {
            local: None,
            known: None,
            unread: vec![mark(1, "v1")],
            head: None,
            canaries: i == 0,
        })
        .collect();
    // Content "vN": even N are good, odd N above 1 are rejected by the canaries.
    let bad = |version: &str| {
        version[1..]
            .parse::<u64>()
            .is_ok_and(|n| n > 1 && n % 2 == 1)
    };
    let mut promoted: std::collections::BTreeSet<String> = Default::default();
    let (mut promotions, mut halts) = (0, 0);
    let mut revision = 1;
    let fail = |what: String| -> ! { panic!("SWITCHYARD_FLEET_SEED={seed}: {what}") };
    for _ in 0..400 {
        now_ms += random.next(40);
        let now = base + Duration::from_millis(now_ms - T0);
        let i = random.next(3) as usize;
        let clock = now_ms.saturating_add_signed(skew(i));
        if bake_key.as_ref().is_some_and(|(_, ends)| now_ms >= *ends) {
            bake_key = None;
        }
        let bake_left = |shared: &FleetState| {
            let c = shared.candidate.as_ref()?;
            let (version, ends) = bake_key.as_ref()?;
            (*version == c.mark.version).then(|| Duration::from_millis(ends - now_ms))
        };
        match random.next(9) {
            // An apply: a new revision, read later by each replica.
            0 => {
                revision += 1;
                let version = format!("v{}", 1 + random.next(6));
                for r in &mut replicas {
                    r.unread.push(mark(revision, &version));
                }
            }
            // A replica loads what it read, and proposes it.
            1 => {
                let r = &mut replicas[i];
                if r.unread.is_empty() {
                    continue;
                }
                let head = r.unread.remove(0);
                r.head = Some(head.clone());
                if r.local.is_none() && store.is_none() {
                    // The first load serves at once (every node gets it).
                    r.local = Some(Local {
                        stable: head.version.clone(),
                        candidate: None,
                    });
                }
                let known = r.known.as_ref().map(|(s, _)| s);
                if let Some(next) = propose(known, &head, 1, clock) {
                    let expected = r.known.as_ref().map_or(0, |(_, m)| *m);
                    if store.as_ref().map_or(0, |(_, m)| *m) == expected {
                        modified += 1;
                        store = Some((next, modified));
                    }
                }
            }
            // The watch delivers the state.
            2 | 3 => replicas[i].known = store.clone(),
            // A replica follows what it knows.
            4 | 5 => {
                let r = &mut replicas[i];
                let Some((shared, _)) = &r.known else {
                    continue;
                };
                let local = r.local.clone().unwrap_or(Local {
                    stable: String::new(),
                    candidate: None,
                });
                let next = apply(&local, follow(&local, shared, now, bake_left(shared)));
                r.local = Some(next);
            }
            // A replica reports its canaries' verdict, and takes a step if one is due.
            6 | 7 => {
                let r = &replicas[i];
                let (Some((shared, m)), Some(local)) = (&r.known, &r.local) else {
                    continue;
                };
                if let Some(c) = &shared.candidate {
                    let holds = local
                        .candidate
                        .as_ref()
                        .is_some_and(|(v, _)| *v == c.mark.version);
                    let verdict = Verdict {
                        candidate: c.mark.version.clone(),
                        canaries: usize::from(r.canaries),
                        synced: usize::from(r.canaries && holds && !bad(&c.mark.version)),
                        nacked: (r.canaries && holds && bad(&c.mark.version))
                            .then(|| ("canary-1".into(), "CDS".into(), "bad".into())),
                    };
                    verdicts.insert(i, verdict);
                    let seen = sum(verdicts.values(), &c.mark.version);
                    let left = bake_left(shared);
                    if let Some((next, how)) = step(shared, &seen, now, clock, left, bake) {
                        if store.as_ref().map(|(_, m)| *m) == Some(*m) {
                            match how {
                                // The driver puts the bake key on its lease first.
                                Stepped::Entered(Phase::Baking { .. }) => {
                                    bake_key = Some((
                                        c.mark.version.clone(),
                                        now_ms + bake.as_millis() as u64,
                                    ));
                                }
                                Stepped::Promoted if left.is_some() => fail(format!(
                                    "replica {i} (clock {:+} ms) promoted {} before etcd ended its bake",
                                    skew(i),
                                    c.mark.version
                                )),
                                _ => {}
                            }
                            modified += 1;
                            store = Some((next, modified));
                        }
                    }
                }
            }
            // Now and then an operator aborts, or a replica restarts (its cache starts
            // over from the state; its canaries' verdict goes with its lease).
            _ => {
                if random.next(4) == 0 {
                    if let Some((shared, m)) = &store {
                        if let Ok(next) = end(shared, false, clock) {
                            let _ = m;
                            modified += 1;
                            store = Some((next, modified));
                        }
                    }
                } else {
                    let r = &mut replicas[i];
                    verdicts.remove(&i);
                    if store.is_some() {
                        r.known = store.clone();
                        r.local = None;
                        let (shared, _) = r.known.as_ref().expect("known");
                        r.local = Some(Local {
                            stable: shared.stable.version.clone(),
                            candidate: None,
                        });
                    }
                }
            }
        }
        if let Some((shared, _)) = &store {
            if promoted.insert(shared.stable.version.clone()) && promoted.len() > 1 {
                promotions += 1;
            }
            if shared
                .candidate
                .as_ref()
                .is_some_and(|c| matches!(c.phase, FleetPhase::Halted { .. }))
            {
                halts += 1;
            }
        }
        for (n, r) in replicas.iter().enumerate() {
            let Some(local) = &r.local else { continue };
            if !local.stable.is_empty() && !promoted.contains(&local.stable) {
                fail(format!(
                    "replica {n} serves its edge nodes {}, never promoted ({promoted:?})",
                    local.stable
                ));
            }
        }
        if let Some(v) = promoted.iter().find(|v| bad(v)) {
            fail(format!("{v}, which a canary rejected, was promoted"));
        }
    }
    // Caught up: every replica follows the state, and serves what it says.
    let Some((shared, _)) = &store else {
        return (promotions, halts);
    };
    for (n, r) in replicas.iter_mut().enumerate() {
        r.known = store.clone();
        let Some(local) = r.local.clone() else {
            continue;
        };
        let next = apply(&local, follow(&local, shared, base, None));
        assert_eq!(
            (
                next.stable.as_str(),
                next.candidate.as_ref().map(|c| c.0.as_str())
            ),
            (
                shared.stable.version.as_str(),
                shared.candidate.as_ref().map(|c| c.mark.version.as_str())
            ),
            "SWITCHYARD_FLEET_SEED={seed}: replica {n} does not serve what the state says"
        );
    }
    (promotions, halts)
}
