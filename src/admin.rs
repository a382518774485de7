//! The admin HTTP server (`--admin-addr`, default 127.0.0.1:19000): what operators and
//! orchestrators ask of a running Switchyard.
//!
//! Owns: the routes `/` (an HTML page for a person, see `page`), `/healthz` (alive),
//! `/readyz` (a good snapshot is loaded; the admin server is started only once the xDS
//! listener is bound), `/status` (every connected node's sync state per type, and the last
//! config load), `/config_dump` (the snapshot a node gets, as proto3 JSON) and `/metrics`
//! (Prometheus, see `metrics`), the bearer token, and serving them over
//! HTTP/1.1 (HTTPS with `--admin-tls-cert`; connections accepted as on the xDS port, see
//! `server::incoming`) with a bound on how long a request's headers take, until shutdown.
//! What `/status` answers, and putting it together, is `status`'s; the page is `page`'s.
//! Must not: change the cache or any stream; it only reads the [`Fleet`], the [`Cache`] and
//! the loads' reports ([`Reloader`]) and the history of generations ([`Publisher`]).

use crate::shutdown::Shutdown;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_stream::StreamExt;

pub(crate) mod page;
pub mod replicas;
pub mod standing;
mod status;
pub mod summary;
pub mod view;
pub mod wait;

pub use status::status_now;
pub use status::{
    CertificateStatus, ConfigStatus, FleetStatus, Kept, LastGood, NewStreamsStatus, NodeStatus,
    PlanStatusJson, ReplicaVerdict, RolloutState, RolloutStatus, ServerInfo, Settled, SourceStatus,
    Status, StreamStatus, TypeStatusJson, STATUS_SCHEMA,
};

use crate::cache::Cache;
use crate::fleet::{format_time, Fleet};
use crate::metrics::Scraped;
use crate::publish::{Publisher, Reloader};
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
    /// The last load's report, and an edit not loaded yet.
    pub reloader: Arc<Reloader>,
    /// The history of generations.
    pub publisher: Arc<Publisher>,
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
    /// The source's barrier (`POST /source/settle`): none for an etcd prefix not followed.
    pub barrier: Option<crate::source::Barrier>,
    /// With an etcd source: every replica's summary, as this replica last read it (from
    /// files, none: the view is this replica's).
    pub replicas: Option<replicas::Replicas>,
    /// The long-running tasks: which are down now (`/readyz`, `/status`).
    pub supervisor: crate::supervise::Supervisor,
    /// `--source`: whether etcd answers, and since when.
    pub source: crate::source::Health,
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
        .route("/source/settle", axum::routing::post(source_settle))
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
/// drain time ([`DRAIN_TIMEOUT`]); past it the rest are closed. An error: the port stopped
/// accepting before shutdown (why, in words).
pub async fn serve(
    listener: TcpListener,
    admin: Admin,
    transport: Transport,
    mut shutdown: Shutdown,
) -> Result<(), String> {
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
    let mut open = JoinSet::new();
    let ended = loop {
        tokio::select! {
            _ = shutdown.wait() => break None,
            joined = open.join_next(), if !open.is_empty() => crate::supervise::joined("an admin connection", joined),
            conn = connections.next() => match conn {
                Some(Ok(conn)) => {
                    let served = connection(conn, app.clone(), transport.header_timeout, shutdown.clone());
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
                None => break Some(connections.ended().await),
            },
        }
    };
    drop(connections);
    let drained = async { while open.join_next().await.is_some() {} };
    if tokio::time::timeout(DRAIN_TIMEOUT, drained).await.is_err() {
        tracing::warn!("Admin connections did not close within {DRAIN_TIMEOUT:?}; closing them.");
    }
    match ended {
        None => Ok(()),
        Some(why) => Err(format!("the admin port accepts no more connections: {why}")),
    }
}

/// Serve HTTP/1.1 on one connection until the client leaves, its headers take too long, or
/// the server stops (the request in progress, if any, is answered first); the peer, and how
/// the connection ended.
async fn connection(
    conn: Conn,
    app: Router,
    header_timeout: Duration,
    mut shutdown: Shutdown,
) -> (Option<SocketAddr>, Result<(), hyper::Error>) {
    let peer = conn.peer();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let served = http.serve_connection(TokioIo::new(conn), TowerToHyperService::new(app));
    tokio::pin!(served);
    let ended = tokio::select! {
        ended = served.as_mut() => ended,
        _ = shutdown.wait() => {
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
    // A task that stopped (the source's follower, the fleet's rollout, ...) leaves this
    // replica serving what it has without following: not ready until it runs again.
    let down = admin.supervisor.down();
    if let Some(task) = down.first() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not ready: {} task(s) down: {} stopped ({}), started again at {}\n",
                down.len(),
                task.task,
                task.cause,
                task.restart_at
            ),
        )
            .into_response();
    }
    if admin.cache.current().number > 0 {
        // Still ready while etcd is away (the last good generation serves), but saying so.
        match admin.source.now().filter(|s| !s.answering) {
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
            .map(|f| f.label())
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
    // Judged now: a failure is an outage once it has lasted (`source::Health`).
    if let Some(source) = admin.source.now() {
        admin.telemetry.source_answering(source.answering);
    }
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

/// The snapshot a node gets, every type, each resource as proto3 JSON: built on a blocking
/// thread (every resource's JSON, for a large snapshot, is seconds of CPU work).
async fn config_dump(
    State(admin): State<Admin>,
    axum::extract::Query(query): axum::extract::Query<DumpQuery>,
) -> Response {
    match tokio::task::spawn_blocking(move || config_dump_now(&admin, query)).await {
        Ok(response) => response,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response(),
    }
}

/// [`config_dump`]'s answer, as of now.
fn config_dump_now(admin: &Admin, query: DumpQuery) -> Response {
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
    let report = admin
        .fleet
        .reports()
        .into_iter()
        .find(|r| r.node_id == node);
    // What a connected node ACKed last, per type: its resources are given as `held` when
    // that version is not the one served now: what its stream knows it still runs (under a
    // NACK), else those of one of the generations kept.
    type Acked = (String, Option<Arc<crate::protocol::Runs>>);
    let acked: std::collections::BTreeMap<&'static str, Acked> = report
        .as_ref()
        .map(|r| {
            r.types
                .iter()
                .filter(|(_, t)| !t.version_acked.is_empty())
                .map(|(kind, t)| {
                    let runs = t.nack.as_ref().and_then(|n| n.runs.clone());
                    (*kind, (t.version_acked.to_string(), runs))
                })
                .collect()
        })
        .unwrap_or_default();
    let connected = report.map(|r| r.facts);
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
    let serving = admin.cache.serving();
    let entries = |resources: &mut dyn Iterator<Item = &Arc<crate::resource::Resource>>| {
        resource_entries(resources, admin.show_secrets)
    };
    let mut types = serde_json::Map::new();
    for kind in crate::resource::ResourceType::ALL {
        let t = snapshot.get(kind);
        let acked = acked
            .get(kind.short_name())
            .filter(|(version, _)| *version != t.version);
        let held = acked.and_then(|(acked, runs)| match runs {
            // What its stream knows it still runs (under a NACK), whatever is kept, with
            // the newest generation kept that serves it exactly, if one does.
            Some(runs) => {
                let generation = serving
                    .known()
                    .filter(|g| runs.served_by(g.snapshot_for(&facts).get(kind)))
                    .map(|g| g.number)
                    .max();
                Some(serde_json::json!({
                    "version": acked,
                    "generation": generation,
                    "resources": entries(&mut runs.resources.iter()),
                }))
            }
            // The generation kept whose snapshot for this node has the version it ACKed.
            None => serving.known().find_map(|g| {
                let older = g.snapshot_for(&facts);
                let older = older.get(kind);
                (older.version == *acked).then(|| {
                    serde_json::json!({
                        "version": older.version,
                        "generation": g.number,
                        "resources": entries(&mut older.resources.values()),
                    })
                })
            }),
        });
        if t.resources.is_empty() && held.is_none() {
            continue;
        }
        let mut entry = serde_json::json!({
            "type_url": kind.type_url(),
            "version": t.version,
            "resources": entries(&mut t.resources.values()),
        });
        if let Some(held) = held {
            entry["held"] = held;
        }
        types.insert(kind.short_name().to_string(), entry);
    }
    let kept: std::collections::BTreeSet<u64> = serving.known().map(|g| g.number).collect();
    Json(serde_json::json!({
        "node": node,
        "cluster": cluster,
        "generation": generation.number,
        "kept": {
            "oldest": kept.first().copied().unwrap_or_default(),
            "generations": kept.len(),
        },
        "types": types,
    }))
    .into_response()
}

/// Resources as `/config_dump` lists them: name, version, the resource as proto3 JSON
/// (redacted as `secrets` says), its TTL and aliases.
fn resource_entries(
    resources: &mut dyn Iterator<Item = &Arc<crate::resource::Resource>>,
    secrets: Secrets,
) -> Vec<serde_json::Value> {
    resources
        .map(|r| {
            let mut entry = serde_json::json!({
                "name": r.name,
                "version": r.version,
                "resource": resource_json(r, secrets),
            });
            if let Some(ttl) = r.ttl {
                entry["ttl"] = format!("{}s", ttl.as_secs_f64()).into();
            }
            if !r.aliases.is_empty() {
                entry["aliases"] = r.aliases.clone().into();
            }
            entry
        })
        .collect()
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
    axum::response::Html(page::render(&status_now(&admin).await, &query))
}

/// `?after=TOKEN&wait=DURATION` of `GET /status`: a long poll (`wait`).
#[derive(Debug, serde::Deserialize)]
struct StatusQuery {
    after: Option<String>,
    wait: Option<String>,
}

/// `GET /status`: where every proxy stands. With `?after=TOKEN`, held until it differs
/// from the status answered with that token (`x-switchyard-status`), or for `wait` (1 s by
/// default, at most 10 s): [`wait`].
async fn status(
    State(admin): State<Admin>,
    axum::extract::Query(query): axum::extract::Query<StatusQuery>,
) -> Response {
    if let Some(after) = &query.after {
        let hold = match query.wait.as_deref().map(humantime::parse_duration) {
            None => Duration::from_secs(1),
            Some(Ok(hold)) => hold,
            Some(Err(e)) => {
                return (
                    StatusCode::BAD_REQUEST,
                    format!("wait: expected a duration such as 1s or 500ms: {e}\n"),
                )
                    .into_response()
            }
        };
        wait::until_changed(&admin, after, hold).await;
    }
    // Taken before the status: a change while it is made gives the next poll another token.
    let token = summary::status_token(&admin);
    let status = status_now(&admin).await;
    ([("x-switchyard-status", token)], Json(status)).into_response()
}

/// `POST /rollout/promote`: every node gets the candidate now.
async fn rollout_promote(State(admin): State<Admin>) -> Response {
    end_rollout(&admin, true).await
}

/// `?revision=R` of `POST /source/settle`.
#[derive(Debug, serde::Deserialize)]
struct SettleQuery {
    revision: Option<i64>,
}

/// `POST /source/settle`: the source's position that holds everything written before the
/// request (the files read again; etcd's revision now, or `?revision=R`, reached by the
/// follower), with the last load, once loaded ([`status::Settled`]). 503 while the source
/// does not answer or the follower does not reach it in time.
async fn source_settle(
    State(admin): State<Admin>,
    axum::extract::Query(query): axum::extract::Query<SettleQuery>,
) -> Response {
    let Some(barrier) = &admin.barrier else {
        return (
            StatusCode::NOT_FOUND,
            "this server does not follow its source: nothing to settle\n",
        )
            .into_response();
    };
    match barrier.settle(query.revision).await {
        Ok(position) => {
            // The last load, and whether a file changed since (a walk of the files): on a
            // blocking thread.
            let taking = admin.clone();
            let config = tokio::task::spawn_blocking(move || status::config_status(&taking))
                .await
                .ok()
                .flatten();
            axum::Json(status::Settled { position, config }).into_response()
        }
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    }
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
