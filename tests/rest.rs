//! Integration tests of REST-JSON polling (`POST /v3/discovery:<type>`) on the xDS port,
//! over HTTP/1.1, beside gRPC.

use switchyard_testkit as support;

use std::time::Duration;

use tokio::time::Instant;

use support::*;
use switchyard::resource::ResourceType::Cluster;
use switchyard::server::rest::REST_HOLD;

async fn poll(server: &TestServer, path: &str, body: &str) -> (u16, String) {
    let r = reqwest::Client::new()
        .post(format!("http://{}{path}", server.addr))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("answers");
    let code = r.status().as_u16();
    (code, r.text().await.expect("body"))
}

fn request(version: &str, names: &[&str]) -> String {
    serde_json::json!({
        "version_info": version,
        "node": { "id": "rest-1", "cluster": "test" },
        "resource_names": names,
        "type_url": Cluster.type_url(),
    })
    .to_string()
}

/// On tokio's paused clock: the hold's length is exact, and nothing waits in real time.
#[tokio::test(start_paused = true)]
async fn rest_answers_json_then_holds_an_unchanged_version_and_answers_304() {
    let server = TestServer::start(&[("c.yaml", &eds_cluster("backend", "1s", 8080))]).await;
    let (code, body) = poll(&server, "/v3/discovery:clusters", &request("", &[])).await;
    assert_eq!(code, 200, "{body}");
    let r: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(r["type_url"], Cluster.type_url());
    assert_eq!(r["resources"][0]["@type"], Cluster.type_url());
    assert_eq!(r["resources"][0]["name"], "backend");
    assert_eq!(r["resources"][0]["connectTimeout"], "1s");
    let version = r["version_info"].as_str().expect("version").to_string();

    // The same version: held, then 304 (never an unchanged answer).
    let started = Instant::now();
    let (code, body) = poll(&server, "/v3/discovery:clusters", &request(&version, &[])).await;
    assert_eq!(code, 304, "{body}");
    // Held for REST_HOLD (tokio's timers fire on the millisecond after the deadline).
    let held = started.elapsed();
    assert!(
        held >= REST_HOLD && held <= REST_HOLD + Duration::from_millis(1),
        "held {held:?}, not {REST_HOLD:?}"
    );

    // A change while held is answered at once with the new version.
    let poller = {
        let addr = server.addr;
        let body = request(&version, &[]);
        tokio::spawn(async move {
            let r = reqwest::Client::new()
                .post(format!("http://{addr}/v3/discovery:clusters"))
                .body(body)
                .send()
                .await
                .expect("answers");
            (r.status().as_u16(), r.text().await.expect("body"))
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let changed = Instant::now();
    server.set_file("c.yaml", &eds_cluster("backend", "3s", 8080));
    let (code, body) = poller.await.expect("joins");
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        changed.elapsed(),
        Duration::ZERO,
        "answered at once, not held"
    );
    let r: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_ne!(r["version_info"], version);
    assert_eq!(r["resources"][0]["connectTimeout"], "3s");
}

#[tokio::test]
async fn rest_serves_named_resources_and_every_documented_path() {
    let server = TestServer::start(&[("c.yaml", &eds_cluster("backend", "1s", 8080))]).await;
    let body = serde_json::json!({
        "node": { "id": "rest-1" },
        "resource_names": ["backend", "missing"],
    })
    .to_string();
    let (code, text) = poll(&server, "/v3/discovery:endpoints", &body).await;
    assert_eq!(code, 200, "{text}");
    let r: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(r["resources"].as_array().map(Vec::len), Some(1));
    assert_eq!(r["resources"][0]["clusterName"], "backend");
    // P32: the name that does not exist, NOT_FOUND.
    assert_eq!(r["resource_errors"][0]["resource_name"]["name"], "missing");
    assert_eq!(r["resource_errors"][0]["error_detail"]["code"], 5);
    for path in [
        "listeners",
        "routes",
        "scoped-routes",
        "secrets",
        "runtime",
        "extension_configs",
    ] {
        let (code, text) = poll(
            &server,
            &format!("/v3/discovery:{path}"),
            "{\"node\":{\"id\":\"n\"}}",
        )
        .await;
        assert_eq!(code, 200, "{path}: {text}");
    }
}

/// A poll by name gets the version of what its names select (P13), as a SotW stream does:
/// a change to another resource of the type leaves it unchanged (held, then 304), and a
/// change to one of its names answers it.
#[tokio::test]
async fn rest_named_polls_are_versioned_by_what_they_select() {
    let server = TestServer::start(&[
        ("a.yaml", &eds_cluster("a", "1s", 8080)),
        ("b.yaml", &eds_cluster("b", "1s", 8081)),
    ])
    .await;
    let body = |version: &str| {
        serde_json::json!({
            "version_info": version,
            "node": { "id": "rest-1", "cluster": "test" },
            "resource_names": ["a"],
        })
        .to_string()
    };
    let (code, text) = poll(&server, "/v3/discovery:endpoints", &body("")).await;
    assert_eq!(code, 200, "{text}");
    let r: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let version = r["version_info"].as_str().expect("version").to_string();
    assert!(version.starts_with("n-"), "{version}");

    server.set_file("b.yaml", &eds_cluster("b", "1s", 9999));
    let (code, text) = poll(&server, "/v3/discovery:endpoints", &body(&version)).await;
    assert_eq!(code, 304, "another name changed: {text}");
    server.set_file("a.yaml", &eds_cluster("a", "1s", 9998));
    let (code, text) = poll(&server, "/v3/discovery:endpoints", &body(&version)).await;
    assert_eq!(code, 200, "{text}");
    assert!(text.contains("9998"), "{text}");
}

#[tokio::test]
async fn rest_rejects_bad_requests_clearly() {
    let server = TestServer::start(&[("c.yaml", &eds_cluster("backend", "1s", 8080))]).await;
    let (code, text) = poll(&server, "/v3/discovery:clusters", "{not json").await;
    assert_eq!(code, 400);
    assert!(text.contains("invalid DiscoveryRequest JSON"), "{text}");
    let (code, text) = poll(&server, "/v3/discovery:clusters", "{\"bogus\": 1}").await;
    assert_eq!(code, 400, "{text}");
    let (code, text) = poll(&server, "/v3/discovery:clusters", "{}").await;
    assert_eq!(code, 400);
    assert!(text.contains("node"), "{text}");
    let (code, text) = poll(&server, "/v3/discovery:nope", "{}").await;
    assert_eq!(code, 404);
    assert!(text.contains("discovery:clusters"), "{text}");
    let wrong = serde_json::json!({"node": {"id": "n"}, "type_url": "type.googleapis.com/envoy.config.listener.v3.Listener"});
    let (code, text) = poll(&server, "/v3/discovery:clusters", &wrong.to_string()).await;
    assert_eq!(code, 400, "{text}");
    // gRPC on the same port is unaffected.
    let mut c = server.ads("n1").await;
    c.subscribe(Cluster, &[]).await;
    assert_eq!(names(&c.recv_type(Cluster).await), ["backend"]);
}

/// REST bodies are capped (2 MiB, the HTTP router's default): a larger one is refused with
/// 413 before it is read whole.
#[tokio::test]
async fn a_rest_body_past_the_limit_gets_413() {
    let server = TestServer::start(&[("c.yaml", &eds_cluster("backend", "1s", 8080))]).await;
    let names: Vec<String> = (0..120_000).map(|i| format!("cluster-{i:08}")).collect();
    let body = serde_json::json!({
        "node": { "id": "rest-1" },
        "resource_names": names,
    })
    .to_string();
    assert!(body.len() > 2 << 20);
    let (code, _) = poll(&server, "/v3/discovery:clusters", &body).await;
    assert_eq!(code, 413);
}

// === P36: the unary Fetch* methods, answered as a REST poll is ===

fn fetch_request(
    version: &str,
    names: &[&str],
) -> envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest {
    envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest {
        version_info: version.into(),
        node: Some(node("fetch-1", "test")),
        resource_names: names.iter().map(|n| n.to_string()).collect(),
        ..Default::default()
    }
}

#[tokio::test]
async fn p36_fetch_is_answered_from_the_snapshot_like_a_rest_poll() {
    use envoy_types::pb::envoy::service::cluster::v3::cluster_discovery_service_client::ClusterDiscoveryServiceClient;
    use envoy_types::pb::envoy::service::endpoint::v3::endpoint_discovery_service_client::EndpointDiscoveryServiceClient;
    let server = TestServer::start(&[("c.yaml", &eds_cluster("backend", "1s", 8080))]).await;
    let mut cds = ClusterDiscoveryServiceClient::new(server.channel().await);
    let r = cds
        .fetch_clusters(fetch_request("", &[]))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(r.type_url, Cluster.type_url());
    assert_eq!(names(&r), ["backend"]);
    // The same version as a REST poll of the same names gets.
    let (_, body) = poll(&server, "/v3/discovery:clusters", &request("", &[])).await;
    let rest: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(rest["version_info"], r.version_info.as_str());
    // Named, with a name that does not exist: NOT_FOUND for it (P32).
    let mut eds = EndpointDiscoveryServiceClient::new(server.channel().await);
    let e = eds
        .fetch_endpoints(fetch_request("", &["backend", "missing"]))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(names(&e), ["backend"]);
    assert_eq!(not_found(&e.resource_errors), ["missing"]);
    // The version it has: held, then answered with that same version (no 304 in gRPC).
    let started = std::time::Instant::now();
    let again = cds
        .fetch_clusters(fetch_request(&r.version_info, &[]))
        .await
        .expect("answered")
        .into_inner();
    assert!(
        started.elapsed() >= REST_HOLD,
        "held {:?}",
        started.elapsed()
    );
    assert_eq!(again.version_info, r.version_info);
    // Counted with the REST polls.
    let (_, metrics) = server.admin_get("/metrics").await;
    let fetch = r#"switchyard_rest_polls_total{api="fetch",type_url="type.googleapis.com/envoy.config.cluster.v3.Cluster""#;
    assert!(
        metrics.contains(&format!("{fetch},result=\"changed\"}} 1")),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!("{fetch},result=\"not_modified\"}} 1")),
        "{metrics}"
    );
    // Bad requests: no node, another type.
    let missing_node = cds
        .fetch_clusters(envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest::default())
        .await
        .expect_err("no node");
    assert_eq!(missing_node.code(), tonic::Code::InvalidArgument);
    let mut wrong = fetch_request("", &[]);
    wrong.type_url = switchyard::resource::ResourceType::Listener
        .type_url()
        .into();
    let wrong = cds.fetch_clusters(wrong).await.expect_err("another type");
    assert_eq!(wrong.code(), tonic::Code::InvalidArgument);
    assert!(wrong.message().contains("Listener"), "{}", wrong.message());
    server.shutdown().await;
}

/// A node that polls shows in `/status` as a node with a stream does (stream `REST`,
/// protocol `rest`), its types following its polls: the version it has, a NACK it sends
/// (P5), the names it asks for that do not exist (P32); and in the metrics
/// (`switchyard_pollers`, `switchyard_nodes_nacking`).
#[tokio::test]
async fn p4_p5_a_rest_poller_is_listed_in_status_and_the_metrics() {
    let server = TestServer::start(&[("c.yaml", &eds_cluster("backend", "1s", 8080))]).await;
    let (code, body) = poll(&server, "/v3/discovery:clusters", &request("", &[])).await;
    assert_eq!(code, 200, "{body}");
    let r: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let version = r["version_info"].as_str().expect("version").to_string();
    let node = |status: &switchyard::admin::Status| {
        status
            .nodes
            .iter()
            .find(|n| n.node_id == "rest-1")
            .cloned()
            .expect("the poller is listed")
    };
    let listed = node(&server.status().await);
    assert_eq!(
        (
            listed.streams[0].stream.as_str(),
            listed.streams[0].protocol.as_str()
        ),
        ("REST", "rest")
    );
    let cds = &listed.types["CDS"];
    assert_eq!(
        cds.state,
        switchyard::fleet::SyncStatus::Stale,
        "answered, not yet taken"
    );
    assert_eq!(cds.version_sent, version);
    // It polls again at that version: it has it.
    let (code, _) = poll(&server, "/v3/discovery:clusters", &request(&version, &[])).await;
    assert_eq!(code, 304);
    let cds = node(&server.status().await).types["CDS"].clone();
    assert_eq!(
        (cds.state, cds.version_acked.as_str()),
        (switchyard::fleet::SyncStatus::Synced, version.as_str())
    );
    // A poll that says what it rejected (error_detail) is a NACK, with its words.
    let mut nack: serde_json::Value =
        serde_json::from_str(&request("v0", &["backend", "gone"])).expect("json");
    nack["error_detail"] = serde_json::json!({"code": 3, "message": "backend is broken"});
    let (code, _) = poll(&server, "/v3/discovery:clusters", &nack.to_string()).await;
    assert_eq!(code, 200);
    let status = server.status().await;
    let cds = node(&status).types["CDS"].clone();
    assert_eq!(cds.state, switchyard::fleet::SyncStatus::Nacked);
    assert_eq!(cds.error.as_deref(), Some("backend is broken"));
    assert_eq!(cds.not_found, ["gone"]);
    assert!(status.any_nacked());
    let (_, metrics) = server.admin_get("/metrics").await;
    for line in [
        "switchyard_pollers{api=\"rest\"} 1",
        "switchyard_nodes_nacking 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line:?} in\n{metrics}"
        );
    }
}

/// A poller that has a resource, asking for it by name once it is deleted: nothing to give
/// it, so it keeps what it has (304 after the hold, as a stream's client would: P10, P31);
/// `/status` says which name is not found (P32). Envoy's REST client takes an empty answer
/// as an update and rejects it for SDS, RTDS and ECDS.
#[tokio::test]
async fn p31_p32_a_named_poll_for_what_was_deleted_is_not_modified() {
    let server = TestServer::start(&[
        ("a.yaml", &eds_cluster("a", "1s", 8080)),
        ("b.yaml", &eds_cluster("b", "1s", 8080)),
    ])
    .await;
    let (code, body) = poll(&server, "/v3/discovery:clusters", &request("", &["b"])).await;
    assert_eq!(code, 200, "{body}");
    let r: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let version = r["version_info"].as_str().expect("version").to_string();
    server.set_files(&[("b.yaml", "{}")]);
    let gone = eventually_status(&server, |s| {
        s.config.as_ref().is_some_and(|c| c.generation >= 2)
    })
    .await;
    assert!(gone, "the deletion was never published");
    let (code, body) = poll(
        &server,
        "/v3/discovery:clusters",
        &request(&version, &["b"]),
    )
    .await;
    assert_eq!(code, 304, "{body}");
    let status = server.status().await;
    let cds = &status
        .nodes
        .iter()
        .find(|n| n.node_id == "rest-1")
        .expect("listed")
        .types["CDS"];
    assert_eq!(cds.state, switchyard::fleet::SyncStatus::Synced);
    assert_eq!(cds.not_found, ["b"]);
    // A first poll for it has nothing to keep: answered at once, empty, with the error.
    let (code, body) = poll(&server, "/v3/discovery:clusters", &request("", &["b"])).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"resource_errors\""), "{body}");
}

/// Whether `/status` comes to satisfy `check` within [`WAIT`].
async fn eventually_status(
    server: &TestServer,
    check: impl Fn(&switchyard::admin::Status) -> bool,
) -> bool {
    let started = Instant::now();
    while started.elapsed() < WAIT {
        if check(&server.status().await) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// P36, pollers judged by their own cadence: one poll by a person with curl (or a probe),
/// answered with what serves, is listed as a one-off poll and holds no gate: `switchyard
/// status` exits 0 and `status --wait` returns at once, though nothing will say the poll's
/// answer was taken. Once it polls again a second later it has a cadence, and is judged by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p36_a_one_off_poll_holds_no_gate() {
    let server = TestServer::start(&[("c.yaml", &eds_cluster("backend", "1s", 8080))]).await;
    let (code, body) = poll(&server, "/v3/discovery:clusters", &request("", &[])).await;
    assert_eq!(code, 200, "{body}");
    let admin = server.admin_addr.to_string();
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(args)
            .args(["--admin-addr", &admin])
            .output()
            .expect("switchyard runs");
        (
            out.status.code(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let (code, said) = cli(&["status"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("REST/rest (one poll)"), "{said}");
    let started = std::time::Instant::now();
    let (code, said) = cli(&["status", "--wait", "--timeout", "20s"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(started.elapsed() < Duration::from_secs(10), "{said}");
    // A second poll, a second later, at an old version: a poller with a cadence, still short
    // of what it was answered: updating (exit 7), as a stream's unACKed response is.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (code, body) = poll(&server, "/v3/discovery:clusters", &request("", &[])).await;
    assert_eq!(code, 200, "{body}");
    let (code, said) = cli(&["status"]);
    assert_eq!(code, Some(7), "{said}");
    assert!(said.contains("REST/rest (every 1"), "{said}");
}

/// P36: a one-off poll answered before an edit (a person with curl, a probe) holds the
/// edit's gate a few seconds at most (`POLLER_QUIET_MIN` after the poll, for a poller that
/// polls on to show its cadence), never the minute it stays listed: `status --wait` returns
/// once that passed, and at once for a poll older than that. `config-dump` shows what it was answered, and
/// says a poller cannot confirm it. A poller that keeps polling at the old version is
/// waited for, past those seconds, until it polls at the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p36_a_one_off_poll_before_an_edit_holds_its_gate_seconds_not_a_minute() {
    use switchyard::fleet::POLLER_QUIET_MIN;
    let server = TestServer::start(&[("c.yaml", &eds_cluster("backend", "1s", 8080))]).await;
    let (code, body) = poll(&server, "/v3/discovery:clusters", &request("", &[])).await;
    assert_eq!(code, 200, "{body}");
    let polled = std::time::Instant::now();
    let admin = server.admin_addr.to_string();
    let cli = |args: &[&str]| {
        let mut asked = args.to_vec();
        asked.extend(["--admin-addr", &admin]);
        support::run::said(&asked)
    };
    let (code, dump) = cli(&["config-dump", "rest-1"]);
    assert_eq!(code, Some(0), "{dump}");
    assert!(
        dump.contains("CDS STALE: was answered version")
            && dump.contains("a poller cannot confirm it took it")
            && dump.contains("1 resource(s) it was answered:")
            && dump.contains("- backend (version"),
        "{dump}"
    );
    server.set_file("c.yaml", &eds_cluster("backend", "2s", 8080));
    let (code, out) = cli(&["status"]);
    assert_eq!(code, Some(7), "held a moment after the poll\n{out}");
    let (code, out) = cli(&["status", "--wait", "--timeout", "30s"]);
    let waited = polled.elapsed();
    assert_eq!(code, Some(0), "{out}");
    assert!(
        waited >= POLLER_QUIET_MIN && waited < POLLER_QUIET_MIN + Duration::from_secs(5),
        "held until {waited:?} after the poll\n{out}"
    );
    // An edit a poll older than those seconds: it holds nothing of it.
    server.set_file("c.yaml", &eds_cluster("backend", "4s", 8080));
    let started = std::time::Instant::now();
    let (code, out) = cli(&["status", "--wait", "--timeout", "30s"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        started.elapsed() < POLLER_QUIET_MIN,
        "an old one-off poll held the edit {:?}",
        started.elapsed()
    );
    assert!(out.contains("REST/rest (one poll)"), "{out}");

    // A poller with a cadence (every 2 s), not heard since the next edit: waited for by its
    // cadence (listed for three of its intervals), past the seconds a one-off poll holds,
    // until it polls and takes the new version.
    let (_, body) = poll(&server, "/v3/discovery:clusters", &request("", &[])).await;
    let newest: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let newest = newest["version_info"]
        .as_str()
        .expect("version")
        .to_string();
    tokio::time::sleep(Duration::from_secs(2) - REST_HOLD).await;
    let (code, _) = poll(&server, "/v3/discovery:clusters", &request(&newest, &[])).await;
    let polled = std::time::Instant::now();
    assert_eq!(code, 304);
    server.set_file("c.yaml", &eds_cluster("backend", "3s", 8080));
    // Sampled from the edit's load until a sample past the seconds a one-off poll holds:
    // waited for at every sample once loaded.
    let mut loaded = false;
    loop {
        let at = polled.elapsed();
        let (code, out) = cli(&["status"]);
        match code {
            Some(7) => {
                assert!(out.contains("REST/rest (every 2"), "{out}");
                loaded = true;
            }
            Some(0) if !loaded => {}
            _ => panic!("{at:?} after its poll: not waited for (exit {code:?})\n{out}"),
        }
        if loaded && at > POLLER_QUIET_MIN + Duration::from_millis(500) {
            break;
        }
        assert!(at < Duration::from_secs(10), "the edit never loaded\n{out}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, body) = poll(&server, "/v3/discovery:clusters", &request(&newest, &[])).await;
    let answered: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let answered = answered["version_info"]
        .as_str()
        .expect("version")
        .to_string();
    poll(&server, "/v3/discovery:clusters", &request(&answered, &[])).await;
    let (code, out) = cli(&["status"]);
    assert_eq!(code, Some(0), "took it\n{out}");
}

/// P32 for a poller: Envoy polls each route configuration on its own; a name it asked for
/// once and no longer asks for (its listener moved to another route configuration) leaves
/// `not_found` within the poller's cadence (at least `POLLER_QUIET_MIN`), not after the
/// minute a one-off poll stays listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p32_a_name_a_poller_no_longer_asks_for_leaves_within_its_cadence() {
    use switchyard::fleet::POLLER_QUIET_MIN;
    let routes = "routes:\n  - name: main\n    virtual_hosts: [{ name: all, domains: [\"*\"], routes: [{ match: { prefix: \"/\" }, route: { cluster: backend } }] }]\n";
    let server = TestServer::start(&[
        ("c.yaml", &eds_cluster("backend", "1s", 8080)),
        ("r.yaml", routes),
    ])
    .await;
    let rds = |version: &str, name: &str| {
        serde_json::json!({
            "version_info": version,
            "node": { "id": "rest-1", "cluster": "test" },
            "resource_names": [name],
            "type_url": switchyard::resource::ResourceType::Route.type_url(),
        })
        .to_string()
    };
    let (code, body) = poll(&server, "/v3/discovery:routes", &rds("", "main")).await;
    assert_eq!(code, 200, "{body}");
    let (code, _) = poll(&server, "/v3/discovery:routes", &rds("", "gone")).await;
    assert_eq!(code, 200);
    let not_found = |status: &switchyard::admin::Status| {
        status
            .nodes
            .iter()
            .find(|n| n.node_id == "rest-1")
            .map(|n| n.types["RDS"].not_found.clone())
            .unwrap_or_default()
    };
    assert_eq!(not_found(&server.status().await), ["gone"]);
    // `main` polled on every 300 ms; `gone` never again.
    let started = std::time::Instant::now();
    let left = loop {
        poll(&server, "/v3/discovery:routes", &rds("", "main")).await;
        if not_found(&server.status().await).is_empty() {
            break Some(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(20) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let left = left.expect("`gone` left not_found");
    assert!(
        left < POLLER_QUIET_MIN + Duration::from_secs(3),
        "left after {left:?}"
    );
}
