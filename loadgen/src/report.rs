//! What a run measured, as JSON (`-o json`) or a table.
//!
//! Must not: measure anything (`run` does).

use std::collections::BTreeMap;
use std::time::Duration;

use std::net::SocketAddr;

use serde::Serialize;

use crate::args::Protocol;

/// Percentiles of a set of durations, in milliseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Percentiles {
    pub count: usize,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Percentiles {
    /// The nearest-rank percentiles of `samples`.
    pub(crate) fn of(mut samples: Vec<Duration>) -> Percentiles {
        if samples.is_empty() {
            return Percentiles::default();
        }
        samples.sort();
        let at = |q: f64| {
            let i = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
            samples[i].as_secs_f64() * 1000.0
        };
        Percentiles {
            count: samples.len(),
            p50_ms: at(0.50),
            p90_ms: at(0.90),
            p99_ms: at(0.99),
            max_ms: at(1.0),
        }
    }
}

/// Responses and bytes of one type.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct TypeCount {
    pub responses: u64,
    pub bytes: u64,
}

/// The trigger and what followed it.
#[derive(Clone, Debug, Serialize)]
pub struct TriggerReport {
    pub command: String,
    pub exit_code: Option<i32>,
    /// Proxies that got at least one response after the trigger started.
    pub proxies_updated: usize,
    /// From the trigger's start to each updated proxy's last response.
    pub convergence: Percentiles,
    /// From the trigger's start to each proxy's stream opening again, for those whose stream
    /// ended after it (a server restart).
    pub reconnected: Percentiles,
    pub responses: BTreeMap<String, TypeCount>,
}

/// The server process, when `--server-pid` names it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ServerReport {
    pub rss_kib_before: u64,
    pub rss_kib_synced: u64,
    pub rss_kib_end: u64,
    /// The most the server's RSS reached by the end (VmHWM).
    pub rss_kib_peak: u64,
    /// CPU seconds (user + system) from the first connection to every proxy synced.
    pub cpu_s_to_sync: f64,
    /// CPU seconds from the trigger to the end of the run.
    pub cpu_s_after_trigger: f64,
}

/// What a run measured.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub server: SocketAddr,
    pub protocol: Protocol,
    pub clients: u32,
    pub connected: usize,
    pub synced: usize,
    pub reconnects: u64,
    pub connect_failures: u64,
    /// Streams the server ended at once with RESOURCE_EXHAUSTED (its admission rate),
    /// retried after the backoff.
    pub turned_away: u64,
    /// Time to establish each proxy's connection.
    pub connect: Percentiles,
    /// From a proxy's start to holding everything it asked for.
    pub first_full_config: Percentiles,
    /// From the first proxy's start until the last one synced.
    pub all_synced_after_s: Option<f64>,
    pub responses: BTreeMap<String, TypeCount>,
    pub trigger: Option<TriggerReport>,
    pub server_process: Option<ServerReport>,
    pub elapsed_s: f64,
    /// Why the run ended early, if it did.
    pub cut_short: Option<String>,
}

/// The report as a table.
pub fn table(report: &Report) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let p = |p: &Percentiles| {
        format!(
            "p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms (n={})",
            p.p50_ms, p.p90_ms, p.p99_ms, p.max_ms, p.count
        )
    };
    let _ = writeln!(
        out,
        "server {} ({:?}): {} proxies, {} connected, {} synced, {} reconnects, {} failed connects, {} streams turned away",
        report.server,
        report.protocol,
        report.clients,
        report.connected,
        report.synced,
        report.reconnects,
        report.connect_failures,
        report.turned_away
    );
    let _ = writeln!(out, "connect            {}", p(&report.connect));
    let _ = writeln!(out, "first full config  {}", p(&report.first_full_config));
    if let Some(s) = report.all_synced_after_s {
        let _ = writeln!(out, "all synced after   {s:.2} s");
    }
    let types = |map: &BTreeMap<String, TypeCount>| {
        map.iter()
            .map(|(k, v)| format!("{k} {} ({} KiB)", v.responses, v.bytes / 1024))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(out, "responses (all)    {}", types(&report.responses));
    if let Some(t) = &report.trigger {
        let _ = writeln!(
            out,
            "trigger            {:?} exited {:?}; {} proxies updated",
            t.command, t.exit_code, t.proxies_updated
        );
        let _ = writeln!(out, "convergence        {}", p(&t.convergence));
        if t.reconnected.count > 0 {
            let _ = writeln!(out, "reconnected        {}", p(&t.reconnected));
        }
        let _ = writeln!(out, "after the trigger  {}", types(&t.responses));
    }
    if let Some(s) = &report.server_process {
        let per = |kib: u64| {
            (kib.saturating_sub(s.rss_kib_before)) as f64 / report.connected.max(1) as f64
        };
        let _ = writeln!(
            out,
            "server RSS         {} KiB before, {} KiB synced ({:.1} KiB per proxy), {} KiB at the end, {} KiB at most",
            s.rss_kib_before,
            s.rss_kib_synced,
            per(s.rss_kib_synced),
            s.rss_kib_end,
            s.rss_kib_peak
        );
        let _ = writeln!(
            out,
            "server CPU         {:.2} s to sync, {:.2} s after the trigger",
            s.cpu_s_to_sync, s.cpu_s_after_trigger
        );
    }
    let _ = writeln!(out, "elapsed            {:.2} s", report.elapsed_s);
    if let Some(why) = &report.cut_short {
        let _ = writeln!(out, "cut short          {why}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let ms = |v: u64| Duration::from_millis(v);
        let p = Percentiles::of((1..=100).map(ms).collect());
        assert_eq!(
            (p.p50_ms, p.p90_ms, p.p99_ms, p.max_ms),
            (50.0, 90.0, 99.0, 100.0)
        );
        assert_eq!(Percentiles::of(vec![]).count, 0);
    }
}
