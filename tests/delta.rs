//! Integration tests of Incremental xDS: a tonic delta client over a real socket against the
//! whole server in-process. Rules are cited as docs/protocol.md states them.

use switchyard_testkit as support;

use std::collections::HashMap;
use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::Cluster as ClusterMsg;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
use envoy_types::pb::envoy::service::discovery::v3::Resource as PbResource;
use envoy_types::pb::envoy::service::endpoint::v3::endpoint_discovery_service_client::EndpointDiscoveryServiceClient;
use envoy_types::pb::envoy::service::route::v3::virtual_host_discovery_service_client::VirtualHostDiscoveryServiceClient;
use prost::Message;
use support::*;
use switchyard::resource::ResourceType::{Cluster, Endpoint, Listener, Route, VirtualHost};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// `n` static clusters `c0..`, cluster `c{changed}` with another connect_timeout, without
/// the ones in `skip`.
fn clusters(n: usize, changed: Option<usize>, skip: &[usize]) -> String {
    let mut out = String::from("clusters:\n");
    for i in (0..n).filter(|i| !skip.contains(i)) {
        let timeout = if Some(i) == changed { "2s" } else { "1s" };
        out.push_str(&format!(
            "  - {{ name: c{i}, connect_timeout: {timeout}, type: STATIC }}\n"
        ));
    }
    out
}

async fn wildcard_client(server: &TestServer) -> (DeltaClient, HashMap<String, String>) {
    let mut c = server.delta("n1").await;
    c.subscribe(Cluster, &[], &[]).await;
    let r = c.recv().await;
    c.ack(&r).await;
    let versions = r
        .resources
        .iter()
        .map(|x| (x.name.clone(), x.version.clone()))
        .collect();
    (c, versions)
}

#[tokio::test]
async fn p19_one_change_among_1000_clusters_sends_exactly_that_one() {
    let server = TestServer::start(&[("c.yaml", &clusters(1000, None, &[]))]).await;
    let (mut c, first) = wildcard_client(&server).await;
    assert_eq!(first.len(), 1000);

    server.set_file("c.yaml", &clusters(1000, Some(417), &[]));
    let r = c.recv().await;
    assert_eq!(delta_names(&r), ["c417"]);
    assert!(r.removed_resources.is_empty());
    assert_ne!(
        r.resources[0].version, first["c417"],
        "a new per-resource version"
    );
    assert!(
        !r.system_version_info.is_empty(),
        "system_version_info is set"
    );
    let cluster = ClusterMsg::decode(
        r.resources[0]
            .resource
            .as_ref()
            .expect("a body")
            .value
            .as_slice(),
    )
    .expect("a Cluster");
    assert_eq!(cluster.connect_timeout.expect("timeout").seconds, 2);
    c.ack(&r).await;

    // Delete one: only its name, in removed_resources.
    server.set_file("c.yaml", &clusters(1000, Some(417), &[5]));
    let r = c.recv().await;
    assert!(r.resources.is_empty(), "{:?}", delta_names(&r));
    assert_eq!(r.removed_resources, ["c5"]);
}

#[tokio::test]
async fn p23_reconnect_with_initial_resource_versions_resends_nothing_unchanged() {
    let server = TestServer::start(&[("c.yaml", &clusters(1000, None, &[]))]).await;
    let (c, versions) = wildcard_client(&server).await;
    drop(c);
    // The client comes back claiming everything, one of them at an old version.
    let mut claimed = versions.clone();
    claimed.insert("c9".into(), "stale".into());
    let mut c = server.delta("n1").await;
    let mut r = delta_request(Cluster, &["*"], &[], "");
    r.initial_resource_versions = claimed;
    c.send(r).await;
    let r = c.recv().await;
    assert_eq!(
        delta_names(&r),
        ["c9"],
        "only the one it has at another version"
    );
    assert_eq!(r.resources[0].version, versions["c9"]);
    assert!(r.removed_resources.is_empty());
}

/// A failover: a proxy moves to another replica serving the same files and claims
/// exactly what that replica has (content-hash versions are the same on every replica). It
/// is sent nothing, and `/status` shows the type SYNCED at the version the first replica
/// sent, as for SotW (P13, P23).
#[tokio::test]
async fn p23_a_proxy_moved_to_another_replica_with_current_versions_is_synced_and_sent_nothing() {
    let files = [("c.yaml", clusters(5, None, &[]))];
    let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (*n, t.as_str())).collect();
    let a = TestServer::start(&files).await;
    let b = TestServer::start(&files).await;
    let mut c = a.delta("n1").await;
    c.subscribe(Cluster, &[], &[]).await;
    let first = c.recv().await;
    c.ack(&first).await;
    let claimed: HashMap<String, String> = first
        .resources
        .iter()
        .map(|x| (x.name.clone(), x.version.clone()))
        .collect();
    drop(c);
    let mut c = b.delta("n1").await;
    let mut r = delta_request(Cluster, &["*"], &[], "");
    r.initial_resource_versions = claimed;
    c.send(r).await;
    c.expect_quiet(Duration::from_millis(300)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let status = b.status().await;
        let cds = status
            .nodes
            .iter()
            .find(|n| n.node_id == "n1")
            .and_then(|n| n.types.get("CDS").cloned());
        if let Some(cds) = cds {
            assert_eq!(cds.state, switchyard::fleet::SyncStatus::Synced, "{cds:?}");
            assert_eq!(cds.version_acked, first.system_version_info);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "n1 never showed in /status"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn p20_a_missing_name_is_removed_at_once_then_sent_when_a_file_adds_it() {
    let server = TestServer::start(&[("c.yaml", &clusters(3, None, &[]))]).await;
    let mut c = server.delta("n1").await;
    c.subscribe(Cluster, &["c1", "later"], &[]).await;
    let r = c.recv().await;
    assert_eq!(delta_names(&r), ["c1"]);
    assert_eq!(r.removed_resources, ["later"]);
    c.ack(&r).await;
    server.set_file(
        "later.yaml",
        "clusters:\n  - { name: later, connect_timeout: 1s, type: STATIC }\n",
    );
    let r = c.recv().await;
    assert_eq!(delta_names(&r), ["later"]);
    assert!(r.removed_resources.is_empty());
}

#[tokio::test]
async fn p32_a_missing_name_is_not_found_at_once_and_again_when_its_file_removes_it() {
    let server = TestServer::start(&[("c.yaml", &clusters(3, None, &[]))]).await;
    let mut c = server.delta("n1").await;
    c.subscribe(Cluster, &["c1", "later"], &[]).await;
    let r = c.recv().await;
    assert_eq!(not_found(&r.resource_errors), ["later"]);
    c.ack(&r).await;
    server.set_file(
        "later.yaml",
        "clusters:\n  - { name: later, connect_timeout: 1s, type: STATIC }\n",
    );
    let r = c.recv().await;
    assert_eq!(delta_names(&r), ["later"]);
    assert!(not_found(&r.resource_errors).is_empty());
    c.ack(&r).await;
    server.set_file("later.yaml", "clusters: []\n");
    let r = c.recv().await;
    assert_eq!(r.removed_resources, ["later"]);
    assert_eq!(not_found(&r.resource_errors), ["later"]);
}

#[tokio::test]
async fn p33_an_unknown_type_on_incremental_ads_is_removed_and_not_found_and_the_stream_goes_on() {
    let server = TestServer::start(&[("c.yaml", &clusters(3, None, &[]))]).await;
    let mut c = server.delta("n1").await;
    let mut r = delta_request(Cluster, &["a"], &[], "");
    r.type_url = "type.googleapis.com/foo.v3.Bar".into();
    c.send(r).await;
    let answer = c.recv().await;
    assert_eq!(answer.type_url, "type.googleapis.com/foo.v3.Bar");
    assert_eq!(answer.removed_resources, ["a"]);
    assert_eq!(not_found(&answer.resource_errors), ["a"]);
    c.subscribe(Cluster, &["c1"], &[]).await;
    let r = c.recv().await;
    assert_eq!(delta_names(&r), ["c1"]);
    let status = server.status().await;
    assert_eq!(status.nodes[0].streams[0].unknown_types[0].names, ["a"]);
}

#[tokio::test]
async fn p17_p18_nack_then_subscription_change_with_a_stale_nonce() {
    let server = TestServer::start(&[("c.yaml", &clusters(3, None, &[]))]).await;
    let mut c = server.delta("n1").await;
    c.subscribe(Cluster, &["c0"], &[]).await;
    let r = c.recv().await;
    c.nack(&r, "rejected for the test").await;
    // A subscription change carrying an old nonce is still honoured (P18).
    c.send(delta_request(Cluster, &["c2"], &[], "no-such-nonce"))
        .await;
    let r = c.recv().await;
    assert_eq!(delta_names(&r), ["c2"]);
}

#[tokio::test]
async fn per_type_delta_service_and_wrong_type() {
    let server = TestServer::start(&[("e.yaml", &eds_cluster("backend", "1s", 8080))]).await;
    let (tx, rx) = mpsc::channel(8);
    let responses = EndpointDiscoveryServiceClient::new(server.channel().await)
        .delta_endpoints(ReceiverStream::new(rx))
        .await
        .expect("DeltaEndpoints opens")
        .into_inner();
    let mut c = DeltaClient::from_parts(node("n1", "test"), tx, responses);
    c.subscribe(Endpoint, &["backend"], &[]).await;
    let r = c.recv().await;
    assert_eq!(r.type_url, Endpoint.type_url());
    assert_eq!(delta_names(&r), ["backend"]);
    c.subscribe(Listener, &[], &[]).await;
    assert_eq!(c.recv_error().await.code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn p24_vhds_on_demand_by_alias_and_by_route_config_namespace() {
    let vhosts = r#"
virtual_hosts:
  - name: main/shop
    domains: [shop.example.com]
    routes: [{ match: { prefix: / }, direct_response: { status: 200 } }]
  - name: main/blog
    domains: [blog.example.com]
    routes: [{ match: { prefix: / }, direct_response: { status: 200 } }]
"#;
    let server = TestServer::start(&[("v.yaml", vhosts)]).await;
    let (tx, rx) = mpsc::channel(8);
    let responses = VirtualHostDiscoveryServiceClient::new(server.channel().await)
        .delta_virtual_hosts(ReceiverStream::new(rx))
        .await
        .expect("DeltaVirtualHosts opens")
        .into_inner();
    let mut c = DeltaClient::from_parts(node("n1", "test"), tx, responses);
    c.subscribe(
        VirtualHost,
        &["main/shop.example.com", "main/nope.example.com"],
        &[],
    )
    .await;
    let r = c.recv().await;
    assert_eq!(delta_names(&r), ["main/shop", "main/nope.example.com"]);
    assert_eq!(r.resources[0].aliases, ["main/shop.example.com"]);
    assert!(r.resources[0].resource.is_some());
    // Unresolved alias: named by itself, listed in aliases, no body (Envoy's on-demand form).
    assert_eq!(r.resources[1].aliases, ["main/nope.example.com"]);
    assert!(r.resources[1].resource.is_none());
    assert!(r.removed_resources.is_empty());
    c.ack(&r).await;
    c.subscribe(VirtualHost, &["main"], &[]).await;
    let r = c.recv().await;
    assert_eq!(delta_names(&r), ["main/blog", "main/shop"]);
}

/// A cluster with a 1 s TTL (the shortest allowed), heartbeats every third of it.
const TTL_CLUSTER: &str =
    "clusters:\n  - { name: t, connect_timeout: 1s, type: STATIC, ttl: 1s }\n  - { name: plain, connect_timeout: 1s, type: STATIC }\n";

/// On tokio's paused clock: the heartbeats' times are exact, and nothing waits in real time.
#[tokio::test(start_paused = true)]
async fn p25_ttl_and_heartbeats_for_clients_that_announce_support() {
    let server = TestServer::start(&[("t.yaml", TTL_CLUSTER)]).await;
    let mut n = node("n1", "test");
    n.client_features = vec!["xds.config.supports-resource-ttl".into()];
    let mut c = DeltaClient::ads(server.channel().await, n).await;
    c.subscribe(Cluster, &[], &[]).await;
    let r = c.recv().await;
    let by_name: HashMap<_, _> = r.resources.iter().map(|x| (x.name.as_str(), x)).collect();
    let ttl = by_name["t"].ttl.expect("t carries its TTL");
    assert_eq!((ttl.seconds, ttl.nanos), (1, 0));
    assert!(by_name["plain"].ttl.is_none());
    let version = by_name["t"].version.clone();
    c.ack(&r).await;
    // Heartbeats: same version, no body, the TTL again; only for `t`, each a third of the
    // TTL after the last time it went out.
    let mut last = tokio::time::Instant::now();
    for _ in 0..3 {
        let hb = c.recv().await;
        let now = tokio::time::Instant::now();
        // Tokio's timers fire on the millisecond after the deadline.
        let interval = switchyard::protocol::heartbeat_interval(Duration::from_secs(1));
        let waited = now - last;
        assert!(
            waited >= interval && waited <= interval + Duration::from_millis(1),
            "a heartbeat {waited:?} after the last, not {interval:?}"
        );
        last = now;
        assert_eq!(delta_names(&hb), ["t"]);
        assert_eq!(hb.resources[0].version, version);
        assert!(
            hb.resources[0].resource.is_none(),
            "a heartbeat has no body"
        );
        assert!(hb.resources[0].ttl.is_some());
        c.ack(&hb).await;
    }
}

/// On tokio's paused clock: the wait for a heartbeat that must not come takes no real time.
#[tokio::test(start_paused = true)]
async fn p27_clients_without_the_feature_never_see_ttls() {
    let server = TestServer::start(&[("t.yaml", TTL_CLUSTER)]).await;
    let mut c = server.delta("n1").await;
    c.subscribe(Cluster, &[], &[]).await;
    let r = c.recv().await;
    assert!(r
        .resources
        .iter()
        .all(|x| x.ttl.is_none() && x.resource.is_some()));
    c.ack(&r).await;
    // No heartbeat follows: the next thing is the answer to a new subscription.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    c.subscribe(Listener, &[], &[]).await;
    let r = c.recv().await;
    assert_eq!(r.type_url, Listener.type_url());

    // SotW without resource-in-sotw: plain resources.
    let mut s = server.ads("n2").await;
    s.subscribe(Cluster, &[]).await;
    let r = s.recv_type(Cluster).await;
    assert!(r.resources.iter().all(|a| a.type_url == Cluster.type_url()));
}

#[tokio::test]
async fn p26_sotw_wraps_ttl_resources_only_for_resource_in_sotw_clients() {
    let server = TestServer::start(&[("t.yaml", TTL_CLUSTER)]).await;
    let mut n = node("n1", "test");
    n.client_features = vec![
        "xds.config.supports-resource-ttl".into(),
        "xds.config.resource-in-sotw".into(),
    ];
    let mut c = XdsClient::ads(server.channel().await, n).await;
    c.subscribe(Cluster, &[]).await;
    let r: DiscoveryResponse = c.recv_type(Cluster).await;
    let wrapped: Vec<_> = r
        .resources
        .iter()
        .filter(|a| a.type_url == "type.googleapis.com/envoy.service.discovery.v3.Resource")
        .map(|a| PbResource::decode(a.value.as_slice()).expect("a Resource"))
        .collect();
    assert_eq!(wrapped.len(), 1, "only the TTL'd cluster is wrapped");
    assert_eq!(wrapped[0].name, "t");
    assert_eq!(wrapped[0].ttl.expect("ttl").seconds, 1);
    let inner = wrapped[0].resource.as_ref().expect("the cluster inside");
    assert_eq!(
        ClusterMsg::decode(inner.value.as_slice())
            .expect("Cluster")
            .name,
        "t"
    );
    assert_eq!(r.resources.len(), 2);
    // Refreshed: CDS is full state, so the whole set comes again with the same version.
    c.ack(&r, &[]).await;
    let again = c.recv_type(Cluster).await;
    assert_eq!(again.version_info, r.version_info);
    assert_eq!(again.resources.len(), 2);
}

#[tokio::test]
async fn p28_a_changed_cluster_brings_its_unchanged_load_assignment_again() {
    let server = TestServer::start(&[("e.yaml", &eds_cluster("backend", "1s", 8080))]).await;
    let mut c = server.delta("n1").await;
    c.subscribe(Cluster, &[], &[]).await;
    let r = c.recv().await;
    assert_eq!(r.type_url, Cluster.type_url());
    c.ack(&r).await;
    c.subscribe(Endpoint, &["backend"], &[]).await;
    let r = c.recv().await;
    assert_eq!(r.type_url, Endpoint.type_url());
    c.ack(&r).await;
    server.set_file("e.yaml", &eds_cluster("backend", "3s", 8080));
    let cds = c.recv().await;
    assert_eq!(
        (cds.type_url.as_str(), delta_names(&cds)),
        (Cluster.type_url(), vec!["backend".to_string()])
    );
    let eds = c.recv().await;
    assert_eq!(
        (eds.type_url.as_str(), delta_names(&eds)),
        (Endpoint.type_url(), vec!["backend".to_string()])
    );
}

/// P29/P30 over a socket, Incremental ADS: a route cut-over from `backend` to `next` with
/// `backend` removed, in one reload. While the client holds its CDS ACK the route does not
/// move; `backend` is removed only after the route has.
#[tokio::test]
async fn p29_p30_route_cut_over_is_ordered_make_before_break() {
    let server = TestServer::start(&[
        ("clusters.yaml", &eds_cluster("backend", "1s", 8080)),
        ("listeners.yaml", &rds_listener("http", 10000, "main")),
        ("routes.yaml", &route_to("main", "backend")),
    ])
    .await;
    let mut c = server.delta("n1").await;
    for (kind, names) in [
        (Cluster, &[][..]),
        (Endpoint, &["backend"][..]),
        (Listener, &[][..]),
        (Route, &["main"][..]),
    ] {
        c.subscribe(kind, names, &[]).await;
        let r = c.recv().await;
        c.ack(&r).await;
    }
    server.set_files(&[
        ("clusters.yaml", &eds_cluster("next", "1s", 8081)),
        ("routes.yaml", &route_to("main", "next")),
    ]);

    let cds = c.recv().await;
    assert_eq!(cds.type_url, Cluster.type_url());
    assert_eq!(delta_names(&cds), ["next"]);
    assert!(
        cds.removed_resources.is_empty(),
        "nothing removed in step 1"
    );
    c.subscribe(Endpoint, &["next"], &[]).await;
    let eds = c.recv().await;
    assert_eq!(delta_names(&eds), ["next"]);
    c.ack(&eds).await;
    c.expect_quiet(std::time::Duration::from_millis(300)).await;
    c.ack(&cds).await;
    let rds = c.recv().await;
    assert_eq!(rds.type_url, Route.type_url());
    assert_eq!(delta_names(&rds), ["main"]);
    c.ack(&rds).await;
    let cds = c.recv().await;
    assert_eq!(cds.type_url, Cluster.type_url());
    assert_eq!(cds.removed_resources, ["backend"]);
    c.ack(&cds).await;
    server.shutdown().await;
}

/// LEDS (P34) over Incremental ADS with a tonic client: a glob subscription gets each member
/// by its full URL; one host changed in the file sends that one, one removed sends exactly
/// its name in `removed_resources`, with no resource error.
#[tokio::test]
async fn p34_a_glob_collection_sends_its_members_and_one_removal_per_removed_host() {
    let collection = "xdstp://test/envoy.config.endpoint.v3.LbEndpoint/leds/z1";
    let hosts = |ports: &[(usize, u16)]| {
        let mut text = String::from("lb_endpoints:\n");
        for (i, port) in ports {
            text.push_str(&format!(
                "  - {{ name: \"{collection}/h{i}\", endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }} }}\n"
            ));
        }
        text
    };
    let all: Vec<(usize, u16)> = (0..100).map(|i| (i, 8000)).collect();
    let server = TestServer::start(&[("leds.yaml", &hosts(&all))]).await;
    let mut c = server.delta("n1").await;
    let glob = format!("{collection}/*");
    c.subscribe(
        switchyard::resource::ResourceType::LbEndpoint,
        &[&glob],
        &[],
    )
    .await;
    let r = c.recv().await;
    assert_eq!(r.resources.len(), 100);
    assert!(r.resources[0].name.starts_with(&format!("{collection}/h")));
    assert!(not_found(&r.resource_errors).is_empty());
    c.ack(&r).await;
    let mut changed = all.clone();
    changed[41].1 = 9000;
    server.set_file("leds.yaml", &hosts(&changed));
    let r = c.recv().await;
    assert_eq!(delta_names(&r), [format!("{collection}/h41")]);
    c.ack(&r).await;
    changed.remove(7);
    server.set_file("leds.yaml", &hosts(&changed));
    let r = c.recv().await;
    assert!(r.resources.is_empty());
    assert_eq!(r.removed_resources, [format!("{collection}/h7")]);
    assert!(not_found(&r.resource_errors).is_empty());
}
