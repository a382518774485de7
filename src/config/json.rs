//! Envoy's way of reading a resource's YAML/JSON: protobuf's JSON mapping (prost-reflect,
//! driven by the descriptor pool) and, before it, the leniencies Envoy's own loader adds.
//!
//! Owns, in the direction files -> protobuf ([`from_value`]):
//! - a single value where a repeated field wants a list (`domains: "*"`), read as a list of
//!   one, as Envoy does;
//! - an enum name in another case (`type: strict_dns`), read as its upper-case name when only
//!   that is a name of the enum: Envoy parses with protobuf's `case_insensitive_enum_parsing`,
//!   which does exactly this;
//! - an empty `Any` (`config: {}`): protobuf's JSON mapping, and so Envoy, reads `{}` as an
//!   `Any` with no type and no value. prost-reflect wants an `"@type"`, so the item is given
//!   a marker type first and the marker is cleared from the decoded message.
//!
//! And in the direction protobuf -> JSON ([`to_json`], and a loaded resource's canonical JSON
//! from one of its forms, [`resource_json`]): an empty `Any` is written `{}` (prost-reflect
//! refuses to write an `Any` without a type).
//!
//! Must not: read files, or check Envoy's rules (`rules`, `envoy_checks`): this only decides
//! what a text means.

use prost_reflect::{
    DeserializeOptions, DynamicMessage, Kind, MessageDescriptor, ReflectMessage, SerializeOptions,
    Value,
};
use serde_yaml::Value as Yaml;

use super::descriptors;

/// The message an empty `Any` is read as in between, under a type URL of its own (never
/// served: cleared before the message leaves [`from_value`]): any message of the built-in
/// pool that is not a well-known type and may be empty.
const EMPTY_ANY_MESSAGE: &str = "envoy.config.core.v3.Metadata";

fn marker_url() -> String {
    format!("switchyard.invalid/{EMPTY_ANY_MESSAGE}")
}

/// Decode `item` as `descriptor`, as Envoy reads it. `deserialize` is the JSON mapping
/// itself (the caller tracks error paths through it).
/// `refuse` words what Envoy refuses that the mapping would take (the field path, and why).
pub fn from_value<E>(
    descriptor: &MessageDescriptor,
    mut item: Yaml,
    deserialize: impl FnOnce(&Yaml) -> Result<DynamicMessage, E>,
    refuse: impl FnOnce(String, String) -> E,
) -> Result<DynamicMessage, E> {
    let mut prep = Prep::default();
    prepare_message(descriptor, &mut item, &mut prep);
    if let Some((path, message)) = prep.problem {
        return Err(refuse(path, message));
    }
    let mut message = deserialize(&item)?;
    if prep.empty_anys > 0 {
        let marker = marker_url();
        rewrite_anys(&mut message, &mut |any| {
            let is_marker = any
                .get_field_by_number(1)
                .is_some_and(|v| v.as_str() == Some(marker.as_str()));
            if is_marker {
                any.clear_field_by_number(1);
                any.clear_field_by_number(2);
            }
            is_marker
        });
    }
    Ok(message)
}

/// Why a message and its JSON do not map onto each other: protobuf's JSON mapping in
/// prost-reflect's words, after the path of the field it failed at.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct JsonError(String);

/// Decode JSON as `descriptor` with protobuf's mapping and Envoy's leniencies (for JSON that
/// [`to_json`] wrote, or a client sent).
pub fn from_json(
    descriptor: &MessageDescriptor,
    json: &serde_json::Value,
) -> Result<DynamicMessage, JsonError> {
    let item: Yaml = serde_yaml::to_value(json).map_err(|e| JsonError(e.to_string()))?;
    from_value(
        descriptor,
        item,
        |item| {
            DynamicMessage::deserialize_with_options(
                descriptor.clone(),
                item,
                &DeserializeOptions::new(),
            )
            .map_err(|e| e.to_string())
        },
        |path, message| format!("{path}: {message}"),
    )
    .map_err(JsonError)
}

/// A resource's proto3 canonical JSON, decoded from `body` (one of its encoded forms: whole,
/// or without secrets). `None` only if the bytes do not decode as their type (never for what
/// the loader encoded from this pool).
pub fn resource_json(
    resource: &crate::resource::Resource,
    body: &bytes::Bytes,
) -> Option<serde_json::Value> {
    let message = DynamicMessage::decode(descriptors::message(resource.kind), body.clone()).ok()?;
    to_json(&message).ok()
}

/// A message's proto3 JSON; an empty `Any` is `{}`.
pub fn to_json(message: &DynamicMessage) -> Result<serde_json::Value, JsonError> {
    to_json_with(message, &SerializeOptions::new()).map_err(JsonError)
}

/// [`to_json`] with the .proto field names (`connect_timeout`), as Envoy's own YAML is
/// written and its config dumps are.
pub fn to_json_proto_names(message: &DynamicMessage) -> Result<serde_json::Value, JsonError> {
    to_json_with(message, &SerializeOptions::new().use_proto_field_name(true)).map_err(JsonError)
}

fn to_json_with(
    message: &DynamicMessage,
    options: &SerializeOptions,
) -> Result<serde_json::Value, String> {
    let write =
        |m: &DynamicMessage| m.serialize_with_options(serde_json::value::Serializer, options);
    match write(message) {
        Ok(json) => Ok(json),
        Err(first) => {
            // The one thing prost-reflect cannot write is an Any without a type: write those
            // as the marker, then the marker as `{}`.
            let mut copy = message.clone();
            let marker = marker_url();
            let marked = rewrite_anys(&mut copy, &mut |any| {
                let empty = any
                    .get_field_by_number(1)
                    .is_none_or(|v| v.as_str().is_some_and(str::is_empty));
                if empty {
                    any.set_field_by_number(1, Value::String(marker.clone()));
                    any.clear_field_by_number(2);
                }
                empty
            });
            if !marked {
                return Err(first.to_string());
            }
            let mut json = write(&copy).map_err(|e| e.to_string())?;
            unmark_json(&mut json, &marker);
            Ok(json)
        }
    }
}

fn unmark_json(json: &mut serde_json::Value, marker: &str) {
    match json {
        serde_json::Value::Object(map) => {
            if map.get("@type").and_then(|v| v.as_str()) == Some(marker) {
                map.clear();
                return;
            }
            map.values_mut().for_each(|v| unmark_json(v, marker));
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| unmark_json(v, marker)),
        _ => {}
    }
}

/// Call `f` on every `google.protobuf.Any` in `message`, at any depth, including inside the
/// payloads of other `Any`s. Returns whether `f` changed anything.
fn rewrite_anys(
    message: &mut DynamicMessage,
    f: &mut dyn FnMut(&mut DynamicMessage) -> bool,
) -> bool {
    rewrite(message, &mut |m| {
        m.descriptor().full_name() == "google.protobuf.Any" && f(m)
    })
}

/// Call `f` on every message in `message` (itself first, then its fields), at any depth,
/// including the payloads of `Any`s whose type the pool knows (decoded, and encoded back
/// when something changed inside). Returns whether `f` changed anything.
pub fn rewrite(
    message: &mut DynamicMessage,
    f: &mut dyn FnMut(&mut DynamicMessage) -> bool,
) -> bool {
    let mut changed = f(message);
    if message.descriptor().full_name() == "google.protobuf.Any" {
        let Some(name) = message.get_field_by_number(1).and_then(|v| {
            v.as_str()
                .and_then(|u| u.rsplit_once('/'))
                .map(|(_, n)| n.to_string())
        }) else {
            return changed;
        };
        let Some(descriptor) = descriptors::message_named(&name) else {
            return changed;
        };
        let bytes = message
            .get_field_by_number(2)
            .and_then(|v| v.as_bytes().cloned())
            .unwrap_or_default();
        let Ok(mut inner) = DynamicMessage::decode(descriptor, bytes) else {
            return changed;
        };
        if rewrite(&mut inner, f) {
            message.set_field_by_number(
                2,
                Value::Bytes(prost::Message::encode_to_vec(&inner).into()),
            );
            changed = true;
        }
        return changed;
    }
    for (field, value) in message.fields_mut() {
        if matches!(field.kind(), Kind::Message(_)) {
            changed |= rewrite_value(value, f);
        }
    }
    changed
}

fn rewrite_value(value: &mut Value, f: &mut dyn FnMut(&mut DynamicMessage) -> bool) -> bool {
    match value {
        Value::Message(m) => rewrite(m, f),
        Value::List(items) => items
            .iter_mut()
            .fold(false, |acc, v| rewrite_value(v, f) | acc),
        Value::Map(entries) => entries
            .values_mut()
            .fold(false, |acc, v| rewrite_value(v, f) | acc),
        _ => false,
    }
}

/// What the leniencies did, where they are, and what Envoy refuses that the mapping takes.
#[derive(Default)]
struct Prep {
    empty_anys: usize,
    at: Vec<String>,
    problem: Option<(String, String)>,
}

impl Prep {
    fn path(&self) -> String {
        let mut out = String::new();
        for segment in &self.at {
            if !segment.starts_with('[') && !out.is_empty() {
                out.push('.');
            }
            out.push_str(segment);
        }
        if out.is_empty() {
            ".".into()
        } else {
            out
        }
    }

    fn refuse(&mut self, message: String) {
        if self.problem.is_none() {
            self.problem = Some((self.path(), message));
        }
    }
}

/// The wrapper messages, whose JSON is their value.
fn wrapper(name: &str) -> bool {
    matches!(
        name,
        "google.protobuf.DoubleValue"
            | "google.protobuf.FloatValue"
            | "google.protobuf.Int64Value"
            | "google.protobuf.UInt64Value"
            | "google.protobuf.Int32Value"
            | "google.protobuf.UInt32Value"
            | "google.protobuf.BoolValue"
            | "google.protobuf.StringValue"
            | "google.protobuf.BytesValue"
    )
}

/// A Duration's text as Envoy's parser takes it: at most nine fractional digits.
fn duration_problem(text: &str) -> Option<String> {
    let number = text.strip_suffix('s')?;
    let (_, fraction) = number.split_once('.')?;
    (fraction.len() > 9)
        .then(|| format!("invalid duration {text:?}: at most 9 fractional digits (nanoseconds)"))
}

/// Messages whose JSON form is not an object of fields: left to the mapping as they are.
fn free_form(name: &str) -> bool {
    wrapper(name)
        || matches!(
            name,
            "google.protobuf.Struct"
                | "google.protobuf.Value"
                | "google.protobuf.ListValue"
                | "google.protobuf.Duration"
                | "google.protobuf.Timestamp"
                | "google.protobuf.FieldMask"
                | "google.protobuf.Empty"
        )
}

/// Apply Envoy's leniencies to `item`, read as `descriptor`, in place. What does not fit the
/// message is left for the mapping to report.
fn prepare_message(descriptor: &MessageDescriptor, item: &mut Yaml, prep: &mut Prep) {
    let name = descriptor.full_name();
    if name == "google.protobuf.Any" {
        return prepare_any(item, prep);
    }
    if wrapper(name) {
        // Envoy's parser also takes a wrapper written as its message, `{value: 1024}`.
        if let Yaml::Mapping(m) = item {
            if m.len() == 1 {
                if let Some(inner) = m.get("value").cloned() {
                    *item = inner;
                }
            }
        }
        if name == "google.protobuf.BoolValue" {
            bool_text(item);
        }
        return;
    }
    if name == "google.protobuf.Duration" {
        if let Some(problem) = item.as_str().and_then(duration_problem) {
            prep.refuse(problem);
        }
        return;
    }
    if free_form(name) {
        return;
    }
    if let Yaml::Mapping(mapping) = item {
        prepare_fields(descriptor, mapping, prep);
    }
}

/// Each entry of `mapping` that names a field of `descriptor` (`"@type"` names none).
fn prepare_fields(
    descriptor: &MessageDescriptor,
    mapping: &mut serde_yaml::Mapping,
    prep: &mut Prep,
) {
    for (key, value) in mapping.iter_mut() {
        let Some(key) = key.as_str() else { continue };
        let field = descriptor
            .get_field_by_name(key)
            .or_else(|| descriptor.get_field_by_json_name(key));
        if let Some(field) = field {
            prep.at.push(key.to_string());
            prepare_field(&field, value, prep);
            prep.at.pop();
        }
    }
}

/// Envoy's parser takes `"true"` and `"false"` for a bool.
fn bool_text(value: &mut Yaml) {
    let parsed = match value.as_str() {
        Some("true") => true,
        Some("false") => false,
        _ => return,
    };
    *value = Yaml::Bool(parsed);
}

fn prepare_field(field: &prost_reflect::FieldDescriptor, value: &mut Yaml, prep: &mut Prep) {
    if field.is_map() {
        let Kind::Message(entry) = field.kind() else {
            return;
        };
        let value_field = entry.map_entry_value_field();
        if let Yaml::Mapping(entries) = value {
            for (_, v) in entries.iter_mut() {
                prepare_kind(&value_field.kind(), v, prep);
            }
        }
        return;
    }
    if field.is_list() {
        if !matches!(value, Yaml::Sequence(_) | Yaml::Null) {
            // Envoy reads a single value as a list of one.
            let single = std::mem::take(value);
            *value = Yaml::Sequence(vec![single]);
        }
        if let Yaml::Sequence(items) = value {
            for (i, v) in items.iter_mut().enumerate() {
                prep.at.push(format!("[{i}]"));
                prepare_kind(&field.kind(), v, prep);
                prep.at.pop();
            }
        }
        return;
    }
    prepare_kind(&field.kind(), value, prep);
}

fn prepare_kind(kind: &Kind, value: &mut Yaml, prep: &mut Prep) {
    match kind {
        Kind::Message(descriptor) => prepare_message(descriptor, value, prep),
        Kind::Bool => bool_text(value),
        Kind::Enum(descriptor) => {
            if let Yaml::String(name) = value {
                if descriptor.get_value_by_name(name).is_none() {
                    let upper = name.to_ascii_uppercase();
                    if descriptor.get_value_by_name(&upper).is_some() {
                        *name = upper;
                    }
                }
            }
        }
        _ => {}
    }
}

fn prepare_any(item: &mut Yaml, prep: &mut Prep) {
    let Yaml::Mapping(mapping) = item else {
        return;
    };
    if mapping.is_empty() {
        mapping.insert(Yaml::from("@type"), Yaml::from(marker_url()));
        prep.empty_anys += 1;
        return;
    }
    let Some(name) = mapping
        .get("@type")
        .and_then(Yaml::as_str)
        .and_then(|url| url.rsplit_once('/'))
        .map(|(_, name)| name.to_string())
    else {
        return;
    };
    let Some(descriptor) = descriptors::message_named(&name) else {
        return;
    };
    if free_form(descriptor.full_name()) || descriptor.full_name() == "google.protobuf.Any" {
        // A well-known type's payload is under `value`.
        if let Some(value) = mapping.get_mut("value") {
            prepare_message(&descriptor, value, prep);
        }
        return;
    }
    prepare_fields(&descriptor, mapping, prep);
}

#[cfg(test)]
mod tests;
