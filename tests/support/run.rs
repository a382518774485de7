//! Running the `switchyard` binary the way a person does, for the command-line tests.

use std::process::{Command, Output};

/// `switchyard ARGS`, waited for.
pub fn switchyard(args: &[&str]) -> Output {
    Command::new(crate::switchyard_binary())
        .args(args)
        .output()
        .expect("runs")
}

/// What it printed to stderr.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `switchyard ARGS`, waited for: its exit code, and stdout then stderr as one text.
pub fn said(args: &[&str]) -> (Option<i32>, String) {
    let out = switchyard(args);
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The revision an `apply` or `rollback` says its change landed at (`applied at revision
/// N`), from what it printed.
pub fn applied_revision(said: &str) -> i64 {
    said.split("applied at revision ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no \"applied at revision N\" in: {said}"))
}

/// Send `signal` (`-STOP`, `-CONT`, ...) to process `pid`.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {signal} {pid}");
}

/// Whether process `pid` is stopped (state `T` in /proc).
pub fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next())
        })
        .is_some_and(|state| state == 'T')
}
