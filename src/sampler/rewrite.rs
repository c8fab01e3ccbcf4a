//! The few byte-level edits the sampler makes to kept data, without decoding it:
//! setting a span's `trace_state`, and adding the deciding policy's name to a scope.

use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};

/// `Span.trace_state` (string).
const SPAN_TRACE_STATE: u32 = 3;
/// `InstrumentationScope.attributes` (repeated KeyValue).
const SCOPE_ATTRIBUTES: u32 = 3;

/// Returns `span` (an encoded `Span` body) with its `trace_state` replaced by
/// `trace_state`. Every other field, unknown ones included, is kept byte for byte and in
/// order; the new `trace_state` is written where the first old one stood (or last when
/// there was none). Returns `None` when `span` is not a well-formed message, which the
/// wire reader's validation rules out.
pub fn set_span_trace_state(span: &[u8], trace_state: &str) -> Option<Bytes> {
    let mut out = BytesMut::with_capacity(span.len() + trace_state.len() + 4);
    let mut written = false;
    let mut at = 0;
    while at < span.len() {
        let (field, wire_type, end) = next_field(span, at)?;
        if field == SPAN_TRACE_STATE && wire_type == 2 {
            if !written {
                put_string_field(&mut out, SPAN_TRACE_STATE, trace_state);
                written = true;
            }
        } else {
            out.extend_from_slice(&span[at..end]);
        }
        at = end;
    }
    if !written {
        put_string_field(&mut out, SPAN_TRACE_STATE, trace_state);
    }
    Some(out.freeze())
}

/// The `trace_state` of an encoded `Span` body (the last occurrence, as protobuf reads
/// it); `None` when there is none or the span is not well formed. The reference the
/// tests hold [`find_span_trace_state`] to.
#[cfg(test)]
fn span_trace_state(span: &[u8]) -> Option<&str> {
    let mut found = None;
    let mut at = 0;
    while at < span.len() {
        let (field, wire_type, end) = next_field(span, at)?;
        if field == SPAN_TRACE_STATE && wire_type == 2 {
            let (_key, after_key) = read_varint(span, at)?;
            let (_len, after_len) = read_varint(span, after_key)?;
            found = std::str::from_utf8(&span[after_len..end]).ok();
        }
        at = end;
    }
    found
}

/// Where the `trace_state` of an encoded `Span` body is, read in one walk of the span so
/// that it can be replaced ([`replace_span_trace_state`]) without walking it again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceStateField<'a> {
    /// The value of the last `trace_state` field, as protobuf reads it ("" when there is
    /// none, or when it is not UTF-8).
    pub value: &'a str,
    /// The bytes of the first `trace_state` field (key, length and value), if any.
    first: Option<Range<usize>>,
    /// True when the span has more than one `trace_state` field.
    repeated: bool,
}

/// The `trace_state` of an encoded `Span` body and where it stands; `None` when the span
/// is not well formed.
pub fn find_span_trace_state(span: &[u8]) -> Option<TraceStateField<'_>> {
    let mut field = TraceStateField {
        value: "",
        first: None,
        repeated: false,
    };
    let mut at = 0;
    while at < span.len() {
        let (number, wire_type, end) = next_field(span, at)?;
        if number == SPAN_TRACE_STATE && wire_type == 2 {
            let (_key, after_key) = read_varint(span, at)?;
            let (_len, after_len) = read_varint(span, after_key)?;
            field.value = std::str::from_utf8(&span[after_len..end]).unwrap_or("");
            if field.first.is_some() {
                field.repeated = true;
            } else {
                field.first = Some(at..end);
            }
        }
        at = end;
    }
    Some(field)
}

/// Rewritten spans are written into shared chunks of at least this many bytes (one
/// allocation for a few hundred spans, not one per span).
const REWRITE_CHUNK: usize = 64 * 1024;

/// [`set_span_trace_state`] of a span whose `trace_state` was found by
/// [`find_span_trace_state`] (`field`): the same bytes, written by copying what surrounds
/// the old field instead of walking the span again. The result is a slice of `chunk`,
/// which is replaced by a fresh chunk when it has no room left: the spans rewritten into
/// one chunk share its allocation, which is freed when the last of them is.
pub fn replace_span_trace_state(
    span: &[u8],
    field: &TraceStateField<'_>,
    trace_state: &str,
    chunk: &mut BytesMut,
) -> Bytes {
    if field.repeated {
        return set_span_trace_state(span, trace_state)
            .unwrap_or_else(|| Bytes::copy_from_slice(span));
    }
    let (before, after) = match &field.first {
        Some(first) => (&span[..first.start], &span[first.end..]),
        None => (span, &[][..]),
    };
    // The key is one byte; the length a varint of at most 10.
    let len = before.len() + 11 + trace_state.len() + after.len();
    if chunk.capacity() - chunk.len() < len {
        *chunk = BytesMut::with_capacity(len.max(REWRITE_CHUNK));
    }
    chunk.extend_from_slice(before);
    put_string_field(chunk, SPAN_TRACE_STATE, trace_state);
    chunk.extend_from_slice(after);
    chunk.split().freeze()
}

/// Returns `scope` (an encoded `InstrumentationScope` body) with one more string
/// attribute `key = value` appended.
pub fn add_scope_attribute(scope: &[u8], key: &str, value: &str) -> Bytes {
    // AnyValue { string_value (1) }
    let mut any_value = BytesMut::new();
    put_string_field(&mut any_value, 1, value);
    // KeyValue { key (1), value (2) }
    let mut key_value = BytesMut::new();
    put_string_field(&mut key_value, 1, key);
    put_bytes_field(&mut key_value, 2, &any_value);
    let mut out = BytesMut::with_capacity(scope.len() + key_value.len() + 4);
    out.extend_from_slice(scope);
    put_bytes_field(&mut out, SCOPE_ATTRIBUTES, &key_value);
    out.freeze()
}

fn put_string_field(out: &mut BytesMut, field: u32, value: &str) {
    put_bytes_field(out, field, value.as_bytes());
}

fn put_bytes_field(out: &mut BytesMut, field: u32, value: &[u8]) {
    put_varint(out, u64::from(field << 3 | 2));
    put_varint(out, value.len() as u64);
    out.put_slice(value);
}

fn put_varint(out: &mut BytesMut, mut value: u64) {
    while value >= 0x80 {
        out.put_u8((value as u8) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

#[inline(always)]
fn read_varint(buf: &[u8], mut at: usize) -> Option<(u64, usize)> {
    // Field keys and most lengths in a span are one byte: read those without the loop
    // (a kept span's fields are walked once per rewrite of its threshold).
    let first = *buf.get(at)?;
    if first < 0x80 {
        return Some((u64::from(first), at + 1));
    }
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *buf.get(at)?;
        at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some((value, at));
        }
    }
    None
}

/// The field number, wire type and end offset of the field starting at `at`. Always
/// inlined: it is the body of the walk over every field of a kept span, where the call
/// cost as much as the reading.
#[inline(always)]
fn next_field(buf: &[u8], at: usize) -> Option<(u32, u8, usize)> {
    let (key, after_key) = read_varint(buf, at)?;
    let field = u32::try_from(key >> 3).ok()?;
    let wire_type = (key & 7) as u8;
    let end = match wire_type {
        0 => read_varint(buf, after_key)?.1,
        1 => after_key + 8,
        2 => {
            let (len, after_len) = read_varint(buf, after_key)?;
            after_len.checked_add(usize::try_from(len).ok()?)?
        }
        5 => after_key + 4,
        3 => skip_group(buf, after_key, field)?,
        _ => return None,
    };
    (end <= buf.len()).then_some((field, wire_type, end))
}

/// Skips a (deprecated) group to its end tag.
fn skip_group(buf: &[u8], mut at: usize, group_field: u32) -> Option<usize> {
    loop {
        let (key, after_key) = read_varint(buf, at)?;
        if key & 7 == 4 {
            return (key >> 3 == u64::from(group_field)).then_some(after_key);
        }
        at = next_field(buf, at)?.2;
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::common::v1::{
        AnyValue, InstrumentationScope, KeyValue, any_value,
    };
    use opentelemetry_proto::tonic::trace::v1::Span;
    use prost::Message;

    use super::*;

    /// Scenario: spans with and without a trace_state, and with unknown fields, get a new
    /// trace_state.
    /// Guarantees: prost decodes the result to the same span with only trace_state
    /// changed; unknown bytes survive.
    #[test]
    fn replaces_trace_state_only() {
        for old in ["", "ot=th:c;rv:0123456789abcd,vendor=x"] {
            let span = Span {
                trace_id: vec![1; 16],
                span_id: vec![2; 8],
                trace_state: old.into(),
                name: "op".into(),
                kind: 2,
                attributes: vec![KeyValue {
                    key: "k".into(),
                    key_strindex: 0,
                    value: Some(AnyValue {
                        value: Some(any_value::Value::IntValue(7)),
                    }),
                }],
                ..Default::default()
            };
            let mut encoded = span.encode_to_vec();
            encoded.extend_from_slice(&[0xf8, 0x06, 0x2a]); // unknown field 111, varint 42
            let rewritten = set_span_trace_state(&encoded, "ot=th:e666").expect("well formed");
            let decoded = Span::decode(rewritten.clone()).expect("valid span");
            assert_eq!(decoded.trace_state, "ot=th:e666");
            assert_eq!(
                Span {
                    trace_state: old.into(),
                    ..decoded
                },
                span
            );
            assert!(
                rewritten.windows(3).any(|w| w == [0xf8, 0x06, 0x2a]),
                "unknown field kept"
            );
        }
    }

    /// Scenario: spans without a trace_state, with one, with two (invalid UTF-8 in the
    /// last), among other fields, get a new trace_state by the one-walk path.
    /// Guarantees: the value read is what `span_trace_state` reads, and the bytes written
    /// are exactly those of `set_span_trace_state`; a malformed span is not read.
    #[test]
    fn one_walk_replacement_writes_what_set_span_trace_state_writes() {
        let base = Span {
            trace_id: vec![1; 16],
            span_id: vec![2; 8],
            name: "op".into(),
            kind: 2,
            ..Default::default()
        };
        let mut spans = Vec::new();
        for old in ["", "ot=th:c;rv:0123456789abcd,vendor=x"] {
            let mut encoded = Span {
                trace_state: old.into(),
                ..base.clone()
            }
            .encode_to_vec();
            encoded.extend_from_slice(&[0xf8, 0x06, 0x2a]); // unknown field 111, varint 42
            spans.push(encoded);
        }
        let mut twice = spans[1].clone();
        twice.extend_from_slice(&[0x1a, 0x03, b'a', b'=', b'b']); // a second trace_state
        spans.push(twice.clone());
        twice.extend_from_slice(&[0x1a, 0x01, 0xff]); // a third, not UTF-8
        spans.push(twice);
        // A small chunk, so that the spans fill it and a fresh one is taken.
        let mut chunk = BytesMut::with_capacity(100);
        for span in &spans {
            let field = find_span_trace_state(span).expect("well formed");
            assert_eq!(Some(field.value), span_trace_state(span).or(Some("")));
            assert_eq!(
                replace_span_trace_state(span, &field, "ot=th:e666", &mut chunk),
                set_span_trace_state(span, "ot=th:e666").expect("well formed"),
            );
        }
        assert_eq!(find_span_trace_state(&[0x1a, 0x05, b'a']), None);
    }

    /// Scenario: a scope with attributes gets the deciding policy's name.
    /// Guarantees: the original attributes stay first and the new one is appended.
    #[test]
    fn appends_scope_attribute() {
        let scope = InstrumentationScope {
            name: "lib".into(),
            version: "1".into(),
            attributes: vec![KeyValue {
                key: "a".into(),
                key_strindex: 0,
                value: None,
            }],
            dropped_attributes_count: 0,
        };
        let out = add_scope_attribute(&scope.encode_to_vec(), "tailsampling.policy", "errors");
        let decoded = InstrumentationScope::decode(out).expect("valid scope");
        assert_eq!(decoded.name, "lib");
        assert_eq!(decoded.attributes.len(), 2);
        assert_eq!(decoded.attributes[1].key, "tailsampling.policy");
        assert_eq!(
            decoded.attributes[1].value,
            Some(AnyValue {
                value: Some(any_value::Value::StringValue("errors".into()))
            })
        );
    }
}
