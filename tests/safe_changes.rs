//! Safe changes against real processes. Pre-flight with the real Envoy 1.40: `switchyard
//! validate --envoy` and `serve --preflight-envoy` catch what Switchyard's own checks cannot
//! (here a route's Lua that fails when run, and a CA in a file the proxy's host does not have), per node
//! group. And `switchyard diff --server` against a running server.

use switchyard_testkit as support;

use std::process::Command;
use std::time::Duration;

use support::envoy::{envoy_binary, eventually, Switchyard};
use support::{eds_cluster, envoy_rejected_cluster, rds_listener, route_to, write};

/// `switchyard ARGS`: exit code, stdout and stderr.
fn switchyard(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The usual mesh: cluster `a` (EDS), listener `http` with RDS `main`, routes to `a`.
fn write_mesh(dir: &std::path::Path) {
    write(dir, "a.yaml", &eds_cluster("a", "1s", 8080));
    write(dir, "listener.yaml", &rds_listener("http", 10000, "main"));
    write(dir, "routes.yaml", &route_to("main", "a"));
}

/// Routes `main` whose route carries Lua that fails when run, which Envoy 1.40 refuses in
/// its C++ code and Switchyard does not check: the loader alone accepts it.
fn bad_routes() -> String {
    format!(
        r#"
routes:
  - name: main
    virtual_hosts:
      - name: all
        domains: ["*"]
        routes:
          - match: {{ prefix: "/" }}
            route: {{ cluster: a }}
            {}
"#,
        support::bad_lua_per_route()
    )
}

/// Envoy's words for [`bad_routes`].
const BAD_ROUTES_ENVOY: &str = support::ENVOY_REJECTED_LUA;

/// Routes `main` with a regex whose RE2 program is over Envoy's default limit: the loader
/// counts it as RE2 does and refuses it in Envoy's words.
const BAD_REGEX_ROUTES: &str = r#"
routes:
  - name: main
    virtual_hosts:
      - name: all
        domains: ["*"]
        routes:
          - match: { safe_regex: { regex: "x{0,50}" } }
            route: { cluster: a }
"#;

#[test]
fn validate_envoy_reports_envoys_verdict_per_node_group() {
    let Some(envoy) = envoy_binary() else { return };
    let envoy = envoy.to_str().expect("utf-8 path").to_string();
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().to_str().expect("utf-8").to_string();
    write_mesh(dir.path());

    let (code, out, err) = switchyard(&["validate", "--config", &config, "--envoy", &envoy]);
    assert_eq!(code, Some(0), "{err}");
    // Results on stdout (Envoy's verdicts and the total), diagnostics on stderr.
    assert!(
        out.starts_with("envoy: OK: nodes no selector names (") && out.contains("\nOK: 3 file(s)"),
        "{out}"
    );
    assert!(err.is_empty(), "{err}");

    // A regex whose RE2 program is over Envoy's limit: the loader counts it, as Envoy does.
    write(dir.path(), "routes.yaml", BAD_REGEX_ROUTES);
    let (code, _, err) = switchyard(&["validate", "--config", &config]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("RE2 program size of 104 > max program size of 100"),
        "{err}"
    );
    // Two path rewrites: the loader passes it, Envoy does not.
    write(dir.path(), "routes.yaml", &bad_routes());
    let (code, _, err) = switchyard(&["validate", "--config", &config]);
    assert_eq!(code, Some(0), "the loader does not check this: {err}");
    let (code, _, err) = switchyard(&["validate", "--config", &config, "--envoy", &envoy]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("Envoy rejects the nodes no selector names") && err.contains(BAD_ROUTES_ENVOY),
        "{err}"
    );
    // The same for machines: a finding naming the node group, in Envoy's words.
    let (code, out, _) = switchyard(&[
        "validate", "--config", &config, "--envoy", &envoy, "--output", "json",
    ]);
    assert_eq!(code, Some(1));
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let finding = &doc["findings"][0];
    assert!(
        finding["node_group"]
            .as_str()
            .is_some_and(|g| g.starts_with("nodes no selector names"))
            && finding["envoy"]
                .as_str()
                .is_some_and(|e| e.contains(BAD_ROUTES_ENVOY)),
        "{doc:#}"
    );
    write(dir.path(), "routes.yaml", &route_to("main", "a"));

    // A file for edge-* nodes only, with a cluster Envoy rejects: only that group fails,
    // and the error names it.
    let edge = format!(
        "nodes: [{{ id: \"edge-*\" }}]\n{}",
        envoy_rejected_cluster("edge-only", 8081)
    );
    write(dir.path(), "edge.yaml", &edge);
    let (code, _, err) = switchyard(&["validate", "--config", &config, "--envoy", &envoy]);
    assert_eq!(code, Some(1), "{err}");
    let rejected: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(rejected.len(), 1, "{err}");
    assert!(
        rejected[0].contains("id \"edge-\"")
            && rejected[0].contains("edge.yaml")
            && rejected[0].contains(support::ENVOY_REJECTED_CLUSTER),
        "{err}"
    );
    let (_, out, _) = switchyard(&["validate", "--config", &config, "--envoy", &envoy]);
    assert!(out.contains("envoy: OK: nodes no selector names"), "{out}");

    // A missing Envoy is a usage error.
    let (code, _, err) = switchyard(&["validate", "--config", &config, "--envoy", "/nonexistent"]);
    assert_eq!(code, Some(64), "{err}");
}

/// Pre-flight checks what a node is sent. A listener whose TLS key is inline goes
/// to a node that is not bound without the key, and Envoy rejects that
/// (`--with-key-material` checks what a bound node gets: the key, and Envoy accepts); the
/// same listener naming its key by a path on the proxy's host goes as written to every node.
#[test]
fn validate_envoy_checks_what_a_node_is_sent_of_its_keys() {
    let Some(envoy) = envoy_binary() else { return };
    let envoy = envoy.to_str().expect("utf-8 path").to_string();
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("config");
    std::fs::create_dir(&config).expect("mkdir");
    let leaf = support::certs::Ca::new("preflight").leaf(&["edge.example"], &[]);
    leaf.write(dir.path(), "edge");
    let listener = |chain: &str, key: &str| {
        format!(
            r#"listeners:
  - name: https
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: 10443 }} }}
    filter_chains:
      - transport_socket:
          name: envoy.transport_sockets.tls
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
            common_tls_context:
              tls_certificates:
              - certificate_chain: {chain}
                private_key: {key}
        filters:
          - name: envoy.filters.network.tcp_proxy
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: t, cluster: a }}
"#
        )
    };
    write(&config, "a.yaml", &eds_cluster("a", "1s", 8080));
    let inline = |pem: &str| {
        format!(
            "{{ inline_string: {} }}",
            serde_json::to_string(pem).expect("json")
        )
    };
    write(
        &config,
        "listener.yaml",
        &listener(&inline(&leaf.cert), &inline(&leaf.key)),
    );
    let config = config.to_str().expect("utf-8").to_string();
    let (code, _, err) = switchyard(&["validate", "--config", &config, "--envoy", &envoy]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("Envoy rejects the nodes no selector names"),
        "{err}"
    );
    assert!(
        err.contains("--with-key-material checks what those get"),
        "{err}"
    );
    let (code, _, err) = switchyard(&[
        "validate",
        "--config",
        &config,
        "--envoy",
        &envoy,
        "--with-key-material",
    ]);
    assert_eq!(code, Some(0), "a bound node gets the key: {err}");

    let path = |name: &str| format!("{{ filename: {} }}", dir.path().join(name).display());
    write(
        std::path::Path::new(&config),
        "listener.yaml",
        &listener(&path("edge.pem"), &path("edge.key")),
    );
    let (code, _, err) = switchyard(&["validate", "--config", &config, "--envoy", &envoy]);
    assert_eq!(code, Some(0), "a path goes as written: {err}");
}

#[tokio::test]
async fn serve_preflight_envoy_refuses_a_reload_envoy_rejects() {
    let Some(envoy) = envoy_binary() else { return };
    let envoy = envoy.to_str().expect("utf-8 path").to_string();
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("config");
    std::fs::create_dir(&config).expect("mkdir");
    write_mesh(&config);
    let server =
        Switchyard::start_with_args(&config, dir.path(), &["--preflight-envoy", &envoy]).await;
    let config_status = || async { server.status().await.and_then(|s| s.config) };
    let loaded = eventually(Duration::from_secs(30), || async {
        config_status()
            .await
            .is_some_and(|c| c.ok && c.generation == 1)
    })
    .await;
    assert!(
        loaded.is_some(),
        "the good config passes pre-flight and serves"
    );

    write(&config, "routes.yaml", &bad_routes());
    let refused = eventually(Duration::from_secs(30), || async {
        config_status().await.is_some_and(|c| !c.ok)
    })
    .await;
    assert!(refused.is_some(), "the reload is refused");
    let failed = config_status().await.expect("a config status");
    assert_eq!(
        failed.generation, 1,
        "the last good generation keeps serving"
    );
    assert!(
        failed
            .errors
            .iter()
            .any(|e| e.contains("Envoy rejects the nodes no selector names")
                && e.contains(BAD_ROUTES_ENVOY)),
        "{failed:?}"
    );
    let (code, out) = server.status_command(&[]);
    assert_eq!(code, Some(3), "status gates on the failed load\n{out}");

    // The fix (the script mended) passes and is published.
    write(
        &config,
        "routes.yaml",
        &bad_routes().replace(support::BAD_LUA, "function envoy_on_request(h) end"),
    );
    let fixed = eventually(Duration::from_secs(30), || async {
        config_status()
            .await
            .is_some_and(|c| c.ok && c.generation == 2)
    })
    .await;
    assert!(fixed.is_some(), "the fix is published");
}

/// `switchyard diff --server`: the running server's side comes from its /config_dump, per
/// node group of the new files; secrets stay hidden even when the server shows them.
#[tokio::test]
async fn diff_against_a_running_server() {
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("config");
    std::fs::create_dir(&config).expect("mkdir");
    write_mesh(&config);
    // A certificate and its key (the loader judges the bytes as Envoy does); the key's text
    // changes only before its PEM block (which Envoy skips): a change in a sensitive field.
    let leaf = support::certs::Ca::new("ca").leaf(&["a"], &[]);
    let secret = |marker: &str| {
        let json = |pem: &str| serde_json::to_string(pem).expect("json");
        format!(
            "secrets:\n  - name: tls\n    tls_certificate:\n      certificate_chain: {{ inline_string: {} }}\n      private_key: {{ inline_string: {} }}\n",
            json(&leaf.cert),
            json(&format!("{marker}\n{}", leaf.key))
        )
    };
    write(&config, "secret.yaml", &secret("SERVED-KEY"));
    let server = Switchyard::start_with_args(&config, dir.path(), &["--admin-show-secrets"]).await;
    let admin = format!("127.0.0.1:{}", server.admin_port);
    let new = dir.path().join("new");
    std::fs::create_dir(&new).expect("mkdir");
    write_mesh(&new);
    write(&new, "secret.yaml", &secret("SERVED-KEY"));
    let new_path = new.to_str().expect("utf-8").to_string();
    let diff = |server: &str| switchyard(&["diff", "--config", &new_path, "--server", server]);
    let (code, out, err) = diff(&admin);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(out, "no changes\n");

    write(&new, "a.yaml", &eds_cluster("a", "3s", 8080));
    write(&new, "secret.yaml", &secret("NEW-KEY"));
    let (code, out, err) = diff(&admin);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        out.contains("~ a\n        connect_timeout: \"1s\" -> \"3s\"\n"),
        "{out}"
    );
    assert!(
        out.contains("~ tls\n        (sensitive fields, not shown)\n"),
        "{out}"
    );
    assert!(!out.contains("KEY"), "{out}");

    let (code, _, err) = diff("127.0.0.1:1");
    assert_eq!(code, Some(2), "an unreachable server is an error: {err}");
}

/// Pre-flight gives Envoy what it would get over xDS: a TLS context naming an SDS secret no
/// file defines waits for SDS to bring it (Envoy over xDS accepts it), so `validate --envoy`
/// passes with plain `validate`'s warning instead of refusing "Unknown static certificate
/// validation context". A secret the files do define is checked as the static secret it is:
/// a bad one is refused.
#[test]
fn validate_envoy_leaves_a_secret_no_file_defines_to_sds() {
    let Some(envoy) = envoy_binary() else { return };
    let envoy = envoy.to_str().expect("utf-8 path").to_string();
    let dir = tempfile::tempdir().expect("tmp");
    let cluster = |secret: &str| {
        format!(
            r#"clusters:
  - name: a
    connect_timeout: 1s
    type: STATIC
    load_assignment: {{ cluster_name: a, endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 8443 }} }} }} }}] }}] }}
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        common_tls_context:
          validation_context_sds_secret_config: {{ name: {secret}, sds_config: {{ ads: {{}}, resource_api_version: V3 }} }}
"#
        )
    };
    write(dir.path(), "a.yaml", &cluster("system_trust_bundle"));
    let config = dir.path().to_str().expect("utf-8").to_string();
    let (code, out, err) = switchyard(&["validate", "--config", &config, "--envoy", &envoy]);
    assert_eq!(code, Some(0), "left for SDS, not refused: {out}{err}");
    assert!(
        format!("{out}{err}").contains("system_trust_bundle"),
        "the warning plain validate gives: {out}{err}"
    );
    assert!(!err.contains("Unknown static"), "{err}");

    // Defined in the files, and bad: the static secret is what Envoy checks.
    write(dir.path(), "a.yaml", &cluster("bundle"));
    write(
        dir.path(),
        "secret.yaml",
        &format!(
            "secrets:\n  - name: bundle\n    validation_context: {{ trusted_ca: {{ filename: {} }} }}\n",
            support::MISSING_CA
        ),
    );
    let (code, _, err) = switchyard(&["validate", "--config", &config, "--envoy", &envoy]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("Envoy rejects"), "{err}");
}
