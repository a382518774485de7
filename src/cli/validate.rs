//! `switchyard validate`: load the snapshot files and report every problem, and with
//! `--envoy`, check each node group with the real Envoy (`crate::preflight`).
//!
//! Must not: serve or write anything.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::flags::ConfigArgs;
use super::EXIT_USAGE;
use crate::config::{self, LoadOptions};

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
    /// With `--envoy`, check what a node that may get inline private key material is sent
    /// (every node under `serve --insecure-serve-secrets`, a bound one under
    /// `--node-identity`). Without it, what any other node is sent: without inline keys
    /// (keys named by a path on the proxy's host go either way).
    #[arg(long, requires = "envoy")]
    pub with_key_material: bool,
}

pub(super) fn run(args: &ValidateArgs) -> ExitCode {
    let options = LoadOptions {
        allow_empty: true,
        ..args.config.load_options()
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
        let secrets = crate::resource::Secrets::serve_if(args.with_key_material);
        let verdicts = match crate::preflight::check(envoy, &config, args.envoy_timeout, secrets) {
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
        let inline_keys = config
            .files
            .iter()
            .flat_map(|f| &f.resources)
            .any(|r| r.has_private_material());
        if inline_keys && !args.with_key_material {
            eprintln!(
                "note: Envoy was given what a node that is not bound gets: without the inline \
                 private keys of these files, which go only to nodes bound by --node-identity \
                 (or to all with --insecure-serve-secrets). --with-key-material checks what \
                 those get; a key named by a path on the proxy's host goes to every node."
            );
        }
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
