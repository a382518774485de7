//! The admin HTTP server (`--admin-addr`, default 127.0.0.1:19000): what operators and
//! orchestrators ask of a running Switchyard.
//!
//! Owns: the routes `/` (an HTML page for a person, see `page`), `/healthz` (alive),
//! `/readyz` (a good snapshot is loaded; the admin server is started only once the xDS
//! listener is bound), `/status` (every connected node's sync state per type, and the last
//! config load), `/config_dump` (the snapshot a node gets, as proto3 JSON) and `/metrics`
//! (Prometheus, see `metrics`), their JSON shapes, the bearer token, and serving them over
//! HTTP/1.1 (HTTPS with `--admin-tls-cert`; connections accepted as on the xDS port, see
//! `server::incoming`) with a bound on how long a request's headers take, until shutdown.
//! Must not: change the cache or any stream; it only reads the [`Fleet`], the [`Cache`] and
//! the [`Reloader`].

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_stream::StreamExt;

pub(crate) mod page;

use crate::cache::Cache;
use crate::fleet::{format_time, Fleet, StreamReport, SyncStatus, TypeReport};
use crate::metrics::Scraped;
use crate::publish::Reloader;
use crate::resource::{ResourceType, Secrets};
use crate::server::incoming::{incoming, Accept, Conn, HANDSHAKE_TIMEOUT};
use crate::server::tls::Tls;
use crate::server::DRAIN_TIMEOUT;
use crate::telemetry::{Limit, RolloutEnd, Telemetry};

/// What the admin routes read.
#[derive(Clone, Debug)]
pub struct Admin {
    pub fleet: Arc<Fleet>,
    pub cache: Arc<Cache>,
    pub reloader: Arc<Reloader>,
    /// Where the admin server's events go, and the metrics `/metrics` shows.
    pub telemetry: Telemetry,
    /// `/config_dump` shows sensitive fields only with `--admin-show-secrets`.
    pub show_secrets: Secrets,
    /// With `--admin-token-file`: the bearer token `/`, `/status` and `/config_dump` need.
    pub token: Option<Arc<str>>,
    /// `--max-new-streams-per-second` and `--new-streams-burst`, shown in `/status`.
    pub new_streams: Option<crate::server::admission::StreamRate>,
    /// `--source` with a rollout policy: the fleet's rollout, which `rollout promote` and
    /// `rollout abort` end for every replica.
    pub fleet_rollout: Option<crate::rollout::fleetwide::driver::FleetRollout>,
}

/// How long a request's headers may take to arrive, by default (`--admin-header-timeout`).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Open connections on the admin port; past it a new one is closed at once, logged and
/// counted (`switchyard_limit_rejections_total{limit="admin_connections"}`).
pub const MAX_CONNECTIONS: usize = 1024;

/// How the admin port is served.
#[derive(Clone, Debug)]
pub struct Transport {
    /// `--admin-tls-cert` and `--admin-tls-key`: HTTPS, the files reloaded when they change.
    pub tls: Option<Tls>,
    /// `--admin-header-timeout`: how long a request's headers may take to arrive (from the
    /// connection's start, or from the previous response) before the connection is closed.
    pub header_timeout: Duration,
}

impl Default for Transport {
    fn default() -> Self {
        Transport {
            tls: None,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
        }
    }
}

/// `GET /status`.
/// The schema `/status` (and `switchyard status --output json`) follows (docs/output.md).
pub const STATUS_SCHEMA: &str = "switchyard.status/v1";

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Status {
    /// `switchyard.status/v1` (docs/output.md): fields are only added within a version.
    #[serde(default)]
    pub schema: String,
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
}

/// How many generations `/status` lists.
pub const HISTORY_SHOWN: usize = 10;

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
    pub state: Option<String>,
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
            state: candidate.map(|c| {
                match c.phase {
                    FleetPhase::Canary => "CANARY",
                    FleetPhase::Baking { .. } => "BAKING",
                    FleetPhase::Halted { .. } => "HALTED",
                }
                .to_string()
            }),
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
        phase: &crate::rollout::Phase,
        stable: u64,
        candidate: u64,
        policy: &crate::rollout::Policy,
        since: std::time::SystemTime,
    ) -> Self {
        RolloutStatus {
            state: phase.name().into(),
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

impl StreamStatus {
    /// `ADS/delta`, with the plan in progress if any: `ADS/delta (updating 1/3)`,
    /// `ADS/sotw (updating 2/3, 2 held back by a CDS NACK)`.
    pub fn label(&self) -> String {
        let base = format!("{}/{}", self.stream, self.protocol);
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
    /// `--source`: whether etcd answers, since when, and why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceStatus>,
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
            version_sent: t.version_sent.clone(),
            version_acked: t.version_acked.clone(),
            nonce: t.nonce.clone(),
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
                unknown_types: r.unknown_types.as_slice().to_vec(),
            });
            // Over per-type services Envoy opens a stream per subscription (one per route
            // configuration, per secret, ...): a type's state is the most pressing of its
            // streams' (a NACK on any shows), and its names not found are all of theirs.
            for (kind, t) in &r.types {
                let this: TypeStatusJson = t.as_ref().into();
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
            nodes: nodes.into_values().collect(),
            config,
            rollout: None,
            generation: 0,
            server: ServerInfo::current(),
            certificates: Vec::new(),
            new_streams: None,
            fleet: None,
            history: Vec::new(),
        }
    }

    /// Whether any node rejected any type's latest response.
    pub fn any_nacked(&self) -> bool {
        self.nodes
            .iter()
            .any(|n| n.types.values().any(|t| t.state == SyncStatus::Nacked))
    }
}

/// The admin routes. With a token, what shows nodes and their configuration (`/`,
/// `/status`, `/config_dump`) needs `Authorization: Bearer <token>`; the probes and
/// `/metrics` (no node ids, no contents) stay open, for kubelets and scrapers.
pub fn router(admin: Admin) -> Router {
    let guarded = Router::new()
        .route("/", get(index))
        .route("/status", get(status))
        .route("/config_dump", get(config_dump))
        .route("/rollout/promote", axum::routing::post(rollout_promote))
        .route("/rollout/abort", axum::routing::post(rollout_abort))
        .route_layer(axum::middleware::from_fn_with_state(
            admin.clone(),
            require_token,
        ));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .merge(guarded)
        .with_state(admin)
}

/// Let the request through if no token is set, or if it carries the token.
async fn require_token(
    State(admin): State<Admin>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(token) = &admin.token else {
        return next.run(request).await;
    };
    let given = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if same_secret(given.as_bytes(), token.as_bytes()) {
        next.run(request).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
            "this endpoint needs `Authorization: Bearer <token>` (the server's --admin-token-file)\n",
        )
            .into_response()
    }
}

/// Equal, compared in time that does not depend on where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Serve `router(admin)` on `listener` as `transport` says until `shutdown` completes, then
/// let the requests in progress finish and close every connection, within the xDS server's
/// drain time ([`DRAIN_TIMEOUT`]); past it the rest are closed.
pub async fn serve(
    listener: TcpListener,
    admin: Admin,
    transport: Transport,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let telemetry = admin.telemetry.clone();
    let app = router(admin);
    let accept = Accept {
        port: "admin",
        max: MAX_CONNECTIONS,
        limit: "admin_connections",
        tls: transport.tls,
        // A connection that sends nothing is closed like one whose headers are slow.
        handshake_timeout: transport.header_timeout.min(HANDSHAKE_TIMEOUT),
    };
    let mut connections = incoming(listener, accept, telemetry.clone());
    let (closing, closed) = watch::channel(());
    let mut open = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(_) = open.join_next(), if !open.is_empty() => {}
            conn = connections.next() => match conn {
                Some(Ok(conn)) => {
                    let served = connection(conn, app.clone(), transport.header_timeout, closed.clone());
                    let telemetry = telemetry.clone();
                    open.spawn(async move {
                        let (peer, ended) = served.await;
                        match ended {
                            Err(e) if e.is_timeout() => {
                                telemetry.limit_reached(Limit::AdminHeaderTimeout { peer });
                            }
                            Err(e) => tracing::debug!(?peer, error = %e, "An admin connection ended with an error."),
                            Ok(()) => {}
                        }
                    });
                }
                Some(Err(e)) => tracing::warn!(error = %e, "Cannot accept an admin connection."),
                None => break,
            },
        }
    }
    drop(connections);
    let _ = closing.send(());
    let drained = async { while open.join_next().await.is_some() {} };
    if tokio::time::timeout(DRAIN_TIMEOUT, drained).await.is_err() {
        tracing::warn!("Admin connections did not close within {DRAIN_TIMEOUT:?}; closing them.");
    }
}

/// Serve HTTP/1.1 on one connection until the client leaves, its headers take too long, or
/// the server stops (the request in progress, if any, is answered first); the peer, and how
/// the connection ended.
async fn connection(
    conn: Conn,
    app: Router,
    header_timeout: Duration,
    mut closing: watch::Receiver<()>,
) -> (Option<SocketAddr>, Result<(), hyper::Error>) {
    let peer = conn.peer();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let served = http.serve_connection(TokioIo::new(conn), TowerToHyperService::new(app));
    tokio::pin!(served);
    let ended = tokio::select! {
        ended = served.as_mut() => ended,
        _ = closing.changed() => {
            served.as_mut().graceful_shutdown();
            served.await
        }
    };
    (peer, ended)
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(admin): State<Admin>) -> Response {
    if admin.cache.current().number > 0 {
        // Still ready while etcd is away (the last good generation serves), but saying so.
        match admin.reloader.source().filter(|s| !s.answering) {
            Some(source) => (
                StatusCode::OK,
                format!(
                    "ready (the last good generation serves: {} does not answer since {})\n",
                    source.url,
                    format_time(source.since)
                ),
            )
                .into_response(),
            None => (StatusCode::OK, "ready\n").into_response(),
        }
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: no configuration loaded yet\n",
        )
            .into_response()
    }
}

/// What `/metrics` reads from the fleet and the cache when scraped.
fn scraped(admin: &Admin) -> Scraped {
    let serving = admin.cache.serving();
    let generation = admin.cache.current();
    let mut snapshots = Vec::new();
    for (files, snapshot) in generation.groups() {
        let group = files
            .iter()
            .filter_map(|&i| generation.config.files.get(i))
            .map(|f| {
                f.path.file_name().map_or_else(
                    || f.path.display().to_string(),
                    |n| n.to_string_lossy().into(),
                )
            })
            .collect::<Vec<_>>()
            .join("+");
        for kind in ResourceType::ALL {
            snapshots.push((
                group.clone(),
                kind.type_url(),
                snapshot.get(kind).version.clone(),
            ));
        }
    }
    Scraped {
        nodes_nacking: admin.fleet.nodes_nacking(),
        pollers: admin.fleet.pollers_by_api().into_iter().collect(),
        stable_generation: serving.stable.number,
        candidate_generation: serving.rollout.as_ref().map_or(0, |r| r.candidate.number),
        rollout_state: admin
            .cache
            .policy()
            .map(|_| serving.rollout.as_ref().map_or("NONE", |r| r.phase.name())),
        snapshots,
        certificates: generation
            .config
            .certificates()
            .map(|c| (c.secret.clone(), c.file.display().to_string(), c.not_after))
            .collect(),
    }
}

async fn metrics(State(admin): State<Admin>) -> Response {
    let text = crate::metrics::encode(admin.telemetry.metrics(), scraped(&admin));
    (
        [(
            axum::http::header::CONTENT_TYPE,
            crate::metrics::CONTENT_TYPE,
        )],
        text,
    )
        .into_response()
}

/// `GET /config_dump?node=ID` or `?cluster=NAME` (or both).
#[derive(Debug, Deserialize)]
struct DumpQuery {
    node: Option<String>,
    cluster: Option<String>,
}

/// The snapshot a node gets, every type, each resource as proto3 JSON.
async fn config_dump(
    State(admin): State<Admin>,
    axum::extract::Query(query): axum::extract::Query<DumpQuery>,
) -> Response {
    if query.node.is_none() && query.cluster.is_none() {
        return (
            StatusCode::BAD_REQUEST,
            "give ?node=<node id> or ?cluster=<node cluster> (or both)\n",
        )
            .into_response();
    }
    let node = query.node.unwrap_or_default();
    // A connected node as it is (its cluster, metadata and locality), unless the query
    // names another cluster.
    let connected = admin
        .fleet
        .reports()
        .into_iter()
        .find(|r| r.node_id == node)
        .map(|r| r.facts);
    let facts = match (connected, query.cluster) {
        (Some(facts), None) => (*facts).clone(),
        (Some(facts), Some(cluster)) if facts.cluster == cluster => (*facts).clone(),
        (_, cluster) => {
            crate::config::selector::NodeFacts::new(&node, &cluster.unwrap_or_default())
        }
    };
    let cluster = facts.cluster.clone();
    // The generation this node gets (during a rollout, the candidate only for a canary).
    let generation = admin.cache.for_node(&facts);
    let snapshot = generation.snapshot_for(&facts);
    let mut types = serde_json::Map::new();
    for kind in crate::resource::ResourceType::ALL {
        let t = snapshot.get(kind);
        if t.resources.is_empty() {
            continue;
        }
        let resources: Vec<serde_json::Value> = t
            .resources
            .values()
            .map(|r| {
                let mut entry = serde_json::json!({
                    "name": r.name,
                    "version": r.version,
                    "resource": resource_json(r, admin.show_secrets),
                });
                if let Some(ttl) = r.ttl {
                    entry["ttl"] = format!("{}s", ttl.as_secs_f64()).into();
                }
                if !r.aliases.is_empty() {
                    entry["aliases"] = r.aliases.clone().into();
                }
                entry
            })
            .collect();
        types.insert(
            kind.short_name().to_string(),
            serde_json::json!({
                "type_url": kind.type_url(),
                "version": t.version,
                "resources": resources,
            }),
        );
    }
    Json(serde_json::json!({
        "node": node,
        "cluster": cluster,
        "generation": generation.number,
        "types": types,
    }))
    .into_response()
}

fn resource_json(r: &crate::resource::Resource, secrets: Secrets) -> serde_json::Value {
    crate::config::json::resource_json(r, r.body_shown(secrets))
        .unwrap_or_else(|| serde_json::json!({ "error": "does not decode as its type" }))
}

/// `GET /`: the HTML page.
async fn index(
    State(admin): State<Admin>,
    axum::extract::Query(query): axum::extract::Query<page::PageQuery>,
) -> axum::response::Html<String> {
    axum::response::Html(page::render(&current_status(&admin), &query))
}

async fn status(State(admin): State<Admin>) -> Json<Status> {
    Json(current_status(&admin))
}

fn current_status(admin: &Admin) -> Status {
    let config = admin.reloader.last_report().map(|r| ConfigStatus {
        ok: r.ok(),
        at: format_time(r.at),
        generation: r.generation,
        errors: r.errors.clone(),
        warnings: r.warnings.clone(),
        revision: r.revision,
        source: admin.reloader.source().map(|h| SourceStatus {
            url: h.url,
            answering: h.answering,
            since: format_time(h.since),
            error: h.error,
        }),
    });
    let mut status = Status::from_reports(admin.fleet.reports(), config);
    let serving = admin.cache.serving();
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
    status.history = admin.reloader.history();
    status.history.truncate(HISTORY_SHOWN);
    status
}

/// `POST /rollout/promote`: every node gets the candidate now.
async fn rollout_promote(State(admin): State<Admin>) -> Response {
    end_rollout(&admin, true).await
}

/// `POST /rollout/abort`: the canaries go back to the stable generation.
async fn rollout_abort(State(admin): State<Admin>) -> Response {
    end_rollout(&admin, false).await
}

async fn end_rollout(admin: &Admin, promote: bool) -> Response {
    if let Some(fleet) = &admin.fleet_rollout {
        // Ended in etcd, for every replica: this one follows like the others.
        return match fleet.end(promote).await {
            Ok(message) => (StatusCode::OK, format!("{message}\n")).into_response(),
            Err(why) => (StatusCode::CONFLICT, format!("{why}\n")).into_response(),
        };
    }
    let (result, outcome) = if promote {
        (admin.cache.promote(), "promoted")
    } else {
        (admin.cache.abort(), "aborted")
    };
    match result {
        Ok(generation) => {
            admin.telemetry.rollout_ended(RolloutEnd::ByOperator {
                generation,
                promote,
            });
            (
                StatusCode::OK,
                format!("rollout {outcome}: generation {generation} serves every node\n"),
            )
                .into_response()
        }
        Err(none) => (StatusCode::CONFLICT, format!("{none}\n")).into_response(),
    }
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
                Box::new(TypeReport {
                    state,
                    version_sent: "v".into(),
                    version_acked: "v".into(),
                    nonce: "1".into(),
                    nack: (state == SyncStatus::Nacked).then(|| {
                        Box::new(NackReport {
                            error: "rds-1 is broken".into(),
                            rejected_version: "v2".into(),
                            rejected_changes: Vec::new(),
                        })
                    }),
                    oversized_bytes: None,
                    not_found: RareList::new(not_found.iter().map(|n| n.to_string()).collect()),
                    last_change: std::time::SystemTime::UNIX_EPOCH,
                }),
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
