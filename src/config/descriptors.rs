//! The protobuf descriptor pool behind the YAML/JSON mapping.
//!
//! Owns: decoding the descriptor set that `build.rs` selected (the one `envoy-types` was
//! generated from) into a process-wide [`DescriptorPool`]. Must not: know about files.

use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, MessageDescriptor};

use crate::resource::ResourceType;

static DESCRIPTOR_SET: &[u8] = include_bytes!(env!("SWITCHYARD_DESCRIPTOR_SET"));

/// The `envoy-types` version whose descriptors are compiled in.
pub const ENVOY_TYPES_VERSION: &str = env!("SWITCHYARD_ENVOY_TYPES_VERSION");

/// The process-wide pool of every Envoy, xDS and Google message.
pub fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        // The set is compiled into the binary and checked by the tests below; failing to
        // decode it is a build defect, not something a user can cause.
        DescriptorPool::decode(DESCRIPTOR_SET)
            .expect("the compiled-in Envoy descriptor set decodes (see build.rs)")
    })
}

/// The message descriptor of a resource type.
pub fn message(kind: ResourceType) -> MessageDescriptor {
    pool()
        .get_message_by_name(kind.message_name())
        .expect("every served resource type is in the descriptor set (tested)")
}

/// A resource's proto3 canonical JSON, decoded from `body` (one of its encoded forms: whole,
/// or without secrets). `None` only if the bytes do not decode as their type (never for what
/// the loader encoded from this pool).
pub fn resource_json(
    resource: &crate::resource::Resource,
    body: &bytes::Bytes,
) -> Option<serde_json::Value> {
    let message =
        prost_reflect::DynamicMessage::decode(message(resource.kind), body.clone()).ok()?;
    serde_json::to_value(&message).ok()
}

/// The descriptor of a message by full name (`envoy.service.discovery.v3.DiscoveryRequest`).
pub fn message_named(name: &str) -> Option<MessageDescriptor> {
    pool().get_message_by_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::cluster::v3::{cluster, Cluster};
    use envoy_types::pb::google::protobuf::Duration;
    use prost::Message;
    use prost_reflect::DynamicMessage;

    #[test]
    fn the_discovery_messages_are_in_the_pool() {
        for name in [
            "envoy.service.discovery.v3.DiscoveryRequest",
            "envoy.service.discovery.v3.DiscoveryResponse",
        ] {
            assert!(message_named(name).is_some(), "{name}");
        }
    }

    #[test]
    fn every_resource_type_is_in_the_pool() {
        for t in ResourceType::ALL {
            assert_eq!(message(t).full_name(), t.message_name());
        }
        // The whole envoy-types set: several hundred files.
        assert!(pool().files().count() > 500);
    }

    #[test]
    fn pool_agrees_with_generated_types_on_the_wire() {
        // Bytes from the generated prost type decode through the pool and encode back to the
        // same bytes: field numbers and types agree.
        let cluster = Cluster {
            name: "c1".into(),
            connect_timeout: Some(Duration {
                seconds: 5,
                nanos: 0,
            }),
            cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(
                cluster::DiscoveryType::Eds as i32,
            )),
            ..Default::default()
        };
        let bytes = cluster.encode_to_vec();
        let dynamic = DynamicMessage::decode(message(ResourceType::Cluster), bytes.as_slice())
            .expect("decodes");
        assert_eq!(dynamic.encode_to_vec(), bytes);
        let json = serde_json::to_value(&dynamic).expect("serializes");
        assert_eq!(json["type"], "EDS");
        assert_eq!(json["connectTimeout"], "5s");
    }
}
