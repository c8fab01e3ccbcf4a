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

use super::put_varint;
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

/// Corrects the string fields of `buf` (an `ExportMetricsServiceRequest`) that are not
/// valid UTF-8, as [`correct_traces_utf8`] does for traces. Only where the metrics schema
/// has strings is looked at; whether the request is otherwise valid is left to the decode
/// that follows (a request this cannot walk comes back unchanged, to be refused there).
pub fn correct_metrics_utf8(buf: &[u8]) -> CorrectedRequest {
    let mut fixes = Vec::new();
    find_strings(buf, 0..buf.len(), Schema::MetricsRequest, 0, &mut fixes);
    let fixes: Vec<std::ops::Range<usize>> = fixes
        .into_iter()
        .filter(|range| std::str::from_utf8(&buf[range.clone()]).is_err())
        .collect();
    if fixes.is_empty() {
        return CorrectedRequest {
            request: Bytes::copy_from_slice(buf),
            strings: 0,
            first_path: String::new(),
        };
    }
    let mut out = Vec::with_capacity(buf.len() + 2 * fixes.iter().map(|r| r.len()).sum::<usize>());
    rewrite(buf, 0..buf.len(), &fixes, &mut out);
    CorrectedRequest {
        request: Bytes::from(out),
        strings: fixes.len(),
        first_path: "metrics request".to_owned(),
    }
}

/// The messages of the metrics request that hold strings, directly or below.
#[derive(Clone, Copy)]
enum Schema {
    MetricsRequest,
    ResourceMetrics,
    Resource,
    EntityRef,
    ScopeMetrics,
    Scope,
    KeyValue,
    AnyValue,
    ArrayValue,
    KeyValueList,
    Metric,
    /// Gauge, Sum, Histogram, ExponentialHistogram, Summary: data points in field 1.
    Points(Point),
    DataPoint(Point),
    Exemplar,
}

/// The kinds of data point, which keep their attributes and exemplars in different fields.
#[derive(Clone, Copy)]
enum Point {
    Number,
    Histogram,
    Exponential,
    Summary,
}

/// What a field of a message is, as far as finding strings goes.
enum Field {
    String,
    Message(Schema),
    Other,
}

impl Schema {
    fn field(self, tag: u64) -> Field {
        use Field::{Message, Other, String};
        match (self, tag) {
            (Self::MetricsRequest, 1) => Message(Self::ResourceMetrics),
            (Self::ResourceMetrics, 1) => Message(Self::Resource),
            (Self::ResourceMetrics, 2) => Message(Self::ScopeMetrics),
            (Self::ResourceMetrics | Self::ScopeMetrics, 3) => String,
            (Self::Resource, 1) | (Self::Scope, 3) => Message(Self::KeyValue),
            (Self::Resource, 3) => Message(Self::EntityRef),
            (Self::EntityRef, 1..=4) => String,
            (Self::ScopeMetrics, 1) => Message(Self::Scope),
            (Self::ScopeMetrics, 2) => Message(Self::Metric),
            (Self::Scope, 1 | 2) | (Self::KeyValue, 1) | (Self::AnyValue, 1) => String,
            (Self::KeyValue, 2) | (Self::ArrayValue, 1) => Message(Self::AnyValue),
            (Self::AnyValue, 5) => Message(Self::ArrayValue),
            (Self::AnyValue, 6) => Message(Self::KeyValueList),
            (Self::KeyValueList, 1) | (Self::Metric, 12) => Message(Self::KeyValue),
            (Self::Metric, 1..=3) => String,
            (Self::Metric, 5 | 7) => Message(Self::Points(Point::Number)),
            (Self::Metric, 9) => Message(Self::Points(Point::Histogram)),
            (Self::Metric, 10) => Message(Self::Points(Point::Exponential)),
            (Self::Metric, 11) => Message(Self::Points(Point::Summary)),
            (Self::Points(point), 1) => Message(Self::DataPoint(point)),
            (Self::DataPoint(Point::Number | Point::Summary), 7)
            | (Self::DataPoint(Point::Histogram), 9)
            | (Self::DataPoint(Point::Exponential), 1)
            | (Self::Exemplar, 7) => Message(Self::KeyValue),
            (Self::DataPoint(Point::Number), 5)
            | (Self::DataPoint(Point::Histogram), 8)
            | (Self::DataPoint(Point::Exponential), 11) => Message(Self::Exemplar),
            _ => Other,
        }
    }
}

/// Collects the ranges of the string fields of the `schema` message `buf[range]`, as far
/// as the bytes can be walked (deeper than prost's recursion limit is not looked at: the
/// decode refuses it).
fn find_strings(
    buf: &[u8],
    range: std::ops::Range<usize>,
    schema: Schema,
    depth: u32,
    out: &mut Vec<std::ops::Range<usize>>,
) {
    if depth > 100 {
        return;
    }
    let mut pos = range.start;
    while pos < range.end {
        let key = varint(buf, &mut pos);
        if key & 7 != LEN {
            skip_value(buf, &mut pos, key & 7);
            continue;
        }
        let len = usize::try_from(varint(buf, &mut pos)).unwrap_or(usize::MAX);
        let Some(end) = pos.checked_add(len).filter(|end| *end <= range.end) else {
            return;
        };
        match schema.field(key >> 3) {
            Field::String => out.push(pos..end),
            Field::Message(inner) => find_strings(buf, pos..end, inner, depth + 1, out),
            Field::Other => {}
        }
        pos = end;
    }
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

/// Moves `*pos` past the field whose key (of `wire_type`) was just read; groups nested
/// deeper than prost's recursion limit are left unfinished (prost refuses them anyway).
fn skip_value(buf: &[u8], pos: &mut usize, wire_type: u64) {
    skip_nested(buf, pos, wire_type, 0);
}

fn skip_nested(buf: &[u8], pos: &mut usize, wire_type: u64, depth: u32) {
    if depth > 100 {
        return;
    }
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
            skip_nested(buf, pos, key & 7, depth + 1);
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

    /// Scenario: a metrics request whose metric name, data point attribute value, exemplar
    /// attribute key and resource attribute are invalid UTF-8; a metrics request that is
    /// truncated.
    /// Guarantees: the correction finds the four strings, and the corrected request decodes
    /// with prost to the template with each bad string replaced by its lossy decoding; the
    /// truncated one has nothing to correct.
    #[test]
    fn metrics_strings_are_corrected_where_the_schema_has_strings() {
        use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
        use opentelemetry_proto::tonic::metrics::v1::{
            Exemplar, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, metric,
        };
        let template = |mark: &str| ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: vec![KeyValue {
                        key: "host".into(),
                        value: string(mark),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![Metric {
                        name: mark.into(),
                        unit: "s".into(),
                        data: Some(metric::Data::Gauge(Gauge {
                            data_points: vec![NumberDataPoint {
                                attributes: vec![KeyValue {
                                    key: "path".into(),
                                    value: string(mark),
                                    ..Default::default()
                                }],
                                exemplars: vec![Exemplar {
                                    filtered_attributes: vec![KeyValue {
                                        key: mark.into(),
                                        value: string("v"),
                                        ..Default::default()
                                    }],
                                    span_id: vec![0xff; 8],
                                    trace_id: vec![0xfe; 16],
                                    ..Default::default()
                                }],
                                time_unix_nano: 7,
                                ..Default::default()
                            }],
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let bad: &[u8] = b"\x80A\xe2\x82\xc0\xaf";
        let encoded = inject(&template(MARK).encode_to_vec(), bad);
        assert!(ExportMetricsServiceRequest::decode(&encoded[..]).is_err());
        let corrected = super::correct_metrics_utf8(&encoded);
        assert_eq!(corrected.strings, 4);
        let lossy = String::from_utf8_lossy(bad).into_owned();
        let decoded =
            ExportMetricsServiceRequest::decode(&corrected.request[..]).expect("valid now");
        assert_eq!(decoded, template(&lossy));
        let truncated = &template("ok").encode_to_vec()[..20];
        assert_eq!(super::correct_metrics_utf8(truncated).strings, 0);
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
