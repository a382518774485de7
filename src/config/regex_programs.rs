//! RE2 program sizes judged per node group: Envoy refuses a regex whose program is larger
//! than `re2.max_program_size.error_level` in the node's runtime (100 when nothing sets it),
//! and the runtime a node has comes from the RTDS runtimes the files serve it. So the size is
//! counted when a resource loads (`checks`), and judged here, across files.
//!
//! The limit for a resource is the smallest that a node getting it could have: the limits
//! of the runtimes in files whose nodes overlap its file's (a node's layers are ordered by its
//! bootstrap, which Switchyard does not see), and the default as well unless a runtime
//! reaches every node of its file (in the same file, a file for every node, or one with the
//! same `nodes:`). The default is Envoy's 100, or what the proxies' bootstraps set, given as
//! `--re2-max-program-size`. A runtime counts only if the bootstraps name it as an RTDS layer.
//!
//! Must not: count programs (`checks::re2` does) or decide anything about other resources.

use std::collections::HashMap;

use prost_reflect::DynamicMessage;

use super::checks::{self, re2};
use super::selector::Selector;
use super::{descriptors, ConfigError, SnapshotFile};
use crate::resource::{Resource, ResourceType};

/// The limit a runtime resource sets, if it sets one.
fn runtime_limit(runtime: &Resource) -> Option<u64> {
    let message =
        DynamicMessage::decode(descriptors::message(runtime.kind), runtime.body.clone()).ok()?;
    let json = super::json::to_json(&message).ok()?;
    re2::runtime_limit(json.get("layer")?)
}

/// Each regex over the limit for the nodes that get it, as an error naming where it is
/// written. `texts`: the files' texts where the caller has them (else they are read again,
/// and only for files with something to report).
/// `default`: the limit where no runtime in the files sets one (`--re2-max-program-size`).
pub(super) fn judge(
    files: &[SnapshotFile],
    texts: &HashMap<usize, &str>,
    default: u64,
) -> Vec<ConfigError> {
    let mut limits: Vec<(usize, u64)> = Vec::new();
    for (i, file) in files.iter().enumerate() {
        for r in &file.resources {
            if r.kind == ResourceType::Runtime {
                if let Some(limit) = runtime_limit(r) {
                    limits.push((i, limit));
                }
            }
        }
    }
    let mut errors = Vec::new();
    for (i, file) in files.iter().enumerate() {
        let reaches = |j: usize, every: bool| {
            let theirs: &Selector = &files[j].selector;
            if every {
                j == i || *theirs == Selector::all() || *theirs == file.selector
            } else {
                j == i || theirs.common_node(&file.selector).is_some()
            }
        };
        let applicable: Vec<u64> = limits
            .iter()
            .filter(|(j, _)| reaches(*j, false))
            .map(|(_, limit)| *limit)
            .collect();
        let covered = limits.iter().any(|(j, _)| reaches(*j, true));
        let limit = applicable
            .iter()
            .copied()
            .chain((!covered).then_some(default))
            .min()
            .unwrap_or(default);
        let mut positions = None;
        for r in &file.resources {
            let Some(program) = r.regex_program() else {
                continue;
            };
            let Err(refusal) = checks::judge_regex(program, limit) else {
                continue;
            };
            let index = r.origin().map_or(0, |(_, index)| index);
            let item = format!("{}[{index}]", r.kind.file_key());
            let positions = positions.get_or_insert_with(|| {
                super::yaml::positions_of_file(texts.get(&i).copied(), &file.path)
            });
            let raised = if applicable.is_empty() && default == re2::DEFAULT_MAX_PROGRAM_SIZE {
                format!(
                    " (Envoy's default; a runtime the nodes get may raise it with `{}`: an \
                     RTDS runtime in the files, or in their bootstraps with \
                     --re2-max-program-size)",
                    re2::RUNTIME_KEY
                )
            } else if !applicable.contains(&limit) {
                " (--re2-max-program-size)".to_string()
            } else {
                format!(" (`{}` in the runtime these nodes get)", re2::RUNTIME_KEY)
            };
            errors.push(ConfigError::Resource {
                path: file.path.clone(),
                resource: format!("{item} {:?}", r.name),
                field: refusal.path.clone(),
                message: format!(
                    "RE2 compiles this regex to a program of {} instructions, over the limit \
                     of {limit}{raised}. {refusal}",
                    program.size
                ),
                at: super::yaml::position_of(positions, &format!("{item}.{}", refusal.path)),
            });
        }
    }
    errors
}
