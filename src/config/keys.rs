//! What a snapshot file says beyond Envoy's own fields: a resource's `ttl` (P25), and the
//! names a VHDS virtual host is also known by (P24).
//!
//! Must not: read anything of Envoy's own fields beyond what these keys need.

use std::time::Duration;

/// The key beside a resource's fields that gives its TTL (P25).
pub const TTL_KEY: &str = "ttl";
/// The shortest TTL accepted: heartbeats go out at a third of it, to every client.
pub const MIN_TTL: Duration = Duration::from_secs(1);

/// A TTL: a number with a unit, `ms`, `s`, `m` or `h` (`30s`, `1.5s`, `2m`).
pub(super) fn parse_ttl(value: &serde_yaml::Value) -> Result<Duration, String> {
    let bad = || {
        format!(
            "expected a duration such as \"30s\", \"1.5s\", \"500ms\" or \"2m\", got {}",
            serde_yaml::to_string(value).unwrap_or_default().trim()
        )
    };
    let text = value.as_str().ok_or_else(bad)?.trim();
    let (number, unit) = text
        .find(|c: char| c.is_ascii_alphabetic())
        .map(|i| text.split_at(i))
        .ok_or_else(bad)?;
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(bad()),
    };
    let number: f64 = number.trim().parse().map_err(|_| bad())?;
    let ttl = Duration::try_from_secs_f64(number * scale).map_err(|_| bad())?;
    if ttl < MIN_TTL {
        return Err(format!(
            "a TTL must be at least {}s, got {text:?}",
            MIN_TTL.as_secs()
        ));
    }
    Ok(ttl)
}

/// A VHDS virtual host is named `<route-config>/<vhost>` and is also known as
/// `<route-config>/<domain>` for each of its domains: Envoy subscribes to the route
/// configuration's name as a namespace, and asks on demand by `<route-config>/<host>` (P24).
pub(super) fn vhds_aliases(name: &str, json: &serde_json::Value) -> Result<Vec<String>, String> {
    let Some((route_config, vhost)) = name.rsplit_once('/') else {
        return Err(format!(
            "a VHDS virtual host is named `<route-config-name>/<virtual-host-name>`, got {name:?}"
        ));
    };
    if route_config.is_empty() || vhost.is_empty() {
        return Err(format!(
            "a VHDS virtual host is named `<route-config-name>/<virtual-host-name>`, got {name:?}"
        ));
    }
    Ok(json
        .get("domains")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(serde_json::Value::as_str)
        .map(|domain| format!("{route_config}/{domain}"))
        .filter(|alias| alias != name)
        .collect())
}
