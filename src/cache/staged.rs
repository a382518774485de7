//! A staged rollout as the cache serves it: the policy that says which nodes are canaries
//! (and how long to bake, and whether the fleet decides), and the phase a rollout is in.
//! Deciding and driving are `rollout`'s, which names these too.
//!
//! Must not: decide anything, or read the fleet.

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
