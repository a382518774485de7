//! Integration tests of the admin HTTP server and `switchyard status`, against the whole
//! server in-process with scripted xDS clients over real sockets.

use switchyard_testkit as support;

use std::process::Command;
use std::time::Duration;

use support::*;
use switchyard::admin::{NodeStatus, Status};
use switchyard::resource::ResourceType::{Cluster, Endpoint};

async fn server() -> TestServer {
    TestServer::start(&[("clusters.yaml", &eds_cluster("backend", "1s", 8080))]).await
}

/// Poll `/status` until `check` holds (the stream task updates it after each step).
async fn status_until(server: &TestServer, check: impl Fn(&Status) -> bool) -> Status {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let status = server.status().await;
        if check(&status) {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "status never matched: {status:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn node<'a>(status: &'a Status, id: &str) -> Option<&'a NodeStatus> {
    status.nodes.iter().find(|n| n.node_id == id)
}

fn state(status: &Status, id: &str, kind: &str) -> Option<String> {
    node(status, id)
        .and_then(|n| n.types.get(kind))
        .map(|t| t.state.name().to_string())
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("joins")
}

#[tokio::test]
async fn healthz_and_readyz() {
    let server = server().await;
    assert_eq!(
        server.admin_get("/healthz").await,
        (200, "ok\n".to_string())
    );
    assert_eq!(
        server.admin_get("/readyz").await,
        (200, "ready\n".to_string())
    );
    assert_eq!(server.admin_get("/nope").await.0, 404);
}

#[tokio::test]
async fn status_follows_a_node_through_sent_acked_nacked_and_gone() {
    let server = server().await;
    let empty = server.status().await;
    assert!(empty.nodes.is_empty());
    assert_eq!(
        empty.schema, "switchyard.status/v1",
        "a versioned schema (docs/output.md)"
    );
    let config = empty.config.expect("the initial load is reported");
    assert!(config.ok && config.generation == 1 && config.errors.is_empty());

    let mut c = server.ads("edge-1").await;
    c.subscribe(Cluster, &[]).await;
    let cds = c.recv_type(Cluster).await;
    let s = status_until(&server, |s| {
        state(s, "edge-1", "CDS").as_deref() == Some("STALE")
    })
    .await;
    let n = node(&s, "edge-1").expect("listed");
    assert_eq!(n.node_cluster, "test");
    assert_eq!(n.user_agent, "switchyard-tests");
    assert_eq!(
        (n.streams[0].stream.as_str(), n.streams[0].protocol.as_str()),
        ("ADS", "sotw")
    );
    let t = &n.types["CDS"];
    assert_eq!(
        (
            t.version_sent.as_str(),
            t.nonce.as_str(),
            t.version_acked.as_str()
        ),
        (cds.version_info.as_str(), cds.nonce.as_str(), "")
    );

    c.ack(&cds, &[]).await;
    let s = status_until(&server, |s| {
        state(s, "edge-1", "CDS").as_deref() == Some("SYNCED")
    })
    .await;
    assert_eq!(
        node(&s, "edge-1").expect("listed").types["CDS"].version_acked,
        cds.version_info
    );

    // A change the proxy rejects.
    server.set_file("clusters.yaml", &eds_cluster("backend", "5s", 8080));
    let bad = c.recv_type(Cluster).await;
    c.nack(&bad, &[], &cds.version_info, "ConnectTimeout is silly")
        .await;
    let s = status_until(&server, |s| {
        state(s, "edge-1", "CDS").as_deref() == Some("NACKED")
    })
    .await;
    let t = &node(&s, "edge-1").expect("listed").types["CDS"];
    assert_eq!(t.error.as_deref(), Some("ConnectTimeout is silly"));
    assert_eq!(
        t.rejected_version.as_deref(),
        Some(bad.version_info.as_str())
    );
    assert_eq!(
        t.version_acked, cds.version_info,
        "it still runs the old version"
    );
    assert!(s.any_nacked());

    drop(c);
    status_until(&server, |s| s.nodes.is_empty()).await;
}

#[tokio::test]
async fn status_lists_delta_streams_and_the_last_failed_load() {
    let server = server().await;
    let mut d = server.delta("edge-2").await;
    d.subscribe(Endpoint, &["backend"], &[]).await;
    let r = d.recv().await;
    d.ack(&r).await;
    let s = status_until(&server, |s| {
        state(s, "edge-2", "EDS").as_deref() == Some("SYNCED")
    })
    .await;
    let n = node(&s, "edge-2").expect("listed");
    assert_eq!(n.streams[0].protocol, "delta");
    assert_eq!(n.types["EDS"].version_acked, r.system_version_info);

    let errors = server.set_bad_file("broken.yaml", "clusters: [ {name: x, bogus: 1} ]\n");
    let s = server.status().await;
    let config = s.config.expect("reported");
    assert!(!config.ok);
    assert_eq!(config.generation, 1, "still serving the last good load");
    assert_eq!(config.errors, errors);
}

#[tokio::test]
async fn status_command_exits_2_while_a_node_nacks_and_3_after_a_failed_load() {
    let server = server().await;
    let mut c = server.ads("edge-1").await;
    c.subscribe(Cluster, &[]).await;
    let cds = c.recv_type(Cluster).await;
    c.ack(&cds, &[]).await;
    status_until(&server, |s| {
        state(s, "edge-1", "CDS").as_deref() == Some("SYNCED")
    })
    .await;

    let (code, out, err) = server.status_cli(&[]).await;
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("NODE") && lines[0].contains("CDS"),
        "{out}"
    );
    assert!(
        lines[1].starts_with("edge-1")
            && lines[1].contains("ADS/sotw")
            && lines[1].contains("SYNCED"),
        "{out}"
    );
    assert!(out.contains("config: generation 1"), "{out}");

    server.set_file("clusters.yaml", &eds_cluster("backend", "5s", 8080));
    let bad = c.recv_type(Cluster).await;
    c.nack(&bad, &[], &cds.version_info, "no thanks").await;
    status_until(&server, |s| s.any_nacked()).await;
    let (code, out, _) = server.status_cli(&[]).await;
    assert_eq!(code, Some(2), "NACKing: exit 2\n{out}");
    assert!(out.contains("NACKED"), "{out}");
    assert!(
        out.contains("no thanks"),
        "the proxy's error text is shown\n{out}"
    );

    let (code, out, _) = server.status_cli(&["--output", "json"]).await;
    assert_eq!(code, Some(2));
    let parsed: Status = serde_json::from_str(&out).expect("JSON");
    assert_eq!(state(&parsed, "edge-1", "CDS").as_deref(), Some("NACKED"));

    // An edit Envoy would reject (its own field rule) does not load: status exits 3, the
    // code a CI step gates on, and says why; the last good snapshot keeps serving.
    let errors = server.set_bad_file("clusters.yaml", &eds_cluster("backend", "0s", 8080));
    assert!(
        errors[0].contains("breaks Envoy's rule duration.gt"),
        "{errors:?}"
    );
    status_until(&server, |s| s.config.as_ref().is_some_and(|c| !c.ok)).await;
    let (code, out, _) = server.status_cli(&[]).await;
    assert_eq!(code, Some(3), "last load failed: exit 3\n{out}");
    assert!(
        out.contains("ClusterValidationError.ConnectTimeout: value must be greater than 0s"),
        "{out}"
    );
}

#[tokio::test]
async fn status_command_exits_1_when_the_server_cannot_be_asked() {
    let port = support::envoy::free_port();
    let (code, _, err) = blocking(move || {
        let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["status", "--admin-addr", &format!("127.0.0.1:{port}")])
            .output()
            .expect("runs");
        (
            out.status.code(),
            (),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await;
    assert_eq!(code, Some(1));
    assert!(err.contains("cannot reach the admin API"), "{err}");
}

/// `SWITCHYARD_ADMIN_ADDR` names the admin address for every command that asks a server; a
/// flag still wins, and a value that is not an address is a usage error naming it.
#[tokio::test]
async fn the_admin_address_comes_from_the_environment_when_no_flag_gives_it() {
    let server = TestServer::start(&[("c.yaml", &eds_cluster("a", "1s", 8080))]).await;
    let status = |env: String, flag: Option<String>| {
        blocking(move || {
            let mut command = Command::new(env!("CARGO_BIN_EXE_switchyard"));
            command.arg("status").env("SWITCHYARD_ADMIN_ADDR", env);
            if let Some(flag) = flag {
                command.args(["--admin-addr", &flag]);
            }
            let out = command.output().expect("runs");
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        })
    };
    let here = server.admin_addr.to_string();
    let nowhere = format!("127.0.0.1:{}", support::envoy::free_port());
    let (code, err) = status(here.clone(), None).await;
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = status(nowhere.clone(), Some(here)).await;
    assert_eq!(code, Some(0), "the flag wins: {err}");
    let (code, err) = status(nowhere.clone(), None).await;
    assert_eq!(code, Some(1));
    assert!(err.contains(&nowhere), "{err}");
    let (code, err) = status("not-an-address".into(), None).await;
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("not-an-address"), "{err}");
}

/// The value of one sample line of `/metrics` (`name{labels} value`), 0 when absent.
fn sample(metrics: &str, line_start: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn metrics_move_with_streams_responses_acks_nacks_and_loads() {
    let server = server().await;
    let cds = "type_url=\"type.googleapis.com/envoy.config.cluster.v3.Cluster\"";
    let (code, before) = server.admin_get("/metrics").await;
    assert_eq!(code, 200);
    assert!(before.ends_with("# EOF\n"), "OpenMetrics text");
    assert_eq!(
        sample(&before, "switchyard_config_loads_total{result=\"ok\"}"),
        1.0
    );
    assert_eq!(sample(&before, "switchyard_config_last_load_ok"), 1.0);
    assert_eq!(
        sample(&before, &format!("switchyard_nacks_total{{{cds}}}")),
        0.0
    );

    let mut c = server.ads("edge-1").await;
    c.subscribe(Cluster, &[]).await;
    let first = c.recv_type(Cluster).await;
    c.ack(&first, &[]).await;
    status_until(&server, |s| {
        state(s, "edge-1", "CDS").as_deref() == Some("SYNCED")
    })
    .await;
    let (_, m) = server.admin_get("/metrics").await;
    assert_eq!(
        sample(&m, "switchyard_streams{protocol=\"sotw\",stream=\"ads\"}"),
        1.0
    );
    assert_eq!(
        sample(&m, &format!("switchyard_responses_total{{{cds}}}")),
        1.0
    );
    assert_eq!(
        sample(&m, &format!("switchyard_resources_sent_total{{{cds}}}")),
        1.0
    );
    assert!(sample(&m, &format!("switchyard_bytes_sent_total{{{cds}}}")) > 0.0);
    assert_eq!(sample(&m, &format!("switchyard_acks_total{{{cds}}}")), 1.0);
    assert_eq!(sample(&m, "switchyard_ack_latency_seconds_count"), 1.0);
    assert!(
        m.contains("switchyard_snapshot_version{group=\"clusters.yaml\""),
        "{m}"
    );

    // A push records a latency sample; a NACK bumps the NACK counter for its type.
    server.set_file("clusters.yaml", &eds_cluster("backend", "5s", 8080));
    let bad = c.recv_type(Cluster).await;
    c.nack(&bad, &[], &first.version_info, "no").await;
    status_until(&server, |s| s.any_nacked()).await;
    let (_, m) = server.admin_get("/metrics").await;
    assert_eq!(sample(&m, "switchyard_push_latency_seconds_count"), 1.0);
    assert_eq!(sample(&m, &format!("switchyard_nacks_total{{{cds}}}")), 1.0);
    assert_eq!(sample(&m, "switchyard_nodes_nacking"), 1.0);
    assert_eq!(
        sample(&m, "switchyard_config_loads_total{result=\"ok\"}"),
        2.0
    );
    // The NACKed generation never converges; a fix that the node ACKs does.
    assert_eq!(sample(&m, "switchyard_convergence_seconds_count"), 0.0);
    server.set_file("clusters.yaml", &eds_cluster("backend", "3s", 8080));
    let good = c.recv_type(Cluster).await;
    c.ack(&good, &[]).await;
    status_until(&server, |s| !s.any_nacked()).await;
    let (_, m) = server.admin_get("/metrics").await;
    assert_eq!(
        sample(&m, "switchyard_convergence_seconds_count"),
        1.0,
        "{m}"
    );

    server.set_bad_file("broken.yaml", "clusters: [\n");
    let (_, m) = server.admin_get("/metrics").await;
    assert_eq!(
        sample(&m, "switchyard_config_loads_total{result=\"failed\"}"),
        1.0
    );
    assert_eq!(sample(&m, "switchyard_config_last_load_ok"), 0.0);

    drop(c);
    status_until(&server, |s| s.nodes.is_empty()).await;
    let (_, m) = server.admin_get("/metrics").await;
    assert_eq!(
        sample(&m, "switchyard_streams{protocol=\"sotw\",stream=\"ads\"}"),
        0.0
    );
}

#[tokio::test]
async fn config_dump_shows_what_a_node_gets_as_proto3_json() {
    let server = TestServer::start(&[
        ("clusters.yaml", &eds_cluster("backend", "1s", 8080)),
        (
            "edge.yaml",
            "nodes: [{ id: \"edge-*\" }]\nclusters:\n  - { name: edge-only, connect_timeout: 2s, type: STATIC, ttl: 30s }\n",
        ),
    ])
    .await;
    let (code, body) = server.admin_get("/config_dump?node=edge-1").await;
    assert_eq!(code, 200, "{body}");
    let dump: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let clusters = dump["types"]["CDS"]["resources"].as_array().expect("CDS");
    let names: Vec<&str> = clusters.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["backend", "edge-only"]);
    // Proto3 canonical JSON: lowerCamelCase, durations as strings, enums by name.
    assert_eq!(clusters[1]["resource"]["connectTimeout"], "2s");
    assert_eq!(clusters[1]["resource"]["type"], "STATIC");
    assert_eq!(clusters[1]["ttl"], "30s");
    assert_eq!(
        dump["types"]["EDS"]["resources"][0]["resource"]["clusterName"],
        "backend"
    );
    assert_eq!(dump["generation"], 1);

    // Another node group.
    let (_, body) = server.admin_get("/config_dump?node=core-1").await;
    let dump: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        dump["types"]["CDS"]["resources"].as_array().map(Vec::len),
        Some(1)
    );

    let (code, body) = server.admin_get("/config_dump").await;
    assert_eq!(code, 400);
    assert!(body.contains("?node="), "{body}");
}

/// `/config_dump` of a large snapshot builds its JSON off the runtime's threads: a
/// `/healthz` asked while it is built is answered first. The in-process server here runs on
/// the test's one-thread runtime, so JSON built inline would hold every request up.
#[tokio::test]
async fn config_dump_of_a_large_snapshot_holds_up_no_other_request() {
    let clusters: String = (0..20_000)
        .map(|i| format!("  - {{ name: c{i}, connect_timeout: 1s }}\n"))
        .collect();
    let server = TestServer::start(&[("clusters.yaml", &format!("clusters:\n{clusters}"))]).await;
    let admin = server.admin_addr;
    let dump = async move {
        let asked = tokio::time::Instant::now();
        let r = reqwest::get(format!("http://{admin}/config_dump?node=edge-1"))
            .await
            .expect("answers");
        // Answered (its headers): the JSON was built.
        let answered = tokio::time::Instant::now();
        let text = r.text().await.expect("body");
        assert!(
            answered - asked > Duration::from_millis(10),
            "built long enough to tell"
        );
        (answered, text.len())
    };
    let health = async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let r = reqwest::get(format!("http://{admin}/healthz"))
            .await
            .expect("answers");
        assert_eq!(r.status(), 200);
        tokio::time::Instant::now()
    };
    let ((dumped, bytes), healthy) = tokio::join!(dump, health);
    assert!(bytes > 1_000_000, "a large dump: {bytes} bytes");
    assert!(
        healthy < dumped,
        "/healthz waited for /config_dump's JSON ({:?} after it)",
        healthy - dumped
    );
}

#[tokio::test]
async fn csds_answers_per_node_from_acks_and_nacks() {
    use envoy_types::pb::envoy::r#type::matcher::v3::NodeMatcher;
    use envoy_types::pb::envoy::r#type::matcher::v3::{
        string_matcher::MatchPattern, StringMatcher,
    };
    use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_client::ClientStatusDiscoveryServiceClient;
    use envoy_types::pb::envoy::service::status::v3::{ClientStatusRequest, ConfigStatus};
    let server = server().await;
    let mut a = server.ads("edge-1").await;
    a.subscribe(Cluster, &[]).await;
    let r = a.recv_type(Cluster).await;
    a.ack(&r, &[]).await;
    let mut b = server.ads("edge-2").await;
    b.subscribe(Cluster, &[]).await;
    let r = b.recv_type(Cluster).await;
    b.nack(&r, &[], "", "bad cluster").await;
    status_until(&server, |s| {
        state(s, "edge-1", "CDS").as_deref() == Some("SYNCED")
            && state(s, "edge-2", "CDS").as_deref() == Some("NACKED")
    })
    .await;

    let mut client = ClientStatusDiscoveryServiceClient::new(server.channel().await);
    let all = client
        .fetch_client_status(ClientStatusRequest::default())
        .await
        .expect("CSDS answers")
        .into_inner();
    let ids: Vec<&str> = all
        .config
        .iter()
        .filter_map(|c| c.node.as_ref())
        .map(|n| n.id.as_str())
        .collect();
    assert_eq!(ids, ["edge-1", "edge-2"]);
    let edge1 = &all.config[0].generic_xds_configs;
    assert_eq!(edge1.len(), 1);
    assert_eq!(edge1[0].name, "backend");
    assert_eq!(edge1[0].type_url, Cluster.type_url());
    assert_eq!(edge1[0].config_status, ConfigStatus::Synced as i32);
    assert!(edge1[0].xds_config.is_some());
    let edge2 = &all.config[1].generic_xds_configs[0];
    assert_eq!(edge2.config_status, ConfigStatus::Error as i32);
    assert_eq!(
        edge2.error_state.as_ref().map(|e| e.details.as_str()),
        Some("bad cluster")
    );

    // A node-id matcher, contents left out.
    let one = client
        .fetch_client_status(ClientStatusRequest {
            node_matchers: vec![NodeMatcher {
                node_id: Some(StringMatcher {
                    match_pattern: Some(MatchPattern::Suffix("-2".into())),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            exclude_resource_contents: true,
            ..Default::default()
        })
        .await
        .expect("CSDS answers")
        .into_inner();
    assert_eq!(one.config.len(), 1);
    assert_eq!(
        one.config[0].node.as_ref().map(|n| n.id.as_str()),
        Some("edge-2")
    );
    assert!(one.config[0].generic_xds_configs[0].xds_config.is_none());

    // The streaming method answers each request.
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    tx.send(ClientStatusRequest::default()).await.expect("send");
    let mut answers = client
        .stream_client_status(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect("stream opens")
        .into_inner();
    let first = answers.message().await.expect("ok").expect("an answer");
    assert_eq!(first.config.len(), 2);
}

#[tokio::test]
async fn the_html_page_shows_each_node_with_its_state_and_nack_text() {
    let server = server().await;
    let mut c = server.ads("edge-<1>").await;
    c.subscribe(Cluster, &[]).await;
    let r = c.recv_type(Cluster).await;
    c.nack(&r, &[], "", "bad & broken").await;
    status_until(&server, |s| s.any_nacked()).await;
    let (code, html) = server.admin_get("/").await;
    assert_eq!(code, 200);
    assert!(html.starts_with("<!doctype html>"), "{html}");
    assert!(html.contains("<b>1</b> NACKing"), "{html}");
    assert!(
        html.contains("edge-&lt;1&gt;"),
        "node ids are escaped: {html}"
    );
    assert!(html.contains("class=\"NACKED\""), "{html}");
    assert!(
        html.contains("bad &amp; broken"),
        "the NACK text, inline: {html}"
    );
    assert!(html.contains("href=\"/status\"") && html.contains("href=\"/metrics\""));
    assert!(html.contains("/config_dump?node=edge-%3C1%3E"), "{html}");
    let (_, filtered) = server.admin_get("/?state=SYNCED").await;
    assert!(filtered.contains("0 node(s) match"), "{filtered}");
    let (code, _) = server.admin_get("/?page=abc").await;
    assert_eq!(code, 400, "a bad query is refused, not a panic");
}

/// The admin server alone, over an empty config directory (nothing loaded yet), served as
/// `transport` says until `stop` fires.
struct AdminAlone {
    addr: std::net::SocketAddr,
    reloader: std::sync::Arc<switchyard::publish::Reloader>,
    stop: switchyard::shutdown::Trigger,
    task: tokio::task::JoinHandle<Result<(), String>>,
    _dir: tempfile::TempDir,
}

async fn admin_alone(transport: switchyard::admin::Transport) -> AdminAlone {
    use std::sync::Arc;
    let cache = Arc::new(switchyard::cache::Cache::new());
    let dir = tempfile::tempdir().expect("tmp");
    let telemetry = switchyard::telemetry::Telemetry::default();
    let reloader = Arc::new(switchyard::publish::Reloader::new(
        vec![dir.path().to_path_buf()],
        switchyard::config::LoadOptions::default(),
        Arc::clone(&cache),
        telemetry.clone(),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let admin = switchyard::admin::Admin {
        fleet: Arc::new(switchyard::fleet::Fleet::default()),
        cache,
        publisher: Arc::clone(reloader.publisher().expect("publishes itself")),
        reloader: Arc::clone(&reloader),
        telemetry,
        show_secrets: Default::default(),
        token: None,
        new_streams: None,
        fleet_rollout: None,
        barrier: None,
        replicas: None,
        supervisor: Default::default(),
        source: Default::default(),
    };
    let (stop, shutdown) = switchyard::shutdown::channel();
    let task = tokio::spawn(switchyard::admin::serve(
        listener, admin, transport, shutdown,
    ));
    AdminAlone {
        addr,
        reloader,
        stop,
        task,
        _dir: dir,
    }
}

#[tokio::test]
async fn readyz_is_503_until_a_config_is_loaded() {
    let alone = admin_alone(Default::default()).await;
    let addr = alone.addr;
    let get = |path: &'static str| async move {
        let r = reqwest::get(format!("http://{addr}{path}"))
            .await
            .expect("answers");
        (r.status().as_u16(), r.text().await.expect("body"))
    };
    let (code, body) = get("/readyz").await;
    assert_eq!(code, 503);
    assert!(body.contains("no configuration loaded"), "{body}");
    assert_eq!(get("/healthz").await.0, 200, "alive all the same");
    alone.reloader.reload().expect("an empty directory loads");
    assert_eq!(get("/readyz").await, (200, "ready\n".to_string()));
    alone.task.abort();
}

/// An HTTPS client trusting only `ca`, reaching `localhost` at `addr`.
fn https_client(ca: &support::certs::Ca, addr: std::net::SocketAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem.as_bytes()).expect("CA"))
        .resolve("localhost", addr)
        .timeout(WAIT)
        .build()
        .expect("client")
}

/// `--admin-tls-cert`: the admin API over HTTPS only, its certificate reloaded from the
/// files when they change, without a restart.
#[tokio::test]
async fn the_admin_api_over_https_with_a_reloaded_certificate() {
    use support::certs::Ca;
    let dir = tempfile::tempdir().expect("tmp");
    let (old, new) = (Ca::new("old"), Ca::new("new"));
    old.leaf(&["localhost"], &[]).write(dir.path(), "admin");
    let tls = switchyard::server::tls::Tls::admin(
        &dir.path().join("admin.pem"),
        &dir.path().join("admin.key"),
    )
    .expect("TLS sets up");
    let alone = admin_alone(switchyard::admin::Transport {
        tls: Some(tls),
        ..Default::default()
    })
    .await;
    let url = format!("https://localhost:{}/healthz", alone.addr.port());
    let answer = https_client(&old, alone.addr)
        .get(&url)
        .send()
        .await
        .expect("HTTPS answers");
    assert_eq!(answer.status(), 200);
    assert!(
        reqwest::get(format!("http://{}/healthz", alone.addr))
            .await
            .is_err(),
        "plain HTTP is answered on an HTTPS port"
    );

    new.leaf(&["localhost"], &[]).write(dir.path(), "admin");
    let answer = https_client(&new, alone.addr)
        .get(&url)
        .send()
        .await
        .expect("the new certificate is served");
    assert_eq!(answer.status(), 200);
    assert!(
        https_client(&old, alone.addr)
            .get(&url)
            .send()
            .await
            .is_err(),
        "the old certificate is still served"
    );
    alone.task.abort();
}

/// Read from `conn` until the server closes it; what it sent.
async fn read_to_close(conn: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    tokio::time::timeout(WAIT, conn.read_to_end(&mut got))
        .await
        .expect("the server closes the connection")
        .expect("read");
    String::from_utf8_lossy(&got).into_owned()
}

/// `--admin-header-timeout`: a client that opens a connection and sends nothing, or sends
/// its headers too slowly, is disconnected; others are answered meanwhile.
#[tokio::test]
async fn a_slow_admin_client_is_disconnected_and_others_are_served() {
    use tokio::io::AsyncWriteExt;
    let alone = admin_alone(switchyard::admin::Transport {
        header_timeout: Duration::from_millis(300),
        ..Default::default()
    })
    .await;
    let mut silent = tokio::net::TcpStream::connect(alone.addr)
        .await
        .expect("connect");
    let mut slow = tokio::net::TcpStream::connect(alone.addr)
        .await
        .expect("connect");
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("write");
    let answer = reqwest::get(format!("http://{}/healthz", alone.addr))
        .await
        .expect("another client is answered");
    assert_eq!(answer.status(), 200);
    let slow_got = read_to_close(&mut slow).await;
    assert!(
        !slow_got.contains("200 OK"),
        "the unfinished request was answered: {slow_got}"
    );
    read_to_close(&mut silent).await;
    let metrics = reqwest::get(format!("http://{}/metrics", alone.addr))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("body");
    let count = |limit: &str| {
        sample(
            &metrics,
            &format!("switchyard_limit_rejections_total{{limit=\"{limit}\"}}"),
        )
    };
    assert_eq!(
        count("admin_header_timeout"),
        1.0,
        "the slow one: {metrics}"
    );
    assert_eq!(count("handshake_timeout"), 1.0, "the silent one: {metrics}");
    alone.task.abort();
}

/// Stopping the admin server ends it even with a client holding an idle keep-alive
/// connection, and after answering a request in progress.
#[tokio::test]
async fn the_admin_server_stops_with_idle_connections_open() {
    use tokio::io::AsyncWriteExt;
    let alone = admin_alone(Default::default()).await;
    let mut idle = tokio::net::TcpStream::connect(alone.addr)
        .await
        .expect("connect");
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    // Its answer comes, and the connection stays open (keep-alive).
    let mut first = [0u8; 12];
    tokio::time::timeout(
        WAIT,
        tokio::io::AsyncReadExt::read_exact(&mut idle, &mut first),
    )
    .await
    .expect("answered")
    .expect("read");
    assert_eq!(&first, b"HTTP/1.1 200");
    alone.stop.fire();
    tokio::time::timeout(WAIT, alone.task)
        .await
        .expect("the admin server ends")
        .expect("task")
        .expect("ended at shutdown, not on its own");
    let rest = read_to_close(&mut idle).await;
    assert!(rest.ends_with("ok\n"), "{rest}");
}

/// A TLS secret, its chain marked `CHAIN-PEM` and its key `KEY-PEM`.
fn tls_secret() -> String {
    format!("secrets:\n{}", support::certs::marked_tls_secret("cert"))
}

/// What each door gives of a TLS secret: (SDS over ADS, REST poll, CSDS, /config_dump,
/// FetchSecrets).
async fn secret_everywhere(server: &TestServer) -> [String; 5] {
    use envoy_types::pb::envoy::service::secret::v3::secret_discovery_service_client::SecretDiscoveryServiceClient;
    use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_client::ClientStatusDiscoveryServiceClient;
    use envoy_types::pb::envoy::service::status::v3::ClientStatusRequest;
    use switchyard::resource::ResourceType::Secret;
    let mut c = server.ads("n1").await;
    c.subscribe(Secret, &["cert"]).await;
    let sds = c.recv_type(Secret).await;
    c.ack(&sds, &["cert"]).await;
    let sds = String::from_utf8_lossy(&sds.resources[0].value).into_owned();
    let rest = reqwest::Client::new()
        .post(format!("http://{}/v3/discovery:secrets", server.addr))
        .body(serde_json::json!({"node": {"id": "anyone"}, "resource_names": ["cert"]}).to_string())
        .send()
        .await
        .expect("REST answers")
        .text()
        .await
        .expect("body");
    status_until(server, |s| {
        state(s, "n1", "SDS").as_deref() == Some("SYNCED")
    })
    .await;
    let csds = ClientStatusDiscoveryServiceClient::new(server.channel().await)
        .fetch_client_status(ClientStatusRequest::default())
        .await
        .expect("CSDS answers")
        .into_inner();
    let csds: Vec<u8> = csds.config[0].generic_xds_configs[0]
        .xds_config
        .as_ref()
        .expect("contents")
        .value
        .clone();
    let (_, dump) = server.admin_get("/config_dump?node=n1").await;
    // P36: a fetch proves no more than a REST poll.
    let fetched = SecretDiscoveryServiceClient::new(server.channel().await)
        .fetch_secrets(
            envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest {
                node: Some(support::node("anyone", "test")),
                resource_names: vec!["cert".into()],
                ..Default::default()
            },
        )
        .await
        .expect("FetchSecrets answers")
        .into_inner();
    let fetched = String::from_utf8_lossy(&fetched.resources[0].value).into_owned();
    [
        sds,
        rest,
        String::from_utf8_lossy(&csds).into_owned(),
        dump,
        fetched,
    ]
}

#[tokio::test]
async fn private_keys_go_nowhere_by_default_but_certificate_chains_do() {
    let server = TestServer::start(&[("secrets.yaml", &tls_secret())]).await;
    let doors = secret_everywhere(&server).await;
    for (door, text) in ["SDS", "REST", "CSDS", "/config_dump", "Fetch"]
        .iter()
        .zip(&doors)
    {
        assert!(
            !text.contains("KEY-PEM"),
            "{door} leaked the private key: {text}"
        );
        assert!(
            text.contains("CHAIN-PEM"),
            "{door} lost the certificate chain: {text}"
        );
    }
    server.shutdown().await;
}

/// A key named by a path (and a password by an environment variable) on the
/// proxy's host is not key material: every door gives it as written, to any node, with no
/// flag.
#[tokio::test]
async fn keys_named_by_a_path_on_the_proxy_s_host_go_through_every_door() {
    const FILE_SECRET: &str = r#"
secrets:
  - name: cert
    tls_certificate:
      certificate_chain: { filename: /etc/envoy/tls.crt }
      private_key: { filename: /etc/envoy/tls.key }
      password: { environment_variable: TLS_KEY_PASSWORD }
"#;
    let server = TestServer::start(&[("secrets.yaml", FILE_SECRET)]).await;
    let doors = secret_everywhere(&server).await;
    for (door, text) in ["SDS", "REST", "CSDS", "/config_dump", "Fetch"]
        .iter()
        .zip(&doors)
    {
        for written in [
            "/etc/envoy/tls.key",
            "TLS_KEY_PASSWORD",
            "/etc/envoy/tls.crt",
        ] {
            assert!(text.contains(written), "{door} lost {written}: {text}");
        }
    }
    server.shutdown().await;
}

#[tokio::test]
async fn the_flags_serve_and_show_private_keys() {
    let server = TestServer::start_with(
        &[("secrets.yaml", &tls_secret())],
        switchyard::server::ServeOptions {
            secrets: switchyard::resource::Secrets::Serve,
            show_secrets: switchyard::resource::Secrets::Serve,
            ..Default::default()
        },
    )
    .await;
    let doors = secret_everywhere(&server).await;
    for (door, text) in ["SDS", "REST", "CSDS", "/config_dump", "Fetch"]
        .iter()
        .zip(&doors)
    {
        assert!(text.contains("KEY-PEM"), "{door}: {text}");
    }
    server.shutdown().await;
}

/// `switchyard config-dump NODE`: per type, the version the node ACKed and the resources
/// it holds (as the server serves them to it), a newer version sent and not yet ACKed shown
/// as in flight; on a synced node every type's held version is the served one, EDS by name
/// too (P9: its version is that of the names it asked for); for a NACKed type (P5), what
/// the node still runs, and apart, the rejected candidate with the proxy's words; a node
/// that is not connected is an error that says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_dump_shows_what_one_node_holds_and_what_is_in_flight() {
    let server = TestServer::start(&[("c.yaml", &eds_cluster("a", "1s", 8080))]).await;
    let mut edge = server.ads("edge-1").await;
    edge.subscribe(Cluster, &[]).await;
    let first = edge.recv_type(Cluster).await;
    edge.ack(&first, &[]).await;
    edge.subscribe(switchyard::resource::ResourceType::Endpoint, &["a"])
        .await;
    let endpoints = edge
        .recv_type(switchyard::resource::ResourceType::Endpoint)
        .await;
    edge.ack(&endpoints, &["a"]).await;
    status_until(&server, |s| {
        state(s, "edge-1", "CDS").as_deref() == Some("SYNCED")
            && state(s, "edge-1", "EDS").as_deref() == Some("SYNCED")
    })
    .await;
    let dump = |args: &'static [&'static str]| {
        let mut all = vec!["config-dump".to_string()];
        all.extend(args.iter().map(|a| a.to_string()));
        all.extend(["--admin-addr".to_string(), server.admin_addr.to_string()]);
        async move {
            let out = support::cli(all).await;
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
    };
    let (code, out, err) = dump(&["edge-1", "--output", "json"]).await;
    assert_eq!(code, Some(0), "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(json["schema"], "switchyard.config_dump/v1");
    let cds = &json["types"]["CDS"];
    assert_eq!(cds["acked"], first.version_info.as_str(), "{json}");
    assert_eq!(cds["served"], first.version_info.as_str(), "{json}");
    assert!(cds.get("in_flight").is_none(), "{json}");
    assert_eq!(cds["resources"][0]["name"], "a", "{json}");
    assert_eq!(
        cds["resources"][0]["resource"]["connectTimeout"], "1s",
        "{json}"
    );
    let eds = &json["types"]["EDS"];
    assert_eq!(eds["acked"], endpoints.version_info.as_str(), "{json}");
    assert_eq!(
        eds["served"], eds["acked"],
        "a synced node holds what it is served: {json}"
    );
    assert_eq!(eds["held_known"], true, "{json}");
    let (_, text, _) = dump(&["edge-1"]).await;
    assert!(
        text.contains(&format!(
            "EDS SYNCED: holds version {}, what it is served",
            endpoints.version_info
        )) && !text.contains("not held"),
        "{text}"
    );

    // A change sent and not ACKed: in flight, and what it holds is still the first.
    server.set_file("c.yaml", &eds_cluster("a", "2s", 8080));
    let change = edge.recv_type(Cluster).await;
    status_until(&server, |s| {
        state(s, "edge-1", "CDS").as_deref() == Some("STALE")
    })
    .await;
    let (code, out, err) = dump(&["edge-1", "--output", "json"]).await;
    assert_eq!(code, Some(0), "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let cds = &json["types"]["CDS"];
    assert_eq!(cds["acked"], first.version_info.as_str(), "{json}");
    assert_eq!(cds["in_flight"], change.version_info.as_str(), "{json}");
    assert_eq!(
        cds["resources"][0]["resource"]["connectTimeout"], "1s",
        "what it holds is still the first: {json}"
    );
    let (code, text, _) = dump(&["edge-1"]).await;
    assert_eq!(code, Some(0));
    assert!(
        text.contains(&format!(
            "CDS STALE: holds version {}; in flight: {}",
            first.version_info, change.version_info
        )) && text.contains("1 resource(s) it holds:"),
        "{text}"
    );

    // The change NACKed: the node still runs the first, and the rejected one is apart.
    edge.nack(&change, &[], &first.version_info, "a: refused by the test")
        .await;
    status_until(&server, |s| {
        state(s, "edge-1", "CDS").as_deref() == Some("NACKED")
    })
    .await;
    let (code, out, err) = dump(&["edge-1", "--output", "json"]).await;
    assert_eq!(code, Some(0), "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let cds = &json["types"]["CDS"];
    assert_eq!(cds["acked"], first.version_info.as_str(), "{json}");
    assert_eq!(
        cds["resources"][0]["resource"]["connectTimeout"], "1s",
        "what it still runs: {json}"
    );
    assert_eq!(
        cds["rejected"]["version"],
        change.version_info.as_str(),
        "{json}"
    );
    assert_eq!(cds["rejected"]["error"], "a: refused by the test", "{json}");
    assert_eq!(
        cds["rejected"]["resources"][0]["resource"]["connectTimeout"], "2s",
        "{json}"
    );
    let (_, text, _) = dump(&["edge-1"]).await;
    assert!(
        text.contains(&format!(
            "CDS NACKED: still runs version {} (its last ACK)",
            first.version_info
        )) && text.contains(&format!(
            "REJECTED version {}: a: refused by the test",
            change.version_info
        )),
        "{text}"
    );

    let (code, _, err) = dump(&["edge-9"]).await;
    assert_eq!(code, Some(1));
    assert!(err.contains("\"edge-9\" is not connected"), "{err}");
}

/// What a person on call sees, in a real browser (Debian's headless Chromium over
/// WebDriver), after real changes: a green headline while every node runs the newest
/// generation; after a change the canary NACKs, a red headline naming the halted rollout
/// with the next step's command, the rollout's banner with the canary's words, and the
/// node's NACK in the table; the page says what it is as of.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_a_person_where_the_fleet_stands_in_a_real_browser() {
    use support::browser::Browser;
    let policy =
        switchyard::rollout::Policy::new(Some("canary-*".into()), None, Duration::from_secs(3600))
            .expect("policy");
    let server = TestServer::start_daemon(
        &[("clusters.yaml", &eds_cluster("backend", "1s", 8080))],
        switchyard::daemon::Options {
            rollout: Some(policy),
            ..Default::default()
        },
    )
    .await;
    let mut canary = server.ads("canary-1").await;
    canary.subscribe(Cluster, &[]).await;
    let first = canary.recv_type(Cluster).await;
    canary.ack(&first, &[]).await;
    status_until(&server, |s| {
        state(s, "canary-1", "CDS").as_deref() == Some("SYNCED")
    })
    .await;

    let dir = tempfile::tempdir().expect("tmp");
    let browser = Browser::start(dir.path()).await;
    let page = format!("http://{}/", server.admin_addr);
    // The headline's words (their start, and a command in them) and its colour, as the
    // page shows them after loading it again.
    let headline = |starts: &'static str, command: &'static str, colour: &'static str| {
        let (browser, page) = (&browser, &page);
        async move {
            browser.open(page).await;
            let text = browser.text("#headline").await.unwrap_or_default();
            assert!(text.starts_with(starts) && text.contains(command), "{text}");
            assert_eq!(
                browser
                    .css("#headline", "background-color")
                    .await
                    .as_deref(),
                Some(colour),
                "{text}"
            );
        }
    };
    headline(
        "Every connected node runs the newest generation.",
        "",
        "rgba(212, 244, 212, 1)",
    )
    .await;
    let as_of = browser.text(".asof").await.unwrap_or_default();
    assert!(
        as_of.starts_with("As of 20") && as_of.contains("source at read"),
        "{as_of}"
    );

    // A change the canary rejects: the rollout halts.
    server.set_file("clusters.yaml", &envoy_rejected_cluster("backend", 8080));
    let bad = canary.recv_type(Cluster).await;
    canary
        .nack(&bad, &[], &first.version_info, "no thanks: bad backend")
        .await;
    status_until(&server, |s| {
        s.rollout
            .as_ref()
            .is_some_and(|r| r.state == switchyard::admin::RolloutState::Halted)
    })
    .await;
    headline(
        "The rollout halted",
        "switchyard rollout abort",
        "rgba(248, 198, 198, 1)",
    )
    .await;
    let banner = browser.text("#rollout").await.unwrap_or_default();
    assert!(
        banner.starts_with("Rollout HALTED") && banner.contains("no thanks: bad backend"),
        "{banner}"
    );
    let table = browser.text("table").await.unwrap_or_default();
    assert!(
        table.contains("canary-1") && table.contains("no thanks: bad backend"),
        "{table}"
    );
    browser.close().await;
}

/// `/status` is one consistent read: a load's report and what serves are read as one, so a
/// fix right after a failed load never shows the fix's generation serving beside the failed
/// load's report, nor a proxy on a generation the report does not know. Failed loads and
/// fixes alternate (with `--state-dir`, whose copy lengthens each publication) while
/// `/status` is read as fast as it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_never_reads_a_new_generation_beside_the_report_before_it() {
    let state = tempfile::tempdir().expect("tmp");
    let server = TestServer::start_daemon(
        &[("clusters.yaml", &eds_cluster("backend", "1s", 8080))],
        switchyard::daemon::Options {
            state_dir: Some(state.path().to_path_buf()),
            ..Default::default()
        },
    )
    .await;
    let mut client = server.ads("edge-1").await;
    client.subscribe(Cluster, &[]).await;
    let acking = client.ack_everything();
    let admin = server.admin_addr;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let done = std::sync::Arc::clone(&done);
        tokio::spawn(async move {
            let mut read = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let text = reqwest::get(format!("http://{admin}/status"))
                    .await
                    .expect("answers")
                    .text()
                    .await
                    .expect("a body");
                let status: Status = serde_json::from_str(&text).expect("a status");
                read += 1;
                let config = status.config.as_ref().expect("a load");
                assert_eq!(
                    config.generation, status.generation,
                    "the report's generation is what serves: {config:?}"
                );
                for n in &status.nodes {
                    assert!(n.generation <= status.generation, "{n:?}");
                }
            }
            read
        })
    };
    for i in 0..40 {
        server.set_bad_file(
            "clusters.yaml",
            "clusters: [{ name: backend, conect_timeout: 1s }]\n",
        );
        server.set_file(
            "clusters.yaml",
            &eds_cluster("backend", &format!("{}s", i + 2), 8080),
        );
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let read = reader.await.expect("every status read was consistent");
    assert!(read > 10, "read {read} times");
    acking.abort();
}

/// `GET path` on the admin server: status code, `x-switchyard-status` token, body.
async fn get_with_token(admin: std::net::SocketAddr, path: String) -> (u16, String, String) {
    let r = reqwest::get(format!("http://{admin}{path}"))
        .await
        .expect("admin answers");
    let code = r.status().as_u16();
    let token = r
        .headers()
        .get("x-switchyard-status")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (code, token, r.text().await.expect("body"))
}

/// The long poll of `/status` (`?after=TOKEN&wait=DURATION`, what `status --wait` follows
/// the fleet with): held for its wait while nothing changes; answered as soon as a proxy's
/// report changes (it connects, it ACKs) or a load publishes, with another token, well
/// before a wait of 10 s.
#[tokio::test]
async fn a_long_poll_of_status_answers_at_the_next_change() {
    let server = server().await;
    let admin = server.admin_addr;
    let (code, token, _) = get_with_token(admin, "/status".into()).await;
    assert_eq!(code, 200);
    assert!(!token.is_empty(), "/status names what it was made of");

    // Nothing changes: held for the wait, and the same token.
    let started = std::time::Instant::now();
    let (code, same, _) = get_with_token(admin, format!("/status?after={token}&wait=300ms")).await;
    assert_eq!((code, &same), (200, &token));
    assert!(started.elapsed() >= Duration::from_millis(300));

    // A proxy connects and ACKs: the poll held meanwhile answers then.
    let poll = tokio::spawn(get_with_token(
        admin,
        format!("/status?after={token}&wait=10s"),
    ));
    let mut c = server.ads("edge-1").await;
    c.subscribe(Cluster, &[]).await;
    let first = c.recv_type(Cluster).await;
    c.ack(&first, &[]).await;
    let (code, changed, body) = tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .expect("answered at the change, not after its 10 s wait")
        .expect("joins");
    assert_eq!(code, 200);
    assert_ne!(changed, token);
    assert!(body.contains("edge-1"), "{body}");

    // Until the ACK is in the status, each poll answers at the next change; then a load
    // that publishes answers one.
    let mut token = changed;
    loop {
        let status: Status =
            serde_json::from_str(&get_with_token(admin, "/status".into()).await.2).expect("json");
        if state(&status, "edge-1", "CDS").as_deref() == Some("SYNCED") {
            token = get_with_token(admin, "/status".into()).await.1;
            break;
        }
        let (_, next, _) = get_with_token(admin, format!("/status?after={token}&wait=10s")).await;
        token = next;
    }
    let poll = tokio::spawn(get_with_token(
        admin,
        format!("/status?after={token}&wait=10s"),
    ));
    server.set_file("clusters.yaml", &eds_cluster("backend", "2s", 8080));
    let (_, published, _) = tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .expect("answered at the publication, not after its 10 s wait")
        .expect("joins");
    assert_ne!(published, token);

    // A wait that is not a duration is refused, saying so.
    let (code, _, body) = get_with_token(admin, format!("/status?after={token}&wait=soon")).await;
    assert_eq!(code, 400);
    assert!(body.contains("wait: expected a duration"), "{body}");
}
