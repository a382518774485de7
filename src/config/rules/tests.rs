//! The rule checker without Envoy (tests/rules_envoy.rs holds the corpus checked against
//! the real Envoy 1.40).

use super::*;
use crate::resource::ResourceType;

/// Decode `json` as a resource of `kind` (the loader's mapping) and check it.
fn check_json(kind: ResourceType, json: serde_json::Value) -> Result<(), Violation> {
    let message = DynamicMessage::deserialize(descriptors::message(kind), json).expect("decodes");
    check(&message)
}

fn cluster(extra: serde_json::Value) -> serde_json::Value {
    let mut c = serde_json::json!({"name": "c", "connect_timeout": "1s"});
    if let (Some(c), serde_json::Value::Object(extra)) = (c.as_object_mut(), extra) {
        c.extend(extra);
    }
    c
}

#[test]
fn the_issue_example_is_caught_with_envoy_words_path_and_rule() {
    let v = check_json(
        ResourceType::Cluster,
        cluster(serde_json::json!({"connect_timeout": "0s"})),
    )
    .expect_err("connect_timeout 0s breaks duration.gt");
    assert_eq!(v.path, "connect_timeout");
    assert_eq!(v.rule, "duration.gt");
    assert_eq!(
        v.envoy,
        "ClusterValidationError.ConnectTimeout: value must be greater than 0s"
    );
    assert!(v.to_string().contains(
        "Proto constraint validation failed (ClusterValidationError.ConnectTimeout: value must be \
         greater than 0s)"
    ));
}

#[test]
fn a_valid_cluster_passes() {
    check_json(ResourceType::Cluster, cluster(serde_json::json!({}))).expect("valid");
}

#[test]
fn nested_paths_name_list_indices_and_map_keys() {
    let v = check_json(
        ResourceType::Cluster,
        cluster(serde_json::json!({"load_assignment": {"cluster_name": "c", "endpoints": [
            {"lb_endpoints": [{"endpoint": {"address": {"socket_address":
                {"address": "a", "port_value": 1}}}},
              {"endpoint": {"address": {"socket_address": {"address": "a", "port_value": 70000}}}}]}]}})),
    )
    .expect_err("port over 65535");
    assert_eq!(
        v.path,
        "load_assignment.endpoints[0].lb_endpoints[1].endpoint.address.socket_address.port_value"
    );
    assert!(v.envoy.starts_with(
        "ClusterValidationError.LoadAssignment: embedded message failed validation | caused by \
         ClusterLoadAssignmentValidationError.Endpoints[0]: embedded message failed validation"
    ));
    assert!(v
        .envoy
        .contains("LocalityLbEndpointsValidationError.LbEndpoints[1]"));

    let v = check_json(
        ResourceType::Cluster,
        cluster(serde_json::json!({"metadata": {"filter_metadata": {"": {}}}})),
    )
    .expect_err("empty filter name");
    assert_eq!(v.path, "metadata.filter_metadata[\"\"]");
    assert_eq!(v.rule, "map.keys.string.min_len");
}

#[test]
fn any_payloads_are_checked_as_their_own_type_after_the_message() {
    let hcm = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.\
               HttpConnectionManager";
    let listener = |stat_prefix: &str, port: u32| {
        serde_json::json!({"name": "l",
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
            "filter_chains": [{"filters": [{"name": "hcm", "typed_config": {
                "@type": hcm, "stat_prefix": stat_prefix, "rds": {"route_config_name": "r",
                "config_source": {"ads": {}}}}}]}]})
    };
    let v = check_json(ResourceType::Listener, listener("", 80)).expect_err("empty stat_prefix");
    assert_eq!(
        v.path,
        "filter_chains[0].filters[0].typed_config.stat_prefix"
    );
    assert_eq!(v.envoy, "HttpConnectionManagerValidationError.StatPrefix: value length must be at least 1 characters");
    // Both broken: the listener's own rules are reported first, as Envoy's walk does.
    let v = check_json(ResourceType::Listener, listener("", 70000)).expect_err("two faults");
    assert_eq!(v.rule, "uint32.lte");
    check_json(ResourceType::Listener, listener("s", 80)).expect("valid");
}

#[test]
fn a_required_oneof_reports_its_name() {
    let v = check_json(
        ResourceType::Route,
        serde_json::json!({"name": "r", "virtual_hosts": [{"name": "v", "domains": ["*"],
            "routes": [{"match": {"prefix": "/"}}]}]}),
    )
    .expect_err("route without action");
    assert_eq!(v.rule, "oneof.required");
    assert_eq!(v.path, "virtual_hosts[0].routes[0].action");
    assert!(v
        .envoy
        .ends_with("caused by field: \"action\", reason: is required"));
}

#[test]
fn go_formats_match_the_generator() {
    assert_eq!(go_duration(0), "0s");
    assert_eq!(go_duration(1_000_000), "1ms");
    assert_eq!(go_duration(1_500_000_000), "1.5s");
    assert_eq!(go_duration(90_000_000_000), "1m30s");
    assert_eq!(go_duration(3_600_000_000_000), "1h0m0s");
    assert_eq!(go_duration(1_500), "1.5\u{b5}s");
    assert_eq!(go_float(100.0), "100");
    assert_eq!(go_float(0.5), "0.5");
    assert_eq!(go_float(1e-5), "1e-05");
    assert_eq!(go_quote("^[^\u{0}\n\r]*$"), "\"^[^\\x00\\n\\r]*$\"");
    let cluster = descriptors::message(ResourceType::Cluster);
    let field = |name: &str| cluster.get_field_by_name(name).expect("a Cluster field");
    assert_eq!(pgv_name(&field("connect_timeout")), "ConnectTimeout");
    assert_eq!(
        pgv_name(&field("http2_protocol_options")),
        "Http2ProtocolOptions"
    );
}

#[test]
fn hostnames_as_pgv_checks_them() {
    for good in ["a", "a.b", "a-b.c", "example.com.", "x1"] {
        assert!(is_hostname(good), "{good}");
    }
    for bad in [
        "-a",
        "a-",
        "a..b",
        "a_b",
        &"a".repeat(64),
        &"a.".repeat(127),
    ] {
        assert!(!is_hostname(bad), "{bad}");
    }
}

#[test]
fn ranges_name_both_bounds_and_use_pgv_words() {
    let r = Range {
        lt: None,
        lte: Some(100),
        gt: None,
        gte: Some(0),
    };
    assert_eq!(
        r.check(150, |n| n.to_string()),
        Some(("gte,lte", "value must be inside range [0, 100]".into()))
    );
    assert_eq!(r.check(50, |n| n.to_string()), None);
    let outside = Range {
        lt: Some(10),
        lte: None,
        gt: Some(20),
        gte: None,
    };
    assert_eq!(
        outside.check(15, |n| n.to_string()),
        Some(("gt,lt", "value must be outside range [10, 20]".into()))
    );
    assert_eq!(outside.check(25, |n| n.to_string()), None);
}

/// Every rule Envoy's types carry is one this checker evaluates: the census lists each
/// rule in the descriptor set, and none is left unevaluated.
#[test]
fn every_rule_in_the_descriptor_set_is_evaluated() {
    let c = census();
    eprintln!(
        "{} messages, {} fields, {} rules",
        c.messages,
        c.fields,
        c.rules.len()
    );
    assert!(c.fields > 1_000, "{} fields with rules", c.fields);
    assert!(c.unevaluated.is_empty(), "{:?}", c.unevaluated);
    let evaluated = [
        "float",
        "double",
        "int32",
        "int64",
        "uint32",
        "uint64",
        "sint32",
        "sint64",
        "fixed32",
        "fixed64",
        "sfixed32",
        "sfixed64",
        "bool",
        "string",
        "bytes",
        "enum",
        "message",
        "repeated",
        "map",
        "any",
        "duration",
        "timestamp",
    ];
    for rule in c.rules.keys() {
        let kind = rule.split('.').next().unwrap_or_default();
        assert!(evaluated.contains(&kind), "rule {rule} of an unknown kind");
    }
}
