//! `switchyard diff`: what a change of the snapshot files does to each node group, for code
//! review and CI.
//!
//! Owns: comparing two loaded configs node group by node group (the groups of
//! [`crate::preflight::groups`], taken from both configs), or a loaded config with what a
//! server's `/config_dump` says each of its groups gets, per type: resources added, removed
//! and changed, and for each changed resource the fields that differ, as paths in the field
//! names the files are written with (`load_assignment.endpoints[0].lb_endpoints[0]...`).
//! Lists whose elements Envoy keys by name or match are paired by that key, not by position
//! (`virtual_hosts[name=all].routes[name=api]`), so inserting one route reads as one added
//! route; a new order of the same elements is a change of its own (routes match in order).
//! Sensitive fields are compared by version only and never shown.
//!
//! Must not: load files (the CLI does) or print (it returns a [`Report`]).

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::sync::Arc;

use serde_json::Value;

use crate::config::{descriptors, json, Config};
use crate::resource::{Resource, ResourceType, Secrets};

/// How many names a list shows before it is summarized: the first ones, then how many more
/// (`--verbose` and the JSON list every one).
pub const LIST_LIMIT: usize = 20;

/// What changed for one node group, and for the groups that change the same way.
#[derive(Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct GroupDiff {
    /// The node group, as [`crate::preflight::Group`] names it.
    pub group: String,
    /// The other node groups whose change is the very same (shown once), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<String>,
    /// By type, in send order.
    pub types: Vec<TypeDiff>,
}

#[derive(Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TypeDiff {
    pub kind: String,
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Changed resources: name and the fields that differ.
    pub changed: Vec<(String, Vec<FieldChange>)>,
}

/// One field that differs, with both values as proto3 JSON (`None`: absent on that side).
#[derive(Debug, PartialEq, Eq, serde::Serialize)]
pub struct FieldChange {
    pub path: String,
    pub old: Option<String>,
    pub new: Option<String>,
}

/// Every node group's changes; empty when nothing changes for any node.
#[derive(Debug, Default)]
pub struct Report {
    pub groups: Vec<GroupDiff>,
}

impl Report {
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

/// One side of a comparison for one node group: by type and name, each resource's version,
/// its proto3 JSON without secrets, and its TTL.
type Side = BTreeMap<ResourceType, BTreeMap<String, Entry>>;

#[derive(Debug)]
struct Entry {
    version: String,
    json: Value,
    ttl: Option<String>,
}

/// A resource's JSON as the files write it (the .proto field names), or `Null`.
fn shown(kind: ResourceType, body: &bytes::Bytes) -> Value {
    prost_reflect::DynamicMessage::decode(descriptors::message(kind), body.clone())
        .ok()
        .and_then(|m| json::to_json_proto_names(&m).ok())
        .unwrap_or(Value::Null)
}

fn side_of(resources: &[Arc<Resource>]) -> Side {
    let mut side = Side::new();
    for r in resources {
        let json = shown(r.kind, r.body_shown(Secrets::Redact));
        side.entry(r.kind).or_default().insert(
            r.name.clone(),
            Entry {
                version: r.version.clone(),
                json,
                ttl: r.ttl.map(|t| format!("{}s", t.as_secs_f64())),
            },
        );
    }
    side
}

/// A side from a server's `/config_dump` answer. Secrets are taken out again here (the
/// server may show them, with --admin-show-secrets).
fn side_of_dump(dump: &Value) -> Side {
    let mut side = Side::new();
    let Some(types) = dump.get("types").and_then(Value::as_object) else {
        return side;
    };
    for (short, t) in types {
        let Some(kind) = ResourceType::ALL
            .into_iter()
            .find(|k| k.short_name() == short)
        else {
            continue;
        };
        for entry in t
            .get("resources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let (Some(name), Some(version)) = (
                entry.get("name").and_then(Value::as_str),
                entry.get("version").and_then(Value::as_str),
            ) else {
                continue;
            };
            let json = entry
                .get("resource")
                .map_or(Value::Null, |r| redacted(kind, r));
            side.entry(kind).or_default().insert(
                name.to_string(),
                Entry {
                    version: version.to_string(),
                    json,
                    ttl: entry.get("ttl").and_then(Value::as_str).map(str::to_string),
                },
            );
        }
    }
    side
}

/// A resource's proto3 JSON with its sensitive fields taken out (as the operator sees it).
fn redacted(kind: ResourceType, json: &Value) -> Value {
    let Ok(mut message) = json::from_json(&descriptors::message(kind), json) else {
        return Value::Null;
    };
    crate::config::redact::redact(&mut message, crate::config::redact::Audience::Operator);
    crate::config::json::to_json_proto_names(&message).unwrap_or(Value::Null)
}

/// Compare `old` and `new` for every node group either of them has.
pub fn diff(old: &Config, new: &Config) -> Report {
    let mut nodes: Vec<(crate::config::selector::NodeFacts, String)> = Vec::new();
    for config in [new, old] {
        for (group, _) in crate::preflight::groups(config) {
            if !nodes.iter().any(|(node, _)| *node == group.node) {
                let label = group.to_string();
                nodes.push((group.node, label));
            }
        }
    }
    let mut groups = Vec::new();
    let mut seen: Vec<(Vec<usize>, Vec<usize>)> = Vec::new();
    for (node, label) in nodes {
        let files = |c: &Config| -> Vec<usize> {
            c.files
                .iter()
                .enumerate()
                .filter(|(_, f)| f.selector.matches(&node))
                .map(|(i, _)| i)
                .collect()
        };
        let key = (files(old), files(new));
        if seen.contains(&key) {
            continue;
        }
        let resources = |c: &Config, files: &[usize]| -> Vec<Arc<Resource>> {
            files
                .iter()
                .flat_map(|&i| c.files[i].resources.iter().cloned())
                .collect()
        };
        let group = compare(
            &label,
            &side_of(&resources(old, &key.0)),
            &side_of(&resources(new, &key.1)),
        );
        seen.push(key);
        if !group.types.is_empty() {
            groups.push(group);
        }
    }
    Report {
        groups: merged(groups),
    }
}

/// Groups whose changes are the same, as one: the first (by name) with the others in
/// `also`; sorted by name.
fn merged(groups: Vec<GroupDiff>) -> Vec<GroupDiff> {
    let mut out: Vec<GroupDiff> = Vec::new();
    let mut groups = groups;
    groups.sort_by(|a, b| a.group.cmp(&b.group));
    for g in groups {
        match out.iter_mut().find(|o| o.types == g.types) {
            Some(same) => same.also.push(g.group),
            None => out.push(g),
        }
    }
    out
}

/// `lines`, at most [`LIST_LIMIT`] of them unless `verbose`, then a line counting the
/// rest; each after `indent`.
pub fn capped(lines: &[String], verbose: bool, indent: &str) -> String {
    let shown = if verbose { lines.len() } else { LIST_LIMIT };
    let mut out = String::new();
    for line in lines.iter().take(shown) {
        let _ = writeln!(out, "{indent}{line}");
    }
    if lines.len() > shown {
        let _ = writeln!(
            out,
            "{indent}... and {} more (--verbose lists every one)",
            lines.len() - shown
        );
    }
    out
}

/// `names` joined by `, `, at most [`LIST_LIMIT`] unless `verbose`, then how many more.
pub fn joined(names: &[String], verbose: bool) -> String {
    first_of(names, if verbose { names.len() } else { LIST_LIMIT })
}

/// The first `limit` of `names` joined by `, `, then ` and N more` when there are more.
pub fn first_of(names: &[String], limit: usize) -> String {
    let mut text = names
        .iter()
        .take(limit)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > limit {
        let _ = write!(text, " and {} more", names.len() - limit);
    }
    text
}

/// Compare what a server serves with `new`, for each node group of `new`: `dump` answers
/// the server's `/config_dump` for a node id and cluster.
pub fn against_server<E>(
    new: &Config,
    mut dump: impl FnMut(&str, &str) -> Result<Value, E>,
) -> Result<Report, E> {
    let mut groups = Vec::new();
    for (group, resources) in crate::preflight::groups(new) {
        let served = dump(&group.node_id, &group.node_cluster)?;
        let diff = compare(
            &group.to_string(),
            &side_of_dump(&served),
            &side_of(&resources),
        );
        if !diff.types.is_empty() {
            groups.push(diff);
        }
    }
    Ok(Report {
        groups: merged(groups),
    })
}

fn compare(label: &str, old: &Side, new: &Side) -> GroupDiff {
    let empty = BTreeMap::new();
    let mut types = Vec::new();
    for kind in ResourceType::ALL {
        let (before, after) = (
            old.get(&kind).unwrap_or(&empty),
            new.get(&kind).unwrap_or(&empty),
        );
        let mut t = TypeDiff {
            kind: kind.short_name().to_string(),
            ..TypeDiff::default()
        };
        for (name, r) in after {
            match before.get(name) {
                None => t.added.push(name.clone()),
                Some(o) if o.version != r.version => t.changed.push((name.clone(), fields(o, r))),
                Some(_) => {}
            }
        }
        t.removed = before
            .keys()
            .filter(|name| !after.contains_key(*name))
            .cloned()
            .collect();
        if !(t.added.is_empty() && t.removed.is_empty() && t.changed.is_empty()) {
            types.push(t);
        }
    }
    GroupDiff {
        group: label.to_string(),
        also: Vec::new(),
        types,
    }
}

/// The fields that differ between two versions of a resource, secrets left out. A change
/// only in a sensitive field shows as one line saying so.
fn fields(old: &Entry, new: &Entry) -> Vec<FieldChange> {
    let mut out = Vec::new();
    walk("", Some(&old.json), Some(&new.json), &mut out);
    if old.ttl != new.ttl {
        out.push(FieldChange {
            path: "(ttl)".into(),
            old: old.ttl.clone(),
            new: new.ttl.clone(),
        });
    }
    if out.is_empty() {
        out.push(FieldChange {
            path: "(sensitive fields, not shown)".into(),
            old: None,
            new: None,
        });
    }
    out
}

fn walk(path: &str, old: Option<&Value>, new: Option<&Value>, out: &mut Vec<FieldChange>) {
    let child = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match (old, new) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                walk(&child(key), a.get(key), b.get(key), out);
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) => match pairing_key(a, b) {
            Some(key) => walk_keyed(path, key, a, b, out),
            None => {
                for i in 0..a.len().max(b.len()) {
                    walk(&format!("{path}[{i}]"), a.get(i), b.get(i), out);
                }
            }
        },
        (a, b) if a == b => {}
        (a, b) => out.push(FieldChange {
            path: if path.is_empty() {
                ".".into()
            } else {
                path.to_string()
            },
            old: a.map(Value::to_string),
            new: b.map(Value::to_string),
        }),
    }
}

/// What elements of a list are known by, in the order tried: a `name` (virtual hosts,
/// routes, filter chains, filters, clusters of weighted clusters, ...), a route's `match`, a
/// filter chain's `filter_chain_match`, an endpoint's `endpoint.address`, a locality's
/// `locality`. Lists of plain values, and lists no key fits, go by position.
const KEYS: [&str; 5] = [
    "name",
    "match",
    "filter_chain_match",
    "endpoint.address",
    "locality",
];

/// The key both lists' elements are known by: every element has it, and no two elements of
/// one list share it. `None`: compare by position.
fn pairing_key(a: &[Value], b: &[Value]) -> Option<&'static str> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    KEYS.into_iter().find(|key| {
        [a, b].iter().all(|list| {
            let mut seen = std::collections::BTreeSet::new();
            list.iter()
                .all(|e| key_of(e, key).is_some_and(|k| seen.insert(k)))
        })
    })
}

/// `element`'s value at the dotted `key`, as compact JSON (a string as itself).
fn key_of(element: &Value, key: &str) -> Option<String> {
    let mut at = element;
    for part in key.split('.') {
        at = at.get(part)?;
    }
    // An address as people write it: `127.0.0.1:8080`.
    let socket = at.get("socket_address");
    if let Some((host, port)) = socket.and_then(|s| Some((s.get("address")?, s.get("port_value")?)))
    {
        return Some(format!("{}:{port}", host.as_str().unwrap_or_default()));
    }
    Some(match at {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

/// Compare two lists element by element of the same key: what only one side has is added or
/// removed whole, the rest compared field by field; a new order of the elements both have is
/// one change of its own.
fn walk_keyed(path: &str, key: &str, a: &[Value], b: &[Value], out: &mut Vec<FieldChange>) {
    let label = key.rsplit('.').next().unwrap_or(key);
    let keyed = |list: &[Value]| -> Vec<(String, Value)> {
        list.iter()
            .filter_map(|e| Some((key_of(e, key)?, e.clone())))
            .collect()
    };
    let (old, new) = (keyed(a), keyed(b));
    let find = |list: &[(String, Value)], k: &str| {
        list.iter().find(|(x, _)| x == k).map(|(_, v)| v.clone())
    };
    let element = |k: &str| format!("{path}[{label}={k}]");
    for (k, value) in &old {
        match find(&new, k) {
            Some(now) => walk(&element(k), Some(value), Some(&now), out),
            None => walk(&element(k), Some(value), None, out),
        }
    }
    for (k, value) in &new {
        if find(&old, k).is_none() {
            walk(&element(k), None, Some(value), out);
        }
    }
    let order = |list: &[(String, Value)], other: &[(String, Value)]| -> Vec<String> {
        list.iter()
            .filter(|(k, _)| other.iter().any(|(x, _)| x == k))
            .map(|(k, _)| k.clone())
            .collect()
    };
    let (before, after) = (order(&old, &new), order(&new, &old));
    if before != after {
        out.push(FieldChange {
            path: format!("{path} (order)"),
            old: Some(format!("{before:?}")),
            new: Some(format!("{after:?}")),
        });
    }
}

impl Report {
    /// For people: each change once, with the node groups it is for; past [`LIST_LIMIT`]
    /// names of a kind, the first ones and how many more, unless `verbose`.
    pub fn text(&self, verbose: bool) -> String {
        let mut f = String::new();
        if self.groups.is_empty() {
            f.push_str("no changes\n");
            return f;
        }
        for g in &self.groups {
            if g.also.is_empty() {
                let _ = writeln!(f, "{}:", g.group);
            } else {
                let mut all = vec![g.group.clone()];
                all.extend(g.also.iter().cloned());
                let _ = writeln!(
                    f,
                    "{} node groups, the same change: {}:",
                    all.len(),
                    joined(&all, verbose)
                );
            }
            for t in &g.types {
                let _ = writeln!(
                    f,
                    "  {}: {} added, {} removed, {} changed",
                    t.kind,
                    t.added.len(),
                    t.removed.len(),
                    t.changed.len()
                );
                let names = |sign: &str, names: &mut dyn Iterator<Item = &String>| -> Vec<String> {
                    names.map(|n| format!("{sign} {n}")).collect()
                };
                f.push_str(&capped(&names("+", &mut t.added.iter()), verbose, "    "));
                f.push_str(&capped(&names("-", &mut t.removed.iter()), verbose, "    "));
                let mut changed = Vec::new();
                for (name, changes) in &t.changed {
                    let mut text = format!("~ {name}");
                    for c in changes {
                        let _ = write!(text, "\n        {}", c.path);
                        if c.old.is_some() || c.new.is_some() {
                            let show =
                                |v: &Option<String>| v.clone().unwrap_or_else(|| "(absent)".into());
                            let _ = write!(text, ": {} -> {}", show(&c.old), show(&c.new));
                        }
                    }
                    changed.push(text);
                }
                f.push_str(&capped(&changed, verbose, "    "));
            }
        }
        f
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text(false))
    }
}

#[cfg(test)]
mod tests;
