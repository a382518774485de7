//! Staged rollouts: a new generation goes to the canary nodes first, and to every node once
//! the canaries have taken it and a bake time has passed without a NACK.
//!
//! Owns: the rollout policy (which nodes are canaries, how long to bake), the rollout's
//! phases and the pure decision of what to do next from what the canaries report (an
//! [`Observation`]). Must not: hold generations, read the fleet or talk to streams (the
//! cache holds the stable and candidate generations and who gets which; `server::rollout`
//! observes the fleet's reports on a timer and applies the decisions; `admin` shows it).

pub mod fleetwide;

use std::time::{Duration, Instant};

use crate::config::{NodeMatch, Selector};

/// `--canary-id`, `--canary-cluster` and `--rollout-bake`.
#[derive(Clone, Debug)]
pub struct Policy {
    /// The canary nodes (a glob on node id, on cluster, or both).
    pub canary: Selector,
    /// What `canary` says, for people.
    pub canary_text: String,
    /// How long every canary must hold the new generation, ACKed and with no NACK, before
    /// it goes to every node.
    pub bake: Duration,
    /// The rollout is kept in etcd and decided for the fleet (`fleetwide`), not by this
    /// replica alone.
    pub fleetwide: bool,
}

impl Policy {
    /// A policy from the flags, or why not (at least one glob is needed).
    pub fn new(
        id: Option<String>,
        cluster: Option<String>,
        bake: Duration,
    ) -> Result<Policy, String> {
        let canary_text = match (&id, &cluster) {
            (Some(i), Some(c)) => format!("id {i:?} and cluster {c:?}"),
            (Some(i), None) => format!("id {i:?}"),
            (None, Some(c)) => format!("cluster {c:?}"),
            (None, None) => return Err("a canary needs --canary-id or --canary-cluster".into()),
        };
        let canary = Selector::new(vec![NodeMatch {
            id,
            cluster,
            ..NodeMatch::default()
        }])?;
        Ok(Policy {
            canary,
            canary_text,
            bake,
            fleetwide: false,
        })
    }

    pub fn is_canary(&self, node_id: &str, node_cluster: &str) -> bool {
        self.canary
            .matches(&crate::config::selector::NodeFacts::new(
                node_id,
                node_cluster,
            ))
    }
}

/// Where a rollout is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Served to the canaries; waiting for every connected canary to ACK it (and for at
    /// least one canary to be connected).
    Canary,
    /// Every canary has it ACKed: it goes to every node at `until` unless a canary NACKs.
    Baking { until: Instant },
    /// A canary rejected it (or it was stopped): the rest of the fleet stays on the stable
    /// generation until a new edit, `rollout promote` or `rollout abort`.
    Halted { reason: String },
}

impl Phase {
    pub fn name(&self) -> &'static str {
        match self {
            Phase::Canary => "CANARY",
            Phase::Baking { .. } => "BAKING",
            Phase::Halted { .. } => "HALTED",
        }
    }
}

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
