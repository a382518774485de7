//! Pre-flight with the real Envoy: each node group's snapshot, rendered as a static bootstrap,
//! checked by `envoy --mode validate` before any proxy sees it.
//!
//! Owns: choosing which node groups of a config to check (one per `nodes:` entry of any
//! file, and the nodes no selector names), rendering a group's resources as an Envoy
//! bootstrap (clusters with their EDS endpoints inlined, listeners with their RDS route
//! configurations inlined, SDS secrets as static secrets), and running Envoy on it within a
//! time limit. Catches what field rules cannot: unknown extensions, conflicting filter
//! chains, regexes Envoy's engine rejects, a load balancer a cluster type cannot have.
//!
//! Must not: load files, serve, or decide what a failure means (the CLI reports it; the
//! reloader refuses the load).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::config::selector::NodeFacts;
use crate::config::{json, Config};
use crate::resource::{Resource, ResourceType, Secrets};

/// How long one `envoy --mode validate` may take.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The node id and cluster used for the nodes no selector names.
const ANY_NODE: &str = "switchyard-preflight";
/// The bootstrap's own ADS cluster (for what stays on ADS: scoped routes, VHDS, ECDS).
const ADS_CLUSTER: &str = "switchyard-preflight-ads";
const HCM: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";

/// Why Envoy could not be asked (as opposed to Envoy's verdict).
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error("cannot run Envoy ({}): {source}", .envoy.display())]
    Spawn {
        envoy: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the pre-flight bootstrap {}: {source}", .path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("Envoy ({}) did not finish validating within {timeout:?}", .envoy.display())]
    Timeout { envoy: PathBuf, timeout: Duration },
}

/// One node group to check: a node it stands for, and the files that apply to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub node_id: String,
    pub node_cluster: String,
    /// The node the group was found with (its metadata and locality too).
    pub node: crate::config::selector::NodeFacts,
    /// The files that apply to it: those whose `nodes:` selector matches it first, then
    /// those for every node.
    pub files: Vec<PathBuf>,
}

/// How many of a group's files its name lists; the rest are counted.
const FILES_NAMED: usize = 5;

impl std::fmt::Display for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut files: Vec<String> = self
            .files
            .iter()
            .take(FILES_NAMED)
            .map(|p| p.display().to_string())
            .collect();
        if self.files.len() > FILES_NAMED {
            files.push(format!(
                "and {} more file(s)",
                self.files.len() - FILES_NAMED
            ));
        }
        let mut named = Vec::new();
        if self.node_id != ANY_NODE {
            named.push(format!("id {:?}", self.node_id));
        }
        if self.node_cluster != ANY_NODE {
            named.push(format!("cluster {:?}", self.node_cluster));
        }
        if named.is_empty() {
            write!(f, "nodes no selector names ({})", files.join(", "))
        } else {
            write!(
                f,
                "node group of {} ({})",
                named.join(", "),
                files.join(", ")
            )
        }
    }
}

/// Envoy's verdict on one group: `Err` holds Envoy's own error text.
#[derive(Debug)]
pub struct GroupCheck {
    pub group: Group,
    pub result: Result<(), String>,
}

/// The groups to check, each with its resources: one node per `nodes:` entry of any file
/// (the entry's globs with `*` and `?` taken as nothing or `x`), and one node no selector
/// names. Groups with the same files are checked once.
pub fn groups(config: &Config) -> Vec<(Group, Vec<Arc<Resource>>)> {
    let mut nodes = vec![NodeFacts::new(ANY_NODE, ANY_NODE)];
    for file in &config.files {
        for index in 0..file.selector.entries().len() {
            if let Some(mut node) = file.selector.example_node(index) {
                for text in [&mut node.id, &mut node.cluster] {
                    if text.is_empty() {
                        *text = ANY_NODE.to_string();
                    }
                }
                nodes.push(node);
            }
        }
    }
    let mut seen: Vec<Vec<usize>> = Vec::new();
    let mut out = Vec::new();
    for node in nodes {
        let mut files: Vec<usize> = config
            .files
            .iter()
            .enumerate()
            .filter(|(_, f)| f.selector.matches(&node))
            .map(|(i, _)| i)
            .collect();
        // Those that name the group first: its name lists them.
        files.sort_by_key(|&i| (config.files[i].selector.entries().is_empty(), i));
        if files.is_empty() || seen.contains(&files) {
            continue;
        }
        let resources = files
            .iter()
            .flat_map(|&i| config.files[i].resources.iter().cloned())
            .collect();
        out.push((
            Group {
                node_id: node.id.clone(),
                node_cluster: node.cluster.clone(),
                node,
                files: files
                    .iter()
                    .map(|&i| config.files[i].path.clone())
                    .collect(),
            },
            resources,
        ));
        seen.push(files);
    }
    out
}

/// A group's resources as an Envoy bootstrap that holds them statically, as a node is sent
/// them: with `secrets` [`Secrets::Redact`], without inline private key material (a key
/// named by a path on the proxy's host stays; see `config::redact`).
pub fn bootstrap(
    node_id: &str,
    node_cluster: &str,
    resources: &[Arc<Resource>],
    secrets: Secrets,
) -> Value {
    let mut by_kind: BTreeMap<ResourceType, Vec<(String, Value)>> = BTreeMap::new();
    for r in resources {
        if let Some(json) = json::resource_json(r, r.body_for(secrets)) {
            by_kind
                .entry(r.kind)
                .or_default()
                .push((r.name.clone(), json));
        }
    }
    let named = |kind| -> BTreeMap<String, Value> {
        by_kind.get(&kind).into_iter().flatten().cloned().collect()
    };
    let endpoints = named(ResourceType::Endpoint);
    let routes = named(ResourceType::Route);
    let defined: std::collections::BTreeSet<String> =
        named(ResourceType::Secret).into_keys().collect();

    let mut clusters: Vec<Value> = by_kind
        .get(&ResourceType::Cluster)
        .into_iter()
        .flatten()
        .map(|(name, json)| {
            let mut cluster = json.clone();
            inline_endpoints(&mut cluster, name, &endpoints);
            sds_as_sent(&mut cluster, &defined);
            cluster
        })
        .collect();
    clusters.push(json!({
        "name": ADS_CLUSTER, "type": "STATIC", "connectTimeout": "1s",
        "typedExtensionProtocolOptions": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicitHttpConfig": {"http2ProtocolOptions": {}}}},
        "loadAssignment": {"clusterName": ADS_CLUSTER, "endpoints": [{"lbEndpoints": [
            {"endpoint": {"address": {"socketAddress": {"address": "127.0.0.1", "portValue": 1}}}}]}]}
    }));
    let listeners: Vec<Value> = by_kind
        .get(&ResourceType::Listener)
        .into_iter()
        .flatten()
        .map(|(_, json)| {
            let mut listener = json.clone();
            inline_routes(&mut listener, &routes);
            sds_as_sent(&mut listener, &defined);
            listener
        })
        .collect();
    let secrets: Vec<Value> = by_kind
        .get(&ResourceType::Secret)
        .into_iter()
        .flatten()
        .map(|(_, json)| json.clone())
        .collect();
    json!({
        "node": {"id": node_id, "cluster": node_cluster},
        "staticResources": {"clusters": clusters, "listeners": listeners, "secrets": secrets},
        "dynamicResources": {"adsConfig": {"apiType": "GRPC", "transportApiVersion": "V3",
            "grpcServices": [{"envoyGrpc": {"clusterName": ADS_CLUSTER}}]}}
    })
}

/// An EDS cluster becomes a static one holding its ClusterLoadAssignment.
fn inline_endpoints(cluster: &mut Value, name: &str, endpoints: &BTreeMap<String, Value>) {
    let Some(object) = cluster.as_object_mut() else {
        return;
    };
    if object.get("type").and_then(Value::as_str) != Some("EDS") {
        return;
    }
    let service = object
        .get("edsClusterConfig")
        .and_then(|c| c.get("serviceName"))
        .and_then(Value::as_str)
        .unwrap_or(name)
        .to_string();
    object.remove("edsClusterConfig");
    object.insert("type".into(), json!("STATIC"));
    let assignment = endpoints
        .get(&service)
        .cloned()
        .unwrap_or_else(|| json!({ "clusterName": service }));
    object.insert("loadAssignment".into(), assignment);
}

/// Every HTTP connection manager that takes its routes from RDS holds them instead.
fn inline_routes(value: &mut Value, routes: &BTreeMap<String, Value>) {
    match value {
        Value::Object(object) => {
            if object.get("@type").and_then(Value::as_str) == Some(HCM) {
                if let Some(name) = object
                    .get("rds")
                    .and_then(|r| r.get("routeConfigName"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
                {
                    object.remove("rds");
                    let config = routes
                        .get(&name)
                        .cloned()
                        .unwrap_or_else(|| json!({ "name": name }));
                    object.insert("routeConfig".into(), config);
                }
            }
            object.values_mut().for_each(|v| inline_routes(v, routes));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| inline_routes(v, routes)),
        _ => {}
    }
}

/// SDS secret configs as Envoy takes them over xDS: one naming a secret the group defines
/// names the bootstrap's static secret (its source dropped); one naming a secret no file
/// defines is left for SDS to bring, from the bootstrap's xDS server, which Envoy waits for
/// (as it would for the proxy's own SDS server) instead of refusing a static secret it does
/// not have. (Envoy 1.40's validate mode crashes on a secret sourced from `ads`; a gRPC API
/// source on the same cluster is what it takes.) One with no source at all names a static
/// secret of the proxy's own bootstrap, which pre-flight does not have: left as is.
fn sds_as_sent(value: &mut Value, defined: &std::collections::BTreeSet<String>) {
    match value {
        Value::Object(object) => {
            // Only `SdsSecretConfig` has this field.
            if object.contains_key("sdsConfig") {
                let name = object
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if defined.contains(name) {
                    object.remove("sdsConfig");
                } else {
                    object.insert(
                        "sdsConfig".into(),
                        json!({"resourceApiVersion": "V3", "apiConfigSource": {
                            "apiType": "GRPC", "transportApiVersion": "V3",
                            "grpcServices": [{"envoyGrpc": {"clusterName": ADS_CLUSTER}}]}}),
                    );
                }
            }
            object.values_mut().for_each(|v| sds_as_sent(v, defined));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| sds_as_sent(v, defined)),
        _ => {}
    }
}

/// Run `envoy --mode validate` on `bootstrap`: `Ok(Ok(()))` when Envoy accepts it,
/// `Ok(Err(text))` with Envoy's error when not.
pub fn run_envoy(
    envoy: &Path,
    bootstrap: &Value,
    timeout: Duration,
) -> Result<Result<(), String>, PreflightError> {
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "switchyard-preflight-{}-{}.json",
        std::process::id(),
        SEQUENCE.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, bootstrap.to_string()).map_err(|source| PreflightError::Write {
        path: path.clone(),
        source,
    })?;
    let result = run_on_file(envoy, &path, timeout);
    let _ = std::fs::remove_file(&path);
    result
}

fn run_on_file(
    envoy: &Path,
    path: &Path,
    timeout: Duration,
) -> Result<Result<(), String>, PreflightError> {
    let spawn = |source| PreflightError::Spawn {
        envoy: envoy.to_path_buf(),
        source,
    };
    let mut child = Command::new(envoy)
        .args([
            "--mode",
            "validate",
            "--disable-hot-restart",
            "-l",
            "critical",
        ])
        .args(["--log-format", "%v", "-c"])
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn)?;
    // Read both pipes on threads so that a chatty Envoy cannot block on a full pipe.
    let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let stdout = read(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = read(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(spawn)? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(PreflightError::Timeout {
                envoy: envoy.to_path_buf(),
                timeout,
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let text = format!(
        "{}{}",
        stdout.join().unwrap_or_default(),
        stderr.join().unwrap_or_default()
    );
    if status.success() {
        return Ok(Ok(()));
    }
    let said = envoy_error(&text, path);
    if said.is_empty() {
        // Not an Envoy that refused the config: one that failed without a word.
        return Ok(Err(format!(
            "{} failed ({status}) and printed nothing: is it Envoy?",
            envoy.display()
        )));
    }
    Ok(Err(said))
}

/// Envoy's error, without its preamble (and without the text form of the message it
/// printed before a proto validation failure).
fn envoy_error(text: &str, path: &Path) -> String {
    let marker = format!("error initializing configuration '{}': ", path.display());
    let message = text.split(&marker).nth(1).unwrap_or(text).trim();
    match message.find("Proto constraint validation failed") {
        Some(at) => message[at..].to_string(),
        None => message.to_string(),
    }
}

/// Check every group of `config` with the Envoy at `envoy`, one after another, as a node is
/// sent it (`secrets`: with or without inline private key material).
pub fn check(
    envoy: &Path,
    config: &Config,
    timeout: Duration,
    secrets: Secrets,
) -> Result<Vec<GroupCheck>, PreflightError> {
    groups(config)
        .into_iter()
        .map(|(group, resources)| {
            let bootstrap = bootstrap(&group.node_id, &group.node_cluster, &resources, secrets);
            let result = run_envoy(envoy, &bootstrap, timeout)?;
            Ok(GroupCheck { group, result })
        })
        .collect()
}

#[cfg(test)]
mod tests;
