//! TLS on the xDS port: the server's certificate (reloaded when its files change, without a
//! restart and without touching open connections), mutual TLS with a client CA, and the
//! identity a client certificate proves (its URI SANs, such as a SPIFFE ID, DNS SANs and CN).
//!
//! Owns: reading the PEM files, building the rustls configuration, the handshake, and
//! reading identities from verified certificates. Must not: decide what an identity may do
//! (the stream task checks it against the node it claims).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio_rustls::rustls::crypto::ring::default_provider;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// The TLS files, as the flags name them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// `--tls-cert`: the server's certificate chain, PEM.
    pub cert: PathBuf,
    /// `--tls-key`: its private key, PEM.
    pub key: PathBuf,
    /// `--client-ca`: with it, clients must present a certificate it signed (mutual TLS).
    pub client_ca: Option<PathBuf>,
}

/// TLS could not be set up (at start: a usage error).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{}: {message}", .path.display())]
    File { path: PathBuf, message: String },
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// What a client certificate (verified against the client CA) says its holder is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerIdentity {
    /// URI SANs (SPIFFE IDs: `spiffe://trust-domain/...`).
    pub uris: Vec<String>,
    pub dns: Vec<String>,
    pub common_name: Option<String>,
}

impl PeerIdentity {
    /// Every name the certificate proves, URIs first.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.uris
            .iter()
            .chain(&self.dns)
            .chain(&self.common_name)
            .map(String::as_str)
    }

    /// The identity in a verified end-entity certificate (DER).
    pub fn of(cert: &[u8]) -> Option<PeerIdentity> {
        use x509_parser::extensions::GeneralName;
        let (_, cert) = x509_parser::parse_x509_certificate(cert).ok()?;
        let mut identity = PeerIdentity::default();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::URI(uri) => identity.uris.push(uri.to_string()),
                    GeneralName::DNSName(dns) => identity.dns.push(dns.to_string()),
                    _ => {}
                }
            }
        }
        identity.common_name = cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .map(str::to_string);
        Some(identity)
    }
}

/// How a client certificate must match the node a client claims (`--node-identity`): a
/// template in which `{id}` and `{cluster}` stand for the node's id and cluster, matched
/// exactly against each name the certificate proves (URI SANs, DNS SANs, CN). Examples:
/// `spiffe://example.org/ns/{cluster}/sa/{id}`, `{id}.proxies.example.org`, `{id}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentityPolicy {
    template: String,
}

impl IdentityPolicy {
    /// A policy from its template; it must name the node (`{id}` or `{cluster}`).
    pub fn new(template: &str) -> Result<IdentityPolicy, String> {
        if !template.contains("{id}") && !template.contains("{cluster}") {
            return Err(format!(
                "{template:?} names no node: use {{id}} and/or {{cluster}}, as in \
                 spiffe://example.org/ns/{{cluster}}/sa/{{id}}"
            ));
        }
        Ok(IdentityPolicy {
            template: template.to_string(),
        })
    }

    /// The name a certificate must prove for this node.
    pub fn expected(&self, node_id: &str, node_cluster: &str) -> String {
        self.template
            .replace("{id}", node_id)
            .replace("{cluster}", node_cluster)
    }

    /// Whether `identity` (none without a client certificate) is bound to the node.
    pub fn check(
        &self,
        identity: Option<&PeerIdentity>,
        node_id: &str,
        node_cluster: &str,
    ) -> Result<(), String> {
        let expected = self.expected(node_id, node_cluster);
        let Some(identity) = identity else {
            return Err(format!(
                "no client certificate, and this server binds nodes to certificates \
                 (expected one for {expected:?})"
            ));
        };
        if identity.names().any(|n| n == expected) {
            return Ok(());
        }
        Err(format!(
            "the client certificate proves {:?}, not {expected:?}",
            identity.names().collect::<Vec<_>>()
        ))
    }
}

/// The acceptor for the xDS port.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    let provider = Arc::new(default_provider());
    let resolver = Arc::new(Reloading::load(files.cert.clone(), files.key.clone())?);
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match &files.client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in read_certs(ca)? {
                roots.add(cert).map_err(|e| TlsError::File {
                    path: ca.clone(),
                    message: format!("not a usable CA certificate: {e}"),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(resolver);
    // gRPC is HTTP/2; REST polling may come over HTTP/1.1.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bad = |message: String| TlsError::File {
        path: path.to_path_buf(),
        message,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(format!("cannot read: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(bad("holds no PEM certificate".into()));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::File {
        path: path.to_path_buf(),
        message: format!("no usable PEM private key: {e}"),
    })
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The server's certificate and key, read again when either file changes (checked at each
/// handshake: a `stat` of two files). A pair that does not load keeps the previous one.
#[derive(Debug)]
struct Reloading {
    cert: PathBuf,
    key: PathBuf,
    current: Mutex<(Option<SystemTime>, Option<SystemTime>, Arc<CertifiedKey>)>,
}

impl Reloading {
    fn load(cert: PathBuf, key: PathBuf) -> Result<Reloading, TlsError> {
        let stamps = (modified(&cert), modified(&key));
        let certified = certified(&cert, &key)?;
        Ok(Reloading {
            cert,
            key,
            current: Mutex::new((stamps.0, stamps.1, certified)),
        })
    }
}

fn certified(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain = read_certs(cert)?;
    let key_der = read_key(key)?;
    CertifiedKey::from_der(chain, key_der, &default_provider())
        .map(Arc::new)
        .map_err(|e| TlsError::File {
            path: key.to_path_buf(),
            message: format!("does not match the certificate in {}: {e}", cert.display()),
        })
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let stamps = (modified(&self.cert), modified(&self.key));
        if (stamps.0, stamps.1) != (current.0, current.1) {
            match certified(&self.cert, &self.key) {
                Ok(fresh) => {
                    tracing::info!(cert = %self.cert.display(), "Reloaded the TLS certificate.");
                    *current = (stamps.0, stamps.1, fresh);
                }
                Err(e) => {
                    // Mid-rotation (the certificate written, the key not yet), or broken:
                    // keep serving the previous pair until the files change again.
                    tracing::warn!(error = %e, "The TLS certificate files changed but do not load; keeping the previous certificate.");
                    current.0 = stamps.0;
                    current.1 = stamps.1;
                }
            }
        }
        Some(Arc::clone(&current.2))
    }
}
