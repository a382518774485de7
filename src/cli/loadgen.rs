//! `switchyard loadgen`: the simulated proxies of `switchyard_loadgen`, on a runtime of
//! their own, and the report printed.
//!
//! Must not: know how a proxy is simulated.

use std::process::ExitCode;

use super::{raise_file_limit, runtime, EXIT_USAGE};

/// `switchyard loadgen`.
pub(super) fn run(args: switchyard_loadgen::LoadgenArgs) -> ExitCode {
    let runtime = match runtime(tokio::runtime::Builder::new_multi_thread()) {
        Ok(r) => r,
        Err(code) => return code,
    };
    raise_file_limit();
    let json = args.output == switchyard_loadgen::ReportFormat::Json;
    let report = match runtime.block_on(switchyard_loadgen::run(args)) {
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
        print!("{}", switchyard_loadgen::table(&report));
    }
    if report.cut_short.is_some() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
