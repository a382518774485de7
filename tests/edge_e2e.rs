//! A hand-written edge config whose TLS keys are files on the
//! Envoy's host, through `switchyard import`, `switchyard serve` (no extra flag) and a real
//! Envoy 1.40 on the bootstrap `import` writes. One HTTPS listener whose TLS context names
//! its certificate and key by path, two routes with retries (one by a header match), two
//! clusters with active health checks and circuit breakers, and a second TLS listener whose
//! certificate comes over SDS from a secret that names its files by path. HTTPS requests
//! through both listeners are answered, each route by its cluster, and Envoy NACKs nothing:
//! a `filename` is a path on the proxy's host, not key material, and goes as written.

use switchyard_testkit as support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::certs::Ca;
use support::envoy::{envoy_binary, eventually, free_port, Process, Switchyard, Upstream};

/// The edge config, as its owner wrote it for Envoy: keys and certificates under `tls`.
fn edge(admin: u16, https: u16, tcp: u16, a: u16, b: u16, tls: &Path) -> String {
    let tls = tls.display();
    let cluster = |name: &str, port: u16| {
        format!(
            r#"  - name: {name}
    connect_timeout: 1s
    type: STATIC
    load_assignment:
      cluster_name: {name}
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}}}}}]}}]
    health_checks:
    - timeout: 1s
      interval: 2s
      unhealthy_threshold: 2
      healthy_threshold: 1
      http_health_check: {{path: /healthz}}
    circuit_breakers:
      thresholds: [{{max_connections: 100, max_pending_requests: 100, max_requests: 100, max_retries: 3}}]
"#
        )
    };
    format!(
        r#"admin: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {admin}}}}}}}
node: {{id: edge-1, cluster: edge}}
static_resources:
  listeners:
  - name: https
    address: {{socket_address: {{address: 127.0.0.1, port_value: {https}}}}}
    filter_chains:
    - transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            tls_certificates:
            - certificate_chain: {{filename: {tls}/edge.pem}}
              private_key: {{filename: {tls}/edge.key}}
      filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: https
          route_config:
            name: edge
            virtual_hosts:
            - name: edge
              domains: ["*"]
              routes:
              - match: {{prefix: /, headers: [{{name: x-canary, string_match: {{exact: "1"}}}}]}}
                route: {{cluster: b, retry_policy: {{retry_on: 5xx, num_retries: 2}}}}
              - match: {{prefix: /}}
                route: {{cluster: a, timeout: 5s, retry_policy: {{retry_on: "connect-failure,reset", num_retries: 3}}}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  - name: tcp-tls
    address: {{socket_address: {{address: 127.0.0.1, port_value: {tcp}}}}}
    filter_chains:
    - transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            tls_certificate_sds_secret_configs: [{{name: edge-cert}}]
      filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: tcp, cluster: a}}
  clusters:
{a_cluster}{b_cluster}  secrets:
  - name: edge-cert
    tls_certificate:
      certificate_chain: {{filename: {tls}/edge.pem}}
      private_key: {{filename: {tls}/edge.key}}
"#,
        a_cluster = cluster("a", a),
        b_cluster = cluster("b", b),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_config_with_key_files_imports_serves_and_answers_https() {
    let Some(envoy) = envoy_binary() else { return };
    let dir = tempfile::tempdir().expect("tmp");
    let (a, b) = (
        Upstream::start("from-a").await,
        Upstream::start("from-b").await,
    );
    let ca = Ca::new("edge");
    let tls = dir.path().join("tls");
    std::fs::create_dir(&tls).expect("mkdir");
    ca.leaf(&["edge.example"], &[]).write(&tls, "edge");
    let (admin, https, tcp) = (free_port(), free_port(), free_port());
    let original = dir.path().join("edge.yaml");
    std::fs::write(&original, edge(admin, https, tcp, a.port, b.port, &tls)).expect("write");

    // Import, as the quick start does (no flags beyond where Switchyard listens).
    let out = dir.path().join("imported");
    let xds = free_port();
    let o = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("import")
        .arg(&original)
        .arg("--out")
        .arg(&out)
        .arg("--xds-address")
        .arg(format!("127.0.0.1:{xds}"))
        .output()
        .expect("import runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // Serve, with no flag about secrets: nothing here is key material.
    let server =
        Switchyard::start_on(&out.join("snapshot"), dir.path(), (xds, free_port()), &[]).await;
    assert!(
        !server.log_lines().iter().any(|l| l["message"]
            .as_str()
            .is_some_and(|m| m.contains("private key material"))),
        "a path was taken for key material: {:?}",
        server.log_lines()
    );
    let mut cmd = Command::new(&envoy);
    cmd.arg("-c")
        .arg(out.join("envoy.yaml"))
        .args(["--disable-hot-restart", "--concurrency", "1"]);
    let _envoy = Process::spawn("envoy", cmd, dir.path().join("envoy.log"));

    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem.as_bytes()).expect("CA"))
        .resolve("edge.example", ([127, 0, 0, 1], https).into())
        .timeout(Duration::from_secs(2))
        .build()
        .expect("client");
    let get = |canary: bool| {
        let client = client.clone();
        async move {
            let mut request = client.get(format!("https://edge.example:{https}/"));
            if canary {
                request = request.header("x-canary", "1");
            }
            match request.send().await {
                Ok(r) if r.status().is_success() => r.text().await.ok(),
                _ => None,
            }
        }
    };
    let answered = eventually(Duration::from_secs(30), || async {
        get(false).await.as_deref() == Some("from-a")
            && get(true).await.as_deref() == Some("from-b")
    })
    .await;
    assert!(
        answered.is_some(),
        "HTTPS through the imported Envoy never answered by both routes; Envoy's log: {}",
        std::fs::read_to_string(dir.path().join("envoy.log")).unwrap_or_default()
    );

    // The SDS listener: a TLS handshake with the certificate from the secret's files.
    let tcp_client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem.as_bytes()).expect("CA"))
        .resolve("edge.example", ([127, 0, 0, 1], tcp).into())
        .timeout(Duration::from_secs(2))
        .build()
        .expect("client");
    let over_sds = tcp_client
        .get(format!("https://edge.example:{tcp}/"))
        .send()
        .await
        .expect("TLS through the SDS certificate");
    assert_eq!(over_sds.text().await.ok().as_deref(), Some("from-a"));

    // Nothing NACKed, every type asked for.
    let status = server.status().await.expect("/status");
    let node = status
        .nodes
        .iter()
        .find(|n| n.node_id == "edge-1")
        .expect("the Envoy is connected");
    for (kind, t) in &node.types {
        assert!(t.error.is_none(), "{kind} NACKed: {:?}", t.error);
    }
    for kind in ["CDS", "LDS", "SDS"] {
        assert!(node.types.contains_key(kind), "{kind} not asked for");
    }
    let rejected = reqwest::get(format!(
        "http://127.0.0.1:{admin}/stats?filter=update_rejected"
    ))
    .await
    .expect("stats")
    .text()
    .await
    .expect("stats");
    for line in rejected.lines() {
        assert!(line.ends_with(": 0"), "{line}");
    }
    // Envoy holds the listener's certificate and key by their paths, as written (it shows
    // the key's path as "[redacted]" in its dump, and its dump of SDS secrets shows what it
    // read from the files).
    let listeners: serde_json::Value = serde_json::from_str(
        &reqwest::get(format!(
            "http://127.0.0.1:{admin}/config_dump?resource=dynamic_listeners"
        ))
        .await
        .expect("dump")
        .text()
        .await
        .expect("dump"),
    )
    .expect("json");
    let https = listeners["configs"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| l["name"] == "https")
        .expect("the https listener");
    let held = &https["active_state"]["listener"]["filter_chains"][0]["transport_socket"]
        ["typed_config"]["common_tls_context"]["tls_certificates"][0];
    assert_eq!(
        held["certificate_chain"]["filename"],
        format!("{}/edge.pem", tls.display()),
        "{held}"
    );
    assert!(held["private_key"]["filename"].is_string(), "{held}");
}
