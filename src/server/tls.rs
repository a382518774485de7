//! TLS on the xDS and admin ports: the server's certificate and the client CA (reloaded when
//! their files change, without a restart and without touching open connections), mutual TLS
//! with a client CA on the xDS port, and the identity a client certificate proves (its URI
//! SANs, such as a SPIFFE ID, DNS SANs and CN).
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

/// Why a node identity policy cannot be made, or a connection is not bound to its node.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error(
        "{template:?} names no node: use {{id}} and/or {{cluster}}, as in \
         spiffe://example.org/ns/{{cluster}}/sa/{{id}}"
    )]
    NamesNoNode { template: String },
    #[error(
        "no client certificate, and this server binds nodes to certificates (expected one \
         for {expected:?})"
    )]
    NoCertificate { expected: String },
    #[error("the client certificate proves {proves:?}, not {expected:?}")]
    Unbound {
        proves: Vec<String>,
        expected: String,
    },
}

impl IdentityPolicy {
    /// A policy from its template; it must name the node (`{id}` or `{cluster}`).
    pub fn new(template: &str) -> Result<IdentityPolicy, IdentityError> {
        if !template.contains("{id}") && !template.contains("{cluster}") {
            return Err(IdentityError::NamesNoNode {
                template: template.to_string(),
            });
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
    ) -> Result<(), IdentityError> {
        let expected = self.expected(node_id, node_cluster);
        let Some(identity) = identity else {
            return Err(IdentityError::NoCertificate { expected });
        };
        if identity.names().any(|n| n == expected) {
            return Ok(());
        }
        Err(IdentityError::Unbound {
            proves: identity.names().map(str::to_string).collect(),
            expected,
        })
    }
}

/// TLS for one port: its rustls configuration, built again from the files when one of them
/// changes (checked at each handshake: a `stat` per file), so a rotated certificate, key or
/// client CA is used without a restart and without touching open connections. Files that
/// do not load (mid-rotation: the certificate written, the key not yet) keep the previous
/// configuration until they change again.
#[derive(Clone, Debug)]
pub struct Tls {
    inner: Arc<Reloading>,
}

/// A file's modification time, size and inode.
type Stamp = (Option<SystemTime>, u64, u64);

/// The stamps of the files a configuration was built from.
type Stamps = Vec<Option<Stamp>>;

#[derive(Debug)]
struct Reloading {
    /// The port, for logs.
    port: &'static str,
    files: TlsFiles,
    alpn: &'static [&'static [u8]],
    current: Mutex<(Stamps, Arc<ServerConfig>)>,
}

impl Tls {
    /// For the xDS port: gRPC over HTTP/2 and REST polling over HTTP/1.1, mutual TLS when
    /// `files` names a client CA.
    pub fn xds(files: &TlsFiles) -> Result<Tls, TlsError> {
        Tls::new("xDS", files.clone(), &[b"h2", b"http/1.1"])
    }

    /// For the admin port: HTTP/1.1, no client certificates.
    pub fn admin(cert: &Path, key: &Path) -> Result<Tls, TlsError> {
        let files = TlsFiles {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            client_ca: None,
        };
        Tls::new("admin", files, &[b"http/1.1"])
    }

    fn new(
        port: &'static str,
        files: TlsFiles,
        alpn: &'static [&'static [u8]],
    ) -> Result<Tls, TlsError> {
        let stamps = stamps(&files);
        let config = build(&files, alpn)?;
        Ok(Tls {
            inner: Arc::new(Reloading {
                port,
                files,
                alpn,
                current: Mutex::new((stamps, config)),
            }),
        })
    }

    /// The acceptor for a new connection, from the files as they are now.
    pub fn acceptor(&self) -> TlsAcceptor {
        let this = &self.inner;
        let mut current = this.current.lock().unwrap_or_else(|p| p.into_inner());
        let stamps = stamps(&this.files);
        if stamps != current.0 {
            current.0 = stamps;
            match build(&this.files, this.alpn) {
                Ok(fresh) => {
                    tracing::info!(port = this.port, cert = %this.files.cert.display(), "Reloaded the TLS files.");
                    current.1 = fresh;
                }
                Err(e) => {
                    tracing::warn!(port = this.port, error = %e, "The TLS files changed but do not load; keeping the previous ones.");
                }
            }
        }
        TlsAcceptor::from(Arc::clone(&current.1))
    }
}

fn stamps(files: &TlsFiles) -> Stamps {
    [
        Some(&files.cert),
        Some(&files.key),
        files.client_ca.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(|path| stamp(path))
    .collect()
}

/// The configuration for `files` as they are now.
fn build(files: &TlsFiles, alpn: &[&[u8]]) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(default_provider());
    let certified = certified(&files.cert, &files.key)?;
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
    let mut config = builder.with_cert_resolver(Arc::new(Fixed(certified)));
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
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

/// What tells that a file changed: its modification time, size and (on Unix) inode, so a
/// rewrite within the file system's time granularity, or a symlink swapped to another file
/// (a Kubernetes Secret update), is seen too.
fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    Some((meta.modified().ok(), meta.len(), inode))
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

/// One certificate for every client (a configuration is built again when it changes).
#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl ResolvesServerCert for Fixed {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }
}
