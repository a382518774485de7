//! One rollout for the fleet, kept in etcd, over real sockets: two
//! replicas (`switchyard serve --source ... --canary-id canary-*`, real processes) on a real
//! etcd, a tonic ADS client as the canary on replica A and another as an edge node on
//! replica B. The canary's verdict on A decides for B; what is promoted survives a kill -9 of
//! B. (tests/etcd_envoy.rs runs the same with real Envoys and traffic.)

use switchyard_testkit as support;

use std::time::Duration;

use support::eds_cluster;
use support::envoy::{free_port, Switchyard};
use support::etcd::Etcd;
use switchyard::resource::ResourceType::Cluster;
use switchyard::rollout::fleetwide::{FleetPhase, FleetState};

const BAKE: &str = "300ms";

async fn replica(url: &str, dir: &std::path::Path, name: &str) -> Switchyard {
    let logs = dir.join(name);
    std::fs::create_dir_all(&logs).expect("log dir");
    Switchyard::start_serving(
        &["--source", url],
        &logs,
        (free_port(), free_port()),
        &["--canary-id", "canary-*", "--rollout-bake", BAKE],
    )
    .await
}

/// The rollout's state as etcd holds it.
async fn state(etcd: &Etcd) -> Option<FleetState> {
    let mut client = etcd.client().await?;
    let got = client.get("/sy.rollout/state", None).await.ok()?;
    serde_json::from_slice(got.kvs().first()?.value()).ok()
}

async fn until_state(etcd: &Etcd, what: &str, test: impl Fn(&FleetState) -> bool) -> FleetState {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let now = state(etcd).await;
        match now {
            Some(s) if test(&s) => return s,
            _ if tokio::time::Instant::now() > deadline => {
                panic!("the rollout in etcd never {what}: {now:?}")
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

async fn post(url: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(url)
        .send()
        .await
        .expect("the admin API answers");
    let code = response.status().as_u16();
    (code, response.text().await.unwrap_or_default())
}

/// Rules P4/P5 (versions and ACKs) across replicas: the canary's ACK on A promotes the edge
/// on B; the canary's NACK on A halts the edge on B; B killed (SIGKILL) and started again
/// serves the edge the promoted generation, not the halted one; an abort on B sends A's
/// canary back.
#[tokio::test]
async fn a_canary_on_one_replica_decides_for_the_edge_on_another() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut etcd = Etcd::start(dir.path()).await;
    etcd.put("/sy/clusters.yaml", &eds_cluster("backend", "1s", 8080))
        .await;
    let url = format!("etcd://{}/sy", etcd.endpoint());
    let a = replica(&url, dir.path(), "a").await;
    let mut b = replica(&url, dir.path(), "b").await;
    let first = until_state(&etcd, "was written", |s| s.candidate.is_none()).await;
    assert_eq!(first.promoted_by, "the first load");

    let mut canary = a.ads("canary-1").await;
    let mut edge = b.ads("edge-1").await;
    let mut versions = Vec::new();
    for c in [&mut canary, &mut edge] {
        c.subscribe(Cluster, &[]).await;
        let got = c.recv_type(Cluster).await;
        versions.push(got.version_info.clone());
        c.ack(&got, &[]).await;
    }
    assert_eq!(
        versions[0], versions[1],
        "both replicas serve the same version"
    );

    // An edit: the canary on A gets it; the edge on B waits for the canary's verdict, far
    // longer than the bake.
    etcd.put("/sy/clusters.yaml", &eds_cluster("backend", "2s", 8080))
        .await;
    let change = canary.recv_type(Cluster).await;
    let proposed = until_state(&etcd, "named the edit", |s| s.candidate.is_some()).await;
    assert_eq!(proposed.stable, first.stable, "the stable generation stays");
    edge.expect_quiet(Duration::from_secs(2)).await;
    canary.ack(&change, &[]).await;
    let promoted = edge.recv_type(Cluster).await;
    assert_eq!(
        promoted.version_info, change.version_info,
        "the edge on B gets what the canary on A took, at the same version"
    );
    let after = until_state(&etcd, "promoted the edit", |s| {
        s.candidate.is_none() && s.stable.revision > first.stable.revision
    })
    .await;
    assert_eq!(after.promoted_by, "1 canary and the bake");
    edge.ack(&promoted, &[]).await;
    // Promoted for the fleet: `switchyard status` on either replica says done (exit 0), not
    // that the documents differ from what serves.
    for (name, replica) in [("A", &a), ("B", &b)] {
        let mut last = (None, String::new());
        for _ in 0..100 {
            last = replica.status_command(&[]);
            if last.0 == Some(0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(last.0, Some(0), "replica {name}: {}", last.1);
    }

    // An edit the canary rejects: halted for the fleet; the edge never gets it.
    etcd.put("/sy/clusters.yaml", &eds_cluster("backend", "3s", 8080))
        .await;
    let bad = canary.recv_type(Cluster).await;
    canary
        .nack(&bad, &[], &change.version_info, "rejected by the canary")
        .await;
    let halted = until_state(&etcd, "halted", |s| {
        s.candidate
            .as_ref()
            .is_some_and(|c| matches!(&c.phase, FleetPhase::Halted { reason } if reason.contains("rejected by the canary")))
    })
    .await;
    edge.expect_quiet(Duration::from_secs(2)).await;
    let b_status = b.status().await.expect("B's status");
    assert_eq!(
        b_status.rollout.map(|r| r.state),
        Some(switchyard::admin::RolloutState::Halted),
        "B follows the halt its own canaries never saw"
    );
    // B shows the fleet's rollout: A's canary's NACK, and its own empty verdict.
    let fleet = b_status.fleet.expect("the fleet's rollout in B's status");
    assert_eq!(
        fleet.candidate,
        Some(halted.candidate.as_ref().expect("c").mark.revision)
    );
    assert_eq!(fleet.state, Some(switchyard::admin::RolloutState::Halted));
    assert_eq!(fleet.replicas.len(), 2, "{fleet:?}");
    assert!(
        fleet.replicas.iter().any(|r| r.current
            && r.nacked
                .as_deref()
                .is_some_and(|n| n.contains("canary-1 rejected CDS"))),
        "{fleet:?}"
    );
    let (code, text) = b.status_command(&[]);
    assert_eq!(code, Some(5), "halted for the fleet: {text}");
    assert!(text.contains("fleet rollout (etcd): revision"), "{text}");
    assert!(text.contains("HALTED on the canaries"), "{text}");

    // kill -9 of B mid-rollout, and a restart: the edge is served the promoted generation.
    b.process.kill();
    let b = replica(&url, dir.path(), "b2").await;
    let mut edge = b.ads("edge-1").await;
    edge.subscribe(Cluster, &[]).await;
    let again = edge.recv_type(Cluster).await;
    assert_eq!(
        again.version_info, change.version_info,
        "after the restart the edge is on the promoted generation, not the halted one"
    );
    assert_eq!(
        state(&etcd).await,
        Some(halted.clone()),
        "nothing changed in etcd"
    );

    // An abort on B, for the fleet: A's canary goes back to the promoted generation, and the
    // aborted edit is not proposed again.
    let (code, body) = post(&format!("http://127.0.0.1:{}/rollout/abort", b.admin_port)).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("for the fleet"), "{body}");
    let back = canary.recv_type(Cluster).await;
    assert_eq!(back.version_info, change.version_info);
    canary.ack(&back, &[]).await;
    let aborted = until_state(&etcd, "aborted", |s| {
        s.candidate.is_none() && s.aborted.is_some()
    })
    .await;
    assert_eq!(aborted.stable, after.stable);
    // etcd away: an operator's promote is refused after a bound (not left hanging), and is
    // not done late once etcd is back.
    etcd.put("/sy/clusters.yaml", &eds_cluster("backend", "4s", 8080))
        .await;
    let _ = canary.recv_type(Cluster).await;
    let pending = until_state(&etcd, "named the next edit", |s| {
        s.candidate
            .as_ref()
            .is_some_and(|c| c.mark.revision > after.stable.revision)
            && s.aborted.is_some()
    })
    .await;
    etcd.process.kill();
    let asked = std::time::Instant::now();
    let (code, body) = post(&format!(
        "http://127.0.0.1:{}/rollout/promote",
        b.admin_port
    ))
    .await;
    assert_eq!(code, 409, "{body}");
    // Refused either way: the driver already away (the request waits its bound), or still
    // in its session (its copy to etcd fails at once).
    assert!(
        body.contains("did not answer within")
            || body.contains("cannot copy the promoted documents"),
        "{body}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(30),
        "{:?}",
        asked.elapsed()
    );
    etcd.restart().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        state(&etcd)
            .await
            .map(|s| (s.stable, s.candidate.map(|c| c.mark))),
        Some((
            pending.stable.clone(),
            pending.candidate.clone().map(|c| c.mark)
        )),
        "the promote asked while etcd was away was not done late"
    );

    // A replica started without canary flags on a prefix with a fleet rollout says it will
    // not follow it.
    let logs = dir.path().join("c");
    std::fs::create_dir_all(&logs).expect("log dir");
    let c = Switchyard::start_serving(&["--source", &url], &logs, (free_port(), free_port()), &[])
        .await;
    assert!(
        c.logged(
            "etcd keeps a rollout for this prefix, but this replica has no canary flags",
            &[]
        ),
        "{}",
        c.process.log_text()
    );
    drop(c);

    // A's history names each generation's revision, and the canary's ACK and NACK.
    let history = a.status().await.expect("A's status").history;
    let revision_of = |s: &FleetState| s.candidate.as_ref().map(|c| c.mark.revision);
    let nacked = history
        .iter()
        .find(|e| e.revision == revision_of(&halted))
        .expect("the halted generation in A's history");
    assert_eq!((nacked.acked, nacked.nacked), (0, 1), "{history:#?}");
    let acked = history
        .iter()
        .find(|e| e.revision == revision_of(&proposed))
        .expect("the promoted generation in A's history");
    assert_eq!(acked.acked, 1, "{history:#?}");
    for (name, replica) in [("A", &a), ("B", &b)] {
        let troubles: Vec<String> = replica
            .log_lines()
            .iter()
            .filter(|l| matches!(l["level"].as_str(), Some("WARN" | "ERROR")))
            .filter(|l| {
                // Failures to follow or write the rollout ("Cannot ..."); etcd's outage
                // above is expected and logged in other words.
                l["message"].as_str().is_some_and(|m| m.contains("Cannot"))
            })
            .map(|l| l.to_string())
            .collect();
        assert!(troubles.is_empty(), "replica {name}: {troubles:#?}");
    }
}

/// `rollback R --now`, for emergencies: with the fleet's rollout baking for an hour, the
/// rollback to an earlier revision goes to the edge node on replica B at once (no canary, no
/// bake), the rollout in progress ends with it, and the state says who promoted it and how.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_now_skips_the_canaries_and_the_bake_for_the_fleet() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = Etcd::start(dir.path()).await;
    let first = etcd
        .put("/sy/clusters.yaml", &eds_cluster("backend", "1s", 8080))
        .await;
    let url = format!("etcd://{}/sy", etcd.endpoint());
    let slow = |name: &str| {
        let logs = dir.path().join(name);
        std::fs::create_dir_all(&logs).expect("log dir");
        let url = url.clone();
        async move {
            Switchyard::start_serving(
                &["--source", &url],
                &logs,
                (free_port(), free_port()),
                &["--canary-id", "canary-*", "--rollout-bake", "1h"],
            )
            .await
        }
    };
    let a = slow("a").await;
    let b = slow("b").await;
    until_state(&etcd, "was written", |s| s.candidate.is_none()).await;
    let mut canary = a.ads("canary-1").await;
    let mut edge = b.ads("edge-1").await;
    let mut at_first = String::new();
    for c in [&mut canary, &mut edge] {
        c.subscribe(Cluster, &[]).await;
        let got = c.recv_type(Cluster).await;
        at_first.clone_from(&got.version_info);
        c.ack(&got, &[]).await;
    }
    // An edit promoted by an operator (the edge has it), then another the canary takes:
    // baking for an hour, the edge stays on the one before.
    etcd.put("/sy/clusters.yaml", &eds_cluster("backend", "2s", 8080))
        .await;
    let change = canary.recv_type(Cluster).await;
    canary.ack(&change, &[]).await;
    let (code, body) = post(&format!(
        "http://127.0.0.1:{}/rollout/promote",
        a.admin_port
    ))
    .await;
    assert_eq!(code, 200, "{body}");
    let promoted = edge.recv_type(Cluster).await;
    assert_eq!(promoted.version_info, change.version_info);
    edge.ack(&promoted, &[]).await;
    etcd.put("/sy/clusters.yaml", &eds_cluster("backend", "3s", 8080))
        .await;
    let next = canary.recv_type(Cluster).await;
    canary.ack(&next, &[]).await;
    until_state(&etcd, "baked", |s| {
        s.candidate
            .as_ref()
            .is_some_and(|c| matches!(c.phase, FleetPhase::Baking { .. }))
    })
    .await;
    edge.expect_quiet(Duration::from_secs(1)).await;

    // The rollback, --now: every node at once, the edge on B included.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["rollback", &first.to_string(), "--now", "--source", &url])
        .args(["--message", "back, now", "--author", "oncall"])
        .output()
        .expect("rollback runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let back = edge.recv_type(Cluster).await;
    assert_eq!(
        back.version_info, at_first,
        "the edge is sent the rollback at once, without canary or bake (what it had first)"
    );
    let promoted = until_state(&etcd, "promoted the rollback", |s| {
        s.candidate.is_none() && s.stable.revision > first
    })
    .await;
    assert_eq!(
        promoted.promoted_by,
        format!("rollback --now to revision {first} by oncall")
    );
    let history = b.status().await.expect("B's status").history;
    assert!(
        history
            .first()
            .is_some_and(|e| e.now && e.rollback == Some(first)),
        "{history:#?}"
    );
}
