use super::*;
use envoy_types::pb::envoy::config::cluster::v3::{cluster, Cluster};
use envoy_types::pb::google::protobuf::Duration;
use prost_reflect::prost_types::{
    field_descriptor_proto::{Label, Type},
    DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet,
};
use prost_reflect::{DynamicMessage, Kind};

/// The set the `envoy-types` structs were generated from (see build.rs).
static ENVOY_TYPES_SET: &[u8] = include_bytes!(env!("SWITCHYARD_ENVOY_TYPES_SET"));

#[test]
fn the_discovery_messages_are_in_the_pool() {
    for name in [
        "envoy.service.discovery.v3.DiscoveryRequest",
        "envoy.service.discovery.v3.DiscoveryResponse",
        "envoy.service.discovery.v3.DeltaDiscoveryRequest",
        "envoy.service.status.v3.ClientStatusRequest",
    ] {
        assert!(message_named(name).is_some(), "{name}");
    }
}

#[test]
fn every_resource_type_is_in_the_pool() {
    for t in ResourceType::ALL {
        assert_eq!(message(t).full_name(), t.message_name());
    }
    // Envoy's whole API: several hundred files.
    assert!(pool().files().count() > 500);
}

/// The API is Envoy 1.40's, with all of cncf/xds and udpa: fields and types the
/// envoy-types 0.7.7 set lacked.
#[test]
fn the_pool_is_envoy_1_40s_api() {
    assert_eq!(ENVOY_API_VERSION, "1.40.0");
    for (message, field) in [
        ("envoy.config.core.v3.HealthCheck", "name"),
        (
            "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "record_route_resolution_stats",
        ),
        (
            "envoy.extensions.filters.http.basic_auth.v3.BasicAuth",
            "realm",
        ),
        ("envoy.extensions.filters.http.lua.v3.Lua", "shared_vm_id"),
        (
            "envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
            "clear_route_cache_headers",
        ),
    ] {
        let descriptor = message_named(message).unwrap_or_else(|| panic!("{message}"));
        assert!(
            descriptor.get_field_by_name(field).is_some(),
            "{message}.{field}"
        );
    }
    for name in [
        "xds.type.matcher.v3.CelMatcher",
        "xds.type.matcher.v3.IPMatcher",
        "xds.type.matcher.v3.ServerNameMatcher",
        "xds.type.matcher.v3.Int32RangeMatcher",
        "xds.type.matcher.v3.HttpAttributesCelMatchInput",
        "xds.type.v3.TypedStruct",
        "udpa.type.v1.TypedStruct",
        "xds.core.v3.ResourceName",
    ] {
        assert!(message_named(name).is_some(), "{name}");
    }
    // Every cncf/xds and udpa file imports only what the pool has (the pool decoded).
    let xds = pool()
        .files()
        .filter(|f| f.name().starts_with("xds/") || f.name().starts_with("udpa/"))
        .count();
    assert!(xds >= 34, "{xds} cncf/xds and udpa files");
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
    let dynamic =
        DynamicMessage::decode(message(ResourceType::Cluster), bytes.as_slice()).expect("decodes");
    assert_eq!(dynamic.encode_to_vec(), bytes);
    let json = serde_json::to_value(&dynamic).expect("serializes");
    assert_eq!(json["type"], "EDS");
    assert_eq!(json["connectTimeout"], "5s");
}

/// A field's wire shape: number, type (with the message or enum it names) and label.
fn shape(field: &prost_reflect::FieldDescriptor) -> (u32, String, &'static str) {
    let kind = match field.kind() {
        Kind::Message(m) => format!("message {}", m.full_name()),
        Kind::Enum(e) => format!("enum {}", e.full_name()),
        other => format!("{other:?}"),
    };
    let label = if field.is_map() {
        "map"
    } else if field.is_list() {
        "repeated"
    } else {
        "singular"
    };
    (field.number(), kind, label)
}

/// The messages Switchyard decodes or encodes with envoy-types' generated structs (the
/// discovery requests and responses, nodes, CSDS, the resource types the tests and the load
/// generator build) agree with Envoy 1.40's pool, at any depth: every field of the
/// generated struct has the same number, type and label in the pool. A field Envoy added
/// since is only in the pool: prost skips it as unknown, which is what the server wants of
/// fields it does not read.
#[test]
fn generated_structs_agree_with_the_pool() {
    let generated = DescriptorPool::decode(ENVOY_TYPES_SET).expect("envoy-types' set decodes");
    let mut roots: Vec<String> = [
        "envoy.service.discovery.v3.DiscoveryRequest",
        "envoy.service.discovery.v3.DiscoveryResponse",
        "envoy.service.discovery.v3.DeltaDiscoveryRequest",
        "envoy.service.discovery.v3.DeltaDiscoveryResponse",
        "envoy.service.discovery.v3.Resource",
        "envoy.service.status.v3.ClientStatusRequest",
        "envoy.service.status.v3.ClientStatusResponse",
        "envoy.admin.v3.ClientResourceStatus",
        "google.rpc.Status",
    ]
    .map(String::from)
    .to_vec();
    roots.extend(ResourceType::ALL.map(|t| t.message_name().to_string()));
    let mut seen = std::collections::BTreeSet::new();
    let mut problems = Vec::new();
    while let Some(name) = roots.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let Some(old) = generated.get_message_by_name(&name) else {
            // An enum root, or a message envoy-types does not have (nothing decodes it).
            continue;
        };
        let Some(new) = pool().get_message_by_name(&name) else {
            problems.push(format!("{name}: not in Envoy {ENVOY_API_VERSION}'s API"));
            continue;
        };
        for field in old.fields() {
            if let Kind::Message(m) = field.kind() {
                roots.push(m.full_name().to_string());
            }
            match new.get_field(field.number()) {
                None => problems.push(format!(
                    "{name}.{} (#{}): gone from Envoy {ENVOY_API_VERSION}'s API",
                    field.name(),
                    field.number()
                )),
                Some(now) if shape(&now) != shape(&field) => problems.push(format!(
                    "{name}.{}: {:?} in envoy-types, {:?} in the pool",
                    field.name(),
                    shape(&field),
                    shape(&now)
                )),
                Some(_) => {}
            }
        }
    }
    assert!(seen.len() > 300, "walked {} messages", seen.len());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A one-file descriptor set: `package` with one message `name` of one string field.
fn one_message_set(file: &str, package: &str, name: &str) -> Vec<u8> {
    FileDescriptorSet {
        file: vec![FileDescriptorProto {
            name: Some(file.into()),
            package: Some(package.into()),
            syntax: Some("proto3".into()),
            message_type: vec![DescriptorProto {
                name: Some(name.into()),
                field: vec![FieldDescriptorProto {
                    name: Some("greeting".into()),
                    json_name: Some("greeting".into()),
                    number: Some(1),
                    label: Some(Label::Optional as i32),
                    r#type: Some(Type::String as i32),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

#[test]
fn a_descriptor_set_adds_its_types() {
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("acme.pb");
    std::fs::write(
        &set,
        one_message_set("acme/hello.proto", "acme.v1", "Hello"),
    )
    .unwrap();
    let pool = with_sets(built_in(), &[set]).expect("adds");
    assert!(pool.get_message_by_name("acme.v1.Hello").is_some());
    assert!(pool
        .get_message_by_name("envoy.config.cluster.v3.Cluster")
        .is_some());
}

#[test]
fn a_descriptor_set_that_redefines_a_built_in_type_names_both_files() {
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("clash.pb");
    std::fs::write(
        &set,
        one_message_set("mine/cluster.proto", "envoy.config.cluster.v3", "Cluster"),
    )
    .unwrap();
    let err = with_sets(built_in(), std::slice::from_ref(&set)).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, DescriptorError::Clash { .. }), "{text}");
    assert!(text.contains("clash.pb"), "{text}");
    assert!(text.contains("mine/cluster.proto"), "{text}");
    assert!(
        text.contains("envoy/config/cluster/v3/cluster.proto"),
        "{text}"
    );
    assert!(text.contains("envoy.config.cluster.v3.Cluster"), "{text}");
}

#[test]
fn two_descriptor_sets_defining_one_type_name_both() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.pb");
    let b = dir.path().join("b.pb");
    std::fs::write(&a, one_message_set("a/hello.proto", "acme.v1", "Hello")).unwrap();
    std::fs::write(&b, one_message_set("b/hello.proto", "acme.v1", "Hello")).unwrap();
    let text = with_sets(built_in(), &[a, b]).unwrap_err().to_string();
    assert!(
        text.contains("a/hello.proto") && text.contains("b/hello.proto"),
        "{text}"
    );
    assert!(text.contains("a.pb") && text.contains("b.pb"), "{text}");
}

#[test]
fn a_built_in_file_in_a_descriptor_set_is_skipped() {
    // `protoc --include_imports` copies the imported Envoy and Google files in: the built-in
    // ones win, whatever the copy says.
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("imports.pb");
    std::fs::write(
        &set,
        one_message_set("google/protobuf/any.proto", "google.protobuf", "Any"),
    )
    .unwrap();
    let pool = with_sets(built_in(), &[set]).expect("skips the copy");
    assert_eq!(
        pool.get_message_by_name("google.protobuf.Any")
            .unwrap()
            .fields()
            .count(),
        2
    );
}

#[test]
fn a_bad_descriptor_set_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pb");
    let text = with_sets(built_in(), &[missing]).unwrap_err().to_string();
    assert!(
        text.contains("missing.pb") && text.contains("cannot read"),
        "{text}"
    );

    let garbage = dir.path().join("garbage.pb");
    std::fs::write(&garbage, b"clusters: []\n").unwrap();
    let text = with_sets(built_in(), &[garbage]).unwrap_err().to_string();
    assert!(
        text.contains("garbage.pb") && text.contains("FileDescriptorSet"),
        "{text}"
    );

    let empty = dir.path().join("empty.pb");
    std::fs::write(&empty, b"").unwrap();
    let text = with_sets(built_in(), &[empty]).unwrap_err().to_string();
    assert!(text.contains("holds no files"), "{text}");
}
