//! Writing responses: `DiscoveryResponse` on the wire, assembled from each resource's
//! pre-encoded `Any` (encoded once per snapshot, in `Resource::any`) instead of building and
//! encoding a prost `DiscoveryResponse` per client.
//!
//! [`WireResponse`] encodes exactly as `envoy.service.discovery.v3.DiscoveryResponse` does
//! (fields 1, 2, 4, 5, 6; `canary` and `resource_errors` are never set), and
//! [`WireDeltaResponse`] as `DeltaDiscoveryResponse` (fields 1, 2, 4, 5, 6, 7) with each
//! `Resource` (fields 1, 2, 3, 4, 6); tests check that the generated types decode them to the
//! same messages, byte for byte. Both are encode-only.

use std::sync::Arc;

use bytes::{Buf, BufMut};
use prost::encoding::{self, DecodeContext, WireType};
use prost::DecodeError;

use crate::protocol::{DeltaResource, DeltaResponse, Response};
use crate::redact::Secrets;
use crate::resource::Resource;

/// A `DiscoveryResponse` whose resources are written from shared, pre-encoded bytes.
#[derive(Clone, Debug, Default)]
pub struct WireResponse {
    pub version_info: String,
    pub resources: Vec<Arc<Resource>>,
    pub type_url: &'static str,
    pub nonce: String,
    /// `control_plane.identifier`.
    pub control_plane: Arc<str>,
    /// Wrap resources with a TTL in `Resource` (P26).
    pub wrap_ttl: bool,
    /// Private key material goes out, or each resource's form without it.
    pub secrets: Secrets,
}

const VERSION_INFO: u32 = 1;
const RESOURCES: u32 = 2;
const TYPE_URL: u32 = 4;
const NONCE: u32 = 5;
const CONTROL_PLANE: u32 = 6;
/// `ControlPlane.identifier`.
const IDENTIFIER: u32 = 1;

impl WireResponse {
    pub fn new(response: Response, control_plane: Arc<str>) -> WireResponse {
        WireResponse {
            version_info: response.version,
            resources: response.resources,
            type_url: response.kind.type_url(),
            nonce: response.nonce,
            control_plane,
            wrap_ttl: response.wrap_ttl,
            secrets: Secrets::default(),
        }
    }

    /// The same, sending private key material as `secrets` says.
    pub fn with_secrets(mut self, secrets: Secrets) -> WireResponse {
        self.secrets = secrets;
        self
    }

    /// The resource wrapped with its TTL, if it goes out that way (P26).
    fn wrapped<'a>(&self, r: &'a Resource) -> Option<Wrapped<'a>> {
        let ttl = r.ttl.filter(|_| self.wrap_ttl)?;
        Some(Wrapped {
            resource: r,
            aliases: &[],
            ttl: Some(ttl),
            heartbeat: false,
            secrets: self.secrets,
        })
    }
}

fn string_len(tag: u32, value: &str) -> usize {
    if value.is_empty() {
        0
    } else {
        encoding::key_len(tag) + encoding::encoded_len_varint(value.len() as u64) + value.len()
    }
}

fn put_string(tag: u32, value: &str, buf: &mut impl BufMut) {
    if !value.is_empty() {
        encoding::encode_key(tag, WireType::LengthDelimited, buf);
        encoding::encode_varint(value.len() as u64, buf);
        buf.put_slice(value.as_bytes());
    }
}

impl prost::Message for WireResponse {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        put_string(VERSION_INFO, &self.version_info, buf);
        for r in &self.resources {
            match self.wrapped(r) {
                Some(w) => {
                    put_message_header(RESOURCES, w.any_len(), buf);
                    w.put_any(buf);
                }
                None => {
                    let any = r.any_for(self.secrets);
                    put_message_header(RESOURCES, any.len(), buf);
                    buf.put_slice(any);
                }
            }
        }
        put_string(TYPE_URL, self.type_url, buf);
        put_string(NONCE, &self.nonce, buf);
        put_control_plane(CONTROL_PLANE, &self.control_plane, buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        // Encode-only: never decoded by the server.
        encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        let resources: usize = self
            .resources
            .iter()
            .map(|r| match self.wrapped(r) {
                Some(w) => message_len(RESOURCES, w.any_len()),
                None => message_len(RESOURCES, r.any_for(self.secrets).len()),
            })
            .sum();
        string_len(VERSION_INFO, &self.version_info)
            + resources
            + string_len(TYPE_URL, self.type_url)
            + string_len(NONCE, &self.nonce)
            + control_plane_field_len(CONTROL_PLANE, &self.control_plane)
    }

    fn clear(&mut self) {
        *self = WireResponse::default();
    }
}

/// A `DeltaDiscoveryResponse` whose resources are written from shared, pre-encoded bytes.
#[derive(Clone, Debug, Default)]
pub struct WireDeltaResponse {
    pub system_version_info: String,
    pub resources: Vec<DeltaResource>,
    pub type_url: &'static str,
    pub nonce: String,
    pub removed_resources: Vec<String>,
    pub control_plane: Arc<str>,
    /// Private key material goes out, or each resource's form without it.
    pub secrets: Secrets,
}

/// `DeltaDiscoveryResponse` fields.
mod delta_field {
    pub const SYSTEM_VERSION_INFO: u32 = 1;
    pub const RESOURCES: u32 = 2;
    pub const TYPE_URL: u32 = 4;
    pub const NONCE: u32 = 5;
    pub const REMOVED_RESOURCES: u32 = 6;
    pub const CONTROL_PLANE: u32 = 7;
}

/// `envoy.service.discovery.v3.Resource` fields.
mod resource_field {
    pub const VERSION: u32 = 1;
    pub const RESOURCE: u32 = 2;
    pub const NAME: u32 = 3;
    pub const ALIASES: u32 = 4;
    pub const TTL: u32 = 6;
}

impl WireDeltaResponse {
    pub fn new(response: DeltaResponse, control_plane: Arc<str>) -> WireDeltaResponse {
        WireDeltaResponse {
            system_version_info: response.system_version,
            resources: response.resources,
            type_url: response.kind.type_url(),
            nonce: response.nonce,
            removed_resources: response.removed,
            control_plane,
            secrets: Secrets::default(),
        }
    }

    /// The same, sending private key material as `secrets` says.
    pub fn with_secrets(mut self, secrets: Secrets) -> WireDeltaResponse {
        self.secrets = secrets;
        self
    }

    fn wrapped<'a>(&self, d: &'a DeltaResource) -> Wrapped<'a> {
        Wrapped {
            resource: &d.resource,
            aliases: &d.aliases,
            ttl: d.ttl,
            heartbeat: !d.body,
            secrets: self.secrets,
        }
    }
}

/// Length of a message field with this tag and body length.
fn message_len(tag: u32, body: usize) -> usize {
    encoding::key_len(tag) + encoding::encoded_len_varint(body as u64) + body
}

fn put_message_header(tag: u32, body: usize, buf: &mut impl BufMut) {
    encoding::encode_key(tag, WireType::LengthDelimited, buf);
    encoding::encode_varint(body as u64, buf);
}

/// `google.protobuf.Duration` body length.
fn duration_len(d: std::time::Duration) -> usize {
    let (secs, nanos) = (d.as_secs() as i64, d.subsec_nanos() as i32);
    (if secs != 0 {
        encoding::int64::encoded_len(1, &secs)
    } else {
        0
    }) + (if nanos != 0 {
        encoding::int32::encoded_len(2, &nanos)
    } else {
        0
    })
}

fn put_duration(tag: u32, d: std::time::Duration, buf: &mut impl BufMut) {
    let (secs, nanos) = (d.as_secs() as i64, d.subsec_nanos() as i32);
    put_message_header(tag, duration_len(d), buf);
    if secs != 0 {
        encoding::int64::encode(1, &secs, buf);
    }
    if nanos != 0 {
        encoding::int32::encode(2, &nanos, buf);
    }
}

/// One `Resource` message: the resource, the aliases it was asked for by, its TTL, and
/// whether it is a heartbeat (name and version only).
#[derive(Clone, Copy)]
struct Wrapped<'a> {
    resource: &'a Resource,
    aliases: &'a [String],
    ttl: Option<std::time::Duration>,
    heartbeat: bool,
    secrets: Secrets,
}

impl Wrapped<'_> {
    /// Body length of the `Resource` message.
    fn len(&self) -> usize {
        let r = self.resource;
        string_len(resource_field::VERSION, &r.version)
            + if self.heartbeat {
                0
            } else {
                message_len(resource_field::RESOURCE, r.any_for(self.secrets).len())
            }
            + string_len(resource_field::NAME, &r.name)
            + self
                .aliases
                .iter()
                .map(|a| message_len(resource_field::ALIASES, a.len()))
                .sum::<usize>()
            + self
                .ttl
                .map_or(0, |t| message_len(resource_field::TTL, duration_len(t)))
    }

    /// The `Resource` message body: version, the `Any` (unless a heartbeat), name, aliases,
    /// TTL (in field order, as prost writes them).
    fn put(&self, buf: &mut impl BufMut) {
        let r = self.resource;
        put_string(resource_field::VERSION, &r.version, buf);
        if !self.heartbeat {
            let any = r.any_for(self.secrets);
            put_message_header(resource_field::RESOURCE, any.len(), buf);
            buf.put_slice(any);
        }
        put_string(resource_field::NAME, &r.name, buf);
        for alias in self.aliases {
            put_message_header(resource_field::ALIASES, alias.len(), buf);
            buf.put_slice(alias.as_bytes());
        }
        if let Some(ttl) = self.ttl {
            put_duration(resource_field::TTL, ttl, buf);
        }
    }

    /// As a SotW resource (P26): `Any { type_url: ...Resource, value: <Resource> }`.
    fn any_len(&self) -> usize {
        string_len(ANY_TYPE_URL, RESOURCE_TYPE_URL) + message_len(ANY_VALUE, self.len())
    }

    fn put_any(&self, buf: &mut impl BufMut) {
        put_string(ANY_TYPE_URL, RESOURCE_TYPE_URL, buf);
        put_message_header(ANY_VALUE, self.len(), buf);
        self.put(buf);
    }
}

/// The type URL of the `Resource` wrapper in SotW (P26).
pub const RESOURCE_TYPE_URL: &str = "type.googleapis.com/envoy.service.discovery.v3.Resource";
/// `google.protobuf.Any` fields.
const ANY_TYPE_URL: u32 = 1;
const ANY_VALUE: u32 = 2;

fn control_plane_field_len(tag: u32, control_plane: &str) -> usize {
    if control_plane.is_empty() {
        0
    } else {
        message_len(tag, string_len(IDENTIFIER, control_plane))
    }
}

fn put_control_plane(tag: u32, control_plane: &str, buf: &mut impl BufMut) {
    if !control_plane.is_empty() {
        put_message_header(tag, string_len(IDENTIFIER, control_plane), buf);
        put_string(IDENTIFIER, control_plane, buf);
    }
}

impl prost::Message for WireDeltaResponse {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        use delta_field::*;
        put_string(SYSTEM_VERSION_INFO, &self.system_version_info, buf);
        for d in &self.resources {
            let w = self.wrapped(d);
            put_message_header(RESOURCES, w.len(), buf);
            w.put(buf);
        }
        put_string(TYPE_URL, self.type_url, buf);
        put_string(NONCE, &self.nonce, buf);
        for name in &self.removed_resources {
            put_message_header(REMOVED_RESOURCES, name.len(), buf);
            buf.put_slice(name.as_bytes());
        }
        put_control_plane(CONTROL_PLANE, &self.control_plane, buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        // Encode-only: never decoded by the server.
        encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        use delta_field::*;
        string_len(SYSTEM_VERSION_INFO, &self.system_version_info)
            + self
                .resources
                .iter()
                .map(|d| message_len(RESOURCES, self.wrapped(d).len()))
                .sum::<usize>()
            + string_len(TYPE_URL, self.type_url)
            + string_len(NONCE, &self.nonce)
            + self
                .removed_resources
                .iter()
                .map(|n| message_len(REMOVED_RESOURCES, n.len()))
                .sum::<usize>()
            + control_plane_field_len(CONTROL_PLANE, &self.control_plane)
    }

    fn clear(&mut self) {
        *self = WireDeltaResponse::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::ResourceType;
    use envoy_types::pb::envoy::config::core::v3::ControlPlane;
    use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
    use envoy_types::pb::google::protobuf::Any;
    use prost::Message;

    #[test]
    fn encodes_exactly_like_the_generated_discovery_response() {
        let big = vec![9u8; 70_000]; // a length that needs a 3-byte varint
        let resources: Vec<Arc<Resource>> = [vec![], vec![1, 2, 3], big]
            .into_iter()
            .enumerate()
            .map(|(i, body)| {
                Arc::new(Resource::new(
                    ResourceType::Cluster,
                    format!("c{i}"),
                    "v",
                    body,
                    None,
                ))
            })
            .collect();
        for (version, nonce, control_plane) in [("v1", "7", "switchyard/1"), ("", "", "")] {
            let wire = WireResponse {
                version_info: version.into(),
                resources: resources.clone(),
                type_url: ResourceType::Cluster.type_url(),
                nonce: nonce.into(),
                control_plane: control_plane.into(),
                wrap_ttl: false,
                secrets: Secrets::Serve,
            };
            let expected = DiscoveryResponse {
                version_info: version.into(),
                resources: resources
                    .iter()
                    .map(|r| Any {
                        type_url: ResourceType::Cluster.type_url().into(),
                        value: r.body.to_vec(),
                    })
                    .collect(),
                type_url: ResourceType::Cluster.type_url().into(),
                nonce: nonce.into(),
                control_plane: (!control_plane.is_empty()).then(|| ControlPlane {
                    identifier: control_plane.into(),
                }),
                ..Default::default()
            };
            let bytes = wire.encode_to_vec();
            assert_eq!(bytes.len(), wire.encoded_len());
            assert_eq!(
                DiscoveryResponse::decode(bytes.as_slice()).expect("decodes"),
                expected
            );
            assert_eq!(bytes, expected.encode_to_vec(), "byte for byte");
        }
    }
}

#[cfg(test)]
mod delta_tests {
    use super::*;
    use crate::resource::ResourceType;
    use envoy_types::pb::envoy::config::core::v3::ControlPlane;
    use envoy_types::pb::envoy::service::discovery::v3::{
        DeltaDiscoveryResponse, Resource as PbResource,
    };
    use envoy_types::pb::google::protobuf::{Any, Duration as PbDuration};
    use prost::Message;
    use std::time::Duration;

    #[test]
    fn delta_encodes_exactly_like_the_generated_delta_discovery_response() {
        let big = Arc::new(Resource::new(
            ResourceType::Cluster,
            "big",
            "v9",
            vec![7u8; 70_000],
            None,
        ));
        let small = Arc::new(Resource::new(
            ResourceType::Cluster,
            "small",
            "v1",
            vec![1, 2],
            None,
        ));
        let items = vec![
            DeltaResource {
                resource: Arc::clone(&big),
                aliases: vec![],
                ttl: None,
                body: true,
            },
            DeltaResource {
                resource: Arc::clone(&small),
                aliases: vec!["a1".into(), "a2".into()],
                ttl: Some(Duration::from_millis(2500)),
                body: true,
            },
            DeltaResource {
                resource: Arc::clone(&small),
                aliases: vec![],
                ttl: Some(Duration::from_secs(30)),
                body: false,
            },
        ];
        for (version, nonce, cp, removed) in [
            (
                "sv",
                "3",
                "switchyard/1",
                vec!["gone".to_string(), "x".into()],
            ),
            ("", "", "", vec![]),
        ] {
            let wire = WireDeltaResponse {
                system_version_info: version.into(),
                resources: items.clone(),
                type_url: ResourceType::Cluster.type_url(),
                nonce: nonce.into(),
                removed_resources: removed.clone(),
                control_plane: cp.into(),
                secrets: Secrets::Serve,
            };
            let any = |r: &Resource| Any {
                type_url: ResourceType::Cluster.type_url().into(),
                value: r.body.to_vec(),
            };
            let expected = DeltaDiscoveryResponse {
                system_version_info: version.into(),
                resources: vec![
                    PbResource {
                        name: "big".into(),
                        version: "v9".into(),
                        resource: Some(any(&big)),
                        ..Default::default()
                    },
                    PbResource {
                        name: "small".into(),
                        version: "v1".into(),
                        aliases: vec!["a1".into(), "a2".into()],
                        resource: Some(any(&small)),
                        ttl: Some(PbDuration {
                            seconds: 2,
                            nanos: 500_000_000,
                        }),
                        ..Default::default()
                    },
                    PbResource {
                        name: "small".into(),
                        version: "v1".into(),
                        ttl: Some(PbDuration {
                            seconds: 30,
                            nanos: 0,
                        }),
                        ..Default::default()
                    },
                ],
                type_url: ResourceType::Cluster.type_url().into(),
                nonce: nonce.into(),
                removed_resources: removed,
                control_plane: (!cp.is_empty()).then(|| ControlPlane {
                    identifier: cp.into(),
                }),
                ..Default::default()
            };
            let bytes = wire.encode_to_vec();
            assert_eq!(bytes.len(), wire.encoded_len());
            assert_eq!(
                DeltaDiscoveryResponse::decode(bytes.as_slice()).expect("decodes"),
                expected
            );
            assert_eq!(bytes, expected.encode_to_vec(), "byte for byte");
        }
    }
}
