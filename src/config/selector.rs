//! Node selectors: which nodes a snapshot file applies to.
//!
//! Owns: glob matching on `node.id` and `node.cluster`, and the conservative test of whether
//! two selectors can ever match the same node. Must not: read files.

use serde::Deserialize;

/// One `nodes:` entry. Both keys present means both must match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeMatch {
    /// Glob on `node.id`.
    #[serde(default)]
    pub id: Option<String>,
    /// Glob on `node.cluster`.
    #[serde(default)]
    pub cluster: Option<String>,
}

/// A file's `nodes:` selector. `None` entries means every node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    entries: Option<Vec<NodeMatch>>,
}

impl Selector {
    /// Matches every node (no `nodes:` key).
    pub fn all() -> Selector {
        Selector { entries: None }
    }

    /// A selector of entries, any of which may match. Returns why not when an entry is empty
    /// or the list is.
    pub fn new(entries: Vec<NodeMatch>) -> Result<Selector, String> {
        if entries.is_empty() {
            return Err(
                "`nodes: []` matches no node; leave `nodes` out to match every node".into(),
            );
        }
        if let Some(i) = entries
            .iter()
            .position(|e| e.id.is_none() && e.cluster.is_none())
        {
            return Err(format!("nodes[{i}] names neither `id` nor `cluster`"));
        }
        Ok(Selector {
            entries: Some(entries),
        })
    }

    /// Whether a node with this id and cluster is selected.
    /// The entries (none for a selector of every node).
    pub fn entries(&self) -> &[NodeMatch] {
        self.entries.as_deref().unwrap_or_default()
    }

    pub fn matches(&self, node_id: &str, node_cluster: &str) -> bool {
        match &self.entries {
            None => true,
            Some(entries) => entries.iter().any(|e| {
                e.id.as_deref().is_none_or(|g| glob_match(g, node_id))
                    && e.cluster
                        .as_deref()
                        .is_none_or(|g| glob_match(g, node_cluster))
            }),
        }
    }

    /// Whether no node can match both selectors. Conservative: `false` unless disjointness
    /// is evident from the globs' literal prefixes and suffixes.
    pub fn is_disjoint(&self, other: &Selector) -> bool {
        let (Some(a), Some(b)) = (&self.entries, &other.entries) else {
            return false;
        };
        a.iter().all(|x| {
            b.iter().all(|y| {
                pair_disjoint(x.id.as_deref(), y.id.as_deref())
                    || pair_disjoint(x.cluster.as_deref(), y.cluster.as_deref())
            })
        })
    }

    /// A short text for messages: `every node` or the entries.
    pub fn describe(&self) -> String {
        match &self.entries {
            None => "every node".into(),
            Some(entries) => entries
                .iter()
                .map(|e| match (&e.id, &e.cluster) {
                    (Some(i), Some(c)) => format!("id={i} cluster={c}"),
                    (Some(i), None) => format!("id={i}"),
                    (None, Some(c)) => format!("cluster={c}"),
                    (None, None) => String::new(),
                })
                .collect::<Vec<_>>()
                .join(" | "),
        }
    }
}

fn pair_disjoint(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => globs_disjoint(a, b),
        _ => false,
    }
}

fn is_wild(c: char) -> bool {
    c == '*' || c == '?'
}

/// Two globs share no match if their literal prefixes (or suffixes) disagree.
fn globs_disjoint(a: &str, b: &str) -> bool {
    let prefix = |g: &str| g.split(is_wild).next().unwrap_or("").to_string();
    let suffix = |g: &str| {
        if g.contains(is_wild) {
            g.rsplit(is_wild).next().unwrap_or("").to_string()
        } else {
            g.to_string()
        }
    };
    if !a.contains(is_wild) && !b.contains(is_wild) {
        return a != b;
    }
    let (pa, pb) = (prefix(a), prefix(b));
    let (sa, sb) = (suffix(a), suffix(b));
    !(pa.starts_with(&pb) || pb.starts_with(&pa)) || !(sa.ends_with(&sb) || sb.ends_with(&sa))
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
                })
                .collect(),
        )
        .expect("valid selector")
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
        assert!(Selector::all().matches("x", "y"));
        let s = sel(&[(Some("edge-*"), None), (None, Some("frontend"))]);
        assert!(s.matches("edge-7", "whatever"));
        assert!(s.matches("core-1", "frontend"));
        assert!(!s.matches("core-1", "backend"));
        let both = sel(&[(Some("edge-*"), Some("frontend"))]);
        assert!(both.matches("edge-1", "frontend"));
        assert!(!both.matches("edge-1", "backend"));
    }

    #[test]
    fn bad_selectors_are_rejected() {
        assert!(Selector::new(vec![]).is_err());
        assert!(Selector::new(vec![NodeMatch::default()])
            .unwrap_err()
            .contains("nodes[0]"));
    }

    #[test]
    fn disjointness_is_conservative() {
        let edge = sel(&[(Some("edge-*"), None)]);
        let core = sel(&[(Some("core-*"), None)]);
        let any_1 = sel(&[(Some("*-1"), None)]);
        let fe = sel(&[(None, Some("frontend"))]);
        assert!(edge.is_disjoint(&core));
        assert!(!edge.is_disjoint(&any_1));
        assert!(!edge.is_disjoint(&fe));
        assert!(!edge.is_disjoint(&Selector::all()));
        assert!(sel(&[(None, Some("a"))]).is_disjoint(&sel(&[(None, Some("b"))])));
        assert!(sel(&[(Some("*-a"), None)]).is_disjoint(&sel(&[(Some("*-b"), None)])));
    }
}
