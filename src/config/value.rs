//! The untyped YAML tree: parsing one document and merging several.
//!
//! The configuration is first read into this generic tree rather than straight into serde
//! structs, so that every problem (an unknown key, a wrong type, a bad value) can be
//! reported with its full dotted path, and so that all problems are reported in one run:
//! `#[serde(deny_unknown_fields)]` stops at the first unknown key and names it without its
//! path.

use std::collections::BTreeMap;

use super::error::Problems;

/// A YAML value, after parsing and before typing.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    /// `null`, `~` or nothing after the colon.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// A string.
    Str(String),
    /// The text of a scalar that was exactly one `${env:NAME}` reference. Its type is decided
    /// by the key that reads it, as the Collector does: `4317` is an integer for a size
    /// field and the string `"4317"` for a header value.
    Env(String),
    /// A list.
    Seq(Vec<Value>),
    /// A mapping with string keys.
    Map(BTreeMap<String, Value>),
}

impl Value {
    /// A short description for messages: "a string", "a list", ...
    pub(crate) fn describe(&self) -> String {
        match self {
            Value::Null => "null".to_owned(),
            Value::Bool(b) => format!("the boolean {b}"),
            Value::Int(i) => format!("the integer {i}"),
            Value::Float(x) => format!("the number {x}"),
            Value::Str(s) | Value::Env(s) if s.is_empty() => {
                "an empty string (an unset environment variable becomes an empty string)".to_owned()
            }
            Value::Str(s) | Value::Env(s) => format!("the string {s:?}"),
            Value::Seq(_) => "a list".to_owned(),
            Value::Map(_) => "a mapping".to_owned(),
        }
    }
}

/// Parses one YAML document named `name` (a file name, for messages).
///
/// An empty document is an empty mapping. Syntax errors are recorded with the name and the
/// line and column, and give `None`.
pub(crate) fn parse_document(name: &str, text: &str, problems: &mut Problems) -> Option<Value> {
    let json: serde_json::Value = match serde_saphyr::from_str(text) {
        Ok(json) => json,
        Err(error) => {
            problems.add(name, format!("invalid YAML: {}", yaml_message(&error)));
            return None;
        }
    };
    match from_json(json) {
        Value::Null => Some(Value::Map(BTreeMap::new())),
        map @ Value::Map(_) => Some(map),
        other => {
            problems.add(
                name,
                format!(
                    "the top level must be a mapping (receivers:, exporters:, service: ...), found {}",
                    other.describe()
                ),
            );
            None
        }
    }
}

/// The parser's message without its source snippet, with the location, and without advice
/// that only makes sense to a programmer using the parser.
fn yaml_message(error: &serde_saphyr::Error) -> String {
    let message = error.without_snippet().to_string();
    // "duplicate mapping key: a, set DuplicateKeyPolicy in Options if acceptable at line 2, ..."
    let message = message.replace(", set DuplicateKeyPolicy in Options if acceptable", "");
    match error.location() {
        Some(location) if !message.contains(" at line ") => format!(
            "{message} at line {}, column {}",
            location.line(),
            location.column()
        ),
        _ => message,
    }
}

fn from_json(json: serde_json::Value) -> Value {
    match json {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            // Integers beyond i64 and true floats: no key takes integers that large.
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::Str(s),
        serde_json::Value::Array(items) => Value::Seq(items.into_iter().map(from_json).collect()),
        serde_json::Value::Object(map) => Value::Map(
            map.into_iter()
                .map(|(key, value)| (key, from_json(value)))
                .collect(),
        ),
    }
}

/// Merges `later` into `earlier` as the Collector merges several `--config` files: mappings
/// merge key by key, recursively; anything else in `later` replaces what `earlier` had
/// (lists are replaced whole, not appended).
///
/// One refinement: a `null` in `later` where `earlier` has a mapping keeps the mapping.
/// `grpc:` with no value means "enabled with defaults", so it adds nothing to settings an
/// earlier file already made.
pub(crate) fn merge(earlier: &mut Value, later: Value) {
    match (earlier, later) {
        (Value::Map(into), Value::Map(from)) => {
            for (key, value) in from {
                match into.get_mut(&key) {
                    Some(existing) => merge(existing, value),
                    None => {
                        into.insert(key, value);
                    }
                }
            }
        }
        (Value::Map(_), Value::Null) => {}
        (slot, value) => *slot = value,
    }
}
