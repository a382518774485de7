//! Staged rollouts: a new generation goes to the canary nodes first, and to every node once
//! the canaries have taken it and a bake time has passed without a NACK.
//!
//! Owns: the rollout policy (which nodes are canaries, how long to bake), the rollout's
//! phases and the pure decision of what to do next from what the canaries report. Must not:
//! hold generations or talk to streams (the cache holds the stable and candidate
//! generations and who gets which; `server::rollout` feeds this module the fleet's reports
//! on a timer and applies its decisions).

use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use crate::config::{NodeMatch, Selector};
use crate::fleet::StreamReport;

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

impl Observation {
    /// From the fleet's stream reports: the canaries' view of generation `candidate`.
    pub fn of(reports: &[StreamReport], policy: &Policy, candidate: u64) -> Observation {
        let mut nodes: std::collections::BTreeMap<&str, bool> = Default::default();
        let mut nacked = None;
        for r in reports
            .iter()
            .filter(|r| policy.is_canary(&r.node_id, &r.node_cluster))
        {
            let on_candidate = r.generation >= candidate;
            let synced = nodes.entry(r.node_id.as_str()).or_insert(true);
            *synced &= on_candidate && r.synced();
            if on_candidate && nacked.is_none() {
                nacked = r
                    .types
                    .iter()
                    .find(|(_, t)| t.state == crate::fleet::SyncStatus::Nacked)
                    .map(|(kind, t)| {
                        (
                            r.node_id.clone(),
                            kind.to_string(),
                            t.nack.as_ref().map(|n| n.error.clone()).unwrap_or_default(),
                        )
                    });
            }
        }
        Observation {
            canaries: nodes.len(),
            synced: nodes.values().filter(|s| **s).count(),
            nacked,
        }
    }
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

/// A rollout for `/status`: the phase, the generations and since when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RolloutStatus {
    /// `CANARY`, `BAKING` or `HALTED`.
    pub state: String,
    /// The generation every node that is not a canary gets.
    pub stable: u64,
    /// The generation being rolled out (the canaries have it).
    pub candidate: u64,
    pub canary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub since: String,
}

impl RolloutStatus {
    pub fn new(
        phase: &Phase,
        stable: u64,
        candidate: u64,
        policy: &Policy,
        since: SystemTime,
    ) -> Self {
        RolloutStatus {
            state: phase.name().into(),
            stable,
            candidate,
            canary: policy.canary_text.clone(),
            reason: match phase {
                Phase::Halted { reason } => Some(reason.clone()),
                _ => None,
            },
            since: crate::fleet::format_time(since),
        }
    }
}

#[cfg(test)]
mod tests;
