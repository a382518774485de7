//! The command line: `switchyard serve`, `validate`, `diff`, `status`, `rollout`, `loadgen`
//! and `import`.
//!
//! Owns: flags, logging setup, exit codes, wiring config -> cache -> server -> watcher and the
//! admin server, and printing `/status` as a table. This is the binary's edge, so errors here
//! are `anyhow` and end in an exit code: 0 success, 1 a failure at run time or an invalid
//! config under `validate`, 2 `status` found a node NACKing, 64 (EX_USAGE) bad flags or a
//! config that cannot load at start.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tracing_subscriber::EnvFilter;

use crate::config::{self, LoadOptions};
use crate::daemon::{Daemon, Listeners, Options, RunError};
use crate::protocol::Ordering;
use crate::resource::Secrets;
use crate::server::tls::{IdentityPolicy, Tls, TlsFiles};
use crate::server::{CsdsFrom, Limits, ServeOptions};

/// Exit code for bad flags or a config that cannot load at start (sysexits EX_USAGE).
pub const EXIT_USAGE: u8 = 64;
/// Exit code of `switchyard status` when a node rejected its latest configuration.
pub const EXIT_NACKED: u8 = 2;
/// Exit code of `switchyard status` when the server's last config load failed (it serves the
/// last good snapshot; the edit never took). Checked before NACKs.
pub const EXIT_LOAD_FAILED: u8 = 3;
/// `switchyard --version`: this release and the Envoy API it reads files with.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (Envoy API ",
    env!("SWITCHYARD_ENVOY_API_VERSION"),
    ")"
);
/// The admin server's default address.
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:19000";

/// Switchyard: an xDS management server for Envoy fleets, driven by YAML/JSON snapshot
/// files.
#[derive(Debug, Parser)]
#[command(name = "switchyard", version = VERSION, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the snapshot files to Envoy over xDS (State of the World and incremental, ADS
    /// and per-type), reloading them when they change.
    Serve(Box<ServeArgs>),
    /// Load the snapshot files and report every problem; exit 0 when they load, 1 when not.
    Validate(ValidateArgs),
    /// Show what a change of the snapshot files does to each node group: resources added,
    /// removed and changed per type, with the fields that change; exit 0 when nothing
    /// changes, 1 when something does, 2 when either side does not load.
    Diff(DiffArgs),
    /// Show every connected proxy's sync state per type, from a running server's admin API;
    /// exit 3 when the server's last config load failed, 2 when any proxy is NACKing, 1
    /// when the server cannot be asked.
    Status(StatusArgs),
    /// A staged rollout on a running server (serve --canary-id/--canary-cluster): show it,
    /// promote it to every node now, or abort it (the canaries go back to the stable
    /// generation); exit 1 when there is none or the server cannot be asked.
    Rollout(RolloutArgs),
    /// Load an xDS server with simulated Envoys (each its own connection and ADS stream),
    /// run a trigger command, and report connect and sync times, convergence, responses and
    /// the server's memory and CPU; exit 1 when the run did not complete.
    Loadgen(Box<crate::loadgen::LoadgenArgs>),
    /// Turn an Envoy bootstrap's static resources into snapshot files (OUT/snapshot/), and
    /// write a bootstrap for the same Envoy that gets them from Switchyard over ADS
    /// (OUT/envoy.yaml); exit 1 when the bootstrap cannot be imported.
    Import(ImportArgs),
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The Envoy bootstrap (YAML or JSON) whose static_resources to import.
    #[arg(value_name = "BOOTSTRAP")]
    pub bootstrap: PathBuf,
    /// The directory to write: OUT/snapshot/ (serve --config OUT/snapshot) and
    /// OUT/envoy.yaml (envoy -c OUT/envoy.yaml).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// STATIC clusters' inline load_assignment become EDS clusters and endpoints.
    #[arg(long)]
    pub split_endpoints: bool,
    /// HTTP connection managers' inline route_config become RDS and route configurations.
    #[arg(long)]
    pub split_routes: bool,
    /// Where the Envoy reaches Switchyard's xDS port.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:18000")]
    pub xds_address: String,
    /// Incremental ADS (DELTA_GRPC) in the new bootstrap, instead of State of the World.
    #[arg(long)]
    pub delta: bool,
    /// The node id for a bootstrap without one (Switchyard serves by node).
    #[arg(long, value_name = "ID", default_value = "envoy")]
    pub node_id: String,
    /// The node cluster for a bootstrap without one.
    #[arg(long, value_name = "NAME", default_value = "envoy")]
    pub node_cluster: String,
    /// Overwrite files already in OUT.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub descriptors: DescriptorArgs,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub admin: AdminArgs,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// How `switchyard status` and `switchyard rollout` reach a running server's admin API.
#[derive(Debug, Args)]
pub struct AdminArgs {
    /// The running server's admin address.
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_ADMIN_ADDR)]
    pub admin_addr: SocketAddr,
    #[command(flatten)]
    pub access: AdminAccess,
}

/// The admin API's token and TLS trust.
#[derive(Debug, Args)]
pub struct AdminAccess {
    /// A file holding the admin API's bearer token (the server's --admin-token-file).
    #[arg(long, value_name = "PATH")]
    pub admin_token_file: Option<PathBuf>,
    /// Ask over HTTPS (the server's --admin-tls-cert), trusting this CA certificate (PEM).
    #[arg(long, value_name = "PATH")]
    pub admin_ca: Option<PathBuf>,
    /// With --admin-ca: the name the admin certificate must carry (a DNS name), when it is
    /// not the IP address of --admin-addr.
    #[arg(long, value_name = "NAME", requires = "admin_ca")]
    pub admin_server_name: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// One row per node, a column per type.
    Table,
    /// The admin API's /status JSON.
    Json,
}

#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// A snapshot file, or a directory whose *.yaml, *.yml and *.json files (at any depth,
    /// hidden entries skipped) are read. Repeatable.
    #[arg(long = "config", short = 'c', value_name = "PATH", required = true)]
    pub paths: Vec<PathBuf>,
    /// Treat reference problems (a route naming a missing cluster, ...) as errors.
    #[arg(long)]
    pub strict: bool,
    /// Do not check Envoy's own field rules at load: only for clients that do not apply them
    /// (proxyless gRPC) with resources Envoy would reject, such as a listener without
    /// `stat_prefix`.
    #[arg(long)]
    pub skip_envoy_rules: bool,
    /// An xdstp authority this server answers for (P35), as in
    /// `xdstp://AUTHORITY/TYPE/ID`. Repeatable. A resource named for another authority is a
    /// load error, and a request naming one is answered as not existing. None given: any.
    #[arg(long = "authority", value_name = "NAME")]
    pub authorities: Vec<String>,
    #[command(flatten)]
    pub descriptors: DescriptorArgs,
}

/// Descriptors beyond Envoy's API: custom and contrib extensions.
#[derive(Debug, Args, Default)]
pub struct DescriptorArgs {
    /// A FileDescriptorSet (`protoc --include_imports --descriptor_set_out=FILE ...`) whose
    /// messages may be used in any `Any` (`typed_config` of a custom or contrib filter),
    /// checked with their field rules like Envoy's own. Repeatable.
    #[arg(long = "descriptor-set", value_name = "FILE")]
    pub sets: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RolloutArgs {
    #[command(subcommand)]
    pub action: RolloutAction,
}

#[derive(Debug, Subcommand)]
pub enum RolloutAction {
    /// The rollout in progress: its state, the stable and candidate generations, and which
    /// generation each node has.
    Status(AdminArgs),
    /// Serve the candidate to every node now.
    Promote(AdminArgs),
    /// Stop the rollout: the canaries go back to the stable generation.
    Abort(AdminArgs),
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The changed snapshot files (as --config of serve). Repeatable.
    #[arg(long = "config", short = 'c', value_name = "PATH", required = true)]
    pub new: Vec<PathBuf>,
    /// The files as they are now (what serves). Repeatable.
    #[arg(
        long = "against",
        value_name = "PATH",
        required_unless_present = "server"
    )]
    pub old: Vec<PathBuf>,
    /// Compare with what a running server serves instead, through its admin API at ADDR
    /// (each node group's /config_dump).
    #[arg(long, value_name = "ADDR", conflicts_with = "old")]
    pub server: Option<SocketAddr>,
    #[command(flatten)]
    pub access: AdminAccess,
    /// Do not check Envoy's own field rules when loading either side.
    #[arg(long)]
    pub skip_envoy_rules: bool,
    #[command(flatten)]
    pub descriptors: DescriptorArgs,
}

/// Exit code of `switchyard diff` when something changes.
pub const EXIT_DIFF_CHANGES: u8 = 1;
/// Exit code of `switchyard diff` when either side does not load.
pub const EXIT_DIFF_ERROR: u8 = 2;

#[derive(Debug, Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Also check each node group's snapshot with this Envoy binary: `envoy --mode validate`
    /// on a bootstrap that holds it (endpoints, route configurations and secrets inlined).
    #[arg(long, value_name = "PATH")]
    pub envoy: Option<PathBuf>,
    /// How long one Envoy check may take.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    pub envoy_timeout: Duration,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Address for the xDS gRPC server.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:18000")]
    pub xds_addr: SocketAddr,
    /// Address for the admin HTTP server (/healthz, /readyz, /status).
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_ADMIN_ADDR)]
    pub admin_addr: SocketAddr,
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
    /// Let a reload leave connected proxies without any listener or any cluster where they
    /// have some (refused by default: the usual cause is a broken deploy of the files).
    #[arg(long)]
    pub allow_empty: bool,
    /// Check every reload with this Envoy binary before publishing it (as `validate
    /// --envoy`): a node group Envoy rejects makes the reload a load error, and so does an
    /// Envoy that cannot be run. The last good snapshot keeps serving.
    #[arg(long, value_name = "PATH")]
    pub preflight_envoy: Option<PathBuf>,
    /// How long one pre-flight Envoy check may take.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    pub preflight_timeout: Duration,
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
    /// Send private key material (private keys, session ticket keys, generic secrets) to
    /// every client, whether or not a certificate binds it to its node: only for a sidecar
    /// on loopback. Without it, only streams bound by --node-identity get it.
    #[arg(long)]
    pub insecure_serve_secrets: bool,
    /// Show sensitive fields (keys, secrets, passwords) in CSDS and `/config_dump`, for
    /// debugging. Without it they are left out.
    #[arg(long)]
    pub admin_show_secrets: bool,
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
    /// responses, and SotW responses of EDS, RDS, SRDS, VHDS, ECDS, SDS and RTDS, are split in
    /// several, each consistent on its own. A full-state LDS or CDS response cannot be split
    /// (a resource left out would be deleted): it goes whole, with a warning. The default is
    /// gRPC's default receive limit, which Envoy's `max_receive_message_length` and most
    /// clients keep.
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
    /// The largest snapshot file loaded (bytes, or with a KiB, MiB or GiB suffix); a larger
    /// one is a load error and the last good snapshot keeps serving.
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_size)]
    pub max_file_size: u64,
    /// A file holding a bearer token that the admin API's `/`, `/status` and `/config_dump`
    /// then require (`Authorization: Bearer <token>`); `/healthz`, `/readyz` and `/metrics`
    /// stay open. Use it whenever --admin-addr is not loopback.
    #[arg(long, value_name = "PATH")]
    pub admin_token_file: Option<PathBuf>,
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
    /// Who may ask CSDS on the xDS port (it lists every node and its resources).
    #[arg(long, value_enum, default_value_t = CsdsFrom::Loopback)]
    pub csds_from: CsdsFrom,
    /// A directory where each good load is kept; when the files do not load at start, the
    /// copy kept there is served (and the error reported) instead of refusing to start.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
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

fn parse_identity(text: &str) -> Result<IdentityPolicy, String> {
    IdentityPolicy::new(text)
}

/// The token in a token file: its text without surrounding white space, never empty.
fn read_token(path: &std::path::Path) -> anyhow::Result<Arc<str>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read the admin token file {}: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        anyhow::bail!("the admin token file {} is empty", path.display());
    }
    Ok(token.into())
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

/// A step time-out: a duration such as `5s`, from 100 ms to 10 minutes.
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

fn parse_handshake_timeout(text: &str) -> Result<Duration, String> {
    parse_duration_in(text, Duration::from_millis(100), Duration::from_secs(600))
}

fn parse_header_timeout(text: &str) -> Result<Duration, String> {
    parse_duration_in(text, Duration::from_millis(100), Duration::from_secs(600))
}

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

/// Parse the command line and run it; the whole program.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    ExitCode::SUCCESS
                }
                _ => ExitCode::from(EXIT_USAGE),
            };
        }
    };
    // Custom descriptors go into the pool before anything reads a file.
    let sets: &[PathBuf] = match &cli.command {
        Command::Validate(args) => &args.config.descriptors.sets,
        Command::Serve(args) => &args.config.descriptors.sets,
        Command::Diff(args) => &args.descriptors.sets,
        Command::Import(args) => &args.descriptors.sets,
        _ => &[],
    };
    if let Err(e) = config::descriptors::install(sets) {
        eprintln!("error: --descriptor-set: {e}");
        return ExitCode::from(EXIT_USAGE);
    }
    match cli.command {
        Command::Validate(args) => validate(&args),
        Command::Diff(args) => diff(&args),
        Command::Rollout(args) => rollout(&args),
        Command::Serve(args) => serve(*args),
        Command::Status(args) => status(&args),
        Command::Loadgen(args) => loadgen(*args),
        Command::Import(args) => import(&args),
    }
}

/// `switchyard import`: the files written only when the whole import succeeded and the
/// snapshot files load.
fn import(args: &ImportArgs) -> ExitCode {
    let options = crate::import::ImportOptions {
        split_endpoints: args.split_endpoints,
        split_routes: args.split_routes,
        xds_address: args.xds_address.clone(),
        delta: args.delta,
        node_id: args.node_id.clone(),
        node_cluster: args.node_cluster.clone(),
    };
    let imported = match crate::import::import(&args.bootstrap, &options) {
        Ok(imported) => imported,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    // What is written must load: checked before anything is written.
    let mut errors = 0;
    for (name, text) in &imported.files {
        if let Err(file_errors) = config::load_text(std::path::Path::new(name), text) {
            for e in file_errors {
                errors += 1;
                eprintln!("error: the imported {e}");
            }
        }
    }
    if errors > 0 {
        eprintln!("invalid: the imported files do not load; nothing written");
        return ExitCode::FAILURE;
    }
    let written = match crate::import::write(&args.out, &imported, args.force) {
        Ok(written) => written,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    for note in &imported.notes {
        eprintln!("note: {note}");
    }
    for path in &written {
        println!("wrote {}", path.display());
    }
    println!(
        "next: switchyard serve --config {} (xDS on {}); envoy -c {}",
        args.out.join(crate::import::SNAPSHOT_DIR).display(),
        args.xds_address,
        args.out.join(crate::import::BOOTSTRAP_FILE).display()
    );
    ExitCode::SUCCESS
}

/// `switchyard loadgen`.
fn loadgen(args: crate::loadgen::LoadgenArgs) -> ExitCode {
    let runtime = match runtime(tokio::runtime::Builder::new_multi_thread()) {
        Ok(r) => r,
        Err(code) => return code,
    };
    raise_file_limit();
    let json = args.output == crate::loadgen::ReportFormat::Json;
    let report = match runtime.block_on(crate::loadgen::run(args)) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("error: cannot write the report: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", crate::loadgen::table(&report));
    }
    if report.cut_short.is_some() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// `switchyard diff`: load both sides (or ask the server for its side), compare them per
/// node group.
fn diff(args: &DiffArgs) -> ExitCode {
    let options = LoadOptions {
        allow_empty: true,
        envoy_rules: !args.skip_envoy_rules,
        ..LoadOptions::default()
    };
    let load = |paths: &[PathBuf], side: &str| {
        config::load(paths, &options).map_err(|failure| {
            for e in &failure.errors {
                eprintln!("error: {side}: {e}");
            }
            eprintln!("invalid: the {side} side does not load");
        })
    };
    let Ok(new) = load(&args.new, "--config") else {
        return ExitCode::from(EXIT_DIFF_ERROR);
    };
    let report = match args.server {
        Some(addr) => {
            let (target, token) = match admin_at(addr, &args.access) {
                Ok(found) => found,
                Err(_) => return ExitCode::from(EXIT_DIFF_ERROR),
            };
            let runtime = match runtime(tokio::runtime::Builder::new_current_thread()) {
                Ok(r) => r,
                Err(_) => return ExitCode::from(EXIT_DIFF_ERROR),
            };
            let dump = |id: &str, cluster: &str| -> anyhow::Result<serde_json::Value> {
                let path = format!(
                    "/config_dump?node={}&cluster={}",
                    crate::admin::page::query_value(id),
                    crate::admin::page::query_value(cluster)
                );
                let (code, body, url) = runtime.block_on(admin_call(
                    &target,
                    token.as_deref(),
                    reqwest::Method::GET,
                    &path,
                ))?;
                if !code.is_success() {
                    anyhow::bail!("{url} answered {code}: {}", body.trim());
                }
                serde_json::from_str(&body)
                    .map_err(|e| anyhow::anyhow!("{url} did not answer with a config dump: {e}"))
            };
            match crate::diff::against_server(&new, dump) {
                Ok(report) => report,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    return ExitCode::from(EXIT_DIFF_ERROR);
                }
            }
        }
        None => {
            let Ok(old) = load(&args.old, "--against") else {
                return ExitCode::from(EXIT_DIFF_ERROR);
            };
            crate::diff::diff(&old, &new)
        }
    };
    print!("{report}");
    if report.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_DIFF_CHANGES)
    }
}

fn validate(args: &ValidateArgs) -> ExitCode {
    let options = LoadOptions {
        strict: args.config.strict,
        allow_empty: true,
        envoy_rules: !args.config.skip_envoy_rules,
        authorities: args.config.authorities.clone(),
        ..LoadOptions::default()
    };
    let config = match config::load(&args.config.paths, &options) {
        Ok(config) => config,
        Err(failure) => {
            for w in &failure.warnings {
                eprintln!("warning: {w}");
            }
            for e in &failure.errors {
                eprintln!("error: {e}");
            }
            eprintln!("invalid: {} error(s)", failure.errors.len());
            return ExitCode::FAILURE;
        }
    };
    for w in &config.warnings {
        eprintln!("warning: {w}");
    }
    let mut rejected = 0;
    if let Some(envoy) = &args.envoy {
        if !envoy.is_file() {
            eprintln!("error: --envoy {}: no such file", envoy.display());
            return ExitCode::from(EXIT_USAGE);
        }
        let verdicts = match crate::preflight::check(envoy, &config, args.envoy_timeout) {
            Ok(verdicts) => verdicts,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        for v in &verdicts {
            match &v.result {
                Ok(()) => eprintln!("envoy: OK: {}", v.group),
                Err(message) => {
                    rejected += 1;
                    eprintln!("error: Envoy rejects the {}: {message}", v.group);
                }
            }
        }
    }
    if rejected > 0 {
        eprintln!("invalid: Envoy rejects {rejected} node group(s)");
        return ExitCode::FAILURE;
    }
    println!(
        "OK: {} file(s), {} resource(s), {} warning(s)",
        config.files.len(),
        config.resource_count(),
        config.warnings.len()
    );
    ExitCode::SUCCESS
}

/// A tokio runtime from `builder` (with I/O and time), or the exit code after saying why not.
fn runtime(mut builder: tokio::runtime::Builder) -> Result<tokio::runtime::Runtime, ExitCode> {
    builder.enable_all().build().map_err(|e| {
        eprintln!("error: cannot start the async runtime: {e}");
        ExitCode::FAILURE
    })
}

fn serve(args: ServeArgs) -> ExitCode {
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
    let rollout = if args.canary_id.is_some() || args.canary_cluster.is_some() {
        Some(
            crate::rollout::Policy::new(
                args.canary_id.clone(),
                args.canary_cluster.clone(),
                args.rollout_bake,
            )
            .map_err(|e| Failure::Usage(anyhow::anyhow!("--canary-id/--canary-cluster: {e}")))?,
        )
    } else {
        None
    };
    let token = match &args.admin_token_file {
        Some(path) => Some(read_token(path).map_err(Failure::Usage)?),
        None => {
            if !args.admin_addr.ip().is_loopback() {
                tracing::warn!(admin_addr = %args.admin_addr, "The admin API listens beyond loopback without a token: anyone who reaches it sees every node and its configuration (--admin-token-file).");
            }
            None
        }
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(
            Tls::xds(&TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: args.client_ca.clone(),
            })
            .map_err(|e| Failure::Usage(anyhow::anyhow!("cannot set up TLS: {e}")))?,
        ),
        _ => None,
    };
    let admin = crate::admin::Transport {
        tls: match (&args.admin_tls_cert, &args.admin_tls_key) {
            (Some(cert), Some(key)) => Some(Tls::admin(cert, key).map_err(|e| {
                Failure::Usage(anyhow::anyhow!("cannot set up TLS on the admin port: {e}"))
            })?),
            _ => None,
        },
        header_timeout: args.admin_header_timeout,
    };
    let options = Options {
        paths: args.config.paths.clone(),
        load: LoadOptions {
            strict: args.config.strict,
            allow_empty: args.allow_empty,
            max_file_bytes: args.max_file_size,
            envoy_rules: !args.config.skip_envoy_rules,
            authorities: args.config.authorities.clone(),
        },
        serve: ServeOptions {
            ordering: Ordering {
                enabled: args.ordering == Switch::On,
                step_timeout: args.ordering_timeout,
            },
            secrets: Secrets::serve_if(args.insecure_serve_secrets),
            show_secrets: Secrets::serve_if(args.admin_show_secrets),
            csds_from: args.csds_from,
            tls,
            identity: args.node_identity.clone().map(Arc::new),
            limits: Limits {
                max_connections: args.max_connections as usize,
                max_streams_per_connection: args.max_streams_per_connection,
                first_request_timeout: args.first_request_timeout,
                max_names_per_stream: args.max_names_per_stream as usize,
                handshake_timeout: args.handshake_timeout,
                connection_age: crate::server::ConnectionAge {
                    max: args.max_connection_age.0,
                    grace: args.max_connection_age_grace,
                },
                max_response_bytes: usize::try_from(args.max_response_bytes).unwrap_or(usize::MAX),
                new_streams: args.max_new_streams_per_second.0.map(|per_second| {
                    crate::server::admission::StreamRate {
                        per_second,
                        burst: args.new_streams_burst,
                    }
                }),
            },
        },
        admin,
        admin_token: token,
        watch: true,
        rollout,
        state_dir: args.state_dir.clone(),
        preflight: args
            .preflight_envoy
            .clone()
            .map(|envoy| (envoy, args.preflight_timeout)),
    };
    // Load before binding: a config that cannot load at start is a usage error, unless the
    // state directory keeps a good copy to serve meanwhile.
    let fail = |e: RunError| {
        if e.is_usage() {
            Failure::Usage(e.into())
        } else {
            Failure::Runtime(e.into())
        }
    };
    let daemon = Daemon::load(options).map_err(fail)?;
    let bind = |addr: SocketAddr, flag: &'static str| {
        listen(addr)
            .map_err(|e| Failure::Runtime(anyhow::anyhow!("cannot listen on {flag} {addr}: {e}")))
    };
    let listeners = Listeners {
        admin: bind(args.admin_addr, "--admin-addr")?,
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

/// Each connection and watched file takes a descriptor: raise the soft RLIMIT_NOFILE to the
/// hard limit, so the fleet is bounded by `--max-connections`, not by a low default.
#[cfg(unix)]
fn raise_file_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::info!(limit, "File descriptor limit (RLIMIT_NOFILE) raised."),
        Err(e) => {
            tracing::warn!(error = %e, "Cannot raise the file descriptor limit (RLIMIT_NOFILE).")
        }
    }
}

#[cfg(not(unix))]
fn raise_file_limit() {}

/// `switchyard status`: ask a running server's admin API and print what every proxy has.
fn status(args: &StatusArgs) -> ExitCode {
    let runtime = match runtime(tokio::runtime::Builder::new_current_thread()) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let (target, token) = match admin_target(&args.admin) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let fetched = runtime.block_on(fetch_status(&target, token.as_deref()));
    let (status, body) = match fetched {
        Ok(found) => found,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    match args.output {
        Output::Json => println!("{body}"),
        Output::Table => print!("{}", status_table(&status)),
    }
    if status.config.as_ref().is_some_and(|c| !c.ok) {
        ExitCode::from(EXIT_LOAD_FAILED)
    } else if status.any_nacked() {
        ExitCode::from(EXIT_NACKED)
    } else {
        ExitCode::SUCCESS
    }
}

/// Where `switchyard status` finds the admin API, and how it trusts it over HTTPS.
struct AdminTarget {
    addr: SocketAddr,
    /// `--admin-ca`: ask over HTTPS, trusting only these CA certificates.
    ca: Option<Vec<reqwest::Certificate>>,
    /// `--admin-server-name`: the name the admin certificate carries, reached at `addr`.
    server_name: Option<String>,
}

/// The CA certificates of `--admin-ca`.
fn read_ca(path: &std::path::Path) -> anyhow::Result<Vec<reqwest::Certificate>> {
    let pem = std::fs::read(path)
        .map_err(|e| anyhow::anyhow!("cannot read the admin CA file {}: {e}", path.display()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem)
        .map_err(|e| anyhow::anyhow!("{} holds no PEM certificate: {e}", path.display()))?;
    if certs.is_empty() {
        anyhow::bail!("{} holds no PEM certificate", path.display());
    }
    Ok(certs)
}

/// The admin API `args` name, and its token: or the exit code after saying why not.
fn admin_target(args: &AdminArgs) -> Result<(AdminTarget, Option<Arc<str>>), ExitCode> {
    admin_at(args.admin_addr, &args.access)
}

/// The admin API at `addr`, and its token: or the exit code after saying why not.
fn admin_at(
    addr: SocketAddr,
    args: &AdminAccess,
) -> Result<(AdminTarget, Option<Arc<str>>), ExitCode> {
    let usage = |e: anyhow::Error| {
        eprintln!("error: {e:#}");
        ExitCode::from(EXIT_USAGE)
    };
    let token = args
        .admin_token_file
        .as_deref()
        .map(read_token)
        .transpose()
        .map_err(usage)?;
    let ca = args
        .admin_ca
        .as_deref()
        .map(read_ca)
        .transpose()
        .map_err(usage)?;
    let target = AdminTarget {
        addr,
        ca,
        server_name: args.admin_server_name.clone(),
    };
    Ok((target, token))
}

/// `switchyard rollout`: ask a running server about its rollout, or act on it.
fn rollout(args: &RolloutArgs) -> ExitCode {
    let runtime = match runtime(tokio::runtime::Builder::new_current_thread()) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let admin = match &args.action {
        RolloutAction::Status(a) | RolloutAction::Promote(a) | RolloutAction::Abort(a) => a,
    };
    let (target, token) = match admin_target(admin) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let path = match args.action {
        RolloutAction::Status(_) => {
            let (status, _) = match runtime.block_on(fetch_status(&target, token.as_deref())) {
                Ok(found) => found,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    return ExitCode::FAILURE;
                }
            };
            print!("{}", rollout_text(&status));
            return ExitCode::SUCCESS;
        }
        RolloutAction::Promote(_) => "/rollout/promote",
        RolloutAction::Abort(_) => "/rollout/abort",
    };
    let answered = runtime.block_on(admin_call(
        &target,
        token.as_deref(),
        reqwest::Method::POST,
        path,
    ));
    match answered {
        Ok((code, body, _)) if code.is_success() => {
            print!("{body}");
            ExitCode::SUCCESS
        }
        Ok((_, body, url)) => {
            eprintln!("error: {url}: {}", body.trim());
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The rollout part of a status, for people.
pub fn rollout_text(status: &crate::admin::Status) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let Some(r) = &status.rollout else {
        let _ = writeln!(
            out,
            "no rollout in progress: generation {} serves every node",
            status.generation
        );
        return out;
    };
    let _ = writeln!(
        out,
        "rollout {} since {}: generation {} to the canaries ({}), {} to every other node",
        r.state, r.since, r.candidate, r.canary, r.stable
    );
    if let Some(reason) = &r.reason {
        let _ = writeln!(out, "  halted: {}", printable(reason));
    }
    for n in &status.nodes {
        let _ = writeln!(
            out,
            "  {:<32} generation {}",
            printable(&n.node_id),
            n.generation
        );
    }
    out
}

/// One request to the admin API: its status code, body and URL.
async fn admin_call(
    target: &AdminTarget,
    token: Option<&str>,
    method: reqwest::Method,
    path: &str,
) -> anyhow::Result<(reqwest::StatusCode, String, String)> {
    let mut client = reqwest::Client::builder().timeout(std::time::Duration::from_secs(10));
    let url = match (&target.ca, &target.server_name) {
        (None, _) => format!("http://{}{path}", target.addr),
        (Some(ca), name) => {
            client = client.tls_built_in_root_certs(false);
            for cert in ca {
                client = client.add_root_certificate(cert.clone());
            }
            match name {
                Some(name) => {
                    client = client.resolve(name, target.addr);
                    format!("https://{name}:{}{path}", target.addr.port())
                }
                None => format!("https://{}{path}", target.addr),
            }
        }
    };
    let mut request = client.build()?.request(method, &url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.map_err(|e| {
        let hint = match &target.ca {
            None => " (if it serves HTTPS, give --admin-ca)",
            Some(_) => "",
        };
        anyhow::Error::new(e).context(format!("cannot reach the admin API at {url}{hint}"))
    })?;
    let code = response.status();
    let body = response.text().await?;
    Ok((code, body, url))
}

async fn fetch_status(
    target: &AdminTarget,
    token: Option<&str>,
) -> anyhow::Result<(crate::admin::Status, String)> {
    let (code, body, url) = admin_call(target, token, reqwest::Method::GET, "/status").await?;
    if !code.is_success() {
        anyhow::bail!("{url} answered {code}: {}", body.trim());
    }
    let status = serde_json::from_str(&body)
        .map_err(|e| anyhow::anyhow!("{url} did not answer with a Switchyard status: {e}"))?;
    Ok((status, body))
}

/// Text a proxy sent (node ids, NACK messages), made safe for a terminal: control characters
/// (escape sequences, carriage returns, newlines) are shown escaped, never acted on.
fn printable(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

/// The table `switchyard status` prints: one row per node, a column per type any node asked
/// for, then the NACK texts and the last config load. What proxies sent is escaped.
pub fn status_table(status: &crate::admin::Status) -> String {
    use crate::resource::ResourceType;
    let kinds: Vec<&str> = ResourceType::ALL
        .iter()
        .map(|k| k.short_name())
        .filter(|k| status.nodes.iter().any(|n| n.types.contains_key(*k)))
        .collect();
    let mut rows: Vec<Vec<String>> = vec![["NODE", "CLUSTER", "STREAMS", "AGENT"]
        .iter()
        .map(|h| h.to_string())
        .chain(kinds.iter().map(|k| k.to_string()))
        .collect()];
    for n in &status.nodes {
        let streams: Vec<String> = n.streams.iter().map(|s| s.label()).collect();
        let agent = format!("{} {}", n.user_agent, n.user_agent_version)
            .trim()
            .to_string();
        let mut row = vec![
            printable(&n.node_id),
            printable(&n.node_cluster),
            printable(&streams.join(",")),
            printable(&agent),
        ];
        row.extend(kinds.iter().map(|k| {
            n.types
                .get(*k)
                .map_or_else(|| "-".to_string(), |t| t.state.name().replace('_', " "))
        }));
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    for n in &status.nodes {
        for p in n.streams.iter().filter_map(|s| s.plan.as_ref()) {
            out.push_str(&format!(
                "\nUPDATING {}: step {} of {} since {}, waiting for the proxy's ACKs\n",
                printable(&n.node_id),
                p.step,
                p.steps,
                p.since
            ));
            if let (Some(kind), held) = (&p.nacked, p.held_back) {
                if held > 0 {
                    out.push_str(&format!(
                        "  {held} resource(s) held back: they refer to what the proxy NACKed \
                         ({kind}); they follow once it accepts a fix\n"
                    ));
                }
            }
        }
        for s in &n.streams {
            for u in &s.unknown_types {
                let names = if u.names.is_empty() {
                    "every name (wildcard)".to_string()
                } else {
                    u.names.join(", ")
                };
                out.push_str(&format!(
                    "\nUNKNOWN TYPE {} ({}): {} is not a type this server serves; answered as \
                     not existing ({})\n",
                    printable(&n.node_id),
                    s.label(),
                    printable(&u.type_url),
                    printable(&names)
                ));
            }
        }
        for (kind, t) in &n.types {
            if !t.not_found.is_empty() {
                out.push_str(&format!(
                    "\nNOT FOUND {} {kind}: subscribed, and no such resource for this node \
                     (told NOT_FOUND): {}\n",
                    printable(&n.node_id),
                    printable(&t.not_found.join(", "))
                ));
            }
            if let Some(bytes) = t.oversized_bytes {
                out.push_str(&format!(
                    "\nOVERSIZED {} {kind}: the latest response, {bytes} bytes, is over \
                     --max-response-bytes and cannot be split (a full-state type, or one \
                     resource alone over it)\n",
                    printable(&n.node_id)
                ));
            }
            if let Some(error) = &t.error {
                out.push_str(&format!(
                    "\nNACKED {} {kind} (rejected version {}): {}\n",
                    printable(&n.node_id),
                    t.rejected_version.as_deref().unwrap_or("?"),
                    printable(error)
                ));
                if !t.rejected_changes.is_empty() {
                    out.push_str("  it changed, against what the proxy runs:\n");
                    for c in &t.rejected_changes {
                        out.push_str(&format!("    {}\n", printable(&c.text())));
                    }
                }
            }
        }
    }
    match &status.config {
        Some(c) if c.ok => out.push_str(&format!(
            "\nconfig: generation {} loaded at {}, {} warning(s)\n",
            c.generation,
            c.at,
            c.warnings.len()
        )),
        Some(c) => {
            out.push_str(&format!(
                "\nconfig: the last load at {} FAILED (still serving generation {}):\n",
                c.at, c.generation
            ));
            for e in &c.errors {
                out.push_str(&format!("  {e}\n"));
            }
        }
        None => out.push_str("\nconfig: nothing loaded yet\n"),
    }
    if status.rollout.is_some() {
        out.push('\n');
        out.push_str(&rollout_text(status));
    }
    if let Some(n) = status.new_streams.as_ref().filter(|n| n.turned_away > 0) {
        out.push_str(&format!(
            "\nnew streams: {} turned away (RESOURCE_EXHAUSTED) past {} a second, {} at once \
             (--max-new-streams-per-second, --new-streams-burst)\n",
            n.turned_away, n.per_second, n.burst
        ));
    }
    if !status.certificates.is_empty() {
        out.push_str("\ncertificates read from files (switchyard_files):\n");
        for c in &status.certificates {
            let state = match c.state.as_str() {
                "ok" => String::new(),
                other => format!("  {}", other.to_uppercase()),
            };
            out.push_str(&format!(
                "  {} {}: serial {}, expires {}{state}  ({})\n",
                printable(&c.secret),
                c.role,
                c.serial,
                c.not_after,
                printable(&c.file)
            ));
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::{NodeStatus, Status, StreamStatus, TypeStatusJson};

    #[test]
    fn status_table_escapes_what_proxies_send() {
        let nasty = "bad\u{1b}[2J\r\nfake row";
        let status = Status {
            nodes: vec![NodeStatus {
                node_id: nasty.into(),
                node_cluster: "c".into(),
                user_agent: "envoy".into(),
                user_agent_version: String::new(),
                client_features: vec![],
                generation: 1,
                streams: vec![StreamStatus {
                    peer: "p".into(),
                    stream: "ADS".into(),
                    protocol: "sotw".into(),
                    connected_since: "t".into(),
                    plan: None,
                    // P33: a client's type URL and names, escaped too.
                    unknown_types: vec![crate::fleet::UnknownTypeReport {
                        type_url: format!("type.googleapis.com/{nasty}"),
                        names: vec!["w1".into()],
                        state: crate::fleet::SyncStatus::Synced,
                    }],
                }],
                types: [(
                    "CDS".to_string(),
                    TypeStatusJson {
                        state: crate::fleet::SyncStatus::Nacked,
                        version_sent: "v2".into(),
                        version_acked: "v1".into(),
                        nonce: "1".into(),
                        error: Some(nasty.into()),
                        rejected_version: Some("v2".into()),
                        rejected_changes: vec![crate::fleet::RejectedChange {
                            resource: "clusters.yaml: clusters[0] \"x\"".into(),
                            change: "added".into(),
                            file_changed_at: Some("2026-12-01T10:00:00Z".into()),
                        }],
                        oversized_bytes: None,
                        // P32: what the node asked for and was told does not exist.
                        not_found: vec!["gone".into(), nasty.into()],
                        last_change: "t".into(),
                    },
                )]
                .into(),
            }],
            config: None,
            rollout: None,
            generation: 1,
            server: Default::default(),
            certificates: Vec::new(),
            new_streams: None,
        };
        let table = status_table(&status);
        assert!(
            !table.contains('\u{1b}') && !table.contains('\r'),
            "{table:?}"
        );
        assert!(table.contains(r"bad\u{1b}[2J\r\nfake row"), "{table}");
        assert!(!table.lines().any(|l| l.starts_with("fake row")), "{table}");
        assert!(
            table.contains(
                "\n    clusters.yaml: clusters[0] \"x\" (added; the file changed at \
                 2026-12-01T10:00:00Z)\n"
            ),
            "the NACK names what it changed: {table}"
        );
        let node = r"bad\u{1b}[2J\r\nfake row";
        assert!(
            table.contains(&format!(
                "NOT FOUND {node} CDS: subscribed, and no such resource for this node (told \
                 NOT_FOUND): gone, {node}"
            )),
            "{table}"
        );
        assert!(
            table.contains(&format!(
                "UNKNOWN TYPE {node} (ADS/sotw): type.googleapis.com/{node} is not a type this \
                 server serves; answered as not existing (w1)"
            )),
            "{table}"
        );
    }
}
