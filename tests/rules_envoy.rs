//! Envoy's field rules and its checks beyond them (`config::checks`) at load, checked
//! against the real Envoy 1.40: for each rule kind and each check, a resource that breaks it
//! (and resources that break nothing, near misses among them) goes through Switchyard's
//! loader and through `envoy --mode validate` with the resource as a static resource of a
//! bootstrap. The two verdicts must agree, and Envoy's error must end with the words the
//! loader reports for a field rule (Envoy's adds the bootstrap's own levels in front), or
//! contain them for a check (Envoy adds the listener's address, the duplicate match, ...).

use switchyard_testkit as support;

use std::path::Path;

use serde_json::{json, Value};
use support::envoy::envoy_binary;

const HCM: &str =
    "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const ROUTER: &str = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";

/// Where a resource goes in a snapshot file, and how a bootstrap holds it.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Cluster,
    Endpoints,
    Listener,
    Routes,
}

struct Case {
    /// The rule broken, as named in the loader's error (`None`: a valid resource).
    rule: Option<&'static str>,
    kind: Kind,
    resource: Value,
}

fn case(rule: &'static str, kind: Kind, resource: Value) -> Case {
    Case {
        rule: Some(rule),
        kind,
        resource,
    }
}

fn valid(kind: Kind, resource: Value) -> Case {
    Case {
        rule: None,
        kind,
        resource,
    }
}

fn cluster(extra: Value) -> Value {
    let mut c = json!({"name": "c", "connect_timeout": "1s", "type": "STATIC",
        "load_assignment": {"cluster_name": "c", "endpoints": [{"lb_endpoints": [
            {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 8080}}}}]}]}});
    merge(&mut c, extra);
    c
}

fn cla(lb_endpoint: Value) -> Value {
    json!({"cluster_name": "c", "endpoints": [{"lb_endpoints": [lb_endpoint]}]})
}

fn endpoint(port: u64) -> Value {
    json!({"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}}})
}

fn hcm(extra: Value) -> Value {
    let mut h = json!({"@type": HCM, "stat_prefix": "s", "route_config": routes(json!({})),
        "http_filters": [{"name": "router", "typed_config": {"@type": ROUTER}}]});
    merge(&mut h, extra);
    h
}

fn listener(extra: Value) -> Value {
    let mut l = json!({"name": "l", "address": {"socket_address": {"address": "127.0.0.1", "port_value": 10000}},
        "filter_chains": [{"filters": [{"name": "hcm", "typed_config": hcm(json!({}))}]}]});
    merge(&mut l, extra);
    l
}

fn routes(vhost_extra: Value) -> Value {
    let mut vh = json!({"name": "vh", "domains": ["*"],
        "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "c"}}]});
    merge(&mut vh, vhost_extra);
    json!({"name": "r", "virtual_hosts": [vh]})
}

/// Standard base64, as proto3 JSON writes bytes.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn merge(into: &mut Value, extra: Value) {
    if let (Some(into), Value::Object(extra)) = (into.as_object_mut(), extra) {
        for (k, v) in extra {
            into.insert(k, v);
        }
    }
}

fn corpus() -> Vec<Case> {
    use Kind::*;
    vec![
        valid(Cluster, cluster(json!({}))),
        valid(Endpoints, cla(endpoint(8080))),
        valid(Listener, listener(json!({}))),
        valid(Routes, routes(json!({}))),
        // duration.gt
        case(
            "duration.gt",
            Cluster,
            cluster(json!({"connect_timeout": "0s"})),
        ),
        // duration.gt with a bound that is not zero (dns_refresh_rate > 1ms)
        case(
            "duration.gt",
            Cluster,
            cluster(json!({"dns_refresh_rate": "0.001s"})),
        ),
        // duration.required (HealthCheck.timeout)
        case(
            "duration.required",
            Cluster,
            cluster(json!({"health_checks": [
            {"interval": "1s", "unhealthy_threshold": 1, "healthy_threshold": 1,
             "tcp_health_check": {}}]})),
        ),
        // uint32.lte, deep in an embedded message
        case("uint32.lte", Endpoints, cla(endpoint(70000))),
        // uint32.gte on a wrapper (load_balancing_weight >= 1)
        case(
            "uint32.gte",
            Endpoints,
            cla(json!({"load_balancing_weight": 0,
            "endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 1}}}})),
        ),
        // double range (Percent: [0, 100])
        case(
            "double.gte,lte",
            Cluster,
            cluster(json!({"common_lb_config": {"healthy_panic_threshold": {"value": 150.0}}})),
        ),
        // uint32.gt (max_requests_per_connection is a wrapper; per_connection_buffer_limit...)
        case(
            "uint32.gte",
            Cluster,
            cluster(json!({"lb_policy": "LEAST_REQUEST",
            "least_request_lb_config": {"choice_count": 1}})),
        ),
        // enum.defined_only
        case(
            "enum.defined_only",
            Cluster,
            cluster(json!({"lb_policy": 99})),
        ),
        // enum.not_in (health check method CONNECT)
        case(
            "enum.not_in",
            Cluster,
            cluster(json!({"health_checks": [
            {"timeout": "1s", "interval": "1s", "unhealthy_threshold": 1, "healthy_threshold": 1,
             "http_health_check": {"path": "/", "method": "CONNECT"}}]})),
        ),
        // string.min_len
        case("string.min_len", Routes, routes(json!({"name": ""}))),
        // repeated.min_items
        case("repeated.min_items", Routes, routes(json!({"domains": []}))),
        // repeated.items.string.min_len
        case(
            "repeated.items.string.min_len",
            Routes,
            routes(json!({"response_headers_to_remove": ["x", ""]})),
        ),
        // string.well_known_regex (a header name with a newline, loose)
        case(
            "string.well_known_regex",
            Routes,
            routes(json!({"routes": [{"match": {"prefix": "/",
            "headers": [{"name": "a\nb", "present_match": true}]}, "route": {"cluster": "c"}}]})),
        ),
        // string.max_bytes (a header value over 16 KiB)
        case(
            "string.max_bytes",
            Routes,
            routes(json!({"request_headers_to_add": [
            {"header": {"key": "x", "value": "v".repeat(16385)}}]})),
        ),
        // string.pattern (path_separated_prefix must not end in /)
        case(
            "string.pattern",
            Routes,
            routes(
                json!({"routes": [{"match": {"path_separated_prefix": "/a/"},
            "route": {"cluster": "c"}}]}),
            ),
        ),
        // message.required (a route without match)
        case(
            "message.required",
            Routes,
            routes(json!({"routes": [{"route": {"cluster": "c"}}]})),
        ),
        // oneof.required (a route without an action)
        case(
            "oneof.required",
            Routes,
            routes(json!({"routes": [{"match": {"prefix": "/"}}]})),
        ),
        // repeated.unique
        case(
            "repeated.unique",
            Routes,
            routes(json!({"routes": [{"match": {"prefix": "/"},
            "route": {"cluster": "c", "internal_redirect_policy": {"response_headers_to_copy": ["x", "x"]}}}]})),
        ),
        // repeated.max_items (at most 100 hash policies? retry_on? request_mirror...)
        case(
            "repeated.items.uint32.gte,lte",
            Listener,
            listener(json!({"filter_chains": [{
            "filter_chain_match": {"source_ports": [70000]},
            "filters": [{"name": "hcm", "typed_config": hcm(json!({}))}]}]})),
        ),
        // map.keys.string.min_len (metadata with an empty filter name)
        case(
            "map.keys.string.min_len",
            Cluster,
            cluster(json!({"metadata": {"filter_metadata": {"": {"a": 1}}}})),
        ),
        // any.required (a typed extension without its config)
        case(
            "any.required",
            Cluster,
            cluster(json!({"typed_dns_resolver_config": {"name": "x"}})),
        ),
        // bool.const (a listener filter's disabling predicate)
        case(
            "bool.const",
            Listener,
            listener(json!({"listener_filters": [{"name": "tls",
            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"},
            "filter_disabled": {"any_match": false}}]})),
        ),
        // string.in, inside an Any payload (the HTTP connection manager)
        case(
            "string.in",
            Listener,
            listener(json!({"filter_chains": [{"filters": [{"name": "hcm",
            "typed_config": hcm(json!({"scheme_header_transformation": {"scheme_to_overwrite": "ftp"}}))}]}]})),
        ),
        // string.min_len inside an Any payload
        case(
            "string.min_len",
            Listener,
            listener(json!({"filter_chains": [{"filters": [{"name": "hcm",
            "typed_config": hcm(json!({"stat_prefix": ""}))}]}]})),
        ),
        // uint64.lte, string.prefix (a rate limit's hits addend)
        case(
            "uint64.lte",
            Routes,
            routes(
                json!({"rate_limits": [{"actions": [{"generic_key": {"descriptor_value": "x"}}],
            "hits_addend": {"number": 2000000000u64}}]}),
            ),
        ),
        case(
            "string.prefix",
            Routes,
            routes(
                json!({"rate_limits": [{"actions": [{"generic_key": {"descriptor_value": "x"}}],
            "hits_addend": {"format": "abc"}}]}),
            ),
        ),
        // repeated.items.enum.defined_only
        case(
            "repeated.items.enum.defined_only",
            Cluster,
            cluster(json!({"common_lb_config":
            {"override_host_status": {"statuses": [1, 99]}}})),
        ),
        // repeated.items.string.well_known_regex
        case(
            "repeated.items.string.well_known_regex",
            Routes,
            routes(json!({"request_headers_to_remove": ["a\rb"]})),
        ),
        // repeated.max_items (more than 1,000 headers to add)
        case(
            "repeated.max_items",
            Routes,
            routes(json!({"request_headers_to_add": (0..1001)
                .map(|i| json!({"header": {"key": format!("x-{i}"), "value": "v"}}))
                .collect::<Vec<_>>()})),
        ),
        // bytes.max_len (a raw header value over 16 KiB)
        case(
            "bytes.min_len,max_len",
            Routes,
            routes(json!({"request_headers_to_add": [
                {"header": {"key": "x", "raw_value": base64(&[b'v'; 16385])}}]})),
        ),
        // repeated.items.string.in, in an access log filter inside an Any payload
        case(
            "repeated.items.string.in",
            Listener,
            listener(json!({"filter_chains": [{"filters": [{"name": "hcm",
                "typed_config": hcm(json!({"access_log": [{"name": "stdout",
                    "filter": {"response_flag_filter": {"flags": ["UH", "XX"]}},
                    "typed_config": {"@type": "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog"}}]}))}]}]})),
        ),
        case(
            "uint32.lte",
            Listener,
            listener(
                json!({"address": {"socket_address": {"address": "127.0.0.1", "port_value": 65536}}}),
            ),
        ),
        case(
            "duration.gt",
            Cluster,
            cluster(json!({"health_checks": [
            {"timeout": "1s", "interval": "1s", "unhealthy_threshold": 1, "healthy_threshold": 1,
             "tcp_health_check": {}, "no_traffic_interval": "0s"}]})),
        ),
    ]
    .into_iter()
    .chain(checks())
    .collect()
}

/// A route configuration with `vhosts` as its virtual hosts.
fn route_config(vhosts: Value) -> Value {
    json!({"name": "r", "virtual_hosts": vhosts})
}

fn vhost(name: &str, domains: Value) -> Value {
    json!({"name": name, "domains": domains,
        "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "c"}}]})
}

fn regex_route(regex: &str) -> Value {
    routes(
        json!({"routes": [{"match": {"safe_regex": {"regex": regex}}, "route": {"cluster": "c"}}]}),
    )
}

fn tls_cluster(params: Value) -> Value {
    cluster(json!({"transport_socket": {"name": "tls", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
        "common_tls_context": {"tls_params": params}}}}))
}

fn tcp_chain(name: &str, filter_chain_match: Option<Value>) -> Value {
    let mut chain = json!({"name": name, "filters": [{"name": "tcp", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
        "stat_prefix": "t", "cluster": "c"}}]});
    if let Some(m) = filter_chain_match {
        chain["filter_chain_match"] = m;
    }
    chain
}

fn compat_listener(address: &str) -> Value {
    listener(
        json!({"address": {"socket_address": {"address": address, "port_value": 10000,
        "ipv4_compat": true}}}),
    )
}

const HPO: &str = "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions";
const DTC: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext";
const RBAC: &str = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC";

/// A cluster whose upstreams speak as `options` (`HttpProtocolOptions`) say.
fn protocol_cluster(options: Value, extra: Value) -> Value {
    let mut c = cluster(json!({"typed_extension_protocol_options": {
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": merged(json!({"@type": HPO}), options)}}));
    merge(&mut c, extra);
    c
}

fn merged(mut into: Value, extra: Value) -> Value {
    merge(&mut into, extra);
    into
}

fn grpc_health_check() -> Value {
    json!({"health_checks": [{"timeout": "1s", "interval": "5s", "unhealthy_threshold": 1,
        "healthy_threshold": 1, "grpc_health_check": {}}]})
}

/// A listener whose one filter chain is `chain` (filters, a match, a transport socket).
fn chain_listener(chain: Value) -> Value {
    listener(json!({"filter_chains": [chain]}))
}

fn hcm_chain(extra: Value) -> Value {
    json!({"filters": [{"name": "hcm", "typed_config": hcm(extra)}]})
}

/// A filter chain serving TLS with `context` as its `DownstreamTlsContext`.
fn server_tls(context: Value) -> Value {
    chain_listener(
        json!({"filters": [{"name": "hcm", "typed_config": hcm(json!({}))}],
        "transport_socket": {"name": "tls", "typed_config": merged(json!({"@type": DTC}), context)}}),
    )
}

/// An RBAC HTTP filter before the router, with one policy.
fn rbac(policy: Value) -> Value {
    listener(json!({"filter_chains": [hcm_chain(json!({"http_filters": [
        {"name": "rbac", "typed_config": {"@type": RBAC, "rules": {"policies": {"p": policy}}}},
        {"name": "router", "typed_config": {"@type": ROUTER}}]}))]}))
}

fn http_filter(name: &str, kind: &str, config: Value) -> Value {
    json!({"name": name, "typed_config": merged(json!({"@type": format!("type.googleapis.com/{kind}")}), config)})
}

/// A certificate and key in files, for server contexts that must have one.
fn certificate_files() -> Value {
    let dir = std::env::temp_dir().join(format!("rules-envoy-certs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    support::certs::Ca::new("ca")
        .leaf(&["localhost"], &[])
        .write(&dir, "server");
    let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
    json!({"certificate_chain": {"filename": path("server.pem")},
        "private_key": {"filename": path("server.key")}})
}

/// What Envoy refuses as it builds clusters, TLS contexts, HTTP connection managers, filter
/// chains, route headers and IP ranges (`config::checks::builds`), and near misses it takes.
fn built() -> Vec<Case> {
    use Kind::*;
    let ads = json!({"ads": {}, "resource_api_version": "V3"});
    let cert = certificate_files();
    let mut cases = vec![
        // An IP range's address carries its mask.
        case(
            "envoy",
            Listener,
            chain_listener(hcm_chain(
                json!({"internal_address_config": {"cidr_ranges": [
                {"address_prefix": "::1/128", "prefix_len": 128}]}}),
            )),
        ),
        valid(
            Listener,
            chain_listener(hcm_chain(
                json!({"internal_address_config": {"cidr_ranges": [
                {"address_prefix": "::1", "prefix_len": 128}, {"address_prefix": "10.0.0.0", "prefix_len": 8}]}}),
            )),
        ),
        case(
            "envoy",
            Listener,
            chain_listener(merged(
                hcm_chain(json!({})),
                json!({"filter_chain_match": {"prefix_ranges": [{"address_prefix": "10.0.0.0/8", "prefix_len": 8}]}}),
            )),
        ),
        case(
            "envoy",
            Listener,
            chain_listener(merged(
                hcm_chain(json!({})),
                json!({"filter_chain_match": {"source_prefix_ranges": [{"address_prefix": "localhost", "prefix_len": 8}]}}),
            )),
        ),
        valid(
            Listener,
            chain_listener(merged(
                hcm_chain(json!({})),
                json!({"filter_chain_match": {"prefix_ranges": [{"address_prefix": "10.0.0.0", "prefix_len": 8}],
                    "source_prefix_ranges": [{"address_prefix": "fd00::", "prefix_len": 8}]}}),
            )),
        ),
        case(
            "envoy",
            Listener,
            rbac(json!({"permissions": [{"any": true}],
                "principals": [{"remote_ip": {"address_prefix": "10.0.0.0/8", "prefix_len": 8}}]})),
        ),
        case(
            "envoy",
            Listener,
            rbac(
                json!({"permissions": [{"destination_ip": {"address_prefix": "x", "prefix_len": 8}}],
                "principals": [{"any": true}]}),
            ),
        ),
        valid(
            Listener,
            rbac(
                json!({"permissions": [{"destination_ip": {"address_prefix": "10.1.0.0", "prefix_len": 16}}],
                "principals": [{"direct_remote_ip": {"address_prefix": "::1", "prefix_len": 128}}]}),
            ),
        ),
        // A gRPC health check on a cluster that does not speak HTTP/2.
        case("envoy", Cluster, cluster(grpc_health_check())),
        case(
            "envoy",
            Cluster,
            protocol_cluster(
                json!({"explicit_http_config": {"http_protocol_options": {}}}),
                grpc_health_check(),
            ),
        ),
        case(
            "envoy",
            Cluster,
            protocol_cluster(
                json!({"use_downstream_protocol_config": {}}),
                grpc_health_check(),
            ),
        ),
        valid(
            Cluster,
            protocol_cluster(
                json!({"explicit_http_config": {"http2_protocol_options": {}}}),
                grpc_health_check(),
            ),
        ),
        valid(
            Cluster,
            protocol_cluster(
                json!({"use_downstream_protocol_config": {"http2_protocol_options": {}}}),
                grpc_health_check(),
            ),
        ),
        valid(
            Cluster,
            merged(
                cluster(grpc_health_check()),
                json!({"http2_protocol_options": {}}),
            ),
        ),
        // Protocol options the transport socket cannot carry.
        case(
            "envoy",
            Cluster,
            protocol_cluster(json!({"auto_config": {}}), json!({})),
        ),
        case(
            "envoy",
            Cluster,
            protocol_cluster(
                json!({"explicit_http_config": {"http3_protocol_options": {}}}),
                json!({}),
            ),
        ),
        // A server's TLS context with no certificate, or with both kinds.
        case(
            "envoy",
            Listener,
            server_tls(json!({"common_tls_context": {}})),
        ),
        case("envoy", Listener, server_tls(json!({}))),
        case(
            "envoy",
            Listener,
            server_tls(
                json!({"common_tls_context": {"tls_params": {"tls_minimum_protocol_version": "TLSv1_2"}}}),
            ),
        ),
        case(
            "envoy",
            Listener,
            server_tls(
                json!({"common_tls_context": {"tls_certificates": [cert.clone()],
                "tls_certificate_sds_secret_configs": [{"name": "s", "sds_config": ads}]}}),
            ),
        ),
        valid(
            Listener,
            server_tls(json!({"common_tls_context": {"tls_certificates": [cert]}})),
        ),
        // Filter chains that do not end with their terminal filter.
        case(
            "envoy",
            Listener,
            chain_listener(hcm_chain(json!({"http_filters": [
                http_filter("cors", "envoy.extensions.filters.http.cors.v3.Cors", json!({}))]}))),
        ),
        case(
            "envoy",
            Listener,
            chain_listener(hcm_chain(json!({"http_filters": [
                {"name": "router", "typed_config": {"@type": ROUTER}},
                http_filter("fault", "envoy.extensions.filters.http.fault.v3.HTTPFault", json!({}))]}))),
        ),
        valid(
            Listener,
            chain_listener(hcm_chain(json!({"http_filters": [
                http_filter("cors", "envoy.extensions.filters.http.cors.v3.Cors", json!({})),
                http_filter("web", "envoy.extensions.filters.http.grpc_web.v3.GrpcWeb", json!({})),
                http_filter("jwt", "envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication", json!({})),
                http_filter("lua", "envoy.extensions.filters.http.lua.v3.Lua", json!({})),
                http_filter("buffer", "envoy.extensions.filters.http.buffer.v3.Buffer", json!({"max_request_bytes": 1024})),
                {"name": "router", "typed_config": {"@type": ROUTER}}]}))),
        ),
        case(
            "envoy",
            Listener,
            chain_listener(json!({"filters": [
                {"name": "tcp", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
                    "stat_prefix": "t", "cluster": "c"}},
                {"name": "hcm", "typed_config": hcm(json!({}))}]})),
        ),
        case(
            "envoy",
            Listener,
            chain_listener(json!({"filters": [
                {"name": "limit", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit",
                    "stat_prefix": "l", "max_connections": 10}}]})),
        ),
        valid(
            Listener,
            chain_listener(json!({"filters": [
                {"name": "limit", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit",
                    "stat_prefix": "l", "max_connections": 10}},
                {"name": "rbac", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC",
                    "stat_prefix": "r"}},
                {"name": "hcm", "typed_config": hcm(json!({}))}]})),
        ),
        // The same upgrade twice, in another case.
        case(
            "envoy",
            Listener,
            chain_listener(hcm_chain(json!({"upgrade_configs": [
                {"upgrade_type": "websocket"}, {"upgrade_type": "WebSocket"}]}))),
        ),
        valid(
            Listener,
            chain_listener(hcm_chain(json!({"upgrade_configs": [
                {"upgrade_type": "websocket"}, {"upgrade_type": "CONNECT"}]}))),
        ),
        // Pseudo-headers and host, added or removed by routing.
        case(
            "envoy",
            Routes,
            routes(json!({"request_headers_to_add": [{"header": {"key": ":path", "value": "x"}}]})),
        ),
        case(
            "envoy",
            Routes,
            routes(json!({"request_headers_to_add": [{"header": {"key": "Host", "value": "x"}}]})),
        ),
        case(
            "envoy",
            Routes,
            routes(json!({"request_headers_to_remove": ["host"]})),
        ),
        case(
            "envoy",
            Routes,
            routes(
                json!({"response_headers_to_add": [{"header": {"key": ":status", "value": "200"}}]}),
            ),
        ),
        case(
            "envoy",
            Routes,
            routes(
                json!({"routes": [{"match": {"prefix": "/"}, "route": {"cluster": "c"},
                "response_headers_to_remove": [":status"]}]}),
            ),
        ),
        valid(
            Routes,
            routes(
                json!({"request_headers_to_add": [{"header": {"key": "x-host", "value": "x"}}],
                "request_headers_to_remove": ["x-authority"],
                "response_headers_to_add": [{"header": {"key": "hosts", "value": "x"}}]}),
            ),
        ),
        // Clusters whose endpoints or load balancer their type does not take.
        case(
            "envoy",
            Cluster,
            cluster(
                json!({"load_assignment": cla(json!({"endpoint": {"address": {"socket_address": {
                "address": "backend.example.com", "port_value": 80}}}}))}),
            ),
        ),
        valid(
            Cluster,
            cluster(
                json!({"type": "STRICT_DNS", "load_assignment": cla(json!({"endpoint": {"address": {"socket_address": {
                "address": "backend.example.com", "port_value": 80}}}}))}),
            ),
        ),
        case(
            "envoy",
            Cluster,
            cluster(
                json!({"type": "LOGICAL_DNS", "load_assignment": {"cluster_name": "c", "endpoints": [
                {"lb_endpoints": [endpoint(80), endpoint(81)]}]}}),
            ),
        ),
        case(
            "envoy",
            Cluster,
            cluster(
                json!({"type": "LOGICAL_DNS", "load_assignment": {"cluster_name": "c", "endpoints": [
                {"lb_endpoints": [endpoint(80)]}, {"lb_endpoints": [endpoint(81)]}]}}),
            ),
        ),
        valid(Cluster, cluster(json!({"type": "LOGICAL_DNS"}))),
        case(
            "envoy",
            Cluster,
            cluster(json!({"type": "LOGICAL_DNS", "load_assignment": {"cluster_name": "c"}})),
        ),
        case(
            "envoy",
            Cluster,
            cluster(json!({"type": "ORIGINAL_DST", "lb_policy": "CLUSTER_PROVIDED"})),
        ),
        case(
            "envoy",
            Cluster,
            json!({"name": "c", "connect_timeout": "1s", "type": "ORIGINAL_DST"}),
        ),
        valid(
            Cluster,
            json!({"name": "c", "connect_timeout": "1s", "type": "ORIGINAL_DST", "lb_policy": "CLUSTER_PROVIDED"}),
        ),
        case(
            "envoy",
            Cluster,
            cluster(json!({"type": "STRICT_DNS", "lb_policy": "CLUSTER_PROVIDED"})),
        ),
        // A ring hash at least larger than at most (both set, or against the default minimum).
        case(
            "envoy",
            Cluster,
            cluster(json!({"lb_policy": "RING_HASH", "ring_hash_lb_config": {
                "minimum_ring_size": 2000, "maximum_ring_size": 1000}})),
        ),
        case(
            "envoy",
            Cluster,
            cluster(
                json!({"lb_policy": "RING_HASH", "ring_hash_lb_config": {"maximum_ring_size": 512}}),
            ),
        ),
        valid(
            Cluster,
            cluster(
                json!({"lb_policy": "RING_HASH", "ring_hash_lb_config": {"maximum_ring_size": 1024}}),
            ),
        ),
        // Server names with a wildcard other than a leading `*.`; HTTP/3 off QUIC.
        case(
            "envoy",
            Listener,
            chain_listener(merged(
                hcm_chain(json!({})),
                json!({"filter_chain_match": {"server_names": ["api.*"]}}),
            )),
        ),
        case(
            "envoy",
            Listener,
            chain_listener(merged(
                hcm_chain(json!({})),
                json!({"filter_chain_match": {"server_names": ["*api.example.com"]}}),
            )),
        ),
        valid(
            Listener,
            chain_listener(merged(
                hcm_chain(json!({})),
                json!({"filter_chain_match": {"server_names": ["*.example.com", "example.com"]}}),
            )),
        ),
        case(
            "envoy",
            Listener,
            chain_listener(hcm_chain(json!({"codec_type": "HTTP3"}))),
        ),
    ];
    // A LOGICAL_DNS cluster with no endpoints at all: held against Envoy too.
    cases.push(case(
        "envoy",
        Cluster,
        json!({"name": "c", "connect_timeout": "1s", "type": "LOGICAL_DNS"}),
    ));
    cases
}

/// A route configuration whose one route is `route` (its match and action merged over a
/// prefix match to cluster `c`).
fn one_route(route: Value) -> Value {
    let mut r = json!({"match": {"prefix": "/"}});
    if route.get("direct_response").is_none() && route.get("route").is_none() {
        r["route"] = json!({"cluster": "c"});
    }
    merge(&mut r, route);
    routes(json!({"routes": [r]}))
}

/// A route to `c` whose action has `extra` too.
fn action(extra: Value) -> Value {
    one_route(json!({"route": merged(json!({"cluster": "c"}), extra)}))
}

fn weighted(clusters: Value) -> Value {
    one_route(json!({"name": "rt", "route": {"weighted_clusters": {"clusters": clusters}}}))
}

/// What Envoy refuses as it builds routes (`config::checks::routing`), and near misses.
fn routing() -> Vec<Case> {
    use Kind::*;
    let header_regex = |ignore_case: bool| {
        one_route(json!({"match": {"prefix": "/", "headers": [{"name": "x",
            "string_match": {"safe_regex": {"regex": "a"}, "ignore_case": ignore_case}}]}}))
    };
    let rewrite_template = json!({"name": "m", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.path.rewrite.uri_template.v3.UriTemplateRewriteConfig",
        "path_template_rewrite": "/a"}});
    let match_template = json!({"name": "m", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.path.match.uri_template.v3.UriTemplateMatchConfig",
        "path_template": "/a/{x}"}});
    vec![
        // Two path rewrites.
        case(
            "envoy",
            Routes,
            action(
                json!({"prefix_rewrite": "/x", "regex_rewrite": {"pattern": {"regex": "a"}, "substitution": "b"}}),
            ),
        ),
        case(
            "envoy",
            Routes,
            action(json!({"prefix_rewrite": "/x", "path_rewrite_policy": rewrite_template})),
        ),
        valid(
            Routes,
            action(json!({"regex_rewrite": {"pattern": {"regex": "a"}, "substitution": "b"}})),
        ),
        case(
            "envoy",
            Routes,
            one_route(
                json!({"match": {"path_match_policy": match_template.clone()},
                "route": {"cluster": "c", "prefix_rewrite": "/b"}}),
            ),
        ),
        valid(
            Routes,
            one_route(json!({"match": {"path_match_policy": match_template},
                "route": {"cluster": "c", "path_rewrite_policy": rewrite_template}})),
        ),
        // Upgrades on a route.
        case(
            "envoy",
            Routes,
            action(
                json!({"upgrade_configs": [{"upgrade_type": "websocket"}, {"upgrade_type": "WebSocket"}]}),
            ),
        ),
        case(
            "envoy",
            Routes,
            action(
                json!({"upgrade_configs": [{"upgrade_type": "websocket", "connect_config": {}}]}),
            ),
        ),
        valid(
            Routes,
            action(
                json!({"upgrade_configs": [{"upgrade_type": "websocket"}, {"upgrade_type": "connect", "connect_config": {}}]}),
            ),
        ),
        // Weighted clusters.
        case(
            "envoy",
            Routes,
            weighted(json!([{"name": "c", "weight": 0}])),
        ),
        case(
            "envoy",
            Routes,
            weighted(
                json!([{"name": "c", "weight": 4_294_967_295u64}, {"name": "c", "weight": 1}]),
            ),
        ),
        case(
            "envoy",
            Routes,
            weighted(json!([{"name": "c", "cluster_header": "x", "weight": 1}])),
        ),
        case("envoy", Routes, weighted(json!([{"weight": 1}]))),
        case("envoy", Routes, weighted(json!([{"name": "c"}]))),
        valid(
            Routes,
            weighted(json!([{"name": "c", "weight": 0}, {"cluster_header": "x", "weight": 1}])),
        ),
        // Mirrors.
        case(
            "envoy",
            Routes,
            action(json!({"request_mirror_policies": [{"cluster": "c", "cluster_header": "x"}]})),
        ),
        case(
            "envoy",
            Routes,
            action(json!({"request_mirror_policies": [{}]})),
        ),
        valid(
            Routes,
            action(json!({"request_mirror_policies": [{"cluster": "c"}, {"cluster_header": "x"}]})),
        ),
        // A retry back-off whose longest interval is below its base, on a route or a host.
        case(
            "envoy",
            Routes,
            action(
                json!({"retry_policy": {"retry_back_off": {"base_interval": "2s", "max_interval": "1s"}}}),
            ),
        ),
        case(
            "envoy",
            Routes,
            routes(
                json!({"retry_policy": {"retry_back_off": {"base_interval": "0.5s", "max_interval": "0.25s"}}}),
            ),
        ),
        valid(
            Routes,
            action(
                json!({"retry_policy": {"retry_back_off": {"base_interval": "1s", "max_interval": "1s"}}}),
            ),
        ),
        // A direct response over the configuration's limit.
        case(
            "envoy",
            Routes,
            one_route(
                json!({"direct_response": {"status": 200, "body": {"inline_string": "x".repeat(4097)}}}),
            ),
        ),
        valid(
            Routes,
            one_route(
                json!({"direct_response": {"status": 200, "body": {"inline_string": "x".repeat(4096)}}}),
            ),
        ),
        case(
            "envoy",
            Routes,
            merged(
                one_route(
                    json!({"direct_response": {"status": 200, "body": {"inline_bytes": base64(b"0123456789")}}}),
                ),
                json!({"max_direct_response_body_size_bytes": 9}),
            ),
        ),
        valid(
            Routes,
            merged(
                one_route(
                    json!({"direct_response": {"status": 200, "body": {"inline_string": "x".repeat(5000)}}}),
                ),
                json!({"max_direct_response_body_size_bytes": 5000}),
            ),
        ),
        // A regex asked to ignore case, wherever a string matcher is.
        case("envoy", Routes, header_regex(true)),
        valid(Routes, header_regex(false)),
        case(
            "envoy",
            Routes,
            one_route(
                json!({"match": {"prefix": "/", "query_parameters": [{"name": "q",
                "string_match": {"safe_regex": {"regex": "a"}, "ignore_case": true}}]}}),
            ),
        ),
        valid(
            Routes,
            one_route(
                json!({"match": {"prefix": "/", "query_parameters": [{"name": "q",
                "string_match": {"exact": "a", "ignore_case": true}}]}}),
            ),
        ),
    ]
}

fn health_check(checker: Value) -> Value {
    cluster(
        json!({"health_checks": [merged(json!({"timeout": "1s", "interval": "5s",
        "unhealthy_threshold": 1, "healthy_threshold": 1}), checker)]}),
    )
}

fn http2_cluster(options: Value) -> Value {
    protocol_cluster(
        json!({"explicit_http_config": {"http2_protocol_options": options}}),
        json!({}),
    )
}

/// What Envoy refuses as it builds a cluster's parts (`config::checks::upstream`), and near
/// misses.
fn upstream() -> Vec<Case> {
    use Kind::*;
    let statuses = |list: &str, start: i64, end: i64| {
        health_check(
            json!({"http_health_check": {"path": "/", list: [{"start": start, "end": end}]}}),
        )
    };
    let setting = |id: u64, value: u64| json!({"identifier": id, "value": value});
    let bind = |extra: Value| {
        cluster(
            json!({"upstream_bind_config": merged(json!({"source_address": {
            "address": "127.0.0.1", "port_value": 0}}), extra)}),
        )
    };
    let source = |address: &str| json!({"address": {"address": address, "port_value": 0}});
    let dns = |kind: &str| {
        cluster(
            json!({"type": kind, "load_assignment": {"cluster_name": "c", "endpoints": [{"lb_endpoints": [
            {"endpoint": {"address": {"socket_address": {"address": "localhost", "port_value": 80,
            "resolver_name": "custom"}}}}]}]}}),
        )
    };
    let subset = |keys: Value, fallback: Value| {
        cluster(
            json!({"lb_subset_config": {"subset_selectors": [{"keys": keys,
            "fallback_policy": "KEYS_SUBSET", "fallback_keys_subset": fallback}]}}),
        )
    };
    vec![
        // HTTP health checks' status ranges.
        case("envoy", Cluster, statuses("expected_statuses", 300, 200)),
        case("envoy", Cluster, statuses("expected_statuses", 200, 200)),
        case("envoy", Cluster, statuses("expected_statuses", 99, 200)),
        case("envoy", Cluster, statuses("expected_statuses", 200, 601)),
        case("envoy", Cluster, statuses("retriable_statuses", 300, 200)),
        valid(Cluster, statuses("expected_statuses", 100, 600)),
        // Payloads in hex, and only with a method that has a body.
        case(
            "envoy",
            Cluster,
            health_check(json!({"tcp_health_check": {"send": {"text": "zz"}}})),
        ),
        case(
            "envoy",
            Cluster,
            health_check(json!({"tcp_health_check": {"receive": [{"text": "abc"}]}})),
        ),
        valid(
            Cluster,
            health_check(
                json!({"tcp_health_check": {"send": {"text": "AbCd01"}, "receive": [{"text": "ff"}]}}),
            ),
        ),
        case(
            "envoy",
            Cluster,
            health_check(json!({"http_health_check": {"path": "/", "send": {"text": "00"}}})),
        ),
        case(
            "envoy",
            Cluster,
            health_check(
                json!({"http_health_check": {"path": "/", "method": "HEAD", "send": {"text": "00"}}}),
            ),
        ),
        case(
            "envoy",
            Cluster,
            health_check(
                json!({"http_health_check": {"path": "/", "method": "POST", "send": {"text": "0G"}}}),
            ),
        ),
        valid(
            Cluster,
            health_check(
                json!({"http_health_check": {"path": "/", "method": "PATCH", "send": {"text": "00"}}}),
            ),
        ),
        // The outlier detector's ejection times.
        case(
            "envoy",
            Cluster,
            cluster(
                json!({"outlier_detection": {"base_ejection_time": "10s", "max_ejection_time": "1s"}}),
            ),
        ),
        case(
            "envoy",
            Cluster,
            cluster(json!({"outlier_detection": {"max_ejection_time": "10s"}})),
        ),
        valid(
            Cluster,
            cluster(json!({"outlier_detection": {"base_ejection_time": "400s"}})),
        ),
        // The request limit, on the cluster and in its protocol options.
        case(
            "envoy",
            Cluster,
            protocol_cluster(
                json!({"common_http_protocol_options": {"max_requests_per_connection": 3},
                    "explicit_http_config": {"http_protocol_options": {}}}),
                json!({"max_requests_per_connection": 5}),
            ),
        ),
        valid(
            Cluster,
            protocol_cluster(
                json!({"common_http_protocol_options": {"max_requests_per_connection": 3},
                    "explicit_http_config": {"http_protocol_options": {}}}),
                json!({}),
            ),
        ),
        // Load balancers.
        case(
            "envoy",
            Cluster,
            cluster(json!({"lb_policy": "MAGLEV", "maglev_lb_config": {"table_size": 1000}})),
        ),
        valid(
            Cluster,
            cluster(json!({"lb_policy": "MAGLEV", "maglev_lb_config": {"table_size": 65537}})),
        ),
        case("envoy", Cluster, subset(json!(["a"]), json!([]))),
        case("envoy", Cluster, subset(json!(["a"]), json!(["b"]))),
        case(
            "envoy",
            Cluster,
            subset(json!(["a", "b"]), json!(["b", "a"])),
        ),
        valid(Cluster, subset(json!(["a", "b"]), json!(["a"]))),
        case(
            "envoy",
            Cluster,
            cluster(json!({"lb_policy": "LOAD_BALANCING_POLICY_CONFIG"})),
        ),
        // HTTP/3 by ALPN with nowhere to remember it.
        case(
            "envoy",
            Cluster,
            protocol_cluster(
                json!({"auto_config": {"http3_protocol_options": {}}}),
                json!({}),
            ),
        ),
        // HTTP/2 SETTINGS given twice, upstream and downstream.
        case(
            "envoy",
            Cluster,
            http2_cluster(
                json!({"max_concurrent_streams": 100, "custom_settings_parameters": [setting(3, 10)]}),
            ),
        ),
        case(
            "envoy",
            Cluster,
            http2_cluster(
                json!({"custom_settings_parameters": [setting(9, 10), setting(9, 11), setting(10, 1), setting(10, 2)]}),
            ),
        ),
        case(
            "envoy",
            Cluster,
            http2_cluster(json!({"custom_settings_parameters": [setting(2, 1)]})),
        ),
        case(
            "envoy",
            Cluster,
            http2_cluster(json!({"custom_settings_parameters": [setting(8, 1)]})),
        ),
        valid(
            Cluster,
            http2_cluster(
                json!({"custom_settings_parameters": [setting(9, 10), setting(9, 10), setting(3, 10), setting(2, 0)]}),
            ),
        ),
        case(
            "envoy",
            Listener,
            chain_listener(hcm_chain(
                json!({"http2_protocol_options": {"hpack_table_size": 100,
                "initial_stream_window_size": 65536,
                "custom_settings_parameters": [setting(1, 10), setting(4, 70000)]}}),
            )),
        ),
        // Bind configs.
        case(
            "envoy",
            Cluster,
            bind(json!({"extra_source_addresses": [source("127.0.0.2")]})),
        ),
        case(
            "envoy",
            Cluster,
            bind(json!({"extra_source_addresses": [source("::1"), source("::2")]})),
        ),
        valid(
            Cluster,
            bind(json!({"extra_source_addresses": [source("::1")]})),
        ),
        // DNS clusters resolve with their own resolver.
        case("envoy", Cluster, dns("STRICT_DNS")),
        case("envoy", Cluster, dns("LOGICAL_DNS")),
        // Drop overloads for more than one category.
        case(
            "envoy",
            Cluster,
            cluster(
                json!({"load_assignment": {"cluster_name": "c", "policy": {"drop_overloads": [
                {"category": "a", "drop_percentage": {"numerator": 1}},
                {"category": "b", "drop_percentage": {"numerator": 1}}]},
                "endpoints": [{"lb_endpoints": [endpoint(80)]}]}}),
            ),
        ),
        valid(
            Cluster,
            cluster(
                json!({"load_assignment": {"cluster_name": "c", "policy": {"drop_overloads": [
                {"category": "a", "drop_percentage": {"numerator": 1}}]},
                "endpoints": [{"lb_endpoints": [endpoint(80)]}]}}),
            ),
        ),
    ]
}

/// What Envoy refuses in TLS contexts, HTTP connection managers and listeners beyond
/// `built()`, and near misses.
fn tls_and_listeners() -> Vec<Case> {
    use Kind::*;
    let cert = certificate_files();
    let ca = certificate_files()["certificate_chain"].clone();
    let upstream_validation = |context: Value| {
        cluster(json!({"transport_socket": {"name": "tls", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "common_tls_context": {"validation_context": context}}}}))
    };
    let san = json!([{"san_type": "DNS", "matcher": {"exact": "a"}}]);
    let quic = |codec: &str| {
        listener(json!({
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": 10000, "protocol": "UDP"}},
            "udp_listener_config": {"quic_options": {}},
            "filter_chains": [{"filters": [{"name": "hcm", "typed_config": hcm(json!({"codec_type": codec}))}],
                "transport_socket": {"name": "envoy.transport_sockets.quic", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.transport_sockets.quic.v3.QuicDownstreamTransport",
                    "downstream_tls_context": {"common_tls_context": {"tls_certificates": [cert.clone()]}}}}}]}))
    };
    let xff = json!([{"name": "xff", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.http.original_ip_detection.xff.v3.XffConfig",
        "xff_num_trusted_hops": 1}}]);
    let pinned = |pins: Value| upstream_validation(merged(json!({"trusted_ca": ca}), pins));
    let hex: String = (0u8..32).map(|b| format!("{b:02x}")).collect();
    let fingerprint: String = (0u8..32)
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":");
    let spki = base64(&[7u8; 32]);
    vec![
        // Certificate pins that pass the field rules' lengths but are not 32 bytes as Envoy
        // decodes them (`DefaultCertValidator`), and near misses.
        valid(
            Cluster,
            pinned(json!({"verify_certificate_hash": [hex.clone()]})),
        ),
        valid(
            Cluster,
            pinned(json!({"verify_certificate_hash": [fingerprint.clone()]})),
        ),
        case(
            "envoy",
            Cluster,
            pinned(json!({"verify_certificate_hash": [format!("+a{}", &hex[2..])]})),
        ),
        // Envoy reads each pair of characters as a number, white space before it allowed.
        valid(
            Cluster,
            pinned(json!({"verify_certificate_hash": [format!(" a{}", &hex[2..])]})),
        ),
        case(
            "envoy",
            Cluster,
            pinned(json!({"verify_certificate_hash": [format!("a {}", &hex[2..])]})),
        ),
        case(
            "envoy",
            Cluster,
            pinned(json!({"verify_certificate_hash": [format!("  {}", &hex[2..])]})),
        ),
        valid(
            Cluster,
            pinned(json!({"verify_certificate_spki": [spki.clone()]})),
        ),
        case(
            "envoy",
            Cluster,
            pinned(json!({"verify_certificate_hash": [format!("g{}", &hex[1..])]})),
        ),
        case(
            "envoy",
            Cluster,
            pinned(json!({"verify_certificate_hash": [format!("{hex}0")]})),
        ),
        case(
            "envoy",
            Cluster,
            pinned(json!({"verify_certificate_hash": [fingerprint.replace(':', "-")]})),
        ),
        case(
            "envoy",
            Cluster,
            pinned(json!({"verify_certificate_spki": ["a".repeat(44)]})),
        ),
        case(
            "envoy",
            Cluster,
            pinned(json!({"verify_certificate_spki": [format!("{}==", &"A".repeat(42))]})),
        ),
        case(
            "envoy",
            Cluster,
            pinned(json!({"verify_certificate_spki": [format!("{}B=", &spki[..42])]})),
        ),
        // A validation context without a trusted CA.
        case(
            "envoy",
            Cluster,
            upstream_validation(json!({"match_typed_subject_alt_names": san.clone()})),
        ),
        case(
            "envoy",
            Cluster,
            upstream_validation(json!({"crl": {"inline_string": "x"}})),
        ),
        case(
            "envoy",
            Cluster,
            upstream_validation(json!({"allow_expired_certificate": true})),
        ),
        valid(
            Cluster,
            upstream_validation(
                json!({"trusted_ca": ca, "match_typed_subject_alt_names": san.clone(),
                "allow_expired_certificate": true}),
            ),
        ),
        case(
            "envoy",
            Listener,
            server_tls(
                json!({"common_tls_context": {"tls_certificates": [cert.clone()],
                "validation_context": {"match_typed_subject_alt_names": san}}}),
            ),
        ),
        // Session ticket keys and stapling on a server.
        case(
            "envoy",
            Listener,
            server_tls(
                json!({"common_tls_context": {"tls_certificates": [cert.clone()]},
                "session_ticket_keys": {"keys": [{"inline_bytes": base64(&[7; 10])}]}}),
            ),
        ),
        valid(
            Listener,
            server_tls(
                json!({"common_tls_context": {"tls_certificates": [cert.clone()]},
                "session_ticket_keys": {"keys": [{"inline_bytes": base64(&[7; 80])}]}}),
            ),
        ),
        case(
            "envoy",
            Listener,
            server_tls(
                json!({"common_tls_context": {"tls_certificates": [cert.clone()]},
                "ocsp_staple_policy": "MUST_STAPLE"}),
            ),
        ),
        // The codec a QUIC listener takes.
        case("envoy", Listener, quic("AUTO")),
        case("envoy", Listener, quic("HTTP2")),
        valid(Listener, quic("HTTP3")),
        // Original IP detection beside the HCM's own.
        case(
            "envoy",
            Listener,
            chain_listener(hcm_chain(
                json!({"use_remote_address": true, "original_ip_detection_extensions": xff.clone()}),
            )),
        ),
        case(
            "envoy",
            Listener,
            chain_listener(hcm_chain(
                json!({"xff_num_trusted_hops": 1, "original_ip_detection_extensions": xff.clone()}),
            )),
        ),
        valid(
            Listener,
            chain_listener(hcm_chain(json!({"original_ip_detection_extensions": xff}))),
        ),
        case(
            "envoy",
            Listener,
            chain_listener(hcm_chain(
                json!({"strip_any_host_port": true, "strip_matching_host_port": true}),
            )),
        ),
        // A plain UDP listener with filter chains; addresses of two socket types.
        case(
            "envoy",
            Listener,
            listener(
                json!({"address": {"socket_address": {"address": "127.0.0.1", "port_value": 10000, "protocol": "UDP"}},
                "udp_listener_config": {}}),
            ),
        ),
        case(
            "envoy",
            Listener,
            listener(
                json!({"additional_addresses": [{"address": {"socket_address": {
                "address": "127.0.0.1", "port_value": 10001, "protocol": "UDP"}}}]}),
            ),
        ),
        valid(
            Listener,
            listener(
                json!({"additional_addresses": [{"address": {"socket_address": {
                "address": "127.0.0.1", "port_value": 10001}}}]}),
            ),
        ),
    ]
}

/// Envoy's checks beyond field rules (`config::checks`): each refusal, and near misses that
/// both accept.
fn checks() -> Vec<Case> {
    use Kind::*;
    let mut cases = vec![
        // More than one `*` domain in a route configuration.
        case(
            "envoy",
            Routes,
            route_config(json!([vhost("a", json!(["*"])), vhost("b", json!(["*"]))])),
        ),
        case(
            "envoy",
            Routes,
            route_config(json!([
                vhost("a", json!(["*"])),
                vhost("b", json!(["x.com", "*"]))
            ])),
        ),
        // One domain twice, in another case.
        case(
            "envoy",
            Routes,
            route_config(json!([
                vhost("a", json!(["a.com"])),
                vhost("b", json!(["A.com"]))
            ])),
        ),
        valid(
            Routes,
            route_config(json!([
                vhost("a", json!(["*"])),
                vhost("b", json!(["*.a.com", "a.com"]))
            ])),
        ),
        // An HTTP filter, and a network filter, with no typed_config.
        case(
            "envoy",
            Listener,
            listener(json!({"filter_chains": [{"filters": [{"name": "hcm",
            "typed_config": hcm(json!({"http_filters": [{"name": "envoy.filters.http.router"}]}))}]}]})),
        ),
        case(
            "envoy",
            Listener,
            listener(json!({"filter_chains": [{"filters": [{"name": "hcm",
            "typed_config": hcm(json!({"http_filters": [{"name": "envoy.filters.http.router", "typed_config": {}}]}))}]}]})),
        ),
        case(
            "envoy",
            Listener,
            listener(
                json!({"filter_chains": [{"filters": [{"name": "envoy.filters.network.tcp_proxy"}]}]}),
            ),
        ),
        valid(
            Listener,
            listener(json!({"filter_chains": [{"filters": [{"name": "hcm",
            "typed_config": hcm(json!({"http_filters": [{"name": "acme.optional", "is_optional": true},
                {"name": "router", "typed_config": {"@type": ROUTER}}]}))}]}]})),
        ),
        // A listener that accepts connections with no filter chain: refused;
        // with a default filter chain, or as a UDP listener (a UDP proxy), accepted.
        case(
            "envoy",
            Listener,
            json!({"name": "l", "address": {"socket_address": {"address": "127.0.0.1", "port_value": 10000}}}),
        ),
        valid(
            Listener,
            json!({"name": "l", "address": {"socket_address": {"address": "127.0.0.1", "port_value": 10000}},
            "default_filter_chain": {"filters": [{"name": "hcm", "typed_config": hcm(json!({}))}]}}),
        ),
        valid(
            Listener,
            json!({"name": "u", "address": {"socket_address": {"address": "127.0.0.1", "port_value": 10001, "protocol": "UDP"}},
            "listener_filters": [{"name": "envoy.filters.udp_listener.udp_proxy", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.udp.udp_proxy.v3.UdpProxyConfig",
                "stat_prefix": "u",
                "matcher": {"on_no_match": {"action": {"name": "route", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.udp.udp_proxy.v3.Route",
                    "cluster": "c"}}}}}}]}),
        ),
        // Two filter chains with the same match (none at all, or the same server names).
        case(
            "envoy",
            Listener,
            listener(
                json!({"filter_chains": [tcp_chain("first", None), tcp_chain("second", None)]}),
            ),
        ),
        // An absent match and an empty one are the same match.
        case(
            "envoy",
            Listener,
            listener(json!({"filter_chains": [
            tcp_chain("first", None), tcp_chain("second", Some(json!({})))]})),
        ),
        case(
            "envoy",
            Listener,
            listener(json!({"filter_chains": [
            tcp_chain("first", Some(json!({"server_names": ["a.com"]}))),
            tcp_chain("second", Some(json!({"server_names": ["a.com"]})))]})),
        ),
        valid(
            Listener,
            listener(json!({"filter_chains": [
            tcp_chain("first", Some(json!({"server_names": ["a.com"]}))),
            tcp_chain("second", Some(json!({"server_names": ["b.com"]})))]})),
        ),
        // An EDS host that is not an IP address (Envoy resolves none; over LEDS it crashes).
        case(
            "envoy",
            Endpoints,
            cla(
                json!({"endpoint": {"address": {"socket_address": {"address": "not-an-ip", "port_value": 80}}}}),
            ),
        ),
        valid(
            Endpoints,
            cla(
                json!({"endpoint": {"address": {"socket_address": {"address": "::1", "port_value": 80}}}}),
            ),
        ),
        // ipv4_compat on an address other than `::` or an IPv4-mapped one.
        case("envoy", Listener, compat_listener("127.0.0.1")),
        case("envoy", Listener, compat_listener("::1")),
        valid(Listener, compat_listener("::")),
        valid(Listener, compat_listener("::ffff:127.0.0.1")),
        // ECDH curves and cipher suites BoringSSL does not have.
        case(
            "envoy",
            Cluster,
            tls_cluster(json!({"ecdh_curves": ["ECDHE-RSA-AES128-GCM-SHA256"]})),
        ),
        case(
            "envoy",
            Cluster,
            tls_cluster(json!({"ecdh_curves": ["X25519", "P-224"]})),
        ),
        case(
            "envoy",
            Cluster,
            tls_cluster(json!({"cipher_suites": ["X25519"]})),
        ),
        case(
            "envoy",
            Cluster,
            tls_cluster(
                json!({"cipher_suites": ["NOPE-ONE", "ECDHE-RSA-AES128-GCM-SHA256", "nope-two"]}),
            ),
        ),
        case(
            "envoy",
            Cluster,
            tls_cluster(json!({"cipher_suites": ["TLS_AES_128_GCM_SHA256"]})),
        ),
        case(
            "envoy",
            Cluster,
            tls_cluster(json!({"cipher_suites": ["SHA256", "SHA384"]})),
        ),
        valid(
            Cluster,
            tls_cluster(
                json!({"cipher_suites": ["ECDHE-RSA-AES128-GCM-SHA256", "TLS_AES_128_GCM_SHA256", "!aRSA", "ECDHE+AESGCM"]}),
            ),
        ),
        valid(
            Cluster,
            tls_cluster(
                json!({"ecdh_curves": ["X25519:P-256", "secp384r1", "X25519MLKEM768"],
            "cipher_suites": ["[ECDHE-ECDSA-AES128-GCM-SHA256|ECDHE-ECDSA-CHACHA20-POLY1305]", "ECDHE-RSA-AES128-GCM-SHA256"]}),
            ),
        ),
    ];
    cases.extend(built());
    cases.extend(routing());
    cases.extend(upstream());
    cases.extend(tls_and_listeners());
    // Every cipher alias is one BoringSSL has, and selects something alone.
    for alias in switchyard::config::checks::CIPHER_ALIASES {
        cases.push(valid(
            Cluster,
            tls_cluster(json!({"cipher_suites": [alias]})),
        ));
    }
    // Regexes, judged by RE2's syntax: what RE2 refuses, and what it accepts though Rust's
    // regex would not.
    for bad in [
        "*",
        "+a",
        "a**",
        "a{2}{3}",
        "(a",
        "a)",
        "[a",
        "[z-a]",
        "\\q",
        "\\1",
        "\\Z",
        "a{1001}",
        "x{2,1}",
        "(?x)a",
        "(?=a)",
        "[[:foo:]]",
        // RE2's program over Envoy's default limit of 100, counted as RE2
        // counts it (tests/re2_envoy.rs compares thousands more).
        "x{0,49}",
        "^/static/[a-z0-9-]{1,64}/[a-z0-9-]{1,64}\\.(css|js|png)$",
        "(?i)[a-z]{60}\\d{40}",
        "(?P<n-1>a)",
        // Envoy's RE2 reads Latin-1: no character past \xff.
        "\\x{100}",
        // Nested repeats past 1000 copies; and at 1000, refused for its program.
        "((a{20}){20}){3}",
        "(a{10}){100}",
    ] {
        cases.push(case("envoy", Routes, regex_route(bad)));
    }
    for good in [
        "^/api/v[0-9]+/.*$",
        "\\Qa.b\\E",
        "\\C",
        "a{,3}",
        "(?P<n>a)",
        "(?<m>b)",
        "[[:alpha:]]",
        "\\pN",
        "\\z",
        "[a&&b]",
        "(?i)a",
        "\\_",
        // At the limit, and just under it.
        "x{0,48}",
        "^/static/[a-z0-9-]{1,8}\\.(css|js)$",
        "\\x{ff}é",
        "\\p{Greek}",
        "(?P<n>a)(?P<n>b)",
    ] {
        cases.push(valid(Routes, regex_route(good)));
    }
    cases
}

/// The loader's verdict: `None` if the file loads, else (rule, Envoy's words).
fn load(case: &Case, dir: &Path) -> Option<(String, String)> {
    let key = match case.kind {
        Kind::Cluster => "clusters",
        Kind::Endpoints => "endpoints",
        Kind::Listener => "listeners",
        Kind::Routes => "routes",
    };
    let file = json!({ key: [case.resource.clone()] });
    let path = dir.join("snapshot.json");
    let text = serde_json::to_string(&file).expect("json");
    match switchyard::config::load_text(&path, &text) {
        Ok(_) => None,
        Err(errors) => {
            assert_eq!(errors.len(), 1, "{errors:?}");
            let message = errors[0].to_string();
            if !message.contains("breaks Envoy's rule ") {
                let words = message
                    .split("Envoy would reject it with: ")
                    .nth(1)
                    .unwrap_or_else(|| panic!("neither a rule nor a check: {message}"));
                return Some(("envoy".to_string(), words.to_string()));
            }
            let rule = message
                .split("breaks Envoy's rule ")
                .nth(1)
                .and_then(|s| s.split(';').next())
                .unwrap_or_else(|| panic!("not a rule error: {message}"))
                .to_string();
            let words = message
                .split("Proto constraint validation failed (")
                .nth(1)
                .and_then(|s| s.strip_suffix(')'))
                .unwrap_or_else(|| panic!("no Envoy words: {message}"))
                .to_string();
            Some((rule, words))
        }
    }
}

/// Envoy's verdict on a bootstrap holding the resource: `None` if valid, else its error.
fn envoy_verdict(envoy: &Path, case: &Case) -> Option<String> {
    let r = case.resource.clone();
    let statics = match case.kind {
        Kind::Cluster => json!({"clusters": [r]}),
        Kind::Endpoints => json!({"clusters": [{"name": "c", "connect_timeout": "1s",
            "type": "STATIC", "load_assignment": r}]}),
        Kind::Listener => json!({"listeners": [r]}),
        Kind::Routes => json!({"listeners": [{"name": "l",
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": 10000}},
            "filter_chains": [{"filters": [{"name": "hcm", "typed_config": {
                "@type": HCM, "stat_prefix": "s", "route_config": r,
                "http_filters": [{"name": "router", "typed_config": {"@type": ROUTER}}]}}]}]}],
            "clusters": [cluster(json!({}))]}),
    };
    let mut statics = statics;
    if matches!(case.kind, Kind::Listener) {
        statics["clusters"] = json!([cluster(json!({}))]);
    }
    let bootstrap = json!({"static_resources": statics});
    // The same runner as `validate --envoy`: Envoy's own verdict, its preamble cut.
    let verdict =
        switchyard::preflight::run_envoy(envoy, &bootstrap, switchyard::preflight::DEFAULT_TIMEOUT)
            .expect("Envoy runs");
    verdict.err().map(|text| {
        text.strip_prefix("Proto constraint validation failed (")
            .and_then(|s| s.trim_end().strip_suffix(')'))
            .map_or(text.clone(), str::to_string)
    })
}

#[test]
fn loader_and_envoy_agree_on_every_rule_kind() {
    let Some(envoy) = envoy_binary() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut disagreements = Vec::new();
    let mut kinds = std::collections::BTreeSet::new();
    for (i, case) in corpus().iter().enumerate() {
        let ours = load(case, dir.path());
        let theirs = envoy_verdict(&envoy, case);
        eprintln!(
            "case {i} {:?} {:?}\n  ours:   {ours:?}\n  envoy:  {theirs:?}",
            case.rule, case.kind
        );
        match (&ours, &theirs, case.rule) {
            (None, None, None) => {}
            (Some((rule, words)), Some(envoy_words), Some(expected)) => {
                kinds.insert(rule.clone());
                let agree = if rule == "envoy" {
                    envoy_words.contains(words.as_str())
                } else {
                    envoy_words.ends_with(words.as_str())
                };
                if rule != expected || !agree {
                    disagreements.push(format!(
                        "case {i} ({expected}): loader {rule}: {words}\n    envoy: {envoy_words}"
                    ));
                }
            }
            _ => disagreements.push(format!(
                "case {i} ({:?}): loader {ours:?}, envoy {theirs:?}",
                case.rule
            )),
        }
    }
    eprintln!(
        "rule kinds checked against Envoy: {} {kinds:?}",
        kinds.len()
    );
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}

/// The loader's verdict on a snapshot file (its errors, one per line) and Envoy's on a
/// bootstrap.
fn verdicts(
    envoy: &Path,
    name: &str,
    file: &Value,
    bootstrap: &Value,
) -> (Result<(), String>, Result<(), String>) {
    let text = serde_json::to_string(file).expect("json");
    let ours = switchyard::config::load_text(Path::new(name), &text)
        .map(|_| ())
        .map_err(|errors| {
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        });
    let theirs =
        switchyard::preflight::run_envoy(envoy, bootstrap, switchyard::preflight::DEFAULT_TIMEOUT)
            .expect("Envoy runs");
    (ours, theirs)
}

/// A runtime in the files raises (or lowers) the RE2 program limit for the nodes it reaches,
/// as Envoy's runtime does: the loader's verdict on a regex of 124 with
/// the limit at 200, 110 and unset is Envoy's with the same runtime as a layer.
#[test]
fn regex_program_limit_set_by_a_runtime_is_envoys() {
    let Some(envoy) = envoy_binary() else { return };
    let route = regex_route("x{0,60}");
    for limit in [Some(json!(200)), Some(json!("110")), None] {
        let mut file = json!({"routes": [route.clone()]});
        let mut bootstrap = json!({"static_resources": {"listeners": [{"name": "l",
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": 10000}},
            "filter_chains": [{"filters": [{"name": "hcm", "typed_config": {
                "@type": HCM, "stat_prefix": "s", "route_config": route.clone(),
                "http_filters": [{"name": "router", "typed_config": {"@type": ROUTER}}]}}]}]}],
            "clusters": [cluster(json!({}))]}});
        if let Some(limit) = &limit {
            // Nested in the file, flat in the bootstrap: Envoy reads both as one key.
            file["runtimes"] = json!([{"name": "limits",
                "layer": {"re2": {"max_program_size": {"error_level": limit}}}}]);
            bootstrap["layered_runtime"] = json!({"layers": [{"name": "limits",
                "static_layer": {"re2.max_program_size.error_level": limit}}]});
        }
        let (ours, theirs) = verdicts(&envoy, "limits.json", &file, &bootstrap);
        eprintln!(
            "limit {limit:?}: ours {:?}, Envoy {theirs:?}",
            ours.as_ref().err()
        );
        match (&ours, &theirs) {
            (Ok(_), Ok(())) => assert_eq!(limit, Some(json!(200))),
            (Err(ours), Err(theirs)) => {
                let words = ours
                    .split("Envoy would reject it with: ")
                    .nth(1)
                    .expect("in Envoy's words");
                assert!(theirs.contains(words), "ours: {words}\nEnvoy: {theirs}");
                assert_ne!(limit, Some(json!(200)));
            }
            _ => panic!("limit {limit:?}: ours {ours:?}, Envoy {theirs:?}"),
        }
    }
}

/// An RTDS runtime's values as Envoy's runtime loads a layer (the catalogue's X1): a list or
/// a null anywhere in it is refused, in Envoy's words and with the key's dotted name; the
/// same layer is given to Envoy as a static layer of its bootstrap.
#[test]
fn runtime_values_envoy_refuses_are_refused_in_its_words() {
    let Some(envoy) = envoy_binary() else { return };
    let layers = [
        (
            json!({"a": [1, 2]}),
            Some("Invalid runtime entry value for a"),
        ),
        (
            json!({"a": null}),
            Some("Invalid runtime entry value for a"),
        ),
        (
            json!({"a": {"b": {"c": [1]}}}),
            Some("Invalid runtime entry value for a.b.c"),
        ),
        (
            json!({"a": {"b": 1, "c": "x", "d": true}, "e": {"numerator": 5, "denominator": "HUNDRED"}}),
            None,
        ),
    ];
    for (layer, refused) in layers {
        let file = json!({"runtimes": [{"name": "rt", "layer": layer.clone()}]});
        let bootstrap = json!({"static_resources": {"clusters": [cluster(json!({}))]},
            "layered_runtime": {"layers": [{"name": "rt", "static_layer": layer}]}});
        let (ours, theirs) = verdicts(&envoy, "runtime.json", &file, &bootstrap);
        eprintln!(
            "{refused:?}: ours {:?}, Envoy {theirs:?}",
            ours.as_ref().err()
        );
        match (refused, &ours, &theirs) {
            (None, Ok(_), Ok(())) => {}
            (Some(words), Err(ours), Err(theirs)) => {
                assert!(
                    ours.contains(&format!("Envoy would reject it with: {words}")),
                    "{ours}"
                );
                assert!(theirs.contains(words), "Envoy: {theirs}");
            }
            _ => panic!("{refused:?}: ours {ours:?}, Envoy {theirs:?}"),
        }
    }
}

/// Two listeners on one address: a check across resources, so not a case
/// of the table above. The loader refuses the second in the words Envoy refuses it with.
#[test]
fn two_listeners_on_one_address_are_refused_in_envoy_s_words() {
    let Some(envoy) = envoy_binary() else { return };
    let tcp = |name: &str| {
        json!({"name": name, "address": {"socket_address": {"address": "127.0.0.1", "port_value": 10000}},
            "filter_chains": [{"filters": [{"name": "t", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
                "stat_prefix": "t", "cluster": "c"}}]}]})
    };
    let listeners = json!([tcp("l1"), tcp("l2")]);
    let dir = tempfile::tempdir().expect("tempdir");
    let text =
        serde_json::to_string(&json!({"listeners": listeners, "clusters": [cluster(json!({}))]}))
            .expect("json");
    std::fs::write(dir.path().join("l.json"), text).expect("write");
    let failure = switchyard::config::load(
        &[dir.path().to_path_buf()],
        &switchyard::config::LoadOptions::default(),
    )
    .expect_err("refused");
    let ours = failure.errors[0].to_string();
    let words = ours
        .split("Envoy would reject it with: ")
        .nth(1)
        .unwrap_or_else(|| panic!("not in Envoy's words: {ours}"));
    let bootstrap =
        json!({"static_resources": {"listeners": listeners, "clusters": [cluster(json!({}))]}});
    let theirs = switchyard::preflight::run_envoy(
        &envoy,
        &bootstrap,
        switchyard::preflight::DEFAULT_TIMEOUT,
    )
    .expect("Envoy runs")
    .expect_err("Envoy refuses it");
    assert!(theirs.contains(words), "ours: {words}\nEnvoy: {theirs}");
}
