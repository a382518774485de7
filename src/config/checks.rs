//! Envoy's checks beyond its field rules: what Envoy 1.40 refuses in its C++ code when it
//! builds a resource, though every field rule holds. Each is worded as Envoy words it, and
//! each is checked against the real Envoy by `tests/rules_envoy.rs`.
//!
//! Owns, at any depth of a resource (inside `Any` payloads too):
//! - a route configuration with more than one `*` domain, or one domain twice (Envoy compares
//!   domains in lower case);
//! - a regex (`RegexMatcher.regex`) that RE2 refuses, judged by RE2's own parser as Envoy 1.40
//!   runs it (`re2`), whose program size is counted as RE2 counts it and judged per node
//!   group (`super::regex_programs`), against the limit the node's runtime sets;
//! - TLS parameters naming ECDH curves or cipher suites BoringSSL does not have, and
//!   certificate pins that are not 32 bytes as Envoy decodes them (`builds::pins`);
//! - a TLS context's bytes given inline (in the context or in a secret) that BoringSSL does
//!   not load: a certificate chain, its private key, a server certificate without a name, a
//!   trusted CA bundle, a CRL, a server certificate's OCSP staple (`tls_bytes`, framed as
//!   BoringSSL frames PEM: `pem`; the staple read as Envoy reads it: `ocsp`);
//! - a `jwt_authn` provider's inline JWKS that Envoy's JWKS reader refuses (`jwks`), and a
//!   basic-auth filter's inline htpasswd users that its reader refuses (`basic_auth`);
//! - an inline Lua script LuaJIT does not compile (`lua`);
//! - a route's URI templates (its path matcher's and path rewriter's) that Envoy's template
//!   parser refuses, or a rewrite using a variable its match does not capture
//!   (`uri_template`);
//! - verdicts on bytes that recur across resources, remembered (`memo`);
//! - a listener with two filter chains whose `filter_chain_match` is the same, or one that
//!   accepts connections with no filter chain at all;
//! - `ipv4_compat` on an address other than `::` or an IPv4-mapped IPv6 address;
//! - in a ClusterLoadAssignment served over EDS, or an LbEndpoint over LEDS, an endpoint
//!   address that is not an IP address (EDS and LEDS hosts are never resolved; over LEDS,
//!   Envoy 1.40 does not only refuse one: it crashes, an uncaught exception, so it must never
//!   be sent);
//! - an HTTP or network filter with no `typed_config` (nor `config_discovery`);
//! - a STATIC cluster's endpoint host that is not an IP address;
//! - a server name with a partial wildcard, and the HTTP/3 codec on a listener that is not
//!   QUIC;
//! - a plain UDP listener with filter chains, addresses of two socket types, and a codec a
//!   QUIC listener does not take;
//! - a list or a null in an RTDS runtime's layer;
//! - what Envoy refuses as it builds clusters, TLS contexts, HTTP connection managers,
//!   filter chains, route headers and IP ranges (`builds`), routes, retry policies, direct
//!   responses and string matchers (`routing`), and a cluster's health checks, outlier
//!   detector, load balancers, bind config, HTTP/2 options and drop overloads (`upstream`).
//!
//! The catalogue of Envoy's checks, caught or not and why, is docs/reference.md "What Envoy
//! refuses beyond its field rules".
//!
//! Must not: know about files, or check field rules (`rules` does); nothing here guesses:
//! a check is here only when Envoy's behaviour is known and tested.

use std::net::IpAddr;

use prost_reflect::{DynamicMessage, ReflectMessage, Value};

use super::descriptors;
use envoy_types::pb::envoy::config::core::v3::socket_address::Protocol;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::CodecType;
use super::fields::{has, message as field, messages, string, strings};
pub use crate::resource::RegexProgram;

mod basic_auth;
mod builds;
mod der;
mod jwks;
mod lua;
pub(super) mod memo;
mod ocsp;
mod pem;
mod pkcs12;
pub mod re2;
mod refusal;
mod routing;
pub mod tls_bytes;
mod upstream;
mod uri_template;

pub use refusal::Refusal;
use refusal::{path_of, refuse};

/// The first thing in `message` that Envoy refuses beyond its field rules; else the regex in
/// it with the largest RE2 program, which is judged with the limit the node's runtime sets
/// (`RegexProgram::judge`), known only where the node group is.
pub fn check(message: &DynamicMessage) -> Result<Option<RegexProgram>, Refusal> {
    let mut walk = Walk {
        at: Vec::new(),
        largest: None,
    };
    // What a resource is served as, not what it holds deeper (a cluster's own load
    // assignment may name hosts to resolve, by its type).
    match message.descriptor().full_name() {
        "envoy.config.endpoint.v3.ClusterLoadAssignment" => eds_hosts(message)?,
        "envoy.config.endpoint.v3.LbEndpoint" => lb_endpoint_hosts(message, &[])?,
        _ => {}
    }
    visit(message, &mut walk)?;
    Ok(walk.largest)
}

/// A STATIC cluster's own endpoints are IP addresses (or name a resolver): Envoy resolves
/// none of them.
fn static_hosts(cluster: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    if builds::cluster_kind(cluster)
        != Some(envoy_types::pb::envoy::config::cluster::v3::cluster::DiscoveryType::Static)
    {
        return Ok(());
    }
    let Some(assignment) = field(cluster, "load_assignment") else {
        return Ok(());
    };
    let mut here = at.to_vec();
    here.push("load_assignment".into());
    for (l, locality) in messages(&assignment, "endpoints").iter().enumerate() {
        for (e, lb) in messages(locality, "lb_endpoints").iter().enumerate() {
            let mut at = here.clone();
            at.extend([format!("endpoints[{l}]"), format!("lb_endpoints[{e}]")]);
            lb_endpoint_hosts(lb, &at)?;
        }
    }
    Ok(())
}

/// Every host of a ClusterLoadAssignment served over EDS is an IP address (or names a
/// resolver): Envoy parses them as such, and resolves none.
fn eds_hosts(cla: &DynamicMessage) -> Result<(), Refusal> {
    for (l, locality) in messages(cla, "endpoints").iter().enumerate() {
        for (e, lb) in messages(locality, "lb_endpoints").iter().enumerate() {
            let at = [format!("endpoints[{l}]"), format!("lb_endpoints[{e}]")];
            lb_endpoint_hosts(lb, &at)?;
        }
    }
    Ok(())
}

/// An LbEndpoint's address and additional addresses are IP addresses (or name a resolver).
fn lb_endpoint_hosts(lb: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let Some(endpoint) = field(lb, "endpoint") else {
        return Ok(());
    };
    let mut addresses = vec![("address".to_string(), field(&endpoint, "address"))];
    for (i, extra) in messages(&endpoint, "additional_addresses")
        .iter()
        .enumerate()
    {
        addresses.push((
            format!("additional_addresses[{i}].address"),
            field(extra, "address"),
        ));
    }
    for (name, address) in addresses {
        let Some(socket) = address.as_ref().and_then(|a| field(a, "socket_address")) else {
            continue;
        };
        let host = string(&socket, "address");
        if !string(&socket, "resolver_name").is_empty() || host.parse::<IpAddr>().is_ok() {
            continue;
        }
        let mut here = at.to_vec();
        here.extend([
            "endpoint".to_string(),
            name,
            "socket_address".into(),
            "address".into(),
        ]);
        return refuse(
            &here,
            format!(
                "malformed IP address: {host}. Consider setting resolver_name or setting \
                 cluster type to 'STRICT_DNS' or 'LOGICAL_DNS'"
            ),
        );
    }
    Ok(())
}

/// An RTDS runtime's layer as Envoy's runtime loads it: each leaf (a nested struct's keys
/// joined with `.`) is a number, a string or a boolean, never a list or null.
fn runtime_layer(runtime: &DynamicMessage) -> Result<(), Refusal> {
    let Some(layer) = super::fields::message(runtime, "layer") else {
        return Ok(());
    };
    leaves(&layer, "", &["layer".to_string()])
}

fn leaves(layer: &DynamicMessage, prefix: &str, at: &[String]) -> Result<(), Refusal> {
    let Some(Value::Map(fields)) = layer.get_field_by_name("fields").as_deref().cloned() else {
        return Ok(());
    };
    let mut keys: Vec<_> = fields.into_iter().collect();
    keys.sort_by_key(|(k, _)| format!("{k:?}"));
    for (key, value) in keys {
        let prefix_key = match &key {
            prost_reflect::MapKey::String(s) => s.clone(),
            other => format!("{other:?}"),
        };
        let name = if prefix.is_empty() {
            prefix_key.clone()
        } else {
            format!("{prefix}.{prefix_key}")
        };
        let mut here = at.to_vec();
        here.push(format!("[{prefix_key:?}]"));
        let Some(value) = value.as_message() else {
            continue;
        };
        if let Some(inner) = super::fields::message(value, "struct_value") {
            leaves(&inner, &name, &here)?;
        } else if !["number_value", "string_value", "bool_value"]
            .iter()
            .any(|f| has(value, f))
        {
            // A list, a null, or no kind at all (null to Envoy).
            return refuse(&here, format!("Invalid runtime entry value for {name}"));
        }
    }
    Ok(())
}

/// The names of the secrets a listener serves as its server certificates (each
/// `DownstreamTlsContext`'s `tls_certificate_sds_secret_configs`, at any depth), but for
/// contexts whose certificates a handshaker, a provider or a selector brings.
pub fn server_secret_names(listener: &DynamicMessage) -> Vec<String> {
    fn walk(message: &DynamicMessage, out: &mut Vec<String>) {
        match message.descriptor().full_name() {
            "google.protobuf.Any" => {
                if let Some(payload) = builds::payload(message) {
                    walk(&payload, out);
                }
                return;
            }
            "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext" => {
                out.extend(tls_bytes::served_secrets(message));
            }
            _ => {}
        }
        for (_, value) in message.fields() {
            walk_value(value, out);
        }
    }
    fn walk_value(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Message(m) => walk(m, out),
            Value::List(items) => items.iter().for_each(|v| walk_value(v, out)),
            Value::Map(entries) => entries.values().for_each(|v| walk_value(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(listener, &mut out);
    out
}

/// What Envoy refuses in a secret served as a server's certificate: its certificate names
/// no server, or its OCSP staple is not the certificate's (or missing where the certificate
/// must be stapled). The path is from the secret.
pub fn judge_server_secret(secret: &DynamicMessage) -> Result<(), Refusal> {
    match field(secret, "tls_certificate") {
        Some(certificate) => {
            tls_bytes::server_certificate(&certificate, &["tls_certificate".to_string()])
        }
        None => Ok(()),
    }
}

/// Envoy's refusal of a regex whose program is over `limit` (`re2.max_program_size.error_level`
/// of the node's runtime; [`re2::DEFAULT_MAX_PROGRAM_SIZE`] when nothing sets it).
pub fn judge_regex(program: &RegexProgram, limit: u64) -> Result<(), Refusal> {
    if program.size <= limit {
        return Ok(());
    }
    Err(Refusal {
        path: program.path.clone(),
        envoy: re2::over_limit(&program.pattern, program.size, limit),
    })
}

/// Where the walk is, and what it carries out.
struct Walk {
    at: Vec<String>,
    largest: Option<RegexProgram>,
}

fn visit(message: &DynamicMessage, w: &mut Walk) -> Result<(), Refusal> {
    let descriptor = message.descriptor();
    match descriptor.full_name() {
        "google.protobuf.Any" => return visit_any(message, w),
        "envoy.config.route.v3.RouteConfiguration" => {
            route_configuration(message, &w.at)?;
            builds::headers(message, &w.at)?;
            routing::direct_responses(message, &w.at)?
        }
        "envoy.config.route.v3.Route" => {
            builds::headers(message, &w.at)?;
            routing::route(message, &w.at)?
        }
        "envoy.config.route.v3.RetryPolicy" => routing::retry_policy(message, &w.at)?,
        "envoy.type.matcher.v3.StringMatcher" => routing::string_matcher(message, &w.at)?,
        "envoy.config.core.v3.HealthCheck" => upstream::health_check(message, &w.at)?,
        "envoy.config.cluster.v3.OutlierDetection" => upstream::outlier_detection(message, &w.at)?,
        "envoy.config.core.v3.Http2ProtocolOptions" => upstream::http2_options(message, &w.at)?,
        "envoy.config.endpoint.v3.ClusterLoadAssignment" => {
            upstream::drop_overloads(message, &w.at)?
        }
        "envoy.extensions.transport_sockets.tls.v3.CommonTlsContext" => {
            builds::validation_context(message, &w.at)?
        }
        "envoy.service.runtime.v3.Runtime" => runtime_layer(message)?,
        "envoy.type.matcher.v3.RegexMatcher" => {
            let pattern = string(message, "regex");
            w.at.push("regex".into());
            let result = re2::program_size(&pattern);
            let path = path_of(&w.at);
            w.at.pop();
            match result {
                Err(words) => {
                    return Err(Refusal {
                        path,
                        envoy: words.to_string(),
                    });
                }
                Ok(size) => {
                    if w.largest.as_ref().is_none_or(|l| size > l.size) {
                        w.largest = Some(RegexProgram {
                            path,
                            pattern,
                            size,
                        });
                    }
                }
            }
        }
        "envoy.extensions.transport_sockets.tls.v3.TlsParameters" => {
            tls_parameters(message, &w.at)?
        }
        "envoy.extensions.transport_sockets.tls.v3.CertificateValidationContext" => {
            tls_bytes::validation_context(message, &w.at)?;
            builds::pins(message, &w.at)?
        }
        "envoy.extensions.filters.http.basic_auth.v3.BasicAuth" => {
            basic_auth::users(message, &w.at, false)?
        }
        "envoy.extensions.filters.http.basic_auth.v3.BasicAuthPerRoute" => {
            basic_auth::users(message, &w.at, true)?
        }
        "envoy.extensions.filters.http.lua.v3.Lua" => lua::filter(message, &w.at)?,
        "envoy.extensions.filters.http.lua.v3.LuaPerRoute" => lua::per_route(message, &w.at)?,
        "envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication" => {
            jwks::jwt_authentication(message, &w.at)?
        }
        "envoy.extensions.transport_sockets.tls.v3.TlsSessionTicketKeys" => {
            builds::session_ticket_keys(message, &w.at)?
        }
        "envoy.extensions.transport_sockets.tls.v3.TlsCertificate" => {
            tls_bytes::tls_certificate(message, &w.at)?
        }
        "envoy.config.listener.v3.Listener" => listener(message, &w.at)?,
        "envoy.config.cluster.v3.Cluster" => {
            static_hosts(message, &w.at)?;
            builds::cluster(message, &w.at)?;
            upstream::cluster(message, &w.at)?
        }
        "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext" => {
            builds::downstream_tls(message, &w.at)?
        }
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager" => {
            builds::http_connection_manager(message, &w.at)?
        }
        "envoy.config.listener.v3.FilterChain" => builds::filter_chain(message, &w.at)?,
        "envoy.config.route.v3.VirtualHost"
        | "envoy.config.route.v3.WeightedCluster.ClusterWeight" => builds::headers(message, &w.at)?,
        "envoy.config.core.v3.SocketAddress" => socket_address(message, &w.at)?,
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter"
        | "envoy.config.listener.v3.Filter" => filter(message, &w.at)?,
        "xds.type.v3.TypedStruct" | "udpa.type.v1.TypedStruct" => return typed_struct(message, w),
        _ => builds::cidr_ranges(message, &w.at)?,
    }
    for (field, value) in message.fields() {
        w.at.push(field.name().to_string());
        let result = visit_value(value, w);
        w.at.pop();
        result?;
    }
    Ok(())
}

fn visit_value(value: &Value, w: &mut Walk) -> Result<(), Refusal> {
    match value {
        Value::Message(m) => visit(m, w),
        Value::List(items) => {
            for (i, item) in items.iter().enumerate() {
                w.at.push(format!("[{i}]"));
                let result = visit_value(item, w);
                w.at.pop();
                result?;
            }
            Ok(())
        }
        Value::Map(entries) => {
            let mut keys: Vec<_> = entries.iter().collect();
            keys.sort_by_key(|(k, _)| format!("{k:?}"));
            for (key, item) in keys {
                let key = match key {
                    prost_reflect::MapKey::String(s) => s.clone(),
                    other => format!("{other:?}"),
                };
                w.at.push(format!("[{key:?}]"));
                let result = visit_value(item, w);
                w.at.pop();
                result?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// An `Any`'s payload, checked as its type (the path goes on into it, as for field rules).
fn visit_any(any: &DynamicMessage, w: &mut Walk) -> Result<(), Refusal> {
    match builds::payload(any) {
        Some(payload) => visit(&payload, w),
        None => Ok(()),
    }
}

/// Envoy's RouteMatcher: one `*` among all virtual hosts, and each other domain once
/// (compared in lower case).
fn route_configuration(message: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let name = string(message, "name");
    let mut wildcard = false;
    let mut seen = std::collections::HashSet::new();
    for (i, vhost) in messages(message, "virtual_hosts").iter().enumerate() {
        for (j, domain) in strings(vhost, "domains").iter().enumerate() {
            let mut here = at.to_vec();
            here.extend([
                "virtual_hosts".to_string(),
                format!("[{i}]"),
                "domains".to_string(),
                format!("[{j}]"),
            ]);
            if domain == "*" {
                if wildcard {
                    return refuse(
                        &here,
                        format!("Only a single wildcard domain is permitted in route {name}"),
                    );
                }
                wildcard = true;
                continue;
            }
            let lower = domain.to_ascii_lowercase();
            if !seen.insert(lower.clone()) {
                return refuse(
                    &here,
                    format!(
                        "Only unique values for domains are permitted. Duplicate entry of domain \
                         {lower} in route {name}"
                    ),
                );
            }
        }
    }
    Ok(())
}

/// The ECDH curves (groups) BoringSSL in Envoy 1.40 knows, by every name it accepts.
const CURVES: &[&str] = &[
    "P-256",
    "prime256v1",
    "P-384",
    "secp384r1",
    "P-521",
    "secp521r1",
    "X25519",
    "x25519",
    "X25519MLKEM768",
    "MLKEM1024",
];

/// BoringSSL's cipher suite names (TLS 1.0-1.2; TLS 1.3 suites are not configurable).
const CIPHERS: &[&str] = &[
    "DES-CBC3-SHA",
    "AES128-SHA",
    "AES256-SHA",
    "AES128-GCM-SHA256",
    "AES256-GCM-SHA384",
    "ECDHE-ECDSA-AES128-SHA",
    "ECDHE-ECDSA-AES256-SHA",
    "ECDHE-RSA-AES128-SHA",
    "ECDHE-RSA-AES256-SHA",
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-PSK-AES128-CBC-SHA",
    "ECDHE-PSK-AES256-CBC-SHA",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
    "ECDHE-RSA-CHACHA20-POLY1305",
    "ECDHE-PSK-CHACHA20-POLY1305",
    "PSK-AES128-CBC-SHA",
    "PSK-AES256-CBC-SHA",
    "ECDHE-RSA-AES128-SHA256",
    "ECDHE-ECDSA-AES128-SHA256",
];

/// TLS 1.3 suites: BoringSSL knows the names but does not configure them, so alone they
/// select nothing.
const TLS13_CIPHERS: &[&str] = &[
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// BoringSSL's cipher aliases (each selects a family).
pub const CIPHER_ALIASES: &[&str] = &[
    "ALL", "kRSA", "kECDHE", "kEECDH", "kPSK", "aRSA", "aECDSA", "aPSK", "ECDHE", "EECDH", "RSA",
    "ECDSA", "PSK", "3DES", "AES128", "AES256", "AES", "AESGCM", "CHACHA20", "SHA1", "SHA",
    "SSLv3", "TLSv1", "TLSv1.2", "HIGH", "FIPS",
];

/// Aliases BoringSSL knows that select no cipher it has (tested against Envoy).
const EMPTY_CIPHER_ALIASES: &[&str] = &["SHA256", "SHA384"];

/// What one entry of a cipher list does on its own.
#[derive(PartialEq)]
enum Entry {
    /// A name BoringSSL does not have.
    Unknown,
    /// Known, but selects no cipher alone (`!aNULL`, `-RSA`, a TLS 1.3 name).
    SelectsNothing,
    Selects,
}

fn cipher_entry(entry: &str) -> Entry {
    let operator = entry.starts_with(['!', '-', '+', '@']);
    let body = entry.trim_start_matches(['!', '-', '+', '@']);
    let names: Vec<&str> = match body.strip_prefix('[').and_then(|e| e.strip_suffix(']')) {
        Some(group) => group.split('|').collect(),
        None => vec![body],
    };
    let mut selects = false;
    for name in names {
        let parts: Vec<&str> = name.split('+').collect();
        for part in &parts {
            let known = CIPHERS.contains(part)
                || TLS13_CIPHERS.contains(part)
                || CIPHER_ALIASES.contains(part)
                || EMPTY_CIPHER_ALIASES.contains(part)
                || (operator && entry.starts_with('@'));
            if !known {
                return Entry::Unknown;
            }
        }
        selects |= parts
            .iter()
            .all(|p| !TLS13_CIPHERS.contains(p) && !EMPTY_CIPHER_ALIASES.contains(p));
    }
    if operator || !selects {
        Entry::SelectsNothing
    } else {
        Entry::Selects
    }
}

fn tls_parameters(message: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let curves = strings(message, "ecdh_curves");
    if curves
        .iter()
        .flat_map(|c| c.split(':'))
        .any(|c| !CURVES.contains(&c))
    {
        let mut here = at.to_vec();
        here.push("ecdh_curves".into());
        return refuse(
            &here,
            format!("Failed to initialize ECDH curves {}", curves.join(":")),
        );
    }
    // Envoy sets the whole list; when BoringSSL refuses it, Envoy tries each entry alone and
    // names those refused alone. The list is refused when a name is unknown, or when no
    // entry selects a cipher.
    let ciphers = strings(message, "cipher_suites");
    let entries: Vec<Entry> = ciphers.iter().map(|c| cipher_entry(c)).collect();
    let list_refused = !ciphers.is_empty()
        && (entries.contains(&Entry::Unknown) || !entries.contains(&Entry::Selects));
    if list_refused {
        let rejected: Vec<&str> = ciphers
            .iter()
            .zip(&entries)
            .filter(|(_, e)| **e != Entry::Selects)
            .map(|(c, _)| c.as_str())
            .collect();
        let mut here = at.to_vec();
        here.push("cipher_suites".into());
        return refuse(
            &here,
            format!(
                "Failed to initialize cipher suites {}. The following ciphers were rejected when \
                 tried individually: {}",
                ciphers.join(":"),
                rejected.join(", ")
            ),
        );
    }
    Ok(())
}

/// An address as Envoy prints it: `127.0.0.1:80`, `[::1]:80`.
fn address_text(socket: &DynamicMessage) -> String {
    let address = string(socket, "address");
    let port = socket
        .get_field_by_name("port_value")
        .and_then(|v| v.as_u32())
        .unwrap_or(0);
    match address.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => format!("[{v6}]:{port}"),
        Ok(IpAddr::V4(v4)) => format!("{v4}:{port}"),
        Err(_) => format!("{address}:{port}"),
    }
}

/// How Envoy names a listener in its errors: its socket address (and additional ones),
/// joined by commas; its name when it has none.
fn listener_address(message: &DynamicMessage) -> String {
    let socket = |address: Option<DynamicMessage>| {
        address
            .and_then(|a| a.get_field_by_name("socket_address")?.as_message().cloned())
            .map(|s| address_text(&s))
    };
    let mut all: Vec<String> = socket(super::fields::message(message, "address"))
        .into_iter()
        .collect();
    all.extend(
        messages(message, "additional_addresses")
            .iter()
            .filter_map(|a| socket(super::fields::message(a, "address"))),
    );
    if all.is_empty() {
        return string(message, "name");
    }
    all.join(",")
}

/// Whether Envoy's listener manager takes the listener as connection-oriented: a stream
/// (TCP) listener, or a UDP one that speaks QUIC. A plain UDP listener (a UDP proxy, in its
/// listener filters) needs no filter chain.
fn connection_oriented(message: &DynamicMessage) -> bool {
    let udp = datagram(super::fields::message(message, "address"));
    let quic = super::fields::message(message, "udp_listener_config")
        .is_some_and(|u| has(&u, "quic_options"));
    !udp || quic
}

/// Whether an `Address` is a UDP socket address.
fn datagram(address: Option<DynamicMessage>) -> bool {
    address
        .and_then(|a| super::fields::message(&a, "socket_address"))
        .and_then(|s| s.get_field_by_name("protocol")?.as_enum_number())
        .is_some_and(|p| p == Protocol::Udp as i32)
}

/// Envoy's listener manager: a listener that accepts connections on an address has a filter
/// chain to give them (one of `filter_chains`, or `default_filter_chain`); an API listener
/// (gRPC's) has none, and is not such a listener. And no two filter chains with the same
/// `filter_chain_match` (an absent one is the empty match), unless the listener matches with
/// `filter_chain_matcher`, which replaces the matches.
fn listener(message: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    if has(message, "address")
        && !has(message, "api_listener")
        && messages(message, "filter_chains").is_empty()
        && !has(message, "default_filter_chain")
        && connection_oriented(message)
    {
        return refuse(
            at,
            format!(
                "error adding listener '{}': no filter chains specified",
                listener_address(message)
            ),
        );
    }
    let udp = datagram(super::fields::message(message, "address"));
    for (i, extra) in messages(message, "additional_addresses").iter().enumerate() {
        if datagram(super::fields::message(extra, "address")) != udp {
            let mut here = at.to_vec();
            here.extend(["additional_addresses".to_string(), format!("[{i}]")]);
            return refuse(
                &here,
                format!(
                    "listener {}: has different socket type. The listener only support same \
                     socket type for all the addresses.",
                    string(message, "name")
                ),
            );
        }
    }
    let chains = messages(message, "filter_chains");
    if !connection_oriented(message) && !chains.is_empty() {
        let mut here = at.to_vec();
        here.push("filter_chains".into());
        return refuse(
            &here,
            format!(
                "error adding listener '{}': {} filter chain(s) specified for connection-less \
                 UDP listener.",
                listener_address(message),
                chains.len()
            ),
        );
    }
    chains_fit_the_listener(message, at)?;
    if has(message, "filter_chain_matcher") {
        return Ok(());
    }
    let chains = messages(message, "filter_chains");
    let matches: Vec<Vec<u8>> = chains
        .iter()
        .map(
            |chain| match chain.get_field_by_name("filter_chain_match") {
                Some(m) => m.as_message().map(canonical).unwrap_or_default(),
                None => Vec::new(),
            },
        )
        .collect();
    for (i, m) in matches.iter().enumerate() {
        if let Some(first) = matches[..i].iter().position(|earlier| earlier == m) {
            let address = listener_address(message);
            let name = |chain: &DynamicMessage| string(chain, "name");
            let mut here = at.to_vec();
            here.extend(["filter_chains".to_string(), format!("[{i}]")]);
            return refuse(
                &here,
                format!(
                    "error adding listener '{address}': filter chain '{}' has the same matching \
                     rules defined as '{}'",
                    name(&chains[i]),
                    name(&chains[first])
                ),
            );
        }
    }
    Ok(())
}

/// What a listener's filter chains hold that its kind of listener does not take: a server
/// name with a wildcard other than a leading `*.` (`FilterChainManagerImpl`), or, on a
/// listener that does not speak QUIC, an HTTP connection manager with the HTTP/3 codec.
fn chains_fit_the_listener(message: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let quic = super::fields::message(message, "udp_listener_config")
        .is_some_and(|u| has(&u, "quic_options"));
    let mut chains: Vec<(Vec<String>, DynamicMessage)> = messages(message, "filter_chains")
        .into_iter()
        .enumerate()
        .map(|(i, c)| (vec!["filter_chains".to_string(), format!("[{i}]")], c))
        .collect();
    if let Some(chain) = super::fields::message(message, "default_filter_chain") {
        chains.push((vec!["default_filter_chain".to_string()], chain));
    }
    for (place, chain) in chains {
        let mut here = at.to_vec();
        here.extend(place);
        if let Some(matching) = super::fields::message(&chain, "filter_chain_match") {
            for (j, name) in strings(&matching, "server_names").iter().enumerate() {
                if name.contains('*') && !name.starts_with("*.") {
                    let mut at = here.clone();
                    at.extend([
                        "filter_chain_match".to_string(),
                        "server_names".into(),
                        format!("[{j}]"),
                    ]);
                    return refuse(
                        &at,
                        format!(
                            "error adding listener '{}': partial wildcards are not supported in \
                             \"server_names\"",
                            listener_address(message)
                        ),
                    );
                }
            }
        }
        for (k, filter) in messages(&chain, "filters").iter().enumerate() {
            let hcm = super::fields::message(filter, "typed_config")
                .and_then(|any| builds::payload(&any))
                .filter(|p| {
                    p.descriptor().full_name()
                        == "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
                });
            let Some(hcm) = hcm else {
                continue;
            };
            let http3 = builds::enum_number(&hcm, "codec_type") == CodecType::Http3 as i32;
            let mut at = here.clone();
            at.extend([
                "filters".to_string(),
                format!("[{k}]"),
                "typed_config".into(),
                "codec_type".into(),
            ]);
            if http3 && !quic {
                return refuse(&at, "HTTP/3 codec configured on non-QUIC listener.".into());
            }
            if quic && !http3 {
                return refuse(&at, "Non-HTTP/3 codec configured on QUIC listener.".into());
            }
        }
    }
    Ok(())
}

/// A message's identity for comparison: its canonical JSON (map order is not stable in
/// the binary encoding).
fn canonical(message: &DynamicMessage) -> Vec<u8> {
    super::json::to_json(message)
        .ok()
        .and_then(|j| serde_json::to_vec(&j).ok())
        .unwrap_or_default()
}

/// Envoy's address resolver: `ipv4_compat` only on `::` or an IPv4-mapped IPv6 address.
fn socket_address(message: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let compat = message
        .get_field_by_name("ipv4_compat")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    if !compat {
        return Ok(());
    }
    let address = string(message, "address");
    let allowed = match address.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => v6.is_unspecified() || v6.to_ipv4_mapped().is_some(),
        Ok(IpAddr::V4(_)) => false,
        // A name resolved later (DNS clusters, a custom resolver): not judged here.
        Err(_) => return Ok(()),
    };
    if allowed {
        return Ok(());
    }
    let mut here = at.to_vec();
    here.push("ipv4_compat".into());
    refuse(
        &here,
        format!(
            "Only IPv6 address '::' or valid IPv4-mapped IPv6 address can set ipv4_compat: {}",
            address_text(message)
        ),
    )
}

/// A `TypedStruct` of a type Envoy knows: Envoy reads its `value` as that type, so what the
/// type refuses (an unknown field, a wrong value, a field rule) is refused here too. One of
/// a type the pool does not know is left alone (a plugin's own configuration, say).
fn typed_struct(message: &DynamicMessage, w: &mut Walk) -> Result<(), Refusal> {
    let url = string(message, "type_url");
    let Some(descriptor) = url
        .rsplit_once('/')
        .and_then(|(_, name)| descriptors::message_named(name))
    else {
        return Ok(());
    };
    let value = message
        .get_field_by_name("value")
        .and_then(|v| v.as_message().cloned())
        .map(|v| super::json::to_json(&v))
        .transpose()
        .ok()
        .flatten()
        .unwrap_or_else(|| serde_json::json!({}));
    w.at.push("value".into());
    let result = match super::json::from_json(&descriptor, &value) {
        Err(e) => refuse(
            &w.at,
            format!(
                "the TypedStruct's value is not a {}: {e}",
                descriptor.full_name()
            ),
        ),
        Ok(inner) => match super::rules::check(&inner) {
            Err(v) => refuse(&w.at, format!("{} ({})", v.envoy, v.rule)),
            Ok(()) => visit(&inner, w),
        },
    };
    w.at.pop();
    result
}

/// An HTTP or network filter must say what it is: a `typed_config` with a type (or a
/// `config_discovery`). Envoy 1.40 has no implementation found by name alone.
fn filter(message: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    // An optional HTTP filter Envoy cannot find is skipped (tested).
    let optional = message
        .get_field_by_name("is_optional")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    if has(message, "config_discovery") || optional {
        return Ok(());
    }
    let type_url = message
        .get_field_by_name("typed_config")
        .and_then(|v| v.as_message().cloned())
        .map(|any| string(&any, "type_url"))
        .unwrap_or_default();
    if !type_url.is_empty() {
        return Ok(());
    }
    let name = string(message, "name");
    let mut here = at.to_vec();
    here.push("typed_config".into());
    refuse(
        &here,
        format!("Didn't find a registered implementation for '{name}' with type URL: ''"),
    )
}

#[cfg(test)]
mod tests;
