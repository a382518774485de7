//! One view of the fleet across replicas: the summary each replica shares of its proxies
//! ([`ReplicaSummary`]: node, versions per type, last NACK, generation), and what `/status`
//! says of every replica ([`ReplicasStatus`]). `admin::standing` judges them with this
//! replica's status.
//!
//! On an etcd source every replica keeps its summary beside the prefix on a lease
//! (`crate::sharing`, a task of its own outside the admin server), so any replica shows the whole fleet and a replica that stops is gone
//! within the lease's time. From files there is no shared store: the view is this
//! replica's, and `/status` says so (`store: "none"`).
//!
//! Must not: read the fleet or the cache (it summarizes the [`Status`] it is given), judge
//! where the fleet stands (`admin::standing`), or decide a rollout (`rollout::fleetwide`'s,
//! from its own verdicts).

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::Status;
use crate::fleet::SyncStatus;

/// The most bytes of nodes a summary lists (etcd's requests are at most 1.5 MiB by
/// default): nodes with a problem come first, the rest are counted.
const MAX_NODE_BYTES: usize = 256 * 1024;

/// The longest NACK text a summary keeps of a type.
const MAX_ERROR_CHARS: usize = 1024;

/// One replica's summary of its proxies, as it shares it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaSummary {
    /// The replica's name (`serve --replica-name`, by default its host name).
    pub replica: String,
    /// Its admin API's address, as it serves it (`serve --admin-addr`), to reach it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub admin: String,
    /// When it took this summary (RFC 3339, its clock: shown, never compared with another
    /// host's).
    #[serde(default)]
    pub at: String,
    /// Where this replica stands on its own (`DONE`, `UPDATING`, `NACKED`, ...).
    pub standing: super::standing::meaning::Standing,
    /// The generation serving every node (during a rollout, every node but the canaries),
    /// the etcd revision of the replica's last load, and what the serving generation serves
    /// (`Config::content_version`, equal on replicas that serve the same documents).
    pub generation: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    #[serde(default)]
    pub version: String,
    /// The change its last load holds: the revision of the newest write under the prefix as
    /// of `revision` (the same on every replica that loaded the same documents, whenever
    /// each read them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<i64>,
    /// The last load: whether it was good, and its errors (the first few).
    pub config_ok: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// How many proxies are connected, how many run the serving generation with every type
    /// synced, and how many NACK.
    pub proxies: usize,
    pub synced: usize,
    pub nacked: usize,
    /// The proxies, those with a problem first, as many as fit; `omitted` more.
    pub nodes: Vec<NodeSummary>,
    #[serde(default)]
    pub omitted: usize,
    /// The replica stopped (it was told to: SIGTERM, a rollout of the Deployment) and
    /// wrote this as it went; kept [`crate::sharing::LEFT_FOR`], then gone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub left: bool,
}

/// One proxy in a replica's summary.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSummary {
    pub node_id: String,
    pub node_cluster: String,
    /// Its node group (see `NodeStatus::group`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    pub generation: u64,
    /// The content version of the generation it runs (`Config::content_version`: the same
    /// on every replica), when that generation is in the replica's history.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// By type (`CDS`, ...): its state, the version it ACKed, and its NACK's text.
    pub types: BTreeMap<String, TypeSummary>,
}

/// One type of one proxy in a summary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeSummary {
    pub state: SyncStatus,
    #[serde(default)]
    pub version_acked: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Under a NACK: what the node still runs (`TypeStatusJson::last_good`), or how far back
    /// its replica keeps when that is older (`TypeStatusJson::kept`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_good: Option<super::LastGood>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<super::Kept>,
}

impl ReplicaSummary {
    /// Whether it says the same as `other` but for when it was taken.
    pub fn same_but_time(&self, other: &ReplicaSummary) -> bool {
        ReplicaSummary {
            at: String::new(),
            ..self.clone()
        } == ReplicaSummary {
            at: String::new(),
            ..other.clone()
        }
    }
}

impl NodeSummary {
    /// Whether it runs `generation` with every type synced.
    fn synced(&self, generation: u64) -> bool {
        self.generation == generation
            && self
                .types
                .values()
                .all(|t| matches!(t.state, SyncStatus::Synced | SyncStatus::NotSent))
    }

    fn nacked(&self) -> bool {
        self.types.values().any(|t| t.state == SyncStatus::Nacked)
    }
}

/// This replica's summary of `status` (its own, without the other replicas), where it
/// stands on its own being `standing` (`admin::standing::replica_standing`'s name).
pub fn summarize(
    status: &Status,
    replica: &str,
    standing: super::standing::meaning::Standing,
) -> ReplicaSummary {
    let serving = status
        .history
        .iter()
        .find(|e| e.generation == status.generation);
    let mut nodes: Vec<NodeSummary> = status
        .nodes
        .iter()
        .map(|n| NodeSummary {
            node_id: n.node_id.clone(),
            node_cluster: n.node_cluster.clone(),
            group: n.group.clone(),
            generation: n.generation,
            version: version_of(status, n.generation),
            types: n
                .types
                .iter()
                .map(|(kind, t)| {
                    let error = t
                        .error
                        .as_ref()
                        .map(|e| e.chars().take(MAX_ERROR_CHARS).collect());
                    let summary = TypeSummary {
                        state: t.state,
                        version_acked: t.version_acked.clone(),
                        error,
                        last_good: t.last_good.clone(),
                        kept: t.kept,
                    };
                    (kind.clone(), summary)
                })
                .collect(),
        })
        .collect();
    let proxies = nodes.len();
    let synced = nodes.iter().filter(|n| n.synced(status.generation)).count();
    let nacked = nodes.iter().filter(|n| n.nacked()).count();
    // NACKs first, then those not yet on the serving generation, then node id order.
    nodes.sort_by_key(|n| (!n.nacked(), n.synced(status.generation)));
    let mut kept = Vec::new();
    let mut bytes = 0;
    for node in nodes {
        bytes += serde_json::to_string(&node).map_or(0, |s| s.len());
        if bytes > MAX_NODE_BYTES {
            break;
        }
        kept.push(node);
    }
    let config = status.config.as_ref();
    ReplicaSummary {
        replica: replica.to_string(),
        admin: String::new(),
        at: status.at.clone(),
        standing,
        generation: status.generation,
        revision: status.config.as_ref().and_then(|c| c.revision),
        changed: None,
        version: serving.map(|e| e.version.clone()).unwrap_or_default(),
        config_ok: config.is_none_or(|c| c.ok),
        errors: config
            .map(|c| c.errors.iter().take(5).cloned().collect())
            .unwrap_or_default(),
        proxies,
        synced,
        nacked,
        omitted: proxies - kept.len(),
        nodes: kept,
        left: false,
    }
}

/// The content version of `generation`, from the status's history (empty when it is not
/// there: older than the history kept).
pub fn version_of(status: &Status, generation: u64) -> String {
    status
        .history
        .iter()
        .find(|e| e.generation == generation)
        .map(|e| e.version.clone())
        .unwrap_or_default()
}

/// Where the replicas share their summaries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Store {
    /// Every replica's summary, shared through etcd.
    Etcd,
    /// From files there is no shared store: this view is this replica's alone.
    #[default]
    None,
    /// A store a newer server names, which this one does not know: taken as shared.
    #[serde(other)]
    Unknown,
}

/// What `/status` says of the replicas behind the view.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicasStatus {
    /// `etcd`: every replica's summary, shared through etcd. `none`: from files there is
    /// no shared store, and this view is this replica's alone.
    pub store: Store,
    /// This replica's name among the summaries.
    #[serde(default)]
    pub this: String,
    /// When this replica's view last changed (RFC 3339, its clock), and why it cannot follow
    /// the summaries since, if it cannot.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub read_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The summaries below are as last read, not followed since (etcd does not answer this
    /// replica): they may no longer be true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stale: bool,
    /// The etcd revision of this replica's load the summaries were compared with, and the
    /// replicas that had not loaded the same documents then (their last load is older, and
    /// the documents changed since, or etcd could not tell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub against: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub behind: Vec<String>,
    /// etcd's revision when the keys under the prefix had changed past what this replica's
    /// follower reached: a load on its way, or held while an apply switches the prefix over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_ahead: Option<i64>,
    /// Every replica's summary, by replica (this one's too, as it last shared it).
    #[serde(default)]
    pub replicas: Vec<ReplicaSummary>,
    /// Replicas whose summary went without their leaving (killed, or cut off from etcd
    /// past their lease), seen here in the last [`crate::sharing::VANISHED_FOR`]: listed with their
    /// proxies that no replica serves since, holding no gate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vanished: Vec<Vanished>,
}

/// A replica whose summary went without its leaving.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vanished {
    pub replica: String,
    /// Its admin API's address, as its last summary gave it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub admin: String,
    /// When this replica saw its summary gone (RFC 3339, this replica's clock), and how many
    /// proxies it had.
    pub since: String,
    pub proxies: usize,
    /// The node ids its last summary listed, and how many more it had (not listed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    #[serde(default)]
    pub omitted: usize,
    /// Those of `nodes` that no replica of the view serves now: orphaned (they reconnect
    /// nowhere, or not yet). Named, never holding a gate: no replica can serve them news.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub orphaned: Vec<String>,
}

impl ReplicasStatus {
    /// The view from files: this replica's alone.
    pub fn unshared() -> ReplicasStatus {
        ReplicasStatus {
            store: Store::None,
            ..ReplicasStatus::default()
        }
    }

    /// Whether the summaries come from a store every replica shares.
    pub fn shared(&self) -> bool {
        self.store != Store::None
    }

    /// How many replicas share the view, and how many left it (stopped, still listed).
    pub fn sharing_and_left(&self) -> (usize, usize) {
        let left = self.replicas.iter().filter(|r| r.left).count();
        (self.replicas.len() - left, left)
    }

    /// The other replicas' summaries (those that left aside).
    pub fn others(&self) -> impl Iterator<Item = &ReplicaSummary> {
        self.replicas
            .iter()
            .filter(|r| r.replica != self.this && !r.left)
    }
}

/// What one replica follows of every replica's summary.
#[derive(Clone, Debug, Default)]
pub struct View {
    pub read_at: Option<SystemTime>,
    /// The summaries cannot be followed since, and why: they are as last read (stale once
    /// that has lasted `source::etcd::OUTAGE_AFTER`).
    pub lost: Option<Lost>,
    pub against: Option<i64>,
    pub behind: Vec<String>,
    pub source_ahead: Option<i64>,
    pub summaries: Vec<ReplicaSummary>,
    pub vanished: Vec<Vanished>,
}

/// Since when a replica cannot follow the summaries, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lost {
    pub since: std::time::Instant,
    pub at: SystemTime,
    pub error: String,
}

impl Lost {
    /// Whether it has lasted long enough to be said: a stall shorter is not.
    pub fn said(&self) -> bool {
        self.since.elapsed() >= crate::source::etcd::OUTAGE_AFTER
    }
}

impl View {
    /// Whether it says the same as `other` but for when it was read.
    pub fn same_as(&self, other: &View) -> bool {
        self.lost == other.lost
            && self.against == other.against
            && self.behind == other.behind
            && self.source_ahead == other.source_ahead
            && self.summaries == other.summaries
            && self.vanished == other.vanished
    }
}

/// This replica's name and its view of the others, for the admin routes.
#[derive(Clone, Debug)]
pub struct Replicas {
    pub this: String,
    pub view: tokio::sync::watch::Receiver<View>,
}

impl Replicas {
    pub fn status(&self) -> ReplicasStatus {
        let view = self.view.borrow();
        ReplicasStatus {
            store: Store::Etcd,
            this: self.this.clone(),
            read_at: view
                .read_at
                .map(crate::fleet::format_time)
                .unwrap_or_default(),
            error: view
                .lost
                .as_ref()
                .filter(|l| l.said())
                .map(|l| l.error.clone()),
            stale: view.lost.as_ref().is_some_and(Lost::said),
            against: view.against,
            behind: view.behind.clone(),
            source_ahead: view.source_ahead,
            replicas: view.summaries.clone(),
            vanished: orphaned(&view.vanished, &view.summaries),
        }
    }
}

/// `vanished`, each with its nodes that no summary of `live` lists (those that left
/// aside): the proxies no replica serves now.
pub fn orphaned(vanished: &[Vanished], live: &[ReplicaSummary]) -> Vec<Vanished> {
    let served: BTreeSet<&str> = live
        .iter()
        .filter(|r| !r.left)
        .flat_map(|r| r.nodes.iter().map(|n| n.node_id.as_str()))
        .collect();
    vanished
        .iter()
        .map(|v| Vanished {
            orphaned: v
                .nodes
                .iter()
                .filter(|n| !served.contains(n.as_str()))
                .cloned()
                .collect(),
            ..v.clone()
        })
        .collect()
}

#[cfg(test)]
mod tests;
