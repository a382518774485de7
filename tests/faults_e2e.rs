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
use support::run::said;
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
    let ns = Netns::new();
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
        said.contains("does not answer"),
        "status says the source does not answer:\n{said}"
    );
    assert!(
        warned(&cut, "etcd does not answer"),
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
