//! Secrets whose certificates and keys are PEM files on Switchyard's own host
//! (`switchyard_files:` beside a secret's fields): the files read, checked (PEM that parses,
//! a key that matches its certificate, a CRL that parses), and written into the secret
//! inline, so the proxy gets their contents. Envoy's own `filename` is a path on the proxy's
//! host and is left as written.
//!
//! Owns: reading those files, the checks, each certificate's expiry and serial, and the
//! digests the loader compares to see a file change. Must not: watch files (`source::files`) or log
//! what a file holds (errors name the file and the problem, never the bytes).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_yaml::{Mapping, Value};
use tokio_rustls::rustls::crypto::ring::default_provider;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{
    CertificateDer, CertificateRevocationListDer, PrivateKeyDer,
};
use tokio_rustls::rustls::sign::CertifiedKey;

use super::hash::content_hash;

/// The key beside a secret's fields naming files on Switchyard's host.
pub const FILES_KEY: &str = "switchyard_files";

/// A certificate this close to its end is a load warning.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(14 * 24 * 3600);

/// The keys under `switchyard_files`, where each goes in the secret, and whether it holds
/// certificates (whose expiry is reported).
const FILE_KEYS: [(&str, &str, &str); 4] = [
    ("certificate_chain", "tls_certificate", "certificate_chain"),
    ("private_key", "tls_certificate", "private_key"),
    ("trusted_ca", "validation_context", "trusted_ca"),
    ("crl", "validation_context", "crl"),
];

/// A file read for a secret, and a digest of the bytes read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadFile {
    pub path: PathBuf,
    pub digest: String,
}

/// The certificate of a file that ends first (the leaf of a chain, or the CA of a bundle
/// that expires first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertificateInfo {
    /// The secret's name.
    pub secret: String,
    /// `certificate_chain` or `trusted_ca`.
    pub role: &'static str,
    pub file: PathBuf,
    pub subject: String,
    /// Hexadecimal, as `openssl x509 -serial` prints it.
    pub serial: String,
    /// Seconds since the Unix epoch.
    pub not_after: i64,
}

impl CertificateInfo {
    pub fn expires_at(&self) -> SystemTime {
        match u64::try_from(self.not_after) {
            Ok(secs) => SystemTime::UNIX_EPOCH + Duration::from_secs(secs),
            Err(_) => SystemTime::UNIX_EPOCH,
        }
    }
}

/// What reading a secret's files gave besides the secret itself.
#[derive(Debug, Default)]
pub(super) struct Filled {
    pub read: Vec<ReadFile>,
    pub certificates: Vec<CertificateInfo>,
    /// `(field, message)`: a certificate expired or about to.
    pub warnings: Vec<(String, String)>,
}

/// A problem with one of the files: `(field, message)`, the message naming the file.
pub(super) type FileError = (String, String);

/// Take `switchyard_files` out of a secret item, read the files it names and write them into
/// the item inline. `None` when the item names no files.
pub(super) fn fill(
    item: &mut Value,
    secret: &str,
    now: SystemTime,
    named: &mut Vec<PathBuf>,
) -> Result<Option<Filled>, FileError> {
    let Some(mapping) = item.as_mapping_mut() else {
        return Ok(None);
    };
    let Some(files) = mapping.remove(FILES_KEY) else {
        return Ok(None);
    };
    let Value::Mapping(files) = files else {
        return Err((
            FILES_KEY.into(),
            "expected a mapping of certificate_chain, private_key, trusted_ca and crl to files \
             on Switchyard's host"
                .into(),
        ));
    };
    let paths = named_files(&files, named)?;

    let mut filled = Filled::default();
    let mut chain = None;
    let mut key = None;
    for (name, parent, field, path) in &paths {
        let bytes = read(path).map_err(|m| (at(name), m))?;
        let bad = |message: String| (at(name), format!("{}: {message}", path.display()));
        match *name {
            "certificate_chain" | "trusted_ca" => {
                let certs = certificates(&bytes).map_err(bad)?;
                let info = earliest_end(secret, name, path, &certs).map_err(bad)?;
                if let Some(message) = expiry_warning(&info, now) {
                    filled
                        .warnings
                        .push((at(name), format!("{}: {message}", path.display())));
                }
                filled.certificates.push(info);
                if *name == "certificate_chain" {
                    chain = Some(certs);
                }
            }
            "private_key" => key = Some(private_key(&bytes).map_err(bad)?),
            _ => {
                crl(&bytes).map_err(bad)?;
            }
        }
        let text =
            String::from_utf8(bytes.clone()).map_err(|_| bad("not PEM text (not UTF-8)".into()))?;
        put(mapping, parent, field, text).map_err(|m| (at(name), m))?;
        filled.read.push(ReadFile {
            path: path.clone(),
            digest: content_hash([bytes.as_slice()]),
        });
    }
    if let (Some(chain), Some(key)) = (chain, key) {
        if let Err(message) = matching(chain, key) {
            let path = paths
                .iter()
                .find(|(name, ..)| *name == "private_key")
                .map(|p| p.3.display().to_string())
                .unwrap_or_default();
            let cert = paths
                .iter()
                .find(|(name, ..)| *name == "certificate_chain")
                .map(|p| p.3.display().to_string())
                .unwrap_or_default();
            return Err((at("private_key"), format!("{path}: {message} in {cert}")));
        }
    }
    Ok(Some(filled))
}

/// A file `switchyard_files` names: its key, the secret's message and field it goes to, and
/// its path on this host.
type NamedFile = (&'static str, &'static str, &'static str, PathBuf);

/// The field of `switchyard_files` that `key` is.
fn at(key: &str) -> String {
    format!("{FILES_KEY}.{key}")
}

/// The files a `switchyard_files` mapping names (each added to `named`, whose changes are
/// watched), checked to be known keys with absolute paths that make one kind of secret.
fn named_files(files: &Mapping, named: &mut Vec<PathBuf>) -> Result<Vec<NamedFile>, FileError> {
    let mut paths: Vec<NamedFile> = Vec::new();
    for (key, value) in files {
        let key = key.as_str().unwrap_or_default();
        let Some(&(name, parent, field)) = FILE_KEYS.iter().find(|(k, _, _)| *k == key) else {
            return Err((
                FILES_KEY.into(),
                format!(
                    "unknown key `{key}`, expected one of `certificate_chain`, `private_key`, \
                     `trusted_ca`, `crl`"
                ),
            ));
        };
        let Some(text) = value.as_str() else {
            return Err((at(name), "expected a file path".into()));
        };
        let path = PathBuf::from(text);
        if !path.is_absolute() {
            return Err((
                at(name),
                format!(
                    "{text}: must be an absolute path on Switchyard's host (these files are read \
                     by Switchyard, not by the proxy; Envoy's own `filename` is a path on the \
                     proxy's host)"
                ),
            ));
        }
        named.push(path.clone());
        paths.push((name, parent, field, path));
    }
    let has = |k: &str| paths.iter().any(|(name, ..)| *name == k);
    let pair = [
        ("certificate_chain", "private_key"),
        ("private_key", "certificate_chain"),
        ("crl", "trusted_ca"),
    ];
    for (one, needs) in pair {
        if has(one) && !has(needs) {
            return Err((at(one), format!("needs `{needs}` beside it")));
        }
    }
    if has("certificate_chain") && has("trusted_ca") {
        return Err((
            FILES_KEY.into(),
            "a secret holds either a certificate and its key or a validation context: put \
             `trusted_ca` in a secret of its own"
                .into(),
        ));
    }
    if paths.is_empty() {
        return Err((FILES_KEY.into(), "names no file".into()));
    }

    Ok(paths)
}

/// Write `text` at `parent.field` of the secret, as a DataSource's `inline_string`; the same
/// field written in the secret too is an error.
fn put(secret: &mut Mapping, parent: &str, field: &str, text: String) -> Result<(), String> {
    // The message as the secret spells it (`tls_certificate` or `tlsCertificate`), if it does.
    let camel_parent = camel_case(parent);
    let parent_key = if secret.contains_key(camel_parent.as_str()) {
        Value::from(camel_parent)
    } else {
        Value::from(parent)
    };
    let entry = secret
        .entry(parent_key)
        .or_insert_with(|| Value::Mapping(Mapping::new()));
    let Value::Mapping(message) = entry else {
        return Err(format!("`{parent}` is not a mapping"));
    };
    let camel = camel_case(field);
    if message.contains_key(field) || message.contains_key(camel.as_str()) {
        return Err(format!(
            "`{parent}.{field}` is written in the secret too: give it in one place"
        ));
    }
    let mut source = Mapping::new();
    source.insert(Value::from("inline_string"), Value::from(text));
    message.insert(Value::from(field), Value::Mapping(source));
    Ok(())
}

fn camel_case(field: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in field.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    // A secret file is small; one far larger is not a PEM file (or the wrong path).
    const MAX: u64 = 4 << 20;
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{}: not a file", path.display()));
    }
    if meta.len() > MAX {
        return Err(format!(
            "{}: {} bytes, more than a PEM file holds (at most {MAX})",
            path.display(),
            meta.len()
        ));
    }
    std::fs::read(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))
}

fn certificates(bytes: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not PEM certificates (half-written?): {e}"))?;
    if certs.is_empty() {
        return Err("holds no PEM certificate".into());
    }
    Ok(certs)
}

fn private_key(bytes: &[u8]) -> Result<PrivateKeyDer<'static>, String> {
    if bytes
        .windows(b"ENCRYPTED PRIVATE KEY".len())
        .any(|w| w == b"ENCRYPTED PRIVATE KEY")
    {
        return Err(
            "an encrypted private key: Switchyard sends keys to proxies in the clear over \
             the (TLS) xDS stream, so it needs the key decrypted"
                .into(),
        );
    }
    PrivateKeyDer::from_pem_slice(bytes)
        .map_err(|e| format!("no usable PEM private key (half-written?): {e}"))
}

fn crl(bytes: &[u8]) -> Result<(), String> {
    let crls = CertificateRevocationListDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM CRL (half-written?): {e}"))?;
    if crls.is_empty() {
        return Err("holds no PEM CRL".into());
    }
    for crl in &crls {
        x509_parser::parse_x509_crl(crl.as_ref())
            .map_err(|e| format!("a CRL that does not parse: {e}"))?;
    }
    Ok(())
}

/// Whether the key is the certificate's: `Err` with why not.
fn matching(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<(), String> {
    CertifiedKey::from_der(chain, key, &default_provider())
        .map(|_| ())
        .map_err(|e| match e {
            tokio_rustls::rustls::Error::InconsistentKeys(_) => {
                "the private key does not match the certificate".to_string()
            }
            other => format!("the private key cannot be used with the certificate ({other})"),
        })
}

/// The certificate of `certs` that ends first.
fn earliest_end(
    secret: &str,
    role: &'static str,
    path: &Path,
    certs: &[CertificateDer<'static>],
) -> Result<CertificateInfo, String> {
    let mut earliest: Option<CertificateInfo> = None;
    for (index, der) in certs.iter().enumerate() {
        let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref())
            .map_err(|e| format!("certificate {} does not parse: {e}", index + 1))?;
        let info = CertificateInfo {
            secret: secret.to_string(),
            role,
            file: path.to_path_buf(),
            subject: cert.subject().to_string(),
            serial: serial_hex(cert.raw_serial()),
            not_after: cert.validity().not_after.timestamp(),
        };
        if earliest
            .as_ref()
            .is_none_or(|e| info.not_after < e.not_after)
        {
            earliest = Some(info);
        }
    }
    earliest.ok_or_else(|| "holds no PEM certificate".to_string())
}

/// A serial number as `openssl x509 -serial` prints it: hexadecimal, upper case, without
/// the zero byte DER puts before a high bit.
fn serial_hex(raw: &[u8]) -> String {
    let magnitude = match raw {
        [0, rest @ ..] if !rest.is_empty() => rest,
        all => all,
    };
    magnitude.iter().map(|b| format!("{b:02X}")).collect()
}

fn expiry_warning(info: &CertificateInfo, now: SystemTime) -> Option<String> {
    let end = info.expires_at();
    let when = humantime::format_rfc3339_seconds(end);
    match end.duration_since(now) {
        Err(_) => Some(format!(
            "the certificate {:?} (serial {}) expired at {when}",
            info.subject, info.serial
        )),
        Ok(left) if left < EXPIRY_WARNING => Some(format!(
            "the certificate {:?} (serial {}) expires in {} days, at {when}",
            info.subject,
            info.serial,
            left.as_secs() / 86_400
        )),
        Ok(_) => None,
    }
}

#[cfg(test)]
mod tests;
