//! The daemon as one library call (`switchyard::run`, `switchyard::daemon::Daemon`): what
//! `switchyard serve` runs, with its watcher, on listeners the caller binds.

use switchyard_testkit as support;

use std::time::Duration;

use support::*;
use switchyard::daemon::{Daemon, Options, RunError};
use switchyard::resource::ResourceType::Cluster;
use tonic::transport::Channel;

/// `run` loads the files, serves xDS and the admin API, and returns once shutdown comes.
#[tokio::test]
async fn run_serves_until_shutdown() {
    let dir = tempfile::tempdir().expect("tmp");
    write(dir.path(), "c.yaml", &eds_cluster("backend", "1s", 8080));
    let listeners = listeners().await;
    let (xds, admin) = (
        listeners.xds.local_addr().expect("addr"),
        listeners.admin.local_addr().expect("addr"),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let options = Options {
        source: switchyard::source::Source::Files(vec![dir.path().to_path_buf()]),
        watch: true,
        ..Default::default()
    };
    let running = tokio::spawn(switchyard::run(listeners, options, async {
        let _ = stopped.await;
    }));
    let ready = reqwest::get(format!("http://{admin}/readyz"))
        .await
        .expect("admin answers");
    assert_eq!(ready.status().as_u16(), 200);
    let channel = Channel::from_shared(format!("http://{xds}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut client = XdsClient::ads(channel, node("n1", "test")).await;
    client.subscribe(Cluster, &[]).await;
    let r = client.recv_type(Cluster).await;
    assert_eq!(r.resources.len(), 1);
    let _ = stop.send(());
    let ended = tokio::time::timeout(WAIT, running)
        .await
        .expect("run returns after shutdown")
        .expect("joins");
    assert!(ended.is_ok(), "{ended:?}");
}

/// A config that does not load at start is the operator's error (exit 64 from `serve`), and
/// nothing is served.
#[tokio::test]
async fn run_refuses_a_config_that_does_not_load() {
    let dir = tempfile::tempdir().expect("tmp");
    write(
        dir.path(),
        "c.yaml",
        "clusters: [{name: a, connect_timeout: soon}]\n",
    );
    let options = Options {
        source: switchyard::source::Source::Files(vec![dir.path().to_path_buf()]),
        ..Default::default()
    };
    let refused = switchyard::run(listeners().await, options, std::future::pending()).await;
    match refused {
        Err(e @ RunError::Load(_)) => {
            assert!(e.is_usage());
            assert!(e.to_string().contains("c.yaml"), "{e}");
        }
        other => panic!("expected a load error, got {other:?}"),
    }
}

/// With `watch`, as `serve` runs it, an edit is loaded and served without a hand reload.
#[tokio::test]
async fn the_daemon_reloads_edited_files() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = write(dir.path(), "c.yaml", &eds_cluster("backend", "1s", 8080));
    let daemon = Daemon::load(Options {
        source: switchyard::source::Source::Files(vec![dir.path().to_path_buf()]),
        watch: true,
        ..Default::default()
    })
    .await
    .expect("loads");
    let mut serving = daemon.cache.subscribe();
    let running = tokio::spawn(daemon.serve(listeners().await, std::future::pending()));
    std::fs::write(&file, eds_cluster("backend", "2s", 8080)).expect("write");
    let reloaded = serving.wait_for(|s| s.stable.number == 2);
    assert!(
        tokio::time::timeout(Duration::from_secs(5), reloaded)
            .await
            .is_ok(),
        "the edit was never loaded"
    );
    running.abort();
}

/// The server's history lists each generation it published with
/// what changed (files, resources by type and name) and how many nodes ACKed and NACKed it
/// (rules P4/P5: an ACK or NACK names the response's version, and so its generation); with
/// --state-dir it survives a restart, counts included; `switchyard history` prints it.
#[tokio::test]
async fn the_history_counts_acks_and_nacks_per_generation_and_survives_a_restart() {
    use switchyard::resource::ResourceType::Cluster;
    let state = tempfile::tempdir().expect("tmp");
    let options = || switchyard::daemon::Options {
        state_dir: Some(state.path().to_path_buf()),
        ..Default::default()
    };
    let server = TestServer::start_daemon(
        &[("clusters.yaml", &eds_cluster("a", "1s", 8080))],
        options(),
    )
    .await;
    let mut edge = server.ads("edge-1").await;
    edge.subscribe(Cluster, &[]).await;
    let first = edge.recv_type(Cluster).await;
    edge.ack(&first, &[]).await;
    for _ in 0..100 {
        if server
            .status()
            .await
            .history
            .first()
            .is_some_and(|e| e.acked == 1)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.set_files(&[
        ("clusters.yaml", &eds_cluster("a", "2s", 8080)),
        ("more.yaml", &eds_cluster("b", "1s", 8080)),
    ]);
    let second = edge.recv_type(Cluster).await;
    edge.nack(&second, &[], &first.version_info, "no").await;
    let mut history = Vec::new();
    for _ in 0..100 {
        history = server.status().await.history;
        if history.first().is_some_and(|e| e.nacked == 1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(history.len(), 2, "{history:#?}");
    let (newest, oldest) = (&history[0], &history[1]);
    assert_eq!((newest.generation, newest.acked, newest.nacked), (2, 0, 1));
    assert_eq!((oldest.generation, oldest.acked, oldest.nacked), (1, 1, 0));
    assert!(
        newest
            .files
            .iter()
            .any(|f| f.starts_with("change ") && f.ends_with("clusters.yaml")),
        "{newest:?}"
    );
    assert!(
        newest
            .files
            .iter()
            .any(|f| f.starts_with("add ") && f.ends_with("more.yaml")),
        "{newest:?}"
    );
    assert_eq!(newest.changed, ["CDS a"]);
    assert_eq!(newest.added, ["CDS b", "EDS b"]);
    assert_eq!(newest.counts, [2, 1, 0]);
    // Run beside this test's runtime, which serves the admin API it asks.
    let admin = server.admin_addr.to_string();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["history", "--admin-addr", &admin])
            .output()
    })
    .await
    .expect("joined")
    .expect("history runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("generation 2 published"), "{text}");
    assert!(text.contains("0 node(s) ACKed, 1 NACKed"), "{text}");
    assert!(text.contains("    ~ CDS a"), "{text}");
    server.shutdown().await;

    // Started again on the same state directory: the history is there, counts included,
    // and numbering goes on.
    let again = TestServer::start_daemon(
        &[("clusters.yaml", &eds_cluster("a", "3s", 8080))],
        options(),
    )
    .await;
    let history = again.status().await.history;
    assert_eq!(history.len(), 3, "{history:#?}");
    assert_eq!(history[0].generation, 3);
    assert_eq!(
        (history[1].generation, history[1].acked, history[1].nacked),
        (2, 0, 1),
        "the counts survive the restart"
    );
}

/// The barrier (`POST /source/settle`) reads the files again, settling an edit the watch
/// has not loaded yet (this server has no watch at all): a broken edit comes back refused,
/// naming its file and why, while the last good generation keeps serving; a good edit comes
/// back as the generation that holds it. Each settle is a later read of the files.
#[tokio::test]
async fn settling_the_files_loads_an_edit_at_once_and_says_what_it_gave() {
    let server = TestServer::start(&[("clusters.yaml", &eds_cluster("a", "1s", 8080))]).await;
    let settle = || async {
        let (code, body) = server.admin_post("/source/settle").await;
        assert_eq!(code, 200, "{body}");
        let settled: switchyard::admin::Settled = serde_json::from_str(&body).expect("JSON");
        let config = settled.config.expect("a load");
        (settled.position, config)
    };
    let (first, config) = settle().await;
    assert!(config.ok, "{:?}", config.errors);
    assert_eq!(config.generation, 1, "nothing changed: nothing published");

    std::fs::write(
        server.dir.path().join("clusters.yaml"),
        "clusters: [{name: a, connect_timeout: soon}]\n",
    )
    .expect("write");
    let (broken, config) = settle().await;
    assert!(!config.ok, "refused");
    assert!(
        config
            .errors
            .iter()
            .any(|e| e.contains("clusters.yaml") && e.contains("connect_timeout")),
        "the file and the field: {:?}",
        config.errors
    );
    assert_eq!(config.generation, 1, "the last good generation serves");
    assert_eq!(server.cache.current().number, 1);

    std::fs::write(
        server.dir.path().join("clusters.yaml"),
        eds_cluster("a", "2s", 8080),
    )
    .expect("write");
    let (good, config) = settle().await;
    assert!(config.ok, "{:?}", config.errors);
    assert_eq!(config.generation, 2);
    assert_eq!(server.cache.current().number, 2, "published by the settle");
    match (first, broken, good) {
        (
            switchyard::source::Position::Read(a),
            switchyard::source::Position::Read(b),
            switchyard::source::Position::Read(c),
        ) => assert!(a < b && b < c, "later reads: {a}, {b}, {c}"),
        other => panic!("positions of files are reads: {other:?}"),
    }
    assert_eq!(
        config.read,
        match good {
            switchyard::source::Position::Read(n) => Some(n),
            _ => None,
        }
    );
}

/// A node's group in `/status` (and in a replica's summary): the files with a `nodes:`
/// selector that match it; the files for every node are everyone's and not named.
#[tokio::test]
async fn status_names_each_nodes_group() {
    let server = TestServer::start(&[
        ("all.yaml", &eds_cluster("a", "1s", 8080)),
        (
            "edge.yaml",
            "nodes: [{id: \"edge-*\"}]\nclusters: [{name: e, connect_timeout: 1s}]\n",
        ),
        (
            "canary.yaml",
            "nodes: [{id: \"canary-*\"}]\nclusters: [{name: c, connect_timeout: 1s}]\n",
        ),
    ])
    .await;
    let mut edge = server.ads("edge-1").await;
    edge.subscribe(Cluster, &[]).await;
    let got = edge.recv_type(Cluster).await;
    edge.ack(&got, &[]).await;
    let status = server.status().await;
    assert_eq!(status.nodes.len(), 1);
    assert_eq!(status.nodes[0].group, "edge.yaml");
}

/// An edit the watch has not loaded (this server has no watch at all): plain `status` says
/// the files changed after the last load, naming the file, and exits 7 (the served
/// generation is older than the files); once they are read (`status --wait` settles them),
/// it exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_says_when_the_files_changed_after_the_last_load() {
    let server = TestServer::start(&[("clusters.yaml", &eds_cluster("a", "1s", 8080))]).await;
    let (code, out, err) = server.status_cli(&[]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    std::fs::write(
        server.dir.path().join("clusters.yaml"),
        eds_cluster("a", "2s", 8080),
    )
    .expect("write");
    let (code, out, err) = server.status_cli(&[]).await;
    assert_eq!(code, Some(7), "{out}{err}");
    assert!(
        out.contains("the files changed after this load") && out.contains("clusters.yaml"),
        "{out}"
    );
    let (code, out, err) = server.status_cli(&["--wait", "--timeout", "30s"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, err) = server.status_cli(&[]).await;
    assert_eq!(code, Some(0), "{out}{err}");
}

/// `status --wait` right after an edit waits for that edit, never judging the generation
/// before it: a broken edit exits 3 with the file and the reason, a good edit exits 0 only
/// once the connected node has ACKed the generation that holds it. Five rounds of each,
/// with no pause between the write and the call (and no watch: only the barrier loads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_wait_right_after_an_edit_waits_for_that_edit() {
    let server = TestServer::start(&[("clusters.yaml", &eds_cluster("a", "1s", 8080))]).await;
    let mut edge = server.ads("edge-1").await;
    edge.subscribe(Cluster, &[]).await;
    let acking = edge.ack_everything();
    let file = server.dir.path().join("clusters.yaml");
    for round in 0..5u64 {
        std::fs::write(&file, "clusters: [{name: a, connect_timeout: soon}]\n").expect("write");
        let (code, out, err) = server.status_cli(&["--wait", "--timeout", "30s"]).await;
        assert_eq!(code, Some(3), "round {round}: a refused edit: {out}{err}");
        assert!(
            err.contains("was refused") && err.contains("clusters.yaml"),
            "round {round}: {err}"
        );

        let timeout = format!("{}s", round + 2);
        std::fs::write(&file, eds_cluster("a", &timeout, 8080)).expect("write");
        let (code, out, err) = server.status_cli(&["--wait", "--timeout", "30s"]).await;
        assert_eq!(code, Some(0), "round {round}: {out}{err}");
        let generation = server.cache.current().number;
        assert_eq!(
            generation,
            round + 2,
            "round {round}: the edit is published"
        );
        let status = server.status().await;
        assert_eq!(status.generation, generation);
        let node = status
            .nodes
            .iter()
            .find(|n| n.node_id == "edge-1")
            .expect("the node");
        assert_eq!(
            node.generation, generation,
            "round {round}: ACKed before exit 0"
        );
        assert!(
            node.types
                .values()
                .all(|t| t.state == switchyard::fleet::SyncStatus::Synced),
            "round {round}: {:?}",
            node.types
        );
    }
    acking.abort();
}
