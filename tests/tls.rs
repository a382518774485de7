//! TLS on the xDS port: mutual TLS, node identity binding, private keys only to bound
//! clients, and the server certificate reloaded without a restart or a dropped stream.
//! Certificates are made here (rcgen); everything is on 127.0.0.1.

mod support;

use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
use support::*;
use switchyard::resource::ResourceType::{Cluster, Secret};
use switchyard::server::tls::{acceptor, IdentityPolicy, TlsFiles};
use switchyard::server::ServeOptions;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

/// A CA, and certificates it signs.
struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

/// A certificate and its key, PEM.
struct Leaf {
    cert: String,
    key: String,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("CA");
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate for `dns` names and `uris`.
    fn leaf(&self, dns: &[&str], uris: &[&str]) -> Leaf {
        let key = KeyPair::generate().expect("key");
        let mut params =
            CertificateParams::new(dns.iter().map(|d| d.to_string()).collect::<Vec<_>>())
                .expect("params");
        for uri in uris {
            params
                .subject_alt_names
                .push(SanType::URI((*uri).try_into().expect("ia5")));
        }
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

const SECRET: &str = r#"
clusters: [{ name: c, connect_timeout: 1s }]
secrets:
  - name: cert
    tls_certificate:
      certificate_chain: { inline_string: "CHAIN-PEM" }
      private_key: { inline_string: "KEY-PEM" }
"#;

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
        &[("mesh.yaml", SECRET)],
        ServeOptions {
            tls: Some(acceptor(&files).expect("TLS sets up")),
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
        let refused = match channel(&server, &servers, leaf).await {
            Err(_) => true,
            Ok(ch) => {
                let (_tx, rx) = mpsc::channel(1);
                AggregatedDiscoveryServiceClient::new(ch)
                    .stream_aggregated_resources(ReceiverStream::new(rx))
                    .await
                    .is_err()
            }
        };
        assert!(refused, "served a client without a valid certificate");
    }
    let (_, metrics) = server.admin_get("/metrics").await;
    assert!(
        metrics.contains("switchyard_identity_mismatches_total 1"),
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
    let mut open = ads(
        channel(&server, &old_ca, Some(&n1))
            .await
            .expect("connects"),
        "n1",
    )
    .await;
    open.subscribe(Cluster, &[]).await;
    let cds = open.recv_type(Cluster).await;
    open.ack(&cds, &[]).await;

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
        channel(&server, &old_ca, Some(&n1)).await.is_err() || {
            // Connecting is lazy in places; the stream must then fail.
            let ch = channel(&server, &old_ca, Some(&n1)).await.expect("ch");
            let (_tx, rx) = mpsc::channel(1);
            AggregatedDiscoveryServiceClient::new(ch)
                .stream_aggregated_resources(ReceiverStream::new(rx))
                .await
                .is_err()
        },
        "the old certificate is still served"
    );
    // The stream opened before the rotation still gets updates.
    server.set_file(
        "mesh.yaml",
        &SECRET.replace("connect_timeout: 1s", "connect_timeout: 2s"),
    );
    assert_eq!(names(&open.recv_type(Cluster).await), ["c"]);
    server.shutdown().await;
}
