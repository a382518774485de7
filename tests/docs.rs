//! The documents stay true to the repository: `docs/protocol.md` states
//! every rule P1..P36 and names only tests that exist, nothing in README.md or `docs/`
//! links outside the repository, and no line anywhere names a tracker's issue (a reader of
//! the repository has no tracker: code and docs cite protocol rules and docs sections).

use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under `dir` (recursively) whose name ends with `ext`.
fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.to_string_lossy().ends_with(ext) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The names of every function in the crate's sources and tests.
fn functions() -> Vec<String> {
    let mut names = Vec::new();
    for dir in ["src", "tests", "benches", "loadgen/src"] {
        for path in files(&root().join(dir), ".rs") {
            let text = std::fs::read_to_string(&path).expect("read");
            for line in text.lines() {
                let line = line.trim_start();
                let rest = [
                    "fn ",
                    "pub fn ",
                    "async fn ",
                    "pub async fn ",
                    "pub(crate) fn ",
                ]
                .iter()
                .find_map(|p| line.strip_prefix(p));
                if let Some(rest) = rest {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    names.push(name);
                }
            }
        }
    }
    names
}

/// Backticked words of `text` that name tests by rule: `p9_...`, `e2e_p32_...`, with an
/// optional trailing `*` (a prefix).
fn rule_test_names(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| {
            let w = w.strip_prefix("e2e_").unwrap_or(w);
            w.starts_with('p')
                && w[1..].starts_with(|c: char| c.is_ascii_digit())
                && w.contains('_')
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '*')
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn the_protocol_document_states_every_rule_and_names_tests_that_exist() {
    let text = std::fs::read_to_string(root().join("docs/protocol.md")).expect("docs/protocol.md");
    for n in 1..=36 {
        assert!(
            text.contains(&format!("\n## P{n}. ")),
            "docs/protocol.md has no section for P{n}"
        );
    }
    let functions = functions();
    let named = rule_test_names(&text);
    assert!(named.len() > 60, "too few tests named: {named:?}");
    let missing: Vec<&String> = named
        .iter()
        .filter(|name| match name.strip_suffix('*') {
            Some(prefix) => !functions.iter().any(|f| f.starts_with(prefix)),
            None => !functions.iter().any(|f| f == *name),
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/protocol.md names tests that do not exist: {missing:?}"
    );
}

#[test]
fn nothing_in_the_readme_or_docs_links_outside_the_repository() {
    let mut documents = vec![root().join("README.md")];
    documents.extend(files(&root().join("docs"), ".md"));
    let mut outside = Vec::new();
    for doc in &documents {
        let text = std::fs::read_to_string(doc).expect("read");
        for (at, _) in text.match_indices("](") {
            let target: String = text[at + 2..].chars().take_while(|c| *c != ')').collect();
            let target = target.split('#').next().unwrap_or_default();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let resolved = doc.parent().expect("a directory").join(target);
            let inside = resolved
                .canonicalize()
                .is_ok_and(|p| p.starts_with(root().canonicalize().expect("root")));
            if !inside {
                outside.push(format!("{}: {target}", doc.display()));
            }
        }
        if text.contains("../shared") {
            outside.push(format!("{}: names ../shared", doc.display()));
        }
    }
    assert!(
        outside.is_empty(),
        "links outside the repository (or to nothing): {outside:#?}"
    );
}

/// No source, test, bench or document names a tracker's issue by its number (the word, in
/// either number, then a number, with or without `#`).
#[test]
fn no_line_names_an_issue_number() {
    let word = regex::Regex::new(r"(?i)\bissues?\s+#?[0-9]+").expect("regex");
    let mut found = Vec::new();
    let mut paths = vec![root().join("README.md")];
    for (dir, ext) in [
        ("src", ".rs"),
        ("tests", ".rs"),
        ("tests", ".py"),
        ("benches", ".rs"),
        ("benches", ".py"),
        ("benches", ".sh"),
        ("docs", ".md"),
        ("loadgen", ".rs"),
        ("re2", ".rs"),
        ("re2", ".md"),
        ("scripts", ""),
        ("deploy", ""),
        ("examples", ""),
    ] {
        paths.extend(files(&root().join(dir), ext));
    }
    for path in paths {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            if word.is_match(line) {
                found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "lines naming an issue number: {found:#?}");
}

/// docs/protocol.md's table of what Envoy does with each type, and the sources behind it,
/// are the code's (`switchyard::resource::envoy`): the one the protocol's whole-set rule is
/// tested against, and the conformance matrix's cells are made from.
#[test]
fn the_per_type_table_in_the_protocol_document_is_the_code_s() {
    let doc = std::fs::read_to_string(root().join("docs/protocol.md")).expect("protocol.md");
    let table = switchyard::resource::envoy::table();
    let sources = switchyard::resource::envoy::sources();
    assert!(
        doc.contains(&table),
        "docs/protocol.md's table differs from resource::envoy; it should read:\n{table}"
    );
    assert!(
        doc.contains(&sources),
        "docs/protocol.md's sources differ from resource::envoy; they should read:\n{sources}"
    );
}
