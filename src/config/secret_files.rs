//! Secrets whose certificates and keys are PEM files on Switchyard's own host
//! (`switchyard_files:` beside a secret's fields): the files read, judged as Envoy would
//! judge them (`config::checks::tls_bytes`: a chain, a key that matches it, a CA bundle, a
//! CRL), and written into the secret inline, so the proxy gets their contents. Envoy's own `filename` is a path on the proxy's
//! host and is left as written.
//!
//! Owns: reading those files, each certificate's expiry and serial, and the
//! digests the loader compares to see a file change. Must not: watch files (`source::files`) or log
//! what a file holds (errors name the file and the problem, never the bytes).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::checks::tls_bytes;
use super::hash::content_hash;
use serde_yaml::{Mapping, Value};

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
    let password = password(mapping);
    let mut chain: Option<Vec<u8>> = None;
    let mut key: Option<(Vec<u8>, &PathBuf)> = None;
    for (name, parent, field, path) in &paths {
        let bytes = read(path).map_err(|m| (at(name), m))?;
        let source = path.display().to_string();
        // Judged as Envoy would judge the same bytes in a file of its own, in its words
        // (which name the file): `config::checks::tls_bytes`, as for the secret's inline bytes.
        let judged = match *name {
            "certificate_chain" => tls_bytes::judge_chain(&bytes, &source),
            "trusted_ca" => tls_bytes::judge_trusted_ca(&bytes, &source),
            "crl" => tls_bytes::judge_crl(&bytes, &source),
            _ => Ok(()),
        };
        judged.map_err(|words| (at(name), words))?;
        match *name {
            "certificate_chain" | "trusted_ca" => {
                let certs = tls_bytes::certificates(&bytes);
                if let Some(info) = earliest_end(secret, name, path, &certs) {
                    if let Some(message) = expiry_warning(&info, now) {
                        filled
                            .warnings
                            .push((at(name), format!("{}: {message}", path.display())));
                    }
                    filled.certificates.push(info);
                }
                if *name == "certificate_chain" {
                    chain = Some(bytes.clone());
                }
            }
            "private_key" => key = Some((bytes.clone(), path)),
            _ => {}
        }
        let text = String::from_utf8(bytes.clone()).map_err(|_| {
            (
                at(name),
                format!("{}: not PEM text (not UTF-8)", path.display()),
            )
        })?;
        put(mapping, parent, field, text).map_err(|m| (at(name), m))?;
        filled.read.push(ReadFile {
            path: path.clone(),
            digest: content_hash([bytes.as_slice()]),
        });
    }
    if let (Some(chain), Some((key, key_path))) = (chain, key) {
        let source = key_path.display().to_string();
        tls_bytes::judge_key(&chain, &key, password.as_deref(), &source)
            .map_err(|words| (at("private_key"), words))?;
    }
    Ok(Some(filled))
}

/// The secret's own password for its key, when it is written inline (`tls_certificate.
/// password.inline_string`, in either spelling).
fn password(secret: &Mapping) -> Option<Vec<u8>> {
    let get = |m: &Mapping, key: &str| {
        m.get(key)
            .or_else(|| m.get(camel_case(key).as_str()))
            .cloned()
    };
    let certificate = get(secret, "tls_certificate")?;
    let password = get(certificate.as_mapping()?, "password")?;
    let text = get(password.as_mapping()?, "inline_string")?;
    text.as_str().map(|t| t.as_bytes().to_vec())
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

/// The certificate of `certs` that ends first (the leaf of a chain, or the CA of a bundle
/// that expires first); `None` when none parses here (Envoy's own verdict is judged apart).
fn earliest_end(
    secret: &str,
    role: &'static str,
    path: &Path,
    certs: &[Vec<u8>],
) -> Option<CertificateInfo> {
    let mut earliest: Option<CertificateInfo> = None;
    for der in certs {
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
            continue;
        };
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
    earliest
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
