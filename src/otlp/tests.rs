//! Property and example tests of the wire reader, the framer and the JSON transcoder,
//! with prost as the oracle.

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList, any_value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event, Link};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use proptest::prelude::*;
use prost::Message;
use serde_json::{Value, json};

use super::*;

// ---------------------------------------------------------------------------------------
// Strategies: arbitrary valid requests.

fn text() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[a-z.]{1,8}", "\\PC{0,6}"]
}

fn id(len: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![1 => Just(Vec::new()), 4 => prop::collection::vec(any::<u8>(), len)]
}

fn any_value() -> impl Strategy<Value = AnyValue> {
    use any_value::Value as V;
    let leaf = prop_oneof![
        text().prop_map(V::StringValue),
        any::<bool>().prop_map(V::BoolValue),
        any::<i64>().prop_map(V::IntValue),
        // Quarters of integers: exact in JSON, never NaN or -0.0 (which compare oddly).
        any::<i32>().prop_map(|i| V::DoubleValue(f64::from(i) / 4.0)),
        prop::collection::vec(any::<u8>(), 0..6).prop_map(V::BytesValue),
        (0..100i32).prop_map(V::StringValueStrindex),
    ];
    let leaf = prop::option::weighted(0.9, leaf).prop_map(|value| AnyValue { value });
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(|values| AnyValue {
                value: Some(V::ArrayValue(ArrayValue { values })),
            }),
            prop::collection::vec(
                (text(), prop::option::of(inner)).prop_map(|(key, value)| KeyValue {
                    key,
                    value,
                    key_strindex: 0,
                }),
                0..3
            )
            .prop_map(|values| AnyValue {
                value: Some(V::KvlistValue(KeyValueList { values })),
            }),
        ]
    })
}

fn attributes() -> impl Strategy<Value = Vec<KeyValue>> {
    prop::collection::vec(
        (text(), prop::option::weighted(0.9, any_value()), 0..3i32).prop_map(
            |(key, value, key_strindex)| KeyValue {
                key,
                value,
                key_strindex,
            },
        ),
        0..4,
    )
}

fn resource() -> impl Strategy<Value = Option<Resource>> {
    let entity = (
        text(),
        text(),
        prop::collection::vec(text(), 0..2),
        prop::collection::vec(text(), 0..2),
    )
        .prop_map(
            |(schema_url, r#type, id_keys, description_keys)| EntityRef {
                schema_url,
                r#type,
                id_keys,
                description_keys,
            },
        );
    let some = (attributes(), 0..3u32, prop::collection::vec(entity, 0..2)).prop_map(
        |(attributes, dropped_attributes_count, entity_refs)| Resource {
            attributes,
            dropped_attributes_count,
            entity_refs,
        },
    );
    // Absent and empty resources are frequent so that consecutive groups often share one.
    prop_oneof![
        2 => Just(None),
        1 => Just(Some(Resource::default())),
        3 => some.prop_map(Some),
    ]
}

fn scope() -> impl Strategy<Value = Option<InstrumentationScope>> {
    let some = (text(), text(), attributes(), 0..3u32).prop_map(
        |(name, version, attributes, dropped_attributes_count)| InstrumentationScope {
            name,
            version,
            attributes,
            dropped_attributes_count,
        },
    );
    prop_oneof![
        2 => Just(None),
        1 => Just(Some(InstrumentationScope::default())),
        3 => some.prop_map(Some),
    ]
}

fn span() -> impl Strategy<Value = Span> {
    let event = (any::<u64>(), text(), attributes(), 0..3u32).prop_map(
        |(time_unix_nano, name, attributes, dropped_attributes_count)| Event {
            time_unix_nano,
            name,
            attributes,
            dropped_attributes_count,
        },
    );
    let link = (id(16), id(8), text(), attributes(), 0..3u32, any::<u32>()).prop_map(
        |(trace_id, span_id, trace_state, attributes, dropped_attributes_count, flags)| Link {
            trace_id,
            span_id,
            trace_state,
            attributes,
            dropped_attributes_count,
            flags,
        },
    );
    let status =
        prop::option::of((text(), 0..3i32).prop_map(|(message, code)| Status { message, code }));
    (
        (id(16), id(8), text(), id(8), any::<u32>(), text(), -1..7i32),
        (any::<u64>(), any::<u64>(), attributes(), 0..3u32),
        (prop::collection::vec(event, 0..3), 0..3u32),
        (prop::collection::vec(link, 0..3), 0..3u32, status),
    )
        .prop_map(
            |(
                (trace_id, span_id, trace_state, parent_span_id, flags, name, kind),
                (start_time_unix_nano, end_time_unix_nano, attributes, dropped_attributes_count),
                (events, dropped_events_count),
                (links, dropped_links_count, status),
            )| Span {
                trace_id,
                span_id,
                trace_state,
                parent_span_id,
                flags,
                name,
                kind,
                start_time_unix_nano,
                end_time_unix_nano,
                attributes,
                dropped_attributes_count,
                events,
                dropped_events_count,
                links,
                dropped_links_count,
                status,
            },
        )
}

fn request() -> impl Strategy<Value = ExportTraceServiceRequest> {
    let scope_spans = (scope(), prop::collection::vec(span(), 0..4), text()).prop_map(
        |(scope, spans, schema_url)| ScopeSpans {
            scope,
            spans,
            schema_url,
        },
    );
    let resource_spans = (
        resource(),
        prop::collection::vec(scope_spans, 0..4),
        prop_oneof![Just(String::new()), text()],
    )
        .prop_map(|(resource, scope_spans, schema_url)| ResourceSpans {
            resource,
            scope_spans,
            schema_url,
        });
    prop::collection::vec(resource_spans, 0..6)
        .prop_map(|resource_spans| ExportTraceServiceRequest { resource_spans })
}

// ---------------------------------------------------------------------------------------
// Oracles.

/// A span with the resource and scope it belongs to (absent normalized to empty).
type Triple = (Resource, String, InstrumentationScope, String, Span);

fn triples(req: &ExportTraceServiceRequest) -> Vec<Triple> {
    let mut out = Vec::new();
    for rs in &req.resource_spans {
        for ss in &rs.scope_spans {
            for span in &ss.spans {
                out.push((
                    rs.resource.clone().unwrap_or_default(),
                    rs.schema_url.clone(),
                    ss.scope.clone().unwrap_or_default(),
                    ss.schema_url.clone(),
                    span.clone(),
                ));
            }
        }
    }
    out
}

/// The request the writer must produce for these triples: consecutive spans sharing a
/// resource and then a scope grouped, empty resource and scope absent.
fn regroup(triples: &[Triple]) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: triples
            .chunk_by(|a, b| (&a.0, &a.1) == (&b.0, &b.1))
            .map(|rs| ResourceSpans {
                resource: Some(rs[0].0.clone()).filter(|r| *r != Resource::default()),
                schema_url: rs[0].1.clone(),
                scope_spans: rs
                    .chunk_by(|a, b| (&a.2, &a.3) == (&b.2, &b.3))
                    .map(|ss| ScopeSpans {
                        scope: Some(ss[0].2.clone())
                            .filter(|s| *s != InstrumentationScope::default()),
                        schema_url: ss[0].3.clone(),
                        spans: ss.iter().map(|t| t.4.clone()).collect(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

fn ids_valid(req: &ExportTraceServiceRequest) -> bool {
    let ok = |id: &[u8], n: usize| id.is_empty() || id.len() == n;
    req.resource_spans.iter().all(|rs| {
        rs.scope_spans.iter().all(|ss| {
            ss.spans.iter().all(|s| {
                ok(&s.trace_id, 16)
                    && ok(&s.span_id, 8)
                    && ok(&s.parent_span_id, 8)
                    && s.links
                        .iter()
                        .all(|l| ok(&l.trace_id, 16) && ok(&l.span_id, 8))
            })
        })
    })
}

/// What the wire reader must do on `b`: `Some(span count)` iff prost accepts it and all
/// ids have valid lengths.
fn oracle(b: &[u8]) -> Option<usize> {
    let req = ExportTraceServiceRequest::decode(b).ok()?;
    ids_valid(&req).then(|| triples(&req).len())
}

/// Parses, then writes every span back with one writer.
fn reframe(b: &Bytes) -> FramedRequest {
    let mut w = TraceRequestWriter::new();
    for rs in parse_traces_request(b).expect("valid request") {
        for ss in &rs.scope_spans {
            for span in &ss.spans {
                w.push_view(&rs, ss, span);
            }
        }
    }
    w.finish()
}

fn decode(b: &[u8]) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest::decode(b).expect("prost decodes")
}

// ---------------------------------------------------------------------------------------
// Hand-built wire bytes.

fn varint(mut n: u64, out: &mut Vec<u8>) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn key(tag: u32, wire_type: u8) -> Vec<u8> {
    let mut out = Vec::new();
    varint((u64::from(tag) << 3) | u64::from(wire_type), &mut out);
    out
}

fn ld(tag: u32, body: &[u8]) -> Vec<u8> {
    let mut out = key(tag, 2);
    varint(body.len() as u64, &mut out);
    out.extend_from_slice(body);
    out
}

/// A request with exactly one resource spans / scope spans / span holding `span`.
fn wrap_span(span: &[u8]) -> Vec<u8> {
    ld(1, &ld(2, &ld(2, span)))
}

fn assert_agrees(b: &[u8]) {
    let want = oracle(b);
    let got = count_spans(b);
    assert_eq!(got.as_ref().ok().copied(), want, "count_spans: {got:?}");
    let bytes = Bytes::copy_from_slice(b);
    let parsed = parse_traces_request(&bytes);
    if let Ok(views) = &parsed {
        assert_eq!(skim_traces_request(&bytes).as_ref(), Some(views), "skim");
    }
    assert_eq!(
        parsed.as_ref().ok().map(|v| v
            .iter()
            .flat_map(|rs| &rs.scope_spans)
            .map(|ss| ss.spans.len())
            .sum()),
        want,
        "parse: {:?}",
        parsed.err()
    );
}

// ---------------------------------------------------------------------------------------
// Reader + writer round trips.

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Scenario: an arbitrary valid request (many resources, empty scopes, every AnyValue
    /// kind with nesting, events, links, status, trace state, flags) is encoded by prost,
    /// parsed, and every span written back with one TraceRequestWriter.
    /// Guarantees: prost decodes the output to the input's (resource, scope, span) triples
    /// in order; the output is byte-for-byte prost's encoding of the canonical regrouping
    /// (so it is exactly the input whenever the grouping is unchanged); encoded_len and the
    /// span count are exact; the views carry the span's fields; skim_traces_request reads
    /// the same views.
    #[test]
    fn reframe_roundtrip(req in request()) {
        let input = Bytes::from(req.encode_to_vec());
        let views = parse_traces_request(&input).expect("parse");
        prop_assert_eq!(skim_traces_request(&input), Some(views.clone()));
        let flat = triples(&req);
        prop_assert_eq!(count_spans(&input).expect("count"), flat.len());

        let spans: Vec<&SpanView> =
            views.iter().flat_map(|rs| &rs.scope_spans).flat_map(|ss| &ss.spans).collect();
        prop_assert_eq!(spans.len(), flat.len());
        for (view, (.., span)) in spans.iter().zip(&flat) {
            prop_assert_eq!(&view.bytes[..], &span.encode_to_vec()[..]);
            prop_assert_eq!(&view.trace_id.0[..], if span.trace_id.is_empty() { &[0; 16][..] } else { &span.trace_id[..] });
            prop_assert_eq!(&view.span_id.0[..], if span.span_id.is_empty() { &[0; 8][..] } else { &span.span_id[..] });
            prop_assert_eq!(view.parent_span_id.map(|p| p.0.to_vec()), Some(span.parent_span_id.clone()).filter(|p| !p.is_empty()));
            prop_assert_eq!(&view.name[..], span.name.as_bytes());
            prop_assert_eq!(&view.trace_state[..], span.trace_state.as_bytes());
            prop_assert_eq!(view.kind, span.kind);
            prop_assert_eq!(view.flags, span.flags);
            prop_assert_eq!(view.start_time_unix_nano, span.start_time_unix_nano);
            prop_assert_eq!(view.end_time_unix_nano, span.end_time_unix_nano);
            prop_assert_eq!(view.status_code, span.status.as_ref().map_or(0, |s| s.code));
            // Zero-copy: the span bytes point into the input buffer.
            let base = input.as_ptr() as usize;
            let p = view.bytes.as_ptr() as usize;
            prop_assert!(view.bytes.is_empty() || (p >= base && p + view.bytes.len() <= base + input.len()));
        }

        let out = reframe(&input);
        prop_assert_eq!(out.span_count, flat.len());
        let canonical = regroup(&flat);
        prop_assert_eq!(&out.request[..], &canonical.encode_to_vec()[..]);
        let decoded = decode(&out.request);
        prop_assert_eq!(triples(&decoded), flat);
        prop_assert_eq!(&decoded, &canonical);
    }

    /// Scenario: a valid request is cut by split_batch with random span and byte limits.
    /// Guarantees: the pieces' spans, concatenated, are the input's triples in order; every
    /// piece's span_count is exact and within max_spans, and its length within max_bytes
    /// unless it holds a single span; a request that fits comes back as the same buffer.
    #[test]
    fn split_preserves_spans_and_limits(
        req in request(),
        max_spans in prop::option::of(1..8usize),
        max_bytes in 0..1500usize,
    ) {
        let input = Bytes::from(req.encode_to_vec());
        let flat = triples(&req);
        let pieces = split_batch(&input, flat.len(), max_spans, max_bytes).expect("split");
        let fits = flat.len() <= max_spans.unwrap_or(usize::MAX) && input.len() <= max_bytes;
        if fits {
            prop_assert_eq!(pieces.len(), 1);
            prop_assert_eq!(pieces[0].request.as_ptr(), input.as_ptr());
            prop_assert_eq!(pieces[0].request.len(), input.len());
        } else {
            let mut all = Vec::new();
            for piece in &pieces {
                let decoded = decode(&piece.request);
                let t = triples(&decoded);
                prop_assert_eq!(piece.span_count, t.len());
                prop_assert!(piece.span_count >= 1);
                prop_assert!(piece.span_count <= max_spans.unwrap_or(usize::MAX));
                prop_assert!(piece.byte_len() <= max_bytes || piece.span_count == 1,
                    "piece of {} bytes, {} spans, limit {}", piece.byte_len(), piece.span_count, max_bytes);
                all.extend(t);
            }
            prop_assert_eq!(all, flat);
        }
    }

    /// Scenario: spans are pushed one by one into a writer.
    /// Guarantees: encoded_len_if_pushed predicts encoded_len after each push exactly, and
    /// encoded_len is the finished length.
    #[test]
    fn writer_length_is_exact(req in request()) {
        let input = Bytes::from(req.encode_to_vec());
        let mut w = TraceRequestWriter::new();
        for rs in parse_traces_request(&input).expect("parse") {
            for ss in &rs.scope_spans {
                for span in &ss.spans {
                    let predicted = w.encoded_len_if_pushed(
                        &rs.resource, &rs.schema_url, &ss.scope, &ss.schema_url, &span.bytes);
                    w.push_view(&rs, ss, span);
                    prop_assert_eq!(w.encoded_len(), predicted);
                }
            }
        }
        let len = w.encoded_len();
        prop_assert_eq!(w.finish().byte_len(), len);
    }
}

// ---------------------------------------------------------------------------------------
// Prost equivalence on malformed input.

#[derive(Debug, Clone)]
enum Mutation {
    Truncate(usize),
    Flip(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
}

fn mutate(mut b: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let n = b.len().max(1);
        match m {
            Mutation::Truncate(at) => b.truncate(at % n),
            Mutation::Flip(at, mask) => {
                if !b.is_empty() {
                    let i = at % b.len();
                    b[i] ^= mask;
                }
            }
            Mutation::Insert(at, bytes) => {
                let i = at % (b.len() + 1);
                b.splice(i..i, bytes.iter().copied());
            }
            Mutation::Delete(at, len) => {
                let i = at % n;
                let end = (i + len).min(b.len());
                if i < end {
                    b.drain(i..end);
                }
            }
        }
    }
    b
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        1 => any::<usize>().prop_map(Mutation::Truncate),
        4 => (any::<usize>(), 1..=255u8).prop_map(|(a, m)| Mutation::Flip(a, m)),
        2 => (any::<usize>(), prop::collection::vec(any::<u8>(), 1..4))
            .prop_map(|(a, b)| Mutation::Insert(a, b)),
        1 => (any::<usize>(), 1..4usize).prop_map(|(a, l)| Mutation::Delete(a, l)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Scenario: a valid encoding is damaged by truncation, byte flips, insertions and
    /// deletions.
    /// Guarantees: count_spans and parse_traces_request accept exactly when prost decodes
    /// and all ids have valid lengths, and then count the spans prost sees; whatever
    /// parse_traces_request accepts, skim_traces_request reads to the same views.
    #[test]
    fn accepts_exactly_what_prost_accepts(
        req in request(),
        mutations in prop::collection::vec(mutation(), 1..3),
    ) {
        let b = Bytes::from(mutate(req.encode_to_vec(), &mutations));
        let want = oracle(&b);
        prop_assert_eq!(count_spans(&b).ok(), want);
        let parsed = parse_traces_request(&b);
        // What the validating walk accepts, the skim reads to the same views.
        if let Ok(views) = &parsed {
            prop_assert_eq!(skim_traces_request(&b), Some(views.clone()));
        }
        prop_assert_eq!(
            parsed.ok().map(|v| v.iter().flat_map(|rs| &rs.scope_spans).map(|ss| ss.spans.len()).sum::<usize>()),
            want
        );
    }

    /// Scenario: random bytes, not derived from a valid request.
    /// Guarantees: the reader agrees with prost and never panics.
    #[test]
    fn random_bytes_agree_with_prost(b in prop::collection::vec(any::<u8>(), 0..64)) {
        prop_assert_eq!(count_spans(&b).ok(), oracle(&b));
    }
}

/// Scenario: hand-picked malformations at every level: wrong wire types of known fields,
/// invalid UTF-8, overlong varints, field number 0, wire types 6 and 7, stray end-group,
/// unknown fields of every wire type including groups, and lengths past the end.
/// Guarantees: the reader agrees with prost on each.
#[test]
fn handpicked_cases_agree_with_prost() {
    let mut cases: Vec<Vec<u8>> = vec![
        vec![],
        wrap_span(&[]),
        // name (5) as varint; kind (6) as length-delimited; start (7) as fixed32.
        wrap_span(&[0x28, 0x01]),
        wrap_span(&ld(6, b"x")),
        wrap_span(&[0x3d, 0, 0, 0, 0]),
        // name with invalid UTF-8; bytes field (trace_id) with the same is fine.
        wrap_span(&ld(5, &[0xff, 0xfe])),
        wrap_span(&ld(1, &[0xff; 16])),
        // Overlong varint in an unknown field; 10-byte max value; field 0; wire types 6/7.
        wrap_span(&[
            0xf8, 0x06, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00,
        ]),
        wrap_span(&[
            0xf8, 0x06, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ]),
        wrap_span(&[
            0xf8, 0x06, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
        ]),
        wrap_span(&[0x00, 0x01]),
        wrap_span(&[0xfe, 0x06]),
        wrap_span(&[0xff, 0x06]),
        // A key larger than u32.
        wrap_span(&[0xf8, 0xff, 0xff, 0xff, 0xff, 0x01, 0x00]),
        // Stray end group; a group with matching and mismatched end; nested groups.
        wrap_span(&[0xfc, 0x06]),
        wrap_span(&[0xfb, 0x06, 0x08, 0x01, 0xfc, 0x06]),
        wrap_span(&[0xfb, 0x06, 0x08, 0x01, 0x0c]),
        wrap_span(&[0xfb, 0x06, 0x0b, 0x10, 0x01, 0x0c, 0xfc, 0x06]),
        wrap_span(&[0xfb, 0x06, 0x08, 0x01]),
        // Unknown fixed64 / fixed32 fields, complete and truncated.
        wrap_span(&[0xf9, 0x06, 1, 2, 3, 4, 5, 6, 7, 8]),
        wrap_span(&[0xf9, 0x06, 1, 2, 3]),
        wrap_span(&[0xfd, 0x06, 1, 2, 3, 4]),
        // A known group-typed key for a message field.
        wrap_span(&[0x4b, 0x4c]),
        // Unknown fields at the request, resource spans and scope spans levels.
        [ld(9, b"junk"), wrap_span(&[])].concat(),
        ld(1, &[ld(7, b"x"), ld(2, &[0x08, 0x01])].concat()),
        // Length past the end of the enclosing message but within the buffer.
        [vec![0x0a, 0x02, 0x12, 0x05], vec![0; 8]].concat(),
        // Status code as fixed64; attribute value as string; AnyValue double as varint.
        wrap_span(&ld(15, &[0x19, 0, 0, 0, 0, 0, 0, 0, 0])),
        wrap_span(&ld(9, &ld(2, &[0x21, 0x01]))),
        wrap_span(&ld(9, &ld(2, &[0x20, 0x01]))),
        // Resource with a non-UTF-8 entity ref key; scope with a bad name.
        ld(1, &ld(1, &ld(3, &ld(3, &[0xc0])))),
        ld(1, &ld(2, &ld(1, &ld(1, &[0xc0])))),
    ];
    // Each also in truncated forms.
    let truncated: Vec<Vec<u8>> = cases
        .iter()
        .flat_map(|c| (0..c.len()).map(move |n| c[..n].to_vec()))
        .collect();
    cases.extend(truncated);
    for case in &cases {
        assert_agrees(case);
    }
}

/// Builds AnyValue nesting `levels` arrays deep, each holding the next one.
fn nested_any_value(levels: usize, leaf: &[u8]) -> Vec<u8> {
    let mut v = leaf.to_vec();
    for _ in 0..levels {
        // AnyValue { array_value: ArrayValue { values: [v] } }
        v = ld(5, &ld(1, &v));
    }
    v
}

/// Scenario: attributes nested ever deeper around prost's recursion limit of 100, with and
/// without an unknown field or group at the innermost level.
/// Guarantees: the reader accepts and rejects at exactly the depth prost does.
#[test]
fn recursion_limit_matches_prost() {
    let mut saw_reject = false;
    let mut saw_accept = false;
    for levels in 40..=52 {
        for leaf in [
            vec![],
            vec![0x10, 0x01],
            vec![0xf8, 0x06, 0x01],
            vec![0xfb, 0x06, 0xfc, 0x06],
            vec![0xfb, 0x06, 0x0b, 0x0c, 0xfc, 0x06],
        ] {
            let kv = ld(2, &nested_any_value(levels, &leaf));
            let b = wrap_span(&ld(9, &kv));
            assert_agrees(&b);
            if oracle(&b).is_some() {
                saw_accept = true;
            } else {
                saw_reject = true;
                let e = count_spans(&b).expect_err("too deep");
                assert_eq!(e.kind(), &WireErrorKind::RecursionLimit, "{e}");
            }
        }
    }
    assert!(saw_accept && saw_reject);
    // Groups nested deep enough hit the limit on their own.
    let mut group = Vec::new();
    for _ in 0..120 {
        group.extend(key(99, 3));
    }
    for _ in 0..120 {
        group.extend(key(99, 4));
    }
    assert_agrees(&wrap_span(&group));
    assert!(count_spans(&wrap_span(&group)).is_err());
}

/// Scenario: an attribute value nested 100,000 arrays deep, refused as too deep; a
/// malformed-request refusal carrying a 5,000-byte detail.
/// Guarantees: the error's path shows its first and last segments around the count left
/// out, so the message stays under 300 bytes; a refusal's message (what the answer and the
/// log carry) is cut to 512 bytes of detail, saying how much was cut.
#[test]
fn error_messages_stay_short_however_deep_the_request() {
    let kv = ld(2, &nested_any_value(100_000, &[]));
    let error = count_spans(&wrap_span(&ld(9, &kv))).expect_err("too deep");
    assert_eq!(error.kind(), &WireErrorKind::RecursionLimit);
    let message = error.to_string();
    assert!(message.len() < 300, "{} bytes: {message}", message.len());
    assert!(message.contains("more)"), "{message}");
    assert!(
        error
            .path()
            .starts_with("resource_spans[0].scope_spans[0].spans[0]"),
        "{}",
        error.path()
    );

    let refusal = crate::error::PipelineError::Malformed("x".repeat(5000)).to_string();
    assert!(refusal.len() < 600, "{} bytes", refusal.len());
    assert!(refusal.ends_with("(4488 more bytes)"), "{refusal}");
}

/// Scenario: a span carries unknown fields (field 99 varint, field 100 length-delimited,
/// field 101 a group) besides known ones.
/// Guarantees: the request is accepted, the span's bytes in the view are exactly the bytes
/// received, and they survive re-framing byte-for-byte.
#[test]
fn unknown_span_fields_survive_reframing() {
    let known = Span {
        trace_id: vec![1; 16],
        span_id: vec![2; 8],
        name: "op".into(),
        ..Default::default()
    }
    .encode_to_vec();
    let mut span = known.clone();
    span.extend(key(99, 0));
    varint(12345, &mut span);
    span.extend(ld(100, b"opaque \x00\xff bytes"));
    span.extend(key(101, 3));
    span.extend(key(1, 0));
    span.push(7);
    span.extend(key(101, 4));
    let resource = Resource {
        attributes: vec![KeyValue {
            key: "service.name".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue("svc".into())),
            }),
            key_strindex: 0,
        }],
        ..Default::default()
    }
    .encode_to_vec();
    let request = Bytes::from(ld(1, &[ld(1, &resource), ld(2, &ld(2, &span))].concat()));
    assert_eq!(count_spans(&request).expect("accepted"), 1);
    let views = parse_traces_request(&request).expect("accepted");
    let view = &views[0].scope_spans[0].spans[0];
    assert_eq!(&view.bytes[..], &span[..]);
    assert_eq!(&view.name[..], b"op");
    assert_eq!(view.trace_id, TraceId([1; 16]));

    let out = reframe(&request);
    assert_eq!(&out.request[..], &request[..]);
    let again = parse_traces_request(&out.request).expect("still valid");
    assert_eq!(&again[0].scope_spans[0].spans[0].bytes[..], &span[..]);
    // prost sees the known fields unchanged.
    let decoded = decode(&out.request);
    assert_eq!(
        decoded.resource_spans[0].scope_spans[0].spans[0].encode_to_vec(),
        known
    );
}

/// Scenario: spans and links with ids of the wrong length.
/// Guarantees: rejected (though prost accepts them), with the field path in the message.
#[test]
fn wrong_id_lengths_rejected_with_path() {
    let span = |s: Span| {
        let req = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![Span::default(), s],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        req.encode_to_vec()
    };
    let cases = [
        (
            Span {
                trace_id: vec![1; 15],
                ..Default::default()
            },
            "resource_spans[0].scope_spans[0].spans[1].trace_id: invalid length 15, want 16",
        ),
        (
            Span {
                span_id: vec![1; 9],
                ..Default::default()
            },
            "resource_spans[0].scope_spans[0].spans[1].span_id: invalid length 9, want 8",
        ),
        (
            Span {
                parent_span_id: vec![1; 7],
                ..Default::default()
            },
            "resource_spans[0].scope_spans[0].spans[1].parent_span_id: invalid length 7, want 8",
        ),
        (
            Span {
                links: vec![
                    Link::default(),
                    Link {
                        trace_id: vec![1; 4],
                        ..Default::default()
                    },
                ],
                ..Default::default()
            },
            "resource_spans[0].scope_spans[0].spans[1].links[1].trace_id: invalid length 4, want 16",
        ),
    ];
    for (s, want) in cases {
        let b = span(s);
        assert!(ExportTraceServiceRequest::decode(&b[..]).is_ok());
        let e = count_spans(&b).expect_err("wrong id length");
        assert!(e.to_string().starts_with(want), "{e}");
        assert!(matches!(e.kind(), WireErrorKind::InvalidIdLength { .. }));
        let e2 = parse_traces_request(&Bytes::from(b)).expect_err("wrong id length");
        assert_eq!(e, e2);
    }
}

/// Scenario: a truncated request and a non-UTF-8 span name.
/// Guarantees: the error names the byte offset and, where known, the field.
#[test]
fn error_messages_name_offset_and_field() {
    let b = wrap_span(&ld(5, &[0xff]));
    let e = count_spans(&b).expect_err("bad utf-8");
    assert_eq!(
        e.to_string(),
        "resource_spans[0].scope_spans[0].spans[0].name: string is not valid utf-8 at byte 8"
    );
    let full = wrap_span(&ld(5, b"abc"));
    let e = count_spans(&full[..full.len() - 1]).expect_err("truncated");
    assert_eq!(e.kind(), &WireErrorKind::Truncated);
    assert!(e.to_string().contains("at byte"), "{e}");
}

/// Scenario: a span appears with repeated singular fields (two names, two statuses of which
/// the second has no code, two resources in one ResourceSpans).
/// Guarantees: the view follows protobuf's last-one-wins and merge rules as prost does.
#[test]
fn repeated_singular_fields_follow_protobuf_rules() {
    let span = [
        ld(5, b"first"),
        ld(5, b"second"),
        ld(15, &[0x18, 0x02]),
        ld(15, &ld(2, b"msg")),
    ]
    .concat();
    let r1 = ld(1, &ld(1, b"a"));
    let r2 = ld(1, &ld(1, b"b"));
    let rs = [ld(1, &r1), ld(1, &r2), ld(2, &ld(2, &span))].concat();
    let request = Bytes::from(ld(1, &rs));
    let views = parse_traces_request(&request).expect("valid");
    let view = &views[0].scope_spans[0].spans[0];
    assert_eq!(&view.name[..], b"second");
    assert_eq!(view.status_code, 2);
    let prost = decode(&request);
    assert_eq!(
        prost.resource_spans[0].scope_spans[0].spans[0].name,
        "second"
    );
    assert_eq!(
        Resource::decode(&views[0].resource[..]).expect("resource"),
        prost.resource_spans[0].resource.clone().unwrap_or_default()
    );
    assert_eq!(
        triples(&decode(&reframe(&request).request)),
        triples(&prost)
    );
}

/// Scenario: a batch that already fits, and a batch split with a byte limit smaller than
/// any span.
/// Guarantees: the fitting batch is returned as is (same buffer); the oversize spans each
/// go alone.
#[test]
fn split_batch_edges() {
    let req = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![
                    Span {
                        name: "a".repeat(100),
                        ..Default::default()
                    };
                    3
                ],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let bytes = Bytes::from(req.encode_to_vec());
    let same = split_batch(&bytes, 3, None, usize::MAX).expect("split");
    assert_eq!(
        same,
        vec![FramedRequest {
            request: bytes.clone(),
            span_count: 3
        }]
    );
    assert_eq!(same[0].request.as_ptr(), bytes.as_ptr());
    let pieces = split_batch(&bytes, 3, None, 10).expect("split");
    assert_eq!(pieces.len(), 3);
    assert!(pieces.iter().all(|p| p.span_count == 1));
    let pieces = split_batch(&bytes, 3, Some(2), usize::MAX).expect("split");
    assert_eq!(
        pieces.iter().map(|p| p.span_count).collect::<Vec<_>>(),
        vec![2, 1]
    );
    let bad = Bytes::from_static(&[0x0a, 0x05]);
    assert!(split_batch(&bad, 1, Some(0), 0).is_err());
}

// ---------------------------------------------------------------------------------------
// JSON.

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn b64(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                s.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// Test-side OTLP/JSON serializer: hex ids, integer enums, camelCase keys, 64-bit integers
/// as strings (or as numbers when `numbers` is set).
struct ToJson {
    numbers: bool,
}

impl ToJson {
    fn u64(&self, v: u64) -> Value {
        if self.numbers {
            json!(v)
        } else {
            json!(v.to_string())
        }
    }

    fn any(&self, v: &AnyValue) -> Value {
        use any_value::Value as V;
        match &v.value {
            None => json!({}),
            Some(V::StringValue(s)) => json!({ "stringValue": s }),
            Some(V::BoolValue(b)) => json!({ "boolValue": b }),
            Some(V::IntValue(i)) => {
                if self.numbers {
                    json!({ "intValue": i })
                } else {
                    json!({ "intValue": i.to_string() })
                }
            }
            Some(V::DoubleValue(d)) => json!({ "doubleValue": d }),
            Some(V::ArrayValue(a)) => {
                json!({ "arrayValue": { "values": a.values.iter().map(|x| self.any(x)).collect::<Vec<_>>() } })
            }
            Some(V::KvlistValue(kv)) => {
                json!({ "kvlistValue": { "values": self.attrs(&kv.values) } })
            }
            Some(V::BytesValue(b)) => json!({ "bytesValue": b64(b) }),
            Some(V::StringValueStrindex(i)) => json!({ "stringValueStrindex": i }),
        }
    }

    fn attrs(&self, kvs: &[KeyValue]) -> Value {
        Value::Array(
            kvs.iter()
                .map(|kv| {
                    let mut o = json!({ "key": kv.key, "keyStrindex": kv.key_strindex });
                    if let Some(v) = &kv.value {
                        o["value"] = self.any(v);
                    }
                    o
                })
                .collect(),
        )
    }

    fn span(&self, s: &Span) -> Value {
        let mut o = json!({
            "traceId": hex(&s.trace_id),
            "spanId": hex(&s.span_id),
            "traceState": s.trace_state,
            "parentSpanId": hex(&s.parent_span_id),
            "flags": s.flags,
            "name": s.name,
            "kind": s.kind,
            "startTimeUnixNano": self.u64(s.start_time_unix_nano),
            "endTimeUnixNano": self.u64(s.end_time_unix_nano),
            "attributes": self.attrs(&s.attributes),
            "droppedAttributesCount": s.dropped_attributes_count,
            "events": s.events.iter().map(|e| json!({
                "timeUnixNano": self.u64(e.time_unix_nano),
                "name": e.name,
                "attributes": self.attrs(&e.attributes),
                "droppedAttributesCount": e.dropped_attributes_count,
            })).collect::<Vec<_>>(),
            "droppedEventsCount": s.dropped_events_count,
            "links": s.links.iter().map(|l| json!({
                "traceId": hex(&l.trace_id),
                "spanId": hex(&l.span_id),
                "traceState": l.trace_state,
                "attributes": self.attrs(&l.attributes),
                "droppedAttributesCount": l.dropped_attributes_count,
                "flags": l.flags,
            })).collect::<Vec<_>>(),
            "droppedLinksCount": s.dropped_links_count,
        });
        if let Some(st) = &s.status {
            o["status"] = json!({ "message": st.message, "code": st.code });
        }
        o
    }

    fn request(&self, req: &ExportTraceServiceRequest) -> Value {
        let rs: Vec<Value> = req
            .resource_spans
            .iter()
            .map(|rs| {
                let mut o = json!({
                    "schemaUrl": rs.schema_url,
                    "scopeSpans": rs.scope_spans.iter().map(|ss| {
                        let mut o = json!({
                            "schemaUrl": ss.schema_url,
                            "spans": ss.spans.iter().map(|s| self.span(s)).collect::<Vec<_>>(),
                        });
                        if let Some(sc) = &ss.scope {
                            o["scope"] = json!({
                                "name": sc.name,
                                "version": sc.version,
                                "attributes": self.attrs(&sc.attributes),
                                "droppedAttributesCount": sc.dropped_attributes_count,
                            });
                        }
                        o
                    }).collect::<Vec<_>>(),
                });
                if let Some(r) = &rs.resource {
                    o["resource"] = json!({
                        "attributes": self.attrs(&r.attributes),
                        "droppedAttributesCount": r.dropped_attributes_count,
                        "entityRefs": r.entity_refs.iter().map(|e| json!({
                            "schemaUrl": e.schema_url,
                            "type": e.r#type,
                            "idKeys": e.id_keys,
                            "descriptionKeys": e.description_keys,
                        })).collect::<Vec<_>>(),
                    });
                }
                o
            })
            .collect();
        json!({ "resourceSpans": rs })
    }
}

fn transcode(v: &Value) -> Result<ExportTraceServiceRequest, JsonError> {
    let pb = traces_json_to_protobuf(v.to_string().as_bytes())?;
    Ok(decode(&pb))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Scenario: an arbitrary request is written as OTLP/JSON by a test-side serializer
    /// (hex ids, integer enums, camelCase, 64-bit integers as strings or as numbers) and
    /// transcoded.
    /// Guarantees: prost decodes the protobuf to exactly the original request, and the wire
    /// reader accepts it.
    #[test]
    fn json_roundtrip(req in request(), numbers in any::<bool>()) {
        let v = ToJson { numbers }.request(&req);
        let pb = traces_json_to_protobuf(v.to_string().as_bytes()).expect("transcode");
        prop_assert_eq!(count_spans(&pb).expect("valid"), triples(&req).len());
        prop_assert_eq!(decode(&pb), req);
    }
}

fn one_span_json(span: Value) -> Value {
    json!({ "resourceSpans": [{ "scopeSpans": [{ "spans": [span] }] }] })
}

fn only_span(req: &ExportTraceServiceRequest) -> &Span {
    &req.resource_spans[0].scope_spans[0].spans[0]
}

/// Scenario: enums given by name, and by integer.
/// Guarantees: names map to their values; an unknown name is an error naming the field.
#[test]
fn json_enum_names() {
    let req = transcode(&one_span_json(json!({
        "kind": "SPAN_KIND_SERVER",
        "status": { "code": "STATUS_CODE_ERROR", "message": "boom" },
    })))
    .expect("valid");
    assert_eq!(only_span(&req).kind, 2);
    assert_eq!(only_span(&req).status.as_ref().map(|s| s.code), Some(2));
    let req = transcode(&one_span_json(
        json!({ "kind": 3, "status": { "code": 1 } }),
    ))
    .expect("valid");
    assert_eq!(only_span(&req).kind, 3);
    let e = transcode(&one_span_json(json!({ "kind": "SERVER" }))).expect_err("unknown");
    assert_eq!(
        e.to_string(),
        "resourceSpans[0].scopeSpans[0].spans[0].kind: unknown enum value \"SERVER\""
    );
}

/// Scenario: the same span written with snake_case keys (as protobuf names them) and
/// with lowerCamelCase keys.
/// Guarantees: both transcode to the same protobuf.
#[test]
fn json_snake_case_keys() {
    let snake = json!({ "resource_spans": [{
        "schema_url": "s",
        "scope_spans": [{ "scope": { "name": "lib" }, "spans": [{
            "trace_id": "0102030405060708090a0b0c0d0e0f10",
            "span_id": "0102030405060708",
            "parent_span_id": "0807060504030201",
            "start_time_unix_nano": "5",
            "end_time_unix_nano": 6,
            "dropped_attributes_count": 1,
            "attributes": [{ "key": "k", "value": { "int_value": "7" } }],
        }] }]
    }] });
    let camel = json!({ "resourceSpans": [{
        "schemaUrl": "s",
        "scopeSpans": [{ "scope": { "name": "lib" }, "spans": [{
            "traceId": "0102030405060708090A0B0C0D0E0F10",
            "spanId": "0102030405060708",
            "parentSpanId": "0807060504030201",
            "startTimeUnixNano": 5,
            "endTimeUnixNano": "6",
            "droppedAttributesCount": 1,
            "attributes": [{ "key": "k", "value": { "intValue": 7 } }],
        }] }]
    }] });
    let a = transcode(&snake).expect("snake");
    let b = transcode(&camel).expect("camel");
    assert_eq!(a, b);
    let s = only_span(&a);
    assert_eq!(s.trace_id, (1..=16).collect::<Vec<u8>>());
    assert_eq!(s.start_time_unix_nano, 5);
    assert_eq!(s.end_time_unix_nano, 6);
    assert_eq!(a.resource_spans[0].schema_url, "s");
}

/// Scenario: 64-bit integers as numbers and as strings, including u64::MAX and i64::MIN,
/// and out-of-range or fractional values.
/// Guarantees: both forms are exact; invalid ones are errors naming the field.
#[test]
fn json_integers_as_numbers_or_strings() {
    let req = transcode(&one_span_json(json!({
        "startTimeUnixNano": u64::MAX,
        "endTimeUnixNano": "18446744073709551615",
        "attributes": [
            { "key": "a", "value": { "intValue": i64::MIN } },
            { "key": "b", "value": { "intValue": "-9223372036854775808" } },
            { "key": "c", "value": { "intValue": 1e3 } },
        ],
    })))
    .expect("valid");
    let s = only_span(&req);
    assert_eq!(s.start_time_unix_nano, u64::MAX);
    assert_eq!(s.end_time_unix_nano, u64::MAX);
    let ints: Vec<_> = s
        .attributes
        .iter()
        .map(|kv| kv.value.clone().and_then(|v| v.value))
        .collect();
    assert_eq!(
        ints,
        vec![
            Some(any_value::Value::IntValue(i64::MIN)),
            Some(any_value::Value::IntValue(i64::MIN)),
            Some(any_value::Value::IntValue(1000)),
        ]
    );
    for (bad, field, msg) in [
        (
            json!({ "startTimeUnixNano": -1 }),
            "startTimeUnixNano",
            "integer -1 out of range",
        ),
        (
            json!({ "startTimeUnixNano": 1.5 }),
            "startTimeUnixNano",
            "expected an integer",
        ),
        (
            json!({ "startTimeUnixNano": "x" }),
            "startTimeUnixNano",
            "expected an integer",
        ),
        (
            json!({ "flags": 4294967296u64 }),
            "flags",
            "integer 4294967296 out of range",
        ),
    ] {
        let e = transcode(&one_span_json(bad)).expect_err("invalid");
        assert_eq!(
            e.to_string(),
            format!("resourceSpans[0].scopeSpans[0].spans[0].{field}: {msg}")
        );
    }
}

/// Scenario: bodies that are not JSON, or not the right shape.
/// Guarantees: errors say what is wrong and where.
#[test]
fn json_invalid_bodies() {
    let e = traces_json_to_protobuf(b"{\"resourceSpans\": [").expect_err("not json");
    assert!(e.to_string().starts_with("invalid json: "), "{e}");
    assert_eq!(e.path(), "");
    let e = traces_json_to_protobuf(b"[]").expect_err("not an object");
    assert_eq!(e.to_string(), "expected an object");
    let e = transcode(&json!({ "resourceSpans": {} })).expect_err("not an array");
    assert_eq!(e.to_string(), "resourceSpans: expected an array");
    let e = transcode(&one_span_json(json!({ "name": 5 }))).expect_err("not a string");
    assert_eq!(
        e.to_string(),
        "resourceSpans[0].scopeSpans[0].spans[0].name: expected a string"
    );
    let e = transcode(&one_span_json(
        json!({ "attributes": [{ "key": "k", "value": {
        "stringValue": "a", "intValue": 1 } }] }),
    ))
    .expect_err("two values");
    assert!(
        e.to_string()
            .starts_with("resourceSpans[0].scopeSpans[0].spans[0].attributes[0].value."),
        "{e}"
    );
}

/// Scenario: ids that are not hex, odd-length, or of the wrong length; empty ids.
/// Guarantees: errors name the id field; empty means absent.
#[test]
fn json_bad_ids() {
    for (case, span, error) in [
        (
            "bad hex",
            json!({ "traceId": "zz02030405060708090a0b0c0d0e0f10" }),
            "traceId: invalid hex",
        ),
        ("odd", json!({ "spanId": "010" }), "spanId: invalid hex"),
        (
            "15 bytes",
            json!({ "traceId": "0102030405060708090a0b0c0d0e0f" }),
            "traceId: invalid length 15, want 16",
        ),
        (
            "link id",
            json!({ "links": [{ "spanId": "01" }] }),
            "links[0].spanId: invalid length 1, want 8",
        ),
    ] {
        let e = transcode(&one_span_json(span)).expect_err(case);
        assert_eq!(
            e.to_string(),
            format!("resourceSpans[0].scopeSpans[0].spans[0].{error}"),
            "{case}"
        );
    }
    let req = transcode(&one_span_json(
        json!({ "traceId": "", "parentSpanId": null }),
    ))
    .expect("empty ids");
    assert!(only_span(&req).trace_id.is_empty());
}

/// Scenario: nulls, unknown keys, special doubles, URL-safe base64, an empty AnyValue.
/// Guarantees: null is absent, unknown keys are ignored, NaN/Infinity and both base64
/// alphabets decode.
#[test]
fn json_lenient_values() {
    let req = transcode(&json!({
        "resourceSpans": [{
            "resource": null,
            "somethingNew": { "x": 1 },
            "scopeSpans": [{ "scope": null, "spans": [{
                "name": null,
                "unknownField": [1, 2],
                "attributes": [
                    { "key": "nan", "value": { "doubleValue": "NaN" } },
                    { "key": "inf", "value": { "doubleValue": "-Infinity" } },
                    { "key": "d", "value": { "doubleValue": "2.5" } },
                    { "key": "b", "value": { "bytesValue": "-_8" } },
                    { "key": "b2", "value": { "bytesValue": "+/8=" } },
                    { "key": "empty", "value": {} },
                    { "key": "none", "value": null },
                ],
            }] }]
        }]
    }))
    .expect("valid");
    assert!(req.resource_spans[0].resource.is_none());
    assert!(req.resource_spans[0].scope_spans[0].scope.is_none());
    let s = only_span(&req);
    let vals: Vec<_> = s
        .attributes
        .iter()
        .map(|kv| kv.value.clone().and_then(|v| v.value))
        .collect();
    use any_value::Value as V;
    assert!(matches!(vals[0], Some(V::DoubleValue(d)) if d.is_nan()));
    assert_eq!(vals[1], Some(V::DoubleValue(f64::NEG_INFINITY)));
    assert_eq!(vals[2], Some(V::DoubleValue(2.5)));
    assert_eq!(vals[3], Some(V::BytesValue(vec![0xfb, 0xff])));
    assert_eq!(vals[4], Some(V::BytesValue(vec![0xfb, 0xff])));
    assert_eq!(vals[5], None);
    assert_eq!(s.attributes[6].value, None);
    let e = transcode(&one_span_json(json!({ "attributes": [
        { "key": "b", "value": { "bytesValue": "!!" } }] })))
    .expect_err("bad base64");
    assert_eq!(
        e.to_string(),
        "resourceSpans[0].scopeSpans[0].spans[0].attributes[0].value.bytesValue: invalid base64"
    );
}

/// Scenario: the JSON answers of the HTTP receiver.
/// Guarantees: full success is `{}`; partial success carries rejectedSpans as an int64
/// string and the message; a Status body has code and message.
#[test]
fn json_responses() {
    assert_eq!(export_trace_response_json(0, ""), b"{}");
    let v: Value =
        serde_json::from_slice(&export_trace_response_json(3, "bad \"span\"")).expect("json");
    assert_eq!(
        v,
        json!({ "partialSuccess": { "rejectedSpans": "3", "errorMessage": "bad \"span\"" } })
    );
    let v: Value = serde_json::from_slice(&status_json(3, "invalid")).expect("json");
    assert_eq!(v, json!({ "code": 3, "message": "invalid" }));
    assert_eq!(status_json(14, ""), b"{\"code\":14}");
}

/// Scenario: an OTLP/JSON metrics request with every data kind, enum names, int64 as
/// strings, snake_case keys and a hex exemplar id; then a protobuf request with a 3-byte
/// exemplar trace id.
/// Guarantees: the JSON transcodes to the protobuf a prost decode reads back with the same
/// values, and its data points are counted (one per point of every kind); an exemplar id
/// of the wrong length is refused, as the Collector refuses it.
#[test]
fn metrics_json_and_point_counting() {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    let json = br#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[
        {"name":"g","gauge":{"dataPoints":[{"asDouble":"NaN"},{"as_int":"-3"}]}},
        {"name":"s","sum":{"aggregationTemporality":"AGGREGATION_TEMPORALITY_DELTA","is_monotonic":true,
            "dataPoints":[{"asInt":5,"exemplars":[{"asDouble":1.5,"traceId":"0102030405060708090A0B0C0D0E0F10","spanId":"0102030405060708"}]}]}},
        {"name":"h","histogram":{"aggregationTemporality":2,"dataPoints":[{"count":"3","sum":6,"bucketCounts":["1","2"],"explicitBounds":[1.0]}]}},
        {"name":"e","exponentialHistogram":{"dataPoints":[{"count":1,"scale":-2,"positive":{"offset":-1,"bucketCounts":[1]}}]}},
        {"name":"q","summary":{"dataPoints":[{"count":2,"sum":3.5,"quantileValues":[{"quantile":0.5,"value":1}]}]}}
    ]}]}]}"#;
    let encoded = Bytes::from(crate::otlp::metrics_json_to_protobuf(json).unwrap());
    let (decoded, points) = crate::otlp::decode_metrics_request(&encoded).unwrap();
    assert_eq!(points, 6);
    let metrics = &decoded.resource_metrics[0].scope_metrics[0].metrics;
    let Some(Data::Sum(sum)) = &metrics[1].data else {
        panic!("sum")
    };
    assert_eq!(sum.aggregation_temporality, 1);
    assert!(sum.is_monotonic);
    assert_eq!(sum.data_points[0].exemplars[0].trace_id[15], 0x10);
    let Some(Data::Histogram(h)) = &metrics[2].data else {
        panic!("histogram")
    };
    assert_eq!(h.data_points[0].bucket_counts, vec![1, 2]);
    assert!(crate::otlp::metrics_json_to_protobuf(br#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"sum":{"dataPoints":[{"exemplars":[{"traceId":"0102"}]}]}}]}]}]}"#).is_err());

    let mut bad = decoded.clone();
    if let Some(Data::Sum(sum)) = &mut bad.resource_metrics[0].scope_metrics[0].metrics[1].data {
        sum.data_points[0].exemplars[0].trace_id = vec![1, 2, 3];
    }
    let bad = Bytes::from(prost::Message::encode_to_vec(&bad));
    assert!(crate::otlp::decode_metrics_request(&bad).is_err());
}

// ---------------------------------------------------------------------------------------
// JSON: the direct transcoder against prost.

/// Values that break a field in every way the readers check: wrong types, bad ids, enum
/// names good and bad, integers out of range, special doubles, base64, conflicting
/// AnyValue members, nulls and empty containers.
const JUNK: &[&str] = &[
    "null",
    "true",
    "0",
    "-1",
    "-0",
    "1.5",
    "1e3",
    "4294967296",
    "18446744073709551615",
    "-9223372036854775808",
    "1e300",
    "\"\"",
    "\"x\"",
    "\"zz\"",
    "\"0102\"",
    "\"0102030405060708\"",
    "\"0102030405060708090A0B0C0D0E0F10\"",
    "\" 42 \"",
    "\"NaN\"",
    "\"-Infinity\"",
    "\"SPAN_KIND_SERVER\"",
    "\"STATUS_CODE_ERROR\"",
    "\"-_8\"",
    "\"Zg=\"",
    "\"a\\\"b\\u00e9\"",
    "[]",
    "[{}]",
    "[null]",
    "[\"a\", 1]",
    "{}",
    "{\"stringValue\":\"\"}",
    "{\"intValue\":\"5\",\"boolValue\":true}",
    "{\"values\":[{\"doubleValue\":\"Infinity\"}]}",
    "{\"arrayValue\":{\"values\":[{\"bytesValue\":\"!!\"}]}}",
];

/// Keys a mutation may add: the fields of every traces message, in both spellings.
const KEYS: &[&str] = &[
    "resourceSpans",
    "resource_spans",
    "resource",
    "scopeSpans",
    "scope_spans",
    "schemaUrl",
    "schema_url",
    "attributes",
    "droppedAttributesCount",
    "dropped_attributes_count",
    "entityRefs",
    "type",
    "idKeys",
    "id_keys",
    "scope",
    "name",
    "version",
    "spans",
    "traceId",
    "trace_id",
    "spanId",
    "span_id",
    "traceState",
    "parentSpanId",
    "parent_span_id",
    "flags",
    "kind",
    "startTimeUnixNano",
    "start_time_unix_nano",
    "endTimeUnixNano",
    "events",
    "droppedEventsCount",
    "links",
    "dropped_links_count",
    "status",
    "timeUnixNano",
    "message",
    "code",
    "key",
    "value",
    "keyStrindex",
    "stringValue",
    "string_value",
    "boolValue",
    "intValue",
    "int_value",
    "doubleValue",
    "arrayValue",
    "array_value",
    "kvlistValue",
    "bytesValue",
    "stringValueStrindex",
    "values",
];

/// Every JSON pointer of `v`, in document order.
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                pointers(item, format!("{at}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                pointers(item, format!("{at}/{k}"), out);
            }
        }
        _ => {}
    }
    out.push(at);
}

/// One change to a request's JSON: a value replaced by junk, a key added to an object (in
/// front of the others, so that an existing one of the same name comes later and wins), a
/// key renamed to its snake_case spelling, or a key added at the end of an object.
#[derive(Clone, Debug)]
enum JsonMutation {
    Replace(prop::sample::Index, usize),
    Prepend(prop::sample::Index, usize, usize),
    Snake(prop::sample::Index),
    Append(prop::sample::Index, usize, usize),
}

fn json_mutation() -> impl Strategy<Value = JsonMutation> {
    let junk = 0..JUNK.len();
    let key = 0..KEYS.len();
    prop_oneof![
        3 => (any::<prop::sample::Index>(), junk.clone()).prop_map(|(i, j)| JsonMutation::Replace(i, j)),
        2 => (any::<prop::sample::Index>(), key.clone(), junk.clone())
            .prop_map(|(i, k, j)| JsonMutation::Prepend(i, k, j)),
        1 => any::<prop::sample::Index>().prop_map(JsonMutation::Snake),
        2 => (any::<prop::sample::Index>(), key, junk).prop_map(|(i, k, j)| JsonMutation::Append(i, k, j)),
    ]
}

fn snake(camel: &str) -> String {
    let mut s = String::new();
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            s.push('_');
            s.push(c.to_ascii_lowercase());
        } else {
            s.push(c);
        }
    }
    s
}

/// Applies `m` to the JSON text of `v`, returning the new text.
fn mutate_json(v: &mut Value, m: &JsonMutation) -> String {
    let mut all = Vec::new();
    pointers(v, String::new(), &mut all);
    match m {
        JsonMutation::Replace(i, j) => {
            let at = i.get(&all);
            let junk: Value = serde_json::from_str(JUNK[*j]).expect("junk is JSON");
            match v.pointer_mut(at) {
                Some(slot) => *slot = junk,
                None => unreachable!("pointer {at} came from the value"),
            }
            v.to_string()
        }
        JsonMutation::Snake(i) => {
            let at = i.get(&all);
            if let Some((parent, key)) = at.rsplit_once('/')
                && let Some(Value::Object(map)) = v.pointer_mut(parent)
                && let Some(item) = map.remove(key)
            {
                map.insert(snake(key), item);
            }
            v.to_string()
        }
        JsonMutation::Prepend(i, k, j) | JsonMutation::Append(i, k, j) => {
            // Text level, so that a key can be there twice.
            let text = v.to_string();
            let braces: Vec<usize> = text
                .char_indices()
                .filter(|&(_, c)| {
                    c == if matches!(m, JsonMutation::Prepend(..)) {
                        '{'
                    } else {
                        '}'
                    }
                })
                .map(|(at, _)| at)
                .collect();
            if braces.is_empty() {
                return text;
            }
            let at = *i.get(&braces);
            let member = format!("\"{}\":{}", KEYS[*k], JUNK[*j]);
            if matches!(m, JsonMutation::Prepend(..)) {
                let sep = if text[at + 1..].starts_with('}') {
                    ""
                } else {
                    ","
                };
                format!("{}{member}{sep}{}", &text[..=at], &text[at + 1..])
            } else {
                let sep = if text[..at].ends_with('{') { "" } else { "," };
                format!("{}{sep}{member}{}", &text[..at], &text[at..])
            }
        }
    }
}

/// The direct transcoder's answer and the prost-struct oracle's, for comparison.
fn both(json: &str) -> (Result<Vec<u8>, JsonError>, Result<Vec<u8>, JsonError>) {
    (
        traces_json_to_protobuf(json.as_bytes()),
        json::traces_oracle(json.as_bytes()).map(|req| req.encode_to_vec()),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Scenario: an arbitrary request is written as OTLP/JSON (64-bit integers as strings
    /// or numbers, optionally with every key in snake_case) and transcoded.
    /// Guarantees: the output is byte for byte prost's encoding of the request, and the
    /// prost-struct walk of the same JSON encodes to the same bytes.
    #[test]
    fn json_transcodes_to_prost_bytes(
        req in request(),
        numbers in any::<bool>(),
        snake_keys in any::<bool>(),
    ) {
        let mut text = ToJson { numbers }.request(&req).to_string();
        if snake_keys {
            for key in KEYS {
                text = text.replace(&format!("\"{key}\":"), &format!("\"{}\":", snake(key)));
            }
        }
        let (direct, oracle) = both(&text);
        let want = req.encode_to_vec();
        prop_assert_eq!(direct.as_ref(), Ok(&want));
        prop_assert_eq!(oracle.as_ref(), Ok(&want));
    }

    /// Scenario: the JSON of an arbitrary request with one to three mutations: values
    /// replaced by junk of every type, keys added twice (first or last), keys renamed to
    /// snake_case.
    /// Guarantees: the direct transcoder and the prost-struct walk agree exactly: the same
    /// bytes when the request is accepted, the same error (path and message) when not.
    #[test]
    fn json_mutations_match_the_prost_walk(
        req in request(),
        numbers in any::<bool>(),
        mutations in prop::collection::vec(json_mutation(), 1..4),
    ) {
        let mut v = ToJson { numbers }.request(&req);
        let mut text = v.to_string();
        for m in &mutations {
            text = mutate_json(&mut v, m);
            if let Ok(next) = serde_json::from_str(&text) {
                v = next;
            }
        }
        let (direct, oracle) = both(&text);
        prop_assert_eq!(direct, oracle, "{}", text);
    }
}

/// Scenario: hand-picked bodies: not JSON, too deep, nested AnyValues, duplicate keys,
/// camelCase and snake_case for the same field, a oneof conflict after a bad value, a span
/// whose flags and name are both wrong, big messages whose length takes two or three bytes.
/// Guarantees: the direct transcoder gives the prost-struct walk's bytes or error for each.
#[test]
fn json_edge_cases_match_the_prost_walk() {
    let long = "x".repeat(20_000);
    let deep_array = format!(
        "{}{{\"stringValue\":\"x\"}}{}",
        "{\"arrayValue\":{\"values\":[".repeat(35),
        "]}}".repeat(35)
    );
    let too_deep = format!(
        "{}{{\"stringValue\":\"x\"}}{}",
        "{\"arrayValue\":{\"values\":[".repeat(50),
        "]}}".repeat(50)
    );
    let span =
        |body: &str| format!(r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{body}]}}]}}]}}"#);
    let cases = [
        String::new(),
        "{".into(),
        "[]".into(),
        "{} x".into(),
        "{\"resourceSpans\":null}".into(),
        span("{}"),
        span(r#"{"flags":"x","name":5}"#),
        span(r#"{"name":5,"flags":"x"}"#),
        span(r#"{"flags":4294967295,"kind":-1,"status":{"code":-2}}"#),
        span(r#"{"name":"a","name":"b","trace_id":"zz","traceId":null}"#),
        span(r#"{"traceId":"0102030405060708090a0b0c0d0e0f10","trace_id":"zz"}"#),
        span(r#"{"spanId":null,"span_id":"0102030405060708"}"#),
        span(
            r#"{"attributes":[{"key":"k","value":{"stringValue":"a","arrayValue":{"values":[{"intValue":"x"}]}}}]}"#,
        ),
        span(r#"{"attributes":[{"key":"k","value":{"stringValue":"a","boolValue":false}}]}"#),
        span(r#"{"attributes":[{"key":"k","keyStrindex":-1,"value":{"stringValueStrindex":-5}}]}"#),
        span(
            r#"{"attributes":[{"key":"k","value":{"bytesValue":""}},{"key":"k","value":{"doubleValue":-0.0}}]}"#,
        ),
        span(&format!(
            r#"{{"name":"{long}","attributes":[{{"key":"{long}","value":{{"stringValue":"{long}"}}}}]}}"#
        )),
        span(&format!(
            r#"{{"attributes":[{{"key":"k","value":{deep_array}}}]}}"#
        )),
        span(&format!(
            r#"{{"attributes":[{{"key":"k","value":{too_deep}}}]}}"#
        )),
        span(
            r#"{"links":[{"flags":1,"traceId":"","spanId":"01"}],"events":[{"timeUnixNano":"1"}]}"#,
        ),
    ];
    for case in &cases {
        let (direct, oracle) = both(case);
        assert_eq!(direct, oracle, "{case}");
    }
    let deep = span(&format!(
        r#"{{"attributes":[{{"key":"k","value":{too_deep}}}]}}"#
    ));
    let e = traces_json_to_protobuf(deep.as_bytes()).expect_err("too deep");
    assert!(
        e.to_string()
            .starts_with("invalid json: recursion limit exceeded"),
        "{e}"
    );
    let ok = span(&format!(
        r#"{{"attributes":[{{"key":"k","value":{deep_array}}}]}}"#
    ));
    let pb = traces_json_to_protobuf(ok.as_bytes()).expect("35 levels");
    assert_eq!(
        ExportTraceServiceRequest::decode(pb.as_slice()).map(|r| r.encode_to_vec()),
        Ok(pb)
    );
}

// ---------------------------------------------------------------------------------------
// The transcoder vouches for its output: the receiver does not validate it again.

/// When the transcoder accepts `json`: the validating walk accepts its output and finds
/// exactly the spans the transcoder counted, and the skim reads the walk's views. Returns
/// whether the transcoder accepted it.
fn assert_vouched(json: &str) -> bool {
    let Ok(transcoded) = transcode_traces_json(json.as_bytes()) else {
        return false;
    };
    let bytes = Bytes::from(transcoded.request.clone());
    let views = parse_traces_request(&bytes)
        .unwrap_or_else(|e| panic!("the walk refuses the transcoder's output ({e}): {json}"));
    let spans: usize = views
        .iter()
        .flat_map(|r| &r.scope_spans)
        .map(|s| s.spans.len())
        .sum();
    assert_eq!(spans, transcoded.spans, "{json}");
    assert_eq!(count_spans(&bytes).ok(), Some(transcoded.spans), "{json}");
    assert_eq!(skim_traces_request(&bytes), Some(views), "{json}");
    assert_eq!(
        traces_json_to_protobuf(json.as_bytes()).ok(),
        Some(transcoded.request)
    );
    true
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Scenario: the JSON of an arbitrary request, as is (camelCase or snake_case keys) or
    /// with one to three mutations (junk values, keys given twice, snake_case renames).
    /// Guarantees: whatever the transcoder accepts, the validating walk accepts too, with
    /// exactly the span count the transcoder reports, and the skim reads the walk's views:
    /// the contract that lets the receiver skip validating the transcoder's output.
    #[test]
    fn transcoder_output_is_valid_with_the_counted_spans(
        req in request(),
        numbers in any::<bool>(),
        snake_keys in any::<bool>(),
        mutations in prop::collection::vec(json_mutation(), 0..4),
    ) {
        let mut v = ToJson { numbers }.request(&req);
        let mut text = v.to_string();
        if snake_keys {
            for key in KEYS {
                text = text.replace(&format!("\"{key}\":"), &format!("\"{}\":", snake(key)));
            }
        }
        let accepted = assert_vouched(&text);
        if mutations.is_empty() {
            prop_assert!(accepted, "{}", text);
        }
        for m in &mutations {
            text = mutate_json(&mut v, m);
            if let Ok(next) = serde_json::from_str(&text) {
                v = next;
            }
            assert_vouched(&text);
        }
    }
}

/// Scenario: attribute values nested in arrays and in key-value lists, one level more each
/// time, up to and past the deepest JSON serde_json takes (128 levels); empty requests and
/// spans; ids absent, empty and null; escaped strings.
/// Guarantees: every body the transcoder accepts passes the validating walk (within its
/// nesting limit) with the spans the transcoder counted.
#[test]
fn transcoder_output_is_valid_at_the_edges() {
    let span = |body: &str| {
        format!(r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{body},{{}}]}}]}},{{}}]}}"#)
    };
    let mut refused = 0;
    for levels in 1..=45 {
        let array = format!(
            "{}{{\"stringValue\":\"x\"}}{}",
            "{\"arrayValue\":{\"values\":[".repeat(levels),
            "]}}".repeat(levels)
        );
        let kvlist = format!(
            "{}{{\"intValue\":\"1\"}}{}",
            "{\"kvlistValue\":{\"values\":[{\"key\":\"k\",\"value\":".repeat(levels),
            "}]}}".repeat(levels)
        );
        for value in [array, kvlist] {
            let json = span(&format!(
                r#"{{"attributes":[{{"key":"k","value":{value}}}]}}"#
            ));
            if !assert_vouched(&json) {
                refused += 1;
            }
        }
    }
    assert!(refused > 0, "the deepest bodies reach serde_json's limit");
    for json in [
        "{}".to_owned(),
        r#"{"resourceSpans":[]}"#.to_owned(),
        r#"{"resourceSpans":[{"scopeSpans":[]}]}"#.to_owned(),
        span("{}"),
        span(r#"{"traceId":"","spanId":null,"parentSpanId":""}"#),
        span(r#"{"name":"a\"\\\u00e9\ud83d\ude00","traceState":"x\ty"}"#),
        span(
            r#"{"traceId":"0102030405060708090A0B0C0D0E0F10","spanId":"0102030405060708","links":[{"traceId":"0102030405060708090a0b0c0d0e0f10"}]}"#,
        ),
    ] {
        assert!(assert_vouched(&json), "{json}");
    }
}
