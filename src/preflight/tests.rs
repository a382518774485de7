//! Choosing groups and rendering bootstraps, without Envoy (tests/safe_changes.rs runs
//! the real one).

use super::*;
use std::path::Path;

use crate::testing::load_files as load;

const MESH: &str = r#"
clusters:
  - name: a
    connect_timeout: 1s
    type: EDS
    eds_cluster_config: { eds_config: { ads: {} }, service_name: a-endpoints }
    transport_socket:
      name: tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        common_tls_context:
          tls_certificate_sds_secret_configs: [{ name: client-cert, sds_config: { ads: {} } }]
endpoints:
  - cluster_name: a-endpoints
    endpoints:
      - lb_endpoints:
          - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 8080 } } }
listeners:
  - name: http
    address: { socket_address: { address: 127.0.0.1, port_value: 10000 } }
    filter_chains:
      - filters:
          - name: hcm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
              stat_prefix: http
              rds: { route_config_name: main, config_source: { ads: {} } }
              http_filters:
                - name: router
                  typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }
routes:
  - name: main
    virtual_hosts: [{ name: all, domains: ["*"], routes: [{ match: { prefix: "/" }, route: { cluster: a } }] }]
"#;

/// The bootstrap of the one node group of `files` (no selectors), with key material.
fn only_bootstrap(files: &[(&str, &str)]) -> Value {
    let config = load(files);
    let groups = groups(&config);
    assert_eq!(groups.len(), 1, "no selectors: one group");
    let (group, resources) = &groups[0];
    bootstrap(
        &group.node_id,
        &group.node_cluster,
        resources,
        Secrets::Serve,
    )
}

#[test]
fn a_bootstrap_holds_endpoints_routes_and_secrets_inline() {
    let b = only_bootstrap(&[("mesh.yaml", MESH)]);
    let clusters = b["staticResources"]["clusters"]
        .as_array()
        .expect("clusters");
    let a = clusters
        .iter()
        .find(|c| c["name"] == "a")
        .expect("cluster a");
    assert_eq!(a["type"], "STATIC");
    assert!(a.get("edsClusterConfig").is_none());
    assert_eq!(a["loadAssignment"]["clusterName"], "a-endpoints");
    assert_eq!(
        a["loadAssignment"]["endpoints"][0]["lbEndpoints"][0]["endpoint"]["address"]
            ["socketAddress"]["portValue"],
        8080
    );
    let sds = &a["transportSocket"]["typedConfig"]["commonTlsContext"]
        ["tlsCertificateSdsSecretConfigs"][0];
    assert_eq!(sds["name"], "client-cert");
    assert_eq!(
        sds["sdsConfig"]["apiConfigSource"]["grpcServices"][0]["envoyGrpc"]["clusterName"],
        ADS_CLUSTER,
        "no file defines it: left for SDS to bring, as over xDS"
    );
    let hcm = &b["staticResources"]["listeners"][0]["filterChains"][0]["filters"][0]["typedConfig"];
    assert!(hcm.get("rds").is_none());
    assert_eq!(hcm["routeConfig"]["name"], "main");
    assert_eq!(hcm["routeConfig"]["virtualHosts"][0]["domains"][0], "*");
    assert_eq!(b["node"]["id"], ANY_NODE);
}

#[test]
fn one_group_per_selector_entry_and_one_for_the_nodes_none_names() {
    let config = load(&[
        ("all.yaml", MESH),
        (
            "edge.yaml",
            "nodes: [{ id: \"edge-*\" }, { cluster: canary }]\nclusters:\n  - { name: e, connect_timeout: 1s }\n",
        ),
        (
            "core.yaml",
            "nodes: [{ id: \"core-?\" }]\nclusters:\n  - { name: k, connect_timeout: 1s }\n",
        ),
    ]);
    let groups = groups(&config);
    let described: Vec<(String, String, Vec<String>)> = groups
        .iter()
        .map(|(g, _)| {
            let files = g
                .files
                .iter()
                .map(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .unwrap_or("")
                        .to_string()
                })
                .collect();
            (g.node_id.clone(), g.node_cluster.clone(), files)
        })
        .collect();
    assert_eq!(
        described,
        [
            (
                ANY_NODE.into(),
                ANY_NODE.into(),
                vec!["all.yaml".to_string()]
            ),
            (
                "core-x".into(),
                ANY_NODE.into(),
                vec!["core.yaml".into(), "all.yaml".into()]
            ),
            (
                "edge-".into(),
                ANY_NODE.into(),
                vec!["edge.yaml".into(), "all.yaml".into()]
            ),
        ],
        "the canary entry's group has the same files as edge-*: checked once; the files \
         that name a group first"
    );
    let (_, resources) = &groups[2];
    assert!(resources.iter().any(|r| r.name == "e"));
    assert!(!resources.iter().any(|r| r.name == "k"));
}

#[test]
fn envoy_errors_lose_their_preamble() {
    let path = Path::new("/tmp/b.json");
    let text = "error initializing configuration '/tmp/b.json': goo.gle/debugstr\nstatic_resources {\n}\n: Proto constraint validation failed (X: y)\n";
    assert_eq!(
        envoy_error(text, path),
        "Proto constraint validation failed (X: y)"
    );
    let text = "error initializing configuration '/tmp/b.json': missing ): a(b\n";
    assert_eq!(envoy_error(text, path), "missing ): a(b");
}

#[test]
fn a_missing_envoy_is_an_error_not_a_verdict() {
    let err = run_envoy(Path::new("/nonexistent/envoy"), &json!({}), DEFAULT_TIMEOUT)
        .expect_err("cannot run");
    assert!(
        err.to_string()
            .contains("cannot run Envoy (/nonexistent/envoy)"),
        "{err}"
    );
}

/// A program that fails without a word is not reported as an Envoy refusal with an empty
/// reason: the words say it failed, how, and that it printed nothing.
#[test]
fn an_envoy_that_fails_silently_is_said_to() {
    let Some(false_bin) = ["/bin/false", "/usr/bin/false"]
        .into_iter()
        .map(std::path::Path::new)
        .find(|p| p.is_file())
    else {
        panic!("no `false` program on this machine");
    };
    let verdict =
        run_envoy(false_bin, &serde_json::json!({}), Duration::from_secs(10)).expect("it runs");
    let said = verdict.expect_err("it fails");
    assert!(
        said.contains("printed nothing") && said.contains("exit status: 1"),
        "{said}"
    );
}

/// A secret the group defines is the bootstrap's static secret, named without a source.
#[test]
fn a_secret_the_files_define_is_static_in_the_bootstrap() {
    let secret = "secrets:\n  - name: client-cert\n    tls_certificate: { certificate_chain: { filename: /etc/c.pem }, private_key: { filename: /etc/k.pem } }\n";
    let b = only_bootstrap(&[("mesh.yaml", MESH), ("secret.yaml", secret)]);
    let a = b["staticResources"]["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .find(|c| c["name"] == "a")
        .expect("cluster a")
        .clone();
    let sds = &a["transportSocket"]["typedConfig"]["commonTlsContext"]
        ["tlsCertificateSdsSecretConfigs"][0];
    assert!(
        sds.get("sdsConfig").is_none(),
        "a static secret by name: {sds}"
    );
    assert_eq!(b["staticResources"]["secrets"][0]["name"], "client-cert");
}
