//! deploy/prometheus and deploy/grafana, tested for real with Debian's `prometheus`:
//! `promtool check rules` and `promtool test rules` on the alert rules, then a live
//! Prometheus scraping a running Switchyard while a real Envoy (a canary) NACKs: the NACK and
//! halted-rollout alerts fire, a limit's does, and every dashboard panel's query returns
//! data.

use switchyard_testkit as support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::envoy::{
    debian_tool, envoy_binary, eventually, free_port, get_json, Envoy, Process, Switchyard,
    Upstream,
};
use support::{listener_item, write, write_mesh};

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(path)
}

fn promtool() -> PathBuf {
    debian_tool("PROMTOOL", "promtool", "prometheus")
}

/// Run promtool with `args` in deploy/prometheus: its output, after asserting success.
fn promtool_ok(args: &[&str]) -> String {
    let out = Command::new(promtool())
        .args(args)
        .current_dir(deploy("prometheus"))
        .output()
        .expect("promtool runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}: {text}");
    text
}

#[test]
fn the_alert_rules_check_and_their_unit_tests_pass() {
    let checked = promtool_ok(&["check", "rules", "switchyard-alerts.yaml"]);
    assert!(checked.contains("SUCCESS: 8 rules found"), "{checked}");
    let tested = promtool_ok(&["test", "rules", "switchyard-alerts.test.yaml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    let config = promtool_ok(&["check", "config", "prometheus.yaml"]);
    assert!(config.contains("SUCCESS"), "{config}");
}

/// The dashboard's panel queries.
fn panel_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(deploy("grafana/switchyard.json")).expect("dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            out.push((
                panel["title"].as_str().expect("title").to_string(),
                target["expr"].as_str().expect("expr").to_string(),
            ));
        }
    }
    out
}

/// The list under `data.<key>` of Prometheus's answer to `GET /api/v1/<path>?<params>`
/// (empty when it does not answer).
async fn api(port: u16, path: &str, params: &[(&str, &str)], key: &str) -> Vec<serde_json::Value> {
    get_json(&format!("http://127.0.0.1:{port}/api/v1/{path}"), params)
        .await
        .and_then(|a| a["data"][key].as_array().cloned())
        .unwrap_or_default()
}

/// Prometheus's answer to `query` (the `data.result` list).
async fn query(port: u16, query: &str) -> Vec<serde_json::Value> {
    api(port, "query", &[("query", query)], "result").await
}

/// The alerts Prometheus has firing, by name.
async fn firing(port: u16) -> Vec<String> {
    api(port, "alerts", &[], "alerts")
        .await
        .iter()
        .filter(|a| a["state"] == "firing")
        .filter_map(|a| a["labels"]["alertname"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_prometheus_fires_the_nack_alert_and_every_panel_has_data() {
    let Some(envoy_bin) = envoy_binary() else {
        return;
    };
    let prometheus = debian_tool("PROMETHEUS", "prometheus", "prometheus");
    let upstream = Upstream::start("upstream-a").await;
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("config");
    let certs = dir.path().join("certs");
    std::fs::create_dir_all(&config).expect("mkdir");
    std::fs::create_dir_all(&certs).expect("mkdir");
    let listener = free_port();
    write_mesh(&config, upstream.port, listener);
    // A secret read from files, for the certificate panel.
    let ca = support::certs::Ca::new("alerts test CA");
    ca.leaf(&["edge.example"], &[]).write(&certs, "edge");
    write(
        &config,
        "secrets.yaml",
        &format!(
            "secrets:\n- name: edge\n  switchyard_files: {{certificate_chain: {}, private_key: {}}}\n",
            certs.join("edge.pem").display(),
            certs.join("edge.key").display()
        ),
    );
    // Every change after the first load goes to the canaries first: the Envoy below is one.
    let switchyard = Switchyard::start_with_args(
        &config,
        dir.path(),
        &[
            "--canary-id",
            "canary-*",
            "--rollout-bake",
            "1s",
            "--admin-header-timeout",
            "1s",
        ],
    )
    .await;
    let envoy_dir = dir.path().join("envoy");
    std::fs::create_dir(&envoy_dir).expect("mkdir");
    let envoy = Envoy::start(&envoy_bin, switchyard.port, "canary-1", &envoy_dir).await;
    let synced = eventually(Duration::from_secs(20), || {
        switchyard.node_synced("canary-1")
    })
    .await;
    assert!(synced.is_some(), "Envoy never synced");

    // Prometheus: every second, the alert rules with their `for` at 0 (their durations are
    // promtool's unit tests' to check; here the expressions meet real metrics).
    let prom_dir = dir.path().join("prometheus");
    std::fs::create_dir(&prom_dir).expect("mkdir");
    let rules = std::fs::read_to_string(deploy("prometheus/switchyard-alerts.yaml"))
        .expect("rules")
        .lines()
        .map(|l| match l.trim_start().strip_prefix("for: ") {
            Some(_) => format!("{}for: 0s", &l[..l.len() - l.trim_start().len()]),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    write(&prom_dir, "switchyard-alerts.yaml", &rules);
    let prom_config = std::fs::read_to_string(deploy("prometheus/prometheus.yaml"))
        .expect("config")
        .replace("scrape_interval: 15s", "scrape_interval: 1s")
        .replace("evaluation_interval: 15s", "evaluation_interval: 1s")
        .replace(
            "127.0.0.1:19000",
            &format!("127.0.0.1:{}", switchyard.admin_port),
        );
    write(&prom_dir, "prometheus.yaml", &prom_config);
    let prom_port = free_port();
    let mut cmd = Command::new(prometheus);
    cmd.arg(format!(
        "--config.file={}",
        prom_dir.join("prometheus.yaml").display()
    ))
    .arg(format!(
        "--storage.tsdb.path={}",
        prom_dir.join("data").display()
    ))
    .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
    .current_dir(&prom_dir);
    let prom = Process::spawn("prometheus", cmd, prom_dir.join("prometheus.log"));
    let ready = eventually(Duration::from_secs(30), || async {
        reqwest::get(format!("http://127.0.0.1:{prom_port}/-/ready"))
            .await
            .is_ok_and(|r| r.status().is_success())
    })
    .await;
    assert!(
        ready.is_some(),
        "Prometheus never ready:\n{}",
        prom.log_text()
    );
    let scraping = eventually(Duration::from_secs(30), || async {
        query(prom_port, "up{job=\"switchyard\"} == 1").await.len() == 1
    })
    .await;
    assert!(scraping.is_some(), "Prometheus never scraped Switchyard");

    // A second listener passes every field rule and check of Switchyard's; Envoy NACKs it
    // (its route's Lua fails when run), and the rollout to the canaries halts.
    write(
        &config,
        "listener.yaml",
        &format!(
            "listeners:{}{}",
            listener_item("http", listener, "main"),
            support::envoy_rejected_listener_item("b", free_port(), "a")
        ),
    );
    // An admin connection that never sends its headers: turned away by a limit.
    let idle = tokio::net::TcpStream::connect(("127.0.0.1", switchyard.admin_port))
        .await
        .expect("connect");
    let wanted = [
        "SwitchyardNodeNacking",
        "SwitchyardRolloutHalted",
        "SwitchyardLimitRejecting",
    ];
    let fired = eventually(Duration::from_secs(60), || async {
        let now = firing(prom_port).await;
        wanted.iter().all(|w| now.iter().any(|f| f == w))
    })
    .await;
    assert!(
        fired.is_some(),
        "firing: {:?}\n{}",
        firing(prom_port).await,
        prom.log_text()
    );
    drop(idle);
    let now = firing(prom_port).await;
    for quiet in [
        "SwitchyardDown",
        "SwitchyardConfigLoadFailed",
        "SwitchyardCertificateExpired",
    ] {
        assert!(!now.iter().any(|f| f == quiet), "{quiet} fired: {now:?}");
    }

    // Every panel of the dashboard has data.
    for (title, expr) in panel_queries() {
        let result = query(prom_port, &expr).await;
        assert!(!result.is_empty(), "panel {title:?} has no data: {expr}");
    }
    println!(
        "fired {:?} after {fired:?}; {} panels with data",
        wanted,
        panel_queries().len()
    );
    drop(envoy);
}
