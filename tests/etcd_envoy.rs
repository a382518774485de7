//! The fleet on etcd end to end, with real Envoys 1.40 and a real etcd:
//! two replicas (`serve --source ... --canary-id canary-*`), a canary Envoy on replica A and
//! an edge Envoy on replica B, requests through them the whole time. `switchyard apply`
//! writes each change in one transaction (and with `--wait` through A, returns once the edge
//! on B holds it too); the canary's verdict on A decides for the edge on B; what the canary rejects never reaches the edge, not even after B is killed (SIGKILL)
//! and started again, and the edge, moved back to B, is sent nothing it does not hold.

use switchyard_testkit as support;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::envoy::{envoy_binary, eventually, free_port, http_get, Envoy, Switchyard, Upstream};
use support::etcd::Etcd;
use support::{eds_cluster, envoy_rejected_cluster, rds_listener, route_to, write};

const BAKE: &str = "2s";
const ARRIVE: Duration = Duration::from_secs(20);

fn apply(dir: &Path, url: &str) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("apply")
        .arg(dir)
        .args(["--source", url])
        .output()
        .expect("switchyard apply runs");
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

async fn replica(url: &str, dir: &Path, name: &str, ports: (u16, u16)) -> Switchyard {
    let logs = dir.join(name);
    std::fs::create_dir_all(&logs).expect("log dir");
    Switchyard::start_serving(
        &["--source", url],
        &logs,
        ports,
        &["--canary-id", "canary-*", "--rollout-bake", BAKE],
    )
    .await
}

/// The version Envoy holds cluster `name` at.
async fn cluster_version(envoy: &Envoy, name: &str) -> Option<String> {
    let dump = envoy.config_dump("dynamic_active_clusters").await;
    dump["configs"].as_array()?.iter().find_map(|c| {
        (c["cluster"]["name"] == name)
            .then(|| c["version_info"].as_str().map(str::to_string))
            .flatten()
    })
}

/// Each cluster's connect_timeout as Envoy's config_dump has it, active or warming, by name.
async fn cluster_timeouts(envoy: &Envoy) -> Vec<(String, String)> {
    let mut timeouts = Vec::new();
    for resource in ["dynamic_active_clusters", "dynamic_warming_clusters"] {
        let dump = envoy.config_dump(resource).await;
        for c in dump["configs"].as_array().into_iter().flatten() {
            if let Some(name) = c["cluster"]["name"].as_str() {
                timeouts.push((
                    name.to_string(),
                    c["cluster"]["connect_timeout"].to_string(),
                ));
            }
        }
    }
    timeouts.sort();
    timeouts
}

/// Requests through the Envoys' shared listener every 20 ms until stopped (at most 120 s):
/// how many were answered, and how many failed.
fn traffic(port: u16) -> (Arc<AtomicBool>, tokio::task::JoinHandle<(usize, usize)>) {
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    let task = tokio::spawn(async move {
        let (answered, failed) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let started = std::time::Instant::now();
        while !stopped.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(120) {
            match http_get(port).await.as_deref() {
                Some("upstream-a") => answered.fetch_add(1, Ordering::Relaxed),
                _ => failed.fetch_add(1, Ordering::Relaxed),
            };
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (answered.into_inner(), failed.into_inner())
    });
    (stop, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_two_replicas_on_etcd_one_rollout_for_the_fleet() {
    let Some(envoy_bin) = envoy_binary() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(dir.path()).await;
    let url = format!("etcd://{}/fleet", etcd.endpoint());
    let upstream = Upstream::start("upstream-a").await;
    let listener = free_port();
    let snap = dir.path().join("snap");
    std::fs::create_dir(&snap).expect("mkdir");
    write(&snap, "a.yaml", &eds_cluster("a", "1s", upstream.port));
    write(
        &snap,
        "listener.yaml",
        &rds_listener("http", listener, "main"),
    );
    write(&snap, "routes.yaml", &route_to("main", "a"));
    let (code, out) = apply(&snap, &url);
    assert_eq!(code, Some(0), "{out}");

    let a = replica(&url, dir.path(), "a", (free_port(), free_port())).await;
    let b_ports = (free_port(), free_port());
    let mut b = replica(&url, dir.path(), "b", b_ports).await;
    let (canary_dir, edge_dir) = (dir.path().join("canary"), dir.path().join("edge"));
    std::fs::create_dir(&canary_dir).expect("mkdir");
    std::fs::create_dir(&edge_dir).expect("mkdir");
    let canary = Envoy::start(&envoy_bin, a.port, "canary-1", &canary_dir).await;
    let edge = Envoy::start(&envoy_bin, b.port, "edge-1", &edge_dir).await;
    for envoy in [&canary, &edge] {
        let synced = eventually(ARRIVE, || async {
            envoy.active_cluster_timeout("a").await.as_deref() == Some("1s")
        })
        .await;
        assert!(synced.is_some(), "the first generation goes to every node");
    }
    assert_eq!(
        cluster_version(&canary, "a").await,
        cluster_version(&edge, "a").await,
        "both replicas serve the same versions"
    );
    let up = eventually(ARRIVE, || async {
        http_get(listener).await.as_deref() == Some("upstream-a")
    })
    .await;
    assert!(up.is_some(), "no traffic through the Envoys");
    let (stop, requests) = traffic(listener);

    // One apply of two documents, as a deploy pipeline's gate runs it: `apply --wait`
    // through A. One generation holding both goes first to the canary; the edge waits for
    // the canary's verdict (taken on A) and the bake; the wait returns only once the edge
    // on the other replica holds it too (the fleet's view).
    write(&snap, "a.yaml", &eds_cluster("a", "2s", upstream.port));
    write(&snap, "b.yaml", &eds_cluster("b", "3s", upstream.port));
    let mut gate = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("apply")
        .arg(&snap)
        .args(["--source", &url, "--wait", "--wait-timeout", "60s"])
        .arg("--admin-addr")
        .arg(format!("127.0.0.1:{}", a.admin_port))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("switchyard apply runs");
    let to_canary = eventually(ARRIVE, || async {
        canary.active_cluster_timeout("a").await.as_deref() == Some("2s")
    })
    .await;
    assert!(to_canary.is_some(), "the canary gets the apply");
    assert_eq!(
        canary.active_cluster_timeout("b").await.as_deref(),
        Some("3s"),
        "the apply's two documents are one generation"
    );
    assert_eq!(
        edge.active_cluster_timeout("a").await.as_deref(),
        Some("1s"),
        "the edge on B waits for the canary on A"
    );
    assert!(
        gate.try_wait().expect("apply").is_none(),
        "apply --wait returned before the edge on B had the change"
    );
    let returned = eventually(Duration::from_secs(60), || {
        let done = gate.try_wait().expect("apply").is_some();
        async move { done }
    })
    .await;
    assert!(returned.is_some(), "apply --wait returns");
    let out = gate.wait_with_output().expect("apply");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{said}");
    // Read right after the wait: both Envoys hold the change (active, or warming on
    // its endpoints).
    for (name, envoy) in [("canary", &canary), ("edge", &edge)] {
        assert_eq!(
            cluster_timeouts(envoy).await,
            [
                ("a".to_string(), "\"2s\"".to_string()),
                ("b".to_string(), "\"3s\"".to_string())
            ],
            "{name} after apply --wait: {said}"
        );
    }
    assert_eq!(
        cluster_version(&canary, "a").await,
        cluster_version(&edge, "a").await,
        "the apply reaches both replicas at the same versions"
    );

    // An apply Envoy rejects: the canary NACKs on A, the fleet's rollout halts, and the
    // edge on B never gets it.
    write(&snap, "a.yaml", &envoy_rejected_cluster("a", upstream.port));
    let (code, out) = apply(&snap, &url);
    assert_eq!(code, Some(0), "{out}");
    canary.expect_cds_rejected().await;
    let halted = eventually(ARRIVE, || async {
        b.status()
            .await
            .and_then(|s| s.fleet)
            .is_some_and(|f| f.state.as_deref() == Some("HALTED"))
    })
    .await;
    assert!(halted.is_some(), "B sees the fleet's rollout halted");

    // kill -9 of B mid-rollout; the edge keeps its config and its traffic meanwhile. B
    // started again (same ports): the edge reconnects, is on the promoted generation, and
    // is sent nothing it does not hold.
    let counted = [
        "cluster_manager.cds.update_success",
        "listener_manager.lds.update_success",
        "cluster_manager.cds.update_rejected",
    ];
    let before = edge.stats(&counted).await;
    b.process.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    b = replica(&url, dir.path(), "b-again", b_ports).await;
    let back = eventually(Duration::from_secs(30), || async {
        b.node_synced("edge-1").await
    })
    .await;
    assert!(back.is_some(), "the edge reconnects to B");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        edge.active_cluster_timeout("a").await.as_deref(),
        Some("2s"),
        "after B's restart the edge is on the promoted generation"
    );
    assert_eq!(
        edge.stats(&counted).await,
        before,
        "{counted:?}: the edge was sent something new by the restarted replica"
    );

    stop.store(true, Ordering::Relaxed);
    let (answered, failed) = requests.await.expect("traffic");
    eprintln!(
        "{answered} requests answered, {failed} failed, through two applies, a halt and B killed"
    );
    assert!(answered > 100, "{answered} requests answered");
    assert_eq!(failed, 0, "requests failed through the Envoys");
    drop(a);
}
