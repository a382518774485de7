//! Prometheus metrics (OpenMetrics text, through the `prometheus-client` crate).
//!
//! Owns: the metric names, types, labels and help texts, the handles events update
//! ([`Metrics`], updated only by `telemetry`), and the exposition of those handles with the
//! values the admin server reads at scrape time ([`Scraped`]). Labels stay bounded: protocol
//! and stream kind, type URL, load result, node group; never node ids.
//!
//! A leaf: it knows nothing of the fleet, the cache or the reloader. Must not: serve HTTP
//! (`admin`), log, or decide anything.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// The content type of [`encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StreamLabels {
    /// `sotw` or `delta`.
    pub protocol: &'static str,
    /// `ads` or `per_type`.
    pub stream: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PollLabels {
    /// `rest` (REST-JSON) or `fetch` (a gRPC `Fetch*` method, P36).
    pub api: &'static str,
    pub type_url: &'static str,
    /// `changed` (answered with resources) or `not_modified` (held, then 304).
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    /// One of [`LIMIT_LABELS`].
    pub limit: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PlanLabels {
    /// `started`, `completed`, `timed_out` (a step's ACKs did not come in time), `stopped`
    /// (a NACK mid-plan: what depends on it is held back), `replaced` (a newer snapshot
    /// arrived mid-plan), `reconnect_ordered` or `reconnect_unordered` (per type, a proxy back
    /// on a new stream holding a recent generation's content, or content not kept).
    pub event: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RolloutLabels {
    /// `promoted` (by the canaries' ACKs and the bake, or `rollout promote`), `halted` (a
    /// canary NACKed) or `aborted` (`rollout abort`).
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabels {
    pub type_url: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskLabels {
    /// A long-running task's name ([`TASK_LABELS`]).
    pub task: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `ok` or `failed`.
    pub result: &'static str,
}

/// Every handle events update (through `telemetry`).
#[derive(Debug)]
pub struct Metrics {
    pub streams: Family<StreamLabels, Gauge>,
    pub responses: Family<TypeLabels, Counter>,
    pub acks: Family<TypeLabels, Counter>,
    pub nacks: Family<TypeLabels, Counter>,
    pub resources_sent: Family<TypeLabels, Counter>,
    /// Responses over `--max-response-bytes` split in several, by type URL (one count per
    /// split part but the last).
    pub responses_split: Family<TypeLabels, Counter>,
    /// Responses over `--max-response-bytes` that went whole, by type URL.
    pub responses_oversized: Family<TypeLabels, Counter>,
    pub bytes_sent: Family<TypeLabels, Counter>,
    /// From a snapshot's publication to the first response written for it on a stream.
    pub push_latency: Histogram,
    /// From a response written to its ACK.
    pub ack_latency: Histogram,
    /// From a snapshot's publication until every connected node has ACKed what it got.
    pub convergence: Histogram,
    /// REST-JSON polls answered.
    pub rest_polls: Family<PollLabels, Counter>,
    /// Make-before-break plans, by what happened to them.
    pub plans: Family<PlanLabels, Counter>,
    /// Connections or streams turned away by a limit.
    pub limits: Family<LimitLabels, Counter>,
    /// Streams refused: the client certificate is not bound to the node claimed.
    pub identity_mismatches: Counter,
    /// Types this server does not serve, asked for on aggregated streams (P33): once per
    /// type per stream.
    pub unknown_types: Counter,
    /// `NOT_FOUND` resource errors sent (P32), by type URL (`unknown` for a type this server
    /// does not serve).
    pub resources_not_found: Family<TypeLabels, Counter>,
    /// Connections closed for reaching `--max-connection-age`.
    pub connections_aged: Counter,
    /// Staged rollouts, by how they ended (or halted).
    pub rollouts: Family<RolloutLabels, Counter>,
    /// Config loads, by result.
    pub config_loads: Family<ResultLabels, Counter>,
    /// Long-running tasks that ended or panicked and were restarted, by task; and how many
    /// are down now, waiting to restart.
    pub task_restarts: Family<TaskLabels, Counter>,
    pub tasks_down: Gauge,
    /// When the last load (good or bad) happened, Unix seconds; 0 before the first.
    pub config_last_load: Gauge<f64, AtomicU64>,
    /// 1 when the last load succeeded.
    pub config_last_load_ok: Gauge,
    /// File-system events seen on the config paths (before debouncing).
    pub file_watch_events: Counter,
    /// `--source`: 1 while etcd does not answer (the last good serves); 0 otherwise, and
    /// always 0 when serving files.
    pub source_down: Gauge,
}

/// 1 ms to ~65 s, doubling.
fn latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.001, 2.0, 17)
}

/// Every `limit` label of `switchyard_limit_rejections_total`, each listed from the start at
/// 0: a counter that first appears at 1 shows no increase to `rate()`, and an alert on it
/// would never fire for a single rejection.
pub const LIMIT_LABELS: [&str; 8] = [
    "connections",
    "stalled_streams",
    "handshake_timeout",
    "names_per_stream",
    "first_request_timeout",
    "new_streams",
    "admin_connections",
    "admin_header_timeout",
];

/// The long-running tasks the daemon supervises, by the name their metrics and `/status`
/// give them (`supervise`).
pub const TASK_LABELS: [&str; 6] = [
    "follower",
    "fleet_rollout",
    "sharing",
    "keeper",
    "rollouts",
    "stream_lines",
];

impl Default for Metrics {
    fn default() -> Self {
        let limits = Family::<LimitLabels, Counter>::default();
        for limit in LIMIT_LABELS {
            let _ = limits.get_or_create(&LimitLabels { limit });
        }
        let config_loads = Family::<ResultLabels, Counter>::default();
        // Both results are listed from the start, at 0.
        for result in ["ok", "failed"] {
            let _ = config_loads.get_or_create(&ResultLabels { result });
        }
        let task_restarts = Family::<TaskLabels, Counter>::default();
        for task in TASK_LABELS {
            let _ = task_restarts.get_or_create(&TaskLabels { task });
        }
        Metrics {
            task_restarts,
            tasks_down: Gauge::default(),
            streams: Family::default(),
            responses: Family::default(),
            acks: Family::default(),
            nacks: Family::default(),
            resources_sent: Family::default(),
            responses_split: Family::default(),
            responses_oversized: Family::default(),
            bytes_sent: Family::default(),
            push_latency: Histogram::new(latency_buckets()),
            ack_latency: Histogram::new(latency_buckets()),
            convergence: Histogram::new(latency_buckets()),
            rest_polls: Family::default(),
            plans: Family::default(),
            limits,
            identity_mismatches: Counter::default(),
            unknown_types: Counter::default(),
            resources_not_found: Family::default(),
            connections_aged: Counter::default(),
            rollouts: Family::default(),
            config_loads,
            config_last_load: Gauge::default(),
            config_last_load_ok: Gauge::default(),
            source_down: Gauge::default(),
            file_watch_events: Counter::default(),
        }
    }
}

/// What the admin server reads from the fleet and the cache when scraped.
#[derive(Clone, Debug, Default)]
pub struct Scraped {
    /// Connected nodes whose latest response of some type was NACKed (pollers too).
    pub nodes_nacking: usize,
    /// Nodes that poll (still listed: heard within three of their intervals, or
    /// `fleet::POLLER_QUIET` for a poll heard once), by API (`rest`, `fetch`).
    pub pollers: Vec<(&'static str, usize)>,
    /// The generation every node but the canaries gets.
    pub stable_generation: u64,
    /// The canaries' generation during a rollout; 0 without one.
    pub candidate_generation: u64,
    /// Under a rollout policy: the state of the rollout (`NONE` without one). `None`
    /// without a policy (the metric is left out).
    pub rollout_state: Option<&'static str>,
    /// The version served per node group (its files' names, joined by `+`) and type URL.
    pub snapshots: Vec<(String, &'static str, String)>,
    /// The certificates secrets are read from (`switchyard_files`): secret, file, and when
    /// it expires (Unix seconds).
    pub certificates: Vec<(String, String, i64)>,
}

/// The rollout states `switchyard_rollout_state` has a series for.
pub const ROLLOUT_STATES: [&str; 4] = ["NONE", "CANARY", "BAKING", "HALTED"];

/// The whole exposition: the handles, and what was read at scrape time.
///
/// A table, so one function: one registration per metric, with its help text, in the order
/// the exposition lists them.
pub fn encode(m: &Metrics, scraped: Scraped) -> String {
    let mut registry = Registry::with_prefix("switchyard");
    registry.register(
        "streams",
        "Connected xDS streams, by protocol (sotw, delta) and stream kind (ads, per_type)",
        m.streams.clone(),
    );
    registry.register(
        "responses",
        "Responses written, by type URL",
        m.responses.clone(),
    );
    registry.register("acks", "ACKs received, by type URL", m.acks.clone());
    registry.register(
        "identity_mismatches",
        "Streams and polls refused because the client certificate is not bound to the node \
         they claim (--node-identity)",
        m.identity_mismatches.clone(),
    );
    registry.register(
        "limit_rejections",
        "Connections and streams turned away by a limit, by limit: connections \
         (--max-connections), handshake_timeout (--handshake-timeout), names_per_stream \
         (--max-names-per-stream), first_request_timeout (--first-request-timeout), \
         admin_connections, admin_header_timeout (--admin-header-timeout)",
        m.limits.clone(),
    );
    registry.register(
        "connections_aged",
        "xDS connections closed for reaching --max-connection-age (their streams ended, a \
         GOAWAY sent), so proxies reconnect and spread over the replicas",
        m.connections_aged.clone(),
    );
    registry.register(
        "update_plans",
        "Make-before-break update plans on aggregated streams, by event: started, completed, \
         timed_out (a step not ACKed in time, the next sent anyway), stopped (a NACK mid-plan \
         held back what depends on the rejected resources), replaced (a newer snapshot \
         arrived mid-plan), reconnect_ordered and reconnect_unordered (a proxy back on a new \
         stream holding, per type, a recent generation's content, or content this server does \
         not keep)",
        m.plans.clone(),
    );
    registry.register(
        "rollouts",
        "Staged rollouts (--canary-id, --canary-cluster), by outcome: promoted (every canary \
         ACKed and the bake passed, or rollout promote), halted (a canary NACKed), aborted \
         (rollout abort)",
        m.rollouts.clone(),
    );
    registry.register("nacks", "NACKs received, by type URL", m.nacks.clone());
    registry.register(
        "resources_sent",
        "Resources written in responses (delta: also removals), by type URL",
        m.resources_sent.clone(),
    );
    registry.register(
        "unknown_types",
        "Types this server does not serve asked for on aggregated streams, once per type and \
         stream (answered as resources that do not exist; the stream goes on)",
        m.unknown_types.clone(),
    );
    registry.register(
        "resources_not_found",
        "NOT_FOUND resource errors sent for subscribed names that do not exist for the node, \
         by type URL (unknown: a type this server does not serve)",
        m.resources_not_found.clone(),
    );
    registry.register(
        "responses_split",
        "Responses over --max-response-bytes split in several (each part but the last \
         counted), by type URL",
        m.responses_split.clone(),
    );
    registry.register(
        "responses_oversized",
        "Responses over --max-response-bytes sent whole because they cannot be split (a \
         SotW response of the whole set, or one resource alone over it), by type URL",
        m.responses_oversized.clone(),
    );
    registry.register(
        "bytes_sent",
        "Encoded response bytes written, by type URL",
        m.bytes_sent.clone(),
    );
    registry.register(
        "push_latency_seconds",
        "From a snapshot's publication to the first response written for it, per stream",
        m.push_latency.clone(),
    );
    registry.register(
        "ack_latency_seconds",
        "From a response written to its ACK",
        m.ack_latency.clone(),
    );
    registry.register(
        "convergence_seconds",
        "From a snapshot's publication until every connected node ACKed what it got",
        m.convergence.clone(),
    );
    registry.register(
        "rest_polls",
        "Polls answered, by API (rest: REST-JSON, fetch: a gRPC Fetch* method), type URL and \
         result (changed, or not_modified: held for the version the poll named, then answered \
         304 by REST and with that same version by Fetch)",
        m.rest_polls.clone(),
    );
    registry.register(
        "config_loads",
        "Config loads, by result (ok, failed)",
        m.config_loads.clone(),
    );
    registry.register(
        "config_last_load_timestamp_seconds",
        "When the last config load (good or bad) happened, Unix time",
        m.config_last_load.clone(),
    );
    registry.register(
        "config_last_load_ok",
        "1 when the last config load succeeded, 0 when it failed (the last good one serves)",
        m.config_last_load_ok.clone(),
    );
    registry.register(
        "source_down",
        "With --source: 1 while etcd does not answer (the last good generation serves); 0 otherwise",
        m.source_down.clone(),
    );
    registry.register(
        "task_restarts",
        "Long-running tasks (the source's follower, the fleet's rollout, the sharing of the \
         view, the promoted copy's keeper, the rollouts) that ended or panicked and were \
         restarted, by task",
        m.task_restarts.clone(),
    );
    registry.register(
        "tasks_down",
        "Long-running tasks down now, waiting to be restarted (0 when all run)",
        m.tasks_down.clone(),
    );
    registry.register(
        "file_watch_events",
        "File-system events seen on the watched config paths",
        m.file_watch_events.clone(),
    );
    registry.register_collector(Box::new(scraped));
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoleLabels {
    role: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiLabels {
    api: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SnapshotLabels {
    /// The node group: the names of its files, joined by `+`.
    group: String,
    type_url: &'static str,
    version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CertificateLabels {
    secret: String,
    file: String,
}

impl Collector for Scraped {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let nacking = ConstGauge::new(self.nodes_nacking as i64);
        nacking.encode(encoder.encode_descriptor(
            "nodes_nacking",
            "Connected nodes whose latest response of some type was NACKed (nodes that poll \
             included)",
            None,
            nacking.metric_type(),
        )?)?;
        // The help text below says how long a poller counts.
        const _: () = assert!(crate::fleet::POLLER_QUIET.as_secs() == 60);
        {
            let mut family = encoder.encode_descriptor(
                "pollers",
                "Nodes that poll instead of holding a stream, by API: rest (REST-JSON) and \
                 fetch (the gRPC Fetch methods); each counts until it has not polled for three \
                 of its own intervals (60 s at most, and for a poll heard once)",
                None,
                MetricType::Gauge,
            )?;
            for api in ["rest", "fetch"] {
                let count = self
                    .pollers
                    .iter()
                    .find(|(a, _)| *a == api)
                    .map_or(0, |(_, n)| *n);
                ConstGauge::new(count as i64).encode(family.encode_family(&ApiLabels { api })?)?;
            }
        }
        {
            let mut family = encoder.encode_descriptor(
                "generation",
                "The generation served, by role: stable (every node but the canaries during a \
                 rollout) and candidate (the canaries', during a rollout; 0 without one)",
                None,
                MetricType::Gauge,
            )?;
            for (role, number) in [
                ("stable", self.stable_generation),
                ("candidate", self.candidate_generation),
            ] {
                ConstGauge::new(number as i64)
                    .encode(family.encode_family(&RoleLabels { role })?)?;
            }
        }
        if let Some(now) = self.rollout_state {
            let mut family = encoder.encode_descriptor(
                "rollout_state",
                "1 for the state of the rollout in progress (CANARY, BAKING, HALTED), or for \
                 NONE without one",
                None,
                MetricType::Gauge,
            )?;
            for state in ROLLOUT_STATES {
                ConstGauge::new(i64::from(state == now))
                    .encode(family.encode_family(&StateLabels { state })?)?;
            }
        }
        {
            let mut family = encoder.encode_descriptor(
                "certificate_expiry_timestamp_seconds",
                "When each certificate a secret is read from (switchyard_files) expires, Unix \
                 time, by secret and file (the earliest of a file's certificates)",
                None,
                MetricType::Gauge,
            )?;
            for (secret, file, not_after) in &self.certificates {
                let labels = CertificateLabels {
                    secret: secret.clone(),
                    file: file.clone(),
                };
                ConstGauge::new(*not_after).encode(family.encode_family(&labels)?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "snapshot_version",
            "The version served per node group and type (1 per current version)",
            None,
            MetricType::Gauge,
        )?;
        for (group, type_url, version) in &self.snapshots {
            let labels = SnapshotLabels {
                group: group.clone(),
                type_url,
                version: version.clone(),
            };
            ConstGauge::new(1).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// Seconds since the Unix epoch (0 before it).
pub fn unix_seconds(t: std::time::SystemTime) -> f64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs_f64()
}
/// Write `value` as seconds into a histogram.
pub fn observe(histogram: &Histogram, value: Duration) {
    histogram.observe(value.as_secs_f64());
}
