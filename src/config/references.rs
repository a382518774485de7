//! The references between resources (the dependency graph, kept on each
//! [`Resource::references`] for the make-before-break plan), and the checks on them: a route
//! naming a cluster no file defines, an RDS listener naming a missing route configuration, an
//! EDS cluster without endpoints, a TLS transport socket naming a missing SDS secret, an ECDS
//! filter or a scoped route naming a missing extension config or route configuration.
//!
//! References are read from each resource's canonical JSON (lowerCamelCase keys, `Any` expanded with its
//! `"@type"`), so they see inside typed_config without per-filter code. The checks are
//! global: a name defined in any file counts, whatever the node selectors.
//!
//! Must not: refuse a load by itself: what is an error and what a warning (`--strict`) is
//! the loader's to say.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{ConfigError, SnapshotFile};
use crate::resource::{xdstp, Resource, ResourceType};

/// A reference from one resource to another.
struct Reference<'a> {
    file: usize,
    /// The resource's index in its list, when it was read from a file.
    index: Option<usize>,
    from_kind: ResourceType,
    from_name: &'a str,
    to_kind: ResourceType,
    to_name: &'a str,
}

/// What the loaded files define and refer to, borrowed from them.
#[derive(Default)]
pub(super) struct Checker<'a> {
    defined: rustc_hash::FxHashSet<(ResourceType, &'a str)>,
    references: Vec<Reference<'a>>,
}

/// What a resource of `kind` refers to (see [`Resource::references`]), read from its
/// canonical JSON; `eds` is the ClusterLoadAssignment an EDS cluster takes.
pub(super) fn of(
    kind: ResourceType,
    name: &str,
    json: &Value,
    eds: Option<&str>,
) -> Vec<(ResourceType, String)> {
    let mut found = Vec::new();
    let mut refer = |to_kind, to_name: &str| {
        // P35: an xdstp name is compared in canonical form.
        if !to_name.is_empty() {
            found.push((to_kind, xdstp::canonical(to_name).into_owned()));
        }
    };
    if let Some(eds) = eds {
        refer(ResourceType::Endpoint, eds);
    }
    visit(json, &mut |key, value| match key {
        // RouteAction.cluster, TcpProxy.cluster
        "route" | "tcpProxy" => {
            if let Some(c) = value.get("cluster").and_then(Value::as_str) {
                refer(ResourceType::Cluster, c);
            }
        }
        "weightedClusters" => {
            for c in value
                .get("clusters")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(name) = c.get("name").and_then(Value::as_str) {
                    refer(ResourceType::Cluster, name);
                }
            }
        }
        "rds" => {
            if let Some(r) = value.get("routeConfigName").and_then(Value::as_str) {
                refer(ResourceType::Route, r);
            }
        }
        "tlsCertificateSdsSecretConfigs" => {
            for s in value.as_array().into_iter().flatten() {
                if let Some(name) = s.get("name").and_then(Value::as_str) {
                    refer(ResourceType::Secret, name);
                }
            }
        }
        // P34: a locality whose endpoints come by LEDS names their glob collection.
        "ledsClusterLocalityConfig" => {
            if let Some(c) = value.get("ledsCollectionName").and_then(Value::as_str) {
                refer(ResourceType::LbEndpoint, c);
            }
        }
        "validationContextSdsSecretConfig" => {
            if let Some(name) = value.get("name").and_then(Value::as_str) {
                refer(ResourceType::Secret, name);
            }
        }
        _ => {}
    });
    visit_objects(json, &mut |object| {
        // A TcpProxy typed_config is the object itself, with its "@type".
        let is_tcp_proxy = object
            .get("@type")
            .and_then(Value::as_str)
            .is_some_and(|t| t.ends_with(".TcpProxy"));
        if is_tcp_proxy {
            if let Some(c) = object.get("cluster").and_then(Value::as_str) {
                refer(ResourceType::Cluster, c);
            }
        }
        // A filter whose config comes from ECDS is named by the extension config's name.
        if object.contains_key("configDiscovery") {
            if let Some(n) = object.get("name").and_then(Value::as_str) {
                refer(ResourceType::ExtensionConfig, n);
            }
        }
    });
    match kind {
        ResourceType::ScopedRoute => {
            if let Some(r) = json.get("routeConfigurationName").and_then(Value::as_str) {
                refer(ResourceType::Route, r);
            }
        }
        // A route configuration with VHDS takes the virtual hosts of its own namespace.
        ResourceType::Route if json.get("vhds").is_some() => {
            refer(ResourceType::VirtualHost, name);
        }
        _ => {}
    }
    found
}

impl<'a> Checker<'a> {
    /// A checker for about `resources` resources.
    pub(super) fn with_capacity(resources: usize) -> Self {
        Checker {
            defined: rustc_hash::FxHashSet::with_capacity_and_hasher(resources, Default::default()),
            references: Vec::with_capacity(resources),
        }
    }

    /// Record a loaded resource (from file number `file`) and what it refers to.
    pub(super) fn add(&mut self, file: usize, resource: &'a Resource) {
        self.defined.insert((resource.kind, resource.name.as_str()));
        for (to_kind, to_name) in &resource.references {
            // A VHDS namespace is filled by whatever virtual hosts exist: nothing to check.
            if *to_kind == ResourceType::VirtualHost {
                continue;
            }
            self.references.push(Reference {
                file,
                index: resource.origin().map(|(_, index)| index),
                from_kind: resource.kind,
                from_name: &resource.name,
                to_kind: *to_kind,
                to_name: to_name.as_str(),
            });
        }
    }

    /// Every reference to something no file defines (a glob collection, P34: with no member
    /// defined).
    /// `texts`: each file's text by index, where the caller holds it (documents); files are
    /// read again otherwise.
    pub(super) fn run(
        self,
        files: &[SnapshotFile],
        texts: &std::collections::HashMap<usize, &str>,
    ) -> Vec<ConfigError> {
        let mut seen = BTreeSet::new();
        let collections: BTreeSet<(ResourceType, String)> = self
            .defined
            .iter()
            .filter_map(|(kind, name)| Some((*kind, xdstp::collection_of(name)?)))
            .collect();
        let defined = |r: &Reference| {
            self.defined.contains(&(r.to_kind, r.to_name))
                || collections.contains(&(r.to_kind, r.to_name.to_string()))
        };
        // Where each resource that refers is written: found only for files with something to
        // report, read again with positions (a good load never pays for it).
        let mut read: std::collections::HashMap<usize, (String, super::yaml::Positions)> =
            std::collections::HashMap::new();
        // At the field that names what is missing (a route's `cluster:`, not the route
        // configuration's first line), or else at the resource.
        let mut at = |r: &Reference| {
            let index = r.index?;
            let (text, positions) = read.entry(r.file).or_insert_with(|| {
                let text = match texts.get(&r.file) {
                    Some(text) => text.to_string(),
                    None => std::fs::read_to_string(&files[r.file].path).unwrap_or_default(),
                };
                let positions = super::yaml::positions(&text);
                (text, positions)
            });
            let resource = format!("{}[{index}]", r.from_kind.file_key());
            let field = super::yaml::path_of_value(text, &resource, r.to_name);
            super::yaml::position_of(positions, field.as_deref().unwrap_or(&resource))
        };
        self.references
            .iter()
            .filter(|r| !defined(r))
            .filter(|r| seen.insert((r.file, r.from_kind, r.from_name, r.to_kind, r.to_name)))
            .map(|r| ConfigError::Reference {
                path: files[r.file].path.clone(),
                at: at(r),
                kind: r.from_kind,
                name: r.from_name.to_string(),
                message: match r.to_kind {
                    ResourceType::Endpoint => format!(
                        "is an EDS cluster, but no file defines endpoints (a \
                         ClusterLoadAssignment) named {:?}",
                        r.to_name
                    ),
                    other => format!(
                        "refers to {} {:?}, which no file defines",
                        noun(other),
                        r.to_name
                    ),
                },
            })
            .collect()
    }
}

pub(super) fn noun(kind: ResourceType) -> &'static str {
    match kind {
        ResourceType::Cluster => "cluster",
        ResourceType::Listener => "listener",
        ResourceType::Route => "route configuration",
        ResourceType::Secret => "secret",
        ResourceType::LbEndpoint => "LEDS collection (lb_endpoints)",
        _ => kind.file_key(),
    }
}

/// For an EDS cluster, the name of the ClusterLoadAssignment it takes.
pub(super) fn eds_service_name(cluster_name: &str, json: &Value) -> Option<String> {
    if json.get("type").and_then(Value::as_str) != Some("EDS") {
        return None;
    }
    let service = json
        .get("edsClusterConfig")
        .and_then(|c| c.get("serviceName"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    Some(xdstp::canonical(service.unwrap_or(cluster_name)).into_owned())
}

/// Call `f` with every (key, value) of every object in the tree.
fn visit(value: &Value, f: &mut impl FnMut(&str, &Value)) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                f(k, v);
                visit(v, f);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| visit(v, f)),
        _ => {}
    }
}

/// Call `f` with every object in the tree.
fn visit_objects(value: &Value, f: &mut impl FnMut(&serde_json::Map<String, Value>)) {
    match value {
        Value::Object(map) => {
            f(map);
            map.values().for_each(|v| visit_objects(v, f));
        }
        Value::Array(items) => items.iter().for_each(|v| visit_objects(v, f)),
        _ => {}
    }
}
