//! `switchyard diff`: what a change of the snapshot files does to each node group, against
//! other files or what a running server serves (the comparison is `crate::diff`'s).
//!
//! Must not: change anything on the server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::admin_api::{admin_at, admin_call};
use super::flags::{AdminAccess, DescriptorArgs};
use super::output::DiffFormat;
use super::runtime;
use crate::config::{self, LoadOptions};

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
    /// How to print what changes: `text`, `json` (schema `switchyard.diff/v1`,
    /// docs/output.md), `github` (GitHub Actions notices) or `markdown` (a summary for a pull
    /// request's comment), on stdout. A side that does not load is said on stderr.
    #[arg(long, short = 'o', value_enum, default_value_t = DiffFormat::Text)]
    pub output: DiffFormat,
    /// In text: list every resource and node group; without it, past 20 of a kind the
    /// first 20 and how many more (the JSON always lists every one).
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

/// Exit code of `switchyard diff` when something changes.
pub const EXIT_DIFF_CHANGES: u8 = 1;
/// Exit code of `switchyard diff` when either side does not load.
pub const EXIT_DIFF_ERROR: u8 = 2;

/// `switchyard diff`: load both sides (or ask the server for its side), compare them per
/// node group.
pub(super) fn run(args: &DiffArgs) -> ExitCode {
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
    match args.output {
        DiffFormat::Text => print!("{}", report.text(args.verbose)),
        DiffFormat::Json => println!("{}", super::output::diff_json(&report)),
        DiffFormat::Github => print!("{}", super::output::diff_annotations(&report)),
        DiffFormat::Markdown => print!("{}", super::output::diff_markdown(&report)),
    }
    if report.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_DIFF_CHANGES)
    }
}
