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
