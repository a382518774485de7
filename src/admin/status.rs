//! What `/status` answers (and `switchyard status --output json` reads): its JSON shapes,
//! and putting one together from the fleet's reports, the cache, the last load and the
//! rollouts.
//!
//! Must not: serve HTTP (the admin routes do) or change anything it reads.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Admin;
use crate::fleet::{format_time, StreamReport, SyncStatus, TypeReport};
use crate::resource::ResourceType;

/// The schema `/status` (and `switchyard status --output json`) follows (docs/output.md).
pub const STATUS_SCHEMA: &str = "switchyard.status/v1";

/// `GET /status`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Status {
    /// `switchyard.status/v1` (docs/output.md): fields are only added within a version.
    #[serde(default)]
    pub schema: String,
    /// When the server took this status (RFC 3339): what the page says it is "as of".
    #[serde(default)]
    pub at: String,
    /// One entry per connected node (by node id), in node id order.
    pub nodes: Vec<NodeStatus>,
    /// The last config load, or `None` before the first.
    pub config: Option<ConfigStatus>,
    /// A staged rollout in progress (serve --canary-id/--canary-cluster), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
    /// The generation every node gets (during a rollout, every node but the canaries).
    #[serde(default)]
    pub generation: u64,
    /// This server: its version, the Envoy API it reads files with, and the operator's
    /// descriptor sets.
    #[serde(default)]
    pub server: ServerInfo,
    /// The certificates secrets are read from on this host (`switchyard_files`), in the
    /// newest generation.
    #[serde(default)]
    pub certificates: Vec<CertificateStatus>,
    /// The admission of new streams (`--max-new-streams-per-second`), if limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_streams: Option<NewStreamsStatus>,
    /// `--source` with canaries: the fleet's rollout as etcd keeps it, which this replica
    /// follows (`rollout` is this replica's view of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetStatus>,
    /// The last generations this server published, newest first (at most
    /// [`HISTORY_SHOWN`]), with how many nodes ACKed and NACKed each.
    #[serde(default)]
    pub history: Vec<crate::history::Entry>,
    /// The replicas behind the view: with an etcd source every replica's summary of its
    /// proxies; from files, none (`store: "none"`: this view is this replica's alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<super::replicas::ReplicasStatus>,
    /// This replica's long-running tasks that stopped (ended or panicked) and wait to be
    /// started again (`supervise`): none while every task runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks_down: Vec<crate::supervise::TaskDown>,
}

/// How many generations `/status` lists.
pub const HISTORY_SHOWN: usize = 10;

/// Where a staged rollout is, as `/status` says it: `CANARY`, `BAKING`, `HALTED`; a state a
/// newer server says that this one does not know reads as `Unknown` (and is never judged
/// halted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RolloutState {
    Canary,
    Baking,
    Halted,
    #[serde(other)]
    Unknown,
}

impl RolloutState {
    pub fn name(self) -> &'static str {
        match self {
            RolloutState::Canary => "CANARY",
            RolloutState::Baking => "BAKING",
            RolloutState::Halted => "HALTED",
            RolloutState::Unknown => "UNKNOWN",
        }
    }
}

impl std::fmt::Display for RolloutState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl From<&crate::rollout::Phase> for RolloutState {
    fn from(phase: &crate::rollout::Phase) -> RolloutState {
        match phase {
            crate::rollout::Phase::Canary => RolloutState::Canary,
            crate::rollout::Phase::Baking { .. } => RolloutState::Baking,
            crate::rollout::Phase::Halted { .. } => RolloutState::Halted,
        }
    }
}

impl From<&crate::rollout::fleetwide::FleetPhase> for RolloutState {
    fn from(phase: &crate::rollout::fleetwide::FleetPhase) -> RolloutState {
        use crate::rollout::fleetwide::FleetPhase;
        match phase {
            FleetPhase::Canary => RolloutState::Canary,
            FleetPhase::Baking { .. } => RolloutState::Baking,
            FleetPhase::Halted { .. } => RolloutState::Halted,
        }
    }
}

/// The fleet's rollout kept in etcd, for `/status`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetStatus {
    /// This replica's name among the verdicts.
    pub replica: String,
    /// The etcd revision of the promoted generation (every node but the canaries), when and
    /// by what it was promoted; `None` before the state is read.
    pub promoted: Option<i64>,
    #[serde(default)]
    pub promoted_at: String,
    #[serde(default)]
    pub promoted_by: String,
    /// The revision rolling out to the canaries, its phase (`CANARY`, `BAKING`, `HALTED`),
    /// and why it halted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<RolloutState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The last revision an operator aborted (not proposed again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted: Option<i64>,
    /// Every replica's verdict on the candidate, by replica.
    #[serde(default)]
    pub replicas: Vec<ReplicaVerdict>,
}

/// One replica's verdict on the fleet's candidate.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaVerdict {
    pub replica: String,
    /// Whether this is about the candidate now rolling out (else it is stale).
    pub current: bool,
    pub canaries: usize,
    pub synced: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nacked: Option<String>,
}

impl FleetStatus {
    pub fn of(view: &crate::rollout::fleetwide::driver::FleetView) -> FleetStatus {
        use crate::rollout::fleetwide::FleetPhase;
        let shared = view.shared.as_ref();
        let candidate = shared.and_then(|s| s.candidate.as_ref());
        let at = |ms: u64| format_time(std::time::UNIX_EPOCH + Duration::from_millis(ms));
        FleetStatus {
            replica: view.replica.clone(),
            promoted: shared.map(|s| s.stable.revision),
            promoted_at: shared.map(|s| at(s.promoted_ms)).unwrap_or_default(),
            promoted_by: shared.map(|s| s.promoted_by.clone()).unwrap_or_default(),
            candidate: candidate.map(|c| c.mark.revision),
            state: candidate.map(|c| RolloutState::from(&c.phase)),
            reason: candidate.and_then(|c| match &c.phase {
                FleetPhase::Halted { reason } => Some(reason.clone()),
                _ => None,
            }),
            aborted: shared.and_then(|s| s.aborted.as_ref().map(|a| a.revision)),
            replicas: view
                .verdicts
                .iter()
                .map(|(replica, v)| ReplicaVerdict {
                    replica: replica.clone(),
                    current: candidate.is_some_and(|c| c.mark.version == v.candidate),
                    canaries: v.canaries,
                    synced: v.synced,
                    nacked: v
                        .nacked
                        .as_ref()
                        .map(|(node, kind, error)| format!("{node} rejected {kind}: {error}")),
                })
                .collect(),
        }
    }
}

/// A rollout for `/status`: the phase, the generations and since when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutStatus {
    /// `CANARY`, `BAKING` or `HALTED`.
    pub state: RolloutState,
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
        phase: &crate::rollout::Phase,
        stable: u64,
        candidate: u64,
        policy: &crate::rollout::Policy,
        since: std::time::SystemTime,
    ) -> Self {
        RolloutStatus {
            state: RolloutState::from(phase),
            stable,
            candidate,
            canary: policy.canary_text.clone(),
            reason: match phase {
                crate::rollout::Phase::Halted { reason } => Some(reason.clone()),
                _ => None,
            },
            since: format_time(since),
        }
    }
}

/// How new streams are let in, and how many were turned away.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NewStreamsStatus {
    pub per_second: u32,
    pub burst: u32,
    /// Streams ended at once with RESOURCE_EXHAUSTED since the server started.
    pub turned_away: u64,
}

/// One certificate file a secret is read from.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CertificateStatus {
    pub secret: String,
    /// `certificate_chain` or `trusted_ca`.
    pub role: String,
    pub file: String,
    pub subject: String,
    pub serial: String,
    pub not_after: String,
    /// `ok`, `expiring` (within the warning time) or `expired`, as of now.
    pub state: String,
}

impl CertificateStatus {
    fn of(c: &crate::config::CertificateInfo, now: std::time::SystemTime) -> CertificateStatus {
        let end = c.expires_at();
        let state = match end.duration_since(now) {
            Err(_) => "expired",
            Ok(left) if left < crate::config::secret_files::EXPIRY_WARNING => "expiring",
            Ok(_) => "ok",
        };
        CertificateStatus {
            secret: c.secret.clone(),
            role: c.role.to_string(),
            file: c.file.display().to_string(),
            subject: c.subject.clone(),
            serial: c.serial.clone(),
            not_after: humantime::format_rfc3339_seconds(end).to_string(),
            state: state.to_string(),
        }
    }
}

/// What this server is and reads files with.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ServerInfo {
    pub version: String,
    /// The Envoy release whose API (every message, extension, cncf/xds and udpa) the files
    /// are read with.
    pub envoy_api: String,
    /// `--descriptor-set` files, whose types are read too.
    pub descriptor_sets: Vec<String>,
}

impl ServerInfo {
    pub fn current() -> ServerInfo {
        ServerInfo {
            version: env!("CARGO_PKG_VERSION").to_string(),
            envoy_api: crate::config::descriptors::ENVOY_API_VERSION.to_string(),
            descriptor_sets: crate::config::descriptors::installed_sets()
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
        }
    }
}

/// One connected node: who it is, its streams, and per type what it has.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeStatus {
    pub node_id: String,
    pub node_cluster: String,
    pub user_agent: String,
    pub user_agent_version: String,
    pub client_features: Vec<String>,
    /// The generation the node's streams have taken (the oldest, if they differ).
    #[serde(default)]
    pub generation: u64,
    /// Its node group in the newest generation: the files with a `nodes:` selector that
    /// match it, by name, joined by `+` (empty: it gets only the files for every node).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    pub streams: Vec<StreamStatus>,
    /// By type (`CDS`, `EDS`, ...), from whichever of its streams serves that type.
    pub types: BTreeMap<String, TypeStatusJson>,
}

/// One open stream of a node.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StreamStatus {
    pub peer: String,
    /// `ADS` or a type (`CDS`, ...) for a per-type service.
    pub stream: String,
    /// `sotw` or `delta`.
    pub protocol: String,
    pub connected_since: String,
    /// A make-before-break plan in progress on the stream, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanStatusJson>,
    /// A poller (`REST`, `Fetch`): how often it polls, as observed (milliseconds between
    /// its last two polls, its quickest subscription's); `once` when it was heard once (a
    /// one-off poll: once answered with what serves, it holds no gate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub polls: Option<Polls>,
    /// A poller: when it last polled (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_poll: Option<String>,
    /// A one-off poll: until when it holds the gate of a generation it does not have (RFC
    /// 3339), [`crate::fleet::POLLER_QUIET_MIN`] after its poll; a poller that keeps polling
    /// has polled again by then, and is waited for by its cadence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holds_gate_until: Option<String>,
    /// Types this server does not serve that the proxy asked for on this stream (P33),
    /// answered as resources that do not exist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown_types: Vec<crate::fleet::UnknownTypeReport>,
}

/// A make-before-break plan in progress on one stream.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlanStatusJson {
    /// The step being served, from 1, of `steps`.
    pub step: usize,
    pub steps: usize,
    /// How many resources the update holds back because they refer (directly or not) to
    /// something the proxy rejected, and the type of that NACK.
    #[serde(default)]
    pub held_back: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nacked: Option<String>,
    /// When the plan started.
    pub since: String,
}

/// How often a poller polls, as observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Polls {
    /// Heard once: a one-off poll.
    Once,
    /// Every so many milliseconds.
    EveryMs(u64),
}

impl StreamStatus {
    /// Whether it is a one-off poll: heard once, with no cadence to keep.
    pub fn one_off(&self) -> bool {
        self.polls == Some(Polls::Once)
    }

    /// Whether it holds a gate on a generation it does not have at `at` (RFC 3339): a
    /// stream, or a poller with a cadence, does; a one-off poll only until
    /// `holds_gate_until`.
    pub fn holds_gate_at(&self, at: &str) -> bool {
        if !self.one_off() {
            return true;
        }
        let parse = |t: &str| humantime::parse_rfc3339(t).ok();
        match (self.holds_gate_until.as_deref().and_then(parse), parse(at)) {
            (Some(until), Some(at)) => at < until,
            _ => false,
        }
    }

    /// `ADS/delta`, with the plan in progress if any: `ADS/delta (updating 1/3)`,
    /// `ADS/sotw (updating 2/3, 2 held back by a CDS NACK)`; a poller's cadence:
    /// `REST/rest (every 1s)`, `REST/rest (one poll)`.
    pub fn label(&self) -> String {
        let base = format!("{}/{}", self.stream, self.protocol);
        let base = match self.polls {
            Some(Polls::Once) => format!("{base} (one poll)"),
            Some(Polls::EveryMs(ms)) => format!(
                "{base} (every {})",
                humantime::format_duration(Duration::from_millis(ms - ms % 100))
            ),
            None => base,
        };
        match &self.plan {
            None => base,
            Some(p) => match (&p.nacked, p.held_back) {
                (Some(kind), held) if held > 0 => format!(
                    "{base} (updating {}/{}, {held} held back by a {kind} NACK)",
                    p.step, p.steps
                ),
                _ => format!("{base} (updating {}/{})", p.step, p.steps),
            },
        }
    }
}

/// One type of one node.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TypeStatusJson {
    pub state: SyncStatus,
    pub version_sent: String,
    pub version_acked: String,
    pub nonce: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected_version: Option<String>,
    /// What the rejected response added or changed against what the proxy holds (the first
    /// 20), and where each is written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected_changes: Vec<crate::fleet::RejectedChange>,
    /// The size of the latest response when it went over `--max-response-bytes` whole (it
    /// could not be split): a client with a receive limit refuses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oversized_bytes: Option<usize>,
    /// Names the proxy subscribes to that do not exist for it: the latest responses told it
    /// so (`NOT_FOUND`, P32).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_found: Vec<String>,
    pub last_change: String,
    /// For a NACK: what the node still runs of this type, as the newest generation this
    /// replica keeps that serves it exactly that content (whatever changed in between);
    /// the change to go back to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_good: Option<LastGood>,
    /// For a NACK with no `last_good`: what it runs is older than anything kept here, the
    /// oldest generation kept and how many (`serve --keep-generations`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<Kept>,
}

/// The generations a replica keeps: the oldest, and how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept {
    pub oldest: u64,
    pub generations: usize,
}

/// The newest generation kept whose snapshot for a node has the version it ACKed of a type:
/// its number here, its etcd revision (from etcd) and its content version (the same on
/// every replica).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastGood {
    pub generation: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    #[serde(default)]
    pub version: String,
}

/// The last config load.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ConfigStatus {
    pub ok: bool,
    pub at: String,
    /// The generation serving (0: nothing loaded yet).
    pub generation: u64,
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
    /// `--source`: the etcd revision the last load read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// The files: the number of the last load's read of them since the server started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<u64>,
    /// The last load went to the fleet's rollout, which has not served it as a generation
    /// yet (`generation` is the one serving meanwhile).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending: bool,
    /// `--source`: whether etcd answers, since when, and why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceStatus>,
    /// The files: one changed after this load's read of them began, not loaded yet
    /// (`PATH at TIME`): the watch has it on its way, or has stopped working (`status
    /// --wait` reads the files now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unread: Option<String>,
}

/// `--source`: the source and whether it answers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SourceStatus {
    pub url: String,
    pub answering: bool,
    /// When it began answering, or stopped (RFC 3339).
    pub since: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl TypeStatusJson {
    /// This type as one of the node's streams has it, and `other` as another has it: the
    /// more pressing state (NACKED, then STALE, SYNCED, NOT_SENT) with its versions and
    /// words, and the names not found of both.
    fn merge(&mut self, other: TypeStatusJson) {
        let mut not_found = std::mem::take(&mut self.not_found);
        not_found.extend(other.not_found.iter().cloned());
        let last_change = std::cmp::max(&self.last_change, &other.last_change).clone();
        if other.state.rank() > self.state.rank() {
            *self = other;
        }
        not_found.sort();
        not_found.dedup();
        self.not_found = not_found;
        self.last_change = last_change;
    }
}

impl From<&TypeReport> for TypeStatusJson {
    fn from(t: &TypeReport) -> Self {
        TypeStatusJson {
            state: t.state,
            version_sent: t.version_sent.to_string(),
            version_acked: t.version_acked.to_string(),
            nonce: t.nonce.to_string(),
            error: t.nack.as_ref().map(|n| n.error.clone()),
            rejected_version: t.nack.as_ref().map(|n| n.rejected_version.clone()),
            rejected_changes: t
                .nack
                .as_ref()
                .map(|n| n.rejected_changes.clone())
                .unwrap_or_default(),
            oversized_bytes: t.oversized_bytes.map(|n| n as usize),
            not_found: t.not_found.as_slice().to_vec(),
            last_change: format_time(t.last_change),
            last_good: None,
            kept: None,
        }
    }
}

impl Status {
    /// Group stream reports by proxy: node id and connection. A proxy's streams share its
    /// connection (ADS, or the per-type services over one HTTP/2 connection); two proxies
    /// that claim the same node id (an Envoy hot restart, a copy-pasted bootstrap) come over
    /// two and are two entries.
    pub fn from_reports(reports: Vec<StreamReport>, config: Option<ConfigStatus>) -> Status {
        let mut nodes: BTreeMap<(String, String), NodeStatus> = BTreeMap::new();
        for r in reports {
            let node = nodes
                .entry((r.node_id.clone(), r.peer.clone()))
                .or_insert_with(|| NodeStatus {
                    node_id: r.node_id.clone(),
                    node_cluster: r.node_cluster.clone(),
                    user_agent: r.user_agent.clone(),
                    user_agent_version: r.user_agent_version.clone(),
                    client_features: r.client_features.clone(),
                    generation: r.generation,
                    group: String::new(),
                    streams: Vec::new(),
                    types: BTreeMap::new(),
                });
            node.generation = node.generation.min(r.generation);
            node.streams.push(StreamStatus {
                peer: r.peer.clone(),
                stream: r.stream.clone(),
                protocol: r.protocol.to_string(),
                connected_since: format_time(r.connected_since),
                plan: r.plan.as_ref().map(|p| PlanStatusJson {
                    step: p.step,
                    steps: p.steps,
                    held_back: p.held_back,
                    nacked: p.nacked.map(str::to_string),
                    since: format_time(p.since),
                }),
                polls: r.polls.as_ref().map(|polls| match polls.every {
                    Some(every) => Polls::EveryMs(every.as_millis() as u64),
                    None => Polls::Once,
                }),
                last_poll: r.polls.as_ref().map(|polls| format_time(polls.last)),
                holds_gate_until: None,
                unknown_types: r.unknown_types.as_slice().to_vec(),
            });
            // Over per-type services Envoy opens a stream per subscription (one per route
            // configuration, per secret, ...): a type's state is the most pressing of its
            // streams' (a NACK on any shows), and its names not found are all of theirs.
            for (kind, t) in &r.types {
                let this: TypeStatusJson = t.into();
                match node.types.get_mut(*kind) {
                    None => {
                        node.types.insert(kind.to_string(), this);
                    }
                    Some(had) => had.merge(this),
                }
            }
        }
        Status {
            schema: STATUS_SCHEMA.to_string(),
            at: format_time(std::time::SystemTime::now()),
            nodes: nodes.into_values().collect(),
            config,
            rollout: None,
            generation: 0,
            server: ServerInfo::current(),
            certificates: Vec::new(),
            new_streams: None,
            fleet: None,
            history: Vec::new(),
            replicas: None,
            tasks_down: Vec::new(),
        }
    }

    /// The source's URL as the server reads it (an etcd prefix; none from files).
    pub fn source_url(&self) -> Option<&str> {
        self.config
            .as_ref()
            .and_then(|c| c.source.as_ref())
            .map(|s| s.url.as_str())
    }

    /// Whether any node rejected any type's latest response.
    pub fn any_nacked(&self) -> bool {
        self.nodes
            .iter()
            .any(|n| n.types.values().any(|t| t.state == SyncStatus::Nacked))
    }
}

/// What `POST /source/settle` answers: the source's position that holds everything written
/// before the request, and the last load (of that position, or past it).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Settled {
    pub position: crate::source::Position,
    pub config: Option<ConfigStatus>,
}

/// The last load, and whether the source answers.
pub(super) fn config_status(admin: &Admin) -> Option<ConfigStatus> {
    config_of(admin, admin.reloader.last_report())
}

/// `report`, the last load's, with whether the source answers.
fn config_of(admin: &Admin, report: Option<crate::publish::LoadReport>) -> Option<ConfigStatus> {
    report.map(|r| ConfigStatus {
        ok: r.ok(),
        at: format_time(r.at),
        generation: r.generation,
        errors: r.errors.clone(),
        warnings: r.warnings.clone(),
        revision: r.revision,
        read: r.read,
        pending: r.pending,
        source: admin.source.now().map(|h| SourceStatus {
            url: h.url,
            answering: h.answering,
            since: format_time(h.since),
            error: h.error,
        }),
        unread: admin
            .reloader
            .unread_edit()
            .map(|(path, at)| format!("{} at {}", path.display(), format_time(at))),
    })
}

/// `/status` as of now, taken on a blocking thread: it reads the files' times (an edit not
/// loaded yet) and copies every proxy's report, which must not hold an async thread.
pub async fn status_now(admin: &Admin) -> Status {
    let taking = admin.clone();
    match tokio::task::spawn_blocking(move || current_status(&taking)).await {
        Ok(status) => status,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // The runtime is shutting down: taken here.
        Err(_) => current_status(admin),
    }
}

/// `/status` as of now: the last load's report, what serves and the proxies' reports read
/// as one (no publication between them: no proxy on a generation the report does not know).
pub(super) fn current_status(admin: &Admin) -> Status {
    let (config, serving, reports) = admin.reloader.load_reports().consistent(|report| {
        (
            config_of(admin, report),
            admin.cache.serving(),
            admin.fleet.reports(),
        )
    });
    let newest = Arc::clone(serving.newest());
    // Each proxy's node group, by node id and connection: the files with a `nodes:`
    // selector that match it (those for every node are every group's, and not named).
    let selective: Vec<_> = newest
        .config
        .files
        .iter()
        .filter(|f| !f.selector.entries().is_empty())
        .collect();
    let groups: BTreeMap<(String, String), String> = reports
        .iter()
        .map(|r| {
            let group = selective
                .iter()
                .filter(|f| f.selector.matches(&r.facts))
                .map(|f| f.label())
                .collect::<Vec<_>>()
                .join("+");
            ((r.node_id.clone(), r.peer.clone()), group)
        })
        .collect();
    let facts: BTreeMap<(String, String), Arc<crate::config::selector::NodeFacts>> = reports
        .iter()
        .map(|r| ((r.node_id.clone(), r.peer.clone()), Arc::clone(&r.facts)))
        .collect();
    // What each NACKing node still runs, by node id and connection, and type: its
    // stream's account, by content.
    let runs: BTreeMap<(String, String, &'static str), Arc<crate::protocol::Runs>> = reports
        .iter()
        .flat_map(|r| {
            r.types.iter().filter_map(|(kind, t)| {
                let runs = t.nack.as_ref()?.runs.as_ref()?;
                Some(((r.node_id.clone(), r.peer.clone(), *kind), Arc::clone(runs)))
            })
        })
        .collect();
    let mut status = Status::from_reports(reports, config);
    let wall =
        humantime::parse_rfc3339(&status.at).unwrap_or_else(|_| std::time::SystemTime::now());
    status.tasks_down = admin.supervisor.down();
    let history = admin.publisher.history();
    for node in &mut status.nodes {
        let peer = node
            .streams
            .first()
            .map(|s| s.peer.clone())
            .unwrap_or_default();
        let key = (node.node_id.clone(), peer);
        if let Some(group) = groups.get(&key) {
            node.group.clone_from(group);
        }
        // A one-off poll holds a gate a few seconds after its poll only: a poller that polls
        // on has polled again by then and is waited for by its cadence; past them, no next
        // poll will say it took anything.
        for stream in node.streams.iter_mut().filter(|s| s.one_off()) {
            let polled = stream
                .last_poll
                .as_deref()
                .and_then(|t| humantime::parse_rfc3339(t).ok())
                .unwrap_or(wall);
            stream.holds_gate_until = Some(format_time(polled + crate::fleet::POLLER_QUIET_MIN));
        }
        if let Some(facts) = facts.get(&key) {
            for (kind, t) in &mut node.types {
                if t.state == SyncStatus::Nacked {
                    let runs = ResourceType::ALL
                        .iter()
                        .find(|k| k.short_name() == kind)
                        .and_then(|k| runs.get(&(key.0.clone(), key.1.clone(), k.short_name())));
                    t.last_good = last_good(
                        &serving,
                        &history,
                        facts,
                        kind,
                        &t.version_acked,
                        runs.map(|r| &**r),
                    );
                    if t.last_good.is_none() && !t.version_acked.is_empty() {
                        t.kept = Some(kept(&serving));
                    }
                }
            }
        }
    }
    status.generation = serving.stable.number;
    status.new_streams = admin.new_streams.map(|rate| NewStreamsStatus {
        per_second: rate.per_second,
        burst: rate.burst,
        turned_away: admin
            .telemetry
            .metrics()
            .limits
            .get_or_create(&crate::metrics::LimitLabels {
                limit: "new_streams",
            })
            .get(),
    });
    let now = std::time::SystemTime::now();
    status.certificates = serving
        .newest()
        .config
        .certificates()
        .map(|c| CertificateStatus::of(c, now))
        .collect();
    status.rollout = serving.rollout.as_ref().map(|r| {
        RolloutStatus::new(
            &r.phase,
            serving.stable.number,
            r.candidate.number,
            &r.policy,
            r.since,
        )
    });
    status.fleet = admin
        .fleet_rollout
        .as_ref()
        .map(|f| FleetStatus::of(&f.view()));
    status.history = admin.publisher.history();
    status.history.truncate(HISTORY_SHOWN);
    status.replicas = Some(match &admin.replicas {
        Some(replicas) => replicas.status(),
        None => super::replicas::ReplicasStatus::unshared(),
    });
    status
}

/// The generations `serving` keeps: the oldest, and how many.
fn kept(serving: &crate::cache::Serving) -> Kept {
    let numbers: std::collections::BTreeSet<u64> = serving.known().map(|g| g.number).collect();
    Kept {
        oldest: numbers.first().copied().unwrap_or_default(),
        generations: numbers.len(),
    }
}

/// What a node that NACKed `kind` still runs of it: the newest generation `serving` keeps
/// that serves it exactly what it runs (`runs`, its stream's account by content: the same
/// names at the same versions, however many unrelated changes came since), or, without
/// that account, whose snapshot for the node has the version it ACKed (`acked`); with its
/// revision and content version from `history`. None when it ACKed nothing, or nothing kept
/// serves it.
fn last_good(
    serving: &crate::cache::Serving,
    history: &[crate::history::Entry],
    facts: &crate::config::selector::NodeFacts,
    kind: &str,
    acked: &str,
    runs: Option<&crate::protocol::Runs>,
) -> Option<LastGood> {
    let kind = ResourceType::ALL.iter().find(|k| k.short_name() == kind)?;
    if acked.is_empty() {
        return None;
    }
    let serves = |g: &Arc<crate::cache::Generation>| {
        let snapshot = g.snapshot_for(facts);
        let of_kind = snapshot.get(*kind);
        match runs {
            Some(runs) => runs.served_by(of_kind),
            None => of_kind.version == acked,
        }
    };
    let generation = serving
        .known()
        .filter(|g| serves(g))
        .map(|g| g.number)
        .max()?;
    let entry = history.iter().find(|e| e.generation == generation);
    Some(LastGood {
        generation,
        revision: entry.and_then(|e| e.revision),
        version: entry.map(|e| e.version.clone()).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::stream_report as report;

    #[test]
    fn proxies_sharing_a_node_id_are_two_entries_and_one_proxys_streams_one() {
        let status = Status::from_reports(
            vec![
                report("edge-1", "127.0.0.1:1000", "CDS"),
                report("edge-1", "127.0.0.1:1000", "LDS"),
                report("edge-1", "127.0.0.1:2000", "ADS"),
            ],
            None,
        );
        assert_eq!(status.nodes.len(), 2);
        assert_eq!(
            status.nodes[0].streams.len(),
            2,
            "one proxy, two per-type streams"
        );
        assert_eq!(status.nodes[1].streams[0].peer, "127.0.0.1:2000");
    }

    /// Over per-type services Envoy opens a stream per route configuration: a NACK on one of
    /// them is the node's RDS state, whichever stream reported last (before, the last one's
    /// SYNCED hid it), and the names not found are all of the streams'.
    #[test]
    fn p5_a_nack_on_one_of_a_node_s_streams_of_a_type_is_the_type_s_state() {
        use crate::fleet::{NackReport, RareList};
        let stream = |state: SyncStatus, not_found: &[&str]| {
            let mut r = report("edge-1", "127.0.0.1:1000", "RDS");
            r.types.insert(
                "RDS",
                TypeReport {
                    state,
                    version_sent: "v".into(),
                    version_acked: "v".into(),
                    nonce: "1".into(),
                    nack: (state == SyncStatus::Nacked).then(|| {
                        Box::new(NackReport {
                            error: "rds-1 is broken".into(),
                            rejected_version: "v2".into(),
                            rejected_changes: Vec::new(),
                            runs: None,
                        })
                    }),
                    oversized_bytes: None,
                    not_found: RareList::new(not_found.iter().map(|n| n.to_string()).collect()),
                    last_change: std::time::SystemTime::UNIX_EPOCH,
                },
            );
            r
        };
        let status = Status::from_reports(
            vec![
                stream(SyncStatus::Synced, &["x"]),
                stream(SyncStatus::Nacked, &[]),
                stream(SyncStatus::Synced, &["y", "x"]),
            ],
            None,
        );
        assert_eq!(status.nodes.len(), 1);
        let rds = &status.nodes[0].types["RDS"];
        assert_eq!(rds.state, SyncStatus::Nacked);
        assert_eq!(rds.error.as_deref(), Some("rds-1 is broken"));
        assert_eq!(rds.not_found, ["x", "y"]);
        assert!(status.any_nacked());
    }
}
