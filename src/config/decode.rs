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

    // `ttl` sits beside the resource's own fields (no resource type has a field of that
    // name; a test checks): take it out before the item is decoded as the message.
    let mut item = item.clone();
    // A type whose message has no name field (LEDS's LbEndpoint, P34) is named by
    // Switchyard's key beside its fields, taken out before it is decoded.
    let named_beside = descriptors::message(kind)
        .get_field_by_name(kind.name_field())
        .is_none();
    let beside = if named_beside {
        item.as_mapping_mut()
            .and_then(|m| m.remove(kind.name_field()))
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| error(kind.name_field().into(), "must be a string".into()))
            })
            .transpose()?
    } else {
        None
    };
    let ttl = match item.as_mapping_mut().and_then(|m| m.remove(TTL_KEY)) {
        None => None,
        Some(value) => Some(parse_ttl(&value).map_err(|message| error(TTL_KEY.into(), message))?),
    };

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

    let mut track = serde_path_to_error::Track::new();
    let descriptor = descriptors::message(kind);
    let message = json::from_value(
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
    )?;

    let name = match beside {
        Some(name) => name,
        None => message
            .get_field_by_name(kind.name_field())
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
    };
    if name.is_empty() {
        return Err(error(
            kind.name_field().into(),
            format!(
                "missing `{}`: every resource needs a name",
                kind.name_field()
            ),
        ));
    }
    // P35: an xdstp name must be well formed, of this type, and canonical.
    crate::resource::xdstp::check_resource_name(kind.message_name(), &name)
        .map_err(|e| error(kind.name_field().into(), e.to_string()))?;
    // P34: an LbEndpoint is a member of a glob collection, so its name is an xdstp URL.
    if kind == ResourceType::LbEndpoint && !name.starts_with(crate::resource::xdstp::SCHEME) {
        return Err(error(
            kind.name_field().into(),
            format!(
                "{name:?}: an LbEndpoint (LEDS) is named by an xdstp URL in its collection, \
                 xdstp://AUTHORITY/envoy.config.endpoint.v3.LbEndpoint/COLLECTION/ID"
            ),
        ));
    }
    // Envoy's own field rules: what every proxy would NACK stops here, with its words.
    let mut regex_program = None;
    if envoy_rules {
        rules::check(&message).map_err(|v| error(v.path.clone(), v.to_string()))?;
        // And what Envoy refuses in its C++ code, beyond the field rules.
        regex_program =
            checks::check(&message).map_err(|r| error(r.path.clone(), r.to_string()))?;
    }
    // Versions hash the canonical JSON, not the bytes: map fields (Struct metadata, runtime
    // layers) encode in HashMap order, which differs between processes, while serde_json's
    // map is sorted. So the same files give the same versions in every process.
    let json = json::to_json(&message)
        .map_err(|e| error(".".into(), format!("cannot be represented as JSON: {e}")))?;
    let canonical = serde_json::to_vec(&json).map_err(|e| error(".".into(), e.to_string()))?;
    // The TTL is part of the version: changing it re-sends the resource (P25).
    let ttl_text = ttl.map(|t| t.as_millis().to_string()).unwrap_or_default();
    let version = content_hash([canonical.as_slice(), ttl_text.as_bytes()]);
    let warms_with = match kind {
        ResourceType::Cluster => references::eds_service_name(&name, &json),
        _ => None,
    };
    let aliases = match kind {
        ResourceType::VirtualHost => {
            vhds_aliases(&name, &json).map_err(|m| error("name".into(), m))?
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
    let resource = Resource::new(kind, name, version, body, warms_with)
        .with_ttl(ttl)
        .with_aliases(aliases)
        .with_references(references)
        .with_redactions(for_proxy, for_operator)
        .with_regex_program(regex_program);
    Ok((resource, filled))
}
