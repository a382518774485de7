//! A bounded soak on 127.0.0.1: clients (SotW and delta) connecting, taking their config,
//! ACKing and leaving, over and over, while the snapshot files change continuously. Nothing
//! may be left behind: once the clients are gone, `/status` lists no node, the stream gauge
//! is back to zero, and the server still answers a fresh client at once. Bounded in time
//! (5 s of churn) and in work (each client at most 1,000 rounds).
//!
//! Once the clients are gone, the live heap (counted by this test's allocator) must be back
//! within 4 MiB of where it started; RSS is printed, not asserted (the allocator keeps freed
//! pages). Memory over minutes, against the release binary: `cargo bench --bench soak`.

use switchyard_testkit as support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::memory::{self, live_kib};
use support::*;
use switchyard::resource::ResourceType::{Cluster, Endpoint};

const CLIENTS: usize = 16;
/// Rounds per client at the most, one every [`PACE`], for [`CHURN`] at the most.
const ROUNDS: usize = 1_000;
const PACE: Duration = Duration::from_millis(10);
const CHURN: Duration = Duration::from_secs(5);

#[global_allocator]
static ALLOCATOR: memory::Counting = memory::Counting;

fn rss_kib() -> u64 {
    memory::rss_kib("self")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_clients_come_and_go_while_files_change_and_nothing_is_left_behind() {
    let server = Arc::new(
        TestServer::start(&[("clusters.yaml", &eds_cluster("backend", "1s", 8080))]).await,
    );
    let (rss_start, live_start) = (rss_kib(), live_kib());
    let done = Arc::new(AtomicBool::new(false));
    let started = Instant::now();

    // The files change every 50 ms until the clients are done (or the bound).
    let writer = {
        let (server, done) = (Arc::clone(&server), Arc::clone(&done));
        tokio::spawn(async move {
            let mut n = 0u32;
            while !done.load(Ordering::Relaxed) && started.elapsed() < CHURN * 2 {
                n += 1;
                let timeout = format!("{}s", 1 + n % 5);
                server.set_files(&[
                    ("clusters.yaml", &eds_cluster("backend", &timeout, 8080)),
                    (
                        "other.yaml",
                        &eds_cluster(&format!("c{}", n % 7), "1s", 9000),
                    ),
                ]);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            n
        })
    };

    let rounds_done = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        let (server, rounds_done) = (Arc::clone(&server), Arc::clone(&rounds_done));
        clients.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                if started.elapsed() > CHURN {
                    break;
                }
                let id = format!("soak-{i}-{round}");
                if (i + round) % 2 == 0 {
                    let mut c = server.ads(&id).await;
                    c.subscribe(Cluster, &[]).await;
                    let cds = c.recv_type(Cluster).await;
                    c.subscribe(Endpoint, &["backend"]).await;
                    c.ack(&cds, &[]).await;
                    let eds = c.recv_type(Endpoint).await;
                    c.ack(&eds, &["backend"]).await;
                } else {
                    let mut c = server.delta(&id).await;
                    c.subscribe(Cluster, &[], &[]).await;
                    let r = c.recv().await;
                    c.ack(&r).await;
                }
                rounds_done.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(PACE).await;
            }
        }));
    }
    for c in clients {
        c.await.expect("a client task");
    }
    done.store(true, Ordering::Relaxed);
    let reloads = writer.await.expect("writer");
    let rounds = rounds_done.load(Ordering::Relaxed);
    assert!(
        rounds >= CLIENTS * 10 && reloads >= 10,
        "too little churn to mean much: {rounds} rounds, {reloads} reloads"
    );

    // Every stream the clients opened is gone from /status and the gauge.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let status = server.status().await;
        let (_, metrics) = server.admin_get("/metrics").await;
        let open: f64 = metrics
            .lines()
            .filter(|l| l.starts_with("switchyard_streams{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        if status.nodes.is_empty() && open == 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left behind: {} node(s) in /status, {open} stream(s) in the gauge",
            status.nodes.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // And a fresh client is served at once.
    let mut c = server.ads("after-the-soak").await;
    c.subscribe(Cluster, &[]).await;
    assert!(!c.recv_type(Cluster).await.resources.is_empty());
    drop(c);
    // What the clients and reloads took is given back: the live heap (not RSS, which keeps
    // the allocator's freed pages) is back near where it started. A leak of 1 KiB per client
    // round would be ~6 MiB here.
    let grown = live_kib().saturating_sub(live_start);
    assert!(
        grown < 4 * 1024,
        "the live heap grew by {grown} KiB over {rounds} rounds and {reloads} reloads"
    );
    eprintln!(
        "soak: {rounds} client rounds and {reloads} reloads in {:?}; live heap {} KiB -> {} KiB, RSS {} KiB -> {} KiB",
        started.elapsed(),
        live_start,
        live_kib(),
        rss_start,
        rss_kib()
    );
}
