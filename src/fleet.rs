//! What every connected proxy has: one report per open xDS stream, kept up to date by the
//! stream's task, and one per node that polls (REST-JSON or `Fetch*`, P36), kept up to date
//! by each poll; read by the admin API (`/status`) and the metrics.
//!
//! Owns: the registry of open streams and of pollers and, per stream or poller, the node's
//! identity and, per type, the version sent, the version ACKed, the latest nonce, the sync
//! state (with the proxy's NACK text) and when it last changed; forgetting a poller quiet for
//! [`POLLER_QUIET`]; timing each generation's convergence (reported through the callback it
//! is made with: the daemon's goes to telemetry). Must not: decide anything about the
//! protocol (it copies what `protocol` reports, and a poll's state is
//! `protocol::PollState`'s), serve HTTP (`admin`), or log or count anything itself
//! (`telemetry`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use compact_str::CompactString;
use envoy_types::pb::envoy::config::core::v3::Node;

use crate::config::selector::NodeFacts;
use crate::protocol::{Changed, PlanStatus, PollState, SyncState, TypeStatus};
use crate::resource::ResourceType;

/// Every open stream's report.
#[derive(Debug, Default)]
pub struct Fleet {
    next_id: AtomicU64,
    /// Each stream's report behind its own lock: a stream updates its own after every
    /// input without taking the fleet's (10,000 streams on two cores contended for one
    /// lock and a 10,000-entry tree twice per proxy per push). Locked after `streams`.
    streams: Mutex<BTreeMap<u64, Arc<Mutex<StreamReport>>>>,
    /// The generation whose convergence is being timed, and when it was published: read
    /// when it converges. Locked after `streams`, never before; never while a report is
    /// locked.
    converging: Mutex<Option<Converging>>,
    /// The timing's start and how many streams are behind it, in one word ([`Timing`]),
    /// moved by each stream's report with a compare-and-swap: a push's 10,000 reports
    /// took one lock and a hash insert each (docs/benchmarks.md, "The stream task's memory
    /// and the convergence count"). A new start is written under `streams`' lock.
    timing: AtomicU64,
    /// The generation being timed (or last timed): a stream is synced on it once it has
    /// ACKed what it decided on this generation or a later one. Written before `timing`.
    timed_number: AtomicU64,
    /// The first stream id the timing's start did not count (streams open then have smaller
    /// ids): a stream opened since counts itself once it is behind. Written before `timing`.
    first_uncounted: AtomicU64,
    /// Where convergence is reported (the daemon gives telemetry's; the fleet does not
    /// count or log anything itself).
    on_converged: OnConverged,
    /// The nodes that ACKed and NACKed each recent generation (for `history`). Taken only
    /// when a stream's tally changes (a new generation synced or NACKed), never while a
    /// report is locked.
    tallies: Mutex<BTreeMap<u64, Tally>>,
    /// Each node that polls, by node id and API (`rest`, `fetch`). Locked after `streams`,
    /// never before.
    pollers: Mutex<BTreeMap<(String, &'static str), Poller>>,
    /// Bumped by every change to a report (a stream opened, updated or closed, a poll): a
    /// reader that saw the same count saw the same reports, but for pollers aging out.
    changes: AtomicU64,
    /// Woken at each change while someone waits for one ([`Fleet::next_change`]): an
    /// `admin` long poll of `/status`.
    changed: tokio::sync::Notify,
    /// How many wait for a change: with none, a change wakes nobody (no lock taken).
    waiting: AtomicUsize,
}

/// Counts a change to the reports when dropped: at the end of what makes it, whatever way
/// that ends.
struct BumpAfter<'a>(&'a Fleet);

impl Drop for BumpAfter<'_> {
    fn drop(&mut self) {
        self.0.bump();
    }
}

/// A wait for the next change to the reports, armed: a change after [`Fleet::next_change`]
/// returned it completes [`NextChange::wait`].
pub struct NextChange<'a> {
    fleet: &'a Fleet,
    notified: std::pin::Pin<Box<tokio::sync::futures::Notified<'a>>>,
}

impl NextChange<'_> {
    /// Until a change after this wait was armed.
    pub async fn wait(mut self) {
        self.notified.as_mut().await;
    }
}

impl Drop for NextChange<'_> {
    fn drop(&mut self) {
        self.fleet.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The longest a subscription of a node that polls (REST-JSON, `Fetch*`) stays listed after
/// its last poll: a poller has no stream whose end says it has gone. One whose cadence is
/// seen (two polls or more) goes sooner: after [`QUIET_INTERVALS`] of its interval, at
/// least [`POLLER_QUIET_MIN`], so that one slow or failed poll does not drop it. One heard
/// once (a one-off poll: a person with curl, a probe) stays this long, listed but holding
/// no gate once answered with what serves (`admin::standing`).
pub const POLLER_QUIET: Duration = Duration::from_secs(60);
/// The shortest time a poller's subscription stays listed after its last poll.
pub const POLLER_QUIET_MIN: Duration = Duration::from_secs(3);
/// How many of its own intervals a poller's subscription may go unpolled before it leaves.
pub const QUIET_INTERVALS: u32 = 3;

/// A node that polls: its report (as a stream's, `stream` `REST` or `Fetch`, `protocol`
/// `rest` or `fetch`) and, per subscription (a type and the names it polls for: Envoy polls
/// each route configuration, each secret, ... on its own), what its polls say it holds.
#[derive(Debug)]
struct Poller {
    report: StreamReport,
    subscriptions: BTreeMap<(ResourceType, Vec<String>), Subscribed>,
}

/// One subscription of a poller.
#[derive(Debug)]
struct Subscribed {
    state: PollState,
    not_found: Vec<String>,
    heard: Instant,
    /// How many polls it has had, and the time between its last two: its cadence as
    /// observed (`None`: heard once).
    polls: u64,
    every: Option<Duration>,
}

impl Subscribed {
    /// How long it may go unpolled before it leaves: [`QUIET_INTERVALS`] of its cadence
    /// (within [`POLLER_QUIET_MIN`] and [`POLLER_QUIET`]); heard once, of its poller's
    /// (`poller`: the quickest of its subscriptions'), so that a name the poller asked for
    /// once and no longer asks for leaves as soon as one it keeps polling would; of a
    /// poller heard once on every subscription (a one-off poll), [`POLLER_QUIET`].
    fn quiet_after(&self, poller: Option<Duration>) -> Duration {
        self.every.or(poller).map_or(POLLER_QUIET, |every| {
            (every * QUIET_INTERVALS).clamp(POLLER_QUIET_MIN, POLLER_QUIET)
        })
    }
}

impl Poller {
    /// `kind`'s report from its subscriptions: the most pressing state (a NACK of any
    /// shows), the names not found of all. `None` once none is left.
    fn type_status(
        subscriptions: &BTreeMap<(ResourceType, Vec<String>), Subscribed>,
        kind: ResourceType,
    ) -> Option<TypeStatus<'_>> {
        let of_kind = || {
            subscriptions
                .range((kind, Vec::new())..)
                .take_while(move |((k, _), _)| *k == kind)
                .map(|(_, s)| s)
        };
        let worst = of_kind().max_by_key(|s| SyncStatus::from(s.state.state()).rank())?;
        let mut not_found: Vec<String> = of_kind()
            .flat_map(|s| s.not_found.iter().cloned())
            .collect();
        not_found.sort();
        not_found.dedup();
        Some(worst.state.status(not_found))
    }

    /// Its cadence as observed: the shortest interval of its subscriptions' (`None`: each
    /// was heard once).
    fn cadence(&self) -> Option<Duration> {
        cadence(&self.subscriptions)
    }

    /// Its polls, for its report: its cadence, and its last poll (`now`, when it polls).
    fn polling(&self, last: SystemTime) -> Box<Polling> {
        Box::new(Polling {
            every: self.cadence(),
            last,
        })
    }

    /// Bring `kind`'s report up to its subscriptions (`last_change` moves only if it
    /// changed), or drop it when none is left.
    fn report_type(&mut self, kind: ResourceType, now: SystemTime) {
        let Some(status) = Poller::type_status(&self.subscriptions, kind) else {
            self.report.types.remove(kind.short_name());
            return;
        };
        let report = TypeReport::new(&status, now);
        match self.report.types.get_mut(kind.short_name()) {
            Some(old) if old.matches(&status) => {}
            Some(old) => *old = report,
            None => self.report.types.insert(kind.short_name(), report),
        }
    }
}

/// The quickest cadence of `subscriptions` (`None`: each was heard once).
fn cadence(subscriptions: &BTreeMap<(ResourceType, Vec<String>), Subscribed>) -> Option<Duration> {
    subscriptions.values().filter_map(|s| s.every).min()
}

/// One poll, as it was answered.
#[derive(Debug)]
pub struct Poll<'a> {
    pub node: &'a Node,
    pub facts: Arc<NodeFacts>,
    /// Where it came from.
    pub peer: String,
    /// `rest` (REST-JSON) or `fetch` (gRPC `Fetch*`, P36).
    pub api: &'static str,
    pub kind: ResourceType,
    /// What it has: its `version_info` (P13).
    pub version_info: &'a str,
    /// Its `error_detail`'s message, if any (P5).
    pub error: Option<&'a str>,
    /// The version it was answered with.
    pub answer: &'a str,
    /// The names it polls for (empty: every resource of the type).
    pub names: &'a [String],
    /// What it names that does not exist for it (P32).
    pub not_found: Vec<String>,
    /// The generation it was answered from.
    pub generation: u64,
}

/// The nodes that took one generation, and those that rejected it.
#[derive(Debug, Default)]
struct Tally {
    acked: NodeSet,
    nacked: NodeSet,
}

/// Node ids, each shared with the streams of the node (a fleet's tallies hold every node
/// once per recent generation).
type NodeSet = std::collections::HashSet<Arc<str>, foldhash::quality::RandomState>;

/// How many generations' tallies are kept (as many as `history` keeps entries).
pub const TALLIED: usize = 50;

/// What a [`Fleet`] calls with how long a generation took to converge.
pub struct OnConverged(Box<dyn Fn(Duration) + Send + Sync>);

impl Default for OnConverged {
    fn default() -> Self {
        OnConverged(Box::new(|_| {}))
    }
}

impl std::fmt::Debug for OnConverged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnConverged")
    }
}

/// Where one type stands on one stream, as `/status`, CSDS, the page and `switchyard status`
/// show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SyncStatus {
    /// The latest response was ACKed.
    Synced,
    /// Nothing sent yet.
    NotSent,
    /// Sent, not yet ACKed.
    Stale,
    /// The latest response was NACKed.
    Nacked,
}

impl SyncStatus {
    /// How pressing the state is, where several streams (or polls) of a node report one
    /// type: NACKED, then STALE, SYNCED, NOT_SENT.
    pub fn rank(self) -> u8 {
        match self {
            SyncStatus::Nacked => 3,
            SyncStatus::Stale => 2,
            SyncStatus::Synced => 1,
            SyncStatus::NotSent => 0,
        }
    }

    /// Every status, in the order the page lists its filters.
    pub const ALL: [SyncStatus; 4] = [
        SyncStatus::Nacked,
        SyncStatus::Stale,
        SyncStatus::Synced,
        SyncStatus::NotSent,
    ];

    /// The name in JSON and tables: `SYNCED`, `NOT_SENT`, `STALE`, `NACKED`.
    pub fn name(self) -> &'static str {
        match self {
            SyncStatus::Synced => "SYNCED",
            SyncStatus::NotSent => "NOT_SENT",
            SyncStatus::Stale => "STALE",
            SyncStatus::Nacked => "NACKED",
        }
    }

    /// The status a name names.
    pub fn from_name(name: &str) -> Option<SyncStatus> {
        SyncStatus::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl From<&SyncState> for SyncStatus {
    fn from(state: &SyncState) -> SyncStatus {
        match state {
            SyncState::NotSent => SyncStatus::NotSent,
            SyncState::Sent { .. } => SyncStatus::Stale,
            SyncState::Acked { .. } => SyncStatus::Synced,
            SyncState::Nacked { .. } => SyncStatus::Nacked,
        }
    }
}

impl std::fmt::Display for SyncStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A generation being timed until every stream has ACKed what it got from it.
#[derive(Debug)]
struct Converging {
    published: Instant,
    /// Its start ([`Timing::epoch`]).
    epoch: u32,
}

/// The convergence timing's state, in one `AtomicU64` of the [`Fleet`] (`timing`): which
/// start it is of (an epoch, moved by each start), and while timing, how many streams are
/// behind (not synced on the generation, as each stream last said: counted without a look
/// at the others, O(1) per report).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Timing {
    epoch: u32,
    /// `None`: not timing (none started, or it converged).
    behind: Option<u32>,
}

impl Timing {
    /// The epoch in the high half; the low half 0 when not timing, else one more than the
    /// streams behind (so that a fleet's zeroed default is "not timing").
    fn pack(self) -> u64 {
        (u64::from(self.epoch) << 32) | self.behind.map_or(0, |b| u64::from(b) + 1)
    }

    fn unpack(word: u64) -> Timing {
        let low = word as u32;
        Timing {
            epoch: (word >> 32) as u32,
            behind: low.checked_sub(1),
        }
    }
}

/// Who is on a stream, and how.
#[derive(Clone, Debug, Serialize)]
pub struct StreamReport {
    /// What the node's selectors read of it (metadata and locality too).
    #[serde(skip)]
    pub facts: Arc<crate::config::selector::NodeFacts>,
    pub node_id: String,
    pub node_cluster: String,
    pub user_agent: String,
    pub user_agent_version: String,
    pub client_features: Vec<String>,
    pub peer: String,
    /// `ADS` or the type of a per-type service (`CDS`, ...).
    pub stream: String,
    /// `sotw` or `delta`.
    pub protocol: &'static str,
    #[serde(serialize_with = "rfc3339")]
    pub connected_since: SystemTime,
    /// By type short name (`CDS`, `EDS`, ...): only the types the client asked for.
    pub types: TypeReports,
    /// The generation the stream's last response decisions were made on.
    #[serde(skip)]
    pub generation: u64,
    /// A make-before-break plan in progress on this stream, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanReport>,
    /// A poller's polls (`None`: a stream). Boxed: streams are most reports.
    #[serde(skip)]
    pub polls: Option<Box<Polling>>,
    /// Types this server does not serve that the proxy asked for (P33).
    #[serde(skip_serializing_if = "RareList::is_empty")]
    pub unknown_types: RareList<UnknownTypeReport>,
}

impl StreamReport {
    /// A report of `node`'s stream (or polls) from `peer`, nothing known of its types yet.
    pub fn new(
        node: &Node,
        facts: Arc<NodeFacts>,
        peer: String,
        stream: String,
        protocol: &'static str,
    ) -> StreamReport {
        StreamReport {
            facts,
            node_id: node.id.clone(),
            node_cluster: node.cluster.clone(),
            user_agent: node.user_agent_name.clone(),
            user_agent_version: user_agent_version(node),
            client_features: node.client_features.clone(),
            peer,
            stream,
            protocol,
            connected_since: SystemTime::now(),
            types: TypeReports::default(),
            generation: 0,
            plan: None,
            polls: None,
            unknown_types: RareList::default(),
        }
    }

    /// Every type the client asked for is ACKed (or has nothing to send), and no plan is
    /// still in progress.
    pub fn synced(&self) -> bool {
        self.plan.is_none()
            && self
                .types
                .values()
                .all(|t| matches!(t.state, SyncStatus::Synced | SyncStatus::NotSent))
    }
}

/// How a node polls, as observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Polling {
    /// Its cadence: the shortest interval between two polls of one of its subscriptions
    /// (`None`: each heard once, a one-off poll).
    pub every: Option<Duration>,
    /// When it last polled.
    pub last: SystemTime,
}

/// A make-before-break plan in progress on a stream (see `protocol::plan`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlanReport {
    /// The step being served, from 1, of `steps`.
    pub step: usize,
    pub steps: usize,
    /// How many resources the plan holds back because they refer (directly or not) to
    /// something the proxy rejected, and the type of that NACK (`CDS`, ...).
    pub held_back: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nacked: Option<&'static str>,
    #[serde(serialize_with = "rfc3339")]
    pub since: SystemTime,
    /// `since` on the monotonic clock: tells one plan from the next.
    #[serde(skip)]
    began: Option<Instant>,
}

impl PlanReport {
    /// The report of `status`, its instant placed on the wall clock by `now` (both clocks
    /// read at once).
    pub fn new(status: &PlanStatus, now: (Instant, SystemTime)) -> PlanReport {
        let since = status
            .since
            .map_or(now.1, |at| now.1 - now.0.saturating_duration_since(at));
        PlanReport {
            step: status.step,
            steps: status.steps,
            held_back: status.held_back,
            nacked: status.nacked.map(ResourceType::short_name),
            since,
            began: status.since,
        }
    }
}

/// A stream's types by short name (`CDS`, `EDS`, ...), in name order: one allocation of
/// exactly their number, as a client asks for a few types once each. A B-tree's node had
/// room for 11 and a box for each: 280 bytes and 128 a type of every stream
/// (docs/benchmarks.md, "The stream's channel and its task's future"). Serialized as a
/// map.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TypeReports(Vec<(&'static str, TypeReport)>);

impl TypeReports {
    fn position(&self, kind: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| (*k).cmp(kind))
    }

    pub fn get(&self, kind: &str) -> Option<&TypeReport> {
        let at = self.position(kind).ok()?;
        Some(&self.0[at].1)
    }

    pub fn get_mut(&mut self, kind: &str) -> Option<&mut TypeReport> {
        let at = self.position(kind).ok()?;
        Some(&mut self.0[at].1)
    }

    pub fn contains_key(&self, kind: &str) -> bool {
        self.position(kind).is_ok()
    }

    /// `kind`'s report, in place of the one it had.
    pub fn insert(&mut self, kind: &'static str, report: TypeReport) {
        match self.position(kind) {
            Ok(at) => self.0[at].1 = report,
            Err(at) => {
                self.0.reserve_exact(1);
                self.0.insert(at, (kind, report));
            }
        }
    }

    pub fn remove(&mut self, kind: &str) -> Option<TypeReport> {
        let at = self.position(kind).ok()?;
        let (_, report) = self.0.remove(at);
        self.0.shrink_to_fit();
        Some(report)
    }

    /// By short name, in name order (as a map's pairs).
    pub fn iter(&self) -> impl Iterator<Item = (&&'static str, &TypeReport)> {
        self.into_iter()
    }

    pub fn values(&self) -> impl Iterator<Item = &TypeReport> {
        self.0.iter().map(|(_, report)| report)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// For tests, as a map's: a type not there panics.
#[cfg(test)]
impl std::ops::Index<&str> for TypeReports {
    type Output = TypeReport;

    fn index(&self, kind: &str) -> &TypeReport {
        match self.get(kind) {
            Some(report) => report,
            None => panic!("no report of type {kind}"),
        }
    }
}

impl FromIterator<(&'static str, TypeReport)> for TypeReports {
    fn from_iter<I: IntoIterator<Item = (&'static str, TypeReport)>>(pairs: I) -> TypeReports {
        let mut reports = TypeReports::default();
        for (kind, report) in pairs {
            reports.insert(kind, report);
        }
        reports
    }
}

impl<'a> IntoIterator for &'a TypeReports {
    type Item = (&'a &'static str, &'a TypeReport);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (&'static str, TypeReport)>,
        fn(&'a (&'static str, TypeReport)) -> (&'a &'static str, &'a TypeReport),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(kind, report)| (kind, report))
    }
}

impl Serialize for TypeReports {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

/// One type on one stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TypeReport {
    pub state: SyncStatus,
    /// The versions and nonce inline (24 bytes or less, as this server's are), no
    /// allocation each: three a type of every stream (docs/benchmarks.md, "The stream's
    /// channel and its task's future").
    pub version_sent: CompactString,
    pub version_acked: CompactString,
    pub nonce: CompactString,
    /// For `NACKED`: what the proxy said (boxed: every stream keeps a report per type, and
    /// almost none is NACKed).
    #[serde(flatten)]
    pub nack: Option<Box<NackReport>>,
    /// The size of the latest response when it went over `--max-response-bytes` whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oversized_bytes: Option<u32>,
    /// Names the proxy subscribes to that do not exist for it, as the latest responses said
    /// (P32).
    #[serde(skip_serializing_if = "RareList::is_empty")]
    pub not_found: RareList<String>,
    #[serde(serialize_with = "rfc3339")]
    pub last_change: SystemTime,
}

/// A list almost always empty, behind one pointer when it is not: every stream keeps a
/// report per type (docs/benchmarks.md, "Memory per idle proxy"). Serialized as the list.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(clippy::box_collection)] // 8 bytes where a Vec takes 24: the point of the type.
pub struct RareList<T>(Option<Box<Vec<T>>>);

impl<T> Default for RareList<T> {
    fn default() -> Self {
        RareList(None)
    }
}

impl<T> RareList<T> {
    pub fn new(list: Vec<T>) -> RareList<T> {
        RareList((!list.is_empty()).then(|| Box::new(list)))
    }

    pub fn as_slice(&self) -> &[T] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }
}

impl<T: Serialize> Serialize for RareList<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.as_slice().serialize(serializer)
    }
}

/// A type this server does not serve, asked for on one stream (P33).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnknownTypeReport {
    pub type_url: String,
    /// The names asked for (empty: a wildcard).
    pub names: Vec<String>,
    pub state: SyncStatus,
}

/// A NACK of the latest response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NackReport {
    /// The proxy's error text.
    pub error: String,
    /// The version it rejected.
    pub rejected_version: String,
    /// What the rejected response added or changed against what the proxy held, and where
    /// each is written.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rejected_changes: Vec<RejectedChange>,
    /// What the proxy still runs of the type, by content, when its stream knows it.
    #[serde(skip)]
    pub runs: Option<Arc<crate::protocol::Runs>>,
}

/// A resource a rejected response added or changed, and where it is written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectedChange {
    /// Where the resource is written, as load errors name it: `listeners.yaml:
    /// listeners[1] "b"`.
    pub resource: String,
    /// `added` (the proxy held nothing of that name) or `changed`.
    pub change: String,
    /// When its file was last changed, as the load that read it saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_changed_at: Option<String>,
}

impl RejectedChange {
    /// How many are named per NACK (a response may bring thousands of endpoints).
    pub const MAX: usize = 20;

    fn of(changed: &Changed) -> RejectedChange {
        RejectedChange {
            resource: changed.resource.written_at(),
            change: if changed.added { "added" } else { "changed" }.into(),
            file_changed_at: changed
                .resource
                .origin()
                .and_then(|(file, _)| file.modified)
                .map(format_time),
        }
    }

    /// The first [`RejectedChange::MAX`] of `changed`.
    pub fn list(changed: &[Changed]) -> Vec<RejectedChange> {
        changed.iter().take(Self::MAX).map(Self::of).collect()
    }

    /// `listeners.yaml: listeners[1] "b" (added; the file changed at 2026-...)`.
    pub fn text(&self) -> String {
        match &self.file_changed_at {
            Some(at) => format!(
                "{} ({}; the file changed at {at})",
                self.resource, self.change
            ),
            None => format!("{} ({})", self.resource, self.change),
        }
    }
}

impl TypeReport {
    fn new(status: &TypeStatus<'_>, now: SystemTime) -> TypeReport {
        let mut report = TypeReport {
            state: SyncStatus::NotSent,
            version_sent: CompactString::default(),
            version_acked: CompactString::default(),
            nonce: CompactString::default(),
            nack: None,
            oversized_bytes: None,
            not_found: RareList::default(),
            last_change: now,
        };
        report.refresh(status, now);
        report
    }

    /// Say what `status` says, changed at `now`: in place, the strings' room kept (a stream
    /// changes a type's report twice a push, its version and nonce each time).
    fn refresh(&mut self, status: &TypeStatus<'_>, now: SystemTime) {
        let set = |into: &mut CompactString, from: &str| {
            into.clear();
            into.push_str(from);
        };
        self.nack = match &*status.state {
            SyncState::Nacked {
                nack,
                rejected_version,
                ..
            } => Some(Box::new(NackReport {
                error: nack.error.clone(),
                rejected_version: rejected_version.clone(),
                rejected_changes: RejectedChange::list(&nack.changed),
                runs: nack.runs.clone(),
            })),
            _ => None,
        };
        self.state = SyncStatus::from(&*status.state);
        set(
            &mut self.version_sent,
            status.state.sent_version().unwrap_or_default(),
        );
        set(&mut self.version_acked, &status.acked_version);
        set(&mut self.nonce, status.state.nonce().unwrap_or_default());
        self.oversized_bytes = status.oversized.and_then(|n| u32::try_from(n).ok());
        if self.not_found.as_slice() != status.not_found.as_slice() {
            self.not_found = RareList::new(status.not_found.clone());
        }
        self.last_change = now;
    }

    /// Whether this report already says what `status` says (apart from when it changed),
    /// compared in place: streams report after every input, and mostly nothing changed.
    fn matches(&self, status: &TypeStatus<'_>) -> bool {
        let (error, rejected_version) = match &*status.state {
            SyncState::Nacked {
                nack,
                rejected_version,
                ..
            } => (Some(nack.error.as_str()), Some(rejected_version.as_str())),
            _ => (None, None),
        };
        self.state == SyncStatus::from(&*status.state)
            && self.version_sent == status.state.sent_version().unwrap_or_default()
            && self.version_acked == status.acked_version
            && self.nonce == status.state.nonce().unwrap_or_default()
            && self.nack.as_ref().map(|n| n.error.as_str()) == error
            && self.nack.as_ref().map(|n| n.rejected_version.as_str()) == rejected_version
            && self.oversized_bytes.map(|n| n as usize) == status.oversized
            && self.not_found.as_slice() == status.not_found.as_slice()
    }
}

impl Fleet {
    /// An empty fleet, calling `on_converged` with how long each generation took to reach
    /// every stream.
    pub fn new(on_converged: impl Fn(Duration) + Send + Sync + 'static) -> Fleet {
        Fleet {
            on_converged: OnConverged(Box::new(on_converged)),
            ..Fleet::default()
        }
    }

    /// Register a stream; it stays listed until the returned handle is dropped.
    pub fn open(self: &Arc<Self>, report: StreamReport) -> StreamHandle {
        let node = Arc::from(report.node_id.as_str());
        let report = Arc::new(Mutex::new(report));
        // The id is taken under the lock: a timing's start counts exactly the streams whose
        // ids are below the next one (`first_uncounted`).
        let id = {
            let mut streams = self.lock();
            let id = self.next_id.fetch_add(1, Ordering::SeqCst);
            streams.insert(id, Arc::clone(&report));
            id
        };
        self.bump();
        StreamHandle {
            fleet: Arc::clone(self),
            id,
            node,
            report,
            seen: Seen::default(),
        }
    }

    /// How many changes the reports have had (see `changes`): to tell, without copying
    /// them, whether they may differ from the last look.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::SeqCst)
    }

    /// Arm a wait for the next change: one made after this returns (and after
    /// [`Fleet::changes`] read after it) wakes it.
    pub fn next_change(&self) -> NextChange<'_> {
        // Counted before the wait is made: a change that reads no one waiting came before
        // this count, so `changes()` read after it sees that change.
        self.waiting.fetch_add(1, Ordering::SeqCst);
        NextChange {
            fleet: self,
            notified: Box::pin(self.changed.notified()),
        }
    }

    /// One more change to the reports, made: wakes whoever waits for one. Counted after the
    /// change, never before, so that whoever reads the new count reads the change too.
    fn bump(&self) {
        self.changes.fetch_add(1, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.changed.notify_waiters();
        }
    }

    /// Every open stream's report, in the order they opened, then every poller's (by node
    /// id).
    pub fn reports(&self) -> Vec<StreamReport> {
        self.reports_where(|_| true)
    }

    /// The reports `keep` selects (copied under the lock: only those), streams then pollers.
    pub fn reports_where(&self, keep: impl Fn(&StreamReport) -> bool) -> Vec<StreamReport> {
        let mut reports: Vec<StreamReport> = self
            .lock()
            .values()
            .filter_map(|r| {
                let r = lock(r);
                keep(&r).then(|| r.clone())
            })
            .collect();
        let pollers = self.pollers();
        reports.extend(
            pollers
                .values()
                .filter(|p| keep(&p.report))
                .map(|p| p.report.clone()),
        );
        reports
    }

    /// How many nodes have a type whose latest response was NACKed.
    pub fn nodes_nacking(&self) -> usize {
        let nacking: std::collections::BTreeSet<String> = self
            .reports_where(|r| r.types.values().any(|t| t.state == SyncStatus::Nacked))
            .into_iter()
            .map(|r| r.node_id)
            .collect();
        nacking.len()
    }

    /// How many nodes poll (heard from within [`POLLER_QUIET`]), by API (`rest`, `fetch`).
    pub fn pollers_by_api(&self) -> BTreeMap<&'static str, usize> {
        let mut count = BTreeMap::new();
        for (_, api) in self.pollers().keys() {
            *count.entry(*api).or_default() += 1;
        }
        count
    }

    /// Take in one poll: the poller's state of its type follows it (`protocol::PollState`).
    /// Returns the state the poll leaves the type in when the state changed, with the NACK's
    /// words if it is one.
    pub fn polled(&self, poll: Poll<'_>) -> Option<(SyncStatus, Option<String>)> {
        let _bump = BumpAfter(self);
        let now = SystemTime::now();
        let mut pollers = self.pollers();
        let key = (poll.node.id.clone(), poll.api);
        let stream = match poll.api {
            "fetch" => "Fetch",
            _ => "REST",
        };
        let poller = pollers.entry(key).or_insert_with(|| Poller {
            report: StreamReport::new(
                poll.node,
                Arc::clone(&poll.facts),
                poll.peer.clone(),
                stream.to_string(),
                poll.api,
            ),
            subscriptions: BTreeMap::new(),
        });
        poller.report.peer = poll.peer;
        poller.report.generation = poll.generation;
        let mut names = poll.names.to_vec();
        names.sort();
        names.dedup();
        let subscribed = poller
            .subscriptions
            .entry((poll.kind, names))
            .or_insert_with(|| Subscribed {
                state: PollState::default(),
                not_found: Vec::new(),
                heard: Instant::now(),
                polls: 0,
                every: None,
            });
        let heard = Instant::now();
        if subscribed.polls > 0 {
            subscribed.every = Some(heard.saturating_duration_since(subscribed.heard));
        }
        subscribed.polls += 1;
        subscribed.heard = heard;
        subscribed.not_found = poll.not_found;
        subscribed
            .state
            .poll(poll.version_info, poll.error, poll.answer);
        let before = poller
            .report
            .types
            .get(poll.kind.short_name())
            .map(|t| t.state);
        poller.report_type(poll.kind, now);
        poller.report.polls = Some(poller.polling(now));
        // The recent generations' tallies count a poller as a stream's node: synced when
        // every type it polls took what it was answered, NACKed when one rejected it.
        let (synced, nacked) = (
            poller.report.synced(),
            poller
                .report
                .types
                .values()
                .any(|t| t.state == SyncStatus::Nacked),
        );
        let node: Arc<str> = Arc::from(poller.report.node_id.as_str());
        let generation = poller.report.generation;
        let after = poller.report.types.get(poll.kind.short_name())?;
        let changed = (before != Some(after.state))
            .then(|| (after.state, after.nack.as_ref().map(|n| n.error.clone())));
        drop(pollers);
        if synced || nacked {
            self.count(&node, generation, synced, nacked);
        }
        changed
    }

    /// The pollers, locked, those quiet for [`POLLER_QUIET`] forgotten.
    fn pollers(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, &'static str), Poller>> {
        self.pollers_at(Instant::now())
    }

    /// The pollers as of `now`, those quiet for [`POLLER_QUIET`] by then forgotten.
    fn pollers_at(
        &self,
        now: Instant,
    ) -> std::sync::MutexGuard<'_, BTreeMap<(String, &'static str), Poller>> {
        let mut pollers = self.pollers.lock().unwrap_or_else(|p| p.into_inner());
        let wall = SystemTime::now();
        pollers.retain(|_, p| {
            let every = p.cadence();
            let quiet_now =
                |s: &Subscribed| now.saturating_duration_since(s.heard) >= s.quiet_after(every);
            let quiet: std::collections::BTreeSet<ResourceType> = p
                .subscriptions
                .iter()
                .filter(|(_, s)| quiet_now(s))
                .map(|((kind, _), _)| *kind)
                .collect();
            if quiet.is_empty() {
                return true;
            }
            // What it no longer polls for leaves its report (P32's names not found too),
            // within its own cadence.
            p.subscriptions.retain(|_, s| !quiet_now(s));
            for kind in quiet {
                p.report_type(kind, wall);
            }
            let last = p.report.polls.as_ref().map_or(wall, |polls| polls.last);
            p.report.polls = Some(p.polling(last));
            !p.subscriptions.is_empty()
        });
        pollers
    }

    /// How many nodes ACKed (every type synced on it) and NACKed generation `number`, if it
    /// is among the recent ones.
    pub fn tally(&self, number: u64) -> Option<(usize, usize)> {
        let tallies = self.tallies.lock().unwrap_or_else(|p| p.into_inner());
        tallies
            .get(&number)
            .map(|t| (t.acked.len(), t.nacked.len()))
    }

    fn count(&self, node: &Arc<str>, generation: u64, synced: bool, nacked: bool) {
        let mut tallies = self.tallies.lock().unwrap_or_else(|p| p.into_inner());
        let tally = tallies.entry(generation).or_default();
        if synced {
            tally.acked.insert(Arc::clone(node));
        }
        if nacked {
            tally.nacked.insert(Arc::clone(node));
        }
        while tallies.len() > TALLIED {
            tallies.pop_first();
        }
    }

    /// A stream took in generation `number`, published at `published`: time how long until
    /// every stream has ACKed what it got from it (a newer generation restarts the clock).
    /// Every stream says so for each generation; after the first, a load of an integer.
    pub fn generation_arrived(&self, number: u64, published: Instant) {
        if self.timed_number.load(Ordering::SeqCst) >= number {
            return;
        }
        let streams = self.lock();
        let mut converging = self.converging.lock().unwrap_or_else(|p| p.into_inner());
        if self.timed_number.load(Ordering::SeqCst) >= number {
            return;
        }
        let epoch = Timing::unpack(self.timing.load(Ordering::SeqCst))
            .epoch
            .wrapping_add(1);
        self.timed_number.store(number, Ordering::SeqCst);
        self.first_uncounted
            .store(self.next_id.load(Ordering::SeqCst), Ordering::SeqCst);
        // Every stream open is behind until it says otherwise.
        let behind = u32::try_from(streams.len()).unwrap_or(u32::MAX - 1);
        self.timing.store(
            Timing {
                epoch,
                behind: Some(behind),
            }
            .pack(),
            Ordering::SeqCst,
        );
        *converging = Some(Converging { published, epoch });
    }

    /// Stream `id` reported what it decided (`Some`: the generation, and whether it is
    /// synced) or left (`None`): count it behind the generation being timed or not, and
    /// observe the convergence once no stream is. `told`: what this stream last told the
    /// timing (its start, whether it counted as behind, what it decided); `None` once left.
    /// Without a lock but when the timing converges.
    fn track_convergence(
        &self,
        id: u64,
        report: Option<(u64, bool)>,
        told: &mut Option<(u32, bool, (u64, bool))>,
    ) {
        loop {
            let word = self.timing.load(Ordering::SeqCst);
            let timing = Timing::unpack(word);
            let Some(behind) = timing.behind else {
                // Kept, so that a stream whose decision stays the same tells a timing
                // started later ([`StreamHandle::update`]).
                *told = report.map(|decided| (timing.epoch, false, decided));
                return;
            };
            // Read after `timing`, written before it: of this start, or the CAS below fails.
            let number = self.timed_number.load(Ordering::SeqCst);
            let counted = match *told {
                Some((epoch, counted, decided)) if epoch == timing.epoch => {
                    if report == Some(decided) {
                        return;
                    }
                    counted
                }
                _ => id < self.first_uncounted.load(Ordering::SeqCst),
            };
            let now_behind =
                report.is_some_and(|(generation, synced)| !(generation >= number && synced));
            let behind = match (counted, now_behind) {
                (true, false) => behind.saturating_sub(1),
                // At most `u32::MAX - 1`, as [`Timing::pack`] takes it.
                (false, true) => behind.saturating_add(1).min(u32::MAX - 1),
                _ => behind,
            };
            let next = Timing {
                epoch: timing.epoch,
                // Converged: no stream behind after a report (as when a fleet of none
                // hears from its first stream, synced).
                behind: (behind > 0).then_some(behind),
            };
            if next != timing
                && self
                    .timing
                    .compare_exchange(word, next.pack(), Ordering::SeqCst, Ordering::SeqCst)
                    .is_err()
            {
                continue;
            }
            *told = report.map(|decided| (timing.epoch, now_behind, decided));
            if next.behind.is_none() {
                self.converged(timing.epoch);
            }
            return;
        }
    }

    /// The timing's start `epoch` converged: observe how long it took, unless a newer
    /// start replaced it meanwhile.
    fn converged(&self, epoch: u32) {
        let mut converging = self.converging.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = converging.take_if(|c| c.epoch == epoch) {
            (self.on_converged.0)(c.published.elapsed());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Mutex<StreamReport>>>> {
        // A poisoned lock only means a panic elsewhere mid-update; the map is still usable.
        self.streams.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A stream's place in the [`Fleet`]; removes it when dropped (the stream ended).
#[derive(Debug)]
pub struct StreamHandle {
    fleet: Arc<Fleet>,
    id: u64,
    /// The node's id, shared with the fleet's tallies.
    node: Arc<str>,
    report: Arc<Mutex<StreamReport>>,
    /// What the report says as of the last update, told without its lock or a look at it.
    seen: Seen,
}

/// What a stream's report says, and what the fleet was last told of it: an update that
/// changes none of it costs a few compares of integers (streams update after every input,
/// 10,000 of them twice a push), and one that changes a type rebuilds that type alone.
#[derive(Debug, Default)]
struct Seen {
    /// Whether the report has been updated at all.
    updated: bool,
    generation: u64,
    /// Each type's revision as reported (`TypeStatus::revision`), by `ResourceType::index`.
    revisions: [Option<u32>; ResourceType::ALL.len()],
    plan: Option<PlanStatus>,
    unknown: Vec<crate::protocol::UnknownStatus>,
    /// What the fleet's tallies last counted of this stream: generation, synced, NACKed.
    tallied: (u64, bool, bool),
    /// What the convergence timing was last told: its start ([`Timing::epoch`]), whether
    /// this stream counted as behind it, and the generation decided on and whether synced.
    tracked: Option<(u32, bool, (u64, bool))>,
}

/// A stream's report, locked (a poisoned lock only means a panic mid-update; the report is
/// still whole enough to show).
fn lock(report: &Mutex<StreamReport>) -> std::sync::MutexGuard<'_, StreamReport> {
    report.lock().unwrap_or_else(|p| p.into_inner())
}

impl StreamHandle {
    /// Bring the stream's types up to date, as decided on `generation`; `last_change` moves
    /// only for types whose status changed (its revision moved). A type whose revision is
    /// the one reported is
    /// not looked at; an update that changes nothing takes no lock but, when a new
    /// generation's convergence began meanwhile, the timing's.
    pub fn update<'a>(
        &mut self,
        generation: u64,
        statuses: impl IntoIterator<Item = (ResourceType, TypeStatus<'a>)>,
        plan: Option<PlanStatus>,
        unknown: Vec<crate::protocol::UnknownStatus>,
    ) {
        let mut changed: [Option<TypeStatus<'a>>; ResourceType::ALL.len()] = Default::default();
        let mut any_changed = false;
        // In debug builds, what is not looked at is held to what the report says.
        let mut unchanged: Vec<(ResourceType, TypeStatus<'a>)> = Vec::new();
        for (kind, status) in statuses {
            if self.seen.revisions[kind.index()] == Some(status.revision) {
                if cfg!(debug_assertions) {
                    unchanged.push((kind, status));
                }
                continue;
            }
            self.seen.revisions[kind.index()] = Some(status.revision);
            changed[kind.index()] = Some(status);
            any_changed = true;
        }
        let plan_changed = plan != self.seen.plan;
        let unknown_changed = unknown != self.seen.unknown;
        if !unchanged.is_empty() {
            let report = lock(&self.report);
            for (kind, status) in &unchanged {
                debug_assert!(
                    report
                        .types
                        .get(kind.short_name())
                        .is_some_and(|t| t.matches(status)),
                    "{kind:?}: the revision reported says what the status says"
                );
            }
        }
        if self.seen.updated
            && generation == self.seen.generation
            && !any_changed
            && !plan_changed
            && !unknown_changed
        {
            if let Some((_, _, decided)) = self.seen.tracked {
                self.fleet
                    .track_convergence(self.id, Some(decided), &mut self.seen.tracked);
            }
            return;
        }
        self.seen.updated = true;
        self.seen.generation = generation;
        if plan_changed {
            self.seen.plan.clone_from(&plan);
        }
        if unknown_changed {
            self.seen.unknown.clone_from(&unknown);
        }
        let now = SystemTime::now();
        let _bump = BumpAfter(&self.fleet);
        let mut report = lock(&self.report);
        report.generation = generation;
        if plan_changed {
            let plan = plan.map(|p| PlanReport::new(&p, (Instant::now(), now)));
            // `since` is placed on the wall clock anew each time: keep the first placing
            // while the plan is the same one.
            report.plan = match (report.plan.take(), plan) {
                (Some(old), Some(new)) if old.began == new.began => Some(PlanReport {
                    since: old.since,
                    ..new
                }),
                (_, new) => new,
            };
        }
        if unknown_changed {
            report.unknown_types = RareList::new(
                unknown
                    .into_iter()
                    .map(|u| UnknownTypeReport {
                        state: SyncStatus::from(&u.state),
                        type_url: u.type_url,
                        names: u.names,
                    })
                    .collect(),
            );
        }
        for (kind, status) in ResourceType::ALL
            .iter()
            .zip(changed)
            .filter_map(|(kind, status)| Some((*kind, status?)))
        {
            // A revision moves with a change (or, rarely, to what it was: then
            // `last_change` moves too).
            match report.types.get_mut(kind.short_name()) {
                Some(old) => old.refresh(&status, now),
                None => report
                    .types
                    .insert(kind.short_name(), TypeReport::new(&status, now)),
            }
        }
        let decided = (report.generation, report.synced());
        let nacked = report.types.values().any(|t| t.state == SyncStatus::Nacked);
        let tally = (decided.0, decided.1, nacked);
        let count = self.seen.tallied != tally && (tally.1 || tally.2);
        self.seen.tallied = tally;
        drop(report);
        if count {
            self.fleet.count(&self.node, tally.0, tally.1, tally.2);
        }
        self.fleet
            .track_convergence(self.id, Some(decided), &mut self.seen.tracked);
    }
}

impl Drop for StreamHandle {
    fn drop(&mut self) {
        let mut streams = self.fleet.lock();
        streams.remove(&self.id);
        // The stream that held convergence back may be the one leaving. Under the lock: no
        // timing starts between its leaving the streams and counting itself out.
        self.fleet
            .track_convergence(self.id, None, &mut self.seen.tracked);
        drop(streams);
        self.fleet.bump();
    }
}

/// The version of the software a node says it runs (`user_agent_version`, or its build
/// version), if any.
pub fn user_agent_version(node: &Node) -> String {
    use envoy_types::pb::envoy::config::core::v3::node::UserAgentVersionType;
    match &node.user_agent_version_type {
        Some(UserAgentVersionType::UserAgentVersion(v)) => v.clone(),
        Some(UserAgentVersionType::UserAgentBuildVersion(b)) => b
            .version
            .as_ref()
            .map(|v| format!("{}.{}.{}", v.major_number, v.minor_number, v.patch))
            .unwrap_or_default(),
        None => String::new(),
    }
}

/// RFC 3339 UTC timestamps with milliseconds, as in the JSON logs.
fn rfc3339<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_time(*t))
}

/// `2026-11-30T09:19:02.123Z`.
pub fn format_time(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> StreamReport {
        crate::testing::stream_report("n1", "127.0.0.1:1", "ADS")
    }

    #[test]
    fn streams_are_listed_while_open_and_types_follow_the_protocol_state() {
        let fleet = Arc::new(Fleet::default());
        let before = fleet.changes();
        let mut handle = fleet.open(report());
        assert_eq!(fleet.reports().len(), 1);
        assert!(fleet.changes() > before, "an open is a change");
        let opened = fleet.changes();
        let _ = fleet.reports();
        assert_eq!(fleet.changes(), opened, "a look is not a change");
        handle.update(
            1,
            [(
                ResourceType::Cluster,
                status(
                    SyncState::Sent {
                        nonce: "1".into(),
                        version: "v1".into(),
                    },
                    1,
                ),
            )],
            None,
            Vec::new(),
        );
        let cds = fleet.reports()[0].types["CDS"].clone();
        assert_eq!(
            (cds.state, cds.version_sent.as_str(), cds.nonce.as_str()),
            (SyncStatus::Stale, "v1", "1")
        );
        // An unchanged state keeps its last_change.
        std::thread::sleep(Duration::from_millis(5));
        handle.update(
            1,
            [(
                ResourceType::Cluster,
                status(
                    SyncState::Sent {
                        nonce: "1".into(),
                        version: "v1".into(),
                    },
                    1,
                ),
            )],
            None,
            Vec::new(),
        );
        assert_eq!(fleet.reports()[0].types["CDS"].last_change, cds.last_change);
        handle.update(
            1,
            [(
                ResourceType::Cluster,
                TypeStatus {
                    state: std::borrow::Cow::Owned(SyncState::Nacked {
                        nonce: "1".into(),
                        rejected_version: "v1".into(),
                        accepted_version: "v0".into(),
                        nack: Arc::new(crate::protocol::Nack {
                            error: "bad".into(),
                            changed: Arc::from([Changed {
                                resource: Arc::new(
                                    crate::resource::Resource::new(
                                        ResourceType::Cluster,
                                        "b",
                                        "v1",
                                        Vec::new(),
                                        None,
                                    )
                                    .with_origin(
                                        Arc::new(crate::resource::SourceFile {
                                            path: "snap/clusters.yaml".into(),
                                            modified: Some(
                                                SystemTime::UNIX_EPOCH
                                                    + Duration::from_secs(1_800_000_000),
                                            ),
                                        }),
                                        1,
                                    ),
                                ),
                                added: true,
                            }]),
                            runs: None,
                        }),
                    }),
                    acked_version: "v0".into(),
                    revision: 2,
                    oversized: None,
                    not_found: Default::default(),
                },
            )],
            None,
            Vec::new(),
        );
        let cds = fleet.reports()[0].types["CDS"].clone();
        assert_eq!(cds.state, SyncStatus::Nacked);
        assert_eq!(
            cds.nack
                .as_ref()
                .map(|n| n.rejected_changes.as_slice())
                .unwrap_or_default()
                .iter()
                .map(RejectedChange::text)
                .collect::<Vec<_>>(),
            [
                r#"snap/clusters.yaml: clusters[1] "b" (added; the file changed at 2027-01-15T08:00:00.000Z)"#
            ],
            "the NACK names where what it rejected is written"
        );
        let nack = cds.nack.as_ref().expect("NACKed");
        assert_eq!(
            (nack.error.as_str(), nack.rejected_version.as_str()),
            ("bad", "v1")
        );
        assert_eq!(cds.version_acked, "v0");
        assert!(cds.last_change > SystemTime::UNIX_EPOCH);
        let updated = fleet.changes();
        assert!(updated > opened, "an update is a change");
        drop(handle);
        assert!(fleet.reports().is_empty(), "gone with its stream");
        assert!(fleet.changes() > updated, "a close is a change");
    }

    /// A status at `revision` of its stream's type (a new one for each change).
    fn status(state: SyncState, revision: u32) -> TypeStatus<'static> {
        TypeStatus {
            state: std::borrow::Cow::Owned(state),
            acked_version: "".into(),
            revision,
            oversized: None,
            not_found: Default::default(),
        }
    }

    #[test]
    fn convergence_is_observed_once_every_stream_acked_or_left() {
        let observed = Arc::new(AtomicU64::new(0));
        let fleet = Arc::new(Fleet::new({
            let observed = Arc::clone(&observed);
            move |_| {
                observed.fetch_add(1, Ordering::Relaxed);
            }
        }));
        let convergences = || observed.load(Ordering::Relaxed);
        let (mut a, mut b) = (fleet.open(report()), fleet.open(report()));
        let acked = |revision| {
            status(
                SyncState::Acked {
                    version: "v2".into(),
                },
                revision,
            )
        };
        let sent = |revision| {
            status(
                SyncState::Sent {
                    nonce: "1".into(),
                    version: "v2".into(),
                },
                revision,
            )
        };
        fleet.generation_arrived(2, Instant::now());
        a.update(2, [(ResourceType::Cluster, acked(1))], None, Vec::new());
        b.update(2, [(ResourceType::Cluster, sent(1))], None, Vec::new());
        assert_eq!(convergences(), 0, "b has not ACKed");
        b.update(2, [(ResourceType::Cluster, acked(2))], None, Vec::new());
        assert_eq!(convergences(), 1);
        // The next generation: one stream never ACKs, then leaves.
        fleet.generation_arrived(3, Instant::now());
        a.update(3, [(ResourceType::Cluster, acked(1))], None, Vec::new());
        b.update(3, [(ResourceType::Cluster, sent(3))], None, Vec::new());
        assert_eq!(convergences(), 1);
        drop(b);
        assert_eq!(convergences(), 2);
    }

    /// A stream's report in these tests: synced (ACKed) or not (sent), on the revision
    /// given (moved only when what it says changes).
    fn said(synced: bool, revision: u32) -> TypeStatus<'static> {
        let version = "v".to_string();
        status(
            if synced {
                SyncState::Acked { version }
            } else {
                SyncState::Sent {
                    nonce: "1".into(),
                    version,
                }
            },
            revision,
        )
    }

    /// A stream's types are kept in name order whatever the order they come in, one
    /// allocation of exactly their number, and are written out as a map by short name.
    #[test]
    fn a_streams_types_are_in_name_order_in_exactly_their_room_and_written_as_a_map() {
        let report = |synced| TypeReport::new(&said(synced, 1), SystemTime::UNIX_EPOCH);
        let mut types = TypeReports::default();
        for kind in ["RDS", "CDS", "LDS", "EDS"] {
            types.insert(kind, report(false));
            assert_eq!(types.0.capacity(), types.len(), "room for those there only");
        }
        let order: Vec<&str> = types.iter().map(|(kind, _)| *kind).collect();
        assert_eq!(order, ["CDS", "EDS", "LDS", "RDS"]);
        types.insert("EDS", report(true));
        assert_eq!(types.len(), 4, "a type's report replaced, not added");
        assert_eq!(types["EDS"].state, SyncStatus::Synced);
        assert_eq!(types.get("CDS").map(|t| t.state), Some(SyncStatus::Stale));
        assert!(types.get("SDS").is_none() && !types.contains_key("SDS"));
        assert!(types.remove("LDS").is_some());
        assert!(types.remove("LDS").is_none());
        assert_eq!(types.0.capacity(), 3, "what a type left is freed");
        let json = serde_json::to_value(&types).expect("serializes");
        let keys: Vec<&String> = json.as_object().expect("a map").keys().collect();
        assert_eq!(keys, ["CDS", "EDS", "RDS"]);
        assert_eq!(json["EDS"]["state"], "SYNCED");
        let collected: TypeReports = [("RDS", report(true)), ("CDS", report(false))]
            .into_iter()
            .collect();
        assert_eq!(
            collected.iter().map(|(kind, _)| *kind).collect::<Vec<_>>(),
            ["CDS", "RDS"]
        );
    }

    /// The convergence timing, counted without a lock, observes what a set of the streams
    /// behind would (the model below): streams open at a start are behind until they say
    /// they are synced on its generation or later; one opened since counts once it says it
    /// is behind; a stream leaving counts out; it converges, once, when none is behind
    /// after a report or a leave. Random schedules of opens, leaves, starts (some of a
    /// generation timed already) and reports, some unchanged.
    #[test]
    fn convergence_counted_without_a_lock_is_what_a_set_of_the_streams_behind_says() {
        crate::testing::on_tapes(300, |rand| {
            let observed = Arc::new(AtomicU64::new(0));
            let fleet = Arc::new(Fleet::new({
                let observed = Arc::clone(&observed);
                move |_| {
                    observed.fetch_add(1, Ordering::Relaxed);
                }
            }));
            // Open streams: the id, the handle, and what it last said (generation, synced,
            // revision).
            type Open = (u64, StreamHandle, Option<(u64, bool, u32)>);
            let mut streams: Vec<Open> = Vec::new();
            let mut next = 0u64;
            // The model: the generation timed, and the streams behind while timing.
            let (mut timed, mut behind): (u64, Option<std::collections::BTreeSet<u64>>) = (0, None);
            let mut expected = 0u64;
            for step in 0..60 {
                match rand(4) {
                    0 => {
                        streams.push((next, fleet.open(report()), None));
                        next += 1;
                    }
                    1 if !streams.is_empty() => {
                        let (id, handle, _) = streams.remove(rand(streams.len() as u64) as usize);
                        drop(handle);
                        if let Some(set) = &mut behind {
                            set.remove(&id);
                            if set.is_empty() {
                                behind = None;
                                expected += 1;
                            }
                        }
                    }
                    2 => {
                        let number = timed + rand(2); // the same one again, or the next
                        fleet.generation_arrived(number, Instant::now());
                        if number > timed {
                            timed = number;
                            behind = Some(streams.iter().map(|(id, ..)| *id).collect());
                        }
                    }
                    _ if !streams.is_empty() => {
                        let at = rand(streams.len() as u64) as usize;
                        let (id, handle, last) = &mut streams[at];
                        let generation = timed.saturating_sub(rand(2));
                        let synced = rand(2) == 0;
                        let revision = match *last {
                            Some((g, s, r)) if (g, s) == (generation, synced) => r,
                            Some((.., r)) => r + 1,
                            None => 0,
                        };
                        *last = Some((generation, synced, revision));
                        handle.update(
                            generation,
                            [(ResourceType::Cluster, said(synced, revision))],
                            None,
                            Vec::new(),
                        );
                        if let Some(set) = &mut behind {
                            if generation >= timed && synced {
                                set.remove(id);
                            } else {
                                set.insert(*id);
                            }
                            if set.is_empty() {
                                behind = None;
                                expected += 1;
                            }
                        }
                    }
                    _ => {}
                }
                assert_eq!(
                    observed.load(Ordering::Relaxed),
                    expected,
                    "convergences observed after step {step}"
                );
            }
        });
    }

    /// The same count under threads racing: each generation, every stream says it is
    /// behind, then synced, in whatever order the threads run; one stream of the last
    /// thread leaves instead and comes back. Exactly one convergence per generation, and
    /// only once every stream has begun its last report. Bounded: 4 threads, 200
    /// generations.
    #[test]
    fn convergence_counted_by_racing_streams_is_observed_once_per_generation_after_all() {
        const THREADS: u64 = 4;
        const GENERATIONS: u64 = 200;
        let begun = Arc::new(AtomicU64::new(0));
        let early = Arc::new(AtomicU64::new(0));
        let observed = Arc::new(AtomicU64::new(0));
        let fleet = Arc::new(Fleet::new({
            let (begun, early, observed) = (
                Arc::clone(&begun),
                Arc::clone(&early),
                Arc::clone(&observed),
            );
            move |_| {
                let generation = observed.fetch_add(1, Ordering::SeqCst) + 1;
                // Every thread's last report of this generation has begun.
                if begun.load(Ordering::SeqCst) < generation * THREADS {
                    early.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
        let barrier = Arc::new(std::sync::Barrier::new(THREADS as usize + 1));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (fleet, barrier, begun) =
                    (Arc::clone(&fleet), Arc::clone(&barrier), Arc::clone(&begun));
                std::thread::spawn(move || {
                    let mut handle = fleet.open(report());
                    for generation in 1..=GENERATIONS {
                        barrier.wait(); // the generation is published
                        fleet.generation_arrived(generation, Instant::now());
                        let revision = generation as u32 * 2;
                        let cds =
                            |synced, revision| [(ResourceType::Cluster, said(synced, revision))];
                        handle.update(generation, cds(false, revision), None, Vec::new());
                        std::thread::yield_now();
                        begun.fetch_add(1, Ordering::SeqCst);
                        if t == THREADS - 1 && generation % 3 == 0 {
                            // Leaves without ACKing, and is back (uncounted) at once.
                            handle = fleet.open(report());
                            handle.update(generation, cds(true, 0), None, Vec::new());
                        } else {
                            handle.update(generation, cds(true, revision + 1), None, Vec::new());
                        }
                        barrier.wait(); // every stream has reported
                    }
                })
            })
            .collect();
        for generation in 1..=GENERATIONS {
            barrier.wait();
            barrier.wait();
            assert_eq!(
                observed.load(Ordering::SeqCst),
                generation,
                "one convergence per generation"
            );
        }
        for thread in threads {
            thread.join().expect("no stream thread panicked");
        }
        assert_eq!(
            early.load(Ordering::SeqCst),
            0,
            "no convergence before every stream's last report"
        );
    }

    /// An update whose types are at the revisions reported, with the same generation, plan
    /// and unknown types, changes nothing (no change counted, no lock of the report); a
    /// convergence timed since is still told what the stream decided.
    #[test]
    fn an_update_that_changes_nothing_is_no_change_and_still_tells_a_new_convergence() {
        let observed = Arc::new(AtomicU64::new(0));
        let fleet = Arc::new(Fleet::new({
            let observed = Arc::clone(&observed);
            move |_| {
                observed.fetch_add(1, Ordering::Relaxed);
            }
        }));
        let mut handle = fleet.open(report());
        let acked = || {
            status(
                SyncState::Acked {
                    version: "v1".into(),
                },
                7,
            )
        };
        handle.update(1, [(ResourceType::Cluster, acked())], None, Vec::new());
        let changes = fleet.changes();
        handle.update(1, [(ResourceType::Cluster, acked())], None, Vec::new());
        assert_eq!(fleet.changes(), changes, "nothing changed");
        // A convergence begins while the stream's decision stays the same: told at its next
        // update, which converges it.
        fleet.generation_arrived(1, Instant::now());
        assert_eq!(observed.load(Ordering::Relaxed), 0);
        handle.update(1, [(ResourceType::Cluster, acked())], None, Vec::new());
        assert_eq!(observed.load(Ordering::Relaxed), 1);
        assert_eq!(fleet.changes(), changes, "still no change to the reports");
    }

    /// A node that polls is listed as a node with a stream is, its type's state following
    /// its polls (`protocol::PollState`), until it has been quiet for [`POLLER_QUIET`].
    #[test]
    fn p4_p5_a_poller_is_listed_with_what_its_polls_say_until_it_is_quiet() {
        let fleet = Fleet::default();
        let node = Node {
            id: "poller-1".into(),
            cluster: "edge".into(),
            user_agent_name: "envoy".into(),
            ..Default::default()
        };
        let poll = |version_info: &'static str, answer: &'static str| Poll {
            node: &node,
            facts: Arc::new(NodeFacts::of(&node)),
            peer: "127.0.0.1:5000".into(),
            api: "rest",
            kind: ResourceType::Cluster,
            version_info,
            error: None,
            answer,
            names: &[],
            not_found: vec!["gone".into()],
            generation: 3,
        };
        assert_eq!(
            fleet.polled(poll("", "v1")).map(|(s, _)| s),
            Some(SyncStatus::Stale)
        );
        assert_eq!(
            fleet.polled(poll("v1", "v1")).map(|(s, _)| s),
            Some(SyncStatus::Synced)
        );
        assert_eq!(fleet.polled(poll("v1", "v1")), None, "nothing changed");
        let reports = fleet.reports();
        assert_eq!(reports.len(), 1);
        let r = &reports[0];
        assert_eq!(
            (
                r.node_id.as_str(),
                r.stream.as_str(),
                r.protocol,
                r.generation
            ),
            ("poller-1", "REST", "rest", 3)
        );
        let cds = &r.types["CDS"];
        assert_eq!(
            (cds.state, cds.version_acked.as_str()),
            (SyncStatus::Synced, "v1")
        );
        assert_eq!(cds.not_found.as_slice(), ["gone"]);
        assert_eq!(fleet.tally(3), Some((1, 0)), "generation 3: it took it");
        // Answered v2 over and over, it stays at v1: it rejected v2.
        for _ in 0..3 {
            fleet.polled(poll("v1", "v2"));
        }
        assert_eq!(fleet.nodes_nacking(), 1);
        assert_eq!(fleet.tally(3), Some((1, 1)), "and then rejected one");
        assert_eq!(fleet.pollers_by_api().get("rest"), Some(&1));
        // Quiet for long enough, it is forgotten.
        drop(fleet.pollers_at(Instant::now() + POLLER_QUIET + Duration::from_secs(1)));
        assert!(fleet.reports().is_empty());
        assert_eq!(fleet.nodes_nacking(), 0);
    }

    /// A poller is judged by its own cadence (P36): heard once, it is a one-off poll (listed
    /// for [`POLLER_QUIET`], holding no gate once answered); polling every second, a
    /// subscription it stops polling leaves after [`QUIET_INTERVALS`] of that (at least
    /// [`POLLER_QUIET_MIN`]), not a minute later.
    #[test]
    fn p36_a_poller_is_judged_by_its_own_cadence() {
        let fleet = Fleet::default();
        let node = Node {
            id: "curl".into(),
            ..Default::default()
        };
        let poll = |version_info: &'static str| Poll {
            node: &node,
            facts: Arc::new(NodeFacts::of(&node)),
            peer: "127.0.0.1:5000".into(),
            api: "rest",
            kind: ResourceType::Cluster,
            version_info,
            error: None,
            answer: "v1",
            names: &[],
            not_found: Vec::new(),
            generation: 1,
        };
        fleet.polled(poll(""));
        assert_eq!(
            fleet.reports()[0].polls.as_ref().map(|p| p.every),
            Some(None),
            "one poll: no cadence"
        );
        drop(fleet.pollers_at(Instant::now() + POLLER_QUIET - Duration::from_secs(1)));
        assert_eq!(
            fleet.reports().len(),
            1,
            "a one-off poll stays listed a while"
        );
        // Polled again a second later: its cadence is a second.
        {
            let mut pollers = fleet.pollers.lock().expect("not poisoned");
            let poller = pollers.values_mut().next().expect("listed");
            for s in poller.subscriptions.values_mut() {
                s.heard -= Duration::from_secs(1);
            }
        }
        fleet.polled(poll("v1"));
        let every = fleet.reports()[0]
            .polls
            .as_ref()
            .and_then(|p| p.every)
            .expect("a cadence");
        assert!(
            every >= Duration::from_secs(1) && every < Duration::from_secs(2),
            "{every:?}"
        );
        drop(fleet.pollers_at(Instant::now() + Duration::from_secs(2)));
        assert_eq!(
            fleet.reports().len(),
            1,
            "two intervals unpolled: still listed"
        );
        drop(fleet.pollers_at(Instant::now() + Duration::from_secs(QUIET_INTERVALS as u64 * 2)));
        assert!(
            fleet.reports().is_empty(),
            "gone within its cadence, not after {POLLER_QUIET:?}"
        );
    }

    /// Envoy polls each route configuration on its own: a node's RDS is its subscriptions'
    /// most pressing state, and one it stops polling for leaves the report once quiet.
    #[test]
    fn p5_p32_a_poller_s_type_is_the_most_pressing_of_its_subscriptions() {
        let fleet = Fleet::default();
        let node = Node {
            id: "poller-2".into(),
            ..Default::default()
        };
        let rds = |name: &str, error: Option<&'static str>, not_found: &[&str]| {
            let names = [name.to_string()];
            fleet.polled(Poll {
                node: &node,
                facts: Arc::new(NodeFacts::of(&node)),
                peer: "127.0.0.1:5000".into(),
                api: "rest",
                kind: ResourceType::Route,
                version_info: "v1",
                error,
                answer: "v1",
                names: &names,
                not_found: not_found.iter().map(|n| n.to_string()).collect(),
                generation: 1,
            });
        };
        rds("r1", None, &[]);
        rds("r2", Some("r2 is broken"), &["r2"]);
        let route = |fleet: &Fleet| fleet.reports()[0].types.get("RDS").cloned();
        let now = route(&fleet).expect("RDS");
        assert_eq!(now.state, SyncStatus::Nacked);
        assert_eq!(now.not_found.as_slice(), ["r2"]);
        // r1 polls on (a cadence: at once); r2's subscription, heard once, goes quiet
        // (Envoy dropped it), and leaves within the poller's cadence (at least
        // POLLER_QUIET_MIN), not after POLLER_QUIET as a one-off poll would.
        rds("r1", None, &[]);
        let later = Instant::now() + POLLER_QUIET_MIN + Duration::from_millis(100);
        {
            let mut pollers = fleet.pollers.lock().expect("not poisoned");
            let poller = pollers.values_mut().next().expect("listed");
            let r1 = (ResourceType::Route, vec!["r1".to_string()]);
            poller.subscriptions.get_mut(&r1).expect("r1").heard = later;
        }
        drop(fleet.pollers_at(later));
        let now = route(&fleet).expect("RDS");
        assert_eq!(now.state, SyncStatus::Synced);
        assert!(now.not_found.is_empty(), "{:?}", now.not_found);
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(
            format_time(SystemTime::UNIX_EPOCH),
            "1970-01-01T00:00:00.000Z"
        );
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_029_169_039);
        assert_eq!(format_time(t), "2026-11-30T08:59:29.039Z");
    }
}
