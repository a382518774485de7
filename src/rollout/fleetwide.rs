//! One rollout for every replica (`serve --source etcd://...` with a canary policy): the
//! rollout's state is kept in etcd ([`FleetState`]), every replica reports what its canaries say
//! ([`Verdict`]), any replica may take the next step, and a compare-and-swap on the state
//! makes that step happen once. Every replica then makes its cache match the state
//! ([`follow`]): the promoted generation for every node, the candidate for the canaries.
//!
//! Owns: the shared state's shape, and the pure decisions on it: what a newly loaded
//! revision proposes ([`propose`]), what the replicas' verdicts decide ([`step`]), what an
//! operator's promote or abort writes ([`end`]), and how a replica's cache follows
//! ([`follow`]). Must not: talk to etcd or touch the cache (`driver` does both), or
//! judge the canaries differently from [`super::decide`], which it calls.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{decide, Decision, Observation, Phase};

/// A generation as the fleet names it: the etcd revision its documents were read at, and
/// the digest of what they serve (`Config::content_version`), equal on every replica.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    pub revision: i64,
    pub version: String,
}

/// Where the fleet's rollout is (a [`Phase`]). The bake's end is etcd's to say, never a
/// clock's: the replica that begins it puts the bake key on a lease as long as the bake
/// (`store::begin_bake`), and the bake is over when etcd deletes the key, which every replica
/// sees at once; a replica whose clock is minutes off judges it as any other.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "lowercase")]
pub enum FleetPhase {
    Canary,
    /// Goes to every node once the bake key's lease ends. `until_ms` is when that was due
    /// by the clock of the replica that began it (milliseconds since the Unix epoch):
    /// shown to people, never compared with another clock.
    Baking {
        until_ms: u64,
    },
    Halted {
        reason: String,
    },
}

impl FleetPhase {
    /// The same phase as this replica's cache and [`decide`] take it: a bake is over when
    /// `bake_left` is `None` (etcd deleted the bake key for this candidate, or never had
    /// one), and otherwise ends `bake_left` from `now` as far as this replica can tell.
    pub fn local(&self, now: Instant, bake_left: Option<Duration>) -> Phase {
        match self {
            FleetPhase::Canary => Phase::Canary,
            FleetPhase::Baking { .. } => Phase::Baking {
                until: now + bake_left.unwrap_or(Duration::ZERO),
            },
            FleetPhase::Halted { reason } => Phase::Halted {
                reason: reason.clone(),
            },
        }
    }

    fn shared(phase: &Phase, now: Instant, now_ms: u64) -> FleetPhase {
        match phase {
            Phase::Canary => FleetPhase::Canary,
            Phase::Baking { until } => FleetPhase::Baking {
                until_ms: now_ms + until.saturating_duration_since(now).as_millis() as u64,
            },
            Phase::Halted { reason } => FleetPhase::Halted {
                reason: reason.clone(),
            },
        }
    }
}

/// The generation rolling out to the canaries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Candidate {
    pub mark: Mark,
    pub phase: FleetPhase,
    /// When it became the candidate (ms since the epoch).
    pub since_ms: u64,
}

/// The rollout kept in etcd (`PREFIX/.switchyard/rollout`, JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetState {
    /// The promoted generation: what every node that is not a canary gets. Its documents
    /// are copied beside the state (`PREFIX/.switchyard/stable/REVISION/`), so it survives
    /// etcd's compaction and any replica's restart.
    pub stable: Mark,
    /// How many documents the copy holds (a copy with fewer is not used).
    pub documents: usize,
    /// When it was promoted (ms since the epoch), and why.
    pub promoted_ms: u64,
    pub promoted_by: String,
    pub candidate: Option<Candidate>,
    /// The last candidate an operator aborted: the same content is not proposed again, as a
    /// replica's own rollout waits for a new edit after an abort.
    #[serde(default)]
    pub aborted: Option<Mark>,
}

/// What one replica's canaries say about a candidate (`PREFIX/.switchyard/replicas/ID`,
/// JSON, on a lease: a replica that dies stops counting when its lease ends).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// The candidate's content version this is about.
    pub candidate: String,
    pub canaries: usize,
    pub synced: usize,
    /// The first canary rejecting it: node, type and the proxy's error.
    pub nacked: Option<(String, String, String)>,
}

/// The fleet's view of candidate `version`: every replica's verdict on it, summed (a
/// verdict about another candidate does not count).
pub fn sum<'a>(verdicts: impl IntoIterator<Item = &'a Verdict>, version: &str) -> Observation {
    let mut seen = Observation::default();
    for v in verdicts.into_iter().filter(|v| v.candidate == version) {
        seen.canaries += v.canaries;
        seen.synced += v.synced;
        if seen.nacked.is_none() {
            seen.nacked.clone_from(&v.nacked);
        }
    }
    seen
}

/// A replica read revision `head` of the documents: the state it proposes, or `None` when
/// the state already has it (or something newer). Without a state, `head` is the promoted
/// generation (the first load goes to every node, as on one server).
pub fn propose(
    shared: Option<&FleetState>,
    head: &Mark,
    documents: usize,
    now_ms: u64,
) -> Option<FleetState> {
    let Some(shared) = shared else {
        return Some(FleetState {
            stable: head.clone(),
            documents,
            promoted_ms: now_ms,
            promoted_by: "the first load".into(),
            candidate: None,
            aborted: None,
        });
    };
    let newest = shared
        .candidate
        .as_ref()
        .map_or(shared.stable.revision, |c| c.mark.revision)
        .max(shared.aborted.as_ref().map_or(0, |a| a.revision));
    if head.revision <= newest {
        return None;
    }
    let same_as = |mark: Option<&Mark>| mark.is_some_and(|m| m.version == head.version);
    if same_as(shared.candidate.as_ref().map(|c| &c.mark)) || same_as(shared.aborted.as_ref()) {
        return None;
    }
    let mut next = shared.clone();
    if head.version == shared.stable.version {
        // Written back to what every node has: no rollout (if there was one).
        shared.candidate.as_ref()?;
        next.candidate = None;
    } else {
        next.candidate = Some(Candidate {
            mark: head.clone(),
            phase: FleetPhase::Canary,
            since_ms: now_ms,
        });
    }
    Some(next)
}

/// A replica read revision `head`, written by `rollback --now` (`by` says so): the state that
/// promotes it at once, skipping the canaries and the bake (any rollout in progress ends
/// with it); `None` when the state already names it or something newer.
pub fn promote_now(
    shared: Option<&FleetState>,
    head: &Mark,
    documents: usize,
    now_ms: u64,
    by: String,
) -> Option<FleetState> {
    let newest = shared.map_or(0, |s| {
        s.candidate
            .as_ref()
            .map_or(s.stable.revision, |c| c.mark.revision)
            .max(s.aborted.as_ref().map_or(0, |a| a.revision))
    });
    (head.revision > newest).then(|| FleetState {
        stable: head.clone(),
        documents,
        promoted_ms: now_ms,
        promoted_by: by,
        candidate: None,
        aborted: None,
    })
}

/// What a step of the rollout changed, for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stepped {
    Entered(Phase),
    Promoted,
}

/// The next state, given the fleet's verdicts on the candidate (`seen`) and what is left of
/// its bake as etcd says (`bake_left`, see [`FleetPhase::local`]), as [`super::decide`]
/// judges them; `None` when nothing changes. `now_ms` only dates what is written, for
/// people. A step into [`Phase::Baking`] asks the driver to begin the bake in etcd first.
pub fn step(
    shared: &FleetState,
    seen: &Observation,
    now: Instant,
    now_ms: u64,
    bake_left: Option<Duration>,
    bake: Duration,
) -> Option<(FleetState, Stepped)> {
    let candidate = shared.candidate.as_ref()?;
    let phase = candidate.phase.local(now, bake_left);
    match decide(&phase, seen, now, bake) {
        Decision::Stay => None,
        Decision::Promote => {
            let canaries = match seen.canaries {
                1 => "1 canary".to_string(),
                n => format!("{n} canaries"),
            };
            let next = promoted(shared, now_ms, format!("{canaries} and the bake"))?;
            Some((next, Stepped::Promoted))
        }
        Decision::Enter(phase) => {
            let mut next = shared.clone();
            if let Some(c) = next.candidate.as_mut() {
                c.phase = FleetPhase::shared(&phase, now, now_ms);
            }
            Some((next, Stepped::Entered(phase)))
        }
    }
}

fn promoted(shared: &FleetState, now_ms: u64, by: String) -> Option<FleetState> {
    let candidate = shared.candidate.as_ref()?;
    Some(FleetState {
        stable: candidate.mark.clone(),
        documents: 0,
        promoted_ms: now_ms,
        promoted_by: by,
        candidate: None,
        aborted: None,
    })
}

/// There is no rollout in the fleet to promote or abort.
#[derive(Debug, thiserror::Error)]
#[error("no rollout is in progress in the fleet (revision {stable} serves every node)")]
pub struct NoCandidate {
    pub stable: i64,
}

/// An operator's `rollout promote` (every node gets the candidate) or `rollout abort` (the
/// canaries go back; the same content is not proposed again).
pub fn end(shared: &FleetState, promote: bool, now_ms: u64) -> Result<FleetState, NoCandidate> {
    let none = || NoCandidate {
        stable: shared.stable.revision,
    };
    if promote {
        return promoted(shared, now_ms, "an operator".into()).ok_or_else(none);
    }
    let candidate = shared.candidate.as_ref().ok_or_else(none)?;
    Ok(FleetState {
        aborted: Some(candidate.mark.clone()),
        candidate: None,
        ..shared.clone()
    })
}

/// What a replica's cache serves, by content version: the stable generation, and the
/// candidate with its phase's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Local {
    pub stable: String,
    pub candidate: Option<(String, &'static str)>,
}

/// One change to a replica's cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Follow {
    /// Load this generation's documents and publish them (the first publication goes to
    /// every node; later ones become the candidate, replacing any).
    Publish(Mark),
    /// Every node gets the candidate.
    Promote,
    /// The canaries go back to the stable generation.
    Abort,
    /// The candidate enters this phase.
    Phase(Phase),
}

/// The changes that make a replica's cache (`local`) serve what `shared` says, in order
/// (`bake_left` as [`FleetPhase::local`] takes it).
pub fn follow(
    local: &Local,
    shared: &FleetState,
    now: Instant,
    bake_left: Option<Duration>,
) -> Vec<Follow> {
    let mut steps = Vec::new();
    let mut candidate = local.candidate.clone();
    if local.stable != shared.stable.version {
        if candidate.as_ref().map(|c| &c.0) != Some(&shared.stable.version) {
            // Neither of what this replica serves is the promoted generation (it missed
            // steps while etcd was away): load it and make it stable.
            steps.push(Follow::Publish(shared.stable.clone()));
        }
        steps.push(Follow::Promote);
        candidate = None;
    }
    match (&shared.candidate, candidate) {
        (None, None) => {}
        (None, Some(_)) => steps.push(Follow::Abort),
        (Some(c), held) => {
            let phase = c.phase.local(now, bake_left);
            match held {
                Some((version, name)) if version == c.mark.version => {
                    if name != phase.name() {
                        steps.push(Follow::Phase(phase));
                    }
                }
                _ => {
                    steps.push(Follow::Publish(c.mark.clone()));
                    if phase != Phase::Canary {
                        steps.push(Follow::Phase(phase));
                    }
                }
            }
        }
    }
    steps
}

#[cfg(test)]
mod tests;

pub mod driver;
pub mod store;
