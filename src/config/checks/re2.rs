//! Envoy's side of RE2's program size: its default limit, the runtime key that raises it, and
//! its words when a regex is over it. The count itself is RE2's, in the `switchyard-re2` crate
//! of the workspace (`re2/`).

pub use switchyard_re2::{program_size, Error, MAX_NESTING};

/// Envoy's default limit on a regex's program size (`re2.max_program_size.error_level`).
pub const DEFAULT_MAX_PROGRAM_SIZE: u64 = 100;

/// The runtime key Envoy reads its limit from.
pub const RUNTIME_KEY: &str = "re2.max_program_size.error_level";

/// The limit a runtime layer (a `Struct`, as JSON) sets: `re2.max_program_size.error_level`,
/// written flat or nested (Envoy joins nested keys with dots), as a whole number or a string
/// of one (Envoy's `getInteger`); `None` when the layer does not set it so.
pub fn runtime_limit(layer: &serde_json::Value) -> Option<u64> {
    fn find(value: &serde_json::Value, key: &str) -> Option<u64> {
        let object = value.as_object()?;
        if let Some(v) = object.get(key) {
            return match v {
                serde_json::Value::Number(n) => n.as_u64().or_else(|| {
                    n.as_f64()
                        .filter(|f| *f >= 0.0 && f.fract() == 0.0)
                        .map(|f| f as u64)
                }),
                serde_json::Value::String(s) => s.trim().parse().ok(),
                _ => None,
            };
        }
        object.iter().find_map(|(k, child)| {
            let rest = key.strip_prefix(k.as_str())?.strip_prefix('.')?;
            find(child, rest)
        })
    }
    find(layer, RUNTIME_KEY)
}

/// Envoy's words when a regex's program is over its limit.
pub fn over_limit(pattern: &str, size: u64, limit: u64) -> String {
    format!(
        "regex '{pattern}' RE2 program size of {size} > max program size of {limit} set for \
         the error level threshold. Increase configured max program size if necessary."
    )
}
