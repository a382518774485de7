//! Staged rollouts over real sockets: tonic ADS clients as a canary (`canary-1`) and another
//! node (`edge-1`), against the server with a rollout policy (tests/rollout_e2e.rs runs the
//! same with two real Envoys).

use switchyard_testkit as support;

use std::time::Duration;

use support::*;
use switchyard::resource::ResourceType::Cluster;
use switchyard::rollout::Policy;

const QUIET: Duration = Duration::from_millis(500);

async fn server(bake: Duration) -> TestServer {
    let policy = Policy::new(Some("canary-*".into()), None, bake).expect("policy");
    TestServer::start_daemon(
        &[("clusters.yaml", &eds_cluster("backend", "1s", 8080))],
        switchyard::daemon::Options {
            rollout: Some(policy),
            ..Default::default()
        },
    )
    .await
}

async fn until_rollout(server: &TestServer, want: Option<&str>) {
    for _ in 0..200 {
        let state = server.status().await.rollout.map(|r| r.state.name());
        if state == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the rollout never reached {want:?}");
}

#[tokio::test]
async fn the_canary_gets_a_change_first_and_the_rest_after_its_ack_and_the_bake() {
    let server = server(Duration::from_millis(300)).await;
    let mut canary = server.ads("canary-1").await;
    let mut edge = server.ads("edge-1").await;
    for c in [&mut canary, &mut edge] {
        c.subscribe(Cluster, &[]).await;
        let first = c.recv_type(Cluster).await;
        c.ack(&first, &[]).await;
    }
    server.set_file("clusters.yaml", &eds_cluster("backend", "2s", 8080));
    let change = canary.recv_type(Cluster).await;
    edge.expect_quiet(QUIET).await;
    until_rollout(&server, Some("CANARY")).await;
    canary.ack(&change, &[]).await;
    // Every canary ACKed: the bake, then every node.
    let promoted = edge.recv_type(Cluster).await;
    assert_eq!(promoted.version_info, change.version_info);
    until_rollout(&server, None).await;
    assert_eq!(server.status().await.generation, 2);
}

#[tokio::test]
async fn a_canary_nack_halts_and_only_an_operator_moves_it_on() {
    let server = server(Duration::ZERO).await;
    let mut canary = server.ads("canary-1").await;
    let mut edge = server.ads("edge-1").await;
    let mut v1 = Vec::new();
    for c in [&mut canary, &mut edge] {
        c.subscribe(Cluster, &[]).await;
        let first = c.recv_type(Cluster).await;
        c.ack(&first, &[]).await;
        v1.push(first.version_info);
    }
    server.set_file("clusters.yaml", &envoy_rejected_cluster("backend", 8080));
    let bad = canary.recv_type(Cluster).await;
    canary.nack(&bad, &[], &v1[0], "no thanks").await;
    until_rollout(&server, Some("HALTED")).await;
    let status = server.status().await;
    let reason = status.rollout.and_then(|r| r.reason).unwrap_or_default();
    assert_eq!(reason, "canary \"canary-1\" rejected CDS: no thanks");
    edge.expect_quiet(QUIET).await;

    // Abort: the canary is sent the stable generation again (what it still runs: it
    // rejected the candidate; P5 forbids re-sending only the rejected version); the edge
    // nothing.
    let (code, text) = server.admin_post("/rollout/abort").await;
    assert_eq!(code, 200, "{text}");
    let back = canary.recv_type(Cluster).await;
    assert_eq!(back.version_info, v1[0]);
    canary.ack(&back, &[]).await;
    edge.expect_quiet(QUIET).await;
    let status = server.status().await;
    assert!(
        status
            .nodes
            .iter()
            .all(|n| n.generation == status.generation),
        "{:?}",
        status.nodes
    );
    let (code, _) = server.admin_post("/rollout/abort").await;
    assert_eq!(code, 409, "nothing left to abort");

    // A newer edit starts a new rollout; promote sends it to every node at once.
    server.set_file("clusters.yaml", &eds_cluster("backend", "3s", 8080));
    let fixed = canary.recv_type(Cluster).await;
    let (code, _) = server.admin_post("/rollout/promote").await;
    assert_eq!(code, 200);
    assert_eq!(
        edge.recv_type(Cluster).await.version_info,
        fixed.version_info
    );
}

/// Gates a deploy can wait on. `switchyard status` exits 0 only when every
/// connected node runs the newest loaded generation and no rollout is on: 4 while the
/// canaries bake, 5 once halted (as does `rollout status`), 5 after an abort while the files
/// differ from what serves (and says so), 6 when `--wait` times out; `--wait` returns 0 once
/// a promotion reaches every node. Generation numbers never repeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_exit_codes_tell_the_truth_through_a_rollout() {
    use switchyard::cli::status::{verdict, Standing};
    let server = server(Duration::from_secs(3600)).await;
    let mut canary = server.ads("canary-1").await;
    let mut edge = server.ads("edge-1").await;
    let mut v1 = Vec::new();
    for c in [&mut canary, &mut edge] {
        c.subscribe(Cluster, &[]).await;
        let first = c.recv_type(Cluster).await;
        c.ack(&first, &[]).await;
        v1.push(first.version_info);
    }
    let (code, out, err) = server.status_cli(&["--wait", "--timeout", "10s"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("GEN"),
        "the table shows each node's generation: {out}"
    );

    // A change: the canary gets it, the bake is an hour: 4, and --wait times out (6).
    server.set_file("clusters.yaml", &eds_cluster("backend", "2s", 8080));
    let change = canary.recv_type(Cluster).await;
    canary.ack(&change, &[]).await;
    until_rollout(&server, Some("BAKING")).await;
    assert_eq!(verdict(&server.status().await), Standing::RollingOut);
    let (code, _, err) = server.status_cli(&[]).await;
    assert_eq!(code, Some(4), "{err}");
    let (code, _, err) = server.status_cli(&["--wait", "--timeout", "1s"]).await;
    assert_eq!(code, Some(6), "{err}");
    assert!(
        err.contains("timed out after 1s: a rollout is in progress"),
        "{err}"
    );

    // Promoted while `--wait` waits: it returns 0 once the edge node has the change.
    let waiting = tokio::spawn(support::cli(
        [
            "status",
            "--admin-addr",
            &server.admin_addr.to_string(),
            "--wait",
            "--timeout",
            "30s",
        ]
        .map(String::from)
        .to_vec(),
    ));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (code, _) = server.admin_post("/rollout/promote").await;
    assert_eq!(code, 200);
    let promoted = edge.recv_type(Cluster).await;
    edge.ack(&promoted, &[]).await;
    let out = waiting.await.expect("joined");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let before_halt = server.status().await.generation;

    // A change the canary rejects: halted, 5, from `status` and `rollout status` alike.
    server.set_file("clusters.yaml", &envoy_rejected_cluster("backend", 8080));
    let bad = canary.recv_type(Cluster).await;
    canary
        .nack(&bad, &[], &promoted.version_info, "no thanks")
        .await;
    until_rollout(&server, Some("HALTED")).await;
    let (code, _, err) = server.status_cli(&["--wait", "--timeout", "10s"]).await;
    assert_eq!(code, Some(5), "a halt ends the wait at once: {err}");
    let rollout = support::cli(
        [
            "rollout",
            "status",
            "--admin-addr",
            &server.admin_addr.to_string(),
        ]
        .map(String::from)
        .to_vec(),
    )
    .await;
    assert_eq!(rollout.status.code(), Some(5));
    let json = support::cli(
        [
            "rollout",
            "status",
            "--admin-addr",
            &server.admin_addr.to_string(),
            "--output",
            "json",
        ]
        .map(String::from)
        .to_vec(),
    )
    .await;
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(doc["schema"], "switchyard.rollout/v1");
    assert_eq!(doc["rollout"]["state"], "HALTED", "{doc:#}");
    assert_eq!(json.status.code(), Some(5));

    // Aborted: what serves is the generation before, and the files differ from it: 5, said.
    let (code, _) = server.admin_post("/rollout/abort").await;
    assert_eq!(code, 200);
    let back = canary.recv_type(Cluster).await;
    canary.ack(&back, &[]).await;
    let status = server.status().await;
    assert_eq!(status.generation, before_halt);
    assert_eq!(verdict(&status), Standing::RolloutStopped);
    let (code, out, _) = server.status_cli(&[]).await;
    assert_eq!(code, Some(5), "{out}");
    let aborted = status
        .config
        .as_ref()
        .map(|c| c.generation)
        .unwrap_or_default();
    assert!(
        out.contains(&format!(
            "generation {before_halt} serves every node: the rollout of generation {aborted} \
             was aborted, and the files differ from what serves"
        )),
        "{out}"
    );

    // The fix after the abort is a generation of its own, never one seen before.
    server.set_file("clusters.yaml", &eds_cluster("backend", "3s", 8080));
    let fixed = canary.recv_type(Cluster).await;
    canary.ack(&fixed, &[]).await;
    until_rollout(&server, Some("BAKING")).await;
    let status = server.status().await;
    let candidate = status
        .rollout
        .as_ref()
        .map(|r| r.candidate)
        .unwrap_or_default();
    assert!(candidate > aborted, "{candidate} after {aborted}");
    let _ = v1;
}
