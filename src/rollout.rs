//! Staged rollouts, all of them: a new generation goes to the canary nodes first, and to
//! every node once the canaries have taken it and a bake time has passed without a NACK.
//!
//! Owns: the pure decision of what to do next from what the canaries report (an
//! [`Observation`], [`decide`]); this replica's driver, which reads the canaries' reports
//! from the fleet on a timer and applies the decisions to the cache ([`replica`]); and the
//! one rollout for every replica of an etcd source ([`fleetwide`]: its pure state, its keys
//! in etcd, and its driver). The policy (which nodes are canaries, how long to bake) and the
//! phases are the words the cache serves by, so they are defined beside it
//! (`cache::staged`) and named here too: the cache sits below the rollout, which drives it.
//! Must not: hold generations or talk to streams (the cache holds the stable and candidate
//! generations and who gets which; the server reports what every proxy holds into the
//! fleet; `admin` shows the rollout).

pub mod fleetwide;
pub mod replica;

use std::time::{Duration, Instant};

pub use crate::cache::staged::{Phase, Policy, PolicyError};

/// What the canaries report about the candidate generation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observation {
    /// Canary nodes connected.
    pub canaries: usize,
    /// Of those, the nodes whose every stream has taken the candidate and ACKed it.
    pub synced: usize,
    /// The first canary rejecting the candidate: node, type and the proxy's error.
    pub nacked: Option<(String, String, String)>,
}

/// What to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Stay,
    /// Move to this phase.
    Enter(Phase),
    /// Serve the candidate to every node.
    Promote,
}

/// The next step of a rollout in `phase`, given what the canaries report at `now`.
pub fn decide(phase: &Phase, seen: &Observation, now: Instant, bake: Duration) -> Decision {
    if let Phase::Halted { .. } = phase {
        return Decision::Stay;
    }
    if let Some((node, kind, error)) = &seen.nacked {
        return Decision::Enter(Phase::Halted {
            reason: format!("canary {node:?} rejected {kind}: {error}"),
        });
    }
    let all_synced = seen.canaries > 0 && seen.synced == seen.canaries;
    match (phase, all_synced) {
        (Phase::Canary, true) => Decision::Enter(Phase::Baking { until: now + bake }),
        (Phase::Baking { until }, true) if now >= *until => Decision::Promote,
        // A canary that (re)connects and has not ACKed yet: wait for it, then bake again.
        (Phase::Baking { .. }, false) => Decision::Enter(Phase::Canary),
        _ => Decision::Stay,
    }
}

#[cfg(test)]
mod tests;
