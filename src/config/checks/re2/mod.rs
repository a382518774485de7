//! RE2's program size for a pattern, counted as RE2 counts it (`RE2::ProgramSize`), which is
//! what Envoy compares with its limit (`re2.max_program_size.error_level`, 100 by default).
//!
//! RE2's own steps, in RE2's order and with its choices: the parser and its rewrites
//! (`parse`, `factor`), the simplifier (`simplify`), the compiler and the passes that settle
//! the program (`compile`). Only the count is kept: no program here ever matches text.
//! Unicode's case folding, categories and scripts come from regex-syntax's tables; RE2 1.40's
//! are of Unicode 15.1, so a class of code points assigned since can count differently.
//!
//! `tests/re2_envoy.rs` checks the count against the real Envoy on thousands of patterns.
//!
//! Must not: judge syntax beyond what the count needs (`super::regex` does, in RE2's words).

mod compile;
mod factor;
mod parse;
mod regexp;
mod simplify;

#[cfg(test)]
mod tests;

use regexp::{flags, Op, Re};

/// Envoy's default limit on a regex's program size (`re2.max_program_size.error_level`).
pub const DEFAULT_MAX_PROGRAM_SIZE: u64 = 100;

/// The size of the program RE2 compiles `pattern` to, with the options Envoy gives RE2; or
/// RE2's words for why it compiles none.
pub fn program_size(pattern: &str) -> Result<u64, String> {
    let re = parse::parse(pattern, flags::ENVOY)?;
    let sre = simplify::simplify(without_required_prefix(re));
    compile::program_size(sre)
        .map(|n| n as u64)
        .ok_or_else(|| "pattern too large - compile failed".to_string())
}

/// `RE2::Init` compiles only what follows a required prefix (`^` and a literal), which it
/// matches apart (`Regexp::RequiredPrefix`).
fn without_required_prefix(re: Re) -> Re {
    let Op::Concat(subs) = &re.op else {
        return re;
    };
    let anchors = subs
        .iter()
        .take_while(|s| matches!(s.op, Op::BeginText))
        .count();
    if anchors == 0
        || anchors >= subs.len()
        || !matches!(subs[anchors].op, Op::Literal(_) | Op::LiteralString(_))
    {
        return re;
    }
    let fl = re.flags;
    let Op::Concat(subs) = re.op else {
        unreachable!("matched above")
    };
    let rest: Vec<Re> = subs.into_iter().skip(anchors + 1).collect();
    if rest.is_empty() {
        return Re::new(Op::EmptyMatch, fl);
    }
    Re::concat_or_alternate(false, rest, fl)
}

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
