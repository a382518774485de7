//! `switchyard import --split-endpoints --split-routes --delta` end to end: a bootstrap of
//! our own (an unnamed listener with an inline route configuration, a STATIC cluster, a TLS
//! listener naming a static secret, a stats sink's cluster that must stay static), imported,
//! served, and a real Envoy on the imported bootstrap: no NACK, the route configuration over
//! RDS, the endpoints over EDS, the secret over SDS, and traffic through it as through the
//! original. (tests/corpus_e2e.rs compares config dumps for the default, inline import.)

use switchyard_testkit as support;

use std::process::Command;
use std::time::Duration;

use support::certs::Ca;
use support::envoy::{
    envoy_binary, eventually, free_port, http_get, Process, Switchyard, Upstream,
};

fn bootstrap(
    admin: u16,
    plain: u16,
    tls: u16,
    upstream: u16,
    leaf: &support::certs::Leaf,
) -> String {
    let indent = |pem: &str| {
        pem.lines()
            .map(|l| format!("                  {l}\n"))
            .collect::<String>()
    };
    format!(
        r#"admin: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {admin}}}}}}}
node: {{id: imported-1, cluster: imported}}
stats_sinks:
- name: envoy.stat_sinks.statsd
  typed_config:
    "@type": type.googleapis.com/envoy.config.metrics.v3.StatsdSink
    tcp_cluster_name: statsd
static_resources:
  listeners:
  - address: {{socket_address: {{address: 127.0.0.1, port_value: {plain}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: plain
          route_config:
            name: local_route
            virtual_hosts: [{{name: all, domains: ["*"], routes: [{{match: {{prefix: /}}, route: {{cluster: app}}}}]}}]
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  - name: tls
    address: {{socket_address: {{address: 127.0.0.1, port_value: {tls}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: tls, cluster: app}}
      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            tls_certificate_sds_secret_configs: [{{name: server}}]
  clusters:
  - name: app
    connect_timeout: 1s
    load_assignment:
      cluster_name: app
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {upstream}}}}}}}}}]}}]
  - name: statsd
    connect_timeout: 1s
    load_assignment:
      cluster_name: statsd
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 9}}}}}}}}]}}]
  secrets:
  - name: server
    tls_certificate:
      certificate_chain:
        inline_string: |
{chain}      private_key:
        inline_string: |
{key}"#,
        chain = indent(&leaf.cert),
        key = indent(&leaf.key),
    )
}

async fn dump(port: u16, resource: &str) -> serde_json::Value {
    let text = reqwest::get(format!(
        "http://127.0.0.1:{port}/config_dump?resource={resource}"
    ))
    .await
    .ok();
    match text {
        Some(r) => serde_json::from_str(&r.text().await.unwrap_or_default()).unwrap_or_default(),
        None => serde_json::Value::Null,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_import_serves_the_same_envoy_over_delta() {
    let Some(envoy) = envoy_binary() else { return };
    let dir = tempfile::tempdir().expect("tmp");
    let upstream = Upstream::start("from-app").await;
    let ca = Ca::new("import");
    let leaf = ca.leaf(&["localhost"], &[]);
    let (admin, plain, tls) = (free_port(), free_port(), free_port());
    let original = dir.path().join("original.yaml");
    std::fs::write(
        &original,
        bootstrap(admin, plain, tls, upstream.port, &leaf),
    )
    .expect("write");

    // The original serves.
    let mut cmd = Command::new(&envoy);
    cmd.arg("-c")
        .arg(&original)
        .args(["--disable-hot-restart", "--concurrency", "1"]);
    let mut first = Process::spawn("envoy", cmd, dir.path().join("original.log"));
    let up = eventually(Duration::from_secs(20), || async move {
        http_get(plain).await.as_deref() == Some("from-app")
    })
    .await;
    assert!(up.is_some(), "the original Envoy never proxied");
    first.kill();

    // Import, split, over delta.
    let out = dir.path().join("imported");
    let xds = free_port();
    let o = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("import")
        .arg(&original)
        .arg("--out")
        .arg(&out)
        .args([
            "--split-endpoints",
            "--split-routes",
            "--delta",
            "--xds-address",
        ])
        .arg(format!("127.0.0.1:{xds}"))
        .output()
        .expect("import runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for file in [
        "listeners.yaml",
        "clusters.yaml",
        "endpoints.yaml",
        "routes.yaml",
        "secrets.yaml",
    ] {
        assert!(out.join("snapshot").join(file).is_file(), "{file}");
    }

    let server = Switchyard::start_on(
        &out.join("snapshot"),
        dir.path(),
        (xds, free_port()),
        &["--insecure-serve-secrets"],
    )
    .await;
    let mut cmd = Command::new(&envoy);
    cmd.arg("-c")
        .arg(out.join("envoy.yaml"))
        .args(["--disable-hot-restart", "--concurrency", "1"]);
    let _second = Process::spawn("envoy", cmd, dir.path().join("imported.log"));
    let proxied = eventually(Duration::from_secs(20), || async move {
        http_get(plain).await.as_deref() == Some("from-app")
    })
    .await;
    assert!(proxied.is_some(), "the imported Envoy never proxied");

    // Everything over xDS, nothing NACKed.
    let status = server.status().await.expect("/status");
    let node = status
        .nodes
        .iter()
        .find(|n| n.node_id == "imported-1")
        .expect("the Envoy is connected");
    for kind in ["CDS", "EDS", "LDS", "RDS", "SDS"] {
        let t = node
            .types
            .get(kind)
            .unwrap_or_else(|| panic!("{kind} not asked for"));
        assert!(t.error.is_none(), "{kind} NACKed: {:?}", t.error);
    }
    let routes = dump(admin, "dynamic_route_configs").await;
    assert_eq!(
        routes["configs"][0]["route_config"]["name"], "local_route",
        "{routes}"
    );
    let secrets = dump(admin, "dynamic_active_secrets").await;
    assert_eq!(secrets["configs"][0]["name"], "server", "{secrets}");
    let statics = dump(admin, "static_clusters").await;
    let names: Vec<&str> = statics["configs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["cluster"]["name"].as_str())
        .collect();
    assert!(
        names.contains(&"statsd"),
        "the stats sink's cluster stays static: {names:?}"
    );
    let listeners = dump(admin, "dynamic_listeners").await;
    let named: Vec<&str> = listeners["configs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["name"].as_str())
        .collect();
    assert!(
        named.contains(&format!("127.0.0.1_{plain}").as_str()),
        "{named:?}"
    );
    assert!(named.contains(&"tls"), "{named:?}");
}
