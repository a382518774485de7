//! The command line: `switchyard serve` and `switchyard validate`.
//!
//! Owns: flags, logging setup, exit codes, and wiring config -> cache -> server -> watcher.
//! This is the binary's edge, so errors here are `anyhow` and end in an exit code:
//! 0 success, 1 a failure at run time or an invalid config under `validate`,
//! 64 (EX_USAGE) bad flags or a config that cannot load at start.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tracing_subscriber::EnvFilter;

use crate::cache::Cache;
use crate::config::{self, LoadOptions};
use crate::watch::Reloader;

/// Exit code for bad flags or a config that cannot load at start (sysexits EX_USAGE).
pub const EXIT_USAGE: u8 = 64;

/// Switchyard: an xDS management server for Envoy fleets, driven by YAML/JSON snapshot
/// files.
#[derive(Debug, Parser)]
#[command(name = "switchyard", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the snapshot files to Envoy over xDS (State of the World and incremental, ADS
    /// and per-type), reloading them when they change.
    Serve(ServeArgs),
    /// Load the snapshot files and report every problem; exit 0 when they load, 1 when not.
    Validate(ConfigArgs),
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
}

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
    match cli.command {
        Command::Validate(args) => validate(&args),
        Command::Serve(args) => serve(args),
    }
}

fn validate(args: &ConfigArgs) -> ExitCode {
    let options = LoadOptions {
        strict: args.strict,
    };
    match config::load(&args.paths, &options) {
        Ok(config) => {
            for w in &config.warnings {
                eprintln!("warning: {w}");
            }
            println!(
                "OK: {} file(s), {} resource(s), {} warning(s)",
                config.files.len(),
                config.resource_count(),
                config.warnings.len()
            );
            ExitCode::SUCCESS
        }
        Err(failure) => {
            for w in &failure.warnings {
                eprintln!("warning: {w}");
            }
            for e in &failure.errors {
                eprintln!("error: {e}");
            }
            eprintln!("invalid: {} error(s)", failure.errors.len());
            ExitCode::FAILURE
        }
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    if let Err(e) = init_logging(&args.log_level, args.log_format) {
        eprintln!("error: {e:#}");
        return ExitCode::from(EXIT_USAGE);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
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
    let cache = Arc::new(Cache::new());
    let reloader = Arc::new(Reloader::new(
        args.config.paths.clone(),
        LoadOptions {
            strict: args.config.strict,
        },
        Arc::clone(&cache),
    ));
    // Load before binding: a config that cannot load at start is a usage error.
    reloader.reload().map_err(|failure| {
        Failure::Usage(anyhow::anyhow!(
            "the configuration cannot be loaded, not starting: {failure}"
        ))
    })?;
    let listener = tokio::net::TcpListener::bind(args.xds_addr)
        .await
        .map_err(|e| {
            Failure::Runtime(anyhow::anyhow!(
                "cannot listen on --xds-addr {}: {e}",
                args.xds_addr
            ))
        })?;
    let local = listener
        .local_addr()
        .map_err(|e| Failure::Runtime(e.into()))?;
    tracing::info!(xds_addr = %local, "Serving xDS.");

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let watcher = tokio::spawn(Arc::clone(&reloader).watch(stopped(stop_rx.clone())));
    tokio::spawn(async move {
        signalled.await;
        let _ = stop_tx.send(true);
    });
    let served = crate::server::serve(listener, cache, stopped(stop_rx)).await;
    let _ = watcher.await;
    served.map_err(|e| Failure::Runtime(e.into()))
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
