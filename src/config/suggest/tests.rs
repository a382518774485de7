//! Typical typos and slips in snapshot files, each with the whole message
//! it gets (the file, line and column, the resource, the field path as the file spells it, and
//! what was meant).

use crate::config::{load, LoadOptions};

/// The errors `text` (a snapshot file) gets, with the file's path cut to `f.yaml`.
fn error_of(text: &str) -> String {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("f.yaml"), text).expect("write");
    let Err(failure) = load(&[dir.path().to_path_buf()], &LoadOptions::default()) else {
        return "(it loads)".into();
    };
    let all: Vec<String> = failure
        .errors
        .iter()
        .map(|e| {
            e.to_string()
                .replace(&format!("{}/", dir.path().display()), "")
        })
        .collect();
    all.join("\n")
}

const LB: &str = "envoy.config.cluster.v3.Cluster.LbPolicy";

#[test]
fn typos_and_slips_get_messages_that_point() {
    let cluster = |body: &str| format!("clusters:\n  - name: web\n    connect_timeout: 1s\n{body}");
    let cases: Vec<(&str, String, String)> = vec![
        (
            "a field misspelt",
            "clusters:\n  - name: web\n    conect_timeout: 1s\n".into(),
            "f.yaml:3:5: clusters[0] \"web\": conect_timeout: unknown field `conect_timeout` of \
             envoy.config.cluster.v3.Cluster; did you mean `connect_timeout`?"
                .into(),
        ),
        (
            "a field in camelCase, misspelt",
            "clusters:\n  - name: web\n    conectTimeout: 1s\n".into(),
            "f.yaml:3:5: clusters[0] \"web\": conectTimeout: unknown field `conectTimeout` of \
             envoy.config.cluster.v3.Cluster; did you mean `connect_timeout`?"
                .into(),
        ),
        (
            "an enum value misspelt",
            cluster("    lb_policy: LEAST_REQUESTS\n"),
            format!(
                "f.yaml:4:5: clusters[0] \"web\": lb_policy: unknown value `LEAST_REQUESTS` of {LB}; \
                 did you mean `LEAST_REQUEST`? Valid values: ROUND_ROBIN, LEAST_REQUEST, \
                 RING_HASH, RANDOM, MAGLEV, CLUSTER_PROVIDED, LOAD_BALANCING_POLICY_CONFIG."
            ),
        ),
        (
            "an enum value written as words",
            cluster("    lb_policy: ROUND ROBIN\n"),
            format!(
                "f.yaml:4:5: clusters[0] \"web\": lb_policy: unknown value `ROUND ROBIN` of {LB}; \
                 did you mean `ROUND_ROBIN`? Valid values: ROUND_ROBIN, LEAST_REQUEST, \
                 RING_HASH, RANDOM, MAGLEV, CLUSTER_PROVIDED, LOAD_BALANCING_POLICY_CONFIG."
            ),
        ),
        (
            "a field deep in a list",
            cluster(
                "    load_assignment:\n      cluster_name: web\n      endpoints: [{ lb_endpoints: \
                 [{ endpoint: { adress: { socket_address: { address: 1.2.3.4, port_value: 80 } } } }] }]\n",
            ),
            "f.yaml:6:50: clusters[0] \"web\": \
             load_assignment.endpoints[0].lb_endpoints[0].endpoint.adress: unknown field \
             `adress` of envoy.config.endpoint.v3.Endpoint; did you mean `address`?"
                .into(),
        ),
        (
            "a field of a typed_config, by its @type",
            "listeners:\n  - name: l\n    address: { socket_address: { address: 0.0.0.0, port_value: 80 } }\n    \
             filter_chains:\n      - filters:\n          - name: tcp\n            typed_config:\n              \
             \"@type\": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy\n              \
             stat_prefix: t\n              clustr: web\n"
                .into(),
            "f.yaml:10:15: listeners[0] \"l\": filter_chains[0].filters[0].typed_config.clustr: unknown \
             field `clustr` of envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy; did you \
             mean `cluster`?"
                .into(),
        ),
        (
            "a socket address protocol misspelt",
            "listeners:\n  - name: l\n    address: { socket_address: { address: 0.0.0.0, port_value: 80, protocol: TPC } }\n"
                .into(),
            "f.yaml:3:68: listeners[0] \"l\": address.socket_address.protocol: unknown value `TPC` of \
             envoy.config.core.v3.SocketAddress.Protocol; did you mean `TCP`? Valid values: TCP, \
             UDP."
                .into(),
        ),
        (
            "a cluster type misspelt",
            cluster("    type: STRICTDNS\n"),
            "f.yaml:4:5: clusters[0] \"web\": type: unknown value `STRICTDNS` of \
             envoy.config.cluster.v3.Cluster.DiscoveryType; did you mean `STRICT_DNS`? Valid \
             values: STATIC, STRICT_DNS, LOGICAL_DNS, EDS, ORIGINAL_DST."
                .into(),
        ),
        (
            "a health status misspelt",
            cluster(
                "    load_assignment:\n      cluster_name: web\n      endpoints: [{ lb_endpoints: \
                 [{ health_status: HEALTY, endpoint: { address: { socket_address: { address: 1.2.3.4, port_value: 80 } } } }] }]\n",
            ),
            "f.yaml:6:38: clusters[0] \"web\": load_assignment.endpoints[0].lb_endpoints[0].health_status: \
             unknown value `HEALTY` of envoy.config.core.v3.HealthStatus; did you mean `HEALTHY`? \
             Valid values: UNKNOWN, HEALTHY, UNHEALTHY, DRAINING, TIMEOUT, DEGRADED."
                .into(),
        ),
        (
            "a route field misspelt",
            "routes:\n  - name: r\n    virtual_hosts: [{ name: v, domains: [\"*\"], routes: [{ match: { prefx: / }, route: { cluster: web } }] }]\n"
                .into(),
            "f.yaml:3:68: routes[0] \"r\": virtual_hosts[0].routes[0].match.prefx: unknown field \
             `prefx` of envoy.config.route.v3.RouteMatch; did you mean `prefix`?"
                .into(),
        ),
        (
            "a virtual host field misspelt",
            "routes:\n  - name: r\n    virtual_hosts: [{ name: v, domain: [\"*\"] }]\n".into(),
            "f.yaml:3:32: routes[0] \"r\": virtual_hosts[0].domain: unknown field `domain` of \
             envoy.config.route.v3.VirtualHost; did you mean `domains`?"
                .into(),
        ),
        (
            "a retry policy field misspelt",
            "routes:\n  - name: r\n    virtual_hosts: [{ name: v, domains: [\"*\"], routes: [{ match: { prefix: / }, \
             route: { cluster: web, retry_policy: { retry_on: 5xx, num_retry: 2 } } }] }]\n"
                .into(),
            "f.yaml:3:135: routes[0] \"r\": virtual_hosts[0].routes[0].route.retry_policy.num_retry: \
             unknown field `num_retry` of envoy.config.route.v3.RetryPolicy; did you mean \
             `num_retries`?"
                .into(),
        ),
        (
            "a health check field misspelt",
            cluster("    health_checks: [{ timeout: 1s, interval: 1s, unhealthy_treshold: 2, healthy_threshold: 1, tcp_health_check: {} }]\n"),
            "f.yaml:4:50: clusters[0] \"web\": health_checks[0].unhealthy_treshold: unknown field \
             `unhealthy_treshold` of envoy.config.core.v3.HealthCheck; did you mean \
             `unhealthy_threshold`?"
                .into(),
        ),
        (
            "a circuit breaker field misspelt",
            cluster("    circuit_breakers: { thresholds: [{ max_connection: 100 }] }\n"),
            "f.yaml:4:40: clusters[0] \"web\": circuit_breakers.thresholds[0].max_connection: unknown \
             field `max_connection` of envoy.config.cluster.v3.CircuitBreakers.Thresholds; did \
             you mean `max_connections`?"
                .into(),
        ),
        (
            "a circuit breaker priority misspelt",
            cluster("    circuit_breakers: { thresholds: [{ priority: HIGHER }] }\n"),
            "f.yaml:4:40: clusters[0] \"web\": circuit_breakers.thresholds[0].priority: unknown value \
             `HIGHER` of envoy.config.core.v3.RoutingPriority; did you mean `HIGH`? Valid \
             values: DEFAULT, HIGH."
                .into(),
        ),
        (
            "a DNS lookup family misspelt",
            cluster("    dns_lookup_family: V4ONLY\n"),
            "f.yaml:4:5: clusters[0] \"web\": dns_lookup_family: unknown value `V4ONLY` of \
             envoy.config.cluster.v3.Cluster.DnsLookupFamily; did you mean `V4_ONLY`? Valid \
             values: AUTO, V4_ONLY, V6_ONLY, V4_PREFERRED, ALL."
                .into(),
        ),
        (
            "an HTTP connection manager field misspelt",
            "listeners:\n  - name: l\n    address: { socket_address: { address: 0.0.0.0, port_value: 80 } }\n    \
             filter_chains:\n      - filters:\n          - name: hcm\n            typed_config:\n              \
             \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager\n              \
             stat_prefix: h\n              rds: { route_config_name: r, config_source: { ads: {} } }\n              \
             http_filter: []\n"
                .into(),
            "f.yaml:11:15: listeners[0] \"l\": filter_chains[0].filters[0].typed_config.http_filter: \
             unknown field `http_filter` of \
             envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager; \
             did you mean `http_filters`?"
                .into(),
        ),
        (
            "a codec type misspelt",
            "listeners:\n  - name: l\n    address: { socket_address: { address: 0.0.0.0, port_value: 80 } }\n    \
             filter_chains:\n      - filters:\n          - name: hcm\n            typed_config:\n              \
             \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager\n              \
             stat_prefix: h\n              codec_type: HTTP_2\n"
                .into(),
            "f.yaml:10:15: listeners[0] \"l\": filter_chains[0].filters[0].typed_config.codec_type: \
             unknown value `HTTP_2` of \
             envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.CodecType; \
             did you mean `HTTP2`? Valid values: AUTO, HTTP1, HTTP2, HTTP3."
                .into(),
        ),
        (
            "a secret field misspelt",
            "secrets:\n  - name: s\n    tls_certificate: { certificate_chain: { filename: /a.pem }, privat_key: { filename: /a.key } }\n"
                .into(),
            "f.yaml:3:65: secrets[0] \"s\": tls_certificate.privat_key: unknown field `privat_key` of \
             envoy.extensions.transport_sockets.tls.v3.TlsCertificate; did you mean \
             `private_key`?"
                .into(),
        ),
        (
            "a name nothing resembles: the fields are listed",
            "routes:\n  - name: r\n    virtual_hosts: [{ name: v, domains: [\"*\"], routes: [{ match: { prefix: / }, redirect: { zzzz: 1 } }] }]\n"
                .into(),
            "f.yaml:3:93: routes[0] \"r\": virtual_hosts[0].routes[0].redirect.zzzz: unknown field \
             `zzzz` of envoy.config.route.v3.RedirectAction; its fields: `host_redirect`, \
             `path_redirect`, `response_code`, `https_redirect`, `prefix_rewrite`, \
             `strip_query`, `scheme_redirect`, `port_redirect`, `regex_rewrite`, \
             `path_rewrite`"
                .into(),
        ),
    ];
    assert!(cases.len() >= 20, "{} cases", cases.len());
    let mut wrong = Vec::new();
    for (what, text, want) in &cases {
        let got = error_of(text);
        if &got != want {
            wrong.push(format!("{what}:\n  got:  {got}\n  want: {want}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// JSON files point as YAML ones do (for positions, JSON is read as the YAML it is).
#[test]
fn json_files_point_too() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(
        dir.path().join("f.json"),
        "{\"clusters\": [\n  {\"name\": \"web\",\n   \"conect_timeout\": \"1s\"}\n]}\n",
    )
    .expect("write");
    let failure = load(&[dir.path().to_path_buf()], &LoadOptions::default()).expect_err("refused");
    assert_eq!(
        failure.errors[0]
            .to_string()
            .replace(&format!("{}/", dir.path().display()), ""),
        "f.json:3:4: clusters[0] \"web\": conect_timeout: unknown field `conect_timeout` of \
         envoy.config.cluster.v3.Cluster; did you mean `connect_timeout`?"
    );
}
