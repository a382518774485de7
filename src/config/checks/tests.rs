//! The checks on their own; tests/rules_envoy.rs holds each against the real Envoy.

use super::*;

#[test]
fn re2s_syntax_in_re2s_words() {
    let mut wrong = Vec::new();
    for (pattern, expected) in [
        ("a", Ok(())),
        ("^/api/v[0-9]+/.*$", Ok(())),
        ("\\Qa.b\\E", Ok(())),
        ("\\C", Ok(())),
        ("a{,3}", Ok(())),
        ("(?P<n>a)(?<m>b)", Ok(())),
        ("[[:alpha:]]", Ok(())),
        ("*", Err("no argument for repetition operator: *")),
        ("+a", Err("no argument for repetition operator: +")),
        ("a**", Err("bad repetition operator: **")),
        ("a{2}{3}", Err("bad repetition operator: {2}{3}")),
        ("(a", Err("missing ): (a")),
        ("a)", Err("unexpected ): a)")),
        ("[a", Err("missing ]: [a")),
        ("[z-a]", Err("invalid character class range: z-a")),
        ("\\q", Err("invalid escape sequence: \\q")),
        ("\\1", Err("invalid escape sequence: \\1")),
        ("a{1001}", Err("invalid repetition size: {1001}")),
        ("x{2,1}", Err("invalid repetition size: {2,1}")),
        ("(?x)a", Err("invalid perl operator: (?x")),
        ("(?=a)", Err("invalid perl operator: (?=")),
        ("[[:foo:]]", Err("invalid character class range: [:foo:]")),
        // What Envoy 1.40's RE2 accepts and regex-syntax would not, or the reverse.
        ("\\p{Greek}", Ok(())),
        ("\\x{41}\\x{ff}", Ok(())),
        ("(?P<n>a)(?P<n>b)", Ok(())),
        ("(?P<n-1>a)", Err("invalid named capture group: (?P<n-1>")),
        // Latin-1: nothing past \xff.
        ("\\x{100}", Err("invalid escape sequence: \\x{100")),
        ("\\400", Err("invalid escape sequence: \\400")),
        ("((a{20}){20}){3}", Err("invalid repetition size: {3}")),
        ("a\\", Err("trailing \\")),
    ] {
        let got = re2::program_size(pattern)
            .map(|_| ())
            .map_err(|e| e.to_string());
        if got != expected.map_err(str::to_string) {
            wrong.push(format!("{pattern}: {got:?}, expected {expected:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_cipher_entry_is_judged_by_what_it_selects() {
    assert!(cipher_entry("ECDHE-RSA-AES128-GCM-SHA256") == Entry::Selects);
    assert!(
        cipher_entry("[ECDHE-ECDSA-AES128-GCM-SHA256|ECDHE-ECDSA-CHACHA20-POLY1305]")
            == Entry::Selects
    );
    assert!(cipher_entry("HIGH") == Entry::Selects);
    assert!(cipher_entry("ECDHE+AESGCM") == Entry::Selects);
    assert!(cipher_entry("!aRSA") == Entry::SelectsNothing);
    assert!(cipher_entry("TLS_AES_128_GCM_SHA256") == Entry::SelectsNothing);
    assert!(cipher_entry("X25519") == Entry::Unknown);
    assert!(cipher_entry("ecdhe-rsa-aes128-gcm-sha256") == Entry::Unknown);
    assert!(cipher_entry("[ECDHE-ECDSA-AES128-GCM-SHA256|NOPE-NOPE]") == Entry::Unknown);
}

fn listener_with_router(value: &str) -> DynamicMessage {
    let yaml = format!(
        r#"
name: l
filter_chains:
- filters:
  - name: hcm
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      stat_prefix: s
      route_config: {{name: r}}
      http_filters:
      - name: envoy.filters.http.router
        typed_config:
          "@type": type.googleapis.com/xds.type.v3.TypedStruct
          type_url: {value}
"#
    );
    let json: serde_json::Value = serde_yaml::from_str(&yaml).expect("yaml");
    super::super::json::from_json(
        &descriptors::message_named("envoy.config.listener.v3.Listener")
            .expect("the Listener type"),
        &json,
    )
    .expect("the listener decodes")
}

/// Envoy reads a TypedStruct's value as its type: what the type refuses is refused (tested
/// against Envoy in tests/json_envoy.rs).
#[test]
fn a_typed_struct_is_read_as_its_type() {
    let router = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";
    assert_eq!(
        check(&listener_with_router(&format!(
            "{router}\n          value: {{dynamic_stats: true}}"
        ))),
        Ok(None)
    );
    let err = check(&listener_with_router(&format!(
        "{router}\n          value: {{nope: 1}}"
    )))
    .unwrap_err();
    assert!(err.envoy.contains("nope"), "{err:?}");
    assert!(err.path.ends_with("typed_config.value"), "{err:?}");
    // A type the pool does not know is a plugin's business.
    assert_eq!(
        check(&listener_with_router(
            "type.googleapis.com/acme.Plugin\n          value: {x: 1}"
        )),
        Ok(None)
    );
}

/// EDS and LEDS hosts are IP addresses: Envoy resolves none, refuses a name (a NACK over EDS;
/// over LEDS, Envoy 1.40 crashes on it, found by the conformance matrix), and says so in these
/// words. A cluster's own load assignment may name hosts its type resolves (STRICT_DNS).
#[test]
fn eds_and_leds_hosts_are_ip_addresses() {
    let load = |text: &str| crate::config::load_text(std::path::Path::new("s.yaml"), text);
    let errors = load(
        "endpoints:\n  - cluster_name: c\n    endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: not-an-ip, port_value: 80 } } } }] }]\n",
    )
    .expect_err("a name is not an EDS host");
    let text = errors[0].to_string();
    assert!(
        text.contains("endpoints[0].lb_endpoints[0].endpoint.address.socket_address.address")
            && text.contains("malformed IP address: not-an-ip. Consider setting resolver_name"),
        "{text}"
    );
    let errors = load(
        "lb_endpoints:\n  - name: \"xdstp://a/envoy.config.endpoint.v3.LbEndpoint/z/m1\"\n    endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 80 } }, additional_addresses: [{ address: { socket_address: { address: host.example, port_value: 80 } } }] }\n",
    )
    .expect_err("a name is not a LEDS host");
    assert!(
        errors[0].to_string().contains(
            "endpoint.additional_addresses[0].address.socket_address.address: Envoy would reject it with: malformed IP address: host.example"
        ),
        "{}",
        errors[0]
    );
    for fine in [
        "endpoints:\n  - cluster_name: c\n    endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: \"::1\", port_value: 80 } } } }] }]\n",
        "endpoints:\n  - cluster_name: c\n    endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: svc, port_value: 80, resolver_name: custom } } } }] }]\n",
        "clusters:\n  - name: d\n    type: STRICT_DNS\n    connect_timeout: 1s\n    load_assignment: { cluster_name: d, endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: svc.example, port_value: 80 } } } }] }] }\n",
    ] {
        assert!(load(fine).is_ok(), "{fine}: {:?}", load(fine).err());
    }
}

/// What the checks beyond the route, upstream and TLS field rules leave alone on purpose
/// (the verdict depends on something the resource does not hold), and where a refusal
/// points: the pure side of the catalogue's rows R11, R14, T7, H9 and X1.
#[test]
fn checks_judge_only_what_the_resource_decides_and_point_at_the_field() {
    let load = |text: &str| crate::config::load_text(std::path::Path::new("s.yaml"), text);
    let refused = |text: &str| {
        load(text)
            .expect_err("refused")
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    };
    // Weights a runtime may set are not summed.
    let weighted = |prefix: &str| {
        format!(
            "routes:\n  - name: r\n    virtual_hosts: [{{ name: v, domains: [\"*\"], routes: [{{ match: {{ prefix: / }}, route: {{ weighted_clusters: {{ {prefix}clusters: [{{ name: c, weight: 0 }}] }} }} }}] }}]\n"
        )
    };
    assert!(load(&weighted("runtime_key_prefix: w, ")).is_ok());
    let text = refused(&weighted(""));
    assert!(
        text.contains("virtual_hosts[0].routes[0].route.weighted_clusters: Envoy would reject it with: Sum of weights"),
        "{text}"
    );
    // A virtual host served alone (VHDS) is judged against the configuration it joins.
    let long = "x".repeat(5000);
    assert!(load(&format!(
        "virtual_hosts:\n  - name: \"r/v\"\n    domains: [a.example]\n    routes: [{{ match: {{ prefix: / }}, direct_response: {{ status: 200, body: {{ inline_string: {long} }} }} }}]\n"
    ))
    .is_ok());
    // A validation context combined with SDS, or with its CA from elsewhere: not judged.
    let tls = |common: &str| {
        format!(
            "clusters:\n  - name: c\n    connect_timeout: 1s\n    transport_socket: {{ name: tls, typed_config: {{ \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext, common_tls_context: {{ {common} }} }} }}\n"
        )
    };
    let san = "match_typed_subject_alt_names: [{ san_type: DNS, matcher: { exact: a } }]";
    assert!(load(&tls(&format!(
        "combined_validation_context: {{ default_validation_context: {{ {san} }}, validation_context_sds_secret_config: {{ name: ca, sds_config: {{ ads: {{}} }} }} }}"
    )))
    .is_ok());
    assert!(load(&tls(&format!(
        "validation_context: {{ {san}, system_root_certs: {{}} }}"
    )))
    .is_ok());
    let text = refused(&tls(&format!("validation_context: {{ {san} }}")));
    assert!(
        text.contains("common_tls_context.validation_context.match_typed_subject_alt_names: Envoy would reject it with: SAN-based verification"),
        "{text}"
    );
    // Every inconsistent HTTP/2 identifier is named, as Envoy names them.
    let settings = "[{ identifier: 9, value: 1 }, { identifier: 9, value: 2 }, { identifier: 10, value: 1 }, { identifier: 10, value: 3 }, { identifier: 9, value: 1 }]";
    let text = refused(&format!(
        "clusters:\n  - name: c\n    connect_timeout: 1s\n    http2_protocol_options: {{ custom_settings_parameters: {settings} }}\n"
    ));
    assert!(text.contains("identifiers = {0x09,0x0a}"), "{text}");
    // A runtime's leaves: numbers, strings and booleans, however deep.
    assert!(
        load("runtimes:\n  - name: rt\n    layer: { a: { b: { c: 1, d: x, e: false } } }\n")
            .is_ok()
    );
    let text = refused("runtimes:\n  - name: rt\n    layer: { a: { b: [] } }\n");
    assert!(
        text.contains(
            "layer[\"a\"][\"b\"]: Envoy would reject it with: Invalid runtime entry value for a.b"
        ),
        "{text}"
    );
}

/// No bytes make a reader of a resource's bytes panic or hang: random bytes, and PEM, DER,
/// JSON, htpasswd and URI template shapes with random contents, through every judge (proptest prints the
/// seed of a failure and replays it).
mod bytes_never_panic {
    use super::super::{basic_auth, jwks, lua, ocsp, pkcs12, tls_bytes, uri_template};
    use proptest::prelude::*;

    fn pem(label: &str, body: &[u8]) -> Vec<u8> {
        let mut out = format!("-----BEGIN {label}-----\n").into_bytes();
        out.extend_from_slice(body);
        out.extend_from_slice(format!("\n-----END {label}-----\n").as_bytes());
        out
    }

    fn judge_all(bytes: &[u8]) {
        let _ = tls_bytes::judge_chain(bytes, "<inline>");
        let _ = tls_bytes::judge_key(bytes, bytes, Some(b"pw"), "<inline>");
        let _ = tls_bytes::judge_key(bytes, bytes, None, "<inline>");
        let _ = tls_bytes::judge_trusted_ca(bytes, "<inline>");
        let _ = tls_bytes::judge_crl(bytes, "<inline>");
        let _ = tls_bytes::certificates(bytes);
        let _ = ocsp::judge(bytes, &[1]);
        let _ = pkcs12::judge(bytes, b"");
        let text = String::from_utf8_lossy(bytes);
        let _ = jwks::judge(&text);
        let _ = basic_auth::htpasswd(&text);
        let _ = uri_template::match_template(&text);
        let _ = uri_template::rewrite_template(&text);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            judge_all(&bytes);
        }

        #[test]
        fn pem_blocks_of_random_base64(
            label in prop::sample::select(vec![
                "CERTIFICATE", "TRUSTED CERTIFICATE", "PRIVATE KEY", "RSA PRIVATE KEY",
                "EC PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "X509 CRL",
            ]),
            body in "[A-Za-z0-9+/= \n]{0,400}",
        ) {
            judge_all(&pem(label, body.as_bytes()));
        }

        #[test]
        fn der_shaped_bytes(tag in any::<u8>(), len in 0u8..200, rest in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut bytes = vec![0x30, 0x82, 0x01, len, tag];
            bytes.extend(rest);
            judge_all(&bytes);
        }

        #[test]
        fn json_shaped_keys(kty in "(RSA|EC|oct|OKP|x)", field in "[a-z]{1,3}", value in "[A-Za-z0-9_+/=-]{0,90}") {
            let text = format!(r#"{{"keys":[{{"kty":"{kty}","{field}":"{value}","n":"{value}","e":"{value}","x":"{value}","y":"{value}","crv":"P-256","k":"{value}"}}]}}"#);
            judge_all(text.as_bytes());
        }

        #[test]
        fn uri_templates_of_template_characters(template in "/?[a-z{}=*/.^\u{e9}]{0,40}") {
            let _ = uri_template::match_template(&template);
            let _ = uri_template::rewrite_template(&template);
        }

        #[test]
        fn lua_of_random_text(source in "[ -~\n]{0,200}") {
            let _ = lua::compile(source.as_bytes());
        }
    }
}
