//! Output for machines (`--output`): the findings of a load (and Envoy's verdicts) as JSON of
//! a versioned schema (docs/output.md) or as GitHub Actions annotations, and a diff as JSON,
//! annotations or a Markdown summary for a pull request.
//!
//! Must not: decide what is wrong (the loader and Envoy have), or print diagnostics (the
//! commands print; results to stdout, diagnostics to stderr).

use clap::ValueEnum;
use serde::Serialize;

use crate::config::ConfigError;
use crate::diff::Report;

/// The version of every JSON document the CLI prints; a change that is not an addition
/// bumps it (docs/output.md).
pub const SCHEMA_VERSION: u32 = 1;

/// How `validate` prints its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// For people: diagnostics on stderr, the verdict on stdout.
    Text,
    /// One JSON document on stdout (docs/output.md).
    Json,
    /// GitHub Actions annotations (`::error file=...,line=...::`) on stdout.
    Github,
}

/// How `import` and `rollout status` print their result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TextOrJson {
    /// For people.
    Text,
    /// One JSON document on stdout (docs/output.md).
    Json,
}

/// `import`'s result, as JSON.
#[derive(Debug, Serialize)]
pub struct ImportOutput {
    /// `switchyard.import/v1`.
    pub schema: String,
    pub ok: bool,
    /// The files written (none when it failed).
    pub written: Vec<String>,
    /// What `import` has to say about what it did (kept static, moved, ...).
    pub notes: Vec<String>,
    /// Why it failed, when it did: the imported files' load errors, or the error.
    pub errors: Vec<String>,
    /// The commands to run next.
    pub next: Option<String>,
}

impl ImportOutput {
    pub fn new() -> ImportOutput {
        ImportOutput {
            schema: format!("switchyard.import/v{SCHEMA_VERSION}"),
            ok: false,
            written: Vec::new(),
            notes: Vec::new(),
            errors: Vec::new(),
            next: None,
        }
    }
}

/// `rollout status`'s result, as JSON.
#[derive(Debug, Serialize)]
pub struct RolloutOutput<'a> {
    /// `switchyard.rollout/v1`.
    pub schema: String,
    /// The generation every node but the canaries gets.
    pub generation: u64,
    /// The rollout in progress, if any (as `/status` has it).
    pub rollout: Option<&'a crate::admin::RolloutStatus>,
    /// Each node and its generation.
    pub nodes: Vec<(String, u64)>,
    /// `--source` with canaries: the fleet's rollout in etcd (as `/status` has it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<&'a crate::admin::FleetStatus>,
}

impl<'a> RolloutOutput<'a> {
    pub fn of(status: &'a crate::admin::Status) -> RolloutOutput<'a> {
        RolloutOutput {
            schema: format!("switchyard.rollout/v{SCHEMA_VERSION}"),
            generation: status.generation,
            rollout: status.rollout.as_ref(),
            nodes: status
                .nodes
                .iter()
                .map(|n| (n.node_id.clone(), n.generation))
                .collect(),
            fleet: status.fleet.as_ref(),
        }
    }
}

/// How `diff` prints its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DiffFormat {
    /// For people.
    Text,
    /// One JSON document on stdout (docs/output.md).
    Json,
    /// GitHub Actions annotations, one per changed resource.
    Github,
    /// A Markdown summary, fit for a pull request's comment.
    Markdown,
}

/// One thing a check found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// `error` or `warning`.
    pub severity: &'static str,
    /// The snapshot file, when the finding is in one.
    pub file: Option<String>,
    /// Line and column in it, from 1, when known.
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// The node group, for Envoy's verdicts on one.
    pub node_group: Option<String>,
    /// The resource (`clusters[1] "web"`), when there is one.
    pub resource: Option<String>,
    /// The field path as the file spells it (`.` for the resource itself).
    pub field: Option<String>,
    /// What is wrong, in Switchyard's words.
    pub message: String,
    /// Envoy's own words for it, when Envoy would refuse it (or did).
    pub envoy: Option<String>,
    /// The whole finding as `--output text` prints it.
    pub text: String,
}

/// What Switchyard prefixes Envoy's words with in its messages.
const ENVOY_SAYS: &str = "Envoy would reject it with: ";

impl Finding {
    /// An error in nothing's words but its own (no file, resource or field).
    pub fn error(message: String) -> Finding {
        Finding {
            severity: "error",
            file: None,
            line: None,
            column: None,
            node_group: None,
            resource: None,
            field: None,
            text: message.clone(),
            message,
            envoy: None,
        }
    }

    /// A load error (`error`) or warning (`warning`).
    pub fn of(e: &ConfigError, severity: &'static str) -> Finding {
        let mut f = Finding {
            severity,
            ..Finding::error(e.to_string())
        };
        match e {
            ConfigError::Resource {
                path,
                resource,
                field,
                message,
                at,
            } => {
                f.file = Some(path.display().to_string());
                f.line = at.map(|a| a.0);
                f.column = at.map(|a| a.1);
                f.resource = Some(resource.clone());
                f.field = Some(field.clone());
                f.message = message.clone();
            }
            ConfigError::Read { path, message } | ConfigError::Syntax { path, message } => {
                f.file = Some(path.display().to_string());
                f.message = message.clone();
            }
            ConfigError::Structure { path, at, message } => {
                f.file = Some(path.display().to_string());
                f.field = Some(at.clone());
                f.message = message.clone();
            }
            ConfigError::DuplicateKey {
                path, second_line, ..
            } => {
                f.file = Some(path.display().to_string());
                f.line = Some(*second_line);
            }
            ConfigError::Duplicate { second, .. } => {
                f.file = Some(second.display().to_string());
            }
            ConfigError::Reference {
                path,
                kind,
                name,
                message,
                at,
            } => {
                f.file = Some(path.display().to_string());
                f.line = at.map(|a| a.0);
                f.column = at.map(|a| a.1);
                f.resource = Some(format!("{kind} {name:?}"));
                f.message = message.clone();
            }
            ConfigError::Preflight { group, message } => {
                f.node_group = Some(group.clone());
                f.envoy = Some(message.clone());
                f.message = "Envoy rejects the node group".into();
            }
            ConfigError::WouldEmpty { .. } => {}
        }
        if let Some((_, words)) = f.message.split_once(ENVOY_SAYS) {
            f.envoy = Some(words.to_string());
        }
        f
    }

    /// Envoy's verdict on a node group (`validate --envoy`) that it rejects.
    pub fn rejected_group(group: &str, envoy: &str) -> Finding {
        Finding::of(
            &ConfigError::Preflight {
                group: group.to_string(),
                message: envoy.to_string(),
            },
            "error",
        )
    }

    /// The finding as a GitHub Actions workflow command (an annotation on the file and line
    /// where there are some).
    pub fn annotation(&self) -> String {
        let mut properties = Vec::new();
        if let Some(file) = &self.file {
            properties.push(format!("file={}", property(file)));
        }
        if let Some(line) = self.line {
            properties.push(format!("line={line}"));
        }
        if let Some(column) = self.column {
            properties.push(format!("col={column}"));
        }
        let title = match (&self.resource, &self.node_group) {
            (Some(resource), _) => format!("switchyard: {resource}"),
            (None, Some(group)) => format!("switchyard: {group}"),
            (None, None) => "switchyard".to_string(),
        };
        properties.push(format!("title={}", property(&title)));
        let body = match &self.field {
            Some(field) if field != "." => format!("{field}: {}", self.message),
            _ => self.message.clone(),
        };
        let body = match (&self.envoy, self.node_group.is_some()) {
            (Some(envoy), true) => format!("{body}: {envoy}"),
            _ => body,
        };
        format!(
            "::{} {}::{}",
            self.severity,
            properties.join(","),
            data(&body)
        )
    }
}

/// A workflow command's data, escaped as GitHub reads it.
fn data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A workflow command's property value, escaped as GitHub reads it.
fn property(text: &str) -> String {
    data(text).replace(':', "%3A").replace(',', "%2C")
}

/// `validate`'s result, as JSON.
#[derive(Debug, Serialize)]
pub struct Validation {
    /// `switchyard.validate/v1`.
    pub schema: String,
    /// Whether the files load and Envoy (when asked) accepts every node group.
    pub ok: bool,
    pub files: usize,
    pub resources: usize,
    pub findings: Vec<Finding>,
    /// The node groups Envoy accepted (`--envoy`).
    pub envoy_accepted: Vec<String>,
}

impl Validation {
    pub fn new(files: usize, resources: usize) -> Validation {
        Validation {
            schema: format!("switchyard.validate/v{SCHEMA_VERSION}"),
            ok: true,
            files,
            resources,
            findings: Vec::new(),
            envoy_accepted: Vec::new(),
        }
    }
}

/// `diff`'s result, as JSON.
#[derive(Debug, Serialize)]
pub struct DiffDocument<'a> {
    /// `switchyard.diff/v1`.
    pub schema: String,
    /// Whether anything changes for any node.
    pub changes: bool,
    pub groups: &'a [crate::diff::GroupDiff],
}

/// The JSON of a diff.
pub fn diff_json(report: &Report) -> String {
    let document = DiffDocument {
        schema: format!("switchyard.diff/v{SCHEMA_VERSION}"),
        changes: !report.is_empty(),
        groups: &report.groups,
    };
    serde_json::to_string_pretty(&document).unwrap_or_default()
}

/// A diff as GitHub Actions notices: one per resource added, removed or changed.
pub fn diff_annotations(report: &Report) -> String {
    let mut out = String::new();
    for g in &report.groups {
        for t in &g.types {
            let notice = |what: &str, name: &str| {
                format!(
                    "::notice title={}::{}\n",
                    property(&format!("switchyard diff: {} {what}", t.kind)),
                    data(&format!("{name} ({})", g.group))
                )
            };
            for name in &t.added {
                out.push_str(&notice("added", name));
            }
            for name in &t.removed {
                out.push_str(&notice("removed", name));
            }
            for (name, changes) in &t.changed {
                let fields: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
                out.push_str(&notice(
                    "changed",
                    &format!("{name}: {}", fields.join(", ")),
                ));
            }
        }
    }
    out
}

/// A diff as Markdown: per node group a table of what changes per type, then each changed
/// resource's fields.
pub fn diff_markdown(report: &Report) -> String {
    use std::fmt::Write as _;
    if report.is_empty() {
        return "**switchyard diff**: no changes for any node.\n".to_string();
    }
    let cell = |text: &str| text.replace('|', "\\|").replace('\n', " ");
    let mut out = String::from("**switchyard diff**\n");
    for g in &report.groups {
        let _ = write!(
            out,
            "\n#### {}\n\n| type | added | removed | changed |\n|---|---|---|---|\n",
            cell(&match g.also.len() {
                0 => g.group.clone(),
                n => format!(
                    "{} and {n} more node group(s), the same change: {}",
                    g.group,
                    g.also.join(", ")
                ),
            })
        );
        for t in &g.types {
            let list = |names: &[String]| {
                names
                    .iter()
                    .map(|n| format!("`{}`", cell(n)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let changed: Vec<String> = t.changed.iter().map(|(n, _)| n.clone()).collect();
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                t.kind,
                list(&t.added),
                list(&t.removed),
                list(&changed)
            );
        }
        for t in &g.types {
            for (name, changes) in &t.changed {
                let _ = writeln!(
                    out,
                    "\n<details><summary>{} `{}`</summary>\n",
                    t.kind,
                    cell(name)
                );
                for c in changes {
                    let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "(absent)".into());
                    let _ = writeln!(
                        out,
                        "- `{}`: `{}` → `{}`",
                        cell(&c.path),
                        cell(&show(&c.old)),
                        cell(&show(&c.new))
                    );
                }
                out.push_str("\n</details>\n");
            }
        }
    }
    out
}
