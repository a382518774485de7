//! `switchyard validate`: load the snapshot files and report every problem, and with
//! `--envoy`, check each node group with the real Envoy (`crate::preflight`).
//!
//! Must not: serve or write anything.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::flags::ConfigArgs;
use super::output::{Finding, Format, Validation};
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
    /// How to print the result: `text` (diagnostics on stderr, the verdict on stdout),
    /// `json` (one document of schema `switchyard.validate/v1`, docs/output.md) or `github`
    /// (GitHub Actions annotations), on stdout.
    #[arg(long, short = 'o', value_enum, default_value_t = Format::Text)]
    pub output: Format,
    /// Validate what etcd holds instead of files: `etcd://HOST:PORT[,HOST:PORT...]/PREFIX`,
    /// every key under `PREFIX/` one snapshot document (keys starting with `.` aside), read
    /// at one revision (docs/etcd.md).
    #[arg(long, value_name = "URL", conflicts_with = "paths")]
    pub source: Option<String>,
    /// How long connecting to etcd and reading the prefix may take, each.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    pub source_timeout: Duration,
    #[command(flatten)]
    pub etcd: super::flags::EtcdArgs,
}

/// The configuration from `--config` files, or from `--source`: the documents at one etcd
/// revision (and the revision). Errors are printed, and the exit code returned.
fn load(
    args: &ValidateArgs,
    options: &LoadOptions,
) -> Result<(Result<config::Config, config::LoadFailure>, Option<i64>), ExitCode> {
    let Some(source) = &args.source else {
        if args.config.paths.is_empty() {
            eprintln!("error: name the snapshot: --config PATH, or --source URL");
            return Err(ExitCode::from(EXIT_USAGE));
        }
        return Ok((config::load(&args.config.paths, options), None));
    };
    let url: crate::source::EtcdUrl = source.parse().map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(EXIT_USAGE)
    })?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("error: cannot start a runtime: {e}");
            ExitCode::FAILURE
        })?;
    let timeout = args.source_timeout;
    let access = args.etcd.access().map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(EXIT_USAGE)
    })?;
    let snapshot = runtime
        .block_on(crate::source::etcd::connect_and_read(
            &url, &access, None, timeout,
        ))
        .map(|(_, snapshot)| snapshot)
        .map_err(|e| {
            // CI reading --output json gets a document saying why, as for a bad file.
            if args.output == Format::Text {
                eprintln!("error: {e}");
            } else {
                let mut result = Validation::new(0, 0);
                result.ok = false;
                result.findings.push(Finding::error(e.to_string()));
                return machine(args, &result);
            }
            ExitCode::FAILURE
        })?;
    Ok((
        config::load_documents(&snapshot.documents, options),
        Some(snapshot.revision),
    ))
}

/// Print a machine's result (`--output json` or `github`) and exit with `ok`'s code.
fn machine(args: &ValidateArgs, result: &Validation) -> ExitCode {
    match args.output {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(result).unwrap_or_default()
        ),
        _ => {
            for f in &result.findings {
                println!("{}", f.annotation());
            }
        }
    }
    if result.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

pub(super) fn run(args: &ValidateArgs) -> ExitCode {
    let options = LoadOptions {
        allow_empty: true,
        ..args.config.load_options()
    };
    let text = args.output == Format::Text;
    let (loaded, revision) = match load(args, &options) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let config = match loaded {
        Ok(config) => config,
        Err(failure) if !text => {
            let mut result = Validation::new(0, 0);
            result.ok = false;
            result
                .findings
                .extend(failure.errors.iter().map(|e| Finding::of(e, "error")));
            result
                .findings
                .extend(failure.warnings.iter().map(|w| Finding::of(w, "warning")));
            return machine(args, &result);
        }
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
    let mut result = Validation::new(config.files.len(), config.resource_count());
    result
        .findings
        .extend(config.warnings.iter().map(|w| Finding::of(w, "warning")));
    if text {
        for w in &config.warnings {
            eprintln!("warning: {w}");
        }
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
                // A result, so on stdout with the verdict; what is wrong goes to stderr.
                Ok(()) if text => println!("envoy: OK: {}", v.group),
                Ok(()) => result.envoy_accepted.push(v.group.to_string()),
                Err(message) => {
                    rejected += 1;
                    if text {
                        eprintln!("error: Envoy rejects the {}: {message}", v.group);
                    }
                    result
                        .findings
                        .push(Finding::rejected_group(&v.group.to_string(), message));
                }
            }
        }
    }
    if !text {
        result.ok = rejected == 0;
        return machine(args, &result);
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
    let read = match revision {
        Some(revision) => format!(
            "{} document(s) at etcd revision {revision}",
            config.files.len()
        ),
        None => format!("{} file(s)", config.files.len()),
    };
    println!(
        "OK: {read}, {} resource(s), {} warning(s)",
        config.resource_count(),
        config.warnings.len()
    );
    ExitCode::SUCCESS
}
