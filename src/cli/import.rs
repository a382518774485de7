//! `switchyard import`: an Envoy bootstrap's static resources to snapshot files and a
//! bootstrap that takes them over ADS (the work is `crate::import`'s).
//!
//! Must not: write anything unless the whole import succeeded and the files it would write
//! load.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::flags::DescriptorArgs;
use crate::config;

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
    /// How to print the result: `text`, or `json` (schema `switchyard.import/v1`,
    /// docs/output.md) on stdout.
    #[arg(long, short = 'o', value_enum, default_value_t = super::output::TextOrJson::Text)]
    pub output: super::output::TextOrJson,
}

/// `import --output json`: print `result` and exit by it.
fn json(mut result: super::output::ImportOutput, ok: bool) -> ExitCode {
    result.ok = ok;
    println!(
        "{}",
        serde_json::to_string_pretty(&result).unwrap_or_default()
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `switchyard import`: the files written only when the whole import succeeded and the
/// snapshot files load.
pub(super) fn run(args: &ImportArgs) -> ExitCode {
    let options = crate::import::ImportOptions {
        split_endpoints: args.split_endpoints,
        split_routes: args.split_routes,
        xds_address: args.xds_address.clone(),
        delta: args.delta,
        node_id: args.node_id.clone(),
        node_cluster: args.node_cluster.clone(),
    };
    let machine = args.output == super::output::TextOrJson::Json;
    let mut result = super::output::ImportOutput::new();
    let imported = match crate::import::import(&args.bootstrap, &options) {
        Ok(imported) => imported,
        Err(e) if machine => {
            result.errors.push(e.to_string());
            return json(result, false);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    // What is written must load: checked before anything is written.
    for (name, text) in &imported.files {
        let limit = imported
            .re2_max_program_size
            .unwrap_or(config::checks::re2::DEFAULT_MAX_PROGRAM_SIZE);
        if let Err(file_errors) = config::load_text_judged(std::path::Path::new(name), text, limit)
        {
            for e in file_errors {
                if !machine {
                    eprintln!("error: the imported {e}");
                }
                result.errors.push(format!("the imported {e}"));
            }
        }
    }
    if !result.errors.is_empty() {
        if machine {
            return json(result, false);
        }
        eprintln!("invalid: the imported files do not load; nothing written");
        return ExitCode::FAILURE;
    }
    let written = match crate::import::write(&args.out, &imported, args.force) {
        Ok(written) => written,
        Err(e) if machine => {
            result.errors.push(e.to_string());
            return json(result, false);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let limit = imported
        .re2_max_program_size
        .map(|n| format!(" --re2-max-program-size {n}"))
        .unwrap_or_default();
    let next = format!(
        "switchyard serve --config {}{limit} (xDS on {}); envoy -c {}",
        args.out.join(crate::import::SNAPSHOT_DIR).display(),
        args.xds_address,
        args.out.join(crate::import::BOOTSTRAP_FILE).display()
    );
    if machine {
        result.notes = imported.notes.iter().map(ToString::to_string).collect();
        result.written = written.iter().map(|p| p.display().to_string()).collect();
        result.next = Some(next);
        return json(result, true);
    }
    for note in &imported.notes {
        eprintln!("note: {note}");
    }
    for path in &written {
        println!("wrote {}", path.display());
    }
    println!("next: {next}");
    ExitCode::SUCCESS
}
