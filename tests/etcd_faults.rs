//! The etcd source under faults, on a real three-member etcd cluster:
//! the leader killed while serving and during applies (seeded random timing: the seed is
//! printed, `SWITCHYARD_FAULT_SEED` replays it), every member down, and a compaction past a
//! replica's watch. Each apply writes two documents that must agree (clusters `one` and `two`
//! at the same connect_timeout): a generation holding half an apply would show them apart.

use switchyard_testkit as support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::Cluster as ClusterProto;
use prost::Message;
use support::envoy::{eventually, free_port, Switchyard};
use support::etcd::EtcdCluster;
use support::{write, XdsClient};
use switchyard::resource::ResourceType::Cluster;

fn cluster(name: &str, seconds: u32) -> String {
    format!("clusters:\n  - name: {name}\n    connect_timeout: {seconds}s\n")
}

/// Write apply number `n` into `dir`: both documents at `n` seconds.
fn stage(dir: &Path, n: u32) {
    write(dir, "one.yaml", &cluster("one", n));
    write(dir, "two.yaml", &cluster("two", n));
}

fn apply_command(dir: &Path, url: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchyard"));
    cmd.arg("apply")
        .arg(dir)
        .args(["--source", url, "--source-timeout", "10s"]);
    cmd
}

fn apply(dir: &Path, url: &str) -> (Option<i32>, String) {
    let out = apply_command(dir, url).output().expect("apply runs");
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The connect_timeouts (seconds) of clusters `one` and `two` in a CDS response.
fn timeouts(
    response: &envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse,
) -> (i64, i64) {
    let mut found = (-1, -1);
    for any in &response.resources {
        let c = ClusterProto::decode(any.value.as_slice()).expect("a cluster");
        let seconds = c.connect_timeout.map_or(0, |d| d.seconds);
        match c.name.as_str() {
            "one" => found.0 = seconds,
            "two" => found.1 = seconds,
            _ => {}
        }
    }
    found
}

/// What the documents in etcd say: (one, two) in seconds.
async fn held(etcd: &EtcdCluster) -> (i64, i64) {
    let mut found = (-1, -1);
    // Both documents at one revision (one range read), tried again while a leader is
    // being elected.
    let mut got = None;
    for _ in 0..50 {
        let mut client = etcd.client().await.expect("etcd answers");
        let options = switchyard_etcd::GetOptions::new().with_prefix();
        if let Ok(read) = client.get("/sy/", Some(options)).await {
            got = Some(read);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let got = got.expect("etcd answers a read");
    for (key, slot) in [("/sy/one.yaml", 0), ("/sy/two.yaml", 1)] {
        let text = got
            .kvs()
            .iter()
            .find(|kv| kv.key() == key.as_bytes())
            .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())
            .unwrap_or_default();
        let seconds = text
            .split("connect_timeout: ")
            .nth(1)
            .and_then(|t| t.trim().trim_end_matches('s').parse().ok())
            .unwrap_or(-1);
        if slot == 0 {
            found.0 = seconds;
        } else {
            found.1 = seconds;
        }
    }
    found
}

/// A CDS client that ACKs everything; every response must hold both clusters agreeing.
async fn subscriber(server: &Switchyard) -> XdsClient {
    let mut client = server.ads("edge-1").await;
    client.subscribe(Cluster, &[]).await;
    client
}

/// How long a change may take to be served after a member is killed, by the product's own
/// schedule: etcd elects a leader (1 s election timeout, a few rounds at most), the
/// follower's first try after a watch that worked (`ETCD_RETRY_FIRST`, 0.5 s, then doubling)
/// and each connect or read it makes (at most 5 s each), twice over.
const SERVED_WITHIN: Duration = Duration::from_secs(30);

/// Read responses until one holds both clusters at `seconds` (each must agree); panics after
/// [`SERVED_WITHIN`].
async fn until_served(client: &mut XdsClient, seconds: i64) {
    let deadline = tokio::time::Instant::now() + SERVED_WITHIN;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let response = client.recv_within(left).await.unwrap_or_else(|| {
            panic!("never served both clusters at {seconds}s within {SERVED_WITHIN:?}")
        });
        let (one, two) = timeouts(&response);
        assert_eq!(
            one, two,
            "a generation holds half an apply: {one}s and {two}s"
        );
        client.ack(&response, &[]).await;
        if one == seconds {
            return;
        }
    }
}

/// The documents of apply 1 written through `url`, and a replica serving `replica_url` with
/// a client synced on them: the snapshot directory, the replica and its client.
async fn serving(
    dir: &Path,
    url: &str,
    replica_url: &str,
) -> (std::path::PathBuf, Switchyard, XdsClient) {
    let snap = dir.join("snap");
    std::fs::create_dir(&snap).expect("mkdir");
    stage(&snap, 1);
    let (code, out) = apply(&snap, url);
    assert_eq!(code, Some(0), "{out}");
    let logs = dir.join("replica");
    std::fs::create_dir(&logs).expect("mkdir");
    let server = Switchyard::start_serving(
        &["--source", replica_url],
        &logs,
        (free_port(), free_port()),
        &[],
    )
    .await;
    let mut client = subscriber(&server).await;
    until_served(&mut client, 1).await;
    (snap, server, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_killed_or_every_member_down_loses_nothing_and_applies_nothing_partial() {
    let seed = support::seed_from("SWITCHYARD_FAULT_SEED");
    let mut random = support::Seeded(seed);
    let dir = tempfile::tempdir().expect("tmp");
    let mut etcd = EtcdCluster::start(dir.path()).await;
    let url = format!("etcd://{}/sy", etcd.endpoints());
    let (snap, server, mut client) = serving(dir.path(), &url, &url).await;

    // The leader killed while serving: serving goes on, an apply through the other two
    // members lands and is served, and the member comes back.
    let leader = etcd.leader().await;
    etcd.kill(leader);
    stage(&snap, 2);
    let (code, out) = apply(&snap, &url);
    assert_eq!(code, Some(0), "an apply with the leader down: {out}");
    until_served(&mut client, 2).await;
    etcd.restart(leader).await;

    // The leader killed during an apply, at a random moment: the apply lands whole or not at
    // all (an apply that says it failed may still have landed: its answer was lost), and the
    // replica serves what etcd holds.
    for round in 0..3u32 {
        let n = 3 + round;
        stage(&snap, n);
        let leader = etcd.leader().await;
        let delay = Duration::from_millis(random.draw() % 300);
        let applying = apply_command(&snap, &url)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("apply starts");
        tokio::time::sleep(delay).await;
        etcd.kill(leader);
        let out = applying.wait_with_output().expect("apply ends");
        let (one, two) = held(&etcd).await;
        eprintln!(
            "round {round}: leader m{} killed after {delay:?}; apply exited {:?}; etcd holds {one}s/{two}s",
            leader + 1,
            out.status.code()
        );
        assert_eq!(one, two, "half an apply landed");
        if out.status.success() {
            assert_eq!(
                one,
                i64::from(n),
                "an apply that said it landed is not there"
            );
        } else {
            assert!(one == i64::from(n) || one == i64::from(n - 1), "{one}");
        }
        until_served(&mut client, one).await;
        etcd.restart(leader).await;
    }

    // Every member down: serving goes on (the client keeps its clusters, the replica stays
    // ready and says etcd does not answer); back: the watch resumes, and an apply arrives.
    for i in 0..3 {
        etcd.kill(i);
    }
    let noticed = eventually(Duration::from_secs(30), || async {
        server
            .status()
            .await
            .and_then(|s| s.config)
            .and_then(|c| c.source)
            .is_some_and(|s| !s.answering)
    })
    .await;
    assert!(noticed.is_some(), "the replica says etcd does not answer");
    let ready = reqwest::get(format!("http://127.0.0.1:{}/readyz", server.admin_port))
        .await
        .expect("readyz");
    assert_eq!(ready.status(), 200, "the last good generation serves");
    client.expect_quiet(Duration::from_secs(1)).await;
    etcd.restart_all().await;
    stage(&snap, 20);
    let (code, out) = apply(&snap, &url);
    assert_eq!(code, Some(0), "{out}");
    until_served(&mut client, 20).await;
    let answering = eventually(Duration::from_secs(30), || async {
        server
            .status()
            .await
            .and_then(|s| s.config)
            .and_then(|c| c.source)
            .is_some_and(|s| s.answering)
    })
    .await;
    assert!(answering.is_some(), "the replica says etcd answers again");
}

/// A compaction past a replica's watch (its only member away meanwhile): the prefix is read
/// again, once, and proxies are sent nothing they hold (content hashes); a later change
/// arrives as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_past_the_watch_reads_again_and_resends_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut etcd = EtcdCluster::start(dir.path()).await;
    // The replica knows member m1 only; applies go through all three.
    let url_m1 = format!("etcd://{}/sy", etcd.endpoint(0));
    let url = format!("etcd://{}/sy", etcd.endpoints());
    let (snap, server, mut client) = serving(dir.path(), &url, &url_m1).await;
    let generation = server.status().await.expect("status").generation;

    etcd.kill(0);
    let mut other = etcd.client().await.expect("m2 or m3 answers");
    let mut last = 0;
    for i in 0..20 {
        let put = other
            .put("/elsewhere/key", format!("{i}"), None)
            .await
            .expect("put");
        last = put.header().expect("header").revision();
    }
    other.compact(last).await.expect("compact");
    etcd.restart(0).await;
    let reread = eventually(Duration::from_secs(40), || async {
        server.logged("etcd compacted past the watch", &[])
    })
    .await;
    assert!(
        reread.is_some(),
        "the replica read the prefix again after the compaction"
    );
    client.expect_quiet(Duration::from_secs(1)).await;
    assert_eq!(
        server.status().await.expect("status").generation,
        generation,
        "nothing new was published"
    );
    stage(&snap, 2);
    let (code, out) = apply(&snap, &url);
    assert_eq!(code, Some(0), "{out}");
    until_served(&mut client, 2).await;
}

/// The summaries under `/sy.replicas/`: replica name -> (lease, create revision).
async fn summary_leases(
    etcd: &support::etcd::Etcd,
) -> std::collections::BTreeMap<String, (i64, i64)> {
    let mut client = etcd.client().await.expect("etcd answers");
    let options = switchyard_etcd::GetOptions::new().with_prefix();
    let read = client
        .get("/sy.replicas/", Some(options))
        .await
        .expect("read the summaries");
    read.kvs()
        .iter()
        .map(|kv| {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            let name = key.trim_start_matches("/sy.replicas/").to_string();
            (name, (kv.lease(), kv.create_revision()))
        })
        .collect()
}

/// An etcd stall shorter than half a summary's lease (etcd SIGSTOPped for 7 s, twice: a
/// leader election's length, a member paused) changes nothing: through it and after it,
/// every one of three replicas says its source answers and its view of the others is not
/// stale, and keeps its summary on the same lease (the same key, never written anew on
/// another); no replica logs an outage or a lapsed lease; an apply after it is served by
/// every replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_stall_shorter_than_half_a_lease_changes_no_view_and_no_lease() {
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = support::etcd::Etcd::start(dir.path()).await;
    let url = format!("etcd://{}/sy", etcd.endpoint());
    let snap = dir.path().join("snap");
    std::fs::create_dir(&snap).expect("mkdir");
    stage(&snap, 1);
    let (code, out) = apply(&snap, &url);
    assert_eq!(code, Some(0), "{out}");
    let mut replicas = Vec::new();
    for name in ["a", "b", "c"] {
        let logs = dir.path().join(name);
        std::fs::create_dir(&logs).expect("mkdir");
        replicas.push(
            Switchyard::start_serving(
                &["--source", &url],
                &logs,
                (free_port(), free_port()),
                &["--replica-name", name],
            )
            .await,
        );
    }
    let shared = eventually(Duration::from_secs(30), || async {
        let mut all = true;
        for r in &replicas {
            all &= r.status_said(&[]).0 == Some(0)
                && r.status()
                    .await
                    .and_then(|s| s.replicas)
                    .is_some_and(|v| v.replicas.len() == 3);
        }
        all
    })
    .await;
    assert!(shared.is_some(), "three replicas share one view");
    let before = summary_leases(&etcd).await;
    assert_eq!(before.len(), 3, "{before:?}");

    // Every replica's view, sampled through the stall and for as long after it.
    let unchanged = |status: &switchyard::admin::Status| {
        let source = status.config.as_ref().and_then(|c| c.source.as_ref());
        let view = status.replicas.as_ref();
        source.is_some_and(|s| s.answering)
            && view.is_some_and(|v| !v.stale && v.replicas.len() == 3)
    };
    let pid = etcd.process.pid();
    let signal = |signal: &str| support::run::signal(pid, signal);
    // Two stalls of 7 s, 3 s apart, then 6 s more: each renewal, watch and check of every
    // replica meets one (a renewal every 5 s, the channel's ping every 6 s).
    let began = std::time::Instant::now();
    let stalled = |at: Duration| {
        [(0, 7), (10, 17)]
            .iter()
            .any(|(from, to)| at >= Duration::from_secs(*from) && at < Duration::from_secs(*to))
    };
    while began.elapsed() < Duration::from_secs(23) {
        match (stalled(began.elapsed()), support::run::stopped(pid)) {
            (true, false) => signal("-STOP"),
            (false, true) => signal("-CONT"),
            _ => {}
        }
        for r in &replicas {
            let status = r.status().await.expect("the admin API answers");
            assert!(
                unchanged(&status),
                "{:.1} s after the first stall began: {:?} {:?}",
                began.elapsed().as_secs_f64(),
                status.config.and_then(|c| c.source),
                status
                    .replicas
                    .map(|v| (v.stale, v.error, v.replicas.len()))
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(!support::run::stopped(pid), "etcd was resumed");
    assert_eq!(
        summary_leases(&etcd).await,
        before,
        "every summary on the lease it had"
    );
    for r in &replicas {
        let log = r.process.log_text();
        for said in ["etcd does not answer", "lease lapsed", "view is stale"] {
            assert!(!log.contains(said), "{said:?} in\n{log}");
        }
    }
    // And the fleet goes on: an apply is served by every replica.
    stage(&snap, 2);
    let (code, out) = apply(&snap, &url);
    assert_eq!(code, Some(0), "{out}");
    for r in &replicas {
        let mut client = subscriber(r).await;
        until_served(&mut client, 2).await;
    }
}
