//! Envoy's way of reading YAML and JSON, as a differential test. Three readers:
//! - Switchyard's loader (`config::load_text`);
//! - protobuf's reference JSON parser (Python's `google.protobuf.json_format`, in the test
//!   venv) with Switchyard's own descriptor set, given the JSON of the YAML;
//! - the real Envoy 1.40 (`--mode validate` on a static bootstrap holding the resource, its
//!   YAML text as written).
//!
//! For the table of corner cases below, Switchyard must reach Envoy's verdict. Where the
//! reference parser differs from Envoy, the case names the leniency of Envoy's that makes
//! the difference (and where it does not differ, it names none: the table stays true).
//! Where Switchyard and the reference both accept, they must read the same message.
//!
//! Every resource of `../shared/corpus/envoy-examples`, of `examples/` and `deploy/` goes
//! through Switchyard and the reference parser: the same verdict and the same message.
//! (`tests/corpus_e2e.rs` has the real Envoy run the corpus' bootstraps whole.)

use switchyard_testkit as support;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;
use support::envoy::{envoy_binary, grpc_python};

#[derive(Clone, Copy, Debug)]
enum Kind {
    Cluster,
    Listener,
    /// A route configuration (in a bootstrap: inline in a listener's HTTP connection manager).
    Routes,
    Secret,
}

impl Kind {
    fn file_key(self) -> &'static str {
        match self {
            Kind::Cluster => "clusters",
            Kind::Listener => "listeners",
            Kind::Routes => "routes",
            Kind::Secret => "secrets",
        }
    }

    fn message(self) -> &'static str {
        match self {
            Kind::Cluster => "envoy.config.cluster.v3.Cluster",
            Kind::Listener => "envoy.config.listener.v3.Listener",
            Kind::Routes => "envoy.config.route.v3.RouteConfiguration",
            Kind::Secret => "envoy.extensions.transport_sockets.tls.v3.Secret",
        }
    }
}

struct Case {
    what: &'static str,
    kind: Kind,
    yaml: String,
    /// The leniency of Envoy's that makes protobuf's reference parser disagree with it.
    leniency: Option<&'static str>,
    /// For a case the reference parser cannot read: a JSON pointer into Switchyard's
    /// reading and the value it must hold (what the leniency means).
    means: Option<(&'static str, Value)>,
}

fn case(what: &'static str, kind: Kind, yaml: &str) -> Case {
    Case {
        what,
        kind,
        yaml: yaml.trim_start_matches('\n').to_string(),
        leniency: None,
        means: None,
    }
}

fn lenient(
    what: &'static str,
    kind: Kind,
    yaml: &str,
    leniency: &'static str,
    means: (&'static str, Value),
) -> Case {
    Case {
        leniency: Some(leniency),
        means: Some(means),
        ..case(what, kind, yaml)
    }
}

const CLUSTER: &str = "name: c\nconnect_timeout: 1s\ntype: STATIC\n";

fn cluster(extra: &str) -> String {
    format!("{CLUSTER}{extra}")
}

fn corner_cases() -> Vec<Case> {
    use serde_json::json;
    use Kind::*;
    vec![
        case("a plain cluster", Cluster, CLUSTER),
        case("lowerCamelCase field names", Cluster, "name: c\nconnectTimeout: 1s\n"),
        case("an enum by number", Cluster, &cluster("lb_policy: 1\n")),
        case("an enum number Envoy does not define", Cluster, &cluster("lb_policy: 99\n")),
        lenient(
            "an enum name in lower case",
            Cluster,
            "name: c\nconnect_timeout: 1s\ntype: strict_dns\nlb_policy: round_robin\n",
            "enum names in another case (case_insensitive_enum_parsing)",
            ("/type", json!("STRICT_DNS")),
        ),
        case("an enum name that is none", Cluster, &cluster("lb_policy: ROUND_ROBINS\n")),
        case(
            "a 64-bit integer as a string",
            Cluster,
            &cluster("lb_policy: RING_HASH\nring_hash_lb_config: {minimum_ring_size: \"1024\"}\n"),
        ),
        case(
            "a 64-bit integer as a number",
            Cluster,
            &cluster("lb_policy: RING_HASH\nring_hash_lb_config: {minimum_ring_size: 1024}\n"),
        ),
        case(
            "a 64-bit integer beyond 32 bits, unquoted",
            Cluster,
            &cluster("lb_policy: RING_HASH\nring_hash_lb_config: {minimum_ring_size: 12345678901}\n"),
        ),
        case("a wrapper as its value", Cluster, &cluster("per_connection_buffer_limit_bytes: 1024\n")),
        lenient(
            "a wrapper as a message",
            Cluster,
            &cluster("per_connection_buffer_limit_bytes: {value: 1024}\n"),
            "a wrapper written as its message ({value: ...})",
            ("/perConnectionBufferLimitBytes", json!(1024)),
        ),
        case("null for a message field", Cluster, &cluster("circuit_breakers: null\n")),
        case("a duration with a fraction", Cluster, "name: c\nconnect_timeout: 1.5s\n"),
        case("a duration of nanoseconds", Cluster, "name: c\nconnect_timeout: 0.000000001s\n"),
        lenient(
            "a duration with ten decimals",
            Cluster,
            "name: c\nconnect_timeout: 1.0000000001s\n",
            "stricter: at most nine fractional digits in a Duration",
            ("", Value::Null),
        ),
        case("a duration as a number", Cluster, "name: c\nconnect_timeout: 5\n"),
        case("a duration without a unit", Cluster, "name: c\nconnect_timeout: \"5\"\n"),
        case(
            "NaN and Infinity in a double",
            Cluster,
            &cluster("lb_policy: LEAST_REQUEST\nleast_request_lb_config: {active_request_bias: {default_value: Infinity, runtime_key: k}}\n"),
        ),
        case(
            "NaN in a double",
            Cluster,
            &cluster("lb_policy: LEAST_REQUEST\nleast_request_lb_config: {active_request_bias: {default_value: \"NaN\", runtime_key: k}}\n"),
        ),
        case(
            "Struct, Value and ListValue",
            Cluster,
            &cluster("metadata: {filter_metadata: {acme: {a: [1, \"two\", null, true, {b: 2.5}], c: {}}}}\n"),
        ),
        case(
            "an Any of a well-known type with value",
            Cluster,
            &cluster("metadata: {typed_filter_metadata: {acme: {\"@type\": type.googleapis.com/google.protobuf.StringValue, value: x}}}\n"),
        ),
        case(
            "an Any of a Duration",
            Cluster,
            &cluster("metadata: {typed_filter_metadata: {acme: {\"@type\": type.googleapis.com/google.protobuf.Duration, value: 1.5s}}}\n"),
        ),
        case(
            "an Any of a Timestamp",
            Cluster,
            &cluster("metadata: {typed_filter_metadata: {acme: {\"@type\": type.googleapis.com/google.protobuf.Timestamp, value: \"2026-01-01T00:00:00.5Z\"}}}\n"),
        ),
        case(
            "an Any of a Timestamp with an offset",
            Cluster,
            &cluster("metadata: {typed_filter_metadata: {acme: {\"@type\": type.googleapis.com/google.protobuf.Timestamp, value: \"2026-01-01T01:00:00+01:00\"}}}\n"),
        ),
        case(
            "an Any of an unknown type",
            Cluster,
            &cluster("metadata: {typed_filter_metadata: {acme: {\"@type\": type.googleapis.com/acme.Nope}}}\n"),
        ),
        case(
            "an empty Any",
            Routes,
            "name: r\nvirtual_hosts:\n- name: v\n  domains: [\"*\"]\n  typed_per_filter_config:\n    envoy.filters.http.ext_proc:\n      \"@type\": type.googleapis.com/envoy.config.route.v3.FilterConfig\n      config: {}\n",
        ),
        case(
            "a TypedStruct as typed_config",
            Listener,
            &listener_with_filters("- name: envoy.filters.http.router\n  typed_config:\n    \"@type\": type.googleapis.com/xds.type.v3.TypedStruct\n    type_url: type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n    value: {}\n"),
        ),
        case(
            "a udpa TypedStruct as typed_config",
            Listener,
            &listener_with_filters("- name: envoy.filters.http.router\n  typed_config:\n    \"@type\": type.googleapis.com/udpa.type.v1.TypedStruct\n    type_url: type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n    value: {}\n"),
        ),
        lenient(
            "a TypedStruct whose value its type refuses",
            Listener,
            &listener_with_filters("- name: envoy.filters.http.router\n  typed_config:\n    \"@type\": type.googleapis.com/xds.type.v3.TypedStruct\n    type_url: type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n    value: {nope: 1}\n"),
            "stricter: a TypedStruct's value read as the message its type_url names",
            ("", Value::Null),
        ),
        lenient(
            "a single value for a list",
            Routes,
            "name: r\nvirtual_hosts:\n- name: v\n  domains: \"*\"\n",
            "a single value where a repeated field wants a list",
            ("/virtualHosts/0/domains", json!(["*"])),
        ),
        lenient(
            "a single mapping for a list of messages",
            Routes,
            "name: r\nvirtual_hosts:\n  name: v\n  domains: [\"*\"]\n",
            "a single value where a repeated field wants a list",
            ("/virtualHosts/0/name", json!("v")),
        ),
        case("a key given twice", Cluster, "name: c\nconnect_timeout: 1s\nconnect_timeout: 2s\n"),
        case("plain yes for a bool", Cluster, &cluster("respect_dns_ttl: yes\n")),
        case("plain on for a bool", Cluster, &cluster("respect_dns_ttl: on\n")),
        lenient(
            "a bool as a string",
            Cluster,
            &cluster("respect_dns_ttl: \"true\"\n"),
            "\"true\" and \"false\" for a bool",
            ("/respectDnsTtl", json!(true)),
        ),
        case("plain yes for a string", Cluster, &cluster("alt_stat_name: yes\n")),
        case("quoted yes for a string", Cluster, &cluster("alt_stat_name: \"yes\"\n")),
        case("a small number for a string", Cluster, &cluster("alt_stat_name: 42\n")),
        case("a number beyond 32 bits for a string", Cluster, &cluster("alt_stat_name: 12345678901\n")),
        case("a float for an integer", Cluster, &cluster("per_connection_buffer_limit_bytes: 1.5\n")),
        case("an integral float for an integer", Cluster, &cluster("per_connection_buffer_limit_bytes: 1024.0\n")),
        case("a negative number for an unsigned", Cluster, &cluster("per_connection_buffer_limit_bytes: -1\n")),
        case("an integer as a string", Cluster, &cluster("per_connection_buffer_limit_bytes: \"1024\"\n")),
        case("bytes as base64", Secret, "name: s\ngeneric_secret: {secret: {inline_bytes: aGVsbG8=}}\n"),
        case("bytes as URL-safe base64 without padding", Secret, "name: s\ngeneric_secret: {secret: {inline_bytes: aGVsbG8_-w}}\n"),
        case("bytes that are not base64", Secret, "name: s\ngeneric_secret: {secret: {inline_bytes: \"not base64!\"}}\n"),
        case("an unknown field", Cluster, &cluster("nope: 1\n")),
        case("a oneof given twice", Secret, "name: s\ngeneric_secret: {secret: {inline_string: a, inline_bytes: YQ==}}\n"),
        case("a map with a key given twice", Cluster, "name: c\nconnect_timeout: 1s\nmetadata: {filter_metadata: {a: {x: 1}, a: {y: 2}}}\n"),
    ]
}

fn listener_with_filters(http_filters: &str) -> String {
    let filters: String = http_filters
        .lines()
        .map(|l| format!("          {l}\n"))
        .collect();
    format!(
        "name: l\naddress: {{socket_address: {{address: 127.0.0.1, port_value: 10000}}}}\nfilter_chains:\n- filters:\n  - name: hcm\n    typed_config:\n        \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager\n        stat_prefix: s\n        route_config: {{name: r}}\n        http_filters:\n{filters}"
    )
}

fn indent(text: &str, by: usize) -> String {
    text.lines()
        .map(|l| format!("{}{l}\n", " ".repeat(by)))
        .collect()
}

/// The resource's YAML as a list item under `key`, at `depth` spaces.
fn item(yaml: &str, depth: usize) -> String {
    let mut lines = yaml.lines();
    let first = lines.next().unwrap_or_default();
    let mut out = format!("{}- {first}\n", " ".repeat(depth));
    for l in lines {
        out.push_str(&format!("{}  {l}\n", " ".repeat(depth)));
    }
    out
}

/// A bootstrap holding the case's resource, as text (Envoy reads the YAML as written).
fn bootstrap(case: &Case) -> String {
    let upstream = "  clusters:\n  - name: upstream\n    connect_timeout: 1s\n";
    match case.kind {
        Kind::Cluster => format!("static_resources:\n  clusters:\n{}", item(&case.yaml, 2)),
        Kind::Secret => format!("static_resources:\n  secrets:\n{}", item(&case.yaml, 2)),
        Kind::Listener => format!(
            "static_resources:\n  listeners:\n{}{upstream}",
            item(&case.yaml, 2)
        ),
        Kind::Routes => format!(
            "static_resources:\n  listeners:\n  - name: l\n    address: {{socket_address: {{address: 127.0.0.1, port_value: 10000}}}}\n    filter_chains:\n    - filters:\n      - name: hcm\n        typed_config:\n          \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager\n          stat_prefix: s\n          http_filters: [{{name: router, typed_config: {{\"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}}}]\n          route_config:\n{}{upstream}",
            indent(&case.yaml, 12)
        ),
    }
}

/// Envoy's verdict: `Ok` or its error.
fn envoy_verdict(envoy: &Path, dir: &Path, case: &Case) -> Result<(), String> {
    let path = dir.join("bootstrap.yaml");
    std::fs::write(&path, bootstrap(case)).expect("write");
    let o = Command::new(envoy)
        .args([
            "--mode",
            "validate",
            "--disable-hot-restart",
            "-l",
            "critical",
            "-c",
        ])
        .arg(&path)
        .output()
        .expect("Envoy runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    if o.status.success() {
        Ok(())
    } else {
        Err(text.lines().last().unwrap_or_default().to_string())
    }
}

/// Switchyard's verdict: the resource's canonical JSON, or the error.
fn switchyard_verdict(kind: Kind, yaml: &str) -> Result<Value, String> {
    let text = format!("{}:\n{}", kind.file_key(), item(yaml, 0));
    let file = switchyard::config::load_text(Path::new("case.yaml"), &text).map_err(|e| {
        e.iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    let resource = file.resources.first().ok_or("no resource")?;
    switchyard::config::json::resource_json(
        resource,
        resource.body_for(switchyard::resource::Secrets::Serve),
    )
    .ok_or_else(|| "no JSON".to_string())
}

/// The reference parser, one process for many messages.
struct Reference {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Reference {
    fn start(python: &Path) -> Reference {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut child = Command::new(python)
            .arg(root.join("tests/support/json_reference.py"))
            .arg(root.join(format!(
                "proto/envoy-{}.descriptor-set.bin",
                switchyard::config::descriptors::ENVOY_API_VERSION
            )))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python runs");
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        Reference { child, out }
    }

    /// The reference's reading of the JSON of `yaml` (read as Envoy reads YAML).
    fn read(&mut self, kind: Kind, yaml: &str) -> Result<Value, String> {
        let (value, _) = switchyard::config::yaml::parse(yaml).map_err(|e| format!("YAML: {e}"))?;
        let json = serde_json::to_value(value).map_err(|e| e.to_string())?;
        let line = serde_json::json!({"type": kind.message(), "json": json});
        let stdin = self.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{line}").expect("write");
        stdin.flush().expect("flush");
        let mut answer = String::new();
        self.out.read_line(&mut answer).expect("read");
        let answer: Value = serde_json::from_str(&answer).expect("a JSON line");
        if answer["ok"] == true {
            Ok(answer["json"].clone())
        } else {
            Err(answer["error"].as_str().unwrap_or_default().to_string())
        }
    }
}

impl Drop for Reference {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Numbers compared as numbers (`1024` and `1024.0` are one value).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

#[test]
fn switchyard_reads_resources_as_envoy_does() {
    let (Some(envoy), Some(python)) = (envoy_binary(), grpc_python()) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let mut reference = Reference::start(&python);
    let mut wrong = Vec::new();
    let mut leniencies = std::collections::BTreeSet::new();
    for case in corner_cases() {
        let ours = switchyard_verdict(case.kind, &case.yaml);
        let theirs = reference.read(case.kind, &case.yaml);
        let envoy = envoy_verdict(&envoy, dir.path(), &case);
        eprintln!(
            "{}: envoy {}, switchyard {}, reference {}",
            case.what,
            if envoy.is_ok() { "accepts" } else { "refuses" },
            if ours.is_ok() { "accepts" } else { "refuses" },
            if theirs.is_ok() { "accepts" } else { "refuses" },
        );
        if ours.is_ok() != envoy.is_ok() {
            wrong.push(format!(
                "{}: Envoy {envoy:?}, Switchyard {:?}",
                case.what,
                ours.as_ref().map(|_| ())
            ));
            continue;
        }
        // Envoy's field rules refuse what parses: the reference parser (which reads only)
        // accepting it is no difference in reading.
        let by_rule = envoy
            .as_ref()
            .err()
            .is_some_and(|e| e.contains("Proto constraint validation failed"));
        let differs = theirs.is_ok() != (envoy.is_ok() || by_rule);
        match (differs, case.leniency) {
            (true, None) => wrong.push(format!(
                "{}: the reference parser says {theirs:?} and Envoy {envoy:?}, and the case names \
                 no leniency",
                case.what
            )),
            (false, Some(l)) => wrong.push(format!(
                "{}: names the leniency {l:?}, but the reference parser agrees with Envoy",
                case.what
            )),
            (true, Some(l)) => {
                leniencies.insert(l);
            }
            (false, None) => {}
        }
        match (&ours, &theirs) {
            (Ok(a), Ok(b)) if !same(a, b) => wrong.push(format!(
                "{}: Switchyard reads {a}, the reference parser {b}",
                case.what
            )),
            (Ok(a), Err(_)) => {
                if let Some((pointer, expected)) = &case.means {
                    if a.pointer(pointer) != Some(expected) {
                        wrong.push(format!(
                            "{}: {pointer} is {:?}, expected {expected}",
                            case.what,
                            a.pointer(pointer)
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    eprintln!("Envoy's leniencies seen: {leniencies:?}");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Every resource of the public corpus (its bootstraps' static resources), of `examples/`
/// and of `deploy/`: Switchyard and the reference parser reach the same verdict and read
/// the same message.
#[test]
fn every_real_resource_reads_as_the_reference_parser_reads_it() {
    let Some(python) = grpc_python() else { return };
    let mut reference = Reference::start(&python);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut resources: Vec<(String, Kind, String)> = Vec::new();
    let mut add = |origin: String, kind: Kind, value: &serde_yaml::Value| {
        // A bootstrap's listener may have no name; a snapshot file's must.
        let mut value = value.clone();
        if matches!(kind, Kind::Listener) && value.get("name").is_none() {
            value["name"] = serde_yaml::Value::from("unnamed");
        }
        let value = &value;
        // As JSON text (which is YAML too): every string stays quoted.
        let yaml = serde_json::to_string(value).expect("json");
        resources.push((origin, kind, yaml));
    };
    // The corpus' bootstraps (when the corpus is beside the clone; see `shared_corpus`).
    let corpus = support::shared_corpus(
        "every_real_resource_reads_as_the_reference_parser_reads_it (its corpus part; \
         examples/ and deploy/ still run)",
    );
    for path in corpus.iter().flat_map(|dir| support::yaml_files(dir)) {
        let text = std::fs::read_to_string(&path).expect("read");
        let (bootstrap, _) = switchyard::config::yaml::parse(&text).expect("YAML");
        for (key, kind) in [
            ("listeners", Kind::Listener),
            ("clusters", Kind::Cluster),
            ("secrets", Kind::Secret),
        ] {
            for (i, r) in bootstrap["static_resources"][key]
                .as_sequence()
                .into_iter()
                .flatten()
                .enumerate()
            {
                add(format!("{} {key}[{i}]", path.display()), kind, r);
            }
        }
    }
    // Snapshot files.
    for dir in ["examples/config", "deploy/compose/snapshots"] {
        for path in support::yaml_files(&root.join(dir)) {
            let text = std::fs::read_to_string(&path).expect("read");
            let (file, _) = switchyard::config::yaml::parse(&text).expect("YAML");
            for (key, kind) in [
                ("listeners", Kind::Listener),
                ("clusters", Kind::Cluster),
                ("routes", Kind::Routes),
                ("secrets", Kind::Secret),
            ] {
                for (i, r) in file[key].as_sequence().into_iter().flatten().enumerate() {
                    add(format!("{} {key}[{i}]", path.display()), kind, r);
                }
            }
        }
    }
    // The corpus has hundreds; examples/ and deploy/ six.
    let least = if corpus.is_some() { 150 } else { 5 };
    assert!(resources.len() > least, "{} resources", resources.len());
    let mut wrong = Vec::new();
    let mut leniencies: std::collections::BTreeMap<&str, usize> = Default::default();
    for (origin, kind, yaml) in &resources {
        // Field rules and Envoy's checks aside: only the reading is compared here.
        let ours = switchyard_verdict(*kind, yaml);
        let theirs = reference.read(*kind, yaml);
        match (&ours, &theirs) {
            (Ok(a), Ok(b)) if !same(a, b) => {
                wrong.push(format!("{origin}: Switchyard reads {a}, the reference {b}"))
            }
            (Ok(_), Ok(_)) => {}
            (Err(e), Err(_))
                if e.contains("breaks Envoy's rule") || e.contains("Envoy would reject") => {}
            (Err(e), Ok(_))
                if e.contains("breaks Envoy's rule") || e.contains("Envoy would reject") =>
            {
                // Envoy's rules refuse what parses: not a reading difference.
            }
            // The same refusal (a contrib extension this Envoy lacks, say).
            (Err(_), Err(_)) => {}
            (Ok(_), Err(e)) => match leniency_of(e) {
                Some(l) => *leniencies.entry(l).or_default() += 1,
                None => wrong.push(format!("{origin}: Switchyard {ours:?}, the reference {e}")),
            },
            _ => wrong.push(format!(
                "{origin}: Switchyard {ours:?}, the reference {theirs:?}"
            )),
        }
    }
    eprintln!(
        "{} resources, {} read differently; Envoy's leniencies they rely on: {leniencies:?}",
        resources.len(),
        wrong.len()
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Which of Envoy's leniencies a refusal of the reference parser's is (the corner cases
/// above show each against the real Envoy).
fn leniency_of(reference_error: &str) -> Option<&'static str> {
    if reference_error.contains("Invalid enum value") {
        Some("enum names in another case (case_insensitive_enum_parsing)")
    } else if reference_error.contains("must be in []") {
        Some("a single value where a repeated field wants a list")
    } else {
        None
    }
}
