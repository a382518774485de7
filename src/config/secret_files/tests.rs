use std::path::Path;
use std::time::{Duration, SystemTime};

use rcgen::{CertificateParams, KeyPair, SerialNumber};
use serde_yaml::Value;

use super::*;

/// 2030-01-01T00:00:00Z, when the test certificates end.
const END: u64 = 1_893_456_000;

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

/// A self-signed certificate ending at END, with `serial`, and its key (PEM).
fn certificate(name: &str, serial: &[u8]) -> (String, String, KeyPair) {
    let (cert, key, pair, _) = certificate_params(name, serial);
    (cert, key, pair)
}

fn certificate_params(name: &str, serial: &[u8]) -> (String, String, KeyPair, CertificateParams) {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(vec![name.to_string()]).expect("params");
    params.not_after = rcgen::date_time_ymd(2030, 1, 1);
    params.serial_number = Some(SerialNumber::from(serial.to_vec()));
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let cert = params.self_signed(&key).expect("cert");
    (cert.pem(), key.serialize_pem(), key, params)
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path.display().to_string()
}

fn item(yaml: &str) -> Value {
    serde_yaml::from_str(yaml).expect("yaml")
}

fn fill_at(item: &mut Value, now: SystemTime) -> Result<Option<Filled>, FileError> {
    fill(item, "edge", now, &mut Vec::new())
}

#[test]
fn a_certificate_and_its_key_are_written_into_the_secret_inline() {
    let dir = tempfile::tempdir().expect("tmp");
    let (cert, key, _) = certificate("edge.example", &[0x12, 0x34]);
    let cert_path = write(dir.path(), "tls.crt", &cert);
    let key_path = write(dir.path(), "tls.key", &key);
    let mut secret = item(&format!(
        "name: edge\nswitchyard_files: {{certificate_chain: {cert_path}, private_key: {key_path}}}\n\
         tls_certificate: {{ocsp_staple: {{inline_string: x}}}}\n"
    ));
    let mut named = Vec::new();
    let filled = fill(&mut secret, "edge", at(END - 100 * 86_400), &mut named)
        .expect("fills")
        .expect("names files");
    assert!(secret.get(FILES_KEY).is_none(), "the key is taken out");
    let tls = &secret["tls_certificate"];
    assert_eq!(
        tls["certificate_chain"]["inline_string"].as_str(),
        Some(cert.as_str())
    );
    assert_eq!(
        tls["private_key"]["inline_string"].as_str(),
        Some(key.as_str())
    );
    assert_eq!(
        tls["ocsp_staple"]["inline_string"].as_str(),
        Some("x"),
        "kept"
    );
    assert_eq!(named.len(), 2);
    assert_eq!(filled.read.len(), 2);
    assert_eq!(filled.read[0].digest, content_hash([cert.as_bytes()]));
    let info = &filled.certificates[0];
    assert_eq!(info.serial, "1234");
    assert_eq!(info.not_after, END as i64);
    assert_eq!(info.role, "certificate_chain");
    assert!(info.subject.contains("rcgen"), "{}", info.subject);
    assert!(filled.warnings.is_empty(), "{:?}", filled.warnings);
}

#[test]
fn a_key_of_another_certificate_is_refused_in_envoy_s_words_naming_the_key_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let (cert, _, _) = certificate("a", &[1]);
    let (_, other_key, _) = certificate("b", &[2]);
    let cert_path = write(dir.path(), "tls.crt", &cert);
    let key_path = write(dir.path(), "tls.key", &other_key);
    let mut secret = item(&format!(
        "name: edge\nswitchyard_files: {{certificate_chain: {cert_path}, private_key: {key_path}}}\n"
    ));
    let (field, message) = fill_at(&mut secret, at(0)).expect_err("mismatch");
    assert_eq!(field, "switchyard_files.private_key");
    assert_eq!(
        message,
        format!(
            "Failed to load private key from {key_path}, Cause: \
             error:0b000074:X.509 certificate routines:OPENSSL_internal:KEY_VALUES_MISMATCH"
        )
    );
}

#[test]
fn half_written_missing_and_unusable_files_are_errors_naming_the_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let (cert, key, _) = certificate("a", &[1]);
    let good_key = write(dir.path(), "tls.key", &key);
    let good_cert = write(dir.path(), "tls.crt", &cert);
    let half = write(dir.path(), "half.crt", &cert[..cert.len() / 2]);
    let empty = write(dir.path(), "empty.crt", "");
    let missing = dir.path().join("missing.crt").display().to_string();
    let encrypted = write(
        dir.path(),
        "enc.key",
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n",
    );
    let half_key = write(dir.path(), "half.key", &key[..key.len() / 2]);
    let cases = [
        (
            half.clone(),
            good_key.clone(),
            "certificate_chain",
            "Failed to load certificate chain from",
        ),
        (
            empty.clone(),
            good_key.clone(),
            "certificate_chain",
            "Failed to load certificate chain from",
        ),
        (
            missing.clone(),
            good_key.clone(),
            "certificate_chain",
            "No such file",
        ),
        // Encrypted, and the secret has no password for it.
        (
            good_cert.clone(),
            encrypted.clone(),
            "private_key",
            "BAD_PASSWORD_READ",
        ),
        (
            good_cert.clone(),
            half_key.clone(),
            "private_key",
            "Failed to load private key from",
        ),
    ];
    for (cert_path, key_path, field, why) in cases {
        let mut secret = item(&format!(
            "name: edge\nswitchyard_files: {{certificate_chain: {cert_path}, private_key: {key_path}}}\n"
        ));
        let (at_field, message) = fill_at(&mut secret, at(0)).expect_err(why);
        assert_eq!(at_field, format!("switchyard_files.{field}"), "{message}");
        let file = if field == "private_key" {
            &key_path
        } else {
            &cert_path
        };
        assert!(message.contains(file.as_str()), "{message}");
        assert!(message.contains(why), "{why}: {message}");
    }
}

#[test]
fn the_format_is_checked_before_any_file_is_read() {
    let cases = [
        (
            "{certificate_chain: tls.crt, private_key: /k}",
            "must be an absolute path",
        ),
        ("{certificate_chain: /c}", "needs `private_key`"),
        ("{crl: /c}", "needs `trusted_ca`"),
        ("{cert: /c}", "unknown key `cert`"),
        ("{}", "names no file"),
        ("/etc/certs", "expected a mapping"),
        (
            "{certificate_chain: /c, private_key: /k, trusted_ca: /ca}",
            "either a certificate and its key or a validation context",
        ),
    ];
    for (files, why) in cases {
        let mut secret = item(&format!("name: edge\nswitchyard_files: {files}\n"));
        let (_, message) = fill_at(&mut secret, at(0)).expect_err(why);
        assert!(message.contains(why), "{files}: {message}");
    }
    let mut plain = item("name: edge\ntls_certificate: {}\n");
    assert!(fill_at(&mut plain, at(0)).expect("no files").is_none());
}

#[test]
fn a_field_given_inline_and_from_a_file_is_an_error() {
    let dir = tempfile::tempdir().expect("tmp");
    let (cert, _, _) = certificate("ca", &[7]);
    let ca = write(dir.path(), "ca.crt", &cert);
    let mut secret = item(&format!(
        "name: edge\nswitchyard_files: {{trusted_ca: {ca}}}\nvalidationContext: {{trustedCa: {{inline_string: x}}}}\n"
    ));
    let (field, message) = fill_at(&mut secret, at(0)).expect_err("twice");
    assert_eq!(field, "switchyard_files.trusted_ca");
    assert!(message.contains("in one place"), "{message}");
}

#[test]
fn a_trusted_ca_and_its_crl_fill_the_validation_context() {
    let dir = tempfile::tempdir().expect("tmp");
    let (cert, _, key, params) = certificate_params("ca", &[7]);
    let issuer = rcgen::Issuer::new(params, key);
    let crl = rcgen::CertificateRevocationListParams {
        this_update: rcgen::date_time_ymd(2026, 1, 1),
        next_update: rcgen::date_time_ymd(2030, 1, 1),
        crl_number: SerialNumber::from(1u64),
        issuing_distribution_point: None,
        revoked_certs: Vec::new(),
        key_identifier_method: rcgen::KeyIdMethod::Sha256,
    }
    .signed_by(&issuer)
    .expect("crl")
    .pem()
    .expect("pem");
    let ca_path = write(dir.path(), "ca.crt", &cert);
    let crl_path = write(dir.path(), "ca.crl", &crl);
    let mut secret = item(&format!(
        "name: edge\nswitchyard_files: {{trusted_ca: {ca_path}, crl: {crl_path}}}\n"
    ));
    let filled = fill_at(&mut secret, at(0)).expect("fills").expect("files");
    let context = &secret["validation_context"];
    assert_eq!(
        context["trusted_ca"]["inline_string"].as_str(),
        Some(cert.as_str())
    );
    assert_eq!(context["crl"]["inline_string"].as_str(), Some(crl.as_str()));
    assert_eq!(
        filled.certificates.len(),
        1,
        "the CA; a CRL is no certificate"
    );
    assert_eq!(filled.certificates[0].role, "trusted_ca");

    // A certificate where the CRL should be: Envoy takes it (it revokes nothing), so does
    // the loader. A CRL block that does not decode is refused.
    let wrong = write(dir.path(), "wrong.crl", &cert);
    let mut secret = item(&format!(
        "name: edge\nswitchyard_files: {{trusted_ca: {ca_path}, crl: {wrong}}}\n"
    ));
    fill_at(&mut secret, at(0)).expect("a certificate in a CRL file revokes nothing");
    let bad = write(
        dir.path(),
        "bad.crl",
        "-----BEGIN X509 CRL-----\naGVsbG8=\n-----END X509 CRL-----\n",
    );
    let mut secret = item(&format!(
        "name: edge\nswitchyard_files: {{trusted_ca: {ca_path}, crl: {bad}}}\n"
    ));
    let (field, message) = fill_at(&mut secret, at(0)).expect_err("not a CRL");
    assert_eq!(field, "switchyard_files.crl");
    assert_eq!(message, format!("Failed to load CRL from {bad}"));
}

#[test]
fn an_expired_or_soon_expiring_certificate_is_a_warning() {
    let dir = tempfile::tempdir().expect("tmp");
    let (cert, key, _) = certificate("a", &[0xAB]);
    let cert_path = write(dir.path(), "tls.crt", &cert);
    let key_path = write(dir.path(), "tls.key", &key);
    let files = format!(
        "name: edge\nswitchyard_files: {{certificate_chain: {cert_path}, private_key: {key_path}}}\n"
    );
    let warnings = |now| {
        let mut secret = item(&files);
        fill_at(&mut secret, now)
            .expect("loads")
            .expect("files")
            .warnings
    };
    assert!(
        warnings(at(END - 15 * 86_400)).is_empty(),
        "15 days left: no warning"
    );
    let soon = warnings(at(END - 3 * 86_400 - 60));
    assert_eq!(soon.len(), 1);
    assert_eq!(soon[0].0, "switchyard_files.certificate_chain");
    assert!(
        soon[0].1.contains("expires in 3 days") && soon[0].1.contains("AB"),
        "{:?}",
        soon
    );
    assert!(soon[0].1.contains(&cert_path), "{:?}", soon);
    let expired = warnings(at(END + 1));
    assert!(
        expired[0].1.contains("expired at 2030-01-01T00:00:00Z"),
        "{:?}",
        expired
    );
}

/// The loader loads a snapshot file again when a file its secrets name changes (the snapshot
/// file itself unchanged), keeps naming those files when the load fails, and the secret's
/// private key is left out of what proxies get, as for a key written inline.
#[test]
fn the_loader_follows_the_files_a_secret_names() {
    use crate::config::{LoadOptions, Loader};
    use crate::resource::ResourceType;
    let dir = tempfile::tempdir().expect("tmp");
    let snapshots = dir.path().join("snapshots");
    let certs = dir.path().join("certs");
    std::fs::create_dir_all(&snapshots).expect("mkdir");
    std::fs::create_dir_all(&certs).expect("mkdir");
    let (cert, key, _) = certificate("a", &[1]);
    let cert_path = write(&certs, "tls.crt", &cert);
    let key_path = write(&certs, "tls.key", &key);
    write(
        &snapshots,
        "secrets.yaml",
        &format!(
            "secrets:\n- name: edge\n  switchyard_files:\n    certificate_chain: {cert_path}\n    private_key: {key_path}\n"
        ),
    );
    let roots = vec![snapshots.clone()];
    let options = LoadOptions::default();
    let mut loader = Loader::default();
    let first = loader.load(&roots, &options).expect("loads");
    assert_eq!(loader.secret_files().len(), 2);
    let secret = |config: &crate::config::Config| {
        let resource = config.files[0]
            .resources
            .iter()
            .find(|r| r.kind == ResourceType::Secret)
            .cloned()
            .expect("the secret");
        resource
    };
    let served = secret(&first);
    assert_eq!(first.certificates().count(), 1);
    let json = crate::config::json::resource_json(&served, &served.body).expect("json");
    assert!(json["tlsCertificate"]["privateKey"]["inlineString"]
        .as_str()
        .is_some_and(|k| k.contains("PRIVATE KEY")));
    let to_proxy = served.body_for(crate::resource::Secrets::Redact);
    let redacted = crate::config::json::resource_json(&served, to_proxy).expect("json");
    assert!(
        redacted["tlsCertificate"].get("privateKey").is_none(),
        "{redacted}"
    );

    // The pair replaced by another one whose key does not match yet: an error, and the
    // files are still followed.
    let (cert2, key2, _) = certificate("b", &[2]);
    write(&certs, "tls.crt", &cert2);
    let failed = loader.load(&roots, &options).expect_err("mismatch");
    assert!(
        failed.to_string().contains("KEY_VALUES_MISMATCH"),
        "{failed}"
    );
    assert_eq!(loader.secret_files().len(), 2);
    // The key lands: the new pair loads, with a new version.
    write(&certs, "tls.key", &key2);
    let second = loader.load(&roots, &options).expect("loads");
    assert_ne!(secret(&second).version, served.version);
    assert_eq!(
        second.certificates().next().map(|c| c.serial.as_str()),
        Some("02")
    );
}
