//! Errors that point: an unknown field or enum value of a resource, said with the field path
//! as the file spells it, the closest valid names ("did you mean"), and for an enum every
//! valid value.
//!
//! Owns: finding, from the path the decoder stopped at, the message or enum meant there
//! (through lists, maps and `Any` payloads by their `@type`), and the names closest to a
//! typo. Must not: decide whether something is an error (the decoder has), or read files.

use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use serde_path_to_error::Segment;
use serde_yaml::Value;

use super::descriptors;

/// What the decoder said, made to point: the field path and the message, or `None` when it
/// is not an unknown name this module can explain.
pub(super) fn explain(
    root: &MessageDescriptor,
    item: &Value,
    path: &serde_path_to_error::Path,
    message: &str,
) -> Option<(String, String)> {
    let segments: Vec<&Segment> = path.iter().collect();
    if let Some(name) = quoted(message, "unrecognized field name '") {
        let (message_at, _) = resolve(root, item, &segments)?;
        let field_path = join(&path.to_string(), name);
        let names: Vec<String> = message_at.fields().map(|f| f.name().to_string()).collect();
        let mut said = format!("unknown field `{name}` of {}", message_at.full_name());
        match closest(name, &names) {
            Some(best) => said.push_str(&format!("; did you mean `{best}`?")),
            None => said.push_str(&format!(
                "; its fields: {}",
                names
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
        return Some((field_path, said));
    }
    if let Some(value) = quoted(message, "unrecognized enum value '") {
        let (_, field) = resolve(root, item, &segments)?;
        let Kind::Enum(e) = field?.kind() else {
            return None;
        };
        let names: Vec<String> = e.values().map(|v| v.name().to_string()).collect();
        let mut said = format!("unknown value `{value}` of {}", e.full_name());
        match closest(value, &names) {
            Some(best) => said.push_str(&format!("; did you mean `{best}`? Valid values: ")),
            None => said.push_str("; valid values: "),
        }
        said.push_str(&format!("{}.", names.join(", ")));
        return Some((path.to_string(), said));
    }
    None
}

/// The text between `prefix` and the next `'` in `message`.
fn quoted<'a>(message: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = message.strip_prefix(prefix)?;
    rest.split('\'').next()
}

/// `path` (`.` for the resource itself) and one field more.
fn join(path: &str, field: &str) -> String {
    if path == "." || path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

/// The message at the end of `segments` (walked through the item alongside its descriptor,
/// so that an `Any` is read as its `@type`), and the last field named on the way.
fn resolve(
    root: &MessageDescriptor,
    item: &Value,
    segments: &[&Segment],
) -> Option<(MessageDescriptor, Option<FieldDescriptor>)> {
    let mut message = root.clone();
    let mut value = item;
    // The list or map field whose elements the next segment picks, if any.
    let mut container: Option<FieldDescriptor> = None;
    let mut last = None;
    for segment in segments {
        match segment {
            Segment::Map { key } => {
                value = value.get(key.as_str())?;
                if let Some(field) = container.take().filter(FieldDescriptor::is_map) {
                    // A map entry's value.
                    let entry = match field.kind() {
                        Kind::Message(entry) => entry,
                        _ => return None,
                    };
                    let value_field = entry.map_entry_value_field();
                    if let Kind::Message(m) = value_field.kind() {
                        message = message_of(m, value);
                    }
                    last = Some(value_field);
                    continue;
                }
                // (Inside an `Any`, `message` is already its payload's type.)
                let field = message
                    .get_field_by_name(key)
                    .or_else(|| message.get_field_by_json_name(key))?;
                if field.is_list() || field.is_map() {
                    container = Some(field.clone());
                } else if let Kind::Message(m) = field.kind() {
                    message = message_of(m, value);
                }
                last = Some(field);
            }
            Segment::Seq { index } => {
                value = value.get(*index)?;
                if let Some(field) = container.take() {
                    if let Kind::Message(m) = field.kind() {
                        message = message_of(m, value);
                    }
                }
            }
            _ => return None,
        }
    }
    Some((message, last))
}

/// `m`, or for an `Any` the type its value names with `@type` (when the pool has it).
fn message_of(m: MessageDescriptor, value: &Value) -> MessageDescriptor {
    if m.full_name() != "google.protobuf.Any" {
        return m;
    }
    value
        .get("@type")
        .and_then(Value::as_str)
        .and_then(|url| url.rsplit('/').next())
        .and_then(descriptors::message_named)
        .unwrap_or(m)
}

/// The name in `names` closest to `typo`, if one is close enough to be what was meant:
/// a few edits away, a swap of two letters one edit (case, `_` and spaces aside, as in
/// `connectTimeout` for `connect_timeout`).
fn closest(typo: &str, names: &[String]) -> Option<String> {
    let plain = |s: &str| s.to_ascii_lowercase().replace(['_', ' ', '-'], "");
    let wanted = plain(typo);
    names
        .iter()
        .map(|n| (strsim::osa_distance(&wanted, &plain(n)), n))
        .filter(|(distance, n)| *distance <= (n.len().max(typo.len()) / 3).clamp(1, 3))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, n)| n.clone())
}

#[cfg(test)]
mod tests;
