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

/// Read responses until one holds both clusters at `seconds` (each must agree); panics after
/// 30 s.
async fn until_served(client: &mut XdsClient, seconds: i64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let response = tokio::time::timeout_at(deadline, client.recv())
            .await
            .unwrap_or_else(|_| panic!("never served both clusters at {seconds}s"));
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
