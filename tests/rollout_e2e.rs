//! End-to-end staged rollout with two real Envoys 1.40 (State of the World ADS): `canary-1`
//! matches `--canary-id canary-*`, `edge-1` does not. A good edit reaches the canary first
//! and the other Envoy only after the bake; an edit Envoy rejects is NACKed by the canary
//! alone, the rollout halts, and the other Envoy never sees it (its CDS never rejects
//! anything). `switchyard rollout abort` then ends it.

use switchyard_testkit as support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::envoy::{envoy_binary, eventually, free_port, Envoy, Switchyard};
use support::{eds_cluster, envoy_rejected_cluster, rds_listener, route_to, write};

const BAKE: &str = "3s";
const ARRIVE: Duration = Duration::from_secs(20);

/// `switchyard rollout ACTION` against `server`: exit code and stdout.
fn rollout(server: &Switchyard, action: &str) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["rollout", action, "--admin-addr"])
        .arg(format!("127.0.0.1:{}", server.admin_port))
        .output()
        .expect("runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

async fn rollout_state(server: &Switchyard) -> Option<String> {
    server
        .status()
        .await?
        .rollout
        .map(|r| r.state.name().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_change_reaches_the_canary_first_and_a_rejected_one_never_leaves_it() {
    let Some(envoy_bin) = envoy_binary() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("config");
    std::fs::create_dir(&config).expect("mkdir");
    write(&config, "a.yaml", &eds_cluster("a", "1s", 8080));
    write(
        &config,
        "listener.yaml",
        &rds_listener("http", free_port(), "main"),
    );
    write(&config, "routes.yaml", &route_to("main", "a"));
    let server = Switchyard::start_with_args(
        &config,
        dir.path(),
        &["--canary-id", "canary-*", "--rollout-bake", BAKE],
    )
    .await;
    let (canary_dir, edge_dir) = (dir.path().join("canary"), dir.path().join("edge"));
    std::fs::create_dir(&canary_dir).expect("mkdir");
    std::fs::create_dir(&edge_dir).expect("mkdir");
    let canary = Envoy::start(&envoy_bin, server.port, "canary-1", &canary_dir).await;
    let edge = Envoy::start(&envoy_bin, server.port, "edge-1", &edge_dir).await;
    for envoy in [&canary, &edge] {
        let synced = eventually(ARRIVE, || async {
            envoy.active_cluster_timeout("a").await.as_deref() == Some("1s")
        })
        .await;
        assert!(synced.is_some(), "the first load goes to every node");
    }
    assert_eq!(rollout_state(&server).await, None);

    // A good edit: the canary first; the other Envoy only after the bake.
    write(&config, "a.yaml", &eds_cluster("a", "2s", 8080));
    let edited = Instant::now();
    let to_canary = eventually(ARRIVE, || async {
        canary.active_cluster_timeout("a").await.as_deref() == Some("2s")
    })
    .await;
    assert!(to_canary.is_some(), "the canary gets the change");
    assert_eq!(
        edge.active_cluster_timeout("a").await.as_deref(),
        Some("1s"),
        "the other Envoy does not have it yet"
    );
    assert!(matches!(
        rollout_state(&server).await.as_deref(),
        Some("CANARY" | "BAKING")
    ));
    let to_edge = eventually(ARRIVE, || async {
        edge.active_cluster_timeout("a").await.as_deref() == Some("2s")
    })
    .await;
    assert!(to_edge.is_some(), "promoted after the bake");
    let after = edited.elapsed();
    assert!(
        after >= Duration::from_secs(3),
        "the other Envoy got it {after:?} after the edit, before the bake ended"
    );
    eprintln!("canary after {to_canary:?}; the other Envoy {after:?} after the edit (bake {BAKE})");
    let promoted = eventually(ARRIVE, || async { rollout_state(&server).await.is_none() }).await;
    assert!(promoted.is_some());

    // An edit Envoy rejects: the canary NACKs, the rollout halts, and the other Envoy
    // never sees it, bake time or not.
    write(&config, "a.yaml", &envoy_rejected_cluster("a", 8080));
    canary.expect_cds_rejected().await;
    let halted = eventually(ARRIVE, || async {
        rollout_state(&server).await.as_deref() == Some("HALTED")
    })
    .await;
    assert!(halted.is_some(), "a canary's NACK halts the rollout");
    let status = server.status().await.expect("status");
    let r = status.rollout.as_ref().expect("a rollout");
    assert!(
        r.reason.as_deref().is_some_and(
            |why| why.contains("canary-1") && why.contains(support::ENVOY_REJECTED_CLUSTER)
        ),
        "{r:?}"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        edge.stat("cluster_manager.cds.update_rejected").await,
        Some(0),
        "the other Envoy was never sent the rejected cluster"
    );
    assert_eq!(
        edge.active_cluster_timeout("a").await.as_deref(),
        Some("2s")
    );
    let (code, text) = rollout(&server, "status");
    assert_eq!(code, Some(5), "halted is not a success: {text}");
    assert!(
        text.starts_with("rollout HALTED") && text.contains("canary-1") && text.contains("edge-1"),
        "{text}"
    );

    // Abort: the canary goes back to the stable generation; nothing is left in progress.
    let (code, text) = rollout(&server, "abort");
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("rollout aborted"), "{text}");
    assert_eq!(rollout_state(&server).await, None);
    let (code, _) = rollout(&server, "abort");
    assert_eq!(code, Some(1), "nothing left to abort");
    let (code, text) = rollout(&server, "status");
    assert_eq!(code, Some(0));
    let stable = server.status().await.map(|s| s.generation).expect("status");
    assert_eq!(
        text,
        format!("no rollout in progress: generation {stable} serves every node\n")
    );
    let back = eventually(ARRIVE, || async {
        server.status().await.is_some_and(|s| {
            s.nodes.len() == 2 && s.nodes.iter().all(|n| n.generation == s.generation)
        })
    })
    .await;
    assert!(back.is_some(), "both nodes on the stable generation again");
    // The files still hold the rejected change: `status` does not say all is well.
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["status", "--wait", "--timeout", "20s", "--admin-addr"])
        .arg(format!("127.0.0.1:{}", server.admin_port))
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(5), "{text}");
    assert!(
        text.contains(&format!("generation {stable} serves every node"))
            && text.contains("aborted"),
        "{text}"
    );
}
