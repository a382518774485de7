//! A run: N simulated proxies, each over its own connection and ADS stream, reconnecting
//! with what it holds after Envoy's jittered backoff; the trigger command; the server's RSS
//! and CPU from /proc; and the report put together.
//!
//! Must not: decide what a proxy asks for (`proxy`) or how a request is encoded (`ads`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use prost::Message;
use tokio::sync::{mpsc, watch};

use crate::ads::{node_extensions, Ads, DeltaAds, OnTheWire, SotwAds};
use crate::args::{LoadgenArgs, Protocol};
use crate::proxy::{short, Outgoing, Proxy, TYPES};
use crate::report::{Percentiles, Report, ServerReport, TriggerReport, TypeCount};

/// What every proxy task shares.
#[derive(Default)]
struct Tally {
    connected: AtomicUsize,
    synced: AtomicUsize,
    responses: AtomicUsize,
    reconnects: AtomicUsize,
    connect_failures: AtomicUsize,
    turned_away: AtomicUsize,
    by_type: Mutex<BTreeMap<&'static str, TypeCount>>,
    after_trigger: Mutex<BTreeMap<&'static str, TypeCount>>,
    /// Set when the trigger starts.
    trigger_at: Mutex<Option<Instant>>,
    last_response: Mutex<Option<Instant>>,
    /// Set (to true) when the run stops; every proxy waits on it without a timer.
    stop: watch::Sender<bool>,
}

impl Tally {
    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    fn count(&self, kind: &str, bytes: usize) -> Option<Instant> {
        let now = Instant::now();
        self.responses.fetch_add(1, Ordering::Relaxed);
        let kind = TYPES
            .iter()
            .copied()
            .find(|t| *t == kind)
            .unwrap_or("other");
        let add = |map: &Mutex<BTreeMap<&'static str, TypeCount>>| {
            let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
            let entry = map.entry(kind).or_default();
            entry.responses += 1;
            entry.bytes += bytes as u64;
        };
        add(&self.by_type);
        let triggered = *self.trigger_at.lock().unwrap_or_else(|p| p.into_inner());
        if triggered.is_some() {
            add(&self.after_trigger);
            *self.last_response.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
            return Some(now);
        }
        None
    }
}

/// What one proxy saw.
#[derive(Debug, Default)]
struct ProxyRun {
    connect: Option<Duration>,
    first_full: Option<Duration>,
    synced_at: Option<Instant>,
    last_after_trigger: Option<Instant>,
    /// When its stream opened again after the trigger (a server restart, say).
    reopened_after_trigger: Option<Instant>,
}

fn by_type(map: &Mutex<BTreeMap<&'static str, TypeCount>>) -> BTreeMap<String, TypeCount> {
    map.lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(k, v)| (short(k).to_string(), *v))
        .collect()
}

/// Run one simulated proxy until the run stops: connect, stream, reconnect (with what it
/// holds) when the stream ends.
async fn run_proxy(
    index: u32,
    args: Arc<LoadgenArgs>,
    extensions: bytes::Bytes,
    tally: Arc<Tally>,
) -> ProxyRun {
    let node = Node {
        id: format!("{}-{index}", args.node_prefix),
        cluster: args.node_cluster.clone(),
        user_agent_name: "switchyard-loadgen".into(),
        ..Default::default()
    };
    let mut proxy = Proxy::new(node, args.protocol, args.nack_fraction);
    let mut run = ProxyRun::default();
    let started = Instant::now();
    let mut backoff = Backoff::new(index);
    while !tally.stopped() {
        let connecting = Instant::now();
        let endpoint =
            match tonic::transport::Endpoint::from_shared(format!("http://{}", args.xds_addr)) {
                Ok(e) => e.connect_timeout(Duration::from_secs(10)),
                Err(_) => return run,
            };
        let channel = match endpoint.connect().await {
            Ok(channel) => channel,
            Err(_) => {
                tally.connect_failures.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(backoff.next()).await;
                continue;
            }
        };
        if run.connect.is_none() {
            run.connect = Some(connecting.elapsed());
            tally.connected.fetch_add(1, Ordering::Relaxed);
        }
        let mut client = tonic::client::Grpc::new(channel).max_decoding_message_size(256 << 20);
        let stream = (
            &mut client,
            &extensions,
            &mut proxy,
            &*tally,
            &mut run,
            &mut backoff,
        );
        let ended = match args.protocol {
            Protocol::Sotw => ads_stream::<SotwAds>(stream, started).await,
            Protocol::Delta => ads_stream::<DeltaAds>(stream, started).await,
        };
        if ended && !tally.stopped() {
            tally.reconnects.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(backoff.next()).await;
        }
    }
    run
}

/// Envoy's retry backoff for its xDS stream (`JitteredExponentialBackOffStrategy`, 500 ms
/// doubling to 30 s): each wait is drawn from zero to the current ceiling, and a response
/// on the stream starts it over. The draw is a hash of the proxy's index and the attempt,
/// so runs repeat.
#[derive(Debug)]
struct Backoff {
    seed: u64,
    attempt: u32,
}

impl Backoff {
    const BASE: Duration = Duration::from_millis(500);
    const MAX: Duration = Duration::from_secs(30);

    fn new(index: u32) -> Backoff {
        Backoff {
            seed: u64::from(index),
            attempt: 0,
        }
    }

    /// The wait before the next attempt.
    fn next(&mut self) -> Duration {
        let ceiling = Self::BASE
            .saturating_mul(1 << self.attempt.min(16))
            .min(Self::MAX);
        self.attempt += 1;
        // splitmix64 of (seed, attempt).
        let mut z = (self.seed << 32 | u64::from(self.attempt)).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let millis = u64::try_from(ceiling.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        Duration::from_millis(z % millis)
    }

    fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// After a response: note when the proxy synced, and when it last heard after the trigger.
fn note(proxy: &Proxy, tally: &Tally, run: &mut ProxyRun, started: Instant, at: Option<Instant>) {
    if run.first_full.is_none() && proxy.synced() {
        run.first_full = Some(started.elapsed());
        run.synced_at = Some(Instant::now());
        tally.synced.fetch_add(1, Ordering::Relaxed);
    }
    if at.is_some() {
        run.last_after_trigger = at;
    }
}

/// A stream opened: note it if that is after the trigger.
fn reopened(tally: &Tally, run: &mut ProxyRun) {
    let triggered = tally
        .trigger_at
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .is_some();
    if triggered && run.reopened_after_trigger.is_none() {
        let now = Instant::now();
        run.reopened_after_trigger = Some(now);
        // Activity, for --settle: the run waits for reconnects as for responses.
        *tally
            .last_response
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(now);
    }
}

/// What one ADS stream works with: the connection, the node's extensions, the proxy, the
/// tally, the proxy's run and its backoff.
type StreamParts<'a> = (
    &'a mut tonic::client::Grpc<tonic::transport::Channel>,
    &'a bytes::Bytes,
    &'a mut Proxy,
    &'a Tally,
    &'a mut ProxyRun,
    &'a mut Backoff,
);

/// One ADS stream, until it ends (true) or the run stops (false). A stream the server turns
/// away at once (RESOURCE_EXHAUSTED: its admission rate) is counted, and is not a reconnect.
async fn ads_stream<A: Ads>(
    (client, extensions, proxy, tally, run, backoff): StreamParts<'_>,
    started: Instant,
) -> bool {
    let (tx, rx) = mpsc::unbounded_channel();
    let send = |out: Vec<Outgoing>| {
        for request in out
            .into_iter()
            .filter_map(|o| A::on_the_wire(o, extensions))
        {
            let _ = tx.send(request);
        }
    };
    send(proxy.open());
    let requests = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
    if client.ready().await.is_err() {
        return true;
    }
    let codec = tonic_prost::ProstCodec::<OnTheWire<A::Request>, A::Response>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(A::PATH);
    let Ok(response) = client
        .streaming(tonic::Request::new(requests), path, codec)
        .await
    else {
        return true;
    };
    let was_reopened = run.reopened_after_trigger;
    reopened(tally, run);
    let mut responses = response.into_inner();
    let mut stop = tally.stop.subscribe();
    loop {
        let message = tokio::select! {
            m = responses.message() => m,
            _ = stop.wait_for(|stopped| *stopped) => return false,
        };
        match message {
            Ok(Some(response)) => {
                backoff.reset();
                let at = tally.count(A::type_url(&response), response.encoded_len());
                send(A::apply(proxy, &response));
                note(proxy, tally, run, started, at);
            }
            Err(status) if status.code() == tonic::Code::ResourceExhausted => {
                tally.turned_away.fetch_add(1, Ordering::Relaxed);
                run.reopened_after_trigger = was_reopened;
                return true;
            }
            _ => return true,
        }
    }
}

/// A process's CPU seconds (user + system), resident KiB and peak resident KiB, from /proc.
fn process_usage(pid: u32) -> Option<(f64, u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces) start at field 3.
    let rest = stat.rsplit_once(") ")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i - 3)?.parse::<f64>().ok();
    // /proc reports CPU time in USER_HZ, 100 on Linux.
    let cpu = (ticks(14)? + ticks(15)?) / 100.0;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Some((cpu, kib("VmRSS:"), kib("VmHWM:")))
}

/// Run the load: every proxy connects and syncs, the trigger runs, the proxies converge;
/// then the report. Errors are for what stops a run from starting.
pub async fn run(args: LoadgenArgs) -> Result<Report, LoadgenError> {
    if !args.xds_addr.ip().is_loopback() && !args.allow_remote {
        return Err(LoadgenError::Remote(args.xds_addr));
    }
    if let Some(pid) = args.server_pid {
        if process_usage(pid).is_none() {
            return Err(LoadgenError::NoProcess(pid));
        }
    }
    let args = Arc::new(args);
    let tally = Arc::new(Tally::default());
    let begun = Instant::now();
    let before = args.server_pid.and_then(process_usage);
    let mut proxies = Vec::new();
    let extensions = node_extensions(args.node_extensions);
    for i in 0..args.clients {
        proxies.push(tokio::spawn(run_proxy(
            i,
            Arc::clone(&args),
            extensions.clone(),
            Arc::clone(&tally),
        )));
    }
    let progress = Progress::new(&args, &tally);
    let deadline = begun + args.max_time;
    let mut cut_short = None;
    while tally.synced.load(Ordering::Relaxed) < args.clients as usize {
        if Instant::now() >= deadline {
            cut_short = Some(format!(
                "not every proxy synced within --max-time {}",
                humantime::format_duration(args.max_time)
            ));
            break;
        }
        progress.say("syncing");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    progress.say("synced");
    let all_synced_after = cut_short.is_none().then(|| begun.elapsed().as_secs_f64());
    let at_sync = args.server_pid.and_then(process_usage);

    let mut trigger = None;
    if let (Some(command), None) = (&args.trigger, &cut_short) {
        let (exit_code, started, settled) =
            run_trigger(command, &args, &tally, &progress, deadline).await?;
        cut_short = settled;
        trigger = Some((command.clone(), exit_code, started));
    }
    progress.end();
    let at_end = args.server_pid.and_then(process_usage);
    tally.stop.send_replace(true);
    let mut runs = Vec::new();
    for p in proxies {
        if let Ok(run) = p.await {
            runs.push(run);
        }
    }
    let trigger = trigger.map(|(command, exit_code, started)| TriggerReport {
        command,
        exit_code,
        proxies_updated: runs
            .iter()
            .filter(|r| r.last_after_trigger.is_some())
            .count(),
        convergence: Percentiles::of(since(&runs, started, |r| r.last_after_trigger)),
        reconnected: Percentiles::of(since(&runs, started, |r| r.reopened_after_trigger)),
        responses: by_type(&tally.after_trigger),
    });
    let server_process = match (before, at_sync, at_end) {
        (Some(b), Some(s), Some(e)) => Some(ServerReport {
            rss_kib_before: b.1,
            rss_kib_synced: s.1,
            rss_kib_end: e.1,
            rss_kib_peak: e.2,
            cpu_s_to_sync: s.0 - b.0,
            cpu_s_after_trigger: e.0 - s.0,
        }),
        _ => None,
    };
    Ok(Report {
        server: args.xds_addr,
        protocol: args.protocol,
        clients: args.clients,
        connected: tally.connected.load(Ordering::Relaxed),
        synced: tally.synced.load(Ordering::Relaxed),
        reconnects: tally.reconnects.load(Ordering::Relaxed) as u64,
        connect_failures: tally.connect_failures.load(Ordering::Relaxed) as u64,
        turned_away: tally.turned_away.load(Ordering::Relaxed) as u64,
        connect: Percentiles::of(runs.iter().filter_map(|r| r.connect).collect()),
        first_full_config: Percentiles::of(runs.iter().filter_map(|r| r.first_full).collect()),
        all_synced_after_s: all_synced_after,
        responses: by_type(&tally.by_type),
        trigger,
        server_process,
        elapsed_s: begun.elapsed().as_secs_f64(),
        cut_short,
    })
}

/// Why a run did not start or could not go on.
#[derive(Debug, thiserror::Error)]
pub enum LoadgenError {
    #[error("--xds-addr {0} is not on this host; give --allow-remote to load a remote server")]
    Remote(std::net::SocketAddr),
    #[error("--server-pid {0}: no such process to read in /proc")]
    NoProcess(u32),
    #[error("cannot run the trigger {command:?}: {source}")]
    Trigger {
        command: String,
        source: std::io::Error,
    },
    #[error("the trigger's task failed: {0}")]
    TriggerTask(#[from] tokio::task::JoinError),
}

/// The time from `started` to the instant `at` picks of each proxy's run, for those that
/// have one.
fn since(
    runs: &[ProxyRun],
    started: Instant,
    at: impl Fn(&ProxyRun) -> Option<Instant>,
) -> Vec<Duration> {
    runs.iter()
        .filter_map(at)
        .map(|at| at.saturating_duration_since(started))
        .collect()
}

/// Run the trigger command, then wait until no response came for --settle (or the run's
/// deadline): its exit code, when it started, and why the run was cut short, if it was.
async fn run_trigger(
    command: &str,
    args: &LoadgenArgs,
    tally: &Tally,
    progress: &Progress<'_>,
    deadline: Instant,
) -> Result<(Option<i32>, Instant, Option<String>), LoadgenError> {
    let started = Instant::now();
    *tally.trigger_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(started);
    let shell = command.to_string();
    let status = tokio::task::spawn_blocking(move || {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(shell)
            .status()
    })
    .await?
    .map_err(|source| LoadgenError::Trigger {
        command: command.to_string(),
        source,
    })?;
    // Settle: no response for --settle after the trigger ended (or the bound).
    loop {
        let last = *tally
            .last_response
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let quiet_since = last.unwrap_or(started).max(started);
        if quiet_since.elapsed() >= args.settle {
            return Ok((status.code(), started, None));
        }
        if Instant::now() >= deadline {
            let why = "the proxies were still getting responses at --max-time";
            return Ok((status.code(), started, Some(why.into())));
        }
        progress.say("after the trigger");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A progress line on stderr: rewritten in place on a terminal, else one line every 5 s.
struct Progress<'a> {
    args: &'a LoadgenArgs,
    tally: &'a Tally,
    terminal: bool,
    last_line: Mutex<Instant>,
}

impl<'a> Progress<'a> {
    fn new(args: &'a LoadgenArgs, tally: &'a Tally) -> Progress<'a> {
        Progress {
            args,
            tally,
            terminal: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            last_line: Mutex::new(Instant::now()),
        }
    }

    fn say(&self, phase: &str) {
        let (tally, clients) = (self.tally, self.args.clients);
        let line = format!(
            "{phase}: connected {}/{clients}, synced {}/{clients}, responses {}",
            tally.connected.load(Ordering::Relaxed),
            tally.synced.load(Ordering::Relaxed),
            tally.responses.load(Ordering::Relaxed)
        );
        if self.terminal {
            eprint!("\r{line}   ");
        } else {
            let mut last = self.last_line.lock().unwrap_or_else(|p| p.into_inner());
            if last.elapsed() >= Duration::from_secs(5) {
                eprintln!("{line}");
                *last = Instant::now();
            }
        }
    }

    /// The line is done (on a terminal, it was rewritten in place).
    fn end(&self) {
        if self.terminal {
            eprintln!();
        }
    }
}
