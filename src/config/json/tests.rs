use super::*;

fn route_descriptor() -> MessageDescriptor {
    descriptors::message_named("envoy.config.route.v3.RouteConfiguration").unwrap()
}

fn read(descriptor: &MessageDescriptor, yaml: &str) -> Result<DynamicMessage, String> {
    let json: serde_json::Value = serde_yaml::from_str(yaml).expect("yaml");
    from_json(descriptor, &json).map_err(|e| e.to_string())
}

const EMPTY_ANY_ROUTE: &str = r#"
name: r
virtual_hosts:
- name: v
  domains: ["*"]
  typed_per_filter_config:
    envoy.filters.http.ext_proc:
      "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
      config: {}
"#;

/// Protobuf's JSON mapping (and Envoy) read `{}` as an Any with no type and no value: the
/// field is present, empty. On the wire that is field 1 of FilterConfig with length 0.
#[test]
fn an_empty_any_is_an_any_with_nothing_in_it() {
    let message = read(&route_descriptor(), EMPTY_ANY_ROUTE).expect("reads");
    let json = to_json(&message).expect("writes");
    let filter = &json["virtualHosts"][0]["typedPerFilterConfig"]["envoy.filters.http.ext_proc"];
    assert_eq!(
        filter["@type"],
        "type.googleapis.com/envoy.config.route.v3.FilterConfig"
    );
    assert_eq!(filter["config"], serde_json::json!({}));
    // The FilterConfig payload inside the outer Any: `config` (field 1) present and empty.
    let vh = message.get_field_by_name("virtual_hosts").unwrap();
    let vh = vh.as_list().unwrap()[0].as_message().unwrap().clone();
    let map = vh.get_field_by_name("typed_per_filter_config").unwrap();
    let any = map
        .as_map()
        .unwrap()
        .values()
        .next()
        .unwrap()
        .as_message()
        .unwrap()
        .clone();
    let payload = any
        .get_field_by_number(2)
        .unwrap()
        .as_bytes()
        .unwrap()
        .clone();
    assert_eq!(payload.as_ref(), &[0x0a, 0x00]);
    // And JSON that says `{}` reads back to the same message.
    let again = from_json(&route_descriptor(), &json).expect("reads its own JSON");
    assert_eq!(
        prost::Message::encode_to_vec(&again),
        prost::Message::encode_to_vec(&message)
    );
}

#[test]
fn an_empty_any_as_a_typed_config_is_empty_too() {
    let listener =
        descriptors::message_named("envoy.config.listener.v3.Listener").expect("the Listener type");
    let message = read(
        &listener,
        "name: l\nfilter_chains: [{filters: [{name: f, typed_config: {}}]}]\n",
    )
    .expect("reads");
    let json = to_json(&message).unwrap();
    assert_eq!(
        json["filterChains"][0]["filters"][0]["typedConfig"],
        serde_json::json!({})
    );
}

/// Envoy reads enums with protobuf's case_insensitive_enum_parsing: a name that is not the
/// enum's, upper-cased, is (`strict_dns`, `round_robin`). Checked against Envoy by
/// tests/json_envoy.rs.
#[test]
fn an_enum_name_in_lower_case_is_its_upper_case_name() {
    let cluster = descriptors::message_named("envoy.config.cluster.v3.Cluster").unwrap();
    let message = read(
        &cluster,
        "name: c\ntype: strict_dns\nlb_policy: Round_Robin\n",
    )
    .expect("reads");
    let json = to_json(&message).unwrap();
    assert_eq!(json["type"], "STRICT_DNS");
    assert!(
        json.get("lbPolicy").is_none(),
        "ROUND_ROBIN is the default: {json}"
    );
    let message = read(&cluster, "name: c\nlb_policy: least_request\n").unwrap();
    assert_eq!(to_json(&message).unwrap()["lbPolicy"], "LEAST_REQUEST");
    // A name that is no name of the enum in any case is still an error.
    let err = read(&cluster, "name: c\ntype: strictdns\n").unwrap_err();
    assert!(err.contains("strictdns"), "{err}");
}

/// Envoy reads a single value where a repeated field wants a list as a list of one.
#[test]
fn a_single_value_for_a_list_is_a_list_of_one() {
    let message = read(
        &route_descriptor(),
        "name: r\nvirtual_hosts:\n  name: v\n  domains: \"*\"\n",
    )
    .expect("reads");
    let json = to_json(&message).unwrap();
    assert_eq!(json["virtualHosts"][0]["domains"], serde_json::json!(["*"]));
    // Inside an Any too.
    let listener =
        descriptors::message_named("envoy.config.listener.v3.Listener").expect("the Listener type");
    let message = read(
        &listener,
        r#"
name: l
filter_chains:
  filters:
    name: envoy.filters.network.http_connection_manager
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      stat_prefix: s
      codec_type: http2
      http_filters:
        name: envoy.filters.http.router
"#,
    )
    .expect("reads");
    let json = to_json(&message).unwrap();
    let hcm = &json["filterChains"][0]["filters"][0]["typedConfig"];
    assert_eq!(hcm["codecType"], "HTTP2");
    assert_eq!(hcm["httpFilters"][0]["name"], "envoy.filters.http.router");
}

/// What the leniencies leave alone: free-form Struct values keep their case and shape, and
/// a message JSON already right is untouched.
#[test]
fn free_form_values_are_left_as_written() {
    let cluster = descriptors::message_named("envoy.config.cluster.v3.Cluster").unwrap();
    let message = read(
        &cluster,
        "name: c\nmetadata: {filter_metadata: {acme: {type: strict_dns, list: one}}}\n",
    )
    .unwrap();
    let json = to_json(&message).unwrap();
    assert_eq!(
        json["metadata"]["filterMetadata"]["acme"],
        serde_json::json!({"type": "strict_dns", "list": "one"})
    );
}
