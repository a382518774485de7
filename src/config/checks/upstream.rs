//! What Envoy 1.40 refuses while it builds a cluster's parts, though every field rule holds:
//! its health checks, outlier detector, subset and Maglev load balancers, bind config, the
//! request limit set twice, HTTP/2 SETTINGS given twice, and a load assignment's drop
//! overloads. Each is worded as Envoy words it and held against the real Envoy by
//! `tests/rules_envoy.rs` (the catalogue is docs/reference.md "What Envoy refuses beyond
//! its field rules").
//!
//! Must not: judge what an extension builds (a custom health checker, a load balancing
//! policy's typed config): only the built-in parts Envoy's own code builds.

use std::collections::BTreeSet;
use std::net::IpAddr;

use prost_reflect::DynamicMessage;

use super::builds::{cluster_kind, enum_number, http_protocol_options, nanos, wrapped};
use super::refusal::{beyond, refuse, Refusal};
use crate::config::fields::{has, message as field, messages, string, strings};
use envoy_types::pb::envoy::config::cluster::v3::cluster::lb_subset_config::lb_subset_selector::LbSubsetSelectorFallbackPolicy;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{DiscoveryType, LbPolicy};
use envoy_types::pb::envoy::config::core::v3::RequestMethod;

/// HTTP/2 SETTINGS identifiers (RFC 9113 section 6.5.2; RFC 8441 for CONNECT).
const HEADER_TABLE_SIZE: u64 = 1;
const ENABLE_PUSH: u64 = 2;
const MAX_CONCURRENT_STREAMS: u64 = 3;
const INITIAL_WINDOW_SIZE: u64 = 4;
const ENABLE_CONNECT_PROTOCOL: u64 = 8;

/// Envoy's outlier detector's `base_ejection_time` when unset, in nanoseconds.
const BASE_EJECTION: i128 = 30_000_000_000;

/// A cluster's own parts as `ClusterInfoImpl` and the load balancers take them.
pub(super) fn cluster(cluster: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let name = string(cluster, "name");
    let lb = LbPolicy::try_from(enum_number(cluster, "lb_policy")).ok();
    if wrapped(cluster, "max_requests_per_connection").is_some()
        && http_protocol_options(cluster)
            .and_then(|o| field(&o, "common_http_protocol_options"))
            .is_some_and(|c| wrapped(&c, "max_requests_per_connection").is_some())
    {
        return refuse(
            &beyond(at, &["max_requests_per_connection"]),
            "Only one of max_requests_per_connection from Cluster or HttpProtocolOptions can \
             be specified"
                .into(),
        );
    }
    if lb == Some(LbPolicy::LoadBalancingPolicyConfig) && !has(cluster, "load_balancing_policy") {
        return refuse(
            &beyond(at, &["lb_policy"]),
            "cluster: field load_balancing_policy need to be set".into(),
        );
    }
    if lb == Some(LbPolicy::Maglev) {
        let size = field(cluster, "maglev_lb_config").and_then(|c| wrapped(&c, "table_size"));
        if size.is_some_and(|s| !prime(s)) {
            return refuse(
                &beyond(at, &["maglev_lb_config", "table_size"]),
                "The table size of maglev must be prime number".into(),
            );
        }
    }
    if let Some(subsets) = field(cluster, "lb_subset_config") {
        subset_selectors(&subsets, &beyond(at, &["lb_subset_config"]))?;
    }
    if let Some(bind) = field(cluster, "upstream_bind_config") {
        bind_config(&bind, &name, &beyond(at, &["upstream_bind_config"]))?;
    }
    let kind = cluster_kind(cluster);
    if let (Some(k @ (DiscoveryType::StrictDns | DiscoveryType::LogicalDns)), Some(assignment)) =
        (kind, field(cluster, "load_assignment"))
    {
        for (l, locality) in messages(&assignment, "endpoints").iter().enumerate() {
            for (e, lb_endpoint) in messages(locality, "lb_endpoints").iter().enumerate() {
                let resolver = field(lb_endpoint, "endpoint")
                    .and_then(|e| field(&e, "address"))
                    .and_then(|a| field(&a, "socket_address"))
                    .map(|s| string(&s, "resolver_name"))
                    .unwrap_or_default();
                if !resolver.is_empty() {
                    return refuse(
                        &beyond(
                            at,
                            &[
                                "load_assignment",
                                &format!("endpoints[{l}]"),
                                &format!("lb_endpoints[{e}]"),
                                "endpoint",
                                "address",
                                "socket_address",
                                "resolver_name",
                            ],
                        ),
                        format!(
                            "{} clusters must NOT have a custom resolver name set",
                            k.as_str_name()
                        ),
                    );
                }
            }
        }
    }
    Ok(())
}

fn prime(n: u64) -> bool {
    n >= 2
        && (2..)
            .take_while(|d| d * d <= n)
            .all(|d| !n.is_multiple_of(d))
}

/// The subset load balancer's selectors (`SubsetSelectorImpl`): a KEYS_SUBSET fallback names
/// some, not all, of the selector's keys, and only those.
fn subset_selectors(subsets: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    for (i, selector) in messages(subsets, "subset_selectors").iter().enumerate() {
        if enum_number(selector, "fallback_policy")
            != LbSubsetSelectorFallbackPolicy::KeysSubset as i32
        {
            continue;
        }
        let here = beyond(
            at,
            &[
                "subset_selectors",
                &format!("[{i}]"),
                "fallback_keys_subset",
            ],
        );
        let keys: BTreeSet<String> = strings(selector, "keys").into_iter().collect();
        let fallback: BTreeSet<String> = strings(selector, "fallback_keys_subset")
            .into_iter()
            .collect();
        if fallback.is_empty() {
            return refuse(&here, "fallback_keys_subset cannot be empty".into());
        }
        if !fallback.is_subset(&keys) {
            return refuse(
                &here,
                "fallback_keys_subset must be a subset of selector keys".into(),
            );
        }
        if fallback == keys {
            return refuse(&here, "fallback_keys_subset cannot be equal to keys".into());
        }
    }
    Ok(())
}

/// A cluster's bind config: one extra source address at most, of the other IP version than
/// the source address.
fn bind_config(bind: &DynamicMessage, cluster: &str, at: &[String]) -> Result<(), Refusal> {
    let Some(source) = field(bind, "source_address") else {
        return Ok(());
    };
    let host = string(&source, "address");
    let Ok(source_ip) = host.parse::<IpAddr>() else {
        return refuse(
            &beyond(at, &["source_address", "address"]),
            format!("malformed IP address: {host}"),
        );
    };
    let mut extra: Vec<(String, Option<DynamicMessage>)> = messages(bind, "extra_source_addresses")
        .iter()
        .enumerate()
        .map(|(i, e)| (format!("extra_source_addresses[{i}]"), field(e, "address")))
        .collect();
    extra.extend(
        messages(bind, "additional_source_addresses")
            .into_iter()
            .enumerate()
            .map(|(i, a)| (format!("additional_source_addresses[{i}]"), Some(a))),
    );
    if extra.len() > 1 {
        return refuse(
            &beyond(at, &[&extra[1].0]),
            format!(
                "Cluster {cluster}'s upstream binding config has more than one extra/additional \
                 source addresses. Only one extra/additional source can be supported in \
                 BindConfig's extra_source_addresses/additional_source_addresses field"
            ),
        );
    }
    if let Some((place, Some(address))) = extra.first() {
        let same = string(address, "address")
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_ipv4() == source_ip.is_ipv4());
        if same {
            return refuse(
                &beyond(at, &[place]),
                format!(
                    "Cluster {cluster}'s upstream binding config has two same IP version source \
                     addresses. Only two different IP version source addresses can be supported \
                     in BindConfig's source_address and \
                     extra_source_addresses/additional_source_addresses fields"
                ),
            );
        }
    }
    Ok(())
}

/// A health check as Envoy's HTTP and TCP health checkers build it: payloads in hex, a
/// request payload only with a method that carries a body, and HTTP status ranges within
/// 100..=600, each start below its end.
pub(super) fn health_check(check: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    if let Some(http) = field(check, "http_health_check") {
        let here = beyond(at, &["http_health_check"]);
        let method = RequestMethod::try_from(enum_number(&http, "method"))
            .unwrap_or(RequestMethod::MethodUnspecified);
        let with_body = matches!(
            method,
            RequestMethod::Post
                | RequestMethod::Put
                | RequestMethod::Patch
                | RequestMethod::Options
        );
        if has(&http, "send") && !with_body {
            let name = match method {
                RequestMethod::MethodUnspecified => "GET",
                m => m.as_str_name(),
            };
            return refuse(
                &beyond(&here, &["send"]),
                format!(
                    "HTTP health check cannot specify a request payload with method '{name}'. \
                     Only methods that support a request body (POST, PUT, PATCH, OPTIONS) can \
                     be used with payload."
                ),
            );
        }
        payloads(&http, &here)?;
        for (list, kind) in [
            ("expected_statuses", "expected"),
            ("retriable_statuses", "retriable"),
        ] {
            for (i, range) in messages(&http, list).iter().enumerate() {
                let number = |name| {
                    range
                        .get_field_by_name(name)
                        .and_then(|v| v.as_i64())
                        .unwrap_or(0)
                };
                let (start, end) = (number("start"), number("end"));
                let problem = if start >= end {
                    format!("expecting start < end, but found start={start} and end={end}")
                } else if start < 100 {
                    format!("expecting start >= 100, but found start={start}")
                } else if end > 600 {
                    format!("expecting end <= 600, but found end={end}")
                } else {
                    continue;
                };
                return refuse(
                    &beyond(&here, &[list, &format!("[{i}]")]),
                    format!("Invalid http {kind} status range: {problem}"),
                );
            }
        }
    }
    if let Some(tcp) = field(check, "tcp_health_check") {
        payloads(&tcp, &beyond(at, &["tcp_health_check"]))?;
    }
    Ok(())
}

/// A health check's payloads written as text are hex (`PayloadMatcher`).
fn payloads(checker: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let mut all: Vec<(Vec<String>, DynamicMessage)> = field(checker, "send")
        .map(|p| (beyond(at, &["send"]), p))
        .into_iter()
        .collect();
    all.extend(
        messages(checker, "receive")
            .into_iter()
            .enumerate()
            .map(|(i, p)| (beyond(at, &["receive", &format!("[{i}]")]), p)),
    );
    for (here, payload) in all {
        if !has(&payload, "text") {
            continue;
        }
        let text = string(&payload, "text");
        let hex = text.len().is_multiple_of(2) && text.bytes().all(|b| b.is_ascii_hexdigit());
        if !hex {
            return refuse(
                &beyond(&here, &["text"]),
                format!("invalid hex string '{text}'"),
            );
        }
    }
    Ok(())
}

/// An outlier detector (`DetectorImpl::create`): its longest ejection is not shorter than
/// its base one (30 s when unset).
pub(super) fn outlier_detection(detector: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let base = nanos(detector, "base_ejection_time").unwrap_or(BASE_EJECTION);
    if nanos(detector, "max_ejection_time").is_some_and(|max| max < base) {
        return refuse(
            &beyond(at, &["max_ejection_time"]),
            "outlier detector's max_ejection_time cannot be smaller than base_ejection_time".into(),
        );
    }
    Ok(())
}

/// HTTP/2 options, upstream or downstream (`Http2::Utility::initializeAndValidateOptions`):
/// a custom SETTINGS parameter never enables push or CONNECT, is not also a named field that
/// is set, and is not given twice with two values.
pub(super) fn http2_options(options: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let mut values = std::collections::BTreeMap::new();
    let mut inconsistent = Vec::new();
    let mut named = Vec::new();
    for (i, parameter) in messages(options, "custom_settings_parameters")
        .iter()
        .enumerate()
    {
        let here = beyond(at, &["custom_settings_parameters", &format!("[{i}]")]);
        let identifier = wrapped(parameter, "identifier").unwrap_or(0);
        let value = wrapped(parameter, "value").unwrap_or(0);
        if let Some(earlier) = values.get(&identifier) {
            if *earlier != value {
                inconsistent.push(format!("0x{identifier:02x}"));
            }
        } else {
            values.insert(identifier, value);
        }
        let collides = match identifier {
            ENABLE_PUSH if value == 1 => {
                return refuse(
                    &here,
                    "server push is not supported by Envoy and can not be enabled via a \
                     SETTINGS parameter."
                        .into(),
                )
            }
            ENABLE_CONNECT_PROTOCOL => {
                return refuse(
                    &here,
                    "the \"allow_connect\" SETTINGS parameter must only be configured through \
                     the named field"
                        .into(),
                )
            }
            HEADER_TABLE_SIZE => Some("hpack_table_size"),
            MAX_CONCURRENT_STREAMS => Some("max_concurrent_streams"),
            INITIAL_WINDOW_SIZE => Some("initial_stream_window_size"),
            _ => None,
        };
        if let Some(name) = collides.filter(|n| has(options, n)) {
            named.push(name);
        }
    }
    let here = beyond(at, &["custom_settings_parameters"]);
    if !inconsistent.is_empty() {
        return refuse(
            &here,
            format!(
                "inconsistent HTTP/2 custom SETTINGS parameter(s) detected; identifiers = {{{}}}",
                inconsistent.join(",")
            ),
        );
    }
    if !named.is_empty() {
        return refuse(
            &here,
            format!(
                "the {{{}}} HTTP/2 SETTINGS parameter(s) can not be configured through both \
                 named and custom parameters",
                named.join(",")
            ),
        );
    }
    Ok(())
}

/// A load assignment's policy drops for one category at most (`parseDropOverloadConfig`).
pub(super) fn drop_overloads(assignment: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let count = field(assignment, "policy").map_or(0, |p| messages(&p, "drop_overloads").len());
    if count > 1 {
        return refuse(
            &beyond(at, &["policy", "drop_overloads"]),
            format!(
                "Cluster drop_overloads config has {count} categories. Envoy only support one."
            ),
        );
    }
    Ok(())
}
