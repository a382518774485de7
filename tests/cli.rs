//! The command line: exit codes and messages.

use std::process::Command;

use switchyard_testkit::certs;

use run::{stderr, switchyard};
use switchyard_testkit::run;

fn examples() -> String {
    format!("{}/examples/config", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn validate_accepts_the_shipped_examples() {
    let o = switchyard(&["validate", "--config", &examples()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("OK: 3 file(s), 4 resource(s)"), "{out}");
}

#[test]
fn validate_reports_every_error_with_exit_1() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(
        dir.path().join("a.yaml"),
        "clusters: [{name: a, nope: 1}]\n",
    )
    .expect("w");
    std::fs::write(
        dir.path().join("b.yaml"),
        "listeners: [{name: l, port: 2}]\n",
    )
    .expect("w");
    let o = switchyard(&["validate", "-c", dir.path().to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("a.yaml") && err.contains("nope"), "{err}");
    assert!(err.contains("b.yaml") && err.contains("port"), "{err}");
    assert!(err.contains("invalid: 2 error(s)"), "{err}");
}

#[test]
fn validate_prints_warnings_and_strict_makes_them_errors() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(
        dir.path().join("r.yaml"),
        "routes: [{name: r, virtual_hosts: [{name: v, domains: ['*'], routes: [{match: {prefix: /}, route: {cluster: ghost}}]}]}]\n",
    )
    .expect("w");
    let path = dir.path().to_str().expect("utf8");
    let o = switchyard(&["validate", "-c", path]);
    assert_eq!(o.status.code(), Some(0));
    // Where the route that refers is written: at its `cluster:`.
    let file = dir.path().join("r.yaml").display().to_string();
    assert!(
        stderr(&o).contains(&format!(
            "warning: {file}:1:100: RDS \"r\": refers to cluster \"ghost\", which no file defines"
        )),
        "{}",
        stderr(&o)
    );
    let strict = switchyard(&["validate", "--strict", "-c", path]);
    assert_eq!(strict.status.code(), Some(1));
}

/// A node glob that is a prefix with nothing after it (`canary-`) names one node, not a
/// group: a file's `nodes:` warns, and `serve --canary-id` refuses it at start.
#[test]
fn a_prefix_glob_with_nothing_after_it_is_named() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(
        dir.path().join("a.yaml"),
        "nodes: [{id: \"edge-\"}]\nclusters: [{name: a, connect_timeout: 1s}]\n",
    )
    .expect("w");
    let path = dir.path().to_str().expect("utf8");
    let o = switchyard(&["validate", "-c", path]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        stderr(&o).contains("nodes[0].id: \"edge-\" has no wildcard and ends in '-'")
            && stderr(&o).contains("write \"edge-*\""),
        "{}",
        stderr(&o)
    );
    let o = switchyard(&[
        "serve",
        "-c",
        path,
        "--canary-id",
        "canary-",
        "--xds-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
    ]);
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--canary-id \"canary-\" has no wildcard"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bad_flags_exit_64() {
    let examples = examples();
    let examples = examples.as_str();
    for args in [
        &["serve"][..],
        &["serve", "--config", "x", "--xds-addr", "not-an-address"],
        &["serve", "--config", "x", "--log-format", "xml"],
        &["serve", "--config", examples, "--log-level", "foo=[["],
        &["frobnicate"],
        &[],
    ] {
        let o = switchyard(args);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {}", stderr(&o));
    }
    // A replica's name names its keys in etcd: what does not fit is said, before anything
    // is read; from files there is no fleet to name it in.
    let url = "etcd://127.0.0.1:1/switchyard";
    for (name, why) in [
        ("edge/a", "only letters, digits"),
        (".hidden", "does not start with `.`"),
        ("", "1 to 253 characters"),
    ] {
        let o = switchyard(&["serve", "--source", url, "--replica-name", name]);
        assert_eq!(o.status.code(), Some(64), "{name:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(why) && stderr(&o).contains("--replica-name"),
            "{name:?}: {}",
            stderr(&o)
        );
    }
    let o = switchyard(&["serve", "--config", examples, "--replica-name", "edge-a"]);
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    assert!(stderr(&o).contains("--source"), "{}", stderr(&o));
}

#[test]
fn serve_with_a_config_that_cannot_load_exits_64_and_says_why() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("a.yaml"), "clusters: [ {name: \n").expect("w");
    let o = switchyard(&[
        "serve",
        "--xds-addr",
        "127.0.0.1:0",
        "--config",
        dir.path().to_str().expect("utf8"),
    ]);
    assert_eq!(o.status.code(), Some(64));
    let err = stderr(&o);
    assert!(
        err.contains("cannot be loaded") && err.contains("a.yaml"),
        "{err}"
    );
}

#[test]
fn help_and_version_exit_0() {
    let o = switchyard(&["--version"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("switchyard "));
    let o = switchyard(&["serve", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = String::from_utf8_lossy(&o.stdout);
    for flag in [
        "--config",
        "--xds-addr",
        "--strict",
        "--log-level",
        "--log-format",
    ] {
        assert!(help.contains(flag), "{flag} missing from help");
    }
}

#[test]
fn serve_stops_cleanly_on_sigterm() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args([
            "serve",
            "--xds-addr",
            "127.0.0.1:0",
            "--admin-addr",
            "127.0.0.1:0",
            "--config",
            &examples(),
        ])
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let serving = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.contains("Serving xDS."));
    assert!(serving, "never logged that it serves");
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("did not stop within 10 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
}

#[test]
fn ordering_flags_are_checked_with_a_clear_error() {
    let config = examples();
    for (value, says) in [
        ("10ms", "out of range"),
        ("11m", "out of range"),
        ("soon", "expected a duration"),
    ] {
        let o = switchyard(&["serve", "-c", &config, "--ordering-timeout", value]);
        assert_eq!(o.status.code(), Some(64), "{value}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.contains("--ordering-timeout") && err.contains(says),
            "{value}: {err}"
        );
    }
    let o = switchyard(&["serve", "-c", &config, "--ordering", "maybe"]);
    assert_eq!(o.status.code(), Some(64));
    assert!(
        stderr(&o).contains("[possible values: on, off]"),
        "{}",
        stderr(&o)
    );
}

/// A free TCP port on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// With `--admin-token-file`, what shows nodes needs the token; probes and metrics do not;
/// `switchyard status` sends it from its own `--admin-token-file`.
#[tokio::test]
async fn the_admin_token_guards_status_and_config_dump() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().expect("tmp");
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cr3t-token\n").expect("write");
    let token = token.to_str().expect("utf8").to_string();
    let admin = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["serve", "--xds-addr", "127.0.0.1:0", "--admin-addr", &admin])
        .args(["--config", &examples(), "--admin-token-file", &token])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starts");
    let client = reqwest::Client::new();
    let get = |path: &str, bearer: Option<&str>| {
        let mut request = client.get(format!("http://{admin}{path}"));
        if let Some(b) = bearer {
            request = request.bearer_auth(b);
        }
        async move { request.send().await.ok().map(|r| r.status().as_u16()) }
    };
    let start = Instant::now();
    while get("/healthz", None).await != Some(200) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "admin never came up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let checks = [
        ("/status", None, 401),
        ("/status", Some("wrong"), 401),
        ("/status", Some("s3cr3t-token"), 200),
        ("/config_dump?node=n1", None, 401),
        ("/", None, 401),
        ("/readyz", None, 200),
        ("/metrics", None, 200),
    ];
    let mut seen = Vec::new();
    for (path, bearer, _) in checks {
        seen.push(get(path, bearer).await);
    }
    let with = switchyard(&[
        "status",
        "--admin-addr",
        &admin,
        "--admin-token-file",
        &token,
    ]);
    let without = switchyard(&["status", "--admin-addr", &admin]);
    let _ = child.kill();
    let _ = child.wait();
    for ((path, bearer, want), got) in checks.iter().zip(seen) {
        assert_eq!(got, Some(*want), "{path} with {bearer:?}");
    }
    assert_eq!(with.status.code(), Some(0), "{}", stderr(&with));
    assert_eq!(without.status.code(), Some(1));
    assert!(stderr(&without).contains("401"), "{}", stderr(&without));
}

/// With `--state-dir`, a restart whose files do not load serves the last good copy (and
/// reports the error) instead of refusing to start.
#[tokio::test]
async fn a_restart_with_broken_files_serves_the_last_good_copy_from_the_state_dir() {
    use std::time::{Duration, Instant};
    let config = tempfile::tempdir().expect("tmp");
    let state = tempfile::tempdir().expect("tmp");
    std::fs::write(
        config.path().join("clusters.yaml"),
        "clusters: [{name: kept, connect_timeout: 1s}]\n",
    )
    .expect("write");
    let start = |admin: &str| {
        Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["serve", "--xds-addr", "127.0.0.1:0", "--admin-addr", admin])
            .arg("--config")
            .arg(config.path())
            .arg("--state-dir")
            .arg(state.path())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("starts")
    };
    let get = |admin: String, path: &'static str| async move {
        let r = reqwest::get(format!("http://{admin}{path}")).await.ok()?;
        let code = r.status().as_u16();
        Some((code, r.text().await.ok()?))
    };
    let wait_ready = |admin: String| async move {
        let t = Instant::now();
        loop {
            if let Some((200, _)) = get(admin.clone(), "/readyz").await {
                return;
            }
            assert!(t.elapsed() < Duration::from_secs(10), "never ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let admin = format!("127.0.0.1:{}", free_port());
    let mut first = start(&admin);
    wait_ready(admin.clone()).await;
    let _ = first.kill();
    let _ = first.wait();
    assert!(
        state.path().join("current").exists(),
        "the good load was kept"
    );

    std::fs::write(
        config.path().join("clusters.yaml"),
        "clusters: [{name: kept, oops: 1}]\n",
    )
    .expect("write");
    let admin = format!("127.0.0.1:{}", free_port());
    let mut second = start(&admin);
    wait_ready(admin.clone()).await;
    let (_, dump) = get(admin.clone(), "/config_dump?node=n1")
        .await
        .expect("dump");
    let (_, status) = get(admin.clone(), "/status").await.expect("status");
    let _ = second.kill();
    let _ = second.wait();
    assert!(
        dump.contains("\"kept\""),
        "the last good copy is served: {dump}"
    );
    let status: serde_json::Value = serde_json::from_str(&status).expect("JSON");
    assert_eq!(status["config"]["ok"], false, "{status}");
    // Generation numbers go on across restarts: the first run published 1.
    assert_eq!(status["generation"], 2, "{status}");
    assert_eq!(
        std::fs::read_to_string(state.path().join("generation"))
            .ok()
            .as_deref(),
        Some("2\n")
    );
    assert!(status["config"]["errors"][0]
        .as_str()
        .is_some_and(|e| e.contains("oops")));

    // Without a kept copy, broken files still refuse to start.
    let empty_state = tempfile::tempdir().expect("tmp");
    let o = switchyard(&[
        "serve",
        "--config",
        config.path().to_str().expect("utf8"),
        "--state-dir",
        empty_state.path().to_str().expect("utf8"),
    ]);
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
}

#[test]
fn tls_flags_go_together_and_bad_files_are_usage_errors() {
    let config = examples();
    let dir = tempfile::tempdir().expect("tmp");
    let missing = dir.path().join("nope.pem");
    let missing = missing.to_str().expect("utf8");
    for (args, says) in [
        (vec!["--tls-cert", missing], "--tls-key"),
        (vec!["--client-ca", missing], "--tls-cert"),
        (vec!["--node-identity", "spiffe://x/{id}"], "--client-ca"),
        (
            vec![
                "--tls-cert",
                missing,
                "--tls-key",
                missing,
                "--client-ca",
                missing,
                "--node-identity",
                "fixed",
            ],
            "names no node",
        ),
        (
            vec!["--tls-cert", missing, "--tls-key", missing],
            "nope.pem",
        ),
        (vec!["--admin-tls-cert", missing], "--admin-tls-key"),
        (
            vec!["--admin-tls-cert", missing, "--admin-tls-key", missing],
            "cannot set up TLS on the admin port",
        ),
        (vec!["--admin-header-timeout", "5ms"], "out of range"),
    ] {
        let mut all = vec![
            "serve",
            "-c",
            &config,
            "--xds-addr",
            "127.0.0.1:0",
            "--admin-addr",
            "127.0.0.1:0",
        ];
        all.extend(args.iter().copied());
        let o = switchyard(&all);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn status_tls_flags_are_checked_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("tmp");
    let missing = dir.path().join("nope.pem");
    let missing = missing.to_str().expect("utf8");
    let not_pem = dir.path().join("ca.pem");
    std::fs::write(&not_pem, "not a certificate\n").expect("write");
    let not_pem = not_pem.to_str().expect("utf8");
    for (args, says) in [
        (vec!["--admin-server-name", "localhost"], "--admin-ca"),
        (vec!["--admin-ca", missing], "nope.pem"),
        (vec!["--admin-ca", not_pem], "no PEM certificate"),
    ] {
        let mut all = vec!["status", "--admin-addr", "127.0.0.1:1"];
        all.extend(args.iter().copied());
        let o = switchyard(&all);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}

/// With `--admin-tls-cert`, the admin API is HTTPS; `switchyard status --admin-ca` asks over
/// it (with the token too), and without `--admin-ca` it cannot ask.
#[tokio::test]
async fn status_asks_an_https_admin_api() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().expect("tmp");
    let ca = certs::Ca::new("admin CA");
    ca.write(dir.path(), "ca");
    ca.leaf(&["switchyard.test"], &[])
        .write(dir.path(), "admin");
    std::fs::write(dir.path().join("token"), "s3cr3t-token\n").expect("write");
    let path = |name: &str| dir.path().join(name).to_str().expect("utf8").to_string();
    let admin = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["serve", "--xds-addr", "127.0.0.1:0", "--admin-addr", &admin])
        .args(["--config", &examples()])
        .args(["--admin-tls-cert", &path("admin.pem")])
        .args(["--admin-tls-key", &path("admin.key")])
        .args(["--admin-token-file", &path("token")])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starts");
    let client = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem.as_bytes()).expect("CA"))
        .resolve("switchyard.test", admin.parse().expect("addr"))
        .build()
        .expect("client");
    let port = admin.rsplit(':').next().expect("port");
    let healthz = format!("https://switchyard.test:{port}/healthz");
    let start = Instant::now();
    while client
        .get(&healthz)
        .send()
        .await
        .map(|r| r.status().as_u16())
        .ok()
        != Some(200)
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the HTTPS admin API never came up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = |extra: &[&str]| {
        let mut args = vec!["status", "--admin-addr", &admin];
        args.extend(extra);
        switchyard(&args)
    };
    let (ca_pem, token) = (path("ca.pem"), path("token"));
    let over_https = status(&[
        "--admin-ca",
        &ca_pem,
        "--admin-server-name",
        "switchyard.test",
        "--admin-token-file",
        &token,
    ]);
    let plain = status(&["--admin-token-file", &token]);
    let wrong_name = status(&["--admin-ca", &ca_pem, "--admin-token-file", &token]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(over_https.status.code(), Some(0), "{}", stderr(&over_https));
    assert!(
        String::from_utf8_lossy(&over_https.stdout).contains("config"),
        "{over_https:?}"
    );
    assert_eq!(plain.status.code(), Some(1), "{}", stderr(&plain));
    assert!(
        stderr(&plain).contains("cannot reach"),
        "{}",
        stderr(&plain)
    );
    assert_eq!(
        wrong_name.status.code(),
        Some(1),
        "the certificate names switchyard.test, not 127.0.0.1"
    );
}

/// Envoy's field rules stop a resource every Envoy would NACK; `--skip-envoy-rules` lets it
/// through (for clients that do not apply them).
#[test]
fn validate_checks_envoys_field_rules_unless_told_not_to() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(
        dir.path().join("c.yaml"),
        "clusters:\n  - { name: backend, connect_timeout: 0s }\n",
    )
    .expect("write");
    let path = dir.path().to_str().expect("utf-8");
    let o = switchyard(&["validate", "--config", path]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(
            "c.yaml:2:22: clusters[0] \"backend\": connect_timeout: breaks Envoy's rule duration.gt; \
             Envoy would reject it with: Proto constraint validation failed \
             (ClusterValidationError.ConnectTimeout: value must be greater than 0s)"
        ),
        "{}",
        stderr(&o)
    );
    let o = switchyard(&["validate", "--config", path, "--skip-envoy-rules"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// `switchyard diff` by name: an HTTP filter and a route inserted into a
/// listener's inline route configuration read as one added filter and one added route, in
/// the field names the file uses.
#[test]
fn diff_pairs_routes_and_filters_by_name_or_match() {
    let old = tempfile::tempdir().expect("tmp");
    let new = tempfile::tempdir().expect("tmp");
    let listener = |extra_route: &str, extra_filter: &str| {
        format!(
            r#"listeners:
  - name: http
    address: {{ socket_address: {{ address: 0.0.0.0, port_value: 10000 }} }}
    filter_chains:
      - filters:
          - name: envoy.filters.network.http_connection_manager
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
              stat_prefix: http
              route_config:
                name: local
                virtual_hosts:
                  - name: all
                    domains: ["*"]
                    routes:
                      - {{ name: api, match: {{ prefix: /api }}, route: {{ cluster: api }} }}
{extra_route}                      - {{ name: rest, match: {{ prefix: / }}, route: {{ cluster: web }} }}
              http_filters:
{extra_filter}                - name: envoy.filters.http.router
                  typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
"#
        )
    };
    std::fs::write(old.path().join("l.yaml"), listener("", "")).expect("write");
    std::fs::write(
        new.path().join("l.yaml"),
        listener(
            "                      - { name: static, match: { prefix: /static }, route: { cluster: web } }\n",
            "                - name: envoy.filters.http.cors\n                  typed_config: { \"@type\": type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors }\n",
        ),
    )
    .expect("write");
    let (o, n) = (
        old.path().to_str().expect("utf-8"),
        new.path().to_str().expect("utf-8"),
    );
    let d = switchyard(&["diff", "--config", n, "--against", o, "--skip-envoy-rules"]);
    assert_eq!(d.status.code(), Some(1), "{}", stderr(&d));
    let out = String::from_utf8_lossy(&d.stdout);
    let fields: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("        "))
        .map(|l| l.trim().split(": ").next().unwrap_or_default())
        .collect();
    let hcm =
        "filter_chains[0].filters[name=envoy.filters.network.http_connection_manager].typed_config";
    assert_eq!(
        fields,
        [
            format!("{hcm}.http_filters[name=envoy.filters.http.cors]"),
            format!("{hcm}.route_config.virtual_hosts[name=all].routes[name=static]"),
        ],
        "{out}"
    );
}

/// `switchyard diff`: 0 when nothing changes, 1 when something does (and what), 2 when a
/// side does not load.
#[test]
fn diff_exits_0_1_or_2_and_names_what_changes() {
    let old = tempfile::tempdir().expect("tmp");
    let new = tempfile::tempdir().expect("tmp");
    let cluster =
        |timeout: &str| format!("clusters:\n  - {{ name: backend, connect_timeout: {timeout} }}\n");
    std::fs::write(old.path().join("c.yaml"), cluster("1s")).expect("write");
    std::fs::write(new.path().join("c.yaml"), cluster("1s")).expect("write");
    let (o, n) = (
        old.path().to_str().expect("utf-8"),
        new.path().to_str().expect("utf-8"),
    );
    let same = switchyard(&["diff", "--config", n, "--against", o]);
    assert_eq!(same.status.code(), Some(0), "{}", stderr(&same));
    assert_eq!(String::from_utf8_lossy(&same.stdout), "no changes\n");

    std::fs::write(new.path().join("c.yaml"), cluster("2s")).expect("write");
    let changed = switchyard(&["diff", "--config", n, "--against", o]);
    assert_eq!(changed.status.code(), Some(1), "{}", stderr(&changed));
    let out = String::from_utf8_lossy(&changed.stdout);
    assert!(
        out.contains("CDS: 0 added, 0 removed, 1 changed")
            && out.contains("~ backend")
            && out.contains("connect_timeout: \"1s\" -> \"2s\""),
        "{out}"
    );

    std::fs::write(new.path().join("c.yaml"), cluster("0s")).expect("write");
    let broken = switchyard(&["diff", "--config", n, "--against", o]);
    assert_eq!(broken.status.code(), Some(2));
    assert!(
        stderr(&broken).contains("--config: "),
        "{}",
        stderr(&broken)
    );
}

/// `validate --output json|github` prints a result for machines on stdout
/// (schema `switchyard.validate/v1`, docs/output.md), with each finding's file, line,
/// column, resource, field, message and Envoy's words; the exit code is the same as text's.
#[test]
fn validate_prints_findings_for_machines() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(
        dir.path().join("c.yaml"),
        "clusters:\n  - name: web\n    conect_timeout: 1s\n  - { name: zero, connect_timeout: 0s }\n",
    )
    .expect("write");
    let path = dir.path().to_str().expect("utf-8");
    let o = switchyard(&["validate", "--config", path, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
    assert_eq!(doc["schema"], "switchyard.validate/v1");
    assert_eq!(doc["ok"], false);
    let file = dir.path().join("c.yaml").display().to_string();
    let findings = doc["findings"].as_array().expect("findings");
    assert_eq!(findings.len(), 2, "{doc:#}");
    let typo = &findings[0];
    assert_eq!(typo["severity"], "error");
    assert_eq!(typo["file"], file.as_str());
    assert_eq!(
        (typo["line"].as_u64(), typo["column"].as_u64()),
        (Some(3), Some(5))
    );
    assert_eq!(typo["resource"], "clusters[0] \"web\"");
    assert_eq!(typo["field"], "conect_timeout");
    assert!(typo["message"]
        .as_str()
        .is_some_and(|m| m.ends_with("did you mean `connect_timeout`?")));
    assert!(typo["envoy"].is_null());
    let rule = &findings[1];
    assert_eq!(rule["field"], "connect_timeout");
    assert_eq!(
        rule["envoy"],
        "Proto constraint validation failed (ClusterValidationError.ConnectTimeout: value must \
         be greater than 0s)"
    );

    let o = switchyard(&["validate", "--config", path, "--output", "github"]);
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.starts_with(&format!(
            "::error file={file},line=3,col=5,title=switchyard%3A clusters[0] \"web\"::conect_timeout: \
             unknown field `conect_timeout`"
        )),
        "{out}"
    );
    assert_eq!(out.lines().count(), 2, "{out}");

    // Good files: ok, exit 0, nothing found.
    std::fs::write(
        dir.path().join("c.yaml"),
        "clusters: [{ name: web, connect_timeout: 1s }]\n",
    )
    .expect("write");
    let o = switchyard(&["validate", "--config", path, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(
        (doc["ok"].as_bool(), doc["resources"].as_u64()),
        (Some(true), Some(1))
    );
}

/// `diff --output json|markdown|github`.
#[test]
fn diff_prints_for_machines_and_pull_requests() {
    let old = tempfile::tempdir().expect("tmp");
    let new = tempfile::tempdir().expect("tmp");
    let cluster =
        |timeout: &str| format!("clusters:\n  - {{ name: backend, connect_timeout: {timeout} }}\n");
    std::fs::write(old.path().join("c.yaml"), cluster("1s")).expect("write");
    std::fs::write(new.path().join("c.yaml"), cluster("2s")).expect("write");
    let (o, n) = (
        old.path().to_str().expect("utf-8"),
        new.path().to_str().expect("utf-8"),
    );
    let run =
        |format: &str| switchyard(&["diff", "--config", n, "--against", o, "--output", format]);
    let json = run("json");
    assert_eq!(json.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(doc["schema"], "switchyard.diff/v1");
    assert_eq!(doc["changes"], true);
    let change = &doc["groups"][0]["types"][0];
    assert_eq!(change["kind"], "CDS");
    assert_eq!(change["changed"][0][0], "backend");
    assert_eq!(change["changed"][0][1][0]["path"], "connect_timeout");
    assert_eq!(change["changed"][0][1][0]["new"], "\"2s\"");

    let md = String::from_utf8_lossy(&run("markdown").stdout).into_owned();
    assert!(
        md.contains("| CDS |  |  | `backend` |")
            && md.contains("- `connect_timeout`: `\"1s\"` → `\"2s\"`"),
        "{md}"
    );
    let gh = String::from_utf8_lossy(&run("github").stdout).into_owned();
    assert!(
        gh.starts_with("::notice title=switchyard diff%3A CDS changed::backend: connect_timeout ("),
        "{gh}"
    );
    std::fs::write(new.path().join("c.yaml"), cluster("1s")).expect("write");
    let same = run("json");
    assert_eq!(same.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&same.stdout).expect("JSON");
    assert_eq!(doc["changes"], false);
}

/// `import --output json` says what it wrote (schema
/// `switchyard.import/v1`), or why it wrote nothing.
#[test]
fn import_prints_for_machines() {
    let dir = tempfile::tempdir().expect("tmp");
    let bootstrap = dir.path().join("envoy.yaml");
    std::fs::write(
        &bootstrap,
        "static_resources:\n  clusters: [{ name: web, connect_timeout: 1s }]\n",
    )
    .expect("write");
    let out = dir.path().join("out");
    let (b, o) = (
        bootstrap.to_str().expect("utf-8"),
        out.to_str().expect("utf-8"),
    );
    let run = switchyard(&["import", b, "--out", o, "--output", "json"]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let doc: serde_json::Value = serde_json::from_slice(&run.stdout).expect("JSON");
    assert_eq!(doc["schema"], "switchyard.import/v1");
    assert_eq!(doc["ok"], true);
    let written: Vec<&str> = doc["written"]
        .as_array()
        .expect("written")
        .iter()
        .filter_map(|w| w.as_str())
        .collect();
    assert!(
        written.iter().any(|w| w.ends_with("envoy.yaml"))
            && written.iter().any(|w| w.ends_with("clusters.yaml")),
        "{doc:#}"
    );
    assert!(doc["next"]
        .as_str()
        .is_some_and(|n| n.starts_with("switchyard serve")));
    // Again, without --force: nothing written, and why.
    let again = switchyard(&["import", b, "--out", o, "--output", "json"]);
    assert_eq!(again.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&again.stdout).expect("JSON");
    assert_eq!(
        (doc["ok"].as_bool(), doc["written"].as_array().map(Vec::len)),
        (Some(false), Some(0))
    );
    assert_eq!(doc["errors"].as_array().map(Vec::len), Some(1), "{doc:#}");
}
