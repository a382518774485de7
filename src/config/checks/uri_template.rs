//! A route's URI templates, read as Envoy 1.40 reads them (`source/extensions/path/`:
//! `uri_template_lib`, and the matcher's and rewriter's factories): the match template of a
//! `path_match_policy`, the rewrite template of a `path_rewrite_policy`, and the two
//! together on one route.
//!
//! Envoy 1.40 reads a match template segment by segment: `*` and `**` (globs), a literal of
//! RFC 3986 path characters (with `=` and `*`), or a segment holding a variable
//! (`{name}` or `{name=match}`, where the match is globs and literals joined by `/`) with
//! literal text before and after it in its segment (`/a/v{x}.txt/b`, the runtime flag
//! `uri_template_mixed_variable_literals`, on by default). A glob may end in a suffix
//! literal, but only in the last segment. At most five variables, each named once and in at
//! most 16 characters; nothing that globs after a `**`. A rewrite template is literal text
//! (with `/`, never `//`) and `{name}`s, each a variable of the route's match template.
//!
//! The parser's order decides which fault is named first, and is Envoy's: a segment's
//! brackets, then the text before the variable, the text after it, then the variable. On a
//! route, the match template, then the rewrite template, come before any other check of it
//! ([`templates`]); the rewrite's need of a template match and of its variables comes after
//! the route's rewrites are counted ([`compatible`], called so by `routing`).
//!
//! Owns: those verdicts, in Envoy's words. Must not: judge a runtime that turns Envoy's
//! flags for these templates off (what Envoy then refuses more is left to it).

use prost_reflect::{DynamicMessage, ReflectMessage};

use super::builds::payload;
use super::refusal::{beyond, refuse, Refusal};
use crate::config::fields::{message as field, string};

const MATCHER: &str = "envoy.path.match.uri_template.uri_template_matcher";
const REWRITER: &str = "envoy.path.rewrite.uri_template.uri_template_rewriter";
const MATCH_CONFIG: &str = "envoy.extensions.path.match.uri_template.v3.UriTemplateMatchConfig";
const REWRITE_CONFIG: &str =
    "envoy.extensions.path.rewrite.uri_template.v3.UriTemplateRewriteConfig";

/// Envoy's limits on a match template's variables.
const MAX_VARIABLES: usize = 5;
const MAX_NAME_LEN: usize = 16;

/// A route's path matcher and path rewriter extensions, when they are the URI template
/// ones: their configs.
fn extensions(route: &DynamicMessage) -> (Option<DynamicMessage>, Option<DynamicMessage>) {
    let config = |policy: Option<DynamicMessage>, name: &str| {
        policy
            .and_then(|policy| field(&policy, "typed_config"))
            .and_then(|any| payload(&any))
            .filter(|config| config.descriptor().full_name() == name)
    };
    (
        config(
            field(route, "match").and_then(|m| field(&m, "path_match_policy")),
            MATCH_CONFIG,
        ),
        config(
            field(route, "route").and_then(|a| field(&a, "path_rewrite_policy")),
            REWRITE_CONFIG,
        ),
    )
}

const MATCH_AT: [&str; 4] = [
    "match",
    "path_match_policy",
    "typed_config",
    "path_template",
];
const REWRITE_AT: [&str; 4] = [
    "route",
    "path_rewrite_policy",
    "typed_config",
    "path_template_rewrite",
];

/// A route's templates, each alone, as `RouteEntryImplBase` makes its extensions (before
/// any other check of the route): the match template, then the rewrite template.
pub(super) fn templates(route: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let (matcher, rewriter) = extensions(route);
    if let Some(config) = matcher {
        let template = string(&config, "path_template");
        if let Err(reason) = match_template(&template) {
            return refuse(
                &beyond(at, &MATCH_AT),
                format!("path_match_policy.path_template {template} is invalid: {reason}"),
            );
        }
    }
    if let Some(config) = rewriter {
        let template = string(&config, "path_template_rewrite");
        if rewrite_template(&template).is_none() {
            return refuse(
                &beyond(at, &REWRITE_AT),
                format!("path_rewrite_policy.path_template_rewrite {template} is invalid"),
            );
        }
    }
    Ok(())
}

/// The rewriter's need of the matcher, checked by Envoy after the route's rewrites are
/// counted: a template match, whose variables are the ones the rewrite uses. Both templates
/// are valid here ([`templates`] passed).
pub(super) fn compatible(route: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let (matcher, Some(rewriter)) = extensions(route) else {
        return Ok(());
    };
    let rewrite = string(&rewriter, "path_template_rewrite");
    let here = beyond(at, &REWRITE_AT);
    let Some(matcher) = matcher else {
        return refuse(
            &here,
            format!("unable to use {REWRITER} extension without {MATCHER} extension"),
        );
    };
    let matched = string(&matcher, "path_template");
    let (Ok(captured), Some(used)) = (match_template(&matched), rewrite_template(&rewrite)) else {
        return Ok(());
    };
    if used.iter().any(|name| !captured.contains(name)) {
        return refuse(
            &here,
            format!(
                "mismatch between variables in path_match_policy {matched} and path_rewrite_policy {rewrite}"
            ),
        );
    }
    Ok(())
}

/// RFC 3986's path characters as Envoy takes them in a literal (sub-delims with `=` and
/// `*`; `%` alone, never checked for its two digits).
fn literal_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"-._~%!$&'()+,;:@=*".contains(&c)
}

fn valid_literal(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(literal_char)
}

fn valid_variable_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A glob: `*` (one segment) or `**` (any number).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Glob {
    One,
    Any,
}

/// What a variable matches, when it says (`{name=...}`): its globs, in order.
struct Variable<'a> {
    name: &'a str,
    /// `None` for `{name}`, which matches as `*` does.
    globs: Option<Vec<Glob>>,
}

enum Segment<'a> {
    Literal,
    Glob(Glob),
    Variable(Variable<'a>),
}

/// The literal at the start of `rest`, up to its next `/`, and what follows it.
fn literal(rest: &str) -> Result<(&str, &str), String> {
    let end = rest.find('/').unwrap_or(rest.len());
    let (text, after) = rest.split_at(end);
    if !valid_literal(text) {
        return Err(format!("Invalid literal: \"{text}\""));
    }
    Ok((text, after))
}

/// The glob at the start of `rest` (which starts with `*`), and what follows it.
fn glob(rest: &str) -> (Glob, &str) {
    match rest.strip_prefix("**") {
        Some(after) => (Glob::Any, after),
        None => (Glob::One, &rest[1..]),
    }
}

/// A variable, `{` to its first `}`, both included.
fn variable(text: &str) -> Result<Variable<'_>, String> {
    let inner = &text[1..text.len() - 1];
    let (name, pattern) = match inner.split_once('=') {
        Some((name, pattern)) => (name, Some(pattern)),
        None => (inner, None),
    };
    if !valid_variable_name(name) {
        return Err(format!("Invalid variable name: \"{name}\""));
    }
    let Some(mut pattern) = pattern else {
        return Ok(Variable { name, globs: None });
    };
    if pattern.is_empty() {
        return Err("Empty variable match".into());
    }
    let mut globs = Vec::new();
    while !pattern.is_empty() {
        if pattern.starts_with('*') {
            let (g, after) = glob(pattern);
            globs.push(g);
            pattern = after;
        } else {
            pattern = literal(pattern)?.1;
        }
        if !pattern.is_empty() {
            if !pattern.starts_with('/') || pattern.len() == 1 {
                return Err(format!("Invalid variable match: \"{pattern}\""));
            }
            pattern = &pattern[1..];
        }
    }
    Ok(Variable {
        name,
        globs: Some(globs),
    })
}

/// A segment holding a variable, with literal text before and after it in the segment;
/// `rest` is all of the template from the segment on (a variable's match may hold `/`).
fn mixed(rest: &str) -> Result<(Variable<'_>, &str), String> {
    let unmatched = || format!("Unmatched variable bracket in mixed pattern: \"{rest}\"");
    let open = rest.find('{').ok_or_else(unmatched)?;
    let close = open + rest[open..].find('}').ok_or_else(unmatched)?;
    let before = &rest[..open];
    if !before.is_empty() && !valid_literal(before) {
        return Err(format!("Invalid prefix literal: \"{before}\""));
    }
    let after = &rest[close + 1..];
    let end = after.find('/').unwrap_or(after.len());
    let suffix = &after[..end];
    if !suffix.is_empty() && !valid_literal(suffix) {
        return Err(format!("Invalid suffix literal: \"{suffix}\""));
    }
    Ok((variable(&rest[open..=close])?, &after[end..]))
}

/// Envoy's verdict on a match template: the names of its variables, or why it is invalid
/// (the reason Envoy gives after "is invalid: ").
pub fn match_template(template: &str) -> Result<Vec<String>, String> {
    if !template.starts_with('/') || !template.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!("Invalid pattern: \"{template}\""));
    }
    let mut rest = &template[1..];
    let mut segments = Vec::new();
    while !rest.is_empty() {
        let segment_end = rest.find('/').unwrap_or(rest.len());
        let segment = &rest[..segment_end];
        if rest.starts_with('*') {
            let (g, after) = glob(rest);
            segments.push(Segment::Glob(g));
            rest = after;
        } else if rest.starts_with('{') || (segment.contains('{') && segment.contains('}')) {
            let (v, after) = mixed(rest)?;
            segments.push(Segment::Variable(v));
            rest = after;
        } else {
            rest = literal(rest)?.1;
            segments.push(Segment::Literal);
        }
        if rest.is_empty() {
            break;
        }
        if rest == "/" {
            segments.push(Segment::Literal);
            break;
        }
        if let Some(after) = rest.strip_prefix('/') {
            rest = after;
            continue;
        }
        // What follows a glob in its segment: a suffix, only at the end.
        let (_, after) = literal(rest)?;
        if !after.is_empty() {
            return Err("Prefix match not supported.".into());
        }
        break;
    }
    let mut names: Vec<String> = Vec::new();
    for segment in &segments {
        let Segment::Variable(v) = segment else {
            continue;
        };
        if names.len() >= MAX_VARIABLES {
            return Err(format!("Exceeded variable count limit ({MAX_VARIABLES})"));
        }
        if v.name.len() > MAX_NAME_LEN {
            return Err(format!(
                "Invalid variable name length (length of \"{}\" should be at least 1 and no more than {MAX_NAME_LEN})",
                v.name
            ));
        }
        if names.iter().any(|n| n == v.name) {
            return Err(format!("Repeated variable name: \"{}\"", v.name));
        }
        names.push(v.name.to_string());
    }
    let mut seen_any = false;
    for segment in &segments {
        let globs = match segment {
            Segment::Literal => continue,
            Segment::Glob(g) => std::slice::from_ref(g),
            Segment::Variable(Variable { globs: None, .. }) => {
                if seen_any {
                    return Err("Implicit variable path glob after text glob.".into());
                }
                continue;
            }
            Segment::Variable(Variable {
                globs: Some(globs), ..
            }) => globs.as_slice(),
        };
        for g in globs {
            if seen_any {
                return Err("Glob after text glob.".into());
            }
            seen_any = *g == Glob::Any;
        }
    }
    Ok(names)
}

/// The variables a rewrite template uses, or `None` when Envoy finds it invalid (it gives
/// no reason).
pub fn rewrite_template(template: &str) -> Option<Vec<String>> {
    if !template.starts_with('/') || template.contains("//") {
        return None;
    }
    let valid = |text: &str| text.bytes().all(|b| b == b'/' || literal_char(b));
    let mut used = Vec::new();
    let mut rest = template;
    while !rest.is_empty() {
        let Some((text, after)) = rest.split_once('{') else {
            return valid(rest).then_some(used);
        };
        if !valid(text) {
            return None;
        }
        let (name, after) = after.split_once('}')?;
        if !valid_variable_name(name) {
            return None;
        }
        used.push(name.to_string());
        rest = after;
    }
    Some(used)
}

#[cfg(test)]
mod tests {
    use super::{match_template, rewrite_template};

    fn reason(template: &str) -> String {
        match_template(template).expect_err(template)
    }

    #[test]
    fn match_templates_taken_as_envoy_takes_them() {
        for template in [
            "/",
            "/a/{x}",
            "/a/{x}/",
            "/a/{x}.txt/b",
            "/a/p{x}s",
            "/a/{x=*}.t/{y}",
            "/a/p{x=**}.t/c",
            "/a/{x=a/*}.txt",
            "/a/{x=*/**}",
            "/a/**.txt",
            "/a/*b",
            "/a/b*c",
            "/a/b=c",
            "/a/{x}**",
        ] {
            assert!(match_template(template).is_ok(), "{template}");
        }
        assert_eq!(
            match_template("/a/{x}/p{y}s"),
            Ok(vec!["x".into(), "y".into()])
        );
    }

    #[test]
    fn match_template_faults_in_envoys_words_and_order() {
        let cases = [
            ("a/b", "Invalid pattern: \"a/b\""),
            ("/a/b c", "Invalid pattern: \"/a/b c\""),
            ("/a//b", "Invalid literal: \"\""),
            ("/a/b?c", "Invalid literal: \"b?c\""),
            ("/a/p{x", "Invalid literal: \"p{x\""),
            ("/a/p{x/b}", "Invalid literal: \"p{x\""),
            ("/a/p}x", "Invalid literal: \"p}x\""),
            ("/a/{x", "Unmatched variable bracket in mixed pattern: \"{x\""),
            (
                "/a/{x/b",
                "Unmatched variable bracket in mixed pattern: \"{x/b\"",
            ),
            (
                "/a/p}{x",
                "Unmatched variable bracket in mixed pattern: \"p}{x\"",
            ),
            ("/a/p^{1}", "Invalid prefix literal: \"p^\""),
            ("/a/p{1}s^", "Invalid suffix literal: \"s^\""),
            ("/a/{x}{y}", "Invalid suffix literal: \"{y}\""),
            ("/a/{{x}}", "Invalid suffix literal: \"}\""),
            ("/a/p{q{x}", "Invalid variable name: \"q{x\""),
            ("/a/{}", "Invalid variable name: \"\""),
            ("/a/{x=}", "Empty variable match"),
            ("/a/{x=***}", "Invalid variable match: \"*\""),
            ("/a/{x=a/}", "Invalid variable match: \"/\""),
            ("/a/*{x}", "Invalid literal: \"{x}\""),
            ("/a/*.txt/b", "Prefix match not supported."),
            ("/a/{x}/{x}", "Repeated variable name: \"x\""),
            (
                "/{a}/{b}/{c}/{d}/{e}/{f}",
                "Exceeded variable count limit (5)",
            ),
            (
                "/a/p{abcdefghijklmnopq}s",
                "Invalid variable name length (length of \"abcdefghijklmnopq\" should be at least 1 and no more than 16)",
            ),
            (
                "/a/**/{x}.t",
                "Implicit variable path glob after text glob.",
            ),
            ("/a/{x=**}.t/*", "Glob after text glob."),
            ("/a/{x=**/*}", "Glob after text glob."),
        ];
        for (template, words) in cases {
            assert_eq!(reason(template), words, "{template}");
        }
    }

    #[test]
    fn rewrite_templates() {
        assert_eq!(
            rewrite_template("/{x}.txt/{y}{x}"),
            Some(vec!["x".into(), "y".into(), "x".into()])
        );
        assert_eq!(rewrite_template("/"), Some(vec![]));
        assert_eq!(rewrite_template("/a*"), Some(vec![]));
        for bad in [
            "a", "", "/a//b", "/{x", "/{1}", "/a^", "/{}", "/a}", "/{x=*}",
        ] {
            assert_eq!(rewrite_template(bad), None, "{bad}");
        }
    }
}
