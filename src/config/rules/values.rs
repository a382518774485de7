//! One value against its rules (numbers, strings, bytes, enums, counts, durations, `Any`
//! type URLs, the well-known string formats), in PGV's words.
//!
//! Must not: walk a message (the rules module does, by its [`Plan`](super::plan::Plan)).

use super::*;

/// min/max items or pairs, in PGV's words.
pub(super) fn check_count(
    n: u64,
    min: Option<u64>,
    max: Option<u64>,
    unit: &str,
    units: &str,
) -> Option<Broken> {
    match (min, max) {
        (Some(lo), Some(hi)) if lo == hi => (n != lo).then(|| {
            (
                "min_items",
                format!("value must contain exactly {lo} {unit}"),
            )
        }),
        (Some(lo), Some(hi)) => (n < lo || n > hi).then(|| {
            (
                "min_items,max_items",
                format!("value must contain between {lo} and {hi} {units}, inclusive"),
            )
        }),
        (Some(lo), None) => (n < lo).then(|| {
            (
                "min_items",
                format!("value must contain at least {lo} {unit}"),
            )
        }),
        (None, Some(hi)) => (n > hi).then(|| {
            (
                "max_items",
                format!("value must contain no more than {hi} {unit}"),
            )
        }),
        (None, None) => None,
    }
    .map(|(rule, words)| {
        let rule = match (rule, unit) {
            ("min_items", "pair(s)") => "min_pairs",
            ("max_items", "pair(s)") => "max_pairs",
            ("min_items,max_items", "pair(s)") => "min_pairs,max_pairs",
            (r, _) => r,
        };
        (rule, words)
    })
}

/// An item's, key's or value's rules.
pub(super) fn check_value(value: &Value, ruled: &Ruled) -> Option<Broken> {
    let typed = ruled.typed.as_ref()?;
    match value {
        Value::Message(m) => check_message_value(m, typed),
        other => check_scalar(other, typed),
    }
}

pub(super) fn number_of(value: &Value) -> Option<Number> {
    Some(match value {
        Value::I32(n) | Value::EnumNumber(n) => Number::Int((*n).into()),
        Value::I64(n) => Number::Int((*n).into()),
        Value::U32(n) => Number::Int((*n).into()),
        Value::U64(n) => Number::Int((*n).into()),
        Value::F32(x) => Number::Float((*x).into()),
        Value::F64(x) => Number::Float(*x),
        _ => return None,
    })
}

/// `in` and `not_in`, in PGV's words (`what`: "value", or "type URL" for an Any): `is`
/// says whether a listed value is the one checked.
pub(super) fn check_in<T>(
    allowed: &[T],
    refused: &[T],
    show: impl Fn(&T) -> String,
    what: &str,
    is: impl Fn(&T) -> bool,
) -> Option<Broken> {
    if !allowed.is_empty() && !allowed.iter().any(&is) {
        return Some((
            "in",
            format!("{what} must be in list {}", go_list(allowed, &show)),
        ));
    }
    if refused.iter().any(&is) {
        return Some((
            "not_in",
            format!("{what} must not be in list {}", go_list(refused, &show)),
        ));
    }
    None
}

pub(super) fn check_scalar(value: &Value, rules: &Rules) -> Option<Broken> {
    match rules {
        Rules::Number(r) => check_number(number_of(value)?, r),
        Rules::Bool(want) => {
            (value.as_bool()? != *want).then(|| ("const", format!("value must equal {want}")))
        }
        Rules::String(r) => check_string(value.as_str()?, r),
        Rules::Bytes(r) => check_bytes(value.as_bytes()?, r),
        Rules::Enum(r) => check_enum(value.as_enum_number()?, r),
        // Message rules on a scalar cannot be generated; there is nothing to check.
        _ => None,
    }
}

pub(super) fn check_number(v: Number, r: &NumberRules) -> Option<Broken> {
    let zero = match v {
        Number::Int(i) => i == 0,
        Number::Float(x) => x == 0.0,
    };
    if r.ignore_empty && zero {
        return None;
    }
    if let Some(c) = r.konst {
        if v != c {
            return Some(("const", format!("value must equal {c}")));
        }
    }
    if let Some(broken) = r.range.check(v, |n| n.to_string()) {
        return Some(broken);
    }
    if let Some(broken) = check_in(&r.r#in, &r.not_in, Number::to_string, "value", |x| x == &v) {
        return Some(broken);
    }
    None
}

pub(super) fn check_enum(v: i32, r: &EnumRules) -> Option<Broken> {
    // Envoy's words name enum values (`[CONNECT]`), numbers where there is no name.
    let name = |n: &i32| {
        r.r#enum
            .as_ref()
            .and_then(|e| e.get_value(*n))
            .map_or_else(|| n.to_string(), |v| v.name().to_string())
    };
    if let Some(c) = r.konst {
        if v != c {
            return Some(("const", format!("value must equal {}", name(&c))));
        }
    }
    if let Some(broken) = check_in(&r.r#in, &r.not_in, name, "value", |x| x == &v) {
        return Some(broken);
    }
    if let Some(e) = &r.defined_only {
        if e.get_value(v).is_none() {
            return Some((
                "defined_only",
                "value must be one of the defined enum values".into(),
            ));
        }
    }
    None
}

pub(super) fn check_string(v: &str, r: &StringRules) -> Option<Broken> {
    if r.ignore_empty && v.is_empty() {
        return None;
    }
    if let Some(c) = &r.konst {
        if v != c {
            return Some(("const", format!("value must equal {}", go_quote(c))));
        }
    }
    if let Some(broken) = check_in(&r.r#in, &r.not_in, String::clone, "value", |x| x == v) {
        return Some(broken);
    }
    let chars = || v.chars().count() as u64;
    if let Some(n) = r.len.or(r.min_len.filter(|lo| Some(*lo) == r.max_len)) {
        if chars() != n {
            return Some(("len", format!("value length must be {n} characters")));
        }
    } else if let Some(lo) = r.min_len {
        match r.max_len {
            Some(hi) if chars() < lo || chars() > hi => {
                return Some((
                    "min_len,max_len",
                    format!("value length must be between {lo} and {hi} characters, inclusive"),
                ))
            }
            None if chars() < lo => {
                return Some((
                    "min_len",
                    format!("value length must be at least {lo} characters"),
                ))
            }
            _ => {}
        }
    } else if let Some(hi) = r.max_len {
        if chars() > hi {
            return Some((
                "max_len",
                format!("value length must be at most {hi} characters"),
            ));
        }
    }
    if let Some(broken) = check_byte_len(
        v.len() as u64,
        r.len_bytes,
        r.min_bytes,
        r.max_bytes,
        "_bytes",
    ) {
        return Some(broken);
    }
    if let Some(p) = &r.prefix {
        if !v.starts_with(p.as_str()) {
            return Some((
                "prefix",
                format!("value does not have prefix {}", go_quote(p)),
            ));
        }
    }
    if let Some(p) = &r.suffix {
        if !v.ends_with(p.as_str()) {
            return Some((
                "suffix",
                format!("value does not have suffix {}", go_quote(p)),
            ));
        }
    }
    if let Some(p) = &r.contains {
        if !v.contains(p.as_str()) {
            return Some((
                "contains",
                format!("value does not contain substring {}", go_quote(p)),
            ));
        }
    }
    if let Some(p) = &r.not_contains {
        if v.contains(p.as_str()) {
            return Some((
                "not_contains",
                format!("value contains substring {}", go_quote(p)),
            ));
        }
    }
    if let Some(broken) = r.well_known.and_then(|w| check_well_known(v, w)) {
        return Some(broken);
    }
    if let Some((text, Some(re))) = &r.pattern {
        if !re.is_match(v) {
            return Some((
                "pattern",
                format!("value does not match regex pattern {}", go_quote(text)),
            ));
        }
    }
    None
}

/// len/min/max in bytes (`suffix` names the rule: `_bytes` for strings, `` for bytes).
pub(super) fn check_byte_len(
    n: u64,
    len: Option<u64>,
    min: Option<u64>,
    max: Option<u64>,
    suffix: &str,
) -> Option<Broken> {
    let rule = |r: &'static str| -> &'static str {
        match (r, suffix) {
            ("len", "_bytes") => "len_bytes",
            ("min", "_bytes") => "min_bytes",
            ("max", "_bytes") => "max_bytes",
            ("range", "_bytes") => "min_bytes,max_bytes",
            ("min", _) => "min_len",
            ("max", _) => "max_len",
            ("range", _) => "min_len,max_len",
            (r, _) => r,
        }
    };
    if let Some(n0) = len.or(min.filter(|lo| Some(*lo) == max)) {
        return (n != n0).then(|| (rule("len"), format!("value length must be {n0} bytes")));
    }
    match (min, max) {
        (Some(lo), Some(hi)) => (n < lo || n > hi).then(|| {
            (
                rule("range"),
                format!("value length must be between {lo} and {hi} bytes, inclusive"),
            )
        }),
        (Some(lo), None) => (n < lo).then(|| {
            (
                rule("min"),
                format!("value length must be at least {lo} bytes"),
            )
        }),
        (None, Some(hi)) => (n > hi).then(|| {
            (
                rule("max"),
                format!("value length must be at most {hi} bytes"),
            )
        }),
        (None, None) => None,
    }
}

/// The HTTP header patterns of PGV's `well_known_regex`.
pub(super) fn header_regex(name: bool, strict: bool) -> (&'static str, &'static regex::Regex) {
    static NAME: OnceLock<regex::Regex> = OnceLock::new();
    static VALUE: OnceLock<regex::Regex> = OnceLock::new();
    static LOOSE: OnceLock<regex::Regex> = OnceLock::new();
    const NAME_TEXT: &str = "^:?[0-9a-zA-Z!#$%&'*+-.^_|~`]+$";
    const VALUE_TEXT: &str = "^[^\u{0000}-\u{0008}\u{000A}-\u{001F}\u{007F}]*$";
    const LOOSE_TEXT: &str = "^[^\u{0000}\u{000A}\u{000D}]*$";
    let compiled = |cell: &'static OnceLock<regex::Regex>, text: &str| {
        cell.get_or_init(|| regex::Regex::new(text).expect("PGV's header patterns compile"))
    };
    match (name, strict) {
        (_, false) => (LOOSE_TEXT, compiled(&LOOSE, LOOSE_TEXT)),
        (true, true) => (NAME_TEXT, compiled(&NAME, NAME_TEXT)),
        (false, true) => (VALUE_TEXT, compiled(&VALUE, VALUE_TEXT)),
    }
}

pub(super) fn check_well_known(v: &str, w: WellKnown) -> Option<Broken> {
    let ip = || v.parse::<Ipv4Addr>().is_ok() || v.parse::<Ipv6Addr>().is_ok();
    match w {
        WellKnown::Ip => (!ip()).then(|| ("ip", "value must be a valid IP Address".into())),
        WellKnown::Ipv4 => v
            .parse::<Ipv4Addr>()
            .is_err()
            .then(|| ("ipv4", "value must be a valid IPv4 Address".into())),
        WellKnown::Ipv6 => v
            .parse::<Ipv6Addr>()
            .is_err()
            .then(|| ("ipv6", "value must be a valid IPv6 Address".into())),
        WellKnown::Address => (!is_hostname(v) && !ip()).then(|| {
            (
                "address",
                "value must be an ip address, or a hostname.".into(),
            )
        }),
        WellKnown::Hostname => {
            (!is_hostname(v)).then(|| ("hostname", "value must be a valid hostname".into()))
        }
        WellKnown::Uuid => (!is_uuid(v)).then(|| ("uuid", "value must be a valid UUID".into())),
        WellKnown::HeaderName(strict) | WellKnown::HeaderValue(strict) => {
            let (text, re) = header_regex(matches!(w, WellKnown::HeaderName(_)), strict);
            (!re.is_match(v)).then(|| {
                (
                    "well_known_regex",
                    format!("value does not match regex pattern {}", go_quote(text)),
                )
            })
        }
        WellKnown::Unchecked => None,
    }
}

/// PGV's `IsHostname`: at most 253 bytes, dot-separated labels of 1-63 letters, digits and
/// hyphens, not starting or ending with a hyphen (one trailing dot allowed).
pub(super) fn is_hostname(v: &str) -> bool {
    if v.len() > 253 {
        return false;
    }
    let v = v.strip_suffix('.').unwrap_or(v);
    v.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    })
}

pub(super) fn is_uuid(v: &str) -> bool {
    v.len() == 36
        && v.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

pub(super) fn check_bytes(v: &[u8], r: &BytesRules) -> Option<Broken> {
    if r.ignore_empty && v.is_empty() {
        return None;
    }
    if let Some(c) = &r.konst {
        if v != c.as_slice() {
            return Some(("const", format!("value must equal {}", show_bytes(c))));
        }
    }
    if let Some(broken) = check_in(&r.r#in, &r.not_in, |b| show_bytes(b), "value", |x| x == v) {
        return Some(broken);
    }
    if let Some(broken) = check_byte_len(v.len() as u64, r.len, r.min_len, r.max_len, "") {
        return Some(broken);
    }
    if let Some(p) = &r.prefix {
        if !v.starts_with(p) {
            return Some((
                "prefix",
                format!("value does not have prefix {}", show_bytes(p)),
            ));
        }
    }
    if let Some(p) = &r.suffix {
        if !v.ends_with(p) {
            return Some((
                "suffix",
                format!("value does not have suffix {}", show_bytes(p)),
            ));
        }
    }
    if let Some(p) = &r.contains {
        if !p.is_empty() && !v.windows(p.len()).any(|w| w == p.as_slice()) {
            return Some((
                "contains",
                format!("value does not contain substring {}", show_bytes(p)),
            ));
        }
    }
    if let Some((text, Some(re))) = &r.pattern {
        if !re.is_match(v) {
            return Some((
                "pattern",
                format!("value does not match regex pattern {}", go_quote(text)),
            ));
        }
    }
    None
}

pub(super) fn message_nanos(m: &DynamicMessage) -> i128 {
    let seconds = m
        .get_field_by_number(1)
        .and_then(|v| v.as_i64())
        .unwrap_or(0);
    let nanos = m
        .get_field_by_number(2)
        .and_then(|v| v.as_i32())
        .unwrap_or(0);
    i128::from(seconds) * 1_000_000_000 + i128::from(nanos)
}

/// Rules of a set message value: an Any's type, a duration's or timestamp's bounds, a
/// wrapper's value.
pub(super) fn check_message_value(m: &DynamicMessage, rules: &Rules) -> Option<Broken> {
    match rules {
        Rules::Any(r) => {
            let url = m.get_field_by_number(1);
            let url = url.as_deref().and_then(Value::as_str).unwrap_or("");
            if let Some(broken) =
                check_in(&r.r#in, &r.not_in, String::clone, "type URL", |x| x == url)
            {
                return Some(broken);
            }
            None
        }
        Rules::Duration(r) => check_time(message_nanos(m), r, go_duration),
        Rules::Timestamp(r) => check_time(message_nanos(m), r, |n| {
            format!("{}s", go_float(n as f64 / 1e9))
        }),
        // A wrapper (`google.protobuf.UInt32Value`): the rules are its value's.
        scalar => {
            let value = m.get_field_by_number(1)?;
            check_scalar(&value, scalar)
        }
    }
}

pub(super) fn check_time(v: i128, r: &TimeRules, show: fn(i128) -> String) -> Option<Broken> {
    if let Some(c) = r.konst {
        if v != c {
            return Some(("const", format!("value must equal {}", show(c))));
        }
    }
    if let Some(broken) = r.range.check(v, show) {
        return Some(broken);
    }
    if let Some(broken) = check_in(&r.r#in, &r.not_in, |n| show(*n), "value", |x| x == &v) {
        return Some(broken);
    }
    None
}
