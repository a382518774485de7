//! The daemon as one library call (`switchyard::run`, `switchyard::daemon::Daemon`): what
//! `switchyard serve` runs, with its watcher, on listeners the caller binds.

mod support;

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
        paths: vec![dir.path().to_path_buf()],
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
        paths: vec![dir.path().to_path_buf()],
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
        paths: vec![dir.path().to_path_buf()],
        watch: true,
        ..Default::default()
    })
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
