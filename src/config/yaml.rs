//! Reading a snapshot file's YAML as Envoy reads YAML: yaml-cpp's parse, then Envoy's
//! conversion of each node to JSON (`MessageUtil::loadFromYaml`), so that a text means to
//! Switchyard what it means to Envoy.
//!
//! Owns: the YAML text -> `serde_yaml::Value` step, with Envoy's rules for a plain
//! (unquoted) scalar: `yes`/`no`/`on`/`off`/`y`/`n` (any of yaml-cpp's spellings) and
//! `true`/`false` are booleans, an integer in 32 bits is a number (a larger one stays a
//! string, as Envoy keeps it to lose no precision), a float is a number, `~`/`null` and
//! nothing are null, and everything else, like every quoted scalar, is a string. A mapping
//! key given twice keeps the last value, as yaml-cpp does, and is reported as a warning
//! naming both lines. Aliases are expanded, with a limit.
//!
//! Must not: know about resources or descriptors; JSON files are read by serde_json.

use serde_yaml::{Mapping, Value};
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// A key given twice in one mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DuplicateKey {
    pub key: String,
    pub first_line: usize,
    pub second_line: usize,
}

/// The most nodes that aliases may add to one file (an alias of an alias of ... would
/// otherwise grow without bound: the "billion laughs").
const MAX_ALIASED_NODES: usize = 1_000_000;

/// Why a text is not one YAML document Envoy would read (yaml-rust2's words, or ours).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct YamlError(String);

/// Parse `text` as Envoy would: the value, and the keys given twice.
pub fn parse(text: &str) -> Result<(Value, Vec<DuplicateKey>), YamlError> {
    parse_text(text).map_err(YamlError)
}

fn parse_text(text: &str) -> Result<(Value, Vec<DuplicateKey>), String> {
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(text);
    parser.load(&mut builder, true).map_err(|e| e.to_string())?;
    if let Some(error) = builder.error {
        return Err(error);
    }
    if builder.documents > 1 {
        return Err("the file holds more than one YAML document (`---`); write one".into());
    }
    Ok((builder.root.unwrap_or(Value::Null), builder.duplicates))
}

enum Frame {
    Sequence {
        items: Vec<Value>,
        anchor: usize,
    },
    Mapping {
        entries: Mapping,
        anchor: usize,
        /// The key read, waiting for its value.
        key: Option<(String, usize)>,
        /// Where each key was first given.
        lines: std::collections::HashMap<String, usize>,
    },
}

/// Where each node of a file starts, by its path from the top (`clusters[1].connect_timeout`,
/// `clusters[1]`): a mapping entry at its key, a list item at its first character. Line and
/// column count from 1.
pub type Positions = std::collections::HashMap<String, (usize, usize)>;

/// Where `path` starts in a file, or the nearest part of it the file has (`a.b[2].c`, then
/// `a.b[2]`, `a.b`, `a`): an unknown field's key is there; a field a rule found missing is
/// not, and its resource is.
pub fn position_of(positions: &Positions, path: &str) -> Option<(usize, usize)> {
    let mut path = path;
    loop {
        if let Some(&found) = positions.get(path) {
            return Some(found);
        }
        let cut = match (path.rfind('.'), path.rfind('[')) {
            (Some(dot), Some(bracket)) => dot.max(bracket),
            (Some(cut), None) | (None, Some(cut)) => cut,
            (None, None) => return None,
        };
        path = &path[..cut];
    }
}

/// Where each node of `text` starts (see [`Positions`]); what does not parse has none. Only
/// asked for when a file has something to report, so a good load never builds it.
/// [`positions`] of a file: its text where the caller holds it, else read again (nothing
/// where it cannot be read: an error is then placed at no line).
pub fn positions_of_file(text: Option<&str>, path: &std::path::Path) -> Positions {
    match text {
        Some(text) => positions(text),
        None => std::fs::read_to_string(path)
            .map(|text| positions(&text))
            .unwrap_or_default(),
    }
}

pub fn positions(text: &str) -> Positions {
    let mut builder = Builder {
        track: true,
        ..Builder::default()
    };
    let mut parser = Parser::new_from_str(text);
    let _ = parser.load(&mut builder, true);
    builder.positions
}

/// In the file `text`, the path of the first string equal to `value` within the node at
/// `under` (`routes[3]`), that node's own `name` aside: where a resource names what it
/// refers to (`routes[3].virtual_hosts[0].routes[1].route.cluster`).
pub fn path_of_value(text: &str, under: &str, value: &str) -> Option<String> {
    let (root, _) = parse(text).ok()?;
    let mut node = &root;
    for part in under.split('.') {
        let (key, indices) = match part.find('[') {
            Some(at) => (&part[..at], &part[at..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            node = node.get(key)?;
        }
        for index in indices.split(['[', ']']).filter(|i| !i.is_empty()) {
            node = node.get(index.parse::<usize>().ok()?)?;
        }
    }
    fn find(node: &Value, path: String, value: &str, top: bool) -> Option<String> {
        match node {
            Value::Mapping(entries) => entries.iter().find_map(|(k, v)| {
                let key = k.as_str()?;
                if top && key == "name" {
                    return None;
                }
                let here = join(&path, key);
                match v {
                    Value::String(s) if s == value => Some(here),
                    _ => find(v, here, value, false),
                }
            }),
            Value::Sequence(items) => items.iter().enumerate().find_map(|(i, v)| {
                let here = format!("{path}[{i}]");
                match v {
                    Value::String(s) if s == value => Some(here),
                    _ => find(v, here, value, false),
                }
            }),
            _ => None,
        }
    }
    find(node, under.to_string(), value, true)
}

#[derive(Default)]
struct Builder {
    /// Whether to keep [`Positions`] (and the path of each open frame, in `paths`).
    track: bool,
    paths: Vec<String>,
    positions: Positions,
    stack: Vec<Frame>,
    root: Option<Value>,
    anchors: std::collections::HashMap<usize, Value>,
    duplicates: Vec<DuplicateKey>,
    documents: usize,
    aliased: usize,
    error: Option<String>,
}

impl Builder {
    fn fail(&mut self, message: String) {
        if self.error.is_none() {
            self.error = Some(message);
        }
    }

    /// The path of the node about to be added (not a key), and whether it is a list item.
    fn child_path(&self) -> (String, bool) {
        let parent = self.paths.last().map(String::as_str).unwrap_or_default();
        match self.stack.last() {
            Some(Frame::Sequence { items, .. }) => (format!("{parent}[{}]", items.len()), true),
            Some(Frame::Mapping {
                key: Some((k, _)), ..
            }) => (join(parent, k), false),
            _ => (String::new(), false),
        }
    }

    /// Keep where the node about to be added starts (list items; entries are kept at
    /// their keys), and return its path.
    fn mark_child(&mut self, mark: &Marker) -> String {
        let (path, item) = self.child_path();
        if item {
            self.positions
                .insert(path.clone(), (mark.line(), mark.col() + 1));
        }
        path
    }

    /// Whether the next node is a mapping key.
    fn wants_key(&self) -> bool {
        matches!(self.stack.last(), Some(Frame::Mapping { key: None, .. }))
    }

    fn add(&mut self, value: Value, anchor: usize) {
        if anchor > 0 {
            self.anchors.insert(anchor, value.clone());
        }
        match self.stack.last_mut() {
            None => self.root = Some(value),
            Some(Frame::Sequence { items, .. }) => items.push(value),
            Some(Frame::Mapping {
                entries,
                key,
                lines,
                ..
            }) => {
                let Some((key, line)) = key.take() else {
                    return;
                };
                if let Some(&first_line) = lines.get(&key) {
                    self.duplicates.push(DuplicateKey {
                        key: key.clone(),
                        first_line,
                        second_line: line,
                    });
                } else {
                    lines.insert(key.clone(), line);
                }
                entries.insert(Value::String(key), value);
            }
        }
    }
}

/// How many nodes a value holds.
fn nodes(value: &Value) -> usize {
    match value {
        Value::Sequence(items) => 1 + items.iter().map(nodes).sum::<usize>(),
        Value::Mapping(entries) => 1 + entries.values().map(nodes).sum::<usize>(),
        _ => 1,
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, event: Event, mark: Marker) {
        if self.error.is_some() {
            return;
        }
        match event {
            Event::DocumentStart => self.documents += 1,
            Event::Scalar(text, style, anchor, tag) => {
                if self.wants_key() {
                    if self.track {
                        let parent = self.paths.last().map(String::as_str).unwrap_or_default();
                        let path = join(parent, &text);
                        self.positions.insert(path, (mark.line(), mark.col() + 1));
                    }
                    if let Some(Frame::Mapping { key, .. }) = self.stack.last_mut() {
                        *key = Some((text, mark.line()));
                    }
                    return;
                }
                if self.track {
                    self.mark_child(&mark);
                }
                let value = resolve(text, style, tag.as_ref());
                self.add(value, anchor);
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if self.wants_key() {
                    return self.fail(format!(
                        "line {}: a mapping key must be a plain value, not a list or a mapping",
                        mark.line()
                    ));
                }
                if self.track {
                    let path = self.mark_child(&mark);
                    self.paths.push(path);
                }
                let frame = match event {
                    Event::SequenceStart(..) => Frame::Sequence {
                        items: Vec::new(),
                        anchor,
                    },
                    _ => Frame::Mapping {
                        entries: Mapping::new(),
                        anchor,
                        key: None,
                        lines: Default::default(),
                    },
                };
                self.stack.push(frame);
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if self.track {
                    self.paths.pop();
                }
                let (value, anchor) = match self.stack.pop() {
                    Some(Frame::Sequence { items, anchor }) => (Value::Sequence(items), anchor),
                    Some(Frame::Mapping {
                        entries, anchor, ..
                    }) => (Value::Mapping(entries), anchor),
                    None => return,
                };
                self.add(value, anchor);
            }
            Event::Alias(id) => {
                let Some(value) = self.anchors.get(&id).cloned() else {
                    return self.fail(format!(
                        "line {}: an alias of an unknown anchor",
                        mark.line()
                    ));
                };
                self.aliased += nodes(&value);
                if self.aliased > MAX_ALIASED_NODES {
                    return self.fail(format!(
                        "line {}: aliases expand to more than {MAX_ALIASED_NODES} nodes",
                        mark.line()
                    ));
                }
                if self.wants_key() {
                    let key = match &value {
                        Value::String(s) => s.clone(),
                        Value::Bool(b) => b.to_string(),
                        Value::Number(n) => n.to_string(),
                        _ => {
                            return self.fail(format!(
                                "line {}: a mapping key must be a plain value",
                                mark.line()
                            ))
                        }
                    };
                    if let Some(Frame::Mapping { key: slot, .. }) = self.stack.last_mut() {
                        *slot = Some((key, mark.line()));
                    }
                    return;
                }
                self.add(value, 0);
            }
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => {}
        }
    }
}

/// `parent` and one key more, as error paths write them.
fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// A scalar as Envoy's converter reads it (see the module doc).
fn resolve(text: String, style: TScalarStyle, tag: Option<&Tag>) -> Value {
    if style != TScalarStyle::Plain {
        return Value::String(text);
    }
    if let Some(tag) = tag {
        // `!!str 123` says what it is.
        if tag.suffix == "str" && (tag.handle == "tag:yaml.org,2002:" || tag.handle == "!!") {
            return Value::String(text);
        }
    }
    match text.as_str() {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Value::Bool(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Value::Bool(false)
        }
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Value::from(f64::INFINITY)
        }
        "-.inf" | "-.Inf" | "-.INF" => return Value::from(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Value::from(f64::NAN),
        _ => {}
    }
    if let Some(n) = integer(&text) {
        // Envoy keeps an integer beyond 32 bits as its text, so no precision is lost.
        return match i32::try_from(n) {
            Ok(small) => Value::from(small),
            Err(_) => Value::String(text),
        };
    }
    if looks_like_float(&text) {
        if let Ok(f) = text.parse::<f64>() {
            return Value::from(f);
        }
    }
    Value::String(text)
}

/// yaml-cpp's integer: an optional sign and decimal digits, or `0x` hexadecimal, or `0o`
/// octal.
fn integer(text: &str) -> Option<i64> {
    let (negative, digits) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let magnitude = if let Some(hex) = digits.strip_prefix("0x") {
        i64::from_str_radix(hex, 16).ok()?
    } else if let Some(oct) = digits.strip_prefix("0o") {
        i64::from_str_radix(oct, 8).ok()?
    } else {
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse::<i64>().ok()?
    };
    Some(if negative { -magnitude } else { magnitude })
}

/// A decimal float as a C++ stream reads one whole: digits with a point and/or an exponent.
fn looks_like_float(text: &str) -> bool {
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    !body.is_empty()
        && body.bytes().any(|b| b.is_ascii_digit())
        && body
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'))
}

#[cfg(test)]
mod tests;
