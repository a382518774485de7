//! What Envoy 1.40 refuses while it builds a route configuration's routes, though every
//! field rule holds: a route's rewrites, upgrades, weighted clusters and mirrors, a retry
//! back-off, a direct response's body against the configuration's limit, and a string
//! matcher that asks a regex to ignore case. Each is worded as Envoy words it and held
//! against the real Envoy by `tests/rules_envoy.rs` (the catalogue is docs/reference.md
//! "What Envoy refuses beyond its field rules").
//!
//! Must not: judge what depends on more than the resource (a weight a runtime may set).

use prost_reflect::DynamicMessage;

use super::builds::{inline_data, nanos, wrapped};
use super::refusal::{beyond, refuse, Refusal};
use crate::config::fields::{has, message as field, messages, string};

/// Envoy's default for `max_direct_response_body_size_bytes`.
const DIRECT_RESPONSE_BODY_LIMIT: u64 = 4096;

/// A route as `RouteEntryImplBase` builds it: at most one path rewrite, no prefix rewrite
/// beside a path matcher extension, upgrades named once (in any case) with a CONNECT
/// config only on CONNECT, weighted clusters that name one cluster each and weigh something,
/// and mirrors that name one cluster each.
pub(super) fn route(route: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    super::uri_template::templates(route, at)?;
    let Some(action) = field(route, "route") else {
        return Ok(());
    };
    let action_at = beyond(at, &["route"]);
    let mut seen = std::collections::HashSet::new();
    for (i, upgrade) in messages(&action, "upgrade_configs").iter().enumerate() {
        let kind = string(upgrade, "upgrade_type");
        let here = beyond(&action_at, &["upgrade_configs", &format!("[{i}]")]);
        if !seen.insert(kind.to_ascii_lowercase()) {
            return refuse(
                &beyond(&here, &["upgrade_type"]),
                format!("Duplicate upgrade {kind}"),
            );
        }
        if has(upgrade, "connect_config") && !kind.eq_ignore_ascii_case("CONNECT") {
            return refuse(
                &beyond(&here, &["connect_config"]),
                format!("Non-CONNECT upgrade type {kind} has ConnectConfig"),
            );
        }
    }
    let prefix_rewrite = !string(&action, "prefix_rewrite").is_empty();
    let rewrites = [
        has(&action, "path_rewrite_policy"),
        prefix_rewrite,
        has(&action, "regex_rewrite"),
        // Newer than some APIs: absent there, so never set.
        !string(&action, "path_rewrite").is_empty(),
    ];
    if rewrites.iter().filter(|r| **r).count() > 1 {
        return refuse(
            &action_at,
            "Specify only one of prefix_rewrite, regex_rewrite or path_rewrite_policy".into(),
        );
    }
    let path_matcher = field(route, "match").is_some_and(|m| has(&m, "path_match_policy"));
    if prefix_rewrite && path_matcher {
        return refuse(
            &beyond(&action_at, &["prefix_rewrite"]),
            "Cannot use prefix_rewrite with matcher extension".into(),
        );
    }
    super::uri_template::compatible(route, at)?;
    if let Some(weighted) = field(&action, "weighted_clusters") {
        weighted_clusters(
            &weighted,
            &string(route, "name"),
            &beyond(&action_at, &["weighted_clusters"]),
        )?;
    }
    for (i, mirror) in messages(&action, "request_mirror_policies")
        .iter()
        .enumerate()
    {
        let (cluster, header) = (string(mirror, "cluster"), string(mirror, "cluster_header"));
        let here = beyond(&action_at, &["request_mirror_policies", &format!("[{i}]")]);
        if !cluster.is_empty() && !header.is_empty() {
            return refuse(
                &here,
                format!(
                    "Only one of cluster '{cluster}' or cluster_header '{header}' in request \
                     mirror policy can be specified"
                ),
            );
        }
        if cluster.is_empty() && header.is_empty() {
            return refuse(
                &here,
                "Exactly one of cluster or cluster_header in request mirror policy need to be \
                 specified"
                    .into(),
            );
        }
    }
    Ok(())
}

/// Weighted clusters as `WeightedClusterSpecifierPlugin` builds them: each entry names a
/// cluster or a header, not both, and has a weight; the weights' sum is above 0 and fits 32
/// bits. A runtime key prefix lets the node's runtime set the weights: their sum is not
/// judged then.
fn weighted_clusters(
    weighted: &DynamicMessage,
    route_name: &str,
    at: &[String],
) -> Result<(), Refusal> {
    let mut sum: u64 = 0;
    for (i, entry) in messages(weighted, "clusters").iter().enumerate() {
        let here = beyond(at, &["clusters", &format!("[{i}]")]);
        let (name, header) = (string(entry, "name"), string(entry, "cluster_header"));
        if !name.is_empty() && !header.is_empty() {
            return refuse(
                &here,
                "Only one of name or cluster_header can be specified".into(),
            );
        }
        if name.is_empty() && header.is_empty() {
            return refuse(
                &here,
                "At least one of name or cluster_header need to be specified".into(),
            );
        }
        let Some(weight) = wrapped(entry, "weight") else {
            return refuse(&here, "Field 'weight' is missing in:".into());
        };
        sum += weight;
        if sum > u64::from(u32::MAX) {
            return refuse(
                &here,
                format!(
                    "The sum of weights of all weighted clusters of route {route_name} exceeds {}",
                    u32::MAX
                ),
            );
        }
    }
    if sum == 0 && string(weighted, "runtime_key_prefix").is_empty() {
        return refuse(
            at,
            "Sum of weights in the weighted_cluster must be greater than 0.".into(),
        );
    }
    Ok(())
}

/// A retry policy's back-off (`RetryPolicyImpl`): its longest interval is not below its base.
pub(super) fn retry_policy(policy: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let Some(back_off) = field(policy, "retry_back_off") else {
        return Ok(());
    };
    if let (Some(base), Some(max)) = (
        nanos(&back_off, "base_interval"),
        nanos(&back_off, "max_interval"),
    ) {
        if max < base {
            return refuse(
                &beyond(at, &["retry_back_off", "max_interval"]),
                "retry_policy.max_interval must greater than or equal to the base_interval".into(),
            );
        }
    }
    Ok(())
}

/// A route configuration's direct responses fit its `max_direct_response_body_size_bytes`
/// (4096 when unset; `ConfigUtility::parseDirectResponseBody`). A body read from a file is
/// the proxy's to judge. Virtual hosts served alone (VHDS) are judged by the proxy against
/// the configuration they join.
pub(super) fn direct_responses(config: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let limit = wrapped(config, "max_direct_response_body_size_bytes")
        .unwrap_or(DIRECT_RESPONSE_BODY_LIMIT);
    for (i, vhost) in messages(config, "virtual_hosts").iter().enumerate() {
        for (j, route) in messages(vhost, "routes").iter().enumerate() {
            let Some(body) = field(route, "direct_response").and_then(|d| field(&d, "body")) else {
                continue;
            };
            let Some(bytes) = inline_data(&body) else {
                continue;
            };
            if bytes.len() as u64 > limit {
                return refuse(
                    &beyond(
                        at,
                        &[
                            "virtual_hosts",
                            &format!("[{i}]"),
                            "routes",
                            &format!("[{j}]"),
                            "direct_response",
                            "body",
                        ],
                    ),
                    format!(
                        "response body size is {} bytes; maximum is {limit}",
                        bytes.len()
                    ),
                );
            }
        }
    }
    Ok(())
}

/// A string matcher (`StringMatcherImpl`, wherever one is built): a regex does not ignore
/// case.
pub(super) fn string_matcher(matcher: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let ignore_case = matcher
        .get_field_by_name("ignore_case")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    if ignore_case && has(matcher, "safe_regex") {
        return refuse(
            &beyond(at, &["ignore_case"]),
            "ignore_case has no effect for safe_regex.".into(),
        );
    }
    Ok(())
}
