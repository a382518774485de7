//! `switchyard serve`: its flags, logging, signals and listeners, turned into
//! `daemon::Options` and run until SIGINT or SIGTERM.
//!
//! Must not: serve anything itself (`daemon` wires the config, cache, servers and watcher).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;

use super::flags::{AdminToken, ConfigArgs, DEFAULT_ADMIN_ADDR};
use super::{raise_file_limit, runtime, EXIT_USAGE};
use crate::config::LoadOptions;
use crate::daemon::{Daemon, Listeners, Options, RunError};
use crate::protocol::Ordering;
use crate::resource::Secrets;
use crate::server::tls::{IdentityPolicy, Tls, TlsFiles};
use crate::server::{CsdsFrom, Limits, ServeOptions};
use crate::source::Source;

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Address for the xDS gRPC server.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:18000")]
    pub xds_addr: SocketAddr,
    /// Log filter: a level for Switchyard's own logs (error, warn, info, debug, trace; other
    /// libraries stay at warn), or a full tracing directive such as `info,h2=debug`.
    #[arg(long, value_name = "FILTER", default_value = "info")]
    pub log_level: String,
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Make-before-break ordering on aggregated streams (ADS, Incremental ADS): `on` sends a
    /// change in steps, each after the proxy ACKed the one before (clusters and endpoints,
    /// then listeners and routes, then removals); `off` sends every change at once.
    #[arg(long, value_enum, default_value_t = Switch::On)]
    pub ordering: Switch,
    /// How long a step of an ordered update waits for the proxy's ACKs before the next step
    /// goes out anyway (and the time-out is logged and counted), e.g. `5s`, `1500ms`.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_step_timeout)]
    pub ordering_timeout: Duration,
    /// Files only: how long the files must see no event before a change loads, so that an
    /// edit of several files that is not atomic (`git checkout`, files renamed one after
    /// another) loads whole. A file being written is waited for until it is closed, whatever
    /// this is; etcd has no quiet time (a transaction arrives whole). `0s` loads at the first
    /// event. From 0 to 1 s.
    #[arg(long, value_name = "DURATION", default_value = "5ms", value_parser = parse_quiet_time)]
    pub file_quiet_time: Duration,
    /// Let a reload leave connected proxies without any listener or any cluster where they
    /// have some (refused by default: the usual cause is a broken deploy of the files).
    #[arg(long)]
    pub allow_empty: bool,
    /// The largest snapshot file loaded (bytes, or with a KiB, MiB or GiB suffix); a larger
    /// one is a load error and the last good snapshot keeps serving.
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_size)]
    pub max_file_size: u64,
    /// Check every reload with this Envoy binary before publishing it (as `validate
    /// --envoy`): a node group Envoy rejects makes the reload a load error, and so does an
    /// Envoy that cannot be run. The last good snapshot keeps serving.
    #[arg(long, value_name = "PATH")]
    pub preflight_envoy: Option<PathBuf>,
    /// How long one pre-flight Envoy check may take.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    pub preflight_timeout: Duration,
    /// Send private key material (private keys, session ticket keys, generic secrets) to
    /// every client, whether or not a certificate binds it to its node: only for a sidecar
    /// on loopback. Without it, only streams bound by --node-identity get it.
    #[arg(long)]
    pub insecure_serve_secrets: bool,
    /// Who may ask CSDS on the xDS port (it lists every node and its resources).
    #[arg(long, value_enum, default_value_t = CsdsFrom::Loopback)]
    pub csds_from: CsdsFrom,
    /// How many generations to keep in memory (the newest and those before it, at least 1):
    /// a proxy that reconnects holding one of them is brought to the newest in order, and
    /// under a NACK what it still runs is found among them (`status`'s last good revision
    /// and its rollback command). Unchanged resources are shared between generations, so
    /// each costs what it changed.
    #[arg(long, value_name = "N", default_value_t = crate::cache::DEFAULT_KEPT as u64, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub keep_generations: u64,
    /// A directory where each good load is kept; when the files do not load at start, the
    /// copy kept there is served (and the error reported) instead of refusing to start.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Serve the snapshot documents under an etcd prefix instead of files:
    /// `etcd://HOST:PORT[,HOST:PORT...]/PREFIX`, every key under `PREFIX/` one document
    /// (keys starting with `.` aside). Read at one revision before serving; then followed by
    /// one watch, each change (a transaction at once) taken from its events and reloaded;
    /// while etcd does not answer, the last good generation keeps serving (docs/etcd.md).
    #[arg(long, value_name = "URL", conflicts_with_all = ["paths", "state_dir"])]
    pub source: Option<String>,
    /// How long connecting to etcd and reading the prefix may take, each, at start; and each
    /// step of settling the source for `status --wait` (connect, read the revision, the watch
    /// reaching it).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    pub source_timeout: Duration,
    /// This replica's name in the fleet's view and its canary verdicts (with --source): 1 to
    /// 253 letters, digits, `.`, `_` or `-`, one per replica of the fleet. Default: the host
    /// name (a pod's name in Kubernetes).
    #[arg(long, value_name = "NAME", value_parser = parse_replica_name)]
    pub replica_name: Option<String>,
    #[command(flatten)]
    pub etcd: super::flags::EtcdArgs,
    #[command(flatten, next_help_heading = "TLS on the xDS port")]
    pub tls: XdsTlsArgs,
    #[command(flatten, next_help_heading = "Limits")]
    pub limits: LimitArgs,
    #[command(flatten, next_help_heading = "Staged rollouts")]
    pub rollout: CanaryArgs,
    #[command(flatten, next_help_heading = "The admin API")]
    pub admin: AdminServerArgs,
}

/// TLS on the xDS port, and binding nodes to client certificates.
#[derive(Debug, Args)]
pub struct XdsTlsArgs {
    /// TLS on the xDS port: the server's certificate chain (PEM). Reloaded when it (or the
    /// key) changes, without a restart.
    #[arg(long, value_name = "PATH", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Mutual TLS: clients must present a certificate this CA (PEM) signed.
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    pub client_ca: Option<PathBuf>,
    /// Bind nodes to client certificates: a stream (or REST poll) whose certificate does not
    /// prove this name for the node it claims is refused (PERMISSION_DENIED); a bound client
    /// gets private key material. `{id}` and `{cluster}` stand for the node's id and
    /// cluster, e.g. `spiffe://example.org/ns/{cluster}/sa/{id}`.
    #[arg(long, value_name = "TEMPLATE", requires = "client_ca", value_parser = parse_identity)]
    pub node_identity: Option<IdentityPolicy>,
}

impl XdsTlsArgs {
    /// The xDS port's TLS, when `--tls-cert` is given.
    fn tls(&self) -> anyhow::Result<Option<Tls>> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let files = TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: self.client_ca.clone(),
        };
        Tls::xds(&files)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("cannot set up TLS: {e}"))
    }
}

/// What the xDS port lets in: connections, streams, names, sizes and times.
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// Open connections on the xDS port; past it a new connection is closed at once.
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// Concurrent streams on one connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS).
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_streams_per_connection: u32,
    /// How long a new stream may go without its first request before it is ended.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_first_request_timeout)]
    pub first_request_timeout: Duration,
    /// Resource names one stream may subscribe to, every type together.
    #[arg(long, value_name = "N", default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_names_per_stream: u32,
    /// New xDS streams let in per second (a token bucket), so that a reconnect storm
    /// (every proxy back at once after a restart) comes in at a steady rate: past it a new
    /// stream ends at once with RESOURCE_EXHAUSTED and the proxy retries with backoff (here
    /// or on another replica). `off`: no limit.
    #[arg(long, value_name = "N|off", default_value = "5000", value_parser = parse_stream_rate)]
    pub max_new_streams_per_second: StreamRateFlag,
    /// How many new streams are let in at once after a quiet time (the bucket's size).
    #[arg(long, value_name = "N", default_value_t = 5000, value_parser = clap::value_parser!(u32).range(1..))]
    pub new_streams_burst: u32,
    /// The largest response sent whole (bytes, or with a KiB or MiB suffix): larger delta
    /// responses, and SotW responses to a subscription by name (EDS, RDS, VHDS, ECDS, SDS,
    /// RTDS as Envoy subscribes), are split in several, each consistent on its own. A SotW
    /// response that is the whole set (to a wildcard subscription, of any type; LDS and CDS
    /// always) cannot be split (a resource left out would be deleted): it goes whole, with a
    /// warning. The default is gRPC's default receive limit, which Envoy's
    /// `max_receive_message_length` and most clients keep.
    #[arg(long, value_name = "SIZE", default_value = "4MiB", value_parser = parse_response_size)]
    pub max_response_bytes: u64,
    /// How long a new connection on the xDS port may take to complete its TLS handshake or,
    /// without TLS, to send its first byte before it is closed.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_handshake_timeout)]
    pub handshake_timeout: Duration,
    /// How long an xDS connection lives, give or take 10%: then its streams end with
    /// UNAVAILABLE and a GOAWAY is sent, so proxies reconnect (and spread over the replicas,
    /// a scale-out included) and are sent nothing they hold. `off`: for ever.
    #[arg(long, value_name = "DURATION", default_value = "30m", value_parser = parse_connection_age)]
    pub max_connection_age: ConnectionAgeFlag,
    /// After its age, how long a connection may go on finishing requests in progress
    /// before it is closed.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_age_grace)]
    pub max_connection_age_grace: Duration,
    /// How long a proxy may leave a stream's response unanswered (no ACK, NACK or other
    /// request since it was sent), or unread (the stream's queue of 16 full), before its
    /// connection is closed, counted and logged: a stuck proxy frees what it holds here,
    /// and reconnects once it can. Meanwhile a stalled stream holds at most one response
    /// per type awaiting its answer (16 when the proxy writes and does not read).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_stalled_stream_timeout)]
    pub stalled_stream_timeout: Duration,
}

impl LimitArgs {
    fn limits(&self) -> Limits {
        Limits {
            max_connections: self.max_connections as usize,
            max_streams_per_connection: self.max_streams_per_connection,
            first_request_timeout: self.first_request_timeout,
            max_names_per_stream: self.max_names_per_stream as usize,
            handshake_timeout: self.handshake_timeout,
            connection_age: crate::server::ConnectionAge {
                max: self.max_connection_age.0,
                grace: self.max_connection_age_grace,
            },
            max_response_bytes: usize::try_from(self.max_response_bytes).unwrap_or(usize::MAX),
            stalled_stream_timeout: self.stalled_stream_timeout,
            new_streams: self.max_new_streams_per_second.0.map(|per_second| {
                crate::server::admission::StreamRate {
                    per_second,
                    burst: self.new_streams_burst,
                }
            }),
        }
    }
}

/// Staged rollouts: which nodes are the canaries, and how long they hold a change.
#[derive(Debug, Args)]
pub struct CanaryArgs {
    /// Staged rollouts: each change of the files goes first to the nodes whose id matches
    /// this glob (and --canary-cluster, if given), and to every node once they have all
    /// ACKed it and --rollout-bake has passed without a NACK. A NACK halts it.
    #[arg(long, value_name = "GLOB")]
    pub canary_id: Option<String>,
    /// Staged rollouts: the canaries' node cluster (a glob).
    #[arg(long, value_name = "GLOB")]
    pub canary_cluster: Option<String>,
    /// How long every canary must hold a change, ACKed and without a NACK, before it goes
    /// to every node.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    pub rollout_bake: Duration,
}

impl CanaryArgs {
    /// The rollout policy, when canaries are named.
    fn policy(&self) -> anyhow::Result<Option<crate::rollout::Policy>> {
        if self.canary_id.is_none() && self.canary_cluster.is_none() {
            return Ok(None);
        }
        crate::rollout::Policy::new(
            self.canary_id.clone(),
            self.canary_cluster.clone(),
            self.rollout_bake,
        )
        .map(Some)
        .map_err(|e| anyhow::anyhow!("--canary-id/--canary-cluster: {e}"))
    }
}

/// The admin API's listener: its address, token, TLS, header time and what it shows.
#[derive(Debug, Args)]
pub struct AdminServerArgs {
    /// Address for the admin HTTP server (/healthz, /readyz, /status).
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_ADMIN_ADDR)]
    pub admin_addr: SocketAddr,
    #[command(flatten)]
    pub token: AdminToken,
    /// HTTPS on the admin port: its certificate chain (PEM). Reloaded when it (or the key)
    /// changes, without a restart.
    #[arg(long, value_name = "PATH", requires = "admin_tls_key")]
    pub admin_tls_cert: Option<PathBuf>,
    /// The private key of --admin-tls-cert (PEM).
    #[arg(long, value_name = "PATH", requires = "admin_tls_cert")]
    pub admin_tls_key: Option<PathBuf>,
    /// How long an admin request's headers may take to arrive (from the connection's start
    /// or the previous response) before the connection is closed.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_header_timeout)]
    pub admin_header_timeout: Duration,
    /// Show sensitive fields (keys, secrets, passwords) in CSDS and `/config_dump`, for
    /// debugging. Without it they are left out.
    #[arg(long)]
    pub admin_show_secrets: bool,
}

impl AdminServerArgs {
    fn transport(&self) -> anyhow::Result<crate::admin::Transport> {
        let tls = match (&self.admin_tls_cert, &self.admin_tls_key) {
            (Some(cert), Some(key)) => Some(
                Tls::admin(cert, key)
                    .map_err(|e| anyhow::anyhow!("cannot set up TLS on the admin port: {e}"))?,
            ),
            _ => None,
        };
        Ok(crate::admin::Transport {
            tls,
            header_timeout: self.admin_header_timeout,
        })
    }
}

fn parse_identity(text: &str) -> Result<IdentityPolicy, String> {
    IdentityPolicy::new(text).map_err(|e| e.to_string())
}

/// A first-request time-out: a duration such as `30s`, from 1 s to 10 minutes.
fn parse_first_request_timeout(text: &str) -> Result<Duration, String> {
    parse_duration_in(text, Duration::from_secs(1), Duration::from_secs(600))
}

/// A size in bytes: a number, optionally with a KiB, MiB or GiB suffix.
fn parse_size(text: &str) -> Result<u64, String> {
    let bad = || format!("expected a size such as 64MiB, 512KiB or 1048576, got {text:?}");
    let t = text.trim();
    let (number, scale) = [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)]
        .iter()
        .find_map(|(suffix, scale)| t.strip_suffix(suffix).map(|n| (n, *scale)))
        .unwrap_or((t, 1));
    let n: u64 = number.trim().parse().map_err(|_| bad())?;
    let size = n.checked_mul(scale).ok_or_else(bad)?;
    if size == 0 {
        return Err(bad());
    }
    Ok(size)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    On,
    Off,
}

/// `--max-connection-age`: a duration, or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionAgeFlag(pub Option<Duration>);

/// `--max-response-bytes`: a size of at least 64 KiB (smaller would split every response
/// into many for no client's sake).
fn parse_response_size(text: &str) -> Result<u64, String> {
    let size = parse_size(text)?;
    if size < 64 << 10 {
        return Err(format!("expected at least 64KiB, got {text:?}"));
    }
    Ok(size)
}

/// `--max-new-streams-per-second`: a rate, or `off`.
#[derive(Clone, Copy, Debug)]
pub struct StreamRateFlag(pub Option<u32>);

fn parse_stream_rate(text: &str) -> Result<StreamRateFlag, String> {
    if text == "off" {
        return Ok(StreamRateFlag(None));
    }
    match text.parse::<u32>() {
        Ok(n) if n > 0 => Ok(StreamRateFlag(Some(n))),
        _ => Err(format!(
            "expected a number of streams per second (at least 1) or `off`, got {text:?}"
        )),
    }
}

fn parse_connection_age(text: &str) -> Result<ConnectionAgeFlag, String> {
    if text == "off" {
        return Ok(ConnectionAgeFlag(None));
    }
    parse_duration_in(
        text,
        Duration::from_secs(1),
        Duration::from_secs(7 * 24 * 3600),
    )
    .map(|d| ConnectionAgeFlag(Some(d)))
    .map_err(|e| format!("{e}, or `off`"))
}

fn parse_age_grace(text: &str) -> Result<Duration, String> {
    parse_duration_in(text, Duration::from_millis(100), Duration::from_secs(3600))
}

/// A replica's name (`crate::rollout::fleetwide::driver::replica_name_fault` says what fits).
fn parse_replica_name(text: &str) -> Result<String, String> {
    match crate::rollout::fleetwide::driver::replica_name_fault(text) {
        Some(fault) => Err(format!("{fault}: got `{text}`")),
        None => Ok(text.to_string()),
    }
}

fn parse_handshake_timeout(text: &str) -> Result<Duration, String> {
    parse_duration_in(text, Duration::from_millis(100), Duration::from_secs(600))
}

fn parse_stalled_stream_timeout(text: &str) -> Result<Duration, String> {
    parse_duration_in(text, Duration::from_secs(1), Duration::from_secs(86_400))
}

fn parse_header_timeout(text: &str) -> Result<Duration, String> {
    parse_duration_in(text, Duration::from_millis(100), Duration::from_secs(600))
}

fn parse_quiet_time(text: &str) -> Result<Duration, String> {
    parse_duration_in(text, Duration::ZERO, Duration::from_secs(1))
}

/// A step time-out: a duration such as `5s`, from 100 ms to 10 minutes.
fn parse_step_timeout(text: &str) -> Result<Duration, String> {
    parse_duration_in(text, Duration::from_millis(100), Duration::from_secs(600))
}

/// A duration such as `5s` or `1500ms`, from `min` to `max`.
fn parse_duration_in(text: &str, min: Duration, max: Duration) -> Result<Duration, String> {
    let d = humantime::parse_duration(text)
        .map_err(|e| format!("expected a duration such as 5s or 1500ms: {e}"))?;
    if d < min || d > max {
        return Err(format!(
            "{text} is out of range: give between {} and {}",
            humantime::format_duration(min),
            humantime::format_duration(max)
        ));
    }
    Ok(d)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

pub(super) fn run(args: ServeArgs) -> ExitCode {
    if args.config.paths.is_empty() && args.source.is_none() {
        eprintln!("error: name the snapshot: --config PATH, or --source URL");
        return ExitCode::from(EXIT_USAGE);
    }
    if let Err(e) = init_logging(&args.log_level, args.log_format) {
        eprintln!("error: {e:#}");
        return ExitCode::from(EXIT_USAGE);
    }
    let runtime = match runtime(tokio::runtime::Builder::new_multi_thread()) {
        Ok(r) => r,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        match run_server(args).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(Failure::Usage(e)) => {
                tracing::error!("{e:#}");
                ExitCode::from(EXIT_USAGE)
            }
            Err(Failure::Runtime(e)) => {
                tracing::error!("{e:#}");
                ExitCode::FAILURE
            }
        }
    })
}

enum Failure {
    Usage(anyhow::Error),
    Runtime(anyhow::Error),
}

async fn run_server(args: ServeArgs) -> Result<(), Failure> {
    let signalled = shutdown_signal()
        .map_err(|e| Failure::Runtime(anyhow::anyhow!("cannot install signal handlers: {e}")))?;
    raise_file_limit();
    let rollout = args.rollout.policy().map_err(Failure::Usage)?;
    let token = args.admin.token.read().map_err(Failure::Usage)?;
    if token.is_none() && !args.admin.admin_addr.ip().is_loopback() {
        tracing::warn!(admin_addr = %args.admin.admin_addr, "The admin API listens beyond loopback without a token: anyone who reaches it sees every node and its configuration (--admin-token-file).");
    }
    if args.source.is_none() && args.replica_name.is_some() {
        return Err(Failure::Usage(anyhow::anyhow!(
            "--replica-name names a replica of a fleet that shares etcd: it needs --source"
        )));
    }
    let source = match &args.source {
        None => Source::Files(args.config.paths.clone()),
        Some(url) => Source::Etcd(crate::source::etcd::Prefix {
            url: url
                .parse()
                .map_err(|e| Failure::Usage(anyhow::Error::new(e)))?,
            access: args.etcd.access().map_err(|e| Failure::Usage(e.into()))?,
            timeout: args.source_timeout,
        }),
    };
    let options = Options {
        source,
        load: LoadOptions {
            allow_empty: args.allow_empty,
            max_file_bytes: args.max_file_size,
            ..args.config.load_options()
        },
        serve: ServeOptions {
            ordering: Ordering {
                enabled: args.ordering == Switch::On,
                step_timeout: args.ordering_timeout,
            },
            secrets: Secrets::serve_if(args.insecure_serve_secrets),
            show_secrets: Secrets::serve_if(args.admin.admin_show_secrets),
            csds_from: args.csds_from,
            tls: args.tls.tls().map_err(Failure::Usage)?,
            identity: args.tls.node_identity.clone().map(Arc::new),
            limits: args.limits.limits(),
        },
        admin: args.admin.transport().map_err(Failure::Usage)?,
        admin_token: token,
        watch: true,
        rollout,
        state_dir: args.state_dir.clone(),
        keep_generations: usize::try_from(args.keep_generations)
            .unwrap_or(crate::cache::DEFAULT_KEPT),
        preflight: args
            .preflight_envoy
            .clone()
            .map(|envoy| (envoy, args.preflight_timeout)),
        replica: args.replica_name.clone(),
        file_quiet: crate::source::files::QuietTime(args.file_quiet_time),
    };
    // Read and load before binding: a source that does not answer, or a config that cannot
    // load at start, is a usage error, unless the state directory keeps a good copy to serve
    // meanwhile.
    let fail = |e: RunError| {
        if e.is_usage() {
            Failure::Usage(e.into())
        } else {
            Failure::Runtime(e.into())
        }
    };
    let daemon = Daemon::load(options).await.map_err(fail)?;
    let bind = |addr: SocketAddr, flag: &'static str| {
        listen(addr)
            .map_err(|e| Failure::Runtime(anyhow::anyhow!("cannot listen on {flag} {addr}: {e}")))
    };
    let listeners = Listeners {
        admin: bind(args.admin.admin_addr, "--admin-addr")?,
        xds: bind(args.xds_addr, "--xds-addr")?,
    };
    daemon.serve(listeners, signalled).await.map_err(fail)
}

/// Connections waiting to be accepted, at most (the kernel caps it at `net.core.somaxconn`):
/// a fleet reconnecting at once after a restart is queued rather than made to retry its SYN
/// a second later.
const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `addr` with [`LISTEN_BACKLOG`].
fn listen(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// A future that completes on SIGINT or SIGTERM. The handlers are installed when this is
/// called, not when the future is first polled, so a signal that arrives right after start-up
/// is not lost (or left to the default action, which kills the process without draining).
#[cfg(unix)]
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, std::io::Error> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {},
            _ = terminate.recv() => {},
        }
    })
}

/// Ctrl-C, elsewhere.
#[cfg(not(unix))]
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, std::io::Error> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}

fn init_logging(filter: &str, format: LogFormat) -> anyhow::Result<()> {
    // A bare level is Switchyard's own; libraries (h2, tonic) stay at warn unless a full
    // directive asks otherwise.
    let directive = if ["error", "warn", "info", "debug", "trace"].contains(&filter) {
        format!("warn,switchyard={filter}")
    } else {
        filter.to_string()
    };
    let filter = EnvFilter::try_new(&directive)
        .map_err(|e| anyhow::anyhow!("invalid --log-level {filter:?}: {e}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    result.map_err(|e| anyhow::anyhow!("cannot set up logging: {e}"))
}
