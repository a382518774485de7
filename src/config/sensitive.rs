//! Load errors that do not show secrets: when a value that does not decode sits in a field
//! the Envoy API marks sensitive (a private key, a generic secret, a password), or inside
//! one, its error message leaves the value out, since load errors go to the logs, to
//! `/status` and to `switchyard validate`'s output.
//!
//! Owns: following an error's path from the resource's message type through the fields as
//! written (lists, maps, and `Any` fields by their `@type`), and the wording of a hidden
//! error. Must not: decide which fields are sensitive (`redact` reads that from the API).

use prost_reflect::{Kind, MessageDescriptor};
use serde_path_to_error::{Path, Segment};

use super::descriptors;
use crate::config::redact::sensitive_fields;

/// Whether the value at `path` of `item` (written as a message of type `root`) is a
/// sensitive field or inside one.
pub fn at_sensitive(root: MessageDescriptor, item: &serde_yaml::Value, path: &Path) -> bool {
    let mut message = Some(root);
    let mut value = Some(item);
    // Set right after a map field: the next segment is a key, and its value an entry's.
    let mut map_values: Option<Kind> = None;
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => {
                value = value.and_then(|v| v.get(index));
            }
            Segment::Map { key } => {
                value = value.and_then(|v| v.get(key.as_str()));
                if let Some(kind) = map_values.take() {
                    message = message_of(&kind, value);
                    continue;
                }
                let Some(current) = message.take() else {
                    return false;
                };
                let Some(field) = current
                    .get_field_by_name(key)
                    .or_else(|| current.get_field_by_json_name(key))
                else {
                    return false;
                };
                if sensitive_fields().contains(field.full_name()) {
                    return true;
                }
                if field.is_map() {
                    if let Kind::Message(entry) = field.kind() {
                        map_values = Some(entry.map_entry_value_field().kind());
                    }
                    message = None;
                    continue;
                }
                message = message_of(&field.kind(), value);
            }
            Segment::Enum { .. } | Segment::Unknown => return false,
        }
    }
    false
}

/// The message a value of `kind` is, if a message: an `Any` by its `@type`.
fn message_of(kind: &Kind, value: Option<&serde_yaml::Value>) -> Option<MessageDescriptor> {
    let Kind::Message(message) = kind else {
        return None;
    };
    if message.full_name() != "google.protobuf.Any" {
        return Some(message.clone());
    }
    let type_url = value?.get("@type")?.as_str()?;
    descriptors::message_named(type_url.rsplit('/').next()?)
}

/// The error message without the value: what kind of error, and what was expected.
pub fn hidden(message: &str) -> String {
    let what = message.split(": ").next().unwrap_or(message);
    let expected = message
        .find(", expected ")
        .map(|at| &message[at..])
        .unwrap_or("");
    format!("{what}{expected} (the value is not shown: the field is sensitive)")
}
