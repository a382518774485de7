//! Where the fleet stands, judged from a [`Status`]: this replica's own standing, and with
//! an etcd source every other replica's summary with it ([`fleet_standing`]); what
//! `switchyard status` exits with, and the headline of the page, with the next step for a
//! person.
//!
//! Must not: read the fleet or the cache (it judges the status it is given), or know exit
//! codes (the CLI's).

pub mod meaning;

pub use meaning::{Severity, Standing};

use super::replicas::ReplicaSummary;
use super::Status;
use crate::fleet::SyncStatus;

/// Where `status` says the fleet stands: this replica's standing, and with an etcd source
/// every other replica's summary ([`fleet_standing`]).
pub fn verdict(status: &Status) -> Standing {
    fleet_standing(status).0
}

/// Where this replica alone stands by `status`. In order: a failed load, a source that does
/// not answer, a stopped rollout, a NACK, a rollout in progress, a node still updating.
pub fn replica_standing(status: &Status) -> Standing {
    use crate::fleet::SyncStatus;
    if status.config.as_ref().is_some_and(|c| !c.ok) {
        return Standing::LoadFailed;
    }
    if !status.tasks_down.is_empty() {
        return Standing::TaskDown;
    }
    let source = status.config.as_ref().and_then(|c| c.source.as_ref());
    if source.is_some_and(|s| !s.answering) {
        return Standing::SourceDown;
    }
    let fleet = status.fleet.as_ref();
    use super::RolloutState::Halted;
    if status.rollout.as_ref().is_some_and(|r| r.state == Halted)
        || fleet.is_some_and(|f| f.state == Some(Halted))
    {
        return Standing::RolloutStopped;
    }
    // A NACK counts once the node has the newest generation: one still on an older
    // generation (the newest published, not yet sent it) NACKed what it is being replaced,
    // and is updating.
    if status.nodes.iter().any(|n| {
        n.generation >= status.generation && n.types.values().any(|t| t.state == SyncStatus::Nacked)
    }) {
        return Standing::Nacked;
    }
    if status.rollout.is_some() || fleet.is_some_and(|f| f.candidate.is_some()) {
        return Standing::RollingOut;
    }
    if files_differ_from_what_serves(status) {
        return Standing::RolloutStopped;
    }
    // A file changed after the last load, not loaded yet: the served generation is older
    // than the files.
    if status.config.as_ref().is_some_and(|c| c.unread.is_some()) {
        return Standing::Updating;
    }
    let updating = status.nodes.iter().any(|n| {
        // A one-off poll (a person with curl, a probe) answered with what serves holds no
        // gate: no next poll will say it took it. One answered an older generation holds
        // it a few seconds (`StreamStatus::holds_gate_until`), for a poller that polls on
        // to show its cadence.
        let one_off = !n.streams.is_empty() && n.streams.iter().all(|s| s.one_off());
        let gating = n.streams.is_empty() || n.streams.iter().any(|s| s.holds_gate_at(&status.at));
        (n.generation != status.generation && gating)
            || (!one_off && n.types.values().any(|t| t.state == SyncStatus::Stale))
            || n.streams.iter().any(|s| s.plan.is_some())
    });
    if updating {
        Standing::Updating
    } else {
        Standing::Done
    }
}

/// When the earliest hold of a one-off poll on a gate ends after `status` was taken
/// (`StreamStatus::holds_gate_until`): where this replica stands may change then with
/// nothing else moving.
pub fn holds_end(status: &Status) -> Option<std::time::SystemTime> {
    let at = humantime::parse_rfc3339(&status.at).ok()?;
    status
        .nodes
        .iter()
        .flat_map(|n| &n.streams)
        .filter_map(|s| s.holds_gate_until.as_deref())
        .filter_map(|t| humantime::parse_rfc3339(t).ok())
        .filter(|end| *end > at)
        .min()
}

/// No rollout on, and the newest loaded generation is not the one that serves: a rollout of
/// it was aborted.
pub fn files_differ_from_what_serves(status: &Status) -> bool {
    status.rollout.is_none()
        && status
            .config
            .as_ref()
            .is_some_and(|c| c.ok && c.generation != status.generation)
}

/// Why the fleet is not where this replica alone is: a replica named, and what of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lagging {
    pub replica: String,
    pub standing: Standing,
    pub why: String,
}

/// Where the fleet stands from `status`: this replica's own standing, then every other
/// replica's summary (with an etcd source). A replica's report counts for the documents this
/// replica loaded last once it is about them: its own last load read them (or a newer
/// revision), or etcd says nothing changed between (`behind` says which are not). One that
/// has not loaded them is still updating, whatever it said of older documents, a failed
/// load of those among them; a source away from it counts as it is. A replica that
/// stands worse counts (a NACK on it is the fleet's). Liveness is the lease: a replica
/// whose summary is listed is alive, one whose lease ended is no longer listed (its
/// proxies are judged where they reconnect, and those that reconnect nowhere are named as
/// orphaned, holding no gate). While this replica cannot follow the summaries, the fleet
/// is [`Standing::ReplicaUnseen`]. The worst standing wins, in the order
/// [`Standing::rank`] gives; the replicas that make it so are returned, worst first.
pub fn fleet_standing(status: &Status) -> (Standing, Vec<Lagging>) {
    let own = replica_standing(status);
    let Some(replicas) = status.replicas.as_ref().filter(|r| r.shared()) else {
        return (own, Vec::new());
    };
    let mut lagging = Vec::new();
    if let Some(error) = replicas.error.as_ref().filter(|_| replicas.stale) {
        lagging.push(Lagging {
            replica: replicas.this.clone(),
            standing: Standing::ReplicaUnseen,
            why: format!(
                "this replica cannot follow the other replicas' summaries ({error}); their rows \
                 are as last read{}, and may no longer be true",
                if replicas.read_at.is_empty() {
                    String::new()
                } else {
                    format!(" at {}", replicas.read_at)
                }
            ),
        });
    }
    // This replica is behind its source: the prefix changed in etcd past what its follower
    // reached (as of the summaries' read: a newer load answers it).
    let loaded = status.config.as_ref().and_then(|c| c.revision);
    if let Some(ahead) = replicas.source_ahead.filter(|_| replicas.against >= loaded) {
        lagging.push(Lagging {
            replica: replicas.this.clone(),
            standing: Standing::Updating,
            why: format!(
                "the prefix changed in etcd since what it loaded ({}): etcd is at revision \
                 {ahead} (a load on its way, or an apply switching the prefix over)",
                revision_text(loaded)
            ),
        });
    }
    // The summaries were compared with an older load of this replica's: of the others,
    // only those whose own load read this revision or a newer one are known to have it.
    let stale = loaded.is_some() && replicas.against < loaded;
    for other in replicas.others() {
        // A word this release does not know: not done, so still updating.
        let standing = match other.standing {
            Standing::Unknown => Standing::Updating,
            standing => standing,
        };
        let behind = replicas.behind.contains(&other.replica) || (stale && other.revision < loaded);
        // What a replica that has not loaded the newest documents says is about older
        // ones: only a source away from it counts as it is.
        let standing = match standing {
            Standing::SourceDown => standing,
            _ if behind => Standing::Updating,
            _ => standing,
        };
        if standing == Standing::Done {
            continue;
        }
        let why = if behind && standing == Standing::Updating {
            format!(
                "has not loaded the documents this replica loaded at {} (its last load read {})",
                revision_text(loaded),
                revision_text(other.revision)
            )
        } else {
            replica_problem(other, standing)
        };
        lagging.push(Lagging {
            replica: other.replica.clone(),
            standing,
            why,
        });
    }
    lagging.sort_by_key(|l| l.standing.rank());
    let fleet = lagging
        .iter()
        .map(|l| l.standing)
        .chain([own])
        .min_by_key(|s| s.rank())
        .unwrap_or(own);
    (fleet, lagging)
}

/// Where the replicas that can be seen stand: [`fleet_standing`] leaving out each replica
/// that is [`Standing::ReplicaUnseen`] (and a view that cannot be read).
pub fn seen_standing(status: &Status) -> Standing {
    let (_, lagging) = fleet_standing(status);
    lagging
        .iter()
        .map(|l| l.standing)
        .filter(|s| *s != Standing::ReplicaUnseen)
        .chain([replica_standing(status)])
        .min_by_key(|s| s.rank())
        .unwrap_or(Standing::Done)
}

fn revision_text(revision: Option<i64>) -> String {
    match revision {
        Some(r) => format!("revision {r}"),
        None => "no revision".into(),
    }
}

/// What a replica's summary says is wrong with it, in a line.
fn replica_problem(summary: &ReplicaSummary, standing: Standing) -> String {
    let nack = summary.nodes.iter().find_map(|n| {
        n.types.iter().find_map(|(kind, t)| {
            (t.state == SyncStatus::Nacked).then(|| {
                format!(
                    ": {} rejected {kind}: {}",
                    n.node_id,
                    t.error.as_deref().unwrap_or("")
                )
            })
        })
    });
    match standing {
        Standing::LoadFailed => format!(
            "{}{}",
            standing.text(),
            summary
                .errors
                .first()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        ),
        Standing::Nacked => format!("{}{}", standing.text(), nack.unwrap_or_default()),
        Standing::Updating => format!(
            "{} ({} of {} proxies synced on generation {})",
            standing.text(),
            summary.synced,
            summary.proxies,
            summary.generation
        ),
        _ => standing.text().to_string(),
    }
}
