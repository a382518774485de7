//! The command line, the binary's edge: one module per subcommand (`serve`, `validate`,
//! `diff`, `status`, `rollout`, `import`, `loadgen`), the flag groups several of them take
//! (`flags`), and the client of a running server's admin API (`admin_api`).
//!
//! Owns: parsing the command line, installing `--descriptor-set`s before anything reads a
//! file, and exit codes: 0 success; 1 a failure at run time, an invalid config under
//! `validate`, or changes under `diff`; 2 `status` found a node NACKing, or `diff` cannot
//! load a side; 3 `status` found the server's last load failed; 64 (EX_USAGE) bad flags or a
//! config that cannot load at start. Errors here are `anyhow` and end in an exit code.
//!
//! Must not: hold what a command does beyond turning flags into the library's options and
//! its results into text and an exit code (loading is `config`'s, serving `daemon`'s, the
//! diff `diff`'s, the simulated proxies `switchyard_loadgen`'s).

mod admin_api;
mod apply;
pub mod config_dump;
mod diff;
mod flags;
mod import;
mod loadgen;
mod output;
mod rollout;
mod serve;
pub mod status;
mod validate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config;
pub use apply::{ApplyArgs, ExportArgs, HistoryArgs, RollbackArgs};
pub use diff::DiffArgs;
pub use flags::{
    AdminAccess, AdminArgs, AdminToken, ConfigArgs, DescriptorArgs, DEFAULT_ADMIN_ADDR,
};
pub use import::ImportArgs;
pub use rollout::{RolloutAction, RolloutArgs};
pub use serve::{
    AdminServerArgs, CanaryArgs, ConnectionAgeFlag, LimitArgs, LogFormat, ServeArgs,
    StreamRateFlag, Switch, XdsTlsArgs,
};
pub use status::{rollout_text, status_table, Output, StatusArgs};
pub use validate::ValidateArgs;

/// Exit code for bad flags or a config that cannot load at start (sysexits EX_USAGE).
pub const EXIT_USAGE: u8 = 64;

/// `switchyard --version`: this release and the Envoy API it reads files with.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (Envoy API ",
    env!("SWITCHYARD_ENVOY_API_VERSION"),
    ")"
);

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
    /// Show every connected proxy's sync state per type, from a running server's admin API
    /// (from etcd, every replica's); exit 0 when every connected node runs the newest loaded
    /// generation and no rollout is on, 2 a proxy NACKs, 3 the last config load failed, 4 a
    /// rollout is in progress, 5 a rollout halted or was aborted, 6 --wait timed out, 7 a
    /// node is still updating, 8 the source (etcd) does not answer, 9 the replica asked cannot
    /// follow the other replicas' summaries (its view is stale), 11 a task of the replica
    /// stopped and is being started again, 1 the server cannot be asked.
    Status(StatusArgs),
    /// Show the resources one connected proxy holds, as the server serves them to it
    /// (redacted as the server redacts), per type, with the version it ACKed and any newer
    /// one in flight; exit 1 when the node is not connected or the server cannot be asked.
    ConfigDump(config_dump::ConfigDumpArgs),
    /// A staged rollout on a running server (serve --canary-id/--canary-cluster): show it,
    /// promote it to every node now, or abort it (the canaries go back to the stable
    /// generation); exit 1 when there is none or the server cannot be asked, and `status` 5
    /// when the rollout halted.
    Rollout(RolloutArgs),
    /// Load an xDS server with simulated Envoys (each its own connection and ADS stream),
    /// run a trigger command, and report connect and sync times, convergence, responses and
    /// the server's memory and CPU; exit 1 when the run did not complete.
    Loadgen(Box<switchyard_loadgen::LoadgenArgs>),
    /// Turn an Envoy bootstrap's static resources into snapshot files (OUT/snapshot/), and
    /// write a bootstrap for the same Envoy that gets them from Switchyard over ADS
    /// (OUT/envoy.yaml); exit 1 when the bootstrap cannot be imported.
    Import(ImportArgs),
    /// Write a directory of snapshot files to an etcd prefix (--source) in one transaction,
    /// after checking them as serve would and showing the change; refused (nothing written)
    /// when the prefix changed since it was read. Exit 0 when applied (or nothing to apply),
    /// 1 when invalid, refused or etcd does not answer.
    Apply(ApplyArgs),
    /// Write the documents under an etcd prefix (--source) back as files into a directory.
    Export(ExportArgs),
    /// Write back the documents an etcd prefix (--source) held at an earlier revision, as a
    /// new change through apply's checks, diff and guard; exit codes as apply's.
    Rollback(RollbackArgs),
    /// List the changes of the documents under an etcd prefix (--source), newest first: each
    /// revision, what changed (by document and by resource) and, for an apply, when.
    History(HistoryArgs),
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
        Command::Apply(args) => &args.write.descriptors.sets,
        Command::Rollback(args) => &args.write.descriptors.sets,
        _ => &[],
    };
    if let Err(e) = config::descriptors::install(sets) {
        eprintln!("error: --descriptor-set: {e}");
        return ExitCode::from(EXIT_USAGE);
    }
    match cli.command {
        Command::Validate(args) => validate::run(&args),
        Command::Diff(args) => diff::run(&args),
        Command::Rollout(args) => rollout::run(&args),
        Command::Serve(args) => serve::run(*args),
        Command::Status(args) => status::run(&args),
        Command::ConfigDump(args) => config_dump::run(&args),
        Command::Loadgen(args) => loadgen::run(*args),
        Command::Import(args) => import::run(&args),
        Command::Apply(args) => apply::run_apply(&args),
        Command::Export(args) => apply::run_export(&args),
        Command::Rollback(args) => apply::run_rollback(&args),
        Command::History(args) => apply::run_history(&args),
    }
}

/// A tokio runtime from `builder` (with I/O and time), or the exit code after saying why not.
pub(super) fn runtime(
    mut builder: tokio::runtime::Builder,
) -> Result<tokio::runtime::Runtime, ExitCode> {
    builder.enable_all().build().map_err(|e| {
        eprintln!("error: cannot start the async runtime: {e}");
        ExitCode::FAILURE
    })
}

/// Each connection and watched file takes a descriptor: raise the soft RLIMIT_NOFILE to the
/// hard limit, so the fleet is bounded by `--max-connections`, not by a low default.
#[cfg(unix)]
pub(super) fn raise_file_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::info!(limit, "File descriptor limit (RLIMIT_NOFILE) raised."),
        Err(e) => {
            tracing::warn!(error = %e, "Cannot raise the file descriptor limit (RLIMIT_NOFILE).")
        }
    }
}

#[cfg(not(unix))]
pub(super) fn raise_file_limit() {}
