//! RE2's syntax, as Envoy's `RegexMatcher` compiles it, judged with the parser of Rust's
//! `regex` (regex-syntax's AST) and RE2's differences from it, in RE2's words (Envoy reports
//! RE2's own error text: "no argument for repetition operator: *").
//!
//! Where RE2 and regex-syntax differ:
//! - RE2 has `\Q...\E` (literal text) and `\C` (any byte); regex-syntax does not: read here as
//!   the literal and as `.`;
//! - RE2 reads a `{` that starts no `{n}`, `{n,}` or `{n,m}` as a literal `{`;
//! - RE2 refuses a repetition of a repetition (`a**`, `a{2}{3}`), counts over 1000, the `x`,
//!   `R` and `u` flags, and a POSIX class it does not know (`[[:foo:]]`), which regex-syntax
//!   accepts.
//!
//! Not judged: RE2's program size, which Envoy limits (100 by default, runtime
//! `re2.max_program_size.error_level`): only RE2's own compiler can count it.
//! `validate --envoy` and `--preflight-envoy` catch that.
//!
//! Must not: compile or run a regex for matching (nothing here matches traffic); it only
//! judges a pattern as RE2 would.

use regex_syntax::ast::{self, Ast, ErrorKind, RepetitionKind, RepetitionRange};

/// RE2 accepts `pattern`, or its words for why not.
pub(super) fn check(pattern: &str) -> Result<(), String> {
    posix_classes(pattern)?;
    flags(pattern)?;
    let rust = to_regex_syntax(pattern);
    let parsed = ast::parse::Parser::new()
        .parse(&rust)
        .map_err(|e| words(pattern, &rust, e.kind(), e.span()))?;
    repetitions(&parsed, &rust)?;
    if let Err(e) = regex_syntax::hir::translate::Translator::new().translate(&rust, &parsed) {
        use regex_syntax::hir::ErrorKind as H;
        if matches!(
            e.kind(),
            H::UnicodePropertyNotFound | H::UnicodePropertyValueNotFound
        ) {
            let span = e.span();
            return Err(format!(
                "invalid character class range: {}",
                &rust[span.start.offset..span.end.offset]
            ));
        }
    }
    Ok(())
}

/// RE2's words for a regex-syntax error.
fn words(pattern: &str, rust: &str, kind: &ErrorKind, span: &ast::Span) -> String {
    let text = &rust[span.start.offset..span.end.offset.min(rust.len())];
    match kind {
        ErrorKind::RepetitionMissing => {
            // The span is empty, at the operator: `*`, `+`, `?` or a `{...}`.
            let from = &rust[span.start.offset..];
            let op = match from.find('}') {
                Some(end) if from.starts_with('{') => &from[..=end],
                _ => from.get(..1).unwrap_or(""),
            };
            format!("no argument for repetition operator: {op}")
        }
        ErrorKind::GroupUnclosed => format!("missing ): {pattern}"),
        ErrorKind::GroupUnopened => format!("unexpected ): {pattern}"),
        ErrorKind::ClassUnclosed => format!("missing ]: {}", &rust[span.start.offset..]),
        ErrorKind::ClassRangeInvalid => format!("invalid character class range: {text}"),
        ErrorKind::EscapeUnrecognized
        | ErrorKind::UnsupportedBackreference
        | ErrorKind::EscapeUnexpectedEof => format!("invalid escape sequence: {text}"),
        ErrorKind::UnsupportedLookAround => format!("invalid perl operator: {text}"),
        ErrorKind::RepetitionCountInvalid => format!("invalid repetition size: {text}"),
        ErrorKind::GroupNameInvalid
        | ErrorKind::GroupNameEmpty
        | ErrorKind::GroupNameUnexpectedEof => {
            format!(
                "invalid named capture group: {}",
                &rust[span.start.offset..]
            )
        }
        ErrorKind::GroupNameDuplicate { .. } => format!("duplicate capture group name: {text}"),
        ErrorKind::FlagUnrecognized
        | ErrorKind::FlagUnexpectedEof
        | ErrorKind::FlagDanglingNegation
        | ErrorKind::FlagRepeatedNegation { .. }
        | ErrorKind::FlagDuplicate { .. } => format!("invalid perl operator: {text}"),
        other => format!("invalid regex {pattern}: {other}"),
    }
}

/// The pattern in regex-syntax's dialect: `\Q...\E` as escaped literals, `\C` as `.`, and a
/// `{` that starts no repetition escaped.
fn to_regex_syntax(pattern: &str) -> String {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len());
    let mut i = 0;
    let mut in_class = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' && i + 1 < chars.len() {
            let next = chars[i + 1];
            if next == 'Q' && !in_class {
                let mut j = i + 2;
                while j < chars.len() && !(chars[j] == '\\' && chars.get(j + 1) == Some(&'E')) {
                    out.push_str(&regex_syntax::escape(&chars[j].to_string()));
                    j += 1;
                }
                i = (j + 2).min(chars.len());
                continue;
            }
            if next == 'C' && !in_class {
                out.push('.');
                i += 2;
                continue;
            }
            out.push(c);
            out.push(next);
            i += 2;
            continue;
        }
        if in_class {
            if c == ']' {
                in_class = false;
            }
            out.push(c);
            i += 1;
            continue;
        }
        if c == '[' {
            in_class = true;
            out.push(c);
            i += 1;
            // A `]` (or `^]`) right after the `[` is literal.
            if chars.get(i) == Some(&'^') {
                out.push('^');
                i += 1;
            }
            if chars.get(i) == Some(&']') {
                out.push(']');
                i += 1;
            }
            continue;
        }
        if c == '{' && !starts_repetition(&chars[i..]) {
            out.push_str("\\{");
            i += 1;
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

/// `{n}`, `{n,}` or `{n,m}`.
fn starts_repetition(rest: &[char]) -> bool {
    let text: String = rest.iter().take(32).collect();
    let Some(close) = text.find('}') else {
        return false;
    };
    let inner = &text[1..close];
    let (min, max) = match inner.split_once(',') {
        Some((a, b)) => (a, Some(b)),
        None => (inner, None),
    };
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    digits(min) && max.is_none_or(|m| m.is_empty() || digits(m))
}

/// RE2 refuses a repetition of a repetition, and counts over 1000.
fn repetitions(ast: &Ast, rust: &str) -> Result<(), String> {
    match ast {
        Ast::Repetition(rep) => {
            if let Ast::Repetition(inner) = &*rep.ast {
                return Err(format!(
                    "bad repetition operator: {}",
                    &rust[inner.op.span.start.offset..rep.op.span.end.offset]
                ));
            }
            if let RepetitionKind::Range(range) = &rep.op.kind {
                let too_big = match range {
                    RepetitionRange::Exactly(n) | RepetitionRange::AtLeast(n) => *n > 1000,
                    RepetitionRange::Bounded(a, b) => *a > 1000 || *b > 1000,
                };
                if too_big {
                    return Err(format!(
                        "invalid repetition size: {}",
                        &rust[rep.op.span.start.offset..rep.op.span.end.offset]
                    ));
                }
            }
            repetitions(&rep.ast, rust)
        }
        Ast::Group(group) => repetitions(&group.ast, rust),
        Ast::Alternation(alt) => alt.asts.iter().try_for_each(|a| repetitions(a, rust)),
        Ast::Concat(concat) => concat.asts.iter().try_for_each(|a| repetitions(a, rust)),
        _ => Ok(()),
    }
}

/// RE2's flags are `i`, `m`, `s` and `U`; regex-syntax also has `x`, `R` and `u`.
fn flags(pattern: &str) -> Result<(), String> {
    let bytes = pattern.as_bytes();
    let mut i = 0;
    while i + 2 < bytes.len() {
        if bytes[i] == b'\\' {
            i += 2;
            continue;
        }
        if bytes[i] == b'(' && bytes[i + 1] == b'?' {
            let mut j = i + 2;
            while j < bytes.len() && (bytes[j].is_ascii_alphabetic() || bytes[j] == b'-') {
                if matches!(bytes[j], b'x' | b'R' | b'u') {
                    return Err(format!("invalid perl operator: {}", &pattern[i..=j]));
                }
                j += 1;
            }
        }
        i += 1;
    }
    Ok(())
}

/// A POSIX class inside brackets must be one RE2 knows.
fn posix_classes(pattern: &str) -> Result<(), String> {
    const KNOWN: &[&str] = &[
        "alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print", "punct",
        "space", "upper", "word", "xdigit",
    ];
    let mut rest = pattern;
    let mut in_class = false;
    while let Some(c) = rest.chars().next() {
        if c == '\\' {
            rest = rest.get(2..).unwrap_or("");
            continue;
        }
        if in_class && rest.starts_with("[:") {
            if let Some(end) = rest[2..].find(":]") {
                let name = &rest[2..2 + end];
                if name.chars().all(|c| c.is_ascii_alphabetic() || c == '^')
                    && !KNOWN.contains(&name.trim_start_matches('^'))
                {
                    return Err(format!(
                        "invalid character class range: {}",
                        &rest[..end + 4]
                    ));
                }
                rest = &rest[end + 4..];
                continue;
            }
        }
        if c == '[' && !in_class {
            in_class = true;
        } else if c == ']' && in_class {
            in_class = false;
        }
        rest = &rest[c.len_utf8()..];
    }
    Ok(())
}
