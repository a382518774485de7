//! Each message type's rules, decoded once from the descriptor set's options into a
//! [`Plan`]: what to check, in the order Envoy's generated `Validate()` checks it.
//!
//! Must not: look at a value (that is `values`); a plan depends on the type only.

use super::*;

/// One message type's checks, in the order Envoy's generated `Validate()` runs them: the
/// fields outside any oneof in declaration order, then each oneof.
pub struct Plan {
    /// `validate.disabled` or `validate.ignored`: nothing of this message is checked (its
    /// embedded messages still are, on their own).
    pub(super) disabled: bool,
    /// The name Envoy's messages give this type: `ClusterValidationError`.
    pub(super) error_name: String,
    pub(super) steps: Vec<Step>,
}

pub(super) enum Step {
    Field(Box<FieldPlan>),
    Oneof {
        name: String,
        required: bool,
        fields: Vec<FieldPlan>,
    },
}

pub(super) struct FieldPlan {
    pub(super) field: FieldDescriptor,
    /// The field's name as Envoy's messages write it: `ConnectTimeout`.
    pub(super) camel: String,
    pub(super) rules: Ruled,
    /// proto3 `optional`: checked only when set.
    pub(super) optional: bool,
}

/// A field's (or an item's, a key's, a value's) rules: `message` ones (required, skip) and
/// the rules of its type.
#[derive(Default)]
pub(super) struct Ruled {
    pub(super) message: MessageRules,
    pub(super) typed: Option<Rules>,
}

/// The rules of one field, or of a list's items, or a map's keys or values.
pub(super) enum Rules {
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
pub(super) struct MessageRules {
    pub(super) required: bool,
    pub(super) skip: bool,
}

/// Numbers of every width, compared exactly (integers as i128).
#[derive(Clone, Copy, PartialEq, PartialOrd, Debug)]
pub(super) enum Number {
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

pub(super) struct NumberRules {
    pub(super) kind: &'static str,
    pub(super) konst: Option<Number>,
    pub(super) range: Range<Number>,
    pub(super) r#in: Vec<Number>,
    pub(super) not_in: Vec<Number>,
    pub(super) ignore_empty: bool,
}

/// lt/lte/gt/gte, shared by numbers, durations and timestamps.
#[derive(Clone, Copy)]
pub(super) struct Range<T> {
    pub(super) lt: Option<T>,
    pub(super) lte: Option<T>,
    pub(super) gt: Option<T>,
    pub(super) gte: Option<T>,
}

impl<T: PartialOrd + Copy> Range<T> {
    /// The broken bound's rule name and Envoy's words, or `None` when `v` is in range.
    /// The cases and their words are PGV's `ltgt` template.
    pub(super) fn check(&self, v: T, show: impl Fn(T) -> String) -> Option<(&'static str, String)> {
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

pub(super) struct StringRules {
    pub(super) konst: Option<String>,
    pub(super) r#in: Vec<String>,
    pub(super) not_in: Vec<String>,
    pub(super) len: Option<u64>,
    pub(super) min_len: Option<u64>,
    pub(super) max_len: Option<u64>,
    pub(super) len_bytes: Option<u64>,
    pub(super) min_bytes: Option<u64>,
    pub(super) max_bytes: Option<u64>,
    pub(super) prefix: Option<String>,
    pub(super) suffix: Option<String>,
    pub(super) contains: Option<String>,
    pub(super) not_contains: Option<String>,
    /// The rule's text and the compiled pattern (`None`: our engine rejects it; skipped).
    pub(super) pattern: Option<(String, Option<regex::Regex>)>,
    pub(super) well_known: Option<WellKnown>,
    pub(super) ignore_empty: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum WellKnown {
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

pub(super) struct BytesRules {
    pub(super) konst: Option<Vec<u8>>,
    pub(super) r#in: Vec<Vec<u8>>,
    pub(super) not_in: Vec<Vec<u8>>,
    pub(super) len: Option<u64>,
    pub(super) min_len: Option<u64>,
    pub(super) max_len: Option<u64>,
    pub(super) prefix: Option<Vec<u8>>,
    pub(super) suffix: Option<Vec<u8>>,
    pub(super) contains: Option<Vec<u8>>,
    pub(super) pattern: Option<(String, Option<regex::bytes::Regex>)>,
    pub(super) ignore_empty: bool,
}

pub(super) struct EnumRules {
    /// The field's enum, whose value names Envoy's words use.
    pub(super) r#enum: Option<prost_reflect::EnumDescriptor>,
    pub(super) konst: Option<i32>,
    /// `defined_only`: the enum whose values are allowed.
    pub(super) defined_only: Option<prost_reflect::EnumDescriptor>,
    pub(super) r#in: Vec<i32>,
    pub(super) not_in: Vec<i32>,
}

pub(super) struct RepeatedRules {
    pub(super) min_items: Option<u64>,
    pub(super) max_items: Option<u64>,
    pub(super) unique: bool,
    pub(super) items: Option<Ruled>,
    pub(super) ignore_empty: bool,
}

pub(super) struct MapRules {
    pub(super) min_pairs: Option<u64>,
    pub(super) max_pairs: Option<u64>,
    pub(super) keys: Option<Ruled>,
    pub(super) values: Option<Ruled>,
    pub(super) ignore_empty: bool,
}

pub(super) struct AnyRules {
    pub(super) required: bool,
    pub(super) r#in: Vec<String>,
    pub(super) not_in: Vec<String>,
}

/// Durations and timestamps as nanoseconds.
pub(super) struct TimeRules {
    pub(super) required: bool,
    pub(super) konst: Option<i128>,
    pub(super) range: Range<i128>,
    pub(super) r#in: Vec<i128>,
    pub(super) not_in: Vec<i128>,
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

pub(super) struct Extensions {
    pub(super) rules: Option<ExtensionDescriptor>,
    pub(super) disabled: Option<ExtensionDescriptor>,
    pub(super) ignored: Option<ExtensionDescriptor>,
    pub(super) required: Option<ExtensionDescriptor>,
}

pub(super) fn extensions() -> &'static Extensions {
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

pub(super) fn flag(options: &DynamicMessage, extension: &Option<ExtensionDescriptor>) -> bool {
    extension.as_ref().is_some_and(|e| {
        options.has_extension(e) && options.get_extension(e).as_bool() == Some(true)
    })
}

impl Plan {
    pub(super) fn of(descriptor: &MessageDescriptor) -> Plan {
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
    pub(super) fn of(field: &FieldDescriptor, optional: bool) -> Option<FieldPlan> {
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

pub(super) fn field_rules(field: &FieldDescriptor) -> Option<pgv::FieldRules> {
    let ext = extensions().rules.as_ref()?;
    let options = field.options();
    if !options.has_extension(ext) {
        return None;
    }
    options.get_extension(ext).as_message()?.transcode_to().ok()
}

/// The field's name as Envoy's messages write it (protoc-gen-star's `PGGUpperCamelCase`):
/// its JSON name with the first letter upper case, `connect_timeout` -> `ConnectTimeout`.
pub(super) fn pgv_name(field: &FieldDescriptor) -> String {
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

pub(super) fn nanos(d: &envoy_types::pb::google::protobuf::Duration) -> i128 {
    i128::from(d.seconds) * 1_000_000_000 + i128::from(d.nanos)
}

pub(super) fn stamp_nanos(t: &envoy_types::pb::google::protobuf::Timestamp) -> i128 {
    i128::from(t.seconds) * 1_000_000_000 + i128::from(t.nanos)
}

impl Ruled {
    pub(super) fn of(rules: &pgv::FieldRules, field: &FieldDescriptor) -> Ruled {
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
    pub(super) fn kind(&self) -> &'static str {
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
pub(super) fn whole(pattern: &str) -> String {
    format!("^(?:{pattern})$")
}

impl StringRules {
    pub(super) fn of(r: &pgv::StringRules) -> StringRules {
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
    pub(super) fn of(r: &pgv::BytesRules) -> BytesRules {
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
