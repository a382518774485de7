//! A staged rollout as the cache serves it: the policy that says which nodes are canaries
//! (and how long to bake, and whether the fleet decides), the rollout in progress (its
//! candidate generation and phase), and ending it or moving it to another phase. Deciding
//! when, and driving, are `rollout`'s, which names the policy and phase too.
//!
//! Must not: decide anything, or read the fleet.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::{Cache, Generation, Serving};
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

/// Why the flags make no rollout policy.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("a canary needs --canary-id or --canary-cluster")]
    NoCanary,
    #[error(transparent)]
    Selector(#[from] crate::config::selector::SelectorError),
    /// A canary glob that names no group (`canary-`, or empty).
    #[error("{flag} {why}")]
    BarePrefix { flag: &'static str, why: String },
}

impl Policy {
    /// A policy from the flags, or why not (at least one glob is needed).
    pub fn new(
        id: Option<String>,
        cluster: Option<String>,
        bake: Duration,
    ) -> Result<Policy, PolicyError> {
        let canary_text = match (&id, &cluster) {
            (Some(i), Some(c)) => format!("id {i:?} and cluster {c:?}"),
            (Some(i), None) => format!("id {i:?}"),
            (None, Some(c)) => format!("cluster {c:?}"),
            (None, None) => return Err(PolicyError::NoCanary),
        };
        for (flag, glob) in [("--canary-id", &id), ("--canary-cluster", &cluster)] {
            if let Some(why) = glob
                .as_deref()
                .and_then(crate::config::selector::bare_prefix)
            {
                return Err(PolicyError::BarePrefix { flag, why });
            }
        }
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

/// A staged rollout in progress (see `crate::rollout`).
#[derive(Clone, Debug)]
pub struct Rollout {
    pub candidate: Arc<Generation>,
    pub policy: Arc<Policy>,
    pub phase: Phase,
    /// When the rollout entered `phase`.
    pub since: SystemTime,
}

/// There is no rollout to promote or abort.
#[derive(Debug, thiserror::Error)]
#[error("no rollout is in progress (generation {stable} serves every node)")]
pub struct NoRollout {
    pub stable: u64,
}

impl Cache {
    /// End the rollout: every node gets the candidate. Returns the generation now stable.
    pub fn promote(&self) -> Result<u64, NoRollout> {
        self.end_rollout(true)
    }

    /// End the rollout: the canaries go back to the stable generation. Returns it.
    pub fn abort(&self) -> Result<u64, NoRollout> {
        self.end_rollout(false)
    }

    fn end_rollout(&self, promote: bool) -> Result<u64, NoRollout> {
        let mut result = Err(NoRollout { stable: 0 });
        self.current.send_if_modified(|serving| {
            let Some(rollout) = &serving.rollout else {
                result = Err(NoRollout {
                    stable: serving.stable.number,
                });
                return false;
            };
            let stable = if promote {
                Arc::clone(&rollout.candidate)
            } else {
                Arc::clone(&serving.stable)
            };
            result = Ok(stable.number);
            *serving = Arc::new(Serving {
                stable,
                rollout: None,
                recent: Arc::clone(&serving.recent),
            });
            true
        });
        result
    }

    /// Move the rollout of generation `candidate` (if it is still the one in progress) to
    /// `phase`. Who gets what does not change, so no stream is woken.
    pub fn set_phase(&self, candidate: u64, phase: Phase) {
        self.current.send_if_modified(|serving| {
            if let Some(rollout) = serving
                .rollout
                .as_ref()
                .filter(|r| r.candidate.number == candidate)
            {
                *serving = Arc::new(Serving {
                    stable: Arc::clone(&serving.stable),
                    rollout: Some(Rollout {
                        phase,
                        since: SystemTime::now(),
                        ..rollout.clone()
                    }),
                    recent: Arc::clone(&serving.recent),
                });
            }
            false
        });
    }
}
