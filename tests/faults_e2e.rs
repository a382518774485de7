//! Faults that production brings and a kill does not, against real processes (etcd, the
//! `switchyard` binary, Envoy 1.40), each judged by what on-call reads (`status`, its exit
//! code, the log) and what the proxies keep (operations.md "Faults beyond a kill"):
//! - a replica cut from etcd by a partition (a network namespace of its own, the link set
//!   down: no reset, packets lost) knows it within seconds, its Envoy keeps serving, and it
//!   catches up once the link is back;
//! - a replica whose wall clock is five minutes off, either way, is judged as any other
//!   (liveness is the lease, order is the revision);
//! - a replica paused (SIGSTOP) past its lease leaves the view, an apply waited for through
//!   the other returns meanwhile, and once resumed it serves the change.

use switchyard_testkit as support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::envoy::{envoy_binary, eventually, free_port, http_get, Envoy, Switchyard};
use support::etcd::Etcd;
use support::netns::Netns;
use support::run::{said, signal};
use support::{rds_listener, write};

/// What the route answers: a direct response, so the proxy needs no upstream.
fn routes(body: &str) -> String {
    format!(
        r#"
routes:
  - name: main
    virtual_hosts:
      - name: all
        domains: ["*"]
        routes:
          - match: {{ prefix: / }}
            direct_response: {{ status: 200, body: {{ inline_string: {body} }} }}
"#
    )
}

fn snapshot(dir: &Path, listener: u16, body: &str) {
    write(
        dir,
        "listener.yaml",
        &rds_listener("http", listener, "main"),
    );
    write(dir, "routes.yaml", &routes(body));
}

fn apply(dir: &Path, url: &str) -> (Option<i32>, String) {
    said(&[
        "apply",
        dir.to_str().expect("a UTF-8 path"),
        "--source",
        url,
    ])
}

async fn replica(url: &str, dir: &Path, name: &str) -> Switchyard {
    let logs = dir.join(name);
    std::fs::create_dir_all(&logs).expect("log dir");
    Switchyard::start_serving(
        &["--source", url],
        &logs,
        (free_port(), free_port()),
        &["--replica-name", name],
    )
    .await
}

/// Whether the last log lines of `server` include a WARN or ERROR saying `words`.
fn warned(server: &Switchyard, words: &str) -> bool {
    server.log_lines().iter().any(|l| {
        matches!(l["level"].as_str(), Some("WARN" | "ERROR"))
            && l.to_string().to_lowercase().contains(words)
    })
}

/// A partition (operations.md "Faults beyond a kill"): replica `cut` and its Envoy in a
/// network namespace of their own, reaching etcd over a veth pair; replica `whole` and the
/// test on the host. The link set down: the cut replica knows within seconds that etcd does
/// not answer (`status` exits 8 and says so, the log says so once), its Envoy keeps every
/// resource and answers every request; the other replica serves an apply made meanwhile and
/// sees the cut one leave the view when its lease ends; the link back, the cut replica
/// serves the change, and `status` exits 0 again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_replica_cut_from_etcd_knows_it_keeps_serving_and_catches_up() {
    let Some(envoy_bin) = envoy_binary() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let ns = Netns::make();
    let etcd = Etcd::start_also_on(dir.path(), Some(&ns.host_addr)).await;
    let url = format!("etcd://{}/fleet", etcd.endpoint());
    let url_inside = format!("etcd://{}:{}/fleet", ns.host_addr, etcd.client_port);
    let listener = free_port();
    let snap = dir.path().join("snap");
    std::fs::create_dir(&snap).expect("mkdir");
    snapshot(&snap, listener, "before");
    let (code, out) = apply(&snap, &url);
    assert_eq!(code, Some(0), "{out}");

    let whole = replica(&url, dir.path(), "whole").await;
    let cut = ns.within_async(|| replica(&url_inside, dir.path(), "cut"));
    let envoy_dir = dir.path().join("envoy");
    std::fs::create_dir(&envoy_dir).expect("mkdir");
    let envoy = ns.within_async(|| Envoy::start(&envoy_bin, cut.port, "edge-1", &envoy_dir));
    let answers = |want: &'static str| {
        ns.within_async(|| async move {
            eventually(Duration::from_secs(20), || async {
                http_get(listener).await.as_deref() == Some(want)
            })
            .await
        })
    };
    assert!(
        answers("before").is_some(),
        "the Envoy in the namespace serves"
    );
    let (code, out, _) = ns.within(|| cut.status_said(&[]));
    assert_eq!(
        code,
        Some(0),
        "the cut replica is done before the cut:\n{out}"
    );

    ns.cut();
    let cut_at = Instant::now();
    // Known within seconds: the etcd channel's keepalive finds the link dead, whatever
    // the watch is waiting for.
    let mut said = String::new();
    let known = ns.within_async(|| async {
        eventually(Duration::from_secs(30), || {
            let (code, out, _) = cut.status_said(&[]);
            said = out;
            async move { code == Some(8) }
        })
        .await
    });
    assert!(
        known.is_some(),
        "the cut replica's status never exited 8 (source down) in 30 s; it said:\n{said}"
    );
    let seen_in = cut_at.elapsed();
    assert!(
        said.to_lowercase().contains("does not answer since"),
        "status says the source does not answer:\n{said}"
    );
    // Said in the log as the source's health says it (the same moment, give or take the
    // log's write).
    let logged = eventually(Duration::from_secs(2), || async {
        warned(&cut, "etcd does not answer")
    })
    .await;
    assert!(
        logged.is_some(),
        "the cut replica's log says etcd does not answer"
    );
    // Its Envoy keeps what it holds, and answers.
    let served = ns.within_async(|| async {
        let mut answered = 0;
        for _ in 0..20 {
            if http_get(listener).await.as_deref() == Some("before") {
                answered += 1;
            }
        }
        answered
    });
    assert_eq!(
        served, 20,
        "every request through the cut replica's Envoy is answered"
    );
    let clusters = ns.within_async(|| envoy.stat("listener_manager.total_listeners_active"));
    assert_eq!(clusters, Some(1), "the Envoy keeps its listener");

    // The fleet goes on without it: an apply meanwhile is served by the other replica,
    // which sees the cut one leave when its lease ends.
    snapshot(&snap, listener, "after");
    let (code, out) = apply(&snap, &url);
    assert_eq!(code, Some(0), "{out}");
    let mut whole_said = String::new();
    let gone = eventually(Duration::from_secs(40), || {
        let (_, out) = whole.status_command(&[]);
        let left = out.contains("cut") && out.contains("VANISHED");
        whole_said = out;
        async move { left }
    })
    .await;
    assert!(
        gone.is_some(),
        "the whole replica sees the cut one leave:\n{whole_said}"
    );

    ns.mend();
    let mended_at = Instant::now();
    assert!(
        answers("after").is_some(),
        "once the link is back the cut replica serves the change applied meanwhile"
    );
    let back = ns.within_async(|| async {
        eventually(Duration::from_secs(30), || {
            let (code, _, _) = cut.status_said(&[]);
            async move { code == Some(0) }
        })
        .await
    });
    assert!(back.is_some(), "the cut replica's status exits 0 again");
    println!(
        "a replica cut from etcd: status exited 8 {:.1} s after the cut; served the change {:.1} s after the link came back",
        seen_in.as_secs_f64(),
        mended_at.elapsed().as_secs_f64()
    );
}

/// libfaketime, which Debian's faketime package installs.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The rollout's bake in the clock test: long enough that a bake cut short by a clock
/// five minutes ahead is plain.
const BAKE_SECS: u64 = 8;

async fn replica_skewed(url: &str, dir: &Path, name: &str, faketime: Option<&str>) -> Switchyard {
    let logs = dir.join(name);
    std::fs::create_dir_all(&logs).expect("log dir");
    let env: Vec<(&str, &str)> = match faketime {
        Some(offset) => vec![
            ("LD_PRELOAD", LIBFAKETIME),
            ("FAKETIME", offset),
            ("DONT_FAKE_MONOTONIC", "1"),
        ],
        None => Vec::new(),
    };
    let bake = format!("{BAKE_SECS}s");
    Switchyard::start_serving_env(
        &["--source", url],
        &logs,
        (free_port(), free_port()),
        &[
            "--replica-name",
            name,
            "--canary-id",
            "canary-*",
            "--rollout-bake",
            &bake,
        ],
        &env,
    )
    .await
}

/// Each replica's `status`: (exit code, text), for the failure message.
fn statuses(replicas: &[&Switchyard]) -> Vec<(Option<i32>, String)> {
    replicas.iter().map(|r| r.status_command(&[])).collect()
}

/// Wait (at most 30 s) until every replica's `status` exits 0, and none calls a replica
/// unseen.
async fn every_replica_done(replicas: &[&Switchyard], when: &str) {
    let mut said = Vec::new();
    let done = eventually(Duration::from_secs(30), || {
        said = statuses(replicas);
        let done = said.iter().all(|(code, _)| *code == Some(0));
        async move { done }
    })
    .await;
    assert!(
        done.is_some(),
        "every replica's status exits 0 {when}: {said:#?}"
    );
    for (_, text) in &said {
        assert!(
            !text.contains("UNSEEN"),
            "no replica is unseen {when}:\n{text}"
        );
    }
}

/// A clock five minutes off (operations.md "Faults beyond a kill"): three replicas on one
/// etcd, one honest, one five minutes ahead and one five minutes behind (libfaketime, the
/// wall clock only). Every replica's `status` exits 0 and calls no replica unseen, at rest
/// and after a change; the change's bake lasts as long as the policy says on every replica
/// (it ends when etcd ends the bake key's lease, not when any replica's clock says so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_replica_whose_clock_is_minutes_off_is_judged_as_any_other() {
    let Some(envoy_bin) = envoy_binary() else {
        return;
    };
    if !Path::new(LIBFAKETIME).exists() {
        assert!(
            std::env::var("CI").is_err(),
            "{LIBFAKETIME} is missing under CI: scripts/deps installs Debian's faketime"
        );
        eprintln!("{LIBFAKETIME} is missing (Debian's faketime): this test did not run");
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(dir.path()).await;
    let url = format!("etcd://{}/fleet", etcd.endpoint());
    let snap = dir.path().join("snap");
    std::fs::create_dir(&snap).expect("mkdir");
    let cluster = |timeout: &str| {
        format!("clusters:\n  - name: a\n    connect_timeout: {timeout}\n    type: STATIC\n")
    };
    write(&snap, "a.yaml", &cluster("1s"));
    let (code, out) = apply(&snap, &url);
    assert_eq!(code, Some(0), "{out}");

    let honest = replica_skewed(&url, dir.path(), "honest", None).await;
    let ahead = replica_skewed(&url, dir.path(), "ahead", Some("+5m")).await;
    let behind = replica_skewed(&url, dir.path(), "behind", Some("-5m")).await;
    let all = [&honest, &ahead, &behind];
    let (canary_dir, edge_dir) = (dir.path().join("canary"), dir.path().join("edge"));
    std::fs::create_dir(&canary_dir).expect("mkdir");
    std::fs::create_dir(&edge_dir).expect("mkdir");
    let canary = Envoy::start(&envoy_bin, honest.port, "canary-1", &canary_dir).await;
    let edge = Envoy::start(&envoy_bin, behind.port, "edge-1", &edge_dir).await;
    for envoy in [&canary, &edge] {
        let synced = eventually(Duration::from_secs(20), || async {
            envoy.active_cluster_timeout("a").await.as_deref() == Some("1s")
        })
        .await;
        assert!(synced.is_some(), "the first generation goes to every node");
    }
    // The clocks are off: each replica's summary is dated by its clock.
    let at = |view: &serde_json::Value, name: &str| {
        view["replicas"]["replicas"]
            .as_array()
            .and_then(|s| s.iter().find(|r| r["replica"] == name))
            .and_then(|r| r["at"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    let mut dates = Vec::new();
    let skewed = eventually(Duration::from_secs(20), || {
        let json = honest.status_command(&["--output", "json"]).1;
        let view: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
        dates = ["ahead", "honest", "behind"]
            .map(|name| at(&view, name))
            .to_vec();
        let skewed =
            dates.iter().all(|d| !d.is_empty()) && dates[0] > dates[1] && dates[1] > dates[2];
        async move { skewed }
    })
    .await;
    assert!(
        skewed.is_some(),
        "libfaketime moves the clocks (ahead, honest, behind): {dates:?}"
    );
    every_replica_done(&all, "at rest").await;

    // A change: the canary on the honest replica takes it, the bake goes by, then the
    // edge on the replica five minutes behind gets it. The replica five minutes ahead
    // takes part in every step, and does not cut the bake short.
    write(&snap, "a.yaml", &cluster("2s"));
    let (code, out) = apply(&snap, &url);
    assert_eq!(code, Some(0), "{out}");
    let to_canary = eventually(Duration::from_secs(20), || async {
        canary.active_cluster_timeout("a").await.as_deref() == Some("2s")
    })
    .await;
    assert!(to_canary.is_some(), "the canary gets the change");
    let canary_at = Instant::now();
    let to_edge = eventually(Duration::from_secs(60), || async {
        edge.active_cluster_timeout("a").await.as_deref() == Some("2s")
    })
    .await;
    assert!(to_edge.is_some(), "the edge gets the change after the bake");
    let baked = canary_at.elapsed();
    assert!(
        baked >= Duration::from_secs(BAKE_SECS - 1),
        "the edge got the change {:.1} s after the canary: the bake of {BAKE_SECS} s was cut short",
        baked.as_secs_f64()
    );
    every_replica_done(&all, "after the change").await;
    println!(
        "clocks five minutes off: the edge got the change {:.1} s after the canary (bake {BAKE_SECS} s)",
        baked.as_secs_f64()
    );
}

/// Ask `server`'s `status` until it exits `code` (within `limit`): whether it did, and what
/// it said last.
async fn status_until(server: &Switchyard, code: i32, limit: Duration) -> (bool, String) {
    let mut said = String::new();
    let reached = eventually(limit, || {
        let (exit, out) = server.status_command(&[]);
        said = out;
        async move { exit == Some(code) }
    })
    .await;
    (reached.is_some(), said)
}

/// A pause past the lease (operations.md "Faults beyond a kill"): replica `paused` stopped
/// (SIGSTOP) with an Envoy on it. The other replica sees it leave when its lease ends; an
/// apply waited for through the other returns meanwhile (the paused replica's proxy holds
/// no gate, named orphaned); its Envoy keeps serving. Resumed (SIGCONT), the replica says
/// its lease lapsed, shares its summary again on a new one, serves the change, and every
/// `status` exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_replica_paused_past_its_lease_leaves_the_view_and_comes_back() {
    let Some(envoy_bin) = envoy_binary() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(dir.path()).await;
    let url = format!("etcd://{}/fleet", etcd.endpoint());
    let listener = free_port();
    let snap = dir.path().join("snap");
    std::fs::create_dir(&snap).expect("mkdir");
    snapshot(&snap, listener, "before");
    let (code, out) = apply(&snap, &url);
    assert_eq!(code, Some(0), "{out}");
    let running = replica(&url, dir.path(), "running").await;
    let paused = replica(&url, dir.path(), "paused").await;
    let envoy_dir = dir.path().join("envoy");
    std::fs::create_dir(&envoy_dir).expect("mkdir");
    let _envoy = Envoy::start(&envoy_bin, paused.port, "edge-1", &envoy_dir).await;
    let serves = |want: &'static str| async move {
        eventually(Duration::from_secs(30), || async {
            http_get(listener).await.as_deref() == Some(want)
        })
        .await
    };
    assert!(serves("before").await.is_some(), "the Envoy serves");
    let both = eventually(Duration::from_secs(20), || {
        let (code, out) = running.status_command(&[]);
        // The paused replica's summary lists its Envoy before it is paused.
        let both = code == Some(0) && out.contains("paused") && out.contains("edge-1");
        async move { both }
    })
    .await;
    assert!(
        both.is_some(),
        "the running replica sees both, and the other's Envoy, done"
    );

    signal(paused.process.pid(), "-STOP");
    let stopped_at = Instant::now();
    let mut said = String::new();
    let gone = eventually(Duration::from_secs(40), || {
        let (_, out) = running.status_command(&[]);
        let gone = out.contains("VANISHED");
        said = out;
        async move { gone }
    })
    .await;
    assert!(
        gone.is_some(),
        "the paused replica leaves the view:\n{said}"
    );
    let seen_in = stopped_at.elapsed();
    snapshot(&snap, listener, "after");
    let wait = said_wait(&snap, &url, running.admin_port);
    assert_eq!(
        wait.0,
        Some(0),
        "apply --wait through the running replica returns: {}",
        wait.1
    );
    // The paused replica's proxy holds no gate: named as orphaned by the running replica.
    let (_, view) = running.status_command(&[]);
    assert!(
        view.contains("orphaned") && view.contains("edge-1"),
        "the paused replica's proxy is named orphaned:\n{view}"
    );
    assert_eq!(
        http_get(listener).await.as_deref(),
        Some("before"),
        "the paused replica's Envoy keeps serving what it holds"
    );

    signal(paused.process.pid(), "-CONT");
    let resumed_at = Instant::now();
    assert!(
        serves("after").await.is_some(),
        "resumed, the replica serves the change applied meanwhile"
    );
    let served_in = resumed_at.elapsed();
    let back = eventually(Duration::from_secs(30), || {
        let (a, _) = running.status_command(&[]);
        let (b, _) = paused.status_command(&[]);
        async move { a == Some(0) && b == Some(0) }
    })
    .await;
    assert!(back.is_some(), "both replicas' status exit 0 again");
    assert!(
        warned(&paused, "lease lapsed"),
        "the resumed replica says its lease lapsed"
    );
    println!(
        "a replica paused: seen gone {:.1} s after SIGSTOP; served the change {:.1} s after SIGCONT",
        seen_in.as_secs_f64(),
        served_in.as_secs_f64()
    );
}

/// `apply DIR --source URL --wait` through the admin API at `admin_port`.
fn said_wait(dir: &Path, url: &str, admin_port: u16) -> (Option<i32>, String) {
    said(&[
        "apply",
        dir.to_str().expect("a UTF-8 path"),
        "--source",
        url,
        "--wait",
        "--wait-timeout",
        "60s",
        "--admin-addr",
        &format!("127.0.0.1:{admin_port}"),
    ])
}

/// A task that dies (operations.md "Faults beyond a kill"), through the test-only hook
/// `SWITCHYARD_TEST_PANIC`: the source's follower panics at its first three starts, and the
/// first load it hands over panics. While the follower is down, `status` exits 11 naming it
/// and its cause, `/readyz` is not ready, the page says so; it is started again by itself
/// (counted in `switchyard_task_restarts_total`), and follows what was applied while it was
/// down. The panicked load is a failed load (`status` exits 3 with its words), the last good
/// generation keeps serving, and the next change loads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_task_that_panics_is_said_down_and_started_again_and_a_panicked_load_fails() {
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(dir.path()).await;
    let url = format!("etcd://{}/fleet", etcd.endpoint());
    let listener = free_port();
    let snap = dir.path().join("snap");
    std::fs::create_dir(&snap).expect("mkdir");
    snapshot(&snap, listener, "one");
    let (code, out) = apply(&snap, &url);
    assert_eq!(code, Some(0), "{out}");
    let logs = dir.path().join("replica");
    std::fs::create_dir_all(&logs).expect("log dir");
    let server = Switchyard::start_serving_env(
        &["--source", &url],
        &logs,
        (free_port(), free_port()),
        &["--replica-name", "hooked"],
        &[("SWITCHYARD_TEST_PANIC", "follower*3,load")],
    )
    .await;
    let (down, said) = status_until(&server, 11, Duration::from_secs(10)).await;
    assert!(down, "status exits 11 while the follower is down:\n{said}");
    assert!(
        said.contains("TASK DOWN: follower") && said.contains("panicked"),
        "status names the task and its cause:\n{said}"
    );
    let readyz = reqwest::get(format!("http://127.0.0.1:{}/readyz", server.admin_port))
        .await
        .expect("readyz answers");
    let ready_code = readyz.status().as_u16();
    let ready_text = readyz.text().await.unwrap_or_default();
    // The follower may have been started again between the two asks; then it is down
    // again within a second (it panics three times).
    assert!(
        ready_code == 503 && ready_text.contains("follower"),
        "readyz is not ready while a task is down: {ready_code} {ready_text}"
    );
    let page = reqwest::get(format!("http://127.0.0.1:{}/", server.admin_port))
        .await
        .expect("the page answers")
        .text()
        .await
        .unwrap_or_default();
    assert!(
        page.contains("Task down: follower"),
        "the page says the follower is down"
    );
    // Applied while the follower is down: loaded once it runs again. Its first load panics
    // (the hook): a failed load, the last good generation serving.
    snapshot(&snap, listener, "two");
    let (code, out) = apply(&snap, &url);
    assert_eq!(code, Some(0), "{out}");
    let (failed, said) = status_until(&server, 3, Duration::from_secs(30)).await;
    assert!(
        failed,
        "the panicked load is a failed load (exit 3):\n{said}"
    );
    assert!(
        said.contains("the load stopped on a bug in Switchyard"),
        "status says the load stopped on a bug:\n{said}"
    );
    snapshot(&snap, listener, "three");
    let (code, out) = apply(&snap, &url);
    assert_eq!(code, Some(0), "{out}");
    let (done, said) = status_until(&server, 0, Duration::from_secs(30)).await;
    assert!(done, "the next change loads, every task runs:\n{said}");
    let restarts = server
        .metric("switchyard_task_restarts_total{task=\"follower\"}")
        .await;
    assert_eq!(
        restarts,
        Some(3.0),
        "three restarts of the follower are counted"
    );
    assert!(
        server.logged("A long-running task stopped", &[("task", "follower")]),
        "the log names the task that stopped"
    );
    let config = server.status().await.and_then(|s| s.config);
    assert!(
        config
            .as_ref()
            .is_some_and(|c| c.ok && c.revision.is_some()),
        "the last load is good: {config:?}"
    );
}

/// `count` STATIC clusters, cluster `c0`'s connect_timeout `seconds`: about 150 bytes each.
fn many_clusters(count: usize, seconds: u32) -> String {
    let mut text = String::from("clusters:\n");
    for i in 0..count {
        let timeout = if i == 0 { seconds } else { 1 };
        text.push_str(&format!(
            "  - name: c{i}\n    connect_timeout: {timeout}s\n    type: STATIC\n    \
             load_assignment: {{ cluster_name: c{i}, endpoints: [{{ lb_endpoints: [{{ endpoint: \
             {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }} }}] }}] }}\n",
            10_000 + i
        ));
    }
    text
}

/// Readers that never read (operations.md "Faults beyond a kill"): an ADS stream opened with
/// a 64 KiB window and no window auto-tuning that never reads its responses, beside a
/// healthy client, while the clusters (about 300 KB a response) change. The healthy client
/// gets every change; the stalled stream is sent its first response only (the next waits
/// for its answer: what it holds here is bounded), and once that has gone unanswered for
/// `--stalled-stream-timeout` its connection is closed, counted
/// (`switchyard_limit_rejections_total{limit="stalled_streams"}`) and logged, and it leaves
/// `status`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_reader_that_never_reads_is_closed_after_the_stall_timeout() {
    use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
    use switchyard::resource::ResourceType;

    const CLUSTERS: usize = 2_000;
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("config");
    std::fs::create_dir(&config).expect("mkdir");
    write(&config, "clusters.yaml", &many_clusters(CLUSTERS, 1));
    let server =
        Switchyard::start_with_args(&config, dir.path(), &["--stalled-stream-timeout", "2s"]).await;
    let channel =
        tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{}", server.port))
            .expect("uri")
            .initial_stream_window_size(Some(65_535))
            .initial_connection_window_size(Some(65_535))
            .http2_adaptive_window(false)
            .connect()
            .await
            .expect("connect");
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut first = support::request(ResourceType::Cluster, &[], "", "");
    first.node = Some(support::node("stalled", "test"));
    tx.send(first).await.expect("request");
    // Opened, and never read.
    let _stalled = AggregatedDiscoveryServiceClient::new(channel)
        .stream_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect("ADS stream opens");
    let mut healthy = server.ads("healthy").await;
    healthy.subscribe(ResourceType::Cluster, &[]).await;
    let response = healthy.recv().await;
    healthy.ack(&response, &[]).await;
    let stalled_limit = "switchyard_limit_rejections_total{limit=\"stalled_streams\"}";
    let started = Instant::now();
    let mut closed = None;
    let mut edits = 0;
    // Each change is a new response of every cluster for both streams; the stalled
    // stream's queue fills after a few, then its wait begins. Bounded: 60 changes, 60 s.
    for seconds in 2..62u32 {
        write(&config, "clusters.yaml", &many_clusters(CLUSTERS, seconds));
        edits += 1;
        let response = loop {
            let response = healthy.recv().await;
            healthy.ack(&response, &[]).await;
            let c0 = response.resources.iter().find_map(|any| {
                let c = <envoy_types::pb::envoy::config::cluster::v3::Cluster as prost::Message>::decode(any.value.as_slice()).ok()?;
                (c.name == "c0").then(|| c.connect_timeout.map_or(0, |d| d.seconds))
            });
            if c0 == Some(i64::from(seconds)) {
                break response;
            }
        };
        assert_eq!(
            response.resources.len(),
            CLUSTERS,
            "the healthy client gets every cluster"
        );
        if server.metric(stalled_limit).await == Some(1.0) {
            closed = Some(started.elapsed());
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            break;
        }
    }
    let closed = match closed {
        Some(at) => at,
        None => eventually(Duration::from_secs(10), || async {
            server.metric(stalled_limit).await == Some(1.0)
        })
        .await
        .map(|_| started.elapsed())
        .unwrap_or_else(|| {
            let sent = server
                .log_lines()
                .iter()
                .filter(|l| l["message"] == "Sending response." && l["node"] == "stalled")
                .count();
            panic!("the stalled stream was never closed ({edits} changes, {sent} responses sent to it)")
        }),
    };
    assert!(
        server.logged(
            "Closed a connection: its client answered none",
            &[("node", "stalled")]
        ),
        "the log names the stalled node"
    );
    let gone = eventually(Duration::from_secs(10), || async {
        server
            .status()
            .await
            .is_some_and(|s| s.nodes.iter().all(|n| n.node_id != "stalled"))
    })
    .await;
    assert!(gone.is_some(), "the stalled node leaves status");
    // The healthy client is still served.
    write(&config, "clusters.yaml", &many_clusters(CLUSTERS, 99));
    let after = loop {
        let response = healthy.recv().await;
        healthy.ack(&response, &[]).await;
        if response.resources.len() == CLUSTERS {
            break response;
        }
    };
    assert!(!after.version_info.is_empty());
    println!(
        "a reader that never reads: closed {:.1} s after the first of {edits} changes (--stalled-stream-timeout 2s)",
        closed.as_secs_f64()
    );
}

/// The whole daemon under supervision (operations.md "Faults beyond a kill"): a panic in an
/// xDS connection's task is logged with its task's name, and only that connection is gone
/// (the next client is served); the xDS port's accept loop ending (panicking) ends the
/// process with an error naming the task, rather than leaving a replica that serves no xDS
/// and says it is ready. Both through the test-only `SWITCHYARD_TEST_PANIC` hook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_connection_panic_is_said_and_a_server_that_stops_accepting_ends_the_process() {
    let dir = tempfile::tempdir().expect("tmp");
    let snap = dir.path().join("snap");
    std::fs::create_dir(&snap).expect("mkdir");
    snapshot(&snap, free_port(), "one");
    let snap_arg = snap.to_str().expect("a UTF-8 path");
    let logs = dir.path().join("connection");
    std::fs::create_dir_all(&logs).expect("log dir");
    let server = Switchyard::start_serving_env(
        &["--config", snap_arg],
        &logs,
        (free_port(), free_port()),
        &[],
        &[("SWITCHYARD_TEST_PANIC", "xds_connection")],
    )
    .await;
    // A first connection that sends something: its task panics, and is said.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut first = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
            .await
            .expect("connects");
        first
            .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .expect("writes");
        let mut rest = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(10), first.read_to_end(&mut rest)).await;
        assert!(
            closed.is_ok(),
            "the connection whose task panicked is closed"
        );
    }
    let said = eventually(Duration::from_secs(10), || async {
        server.log_lines().iter().any(|l| {
            l["level"] == "ERROR"
                && l["task"] == "an xDS connection"
                && l["cause"]
                    .as_str()
                    .is_some_and(|c| c.contains("it panicked"))
        })
    })
    .await;
    assert!(said.is_some(), "{}", server.process.log_text());
    // The next connection is served.
    let mut client = server.ads("edge-1").await;
    client
        .subscribe(switchyard::resource::ResourceType::Listener, &[])
        .await;
    let lds = client
        .recv_type(switchyard::resource::ResourceType::Listener)
        .await;
    assert_eq!(lds.resources.len(), 1);
    let ready = reqwest::get(format!("http://127.0.0.1:{}/readyz", server.admin_port))
        .await
        .expect("readyz answers");
    assert_eq!(
        ready.status().as_u16(),
        200,
        "one connection is not the server"
    );

    let logs = dir.path().join("accept");
    std::fs::create_dir_all(&logs).expect("log dir");
    let mut stopping = Switchyard::start_serving_env(
        &["--config", snap_arg],
        &logs,
        (free_port(), free_port()),
        &[],
        &[("SWITCHYARD_TEST_PANIC", "xds_accept")],
    )
    .await;
    // The readiness probe's connection made the accept loop panic: the process ends.
    let started = Instant::now();
    let code = loop {
        if let Some(code) = stopping.process.exit_code() {
            break Some(code);
        }
        if started.elapsed() > Duration::from_secs(20) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let log = stopping.process.log_text();
    assert!(code.is_some_and(|c| c != Some(0)), "exited {code:?}\n{log}");
    assert!(
        log.contains("A task the server cannot do without stopped")
            && log.contains("\"task\":\"xds\"")
            && log.contains("the accept loop panicked"),
        "{log}"
    );
}

/// Where `status` (of `server`) says to go back: the `switchyard rollback ...` command it
/// prints under a NACK.
fn rollback_command(status: &str) -> Option<Vec<String>> {
    let start = status.find("`switchyard rollback ")? + 1;
    let end = start + status[start..].find('`')?;
    Some(
        status[start..end]
            .split_whitespace()
            .skip(1)
            .map(str::to_string)
            .collect(),
    )
}

/// The runtime's edges, as on-call meets them, on two replicas of one etcd prefix with a
/// real Envoy on one (operations.md "Faults beyond a kill"):
/// - a value that is not text put under the prefix is a failed load naming its key on every
///   replica (exit 3), never an outage; the Envoy keeps serving; deleted, both are done;
/// - a route the Envoy NACKs after four unrelated applies: `status` names the last good
///   revision (the fourth apply's) and the rollback command, `config-dump` shows the route
///   the Envoy runs; the command run as printed exits 0 and the Envoy serves the way back;
/// - one `curl` of the REST endpoint on the other replica before a deploy: `apply --wait`
///   returns as soon as the Envoy holds the change, not a minute later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_non_text_key_a_nack_after_unrelated_applies_and_a_curl_before_a_deploy() {
    let Some(envoy_bin) = envoy_binary() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(dir.path()).await;
    let url = format!("etcd://{}/fleet", etcd.endpoint());
    let listener = free_port();
    let snap = dir.path().join("snap");
    std::fs::create_dir(&snap).expect("mkdir");
    snapshot(&snap, listener, "one");
    let spare = |seconds: u32| {
        format!("clusters:\n  - name: spare\n    connect_timeout: {seconds}s\n    type: STATIC\n")
    };
    write(&snap, "spare.yaml", &spare(1));
    let (code, out) = apply(&snap, &url);
    assert_eq!(code, Some(0), "{out}");
    let a = replica(&url, dir.path(), "a").await;
    let b = replica(&url, dir.path(), "b").await;
    let a_addr = format!("127.0.0.1:{}", a.admin_port);
    let envoy_dir = dir.path().join("envoy");
    std::fs::create_dir(&envoy_dir).expect("mkdir");
    let _envoy = Envoy::start(&envoy_bin, a.port, "edge-1", &envoy_dir).await;
    let answers = |want: &'static str| async move {
        eventually(Duration::from_secs(20), || async {
            http_get(listener).await.as_deref() == Some(want)
        })
        .await
    };
    assert!(answers("one").await.is_some(), "the Envoy serves");
    every_replica_done(&[&a, &b], "at start").await;

    // A value that is not text: a failed load naming the key, on every replica.
    let mut client = etcd.client().await.expect("etcd answers");
    client
        .put("/fleet/binary.yaml", vec![0xff, 0xfe, b'x'], None)
        .await
        .expect("put");
    for r in [&a, &b] {
        let (failed, said) = status_until(r, 3, Duration::from_secs(20)).await;
        assert!(
            failed && said.contains("etcd:/fleet/binary.yaml") && said.contains("not UTF-8 text"),
            "{said}"
        );
        assert!(!said.contains("does NOT answer"), "{said}");
    }
    assert_eq!(http_get(listener).await.as_deref(), Some("one"));
    client
        .delete("/fleet/binary.yaml", None)
        .await
        .expect("delete");
    every_replica_done(&[&a, &b], "the key deleted").await;

    // Four applies that change nothing the route's configuration holds, waited for.
    let mut last_good = 0;
    for seconds in 2..=5 {
        write(&snap, "spare.yaml", &spare(seconds));
        let (code, out) = said(&[
            "apply",
            snap.to_str().expect("utf-8"),
            "--source",
            &url,
            "--wait",
            "--wait-timeout",
            "60s",
            "--admin-addr",
            &a_addr,
        ]);
        assert_eq!(code, Some(0), "{out}");
        last_good = support::run::applied_revision(&out);
    }
    // Then a route whose Lua fails when run: the Envoy NACKs it.
    write(
        &snap,
        "routes.yaml",
        &format!(
            "{}            {}\n",
            routes("one"),
            support::bad_lua_per_route()
        ),
    );
    let (code, out) = apply(&snap, &url);
    assert_eq!(code, Some(0), "{out}");
    let (nacked, status) = status_until(&a, 2, Duration::from_secs(20)).await;
    assert!(nacked, "{status}");
    assert!(
        status.contains(&format!("last good: revision {last_good} ")),
        "the fourth apply's revision, which the Envoy still runs:\n{status}"
    );
    let (code, dump) = said(&["config-dump", "edge-1", "--admin-addr", &a_addr]);
    assert_eq!(code, Some(0), "{dump}");
    assert!(
        dump.contains("RDS NACKED: still runs version")
            && dump.contains("1 resource(s) it holds:")
            && dump.contains("- main (version"),
        "{dump}"
    );
    // The way back, run as printed.
    let mut back = rollback_command(&status).unwrap_or_else(|| panic!("no command in {status}"));
    back.extend(["--wait", "--wait-timeout", "60s", "--admin-addr", &a_addr].map(str::to_string));
    let args: Vec<&str> = back.iter().map(String::as_str).collect();
    let started = Instant::now();
    let (code, out) = said(&args);
    assert_eq!(code, Some(0), "{out}");
    let rolled_back = started.elapsed();
    assert!(answers("one").await.is_some());
    every_replica_done(&[&a, &b], "rolled back").await;

    // One curl of the REST endpoint on B, then a deploy waited for through A.
    let poll = serde_json::json!({
        "node": { "id": "curl-1", "cluster": "ops" },
        "type_url": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
    });
    let answered = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{}/v3/discovery:clusters", b.port))
        .body(poll.to_string())
        .send()
        .await
        .expect("the REST endpoint answers");
    assert_eq!(answered.status().as_u16(), 200);
    let (code, said_now) = b.status_command(&[]);
    assert_eq!(
        code,
        Some(0),
        "a one-off poll of what serves holds nothing:\n{said_now}"
    );
    assert!(said_now.contains("REST/rest (one poll)"), "{said_now}");
    // A person reads what the curl said, then deploys: a few seconds later.
    tokio::time::sleep(switchyard::fleet::POLLER_QUIET_MIN).await;
    snapshot(&snap, listener, "two");
    let started = Instant::now();
    let (code, out) = said(&[
        "apply",
        snap.to_str().expect("utf-8"),
        "--source",
        &url,
        "--wait",
        "--wait-timeout",
        "60s",
        "--admin-addr",
        &a_addr,
    ]);
    let deployed = started.elapsed();
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(http_get(listener).await.as_deref(), Some("two"));
    assert!(
        deployed < Duration::from_secs(3),
        "a curl held the deploy {deployed:?}:\n{out}"
    );
    println!(
        "the edges with a real Envoy: rollback --wait as printed took {:.1} s; apply --wait after a curl took {:.1} s",
        rolled_back.as_secs_f64(),
        deployed.as_secs_f64()
    );
}
