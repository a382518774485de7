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

/// Parentheses nested deeper than this are not counted (and the regex is refused): each level
/// takes the count's recursion a few kilobytes of stack deeper.
pub const MAX_NESTING: usize = 10_000;

/// The size of the program RE2 compiles `pattern` to, with the options Envoy gives RE2; or
/// RE2's words for why it compiles none.
///
/// RE2 walks its trees with explicit stacks; this count recurses, as deep as the pattern
/// nests (parentheses, and repeats RE2 expands into nested options: `x{0,1000}` is 2,000
/// levels). A pattern that may nest deeply is counted on a thread with a stack to match, so
/// that no pattern can overflow the caller's.
pub fn program_size(pattern: &str) -> Result<u64, String> {
    let (nesting, largest_count) = shape(pattern);
    if nesting > MAX_NESTING {
        return Err(format!(
            "invalid regex: parentheses nested {nesting} deep, more than the {MAX_NESTING} \
             Switchyard counts RE2's program for"
        ));
    }
    if nesting <= 16 && largest_count <= 64 {
        return count(pattern);
    }
    // About 3 KiB per level in a debug build: nested groups take up to three levels each,
    // and repeats expand into at most about 2,000 (RE2 allows 1,000 copies along a chain).
    let levels = 3 * nesting + 2 * largest_count.min(1000) + 2 * 1010;
    let stack = (16 << 20) + levels * (4 << 10);
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("re2-count".into())
            .stack_size(stack)
            .spawn_scoped(scope, || count(pattern))
            .map_err(|e| format!("cannot count the regex's RE2 program: {e}"))?
            .join()
            .map_err(|_| "cannot count the regex's RE2 program: the count failed".to_string())?
    })
}

/// How deep `pattern`'s parentheses nest, and its largest repeat count (`{n}`, `{n,m}`),
/// read over (escapes and classes skipped roughly: an over-estimate only costs a thread).
fn shape(pattern: &str) -> (usize, usize) {
    let bytes = pattern.as_bytes();
    let (mut depth, mut deepest, mut largest) = (0usize, 0usize, 0usize);
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 1,
            b'(' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b')' => depth = depth.saturating_sub(1),
            b'{' | b',' => {
                let digits = bytes[i + 1..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .take(9)
                    .fold(0usize, |n, d| n * 10 + usize::from(d - b'0'));
                largest = largest.max(digits);
            }
            _ => {}
        }
        i += 1;
    }
    (deepest, largest)
}

fn count(pattern: &str) -> Result<u64, String> {
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
