//! What Envoy 1.40 refuses while it builds a cluster, a TLS context (its certificates,
//! validation context, session ticket keys and stapling), an HTTP connection manager, a
//! filter chain, a route's headers or an IP range, though every field rule holds:
//! each check is one of Envoy's exceptions or invalid-argument statuses, worded as Envoy
//! words it (the catalogue, with where in Envoy each is decided, is docs/reference.md
//! "What Envoy refuses beyond its field rules").
//!
//! Must not: guess. A check is here only when Envoy's verdict is known for every input it
//! judges, and each is held against the real Envoy by `tests/rules_envoy.rs`; where the
//! verdict depends on something not in the resource (an extension's own code, another
//! transport socket), the check judges nothing.

use std::net::IpAddr;

use prost_reflect::{DynamicMessage, ReflectMessage, Value};

use super::refusal::{beyond, refuse, Refusal};
use crate::config::descriptors;
use crate::config::fields::{has, message as field, messages, string, strings};
use envoy_types::pb::envoy::config::cluster::v3::cluster::{DiscoveryType, LbPolicy};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::downstream_tls_context::OcspStaplePolicy;

/// An `Any`'s payload, decoded as its type; `None` for a type the pool does not know (or a
/// payload that does not decode: the field rules say so).
pub(super) fn payload(any: &DynamicMessage) -> Option<DynamicMessage> {
    let url = string(any, "type_url");
    let (_, name) = url.rsplit_once('/')?;
    let descriptor = descriptors::message_named(name)?;
    let bytes = any
        .get_field_by_name("value")
        .and_then(|v| v.as_bytes().cloned())
        .unwrap_or_default();
    DynamicMessage::decode(descriptor, bytes).ok()
}

/// The full name of the type in an `Any` field of `message` (`""` when none).
fn any_type(message: &DynamicMessage, name: &str) -> String {
    field(message, name)
        .map(|any| string(&any, "type_url"))
        .and_then(|url| url.rsplit_once('/').map(|(_, n)| n.to_string()))
        .unwrap_or_default()
}

/// An enum field's number (0, its default, when unset).
pub(super) fn enum_number(message: &DynamicMessage, name: &str) -> i32 {
    message
        .get_field_by_name(name)
        .and_then(|v| v.as_enum_number())
        .unwrap_or(0)
}

/// A wrapper field's value (`UInt32Value`, `UInt64Value`, ...), when set.
pub(super) fn wrapped(message: &DynamicMessage, name: &str) -> Option<u64> {
    let wrapper = field(message, name)?;
    let value = wrapper.get_field_by_name("value")?;
    value.as_u64().or_else(|| value.as_u32().map(u64::from))
}

/// A `Duration` field, in nanoseconds, when set.
pub(super) fn nanos(message: &DynamicMessage, name: &str) -> Option<i128> {
    let duration = field(message, name)?;
    let seconds = duration.get_field_by_name("seconds")?.as_i64()?;
    let nanos = duration.get_field_by_name("nanos")?.as_i32()?;
    Some(i128::from(seconds) * 1_000_000_000 + i128::from(nanos))
}

pub(super) use crate::config::fields::inline_data;

/// Envoy's words for a range whose address is not an IP address.
type Words = fn(&DynamicMessage, &str) -> String;

/// A `CidrRange`'s address is an IP address: Envoy parses it as one (the length goes in
/// `prefix_len`, never after a `/`). Where it is decides Envoy's words: the HTTP connection
/// manager's internal addresses (`IpList`), a filter chain's match
/// (`FilterChainManagerImpl`), an RBAC principal or permission (`rbac::Matcher`).
pub(super) fn cidr_ranges(message: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let (fields, words): (&[&str], Words) =
        match message.descriptor().full_name() {
            "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.InternalAddressConfig" => {
                (&["cidr_ranges"], |range, address| {
                    let length = wrapped(range, "prefix_len").unwrap_or(0);
                    format!(
                        "invalid ip/mask combo '{address}/{length}' (format is <ip>/<# mask bits>)"
                    )
                })
            }
            "envoy.config.listener.v3.FilterChainMatch" => {
                (&["prefix_ranges", "source_prefix_ranges"], |_, address| {
                    format!("malformed IP address: {address}")
                })
            }
            "envoy.config.rbac.v3.Principal" => (
                &["direct_remote_ip", "remote_ip", "source_ip"],
                |_, address| format!("Failed to create CIDR range: malformed IP address: {address}"),
            ),
            "envoy.config.rbac.v3.Permission" => (&["destination_ip"], |_, address| {
                format!("Failed to create CIDR range: malformed IP address: {address}")
            }),
            _ => return Ok(()),
        };
    for name in fields {
        let listed = message
            .descriptor()
            .get_field_by_name(name)
            .is_some_and(|f| f.is_list());
        let ranges = if listed {
            messages(message, name)
        } else {
            field(message, name).into_iter().collect()
        };
        for (i, range) in ranges.iter().enumerate() {
            let address = string(range, "address_prefix");
            if address.parse::<IpAddr>().is_ok() {
                continue;
            }
            let mut here = beyond(at, &[name]);
            if listed {
                here.push(format!("[{i}]"));
            }
            here.push("address_prefix".into());
            return refuse(&here, words(range, &address));
        }
    }
    Ok(())
}

/// The HTTP protocol options a cluster gives its upstreams
/// (`envoy.extensions.upstreams.http.v3.HttpProtocolOptions`), if any.
pub(super) fn http_protocol_options(cluster: &DynamicMessage) -> Option<DynamicMessage> {
    let Some(Value::Map(options)) = cluster
        .get_field_by_name("typed_extension_protocol_options")
        .as_deref()
        .cloned()
    else {
        return None;
    };
    // Found by its type, whatever its key says (a key Envoy does not know is a refusal of
    // its own, not this one's).
    options.values().find_map(|any| {
        any.as_message().and_then(payload).filter(|p| {
            p.descriptor().full_name() == "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
        })
    })
}

/// What a cluster's only transport socket is: `Some("")` for none (plaintext), its type's
/// full name otherwise; `None` when it picks among several (`transport_socket_matches`).
fn transport_socket(cluster: &DynamicMessage) -> Option<String> {
    if !messages(cluster, "transport_socket_matches").is_empty() {
        return None;
    }
    Some(
        field(cluster, "transport_socket")
            .map(|socket| any_type(&socket, "typed_config"))
            .unwrap_or_default(),
    )
}

const RAW_BUFFER: &str = "envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer";
const QUIC_UPSTREAM: &str = "envoy.extensions.transport_sockets.quic.v3.QuicUpstreamTransport";

/// A cluster's type (`STATIC` when it says none); `None` for a cluster of an extension type
/// (`cluster_type`), which its own code builds, or of a number this API does not know.
pub(super) fn cluster_kind(cluster: &DynamicMessage) -> Option<DiscoveryType> {
    if has(cluster, "cluster_type") {
        return None;
    }
    DiscoveryType::try_from(enum_number(cluster, "type")).ok()
}

/// A cluster as Envoy's cluster manager and cluster factories build it: its type and its
/// load balancer, its endpoints as its type takes them, its protocol options against its
/// transport socket, and a gRPC health check on a cluster that speaks HTTP/2.
pub(super) fn cluster(cluster: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let name = string(cluster, "name");
    let kind = cluster_kind(cluster);
    let lb = LbPolicy::try_from(enum_number(cluster, "lb_policy")).ok();
    let assignment = field(cluster, "load_assignment");
    match kind {
        Some(DiscoveryType::OriginalDst) => {
            if assignment.is_some() {
                return refuse(
                    &beyond(at, &["load_assignment"]),
                    "ORIGINAL_DST clusters must have no load assignment configured".into(),
                );
            }
            if lb != Some(LbPolicy::ClusterProvided) && !has(cluster, "load_balancing_policy") {
                let lb = lb.map_or("?", |l| l.as_str_name());
                return refuse(
                    &beyond(at, &["lb_policy"]),
                    format!(
                        "cluster: LB policy {lb} is not valid for Cluster type ORIGINAL_DST. Only \
                         'CLUSTER_PROVIDED' is allowed with cluster type 'ORIGINAL_DST'"
                    ),
                );
            }
        }
        Some(DiscoveryType::LogicalDns) => {
            let Some(assignment) = &assignment else {
                return refuse(at, "LOGICAL_DNS clusters must have a single host".into());
            };
            let localities = messages(assignment, "endpoints");
            let single =
                localities.len() == 1 && messages(&localities[0], "lb_endpoints").len() == 1;
            if !single {
                return refuse(
                    &beyond(at, &["load_assignment", "endpoints"]),
                    "LOGICAL_DNS clusters must have a single locality_lb_endpoint and a single \
                     lb_endpoint"
                        .into(),
                );
            }
        }
        _ => {}
    }
    // Every built-in type but ORIGINAL_DST provides none.
    if lb == Some(LbPolicy::ClusterProvided)
        && kind.is_some_and(|k| k != DiscoveryType::OriginalDst)
    {
        return refuse(
            &beyond(at, &["lb_policy"]),
            format!(
                "cluster manager: cluster provided LB specified but cluster '{name}' did not \
                 provide one. Check cluster documentation."
            ),
        );
    }
    if lb == Some(LbPolicy::RingHash) {
        ring_sizes(cluster, at)?;
    }
    let options = http_protocol_options(cluster);
    let socket = transport_socket(cluster);
    let plaintext = socket
        .as_deref()
        .is_some_and(|s| s.is_empty() || s == RAW_BUFFER);
    let options_at = || {
        beyond(
            at,
            &[
                "typed_extension_protocol_options",
                "[\"envoy.extensions.upstreams.http.v3.HttpProtocolOptions\"]",
            ],
        )
    };
    if let Some(options) = &options {
        let auto = field(options, "auto_config");
        if auto.as_ref().is_some_and(|a| {
            has(a, "http3_protocol_options") && !has(a, "alternate_protocols_cache_options")
        }) {
            return refuse(
                &beyond(&options_at(), &["auto_config", "http3_protocol_options"]),
                "alternate protocols cache must be configured when HTTP/3 is enabled with \
                 auto_config"
                    .into(),
            );
        }
        if auto.is_some() && plaintext {
            return refuse(
                &beyond(&options_at(), &["auto_config"]),
                format!("ALPN configured for cluster {name} which has a non-ALPN transport socket"),
            );
        }
        let http3 = field(options, "explicit_http_config")
            .is_some_and(|e| has(&e, "http3_protocol_options"));
        if http3 && socket.as_deref().is_some_and(|s| s != QUIC_UPSTREAM) {
            return refuse(
                &beyond(
                    &options_at(),
                    &["explicit_http_config", "http3_protocol_options"],
                ),
                format!("HTTP3 requires a QuicUpstreamTransport transport socket: {name}"),
            );
        }
    }
    let http2 = has(cluster, "http2_protocol_options")
        || options.as_ref().is_some_and(|o| {
            has(o, "auto_config")
                || ["explicit_http_config", "use_downstream_protocol_config"]
                    .iter()
                    .any(|f| field(o, f).is_some_and(|c| has(&c, "http2_protocol_options")))
        });
    for (i, check) in messages(cluster, "health_checks").iter().enumerate() {
        if has(check, "grpc_health_check") && !http2 {
            return refuse(
                &beyond(
                    at,
                    &["health_checks", &format!("[{i}]"), "grpc_health_check"],
                ),
                format!("{name} cluster must support HTTP/2 for gRPC healthchecking"),
            );
        }
    }
    Ok(())
}

/// A ring hash's sizes, as its load balancer takes them (`RingHashLoadBalancer`): the
/// minimum (1024 when unset) at most the maximum (8M when unset; a field rule bounds both).
fn ring_sizes(cluster: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let config = field(cluster, "ring_hash_lb_config");
    let size = |name: &str, default: u64| {
        config
            .as_ref()
            .and_then(|c| wrapped(c, name))
            .unwrap_or(default)
    };
    let (min, max) = (
        size("minimum_ring_size", 1024),
        size("maximum_ring_size", 8 * 1024 * 1024),
    );
    if min > max {
        return refuse(
            &beyond(at, &["ring_hash_lb_config", "minimum_ring_size"]),
            format!("ring hash: minimum_ring_size ({min}) > maximum_ring_size ({max})"),
        );
    }
    Ok(())
}

/// A server's TLS context has certificates, all static or all from SDS
/// (`ServerContextConfigImpl`).
pub(super) fn downstream_tls(context: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let common = field(context, "common_tls_context");
    // A custom handshaker may provide certificates itself (Envoy asks it); a certificate
    // provider or selector brings its own: not judged.
    let provided = [
        "custom_handshaker",
        "tls_certificate_provider_instance",
        "custom_tls_certificate_selector",
    ];
    if common
        .as_ref()
        .is_some_and(|c| provided.iter().any(|f| has(c, f)))
    {
        return Ok(());
    }
    let count = |name| common.as_ref().map_or(0, |c| messages(c, name).len());
    let (inline, sds) = (
        count("tls_certificates"),
        count("tls_certificate_sds_secret_configs"),
    );
    if inline + sds == 0 {
        return refuse(
            &beyond(at, &["common_tls_context"]),
            "No TLS certificates found for server context".into(),
        );
    }
    if inline > 0 && sds > 0 {
        return refuse(
            &beyond(
                at,
                &["common_tls_context", "tls_certificate_sds_secret_configs"],
            ),
            "SDS and non-SDS TLS certificates may not be mixed in server contexts".into(),
        );
    }
    // Session ticket keys, before the certificates load (`ServerContextConfigImpl`).
    if let Some(keys) = field(context, "session_ticket_keys") {
        session_ticket_keys(&keys, &beyond(at, &["session_ticket_keys"]))?;
    }
    // Each certificate given inline loads, and names the server (`ServerContextImpl`).
    if let Some(common) = common.as_ref() {
        for (i, certificate) in messages(common, "tls_certificates").iter().enumerate() {
            super::tls_bytes::server_certificate(
                certificate,
                &beyond(
                    at,
                    &["common_tls_context", "tls_certificates", &format!("[{i}]")],
                ),
            )?;
        }
    }
    // MUST_STAPLE: each (static) certificate has its OCSP response (`ServerContextImpl`).
    if enum_number(context, "ocsp_staple_policy") == OcspStaplePolicy::MustStaple as i32 {
        let certificates = common
            .as_ref()
            .map(|c| messages(c, "tls_certificates"))
            .unwrap_or_default();
        if let Some(i) = certificates.iter().position(|c| !has(c, "ocsp_staple")) {
            return refuse(
                &beyond(
                    at,
                    &["common_tls_context", "tls_certificates", &format!("[{i}]")],
                ),
                "Required OCSP response is missing from TLS context".into(),
            );
        }
    }
    Ok(())
}

/// Session ticket keys given inline are 80 bytes each (`ServerContextConfigImpl`), in a
/// server's context or in a `secrets:` resource alike.
pub(super) fn session_ticket_keys(keys: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    for (i, key) in messages(keys, "keys").iter().enumerate() {
        if let Some(bytes) = inline_data(key).filter(|b| b.len() != 80) {
            return refuse(
                &beyond(at, &["keys", &format!("[{i}]")]),
                format!(
                    "Incorrect TLS session ticket key length. Length {}, expected length 80.",
                    bytes.len()
                ),
            );
        }
    }
    Ok(())
}

/// A validation context's certificate pins, as `DefaultCertValidator` decodes them when it
/// builds the context (inline or from SDS alike): each `verify_certificate_hash` is hex of
/// 32 bytes, colons removed first from a value of exactly 95 characters (the colon-separated
/// fingerprint); each `verify_certificate_spki` is base64 of 32 bytes (padded, no stray
/// bits). The field rules already bound their lengths.
pub(super) fn pins(context: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    for (i, hash) in strings(context, "verify_certificate_hash")
        .iter()
        .enumerate()
    {
        let hex = if hash.len() == 95 {
            hash.replace(':', "")
        } else {
            hash.clone()
        };
        if hex_bytes(&hex) != Some(32) {
            return refuse(
                &beyond(at, &["verify_certificate_hash", &format!("[{i}]")]),
                format!("Invalid hex-encoded SHA-256 {hex}"),
            );
        }
    }
    for (i, spki) in strings(context, "verify_certificate_spki")
        .iter()
        .enumerate()
    {
        use base64::Engine;
        let decoded = base64::engine::general_purpose::STANDARD.decode(spki);
        if decoded.map_or(true, |bytes| bytes.len() != 32) {
            return refuse(
                &beyond(at, &["verify_certificate_spki", &format!("[{i}]")]),
                format!("Invalid base64-encoded SHA-256 {spki}"),
            );
        }
    }
    Ok(())
}

/// How many bytes Envoy's `Hex::decode` makes of `hex`, or `None` where it refuses it: an
/// empty or odd-length string, or a pair of characters that is not a number in base 16,
/// white space before it allowed (Envoy 1.40 takes ` a`, refuses `a `, `+a` and two spaces:
/// `tests/rules_envoy.rs`).
fn hex_bytes(hex: &str) -> Option<usize> {
    let bytes = hex.as_bytes();
    if bytes.is_empty() || !bytes.len().is_multiple_of(2) {
        return None;
    }
    let space = |c: u8| matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let pair = |p: &[u8]| match p {
        [first, second] => {
            second.is_ascii_hexdigit() && (first.is_ascii_hexdigit() || space(*first))
        }
        _ => false,
    };
    bytes.chunks(2).all(pair).then_some(bytes.len() / 2)
}

/// A TLS context's own validation context (`CertificateValidationContextConfigImpl`):
/// without a trusted CA (and no custom validator), no CRL, no subject alt name matching and
/// no accepting expired certificates. A context combined with one from SDS
/// (`combined_validation_context`), or whose CA comes from a provider or the system, is not
/// judged: the CA may come with the rest.
pub(super) fn validation_context(common: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let Some(context) = field(common, "validation_context") else {
        return Ok(());
    };
    let elsewhere = [
        "trusted_ca",
        "custom_validator_config",
        "ca_certificate_provider_instance",
        "system_root_certs",
    ];
    if elsewhere.iter().any(|f| has(&context, f)) {
        return Ok(());
    }
    let here = beyond(at, &["validation_context"]);
    if let Some(crl) = field(&context, "crl") {
        let path = if has(&crl, "filename") {
            string(&crl, "filename")
        } else {
            "<inline>".to_string()
        };
        return refuse(
            &beyond(&here, &["crl"]),
            format!("Failed to load CRL from {path} without trusted CA"),
        );
    }
    for list in ["match_typed_subject_alt_names", "match_subject_alt_names"] {
        if !messages(&context, list).is_empty() {
            return refuse(
                &beyond(&here, &[list]),
                "SAN-based verification of peer certificates without trusted CA is insecure \
                 and not allowed"
                    .into(),
            );
        }
    }
    let expired = context
        .get_field_by_name("allow_expired_certificate")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    if expired {
        return refuse(
            &beyond(&here, &["allow_expired_certificate"]),
            "Certificate validity period is always ignored without trusted CA".into(),
        );
    }
    Ok(())
}

/// HTTP filters that end a chain (Envoy's `isTerminalFilterByProto`), by type, with the
/// name Envoy's factory has.
const HTTP_TERMINAL: &[(&str, &str)] = &[(
    "envoy.extensions.filters.http.router.v3.Router",
    "envoy.filters.http.router",
)];

/// HTTP filters that never end a chain, by type, with their factory's name (the common
/// ones, each held against Envoy; a filter not listed is not judged).
const HTTP_NOT_TERMINAL: &[(&str, &str)] = &[
    (
        "envoy.extensions.filters.http.cors.v3.Cors",
        "envoy.filters.http.cors",
    ),
    (
        "envoy.extensions.filters.http.fault.v3.HTTPFault",
        "envoy.filters.http.fault",
    ),
    (
        "envoy.extensions.filters.http.rbac.v3.RBAC",
        "envoy.filters.http.rbac",
    ),
    (
        "envoy.extensions.filters.http.grpc_web.v3.GrpcWeb",
        "envoy.filters.http.grpc_web",
    ),
    (
        "envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
        "envoy.filters.http.jwt_authn",
    ),
    (
        "envoy.extensions.filters.http.lua.v3.Lua",
        "envoy.filters.http.lua",
    ),
    (
        "envoy.extensions.filters.http.buffer.v3.Buffer",
        "envoy.filters.http.buffer",
    ),
];

/// Network filters that end a chain, by type, with their factory's name.
const NETWORK_TERMINAL: &[(&str, &str)] = &[
    (
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "envoy.filters.network.http_connection_manager",
    ),
    (
        "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
        "envoy.filters.network.tcp_proxy",
    ),
    (
        "envoy.extensions.filters.network.redis_proxy.v3.RedisProxy",
        "envoy.filters.network.redis_proxy",
    ),
    (
        "envoy.extensions.filters.network.direct_response.v3.Config",
        "envoy.filters.network.direct_response",
    ),
    (
        "envoy.extensions.filters.network.echo.v3.Echo",
        "envoy.filters.network.echo",
    ),
];

/// Network filters that never end a chain.
const NETWORK_NOT_TERMINAL: &[(&str, &str)] = &[
    (
        "envoy.extensions.filters.network.rbac.v3.RBAC",
        "envoy.filters.network.rbac",
    ),
    (
        "envoy.extensions.filters.network.local_ratelimit.v3.LocalRateLimit",
        "envoy.filters.network.local_ratelimit",
    ),
    (
        "envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit",
        "envoy.filters.network.connection_limit",
    ),
];

fn factory(table: &[(&str, &'static str)], kind: &str) -> Option<&'static str> {
    table.iter().find(|(t, _)| *t == kind).map(|(_, f)| *f)
}

/// A chain of filters ends with its terminal filter, and only there
/// (`Config::Utility::validateTerminalFilters`); `chain` is `http` or `network`.
fn terminal_last(
    filters: &[DynamicMessage],
    at: &[String],
    list: &str,
    chain: &str,
) -> Result<(), Refusal> {
    let (terminal, not_terminal) = if chain == "http" {
        (HTTP_TERMINAL, HTTP_NOT_TERMINAL)
    } else {
        (NETWORK_TERMINAL, NETWORK_NOT_TERMINAL)
    };
    for (i, filter) in filters.iter().enumerate() {
        let kind = any_type(filter, "typed_config");
        let name = string(filter, "name");
        let last = i + 1 == filters.len();
        let here = beyond(at, &[list, &format!("[{i}]")]);
        if let Some(f) = factory(terminal, &kind).filter(|_| !last) {
            return refuse(
                &here,
                format!(
                    "Error: terminal filter named {name} of type {f} must be the last filter in \
                     a {chain} filter chain."
                ),
            );
        }
        // Optional or not: Envoy judges the chain as written.
        if let Some(f) = factory(not_terminal, &kind).filter(|_| last) {
            return refuse(
                &here,
                format!(
                    "Error: non-terminal filter named {name} of type {f} is the last filter in a \
                     {chain} filter chain."
                ),
            );
        }
    }
    Ok(())
}

/// An HTTP connection manager as Envoy builds it: its HTTP filters end with the router, and
/// no two upgrade configs have the same name (in any case).
pub(super) fn http_connection_manager(hcm: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    // A bool, or a `BoolValue` (`use_remote_address`).
    let flag = |name: &str| {
        hcm.get_field_by_name(name)
            .and_then(|v| {
                v.as_bool().or_else(|| {
                    v.as_message()
                        .and_then(|m| m.get_field_by_name("value")?.as_bool())
                })
            })
            .unwrap_or(false)
    };
    if !messages(hcm, "original_ip_detection_extensions").is_empty() {
        let mixed = if flag("use_remote_address") {
            Some("use_remote_address")
        } else if hcm
            .get_field_by_name("xff_num_trusted_hops")
            .and_then(|v| v.as_u32())
            .unwrap_or(0)
            > 0
        {
            Some("xff_num_trusted_hops")
        } else {
            None
        };
        if let Some(other) = mixed {
            return refuse(
                &beyond(at, &[other]),
                format!("Original IP detection extensions and {other} may not be mixed"),
            );
        }
    }
    if flag("strip_any_host_port") && flag("strip_matching_host_port") {
        return refuse(
            &beyond(at, &["strip_matching_host_port"]),
            "Error: Only one of `strip_matching_host_port` or `strip_any_host_port` can be set."
                .into(),
        );
    }
    terminal_last(&messages(hcm, "http_filters"), at, "http_filters", "http")?;
    let mut seen = std::collections::HashSet::new();
    for (i, upgrade) in messages(hcm, "upgrade_configs").iter().enumerate() {
        let kind = string(upgrade, "upgrade_type");
        if !seen.insert(kind.to_ascii_lowercase()) {
            return refuse(
                &beyond(at, &["upgrade_configs", &format!("[{i}]"), "upgrade_type"]),
                format!("Error: multiple upgrade configs with the same name: '{kind}'"),
            );
        }
    }
    Ok(())
}

/// A filter chain's network filters end with a terminal filter, and only there.
pub(super) fn filter_chain(chain: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    terminal_last(&messages(chain, "filters"), at, "filters", "network")
}

/// Headers a route configuration, a virtual host, a route or a weighted cluster adds or
/// removes: never a pseudo-header (`:path`) or `host` (`HeaderParser`).
pub(super) fn headers(message: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let forbidden = |key: &str| key.starts_with(':') || key.eq_ignore_ascii_case("host");
    for list in ["request_headers_to_add", "response_headers_to_add"] {
        for (i, option) in messages(message, list).iter().enumerate() {
            let key = field(option, "header")
                .map(|h| string(&h, "key"))
                .unwrap_or_default();
            if forbidden(&key) {
                return refuse(
                    &beyond(at, &[list, &format!("[{i}]"), "header", "key"]),
                    ":-prefixed or host headers may not be modified".into(),
                );
            }
        }
    }
    for list in ["request_headers_to_remove", "response_headers_to_remove"] {
        for (i, key) in strings(message, list).iter().enumerate() {
            if forbidden(key) {
                return refuse(
                    &beyond(at, &[list, &format!("[{i}]")]),
                    ":-prefixed or host headers may not be removed".into(),
                );
            }
        }
    }
    Ok(())
}
