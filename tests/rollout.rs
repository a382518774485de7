//! Staged rollouts over real sockets: tonic ADS clients as a canary (`canary-1`) and another
//! node (`edge-1`), against the server with a rollout policy (tests/rollout_e2e.rs runs the
//! same with two real Envoys).

mod support;

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
        let state = server.status().await.rollout.map(|r| r.state);
        if state.as_deref() == want {
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
