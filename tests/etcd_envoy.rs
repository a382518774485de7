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
use support::run::{applied_revision, said};
use support::{eds_cluster, envoy_rejected_cluster, rds_listener, route_to, write};

const BAKE: &str = "2s";
const ARRIVE: Duration = Duration::from_secs(20);

fn apply(dir: &Path, url: &str) -> (Option<i32>, String) {
    said(&[
        "apply",
        dir.to_str().expect("a UTF-8 path"),
        "--source",
        url,
    ])
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
            .is_some_and(|f| f.state == Some(switchyard::admin::RolloutState::Halted))
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

/// A STATIC cluster `name` to `port`: a document of its own.
fn static_cluster(name: &str, port: u16) -> String {
    format!(
        "clusters:\n  - name: {name}\n    connect_timeout: 1s\n    type: STATIC\n    \
         load_assignment:\n      cluster_name: {name}\n      endpoints: [{{ lb_endpoints: [{{ \
         endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }} }}] }}]\n"
    )
}

/// The fleet as on-call and a pipeline see it (operations.md "One view of the fleet"), with
/// two replicas named by `--replica-name`, a real Envoy on each and a real etcd:
/// - output at size: an apply of 650 documents prints each change once for the node
///   groups it is the same for, lists past 20 summarized (`--verbose` lists every one), and
///   `history` likewise; the page's recent generations count the files;
/// - a NACK on replica B's Envoy (P5) as replica A's page shows it in Chromium: a red
///   headline, counts of the whole fleet, B's proxy found by the filter with B named, never
///   "serves every node", and under the NACK the revision the proxy still runs with the
///   rollback command; that command, run as printed, brings the fleet back to done;
/// - a fix applied after a broken document failed every load waits for the fix (exit 0);
/// - B killed: an apply waited for through A returns within B's lease, naming B's Envoy
///   as orphaned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_any_replicas_page_is_the_fleet_and_output_fits_at_size() {
    use support::browser::Browser;
    let Some(envoy_bin) = envoy_binary() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(dir.path()).await;
    let url = format!("etcd://{}/fleet", etcd.endpoint());
    let upstream = Upstream::start("upstream-a").await;
    let snap = dir.path().join("snap");
    std::fs::create_dir(&snap).expect("mkdir");
    write(&snap, "base.yaml", &static_cluster("base", upstream.port));
    // Two node groups of their own besides every node's files.
    for group in ["edge", "mesh"] {
        write(
            &snap,
            &format!("{group}.yaml"),
            &format!(
                "nodes: [{{ id: \"{group}-*\" }}]\n{}",
                static_cluster(group, upstream.port)
            ),
        );
    }
    let (code, out) = apply(&snap, &url);
    assert_eq!(code, Some(0), "{out}");
    let logs = |name: &str| {
        let path = dir.path().join(name);
        std::fs::create_dir_all(&path).expect("log dir");
        path
    };
    let a = Switchyard::start_serving(
        &["--source", &url],
        &logs("a"),
        (free_port(), free_port()),
        &["--replica-name", "sy-a"],
    )
    .await;
    let mut b = Switchyard::start_serving(
        &["--source", &url],
        &logs("b"),
        (free_port(), free_port()),
        &["--replica-name", "sy-b"],
    )
    .await;
    let a_addr = format!("127.0.0.1:{}", a.admin_port);
    let edge = Envoy::start(&envoy_bin, a.port, "edge-a", &logs("edge-a")).await;
    let mesh = Envoy::start(&envoy_bin, b.port, "mesh-b", &logs("mesh-b")).await;
    for (envoy, own) in [(&edge, "edge"), (&mesh, "mesh")] {
        let synced = eventually(ARRIVE, || async {
            envoy.active_cluster_timeout(own).await.as_deref() == Some("1s")
        })
        .await;
        assert!(synced.is_some(), "{own} gets its group's cluster");
    }
    // The two replicas read the documents at different revisions of the store (B started
    // after A wrote its summary), and name the change they serve the same way.
    let same = eventually(ARRIVE, || async {
        let Some(replicas) = a.status().await.and_then(|s| s.replicas) else {
            return false;
        };
        let changed: Vec<Option<i64>> = replicas.replicas.iter().map(|r| r.changed).collect();
        let versions: Vec<&String> = replicas.replicas.iter().map(|r| &r.version).collect();
        changed.len() == 2
            && changed[0].is_some()
            && changed[0] == changed[1]
            && versions[0] == versions[1]
    })
    .await;
    assert!(
        same.is_some(),
        "{:?}",
        a.status().await.and_then(|s| s.replicas)
    );

    // 650 documents in one apply, waited for through A.
    std::fs::create_dir(snap.join("d")).expect("mkdir");
    for i in 0..650 {
        write(
            &snap,
            &format!("d/c{i:03}.yaml"),
            &static_cluster(&format!("c{i:03}"), upstream.port),
        );
    }
    let (code, out) = said(&[
        "apply",
        snap.to_str().expect("utf-8"),
        "--source",
        &url,
        "--message",
        "650 clusters",
        "--wait",
        "--wait-timeout",
        "120s",
        "--admin-addr",
        &a_addr,
    ]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.lines().count() < 100,
        "{} lines:\n{out}",
        out.lines().count()
    );
    assert!(
        out.contains("  add    /fleet/d/c019.yaml\n")
            && !out.contains("d/c020.yaml")
            && out.contains("  ... and 630 more (--verbose lists every one)\n"),
        "{out}"
    );
    assert!(
        out.contains("node groups, the same change: ")
            && out.contains("  CDS: 650 added, 0 removed, 0 changed\n"),
        "{out}"
    );
    assert_eq!(
        out.matches("CDS: 650 added").count(),
        1,
        "the change is said once for every group: {out}"
    );
    let big = applied_revision(&out);
    for envoy in [&edge, &mesh] {
        assert_eq!(
            envoy.active_cluster_timeout("c649").await.as_deref(),
            Some("1s")
        );
    }
    let (code, history) = said(&["history", "--source", &url, "--limit", "10"]);
    assert_eq!(code, Some(0), "{history}");
    assert!(history.lines().count() < 120, "{history}");
    let (code, every) = said(&["history", "--source", &url, "--limit", "1", "--verbose"]);
    assert_eq!(code, Some(0), "{every}");
    assert!(
        every.contains("add    /fleet/d/c649.yaml") && every.contains("+ c649"),
        "--verbose lists every one"
    );

    // B's Envoy rejects the next change to its group (P5).
    write(
        &snap,
        "mesh.yaml",
        &format!(
            "nodes: [{{ id: \"mesh-*\" }}]\n{}",
            envoy_rejected_cluster("mesh", upstream.port)
        ),
    );
    let (code, out) = apply(&snap, &url);
    assert_eq!(code, Some(0), "{out}");
    let nacked = eventually(ARRIVE, || async { a.status_said(&[]).0 == Some(2) }).await;
    let (_, status, _) = a.status_said(&[]);
    assert!(nacked.is_some(), "{status}");
    let command = format!("switchyard rollback --source {url} {big}");
    assert!(
        status.contains("NACKED mesh-b CDS on sy-b: ")
            && status.contains(&format!("last good: revision {big} "))
            && status.contains(&command),
        "{status}"
    );

    // A's page, in a browser.
    let browser = Browser::start(&logs("browser")).await;
    browser.open(&format!("http://{a_addr}/")).await;
    let headline = browser.text("#headline").await.unwrap_or_default();
    assert!(
        headline.starts_with("A node rejected its configuration")
            && headline.contains("last good revision"),
        "{headline}"
    );
    assert_eq!(
        browser
            .css("#headline", "background-color")
            .await
            .as_deref(),
        Some("rgba(248, 198, 198, 1)"),
        "{headline}"
    );
    let as_of = browser.text(".asof").await.unwrap_or_default();
    assert!(
        as_of.contains("1 of 2 proxies run it") && !as_of.contains("serves every node"),
        "{as_of}"
    );
    let counts = browser.text(".sum").await.unwrap_or_default();
    assert!(
        counts.contains("2 nodes on 2 replicas") && counts.contains("1 NACKing"),
        "{counts}"
    );
    let generations = browser.text("#generations").await.unwrap_or_default();
    assert!(
        generations.contains("650 file(s) (add 650): ")
            && generations.contains("and 644 more")
            && !generations.contains("c649.yaml"),
        "{generations}"
    );
    assert!(generations.len() < 4000, "{generations}");
    browser.open(&format!("http://{a_addr}/?q=mesh-b")).await;
    let nodes = browser.text("#nodes").await.unwrap_or_default();
    assert!(
        nodes.contains("mesh-b")
            && nodes.contains("sy-b")
            && !nodes.contains("edge-a")
            && nodes.contains(super_rejected())
            && nodes.contains(&command),
        "{nodes}"
    );
    browser.close().await;

    // The way back, as printed.
    let words: Vec<&str> = command.split_whitespace().skip(1).collect();
    let mut args = words.clone();
    args.extend(["--wait", "--wait-timeout", "60s", "--admin-addr", &a_addr]);
    let (code, out) = said(&args);
    assert_eq!(code, Some(0), "{out}");
    let (code, status, _) = a.status_said(&[]);
    assert_eq!(code, Some(0), "{status}");

    // A broken document written into etcd by hand: every replica's load fails (exit 3);
    // then the fix, applied against the revision read and waited for, is judged by its own
    // revision, not by the replicas' reports of the broken one.
    write(
        &snap,
        "mesh.yaml",
        &format!(
            "nodes: [{{ id: \"mesh-*\" }}]\n{}",
            static_cluster("mesh", upstream.port)
        ),
    );
    write(
        &snap,
        "base.yaml",
        &static_cluster("base", upstream.port).replace("1s", "2s"),
    );
    let broken = etcd
        .put(
            "/fleet/base.yaml",
            "clusters:\n  - name: base\n    conect_timeout: 1s\n",
        )
        .await;
    let failed = eventually(ARRIVE, || async { a.status_said(&[]).0 == Some(3) }).await;
    assert!(failed.is_some(), "{}", a.status_said(&[]).1);
    let (code, out) = said(&[
        "apply",
        snap.to_str().expect("utf-8"),
        "--source",
        &url,
        "--expect-revision",
        &broken.to_string(),
        "--wait",
        "--wait-timeout",
        "60s",
        "--admin-addr",
        &a_addr,
    ]);
    assert_eq!(code, Some(0), "{out}");
    for envoy in [&edge, &mesh] {
        assert_eq!(
            envoy.active_cluster_timeout("base").await.as_deref(),
            Some("2s")
        );
    }

    // B killed (SIGKILL), and an apply waited for through A at once: B leaves the view when
    // its lease ends (15 s) and holds no gate; its Envoy, whose bootstrap names B alone, is
    // named as orphaned, and the wait returns once A's Envoy holds the change.
    b.process.kill();
    let killed = std::time::Instant::now();
    write(
        &snap,
        "base.yaml",
        &static_cluster("base", upstream.port).replace("1s", "3s"),
    );
    let (code, out) = said(&[
        "apply",
        snap.to_str().expect("utf-8"),
        "--source",
        &url,
        "--wait",
        "--wait-timeout",
        "90s",
        "--admin-addr",
        &a_addr,
    ]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        killed.elapsed() < Duration::from_secs(40),
        "the wait took {:?} after the kill: {out}",
        killed.elapsed()
    );
    assert_eq!(
        edge.active_cluster_timeout("base").await.as_deref(),
        Some("3s")
    );
    let (code, status, _) = a.status_said(&[]);
    assert_eq!(code, Some(0), "{status}");
    assert!(
        status.contains("REPLICA sy-b VANISHED")
            && status.contains("(orphaned")
            && status.contains("mesh-b"),
        "{status}"
    );
}

/// The words of Envoy's NACK of [`envoy_rejected_cluster`].
fn super_rejected() -> &'static str {
    support::ENVOY_REJECTED_CLUSTER
}
