use super::*;

fn options() -> ImportOptions {
    ImportOptions {
        split_endpoints: false,
        split_routes: false,
        xds_address: "127.0.0.1:18000".into(),
        delta: false,
        node_id: "imported".into(),
        node_cluster: "imported".into(),
    }
}

const FRONT: &str = r#"
admin: {address: {socket_address: {address: 127.0.0.1, port_value: 9901}}}
stats_sinks:
- name: envoy.stat_sinks.statsd
  typed_config:
    "@type": type.googleapis.com/envoy.config.metrics.v3.StatsdSink
    tcp_cluster_name: statsd
static_resources:
  listeners:
  - address: {socket_address: {address: 0.0.0.0, port_value: 8080}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress_http
          route_config:
            name: local_route
            virtual_hosts: [{name: backend, domains: ["*"], routes: [{match: {prefix: /}, route: {cluster: service}}]}]
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            tls_certificate_sds_secret_configs: [{name: server_cert}]
  clusters:
  - name: service
    type: STATIC
    load_assignment:
      cluster_name: whatever
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 8081}}}}]}]
  - name: statsd
    type: STATIC
    load_assignment:
      cluster_name: statsd
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 8125}}}}]}]
  secrets:
  - name: server_cert
    tls_certificate:
      certificate_chain: {filename: /etc/certs/cert.pem}
      private_key: {filename: /etc/certs/key.pem}
"#;

fn import_text(text: &str, options: &ImportOptions) -> Result<Imported, ImportError> {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("envoy.yaml");
    std::fs::write(&path, text).unwrap();
    import(&path, options)
}

fn file<'a>(imported: &'a Imported, name: &str) -> Option<&'a str> {
    imported
        .files
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, t)| t.as_str())
}

fn yaml(text: &str) -> serde_yaml::Value {
    serde_yaml::from_str(text).unwrap()
}

#[test]
fn static_resources_become_snapshot_files_and_a_bootstrap_over_ads() {
    let imported = import_text(FRONT, &options()).expect("imports");
    let listeners = yaml(file(&imported, "listeners.yaml").expect("listeners.yaml"));
    // Unnamed: named as Envoy's listener stats name it.
    assert_eq!(listeners["listeners"][0]["name"], "0.0.0.0_8080");
    // The inline route configuration is kept.
    let hcm = &listeners["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
    assert_eq!(hcm["route_config"]["name"], "local_route");
    // The static secret is referenced over SDS now.
    let sds = &listeners["listeners"][0]["filter_chains"][0]["transport_socket"]["typed_config"]
        ["common_tls_context"]["tls_certificate_sds_secret_configs"][0];
    assert_eq!(sds["name"], "server_cert");
    assert_eq!(sds["sds_config"]["resource_api_version"], "V3");
    assert!(sds["sds_config"]["ads"].is_mapping());
    let secrets = yaml(file(&imported, "secrets.yaml").unwrap());
    assert_eq!(secrets["secrets"][0]["name"], "server_cert");
    // The stats sink's cluster stays static; the other moves.
    let clusters = yaml(file(&imported, "clusters.yaml").unwrap());
    let moved: Vec<&str> = clusters["clusters"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(moved, ["service"]);
    let bootstrap = yaml(&imported.bootstrap);
    let kept: Vec<&str> = bootstrap["static_resources"]["clusters"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(kept, ["statsd", "switchyard"]);
    assert_eq!(
        bootstrap["admin"]["address"]["socket_address"]["port_value"],
        9901
    );
    assert_eq!(
        bootstrap["stats_sinks"][0]["name"],
        "envoy.stat_sinks.statsd"
    );
    assert_eq!(
        bootstrap["dynamic_resources"]["ads_config"]["api_type"],
        "GRPC"
    );
    assert_eq!(bootstrap["node"]["id"], "imported");
    assert!(imported.notes.iter().any(|n| n.contains("0.0.0.0_8080")));
    assert!(imported
        .notes
        .iter()
        .any(|n| n.contains("\"statsd\" stays static")));
    // Every file loads as a snapshot file.
    for (name, text) in &imported.files {
        crate::config::load_text(Path::new(name), text)
            .unwrap_or_else(|e| panic!("{name}: {e:?}\n{text}"));
    }
}

#[test]
fn split_flags_give_eds_and_rds() {
    let mut options = options();
    options.split_endpoints = true;
    options.split_routes = true;
    options.delta = true;
    let imported = import_text(FRONT, &options).expect("imports");
    let listeners = yaml(file(&imported, "listeners.yaml").expect("listeners.yaml"));
    let hcm = &listeners["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
    assert!(hcm.get("route_config").is_none());
    assert_eq!(hcm["rds"]["route_config_name"], "local_route");
    let routes = yaml(file(&imported, "routes.yaml").unwrap());
    assert_eq!(routes["routes"][0]["name"], "local_route");
    let clusters = yaml(file(&imported, "clusters.yaml").unwrap());
    assert_eq!(clusters["clusters"][0]["type"], "EDS");
    assert!(clusters["clusters"][0].get("load_assignment").is_none());
    let endpoints = yaml(file(&imported, "endpoints.yaml").unwrap());
    // Named by the cluster (the inline cluster_name did not matter to Envoy).
    assert_eq!(endpoints["endpoints"][0]["cluster_name"], "service");
    let bootstrap = yaml(&imported.bootstrap);
    assert_eq!(
        bootstrap["dynamic_resources"]["ads_config"]["api_type"],
        "DELTA_GRPC"
    );
    for (name, text) in &imported.files {
        crate::config::load_text(Path::new(name), text)
            .unwrap_or_else(|e| panic!("{name}: {e:?}\n{text}"));
    }
}

#[test]
fn what_cannot_be_carried_over_is_refused_naming_it() {
    let cases = [
        ("admin: {}\n", "no `static_resources`"),
        ("static_resources: {}\n", "empty"),
        (
            "static_resources: {clusters: [{name: a}]}\ndynamic_resources: {lds_config: {ads: {}}}\n",
            "`dynamic_resources` already",
        ),
        (
            "static_resources:\n  listeners:\n  - name: api\n    api_listener: {}\n",
            "api_listener",
        ),
        ("static_resources: {clusters: [{name: a, nope: 1}]}\n", "nope"),
        (
            "static_resources: {clusters: [{name: a, connect_timeout: 0s}]}\n",
            "ConnectTimeout",
        ),
    ];
    for (text, says) in cases {
        let err = import_text(text, &options()).unwrap_err().to_string();
        assert!(err.contains(says), "{text}: {err}");
        assert!(err.contains("envoy.yaml"), "{err}");
    }
}

#[test]
fn write_refuses_to_overwrite_and_writes_nothing_then() {
    let imported = import_text(FRONT, &options()).expect("imports");
    let dir = tempfile::tempdir().expect("tmp");
    let written = write(dir.path(), &imported, false).expect("writes");
    assert!(written.contains(&dir.path().join("envoy.yaml")));
    assert!(dir.path().join("snapshot/listeners.yaml").is_file());
    let err = write(dir.path(), &imported, false).unwrap_err().to_string();
    assert!(err.contains("exists already"), "{err}");
    write(dir.path(), &imported, true).expect("--force overwrites");
}

/// What import writes reads back, through Envoy's YAML rules, as the same JSON: strings
/// that look like booleans or numbers to yaml-cpp stay strings.
#[test]
fn written_yaml_reads_back_the_same() {
    let json = serde_json::json!({"a": ["yes", "on", "y", "N", "off", "12345678901", "0x10", "1e3",
        "~", "null", "", "true", "-.inf", "010", "+5", "a\nb\n"], "n": 10000.0, "f": 1.5, "b": true});
    let text = to_yaml(&json).expect("YAML");
    let (back, _) = crate::config::yaml::parse(&text).expect("reads back");
    let back = serde_json::to_value(back).expect("JSON");
    let mut expected = json.clone();
    expected["n"] = 10000.into();
    assert_eq!(back, expected, "{text}");
}

#[test]
fn names_come_first_in_imported_files() {
    let imported = import_text(FRONT, &options()).expect("imports");
    let text = file(&imported, "listeners.yaml").expect("listeners.yaml");
    assert!(
        text.contains("listeners:\n  - name: 0.0.0.0_8080\n"),
        "{text}"
    );
}

#[test]
fn an_inline_private_key_gets_a_note_on_how_it_is_served() {
    let text = FRONT.replace(
        "private_key: {filename: /etc/certs/key.pem}",
        "private_key: {inline_string: KEY}",
    );
    let imported = import_text(&text, &options()).expect("imports");
    assert!(
        imported
            .notes
            .iter()
            .any(|n| n.contains("server_cert") && n.contains("--insecure-serve-secrets")),
        "{:?}",
        imported.notes
    );
    // Files are read by the Envoy itself: no note.
    let imported = import_text(FRONT, &options()).expect("imports");
    assert!(!imported.notes.iter().any(|n| n.contains("key material")));
}

#[test]
fn a_key_given_twice_in_the_bootstrap_is_a_note() {
    let text = FRONT.replacen("admin: {address", "admin: {}\nadmin: {address", 1);
    let imported = import_text(&text, &options()).expect("imports");
    assert!(
        imported
            .notes
            .iter()
            .any(|n| n.contains("`admin` is given twice")),
        "{:?}",
        imported.notes
    );
}

/// A regex's RE2 program is judged with the limit the bootstrap's own
/// runtime sets, and the import says to serve with it.
#[test]
fn a_regex_program_is_judged_with_the_bootstraps_runtime_limit() {
    let bootstrap = |runtime: &str| {
        format!(
            r#"
static_resources:
  listeners:
  - name: l
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: 10000 }} }}
    filter_chains:
    - filters:
      - name: hcm
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: x
          route_config:
            virtual_hosts:
            - name: a
              domains: ["*"]
              routes:
              - match: {{ safe_regex: {{ regex: "x{{0,60}}" }} }}
                direct_response: {{ status: 200 }}
          http_filters:
          - name: router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
{runtime}"#
        )
    };
    let refused = import_text(&bootstrap(""), &options()).expect_err("124 > 100");
    assert!(
        refused
            .to_string()
            .contains("RE2 program size of 124 > max program size of 100"),
        "{refused}"
    );
    let raised = "layered_runtime:\n  layers:\n  - name: s\n    static_layer: { re2.max_program_size.error_level: 200 }\n";
    let imported = import_text(&bootstrap(raised), &options()).expect("200 allows it");
    assert_eq!(imported.re2_max_program_size, Some(200));
    assert!(
        imported
            .notes
            .iter()
            .any(|n| n.contains("--re2-max-program-size 200")),
        "{:?}",
        imported.notes
    );
}
