//! Custom and contrib extensions: `--descriptor-set FILE` on `serve`, `validate` and `diff`,
//! with a proto compiled by the real protoc (Debian's `protobuf-compiler`, which
//! `scripts/test` installs) in the test itself.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use run::{stderr, switchyard};
use switchyard_testkit::run;

/// The protoc to use: `$PROTOC`, or `protoc` on the PATH. Missing is a failure, never a
/// skip (scripts/test installs it).
fn protoc() -> PathBuf {
    let path = std::env::var_os("PROTOC")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("protoc"));
    let ok = Command::new(&path)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "protoc not found ({}): install Debian's protobuf-compiler, or run ./scripts/test",
        path.display()
    );
    path
}

/// A custom HTTP filter's config, with one field rule. `validate/validate.proto` here is a
/// hand-written subset of PGV's (the same extension and field numbers): the built-in copy
/// wins, so the subset only has to compile.
const GREETER: &str = r#"
syntax = "proto3";
package acme.filters.greeter.v1;
import "validate/validate.proto";
message Greeter {
  string greeting = 1 [(validate.rules).string = {min_len: 1}];
  uint32 repeat = 2;
}
"#;

const VALIDATE_SUBSET: &str = r#"
syntax = "proto2";
package validate;
import "google/protobuf/descriptor.proto";
extend google.protobuf.FieldOptions { optional FieldRules rules = 1071; }
message FieldRules { optional StringRules string = 14; }
message StringRules { optional uint64 min_len = 2; }
"#;

/// Compile `protos` (file name, text) with protoc into a descriptor set, as an operator
/// would: `protoc --include_imports --descriptor_set_out`.
fn compile(dir: &Path, protos: &[(&str, &str)], out: &str) -> PathBuf {
    let src = dir.join("proto-src");
    for (name, text) in protos {
        let path = src.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
    }
    let set = dir.join(out);
    let o = Command::new(protoc())
        .arg(format!("-I{}", src.display()))
        .arg("-I/usr/include")
        .arg("--include_imports")
        .arg(format!("--descriptor_set_out={}", set.display()))
        .arg(protos[0].0)
        .current_dir(&src)
        .output()
        .expect("protoc runs");
    assert!(o.status.success(), "protoc: {}", stderr(&o));
    set
}

fn greeter_set(dir: &Path) -> PathBuf {
    compile(
        dir,
        &[
            ("acme/greeter.proto", GREETER),
            ("validate/validate.proto", VALIDATE_SUBSET),
        ],
        "greeter.pb",
    )
}

/// A listener whose HTTP filter chain has the custom filter, configured with `greeter`.
fn listener_with(greeter: &str) -> String {
    format!(
        r#"listeners:
- name: l
  address: {{socket_address: {{address: 127.0.0.1, port_value: 10000}}}}
  filter_chains:
  - filters:
    - name: envoy.filters.network.http_connection_manager
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
        stat_prefix: s
        route_config: {{name: r, virtual_hosts: [{{name: v, domains: ["*"], routes: [{{match: {{prefix: /}}, direct_response: {{status: 200}}}}]}}]}}
        http_filters:
        - name: acme.greeter
          typed_config:
            "@type": type.googleapis.com/acme.filters.greeter.v1.Greeter
            {greeter}
        - name: envoy.filters.http.router
          typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
"#
    )
}

#[test]
fn a_custom_filter_loads_with_its_descriptor_set_and_not_without() {
    let dir = tempfile::tempdir().expect("tmp");
    let set = greeter_set(dir.path());
    let config = dir.path().join("l.yaml");
    std::fs::write(&config, listener_with("greeting: hello")).unwrap();
    let (config, set) = (
        config.to_str().expect("UTF-8 path"),
        set.to_str().expect("UTF-8 path"),
    );

    let o = switchyard(&["validate", "-c", config, "--descriptor-set", set]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let o = switchyard(&["validate", "-c", config]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("acme.filters.greeter.v1.Greeter"), "{err}");
    assert!(err.contains("--descriptor-set"), "{err}");
}

#[test]
fn a_custom_types_field_rules_and_fields_are_checked() {
    let dir = tempfile::tempdir().expect("tmp");
    let set = greeter_set(dir.path());
    let set = set.to_str().expect("UTF-8 path");
    // The custom PGV rule: greeting's min_len 1, checked like Envoy's own.
    let config = dir.path().join("empty-greeting.yaml");
    std::fs::write(&config, listener_with("repeat: 2")).unwrap();
    let o = switchyard(&[
        "validate",
        "-c",
        config.to_str().unwrap(),
        "--descriptor-set",
        set,
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("greeting"), "{err}");
    assert!(err.contains("at least 1"), "{err}");
    // An unknown field of the custom type.
    let config = dir.path().join("unknown.yaml");
    std::fs::write(&config, listener_with("greting: hello")).unwrap();
    let o = switchyard(&[
        "validate",
        "-c",
        config.to_str().unwrap(),
        "--descriptor-set",
        set,
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("greting"), "{}", stderr(&o));
}

#[test]
fn a_descriptor_set_redefining_an_envoy_type_is_refused_naming_both() {
    let dir = tempfile::tempdir().expect("tmp");
    let set = compile(
        dir.path(),
        &[(
            "mine/cluster.proto",
            "syntax = \"proto3\";\npackage envoy.config.cluster.v3;\nmessage Cluster { string x = 1; }\n",
        )],
        "clash.pb",
    );
    let examples = format!("{}/examples/config", env!("CARGO_MANIFEST_DIR"));
    for command in ["validate", "serve"] {
        let o = switchyard(&[
            command,
            "-c",
            &examples,
            "--descriptor-set",
            set.to_str().expect("UTF-8 path"),
        ]);
        assert_eq!(o.status.code(), Some(64), "{command}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("mine/cluster.proto"), "{err}");
        assert!(
            err.contains("envoy/config/cluster/v3/cluster.proto"),
            "{err}"
        );
        assert!(err.contains("envoy.config.cluster.v3.Cluster"), "{err}");
    }
    // Not a descriptor set at all.
    let o = switchyard(&["validate", "-c", &examples, "--descriptor-set", &examples]);
    assert_eq!(o.status.code(), Some(64));
    assert!(stderr(&o).contains("cannot read"), "{}", stderr(&o));
}

#[test]
fn diff_reads_custom_types_with_the_descriptor_set() {
    let dir = tempfile::tempdir().expect("tmp");
    let set = greeter_set(dir.path());
    let old = dir.path().join("old");
    let new = dir.path().join("new");
    std::fs::create_dir_all(&old).unwrap();
    std::fs::create_dir_all(&new).unwrap();
    std::fs::write(old.join("l.yaml"), listener_with("greeting: hello")).unwrap();
    std::fs::write(new.join("l.yaml"), listener_with("greeting: goodbye")).unwrap();
    let o = switchyard(&[
        "diff",
        "-c",
        new.to_str().unwrap(),
        "--against",
        old.to_str().unwrap(),
        "--descriptor-set",
        set.to_str().expect("UTF-8 path"),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("goodbye"), "{out}");
}

/// `serve --descriptor-set`: the custom type loads, and `/status` names the set and the
/// Envoy API version.
#[test]
fn serve_loads_custom_types_and_status_names_the_set() {
    let dir = tempfile::tempdir().expect("tmp");
    let set = greeter_set(dir.path());
    let config = dir.path().join("l.yaml");
    std::fs::write(&config, listener_with("greeting: hello")).unwrap();
    let admin = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args([
            "serve",
            "--xds-addr",
            "127.0.0.1:0",
            "--admin-addr",
            &admin.to_string(),
            "--config",
            config.to_str().unwrap(),
            "--descriptor-set",
            set.to_str().expect("UTF-8 path"),
        ])
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let serving = lines
        .map_while(Result::ok)
        .take(200)
        .any(|l| l.contains("Serving xDS."));
    let status = (|| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(body) = http_get(admin, "/status") {
                return Some(body);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    })();
    let _ = child.kill();
    let _ = child.wait();
    assert!(serving, "never logged that it serves");
    let status: serde_json::Value =
        serde_json::from_str(&status.expect("/status answers")).unwrap();
    assert_eq!(status["server"]["envoy_api"], "1.40.0");
    assert_eq!(
        status["server"]["descriptor_sets"][0],
        set.display().to_string()
    );
    assert_eq!(status["config"]["ok"], true);
}

/// A plain HTTP/1.1 GET on loopback (the admin API without a token binds loopback only).
fn http_get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    if !response.starts_with("HTTP/1.1 200") {
        return Err(std::io::Error::other(response));
    }
    Ok(body)
}

#[test]
fn version_names_the_envoy_api() {
    let o = switchyard(&["--version"]);
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("(Envoy API 1.40.0)"), "{out}");
}

/// `import --descriptor-set`: a bootstrap whose listener has the custom filter imports with
/// the set, and is refused (naming the type) without it.
#[test]
fn import_reads_custom_types_with_the_descriptor_set() {
    let dir = tempfile::tempdir().expect("tmp");
    let set = greeter_set(dir.path());
    let listeners = listener_with("greeting: hello");
    let bootstrap = format!(
        "static_resources:\n{}",
        listeners
            .lines()
            .skip(1)
            .map(|l| format!("  {l}\n"))
            .collect::<String>()
    );
    let bootstrap = bootstrap.replacen(
        "static_resources:\n",
        "static_resources:\n  listeners:\n",
        1,
    );
    let path = dir.path().join("envoy.yaml");
    std::fs::write(&path, bootstrap).expect("write");
    let out = dir.path().join("out");
    let args = |with_set: bool| {
        let mut args = vec![
            "import".to_string(),
            path.display().to_string(),
            "--out".into(),
            out.display().to_string(),
        ];
        if with_set {
            args.extend(["--descriptor-set".into(), set.display().to_string()]);
        }
        args
    };
    let without: Vec<String> = args(false);
    let o = switchyard(&without.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("acme.filters.greeter.v1.Greeter"),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists(), "nothing written");
    let with: Vec<String> = args(true);
    let o = switchyard(&with.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let written = std::fs::read_to_string(out.join("snapshot/listeners.yaml")).expect("imported");
    assert!(
        written.contains("acme.filters.greeter.v1.Greeter"),
        "{written}"
    );
    let o = switchyard(&[
        "validate",
        "-c",
        out.join("snapshot").to_str().expect("UTF-8 path"),
        "--descriptor-set",
        set.to_str().expect("UTF-8 path"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}
