//! xdstp resource names (P35; xRFC TP1): `xdstp://[AUTHORITY]/TYPE/ID[?PARAMS]`.
//!
//! TYPE is the resource's message name (`envoy.config.listener.v3.Listener`), ID a path of
//! one or more segments, PARAMS the context parameters (`k=v&k2=v2`). Two names that differ
//! only in the order of their context parameters are the same name: everything compares
//! names in canonical form, parameters sorted by key (then value). An ID that is `*` or ends
//! in `/*` names a glob collection (P34).
//!
//! Owns: parsing, the canonical form, and the checks on a resource's own name. Must not:
//! decide which authorities this server answers for (that is the loader's `--authority`
//! check) or what a glob selects (the protocol's subscriptions).

use std::borrow::Cow;

/// The scheme of an xdstp name.
pub const SCHEME: &str = "xdstp://";

/// An xdstp name, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Xdstp<'a> {
    /// Empty for `xdstp:///TYPE/ID`.
    pub authority: &'a str,
    /// The resource's message name.
    pub type_name: &'a str,
    /// The path after the type: one or more segments.
    pub id: &'a str,
    /// The context parameters, in canonical order.
    params: Vec<(&'a str, &'a str)>,
}

impl<'a> Xdstp<'a> {
    /// `name` parsed, or why it is not a well-formed xdstp name; `None` when it is not an
    /// xdstp name at all (an opaque name).
    pub fn parse(name: &'a str) -> Option<Result<Xdstp<'a>, String>> {
        let rest = name.strip_prefix(SCHEME)?;
        Some(Self::parse_rest(rest))
    }

    fn parse_rest(rest: &'a str) -> Result<Xdstp<'a>, String> {
        if rest.contains('#') {
            return Err("processing directives (`#...`) are not supported".into());
        }
        let (path, query) = match rest.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (rest, None),
        };
        let (authority, path) = path
            .split_once('/')
            .ok_or("it has no resource type: write xdstp://AUTHORITY/TYPE/ID")?;
        let (type_name, id) = path
            .split_once('/')
            .ok_or("it has no id after the resource type: write xdstp://AUTHORITY/TYPE/ID")?;
        if type_name.is_empty() {
            return Err("its resource type is empty".into());
        }
        if id.is_empty() || id.split('/').any(str::is_empty) {
            return Err("its id has an empty path segment".into());
        }
        let mut params = Vec::new();
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("context parameter {pair:?} is not key=value"))?;
            if key.is_empty() {
                return Err(format!("context parameter {pair:?} has an empty key"));
            }
            params.push((key, value));
        }
        params.sort_unstable();
        if params.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err("a context parameter is given twice".into());
        }
        Ok(Xdstp {
            authority,
            type_name,
            id,
            params,
        })
    }

    /// Whether this names a glob collection (P34): an id of `*` or ending in `/*`.
    pub fn is_glob(&self) -> bool {
        self.id == "*" || self.id.ends_with("/*")
    }

    /// The name in canonical form: context parameters sorted.
    pub fn canonical(&self) -> String {
        let mut out = format!("{SCHEME}{}/{}/{}", self.authority, self.type_name, self.id);
        for (i, (k, v)) in self.params.iter().enumerate() {
            out.push(if i == 0 { '?' } else { '&' });
            out.push_str(k);
            out.push('=');
            out.push_str(v);
        }
        out
    }
}

/// The glob collection `name` is a member of (P34): the same authority, type and context
/// parameters, its id's last segment replaced by `*`. `None` for an opaque or malformed
/// name, or a glob itself.
pub fn collection_of(name: &str) -> Option<String> {
    let x = Xdstp::parse(name)?.ok()?;
    if x.is_glob() {
        return None;
    }
    let id = match x.id.rsplit_once('/') {
        Some((parent, _)) => format!("{parent}/*"),
        None => "*".to_string(),
    };
    Some(Xdstp { id: &id, ..x }.canonical())
}

/// A canonical glob collection split for matching its members without parsing each one:
/// the text before its `*`, and its context parameters (`?...`, or empty).
pub fn glob_parts(glob: &str) -> Option<(&str, &str)> {
    if !is_glob(glob) {
        return None;
    }
    let (path, params) = match glob.find('?') {
        Some(i) => glob.split_at(i),
        None => (glob, ""),
    };
    Some((path.strip_suffix('*')?, params))
}

/// Whether canonical `name` is a member of the glob collection split into `parts`
/// ([`glob_parts`]): one more path segment, the same context parameters. What
/// [`collection_of`] says, without an allocation per name.
pub fn is_member(name: &str, (prefix, params): (&str, &str)) -> bool {
    let Some(tail) = name.strip_prefix(prefix) else {
        return false;
    };
    let (id, rest) = match tail.find('?') {
        Some(i) => tail.split_at(i),
        None => (tail, ""),
    };
    !id.is_empty() && !id.contains('/') && rest == params
}

/// Whether `name` is a glob collection (`.../*`), well formed.
pub fn is_glob(name: &str) -> bool {
    matches!(Xdstp::parse(name), Some(Ok(x)) if x.is_glob())
}

/// `name` in canonical form: unchanged unless it is a well-formed xdstp name whose context
/// parameters are out of order.
pub fn canonical(name: &str) -> Cow<'_, str> {
    match Xdstp::parse(name) {
        Some(Ok(x)) => {
            let c = x.canonical();
            if c == name {
                Cow::Borrowed(name)
            } else {
                Cow::Owned(c)
            }
        }
        _ => Cow::Borrowed(name),
    }
}

/// Whether any of `names` is an xdstp name (so that requests of opaque names, nearly all of
/// them, are not copied to be canonicalized).
pub fn any(names: &[String]) -> bool {
    names.iter().any(|n| n.starts_with(SCHEME))
}

/// `names`, each in canonical form.
pub fn canonical_all(names: &[String]) -> Vec<String> {
    names.iter().map(|n| canonical(n).into_owned()).collect()
}

/// Why a resource's own xdstp name is refused (P35).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("{name:?} is not a well-formed xdstp name: {why}")]
    Malformed { name: String, why: String },
    #[error(
        "{name:?} names type {named} but the resource is a {message} (P35: the type in an \
         xdstp name must be the resource's)"
    )]
    OtherType {
        name: String,
        named: String,
        message: String,
    },
    #[error("{name:?} is a glob collection: a resource is named by one member's full URL")]
    Glob { name: String },
    #[error("write it in canonical form, context parameters sorted: {canonical:?}")]
    NotCanonical { canonical: String },
}

/// The checks on a resource's own name, of message type `message`: a well-formed xdstp name
/// of this type, not a glob, written in canonical form. Opaque names pass.
pub fn check_resource_name(message: &str, name: &str) -> Result<(), NameError> {
    let Some(parsed) = Xdstp::parse(name) else {
        return Ok(());
    };
    let x = parsed.map_err(|why| NameError::Malformed {
        name: name.to_string(),
        why: why.to_string(),
    })?;
    if x.type_name != message {
        return Err(NameError::OtherType {
            name: name.to_string(),
            named: x.type_name.to_string(),
            message: message.to_string(),
        });
    }
    if x.is_glob() {
        return Err(NameError::Glob {
            name: name.to_string(),
        });
    }
    let canonical = x.canonical();
    if canonical != name {
        return Err(NameError::NotCanonical { canonical });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p35_names_parse_and_compare_in_canonical_form() {
        let x = Xdstp::parse("xdstp://auth.example/envoy.config.listener.v3.Listener/a/b?z=1&a=2")
            .expect("xdstp")
            .expect("well formed");
        assert_eq!(
            (x.authority, x.type_name, x.id),
            ("auth.example", "envoy.config.listener.v3.Listener", "a/b")
        );
        assert_eq!(
            x.canonical(),
            "xdstp://auth.example/envoy.config.listener.v3.Listener/a/b?a=2&z=1"
        );
        assert_eq!(
            canonical("xdstp://auth.example/envoy.config.listener.v3.Listener/a/b?z=1&a=2"),
            canonical("xdstp://auth.example/envoy.config.listener.v3.Listener/a/b?a=2&z=1")
        );
        // Opaque names, and the empty authority.
        assert_eq!(canonical("listener-1"), "listener-1");
        assert!(matches!(canonical("plain"), Cow::Borrowed(_)));
        let empty = Xdstp::parse("xdstp:///envoy.config.cluster.v3.Cluster/c")
            .expect("xdstp")
            .expect("well formed");
        assert_eq!(empty.authority, "");
        assert!(Xdstp::parse("other://x").is_none());
    }

    #[test]
    fn p34_glob_collections_are_told_apart() {
        let glob = |n| {
            Xdstp::parse(n)
                .expect("xdstp")
                .expect("well formed")
                .is_glob()
        };
        assert!(glob("xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/*"));
        assert!(glob("xdstp://a/envoy.config.endpoint.v3.LbEndpoint/*"));
        assert!(!glob("xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/h1"));
        // A member's collection keeps its context parameters: `c1/*?p=1` holds `c1/h1?p=1`,
        // not `c1/h1`.
        assert_eq!(
            collection_of("xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/h1?p=1").as_deref(),
            Some("xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/*?p=1")
        );
        assert_eq!(
            collection_of("xdstp://a/envoy.config.endpoint.v3.LbEndpoint/h1").as_deref(),
            Some("xdstp://a/envoy.config.endpoint.v3.LbEndpoint/*")
        );
        assert_eq!(
            collection_of("xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/*"),
            None
        );
        assert_eq!(collection_of("opaque"), None);
        // `is_member` says what `collection_of` says.
        let glob = "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/*?p=1";
        let parts = glob_parts(glob).expect("a glob");
        for name in [
            "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/h1?p=1",
            "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/h1",
            "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/x/h1?p=1",
            "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/h1?p=1&q=2",
            "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c2/h1?p=1",
        ] {
            assert_eq!(
                is_member(name, parts),
                collection_of(name).as_deref() == Some(glob),
                "{name}"
            );
        }
        assert!(is_member(
            "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/h1?p=1",
            parts
        ));
        assert_eq!(
            glob_parts("xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/h1"),
            None
        );
    }

    #[test]
    fn p35_bad_names_are_refused_saying_why() {
        for (name, why) in [
            ("xdstp://a", "no resource type"),
            ("xdstp://a/envoy.config.cluster.v3.Cluster", "no id"),
            ("xdstp://a//x", "type is empty"),
            (
                "xdstp://a/envoy.config.cluster.v3.Cluster/x//y",
                "empty path segment",
            ),
            (
                "xdstp://a/envoy.config.cluster.v3.Cluster/x?k",
                "not key=value",
            ),
            (
                "xdstp://a/envoy.config.cluster.v3.Cluster/x?k=1&k=2",
                "given twice",
            ),
            (
                "xdstp://a/envoy.config.cluster.v3.Cluster/x#alt=y",
                "directives",
            ),
        ] {
            let e = check_resource_name("envoy.config.cluster.v3.Cluster", name)
                .expect_err(name)
                .to_string();
            assert!(e.contains(why), "{name}: {e}");
        }
        let e = check_resource_name(
            "envoy.config.cluster.v3.Cluster",
            "xdstp://a/envoy.config.listener.v3.Listener/x",
        )
        .expect_err("another type")
        .to_string();
        assert!(
            e.contains("names type envoy.config.listener.v3.Listener"),
            "{e}"
        );
        let e = check_resource_name(
            "envoy.config.cluster.v3.Cluster",
            "xdstp://a/envoy.config.cluster.v3.Cluster/x?b=1&a=2",
        )
        .expect_err("not canonical")
        .to_string();
        assert!(
            e.contains("\"xdstp://a/envoy.config.cluster.v3.Cluster/x?a=2&b=1\""),
            "{e}"
        );
        let e = check_resource_name(
            "envoy.config.cluster.v3.Cluster",
            "xdstp://a/envoy.config.cluster.v3.Cluster/x/*",
        )
        .expect_err("a glob")
        .to_string();
        assert!(e.contains("glob"), "{e}");
        assert!(check_resource_name("envoy.config.cluster.v3.Cluster", "plain").is_ok());
        assert!(check_resource_name(
            "envoy.config.cluster.v3.Cluster",
            "xdstp://a/envoy.config.cluster.v3.Cluster/x?a=2&b=1"
        )
        .is_ok());
    }
}
