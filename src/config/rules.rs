//! Envoy's own field rules (protoc-gen-validate), checked when a resource loads.
//!
//! Owns: reading the rules that the compiled-in descriptor set carries as options
//! (`validate.rules` on fields, `validate.required` on oneofs, `validate.disabled` and
//! `validate.ignored` on messages), and checking a decoded resource against them as Envoy's
//! generated C++ validators do: the same rules, in the same order, reported in the same words
//! ("ClusterValidationError.ConnectTimeout: value must be greater than 0s"). Like Envoy, the
//! payloads of `Any` fields (`typed_config`) are checked on their own, as their own type.
//!
//! Must not: know about files, resources or serving; the loader turns a [`Violation`] into
//! a load error. A rule the validator cannot evaluate (a pattern our regex engine rejects)
//! is skipped and counted by [`census`], never guessed.
//!
//! Each message type's rules are decoded once per process into a [`Plan`] (`plan`);
//! checking a resource walks its fields in `Validate()` order (here), checks each value
//! against its rules (`values`), and words what breaks as Go printed the rules (`go`).

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, OnceLock, RwLock};

use envoy_types::pb::validate as pgv;
use pgv::field_rules::Type as RuleType;
use prost_reflect::{
    DynamicMessage, ExtensionDescriptor, FieldDescriptor, Kind, MapKey, MessageDescriptor,
    ReflectMessage, Value,
};
use rustc_hash::FxHashMap;

use super::descriptors;

mod go;
mod plan;
mod values;

use go::*;
use plan::*;
pub use plan::{plan, Plan};
use values::*;

/// The first rule a resource breaks, as Envoy would report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Where, from the resource: `load_assignment.endpoints[0].lb_endpoints[0]`, `.` for
    /// the resource itself. Inside an `Any`, the path continues into its payload.
    pub path: String,
    /// The rule, as written in Envoy's .proto files: `uint32.lte`, `message.required`.
    pub rule: String,
    /// Envoy's words: the text inside its "Proto constraint validation failed (...)".
    pub envoy: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "breaks Envoy's rule {}; Envoy would reject it with: Proto constraint validation \
             failed ({})",
            self.rule, self.envoy
        )
    }
}

/// Check a decoded message (a resource) against Envoy's rules: the message with everything
/// embedded in it first, as Envoy's `Validate()` does, then each `Any` payload (and any
/// message its parent's rules skip) on its own, in the order of the tree.
pub fn check(message: &DynamicMessage) -> Result<(), Violation> {
    let mut walk = Walk::default();
    validate(message, &mut walk).map_err(Failure::into_violation)?;
    for item in walk.deferred {
        match item {
            Deferred::Message { path, message } => {
                check(message).map_err(|v| v.under(&path))?;
            }
            Deferred::Any { path, any } => {
                let Some(payload) = unpack(any) else { continue };
                check(&payload).map_err(|v| v.under(&path))?;
            }
        }
    }
    Ok(())
}

impl Violation {
    fn under(mut self, prefix: &str) -> Self {
        self.path = if self.path == "." {
            prefix.to_string()
        } else {
            format!("{prefix}.{}", self.path)
        };
        self
    }
}

/// The payload of an `Any`, decoded as its type; `None` when the type is not in the pool
/// or the bytes do not decode (the loader only builds `Any`s from the pool, so neither
/// happens for loaded files).
fn unpack(any: &DynamicMessage) -> Option<DynamicMessage> {
    let url = any.get_field_by_number(1)?;
    let name = url.as_str()?.rsplit('/').next()?;
    let value = any.get_field_by_number(2)?;
    let descriptor = descriptors::pool().get_message_by_name(name)?;
    DynamicMessage::decode(descriptor, value.as_bytes()?.clone()).ok()
}

/// Something to check on its own after the whole message passed.
enum Deferred<'a> {
    /// A message the rules above it skip (`message.skip`, a disabled parent): Envoy's
    /// tree walk still validates it.
    Message {
        path: String,
        message: &'a DynamicMessage,
    },
    /// An `Any`: its payload is checked as its own type.
    Any {
        path: String,
        any: &'a DynamicMessage,
    },
}

/// The state of one `validate` pass: where it is (field segments from the message checked)
/// and what it left for later.
#[derive(Default)]
struct Walk<'a> {
    at: Vec<String>,
    deferred: Vec<Deferred<'a>>,
}

impl<'a> Walk<'a> {
    /// Leave `message`, found at `segment` of the current place, for Envoy's tree walk.
    fn defer(&mut self, segment: String, message: &'a DynamicMessage) {
        let mut path = self.at.join(".");
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(&segment);
        self.deferred.push(if is_any(message) {
            Deferred::Any { path, any: message }
        } else {
            Deferred::Message { path, message }
        });
    }

    /// Validate an embedded message found at `segment`.
    fn descend(&mut self, segment: String, message: &'a DynamicMessage) -> Result<(), Failure> {
        self.at.push(segment);
        let result = validate(message, self);
        self.at.pop();
        result
    }
}

/// A rule broken somewhere below the message being validated: Envoy's words so far and the
/// field path, both built outwards as the failure returns.
struct Failure {
    path: Vec<String>,
    rule: String,
    envoy: String,
}

impl Failure {
    fn into_violation(self) -> Violation {
        let mut path = String::new();
        for (i, part) in self.path.iter().rev().enumerate() {
            if i > 0 && !part.starts_with('[') {
                path.push('.');
            }
            path.push_str(part);
        }
        if path.is_empty() {
            path.push('.');
        }
        Violation {
            path,
            rule: self.rule,
            envoy: self.envoy,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Walking a message: its fields in Validate() order, embedded messages, Any payloads.

/// A broken rule at one field: the rule's name (`lte`) and Envoy's reason.
type Broken = (&'static str, String);

/// Validate `message` and everything embedded in it (not `Any` payloads), as Envoy's
/// generated `Validate()`; what Envoy's tree walk checks on its own is left in `walk`.
fn validate<'a>(message: &'a DynamicMessage, walk: &mut Walk<'a>) -> Result<(), Failure> {
    let plan = plan(&message.descriptor());
    if plan.disabled {
        defer_children(message, walk);
        return Ok(());
    }
    for step in &plan.steps {
        match step {
            Step::Field(f) => {
                if f.optional && !message.has_field(&f.field) {
                    continue;
                }
                check_field(message, &plan, f, walk)?;
            }
            Step::Oneof {
                name,
                required,
                fields,
            } => match fields.iter().find(|f| message.has_field(&f.field)) {
                Some(f) => check_field(message, &plan, f, walk)?,
                None if *required => {
                    let oneof_set = message
                        .descriptor()
                        .oneofs()
                        .find(|o| o.name() == name)
                        .is_some_and(|o| o.fields().any(|f| message.has_field(&f)));
                    if !oneof_set {
                        return Err(Failure {
                            path: vec![name.clone()],
                            rule: "oneof.required".into(),
                            envoy: format!("field: {name:?}, reason: is required"),
                        });
                    }
                }
                None => {}
            },
        }
    }
    Ok(())
}

/// Every message set directly in `message`, for Envoy's walk to validate on its own.
fn defer_children<'a>(message: &'a DynamicMessage, walk: &mut Walk<'a>) {
    for (field, value) in message.fields() {
        let name = field.name();
        match value {
            Value::Message(m) => walk.defer(name.to_string(), m),
            Value::List(items) => {
                for (i, item) in items.iter().enumerate() {
                    if let Value::Message(m) = item {
                        walk.defer(format!("{name}[{i}]"), m);
                    }
                }
            }
            Value::Map(map) => {
                for (key, item) in map {
                    if let Value::Message(m) = item {
                        walk.defer(format!("{name}[{}]", show_key(key)), m);
                    }
                }
            }
            _ => {}
        }
    }
}

fn is_any(message: &DynamicMessage) -> bool {
    message.descriptor().full_name() == "google.protobuf.Any"
}

/// A map key as Envoy's words show it: as is.
fn raw_key(key: &MapKey) -> String {
    match key {
        MapKey::String(s) => s.clone(),
        other => show_key(other),
    }
}

/// A map key in a field path: strings quoted.
fn show_key(key: &MapKey) -> String {
    match key {
        MapKey::String(s) => format!("{s:?}"),
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(n) => n.to_string(),
        MapKey::I64(n) => n.to_string(),
        MapKey::U32(n) => n.to_string(),
        MapKey::U64(n) => n.to_string(),
    }
}

/// Envoy's words for a rule broken at `Field[index]` of `plan`'s message (a map's index is
/// its key, unquoted, whether the key or the value breaks the rule).
fn words(plan: &Plan, f: &FieldPlan, index: Option<&str>, reason: &str) -> String {
    let mut out = String::new();
    let _ = write!(out, "{}.{}", plan.error_name, f.camel);
    if let Some(i) = index {
        let _ = write!(out, "[{i}]");
    }
    let _ = write!(out, ": {reason}");
    out
}

/// One field whose rules are being checked, and how a failure there is told.
struct At<'p> {
    plan: &'p Plan,
    f: &'p FieldPlan,
}

impl At<'_> {
    /// The field (at `index`, shown as Envoy shows it and as the path quotes it) broke
    /// `kind.rule`.
    fn fail(&self, index: Option<(String, String)>, kind: &str, (rule, reason): Broken) -> Failure {
        let mut path = Vec::with_capacity(2);
        if let Some((_, at)) = &index {
            path.push(format!("[{at}]"));
        }
        path.push(self.f.field.name().to_string());
        Failure {
            path,
            rule: format!("{kind}.{rule}"),
            envoy: words(
                self.plan,
                self.f,
                index.as_ref().map(|(i, _)| i.as_str()),
                &reason,
            ),
        }
    }

    /// A message in the field (at `index`) failed `inner`: Envoy says both.
    fn embedded(&self, index: Option<(String, String)>, inner: Failure) -> Failure {
        let mut path = inner.path;
        if let Some((_, at)) = &index {
            path.push(format!("[{at}]"));
        }
        path.push(self.f.field.name().to_string());
        Failure {
            path,
            rule: inner.rule,
            envoy: format!(
                "{} | caused by {}",
                words(
                    self.plan,
                    self.f,
                    index.as_ref().map(|(i, _)| i.as_str()),
                    "embedded message failed validation"
                ),
                inner.envoy
            ),
        }
    }
}

/// One field's rules, by its shape: a list, a map, a message, or a scalar.
fn check_field<'a>(
    message: &'a DynamicMessage,
    plan: &Plan,
    f: &FieldPlan,
    walk: &mut Walk<'a>,
) -> Result<(), Failure> {
    let at = At { plan, f };
    if f.field.is_list() {
        return check_list(message, &at, walk);
    }
    if f.field.is_map() {
        return check_map(message, &at, walk);
    }
    if let Kind::Message(_) = f.field.kind() {
        return check_message(message, &at, walk);
    }
    if let Some(typed) = &f.rules.typed {
        let value = message.get_field(&f.field);
        if let Some(broken) = check_scalar(&value, typed) {
            return Err(at.fail(None, typed.kind(), broken));
        }
    }
    Ok(())
}

/// A repeated field: its count, each item's rules, and each message item walked.
fn check_list<'a>(
    message: &'a DynamicMessage,
    at: &At<'_>,
    walk: &mut Walk<'a>,
) -> Result<(), Failure> {
    let items: &'a [Value] = set_value(message, &at.f.field)
        .and_then(Value::as_list)
        .unwrap_or(&[]);
    let rules = match &at.f.rules.typed {
        Some(Rules::Repeated(r)) => Some(r.as_ref()),
        _ => None,
    };
    if let Some(r) = rules {
        if !(r.ignore_empty && items.is_empty()) {
            if let Some(broken) = check_count(
                items.len() as u64,
                r.min_items,
                r.max_items,
                "item(s)",
                "items",
            ) {
                return Err(at.fail(None, "repeated", broken));
            }
        }
    }
    let item_rules = rules.and_then(|r| r.items.as_ref());
    let unique = rules.is_some_and(|r| r.unique);
    for (i, item) in items.iter().enumerate() {
        if unique && items[..i].contains(item) {
            return Err(at.fail(
                Some((i.to_string(), i.to_string())),
                "repeated",
                ("unique", "repeated value must contain unique items".into()),
            ));
        }
        let index = || Some((i.to_string(), i.to_string()));
        if let Some(ruled) = item_rules {
            if let Some(broken) = check_value(item, ruled) {
                let kind = ruled.typed.as_ref().map_or("message", Rules::kind);
                return Err(at.fail(index(), &format!("repeated.items.{kind}"), broken));
            }
        }
        if let Value::Message(m) = item {
            let skip = item_rules.is_some_and(|r| r.message.skip);
            let path = || format!("{}[{i}]", at.f.field.name());
            if is_any(m) || skip {
                walk.defer(path(), m);
            } else {
                walk.descend(path(), m)
                    .map_err(|inner| at.embedded(index(), inner))?;
            }
        }
    }
    Ok(())
}

/// A map field: its count, each key's and value's rules (in key order, so that the first
/// violation reported does not depend on hashing), and each message value walked.
fn check_map<'a>(
    message: &'a DynamicMessage,
    at: &At<'_>,
    walk: &mut Walk<'a>,
) -> Result<(), Failure> {
    let map = set_value(message, &at.f.field).and_then(Value::as_map);
    let len = map.map_or(0, HashMap::len);
    let rules = match &at.f.rules.typed {
        Some(Rules::Map(r)) => Some(r.as_ref()),
        _ => None,
    };
    if let Some(r) = rules {
        if !(r.ignore_empty && len == 0) {
            if let Some(broken) =
                check_count(len as u64, r.min_pairs, r.max_pairs, "pair(s)", "pairs")
            {
                return Err(at.fail(None, "map", broken));
            }
        }
    }
    // In key order, so that the first violation reported does not depend on hashing.
    let mut pairs: Vec<_> = map.into_iter().flatten().collect();
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    for (key, item) in pairs {
        let index = || Some((raw_key(key), show_key(key)));
        if let Some(ruled) = rules.and_then(|r| r.keys.as_ref()) {
            if let Some(broken) = check_value(&Value::from(key.clone()), ruled) {
                let kind = ruled.typed.as_ref().map_or("message", Rules::kind);
                return Err(at.fail(index(), &format!("map.keys.{kind}"), broken));
            }
        }
        let value_rules = rules.and_then(|r| r.values.as_ref());
        if let Some(ruled) = value_rules {
            if let Some(broken) = check_value(item, ruled) {
                let kind = ruled.typed.as_ref().map_or("message", Rules::kind);
                return Err(at.fail(index(), &format!("map.values.{kind}"), broken));
            }
        }
        if let Value::Message(m) = item {
            let path = || format!("{}[{}]", at.f.field.name(), show_key(key));
            if is_any(m) || value_rules.is_some_and(|r| r.message.skip) {
                walk.defer(path(), m);
            } else {
                walk.descend(path(), m)
                    .map_err(|inner| at.embedded(index(), inner))?;
            }
        }
    }
    Ok(())
}

/// A message field: required or not, its typed rules (Any, Duration, Timestamp), and the
/// message walked.
fn check_message<'a>(
    message: &'a DynamicMessage,
    at: &At<'_>,
    walk: &mut Walk<'a>,
) -> Result<(), Failure> {
    let Some(Value::Message(sub)) = set_value(message, &at.f.field) else {
        let required = at.f.rules.message.required
            || matches!(&at.f.rules.typed, Some(Rules::Any(a)) if a.required)
            || matches!(&at.f.rules.typed, Some(Rules::Duration(d) | Rules::Timestamp(d)) if d.required);
        if required {
            let kind = at.f.rules.typed.as_ref().map_or("message", Rules::kind);
            return Err(at.fail(None, kind, ("required", "value is required".into())));
        }
        return Ok(());
    };
    if let Some(typed) = &at.f.rules.typed {
        if let Some(broken) = check_message_value(sub, typed) {
            return Err(at.fail(None, typed.kind(), broken));
        }
    }
    let path = at.f.field.name().to_string();
    if is_any(sub) || at.f.rules.message.skip {
        walk.defer(path, sub);
    } else {
        walk.descend(path, sub)
            .map_err(|inner| at.embedded(None, inner))?;
    }
    Ok(())
}

/// A field's value if it is set (`get_field` lends set values and makes defaults).
fn set_value<'a>(message: &'a DynamicMessage, field: &FieldDescriptor) -> Option<&'a Value> {
    match message.get_field(field) {
        std::borrow::Cow::Borrowed(value) => Some(value),
        std::borrow::Cow::Owned(_) => None,
    }
}

// ---------------------------------------------------------------------------------------
// Census: which rules Envoy's types carry, and which of them are checked.

/// Every rule in the compiled-in descriptor set, by name (`uint32.lte`,
/// `repeated.items.string.min_len`), with the number of fields carrying it; and the fields
/// whose rule is not evaluated (a pattern our regex engine does not accept).
#[derive(Debug, Default)]
pub struct Census {
    pub messages: usize,
    pub fields: usize,
    pub rules: std::collections::BTreeMap<String, usize>,
    pub unevaluated: Vec<String>,
    /// One field carrying each rule (for the test corpus).
    pub example: std::collections::BTreeMap<String, String>,
}

/// Count the rules of every message in the pool.
pub fn census() -> Census {
    let mut census = Census::default();
    let Some(ext) = extensions().rules.clone() else {
        return census;
    };
    for message in descriptors::pool().all_messages() {
        let mut ruled = false;
        for field in message.fields() {
            let options = field.options();
            if !options.has_extension(&ext) {
                continue;
            }
            ruled = true;
            census.fields += 1;
            if let Some(rules) = options.get_extension(&ext).as_message() {
                let mut names = Vec::new();
                rule_names(rules, "", &mut names);
                for name in names {
                    if name.ends_with(".pattern") && !pattern_compiles(rules) {
                        census
                            .unevaluated
                            .push(format!("{} ({name})", field.full_name()));
                    }
                    census
                        .example
                        .entry(name.clone())
                        .or_insert_with(|| field.full_name().to_string());
                    *census.rules.entry(name).or_default() += 1;
                }
            }
        }
        census.messages += usize::from(ruled);
    }
    census
}

fn rule_names(rules: &DynamicMessage, prefix: &str, out: &mut Vec<String>) {
    for (field, value) in rules.fields() {
        let name = format!("{prefix}{}", field.name());
        match value {
            // A duration's or timestamp's bound is one rule, not its seconds and nanos.
            Value::Message(inner) if !inner.descriptor().full_name().starts_with("google.") => {
                rule_names(inner, &format!("{name}."), out)
            }
            _ => out.push(name),
        }
    }
}

fn pattern_compiles(rules: &DynamicMessage) -> bool {
    let Ok(rules) = rules.transcode_to::<pgv::FieldRules>() else {
        return false;
    };
    let pattern = match rules.r#type {
        Some(RuleType::String(s)) => s.pattern,
        Some(RuleType::Bytes(b)) => b.pattern,
        Some(RuleType::Repeated(r)) => match r.items.and_then(|i| i.r#type) {
            Some(RuleType::String(s)) => s.pattern,
            _ => None,
        },
        _ => None,
    };
    pattern.is_none_or(|p| regex::Regex::new(&whole(&p)).is_ok())
}

#[cfg(test)]
mod tests;
