//! `switchyard import`: from an Envoy bootstrap's `static_resources` to snapshot files, and
//! a bootstrap for the same Envoy that gets them from Switchyard over ADS.
//!
//! Owns: reading the bootstrap as Envoy reads it (`config::yaml`, `config::json`, its field
//! rules and checks), moving its static listeners, clusters and secrets into snapshot files
//! (inline `load_assignment` and `route_config` kept, or split into EDS + endpoints and RDS +
//! route configurations), pointing references to static secrets at SDS, naming unnamed
//! listeners, and writing the new bootstrap: the original's every other field (admin, node,
//! stats, layered runtime, ...) kept, `dynamic_resources` over ADS added, and a static
//! cluster to Switchyard. Clusters and secrets the bootstrap itself refers to (a stats sink's
//! or tracer's cluster, `local_cluster_name`, ...) stay static: nothing outside the
//! snapshot could reach them before ADS is up.
//!
//! Must not: serve, or write anything before the whole import has succeeded.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use prost_reflect::{DynamicMessage, ReflectMessage, Value};
use serde_json::json;

use crate::config::fields::{has, message, messages as list, string};
use crate::config::{checks, descriptors, json as pbjson, rules, yaml};

const BOOTSTRAP: &str = "envoy.config.bootstrap.v3.Bootstrap";
const HCM: &str =
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const SDS_SECRET_CONFIG: &str = "envoy.extensions.transport_sockets.tls.v3.SdsSecretConfig";

/// What `import` does besides moving the static resources.
#[derive(Clone, Debug)]
pub struct ImportOptions {
    /// STATIC clusters' inline `load_assignment` become EDS clusters and
    /// ClusterLoadAssignments.
    pub split_endpoints: bool,
    /// HTTP connection managers' inline `route_config` become RDS and route configurations.
    pub split_routes: bool,
    /// Where the Envoy reaches Switchyard's xDS port (`host:port`).
    pub xds_address: String,
    /// Incremental ADS (`DELTA_GRPC`) instead of State of the World.
    pub delta: bool,
    /// The node id and cluster to give the Envoy when its bootstrap has none.
    pub node_id: String,
    pub node_cluster: String,
}

/// What an import gives: snapshot files and a bootstrap, as file name and text.
#[derive(Debug)]
pub struct Imported {
    pub files: Vec<(String, String)>,
    pub bootstrap: String,
    /// What the import did that the operator should know (names given, resources kept
    /// static, node id added).
    pub notes: Vec<String>,
    /// The RE2 program limit the bootstrap's runtime sets (`re2.max_program_size.error_level`
    /// in a static layer), which the snapshot files are judged by: `serve` needs it as
    /// `--re2-max-program-size`.
    pub re2_max_program_size: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{}: cannot read: {message}", path.display())]
    Read { path: PathBuf, message: String },
    #[error("{}: not a bootstrap Envoy accepts: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
    #[error("{}: cannot be imported: {message}", path.display())]
    Refused { path: PathBuf, message: String },
    #[error("{}: {message}", path.display())]
    Write { path: PathBuf, message: String },
}

impl ImportError {
    /// What makes [`ImportError::Invalid`] errors about the bootstrap at `path`.
    fn invalid(path: &Path) -> impl Fn(String) -> ImportError + '_ {
        move |message| ImportError::Invalid {
            path: path.to_path_buf(),
            message,
        }
    }

    /// What makes [`ImportError::Refused`] errors about the bootstrap at `path`.
    fn refused(path: &Path) -> impl Fn(String) -> ImportError + '_ {
        move |message| ImportError::Refused {
            path: path.to_path_buf(),
            message,
        }
    }
}

/// Import the bootstrap at `path`.
pub fn import(path: &Path, options: &ImportOptions) -> Result<Imported, ImportError> {
    let text = std::fs::read_to_string(path).map_err(|e| ImportError::Read {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let invalid = ImportError::invalid(path);
    let refused = ImportError::refused(path);
    let mut notes = Vec::new();
    let (bootstrap, descriptor, re2_max_program_size) = read_bootstrap(path, &text, &mut notes)?;
    let Statics {
        mut listeners,
        clusters,
        secrets,
    } = statics_of(path, &bootstrap)?;
    // What the bootstrap refers to outside its static resources stays static.
    let mut rest = bootstrap.clone();
    rest.clear_field_by_name("static_resources");
    let Kept {
        clusters: kept_clusters,
        secrets: kept_secrets,
        moved: mut clusters,
    } = kept_static(path, &rest, clusters, &secrets, &mut notes)?;
    name_listeners(&mut listeners, &mut notes);
    secrets_over_ads(&mut listeners, &mut clusters, &secrets)?;
    // RDS: each HTTP connection manager's inline route configuration.
    let routes = if options.split_routes {
        split_routes(&mut listeners).map_err(&refused)?
    } else {
        BTreeMap::new()
    };
    // EDS: STATIC clusters' inline endpoints.
    let endpoints = if options.split_endpoints {
        split_endpoints(&mut clusters).map_err(&refused)?
    } else {
        Vec::new()
    };
    note_inline_keys(path, &secrets, &mut notes)?;

    // The files.
    let routes: Vec<DynamicMessage> = routes.into_values().collect();
    let mut files = Vec::new();
    for (name, key, items) in [
        ("listeners.yaml", "listeners", &listeners),
        ("clusters.yaml", "clusters", &clusters),
        ("endpoints.yaml", "endpoints", &endpoints),
        ("routes.yaml", "routes", &routes),
        ("secrets.yaml", "secrets", &secrets),
    ] {
        if let Some(text) = snapshot_file(path, key, items)? {
            files.push((name.to_string(), text));
        }
    }

    // The bootstrap: everything else kept, static resources only what must stay, ADS added.
    let out = new_bootstrap(
        path,
        &rest,
        &kept_clusters,
        &kept_secrets,
        options,
        &mut notes,
    )?;
    // The new bootstrap must be one Envoy accepts.
    let check = pbjson::from_json(&descriptor, &out).map_err(|e| refused(e.to_string()))?;
    rules::check(&check).map_err(|v| refused(format!("the new bootstrap: {}: {v}", v.path)))?;
    let bootstrap_text = format!(
        "# Written by `switchyard import` from {}: the same Envoy, its listeners, clusters, \
         routes and secrets from Switchyard over ADS at {}.\n{}",
        path.display(),
        options.xds_address,
        to_yaml(&out).map_err(|e| invalid(e.to_string()))?
    );
    if let Some(limit) = re2_max_program_size {
        notes.push(format!(
            "the bootstrap's runtime sets {} to {limit}: serve (and validate) the snapshot with \
             --re2-max-program-size {limit}",
            checks::re2::RUNTIME_KEY
        ));
    }
    Ok(Imported {
        files,
        bootstrap: bootstrap_text,
        notes,
        re2_max_program_size,
    })
}

/// A bootstrap's static resources.
struct Statics {
    listeners: Vec<DynamicMessage>,
    clusters: Vec<DynamicMessage>,
    secrets: Vec<DynamicMessage>,
}

/// The static resources to import; refused when there are none, when the bootstrap has
/// dynamic resources already, or when a listener is an API listener.
fn statics_of(path: &Path, bootstrap: &DynamicMessage) -> Result<Statics, ImportError> {
    let refused = ImportError::refused(path);
    if has(bootstrap, "dynamic_resources") {
        return Err(refused(
            "it has `dynamic_resources` already: import moves static resources to Switchyard \
             and gives the Envoy Switchyard as its only xDS source; remove them first (or add \
             what they serve to the snapshot files by hand)"
                .into(),
        ));
    }
    let statics = message(bootstrap, "static_resources")
        .ok_or_else(|| refused("it has no `static_resources`: nothing to import".into()))?;
    let found = Statics {
        listeners: list(&statics, "listeners"),
        clusters: list(&statics, "clusters"),
        secrets: list(&statics, "secrets"),
    };
    if found.listeners.is_empty() && found.clusters.is_empty() && found.secrets.is_empty() {
        return Err(refused(
            "its `static_resources` are empty: nothing to import".into(),
        ));
    }
    for (i, listener) in found.listeners.iter().enumerate() {
        if has(listener, "api_listener") {
            return Err(refused(format!(
                "static_resources.listeners[{i}] has an `api_listener`, which Envoy takes only \
                 from the bootstrap, not over LDS"
            )));
        }
    }
    Ok(found)
}

/// What stays static in the bootstrap, and the clusters that move.
struct Kept {
    clusters: Vec<DynamicMessage>,
    secrets: Vec<DynamicMessage>,
    moved: Vec<DynamicMessage>,
}

/// The clusters the rest of the bootstrap (`rest`: all but its static resources) names stay
/// static, and so do the secrets it or they name.
fn kept_static(
    path: &Path,
    rest: &DynamicMessage,
    clusters: Vec<DynamicMessage>,
    secrets: &[DynamicMessage],
    notes: &mut Vec<String>,
) -> Result<Kept, ImportError> {
    let invalid = ImportError::invalid(path);
    let mentioned =
        strings_in(&pbjson::to_json_proto_names(rest).map_err(|e| invalid(e.to_string()))?);
    let (kept_clusters, moved): (Vec<_>, Vec<_>) = clusters
        .into_iter()
        .partition(|c| mentioned.contains(&string(c, "name")));
    for c in &kept_clusters {
        notes.push(format!(
            "cluster {:?} stays static in the bootstrap: the bootstrap itself refers to it",
            string(c, "name")
        ));
    }
    let kept_json: BTreeSet<String> = kept_clusters
        .iter()
        .flat_map(|c| pbjson::to_json_proto_names(c).map(|j| strings_in(&j)))
        .flatten()
        .collect();
    let kept_secrets: Vec<DynamicMessage> = secrets
        .iter()
        .filter(|s| {
            let name = string(s, "name");
            mentioned.contains(&name) || kept_json.contains(&name)
        })
        .cloned()
        .collect();
    Ok(Kept {
        clusters: kept_clusters,
        secrets: kept_secrets,
        moved,
    })
}

/// Unnamed listeners (only a bootstrap may have them; Envoy gives them a random id) get
/// the name Envoy's listener stats use: the address, `0.0.0.0_8080`.
fn name_listeners(listeners: &mut [DynamicMessage], notes: &mut Vec<String>) {
    let mut names: BTreeSet<String> = listeners.iter().map(|l| string(l, "name")).collect();
    for (i, listener) in listeners.iter_mut().enumerate() {
        if !string(listener, "name").is_empty() {
            continue;
        }
        let base = address_name(listener).unwrap_or_else(|| format!("listener_{i}"));
        let mut name = base.clone();
        let mut n = 1;
        while names.contains(&name) {
            n += 1;
            name = format!("{base}_{n}");
        }
        names.insert(name.clone());
        listener.set_field_by_name("name", Value::String(name.clone()));
        notes.push(format!(
            "static_resources.listeners[{i}] has no name: named {name:?} (over LDS a listener \
             needs one)"
        ));
    }
}

/// References to static secrets (an SdsSecretConfig with a name and no source) now name
/// SDS over ADS.
fn secrets_over_ads(
    listeners: &mut [DynamicMessage],
    clusters: &mut [DynamicMessage],
    secrets: &[DynamicMessage],
) -> Result<(), ImportError> {
    let secret_names: BTreeSet<String> = secrets.iter().map(|s| string(s, "name")).collect();
    let ads = ads_config_source(&options_descriptor_config_source()?)?;
    let mut to_sds = |m: &mut DynamicMessage| {
        if m.descriptor().full_name() != SDS_SECRET_CONFIG
            || has(m, "sds_config")
            || !secret_names.contains(&string(m, "name"))
        {
            return false;
        }
        m.set_field_by_name("sds_config", Value::Message(ads.clone()));
        true
    };
    for resource in listeners.iter_mut().chain(clusters.iter_mut()) {
        pbjson::rewrite(resource, &mut to_sds);
    }
    Ok(())
}

/// Private keys written inline go to a proxy only when Switchyard may send them: say so.
fn note_inline_keys(
    path: &Path,
    secrets: &[DynamicMessage],
    notes: &mut Vec<String>,
) -> Result<(), ImportError> {
    let invalid = ImportError::invalid(path);
    for secret in secrets {
        let json = pbjson::to_json_proto_names(secret).map_err(|e| invalid(e.to_string()))?;
        let inline_key = ["private_key", "password", "pkcs12"].iter().any(|k| {
            json.pointer(&format!("/tls_certificate/{k}"))
                .is_some_and(|v| {
                    v.get("inline_string").is_some() || v.get("inline_bytes").is_some()
                })
        }) || json.get("generic_secret").is_some()
            || json.get("session_ticket_keys").is_some();
        if inline_key {
            notes.push(format!(
                "secret {:?} holds key material inline: Switchyard sends it only to a proxy \
                 bound to its node by a client certificate (--node-identity), or to every \
                 proxy with --insecure-serve-secrets (a sidecar on loopback); see \
                 docs/security.md",
                string(secret, "name")
            ));
        }
    }
    Ok(())
}

/// One snapshot file's text: `items` under `key`, saying where they came from; `None` for
/// no items.
fn snapshot_file(
    path: &Path,
    key: &str,
    items: &[DynamicMessage],
) -> Result<Option<String>, ImportError> {
    if items.is_empty() {
        return Ok(None);
    }
    let invalid = ImportError::invalid(path);
    let list: Vec<serde_json::Value> = items
        .iter()
        .map(pbjson::to_json_proto_names)
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(e.to_string()))?;
    let text = to_yaml(&json!({ key: list })).map_err(|e| invalid(e.to_string()))?;
    Ok(Some(format!(
        "# Imported by `switchyard import` from {}.\n{text}",
        path.display()
    )))
}

/// The bootstrap at `path` (its `text`), read as Envoy reads it and checked as the loader
/// checks snapshot files; its descriptor, and the RE2 limit its own runtime sets. Keys given
/// twice go to `notes`.
fn read_bootstrap(
    path: &Path,
    text: &str,
    notes: &mut Vec<String>,
) -> Result<
    (
        DynamicMessage,
        prost_reflect::MessageDescriptor,
        Option<u64>,
    ),
    ImportError,
> {
    let invalid = ImportError::invalid(path);
    let is_json = path.extension().and_then(|e| e.to_str()) == Some("json");
    let value: serde_yaml::Value = if is_json {
        serde_json::from_str(text).map_err(|e| invalid(format!("invalid JSON: {e}")))?
    } else {
        let (value, duplicates) =
            yaml::parse(text).map_err(|e| invalid(format!("invalid YAML: {e}")))?;
        notes.extend(duplicates.into_iter().map(|d| {
            format!(
                "line {}: `{}` is given twice (first at line {}); the last one counts, as in \
                 Envoy",
                d.second_line, d.key, d.first_line
            )
        }));
        value
    };
    let descriptor = descriptors::message_named(BOOTSTRAP)
        .ok_or_else(|| invalid("the pool has no Bootstrap".into()))?;
    let mut track = serde_path_to_error::Track::new();
    let bootstrap = pbjson::from_value(
        &descriptor,
        value,
        |item| {
            DynamicMessage::deserialize_with_options(
                descriptor.clone(),
                serde_path_to_error::Deserializer::new(item, &mut track),
                &prost_reflect::DeserializeOptions::new(),
            )
            .map_err(|e| format!("{}: {e}", track.path()))
        },
        |path, message| format!("{path}: {message}"),
    )
    .map_err(|e| invalid(e.to_string()))?;
    rules::check(&bootstrap).map_err(|v| invalid(format!("{}: {v}", v.path)))?;
    // A regex's program is judged with the limit the bootstrap's own runtime sets.
    let re2_max_program_size = {
        use crate::config::fields;
        fields::message(&bootstrap, "layered_runtime")
            .map(|runtime| fields::messages(&runtime, "layers"))
            .unwrap_or_default()
            .iter()
            .filter_map(|layer| fields::message(layer, "static_layer"))
            .filter_map(|layer| crate::config::json::to_json(&layer).ok())
            .filter_map(|layer| checks::re2::runtime_limit(&layer))
            .next_back()
    };
    if let Some(program) =
        checks::check(&bootstrap).map_err(|r| invalid(format!("{}: {r}", r.path)))?
    {
        let limit = re2_max_program_size.unwrap_or(checks::re2::DEFAULT_MAX_PROGRAM_SIZE);
        checks::judge_regex(&program, limit).map_err(|r| invalid(format!("{}: {r}", r.path)))?;
    }

    Ok((bootstrap, descriptor, re2_max_program_size))
}

/// Each HTTP connection manager's inline route configuration moved out to RDS over ADS
/// (named after its listener when it has no name): the route configurations by name, or why
/// not (two different ones of one name).
fn split_routes(
    listeners: &mut [DynamicMessage],
) -> Result<BTreeMap<String, DynamicMessage>, String> {
    let mut routes: BTreeMap<String, DynamicMessage> = BTreeMap::new();
    for listener in listeners.iter_mut() {
        let listener_name = string(listener, "name");
        let mut k = 0;
        let mut failure = None;
        pbjson::rewrite(listener, &mut |m| {
            if m.descriptor().full_name() != HCM {
                return false;
            }
            let Some(mut route) = message(m, "route_config") else {
                return false;
            };
            k += 1;
            let mut name = string(&route, "name");
            if name.is_empty() {
                name = format!("{listener_name}_routes_{k}");
                route.set_field_by_name("name", Value::String(name.clone()));
            }
            if let Some(existing) = routes.get(&name) {
                if pbjson::to_json(existing).ok() != pbjson::to_json(&route).ok() {
                    failure = Some(format!(
                        "two HTTP connection managers have different route configurations \
                         named {name:?}; over RDS a name means one; rename one, or import \
                         without --split-routes"
                    ));
                    return false;
                }
            }
            routes.insert(name.clone(), route);
            m.clear_field_by_name("route_config");
            let rds = json!({"route_config_name": name, "config_source": ADS_SOURCE.clone()});
            match from(
                &m.descriptor().get_field_by_name("rds").map(|f| f.kind()),
                &rds,
            ) {
                Ok(rds) => {
                    m.set_field_by_name("rds", Value::Message(rds));
                    true
                }
                Err(e) => {
                    failure = Some(e);
                    false
                }
            }
        });
        if let Some(message) = failure {
            return Err(message);
        }
    }
    Ok(routes)
}

/// STATIC clusters' inline endpoints moved out to EDS over ADS: the ClusterLoadAssignments,
/// or why not.
fn split_endpoints(clusters: &mut [DynamicMessage]) -> Result<Vec<DynamicMessage>, String> {
    let mut endpoints = Vec::new();
    for cluster in clusters.iter_mut() {
        let is_static = cluster
            .get_field_by_name("type")
            .and_then(|v| v.as_enum_number())
            .is_none_or(|n| n == 0);
        let has_discovery_type = has(cluster, "cluster_type");
        let Some(mut assignment) = message(cluster, "load_assignment") else {
            continue;
        };
        if !is_static || has_discovery_type {
            continue;
        }
        let name = string(cluster, "name");
        assignment.set_field_by_name("cluster_name", Value::String(name));
        endpoints.push(assignment);
        cluster.clear_field_by_name("load_assignment");
        let eds = json!({"eds_config": ADS_SOURCE.clone()});
        let eds = from(
            &cluster
                .descriptor()
                .get_field_by_name("eds_cluster_config")
                .map(|f| f.kind()),
            &eds,
        )?;
        cluster.set_field_by_name("eds_cluster_config", Value::Message(eds));
        // EDS is 3 in Cluster.DiscoveryType.
        cluster.set_field_by_name("type", Value::EnumNumber(3));
    }
    Ok(endpoints)
}

/// The new bootstrap, as JSON: `rest` (the old one without its static resources), the
/// clusters and secrets that stay static, an xDS cluster for Switchyard, ADS for CDS and LDS,
/// and a node id and cluster if it had none (said in `notes`).
fn new_bootstrap(
    path: &Path,
    rest: &DynamicMessage,
    kept_clusters: &[DynamicMessage],
    kept_secrets: &[DynamicMessage],
    options: &ImportOptions,
    notes: &mut Vec<String>,
) -> Result<serde_json::Value, ImportError> {
    let invalid = ImportError::invalid(path);
    let refused = ImportError::refused(path);
    let xds_name = {
        let taken: BTreeSet<String> = kept_clusters.iter().map(|c| string(c, "name")).collect();
        let mut name = "switchyard".to_string();
        while taken.contains(&name) {
            name.push_str("_xds");
        }
        name
    };
    let mut static_clusters = kept_clusters
        .iter()
        .map(pbjson::to_json_proto_names)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(e.to_string()))?;
    static_clusters.push(xds_cluster(&xds_name, &options.xds_address).map_err(refused)?);
    let mut new_statics = json!({ "clusters": static_clusters });
    if !kept_secrets.is_empty() {
        new_statics["secrets"] = kept_secrets
            .iter()
            .map(pbjson::to_json_proto_names)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(e.to_string()))?
            .into();
    }
    let mut out = pbjson::to_json_proto_names(rest).map_err(|e| invalid(e.to_string()))?;
    out["static_resources"] = new_statics;
    out["dynamic_resources"] = json!({
        "ads_config": {
            "api_type": if options.delta { "DELTA_GRPC" } else { "GRPC" },
            "transport_api_version": "V3",
            "set_node_on_first_message_only": true,
            "grpc_services": [{"envoy_grpc": {"cluster_name": xds_name}}],
        },
        "cds_config": ADS_SOURCE.clone(),
        "lds_config": ADS_SOURCE.clone(),
    });
    if out.get("node").is_none() {
        out["node"] = json!({});
    }
    let node = &mut out["node"];
    if node
        .get("id")
        .and_then(|v| v.as_str())
        .is_none_or(str::is_empty)
    {
        node["id"] = options.node_id.clone().into();
        notes.push(format!(
            "the bootstrap has no node.id: set to {:?} (Switchyard serves by node)",
            options.node_id
        ));
    }
    if node
        .get("cluster")
        .and_then(|v| v.as_str())
        .is_none_or(str::is_empty)
    {
        node["cluster"] = options.node_cluster.clone().into();
    }
    Ok(out)
}

/// `{ads: {}, resource_api_version: V3}`.
static ADS_SOURCE: std::sync::LazyLock<serde_json::Value> =
    std::sync::LazyLock::new(|| json!({"ads": {}, "resource_api_version": "V3"}));

fn options_descriptor_config_source() -> Result<prost_reflect::MessageDescriptor, ImportError> {
    descriptors::message_named("envoy.config.core.v3.ConfigSource").ok_or_else(|| {
        ImportError::Invalid {
            path: PathBuf::new(),
            message: "the pool has no ConfigSource".into(),
        }
    })
}

fn ads_config_source(
    descriptor: &prost_reflect::MessageDescriptor,
) -> Result<DynamicMessage, ImportError> {
    pbjson::from_json(descriptor, &ADS_SOURCE).map_err(|e| ImportError::Invalid {
        path: PathBuf::new(),
        message: e.to_string(),
    })
}

/// A message of a field's kind, from JSON.
fn from(
    kind: &Option<prost_reflect::Kind>,
    value: &serde_json::Value,
) -> Result<DynamicMessage, String> {
    match kind {
        Some(prost_reflect::Kind::Message(descriptor)) => {
            pbjson::from_json(descriptor, value).map_err(|e| e.to_string())
        }
        _ => Err("not a message field".into()),
    }
}

/// The static cluster to Switchyard (HTTP/2 with keepalives, as examples/envoy's bootstraps).
fn xds_cluster(name: &str, address: &str) -> Result<serde_json::Value, String> {
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| format!("--xds-address {address:?}: expected HOST:PORT"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port: u16 = port
        .parse()
        .map_err(|_| format!("--xds-address {address:?}: the port is not a number"))?;
    let kind = if host.parse::<std::net::IpAddr>().is_ok() {
        "STATIC"
    } else {
        "STRICT_DNS"
    };
    Ok(json!({
        "name": name,
        "type": kind,
        "connect_timeout": "1s",
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {
                    "connection_keepalive": {"interval": "30s", "timeout": "5s"}}},
            },
        },
        "upstream_connection_options": {"tcp_keepalive": {}},
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [{"endpoint": {
            "address": {"socket_address": {"address": host, "port_value": port}}}}]}]},
    }))
}

/// The name Envoy's listener stats give a listener: its address, `0.0.0.0_8080`.
fn address_name(listener: &DynamicMessage) -> Option<String> {
    let address = message(listener, "address")?;
    if let Some(socket) = message(&address, "socket_address") {
        let port = socket
            .get_field_by_name("port_value")
            .and_then(|v| v.as_u32())
            .unwrap_or(0);
        return Some(format!("{}_{port}", string(&socket, "address")));
    }
    message(&address, "pipe").map(|pipe| string(&pipe, "path"))
}

/// JSON as YAML a person would write, and that reads back the same through Envoy's YAML
/// rules: `name` first in each mapping, a whole number written whole (`10000`, not the
/// `10000.0` of a Struct's double), multi-line strings (PEM) as literal blocks, and every
/// string that yaml-cpp would read as something else (`yes`, `on`, `42`) quoted.
fn to_yaml(json: &serde_json::Value) -> Result<String, String> {
    use yaml_rust2::Yaml;
    fn convert(json: &serde_json::Value) -> Yaml {
        match json {
            serde_json::Value::Object(map) => {
                let mut out = yaml_rust2::yaml::Hash::new();
                let first = map.get_key_value("name");
                for (k, v) in first
                    .into_iter()
                    .chain(map.iter().filter(|(k, _)| *k != "name"))
                {
                    out.insert(Yaml::String(k.clone()), convert(v));
                }
                Yaml::Hash(out)
            }
            serde_json::Value::Array(items) => Yaml::Array(items.iter().map(convert).collect()),
            serde_json::Value::Number(n) => match (n.as_i64(), n.as_f64()) {
                (Some(i), _) => Yaml::Integer(i),
                (None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => Yaml::Integer(f as i64),
                _ => Yaml::Real(n.to_string()),
            },
            serde_json::Value::String(s) => Yaml::String(s.clone()),
            serde_json::Value::Bool(b) => Yaml::Boolean(*b),
            serde_json::Value::Null => Yaml::Null,
        }
    }
    let mut out = String::new();
    let mut emitter = yaml_rust2::YamlEmitter::new(&mut out);
    emitter.multiline_strings(true);
    emitter.dump(&convert(json)).map_err(|e| e.to_string())?;
    // The emitter starts with a document marker; a snapshot file is one document anyway.
    let body = out.strip_prefix("---\n").unwrap_or(&out).to_string();
    Ok(body + "\n")
}

/// Every string in a JSON value (names the bootstrap mentions).
fn strings_in(json: &serde_json::Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    fn walk(v: &serde_json::Value, out: &mut BTreeSet<String>) {
        match v {
            serde_json::Value::String(s) => {
                out.insert(s.clone());
            }
            serde_json::Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            serde_json::Value::Object(map) => map.values().for_each(|i| walk(i, out)),
            _ => {}
        }
    }
    walk(json, &mut out);
    out
}

/// Where an import is written under its directory: the snapshot files (for `serve
/// --config`) and the Envoy's new bootstrap beside them.
pub const SNAPSHOT_DIR: &str = "snapshot";
pub const BOOTSTRAP_FILE: &str = "envoy.yaml";

/// Write an import into `dir`: the snapshot files under `dir/snapshot/` and the bootstrap as
/// `dir/envoy.yaml`. Refuses to overwrite unless `force`; writes nothing when any file is in
/// the way.
pub fn write(dir: &Path, imported: &Imported, force: bool) -> Result<Vec<PathBuf>, ImportError> {
    let write_error = |path: &Path, message: String| ImportError::Write {
        path: path.to_path_buf(),
        message,
    };
    let snapshot = dir.join(SNAPSHOT_DIR);
    let mut targets: Vec<(PathBuf, &str)> = imported
        .files
        .iter()
        .map(|(name, text)| (snapshot.join(name), text.as_str()))
        .collect();
    targets.push((dir.join(BOOTSTRAP_FILE), imported.bootstrap.as_str()));
    if !force {
        if let Some((path, _)) = targets.iter().find(|(p, _)| p.exists()) {
            return Err(write_error(
                path,
                "exists already; import writes into a new directory (or pass --force)".into(),
            ));
        }
    }
    std::fs::create_dir_all(&snapshot)
        .map_err(|e| write_error(&snapshot, format!("cannot create: {e}")))?;
    for (path, text) in &targets {
        std::fs::write(path, text).map_err(|e| write_error(path, format!("cannot write: {e}")))?;
    }
    Ok(targets.into_iter().map(|(p, _)| p).collect())
}

#[cfg(test)]
mod tests;
