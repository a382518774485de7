//! One list item to its Envoy protobuf: mapped through the descriptor pool (proto3 JSON),
//! checked against Envoy's field rules, encoded once (with its forms without secrets), and
//! given a content-hash version, its references, TTL and aliases.
//!
//! Must not: look at other resources (references are checked in `loader`).

use std::path::Path;

use prost_reflect::{DeserializeOptions, DynamicMessage};

use super::hash::content_hash;
use super::keys::{parse_ttl, vhds_aliases, TTL_KEY};
use super::secret_files::{self, Filled};
use super::{checks, descriptors, json, references, rules, sensitive, ConfigError};
use crate::resource::{Resource, ResourceType};

/// Map one list item to its protobuf, encode it once and hash it.
pub(super) fn decode_resource(
    path: &Path,
    kind: ResourceType,
    index: usize,
    item: &serde_yaml::Value,
    envoy_rules: bool,
    secret_files: &mut Vec<std::path::PathBuf>,
) -> Result<(Resource, Option<Filled>), ConfigError> {
    // Name the resource in errors by the name the item gives (in either spelling), even when
    // it does not decode.
    let claimed = item
        .get(kind.name_field())
        .or_else(|| {
            let field = descriptors::message(kind).get_field_by_name(kind.name_field())?;
            item.get(field.json_name())
        })
        .and_then(|v| v.as_str());
    let label = match claimed {
        Some(name) => format!("{}[{index}] {name:?}", kind.file_key()),
        None => format!("{}[{index}]", kind.file_key()),
    };
    let error = |field: String, message: String| ConfigError::Resource {
        path: path.to_path_buf(),
        resource: label.clone(),
        field,
        message,
        at: None,
    };

    let mut item = item.clone();
    let beside = take_beside(kind, &mut item).map_err(|(field, m)| error(field, m))?;
    // `switchyard_files` beside a secret's fields: PEM files on this host, read and written
    // into the secret inline before it is decoded.
    let filled = match kind {
        ResourceType::Secret => secret_files::fill(
            &mut item,
            claimed.unwrap_or_default(),
            std::time::SystemTime::now(),
            secret_files,
        )
        .map_err(|(field, message)| error(field, message))?,
        _ => None,
    };
    let message = decode_message(kind, item, &error)?;
    let name = match beside.name {
        Some(name) => name,
        None => message
            .get_field_by_name(kind.name_field())
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
    };
    check_name(kind, &name).map_err(|m| error(kind.name_field().into(), m))?;
    // Envoy's own field rules: what every proxy would NACK stops here, with its words.
    let mut regex_program = None;
    if envoy_rules {
        rules::check(&message).map_err(|v| error(v.path.clone(), v.to_string()))?;
        // And what Envoy refuses in its C++ code, beyond the field rules.
        regex_program =
            checks::check(&message).map_err(|r| error(r.path.clone(), r.to_string()))?;
    }
    let resource = encode(kind, name, message, beside.ttl)
        .map_err(|(field, m)| error(field, m))?
        .with_regex_program(regex_program);
    Ok((resource, filled))
}

/// What Switchyard's own keys beside a resource's fields say, taken out of the item before
/// it is decoded as the message.
struct Beside {
    /// A type whose message has no name field (LEDS's LbEndpoint, P34) is named by
    /// Switchyard's key beside its fields.
    name: Option<String>,
    /// `ttl` (no resource type has a field of that name; a test checks).
    ttl: Option<std::time::Duration>,
}

/// Take Switchyard's keys out of `item`; or the field and what is wrong with it.
fn take_beside(
    kind: ResourceType,
    item: &mut serde_yaml::Value,
) -> Result<Beside, (String, String)> {
    let named_beside = descriptors::message(kind)
        .get_field_by_name(kind.name_field())
        .is_none();
    let name = if named_beside {
        item.as_mapping_mut()
            .and_then(|m| m.remove(kind.name_field()))
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| (kind.name_field().into(), "must be a string".into()))
            })
            .transpose()?
    } else {
        None
    };
    let ttl = match item.as_mapping_mut().and_then(|m| m.remove(TTL_KEY)) {
        None => None,
        Some(value) => Some(parse_ttl(&value).map_err(|message| (TTL_KEY.into(), message))?),
    };
    Ok(Beside { name, ttl })
}

/// The item as its type's message (proto3 JSON through the descriptor pool); an error names
/// the field where decoding stopped, with a hint for the usual mistakes, and never shows
/// the value of a sensitive field.
fn decode_message(
    kind: ResourceType,
    item: serde_yaml::Value,
    error: &impl Fn(String, String) -> ConfigError,
) -> Result<DynamicMessage, ConfigError> {
    let mut track = serde_path_to_error::Track::new();
    let descriptor = descriptors::message(kind);
    json::from_value(
        &descriptor,
        item,
        |item| {
            DynamicMessage::deserialize_with_options(
                descriptor.clone(),
                serde_path_to_error::Deserializer::new(item, &mut track),
                &DeserializeOptions::new(),
            )
            .map_err(|e| {
                let path = track.path();
                let mut message = e.to_string();
                if message.starts_with("invalid type: boolean") {
                    message.push_str(
                        " (Envoy's YAML reads a plain yes, no, on, off, y or n as a boolean: \
                     quote it for a string, \"y\")",
                    );
                }
                if message.starts_with("message '") && message.ends_with("' not found") {
                    message.push_str(
                        ": not a type of Envoy's API; a custom or contrib extension's type needs \
                     its descriptors (--descriptor-set)",
                    );
                }
                if sensitive::at_sensitive(descriptor.clone(), item, &path) {
                    message = sensitive::hidden(&message);
                } else if let Some((field, said)) =
                    super::suggest::explain(&descriptor, item, &path, &message)
                {
                    return error(field, said);
                }
                error(path.to_string(), message)
            })
        },
        error,
    )
}

/// A resource's name: present, and (P35) a well-formed xdstp name of this type when it is
/// one; an LbEndpoint's (P34) always is one.
fn check_name(kind: ResourceType, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!(
            "missing `{}`: every resource needs a name",
            kind.name_field()
        ));
    }
    crate::resource::xdstp::check_resource_name(kind.message_name(), name)
        .map_err(|e| e.to_string())?;
    if kind == ResourceType::LbEndpoint && !name.starts_with(crate::resource::xdstp::SCHEME) {
        return Err(format!(
            "{name:?}: an LbEndpoint (LEDS) is named by an xdstp URL in its collection, \
             xdstp://AUTHORITY/envoy.config.endpoint.v3.LbEndpoint/COLLECTION/ID"
        ));
    }
    Ok(())
}

/// The checked message as a resource: encoded once (with its forms without secret
/// material), versioned by its content and TTL, with its references and aliases.
fn encode(
    kind: ResourceType,
    name: String,
    message: DynamicMessage,
    ttl: Option<std::time::Duration>,
) -> Result<Resource, (String, String)> {
    // Versions hash the canonical JSON, not the bytes: map fields (Struct metadata, runtime
    // layers) encode in HashMap order, which differs between processes, while serde_json's
    // map is sorted. So the same files give the same versions in every process.
    let json = json::to_json(&message).map_err(|e| {
        (
            ".".to_string(),
            format!("cannot be represented as JSON: {e}"),
        )
    })?;
    let canonical = serde_json::to_vec(&json).map_err(|e| (".".to_string(), e.to_string()))?;
    // The TTL is part of the version: changing it re-sends the resource (P25).
    let ttl_text = ttl.map(|t| t.as_millis().to_string()).unwrap_or_default();
    let version = content_hash([canonical.as_slice(), ttl_text.as_bytes()]);
    let warms_with = match kind {
        ResourceType::Cluster => references::eds_service_name(&name, &json),
        _ => None,
    };
    let aliases = match kind {
        ResourceType::VirtualHost => {
            vhds_aliases(&name, &json).map_err(|m| ("name".to_string(), m))?
        }
        _ => Vec::new(),
    };
    let references = references::of(kind, &name, &json, warms_with.as_deref());
    // Each resource's forms without secret material are encoded once, here, like the
    // resource itself.
    let without = |audience| {
        let mut copy = message.clone();
        crate::config::redact::redact(&mut copy, audience)
            .then(|| prost::Message::encode_to_vec(&copy))
    };
    let (for_proxy, for_operator) = (
        without(crate::config::redact::Audience::Proxy),
        without(crate::config::redact::Audience::Operator),
    );
    let body = prost::Message::encode_to_vec(&message);
    Ok(Resource::new(kind, name, version, body, warms_with)
        .with_ttl(ttl)
        .with_aliases(aliases)
        .with_references(references)
        .with_redactions(for_proxy, for_operator))
}
