//! What Envoy parses inside a resource's bytes, judged by the loader as Envoy 1.40 judges
//! it: a TLS context's certificate chains, private keys (with and without a password), a
//! server certificate's names, trusted CA bundles and CRLs (`config::checks::tls_bytes`,
//! framed as BoringSSL frames PEM: `config::checks::pem`), inline in a listener's or a
//! cluster's context, in a `secrets:` resource, and in files on Switchyard's host
//! (`switchyard_files`); a `jwt_authn` provider's JWKS (`config::checks::jwks`); a basic-auth
//! filter's htpasswd users (`config::checks::basic_auth`); Lua (`config::checks::lua`); a
//! route's URI templates (`config::checks::uri_template`). Each case varies one property,
//! with near misses; it goes through Switchyard's loader and through `envoy --mode
//! validate`, and the verdicts must agree, Envoy's error containing the loader's words.
//!
//! The certificates and keys are made here with the `openssl` command (installed by
//! scripts/deps), each run afresh.

use switchyard_testkit as support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use support::envoy::envoy_binary;

const HCM: &str =
    "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const ROUTER: &str = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";
const DTC: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext";
const UTC: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";

/// Certificates and keys made with `openssl` in a directory of their own.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(dir: &Path) -> Pki {
        Pki {
            dir: dir.to_path_buf(),
        }
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&self.dir)
            .output()
            .expect("the openssl command (scripts/deps installs it)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).expect(name)
    }

    fn bytes(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(name)).expect(name)
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// A self-signed certificate `name.pem` and its key `name.key`, from `openssl req`'s
    /// `-newkey` argument and options, with the subject `subject`.
    fn self_signed(&self, name: &str, newkey: &[&str], subject: &str, extra: &[&str]) {
        let (pem, key) = (format!("{name}.pem"), format!("{name}.key"));
        let mut args = vec!["req", "-x509", "-nodes", "-days", "30", "-subj", subject];
        args.extend(["-keyout", &key, "-out", &pem]);
        args.extend(newkey);
        args.extend(extra);
        self.openssl(&args);
    }
}

/// Where a case's bytes go.
#[derive(Clone, Debug)]
enum Case {
    /// A listener serving TLS with this `DownstreamTlsContext`.
    Server(Value),
    /// A cluster with this `UpstreamTlsContext`.
    Client(Value),
    /// A secret, used by a cluster (a client certificate, or a validation context) whose
    /// context names it.
    Secret(Value),
    /// A secret, used by a listener serving TLS with this `DownstreamTlsContext`.
    ServerSecret(Value, Value),
    /// A listener with this HTTP filter before its router.
    Filter(Value),
    /// A listener whose route has this `typed_per_filter_config`.
    PerRoute(Value),
    /// A listener whose one route is this (beside a cluster `c` it may route to).
    Route(Value),
}

struct Judged {
    name: String,
    case: Case,
    /// Envoy refuses it.
    refused: bool,
    /// Only Envoy can refuse it (the loader takes it): what only running a script finds.
    envoy_only: bool,
}

fn inline(text: &str) -> Value {
    json!({ "inline_string": text })
}

fn pair(chain: &str, key: &str) -> Value {
    json!({"certificate_chain": inline(chain), "private_key": inline(key)})
}

fn server(certificate: Value) -> Case {
    Case::Server(json!({"common_tls_context": {"tls_certificates": [certificate]}}))
}

fn client(certificate: Value) -> Case {
    Case::Client(json!({"common_tls_context": {"tls_certificates": [certificate]}}))
}

fn validation(context: Value) -> Case {
    Case::Client(json!({"common_tls_context": {"validation_context": context}}))
}

fn cluster(context: Value) -> Value {
    json!({"name": "c", "connect_timeout": "1s", "type": "STATIC",
        "transport_socket": {"name": "tls", "typed_config": merged(json!({"@type": UTC}), context)},
        "load_assignment": {"cluster_name": "c", "endpoints": [{"lb_endpoints": [
            {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 1}}}}]}]}})
}

fn listener(context: Value) -> Value {
    let mut l = plain_listener(json!([]));
    l["filter_chains"][0]["transport_socket"] =
        json!({"name": "tls", "typed_config": merged(json!({"@type": DTC}), context)});
    l
}

/// A listener whose HTTP connection manager has these filters before its router.
fn plain_listener(filters: Value) -> Value {
    let mut filters = filters.as_array().cloned().unwrap_or_default();
    filters.push(json!({"name": "router", "typed_config": {"@type": ROUTER}}));
    json!({"name": "l", "address": {"socket_address": {"address": "127.0.0.1", "port_value": 10000}},
        "filter_chains": [{"filters": [{"name": "hcm", "typed_config": {"@type": HCM, "stat_prefix": "s",
            "route_config": {"name": "r", "virtual_hosts": [{"name": "v", "domains": ["*"],
                "routes": [{"match": {"prefix": "/"}, "direct_response": {"status": 200}}]}]},
            "http_filters": filters}}]}]})
}

fn merge_into(into: &mut Value, extra: Value) {
    if let (Some(into), Value::Object(extra)) = (into.as_object_mut(), extra) {
        into.extend(extra);
    }
}

fn merged(mut into: Value, extra: Value) -> Value {
    merge_into(&mut into, extra);
    into
}

/// The cluster context that uses a secret: as its certificate, or as its validation context.
fn user_of(secret: &Value) -> Value {
    let name = secret["name"].clone();
    let files = &secret["switchyard_files"];
    if secret.get("validation_context").is_some() || files.get("trusted_ca").is_some() {
        json!({"common_tls_context": {"validation_context_sds_secret_config": {"name": name}}})
    } else {
        json!({"common_tls_context": {"tls_certificate_sds_secret_configs": [{"name": name}]}})
    }
}

/// The snapshot file the loader reads, and the bootstrap Envoy validates.
fn documents(case: &Case) -> (Value, Value) {
    match case {
        Case::Server(context) => {
            let l = listener(context.clone());
            (
                json!({"listeners": [l.clone()]}),
                json!({"static_resources": {"listeners": [l]}}),
            )
        }
        Case::ServerSecret(secret, context) => {
            let l = listener(context.clone());
            (
                json!({"secrets": [secret.clone()], "listeners": [l.clone()]}),
                json!({"static_resources": {"secrets": [secret.clone()], "listeners": [l]}}),
            )
        }
        Case::PerRoute(config) => {
            let mut l = plain_listener(json!([]));
            l["filter_chains"][0]["filters"][0]["typed_config"]["route_config"]["virtual_hosts"]
                [0]["routes"][0]["typed_per_filter_config"] = config.clone();
            (
                json!({"listeners": [l.clone()]}),
                json!({"static_resources": {"listeners": [l]}}),
            )
        }
        Case::Route(route) => {
            let mut l = plain_listener(json!([]));
            l["filter_chains"][0]["filters"][0]["typed_config"]["route_config"]["virtual_hosts"]
                [0]["routes"][0] = route.clone();
            let c = json!({"name": "c", "connect_timeout": "1s"});
            (
                json!({"listeners": [l.clone()], "clusters": [c.clone()]}),
                json!({"static_resources": {"listeners": [l], "clusters": [c]}}),
            )
        }
        Case::Filter(filter) => {
            let l = plain_listener(json!([filter]));
            (
                json!({"listeners": [l.clone()]}),
                json!({"static_resources": {"listeners": [l]}}),
            )
        }
        Case::Client(context) => {
            let c = cluster(context.clone());
            (
                json!({"clusters": [c.clone()]}),
                json!({"static_resources": {"clusters": [c]}}),
            )
        }
        Case::Secret(secret) => {
            let c = cluster(user_of(secret));
            // Envoy reads the files `switchyard_files` names as its own `filename`s.
            let mut envoy_secret = secret.clone();
            if let Some(files) = envoy_secret
                .as_object_mut()
                .and_then(|s| s.remove("switchyard_files"))
            {
                for (key, path) in files.as_object().expect("files").clone() {
                    let parent = if key == "trusted_ca" || key == "crl" {
                        "validation_context"
                    } else {
                        "tls_certificate"
                    };
                    envoy_secret[parent][key.as_str()] = json!({"filename": path});
                }
            }
            (
                json!({"secrets": [secret.clone()], "clusters": [c.clone()]}),
                json!({"static_resources": {"secrets": [envoy_secret], "clusters": [c]}}),
            )
        }
    }
}

/// The loader's verdict: `None` if the file loads, else its error.
/// Through the whole loader, as `serve` and `validate` load a directory: one file's checks,
/// and those across files (a secret judged by the listener that serves it).
fn load(file: &Value, dir: &Path) -> Option<String> {
    let config = dir.join("config");
    let _ = std::fs::remove_dir_all(&config);
    std::fs::create_dir(&config).expect("mkdir");
    let text = serde_json::to_string(file).expect("json");
    std::fs::write(config.join("snapshot.json"), text).expect("write");
    switchyard::config::load(&[config], &switchyard::config::LoadOptions::default())
        .err()
        .map(|failure| {
            failure
                .errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        })
}

/// The words Envoy's refusal must contain: what the loader says after its own preamble.
fn words(error: &str) -> &str {
    if let Some(words) = error.split("Envoy would reject it with: ").nth(1) {
        return words;
    }
    // A file's error (`switchyard_files`) gives Envoy's words about the file after the field.
    error
        .find("Failed to load")
        .map_or(error, |at| &error[at..])
}

fn cases(pki: &Pki) -> Vec<Judged> {
    // The material: a CA and a leaf it signs, self-signed leaves of each key type, names.
    pki.self_signed("ca", &["-newkey", "rsa:2048"], "/CN=ca", &[]);
    pki.openssl(&[
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "leaf.key", "-out", "leaf.csr", "-subj",
        "/CN=leaf",
    ]);
    pki.openssl(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "30",
        "-out",
        "leaf.pem",
    ]);
    pki.self_signed("other", &["-newkey", "rsa:2048"], "/CN=other", &[]);
    pki.self_signed("rsa1024", &["-newkey", "rsa:1024"], "/CN=a", &[]);
    for curve in [
        "prime256v1",
        "secp384r1",
        "secp521r1",
        "secp256k1",
        "secp224r1",
    ] {
        let param = format!("ec_paramgen_curve:{curve}");
        pki.self_signed(curve, &["-newkey", "ec", "-pkeyopt", &param], "/CN=a", &[]);
    }
    pki.self_signed("ed25519", &["-newkey", "ed25519"], "/CN=a", &[]);
    pki.self_signed("ed25519b", &["-newkey", "ed25519"], "/CN=b", &[]);
    pki.self_signed("pss", &["-newkey", "rsa-pss"], "/CN=a", &[]);
    pki.self_signed("nocn", &["-newkey", "rsa:2048"], "/O=x", &[]);
    pki.self_signed(
        "dnssan",
        &["-newkey", "rsa:2048"],
        "/O=x",
        &["-addext", "subjectAltName=DNS:a"],
    );
    pki.self_signed(
        "ipsan",
        &["-newkey", "rsa:2048"],
        "/O=x",
        &["-addext", "subjectAltName=IP:10.0.0.1"],
    );
    pki.self_signed(
        "mailsan",
        &["-newkey", "rsa:2048"],
        "/O=x",
        &["-addext", "subjectAltName=email:a@b"],
    );
    // The leaf's key in every form: PKCS#1, PKCS#8, encrypted PKCS#8, old-style encrypted.
    pki.openssl(&[
        "pkey",
        "-in",
        "leaf.key",
        "-traditional",
        "-out",
        "leaf.pkcs1",
    ]);
    pki.openssl(&["pkey", "-in", "leaf.key", "-out", "leaf.p8"]);
    pki.openssl(&[
        "pkcs8",
        "-topk8",
        "-v2",
        "aes-256-cbc",
        "-passout",
        "pass:pw",
        "-in",
        "leaf.key",
        "-out",
        "leaf.enc",
    ]);
    pki.openssl(&[
        "rsa",
        "-in",
        "leaf.key",
        "-traditional",
        "-aes256",
        "-passout",
        "pass:pw",
        "-out",
        "leaf.oldenc",
    ]);
    pki.openssl(&["ec", "-in", "secp521r1.key", "-out", "p521.sec1"]);
    pki.openssl(&[
        "ec",
        "-in",
        "prime256v1.key",
        "-no_public",
        "-out",
        "p256.nopub",
    ]);
    pki.self_signed(
        "p256b",
        &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"],
        "/CN=b",
        &[],
    );
    pki.openssl(&[
        "ec",
        "-in",
        "p256b.key",
        "-no_public",
        "-out",
        "p256b.nopub",
    ]);
    // A CRL the CA signs.
    std::fs::write(pki.dir.join("index.txt"), "").expect("index");
    std::fs::write(pki.dir.join("crlnumber"), "01\n").expect("crlnumber");
    std::fs::write(
        pki.dir.join("ca.cnf"),
        "[ca]\ndefault_ca=d\n[d]\ndatabase=index.txt\ncrlnumber=crlnumber\ndefault_md=sha256\ndefault_crl_days=30\n",
    )
    .expect("cnf");
    pki.openssl(&[
        "ca", "-config", "ca.cnf", "-gencrl", "-keyfile", "ca.key", "-cert", "ca.pem", "-out",
        "ca.crl",
    ]);

    let leaf = pki.read("leaf.pem");
    let key = pki.read("leaf.key");
    let ca = pki.read("ca.pem");
    let crl = pki.read("ca.crl");
    let lines: Vec<&str> = leaf.lines().collect();
    let body = &lines[1..lines.len() - 1];
    let block =
        |label: &str, b64: &str| format!("-----BEGIN {label}-----\n{b64}\n-----END {label}-----\n");
    let relabel = |pem: &str, from: &str, to: &str| {
        pem.replace(&format!("BEGIN {from}-----"), &format!("BEGIN {to}-----"))
            .replace(&format!("END {from}-----"), &format!("END {to}-----"))
    };
    let broken = |pem: &str| {
        let line = pem.lines().nth(3).expect("a fourth line");
        pem.replace(line, &format!("{}!!{}", &line[..10], &line[12..]))
    };
    let leaf_der = {
        let text: String = body.concat();
        text
    };
    let self_pair = |name: &str| {
        pair(
            &pki.read(&format!("{name}.pem")),
            &pki.read(&format!("{name}.key")),
        )
    };
    let with = |certificate: Value, extra: Value| merged(certificate, extra);
    let password = |p: &str| json!({"password": inline(p)});

    let mut out = Vec::new();
    let mut add = |name: &str, case: Case, refused: bool| out.push(judged(name, case, refused));

    // A certificate chain (Envoy: "Failed to load certificate chain from <inline>").
    add("a chain: one certificate", server(pair(&leaf, &key)), false);
    add(
        "a chain: leaf and CA",
        server(pair(&(leaf.clone() + &ca), &key)),
        false,
    );
    add("a chain: text", server(pair("hello", &key)), true);
    add(
        "a chain: a character outside base64",
        server(pair(&broken(&leaf), &key)),
        true,
    );
    add(
        "a chain: no END line",
        server(pair(&(lines[..lines.len() - 1].join("\n") + "\n"), &key)),
        true,
    );
    add(
        "a chain: an indented BEGIN line",
        server(pair(&format!("  {leaf}"), &key)),
        true,
    );
    let indented_end = format!(
        "{}\n  {}\n",
        lines[..lines.len() - 1].join("\n"),
        lines[lines.len() - 1]
    );
    add(
        "a chain: an indented END line",
        server(pair(&indented_end, &key)),
        true,
    );
    let indented_body = std::iter::once(lines[0].to_string())
        .chain(body.iter().map(|l| format!("  {l}")))
        .chain(std::iter::once(lines[lines.len() - 1].to_string()))
        .collect::<Vec<_>>()
        .join("\n");
    add(
        "a chain: indented base64 (taken)",
        server(pair(&indented_body, &key)),
        false,
    );
    let blank = format!("{}\n{}\n\n{}\n", lines[0], lines[1], lines[2..].join("\n"));
    add(
        "a chain: a blank line in the base64",
        server(pair(&blank, &key)),
        true,
    );
    let header = format!(
        "{}\nProc-Type: 4,ENCRYPTED\n\n{}\n",
        lines[0],
        lines[1..].join("\n")
    );
    add(
        "a chain: an encryption header",
        server(pair(&header, &key)),
        true,
    );
    add(
        "a chain: one long base64 line (taken)",
        server(pair(&block("CERTIFICATE", &leaf_der), &key)),
        false,
    );
    add(
        "a chain: CRLF line ends (taken)",
        server(pair(&leaf.replace('\n', "\r\n"), &key)),
        false,
    );
    add(
        "a chain: text around the block (taken)",
        server(pair(&format!("before\n{leaf}after\n"), &key)),
        false,
    );
    add(
        "a chain: the key's block first (taken)",
        server(pair(&(key.clone() + &leaf), &key)),
        false,
    );
    add(
        "a chain: TRUSTED CERTIFICATE (taken)",
        server(pair(
            &relabel(&leaf, "CERTIFICATE", "TRUSTED CERTIFICATE"),
            &key,
        )),
        false,
    );
    add(
        "a chain: X509 CERTIFICATE after the leaf (taken)",
        server(pair(
            &(leaf.clone() + &relabel(&ca, "CERTIFICATE", "X509 CERTIFICATE")),
            &key,
        )),
        false,
    );
    add(
        "a chain: a second block that does not decode",
        server(pair(&(leaf.clone() + &broken(&ca)), &key)),
        true,
    );
    add(
        "a chain: a second block that is no certificate",
        server(pair(
            &(leaf.clone() + &block("CERTIFICATE", "aGVsbG8gd29ybGQh")),
            &key,
        )),
        true,
    );
    add(
        "a chain: an empty second block",
        server(pair(
            &(leaf.clone() + "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"),
            &key,
        )),
        true,
    );
    add(
        "a chain: the CA first",
        server(pair(&(ca.clone() + &leaf), &key)),
        true,
    );
    add(
        "a chain: DER where PEM is due",
        server(
            json!({"certificate_chain": {"inline_bytes": leaf_der}, "private_key": inline(&key)}),
        ),
        true,
    );
    add(
        "a chain: an RSA key of 1024 bits",
        server(self_pair("rsa1024")),
        true,
    );
    add(
        "a chain: P-256 (taken)",
        server(self_pair("prime256v1")),
        false,
    );
    add(
        "a chain: P-384 (taken)",
        server(self_pair("secp384r1")),
        false,
    );
    add(
        "a chain: P-521 (taken)",
        server(self_pair("secp521r1")),
        false,
    );
    add("a chain: secp256k1", server(self_pair("secp256k1")), true);
    add("a chain: P-224", server(self_pair("secp224r1")), true);
    add("a chain: RSA-PSS", server(self_pair("pss")), true);
    add(
        "a chain: Ed25519 (taken)",
        server(self_pair("ed25519")),
        false,
    );

    // A server certificate's names.
    add(
        "a server certificate: no CN, no SAN",
        server(self_pair("nocn")),
        true,
    );
    add(
        "a server certificate: only an email SAN",
        server(self_pair("mailsan")),
        true,
    );
    add(
        "a server certificate: a DNS SAN (taken)",
        server(self_pair("dnssan")),
        false,
    );
    add(
        "a server certificate: an IP SAN (taken)",
        server(self_pair("ipsan")),
        false,
    );
    add(
        "a client certificate: no CN, no SAN (taken)",
        client(self_pair("nocn")),
        false,
    );

    // Its private key (Envoy: "Failed to load private key from <inline>, Cause: ...").
    add("a key: text", server(pair(&leaf, "hello")), true);
    add(
        "a key: another certificate's",
        server(pair(&leaf, &pki.read("other.key"))),
        true,
    );
    add(
        "a key: EC for an RSA certificate",
        server(pair(&leaf, &pki.read("prime256v1.key"))),
        true,
    );
    add(
        "a key: another client certificate's",
        client(pair(&leaf, &pki.read("other.key"))),
        true,
    );
    add(
        "a key: PKCS#1 (taken)",
        server(pair(&leaf, &pki.read("leaf.pkcs1"))),
        false,
    );
    add(
        "a key: PKCS#8 under an RSA label (taken)",
        server(pair(
            &leaf,
            &relabel(&pki.read("leaf.p8"), "PRIVATE KEY", "RSA PRIVATE KEY"),
        )),
        false,
    );
    add(
        "a key: PKCS#1 under a PKCS#8 label",
        server(pair(
            &leaf,
            &relabel(&pki.read("leaf.pkcs1"), "RSA PRIVATE KEY", "PRIVATE KEY"),
        )),
        true,
    );
    add(
        "a key: RSA PKCS#8 under an EC label",
        server(pair(
            &leaf,
            &relabel(&pki.read("leaf.p8"), "PRIVATE KEY", "EC PRIVATE KEY"),
        )),
        true,
    );
    add(
        "a key: encrypted, no password",
        server(pair(&leaf, &pki.read("leaf.enc"))),
        true,
    );
    add(
        "a key: encrypted, its password (taken)",
        server(with(pair(&leaf, &pki.read("leaf.enc")), password("pw"))),
        false,
    );
    add(
        "a key: encrypted, a wrong password",
        server(with(pair(&leaf, &pki.read("leaf.enc")), password("nope"))),
        true,
    );
    add(
        "a key: old-style encrypted, no password",
        server(pair(&leaf, &pki.read("leaf.oldenc"))),
        true,
    );
    add(
        "a key: old-style encrypted, its password (taken)",
        server(with(pair(&leaf, &pki.read("leaf.oldenc")), password("pw"))),
        false,
    );
    add(
        "a key: not encrypted, a password given (taken)",
        server(with(pair(&leaf, &key), password("pw"))),
        false,
    );
    add(
        "a key: P-521 in SEC1 (taken)",
        server(pair(&pki.read("secp521r1.pem"), &pki.read("p521.sec1"))),
        false,
    );
    add(
        "a key: P-256 without its public half (taken)",
        server(pair(&pki.read("prime256v1.pem"), &pki.read("p256.nopub"))),
        false,
    );
    add(
        "a key: another P-256 key without its public half",
        server(pair(&pki.read("prime256v1.pem"), &pki.read("p256b.nopub"))),
        true,
    );
    add(
        "a key: another Ed25519 key",
        server(pair(&pki.read("ed25519.pem"), &pki.read("ed25519b.key"))),
        true,
    );
    add(
        "a key: a bad block after it (taken)",
        server(pair(&leaf, &(key.clone() + &block("PRIVATE KEY", "AAAA")))),
        false,
    );

    // A trusted CA bundle ("Failed to load trusted CA certificates from <inline>").
    let ca_of = |text: &str| validation(json!({"trusted_ca": inline(text)}));
    add("a CA: one certificate (taken)", ca_of(&ca), false);
    add("a CA: a leaf (taken)", ca_of(&leaf), false);
    add("a CA: text", ca_of("hello"), true);
    add(
        "a CA: a block that does not decode",
        ca_of(&broken(&ca)),
        true,
    );
    add(
        "a CA: a good one, then a bad one",
        ca_of(&(ca.clone() + &broken(&leaf))),
        true,
    );
    add("a CA: only a CRL", ca_of(&crl), true);
    add(
        "a CA: only a traditional key",
        ca_of(&pki.read("leaf.pkcs1")),
        true,
    );
    add(
        "a CA: with a PKCS#8 key (taken)",
        ca_of(&(ca.clone() + &pki.read("leaf.p8"))),
        false,
    );
    add(
        "a CA: a block that is no certificate",
        ca_of(&block("CERTIFICATE", "aGVsbG8=")),
        true,
    );

    // A CRL ("Failed to load CRL from <inline>").
    let crl_of = |text: &str| validation(json!({"trusted_ca": inline(&ca), "crl": inline(text)}));
    add("a CRL: one (taken)", crl_of(&crl), false);
    add("a CRL: text (taken)", crl_of("hello"), false);
    add("a CRL: a certificate (taken)", crl_of(&ca), false);
    add(
        "a CRL: a block that does not decode",
        crl_of(&broken(&crl)),
        true,
    );
    add(
        "a CRL: a block that is no CRL",
        crl_of(&block("X509 CRL", "aGVsbG8=")),
        true,
    );

    // The same in `secrets:` resources.
    let secret = |name: &str, body: Value| merged(json!({"name": name}), body);
    add(
        "a secret: a certificate and its key (taken)",
        Case::Secret(secret("s", json!({"tls_certificate": pair(&leaf, &key)}))),
        false,
    );
    add(
        "a secret: a chain that is text",
        Case::Secret(secret("s", json!({"tls_certificate": pair("hello", &key)}))),
        true,
    );
    add(
        "a secret: another certificate's key",
        Case::Secret(secret(
            "s",
            json!({"tls_certificate": pair(&leaf, &pki.read("other.key"))}),
        )),
        true,
    );
    add(
        "a secret: a CA that is text",
        Case::Secret(secret(
            "s",
            json!({"validation_context": {"trusted_ca": inline("hello")}}),
        )),
        true,
    );

    // Session ticket keys in a secret (80 bytes each), used by a server context.
    let tickets = |keys: Value| {
        Case::ServerSecret(
            json!({"name": "tickets", "session_ticket_keys": {"keys": keys}}),
            json!({"common_tls_context": {"tls_certificates": [pair(&leaf, &key)]},
                "session_ticket_keys_sds_secret_config": {"name": "tickets"}}),
        )
    };
    add(
        "a secret: session ticket keys of 80 bytes (taken)",
        tickets(json!([inline(&"k".repeat(80))])),
        false,
    );
    add(
        "a secret: a session ticket key of 79 bytes",
        tickets(json!([inline(&"k".repeat(80)), inline(&"k".repeat(79))])),
        true,
    );

    // A secret's certificate is judged as a server's where a listener serves it.
    let served = |certificate: Value| {
        Case::ServerSecret(
            json!({"name": "server", "tls_certificate": certificate}),
            json!({"common_tls_context": {"tls_certificate_sds_secret_configs": [{"name": "server"}]}}),
        )
    };
    add(
        "a secret served by a listener: no CN, no SAN",
        served(self_pair("nocn")),
        true,
    );
    add(
        "a secret served by a listener: a DNS SAN (taken)",
        served(self_pair("dnssan")),
        false,
    );
    add(
        "a secret used by a cluster: no CN, no SAN (taken)",
        Case::Secret(secret("s", json!({"tls_certificate": self_pair("nocn")}))),
        false,
    );

    // And in files on Switchyard's host: Envoy reads the same files as its own.
    std::fs::write(pki.dir.join("text.crl"), "no CRL here\n").expect("crl");
    let files = |body: Value| Case::Secret(json!({"name": "f", "switchyard_files": body}));
    add(
        "files: a P-521 certificate and key (taken)",
        files(
            json!({"certificate_chain": pki.path("secp521r1.pem"), "private_key": pki.path("secp521r1.key")}),
        ),
        false,
    );
    add(
        "files: an encrypted key and its password (taken)",
        Case::Secret(json!({"name": "f", "tls_certificate": password("pw"),
            "switchyard_files": {"certificate_chain": pki.path("leaf.pem"), "private_key": pki.path("leaf.enc")}})),
        false,
    );
    add(
        "files: an encrypted key, no password",
        files(
            json!({"certificate_chain": pki.path("leaf.pem"), "private_key": pki.path("leaf.enc")}),
        ),
        true,
    );
    add(
        "files: a key of another certificate",
        files(
            json!({"certificate_chain": pki.path("leaf.pem"), "private_key": pki.path("other.key")}),
        ),
        true,
    );
    add(
        "files: a CRL file holding no CRL (taken)",
        files(json!({"trusted_ca": pki.path("ca.pem"), "crl": pki.path("text.crl")})),
        false,
    );
    let _ = pki.bytes("ca.crl");
    out.extend(ocsp_cases(pki));
    out.extend(pkcs12_cases(pki));
    out.extend(jwks_cases());
    out.extend(htpasswd_cases());
    out.extend(lua_cases());
    out.extend(uri_template_cases());
    out
}

/// A server certificate (the leaf) with this OCSP staple.
fn stapled(pki: &Pki, staple: Value) -> Case {
    server(merged(
        pair(&pki.read("leaf.pem"), &pki.read("leaf.key")),
        json!({"ocsp_staple": staple}),
    ))
}

/// OCSP staples ("OCSP response ...").
fn ocsp_cases(pki: &Pki) -> Vec<Judged> {
    // Responses from the CA (openssl's responder, from a request; the signature is not
    // judged by Envoy): for the leaf, for another certificate, for two.
    let respond = |name: &str, certs: &[&str]| {
        let request = format!("{name}.req");
        let mut args = vec![
            "ocsp",
            "-issuer",
            "ca.pem",
            "-no_nonce",
            "-reqout",
            &request,
        ];
        for cert in certs {
            args.extend(["-cert", cert]);
        }
        pki.openssl(&args);
        let response = format!("{name}.ocsp");
        pki.openssl(&[
            "ocsp",
            "-index",
            "index.txt",
            "-rsigner",
            "ca.pem",
            "-rkey",
            "ca.key",
            "-CA",
            "ca.pem",
            "-reqin",
            &request,
            "-respout",
            &response,
            "-ndays",
            "1",
        ]);
        let base64 = format!("{name}.b64");
        pki.openssl(&["base64", "-A", "-in", &response, "-out", &base64]);
        pki.read(&base64)
    };
    let leaf = respond("leaf", &["leaf.pem"]);
    let other = respond("other", &["other.pem"]);
    let both = respond("both", &["leaf.pem", "other.pem"]);
    let mut trailing = pki.bytes("leaf.ocsp");
    trailing.push(0);
    std::fs::write(pki.dir.join("trailing.ocsp"), &trailing).expect("write");
    pki.openssl(&[
        "base64",
        "-A",
        "-in",
        "trailing.ocsp",
        "-out",
        "trailing.b64",
    ]);
    let trailing = pki.read("trailing.b64");
    pki.self_signed(
        "muststaple",
        &["-newkey", "rsa:2048"],
        "/CN=a",
        &["-addext", "tlsfeature=status_request"],
    );
    let bytes = |b64: &str| json!({"inline_bytes": b64});
    vec![
        judged(
            "ocsp: the leaf's response (taken)",
            stapled(pki, bytes(&leaf)),
            false,
        ),
        judged(
            "ocsp: another certificate's response",
            stapled(pki, bytes(&other)),
            true,
        ),
        judged(
            "ocsp: a response for two certificates",
            stapled(pki, bytes(&both)),
            true,
        ),
        judged(
            "ocsp: a response and a byte more",
            stapled(pki, bytes(&trailing)),
            true,
        ),
        // SEQUENCE { ENUMERATED tryLater }, and SEQUENCE { ENUMERATED successful }.
        judged(
            "ocsp: an unsuccessful response",
            stapled(pki, bytes("MAMKAQM=")),
            true,
        ),
        judged(
            "ocsp: a successful response with no body",
            stapled(pki, bytes("MAMKAQA=")),
            true,
        ),
        judged("ocsp: not DER", stapled(pki, bytes("aGVsbG8=")), true),
        judged(
            "ocsp: given as inline_string",
            stapled(pki, inline("hello")),
            true,
        ),
        judged(
            "ocsp: another certificate's, in a secret a listener serves",
            Case::ServerSecret(
                json!({"name": "server", "tls_certificate": merged(
                    pair(&pki.read("leaf.pem"), &pki.read("leaf.key")),
                    json!({"ocsp_staple": bytes(&other)}),
                )}),
                json!({"common_tls_context": {"tls_certificate_sds_secret_configs": [{"name": "server"}]}}),
            ),
            true,
        ),
        judged(
            "ocsp: none for a must-staple certificate",
            server(pair(
                &pki.read("muststaple.pem"),
                &pki.read("muststaple.key"),
            )),
            true,
        ),
    ]
}

/// PKCS#12 bundles ("Failed to load pkcs12 from <inline>").
fn pkcs12_cases(pki: &Pki) -> Vec<Judged> {
    let bundle = |name: &str, password: &str, extra: &[&str]| {
        let out = format!("{name}.p12");
        let pass = format!("pass:{password}");
        let mut args = vec![
            "pkcs12", "-export", "-in", "leaf.pem", "-inkey", "leaf.key", "-passout", &pass,
            "-out", &out,
        ];
        args.extend(extra);
        pki.openssl(&args);
        let b64 = format!("{name}.p12.b64");
        pki.openssl(&["base64", "-A", "-in", &out, "-out", &b64]);
        pki.read(&b64)
    };
    let sha256 = bundle("sha256", "pw", &[]);
    let sha1 = bundle("sha1", "pw", &["-macalg", "sha1"]);
    let open = bundle("open", "", &[]);
    let given = |b64: &str, password: Option<&str>| {
        let mut certificate = json!({"pkcs12": {"inline_bytes": b64}});
        if let Some(password) = password {
            certificate["password"] = inline(password);
        }
        server(certificate)
    };
    vec![
        judged(
            "pkcs12: its password (taken)",
            given(&sha256, Some("pw")),
            false,
        ),
        judged(
            "pkcs12: a wrong password",
            given(&sha256, Some("nope")),
            true,
        ),
        judged("pkcs12: no password", given(&sha256, None), true),
        judged(
            "pkcs12: a SHA-1 MAC, its password (taken)",
            given(&sha1, Some("pw")),
            false,
        ),
        judged(
            "pkcs12: a SHA-1 MAC, a wrong password",
            given(&sha1, Some("nope")),
            true,
        ),
        judged(
            "pkcs12: an empty password, none given (taken)",
            given(&open, None),
            false,
        ),
        judged("pkcs12: not a bundle", given("aGVsbG8=", Some("pw")), true),
    ]
}

const LUA: &str = "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua";

fn lua_filter(config: Value) -> Case {
    Case::Filter(json!({"name": "lua", "typed_config": merged(json!({"@type": LUA}), config)}))
}

/// Lua scripts ("script load error: ...").
fn lua_cases() -> Vec<Judged> {
    let default = |code: &str| lua_filter(json!({"default_source_code": inline(code)}));
    let per_route = |code: &str| {
        Case::PerRoute(json!({"envoy.filters.http.lua": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.LuaPerRoute",
            "source_code": inline(code)}}))
    };
    vec![
        judged(
            "lua: a script (taken)",
            default("function envoy_on_request(h) h:logInfo('x') end"),
            false,
        ),
        judged(
            "lua: goto, which LuaJIT has (taken)",
            default("goto done\n::done::"),
            false,
        ),
        judged(
            "lua: an end too many",
            default("function envoy_on_request(h) end end"),
            true,
        ),
        judged(
            "lua: Lua 5.3's integer division",
            default("local a = 7 // 2"),
            true,
        ),
        judged("lua: an unfinished string", default("local a = 'x"), true),
        judged(
            "lua: a named source that does not compile",
            lua_filter(json!({"source_codes": {"s": inline("return (")}})),
            true,
        ),
        judged(
            "lua: a route's script that does not compile",
            per_route("x = = 1"),
            true,
        ),
        judged(
            "lua: a route's script (taken)",
            per_route("function envoy_on_request(h) end"),
            false,
        ),
        Judged {
            envoy_only: true,
            ..judged(
                "lua: an error only running the script finds",
                default("error('boom')"),
                true,
            )
        },
    ]
}

fn judged(name: &str, case: Case, refused: bool) -> Judged {
    Judged {
        name: name.to_string(),
        case,
        refused,
        envoy_only: false,
    }
}

/// A `jwt_authn` filter with one provider whose `local_jwks` is `jwks`.
fn jwt(jwks: &str) -> Case {
    Case::Filter(json!({"name": "jwt", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
        "providers": {"p": {"issuer": "i", "local_jwks": inline(jwks)}},
        "rules": [{"match": {"prefix": "/"}, "requires": {"provider_name": "p"}}]}}))
}

/// JWKS ("Provider 'p' in jwt_authn config has invalid local jwks: ...").
fn jwks_cases() -> Vec<Judged> {
    // An RSA modulus (odd) and P-256's generator, base64url.
    let n = "AQAB".repeat(64) + "AQAB";
    let (gx, gy) = (
        "axfR8uEsQkf4vOblY6RA8ncDfYEt6zOg9KE5RdiYwpY",
        "T-NC4v4af5uO5-tKfA-eFivOM1drMV7Oy7ZAaDe_UfU",
    );
    let key = |fields: Value| json!({"keys": [fields]}).to_string();
    vec![
        judged(
            "jwks: an RSA key (taken)",
            jwt(&key(
                json!({"kty": "RSA", "n": n, "e": "AQAB", "alg": "RS256"}),
            )),
            false,
        ),
        judged(
            "jwks: an RSA key for PS256 (taken)",
            jwt(&key(
                json!({"kty": "RSA", "n": n, "e": "AQAB", "alg": "PS256"}),
            )),
            false,
        ),
        judged("jwks: not JSON", jwt("hello"), true),
        judged("jwks: no keys", jwt(r#"{"foo": 1}"#), true),
        judged("jwks: keys not a list", jwt(r#"{"keys": {}}"#), true),
        judged("jwks: no key in the list", jwt(r#"{"keys": []}"#), true),
        judged(
            "jwks: an RSA key without n",
            jwt(&key(json!({"kty": "RSA", "e": "AQAB"}))),
            true,
        ),
        judged(
            "jwks: an RSA key without e",
            jwt(&key(json!({"kty": "RSA", "n": n}))),
            true,
        ),
        judged(
            "jwks: an RSA key whose n is a number",
            jwt(&key(json!({"kty": "RSA", "n": 5, "e": "AQAB"}))),
            true,
        ),
        judged(
            "jwks: an even RSA modulus",
            jwt(&key(
                json!({"kty": "RSA", "n": "AQAB".repeat(64) + "AQAC", "e": "AQAB"}),
            )),
            true,
        ),
        judged(
            "jwks: an RSA exponent of 5",
            jwt(&key(json!({"kty": "RSA", "n": n, "e": "BQ"}))),
            true,
        ),
        judged(
            "jwks: an RSA modulus that is not base64url",
            jwt(&key(json!({"kty": "RSA", "n": "a!b", "e": "AQAB"}))),
            true,
        ),
        judged(
            "jwks: an RSA key with an ES alg",
            jwt(&key(
                json!({"kty": "RSA", "n": n, "e": "AQAB", "alg": "ES256"}),
            )),
            true,
        ),
        judged(
            "jwks: a key type not supported",
            jwt(&key(json!({"kty": "FOO"}))),
            true,
        ),
        judged("jwks: a key without kty", jwt(&key(json!({"n": n}))), true),
        judged(
            "jwks: a bad key then a good one (taken)",
            jwt(&json!({"keys": [{"kty": "FOO"}, {"kty": "oct", "k": "c2VjcmV0"}]}).to_string()),
            false,
        ),
        judged(
            "jwks: an HMAC key (taken)",
            jwt(&key(json!({"kty": "oct", "k": "c2VjcmV0", "alg": "HS256"}))),
            false,
        ),
        judged(
            "jwks: an HMAC key with no k",
            jwt(&key(json!({"kty": "oct"}))),
            true,
        ),
        judged(
            "jwks: an HMAC key with an RS alg",
            jwt(&key(json!({"kty": "oct", "k": "c2VjcmV0", "alg": "RS256"}))),
            true,
        ),
        judged(
            "jwks: a P-256 key (taken)",
            jwt(&key(json!({"kty": "EC", "crv": "P-256", "x": gx, "y": gy}))),
            false,
        ),
        judged(
            "jwks: a P-256 point off the curve",
            jwt(&key(json!({"kty": "EC", "crv": "P-256", "x": gx, "y": gx}))),
            true,
        ),
        judged(
            "jwks: an EC key on a curve not supported",
            jwt(&key(json!({"kty": "EC", "crv": "P-192", "x": gx, "y": gy}))),
            true,
        ),
        judged(
            "jwks: an EC crv and alg that do not match",
            jwt(&key(
                json!({"kty": "EC", "crv": "P-256", "alg": "ES384", "x": gx, "y": gy}),
            )),
            true,
        ),
        judged(
            "jwks: an EC key without y",
            jwt(&key(json!({"kty": "EC", "x": gx}))),
            true,
        ),
        judged(
            "jwks: an Ed25519 key (taken)",
            jwt(&key(
                json!({"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}),
            )),
            false,
        ),
        judged(
            "jwks: an Ed25519 key of 31 bytes",
            jwt(&key(
                json!({"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHUR"}),
            )),
            true,
        ),
        judged(
            "jwks: an OKP key on X25519",
            jwt(&key(
                json!({"kty": "OKP", "crv": "X25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}),
            )),
            true,
        ),
    ]
}

/// A route matched by the URI template `matching`, rewriting the path with `rewrite` when
/// given (or matched by prefix, when `matching` is `None`).
fn templated(matching: Option<&str>, rewrite: Option<&str>) -> Case {
    let mut route = json!({"match": {"prefix": "/"}, "route": {"cluster": "c"}});
    if let Some(template) = matching {
        route["match"] = json!({"path_match_policy": {"name": "m", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.path.match.uri_template.v3.UriTemplateMatchConfig",
            "path_template": template}}});
    }
    if let Some(template) = rewrite {
        route["route"]["path_rewrite_policy"] = json!({"name": "r", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.path.rewrite.uri_template.v3.UriTemplateRewriteConfig",
            "path_template_rewrite": template}});
    }
    Case::Route(route)
}

/// URI templates ("path_match_policy.path_template ... is invalid: ...",
/// "path_rewrite_policy.path_template_rewrite ... is invalid", the two together).
fn uri_template_cases() -> Vec<Judged> {
    let taken = [
        "/a/{x}",
        "/a/{x}/",
        "/",
        "/a/{x}.txt/b",
        "/a/p{x}s",
        "/a/{x=*}.t/{y}",
        "/a/p{x=**}.t/c",
        "/a/{x=a/*}.txt",
        "/a/{x=*/**}",
        "/a/**.txt",
        "/a/*b",
        "/a/***",
        "/a/b*c",
        "/a/b=c:@!$&'()+,;~%",
        "/{a}/{b}/{c}/{d}/{e}",
        "/a/{abcdefghijklmnop}",
    ];
    let refused = [
        "a/b",
        "/a/b c",
        "/a/\u{e9}",
        "/a//b",
        "/a/b?c",
        "/a/p}x",
        "/a/p{x",
        "/a/p{x/b}",
        "/a/{x",
        "/a/{x/b}",
        "/a/{x/b",
        "/a/p}{x",
        "/a/p^{1}",
        "/a/p{1}s^",
        "/a/{x}{y}",
        "/a/{{x}}",
        "/a/p{q{x}",
        "/a/{}",
        "/a/{x=}",
        "/a/{x=***}",
        "/a/{x=*a}",
        "/a/{x=a/}",
        "/a/{x=/a}",
        "/a/*{x}",
        "/a/*.txt/b",
        "/a/{x}/{x}",
        "/{a}/{b}/{c}/{d}/{e}/{f}",
        "/a/p{abcdefghijklmnopq}s",
        "/a/**/{x}.t",
        "/a/**/*",
        "/a/{x=**}.t/*",
        "/a/{x=**/*}",
    ];
    let mut out: Vec<Judged> = taken
        .iter()
        .map(|t| {
            judged(
                &format!("uri template: {t} (taken)"),
                templated(Some(t), None),
                false,
            )
        })
        .chain(refused.iter().map(|t| {
            let t = t.replace("\\u{e9}", "\u{e9}");
            judged(
                &format!("uri template: {t}"),
                templated(Some(&t), None),
                true,
            )
        }))
        .collect();
    let rewrites = [
        ("/a/{x}", "/{x}.txt", false),
        ("/a/{x}/p{y}s", "/{y}/{x}{x}", false),
        ("/a/{x}", "/", false),
        ("/a/{x}", "/a*", false),
        ("/a/{x}", "a", true),
        ("/a/{x}", "/a//b", true),
        ("/a/{x}", "/{x", true),
        ("/a/{x}", "/{1}", true),
        ("/a/{x}", "/a^", true),
        ("/a/{x}", "/{x=*}", true),
        ("/a/{x}", "/{y}", true),
        ("/a/{x=b/*}", "/{x}/{b}", true),
        ("/a/{x", "a", true),
    ];
    for (matching, rewrite, refused) in rewrites {
        out.push(judged(
            &format!("uri template: {matching} rewritten as {rewrite}"),
            templated(Some(matching), Some(rewrite)),
            refused,
        ));
    }
    out.push(judged(
        "uri template: a rewrite without a template match",
        templated(None, Some("/a")),
        true,
    ));
    // Which of two faults Envoy names: the templates before the route's rewrites are
    // counted, the rewrite's need of the match after.
    let with = |case: Case, extra: Value| match case {
        Case::Route(mut route) => {
            merge_into(&mut route["route"], extra);
            Case::Route(route)
        }
        other => other,
    };
    for (name, case, extra) in [
        (
            "a prefix rewrite beside a template rewrite without a template match",
            templated(None, Some("/a")),
            json!({"prefix_rewrite": "/x"}),
        ),
        (
            "a regex rewrite beside a rewrite of a variable the match lacks",
            templated(Some("/a/{x}"), Some("/{y}")),
            json!({"regex_rewrite": {"pattern": {"regex": "a"}, "substitution": "b"}}),
        ),
        (
            "a prefix rewrite beside an invalid rewrite template",
            templated(None, Some("a")),
            json!({"prefix_rewrite": "/x"}),
        ),
        (
            "an invalid match template and a prefix rewrite",
            templated(Some("/a/{x"), Some("/a")),
            json!({"prefix_rewrite": "/x"}),
        ),
    ] {
        out.push(judged(
            &format!("uri template: {name}"),
            with(case, extra),
            true,
        ));
    }
    out
}

/// A basic-auth filter with these users.
fn basic_auth(users: &str) -> Case {
    Case::Filter(json!({"name": "ba", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.basic_auth.v3.BasicAuth",
        "users": inline(users)}}))
}

/// htpasswd users ("basic auth: ...").
fn htpasswd_cases() -> Vec<Judged> {
    let hash = format!("{{SHA}}{}=", "a".repeat(27));
    vec![
        judged(
            "htpasswd: a user (taken)",
            basic_auth(&format!("u:{hash}\n")),
            false,
        ),
        judged(
            "htpasswd: comments and blank lines (taken)",
            basic_auth(&format!("# users\n\nu:{hash}\n")),
            false,
        ),
        judged("htpasswd: no colon", basic_auth("user\n"), true),
        judged("htpasswd: no name", basic_auth(&format!(":{hash}\n")), true),
        judged(
            "htpasswd: a user twice",
            basic_auth(&format!("u:{hash}\nu:{hash}\n")),
            true,
        ),
        judged(
            "htpasswd: an apr1 hash",
            basic_auth("u:$apr1$abc$def\n"),
            true,
        ),
        judged(
            "htpasswd: a short SHA hash",
            basic_auth("u:{SHA}abc\n"),
            true,
        ),
        judged(
            "htpasswd: CRLF line ends",
            basic_auth(&format!("u:{hash}\r\n")),
            true,
        ),
        judged(
            "htpasswd: an indented comment",
            basic_auth(&format!(" # c\nu:{hash}\n")),
            true,
        ),
        judged("htpasswd: empty", basic_auth(""), true),
    ]
}

#[test]
fn the_loader_judges_the_bytes_envoy_parses_as_envoy_does() {
    let Some(envoy) = envoy_binary() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(dir.path());
    let mut disagreements = Vec::new();
    let all = cases(&pki);
    for judged in &all {
        let (file, bootstrap) = documents(&judged.case);
        let ours = load(&file, dir.path());
        let theirs = switchyard::preflight::run_envoy(
            &envoy,
            &bootstrap,
            switchyard::preflight::DEFAULT_TIMEOUT,
        )
        .expect("Envoy runs")
        .err();
        eprintln!("{}\n  ours:  {ours:?}\n  envoy: {theirs:?}", judged.name);
        let agree = match (&ours, &theirs) {
            (None, None) => !judged.refused,
            (Some(ours), Some(theirs)) => {
                judged.refused && !judged.envoy_only && theirs.contains(words(ours))
            }
            (None, Some(_)) => judged.envoy_only,
            (Some(_), None) => false,
        };
        if !agree {
            disagreements.push(format!(
                "{} (refused: {}):\n    loader: {ours:?}\n    envoy:  {theirs:?}",
                judged.name, judged.refused
            ));
        }
    }
    eprintln!("{} cases held against Envoy", all.len());
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}
