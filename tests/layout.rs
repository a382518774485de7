//! The file tree is the architecture (docs/architecture.md): no module of the library imports
//! one that imports it back, directly or around a circle, neither between files
//! (`config::loader` and `config::parse`) nor between the top-level modules (`cache` and
//! `protocol`). Read from the sources: every `crate::` and `super::` path outside comments
//! and unit tests, `use` groups included.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every module file of the library (the binary and unit-test files aside), by module path
/// (`config::loader`; the crate root is ""), with its text before its unit tests.
fn modules() -> BTreeMap<String, String> {
    modules_under(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// [`modules`] of the crate whose sources are `src` (code generated from `.proto` files,
/// under `generated/`, aside).
fn modules_under(src: &Path) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    for entry in walkdir::WalkDir::new(src) {
        let entry = entry.expect("src/ is readable");
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let relative = path
            .strip_prefix(src)
            .expect("under src/")
            .with_extension("");
        let mut parts: Vec<String> = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        // Unit tests: a module's `tests.rs`, and the files of its `tests/` folder.
        if parts
            .first()
            .is_some_and(|p| p == "bin" || p == "generated")
            || parts.iter().any(|p| p == "tests")
        {
            continue;
        }
        if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
            parts.pop();
        }
        let text = std::fs::read_to_string(path).expect("readable");
        let text = match text.find("#[cfg(test)]\nmod tests {") {
            Some(at) => text[..at].to_string(),
            None => text,
        };
        found.insert(parts.join("::"), text);
    }
    found
}

/// The paths a path tree at `at` names: `a::b`, `a::{b, c::d}`, `a::{self, b}`, `a::*`.
fn paths_at(text: &[u8], at: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let skip_space = |at: &mut usize| {
        while *at < text.len() && text[*at].is_ascii_whitespace() {
            *at += 1;
        }
    };
    skip_space(at);
    match text.get(*at) {
        Some(b'{') => {
            *at += 1;
            loop {
                skip_space(at);
                match text.get(*at) {
                    None => return,
                    Some(b'}') => {
                        *at += 1;
                        return;
                    }
                    Some(b',') => *at += 1,
                    Some(_) => {
                        let before = *at;
                        paths_at(text, at, prefix.clone(), out);
                        if *at == before {
                            *at += 1;
                        }
                    }
                }
            }
        }
        Some(b'*') => {
            *at += 1;
            out.push(prefix);
        }
        _ => {
            let start = *at;
            while *at < text.len() && (text[*at].is_ascii_alphanumeric() || text[*at] == b'_') {
                *at += 1;
            }
            let ident = String::from_utf8_lossy(&text[start..*at]).into_owned();
            if ident.is_empty() || ident == "self" {
                out.push(prefix);
                return;
            }
            let mut path = prefix;
            path.push(ident);
            if text[*at..].starts_with(b"::") {
                *at += 2;
                paths_at(text, at, path, out);
            } else {
                out.push(path);
            }
        }
    }
}

/// Every path `code` (module `module`'s) names through `crate::` or `super::` outside
/// comment lines, absolute.
fn named_paths(module: &str, code: &str) -> Vec<Vec<String>> {
    let code: String = code
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| format!("{l}\n"))
        .collect();
    let text = code.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    while at < text.len() {
        let boundary = at == 0 || !(text[at - 1].is_ascii_alphanumeric() || text[at - 1] == b'_');
        let rest = &text[at..];
        if boundary && rest.starts_with(b"crate::") {
            at += "crate::".len();
            paths_at(text, &mut at, Vec::new(), &mut out);
        } else if boundary && rest.starts_with(b"super::") {
            let mut base: Vec<String> = module.split("::").map(String::from).collect();
            while text[at..].starts_with(b"super::") {
                base.pop();
                at += "super::".len();
            }
            paths_at(text, &mut at, base, &mut out);
        } else {
            at += 1;
        }
    }
    out
}

/// Module -> the modules it names (the longest module path a named path starts with), other
/// than itself and its ancestors (a module's children use what it holds for them).
fn graph(modules: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, code) in modules {
        let targets = edges.entry(module.clone()).or_default();
        for path in named_paths(module, code) {
            let target = (1..=path.len())
                .rev()
                .map(|n| path[..n].join("::"))
                .find(|m| modules.contains_key(m));
            let Some(target) = target else { continue };
            let ancestor = module == &target || module.starts_with(&format!("{target}::"));
            if !ancestor {
                targets.insert(target);
            }
        }
    }
    edges
}

/// The same graph between top-level modules (`config::loader` is `config`).
fn top_level(edges: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let top = |m: &str| m.split("::").next().unwrap_or_default().to_string();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, targets) in edges.iter().filter(|(m, _)| !m.is_empty()) {
        let entry = out.entry(top(from)).or_default();
        entry.extend(targets.iter().map(|t| top(t)).filter(|t| *t != top(from)));
    }
    out
}

/// A circle in `edges`, as the modules around it (the first repeated at the end), if any.
fn circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, edges, done, path) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut done, &mut Vec::new()))
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let modules = modules();
    let edges = graph(&modules);
    // The reading sees the imports (so that no circle is not no reading): a use group, a
    // path in code and a `super::` path.
    let has = |from: &str, to: &str| edges.get(from).is_some_and(|t| t.contains(to));
    assert!(has("server::stream", "protocol"), "{edges:#?}");
    assert!(has("config::loader", "config::parse"), "{edges:#?}");
    assert!(has("cli::serve", "daemon"), "{edges:#?}");
    assert!(edges.values().map(BTreeSet::len).sum::<usize>() > 150);
    if let Some(found) = circle(&edges) {
        panic!("modules that import each other: {}", found.join(" -> "));
    }
    if let Some(found) = circle(&top_level(&edges)) {
        panic!(
            "top-level modules that import each other: {}",
            found.join(" -> ")
        );
    }
}

/// The same of the workspace's etcd client (`etcd/`): its requests and its responses, the
/// client over both, and none of them importing one that imports it back.
#[test]
fn no_module_of_the_etcd_client_imports_one_that_imports_it_back() {
    let modules = modules_under(&Path::new(env!("CARGO_MANIFEST_DIR")).join("etcd/src"));
    let edges = graph(&modules);
    let has = |from: &str, to: &str| edges.get(from).is_some_and(|t| t.contains(to));
    assert!(
        has("client", "request") && has("client", "response"),
        "{edges:#?}"
    );
    if let Some(found) = circle(&edges) {
        panic!(
            "modules of the etcd client that import each other: {}",
            found.join(" -> ")
        );
    }
}

#[test]
fn the_reading_finds_circles_and_paths_of_every_form() {
    let modules: BTreeMap<String, String> = [
        ("a", "use crate::b::{self, c::{D, E as F}};\n"),
        ("b", "fn f() { super::d::g() }\n"),
        ("b::c", "use super::super::a::*;\n"),
        ("d", "// crate::a in a comment is no import\n"),
    ]
    .into_iter()
    .map(|(m, c)| (m.to_string(), c.to_string()))
    .collect();
    let edges = graph(&modules);
    let of = |m: &str| edges[m].iter().cloned().collect::<Vec<_>>();
    assert_eq!(of("a"), ["b", "b::c"]);
    assert_eq!(of("b"), ["d"]);
    assert_eq!(of("b::c"), ["a"]);
    assert!(of("d").is_empty());
    assert_eq!(
        circle(&edges).expect("a circle").join(" -> "),
        "a -> b::c -> a"
    );
    assert_eq!(
        circle(&top_level(&edges)).expect("a circle").join(" -> "),
        "a -> b -> a"
    );
}
