//! Envoy's own field rules (protoc-gen-validate), checked when a resource loads.
//!
//! Owns: reading the rules that the compiled-in descriptor set carries as options
//! (`validate.rules` on fields, `validate.required` on oneofs, `validate.disabled` and
//! `validate.ignored` on messages), and checking a decoded resource against them as Envoy's
//! generated C++ validators do: the same rules, in the same order, reported in the same words
//! ("ClusterValidationError.ConnectTimeout: value must be greater than 0s"). Like Envoy, the
//! payloads of `Any` fields (`typed_config`) are checked on their own, as their own type.
//!
//! Must not: know about files, resources or serving; the loader turns a [`Violation`] into
//! a load error. A rule the validator cannot evaluate (a pattern our regex engine rejects)
//! is skipped and counted by [`census`], never guessed.
//!
//! Each message type's rules are decoded once per process into a [`Plan`]; checking a
//! resource walks its set fields only.

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, OnceLock, RwLock};

use envoy_types::pb::validate as pgv;
use pgv::field_rules::Type as RuleType;
use prost_reflect::{
    DynamicMessage, ExtensionDescriptor, FieldDescriptor, Kind, MapKey, MessageDescriptor,
    ReflectMessage, Value,
};
use rustc_hash::FxHashMap;

use super::descriptors;

/// The first rule a resource breaks, as Envoy would report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Where, from the resource: `load_assignment.endpoints[0].lb_endpoints[0]`, `.` for
    /// the resource itself. Inside an `Any`, the path continues into its payload.
    pub path: String,
    /// The rule, as written in Envoy's .proto files: `uint32.lte`, `message.required`.
    pub rule: String,
    /// Envoy's words: the text inside its "Proto constraint validation failed (...)".
    pub envoy: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "breaks Envoy's rule {}; Envoy would reject it with: Proto constraint validation \
             failed ({})",
            self.rule, self.envoy
        )
    }
}

/// Check a decoded message (a resource) against Envoy's rules: the message with everything
/// embedded in it first, as Envoy's `Validate()` does, then each `Any` payload (and any
/// message its parent's rules skip) on its own, in the order of the tree.
pub fn check(message: &DynamicMessage) -> Result<(), Violation> {
    let mut walk = Walk::default();
    validate(message, &mut walk).map_err(Failure::into_violation)?;
    for item in walk.deferred {
        match item {
            Deferred::Message { path, message } => {
                check(message).map_err(|v| v.under(&path))?;
            }
            Deferred::Any { path, any } => {
                let Some(payload) = unpack(any) else { continue };
                check(&payload).map_err(|v| v.under(&path))?;
            }
        }
    }
    Ok(())
}

impl Violation {
    fn under(mut self, prefix: &str) -> Self {
        self.path = if self.path == "." {
            prefix.to_string()
        } else {
            format!("{prefix}.{}", self.path)
        };
        self
    }
}

/// The payload of an `Any`, decoded as its type; `None` when the type is not in the pool
/// or the bytes do not decode (the loader only builds `Any`s from the pool, so neither
/// happens for loaded files).
fn unpack(any: &DynamicMessage) -> Option<DynamicMessage> {
    let url = any.get_field_by_number(1)?;
    let name = url.as_str()?.rsplit('/').next()?;
    let value = any.get_field_by_number(2)?;
    let descriptor = descriptors::pool().get_message_by_name(name)?;
    DynamicMessage::decode(descriptor, value.as_bytes()?.clone()).ok()
}

/// Something to check on its own after the whole message passed.
enum Deferred<'a> {
    /// A message the rules above it skip (`message.skip`, a disabled parent): Envoy's
    /// tree walk still validates it.
    Message {
        path: String,
        message: &'a DynamicMessage,
    },
    /// An `Any`: its payload is checked as its own type.
    Any {
        path: String,
        any: &'a DynamicMessage,
    },
}

/// The state of one `validate` pass: where it is (field segments from the message checked)
/// and what it left for later.
#[derive(Default)]
struct Walk<'a> {
    at: Vec<String>,
    deferred: Vec<Deferred<'a>>,
}

impl<'a> Walk<'a> {
    /// Leave `message`, found at `segment` of the current place, for Envoy's tree walk.
    fn defer(&mut self, segment: String, message: &'a DynamicMessage) {
        let mut path = self.at.join(".");
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(&segment);
        self.deferred.push(if is_any(message) {
            Deferred::Any { path, any: message }
        } else {
            Deferred::Message { path, message }
        });
    }

    /// Validate an embedded message found at `segment`.
    fn descend(&mut self, segment: String, message: &'a DynamicMessage) -> Result<(), Failure> {
        self.at.push(segment);
        let result = validate(message, self);
        self.at.pop();
        result
    }
}

/// A rule broken somewhere below the message being validated: Envoy's words so far and the
/// field path, both built outwards as the failure returns.
struct Failure {
    path: Vec<String>,
    rule: String,
    envoy: String,
}

impl Failure {
    fn into_violation(self) -> Violation {
        let mut path = String::new();
        for (i, part) in self.path.iter().rev().enumerate() {
            if i > 0 && !part.starts_with('[') {
                path.push('.');
            }
            path.push_str(part);
        }
        if path.is_empty() {
            path.push('.');
        }
        Violation {
            path,
            rule: self.rule,
            envoy: self.envoy,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Plans: each message type's rules, decoded once.

/// One message type's checks, in the order Envoy's generated `Validate()` runs them: the
/// fields outside any oneof in declaration order, then each oneof.
pub struct Plan {
    /// `validate.disabled` or `validate.ignored`: nothing of this message is checked (its
    /// embedded messages still are, on their own).
    disabled: bool,
    /// The name Envoy's messages give this type: `ClusterValidationError`.
    error_name: String,
    steps: Vec<Step>,
}

enum Step {
    Field(Box<FieldPlan>),
    Oneof {
        name: String,
        required: bool,
        fields: Vec<FieldPlan>,
    },
}

struct FieldPlan {
    field: FieldDescriptor,
    /// The field's name as Envoy's messages write it: `ConnectTimeout`.
    camel: String,
    rules: Ruled,
    /// proto3 `optional`: checked only when set.
    optional: bool,
}

/// A field's (or an item's, a key's, a value's) rules: `message` ones (required, skip) and
/// the rules of its type.
#[derive(Default)]
struct Ruled {
    message: MessageRules,
    typed: Option<Rules>,
}

/// The rules of one field, or of a list's items, or a map's keys or values.
enum Rules {
    Number(NumberRules),
    Bool(bool),
    String(Box<StringRules>),
    Bytes(Box<BytesRules>),
    Enum(EnumRules),
    Repeated(Box<RepeatedRules>),
    Map(Box<MapRules>),
    Any(AnyRules),
    Duration(Box<TimeRules>),
    Timestamp(Box<TimeRules>),
}

#[derive(Default, Clone, Copy)]
struct MessageRules {
    required: bool,
    skip: bool,
}

/// Numbers of every width, compared exactly (integers as i128).
#[derive(Clone, Copy, PartialEq, PartialOrd, Debug)]
enum Number {
    Int(i128),
    Float(f64),
}

impl fmt::Display for Number {
    /// As Go's `fmt` prints them (the generator wrote the bounds with it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Number::Int(i) => write!(f, "{i}"),
            Number::Float(x) => write!(f, "{}", go_float(*x)),
        }
    }
}

/// Go's `%v` of a float: the shortest text that reads back, with an exponent outside
/// 1e-4..1e21.
fn go_float(x: f64) -> String {
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

struct NumberRules {
    kind: &'static str,
    konst: Option<Number>,
    range: Range<Number>,
    r#in: Vec<Number>,
    not_in: Vec<Number>,
    ignore_empty: bool,
}

/// lt/lte/gt/gte, shared by numbers, durations and timestamps.
#[derive(Clone, Copy)]
struct Range<T> {
    lt: Option<T>,
    lte: Option<T>,
    gt: Option<T>,
    gte: Option<T>,
}

impl<T: PartialOrd + Copy> Range<T> {
    /// The broken bound's rule name and Envoy's words, or `None` when `v` is in range.
    /// The cases and their words are PGV's `ltgt` template.
    fn check(&self, v: T, show: impl Fn(T) -> String) -> Option<(&'static str, String)> {
        let s = &show;
        if let Some(lt) = self.lt {
            if let Some(gt) = self.gt {
                return if lt > gt {
                    (v <= gt || v >= lt).then(|| {
                        (
                            "gt,lt",
                            format!("value must be inside range ({}, {})", s(gt), s(lt)),
                        )
                    })
                } else {
                    (v >= lt && v <= gt).then(|| {
                        (
                            "gt,lt",
                            format!("value must be outside range [{}, {}]", s(lt), s(gt)),
                        )
                    })
                };
            }
            if let Some(gte) = self.gte {
                return if lt > gte {
                    (v < gte || v >= lt).then(|| {
                        (
                            "gte,lt",
                            format!("value must be inside range [{}, {})", s(gte), s(lt)),
                        )
                    })
                } else {
                    (v >= lt && v < gte).then(|| {
                        (
                            "gte,lt",
                            format!("value must be outside range [{}, {})", s(lt), s(gte)),
                        )
                    })
                };
            }
            return (v >= lt).then(|| ("lt", format!("value must be less than {}", s(lt))));
        }
        if let Some(lte) = self.lte {
            if let Some(gt) = self.gt {
                return if lte > gt {
                    (v <= gt || v > lte).then(|| {
                        (
                            "gt,lte",
                            format!("value must be inside range ({}, {}]", s(gt), s(lte)),
                        )
                    })
                } else {
                    (v > lte && v <= gt).then(|| {
                        (
                            "gt,lte",
                            format!("value must be outside range ({}, {}]", s(lte), s(gt)),
                        )
                    })
                };
            }
            if let Some(gte) = self.gte {
                return if lte > gte {
                    (v < gte || v > lte).then(|| {
                        (
                            "gte,lte",
                            format!("value must be inside range [{}, {}]", s(gte), s(lte)),
                        )
                    })
                } else {
                    (v > lte && v < gte).then(|| {
                        (
                            "gte,lte",
                            format!("value must be outside range ({}, {})", s(lte), s(gte)),
                        )
                    })
                };
            }
            return (v > lte).then(|| {
                (
                    "lte",
                    format!("value must be less than or equal to {}", s(lte)),
                )
            });
        }
        if let Some(gt) = self.gt {
            return (v <= gt).then(|| ("gt", format!("value must be greater than {}", s(gt))));
        }
        if let Some(gte) = self.gte {
            return (v < gte).then(|| {
                (
                    "gte",
                    format!("value must be greater than or equal to {}", s(gte)),
                )
            });
        }
        None
    }
}

struct StringRules {
    konst: Option<String>,
    r#in: Vec<String>,
    not_in: Vec<String>,
    len: Option<u64>,
    min_len: Option<u64>,
    max_len: Option<u64>,
    len_bytes: Option<u64>,
    min_bytes: Option<u64>,
    max_bytes: Option<u64>,
    prefix: Option<String>,
    suffix: Option<String>,
    contains: Option<String>,
    not_contains: Option<String>,
    /// The rule's text and the compiled pattern (`None`: our engine rejects it; skipped).
    pattern: Option<(String, Option<regex::Regex>)>,
    well_known: Option<WellKnown>,
    ignore_empty: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum WellKnown {
    Hostname,
    Ip,
    Ipv4,
    Ipv6,
    Address,
    Uuid,
    /// `well_known_regex` with its `strict` flag.
    HeaderName(bool),
    HeaderValue(bool),
    /// email, uri, uri_ref: Envoy's C++ validators do not implement them.
    Unchecked,
}

struct BytesRules {
    konst: Option<Vec<u8>>,
    r#in: Vec<Vec<u8>>,
    not_in: Vec<Vec<u8>>,
    len: Option<u64>,
    min_len: Option<u64>,
    max_len: Option<u64>,
    prefix: Option<Vec<u8>>,
    suffix: Option<Vec<u8>>,
    contains: Option<Vec<u8>>,
    pattern: Option<(String, Option<regex::bytes::Regex>)>,
    ignore_empty: bool,
}

struct EnumRules {
    /// The field's enum, whose value names Envoy's words use.
    r#enum: Option<prost_reflect::EnumDescriptor>,
    konst: Option<i32>,
    /// `defined_only`: the enum whose values are allowed.
    defined_only: Option<prost_reflect::EnumDescriptor>,
    r#in: Vec<i32>,
    not_in: Vec<i32>,
}

struct RepeatedRules {
    min_items: Option<u64>,
    max_items: Option<u64>,
    unique: bool,
    items: Option<Ruled>,
    ignore_empty: bool,
}

struct MapRules {
    min_pairs: Option<u64>,
    max_pairs: Option<u64>,
    keys: Option<Ruled>,
    values: Option<Ruled>,
    ignore_empty: bool,
}

struct AnyRules {
    required: bool,
    r#in: Vec<String>,
    not_in: Vec<String>,
}

/// Durations and timestamps as nanoseconds.
struct TimeRules {
    required: bool,
    konst: Option<i128>,
    range: Range<i128>,
    r#in: Vec<i128>,
    not_in: Vec<i128>,
}

/// The plan of a message type, decoded on first use.
pub fn plan(descriptor: &MessageDescriptor) -> Arc<Plan> {
    static PLANS: OnceLock<RwLock<FxHashMap<Box<str>, Arc<Plan>>>> = OnceLock::new();
    let plans = PLANS.get_or_init(Default::default);
    if let Some(plan) = plans
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .get(descriptor.full_name())
    {
        return plan.clone();
    }
    let plan = Arc::new(Plan::of(descriptor));
    plans
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .entry(descriptor.full_name().into())
        .or_insert(plan)
        .clone()
}

struct Extensions {
    rules: Option<ExtensionDescriptor>,
    disabled: Option<ExtensionDescriptor>,
    ignored: Option<ExtensionDescriptor>,
    required: Option<ExtensionDescriptor>,
}

fn extensions() -> &'static Extensions {
    static EXTENSIONS: OnceLock<Extensions> = OnceLock::new();
    EXTENSIONS.get_or_init(|| {
        let pool = descriptors::pool();
        Extensions {
            rules: pool.get_extension_by_name("validate.rules"),
            disabled: pool.get_extension_by_name("validate.disabled"),
            ignored: pool.get_extension_by_name("validate.ignored"),
            required: pool.get_extension_by_name("validate.required"),
        }
    })
}

fn flag(options: &DynamicMessage, extension: &Option<ExtensionDescriptor>) -> bool {
    extension.as_ref().is_some_and(|e| {
        options.has_extension(e) && options.get_extension(e).as_bool() == Some(true)
    })
}

impl Plan {
    fn of(descriptor: &MessageDescriptor) -> Plan {
        let ext = extensions();
        let options = descriptor.options();
        let disabled = flag(&options, &ext.disabled) || flag(&options, &ext.ignored);
        let mut steps = Vec::new();
        let mut oneofs_done = Vec::new();
        for field in descriptor.fields() {
            let real_oneof = field.containing_oneof().filter(|o| !o.is_synthetic());
            match real_oneof {
                None => {
                    let optional = field.containing_oneof().is_some();
                    if let Some(plan) = FieldPlan::of(&field, optional) {
                        steps.push(Step::Field(Box::new(plan)));
                    }
                }
                Some(oneof) => {
                    if oneofs_done.contains(&oneof.name().to_string()) {
                        continue;
                    }
                    oneofs_done.push(oneof.name().to_string());
                    let required = flag(&oneof.options(), &ext.required);
                    let fields: Vec<_> = oneof
                        .fields()
                        .filter_map(|f| FieldPlan::of(&f, true))
                        .collect();
                    if required || !fields.is_empty() {
                        steps.push(Step::Oneof {
                            name: oneof.name().to_string(),
                            required,
                            fields,
                        });
                    }
                }
            }
        }
        // Oneofs come after the plain fields in the generated code.
        steps.sort_by_key(|s| matches!(s, Step::Oneof { .. }));
        Plan {
            disabled,
            error_name: format!("{}ValidationError", descriptor.name()),
            steps,
        }
    }
}

impl FieldPlan {
    /// `None` for a field that needs no check: a scalar without rules.
    fn of(field: &FieldDescriptor, optional: bool) -> Option<FieldPlan> {
        let rules = field_rules(field)
            .map(|r| Ruled::of(&r, field))
            .unwrap_or_default();
        let embedded = matches!(field.kind(), Kind::Message(_));
        if rules.typed.is_none() && !rules.message.required && !embedded {
            return None;
        }
        Some(FieldPlan {
            field: field.clone(),
            camel: pgv_name(field),
            rules,
            optional,
        })
    }
}

fn field_rules(field: &FieldDescriptor) -> Option<pgv::FieldRules> {
    let ext = extensions().rules.as_ref()?;
    let options = field.options();
    if !options.has_extension(ext) {
        return None;
    }
    options.get_extension(ext).as_message()?.transcode_to().ok()
}

/// The field's name as Envoy's messages write it (protoc-gen-star's `PGGUpperCamelCase`):
/// its JSON name with the first letter upper case, `connect_timeout` -> `ConnectTimeout`.
fn pgv_name(field: &FieldDescriptor) -> String {
    let json = field.json_name();
    let mut chars = json.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

macro_rules! into_number {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for Number {
            fn from(n: $t) -> Number { Number::$v(n.into()) }
        }
    )*};
}
into_number!(i32 => Int, i64 => Int, u32 => Int, u64 => Int, f32 => Float, f64 => Float);

macro_rules! numbers {
    ($kind:literal, $r:expr) => {{
        let r = $r;
        Rules::Number(NumberRules {
            kind: $kind,
            konst: r.r#const.map(Into::into),
            range: Range {
                lt: r.lt.map(Into::into),
                lte: r.lte.map(Into::into),
                gt: r.gt.map(Into::into),
                gte: r.gte.map(Into::into),
            },
            r#in: r.r#in.iter().map(|&n| n.into()).collect(),
            not_in: r.not_in.iter().map(|&n| n.into()).collect(),
            ignore_empty: r.ignore_empty.unwrap_or(false),
        })
    }};
}

fn nanos(d: &envoy_types::pb::google::protobuf::Duration) -> i128 {
    i128::from(d.seconds) * 1_000_000_000 + i128::from(d.nanos)
}

fn stamp_nanos(t: &envoy_types::pb::google::protobuf::Timestamp) -> i128 {
    i128::from(t.seconds) * 1_000_000_000 + i128::from(t.nanos)
}

impl Ruled {
    fn of(rules: &pgv::FieldRules, field: &FieldDescriptor) -> Ruled {
        let message = rules
            .message
            .map(|m| MessageRules {
                required: m.required.unwrap_or(false),
                skip: m.skip.unwrap_or(false),
            })
            .unwrap_or_default();
        let typed = match rules.r#type.as_ref() {
            None => None,
            Some(RuleType::Float(r)) => Some(numbers!("float", r)),
            Some(RuleType::Double(r)) => Some(numbers!("double", r)),
            Some(RuleType::Int32(r)) => Some(numbers!("int32", r)),
            Some(RuleType::Int64(r)) => Some(numbers!("int64", r)),
            Some(RuleType::Uint32(r)) => Some(numbers!("uint32", r)),
            Some(RuleType::Uint64(r)) => Some(numbers!("uint64", r)),
            Some(RuleType::Sint32(r)) => Some(numbers!("sint32", r)),
            Some(RuleType::Sint64(r)) => Some(numbers!("sint64", r)),
            Some(RuleType::Fixed32(r)) => Some(numbers!("fixed32", r)),
            Some(RuleType::Fixed64(r)) => Some(numbers!("fixed64", r)),
            Some(RuleType::Sfixed32(r)) => Some(numbers!("sfixed32", r)),
            Some(RuleType::Sfixed64(r)) => Some(numbers!("sfixed64", r)),
            Some(RuleType::Bool(r)) => r.r#const.map(Rules::Bool),
            Some(RuleType::String(r)) => Some(Rules::String(Box::new(StringRules::of(r)))),
            Some(RuleType::Bytes(r)) => Some(Rules::Bytes(Box::new(BytesRules::of(r)))),
            Some(RuleType::Enum(r)) => Some(Rules::Enum(EnumRules {
                r#enum: match field.kind() {
                    Kind::Enum(e) => Some(e),
                    _ => None,
                },
                konst: r.r#const,
                defined_only: match field.kind() {
                    Kind::Enum(e) if r.defined_only == Some(true) => Some(e),
                    _ => None,
                },
                r#in: r.r#in.clone(),
                not_in: r.not_in.clone(),
            })),
            Some(RuleType::Repeated(r)) => Some(Rules::Repeated(Box::new(RepeatedRules {
                min_items: r.min_items,
                max_items: r.max_items,
                unique: r.unique.unwrap_or(false),
                items: r.items.as_deref().map(|i| Ruled::of(i, field)),
                ignore_empty: r.ignore_empty.unwrap_or(false),
            }))),
            Some(RuleType::Map(r)) => match field.kind() {
                Kind::Message(entry) if field.is_map() => {
                    let (key, value) = (entry.map_entry_key_field(), entry.map_entry_value_field());
                    Some(Rules::Map(Box::new(MapRules {
                        min_pairs: r.min_pairs,
                        max_pairs: r.max_pairs,
                        keys: r.keys.as_deref().map(|k| Ruled::of(k, &key)),
                        values: r.values.as_deref().map(|v| Ruled::of(v, &value)),
                        ignore_empty: r.ignore_empty.unwrap_or(false),
                    })))
                }
                _ => None,
            },
            Some(RuleType::Any(r)) => Some(Rules::Any(AnyRules {
                required: r.required.unwrap_or(false),
                r#in: r.r#in.clone(),
                not_in: r.not_in.clone(),
            })),
            Some(RuleType::Duration(r)) => Some(Rules::Duration(Box::new(TimeRules {
                required: r.required.unwrap_or(false),
                konst: r.r#const.as_ref().map(nanos),
                range: Range {
                    lt: r.lt.as_ref().map(nanos),
                    lte: r.lte.as_ref().map(nanos),
                    gt: r.gt.as_ref().map(nanos),
                    gte: r.gte.as_ref().map(nanos),
                },
                r#in: r.r#in.iter().map(nanos).collect(),
                not_in: r.not_in.iter().map(nanos).collect(),
            }))),
            // lt_now, gt_now and within are not implemented by Envoy's C++ validators.
            Some(RuleType::Timestamp(r)) => Some(Rules::Timestamp(Box::new(TimeRules {
                required: r.required.unwrap_or(false),
                konst: r.r#const.as_ref().map(stamp_nanos),
                range: Range {
                    lt: r.lt.as_ref().map(stamp_nanos),
                    lte: r.lte.as_ref().map(stamp_nanos),
                    gt: r.gt.as_ref().map(stamp_nanos),
                    gte: r.gte.as_ref().map(stamp_nanos),
                },
                r#in: Vec::new(),
                not_in: Vec::new(),
            }))),
        };
        Ruled { message, typed }
    }
}

impl Rules {
    /// The rule kind as written in .proto files (`string`, `repeated`, ...).
    fn kind(&self) -> &'static str {
        match self {
            Rules::Number(n) => n.kind,
            Rules::Bool(_) => "bool",
            Rules::String(_) => "string",
            Rules::Bytes(_) => "bytes",
            Rules::Enum(_) => "enum",
            Rules::Repeated(_) => "repeated",
            Rules::Map(_) => "map",
            Rules::Any(_) => "any",
            Rules::Duration(_) => "duration",
            Rules::Timestamp(_) => "timestamp",
        }
    }
}

/// A pattern as RE2 matches it in Envoy: the whole value.
fn whole(pattern: &str) -> String {
    format!("^(?:{pattern})$")
}

impl StringRules {
    fn of(r: &pgv::StringRules) -> StringRules {
        use pgv::string_rules::WellKnown as W;
        let strict = r.strict.unwrap_or(true);
        let well_known = r.well_known.map(|w| match w {
            W::Hostname(true) => WellKnown::Hostname,
            W::Ip(true) => WellKnown::Ip,
            W::Ipv4(true) => WellKnown::Ipv4,
            W::Ipv6(true) => WellKnown::Ipv6,
            W::Address(true) => WellKnown::Address,
            W::Uuid(true) => WellKnown::Uuid,
            W::WellKnownRegex(1) => WellKnown::HeaderName(strict),
            W::WellKnownRegex(2) => WellKnown::HeaderValue(strict),
            _ => WellKnown::Unchecked,
        });
        StringRules {
            konst: r.r#const.clone(),
            r#in: r.r#in.clone(),
            not_in: r.not_in.clone(),
            len: r.len,
            min_len: r.min_len,
            max_len: r.max_len,
            len_bytes: r.len_bytes,
            min_bytes: r.min_bytes,
            max_bytes: r.max_bytes,
            prefix: r.prefix.clone(),
            suffix: r.suffix.clone(),
            contains: r.contains.clone(),
            not_contains: r.not_contains.clone(),
            pattern: r
                .pattern
                .as_ref()
                .map(|p| (p.clone(), regex::Regex::new(&whole(p)).ok())),
            well_known,
            ignore_empty: r.ignore_empty.unwrap_or(false),
        }
    }
}

impl BytesRules {
    fn of(r: &pgv::BytesRules) -> BytesRules {
        BytesRules {
            konst: r.r#const.clone(),
            r#in: r.r#in.clone(),
            not_in: r.not_in.clone(),
            len: r.len,
            min_len: r.min_len,
            max_len: r.max_len,
            prefix: r.prefix.clone(),
            suffix: r.suffix.clone(),
            contains: r.contains.clone(),
            pattern: r
                .pattern
                .as_ref()
                .map(|p| (p.clone(), regex::bytes::Regex::new(&whole(p)).ok())),
            // The well-known bytes rules (ip, ipv4, ipv6) are not implemented by Envoy's
            // C++ validators, so they are not checked here either.
            ignore_empty: r.ignore_empty.unwrap_or(false),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Checking.

/// A broken rule at one field: the rule's name (`lte`) and Envoy's reason.
type Broken = (&'static str, String);

/// Validate `message` and everything embedded in it (not `Any` payloads), as Envoy's
/// generated `Validate()`; what Envoy's tree walk checks on its own is left in `walk`.
fn validate<'a>(message: &'a DynamicMessage, walk: &mut Walk<'a>) -> Result<(), Failure> {
    let plan = plan(&message.descriptor());
    if plan.disabled {
        defer_children(message, walk);
        return Ok(());
    }
    for step in &plan.steps {
        match step {
            Step::Field(f) => {
                if f.optional && !message.has_field(&f.field) {
                    continue;
                }
                check_field(message, &plan, f, walk)?;
            }
            Step::Oneof {
                name,
                required,
                fields,
            } => match fields.iter().find(|f| message.has_field(&f.field)) {
                Some(f) => check_field(message, &plan, f, walk)?,
                None if *required => {
                    let oneof_set = message
                        .descriptor()
                        .oneofs()
                        .find(|o| o.name() == name)
                        .is_some_and(|o| o.fields().any(|f| message.has_field(&f)));
                    if !oneof_set {
                        return Err(Failure {
                            path: vec![name.clone()],
                            rule: "oneof.required".into(),
                            envoy: format!("field: {name:?}, reason: is required"),
                        });
                    }
                }
                None => {}
            },
        }
    }
    Ok(())
}

/// Every message set directly in `message`, for Envoy's walk to validate on its own.
fn defer_children<'a>(message: &'a DynamicMessage, walk: &mut Walk<'a>) {
    for (field, value) in message.fields() {
        let name = field.name();
        match value {
            Value::Message(m) => walk.defer(name.to_string(), m),
            Value::List(items) => {
                for (i, item) in items.iter().enumerate() {
                    if let Value::Message(m) = item {
                        walk.defer(format!("{name}[{i}]"), m);
                    }
                }
            }
            Value::Map(map) => {
                for (key, item) in map {
                    if let Value::Message(m) = item {
                        walk.defer(format!("{name}[{}]", show_key(key)), m);
                    }
                }
            }
            _ => {}
        }
    }
}

fn is_any(message: &DynamicMessage) -> bool {
    message.descriptor().full_name() == "google.protobuf.Any"
}

/// A map key as Envoy's words show it: as is.
fn raw_key(key: &MapKey) -> String {
    match key {
        MapKey::String(s) => s.clone(),
        other => show_key(other),
    }
}

/// A map key in a field path: strings quoted.
fn show_key(key: &MapKey) -> String {
    match key {
        MapKey::String(s) => format!("{s:?}"),
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(n) => n.to_string(),
        MapKey::I64(n) => n.to_string(),
        MapKey::U32(n) => n.to_string(),
        MapKey::U64(n) => n.to_string(),
    }
}

/// Envoy's words for a rule broken at `Field[index]` of `plan`'s message (a map's index is
/// its key, unquoted, whether the key or the value breaks the rule).
fn words(plan: &Plan, f: &FieldPlan, index: Option<&str>, reason: &str) -> String {
    let mut out = String::new();
    let _ = write!(out, "{}.{}", plan.error_name, f.camel);
    if let Some(i) = index {
        let _ = write!(out, "[{i}]");
    }
    let _ = write!(out, ": {reason}");
    out
}

fn check_field<'a>(
    message: &'a DynamicMessage,
    plan: &Plan,
    f: &FieldPlan,
    walk: &mut Walk<'a>,
) -> Result<(), Failure> {
    // `index` is what Envoy's words show; `at` is the path's (a map key quoted).
    let fail = |index: Option<(String, String)>, kind: &str, (rule, reason): Broken| {
        let mut path = Vec::with_capacity(2);
        if let Some((_, at)) = &index {
            path.push(format!("[{at}]"));
        }
        path.push(f.field.name().to_string());
        Failure {
            path,
            rule: format!("{kind}.{rule}"),
            envoy: words(plan, f, index.as_ref().map(|(i, _)| i.as_str()), &reason),
        }
    };
    let embedded = |index: Option<(String, String)>, inner: Failure| {
        let mut path = inner.path;
        if let Some((_, at)) = &index {
            path.push(format!("[{at}]"));
        }
        path.push(f.field.name().to_string());
        Failure {
            path,
            rule: inner.rule,
            envoy: format!(
                "{} | caused by {}",
                words(
                    plan,
                    f,
                    index.as_ref().map(|(i, _)| i.as_str()),
                    "embedded message failed validation"
                ),
                inner.envoy
            ),
        }
    };

    if f.field.is_list() {
        let items: &'a [Value] = set_value(message, &f.field)
            .and_then(Value::as_list)
            .unwrap_or(&[]);
        let rules = match &f.rules.typed {
            Some(Rules::Repeated(r)) => Some(r.as_ref()),
            _ => None,
        };
        if let Some(r) = rules {
            if !(r.ignore_empty && items.is_empty()) {
                if let Some(broken) = check_count(
                    items.len() as u64,
                    r.min_items,
                    r.max_items,
                    "item(s)",
                    "items",
                ) {
                    return Err(fail(None, "repeated", broken));
                }
            }
        }
        let item_rules = rules.and_then(|r| r.items.as_ref());
        let unique = rules.is_some_and(|r| r.unique);
        for (i, item) in items.iter().enumerate() {
            if unique && items[..i].contains(item) {
                return Err(fail(
                    Some((i.to_string(), i.to_string())),
                    "repeated",
                    ("unique", "repeated value must contain unique items".into()),
                ));
            }
            let index = || Some((i.to_string(), i.to_string()));
            if let Some(ruled) = item_rules {
                if let Some(broken) = check_value(item, ruled) {
                    let kind = ruled.typed.as_ref().map_or("message", Rules::kind);
                    return Err(fail(index(), &format!("repeated.items.{kind}"), broken));
                }
            }
            if let Value::Message(m) = item {
                let skip = item_rules.is_some_and(|r| r.message.skip);
                let path = || format!("{}[{i}]", f.field.name());
                if is_any(m) || skip {
                    walk.defer(path(), m);
                } else {
                    walk.descend(path(), m)
                        .map_err(|inner| embedded(index(), inner))?;
                }
            }
        }
        return Ok(());
    }

    if f.field.is_map() {
        let map = set_value(message, &f.field).and_then(Value::as_map);
        let len = map.map_or(0, HashMap::len);
        let rules = match &f.rules.typed {
            Some(Rules::Map(r)) => Some(r.as_ref()),
            _ => None,
        };
        if let Some(r) = rules {
            if !(r.ignore_empty && len == 0) {
                if let Some(broken) =
                    check_count(len as u64, r.min_pairs, r.max_pairs, "pair(s)", "pairs")
                {
                    return Err(fail(None, "map", broken));
                }
            }
        }
        // In key order, so that the first violation reported does not depend on hashing.
        let mut pairs: Vec<_> = map.into_iter().flatten().collect();
        pairs.sort_by(|a, b| a.0.cmp(b.0));
        for (key, item) in pairs {
            let index = || Some((raw_key(key), show_key(key)));
            if let Some(ruled) = rules.and_then(|r| r.keys.as_ref()) {
                if let Some(broken) = check_value(&Value::from(key.clone()), ruled) {
                    let kind = ruled.typed.as_ref().map_or("message", Rules::kind);
                    return Err(fail(index(), &format!("map.keys.{kind}"), broken));
                }
            }
            let value_rules = rules.and_then(|r| r.values.as_ref());
            if let Some(ruled) = value_rules {
                if let Some(broken) = check_value(item, ruled) {
                    let kind = ruled.typed.as_ref().map_or("message", Rules::kind);
                    return Err(fail(index(), &format!("map.values.{kind}"), broken));
                }
            }
            if let Value::Message(m) = item {
                let path = || format!("{}[{}]", f.field.name(), show_key(key));
                if is_any(m) || value_rules.is_some_and(|r| r.message.skip) {
                    walk.defer(path(), m);
                } else {
                    walk.descend(path(), m)
                        .map_err(|inner| embedded(index(), inner))?;
                }
            }
        }
        return Ok(());
    }

    if let Kind::Message(_) = f.field.kind() {
        let Some(Value::Message(sub)) = set_value(message, &f.field) else {
            let required = f.rules.message.required
                || matches!(&f.rules.typed, Some(Rules::Any(a)) if a.required)
                || matches!(&f.rules.typed, Some(Rules::Duration(d) | Rules::Timestamp(d)) if d.required);
            if required {
                let kind = f.rules.typed.as_ref().map_or("message", Rules::kind);
                return Err(fail(None, kind, ("required", "value is required".into())));
            }
            return Ok(());
        };
        if let Some(typed) = &f.rules.typed {
            if let Some(broken) = check_message_value(sub, typed) {
                return Err(fail(None, typed.kind(), broken));
            }
        }
        let path = f.field.name().to_string();
        if is_any(sub) || f.rules.message.skip {
            walk.defer(path, sub);
        } else {
            walk.descend(path, sub)
                .map_err(|inner| embedded(None, inner))?;
        }
        return Ok(());
    }

    if let Some(typed) = &f.rules.typed {
        let value = message.get_field(&f.field);
        if let Some(broken) = check_scalar(&value, typed) {
            return Err(fail(None, typed.kind(), broken));
        }
    }
    Ok(())
}

/// A field's value if it is set (`get_field` lends set values and makes defaults).
fn set_value<'a>(message: &'a DynamicMessage, field: &FieldDescriptor) -> Option<&'a Value> {
    match message.get_field(field) {
        std::borrow::Cow::Borrowed(value) => Some(value),
        std::borrow::Cow::Owned(_) => None,
    }
}

/// min/max items or pairs, in PGV's words.
fn check_count(
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
fn check_value(value: &Value, ruled: &Ruled) -> Option<Broken> {
    let typed = ruled.typed.as_ref()?;
    match value {
        Value::Message(m) => check_message_value(m, typed),
        other => check_scalar(other, typed),
    }
}

fn number_of(value: &Value) -> Option<Number> {
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
fn check_in<T>(
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

/// Go's `%v` of a list: `[a b c]`.
fn go_list<T>(items: &[T], show: impl Fn(&T) -> String) -> String {
    let shown: Vec<String> = items.iter().map(show).collect();
    format!("[{}]", shown.join(" "))
}

fn check_scalar(value: &Value, rules: &Rules) -> Option<Broken> {
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

fn check_number(v: Number, r: &NumberRules) -> Option<Broken> {
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

fn check_enum(v: i32, r: &EnumRules) -> Option<Broken> {
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

fn check_string(v: &str, r: &StringRules) -> Option<Broken> {
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
fn check_byte_len(
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
fn header_regex(name: bool, strict: bool) -> (&'static str, &'static regex::Regex) {
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

fn check_well_known(v: &str, w: WellKnown) -> Option<Broken> {
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
fn is_hostname(v: &str) -> bool {
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

fn is_uuid(v: &str) -> bool {
    v.len() == 36
        && v.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// Go's `%q` of a string (`strconv.Quote`), as the generator wrote rule values into the
/// messages: `"^[^\x00\n\r]*$"`.
fn go_quote(s: &str) -> String {
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
fn show_bytes(b: &[u8]) -> String {
    let mut out = String::from("\"");
    for byte in b {
        let _ = write!(out, "\\x{byte:x}");
    }
    out.push('"');
    out
}

fn check_bytes(v: &[u8], r: &BytesRules) -> Option<Broken> {
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

/// Go's `time.Duration.String()`: `0s`, `1.5s`, `100ms`, `1m30s`, `2h0m0s`.
fn go_duration(nanos: i128) -> String {
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

fn message_nanos(m: &DynamicMessage) -> i128 {
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
fn check_message_value(m: &DynamicMessage, rules: &Rules) -> Option<Broken> {
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

fn check_time(v: i128, r: &TimeRules, show: fn(i128) -> String) -> Option<Broken> {
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

// ---------------------------------------------------------------------------------------
// Census: which rules Envoy's types carry, and which of them are checked.

/// Every rule in the compiled-in descriptor set, by name (`uint32.lte`,
/// `repeated.items.string.min_len`), with the number of fields carrying it; and the fields
/// whose rule is not evaluated (a pattern our regex engine does not accept).
#[derive(Debug, Default)]
pub struct Census {
    pub messages: usize,
    pub fields: usize,
    pub rules: std::collections::BTreeMap<String, usize>,
    pub unevaluated: Vec<String>,
    /// One field carrying each rule (for the test corpus).
    pub example: std::collections::BTreeMap<String, String>,
}

/// Count the rules of every message in the pool.
pub fn census() -> Census {
    let mut census = Census::default();
    let Some(ext) = extensions().rules.clone() else {
        return census;
    };
    for message in descriptors::pool().all_messages() {
        let mut ruled = false;
        for field in message.fields() {
            let options = field.options();
            if !options.has_extension(&ext) {
                continue;
            }
            ruled = true;
            census.fields += 1;
            if let Some(rules) = options.get_extension(&ext).as_message() {
                let mut names = Vec::new();
                rule_names(rules, "", &mut names);
                for name in names {
                    if name.ends_with(".pattern") && !pattern_compiles(rules) {
                        census
                            .unevaluated
                            .push(format!("{} ({name})", field.full_name()));
                    }
                    census
                        .example
                        .entry(name.clone())
                        .or_insert_with(|| field.full_name().to_string());
                    *census.rules.entry(name).or_default() += 1;
                }
            }
        }
        census.messages += usize::from(ruled);
    }
    census
}

fn rule_names(rules: &DynamicMessage, prefix: &str, out: &mut Vec<String>) {
    for (field, value) in rules.fields() {
        let name = format!("{prefix}{}", field.name());
        match value {
            // A duration's or timestamp's bound is one rule, not its seconds and nanos.
            Value::Message(inner) if !inner.descriptor().full_name().starts_with("google.") => {
                rule_names(inner, &format!("{name}."), out)
            }
            _ => out.push(name),
        }
    }
}

fn pattern_compiles(rules: &DynamicMessage) -> bool {
    let Ok(rules) = rules.transcode_to::<pgv::FieldRules>() else {
        return false;
    };
    let pattern = match rules.r#type {
        Some(RuleType::String(s)) => s.pattern,
        Some(RuleType::Bytes(b)) => b.pattern,
        Some(RuleType::Repeated(r)) => match r.items.and_then(|i| i.r#type) {
            Some(RuleType::String(s)) => s.pattern,
            _ => None,
        },
        _ => None,
    };
    pattern.is_none_or(|p| regex::Regex::new(&whole(&p)).is_ok())
}

#[cfg(test)]
mod tests;
