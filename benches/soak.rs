//! Memory over time under churn: `cargo bench --bench soak` (`SOAK_SECONDS`, default 120,
//! at most 3,600).
//!
//! Runs the release `switchyard serve` binary on 127.0.0.1 over generated snapshot files
//! (1,000 EDS clusters and their endpoints), then, for the soak's length, keeps 32 clients
//! connecting, taking their config and leaving: half over ADS (SotW: wildcard CDS, then EDS
//! for 10 names, each ACKed), half over Incremental ADS (the same over delta). Each client
//! holds its stream for 0-190 ms and then leaves, and the files change every 200 ms (one
//! cluster's timeout). Every 10 s it prints the server's resident memory (VmRSS, from
//! /proc), the streams open (the `switchyard_streams` gauge) and the client rounds so far;
//! then, once the clients have left, the streams left behind and the memory at rest, 5 s
//! and 30 s later. Results and method: docs/benchmarks.md.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

const CLUSTERS: usize = 1_000;
const CLIENTS: usize = 32;
/// Rounds per client at the most, whatever the length.
const MAX_ROUNDS: usize = 200_000;
const SAMPLE_EVERY: Duration = Duration::from_secs(10);
const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const EDS: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// The snapshot files: `CLUSTERS` EDS clusters and their endpoints; cluster 0's timeout is
/// `generation`'s.
fn write_files(dir: &Path, generation: usize) {
    let mut clusters = String::from("clusters:\n");
    let mut endpoints = String::from("endpoints:\n");
    for i in 0..CLUSTERS {
        let timeout = if i == 0 { 1 + generation % 5 } else { 1 };
        clusters.push_str(&format!(
            "  - {{ name: c{i}, connect_timeout: {timeout}s, type: EDS, \
             eds_cluster_config: {{ eds_config: {{ ads: {{}} }} }} }}\n"
        ));
        endpoints.push_str(&format!(
            "  - cluster_name: c{i}\n    endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: \
             {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }} }}] }}]\n",
            10_000 + i
        ));
    }
    // Written aside and renamed, as a deploy tool would.
    for (name, text) in [("clusters.yaml", clusters), ("endpoints.yaml", endpoints)] {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, dir.join(name)).expect("rename");
    }
}

#[path = "../tests/support/memory.rs"]
mod memory;

fn rss_kib(pid: u32) -> u64 {
    memory::rss_kib(&pid.to_string())
}

/// The `switchyard_streams` gauge, summed over its labels.
async fn streams_open(admin: SocketAddr) -> f64 {
    let Ok(answer) = reqwest::get(format!("http://{admin}/metrics")).await else {
        return -1.0;
    };
    answer
        .text()
        .await
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("switchyard_streams{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn node(id: &str) -> Node {
    Node {
        id: id.to_string(),
        cluster: "soak".to_string(),
        ..Default::default()
    }
}

/// One SotW round: wildcard CDS, then EDS for 10 names, each ACKed; held for `hold`.
async fn sotw_round(addr: SocketAddr, id: &str, hold: Duration) -> Result<(), String> {
    let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{addr}"))
        .await
        .map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::channel(4);
    let request =
        |type_url: &str, names: Vec<String>, version: &str, nonce: &str| DiscoveryRequest {
            node: Some(node(id)),
            type_url: type_url.to_string(),
            resource_names: names,
            version_info: version.to_string(),
            response_nonce: nonce.to_string(),
            ..Default::default()
        };
    tx.send(request(CDS, vec![], "", ""))
        .await
        .map_err(|e| e.to_string())?;
    let mut responses = client
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .map_err(|e| e.to_string())?
        .into_inner();
    let names: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
    let cds = responses
        .message()
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no CDS")?;
    tx.send(request(EDS, names.clone(), "", ""))
        .await
        .map_err(|e| e.to_string())?;
    tx.send(request(CDS, vec![], &cds.version_info, &cds.nonce))
        .await
        .map_err(|e| e.to_string())?;
    let eds = responses
        .message()
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no EDS")?;
    tx.send(request(EDS, names, &eds.version_info, &eds.nonce))
        .await
        .map_err(|e| e.to_string())?;
    tokio::time::sleep(hold).await;
    Ok(())
}

/// One delta round: wildcard CDS, then EDS for 10 names, each ACKed; held for `hold`.
async fn delta_round(addr: SocketAddr, id: &str, hold: Duration) -> Result<(), String> {
    let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{addr}"))
        .await
        .map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::channel(4);
    let request = |type_url: &str, subscribe: Vec<String>, nonce: &str| DeltaDiscoveryRequest {
        node: Some(node(id)),
        type_url: type_url.to_string(),
        resource_names_subscribe: subscribe,
        response_nonce: nonce.to_string(),
        ..Default::default()
    };
    tx.send(request(CDS, vec![], ""))
        .await
        .map_err(|e| e.to_string())?;
    let mut responses = client
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .map_err(|e| e.to_string())?
        .into_inner();
    let cds = responses
        .message()
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no CDS")?;
    let names: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
    tx.send(request(EDS, names, ""))
        .await
        .map_err(|e| e.to_string())?;
    tx.send(request(CDS, vec![], &cds.nonce))
        .await
        .map_err(|e| e.to_string())?;
    let eds = responses
        .message()
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no EDS")?;
    tx.send(request(EDS, vec![], &eds.nonce))
        .await
        .map_err(|e| e.to_string())?;
    tokio::time::sleep(hold).await;
    Ok(())
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let seconds: u64 = std::env::var("SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120)
        .clamp(10, 3_600);
    let length = Duration::from_secs(seconds);
    let dir = tempfile::tempdir().expect("tmp");
    write_files(dir.path(), 0);
    let (xds, admin) = (free_addr(), free_addr());
    let server = Server(
        Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["serve", "--log-level", "warn", "--config"])
            .arg(dir.path())
            .args(["--xds-addr", &xds.to_string()])
            .args(["--admin-addr", &admin.to_string()])
            .stderr(Stdio::null())
            .spawn()
            .expect("switchyard starts"),
    );
    let pid = server.0.id();
    let up = Instant::now();
    while streams_open(admin).await < 0.0 {
        assert!(
            up.elapsed() < Duration::from_secs(30),
            "the server never came up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let baseline = rss_kib(pid);
    println!("soak: {seconds} s, {CLIENTS} clients, {CLUSTERS} clusters + endpoints, files changed every 200 ms");
    println!(
        "{:>8}  {:>10}  {:>8}  {:>8}  {:>7}",
        "time", "RSS (KiB)", "streams", "rounds", "errors"
    );
    println!(
        "{:>8}  {:>10}  {:>8}  {:>8}  {:>7}",
        "0 s", baseline, 0, 0, 0
    );

    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (stop, dir) = (Arc::clone(&stop), dir.path().to_path_buf());
        tokio::spawn(async move {
            let mut generation = 0;
            while !stop.load(Ordering::Relaxed) {
                generation += 1;
                write_files(&dir, generation);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            generation
        })
    };
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        let (stop, rounds, errors) = (Arc::clone(&stop), Arc::clone(&rounds), Arc::clone(&errors));
        clients.push(tokio::spawn(async move {
            for round in 0..MAX_ROUNDS {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let id = format!("soak-{i}-{round}");
                let hold = Duration::from_millis(((i * 7 + round * 13) % 20) as u64 * 10);
                let round_trip = async {
                    if (i + round) % 2 == 0 {
                        sotw_round(xds, &id, hold).await
                    } else {
                        delta_round(xds, &id, hold).await
                    }
                };
                match tokio::time::timeout(Duration::from_secs(10), round_trip).await {
                    Ok(Ok(())) => {
                        rounds.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    let started = Instant::now();
    let mut peak = baseline;
    while started.elapsed() < length {
        tokio::time::sleep(SAMPLE_EVERY.min(length.saturating_sub(started.elapsed()))).await;
        let rss = rss_kib(pid);
        peak = peak.max(rss);
        println!(
            "{:>6} s  {:>10}  {:>8}  {:>8}  {:>7}",
            started.elapsed().as_secs(),
            rss,
            streams_open(admin).await,
            rounds.load(Ordering::Relaxed),
            errors.load(Ordering::Relaxed)
        );
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.expect("a client task");
    }
    let reloads = writer.await.expect("writer");
    let left = Instant::now();
    let mut open = streams_open(admin).await;
    while open != 0.0 && left.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        open = streams_open(admin).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rest_5 = rss_kib(pid);
    tokio::time::sleep(Duration::from_secs(25)).await;
    let rest_30 = rss_kib(pid);
    println!(
        "soak: {} client rounds ({} errors), {reloads} reloads; streams left after the clients: {open}",
        rounds.load(Ordering::Relaxed),
        errors.load(Ordering::Relaxed)
    );
    println!(
        "RSS: {baseline} KiB at the start, {peak} KiB at the peak, {rest_5} KiB 5 s after the clients left, {rest_30} KiB 30 s after"
    );
}
