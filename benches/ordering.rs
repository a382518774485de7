//! Make-before-break at length: `cargo bench --bench ordering`.
//!
//! The suite runs the ordering's checks short; this runs them long:
//! 1. the unit properties of the ordering over random schedules (a simulated Envoy, SotW and
//!    delta; `p29_p30_random_schedules_*`, with and without reconnects), with
//!    `ORDERING_MODEL_CASES` schedules per property and flavor (default 20,000; the suite
//!    runs 300);
//! 2. the storm end to end (`tests/storm_e2e.rs`: two replicas, three real Envoys, overlapping
//!    edits and replica kills, a request loop per Envoy), `ORDERING_STORMS` times (default 3),
//!    each with `ORDERING_STORM_EDITS` edits (default 60; the suite runs 14) and a seed of
//!    its own, printed (`STORM_SEED` replays one under `cargo test --test storm_e2e`).
//!
//! Both run through `cargo test --release`: the properties live with the unit tests whose
//! simulated Envoy they share, and the storm needs the test support and Envoy 1.40 on `PATH`
//! (`./scripts/test` installs it into `.venv`; put `.venv/bin` first on `PATH`). Every run is
//! bounded (`ORDERING_LIMIT_SECONDS` each, default 1,800) and the bench fails if one fails.
//! Results and method: docs/benchmarks.md, "Make-before-break at length".

use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Run `cargo test --release ARGS` with `envs`, at most `limit`; print the lines of its
/// output that `keep` picks, and return how it ended and how long it took.
fn cargo_test(
    args: &[&str],
    envs: &[(&str, String)],
    limit: Duration,
    keep: impl Fn(&str) -> bool,
) -> (Option<ExitStatus>, Duration) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let log = std::env::temp_dir().join(format!("switchyard-ordering-{}.log", std::process::id()));
    let out = std::fs::File::create(&log).expect("a log file");
    let err = out.try_clone().expect("a log file");
    let started = Instant::now();
    let mut child = Command::new(cargo)
        .args(["test", "--release"])
        .args(args)
        .args(["--", "--nocapture", "--test-threads=1"])
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("cargo runs");
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let took = started.elapsed();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    for line in text.lines().filter(|l| keep(l)) {
        println!("    {line}");
    }
    if status.is_none_or(|s| !s.success()) {
        println!("    (the whole output: {})", log.display());
    } else {
        let _ = std::fs::remove_file(&log);
    }
    (status, took)
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken.
    let cases = env_or("ORDERING_MODEL_CASES", 20_000);
    let storms = env_or("ORDERING_STORMS", 3);
    let edits = env_or("ORDERING_STORM_EDITS", 60);
    let limit = Duration::from_secs(env_or("ORDERING_LIMIT_SECONDS", 1_800).min(7_200));
    let mut failed = Vec::new();

    println!("1. the ordering's properties, {cases} schedules per property and flavor");
    let (status, took) = cargo_test(
        &["--lib", "random_schedules"],
        &[("SWITCHYARD_MODEL_CASES", cases.to_string())],
        limit,
        |l| l.contains("schedules:") || l.starts_with("test ") || l.contains("test result"),
    );
    println!("    {:.0} s", took.as_secs_f64());
    if status.is_none_or(|s| !s.success()) {
        failed.push("the properties".to_string());
    }

    for run in 0..storms {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(run + 1, |d| d.as_nanos() as u64 ^ run);
        println!("2.{} the storm, {edits} edits, seed {seed}", run + 1);
        let (status, took) = cargo_test(
            &[
                "--test",
                "storm_e2e",
                "e2e_storm_of_overlapping_edits_and_replica_kills_fails_no_request",
            ],
            &[
                ("STORM_SEED", seed.to_string()),
                ("STORM_EDITS", edits.to_string()),
            ],
            limit,
            |l| {
                l.starts_with("storm (")
                    || l.starts_with("storm:")
                    || l.contains("test result")
                    || l.contains("panicked")
            },
        );
        println!("    {:.0} s", took.as_secs_f64());
        if status.is_none_or(|s| !s.success()) {
            failed.push(format!("the storm with seed {seed}"));
        }
    }
    if !failed.is_empty() {
        eprintln!("failed: {}", failed.join(", "));
        std::process::exit(1);
    }
}
