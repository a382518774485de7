//! Writing responses: `DiscoveryResponse` on the wire, assembled from each resource's
//! pre-encoded `Any` (encoded once per snapshot, in `Resource::any`) instead of building and
//! encoding a prost `DiscoveryResponse` per client.
//!
//! [`WireResponse`] encodes exactly as `envoy.service.discovery.v3.DiscoveryResponse` does
//! (fields 1, 2, 4, 5, 6; `canary` and `resource_errors` are never set); a test checks that
//! the generated type decodes it to the same message. It is encode-only.

use std::sync::Arc;

use bytes::{Buf, BufMut};
use prost::encoding::{self, DecodeContext, WireType};
use prost::DecodeError;

use crate::protocol::Response;
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
        }
    }

    fn control_plane_len(&self) -> usize {
        string_len(IDENTIFIER, &self.control_plane)
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
            encoding::encode_key(RESOURCES, WireType::LengthDelimited, buf);
            encoding::encode_varint(r.any.len() as u64, buf);
            buf.put_slice(&r.any);
        }
        put_string(TYPE_URL, self.type_url, buf);
        put_string(NONCE, &self.nonce, buf);
        if !self.control_plane.is_empty() {
            encoding::encode_key(CONTROL_PLANE, WireType::LengthDelimited, buf);
            encoding::encode_varint(self.control_plane_len() as u64, buf);
            put_string(IDENTIFIER, &self.control_plane, buf);
        }
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
            .map(|r| {
                encoding::key_len(RESOURCES)
                    + encoding::encoded_len_varint(r.any.len() as u64)
                    + r.any.len()
            })
            .sum();
        let control_plane = if self.control_plane.is_empty() {
            0
        } else {
            let inner = self.control_plane_len();
            encoding::key_len(CONTROL_PLANE) + encoding::encoded_len_varint(inner as u64) + inner
        };
        string_len(VERSION_INFO, &self.version_info)
            + resources
            + string_len(TYPE_URL, self.type_url)
            + string_len(NONCE, &self.nonce)
            + control_plane
    }

    fn clear(&mut self) {
        *self = WireResponse::default();
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
