//! TLS on the xDS port: mutual TLS, node identity binding, private keys only to bound
//! clients, and the server certificate reloaded without a restart or a dropped stream.
//! Certificates are made here (rcgen); everything is on 127.0.0.1.

use switchyard_testkit as support;

use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use support::certs::{Ca, Leaf};
use support::*;
use switchyard::resource::ResourceType::{Cluster, Secret};
use switchyard::server::tls::{IdentityPolicy, Tls, TlsFiles};
use switchyard::server::ServeOptions;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

/// A cluster, and a TLS secret whose key is marked `KEY-PEM`.
fn secret_file() -> String {
    format!(
        "clusters: [{{ name: c, connect_timeout: 1s }}]\nsecrets:\n{}",
        support::certs::marked_tls_secret("cert")
    )
}

/// The server: TLS with `server` (files in `dir`), mutual TLS with `clients`, nodes bound
/// to `spiffe://test/{id}`.
async fn server(dir: &std::path::Path, server: &Leaf, clients: &Ca) -> TestServer {
    let files = TlsFiles {
        cert: dir.join("server.pem"),
        key: dir.join("server.key"),
        client_ca: Some(dir.join("clients.pem")),
    };
    std::fs::write(&files.cert, &server.cert).expect("write");
    std::fs::write(&files.key, &server.key).expect("write");
    std::fs::write(dir.join("clients.pem"), &clients.pem).expect("write");
    TestServer::start_with(
        &[("mesh.yaml", &secret_file())],
        ServeOptions {
            tls: Some(Tls::xds(&files).expect("TLS sets up")),
            identity: Some(Arc::new(
                IdentityPolicy::new("spiffe://test/{id}").expect("policy"),
            )),
            ..Default::default()
        },
    )
    .await
}

/// A channel to `server` trusting `ca`, presenting `leaf` if given.
async fn channel(server: &TestServer, ca: &Ca, leaf: Option<&Leaf>) -> Result<Channel, String> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca.pem))
        .domain_name("localhost");
    if let Some(leaf) = leaf {
        tls = tls.identity(Identity::from_pem(&leaf.cert, &leaf.key));
    }
    Channel::from_shared(format!("https://{}", server.addr))
        .map_err(|e| e.to_string())?
        .tls_config(tls)
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| format!("{e:?}"))
}

/// Whether `server` refuses a connection trusting `ca` and presenting `leaf`: no channel,
/// or (connecting is lazy in places) no stream.
async fn refused(server: &TestServer, ca: &Ca, leaf: Option<&Leaf>) -> bool {
    match channel(server, ca, leaf).await {
        Err(_) => true,
        Ok(ch) => {
            let (_tx, rx) = mpsc::channel(1);
            AggregatedDiscoveryServiceClient::new(ch)
                .stream_aggregated_resources(ReceiverStream::new(rx))
                .await
                .is_err()
        }
    }
}

/// An ADS stream for node `n1` presenting `leaf`, trusting `ca`, that took its clusters and
/// ACKed them.
async fn synced(server: &TestServer, ca: &Ca, leaf: &Leaf) -> XdsClient {
    let channel = channel(server, ca, Some(leaf)).await.expect("connects");
    let mut c = ads(channel, "n1").await;
    c.subscribe(Cluster, &[]).await;
    let cds = c.recv_type(Cluster).await;
    c.ack(&cds, &[]).await;
    c
}

/// An ADS stream for node `id` over `channel`, or the status it was refused with.
async fn ads(channel: Channel, id: &str) -> XdsClient {
    XdsClient::ads(channel, node(id, "test")).await
}

#[tokio::test]
async fn a_bound_client_gets_its_config_and_private_keys() {
    let dir = tempfile::tempdir().expect("tmp");
    let (servers, clients) = (Ca::new("servers"), Ca::new("clients"));
    let server = server(dir.path(), &servers.leaf(&["localhost"], &[]), &clients).await;
    let n1 = clients.leaf(&[], &["spiffe://test/n1"]);
    let mut c = ads(
        channel(&server, &servers, Some(&n1))
            .await
            .expect("connects"),
        "n1",
    )
    .await;
    c.subscribe(Cluster, &[]).await;
    assert_eq!(names(&c.recv_type(Cluster).await), ["c"]);
    c.subscribe(Secret, &["cert"]).await;
    let sds = c.recv_type(Secret).await;
    let body = String::from_utf8_lossy(&sds.resources[0].value).into_owned();
    assert!(
        body.contains("KEY-PEM"),
        "a bound client gets the key: {body}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_client_claiming_another_node_or_without_a_certificate_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let (servers, clients) = (Ca::new("servers"), Ca::new("clients"));
    let server = server(dir.path(), &servers.leaf(&["localhost"], &[]), &clients).await;
    let n1 = clients.leaf(&[], &["spiffe://test/n1"]);
    let mut impostor = ads(
        channel(&server, &servers, Some(&n1))
            .await
            .expect("connects"),
        "n2",
    )
    .await;
    impostor.subscribe(Cluster, &[]).await;
    let status = impostor.recv_error().await;
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("spiffe://test/n2"), "{status:?}");

    // No client certificate, or one from another CA: no connection at all.
    let stranger = Ca::new("strangers").leaf(&[], &["spiffe://test/n1"]);
    for leaf in [None, Some(&stranger)] {
        assert!(
            refused(&server, &servers, leaf).await,
            "served a client without a valid certificate"
        );
    }
    // P36: a fetch is held to the same binding.
    let fetched = envoy_types::pb::envoy::service::cluster::v3::cluster_discovery_service_client::ClusterDiscoveryServiceClient::new(
        channel(&server, &servers, Some(&n1)).await.expect("connects"),
    )
    .fetch_clusters(envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest {
        node: Some(node("n2", "test")),
        ..Default::default()
    })
    .await
    .expect_err("claims another node");
    assert_eq!(fetched.code(), tonic::Code::PermissionDenied, "{fetched:?}");
    let (_, metrics) = server.admin_get("/metrics").await;
    assert!(
        metrics.contains("switchyard_identity_mismatches_total 2"),
        "{metrics}"
    );
    server.shutdown().await;
}

/// The server certificate is replaced on disk: new connections get the new one, without a
/// restart, and an open stream goes on.
#[tokio::test]
async fn the_server_certificate_is_reloaded_and_open_streams_go_on() {
    let dir = tempfile::tempdir().expect("tmp");
    let (old_ca, new_ca, clients) = (Ca::new("old"), Ca::new("new"), Ca::new("clients"));
    let server = server(dir.path(), &old_ca.leaf(&["localhost"], &[]), &clients).await;
    let n1 = clients.leaf(&[], &["spiffe://test/n1"]);
    let mut open = synced(&server, &old_ca, &n1).await;

    let rotated = new_ca.leaf(&["localhost"], &[]);
    // The key first, then the certificate: mid-rotation the old pair keeps serving.
    std::fs::write(dir.path().join("server.key"), &rotated.key).expect("write");
    std::fs::write(dir.path().join("server.pem"), &rotated.cert).expect("write");
    let fresh = ads(
        channel(&server, &new_ca, Some(&n1))
            .await
            .expect("the new certificate is served"),
        "n1",
    )
    .await;
    drop(fresh);
    assert!(
        refused(&server, &old_ca, Some(&n1)).await,
        "the old certificate is still served"
    );
    // The stream opened before the rotation still gets updates.
    server.set_file(
        "mesh.yaml",
        &secret_file().replace("connect_timeout: 1s", "connect_timeout: 2s"),
    );
    assert_eq!(names(&open.recv_type(Cluster).await), ["c"]);
    server.shutdown().await;
}

/// The client CA is replaced on disk (a CA rotation): from the next handshake, clients it
/// signed are served and those of the old CA refused, without a restart; a stream opened
/// before goes on.
#[tokio::test]
async fn the_client_ca_is_reloaded_and_open_streams_go_on() {
    let dir = tempfile::tempdir().expect("tmp");
    let (servers, old_clients, new_clients) = (Ca::new("servers"), Ca::new("old"), Ca::new("new"));
    let server = server(dir.path(), &servers.leaf(&["localhost"], &[]), &old_clients).await;
    let old_n1 = old_clients.leaf(&[], &["spiffe://test/n1"]);
    let mut open = synced(&server, &servers, &old_n1).await;

    new_clients.write(dir.path(), "clients");
    let new_n1 = new_clients.leaf(&[], &["spiffe://test/n1"]);
    let mut fresh = ads(
        channel(&server, &servers, Some(&new_n1))
            .await
            .expect("a client of the new CA connects"),
        "n1",
    )
    .await;
    fresh.subscribe(Cluster, &[]).await;
    assert_eq!(names(&fresh.recv_type(Cluster).await), ["c"]);
    assert!(
        refused(&server, &servers, Some(&old_n1)).await,
        "a client of the old CA is still served"
    );

    // A broken CA file keeps the last good one.
    std::fs::write(dir.path().join("clients.pem"), "not a certificate").expect("write");
    assert!(
        !refused(&server, &servers, Some(&new_n1)).await,
        "a broken CA file replaced the good one"
    );

    server.set_file(
        "mesh.yaml",
        &secret_file().replace("connect_timeout: 1s", "connect_timeout: 2s"),
    );
    assert_eq!(names(&open.recv_type(Cluster).await), ["c"]);
    server.shutdown().await;
}
