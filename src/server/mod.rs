//! The gRPC server: tonic services that adapt streams to the `protocol` state machine.
//!
//! Owns: binding the services (ADS, every per-type service, CSDS, and REST-JSON polling) on a
//! listener (over TLS, with node identities, in `tls` and `incoming`; each connection served
//! in `connection`, with keepalive and its maximum age), message size and per-client limits
//! ([`Limits`]), one task per stream that feeds requests, cache
//! generations, sibling streams' references (`peers`) and timers into a
//! [`crate::protocol::SotwStream`] or [`crate::protocol::DeltaStream`] and writes out what it
//! returns (with or without secrets; each response framed into a buffer of its size, in
//! `body`), the staged rollout's driver (`rollout`: the fleet's reports to
//! `crate::rollout`'s decisions, applied to the cache), graceful shutdown.
//!
//! Must not: decide what to send (that is `protocol`) or read files (`config`).

pub mod admission;
mod body;
mod connection;
mod csds;

pub use connection::{ConnectionAge, AGE_JITTER};
pub use csds::CsdsFrom;
mod fetch;
mod grpc;
pub(crate) mod incoming;
mod peers;
pub mod rest;
mod status;
mod stream;
pub mod tls;
mod wire;

pub use wire::{DeltaWire, Listing, SotwWire, WireDeltaResponse, WireResponse};

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_server::ClientStatusDiscoveryServiceServer;

use crate::cache::Cache;
use crate::fleet::Fleet;
use crate::protocol::Ordering;
use crate::resource::Secrets;
use crate::shutdown::Shutdown;
use crate::telemetry::Telemetry;

/// Largest request accepted (a delta reconnect can list every resource it has).
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;
/// Largest response sent (a full CDS of a large mesh).
pub const MAX_RESPONSE_BYTES: usize = 128 * 1024 * 1024;
/// HTTP/2 PING interval, to find dead peers behind idle connections.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long a PING may go unanswered before the connection is closed.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for connections to close.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Identifies this server in every response's `control_plane`.
pub const CONTROL_PLANE_ID: &str = concat!("switchyard/", env!("CARGO_PKG_VERSION"));

/// The server failed to run (not a client's fault: those end only their stream).
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("gRPC transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The port accepts no more connections: its accept loop ended (a bug).
    #[error("the {port} port accepts no more connections: {why}")]
    NotAccepting { port: &'static str, why: String },
}

/// What one client may take of the server; past each, that client is turned away with a
/// clear status, a log line and a count, and no other client notices.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Open connections on the xDS port; past it a new connection is closed at once.
    pub max_connections: usize,
    /// Concurrent streams on one HTTP/2 connection (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub max_streams_per_connection: u32,
    /// From a stream's opening to its first request; past it the stream ends with
    /// DEADLINE_EXCEEDED.
    pub first_request_timeout: Duration,
    /// Resource names one stream may subscribe to (delta: and list on reconnecting); past
    /// it the stream ends with RESOURCE_EXHAUSTED.
    pub max_names_per_stream: usize,
    /// How long a new connection may take to complete its TLS handshake or, without TLS,
    /// to send its first byte; past it the connection is closed.
    pub handshake_timeout: Duration,
    /// How long a connection lives (`--max-connection-age`), and its grace period.
    pub connection_age: ConnectionAge,
    /// New streams admitted per second, and in a burst (`--max-new-streams-per-second`,
    /// `--new-streams-burst`); past it a stream ends at once with RESOURCE_EXHAUSTED.
    /// `None`: no limit.
    pub new_streams: Option<admission::StreamRate>,
    /// The largest response sent whole (`--max-response-bytes`): larger delta responses,
    /// and SotW responses to a subscription by name (not LDS or CDS), are split.
    pub max_response_bytes: usize,
    /// How long a stream's client may read none of its responses (their queue full, the
    /// HTTP/2 window shut) before its connection is closed (`--stalled-stream-timeout`).
    pub stalled_stream_timeout: Duration,
}

/// The default `--stalled-stream-timeout`: minutes, so that a proxy busy applying a large
/// configuration is never cut off, while one that is stuck frees what it holds.
pub const DEFAULT_STALLED_STREAM_TIMEOUT: Duration = Duration::from_secs(300);

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 10_000,
            max_streams_per_connection: 100,
            first_request_timeout: Duration::from_secs(30),
            max_names_per_stream: crate::protocol::stream::DEFAULT_MAX_NAMES,
            handshake_timeout: incoming::HANDSHAKE_TIMEOUT,
            connection_age: ConnectionAge::default(),
            new_streams: Some(admission::DEFAULT_RATE),
            max_response_bytes: crate::protocol::DEFAULT_MAX_RESPONSE_BYTES,
            stalled_stream_timeout: DEFAULT_STALLED_STREAM_TIMEOUT,
        }
    }
}

/// How the server behaves, beyond its listener and data.
#[derive(Clone, Default)]
pub struct ServeOptions {
    /// Make-before-break on aggregated streams.
    pub ordering: Ordering,
    /// Private key material to proxies (xDS and REST): only with `--insecure-serve-secrets`,
    /// since no client proves who it is.
    pub secrets: Secrets,
    /// Sensitive fields on CSDS: only with `--admin-show-secrets`.
    pub show_secrets: Secrets,
    pub limits: Limits,
    /// Who may ask CSDS.
    pub csds_from: CsdsFrom,
    /// TLS on the xDS port (`--tls-cert`, `--tls-key`, `--client-ca`), if any.
    pub tls: Option<tls::Tls>,
    /// `--node-identity`: how a client certificate must match the node it claims (mutual
    /// TLS); a bound client gets private key material.
    pub identity: Option<Arc<tls::IdentityPolicy>>,
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("ordering", &self.ordering)
            .field("secrets", &self.secrets)
            .field("show_secrets", &self.show_secrets)
            .field("limits", &self.limits)
            .field("csds_from", &self.csds_from)
            .field("tls", &self.tls.is_some())
            .field("identity", &self.identity)
            .finish()
    }
}

/// Serve xDS on `listener` from `cache`, reporting every stream in `fleet` and every event
/// to `telemetry`, as `options` say, until `shutdown`; then (every stream and connection
/// holds the same signal) end every stream, GOAWAY every connection, and wait (up to
/// [`DRAIN_TIMEOUT`]) for connections to close.
pub async fn serve(
    listener: TcpListener,
    cache: Arc<Cache>,
    fleet: Arc<Fleet>,
    telemetry: Telemetry,
    options: ServeOptions,
    mut shutdown: Shutdown,
) -> Result<(), ServerError> {
    let csds = ClientStatusDiscoveryServiceServer::new(csds::Csds {
        fleet: Arc::clone(&fleet),
        cache: Arc::clone(&cache),
        show_secrets: options.show_secrets,
        from: options.csds_from,
        max_answer: csds::MAX_ANSWER_BYTES,
    });
    let rest = rest::router(rest::Rest {
        cache: Arc::clone(&cache),
        fleet: Arc::clone(&fleet),
        telemetry: telemetry.clone(),
        stop: shutdown.clone(),
        secrets: options.secrets,
        identity: options.identity.clone(),
    });
    let connections = incoming::incoming(
        listener,
        incoming::Accept {
            port: "xDS",
            max: options.limits.max_connections,
            limit: "connections",
            tls: options.tls.clone(),
            handshake_timeout: options.limits.handshake_timeout,
        },
        telemetry.clone(),
    );
    let xds = grpc::XdsServer::new(cache, fleet, telemetry.clone(), &options, shutdown.clone());
    // REST-JSON polling comes over HTTP/1.1 too; everything else is gRPC over HTTP/2.
    let routes = tonic::service::Routes::from(grpc::route(rest, &xds))
        .add_service(csds)
        .prepare();
    let settings = connection::Settings {
        max_streams: options.limits.max_streams_per_connection,
        age: options.limits.connection_age,
    };

    let mut connections = connections;
    let mut open = tokio::task::JoinSet::new();
    let ended = loop {
        tokio::select! {
            _ = shutdown.wait() => break None,
            joined = open.join_next(), if !open.is_empty() => crate::supervise::joined("an xDS connection", joined),
            conn = tokio_stream::StreamExt::next(&mut connections) => match conn {
                Some(Ok(conn)) => {
                    open.spawn(connection::serve(
                        conn,
                        routes.clone(),
                        settings,
                        shutdown.clone(),
                        telemetry.clone(),
                    ));
                }
                Some(Err(e)) => tracing::warn!(error = %e, "Cannot accept an xDS connection."),
                None => break Some(connections.ended().await),
            },
        }
    };
    // Stop accepting; every stream ends and every connection sends GOAWAY (they hold the
    // same signal); requests in progress get the drain time.
    drop(connections);
    tracing::info!("Shutting down: ending every xDS stream.");
    let drained = async { while open.join_next().await.is_some() {} };
    if tokio::time::timeout(DRAIN_TIMEOUT, drained).await.is_err() {
        tracing::warn!("Connections did not close within {DRAIN_TIMEOUT:?}; closing them.");
    }
    match ended {
        None => Ok(()),
        Some(why) => Err(ServerError::NotAccepting { port: "xDS", why }),
    }
}
