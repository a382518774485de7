//! Node selectors: which nodes a snapshot file applies to.
//!
//! Owns: glob matching on a node's id, cluster, string metadata and locality, and the exact
//! test of whether two selectors can match the same node (with a node both match, for the
//! error). Must not: read files.

use std::collections::BTreeMap;

use serde::Deserialize;

/// One `nodes:` entry. Every key given must match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeMatch {
    /// Glob on `node.id`.
    #[serde(default)]
    pub id: Option<String>,
    /// Glob on `node.cluster`.
    #[serde(default)]
    pub cluster: Option<String>,
    /// Globs on `node.metadata` keys whose values are strings (a key missing, or not a
    /// string, does not match).
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Globs on `node.locality`.
    #[serde(default)]
    pub locality: Option<LocalityMatch>,
}

/// Globs on `node.locality`'s fields.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalityMatch {
    #[serde(default)]
    pub region: Option<String>,
    #[serde(default)]
    pub zone: Option<String>,
    #[serde(default)]
    pub sub_zone: Option<String>,
}

/// What selectors read of a node: its id and cluster, its metadata's string values (top
/// level), and its locality.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeFacts {
    pub id: String,
    pub cluster: String,
    pub metadata: BTreeMap<String, String>,
    pub region: String,
    pub zone: String,
    pub sub_zone: String,
}

impl NodeFacts {
    /// A node known by id and cluster only.
    pub fn new(id: &str, cluster: &str) -> NodeFacts {
        NodeFacts {
            id: id.to_string(),
            cluster: cluster.to_string(),
            ..NodeFacts::default()
        }
    }

    /// What a proxy's `Node` says.
    pub fn of(node: &envoy_types::pb::envoy::config::core::v3::Node) -> NodeFacts {
        use envoy_types::pb::google::protobuf::value::Kind;
        let metadata = node
            .metadata
            .iter()
            .flat_map(|m| m.fields.iter())
            .filter_map(|(k, v)| match &v.kind {
                Some(Kind::StringValue(s)) => Some((k.clone(), s.clone())),
                _ => None,
            })
            .collect();
        let locality = node.locality.clone().unwrap_or_default();
        NodeFacts {
            id: node.id.clone(),
            cluster: node.cluster.clone(),
            metadata,
            region: locality.region,
            zone: locality.zone,
            sub_zone: locality.sub_zone,
        }
    }
}

/// The dimensions of a node an entry may constrain, with the entry's glob on each.
fn dimensions(e: &NodeMatch) -> Vec<(String, &str)> {
    let mut out = Vec::new();
    if let Some(g) = &e.id {
        out.push(("id".to_string(), g.as_str()));
    }
    if let Some(g) = &e.cluster {
        out.push(("cluster".to_string(), g.as_str()));
    }
    for (k, g) in &e.metadata {
        out.push((format!("metadata.{k}"), g.as_str()));
    }
    if let Some(l) = &e.locality {
        for (name, g) in [
            ("region", &l.region),
            ("zone", &l.zone),
            ("sub_zone", &l.sub_zone),
        ] {
            if let Some(g) = g {
                out.push((format!("locality.{name}"), g.as_str()));
            }
        }
    }
    out
}

impl NodeMatch {
    fn is_empty(&self) -> bool {
        dimensions(self).is_empty()
    }

    fn matches(&self, node: &NodeFacts) -> bool {
        let text = |g: &Option<String>, t: &str| g.as_deref().is_none_or(|g| glob_match(g, t));
        text(&self.id, &node.id)
            && text(&self.cluster, &node.cluster)
            && self
                .metadata
                .iter()
                .all(|(k, g)| node.metadata.get(k).is_some_and(|v| glob_match(g, v)))
            && self.locality.as_ref().is_none_or(|l| {
                text(&l.region, &node.region)
                    && text(&l.zone, &node.zone)
                    && text(&l.sub_zone, &node.sub_zone)
            })
    }

    /// A node both entries match, if there is one: on each dimension both constrain, a text
    /// both globs match.
    fn common_node(&self, other: &NodeMatch) -> Option<NodeFacts> {
        let theirs = dimensions(other);
        let mut node = NodeFacts::default();
        let mut set = |dim: &str, value: String| match dim {
            "id" => node.id = value,
            "cluster" => node.cluster = value,
            "locality.region" => node.region = value,
            "locality.zone" => node.zone = value,
            "locality.sub_zone" => node.sub_zone = value,
            key => {
                let key = key.strip_prefix("metadata.").unwrap_or(key);
                node.metadata.insert(key.to_string(), value);
            }
        };
        let mine = dimensions(self);
        for (dim, g) in &mine {
            let value = match theirs.iter().find(|(d, _)| d == dim) {
                Some((_, h)) => common_text(g, h)?,
                None => example(g),
            };
            set(dim, value);
        }
        for (dim, h) in &theirs {
            if !mine.iter().any(|(d, _)| d == dim) {
                set(dim, example(h));
            }
        }
        Some(node)
    }

    fn describe(&self) -> String {
        dimensions(self)
            .iter()
            .map(|(d, g)| format!("{d}={g}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A file's `nodes:` selector. `None` entries means every node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    entries: Option<Vec<NodeMatch>>,
}

/// Why a `nodes:` list selects nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("`nodes: []` matches no node; leave `nodes` out to match every node")]
    Empty,
    #[error("nodes[{0}] names none of `id`, `cluster`, `metadata`, `locality`")]
    EmptyEntry(usize),
}

impl Selector {
    /// Matches every node (no `nodes:` key).
    pub fn all() -> Selector {
        Selector { entries: None }
    }

    /// A selector of entries, any of which may match. Returns why not when an entry is empty
    /// or the list is.
    pub fn new(entries: Vec<NodeMatch>) -> Result<Selector, SelectorError> {
        if entries.is_empty() {
            return Err(SelectorError::Empty);
        }
        if let Some(i) = entries.iter().position(NodeMatch::is_empty) {
            return Err(SelectorError::EmptyEntry(i));
        }
        Ok(Selector {
            entries: Some(entries),
        })
    }

    /// The entries (none for a selector of every node).
    pub fn entries(&self) -> &[NodeMatch] {
        self.entries.as_deref().unwrap_or_default()
    }

    /// Whether this node is selected.
    pub fn matches(&self, node: &NodeFacts) -> bool {
        match &self.entries {
            None => true,
            Some(entries) => entries.iter().any(|e| e.matches(node)),
        }
    }

    /// A node both selectors match, if any: exact, since each dimension's globs either
    /// share a text or not, and the dimensions are independent.
    pub fn common_node(&self, other: &Selector) -> Option<NodeFacts> {
        let every = [NodeMatch::default()];
        let a = self.entries.as_deref().unwrap_or(&every);
        let b = other.entries.as_deref().unwrap_or(&every);
        a.iter()
            .find_map(|x| b.iter().find_map(|y| x.common_node(y)))
    }

    /// Whether no node can match both selectors.
    pub fn is_disjoint(&self, other: &Selector) -> bool {
        self.common_node(other).is_none()
    }

    /// A node this selector's entry `index` matches, with its globs' literal parts (for
    /// rendering a node group): `None` past the entries.
    pub fn example_node(&self, index: usize) -> Option<NodeFacts> {
        let entry = self.entries()[..].get(index)?;
        entry.common_node(&NodeMatch::default())
    }

    /// A short text for messages: `every node` or the entries.
    pub fn describe(&self) -> String {
        match &self.entries {
            None => "every node".into(),
            Some(entries) => entries
                .iter()
                .map(NodeMatch::describe)
                .collect::<Vec<_>>()
                .join(" | "),
        }
    }
}

impl NodeFacts {
    /// A short text for messages: `id="edge-1" cluster="" metadata.env="prod"`.
    pub fn describe(&self) -> String {
        let mut parts = vec![
            format!("id={:?}", self.id),
            format!("cluster={:?}", self.cluster),
        ];
        parts.extend(
            self.metadata
                .iter()
                .map(|(k, v)| format!("metadata.{k}={v:?}")),
        );
        for (name, v) in [
            ("region", &self.region),
            ("zone", &self.zone),
            ("sub_zone", &self.sub_zone),
        ] {
            if !v.is_empty() {
                parts.push(format!("locality.{name}={v:?}"));
            }
        }
        parts.join(" ")
    }
}

/// A text `glob` matches: its literal characters, `*` as nothing and `?` as `x`.
fn example(glob: &str) -> String {
    glob.chars()
        .filter(|&c| c != '*')
        .map(|c| if c == '?' { 'x' } else { c })
        .collect()
}

/// A text both globs match, if any: a search of the product of the two patterns, where a
/// position pair moves on by a literal both accept, on any character (`?` or `*` against
/// `?` or `*`), or by a `*` swallowing nothing.
fn common_text(a: &str, b: &str) -> Option<String> {
    use std::collections::{HashMap, VecDeque};
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // From each state, how it was reached (for the witness).
    // A state is a position in each pattern; each is reached from a state by a character (or
    // none, for a `*` swallowing nothing).
    type State = (usize, usize);
    let mut from: HashMap<State, Option<(State, Option<char>)>> = HashMap::new();
    let mut queue = VecDeque::new();
    from.insert((0, 0), None);
    queue.push_back((0, 0));
    let end = (a.len(), b.len());
    while let Some((i, j)) = queue.pop_front() {
        if (i, j) == end {
            let mut text = Vec::new();
            let mut at = end;
            while let Some(Some((prev, c))) = from.get(&at) {
                if let Some(c) = c {
                    text.push(*c);
                }
                at = *prev;
            }
            text.reverse();
            return Some(text.into_iter().collect());
        }
        let mut next: Vec<((usize, usize), Option<char>)> = Vec::new();
        // A `*` may swallow nothing.
        if a.get(i) == Some(&'*') {
            next.push(((i + 1, j), None));
        }
        if b.get(j) == Some(&'*') {
            next.push(((i, j + 1), None));
        }
        // One character both accept: `*` stays, others move on.
        if let (Some(&x), Some(&y)) = (a.get(i), b.get(j)) {
            let step = |p: char, at: usize| if p == '*' { at } else { at + 1 };
            let c = match (x, y) {
                ('*' | '?', '*' | '?') => Some('x'),
                ('*' | '?', c) | (c, '*' | '?') => Some(c),
                (c, d) if c == d => Some(c),
                _ => None,
            };
            if let Some(c) = c {
                let to = (step(x, i), step(y, j));
                // Both `*` consuming: a loop on the same state, nothing new.
                if to != (i, j) {
                    next.push((to, Some(c)));
                }
            }
        }
        for (to, c) in next {
            if let std::collections::hash_map::Entry::Vacant(v) = from.entry(to) {
                v.insert(Some(((i, j), c)));
                queue.push_back(to);
            }
        }
    }
    None
}

/// Why `glob` likely names no group of nodes it was meant to: empty (it matches only a node
/// that gives none), or a prefix with nothing after it (`canary-`: no wildcard, ending in
/// `-`, `_`, `.`, `/` or `:`, it names the one node `canary-`, not every node starting
/// with it).
pub fn bare_prefix(glob: &str) -> Option<String> {
    if glob.is_empty() {
        return Some("is empty: it matches only a node that gives none".into());
    }
    if glob.contains(['*', '?']) {
        return None;
    }
    let last = glob.chars().last()?;
    matches!(last, '-' | '_' | '.' | '/' | ':').then(|| {
        format!(
            "{glob:?} has no wildcard and ends in {last:?}: it names the one node {glob:?}, \
             nothing after the prefix; write \"{glob}*\" for every node that starts with it"
        )
    })
}

impl NodeMatch {
    /// Each glob of this entry that [`bare_prefix`] finds suspect: its field (`id`,
    /// `metadata.team`, ...) and why.
    pub fn bare_prefixes(&self) -> Vec<(String, String)> {
        let locality = self.locality.as_ref();
        let fields = [
            ("id".to_string(), self.id.as_deref()),
            ("cluster".to_string(), self.cluster.as_deref()),
            (
                "locality.region".to_string(),
                locality.and_then(|l| l.region.as_deref()),
            ),
            (
                "locality.zone".to_string(),
                locality.and_then(|l| l.zone.as_deref()),
            ),
            (
                "locality.sub_zone".to_string(),
                locality.and_then(|l| l.sub_zone.as_deref()),
            ),
        ]
        .into_iter()
        .chain(
            self.metadata
                .iter()
                .map(|(k, v)| (format!("metadata.{k}"), Some(v.as_str()))),
        );
        fields
            .filter_map(|(field, glob)| Some((field, bare_prefix(glob?)?)))
            .collect()
    }
}

/// Shell-style glob: `*` matches any run of characters, `?` exactly one.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    // Where the last `*` was, and how much text it has swallowed so far.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && p[pi] == t[ti])) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(entries: &[(Option<&str>, Option<&str>)]) -> Selector {
        Selector::new(
            entries
                .iter()
                .map(|(i, c)| NodeMatch {
                    id: i.map(str::to_string),
                    cluster: c.map(str::to_string),
                    ..NodeMatch::default()
                })
                .collect(),
        )
        .expect("valid selector")
    }

    fn yaml(text: &str) -> Selector {
        Selector::new(serde_yaml::from_str(text).expect("entries")).expect("valid selector")
    }

    fn node(id: &str, cluster: &str) -> NodeFacts {
        NodeFacts::new(id, cluster)
    }

    #[test]
    fn a_prefix_with_nothing_after_it_is_named() {
        let why = bare_prefix("canary-").expect("suspect");
        assert!(why.contains("write \"canary-*\""), "{why}");
        assert!(bare_prefix("").is_some());
        for fine in ["canary-*", "canary-1", "edge", "eu-?"] {
            assert_eq!(bare_prefix(fine), None, "{fine}");
        }
        let entry: NodeMatch =
            serde_yaml::from_str("{id: 'edge-', metadata: {team: 'pay/'}}").expect("entry");
        let fields: Vec<String> = entry.bare_prefixes().into_iter().map(|(f, _)| f).collect();
        assert_eq!(fields, ["id", "metadata.team"]);
    }

    #[test]
    fn glob() {
        assert!(glob_match("edge-*", "edge-1"));
        assert!(glob_match("edge-*", "edge-"));
        assert!(!glob_match("edge-*", "core-1"));
        assert!(glob_match("*-1", "edge-1"));
        assert!(glob_match("e?ge*1", "edge-a-1"));
        assert!(!glob_match("e?ge", "eedge"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
    }

    #[test]
    fn selector_matching() {
        assert!(Selector::all().matches(&node("x", "y")));
        let s = sel(&[(Some("edge-*"), None), (None, Some("frontend"))]);
        assert!(s.matches(&node("edge-7", "whatever")));
        assert!(s.matches(&node("core-1", "frontend")));
        assert!(!s.matches(&node("core-1", "backend")));
        let both = sel(&[(Some("edge-*"), Some("frontend"))]);
        assert!(both.matches(&node("edge-1", "frontend")));
        assert!(!both.matches(&node("edge-1", "backend")));
    }

    #[test]
    fn metadata_and_locality_match_string_values_by_glob() {
        let s = yaml("- {metadata: {env: prod, team: \"pay*\"}}\n- locality: {region: eu-west-1, zone: \"eu-west-1?\"}\n");
        let mut n = node("edge-1", "");
        assert!(!s.matches(&n));
        n.metadata.insert("env".into(), "prod".into());
        assert!(!s.matches(&n), "every key of the entry must match");
        n.metadata.insert("team".into(), "payments".into());
        assert!(s.matches(&n));
        let mut l = node("edge-2", "");
        l.region = "eu-west-1".into();
        assert!(!s.matches(&l), "the zone is asked for too");
        l.zone = "eu-west-1a".into();
        assert!(s.matches(&l));
        // From a proxy's Node: only string values count.
        use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
        let proxy = envoy_types::pb::envoy::config::core::v3::Node {
            id: "n".into(),
            metadata: Some(Struct {
                fields: [
                    (
                        "env".to_string(),
                        Value {
                            kind: Some(Kind::StringValue("prod".into())),
                        },
                    ),
                    (
                        "team".to_string(),
                        Value {
                            kind: Some(Kind::NumberValue(1.0)),
                        },
                    ),
                ]
                .into(),
            }),
            ..Default::default()
        };
        let facts = NodeFacts::of(&proxy);
        assert_eq!(facts.metadata.get("env").map(String::as_str), Some("prod"));
        assert!(!facts.metadata.contains_key("team"));
    }

    #[test]
    fn bad_selectors_are_rejected() {
        assert_eq!(Selector::new(vec![]).unwrap_err(), SelectorError::Empty);
        assert_eq!(
            Selector::new(vec![NodeMatch::default()]).unwrap_err(),
            SelectorError::EmptyEntry(0)
        );
        assert!(SelectorError::EmptyEntry(0)
            .to_string()
            .contains("nodes[0]"));
        let unknown: Result<Vec<NodeMatch>, _> = serde_yaml::from_str("- {locality: {country: x}}");
        assert!(unknown.is_err());
    }

    #[test]
    fn overlap_is_exact_and_names_a_node_both_match() {
        let edge = sel(&[(Some("edge-*"), None)]);
        let core = sel(&[(Some("core-*"), None)]);
        let any_1 = sel(&[(Some("*-1"), None)]);
        let fe = sel(&[(None, Some("frontend"))]);
        assert!(edge.is_disjoint(&core));
        let both = edge.common_node(&any_1).expect("overlap");
        assert!(edge.matches(&both) && any_1.matches(&both), "{both:?}");
        let both = edge.common_node(&fe).expect("overlap");
        assert!(edge.matches(&both) && fe.matches(&both), "{both:?}");
        assert!(!edge.is_disjoint(&Selector::all()));
        assert!(sel(&[(None, Some("a"))]).is_disjoint(&sel(&[(None, Some("b"))])));
        assert!(sel(&[(Some("*-a"), None)]).is_disjoint(&sel(&[(Some("*-b"), None)])));
        // Beyond prefixes and suffixes: `a*b` and `*c*` share no text ending in b... they do
        // (`acb`); `a?` and `?b` share `ab`; `a*a` and `b*` share none.
        for (x, y, common) in [
            ("a*b", "*c*", Some("acb")),
            ("a?", "?b", Some("ab")),
            ("a*a", "b*", None),
            ("x*y*z", "*y", None),
            ("??", "???", None),
            ("*", "", Some("")),
        ] {
            let found = common_text(x, y);
            match common {
                Some(_) => {
                    let text = found.unwrap_or_else(|| panic!("{x} and {y} overlap"));
                    assert!(
                        glob_match(x, &text) && glob_match(y, &text),
                        "{x} {y} {text}"
                    );
                }
                None => assert_eq!(found, None, "{x} and {y}"),
            }
        }
        // Metadata and locality: disjoint on one shared key is enough; a key only one side
        // constrains is no conflict.
        let prod = yaml("- {metadata: {env: prod}}");
        let dev = yaml("- {metadata: {env: dev}}");
        let team = yaml("- {metadata: {team: pay}}");
        assert!(prod.is_disjoint(&dev));
        let both = prod.common_node(&team).expect("overlap");
        assert!(prod.matches(&both) && team.matches(&both));
        let eu = yaml("- {locality: {region: \"eu-*\"}}");
        let us = yaml("- {locality: {region: \"us-*\"}, id: \"edge-*\"}");
        assert!(eu.is_disjoint(&us));
        assert!(!eu.is_disjoint(&edge));
    }
}
