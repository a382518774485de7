//! End-to-end: a real Envoy 1.40 turned away by `--max-new-streams-per-second` (its ADS
//! stream ended at once with RESOURCE_EXHAUSTED while a storm of other streams takes every
//! token) retries with its backoff and syncs once the storm is over.

use switchyard_testkit as support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use support::envoy::{envoy_binary, eventually, http_get, Envoy, Switchyard, Upstream};
use support::write_mesh;

/// Upper bound on the storm.
const STORM_LIMIT: Duration = Duration::from_secs(150);

/// Open streams on `port` as fast as they are let in (each taking a token), until `stop`:
/// how many were opened.
fn storm(port: u16, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        let started = Instant::now();
        let mut opened = 0;
        let mut held = Vec::new();
        while !stop.load(Ordering::Relaxed) && started.elapsed() < STORM_LIMIT {
            let mut client = AggregatedDiscoveryServiceClient::new(channel.clone());
            let requests = tokio_stream::pending::<DiscoveryRequest>();
            if let Ok(response) = client.stream_aggregated_resources(requests).await {
                opened += 1;
                held.push(response.into_inner());
                // Keep a few open; drop the rest (their tokens are spent either way).
                if held.len() > 20 {
                    held.remove(0);
                }
            }
            // A token comes back each second; taken within 5 ms, it is rarely Envoy's.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        opened
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_envoy_turned_away_by_the_admission_rate_retries_and_syncs() {
    let Some(envoy_bin) = envoy_binary() else {
        return;
    };
    let upstream = Upstream::start("upstream-a").await;
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("config");
    std::fs::create_dir(&config).expect("mkdir");
    let listener = support::envoy::free_port();
    write_mesh(&config, upstream.port, listener);
    // One new stream a second: the storm below takes each token as it comes.
    let switchyard = Switchyard::start_with_args(
        &config,
        dir.path(),
        &[
            "--max-new-streams-per-second",
            "1",
            "--new-streams-burst",
            "1",
        ],
    )
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let storm_task = storm(switchyard.port, Arc::clone(&stop));
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Envoy's ADS streams (gRPC requests to its `switchyard` cluster): turned away, it opens
    // another after its backoff (jittered: each wait drawn from 0 to 0.5 s, 1 s, 2 s, ...).
    let streams = "cluster.switchyard.upstream_rq_total";
    // The storm takes each token within a few milliseconds of its coming back, but an Envoy
    // stream opened in those milliseconds is let in. A trial in which Envoy got in on its
    // first stream is void (it was never turned away): that Envoy is stopped and another,
    // under another node id, starts (at most three trials).
    let mut trial = 0;
    let (envoy, node) = loop {
        trial += 1;
        let node = format!("storm-edge-{trial}");
        let envoy_dir = dir.path().join(&node);
        std::fs::create_dir(&envoy_dir).expect("mkdir");
        let envoy = Envoy::start(&envoy_bin, switchyard.port, &node, &envoy_dir).await;
        let outcome = eventually(Duration::from_secs(40), || async {
            let sent = envoy.stat(streams).await;
            let connected = envoy.stat("control_plane.connected_state").await;
            sent.is_some_and(|n| n >= 2) || (sent == Some(1) && connected == Some(1))
        })
        .await;
        assert!(
            outcome.is_some(),
            "Envoy did not retry: {:?}\n{}",
            envoy.stat(streams).await,
            envoy.process.log_text()
        );
        if envoy.stat(streams).await.is_some_and(|n| n >= 2) {
            break (envoy, node);
        }
        println!("trial {trial}: Envoy got in on its first stream (a token the storm missed)");
        assert!(trial < 3, "Envoy got in on its first stream in 3 trials");
    };
    stop.store(true, Ordering::Relaxed);
    let opened = storm_task.await.expect("storm");
    println!("storm: {opened} streams opened (most turned away at once)");

    // Envoy retries with its backoff and syncs; traffic flows.
    let synced = eventually(Duration::from_secs(60), || async {
        http_get(listener).await.as_deref() == Some("upstream-a")
            && switchyard.node_synced(&node).await
    })
    .await;
    assert!(
        synced.is_some(),
        "Envoy never synced after the storm:\n{}",
        envoy.process.log_text()
    );
    let status = switchyard.status().await.expect("status");
    let shown = status.new_streams.expect("the limit is shown");
    assert_eq!((shown.per_second, shown.burst), (1, 1));
    assert!(shown.turned_away >= 1, "{shown:?}");
    // The streams turned away on Envoy's own connection (the peer of the stream it synced
    // on), as the server logged them.
    let lines = switchyard.log_lines();
    let peer = lines
        .iter()
        .find(|l| l["message"] == "xDS stream opened." && l["node"].as_str() == Some(node.as_str()))
        .and_then(|l| l["peer"].as_str())
        .expect("Envoy's stream opened")
        .to_string();
    let turned_away_envoy = lines
        .iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Turned"))
                && l["peer"].as_str() == Some(peer.as_str())
        })
        .count();
    assert!(
        turned_away_envoy >= 1,
        "no stream of Envoy's connection ({peer}) was turned away"
    );
    println!(
        "turned away in all: {}, of Envoy's: {turned_away_envoy} (its streams: {:?}); synced {:?} after the storm",
        shown.turned_away,
        envoy.stat(streams).await,
        synced
    );
}
