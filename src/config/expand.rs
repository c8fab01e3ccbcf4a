//! `${env:NAME}` substitution in string values, as the Collector does it.
//!
//! Rules:
//! - `${env:NAME}` and `${NAME}` are replaced by the variable's value.
//! - `${env:NAME:-default}` (and `${NAME:-default}`) use `default` when `NAME` is unset; a
//!   variable that is set but empty stays empty, as in the Collector. The default runs to
//!   the first `}` and is used literally.
//! - An unset variable without a default becomes the empty string, as in the Collector
//!   (which logs a warning). A required key then fails with a message naming it.
//! - `$$` is a literal `$`. A `$` not followed by `{` or `$` is kept as is; the bare `$NAME`
//!   form is not expanded (the Collector dropped it).
//! - Substituted text is used literally: it is not expanded again.
//! - Only string values are expanded, never keys.
//! - A value that is exactly one reference takes the type its key expects (`4317` for a
//!   size is a number); anything else is a string. See [`Value::Env`].
//! - Other config sources of the Collector (`${file:...}`, `${http:...}`, `${yaml:...}`)
//!   are errors.

use std::collections::BTreeMap;

use super::error::{Problems, join};
use super::value::Value;

/// Looks up an environment variable: `None` when it is unset.
pub(crate) type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Expands every string value in `value`, recording problems under `path`.
pub(crate) fn expand(value: &mut Value, path: &str, env: Lookup<'_>, problems: &mut Problems) {
    match value {
        Value::Str(text) => match expand_str(text, env) {
            Ok(Expanded::Whole(expanded)) => *value = Value::Env(expanded),
            Ok(Expanded::Text(expanded)) => *text = expanded,
            Err(message) => problems.add(path, message),
        },
        Value::Seq(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                expand(item, &format!("{path}[{i}]"), env, problems);
            }
        }
        Value::Map(map) => expand_map(map, path, env, problems),
        Value::Null | Value::Bool(_) | Value::Int(_) | Value::Float(_) | Value::Env(_) => {}
    }
}

fn expand_map(
    map: &mut BTreeMap<String, Value>,
    path: &str,
    env: Lookup<'_>,
    problems: &mut Problems,
) {
    for (key, item) in map.iter_mut() {
        expand(item, &join(path, key), env, problems);
    }
}

/// The result of expanding one string.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Expanded {
    /// The string was exactly one reference; this is the substituted text.
    Whole(String),
    /// Anything else: the string with references substituted and `$$` unescaped.
    Text(String),
}

/// Expands the references in one string.
pub(crate) fn expand_str(text: &str, env: Lookup<'_>) -> Result<Expanded, String> {
    if !text.contains('$') {
        return Ok(Expanded::Text(text.to_owned()));
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut references = 0;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('{') {
            let Some(end) = body.find('}') else {
                return Err(format!(
                    "unterminated reference in {text:?}: add the closing \"}}\", or write \"$$\" for a literal \"$\""
                ));
            };
            out.push_str(&resolve(&body[..end], env)?);
            references += 1;
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    // Exactly one reference and nothing around it: the first `}` closes it and ends the text.
    let whole = references == 1 && text.starts_with("${") && text.find('}') == Some(text.len() - 1);
    Ok(if whole {
        Expanded::Whole(out)
    } else {
        Expanded::Text(out)
    })
}

/// Resolves the inside of `${...}`.
fn resolve(reference: &str, env: Lookup<'_>) -> Result<String, String> {
    let spec = match reference.strip_prefix("env:") {
        Some(spec) => spec,
        None => {
            if let Some(scheme) = scheme_of(reference) {
                return Err(format!(
                    "unsupported config source \"{scheme}\" in \"${{{reference}}}\": tailgate expands only environment variables, ${{env:NAME}}"
                ));
            }
            reference
        }
    };
    let (name, default) = match spec.split_once(":-") {
        Some((name, default)) => (name, Some(default)),
        None => (spec, None),
    };
    if !is_env_name(name) {
        return Err(format!(
            "invalid environment variable name {name:?} in \"${{{reference}}}\": use letters, digits and '_', not starting with a digit"
        ));
    }
    Ok(match env(name) {
        Some(value) => value,
        None => default.unwrap_or_default().to_owned(),
    })
}

/// The Collector's `scheme:` prefix (`[A-Za-z][A-Za-z0-9+.-]*:`), unless what follows the
/// colon is `-`, which makes it `NAME:-default`.
fn scheme_of(reference: &str) -> Option<&str> {
    let (scheme, rest) = reference.split_once(':')?;
    if rest.starts_with('-') {
        return None;
    }
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-')))
    .then_some(scheme)
}

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
