//! Correcting invalid UTF-8 in the string fields of a trace request.
//!
//! A protobuf `string` must be UTF-8, and prost refuses a message whose strings are not;
//! so does the wire reader. Senders written in C and other languages without UTF-8 strings
//! do send such bytes (an attribute value copied from a C library, say). Refusing the whole
//! request would lose every good span batched with the bad string, and forwarding the bytes
//! unchanged makes a strict decoder downstream refuse the whole outgoing batch. OpenTelemetry
//! has been converging on correcting them (opentelemetry-specification#3421): each invalid
//! sequence becomes U+FFFD, as [`String::from_utf8_lossy`] does.
//!
//! The correction is the rare path: a request is first walked strictly, and only when that
//! walk fails with [`WireErrorKind::InvalidUtf8`](super::WireErrorKind::InvalidUtf8) is it
//! walked again collecting every invalid string, then rewritten: the invalid strings are
//! replaced, and the length prefix of every message that encloses one is recomputed; every
//! other byte is copied as it was, unknown fields included.

use bytes::Bytes;

use super::wire::{self, InvalidString, WireError};

/// A request whose invalid UTF-8 strings were corrected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorrectedRequest {
    /// The request with each invalid sequence replaced by U+FFFD.
    pub request: Bytes,
    /// How many string fields were corrected.
    pub strings: usize,
    /// The field path of the first one (for the log).
    pub first_path: String,
}

/// Corrects the string fields of `buf` (an `ExportTraceServiceRequest`) that are not valid
/// UTF-8. With none, the request comes back unchanged with `strings` 0.
///
/// # Errors
///
/// The wire reader's error for any other problem in `buf` (it is refused as before).
pub fn correct_traces_utf8(buf: &[u8]) -> Result<CorrectedRequest, WireError> {
    let found: Vec<InvalidString> = wire::find_invalid_utf8(buf)?;
    let Some((_, first_path)) = found.first() else {
        return Ok(CorrectedRequest {
            request: Bytes::copy_from_slice(buf),
            strings: 0,
            first_path: String::new(),
        });
    };
    let first_path = first_path.clone();
    let fixes: Vec<std::ops::Range<usize>> = found.iter().map(|(range, _)| range.clone()).collect();
    let mut out = Vec::with_capacity(buf.len() + 2 * fixes.iter().map(|r| r.len()).sum::<usize>());
    rewrite(buf, 0..buf.len(), &fixes, &mut out);
    Ok(CorrectedRequest {
        request: Bytes::from(out),
        strings: fixes.len(),
        first_path,
    })
}

const VARINT: u64 = 0;
const I64: u64 = 1;
const LEN: u64 = 2;
const SGROUP: u64 = 3;
const EGROUP: u64 = 4;
const I32: u64 = 5;

/// Reads a varint at `*pos` (the request was validated: it is well formed).
fn varint(buf: &[u8], pos: &mut usize) -> u64 {
    let mut value = 0u64;
    for shift in (0..70).step_by(7) {
        let Some(&byte) = buf.get(*pos) else {
            break;
        };
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift.min(63);
        if byte < 0x80 {
            break;
        }
    }
    value
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Moves `*pos` past the field whose key (of `wire_type`) was just read.
fn skip_value(buf: &[u8], pos: &mut usize, wire_type: u64) {
    match wire_type {
        VARINT => {
            varint(buf, pos);
        }
        I64 => *pos += 8,
        I32 => *pos += 4,
        LEN => {
            let len = varint(buf, pos);
            *pos += usize::try_from(len).unwrap_or(usize::MAX - *pos);
        }
        SGROUP => loop {
            if *pos >= buf.len() {
                return;
            }
            let key = varint(buf, pos);
            if key & 7 == EGROUP {
                return;
            }
            skip_value(buf, pos, key & 7);
        },
        _ => {}
    }
}

/// Copies the message `buf[range]` into `out`, replacing each string in `fixes` (ranges of
/// string contents, sorted, all inside `range`) by its corrected text and recomputing the
/// length prefix of every length-delimited field that encloses one. A field that encloses
/// a fix without being it is a nested message: fixes are found only by walking messages.
fn rewrite(
    buf: &[u8],
    range: std::ops::Range<usize>,
    fixes: &[std::ops::Range<usize>],
    out: &mut Vec<u8>,
) {
    let mut pos = range.start;
    while pos < range.end {
        let field_start = pos;
        let key = varint(buf, &mut pos);
        if key & 7 != LEN {
            skip_value(buf, &mut pos, key & 7);
            out.extend_from_slice(&buf[field_start..pos.min(range.end)]);
            continue;
        }
        let key_end = pos;
        let len = usize::try_from(varint(buf, &mut pos)).unwrap_or(usize::MAX);
        let content = pos..pos.saturating_add(len).min(range.end);
        pos = content.end;
        let inside: &[std::ops::Range<usize>] = {
            let first = fixes.partition_point(|f| f.start < content.start);
            let last = fixes.partition_point(|f| f.start < content.end);
            &fixes[first..last]
        };
        match inside {
            [] => out.extend_from_slice(&buf[field_start..content.end]),
            [only] if *only == content => {
                let corrected = String::from_utf8_lossy(&buf[content]);
                out.extend_from_slice(&buf[field_start..key_end]);
                put_varint(out, corrected.len() as u64);
                out.extend_from_slice(corrected.as_bytes());
            }
            nested => {
                let mut body = Vec::with_capacity(content.len() + 2 * nested.len());
                rewrite(buf, content, nested, &mut body);
                out.extend_from_slice(&buf[field_start..key_end]);
                put_varint(out, body.len() as u64);
                out.extend_from_slice(&body);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{
        AnyValue, ArrayValue, InstrumentationScope, KeyValue, any_value,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use prost::Message;

    use super::correct_traces_utf8;
    use crate::otlp::{WireErrorKind, count_spans};

    /// Marker bytes a string field carries in the template request, replaced afterwards by
    /// invalid UTF-8 of the same length (so that the prost encoding stays valid framing).
    const MARK: &str = "\u{1}MARK\u{1}";

    fn string(value: &str) -> Option<AnyValue> {
        Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        })
    }

    /// A request with `MARK` in a span name, an attribute value, a value nested in an array,
    /// a resource attribute and a scope name, and other fields (ids, numbers, an unknown
    /// field's worth of bytes in a bytes value) around them.
    fn template(mark: &str) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![KeyValue {
                        key: "host".into(),
                        value: string(mark),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: mark.into(),
                        version: "1.0".into(),
                        ..Default::default()
                    }),
                    spans: vec![
                        Span {
                            trace_id: vec![1; 16],
                            span_id: vec![2; 8],
                            name: mark.into(),
                            start_time_unix_nano: 5,
                            attributes: vec![
                                KeyValue {
                                    key: "db.statement".into(),
                                    value: string(mark),
                                    ..Default::default()
                                },
                                KeyValue {
                                    key: "list".into(),
                                    value: Some(AnyValue {
                                        value: Some(any_value::Value::ArrayValue(ArrayValue {
                                            values: vec![
                                                string("ok").unwrap(),
                                                string(mark).unwrap(),
                                            ],
                                        })),
                                    }),
                                    ..Default::default()
                                },
                                KeyValue {
                                    key: "raw".into(),
                                    value: Some(AnyValue {
                                        value: Some(any_value::Value::BytesValue(vec![0xff, 0xfe])),
                                    }),
                                    ..Default::default()
                                },
                            ],
                            ..Default::default()
                        },
                        Span {
                            trace_id: vec![1; 16],
                            span_id: vec![3; 8],
                            name: "fine".into(),
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    /// Replaces every occurrence of `MARK`'s bytes in `encoded` by `bad` (same length).
    fn inject(encoded: &[u8], bad: &[u8]) -> Vec<u8> {
        assert_eq!(bad.len(), MARK.len());
        let mut out = encoded.to_vec();
        let mut at = 0;
        while let Some(found) = out[at..]
            .windows(MARK.len())
            .position(|w| w == MARK.as_bytes())
        {
            let start = at + found;
            out[start..start + MARK.len()].copy_from_slice(bad);
            at = start + MARK.len();
        }
        out
    }

    /// Scenario: a request whose span name, attribute value, array element, resource
    /// attribute and scope name are invalid UTF-8 (a lone continuation byte, a truncated
    /// sequence, an overlong encoding), next to valid strings, a bytes value and ids.
    /// Guarantees: the strict walk refuses it as invalid UTF-8; the correction counts five
    /// strings, names the first one's path, and yields a request that prost decodes to
    /// exactly the template with each bad string replaced by its lossy decoding (U+FFFD
    /// where the bad bytes were), every other field equal; a valid request comes back
    /// unchanged with nothing counted.
    #[test]
    fn invalid_strings_become_replacement_characters_and_nothing_else_changes() {
        let bad: &[u8] = b"\x80A\xe2\x82\xc0\xaf";
        assert_eq!(bad.len(), MARK.len());
        let encoded = inject(&template(MARK).encode_to_vec(), bad);
        assert_eq!(
            count_spans(&encoded).map_err(|e| e.kind().clone()),
            Err(WireErrorKind::InvalidUtf8)
        );

        let corrected = correct_traces_utf8(&encoded).expect("otherwise valid");
        assert_eq!(corrected.strings, 5);
        assert_eq!(
            corrected.first_path,
            "resource_spans[0].resource.attributes[0].value.string_value"
        );
        let lossy = String::from_utf8_lossy(bad).into_owned();
        assert!(lossy.contains('\u{fffd}'));
        let decoded = ExportTraceServiceRequest::decode(&corrected.request[..]).expect("valid now");
        assert_eq!(decoded, template(&lossy));
        assert_eq!(count_spans(&corrected.request), Ok(2));

        let valid = template("fine").encode_to_vec();
        let unchanged = correct_traces_utf8(&valid).expect("valid");
        assert_eq!(unchanged.strings, 0);
        assert_eq!(&unchanged.request[..], &valid[..]);
    }

    /// Scenario: a request with invalid UTF-8 in a span name and also a 15-byte trace id.
    /// Guarantees: the correction does not hide the other problem: it is refused with the
    /// id error.
    #[test]
    fn other_problems_are_still_refused() {
        let mut request = template(MARK);
        request.resource_spans[0].scope_spans[0].spans[1].trace_id = vec![1; 15];
        let encoded = inject(&request.encode_to_vec(), b"\x80A\xe2\x82\xc0\xaf");
        let error = correct_traces_utf8(&encoded).expect_err("bad id");
        assert!(
            matches!(error.kind(), WireErrorKind::InvalidIdLength { .. }),
            "{error}"
        );
    }
}
