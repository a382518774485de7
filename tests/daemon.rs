//! The daemon as one library call (`switchyard::run`, `switchyard::daemon::Daemon`): what
//! `switchyard serve` runs, with its watcher, on listeners the caller binds.

use switchyard_testkit as support;

use std::time::Duration;

use support::*;
use switchyard::daemon::{Daemon, Listeners, Options, RunError};
use switchyard::resource::ResourceType::Cluster;
use tonic::transport::Channel;

async fn listeners() -> Listeners {
    let bind = || async {
        tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind")
    };
    Listeners {
        xds: bind().await,
        admin: bind().await,
    }
}

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
