//! Typed reads from the untyped tree, each problem recorded with its path.
//!
//! A section is opened with the keys it knows; unknown keys are reported at once with the
//! list of known ones. Every typed read returns `None` when the key is absent (or `null`)
//! and also when the value is wrong, after recording the problem; callers then fall back to
//! the default, and since a problem was recorded no configuration is returned.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::rc::Rc;
use std::time::Duration;

use super::duration;
use super::endpoint;
use super::error::{KeyReads, Problems, join};
use super::value::Value;

/// An enum written in the config as one of a fixed set of words.
///
/// The one table of words is what [`Fields::choice`] reads and what the renderer writes, so
/// the two cannot disagree.
pub(crate) trait Named: Copy + PartialEq + 'static {
    /// Every value with the word that names it, in the order messages list them.
    const NAMES: &'static [(&'static str, Self)];

    /// The word that names `self`.
    fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, value)| *value == self)
            .map_or("", |(name, _)| name)
    }
}

/// Implements [`Named`] for a fieldless enum: `named!(Enum { "word" => Variant, ... })`.
macro_rules! named {
    ($ty:ident { $($name:literal => $variant:ident),+ $(,)? }) => {
        impl $crate::config::fields::Named for $ty {
            const NAMES: &'static [(&'static str, Self)] = &[$(($name, $ty::$variant)),+];
        }
    };
}
pub(crate) use named;

/// `n` as a count of at least 1; `None` for 0 or a count that does not fit `usize`.
pub(crate) fn positive(n: u64) -> Option<NonZeroUsize> {
    usize::try_from(n).ok().and_then(NonZeroUsize::new)
}

/// The message for a Collector key that tailgate does not implement yet.
pub(crate) const NOT_YET: &str = "not supported yet by this version of tailgate; remove it";

/// One mapping of the tree, with its path.
///
/// Every key asked for (through [`Fields::value`], which every typed read goes through) is
/// noted: a known key that is written but never asked for is a bug in its reader, and
/// [`Problems::finish`] refuses the configuration with that key's path.
pub(crate) struct Fields<'v> {
    path: String,
    map: Option<&'v BTreeMap<String, Value>>,
    /// The value was not a mapping (already reported); checks that a key is required
    /// should stay quiet rather than report a second problem.
    wrong_type: bool,
    /// Which known keys were asked for; `None` when there is no mapping.
    reads: Option<Rc<KeyReads>>,
}

impl<'v> Fields<'v> {
    /// Opens `value` at `path`: a mapping, or `null`/absent for an empty one.
    ///
    /// Reports any key not in `known`; keys in `unsupported` (Collector keys tailgate does not
    /// implement) are reported with their own message instead.
    pub(crate) fn open(
        problems: &mut Problems,
        path: &str,
        value: Option<&'v Value>,
        known: &[&str],
        unsupported: &[(&str, &str)],
    ) -> Self {
        let mut wrong_type = false;
        let map = match value {
            None | Some(Value::Null) => None,
            Some(Value::Map(map)) => Some(map),
            Some(other) => {
                problems.add(
                    path,
                    format!("expected a mapping, found {}", other.describe()),
                );
                wrong_type = true;
                None
            }
        };
        let reads = map.map(|map| problems.track(path, known, map.keys()));
        if let Some(map) = map {
            for key in map.keys() {
                if known.contains(&key.as_str()) {
                    continue;
                }
                let key_path = join(path, key);
                match unsupported.iter().find(|(name, _)| name == key) {
                    Some((_, message)) => problems.add(key_path, *message),
                    None => problems.add(
                        key_path,
                        format!("unknown key (known: {})", known.join(", ")),
                    ),
                }
            }
        }
        Self {
            path: path.to_owned(),
            map,
            wrong_type,
            reads,
        }
    }

    /// Whether the value was something other than a mapping (already reported).
    pub(crate) fn wrong_type(&self) -> bool {
        self.wrong_type
    }

    /// The path of this mapping.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// The path of `key` in this mapping.
    pub(crate) fn key_path(&self, key: &str) -> String {
        join(&self.path, key)
    }

    /// Whether `key` is written, even with no value. This alone does not count as reading
    /// the key: its value must still be read.
    pub(crate) fn has(&self, key: &str) -> bool {
        self.map.is_some_and(|map| map.contains_key(key))
    }

    /// The value of `key`; `None` when absent or `null` (both mean "use the default").
    /// Notes that the key was read.
    pub(crate) fn value(&self, key: &str) -> Option<&'v Value> {
        if let Some(reads) = &self.reads {
            reads.mark(key);
        }
        match self.map?.get(key)? {
            Value::Null => None,
            value => Some(value),
        }
    }

    /// Opens the mapping under `key`.
    pub(crate) fn child(
        &self,
        problems: &mut Problems,
        key: &str,
        known: &[&str],
        unsupported: &[(&str, &str)],
    ) -> Fields<'v> {
        Fields::open(
            problems,
            &self.key_path(key),
            self.value(key),
            known,
            unsupported,
        )
    }

    /// A string.
    pub(crate) fn string(&self, problems: &mut Problems, key: &str) -> Option<String> {
        let value = self.value(key)?;
        as_string(problems, &self.key_path(key), value)
    }

    /// A non-negative integer.
    pub(crate) fn uint(&self, problems: &mut Problems, key: &str) -> Option<u64> {
        let value = self.value(key)?;
        let path = self.key_path(key);
        let parsed = match value {
            Value::Int(i) => u64::try_from(*i).ok(),
            Value::Env(text) => text.trim().parse::<u64>().ok(),
            _ => None,
        };
        if parsed.is_none() {
            let message = match value {
                Value::Int(_) => "must not be negative".to_owned(),
                other => format!(
                    "expected a non-negative integer, found {}",
                    other.describe()
                ),
            };
            problems.add(path, message);
        }
        parsed
    }

    /// The value of `key` read by `parse`; when that gives `None`, a problem at the key
    /// saying it expected `expected`.
    fn scalar<T>(
        &self,
        problems: &mut Problems,
        key: &str,
        expected: &str,
        parse: impl FnOnce(&Value) -> Option<T>,
    ) -> Option<T> {
        let value = self.value(key)?;
        let parsed = parse(value);
        if parsed.is_none() {
            problems.add(
                self.key_path(key),
                format!("expected {expected}, found {}", value.describe()),
            );
        }
        parsed
    }

    /// A signed integer.
    pub(crate) fn int(&self, problems: &mut Problems, key: &str) -> Option<i64> {
        self.scalar(problems, key, "an integer", |value| match value {
            Value::Int(i) => Some(*i),
            Value::Env(text) => text.trim().parse::<i64>().ok(),
            _ => None,
        })
    }

    /// A boolean.
    pub(crate) fn boolean(&self, problems: &mut Problems, key: &str) -> Option<bool> {
        self.scalar(problems, key, "true or false", |value| match value {
            Value::Bool(b) => Some(*b),
            Value::Env(text) => match text.trim() {
                "true" | "True" | "TRUE" => Some(true),
                "false" | "False" | "FALSE" => Some(false),
                _ => None,
            },
            _ => None,
        })
    }

    /// A number (integers are accepted).
    pub(crate) fn float(&self, problems: &mut Problems, key: &str) -> Option<f64> {
        self.scalar(problems, key, "a number", |value| match value {
            Value::Float(x) => Some(*x),
            // Config numbers are small; the conversion is exact for them.
            Value::Int(i) => Some(*i as f64),
            Value::Env(text) => text.trim().parse::<f64>().ok().filter(|x| x.is_finite()),
            _ => None,
        })
    }

    /// A duration in Go's syntax (`200ms`, `5s`, `1m30s`). A bare `0` is zero; any other bare
    /// number is refused, since the Collector would read it as nanoseconds.
    pub(crate) fn duration(&self, problems: &mut Problems, key: &str) -> Option<Duration> {
        let value = self.value(key)?;
        let result = match value {
            Value::Str(text) | Value::Env(text) => duration::parse(text.trim()),
            Value::Int(0) => Ok(Duration::ZERO),
            Value::Int(n) => Err(format!(
                "a duration needs a unit: write e.g. \"{n}s\" or \"{n}ms\""
            )),
            Value::Float(x) => Err(format!(
                "a duration needs a unit: write e.g. \"{x}s\" or \"{x}ms\""
            )),
            other => Err(format!(
                "expected a duration such as \"5s\", found {}",
                other.describe()
            )),
        };
        match result {
            Ok(duration) => Some(duration),
            Err(message) => {
                problems.add(self.key_path(key), message);
                None
            }
        }
    }

    /// A listening `host:port`.
    pub(crate) fn listen_endpoint(&self, problems: &mut Problems, key: &str) -> Option<String> {
        let endpoint = self.string(problems, key)?;
        match endpoint::check_listen(&endpoint) {
            Ok(()) => Some(endpoint),
            Err(message) => {
                problems.add(self.key_path(key), message);
                None
            }
        }
    }

    /// A duration that must not be zero.
    pub(crate) fn positive_duration(&self, problems: &mut Problems, key: &str) -> Option<Duration> {
        let duration = self.duration(problems, key)?;
        if duration.is_zero() {
            problems.add(self.key_path(key), "must be greater than 0");
            return None;
        }
        Some(duration)
    }

    /// A count of at least 1 under `key`; `default` when absent.
    pub(crate) fn at_least_one(
        &self,
        problems: &mut Problems,
        key: &str,
        default: usize,
    ) -> NonZeroUsize {
        let fallback = NonZeroUsize::new(default).unwrap_or(NonZeroUsize::MIN);
        match self.uint(problems, key) {
            None => fallback,
            Some(n) => positive(n).unwrap_or_else(|| {
                problems.add(self.key_path(key), "must be at least 1");
                fallback
            }),
        }
    }

    /// One of a fixed set of lowercase words (compared without regard to case).
    pub(crate) fn choice<T: Copy>(
        &self,
        problems: &mut Problems,
        key: &str,
        choices: &[(&str, T)],
    ) -> Option<T> {
        let text = self.string(problems, key)?;
        let lower = text.to_ascii_lowercase();
        let found = choices.iter().find(|(name, _)| *name == lower);
        if found.is_none() {
            let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
            problems.add(
                self.key_path(key),
                format!(
                    "unknown value {text:?} (expected one of: {})",
                    names.join(", ")
                ),
            );
        }
        found.map(|(_, value)| *value)
    }

    /// A list of strings.
    pub(crate) fn strings(&self, problems: &mut Problems, key: &str) -> Option<Vec<String>> {
        let value = self.value(key)?;
        let path = self.key_path(key);
        let Value::Seq(items) = value else {
            problems.add(path, format!("expected a list, found {}", value.describe()));
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            match as_string(problems, &format!("{path}[{i}]"), item) {
                Some(s) => out.push(s),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    /// A mapping of strings to strings.
    pub(crate) fn string_map(
        &self,
        problems: &mut Problems,
        key: &str,
    ) -> Option<BTreeMap<String, String>> {
        let value = self.value(key)?;
        let path = self.key_path(key);
        let Value::Map(map) = value else {
            problems.add(
                path,
                format!("expected a mapping, found {}", value.describe()),
            );
            return None;
        };
        let mut out = BTreeMap::new();
        let mut ok = true;
        for (name, item) in map {
            let item_path = join(&path, name);
            let text = match item {
                // `x-empty:` is an empty header value rather than a missing one.
                Value::Null => Some(String::new()),
                item => as_string(problems, &item_path, item),
            };
            match text {
                Some(text) => {
                    out.insert(name.clone(), text);
                }
                None => ok = false,
            }
        }
        ok.then_some(out)
    }
}

/// A string value. Integers are accepted as their decimal text (a header value `12345`).
pub(crate) fn as_string(problems: &mut Problems, path: &str, value: &Value) -> Option<String> {
    match value {
        Value::Str(s) | Value::Env(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        other => {
            problems.add(
                path,
                format!("expected a string, found {}", other.describe()),
            );
            None
        }
    }
}
