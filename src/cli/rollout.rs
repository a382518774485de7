//! `switchyard rollout status|promote|abort`: a staged rollout on a running server, through
//! its admin API.
//!
//! Must not: decide anything about the rollout (the server's `rollout` does).

use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::admin_api::{admin_call, admin_target, fetch_status};
use super::flags::AdminArgs;
use super::runtime;
use super::status::rollout_text;

#[derive(Debug, Args)]
pub struct RolloutArgs {
    #[command(subcommand)]
    pub action: RolloutAction,
}

#[derive(Debug, Subcommand)]
pub enum RolloutAction {
    /// The rollout in progress: its state, the stable and candidate generations, and which
    /// generation each node has.
    Status(RolloutStatusArgs),
    /// Serve the candidate to every node now.
    Promote(AdminArgs),
    /// Stop the rollout: the canaries go back to the stable generation.
    Abort(AdminArgs),
}

#[derive(Debug, Args)]
pub struct RolloutStatusArgs {
    #[command(flatten)]
    pub admin: AdminArgs,
    /// How to print it: `text`, or `json` (schema `switchyard.rollout/v1`, docs/output.md).
    #[arg(long, short = 'o', value_enum, default_value_t = super::output::TextOrJson::Text)]
    pub output: super::output::TextOrJson,
}

/// `switchyard rollout`: ask a running server about its rollout, or act on it.
pub(super) fn run(args: &RolloutArgs) -> ExitCode {
    let runtime = match runtime(tokio::runtime::Builder::new_current_thread()) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let admin = match &args.action {
        RolloutAction::Status(s) => &s.admin,
        RolloutAction::Promote(a) | RolloutAction::Abort(a) => a,
    };
    let (target, token) = match admin_target(admin) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let path = match &args.action {
        RolloutAction::Status(status_args) => {
            let (status, _) = match runtime.block_on(fetch_status(&target, token.as_deref())) {
                Ok(found) => found,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    return ExitCode::FAILURE;
                }
            };
            match status_args.output {
                super::output::TextOrJson::Text => print!("{}", rollout_text(&status)),
                super::output::TextOrJson::Json => println!(
                    "{}",
                    serde_json::to_string_pretty(&super::output::RolloutOutput::of(&status))
                        .unwrap_or_default()
                ),
            }
            // Halted: the candidate will not reach every node without someone acting.
            if status
                .rollout
                .as_ref()
                .is_some_and(|r| r.state == crate::admin::RolloutState::Halted)
            {
                return ExitCode::from(super::status::EXIT_ROLLOUT_STOPPED);
            }
            return ExitCode::SUCCESS;
        }
        RolloutAction::Promote(_) => "/rollout/promote",
        RolloutAction::Abort(_) => "/rollout/abort",
    };
    let answered = runtime.block_on(admin_call(
        &target,
        token.as_deref(),
        reqwest::Method::POST,
        path,
    ));
    match answered {
        Ok((code, body, _)) if code.is_success() => {
            print!("{body}");
            ExitCode::SUCCESS
        }
        Ok((_, body, url)) => {
            eprintln!("error: {url}: {}", body.trim());
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
