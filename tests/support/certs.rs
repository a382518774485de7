//! Certificates for TLS tests, made with rcgen: a CA and the certificates it signs.

use std::path::Path;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};

/// A CA, and certificates it signs.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub pem: String,
}

/// A certificate and its key, PEM.
pub struct Leaf {
    pub cert: String,
    pub key: String,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let cert = params.self_signed(&key).expect("CA");
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate for `dns` names and `uris`.
    pub fn leaf(&self, dns: &[&str], uris: &[&str]) -> Leaf {
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

    /// Write the CA certificate to `dir/<name>.pem`.
    pub fn write(&self, dir: &Path, name: &str) {
        std::fs::write(dir.join(format!("{name}.pem")), &self.pem).expect("write");
    }
}

impl Leaf {
    /// Write `dir/<name>.pem` and `dir/<name>.key`.
    pub fn write(&self, dir: &Path, name: &str) {
        std::fs::write(dir.join(format!("{name}.pem")), &self.cert).expect("write");
        std::fs::write(dir.join(format!("{name}.key")), &self.key).expect("write");
    }
}

/// A snapshot file's `secrets:` item named `name`: a real certificate and its key (the
/// loader judges the bytes as Envoy does), each with a marker line before its PEM block
/// (`CHAIN-PEM`, `KEY-PEM`; text before a block is skipped by Envoy and the loader alike), so
/// a test can tell where each went. At a `secrets:` list's indentation.
pub fn marked_tls_secret(name: &str) -> String {
    let leaf = Ca::new("ca").leaf(&["localhost"], &[]);
    let json =
        |marker: &str, pem: &str| serde_json::to_string(&format!("{marker}\n{pem}")).expect("json");
    format!(
        "  - name: {name}\n    tls_certificate:\n      certificate_chain: {{ inline_string: {} }}\n      private_key: {{ inline_string: {} }}\n",
        json("CHAIN-PEM", &leaf.cert),
        json("KEY-PEM", &leaf.key)
    )
}
