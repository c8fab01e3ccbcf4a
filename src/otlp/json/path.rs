//! Where a JSON value is, what was wrong with it, and the two names a field is known by.

use crate::otlp::wire::{self, Path, Seg};

/// An OTLP/JSON request that could not be transcoded: where, and what was wrong, e.g.
/// `resourceSpans[0].scopeSpans[0].spans[3].traceId: invalid hex`. Meant for the client
/// (HTTP 400).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}{}{message}", if path.is_empty() { "" } else { ": " })]
pub struct JsonError {
    path: String,
    message: String,
}

impl JsonError {
    /// An error about the body as a whole (no path), e.g. one that is not JSON.
    pub(super) fn body(message: String) -> Self {
        Self {
            path: String::new(),
            message,
        }
    }

    /// The path of the offending value in lowerCamelCase (whatever spelling the input
    /// used), e.g. `resourceSpans[0].scopeSpans[0].spans[3].traceId`; empty when the body
    /// is not JSON at all.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// What was wrong.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// A location in the JSON document: a wire-reader path, so both name fields alike. Built
/// on the stack as the walk descends, rendered only on error.
pub(super) struct P<'a>(Path<'a>);

impl<'a> P<'a> {
    pub(super) const ROOT: P<'static> = P(wire::ROOT);

    pub(super) fn field(&'a self, name: &'static str) -> P<'a> {
        P(self.0.child(Seg::Field(name)))
    }

    pub(super) fn index(&'a self, name: &'static str, i: usize) -> P<'a> {
        P(self.0.child(Seg::Index(name, i)))
    }

    pub(super) fn err(&self, message: impl Into<String>) -> JsonError {
        JsonError {
            path: self.0.render(),
            message: message.into(),
        }
    }
}

pub(super) type R<T> = Result<T, JsonError>;

// ---------------------------------------------------------------------------------------
// Field names. A field's JSON name is the lowerCamelCase of its proto name (the proto3 JSON
// mapping), and its proto name is the prost field's; both are derived at compile time from
// the field identifier, so neither can drift from the other.

/// The two names a field is known by: `(json, proto)`, e.g. `("traceId", "trace_id")`.
/// Written by `names!`.
pub(super) type Names = (&'static str, &'static str);

/// The proto name of a prost field identifier: `r#type` is `type`.
pub(super) const fn proto_name(ident: &'static str) -> &'static str {
    match ident.as_bytes() {
        [b'r', b'#', ..] => ident.split_at(2).1,
        _ => ident,
    }
}

/// The length of [`json_name_bytes`]`(snake)`: the underscores go.
pub(super) const fn json_name_len(snake: &str) -> usize {
    let bytes = snake.as_bytes();
    let mut len = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'_' {
            len += 1;
        }
        i += 1;
    }
    len
}

/// lowerCamelCase of an ASCII snake_case name: each underscore goes and upper-cases the
/// letter after it.
pub(super) const fn json_name_bytes<const N: usize>(snake: &str) -> [u8; N] {
    let bytes = snake.as_bytes();
    let mut out = [0u8; N];
    let (mut i, mut j, mut upper) = (0, 0, false);
    while i < bytes.len() {
        if bytes[i] == b'_' {
            upper = true;
        } else {
            out[j] = if upper {
                bytes[i].to_ascii_uppercase()
            } else {
                bytes[i]
            };
            upper = false;
            j += 1;
        }
        i += 1;
    }
    out
}

/// The [`Names`] of a prost field identifier, as constants.
macro_rules! names {
    ($field:ident) => {{
        const PROTO: &str = $crate::otlp::json::path::proto_name(stringify!($field));
        const BYTES: [u8; $crate::otlp::json::path::json_name_len(PROTO)] =
            $crate::otlp::json::path::json_name_bytes(PROTO);
        const JSON: &str = match ::core::str::from_utf8(&BYTES) {
            Ok(name) => name,
            Err(_) => panic!("a proto field name is ASCII"),
        };
        (JSON, PROTO)
    }};
}
pub(super) use names;
