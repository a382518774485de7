//! End-to-end: a real Envoy 1.40 terminates TLS with a certificate Switchyard reads from PEM
//! files on its own host (`switchyard_files`) and serves over SDS. Under a bounded request
//! loop the files are replaced, the certificate first and its key a moment later (as a
//! rotation that writes two files does): the half-rotated pair is refused at load, the new
//! pair goes out once the key lands, `openssl s_client` sees the new serial, the listener is
//! not modified and no request fails.

use switchyard_testkit as support;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::certs::Ca;
use support::envoy::{envoy_binary, eventually, free_port, Envoy, Switchyard};
use support::write;

/// Upper bound on the request loop.
const LOAD_LIMIT: Duration = Duration::from_secs(60);
/// Requests per second.
const RATE: u32 = 50;

/// A listener terminating TLS with SDS secret `edge-cert`, answering 200 itself, and the
/// secret read from `dir/tls.crt` and `dir/tls.key`.
fn snapshot(port: u16, dir: &Path) -> String {
    format!(
        r#"
listeners:
- name: https
  address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}
  filter_chains:
  - transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
        common_tls_context:
          tls_certificate_sds_secret_configs:
          - name: edge-cert
            sds_config: {{ads: {{}}, resource_api_version: V3}}
    filters:
    - name: envoy.filters.network.http_connection_manager
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
        stat_prefix: https
        route_config:
          virtual_hosts:
          - name: all
            domains: ["*"]
            routes:
            - match: {{prefix: /}}
              direct_response: {{status: 200, body: {{inline_string: ok}}}}
        http_filters:
        - name: envoy.filters.http.router
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
secrets:
- name: edge-cert
  switchyard_files:
    certificate_chain: {dir}/tls.crt
    private_key: {dir}/tls.key
"#,
        dir = dir.display()
    )
}

/// Replace `path` with `text` atomically (write beside, rename over), as cert-manager's
/// and Vault agent's writers do.
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

/// The serial of the certificate the listener presents, as `openssl s_client` sees it.
fn served_serial(port: u16) -> Option<String> {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect 127.0.0.1:{port} -servername edge.example </dev/null \
             2>/dev/null | openssl x509 -noout -serial"
        ))
        .output()
        .expect("openssl runs");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .strip_prefix("serial=")
        .map(str::to_string)
}

/// HTTPS requests at [`RATE`], a new connection (and handshake) each, until stopped:
/// (answered, failures).
fn request_loop(
    port: u16,
    ca: &str,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(usize, Vec<String>)> {
    let ca = reqwest::Certificate::from_pem(ca.as_bytes()).expect("CA");
    tokio::spawn(async move {
        let client = reqwest::Client::builder()
            .add_root_certificate(ca)
            .resolve("edge.example", ([127, 0, 0, 1], port).into())
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(2))
            .build()
            .expect("client");
        let url = format!("https://edge.example:{port}/");
        let started = Instant::now();
        let mut next = started;
        let (mut answered, mut failures) = (0, Vec::new());
        while !stop.load(Ordering::Relaxed) && started.elapsed() < LOAD_LIMIT {
            match client.get(&url).send().await {
                Ok(r) if r.status().is_success() => answered += 1,
                Ok(r) => failures.push(format!("status {}", r.status())),
                Err(e) => failures.push(format!("{e:?}")),
            }
            next += Duration::from_secs(1) / RATE;
            tokio::time::sleep_until(next.into()).await;
        }
        (answered, failures)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_certificate_files_rotate_under_traffic_without_a_failed_request() {
    let Some(envoy_bin) = envoy_binary() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let certs = d.join("certs");
    let config = d.join("config");
    std::fs::create_dir_all(&certs).expect("mkdir");
    std::fs::create_dir_all(&config).expect("mkdir");
    let ca = Ca::new("rotation test CA");
    let first = ca.leaf(&["edge.example"], &[]);
    replace(&certs.join("tls.crt"), &first.cert);
    replace(&certs.join("tls.key"), &first.key);
    let port = free_port();
    write(&config, "edge.yaml", &snapshot(port, &certs));

    // A sidecar on loopback: the local Envoy gets the private key.
    let switchyard = Switchyard::start_with_args(&config, d, &["--insecure-serve-secrets"]).await;
    let envoy_dir = d.join("envoy");
    std::fs::create_dir(&envoy_dir).expect("mkdir");
    let envoy = Envoy::start(&envoy_bin, switchyard.port, "edge-1", &envoy_dir).await;

    let status_serial = || async {
        switchyard
            .status()
            .await
            .and_then(|s| s.certificates.first().map(|c| c.serial.clone()))
    };
    let before = status_serial()
        .await
        .expect("/status lists the certificate");
    let listening = eventually(Duration::from_secs(20), || async {
        served_serial(port).as_deref() == Some(before.as_str())
    })
    .await;
    assert!(
        listening.is_some(),
        "the listener never presented {before}: {:?}\n{}",
        served_serial(port),
        envoy.process.log_text()
    );
    let sds = "sds.edge-cert.update_success";
    let modified = "listener_manager.listener_modified";
    let [sds_before, modified_before] = [envoy.stat(sds).await, envoy.stat(modified).await];
    assert!(sds_before.is_some_and(|n| n >= 1), "{sds}: {sds_before:?}");

    let stop = Arc::new(AtomicBool::new(false));
    let load = request_loop(port, &ca.pem, Arc::clone(&stop));
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The certificate lands first; its key half a second later.
    let second = ca.leaf(&["edge.example"], &[]);
    replace(&certs.join("tls.crt"), &second.cert);
    let refused = eventually(Duration::from_secs(10), || async {
        switchyard
            .status()
            .await
            .and_then(|s| s.config)
            .is_some_and(|c| !c.ok && c.errors.iter().any(|e| e.contains("KEY_VALUES_MISMATCH")))
    })
    .await;
    assert!(refused.is_some(), "the half-rotated pair is not refused");
    tokio::time::sleep(Duration::from_millis(500)).await;
    replace(&certs.join("tls.key"), &second.key);

    let after = eventually(Duration::from_secs(10), || async {
        status_serial().await.is_some_and(|s| s != before)
    })
    .await;
    assert!(after.is_some(), "the new certificate never loaded");
    let after = status_serial().await.expect("serial");
    let presented = eventually(Duration::from_secs(20), || async {
        served_serial(port).as_deref() == Some(after.as_str())
    })
    .await;
    assert!(presented.is_some(), "openssl never saw serial {after}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let (answered, failures) = load.await.expect("load loop");
    println!(
        "rotation under load: {answered} answered, {} failed",
        failures.len()
    );
    assert!(answered > 50, "the loop ran: {answered}");
    assert!(
        failures.is_empty(),
        "requests failed: {:?}",
        &failures[..failures.len().min(5)]
    );
    assert_eq!(
        envoy.stat(sds).await,
        sds_before.map(|n| n + 1),
        "one SDS update: the half-rotated pair never reached Envoy"
    );
    assert_eq!(
        envoy.stat(modified).await,
        modified_before,
        "the listener is not modified"
    );
}
