//! Operational events, each logged and counted in one place, as vector's internal events are:
//! a stream opened or closed, a response sent, an ACK, a NACK, a plan step, a limit reached,
//! a REST poll answered, a config load, a file event, a rollout's end.
//!
//! Owns: what each event logs (level, message, fields) and which metric it moves. Callers say
//! what happened; they neither log it nor touch a metric handle themselves. A NACK's log
//! names what it rejected as `/status` does (`fleet::RejectedChange`). Must not: decide
//! anything (the protocol and the server do), or read the fleet or the cache (scrape-time
//! values are the admin server's to collect).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use envoy_types::pb::envoy::config::core::v3::Node;

use crate::metrics::{
    observe, LimitLabels, Metrics, PlanLabels, PollLabels, ResultLabels, RolloutLabels,
    StreamLabels, TypeLabels,
};
use crate::protocol::{Event, PlanEvent, Variant};
use crate::resource::ResourceType;

/// Where events go: the metrics (shared by every clone) and the log.
#[derive(Clone, Debug, Default)]
pub struct Telemetry {
    metrics: Arc<Metrics>,
    /// Which streams opened and closed get an INFO line of their own (shared by every
    /// clone).
    stream_lines: Arc<Mutex<StreamLines>>,
}

/// How long a period of stream lines lasts: in each, the first [`STREAM_LINES`] streams
/// opened or closed get an INFO line each, the rest a DEBUG line each and, at the period's
/// end, one INFO line that counts them. A storm of 10,000 proxies connecting logs a few
/// lines at INFO, not 10,000 (a line per stream was a twentieth of a sync's CPU).
pub const STREAM_LOG_PERIOD: Duration = Duration::from_secs(10);
/// INFO lines for streams opened or closed per [`STREAM_LOG_PERIOD`].
pub const STREAM_LINES: u32 = 20;

/// The current period of stream lines.
#[derive(Debug, Default)]
struct StreamLines {
    /// When the period began (`None`: no stream opened or closed yet).
    began: Option<Instant>,
    /// INFO lines given this period.
    lines: u32,
    /// Streams opened and closed this period with a DEBUG line only.
    opened: u64,
    closed: u64,
}

impl StreamLines {
    /// Whether the stream event at `now` gets an INFO line; the period's count is logged
    /// first when a new one begins.
    fn take_line(&mut self, now: Instant) -> bool {
        if self
            .began
            .is_none_or(|began| now.saturating_duration_since(began) >= STREAM_LOG_PERIOD)
        {
            self.end_period();
            self.began = Some(now);
        }
        if self.lines < STREAM_LINES {
            self.lines += 1;
            return true;
        }
        false
    }

    /// Log how many streams this period had no INFO line, if any, and start counting anew.
    fn end_period(&mut self) {
        let (opened, closed) = (
            std::mem::take(&mut self.opened),
            std::mem::take(&mut self.closed),
        );
        self.lines = 0;
        self.began = None;
        if opened + closed > 0 {
            tracing::info!(
                opened,
                closed,
                period = ?STREAM_LOG_PERIOD,
                "xDS streams opened and closed without a line each at INFO (past the first {STREAM_LINES} of the period; each has one at DEBUG)."
            );
        }
    }
}

/// A limit that turned a connection, a stream or a request away.
#[derive(Clone, Copy, Debug)]
pub enum Limit<'a> {
    /// `--max-connections` (`limit`: `connections`) or the admin port's cap
    /// (`admin_connections`).
    Connections {
        limit: &'static str,
        port: &'static str,
        peer: std::net::SocketAddr,
        max: usize,
    },
    /// `--handshake-timeout`: no TLS handshake or first byte in time.
    HandshakeTimeout {
        port: &'static str,
        peer: std::net::SocketAddr,
        timeout: Duration,
    },
    /// `--max-names-per-stream`.
    NamesPerStream { peer: &'a str, error: &'a str },
    /// `--first-request-timeout`: a stream that never said who it is.
    FirstRequestTimeout { peer: &'a str, waited: Duration },
    /// `--stalled-stream-timeout`: a stream whose client read none of its responses for
    /// that long; its connection is closed.
    StalledStream {
        peer: &'a str,
        node: &'a str,
        waited: Duration,
    },
    /// `--admin-header-timeout`.
    AdminHeaderTimeout { peer: Option<std::net::SocketAddr> },
    /// `--max-new-streams-per-second`: a stream past the admission rate. `log`: `Some(n)`
    /// when it is time for a log line, with the `n` turned away since the last one.
    NewStreams { peer: &'a str, log: Option<u64> },
}

impl Limit<'_> {
    fn label(&self) -> &'static str {
        match self {
            Limit::Connections { limit, .. } => limit,
            Limit::HandshakeTimeout { .. } => "handshake_timeout",
            Limit::NamesPerStream { .. } => "names_per_stream",
            Limit::FirstRequestTimeout { .. } => "first_request_timeout",
            Limit::StalledStream { .. } => "stalled_streams",
            Limit::AdminHeaderTimeout { .. } => "admin_header_timeout",
            Limit::NewStreams { .. } => "new_streams",
        }
    }
}

/// How a staged rollout ended, or halted.
#[derive(Clone, Copy, Debug)]
pub enum RolloutEnd<'a> {
    /// Every canary ACKed and the bake passed.
    Promoted { generation: u64, canaries: usize },
    /// A canary NACKed.
    Halted {
        generation: u64,
        stable: u64,
        reason: &'a str,
    },
    /// `rollout promote` (`promote: true`) or `rollout abort`.
    ByOperator { generation: u64, promote: bool },
}

/// A config load that succeeded.
#[derive(Clone, Copy, Debug)]
pub struct Loaded<'a> {
    pub generation: u64,
    /// Whether it differs from what was serving (and was published).
    pub changed: bool,
    pub files: usize,
    /// Files parsed anew (the rest were unchanged).
    pub parsed: usize,
    pub resources: usize,
    pub version: &'a str,
}

impl Telemetry {
    /// The handles, for the exposition.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// A stream named its node: listed in `switchyard_streams` until the returned guard
    /// goes (see [`Telemetry::stream_closed`]).
    pub fn stream_opened(
        &self,
        node: &Node,
        peer: &str,
        variant: Variant,
        protocol: &'static str,
    ) -> OpenStream {
        if self.stream_line(true) {
            tracing::info!(node = %node.id, node_cluster = %node.cluster, %peer, stream = %variant, protocol, features = ?node.client_features, "xDS stream opened.");
        } else {
            tracing::debug!(node = %node.id, node_cluster = %node.cluster, %peer, stream = %variant, protocol, features = ?node.client_features, "xDS stream opened.");
        }
        let labels = StreamLabels {
            protocol,
            stream: match variant {
                Variant::Aggregated => "ads",
                Variant::Single(_) => "per_type",
            },
        };
        let gauge = self.metrics.streams.get_or_create(&labels).clone();
        gauge.inc();
        OpenStream { gauge }
    }

    /// A stream ended (`opened`: if it had named its node).
    pub fn stream_closed(
        &self,
        opened: Option<OpenStream>,
        node: &str,
        peer: &str,
        variant: Variant,
        protocol: &'static str,
        reason: &str,
    ) {
        drop(opened);
        if self.stream_line(false) {
            tracing::info!(node, %peer, stream = %variant, protocol, %reason, "xDS stream closed.");
        } else {
            tracing::debug!(node, %peer, stream = %variant, protocol, %reason, "xDS stream closed.");
        }
    }

    /// Whether a stream opened (`opened`) or closed gets its INFO line; if not, it is
    /// counted for the period's line ([`STREAM_LOG_PERIOD`]).
    fn stream_line(&self, opened: bool) -> bool {
        let mut lines = self.stream_lines.lock().unwrap_or_else(|p| p.into_inner());
        if lines.take_line(Instant::now()) {
            return true;
        }
        if opened {
            lines.opened += 1;
        } else {
            lines.closed += 1;
        }
        false
    }

    /// Log the count of the period's streams without an INFO line within a second of the
    /// period's end, until `stop` (then at once): a storm's count is logged when it ends,
    /// not at the next stream.
    pub async fn stream_line_counts(self, mut stop: crate::shutdown::Shutdown) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let stopping = tokio::select! {
                _ = tick.tick() => false,
                _ = stop.wait() => true,
            };
            let mut lines = self.stream_lines.lock().unwrap_or_else(|p| p.into_inner());
            if stopping
                || lines
                    .began
                    .is_some_and(|began| began.elapsed() >= STREAM_LOG_PERIOD)
            {
                lines.end_period();
            }
            if stopping {
                return;
            }
        }
    }

    /// A client's certificate is not bound to the node it claims (`what`: `stream`, `REST
    /// poll`).
    pub fn identity_mismatch(
        &self,
        what: &str,
        node: &str,
        peer: &str,
        why: &impl std::fmt::Display,
    ) {
        self.metrics.identity_mismatches.inc();
        tracing::warn!(node, %peer, reason = %why, "Refused a {what}: its client certificate is not bound to the node it claims.");
    }

    /// A limit turned something away.
    pub fn limit_reached(&self, limit: Limit<'_>) {
        self.metrics
            .limits
            .get_or_create(&LimitLabels {
                limit: limit.label(),
            })
            .inc();
        match limit {
            Limit::Connections {
                limit,
                port,
                peer,
                max,
            } => tracing::warn!(port, %peer, max, limit, "Closed a new connection: the limit on open connections is reached."),
            Limit::HandshakeTimeout {
                port,
                peer,
                timeout,
            } => tracing::info!(port, %peer, ?timeout, "Closed a new connection: no TLS handshake or first byte in time."),
            Limit::NamesPerStream { peer, error } => {
                tracing::debug!(%peer, %error, "Ended a stream: it subscribed to more names than --max-names-per-stream.")
            }
            Limit::FirstRequestTimeout { peer, waited } => {
                tracing::debug!(%peer, ?waited, "Ended a stream: no request naming a node within --first-request-timeout.")
            }
            Limit::StalledStream { peer, node, waited } => tracing::warn!(
                %peer,
                node,
                waited = %humantime::format_duration(waited),
                "Closed a connection: its client answered none of a stream's responses (no ACK, NACK or request) within --stalled-stream-timeout: a proxy stuck or overloaded; it reconnects once it can."
            ),
            Limit::AdminHeaderTimeout { peer } => tracing::info!(?peer, "Closed an admin connection: its request headers took longer than --admin-header-timeout."),
            Limit::NewStreams { peer, log } => match log {
                Some(turned_away) => tracing::warn!(%peer, turned_away, "Turned new streams away (RESOURCE_EXHAUSTED): more than --max-new-streams-per-second at once (a reconnect storm?); the proxies retry with backoff."),
                None => tracing::debug!(%peer, "Turned a new stream away: past --max-new-streams-per-second."),
            },
        }
    }

    /// A connection reached `--max-connection-age`.
    pub fn connection_aged(&self, peer: Option<std::net::SocketAddr>, age: Option<Duration>) {
        self.metrics.connections_aged.inc();
        tracing::debug!(
            ?peer,
            ?age,
            "A connection reached --max-connection-age: ending its streams, GOAWAY."
        );
    }

    /// Every connected stream ACKed what it got of a generation, `took` after its
    /// publication.
    pub fn converged(&self, took: Duration) {
        observe(&self.metrics.convergence, took);
    }

    /// A poll answered: with `resources` (`changed`, `bytes` of JSON or protobuf), or held
    /// for the version it named and answered unchanged.
    pub fn poll_answered(&self, api: PollApi, kind: ResourceType, changed: Option<(usize, usize)>) {
        let api = api.name();
        let result = match changed {
            Some((resources, bytes)) => {
                self.count_sent(Some(kind), resources, bytes);
                "changed"
            }
            None => "not_modified",
        };
        self.metrics
            .rest_polls
            .get_or_create(&PollLabels {
                api,
                type_url: kind.type_url(),
                result,
            })
            .inc();
        tracing::debug!(api, r#type = %kind, result, "Answered a poll.");
    }

    /// A poller's state of `kind` changed with its latest poll (`fleet::Fleet::polled`): a
    /// rejection is logged and counted as a stream's NACK is; taking a new version as an ACK.
    pub fn poller_state(
        &self,
        api: PollApi,
        node: &str,
        kind: ResourceType,
        state: crate::fleet::SyncStatus,
        error: Option<&str>,
    ) {
        let api = api.name();
        match state {
            crate::fleet::SyncStatus::Nacked => {
                let error = error.unwrap_or_default();
                tracing::warn!(node, api, r#type = %kind, error, "NACK: the poller rejected the configuration and keeps its previous one.");
                self.metrics.nacks.get_or_create(&type_labels(kind)).inc();
            }
            crate::fleet::SyncStatus::Synced => {
                tracing::debug!(node, api, r#type = %kind, "The poller took what it was answered.");
                self.metrics.acks.get_or_create(&type_labels(kind)).inc();
            }
            _ => {}
        }
    }

    fn count_sent(&self, kind: Option<ResourceType>, resources: usize, bytes: usize) {
        let labels = any_type_labels(kind);
        let m = &self.metrics;
        m.responses.get_or_create(&labels).inc();
        m.resources_sent
            .get_or_create(&labels)
            .inc_by(resources as u64);
        m.bytes_sent.get_or_create(&labels).inc_by(bytes as u64);
    }

    /// A staged rollout ended or halted.
    pub fn rollout_ended(&self, end: RolloutEnd<'_>) {
        let outcome = match end {
            RolloutEnd::Promoted {
                generation,
                canaries,
            } => {
                tracing::info!(
                    generation,
                    canaries,
                    "Rollout promoted: every canary took the new generation and the bake time passed without a NACK; it now goes to every node."
                );
                "promoted"
            }
            RolloutEnd::Halted {
                generation,
                stable,
                reason,
            } => {
                tracing::error!(
                    generation,
                    stable,
                    reason = %reason,
                    "Rollout halted: a canary rejected the new generation; the other nodes stay on the stable one (fix the configuration, or `switchyard rollout abort`)."
                );
                "halted"
            }
            RolloutEnd::ByOperator {
                generation,
                promote: true,
            } => {
                tracing::warn!(
                    generation,
                    "Rollout promoted by an operator: every node gets it."
                );
                "promoted"
            }
            RolloutEnd::ByOperator {
                generation,
                promote: false,
            } => {
                tracing::warn!(
                    generation,
                    "Rollout aborted by an operator: the canaries go back to it."
                );
                "aborted"
            }
        };
        self.metrics
            .rollouts
            .get_or_create(&RolloutLabels { outcome })
            .inc();
    }

    /// `--source`: whether etcd answers (`switchyard_source_down`).
    pub fn source_answering(&self, answering: bool) {
        self.metrics().source_down.set(i64::from(!answering));
    }

    /// A long-running task ended or panicked (`cause`); it is started again in
    /// `restart_in`. `down` tasks are down now, this one among them.
    pub fn task_down(&self, task: &'static str, cause: &str, restart_in: Duration, down: usize) {
        tracing::error!(
            task,
            cause,
            restart_in = %humantime::format_duration(restart_in),
            "A long-running task stopped; it is started again after a wait. /readyz, `switchyard status` and the page say so until it runs."
        );
        self.metrics
            .task_restarts
            .get_or_create(&crate::metrics::TaskLabels { task })
            .inc();
        self.metrics.tasks_down.set(down as i64);
    }

    /// A task the daemon cannot do without (the xDS server, the admin server) ended before
    /// shutdown: the daemon ends with an error.
    pub fn task_failed(&self, task: &'static str, cause: &str) {
        tracing::error!(
            task,
            cause,
            "A task the server cannot do without stopped; the process ends with an error (its orchestrator starts it again), /readyz says not ready meanwhile."
        );
        self.metrics.tasks_down.inc();
    }

    /// A task that stopped was started again; `down` tasks are still down.
    pub fn task_restarted(&self, task: &'static str, down: usize) {
        tracing::info!(task, "A long-running task that stopped was started again.");
        self.metrics.tasks_down.set(down as i64);
    }

    /// A file-system event on the config paths (counted before debouncing).
    pub fn file_event(&self) {
        self.metrics.file_watch_events.inc();
    }

    /// A config load succeeded (with these warnings).
    pub fn config_loaded(&self, load: Loaded<'_>, warnings: &[impl std::fmt::Display]) {
        for w in warnings {
            tracing::warn!(warning = %w, "Configuration warning.");
        }
        if load.changed {
            tracing::info!(
                generation = load.generation,
                files = load.files,
                parsed = load.parsed,
                resources = load.resources,
                config_version = %load.version,
                "Loaded snapshot files."
            );
        } else {
            tracing::debug!(generation = load.generation, "Reloaded; nothing changed.");
        }
        self.count_load("ok");
    }

    /// A config load failed; `serving` keeps serving.
    pub fn config_failed(&self, errors: usize, serving: u64, failure: &impl std::fmt::Display) {
        if serving == 0 {
            tracing::error!(
                errors,
                "Configuration load failed, and nothing has loaded yet: no node is served until the files load. {failure}"
            );
        } else {
            tracing::error!(
                errors,
                serving_generation = serving,
                "Configuration load failed; the last good snapshot keeps serving. {failure}"
            );
        }
        self.count_load("failed");
    }

    fn count_load(&self, result: &'static str) {
        let m = &self.metrics;
        m.config_loads.get_or_create(&ResultLabels { result }).inc();
        m.config_last_load
            .set(crate::metrics::unix_seconds(SystemTime::now()));
        m.config_last_load_ok.set(i64::from(result == "ok"));
    }

    /// The events of one stream, from its first request to its end.
    pub fn stream(&self, protocol: &'static str) -> StreamEvents {
        StreamEvents {
            telemetry: self.clone(),
            protocol,
            node: String::new(),
            sent_at: Default::default(),
            push_from: None,
        }
    }
}

/// The labels of a per-type metric.
fn type_labels(kind: ResourceType) -> TypeLabels {
    TypeLabels {
        type_url: kind.type_url(),
    }
}

/// How a poll came: REST-JSON, or a gRPC `Fetch*` method (P36).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollApi {
    Rest,
    Fetch,
}

impl PollApi {
    /// `rest` or `fetch`: the metrics' label, and a poller's protocol in `/status`.
    pub fn name(self) -> &'static str {
        match self {
            PollApi::Rest => "rest",
            PollApi::Fetch => "fetch",
        }
    }
}

/// What one response carried, for logs and metrics.
#[derive(Clone, Copy, Debug)]
pub struct Sent {
    pub resources: usize,
    pub not_found: usize,
    pub bytes: usize,
}

/// The label of a type, or `unknown` for one this server does not serve (never the client's
/// text: a label per string a client sends would grow without bound).
fn any_type_labels(kind: Option<ResourceType>) -> TypeLabels {
    TypeLabels {
        type_url: kind.map_or("unknown", ResourceType::type_url),
    }
}

/// A type for logs: its name, or `unknown` (P33).
fn type_name(kind: Option<ResourceType>) -> String {
    kind.map_or_else(|| "unknown".to_string(), |k| k.to_string())
}

/// A stream counted in `switchyard_streams`; uncounted when dropped.
#[derive(Debug)]
pub struct OpenStream {
    /// The stream's series of `switchyard_streams` (8 bytes of every stream's task, where
    /// the metrics and labels to find it by were 40).
    gauge: prometheus_client::metrics::gauge::Gauge,
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// One stream's events: what it needs to time pushes and ACKs.
#[derive(Debug)]
pub struct StreamEvents {
    telemetry: Telemetry,
    protocol: &'static str,
    /// The node id, once known.
    node: String,
    /// When each type's latest response was written (for the ACK latency).
    sent_at: [Stamp; ResourceType::ALL.len()],
    /// When the newest generation was published, until its first response is written (the
    /// push latency).
    push_from: Option<Instant>,
}

/// An instant, as nanoseconds since the process first took one, or none (0): 8 bytes where
/// an `Option<Instant>` is 16, and every stream keeps one per type (docs/benchmarks.md,
/// "The stream's channel and its task's future").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Stamp(u64);

/// What every [`Stamp`] counts from.
static STAMP_EPOCH: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);

impl Stamp {
    fn now() -> Stamp {
        let since = STAMP_EPOCH.elapsed().as_nanos();
        Stamp(u64::try_from(since).unwrap_or(u64::MAX).max(1))
    }

    /// The time since the stamp, and none left; `None` if there was none.
    fn take_elapsed(&mut self) -> Option<Duration> {
        let Stamp(at) = std::mem::take(self);
        (at != 0).then(|| {
            STAMP_EPOCH
                .elapsed()
                .saturating_sub(Duration::from_nanos(at))
        })
    }
}

impl StreamEvents {
    /// The stream named its node.
    pub fn named(&mut self, node: &str) {
        self.node = node.to_string();
    }

    /// The node's id, once the stream named it (empty before).
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The stream took in a generation published at `published`.
    pub fn generation_arrived(&mut self, published: Instant) {
        self.push_from = Some(published);
    }

    /// What the state machine reported: ACKs, NACKs, subscriptions, plan steps.
    pub fn protocol(&mut self, event: &Event) {
        let (m, node) = (&self.telemetry.metrics, self.node.as_str());
        match event {
            Event::Split { kind, sent, left } => {
                tracing::debug!(node, r#type = %kind, sent, left, "A response over --max-response-bytes is split: the rest follows the client's answer.");
                m.responses_split.get_or_create(&type_labels(*kind)).inc();
            }
            Event::Oversized { kind, bytes, limit } => {
                tracing::warn!(node, r#type = %kind, bytes, limit, "A response over --max-response-bytes went whole (a SotW response of the whole set cannot be split, nor one resource): a client with a receive limit refuses it.");
                m.responses_oversized
                    .get_or_create(&type_labels(*kind))
                    .inc();
            }
            Event::Acked { kind, version } => {
                tracing::debug!(node, r#type = %kind, version, "ACK.");
                m.acks.get_or_create(&type_labels(*kind)).inc();
                if let Some(elapsed) = self.sent_at[kind.index()].take_elapsed() {
                    observe(&m.ack_latency, elapsed);
                }
            }
            Event::Nacked {
                kind,
                rejected_version,
                error,
                changed,
            } => {
                let changed = crate::fleet::RejectedChange::list(changed)
                    .iter()
                    .map(|c| c.text())
                    .collect::<Vec<_>>()
                    .join(", ");
                tracing::warn!(node, r#type = %kind, rejected_version, error, changed, "NACK: the proxy rejected the configuration and keeps its previous one.");
                m.nacks.get_or_create(&type_labels(*kind)).inc();
                self.sent_at[kind.index()] = Stamp::default();
            }
            Event::Subscribed {
                kind,
                wildcard,
                subscribed,
                unsubscribed,
            } => {
                tracing::debug!(node, r#type = %kind, wildcard, subscribed = ?subscribed, unsubscribed = ?unsubscribed, "Subscription changed.");
            }
            Event::UnknownType { type_url } => {
                tracing::warn!(node, type_url, "The proxy asks for a type this server does not serve: answered as resources that do not exist; its other types go on.");
                m.unknown_types.inc();
            }
            Event::Stale { kind, nonce } => {
                tracing::debug!(node, r#type = %kind, nonce, "Ignored a request with a stale nonce.");
            }
            Event::Plan(plan) => {
                let counted = match plan {
                    PlanEvent::Started { steps } => {
                        tracing::debug!(
                            node,
                            steps,
                            "Update plan started: the new snapshot goes out make-before-break."
                        );
                        "started"
                    }
                    PlanEvent::Advanced { step, steps } => {
                        tracing::debug!(
                            node,
                            step,
                            steps,
                            "Update plan: the client ACKed the previous step; sending the next."
                        );
                        return;
                    }
                    PlanEvent::Completed { steps, took } => {
                        tracing::debug!(node, steps, took = ?took, "Update plan completed.");
                        "completed"
                    }
                    PlanEvent::TimedOut { step, waited } => {
                        tracing::warn!(node, step, waited = ?waited, "Update plan: the client did not ACK this step in time; sending the next step anyway.");
                        "timed_out"
                    }
                    PlanEvent::Stopped { step, kind } => {
                        tracing::warn!(node, step, r#type = %kind, "Update plan: the proxy NACKed; what depends on the rejected resources is held back, the rest goes on.");
                        "stopped"
                    }
                    PlanEvent::Replaced { step } => {
                        tracing::debug!(node, step, "Update plan replaced by a newer snapshot.");
                        "replaced"
                    }
                    PlanEvent::Reconnected {
                        kind,
                        ordered: true,
                    } => {
                        tracing::info!(node, r#type = %kind, "A proxy back on a new stream holds an earlier generation's content: brought to the newest make-before-break from it.");
                        "reconnect_ordered"
                    }
                    PlanEvent::Reconnected {
                        kind,
                        ordered: false,
                    } => {
                        tracing::warn!(node, r#type = %kind, "A proxy back on a new stream holds content this server does not keep (not in the generations it keeps, --keep-generations: a plan step of another replica, or older edits): it gets the newest at once, unordered.");
                        "reconnect_unordered"
                    }
                };
                m.plans.get_or_create(&PlanLabels { event: counted }).inc();
            }
        }
    }

    /// A response was written: `bytes` encoded,
    /// `resources` resources (delta: and removals) and `not_found` resource errors (P32), of
    /// `kind` (`None`: a type this server does not serve, P33).
    pub fn sent(&mut self, kind: Option<ResourceType>, version: &str, sent: Sent) {
        let Sent {
            resources,
            not_found,
            bytes,
        } = sent;
        tracing::debug!(node = %self.node, r#type = type_name(kind), version, resources, not_found, bytes, protocol = self.protocol, "Sending response.");
        self.telemetry.count_sent(kind, resources, bytes);
        if not_found > 0 {
            self.telemetry
                .metrics
                .resources_not_found
                .get_or_create(&any_type_labels(kind))
                .inc_by(not_found as u64);
        }
        let Some(kind) = kind else {
            return;
        };
        self.sent_at[kind.index()] = Stamp::now();
        if let Some(published) = self.push_from.take() {
            observe(&self.telemetry.metrics.push_latency, published.elapsed());
        }
    }

    /// A response too large to send: the stream ends.
    pub fn too_large(
        &self,
        kind: Option<ResourceType>,
        version: &str,
        resources: usize,
        error: &str,
    ) {
        tracing::error!(node = %self.node, r#type = type_name(kind), version, resources, protocol = self.protocol, error, "A response is too large to send; ending the stream.");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exposition(t: &Telemetry) -> String {
        crate::metrics::encode(t.metrics(), Default::default())
    }

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// Every limit's label is one the metric lists from the start at 0 (so that `rate()` sees
    /// the first rejection).
    #[test]
    fn every_limit_label_is_listed_from_the_start() {
        let peer: std::net::SocketAddr = ([127, 0, 0, 1], 1).into();
        let limits = [
            Limit::Connections {
                limit: "connections",
                port: "xds",
                peer,
                max: 1,
            },
            Limit::Connections {
                limit: "admin_connections",
                port: "admin",
                peer,
                max: 1,
            },
            Limit::HandshakeTimeout {
                port: "xds",
                peer,
                timeout: Duration::from_secs(1),
            },
            Limit::NamesPerStream {
                peer: "p",
                error: "e",
            },
            Limit::FirstRequestTimeout {
                peer: "p",
                waited: Duration::from_secs(1),
            },
            Limit::StalledStream {
                peer: "p",
                node: "n",
                waited: Duration::from_secs(1),
            },
            Limit::AdminHeaderTimeout { peer: None },
            Limit::NewStreams {
                peer: "p",
                log: None,
            },
        ];
        let labels: std::collections::BTreeSet<&str> = limits.iter().map(|l| l.label()).collect();
        let listed: std::collections::BTreeSet<&str> =
            crate::metrics::LIMIT_LABELS.into_iter().collect();
        assert_eq!(labels, listed);
        let text = crate::metrics::encode(&Metrics::default(), Default::default());
        for limit in crate::metrics::LIMIT_LABELS {
            assert!(
                text.contains(&format!(
                    "switchyard_limit_rejections_total{{limit=\"{limit}\"}} 0"
                )),
                "{limit}: {text}"
            );
        }
    }

    #[test]
    fn a_stream_is_counted_while_open_and_its_acks_and_nacks_by_type() {
        let t = Telemetry::default();
        let node = Node {
            id: "n1".into(),
            ..Default::default()
        };
        let open = t.stream_opened(&node, "127.0.0.1:1", Variant::Aggregated, "sotw");
        let gauge = r#"switchyard_streams{protocol="sotw",stream="ads"}"#;
        assert_eq!(value(&exposition(&t), gauge), Some(1.0));
        // Each open stream holds the same series, and counts itself out of it alone.
        let other = t.stream_opened(&node, "127.0.0.1:2", Variant::Aggregated, "sotw");
        assert_eq!(value(&exposition(&t), gauge), Some(2.0));
        drop(other);
        assert_eq!(value(&exposition(&t), gauge), Some(1.0));
        let mut events = t.stream("sotw");
        events.named("n1");
        let sent = |resources, not_found| Sent {
            resources,
            not_found,
            bytes: 100,
        };
        events.sent(Some(ResourceType::Cluster), "v1", sent(3, 2));
        // P33: a type this server does not serve is counted under `unknown`, never under
        // the client's text.
        events.protocol(&Event::UnknownType {
            type_url: "type.googleapis.com/foo.Bar".into(),
        });
        events.sent(None, "none", sent(0, 1));
        events.protocol(&Event::Acked {
            kind: ResourceType::Cluster,
            version: "v1".into(),
        });
        events.protocol(&Event::Nacked {
            kind: ResourceType::Cluster,
            rejected_version: "v2".into(),
            error: "bad".into(),
            changed: Arc::from([]),
        });
        let text = exposition(&t);
        let cds = r#"{type_url="type.googleapis.com/envoy.config.cluster.v3.Cluster"}"#;
        assert_eq!(
            value(&text, &format!("switchyard_acks_total{cds}")),
            Some(1.0)
        );
        assert_eq!(
            value(&text, &format!("switchyard_nacks_total{cds}")),
            Some(1.0)
        );
        assert_eq!(
            value(&text, &format!("switchyard_resources_sent_total{cds}")),
            Some(3.0)
        );
        assert_eq!(
            value(&text, "switchyard_ack_latency_seconds_count"),
            Some(1.0)
        );
        // P32.
        assert_eq!(
            value(&text, &format!("switchyard_resources_not_found_total{cds}")),
            Some(2.0)
        );
        assert_eq!(
            value(
                &text,
                r#"switchyard_resources_not_found_total{type_url="unknown"}"#
            ),
            Some(1.0)
        );
        assert_eq!(value(&text, "switchyard_unknown_types_total"), Some(1.0));
        assert!(!text.contains("foo.Bar"), "{text}");
        t.stream_closed(
            Some(open),
            "n1",
            "127.0.0.1:1",
            Variant::Aggregated,
            "sotw",
            "done",
        );
        assert_eq!(value(&exposition(&t), gauge), Some(0.0));
    }

    #[test]
    fn a_stamp_gives_the_time_since_it_once_and_an_empty_one_none() {
        let mut empty = Stamp::default();
        assert_eq!(empty.take_elapsed(), None);
        let before = Instant::now();
        let mut stamp = Stamp::now();
        assert_ne!(
            stamp,
            Stamp::default(),
            "a stamp taken is never the empty one"
        );
        std::thread::sleep(Duration::from_millis(2));
        let elapsed = stamp.take_elapsed().expect("stamped");
        assert!(elapsed >= Duration::from_millis(2), "{elapsed:?}");
        assert!(elapsed <= before.elapsed(), "{elapsed:?}");
        assert_eq!(stamp.take_elapsed(), None, "taken once");
    }

    #[test]
    fn loads_are_counted_by_result_and_the_last_one_is_kept() {
        let t = Telemetry::default();
        let text = exposition(&t);
        assert_eq!(
            value(&text, r#"switchyard_config_loads_total{result="ok"}"#),
            Some(0.0)
        );
        assert_eq!(
            value(&text, "switchyard_config_last_load_timestamp_seconds"),
            Some(0.0)
        );
        let loaded = Loaded {
            generation: 1,
            changed: true,
            files: 1,
            parsed: 1,
            resources: 2,
            version: "v",
        };
        t.config_loaded(loaded, &[] as &[String]);
        assert_eq!(
            value(&exposition(&t), "switchyard_config_last_load_ok"),
            Some(1.0)
        );
        t.config_failed(1, 1, &"broken");
        let text = exposition(&t);
        assert_eq!(
            value(&text, r#"switchyard_config_loads_total{result="ok"}"#),
            Some(1.0)
        );
        assert_eq!(
            value(&text, r#"switchyard_config_loads_total{result="failed"}"#),
            Some(1.0)
        );
        assert_eq!(value(&text, "switchyard_config_last_load_ok"), Some(0.0));
        assert!(value(&text, "switchyard_config_last_load_timestamp_seconds") > Some(1.7e9));
    }

    /// A storm of streams gets the period's first lines at INFO and the rest counted; the
    /// next period starts counting anew.
    #[test]
    fn streams_past_the_periods_first_lines_are_counted_not_logged_each() {
        let mut lines = StreamLines::default();
        let start = Instant::now();
        let given: Vec<bool> = (0..STREAM_LINES + 5)
            .map(|_| lines.take_line(start))
            .collect();
        assert!(given[..STREAM_LINES as usize].iter().all(|g| *g));
        assert!(given[STREAM_LINES as usize..].iter().all(|g| !*g));
        lines.opened = 5;
        // Still the same period a moment before its end.
        assert!(!lines.take_line(start + STREAM_LOG_PERIOD - Duration::from_millis(1)));
        // The next period: its count logged (and gone), lines given again.
        assert!(lines.take_line(start + STREAM_LOG_PERIOD));
        assert_eq!((lines.opened, lines.closed, lines.lines), (0, 0, 1));
    }
}
