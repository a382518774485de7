//! A decoded message's fields by name: the few accessors the checks and `import` read
//! resources with.
//!
//! Must not: decide anything about what the fields mean.

use prost_reflect::{DynamicMessage, ReflectMessage};

/// Whether `field` is set (a message field present, even empty).
pub fn has(message: &DynamicMessage, field: &str) -> bool {
    message
        .descriptor()
        .get_field_by_name(field)
        .is_some_and(|f| message.has_field(&f))
}

/// A message field, when set.
pub fn message(message: &DynamicMessage, field: &str) -> Option<DynamicMessage> {
    if !has(message, field) {
        return None;
    }
    message
        .get_field_by_name(field)
        .and_then(|v| v.as_message().cloned())
}

/// A repeated message field's items.
pub fn messages(message: &DynamicMessage, field: &str) -> Vec<DynamicMessage> {
    list(message, field, |v| v.as_message().cloned())
}

/// A repeated string field's items.
pub fn strings(message: &DynamicMessage, field: &str) -> Vec<String> {
    list(message, field, |v| v.as_str().map(str::to_string))
}

fn list<T>(
    message: &DynamicMessage,
    field: &str,
    item: impl Fn(&prost_reflect::Value) -> Option<T>,
) -> Vec<T> {
    message
        .get_field_by_name(field)
        .and_then(|v| {
            v.as_list()
                .map(|items| items.iter().filter_map(&item).collect())
        })
        .unwrap_or_default()
}

/// A string field (empty when unset).
pub fn string(message: &DynamicMessage, field: &str) -> String {
    message
        .get_field_by_name(field)
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// A `DataSource`'s inline bytes (`inline_string` or `inline_bytes`); `None` for one read
/// from a file or the environment, which only the proxy sees.
pub fn inline_data(source: &DynamicMessage) -> Option<Vec<u8>> {
    if has(source, "inline_string") {
        return Some(string(source, "inline_string").into_bytes());
    }
    if has(source, "inline_bytes") {
        return source
            .get_field_by_name("inline_bytes")
            .and_then(|v| v.as_bytes().map(|b| b.to_vec()));
    }
    None
}
