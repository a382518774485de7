//! What Envoy 1.40 makes of a TLS context's bytes given inline (in a listener's or a
//! cluster's context, or in a `secrets:` resource, where `switchyard_files` put a file's
//! too): a certificate chain (`TlsContext::loadCertificateChain`), its private key
//! (`TlsContext::loadPrivateKey`), a PKCS#12 bundle (`pkcs12`), a server certificate's names
//! and OCSP staple (`ServerContextImpl`; the staple read by `ocsp`), a trusted CA bundle and
//! a CRL (`DefaultCertValidator`). Each is framed as BoringSSL frames PEM (`pem`), and
//! refused in Envoy's words. `secret_files` judges files with the same functions.
//!
//! Owns: those verdicts. Must not: guess. What Envoy decides with something not here (an
//! old-style encrypted key given its password, what a PKCS#12 bundle's encrypted contents
//! hold, bytes in a file on the proxy's host) is not judged.

use prost_reflect::DynamicMessage;
use x509_parser::certificate::X509CertificateParser;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
use x509_parser::public_key::PublicKey as Parsed;

use super::memo::Memo;
use super::pem::{encrypted, Block, PemError, Reader, Wanted};
use super::refusal::{beyond, refuse, Refusal};
use crate::config::fields::{has, inline_data, message as field};

/// Where Envoy says inline bytes come from.
const INLINE: &str = "<inline>";

/// The curves BoringSSL takes for a certificate's or a key's EC key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Curve {
    P256,
    P384,
    P521,
}

impl Curve {
    fn from_oid(oid: &str) -> Option<Curve> {
        match oid {
            "1.2.840.10045.3.1.7" => Some(Curve::P256),
            "1.3.132.0.34" => Some(Curve::P384),
            "1.3.132.0.35" => Some(Curve::P521),
            _ => None,
        }
    }
}

const RSA: &str = "1.2.840.113549.1.1.1";
const EC: &str = "1.2.840.10045.2.1";
const ED25519: &str = "1.3.101.112";

/// A public key, as far as matching it to its private key needs.
#[derive(Debug, PartialEq, Eq)]
enum Key {
    /// Modulus and exponent, without leading zeros.
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// The point as encoded; `None` when the private key does not carry it.
    Ec {
        curve: Curve,
        point: Option<Vec<u8>>,
    },
    Ed25519(Vec<u8>),
}

fn unsigned(bytes: &[u8]) -> Vec<u8> {
    let start = bytes.iter().position(|&b| b != 0).unwrap_or(bytes.len());
    bytes[start..].to_vec()
}

/// A chain's first certificate, as the checks after loading it need it.
struct Leaf {
    key: Key,
    /// A subject CN, or a DNS, URI or IP SAN; `None` when the extensions do not parse here.
    named: Option<bool>,
    /// Its serial number, as its DER integer's contents.
    serial: Vec<u8>,
    /// The TLS feature extension says it must be stapled (`status_request` alone).
    must_staple: bool,
}

/// A certificate's DER as BoringSSL's `d2i_X509` takes it (extensions not looked into: a
/// bad one is the handshake's business, not the load's); with what follows it.
fn certificate(der: &[u8]) -> Option<(&[u8], X509Certificate<'_>)> {
    let mut parser = X509CertificateParser::new().with_deep_parse_extensions(false);
    use x509_parser::nom::Parser;
    parser.parse(der).ok()
}

fn chain_error(source: &str) -> String {
    format!("Failed to load certificate chain from {source}")
}

/// `loadCertificateChain` and the key checks after it: the first certificate (a trusted one
/// too) and its key, then every other certificate block to the end.
fn chain(bytes: &[u8], source: &str) -> Result<Leaf, String> {
    let chain_error = || chain_error(source);
    let mut reader = Reader::new(bytes);
    let first = reader
        .block_for(Wanted::TrustedCertificate)
        .map_err(|_| chain_error())?;
    if !first.header.is_empty() {
        return Err(chain_error());
    }
    let (rest, cert) = certificate(&first.data).ok_or_else(chain_error)?;
    // Bytes after a certificate are its trust settings, which only a trusted one has.
    if !rest.is_empty() && first.label != "TRUSTED CERTIFICATE" {
        return Err(chain_error());
    }
    let leaf = leaf(&cert).ok_or_else(chain_error)?;
    loop {
        match reader.block_for(Wanted::Certificate) {
            Err(PemError::NoStartLine) => break,
            Err(PemError::Malformed) => return Err(chain_error()),
            Ok(block) => {
                if !block.header.is_empty() || certificate(&block.data).is_none() {
                    return Err(chain_error());
                }
            }
        }
    }
    if let Key::Rsa { n, .. } = &leaf.key {
        // `n` has no leading zero byte; an empty one (a modulus of 0) has no bits.
        let bits =
            (n.len() * 8).saturating_sub(n.first().map_or(0, |b| b.leading_zeros() as usize));
        if bits < 2048 {
            return Err(format!(
                "{}, only RSA certificates with 2048-bit or larger keys are supported",
                chain_error()
            ));
        }
    }
    Ok(leaf)
}

/// The certificate's key, if BoringSSL takes its type (RSA, EC on P-256, P-384 or P-521,
/// Ed25519), and its names.
fn leaf(cert: &X509Certificate<'_>) -> Option<Leaf> {
    let spki = cert.public_key();
    let key = match spki.algorithm.algorithm.to_id_string().as_str() {
        RSA => match spki.parsed().ok()? {
            Parsed::RSA(rsa) => Key::Rsa {
                n: unsigned(rsa.modulus),
                e: unsigned(rsa.exponent),
            },
            _ => return None,
        },
        EC => {
            let oid = spki.algorithm.parameters.as_ref()?.as_oid().ok()?;
            Key::Ec {
                curve: Curve::from_oid(&oid.to_id_string())?,
                point: Some(spki.subject_public_key.data.to_vec()),
            }
        }
        ED25519 => Key::Ed25519(spki.subject_public_key.data.to_vec()),
        _ => return None,
    };
    // id-pe-tlsfeature holding exactly SEQUENCE { INTEGER 5 }, as Envoy compares it.
    let must_staple = cert
        .extensions()
        .iter()
        .any(|e| e.oid.to_id_string() == "1.3.6.1.5.5.7.1.24" && e.value == [0x30, 3, 2, 1, 5]);
    Some(Leaf {
        key,
        named: names(cert.as_ref()),
        serial: cert.raw_serial().to_vec(),
        must_staple,
    })
}

/// Whether a certificate has a subject CN or a DNS, URI or IP SAN (what a server context
/// needs); `None` when its extensions do not parse here.
fn names(der: &[u8]) -> Option<bool> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    if cert.subject().iter_common_name().next().is_some() {
        return Some(true);
    }
    let san = cert.subject_alternative_name().ok()?;
    Some(san.is_some_and(|san| {
        san.value.general_names.iter().any(|name| {
            matches!(
                name,
                GeneralName::DNSName(_) | GeneralName::URI(_) | GeneralName::IPAddress(_)
            )
        })
    }))
}

fn key_error(source: &str, cause: Option<&str>) -> String {
    match cause {
        Some(cause) => format!("Failed to load private key from {source}, Cause: {cause}"),
        None => format!("Failed to load private key from {source}"),
    }
}

/// BoringSSL's error behind a key's refusal, where it is known here.
type Cause = Option<&'static str>;

const NO_START_LINE: &str = "error:0900006e:PEM routines:OPENSSL_internal:NO_START_LINE";
const BAD_PASSWORD_READ: &str = "error:09000068:PEM routines:OPENSSL_internal:BAD_PASSWORD_READ";
const BAD_DECRYPT: &str = "error:1e000065:Cipher functions:OPENSSL_internal:BAD_DECRYPT";
const DIFFERENT_KEY_TYPES: &str =
    "error:06000067:public key routines:OPENSSL_internal:DIFFERENT_KEY_TYPES";
const KEY_TYPE_MISMATCH: &str =
    "error:0b000073:X.509 certificate routines:OPENSSL_internal:KEY_TYPE_MISMATCH";
const KEY_VALUES_MISMATCH: &str =
    "error:0b000074:X.509 certificate routines:OPENSSL_internal:KEY_VALUES_MISMATCH";

/// `PEM_read_bio_PrivateKey` with the context's password: the first private key block,
/// whatever its label says, read as BoringSSL reads that label. `Ok(None)`: not judged.
fn private_key(bytes: &[u8], password: Option<&[u8]>) -> Result<Option<Key>, Cause> {
    let block = match Reader::new(bytes).block_for(Wanted::PrivateKey) {
        Ok(block) => block,
        Err(PemError::NoStartLine) => return Err(Some(NO_START_LINE)),
        Err(PemError::Malformed) => return Err(None),
    };
    if !block.header.is_empty() {
        return match (encrypted(&block.header), password) {
            (true, None) => Err(Some(BAD_PASSWORD_READ)),
            // An old-style encrypted key, decrypted with the password: not judged.
            (true, Some(_)) => Ok(None),
            (false, _) => Err(None),
        };
    }
    key_in(&block, password)
}

fn key_in(block: &Block, password: Option<&[u8]>) -> Result<Option<Key>, Cause> {
    let data = block.data.as_slice();
    match block.label.as_str() {
        "PRIVATE KEY" => pkcs8(data).map(Some),
        "ENCRYPTED PRIVATE KEY" => {
            let Some(password) = password else {
                return Err(Some(BAD_PASSWORD_READ));
            };
            decrypted(data, password)
        }
        "RSA PRIVATE KEY" => match pkcs1(data) {
            Some(key) => Ok(Some(key)),
            None => typed(data, RSA),
        },
        "EC PRIVATE KEY" => match sec1(data, None) {
            Ok(key) => Ok(Some(key)),
            Err(()) => typed(data, EC),
        },
        // A DSA key: BoringSSL reads it, and TLS cannot use it; not judged.
        _ => Ok(None),
    }
}

/// A key under a type's own label that is not in that type's own form: PKCS#8, of the type.
fn typed(data: &[u8], oid: &str) -> Result<Option<Key>, Cause> {
    let info = pkcs8::PrivateKeyInfo::try_from(data).map_err(|_| None)?;
    if info.algorithm.oid.to_string() != oid {
        return Err(Some(DIFFERENT_KEY_TYPES));
    }
    pkcs8(data).map(Some)
}

/// An encrypted PKCS#8 key (PBES2), decrypted with the password; a scheme not known here is
/// not judged.
fn decrypted(data: &[u8], password: &[u8]) -> Result<Option<Key>, Cause> {
    let info = pkcs8::EncryptedPrivateKeyInfo::try_from(data).map_err(|_| None)?;
    use pkcs8::pkcs5::Error as Pbes;
    match info.decrypt(password) {
        Ok(document) => pkcs8(document.as_bytes()).map(Some),
        // The padding is wrong: the password is (pkcs5 says "encrypt" for it).
        Err(pkcs8::Error::EncryptedPrivateKey(Pbes::DecryptFailed | Pbes::EncryptFailed)) => {
            Err(Some(BAD_DECRYPT))
        }
        // A scheme not known here.
        Err(pkcs8::Error::EncryptedPrivateKey(_)) => Ok(None),
        // Decrypted, and not a key.
        Err(_) => Err(None),
    }
}

fn pkcs8(data: &[u8]) -> Result<Key, Cause> {
    let info = pkcs8::PrivateKeyInfo::try_from(data).map_err(|_| None)?;
    let public = info.public_key;
    match info.algorithm.oid.to_string().as_str() {
        RSA => pkcs1(info.private_key).ok_or(None),
        EC => {
            let curve = info
                .algorithm
                .parameters_oid()
                .ok()
                .and_then(|oid| Curve::from_oid(&oid.to_string()));
            let key = sec1(info.private_key, curve).map_err(|_| None)?;
            match (key, public) {
                (Key::Ec { curve, point: None }, Some(point)) => Ok(Key::Ec {
                    curve,
                    point: Some(point.to_vec()),
                }),
                (key, _) => Ok(key),
            }
        }
        ED25519 => {
            use pkcs8::der::Decode;
            let seed =
                pkcs8::der::asn1::OctetStringRef::from_der(info.private_key).map_err(|_| None)?;
            let pair = ring::signature::Ed25519KeyPair::from_seed_unchecked(seed.as_bytes())
                .map_err(|_| None)?;
            use ring::signature::KeyPair;
            Ok(Key::Ed25519(pair.public_key().as_ref().to_vec()))
        }
        _ => Err(None),
    }
}

fn pkcs1(data: &[u8]) -> Option<Key> {
    use pkcs1::der::Decode;
    let key = pkcs1::RsaPrivateKey::from_der(data).ok()?;
    Some(Key::Rsa {
        n: unsigned(key.modulus.as_bytes()),
        e: unsigned(key.public_exponent.as_bytes()),
    })
}

/// A SEC1 EC key; its curve named in it or, inside PKCS#8, beside it.
fn sec1(data: &[u8], outer: Option<Curve>) -> Result<Key, ()> {
    use sec1::der::Decode;
    let key = sec1::EcPrivateKey::from_der(data).map_err(|_| ())?;
    let inner = key
        .parameters
        .and_then(|p| p.named_curve())
        .map(|oid| Curve::from_oid(&oid.to_string()).ok_or(()))
        .transpose()?;
    let curve = inner.or(outer).ok_or(())?;
    // A key that does not write its public point has it computed, as BoringSSL computes it.
    let point = match key.public_key {
        Some(point) => Some(point.to_vec()),
        None => public_point(curve, key.private_key),
    };
    Ok(Key::Ec { curve, point })
}

/// The uncompressed public point of an EC private scalar; `None` for a scalar that is not
/// one of the curve's (not judged here).
fn public_point(curve: Curve, scalar: &[u8]) -> Option<Vec<u8>> {
    use p256::elliptic_curve::sec1::ToEncodedPoint;
    let point = match curve {
        Curve::P256 => p256::SecretKey::from_slice(scalar)
            .ok()?
            .public_key()
            .to_encoded_point(false)
            .as_bytes()
            .to_vec(),
        Curve::P384 => p384::SecretKey::from_slice(scalar)
            .ok()?
            .public_key()
            .to_encoded_point(false)
            .as_bytes()
            .to_vec(),
        Curve::P521 => p521::SecretKey::from_slice(scalar)
            .ok()?
            .public_key()
            .to_encoded_point(false)
            .as_bytes()
            .to_vec(),
    };
    Some(point)
}

/// `SSL_CTX_use_PrivateKey`'s check of the key against the certificate's.
fn matches(certificate: &Key, key: &Key) -> Result<(), Cause> {
    let same = match (certificate, key) {
        (Key::Rsa { .. }, Key::Rsa { .. }) | (Key::Ed25519(_), Key::Ed25519(_)) => {
            certificate == key
        }
        (
            Key::Ec { curve, point },
            Key::Ec {
                curve: key_curve,
                point: key_point,
            },
        ) => {
            if curve != key_curve {
                // Told apart by their curves: Envoy's words for it are not known here.
                return Err(None);
            }
            match (point, key_point) {
                // A point compressed on one side only, or not written: not judged.
                (Some(a), Some(b)) if a.first() == b.first() => a == b,
                _ => true,
            }
        }
        _ => return Err(Some(KEY_TYPE_MISMATCH)),
    };
    if same {
        Ok(())
    } else {
        Err(Some(KEY_VALUES_MISMATCH))
    }
}

/// A certificate chain as Envoy loads one from `source` (`<inline>`, or a file's path).
pub fn judge_chain(bytes: &[u8], source: &str) -> Result<(), String> {
    chain(bytes, source).map(|_| ())
}

/// A private key (with its password) as Envoy loads one beside `chain`, which loads: read,
/// and matched to the chain's first certificate.
pub fn judge_key(
    chain_bytes: &[u8],
    key: &[u8],
    password: Option<&[u8]>,
    source: &str,
) -> Result<(), String> {
    let Ok(leaf) = chain(chain_bytes, source) else {
        return Ok(());
    };
    key_against(&leaf, key, password, source)
}

fn key_against(
    leaf: &Leaf,
    key: &[u8],
    password: Option<&[u8]>,
    source: &str,
) -> Result<(), String> {
    let password = password.filter(|p| !p.is_empty());
    private_key(key, password)
        .and_then(|key| key.map_or(Ok(()), |key| matches(&leaf.key, &key)))
        .map_err(|cause| key_error(source, cause))
}

/// A trusted CA bundle as Envoy loads one: a certificate in it, and every block it knows
/// decoded.
pub fn judge_trusted_ca(bytes: &[u8], source: &str) -> Result<(), String> {
    match info_blocks(bytes) {
        Ok(certificates) if certificates > 0 => Ok(()),
        _ => Err(format!(
            "Failed to load trusted CA certificates from {source}"
        )),
    }
}

/// A CRL as Envoy loads one: every block it knows decoded (text or DER with no PEM block in
/// it is no CRL, and revokes nothing).
pub fn judge_crl(bytes: &[u8], source: &str) -> Result<(), String> {
    info_blocks(bytes)
        .map(|_| ())
        .map_err(|()| format!("Failed to load CRL from {source}"))
}

/// The certificates in PEM bytes that frame, as BoringSSL reads them (`TRUSTED
/// CERTIFICATE` blocks too), in order; reading stops at the first block that does not frame.
pub fn certificates(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut reader = Reader::new(bytes);
    let mut out = Vec::new();
    while let Ok(block) = reader.block_for(Wanted::TrustedCertificate) {
        out.push(block.data);
    }
    out
}

/// A `DataSource` field's inline bytes, when it has them.
fn inline(message: &DynamicMessage, name: &str) -> Option<Vec<u8>> {
    field(message, name).and_then(|source| inline_data(&source))
}

/// A `TlsCertificate`'s chain and key, given inline (client or server alike). A key from a
/// provider, a PKCS#12 bundle or bytes in a file are not judged.
pub(super) fn tls_certificate(certificate: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    judged_chain(certificate, at).map(|_| ())
}

/// The chain's first certificate once its chain and key are judged, when they are inline.
fn judged_chain(certificate: &DynamicMessage, at: &[String]) -> Result<Option<Leaf>, Refusal> {
    if has(certificate, "pkcs12") {
        // A bundle, read as far as BoringSSL decides without decrypting it.
        let bundle = inline(certificate, "pkcs12");
        let password = match field(certificate, "password") {
            Some(source) => inline_data(&source),
            None => Some(Vec::new()),
        };
        if let (Some(bundle), Some(password)) = (bundle, password) {
            if super::pkcs12::judge(&bundle, &password).is_err() {
                return refuse(
                    &beyond(at, &["pkcs12"]),
                    format!("Failed to load pkcs12 from {INLINE}"),
                )
                .map(|_| None);
            }
        }
        return Ok(None);
    }
    let Some(bytes) = inline(certificate, "certificate_chain") else {
        return Ok(None);
    };
    let leaf = match chain(&bytes, INLINE) {
        Ok(leaf) => leaf,
        Err(words) => return refuse(&beyond(at, &["certificate_chain"]), words).map(|_| None),
    };
    if has(certificate, "private_key_provider") {
        return Ok(Some(leaf));
    }
    let Some(key) = inline(certificate, "private_key") else {
        return Ok(Some(leaf));
    };
    let password = match field(certificate, "password") {
        Some(source) => match inline_data(&source) {
            Some(password) => Some(password),
            // A password read on the proxy's host: not judged.
            None => return Ok(Some(leaf)),
        },
        None => None,
    };
    if let Err(words) = key_against(&leaf, &key, password.as_deref(), INLINE) {
        return refuse(&beyond(at, &["private_key"]), words).map(|_| None);
    }
    Ok(Some(leaf))
}

/// The secrets a server's context takes its certificates from, unless a handshaker, a
/// provider or a selector brings them.
pub(super) fn served_secrets(context: &DynamicMessage) -> Vec<String> {
    let Some(common) = field(context, "common_tls_context") else {
        return Vec::new();
    };
    let provided = [
        "custom_handshaker",
        "tls_certificate_provider_instance",
        "custom_tls_certificate_selector",
    ];
    if provided.iter().any(|f| has(&common, f)) {
        return Vec::new();
    }
    crate::config::fields::messages(&common, "tls_certificate_sds_secret_configs")
        .iter()
        .map(|config| crate::config::fields::string(config, "name"))
        .filter(|name| !name.is_empty())
        .collect()
}

/// A server's certificate, given inline, names it by a subject CN or a DNS, URI or IP SAN
/// (`ServerContextImpl`), once its chain and key are judged.
pub(super) fn server_certificate(
    certificate: &DynamicMessage,
    at: &[String],
) -> Result<(), Refusal> {
    let Some(leaf) = judged_chain(certificate, at)? else {
        return Ok(());
    };
    if leaf.named == Some(false) {
        return refuse(
            &beyond(at, &["certificate_chain"]),
            "Invalid TLS context has neither subject CN nor SAN names".into(),
        );
    }
    // Its OCSP staple: one response, successful, for this certificate; required when the
    // certificate says it must be stapled.
    let staple = field(certificate, "ocsp_staple");
    if staple.as_ref().is_some_and(|s| has(s, "inline_string")) {
        return refuse(
            &beyond(at, &["ocsp_staple"]),
            "OCSP staple cannot be provided via inline_string".into(),
        );
    }
    match staple.as_ref().map(inline_data) {
        // In a file on the proxy's host: not judged.
        Some(None) => Ok(()),
        Some(Some(bytes)) if !bytes.is_empty() => match super::ocsp::judge(&bytes, &leaf.serial) {
            Ok(()) => Ok(()),
            Err(words) => refuse(&beyond(at, &["ocsp_staple"]), words.into()),
        },
        _ if leaf.must_staple => refuse(
            &beyond(at, &["ocsp_staple"]),
            "OCSP response is required for must-staple certificate".into(),
        ),
        _ => Ok(()),
    }
}

/// What `PEM_X509_INFO_read_bio` makes of a CA bundle or a CRL: every block it knows
/// decoded (certificates, CRLs and traditional private keys; others skipped); `Err` if one
/// does not frame or decode. The count is of certificates.
fn info_blocks(bytes: &[u8]) -> Result<usize, ()> {
    // A bundle is often the same in every cluster: judged once (`memo`).
    static INFO: Memo<Result<usize, ()>> = Memo::new();
    INFO.get(&[bytes], || read_info_blocks(bytes))
}

fn read_info_blocks(bytes: &[u8]) -> Result<usize, ()> {
    let mut reader = Reader::new(bytes);
    let mut certificates = 0;
    loop {
        let block = match reader.block() {
            Ok(block) => block,
            Err(PemError::NoStartLine) => return Ok(certificates),
            Err(PemError::Malformed) => return Err(()),
        };
        let data = block.data.as_slice();
        let key = matches!(
            block.label.as_str(),
            "RSA PRIVATE KEY" | "EC PRIVATE KEY" | "DSA PRIVATE KEY"
        );
        if key && block.header.len() > 10 {
            // An encrypted key, kept undecrypted; its header must still say how.
            if !encrypted(&block.header) {
                return Err(());
            }
            continue;
        }
        let known = key
            || matches!(
                block.label.as_str(),
                "CERTIFICATE" | "X509 CERTIFICATE" | "TRUSTED CERTIFICATE" | "X509 CRL"
            );
        if !known {
            continue;
        }
        if !block.header.is_empty() {
            return Err(());
        }
        let parsed = match block.label.as_str() {
            "X509 CRL" => x509_parser::parse_x509_crl(data).is_ok(),
            "RSA PRIVATE KEY" => pkcs1(data).is_some() || typed(data, RSA).is_ok(),
            "EC PRIVATE KEY" => sec1(data, None).is_ok() || typed(data, EC).is_ok(),
            // DSA: read by BoringSSL, not parsed here.
            "DSA PRIVATE KEY" => true,
            _ => {
                certificates += 1;
                certificate(data).is_some()
            }
        };
        if !parsed {
            return Err(());
        }
    }
}

/// A validation context's trusted CA and CRL, given inline (`DefaultCertValidator`).
pub(super) fn validation_context(context: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    if let Some(ca) = inline(context, "trusted_ca") {
        if let Err(words) = judge_trusted_ca(&ca, INLINE) {
            return refuse(&beyond(at, &["trusted_ca"]), words);
        }
    }
    if let Some(crl) = inline(context, "crl") {
        if let Err(words) = judge_crl(&crl, INLINE) {
            return refuse(&beyond(at, &["crl"]), words);
        }
    }
    Ok(())
}
