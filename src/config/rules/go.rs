//! Values as Go's `fmt` prints them: protoc-gen-validate's generator wrote the rules'
//! bounds into Envoy's messages with it (`0s`, `1.5s`, `[http https]`, `"^[^\\x00]*$"`).
//!
//! Must not: check anything; it only writes values as the messages of Envoy's checks do.

use super::*;

/// Go's `%v` of a float: the shortest text that reads back, with an exponent outside
/// 1e-4..1e21.
pub(super) fn go_float(x: f64) -> String {
    if x != 0.0 && (x.abs() < 1e-4 || x.abs() >= 1e21) {
        let text = format!("{x:e}");
        match text.split_once('e') {
            Some((mantissa, exp)) => {
                let (sign, digits) = match exp.strip_prefix('-') {
                    Some(d) => ('-', d),
                    None => ('+', exp),
                };
                format!("{mantissa}e{sign}{digits:0>2}")
            }
            None => text,
        }
    } else {
        format!("{x}")
    }
}

/// Go's `%v` of a list: `[a b c]`.
pub(super) fn go_list<T>(items: &[T], show: impl Fn(&T) -> String) -> String {
    let shown: Vec<String> = items.iter().map(show).collect();
    format!("[{}]", shown.join(" "))
}

/// Go's `%q` of a string (`strconv.Quote`), as the generator wrote rule values into the
/// messages: `"^[^\x00\n\r]*$"`.
pub(super) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%q` of bytes as the generator printed them: `"\x01\x02"`.
pub(super) fn show_bytes(b: &[u8]) -> String {
    let mut out = String::from("\"");
    for byte in b {
        let _ = write!(out, "\\x{byte:x}");
    }
    out.push('"');
    out
}

/// Go's `time.Duration.String()`: `0s`, `1.5s`, `100ms`, `1m30s`, `2h0m0s`.
pub(super) fn go_duration(nanos: i128) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    let frac = |value: u128, unit: u128| -> String {
        let whole = value / unit;
        let rest = value % unit;
        if rest == 0 {
            return whole.to_string();
        }
        let digits = unit.to_string().len() - 1;
        let text = format!("{rest:0>digits$}");
        format!("{whole}.{}", text.trim_end_matches('0'))
    };
    if n < 1_000 {
        return format!("{sign}{n}ns");
    }
    if n < 1_000_000 {
        return format!("{sign}{}\u{b5}s", frac(n, 1_000));
    }
    if n < 1_000_000_000 {
        return format!("{sign}{}ms", frac(n, 1_000_000));
    }
    let secs = n / 1_000_000_000;
    let sub = n % 1_000_000_000;
    let s = frac((secs % 60) * 1_000_000_000 + sub, 1_000_000_000);
    if secs < 60 {
        return format!("{sign}{s}s");
    }
    let mins = secs / 60;
    if mins < 60 {
        return format!("{sign}{mins}m{s}s");
    }
    format!("{sign}{}h{}m{s}s", mins / 60, mins % 60)
}
