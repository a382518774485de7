//! Integration tests: a real tonic client against the real server on 127.0.0.1, over
//! snapshot files in a temp directory. Each names the protocol rule it covers.

use switchyard_testkit as support;

use support::{
    eds_cluster, envoy_rejected_cluster, names, node, not_found, rds_listener, request, route_to,
    TestServer, XdsClient,
};
use switchyard::resource::ResourceType::{self, Cluster, Endpoint, Listener, Route};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// Envoy's start-up on ADS: wildcard CDS, EDS for the clusters, wildcard LDS, RDS for the
/// listeners; every response ACKed.
async fn envoy_like_start(server: &TestServer, id: &str) -> XdsClient {
    let mut c = server.ads(id).await;
    c.subscribe(Cluster, &[]).await;
    let cds = c.recv_type(Cluster).await;
    assert_eq!(names(&cds), ["backend"]);
    c.subscribe(Endpoint, &["backend"]).await;
    c.ack(&cds, &[]).await;
    let eds = c.recv_type(Endpoint).await;
    assert_eq!(names(&eds), ["backend"]);
    c.subscribe(Listener, &[]).await;
    c.ack(&eds, &["backend"]).await;
    let lds = c.recv_type(Listener).await;
    assert_eq!(names(&lds), ["http"]);
    c.subscribe(Route, &["main"]).await;
    c.ack(&lds, &[]).await;
    let rds = c.recv_type(Route).await;
    assert_eq!(names(&rds), ["main"]);
    c.ack(&rds, &["main"]).await;
    c
}

async fn standard_server() -> TestServer {
    TestServer::start(&[
        ("clusters.yaml", &eds_cluster("backend", "1s", 8080)),
        ("listeners.yaml", &rds_listener("http", 10000, "main")),
        ("routes.yaml", &route_to("main", "backend")),
    ])
    .await
}

#[tokio::test]
async fn p4_p14_p28_envoy_like_start_gets_every_type() {
    let server = standard_server().await;
    envoy_like_start(&server, "n1").await;
    server.shutdown().await;
}

#[tokio::test]
async fn p2_nonces_differ_per_response_and_version_follows_content() {
    let server = standard_server().await;
    let mut c = server.ads("n1").await;
    c.subscribe(Cluster, &[]).await;
    let a = c.recv_type(Cluster).await;
    c.ack(&a, &[]).await;
    server.set_file("clusters.yaml", &eds_cluster("backend", "2s", 8080));
    let b = c.recv_type(Cluster).await;
    assert_ne!(a.nonce, b.nonce);
    assert_ne!(a.version_info, b.version_info);
    assert!(b
        .control_plane
        .is_some_and(|cp| cp.identifier.starts_with("switchyard/")));
}

#[tokio::test]
async fn p33_an_unknown_type_on_ads_is_answered_as_not_existing_and_the_stream_goes_on() {
    let server = standard_server().await;
    let mut c = server.ads("n1").await;
    let unknown = "type.googleapis.com/example.v1.Widget";
    let mut r = request(Cluster, &["xdstp://a/example.v1.Widget/p/*"], "", "");
    r.type_url = unknown.into();
    c.send(r).await;
    let answer = c.recv().await;
    assert_eq!(answer.type_url, unknown);
    assert!(answer.resources.is_empty());
    // P32: each name asked for, NOT_FOUND.
    assert_eq!(
        not_found(&answer.resource_errors),
        ["xdstp://a/example.v1.Widget/p/*"]
    );
    // Its ACK, then the served types on the same stream.
    let mut ack = request(
        Cluster,
        &["xdstp://a/example.v1.Widget/p/*"],
        &answer.version_info,
        &answer.nonce,
    );
    ack.type_url = unknown.into();
    c.send(ack).await;
    c.subscribe(Cluster, &[]).await;
    assert_eq!(names(&c.recv_type(Cluster).await), ["backend"]);
    // Reported: in /status and the metric.
    let status = server.status().await;
    let stream = &status.nodes[0].streams[0];
    assert_eq!(stream.unknown_types.len(), 1, "{stream:?}");
    assert_eq!(stream.unknown_types[0].type_url, unknown);
    assert_eq!(
        stream.unknown_types[0].state,
        switchyard::fleet::SyncStatus::Synced
    );
    let (_, metrics) = server.admin_get("/metrics").await;
    assert!(
        metrics.contains("switchyard_unknown_types_total 1"),
        "{metrics}"
    );
    // A request without a type is still a protocol error (P3).
    let mut bad = server.ads("n2").await;
    let mut r = request(Cluster, &[], "", "");
    r.type_url = String::new();
    bad.send(r).await;
    assert_eq!(bad.recv_error().await.code(), tonic::Code::InvalidArgument);
    server.shutdown().await;
}

#[tokio::test]
async fn p32_a_named_resource_that_does_not_exist_is_answered_not_found_then_sent_when_added() {
    let server = standard_server().await;
    let mut c = server.ads("n1").await;
    // As gRPC asks: LDS and CDS by name.
    c.subscribe(Cluster, &["backend", "later"]).await;
    let r = c.recv_type(Cluster).await;
    assert_eq!(names(&r), ["backend"]);
    assert_eq!(not_found(&r.resource_errors), ["later"]);
    c.ack(&r, &["backend", "later"]).await;
    c.expect_quiet(std::time::Duration::from_millis(300)).await;
    let status = server.status().await;
    assert_eq!(status.nodes[0].types["CDS"].not_found, ["later"]);
    // CSDS: the name the node asked for, DOES_NOT_EXIST.
    {
        use envoy_types::pb::envoy::admin::v3::ClientResourceStatus;
        use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_client::ClientStatusDiscoveryServiceClient;
        let csds = ClientStatusDiscoveryServiceClient::new(server.channel().await)
            .fetch_client_status(
                envoy_types::pb::envoy::service::status::v3::ClientStatusRequest::default(),
            )
            .await
            .expect("CSDS answers")
            .into_inner();
        let later = csds.config[0]
            .generic_xds_configs
            .iter()
            .find(|g| g.name == "later")
            .expect("listed");
        assert_eq!(
            later.client_status,
            ClientResourceStatus::DoesNotExist as i32
        );
    }
    // The file adds it: sent as usual, no error.
    server.set_file("later.yaml", &eds_cluster("later", "1s", 8081));
    let r = c.recv_type(Cluster).await;
    assert_eq!(names(&r), ["backend", "later"]);
    assert!(r.resource_errors.is_empty());
    let (_, metrics) = server.admin_get("/metrics").await;
    assert!(
        metrics.contains(
            r#"switchyard_resources_not_found_total{type_url="type.googleapis.com/envoy.config.cluster.v3.Cluster"} 1"#
        ),
        "{metrics}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_compressed_request_stream_is_refused_naming_the_encoding_accepted() {
    use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
    let server = standard_server().await;
    let mut r = request(Cluster, &[], "", "");
    r.node = Some(node("gzip", "edge"));
    let (tx, rx) = mpsc::channel(1);
    tx.send(r).await.expect("queued");
    let mut client = AggregatedDiscoveryServiceClient::new(server.channel().await)
        .send_compressed(tonic::codec::CompressionEncoding::Gzip);
    let status = match client
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
    {
        Err(status) => status,
        Ok(response) => response
            .into_inner()
            .message()
            .await
            .expect_err("no compression is enabled"),
    };
    assert_eq!(status.code(), tonic::Code::Unimplemented, "{status:?}");
    assert!(status.message().contains("`gzip`"), "{status:?}");
    // The server carries on for others.
    let mut plain = server.ads("plain").await;
    plain.subscribe(Cluster, &[]).await;
    assert_eq!(names(&plain.recv_type(Cluster).await), ["backend"]);
}

#[tokio::test]
async fn p1_first_request_without_node_is_rejected() {
    let server = standard_server().await;
    let mut c = server.ads("n1").await;
    let mut r = request(Cluster, &[], "", "");
    r.node = None;
    c.send_raw(r).await;
    let status = c.recv_error().await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("node"));
}

#[tokio::test]
async fn p5_nack_is_recorded_not_resent_and_a_fix_is_sent() {
    let server = standard_server().await;
    let mut c = server.ads("n1").await;
    c.subscribe(Cluster, &[]).await;
    let v1 = c.recv_type(Cluster).await;
    c.ack(&v1, &[]).await;
    server.set_file("clusters.yaml", &envoy_rejected_cluster("backend", 8080));
    let bad = c.recv_type(Cluster).await;
    c.nack(
        &bad,
        &[],
        &v1.version_info,
        "Proto constraint validation failed",
    )
    .await;
    // Touch an unrelated type: the next thing on the stream is that, not the rejected CDS.
    server.set_file("clusters.yaml", &envoy_rejected_cluster("backend", 8080));
    c.subscribe(Listener, &[]).await;
    assert_eq!(names(&c.recv_type(Listener).await), ["http"]);
    // A fix is sent.
    server.set_file("clusters.yaml", &eds_cluster("backend", "3s", 8080));
    let fixed = c.recv_type(Cluster).await;
    assert_ne!(fixed.version_info, bad.version_info);
}

/// P5: a NACK is traced to what the rejected response changed against what the proxy ran,
/// named where it is written, with when its file changed (in `/status`).
#[tokio::test]
async fn p5_a_nack_names_the_resources_it_rejected_where_they_are_written() {
    let server = standard_server().await;
    let mut c = server.ads("n1").await;
    c.subscribe(Cluster, &[]).await;
    let v1 = c.recv_type(Cluster).await;
    c.ack(&v1, &[]).await;
    // `backend` changed and `extra` added; the proxy rejects the response.
    let extra = "\n  - {name: extra, connect_timeout: 1s, type: STATIC}\nendpoints:";
    server.set_file(
        "clusters.yaml",
        &eds_cluster("backend", "2s", 8080).replacen("\nendpoints:", extra, 1),
    );
    let bad = c.recv_type(Cluster).await;
    c.nack(&bad, &[], &v1.version_info, "rejected").await;
    let traced = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            let status = server.status().await;
            let cds = status
                .nodes
                .iter()
                .find(|n| n.node_id == "n1")
                .and_then(|n| n.types.get("CDS"))
                .cloned();
            if let Some(t) = cds.filter(|t| !t.rejected_changes.is_empty()) {
                return t;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the NACK shows in /status");
    let file = server.dir.path().join("clusters.yaml");
    let shown: Vec<(String, String)> = traced
        .rejected_changes
        .iter()
        .map(|c| (c.resource.clone(), c.change.clone()))
        .collect();
    assert_eq!(
        shown,
        [
            (
                format!("{}: clusters[0] \"backend\"", file.display()),
                "changed".into()
            ),
            (
                format!("{}: clusters[1] \"extra\"", file.display()),
                "added".into()
            ),
        ]
    );
    let modified = std::fs::metadata(&file)
        .and_then(|m| m.modified())
        .expect("mtime");
    assert_eq!(
        traced.rejected_changes[0].file_changed_at.as_deref(),
        Some(switchyard::fleet::format_time(modified).as_str())
    );
}

#[tokio::test]
async fn p6_stale_nonce_gets_no_response() {
    let server = standard_server().await;
    let mut c = server.ads("n1").await;
    c.subscribe(Cluster, &[]).await;
    let v1 = c.recv_type(Cluster).await;
    c.ack(&v1, &[]).await;
    server.set_file("clusters.yaml", &eds_cluster("backend", "2s", 8080));
    let v2 = c.recv_type(Cluster).await;
    // A request naming v1's nonce is stale: no answer. Then a wildcard LDS request: its
    // answer must be the very next message.
    c.ack(&v1, &[]).await;
    c.subscribe(Listener, &[]).await;
    c.recv_type(Listener).await;
    c.ack(&v2, &[]).await;
}

/// P7, P6: ACKs list every name again, and the server leaves names that repeat those it
/// took in last undecoded; the set they name stays, a new list replaces it, and a stale
/// request's names (not taken in) leave the set as it was.
#[tokio::test]
async fn p7_acks_that_repeat_names_keep_them_and_new_names_replace_them() {
    let server = TestServer::start(&[
        ("a.yaml", &eds_cluster("a", "1s", 8080)),
        ("b.yaml", &eds_cluster("b", "1s", 8081)),
        ("c.yaml", &eds_cluster("c", "1s", 8082)),
    ])
    .await;
    let mut c = server.ads("n1").await;
    c.subscribe(Endpoint, &["a", "b"]).await;
    let first = c.recv_type(Endpoint).await;
    assert_eq!(names(&first), ["a", "b"]);
    c.ack(&first, &["a", "b"]).await;
    server.set_file("b.yaml", &eds_cluster("b", "1s", 9081));
    let b = c.recv_type(Endpoint).await;
    assert_eq!(names(&b), ["b"], "the repeated names still name b");
    c.ack(&b, &["a", "b"]).await;
    // Other names replace the set: c is new to the client.
    c.ack(&b, &["a", "c"]).await;
    let added = c.recv_type(Endpoint).await;
    assert_eq!(names(&added), ["c"]);
    // A stale request is not taken in, so the same names after it are no repeat: [b]
    // alone, and b is sent again (P9: it was forgotten).
    c.ack(&b, &["b"]).await;
    c.ack(&added, &["b"]).await;
    let again = c.recv_type(Endpoint).await;
    assert_eq!(names(&again), ["b"]);
    c.ack(&again, &["b"]).await;
    server.set_file("c.yaml", &eds_cluster("c", "1s", 9082));
    server.set_file("b.yaml", &eds_cluster("b", "1s", 7081));
    let changed = c.recv_type(Endpoint).await;
    assert_eq!(names(&changed), ["b"], "c is no longer asked for");
    c.ack(&changed, &["b"]).await;
}

#[tokio::test]
async fn p8_identical_reload_sends_nothing() {
    let server = standard_server().await;
    let mut c = envoy_like_start(&server, "n1").await;
    // Rewrite every file with the same content, then change only the listener.
    server.set_file("clusters.yaml", &eds_cluster("backend", "1s", 8080));
    server.set_file("routes.yaml", &route_to("main", "backend"));
    server.set_file("listeners.yaml", &rds_listener("http", 10001, "main"));
    // The next (and only) response is LDS.
    let lds = c.recv_type(Listener).await;
    assert_eq!(names(&lds), ["http"]);
}

#[tokio::test]
async fn p9_p11_a_missing_name_is_sent_when_a_file_adds_it() {
    let server = standard_server().await;
    let mut c = server.ads("n1").await;
    c.subscribe(Endpoint, &["backend", "later"]).await;
    let first = c.recv_type(Endpoint).await;
    assert_eq!(names(&first), ["backend"]);
    c.ack(&first, &["backend", "later"]).await;
    server.set_file("later.yaml", &eds_cluster("later", "1s", 9090));
    let second = c.recv_type(Endpoint).await;
    assert_eq!(
        names(&second),
        ["later"],
        "only what the client lacks (P10)"
    );
}

#[tokio::test]
async fn p10_deleting_a_cluster_file_sends_the_smaller_full_set() {
    let server = TestServer::start(&[
        ("a.yaml", &eds_cluster("a", "1s", 8080)),
        ("b.yaml", &eds_cluster("b", "1s", 8081)),
    ])
    .await;
    let mut c = server.ads("n1").await;
    c.subscribe(Cluster, &[]).await;
    let both = c.recv_type(Cluster).await;
    assert_eq!(names(&both), ["a", "b"]);
    c.ack(&both, &[]).await;
    std::fs::remove_file(server.dir.path().join("b.yaml")).expect("rm");
    server.reloader.reload().expect("reload");
    assert_eq!(names(&c.recv_type(Cluster).await), ["a"]);
}

#[tokio::test]
async fn p13_reconnect_with_current_version_gets_nothing_until_a_change() {
    let server = standard_server().await;
    let mut c = server.ads("n1").await;
    c.subscribe(Cluster, &[]).await;
    let v1 = c.recv_type(Cluster).await;
    drop(c);
    let mut again = server.ads("n1").await;
    again
        .send(request(Cluster, &[], &v1.version_info, ""))
        .await;
    again.subscribe(Listener, &[]).await;
    // LDS is answered; CDS is not (the client has it).
    again.recv_type(Listener).await;
    server.set_file("clusters.yaml", &eds_cluster("backend", "5s", 8080));
    let changed = again.recv_type(Cluster).await;
    assert_ne!(changed.version_info, v1.version_info);
}

/// P13, P9 over a socket: a client back on a new stream with the wildcard CDS version it had
/// gets no CDS again; the EDS names it asks for go again, though it names the version it was
/// sent them at (Envoy keeps that version when it drops names, so it proves nothing), at
/// that same version; with one more name it gets all of them.
#[tokio::test]
async fn p9_p13_reconnect_gets_named_endpoints_again_and_the_wildcard_clusters_not() {
    let server = TestServer::start(&[
        ("a.yaml", &eds_cluster("a", "1s", 8080)),
        ("b.yaml", &eds_cluster("b", "1s", 8081)),
    ])
    .await;
    let mut c = server.ads("n1").await;
    c.subscribe(Cluster, &[]).await;
    let cds = c.recv_type(Cluster).await;
    c.subscribe(Endpoint, &["a"]).await;
    c.ack(&cds, &[]).await;
    let eds = c.recv_type(Endpoint).await;
    c.ack(&eds, &["a"]).await;
    drop(c);

    // Back like Envoy: each type with the version it last accepted.
    let mut again = server.ads("n1").await;
    again
        .send(request(Cluster, &[], &cds.version_info, ""))
        .await;
    again
        .send(request(Endpoint, &["a"], &eds.version_info, ""))
        .await;
    let resent = again.recv_type(Endpoint).await;
    assert_eq!(names(&resent), ["a"]);
    assert_eq!(resent.version_info, eds.version_info);
    again.ack(&resent, &["a"]).await;
    again
        .expect_quiet(std::time::Duration::from_millis(300))
        .await;

    let mut more = server.ads("n1").await;
    more.send(request(Endpoint, &["a", "b"], &eds.version_info, ""))
        .await;
    assert_eq!(names(&more.recv_type(Endpoint).await), ["a", "b"]);
}

#[tokio::test]
async fn p16_explicit_names_on_cds_and_back_to_nothing() {
    let server = TestServer::start(&[
        ("a.yaml", &eds_cluster("a", "1s", 8080)),
        ("b.yaml", &eds_cluster("b", "1s", 8081)),
    ])
    .await;
    let mut c = server.ads("n1").await;
    c.subscribe(Cluster, &["*", "a"]).await;
    let all = c.recv_type(Cluster).await;
    assert_eq!(names(&all), ["a", "b"]);
    c.ack(&all, &["a"]).await;
    let only_a = c.recv_type(Cluster).await;
    assert_eq!(names(&only_a), ["a"]);
    c.ack(&only_a, &[]).await;
    assert!(c.recv_type(Cluster).await.resources.is_empty());
}

#[tokio::test]
async fn p28_p30_cluster_change_is_followed_by_its_endpoints_on_ads() {
    let server = standard_server().await;
    let mut c = envoy_like_start(&server, "n1").await;
    server.set_file("clusters.yaml", &eds_cluster("backend", "4s", 8080));
    let cds = c.recv_type(Cluster).await;
    let eds = c.recv_type(Endpoint).await;
    assert_eq!(names(&eds), ["backend"]);
    c.ack(&cds, &[]).await;
    c.ack(&eds, &["backend"]).await;
}

#[tokio::test]
async fn broken_yaml_changes_nothing_on_the_wire() {
    let server = standard_server().await;
    let mut c = envoy_like_start(&server, "n1").await;
    let errors = server.set_bad_file("routes.yaml", "routes: [ {name: main, virtual_hosts: [");
    assert!(errors[0].contains("routes.yaml"), "{errors:?}");
    assert_eq!(
        server.cache.current().number,
        1,
        "the last good generation serves"
    );
    // The fix (same routes as before) sends nothing; a listener edit is the next message.
    server.set_file("routes.yaml", &route_to("main", "backend"));
    server.set_file("listeners.yaml", &rds_listener("http", 10002, "main"));
    c.recv_type(Listener).await;
}

#[tokio::test]
async fn node_selectors_give_each_node_its_group() {
    let edge = format!(
        "nodes: [{{id: edge-*}}]\n{}",
        eds_cluster("edge-only", "1s", 8080)
    );
    let server = TestServer::start(&[
        ("shared.yaml", &eds_cluster("shared", "1s", 8081)),
        ("edge.yaml", &edge),
    ])
    .await;
    let mut e = server.ads("edge-1").await;
    let mut o = server.ads("core-1").await;
    e.subscribe(Cluster, &[]).await;
    o.subscribe(Cluster, &[]).await;
    assert_eq!(names(&e.recv_type(Cluster).await), ["edge-only", "shared"]);
    assert_eq!(names(&o.recv_type(Cluster).await), ["shared"]);
}

/// Open a SotW stream on the per-type service of `kind`.
async fn per_type(server: &TestServer, kind: ResourceType) -> XdsClient {
    use envoy_types::pb::envoy::service::cluster::v3::cluster_discovery_service_client::ClusterDiscoveryServiceClient;
    use envoy_types::pb::envoy::service::endpoint::v3::endpoint_discovery_service_client::EndpointDiscoveryServiceClient;
    use envoy_types::pb::envoy::service::extension::v3::extension_config_discovery_service_client::ExtensionConfigDiscoveryServiceClient;
    use envoy_types::pb::envoy::service::listener::v3::listener_discovery_service_client::ListenerDiscoveryServiceClient;
    use envoy_types::pb::envoy::service::route::v3::route_discovery_service_client::RouteDiscoveryServiceClient;
    use envoy_types::pb::envoy::service::route::v3::scoped_routes_discovery_service_client::ScopedRoutesDiscoveryServiceClient;
    use envoy_types::pb::envoy::service::runtime::v3::runtime_discovery_service_client::RuntimeDiscoveryServiceClient;
    use envoy_types::pb::envoy::service::secret::v3::secret_discovery_service_client::SecretDiscoveryServiceClient;
    let ch = server.channel().await;
    let (tx, rx) = mpsc::channel(16);
    let rx = ReceiverStream::new(rx);
    let responses = match kind {
        Cluster => {
            ClusterDiscoveryServiceClient::new(ch)
                .stream_clusters(rx)
                .await
        }
        Endpoint => {
            EndpointDiscoveryServiceClient::new(ch)
                .stream_endpoints(rx)
                .await
        }
        Listener => {
            ListenerDiscoveryServiceClient::new(ch)
                .stream_listeners(rx)
                .await
        }
        Route => RouteDiscoveryServiceClient::new(ch).stream_routes(rx).await,
        ResourceType::ScopedRoute => {
            ScopedRoutesDiscoveryServiceClient::new(ch)
                .stream_scoped_routes(rx)
                .await
        }
        ResourceType::Secret => {
            SecretDiscoveryServiceClient::new(ch)
                .stream_secrets(rx)
                .await
        }
        ResourceType::Runtime => {
            RuntimeDiscoveryServiceClient::new(ch)
                .stream_runtime(rx)
                .await
        }
        ResourceType::ExtensionConfig => {
            ExtensionConfigDiscoveryServiceClient::new(ch)
                .stream_extension_configs(rx)
                .await
        }
        ResourceType::VirtualHost | ResourceType::LbEndpoint => {
            unreachable!("VHDS and LEDS have no SotW method")
        }
    }
    .expect("stream opens")
    .into_inner();
    XdsClient::from_parts(node("n1", "test"), tx, responses)
}

const EVERY_KIND: &str = r#"
clusters: [{ name: c, connect_timeout: 1s }]
endpoints: [{ cluster_name: c }]
listeners: [{ name: l, address: { socket_address: { address: 127.0.0.1, port_value: 1 } }, filter_chains: [{ filters: [{ name: t, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: t, cluster: c } }] }] }]
routes: [{ name: r }]
scoped_routes: [{ name: s, route_configuration_name: r, key: { fragments: [{ string_key: k }] } }]
secrets: [{ name: x, generic_secret: { secret: { inline_string: hush } } }]
runtimes: [{ name: rt, layer: { flag: true } }]
extension_configs:
  - name: e
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"#;

#[tokio::test]
async fn p3_every_per_type_sotw_service_serves_its_type_only() {
    let server = TestServer::start(&[("all.yaml", EVERY_KIND)]).await;
    let cases = [
        (Cluster, "c"),
        (Endpoint, "c"),
        (Listener, "l"),
        (Route, "r"),
        (ResourceType::ScopedRoute, "s"),
        (ResourceType::Secret, "x"),
        (ResourceType::Runtime, "rt"),
        (ResourceType::ExtensionConfig, "e"),
    ];
    for (kind, name) in cases {
        let mut c = per_type(&server, kind).await;
        c.subscribe(kind, &[name]).await;
        let r = c.recv_type(kind).await;
        assert_eq!(names(&r), [name], "{kind}");
        // Another type on this service: INVALID_ARGUMENT.
        let other = if kind == Cluster { Listener } else { Cluster };
        c.send(request(other, &[], "", "")).await;
        assert_eq!(
            c.recv_error().await.code(),
            tonic::Code::InvalidArgument,
            "{kind}"
        );
    }
}

#[tokio::test]
async fn shutdown_ends_open_streams() {
    let server = standard_server().await;
    let mut c = server.ads("n1").await;
    c.subscribe(Cluster, &[]).await;
    c.recv_type(Cluster).await;
    // A second client has not read what it was sent.
    let mut idle = server.ads("n2").await;
    idle.subscribe(Cluster, &[]).await;
    let addr = server.addr;
    server.shutdown().await;
    // The client sees its stream end, not just the server task stop.
    c.expect_end(std::time::Duration::from_secs(5)).await;
    // And the server no longer accepts connections.
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "still listening after shutdown"
    );
}

/// Field 4 of DiscoveryRequest is `type_url`, a string; sent as a varint it cannot decode.
#[derive(Clone, PartialEq, prost::Message)]
struct NotARequest {
    #[prost(uint64, tag = "4")]
    type_url: u64,
}

#[tokio::test]
async fn a_request_that_does_not_decode_gets_an_error_status_on_that_stream_only() {
    use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
    let server = standard_server().await;
    let mut grpc = tonic::client::Grpc::new(server.channel().await);
    grpc.ready().await.expect("ready");
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
    );
    let codec = tonic_prost::ProstCodec::<NotARequest, DiscoveryResponse>::default();
    let (tx, rx) = mpsc::channel(1);
    tx.send(NotARequest { type_url: 7 }).await.expect("send");
    let mut responses = grpc
        .streaming(tonic::Request::new(ReceiverStream::new(rx)), path, codec)
        .await
        .expect("stream opens")
        .into_inner();
    let status = responses.message().await.expect_err("an error status");
    assert!(status.message().contains("decode"), "{status:?}");
    // The server is fine.
    let mut c = server.ads("n1").await;
    c.subscribe(Cluster, &[]).await;
    assert_eq!(names(&c.recv_type(Cluster).await), ["backend"]);
}

/// P29/P30 over a socket: a route cut-over from `backend` to a new cluster `next`, with
/// `backend` removed, in one reload. The client holds its CDS ACK (as Envoy does while a new
/// cluster warms): the route must not move meanwhile, and `backend` goes only after it has.
/// `/status` and `switchyard status` show the plan while it waits.
#[tokio::test]
async fn p29_p30_route_cut_over_is_ordered_make_before_break() {
    let server = standard_server().await;
    let mut c = envoy_like_start(&server, "n1").await;
    server.set_files(&[
        ("clusters.yaml", &eds_cluster("next", "1s", 8081)),
        ("routes.yaml", &route_to("main", "next")),
    ]);

    // Step 1: both clusters (nothing removed yet), and the new endpoints.
    let cds = c.recv_type(Cluster).await;
    assert_eq!(names(&cds), ["backend", "next"]);
    c.send(request(Endpoint, &["backend", "next"], "", ""))
        .await;
    let eds = c.recv_type(Endpoint).await;
    assert_eq!(names(&eds), ["next"]);
    c.ack(&eds, &["backend", "next"]).await;
    // CDS not ACKed yet: the route stays where it is.
    c.expect_quiet(std::time::Duration::from_millis(300)).await;
    let status = server.status().await;
    let plan = status.nodes[0].streams[0]
        .plan
        .clone()
        .expect("a plan in progress");
    assert_eq!((plan.step, plan.steps, plan.held_back), (1, 3, 0));
    let addr = server.admin_addr.to_string();
    let table = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["status", "--admin-addr", &addr])
            .output()
            .expect("runs")
    })
    .await
    .expect("joins");
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    assert!(table.contains("UPDATING n1: step 1 of 3"), "{table}");
    assert!(table.contains("ADS/sotw (updating 1/3)"), "{table}");

    // Step 2 once CDS is ACKed: the route moves.
    c.ack(&cds, &[]).await;
    let rds = c.recv_type(Route).await;
    assert_eq!(names(&rds), ["main"]);
    c.ack(&rds, &["main"]).await;
    // Step 3: backend is removed; the client still asks for its endpoints (an Envoy drops
    // them on this CDS response), which no longer exist (P32).
    let cds = c.recv_type(Cluster).await;
    assert_eq!(names(&cds), ["next"]);
    let eds = c.recv_type(Endpoint).await;
    assert!(eds.resources.is_empty());
    assert_eq!(not_found(&eds.resource_errors), ["backend"]);
    c.ack(&eds, &["next"]).await;
    c.ack(&cds, &[]).await;
    c.expect_quiet(std::time::Duration::from_millis(200)).await;
    assert!(server.status().await.nodes[0].streams[0].plan.is_none());
    let (_, metrics) = server.admin_get("/metrics").await;
    assert!(
        metrics.contains("switchyard_update_plans_total{event=\"completed\"} 1"),
        "{metrics}"
    );
    server.shutdown().await;
}

/// Overlapping changes over a socket (P29, P30): the cut-over above, and while the client holds its CDS
/// ACK a second reload changes only the route. The route must still wait for the CDS ACK
/// (the step is pending until the client completes it, whatever arrives meanwhile); then the
/// newest route goes, and `backend` only after it.
#[tokio::test]
async fn p29_p30_a_newer_reload_while_step_1_awaits_its_ack_keeps_the_order() {
    let server = standard_server().await;
    let mut c = envoy_like_start(&server, "n1").await;
    server.set_files(&[
        ("clusters.yaml", &eds_cluster("next", "1s", 8081)),
        ("routes.yaml", &route_to("main", "next")),
    ]);
    let cds = c.recv_type(Cluster).await;
    assert_eq!(names(&cds), ["backend", "next"]);
    c.send(request(Endpoint, &["backend", "next"], "", ""))
        .await;
    let eds = c.recv_type(Endpoint).await;
    c.ack(&eds, &["backend", "next"]).await;
    // The route-only edit, while CDS is unanswered.
    let newer = route_to("main", "next").replace("prefix: /", "prefix: /v2");
    assert_ne!(
        newer,
        route_to("main", "next"),
        "the edit changes the route"
    );
    server.set_file("routes.yaml", &newer);
    c.expect_quiet(std::time::Duration::from_millis(500)).await;
    let (_, metrics) = server.admin_get("/metrics").await;
    assert!(
        metrics.contains("switchyard_update_plans_total{event=\"replaced\"} 1"),
        "the reload arrived mid-plan: {metrics}"
    );
    // The CDS ACK: the newest route, then the removal.
    c.ack(&cds, &[]).await;
    let rds = c.recv_type(Route).await;
    assert_eq!(names(&rds), ["main"]);
    let body = String::from_utf8_lossy(&rds.resources[0].value).into_owned();
    assert!(
        body.contains("/v2"),
        "the newest route, not the stale one: {body}"
    );
    c.ack(&rds, &["main"]).await;
    let cds = c.recv_type(Cluster).await;
    assert_eq!(names(&cds), ["next"]);
    server.shutdown().await;
}

/// Reconnects over a socket (P13, P29, P30): a proxy away while the files changed
/// (its replica died mid-change) comes back with the versions it holds. They name the
/// generation before, which the server keeps: the cut-over reaches it make-before-break from
/// there (the route only after the CDS ACK, `backend` removed last), not all at once.
#[tokio::test]
async fn p13_p30_a_proxy_back_with_an_older_generation_is_updated_in_order() {
    let server = standard_server().await;
    let mut c = server.ads("n1").await;
    let mut held = std::collections::BTreeMap::new();
    for (kind, names) in [
        (Cluster, &[][..]),
        (Endpoint, &["backend"][..]),
        (Listener, &[][..]),
        (Route, &["main"][..]),
    ] {
        c.subscribe(kind, names).await;
        let r = c.recv_type(kind).await;
        c.ack(&r, names).await;
        held.insert(kind, (r.version_info.clone(), names));
    }
    drop(c);
    server.set_files(&[
        ("clusters.yaml", &eds_cluster("next", "1s", 8081)),
        ("routes.yaml", &route_to("main", "next")),
    ]);
    // Back, with what it holds (Envoy's first requests: CDS, EDS, LDS, RDS at once).
    let mut c = server.ads("n1").await;
    for (kind, (version, names)) in &held {
        c.send(request(*kind, names, version, "")).await;
    }
    let cds = c.recv_type(Cluster).await;
    assert_eq!(
        names(&cds),
        ["backend", "next"],
        "step 1: nothing removed yet"
    );
    // The endpoints it asks for go again (P9), and then those of the new cluster.
    let eds = c.recv_type(Endpoint).await;
    assert_eq!(names(&eds), ["backend"]);
    c.ack(&eds, &["backend", "next"]).await;
    let eds = c.recv_type(Endpoint).await;
    assert_eq!(names(&eds), ["next"]);
    c.ack(&eds, &["backend", "next"]).await;
    c.expect_quiet(std::time::Duration::from_millis(300)).await;
    // The CDS ACK: the route moves, then `backend` goes.
    c.ack(&cds, &[]).await;
    let rds = c.recv_type(Route).await;
    assert!(String::from_utf8_lossy(&rds.resources[0].value).contains("next"));
    c.ack(&rds, &["main"]).await;
    let cds = c.recv_type(Cluster).await;
    assert_eq!(names(&cds), ["next"]);
    let (_, metrics) = server.admin_get("/metrics").await;
    assert!(
        metrics.contains("switchyard_update_plans_total{event=\"reconnect_ordered\"} 4"),
        "{metrics}"
    );
    server.shutdown().await;
}

/// `--ordering off`: the same reload goes out at once (plain eventual consistency).
#[tokio::test]
async fn p30_ordering_off_sends_the_cut_over_at_once() {
    let server = TestServer::start_with(
        &[
            ("clusters.yaml", &eds_cluster("backend", "1s", 8080)),
            ("listeners.yaml", &rds_listener("http", 10000, "main")),
            ("routes.yaml", &route_to("main", "backend")),
        ],
        switchyard::server::ServeOptions {
            ordering: switchyard::protocol::Ordering::off(),
            ..Default::default()
        },
    )
    .await;
    let mut c = envoy_like_start(&server, "n1").await;
    server.set_files(&[
        ("clusters.yaml", &eds_cluster("next", "1s", 8081)),
        ("routes.yaml", &route_to("main", "next")),
    ]);
    let cds = c.recv_type(Cluster).await;
    assert_eq!(names(&cds), ["next"], "backend removed at once");
    // P32: the endpoints the client still asks for went with their cluster.
    let eds = c.recv_type(Endpoint).await;
    assert_eq!(not_found(&eds.resource_errors), ["backend"]);
    let rds = c.recv_type(Route).await;
    assert_eq!(
        names(&rds),
        ["main"],
        "the route moves without waiting for CDS's ACK"
    );
    server.shutdown().await;
}

/// P30 without ADS: a node's CDS and RDS streams are separate and cannot be ordered against
/// each other, but CDS keeps a removed cluster while the node's RDS stream still holds a
/// route that names it, and drops it once the RDS client has ACKed the route moving away.
#[tokio::test]
async fn p30_per_type_cds_keeps_a_removed_cluster_until_the_route_stream_moved() {
    let server = standard_server().await;
    let mut cds = per_type(&server, Cluster).await;
    cds.subscribe(Cluster, &[]).await;
    let first = cds.recv_type(Cluster).await;
    assert_eq!(names(&first), ["backend"]);
    cds.ack(&first, &[]).await;
    let mut rds = per_type(&server, Route).await;
    rds.subscribe(Route, &["main"]).await;
    let route = rds.recv_type(Route).await;
    rds.ack(&route, &["main"]).await;
    // The RDS stream's report of what its client holds reaches the CDS stream.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;

    server.set_files(&[
        ("clusters.yaml", &eds_cluster("next", "1s", 8081)),
        ("routes.yaml", &route_to("main", "next")),
    ]);
    // The route to `next` is out but not yet ACKed: CDS adds `next` and keeps `backend`.
    let moved = rds.recv_type(Route).await;
    let both = cds.recv_type(Cluster).await;
    assert_eq!(names(&both), ["backend", "next"]);
    cds.ack(&both, &[]).await;
    cds.expect_quiet(std::time::Duration::from_millis(300))
        .await;
    // Once the RDS client ACKs, `backend` goes.
    rds.ack(&moved, &["main"]).await;
    let only_next = cds.recv_type(Cluster).await;
    assert_eq!(names(&only_next), ["next"]);
    server.shutdown().await;
}

/// A reload that would leave a connected node with no listener (or no cluster) at all is
/// refused as a load error, and the proxy keeps everything; unless the server allows it.
#[tokio::test]
async fn a_reload_that_empties_a_connected_node_is_refused() {
    let server = standard_server().await;
    let mut c = envoy_like_start(&server, "n1").await;
    let errors = server.set_bad_file("listeners.yaml", "{}\n");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("would remove every listener")
            && errors[0].contains("\"n1\"")
            && errors[0].contains("--allow-empty"),
        "{errors:?}"
    );
    c.expect_quiet(std::time::Duration::from_millis(300)).await;
    let status = server.status().await;
    let config = status.config.expect("a load was reported");
    assert!(!config.ok && config.errors[0].contains("every listener"));
    // Removing one of two listeners is an ordinary change.
    server.set_files(&[(
        "listeners.yaml",
        &format!(
            "{}{}",
            rds_listener("http", 10000, "main"),
            support::listener_item("other", 10001, "main")
        ),
    )]);
    let lds = c.recv_type(Listener).await;
    assert_eq!(names(&lds), ["http", "other"]);
    c.ack(&lds, &[]).await;
    server.set_file("listeners.yaml", &rds_listener("http", 10000, "main"));
    assert_eq!(names(&c.recv_type(Listener).await), ["http"]);
    server.shutdown().await;
}

#[tokio::test]
async fn allow_empty_lets_a_reload_empty_a_node() {
    let dir = tempfile::tempdir().expect("tmp");
    support::write(
        dir.path(),
        "clusters.yaml",
        &eds_cluster("backend", "1s", 8080),
    );
    let cache = std::sync::Arc::new(switchyard::cache::Cache::new());
    let reloader = switchyard::publish::Reloader::new(
        vec![dir.path().to_path_buf()],
        switchyard::config::LoadOptions {
            allow_empty: true,
            ..Default::default()
        },
        std::sync::Arc::clone(&cache),
        Default::default(),
    );
    reloader.reload().expect("loads");
    cache
        .current()
        .snapshot_for(&switchyard::config::selector::NodeFacts::new("n1", "test")); // a node of the group connected
    support::write(dir.path(), "clusters.yaml", "{}\n");
    reloader.reload().expect("allowed");
    assert!(cache
        .current()
        .snapshot_for(&switchyard::config::selector::NodeFacts::new("n1", "test"))
        .get(Cluster)
        .resources
        .is_empty());
}

fn limits(limits: switchyard::server::Limits) -> switchyard::server::ServeOptions {
    switchyard::server::ServeOptions {
        limits,
        ..Default::default()
    }
}

/// Limits: a connection that sends nothing is closed, a stream that never sends a request
/// is ended with DEADLINE_EXCEEDED, and one that names too many resources with
/// RESOURCE_EXHAUSTED; each is counted, and a well-behaved client on the same server is not
/// affected.
#[tokio::test]
async fn streams_past_a_limit_are_ended_with_a_clear_status_and_counted() {
    let server = TestServer::start_with(
        &[("clusters.yaml", &eds_cluster("backend", "1s", 8080))],
        limits(switchyard::server::Limits {
            first_request_timeout: std::time::Duration::from_millis(200),
            max_names_per_stream: 3,
            handshake_timeout: std::time::Duration::from_millis(200),
            ..Default::default()
        }),
    )
    .await;
    let mut good = server.ads("good").await;
    good.subscribe(Cluster, &[]).await;
    let cds = good.recv_type(Cluster).await;

    let mut mute = tokio::net::TcpStream::connect(server.addr)
        .await
        .expect("connect");
    let mut got = Vec::new();
    let read = tokio::io::AsyncReadExt::read_to_end(&mut mute, &mut got);
    tokio::time::timeout(support::WAIT, read)
        .await
        .expect("a connection that sends nothing is closed")
        .expect("read");

    let mut silent = server.ads("silent").await;
    let status = silent.recv_error().await;
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert!(status.message().contains("--first-request-timeout"));

    let mut greedy = server.ads("greedy").await;
    greedy.subscribe(Endpoint, &["a", "b", "c", "d"]).await;
    let status = greedy.recv_error().await;
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("--max-names-per-stream"),
        "{status:?}"
    );

    // The good stream goes on.
    good.ack(&cds, &[]).await;
    server.set_file("clusters.yaml", &eds_cluster("backend", "2s", 8080));
    assert_eq!(names(&good.recv_type(Cluster).await), ["backend"]);
    let (_, metrics) = server.admin_get("/metrics").await;
    for limit in [
        "first_request_timeout",
        "names_per_stream",
        "handshake_timeout",
    ] {
        assert!(
            metrics.contains(&format!(
                "switchyard_limit_rejections_total{{limit=\"{limit}\"}} 1"
            )),
            "{limit}: {metrics}"
        );
    }
    server.shutdown().await;
}

/// Past `--max-new-streams-per-second` (its burst used) a new stream ends at once with
/// RESOURCE_EXHAUSTED, counted and shown in `/status`; the streams let in are served, and
/// once the bucket refills a retry is let in.
#[tokio::test]
async fn new_streams_past_the_admission_rate_are_turned_away_and_let_in_later() {
    let server = TestServer::start_with(
        &[("clusters.yaml", &eds_cluster("backend", "1s", 8080))],
        limits(switchyard::server::Limits {
            new_streams: Some(switchyard::server::admission::StreamRate {
                per_second: 2,
                burst: 2,
            }),
            ..Default::default()
        }),
    )
    .await;
    let mut first = server.ads("first").await;
    first.subscribe(Cluster, &[]).await;
    let mut second = server.ads("second").await;
    second.subscribe(Cluster, &[]).await;
    // Turned away on opening, before any request.
    let mut third = server.ads("third").await;
    let status = third.recv_error().await;
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("--max-new-streams-per-second"),
        "{status:?}"
    );
    assert_eq!(names(&first.recv_type(Cluster).await), ["backend"]);
    assert_eq!(names(&second.recv_type(Cluster).await), ["backend"]);
    let shown = server
        .status()
        .await
        .new_streams
        .expect("the limit is shown");
    assert_eq!(
        (shown.per_second, shown.burst, shown.turned_away),
        (2, 2, 1)
    );
    let (_, metrics) = server.admin_get("/metrics").await;
    assert!(
        metrics.contains("switchyard_limit_rejections_total{limit=\"new_streams\"} 1"),
        "{metrics}"
    );
    // 2 a second: a retry after 600 ms is let in.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let mut retry = server.ads("third").await;
    retry.subscribe(Cluster, &[]).await;
    assert_eq!(names(&retry.recv_type(Cluster).await), ["backend"]);
    server.shutdown().await;
}

/// Past `--max-connections` a new connection is closed at once; the open one goes on.
#[tokio::test]
async fn connections_past_the_limit_are_closed_and_the_others_go_on() {
    let server = TestServer::start_with(
        &[("clusters.yaml", &eds_cluster("backend", "1s", 8080))],
        limits(switchyard::server::Limits {
            max_connections: 1,
            ..Default::default()
        }),
    )
    .await;
    let mut first = server.ads("first").await;
    first.subscribe(Cluster, &[]).await;
    let cds = first.recv_type(Cluster).await;
    let second = tonic::transport::Channel::from_shared(format!("http://{}", server.addr))
        .expect("uri")
        .connect()
        .await;
    let refused = match second {
        Err(_) => true,
        Ok(channel) => {
            use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
            let (_tx, rx) = mpsc::channel(1);
            AggregatedDiscoveryServiceClient::new(channel)
                .stream_aggregated_resources(ReceiverStream::new(rx))
                .await
                .is_err()
        }
    };
    assert!(refused, "a second connection was served");
    first.ack(&cds, &[]).await;
    server.set_file("clusters.yaml", &eds_cluster("backend", "2s", 8080));
    assert_eq!(names(&first.recv_type(Cluster).await), ["backend"]);
    let (_, metrics) = server.admin_get("/metrics").await;
    // At least the one refused (tonic may try again); listed from the start at 0.
    let refusals = metrics
        .lines()
        .find_map(|l| l.strip_prefix("switchyard_limit_rejections_total{limit=\"connections\"} "))
        .and_then(|v| v.parse::<u64>().ok());
    assert!(refusals.is_some_and(|n| n >= 1), "{metrics}");
    server.shutdown().await;
}

/// `--max-connection-age`: once a connection reaches its age (give or take 10%), its ADS
/// stream ends with UNAVAILABLE (the client reconnects, perhaps to another replica), it is
/// counted, and a reconnecting client is served as usual.
#[tokio::test]
async fn a_connection_past_its_age_ends_its_streams_and_the_client_reconnects() {
    let server = TestServer::start_with(
        &[("clusters.yaml", &eds_cluster("backend", "1s", 8080))],
        limits(switchyard::server::Limits {
            connection_age: switchyard::server::ConnectionAge {
                max: Some(std::time::Duration::from_millis(500)),
                grace: std::time::Duration::from_millis(500),
            },
            ..Default::default()
        }),
    )
    .await;
    let mut c = server.ads("aged").await;
    c.subscribe(Cluster, &[]).await;
    let cds = c.recv_type(Cluster).await;
    c.ack(&cds, &[]).await;
    let status = c.recv_error().await;
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("--max-connection-age"),
        "{status:?}"
    );
    let (_, metrics) = server.admin_get("/metrics").await;
    assert!(
        metrics.contains("switchyard_connections_aged_total 1"),
        "{metrics}"
    );
    // Back with what it holds: nothing is sent again (P13).
    let mut again = server.ads("aged").await;
    again
        .send(request(Cluster, &[], &cds.version_info, ""))
        .await;
    again
        .expect_quiet(std::time::Duration::from_millis(200))
        .await;
    server.shutdown().await;
}

/// Node selectors on `node.metadata` (string values) and `node.locality`: each proxy gets the
/// files its metadata and locality select, over a real stream; two files defining the same
/// cluster for selectors that can never match one node load, and for ones that can, the
/// error names a node both match.
#[tokio::test]
async fn selectors_on_metadata_and_locality_pick_each_proxys_files() {
    use envoy_types::pb::envoy::config::core::v3::Locality;
    use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
    let prod = format!(
        "nodes: [{{metadata: {{env: prod}}}}]\n{}",
        eds_cluster("api", "1s", 8080)
    );
    let eu = format!(
        "nodes: [{{locality: {{region: \"eu-*\"}}, metadata: {{env: dev}}}}]\n{}",
        eds_cluster("api", "2s", 8081)
    );
    let server = TestServer::start(&[("prod.yaml", &prod), ("eu-dev.yaml", &eu)]).await;
    let proxy = |id: &str, env: &str, region: &str| {
        let mut n = node(id, "test");
        n.metadata = Some(Struct {
            fields: [(
                "env".to_string(),
                Value {
                    kind: Some(Kind::StringValue(env.into())),
                },
            )]
            .into(),
        });
        n.locality = Some(Locality {
            region: region.into(),
            ..Default::default()
        });
        n
    };
    let timeout_of = |r: &envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse| {
        use prost::Message;
        let c = envoy_types::pb::envoy::config::cluster::v3::Cluster::decode(
            r.resources[0].value.as_slice(),
        )
        .expect("cluster");
        c.connect_timeout.map(|d| d.seconds)
    };
    let mut a = XdsClient::ads(server.channel().await, proxy("a", "prod", "us-east-1")).await;
    a.subscribe(Cluster, &[]).await;
    assert_eq!(timeout_of(&a.recv_type(Cluster).await), Some(1));
    let mut b = XdsClient::ads(server.channel().await, proxy("b", "dev", "eu-west-1")).await;
    b.subscribe(Cluster, &[]).await;
    assert_eq!(timeout_of(&b.recv_type(Cluster).await), Some(2));
    // A dev proxy outside the EU gets neither file: an empty CDS.
    let mut c = XdsClient::ads(server.channel().await, proxy("c", "dev", "us-east-1")).await;
    c.subscribe(Cluster, &[]).await;
    assert!(c.recv_type(Cluster).await.resources.is_empty());

    // A file whose selector can match a node that prod.yaml does: a duplicate, with a node
    // both match.
    let errors = server.set_bad_file(
        "edge.yaml",
        &format!(
            "nodes: [{{id: \"edge-*\"}}]\n{}",
            eds_cluster("api", "3s", 8082)
        ),
    );
    assert!(
        errors.iter().any(|e| e.contains("defined twice")
            && e.contains("both match a node with id=\"edge-\"")
            && e.contains("metadata.env=\"prod\"")),
        "{errors:?}"
    );
    server.shutdown().await;
}

/// One proxy subscribed to route `main` by name (RDS over ADS), synced; then `before`
/// cluster-only changes, a route the proxy NACKs, and `after` cluster-only changes more
/// (the bad route still in the files): what `/status` says of its RDS, and what
/// `config-dump` shows.
async fn nack_after_unrelated_changes(
    keep: usize,
    before: u32,
    after: u32,
) -> (switchyard::admin::TypeStatusJson, String, u64) {
    let server = TestServer::start_daemon(
        &[
            ("clusters.yaml", &eds_cluster("backend", "1s", 8080)),
            ("routes.yaml", &route_to("main", "backend")),
        ],
        switchyard::daemon::Options {
            keep_generations: keep,
            ..Default::default()
        },
    )
    .await;
    let mut c = server.ads("edge-1").await;
    c.subscribe(Route, &["main"]).await;
    let good = c.recv_type(Route).await;
    c.ack(&good, &["main"]).await;
    let mut seconds = 1;
    let mut unrelated = |server: &TestServer| {
        seconds += 1;
        server.set_file(
            "clusters.yaml",
            &eds_cluster("backend", &format!("{seconds}s"), 8080),
        );
    };
    for _ in 0..before {
        unrelated(&server);
    }
    let last_good = server.cache.current().number;
    // Lua that fails when run: the loader cannot see it, Envoy refuses it.
    let bad_route = format!(
        "{}            {}\n",
        route_to("main", "backend"),
        support::bad_lua_per_route()
    );
    server.set_file("routes.yaml", &bad_route);
    let bad = c.recv_type(Route).await;
    c.nack(&bad, &["main"], &good.version_info, "script load error")
        .await;
    for _ in 0..after {
        unrelated(&server);
    }
    let rds = loop {
        let status = server.status().await;
        let rds = status.nodes[0].types["RDS"].clone();
        if rds.state == switchyard::fleet::SyncStatus::Nacked {
            break rds;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let out = support::cli(vec![
        "config-dump".into(),
        "edge-1".into(),
        "--admin-addr".into(),
        server.admin_addr.to_string(),
    ])
    .await;
    let dump = String::from_utf8_lossy(&out.stdout).into_owned();
    (rds, dump, last_good)
}

/// P5, the way back whatever came between: a route NACKed after four cluster-only changes.
/// The route's version is that of the names it asks for (P9), never a generation's type
/// version; what the node runs is found by content: `/status` names the generation just
/// before the bad one as its last good, and `config-dump` shows the route it runs. With
/// four more changes after the NACK (the bad route still there), nothing the server keeps
/// (3 generations) serves what it runs: `/status` says how far back it keeps instead, and
/// `config-dump` still shows the route it runs (its stream knows it); a server keeping ten
/// generations names the last good one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p5_the_way_back_is_found_by_content_whatever_came_between() {
    let (rds, dump, last_good) = nack_after_unrelated_changes(0, 4, 0).await;
    assert_eq!(
        rds.last_good.as_ref().map(|g| g.generation),
        Some(last_good),
        "{rds:?}"
    );
    assert!(rds.kept.is_none());
    assert!(
        dump.contains("RDS NACKED: still runs version")
            && dump.contains("1 resource(s) it holds:")
            && dump.contains("- main (version")
            && dump.contains("REJECTED version"),
        "{dump}"
    );

    let (rds, dump, last_good) = nack_after_unrelated_changes(0, 4, 4).await;
    assert!(rds.last_good.is_none(), "{rds:?}");
    let kept = rds.kept.expect("how far back it keeps");
    assert_eq!(kept.generations, 3);
    assert!(kept.oldest > last_good, "{kept:?}");
    assert!(
        dump.contains("1 resource(s) it holds:") && dump.contains("- main (version"),
        "what it runs, from its stream: {dump}"
    );

    let (rds, _, last_good) = nack_after_unrelated_changes(10, 4, 4).await;
    assert_eq!(
        rds.last_good.as_ref().map(|g| g.generation),
        Some(last_good),
        "{rds:?}"
    );
}
