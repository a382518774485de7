//! End-to-end: a real Envoy 1.40 talking to the `switchyard` binary over mutual TLS, with
//! its node bound to its certificate's SPIFFE ID; and an Envoy whose certificate names
//! another node, refused. Certificates are made here (rcgen).

use switchyard_testkit as support;

use std::path::Path;
use std::time::Duration;

use support::certs::Ca;
use support::envoy::{envoy_binary, eventually, free_port, http_get, Envoy, Switchyard, Upstream};
use support::write_mesh;

/// Write a CA, a server certificate for `localhost` and a client certificate for
/// `spiffe://test/<client_id>` under `dir`.
fn certificates(dir: &Path, client_id: &str) {
    let ca = Ca::new("switchyard test CA");
    ca.write(dir, "ca");
    ca.leaf(&["localhost"], &[]).write(dir, "server");
    ca.leaf(&[], &[&format!("spiffe://test/{client_id}")])
        .write(dir, "client");
}

/// examples/envoy/bootstrap-ads-mtls.yaml, its certificate paths pointed at `dir`.
fn tls_bootstrap(dir: &Path) -> String {
    let example =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/envoy/bootstrap-ads-mtls.yaml");
    let d = dir.display();
    std::fs::read_to_string(example)
        .expect("bootstrap")
        .replace("certs/edge-1", &format!("{d}/client"))
        .replace("certs/ca.pem", &format!("{d}/ca.pem"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_envoy_over_mutual_tls_is_served_and_an_impostor_is_refused() {
    let Some(envoy_bin) = envoy_binary() else {
        return;
    };
    let upstream = Upstream::start("upstream-a").await;
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("config");
    std::fs::create_dir(&config).expect("mkdir");
    let listener = free_port();
    write_mesh(&config, upstream.port, listener);
    // The certificate names node `tls-edge`.
    certificates(dir.path(), "tls-edge");
    let d = dir.path();
    let switchyard = Switchyard::start_with_args(
        &config,
        d,
        &[
            "--tls-cert",
            &d.join("server.pem").display().to_string(),
            "--tls-key",
            &d.join("server.key").display().to_string(),
            "--client-ca",
            &d.join("ca.pem").display().to_string(),
            "--node-identity",
            "spiffe://test/{id}",
        ],
    )
    .await;
    let bootstrap = tls_bootstrap(d);
    let envoy_dir = d.join("good");
    std::fs::create_dir(&envoy_dir).expect("mkdir");
    let envoy = Envoy::start_from_text(
        &bootstrap,
        &envoy_bin,
        switchyard.port,
        "tls-edge",
        &envoy_dir,
    )
    .await;
    let served = eventually(Duration::from_secs(20), || async {
        http_get(listener).await.as_deref() == Some("upstream-a")
    })
    .await;
    assert!(
        served.is_some(),
        "Envoy over mutual TLS never got its config"
    );

    // Another Envoy with the same certificate claims another node: refused.
    let impostor_dir = d.join("impostor");
    std::fs::create_dir(&impostor_dir).expect("mkdir");
    let impostor = Envoy::start_from_text(
        &bootstrap,
        &envoy_bin,
        switchyard.port,
        "someone-else",
        &impostor_dir,
    )
    .await;
    let refused = eventually(Duration::from_secs(20), || async {
        switchyard.logged(
            "Refused a stream: its client certificate is not bound",
            &[("node", "someone-else")],
        )
    })
    .await;
    assert!(refused.is_some(), "the impostor was not refused");
    let status = switchyard.status().await.expect("status");
    assert!(status.nodes.iter().any(|n| n.node_id == "tls-edge"));
    assert!(!status.nodes.iter().any(|n| n.node_id == "someone-else"));
    drop((envoy, impostor));
}
