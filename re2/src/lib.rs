//! RE2's program size for a pattern, counted as RE2 counts it (`RE2::ProgramSize`): the
//! number of instructions RE2's compiler emits for the pattern, with the options Envoy gives
//! RE2 (Envoy compares it with its limit, `re2.max_program_size.error_level`).
//!
//! A port of RE2's own steps (RE2's `re2/parse.cc`, `simplify.cc`, `compile.cc`), in RE2's
//! order and with its choices: the parser and its rewrites (`parse`, `factor`), the
//! simplifier (`simplify`), the compiler and the passes that settle the program (`compile`).
//! Only the count is kept: no program here ever matches text. Unicode's case folding,
//! categories and scripts come from regex-syntax's tables; RE2 as Envoy 1.40 builds it has
//! Unicode 15.1's, so a class of code points assigned since can count differently.
//!
//! ```
//! assert_eq!(switchyard_re2::program_size("abc"), Ok(7));
//! ```
//!
//! Switchyard's `tests/re2_envoy.rs` checks the count against the real Envoy on thousands of
//! patterns; this crate's tests hold sizes Envoy reported and that no input panics.
//!
//! Must not: know Envoy's limits or runtime keys (Switchyard's `config::checks::re2` does),
//! or depend on anything of Switchyard's.
#![forbid(unsafe_code)]

mod compile;
mod factor;
mod parse;
mod regexp;
mod simplify;

#[cfg(test)]
mod tests;

use regexp::{flags, Op, Re};

/// Why RE2 compiles no program for a pattern, in RE2's words (`invalid regex: ...`,
/// `pattern too large - compile failed`), or why the count could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Error(String);

impl Error {
    /// The words, as RE2 (or Envoy quoting RE2) says them.
    pub fn message(&self) -> &str {
        &self.0
    }
}

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
pub fn program_size(pattern: &str) -> Result<u64, Error> {
    let (nesting, largest_count) = shape(pattern);
    if nesting > MAX_NESTING {
        return Err(Error(format!(
            "invalid regex: parentheses nested {nesting} deep, more than the {MAX_NESTING} \
             this count counts RE2's program for"
        )));
    }
    if nesting <= 16 && largest_count <= 64 {
        return count(pattern).map_err(Error);
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
            .map_err(|e| Error(format!("cannot count the regex's RE2 program: {e}")))?
            .join()
            .map_err(|_| Error("cannot count the regex's RE2 program: the count failed".into()))?
            .map_err(Error)
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
