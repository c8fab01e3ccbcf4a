//! The OTLP trace wire layer: reading, re-framing and transcoding requests without decoding
//! spans into objects.
//!
//! # Spans travel as wire bytes
//!
//! A span is kept as its encoded protobuf bytes from receipt to export (DESIGN.md,
//! decision 1). [`parse_traces_request`] walks an encoded `ExportTraceServiceRequest` →
//! `ResourceSpans` → `ScopeSpans` → `Span` with a minimal varint / key / length walker and
//! yields, per span, a [`SpanView`]: the span's body exactly as received (a zero-copy slice
//! of the request, unknown fields included) plus the few fields routing and policies need
//! (ids, name, kind, times, flags, trace state, status code). Resource and scope bodies are
//! likewise slices. [`TraceRequestWriter`] writes new requests by framing those slices under
//! `ResourceSpans` / `ScopeSpans` wrappers, and [`split_batch`] cuts a request by span count
//! and bytes. Nothing is decoded into prost objects and encoded again, so the bytes held are
//! exactly the bytes received (which makes the memory budget exact) and the CPU cost per
//! span is close to that of reading it once.
//!
//! The stages after a receiver read the views the receiver's walk made, carried with the
//! batch ([`crate::payload::Payload::carried_views`]); a batch made elsewhere, or after a
//! stage that makes batches of its own, is read with
//! [`parse_validated_traces_request`], which reads only the top-level fields of resource
//! spans, scope spans and spans and skips everything nested by its length: the same views,
//! without validating every attribute again.
//!
//! OTLP/JSON is transcoded to protobuf once, at the edge ([`traces_json_to_protobuf`],
//! [`metrics_json_to_protobuf`]), so everything downstream sees one format. Metrics
//! requests are checked with a prost decode ([`decode_metrics_request`]) and otherwise
//! travel as their bytes too.
//!
//! # The prost-equivalence contract
//!
//! [`parse_traces_request`] and [`count_spans`] accept a request if and only if prost's
//! `ExportTraceServiceRequest::decode` (opentelemetry-proto 0.33) accepts it **and** every
//! span and link id has a valid length: `trace_id` empty or 16 bytes, `span_id` and
//! `parent_span_id` empty or 8 bytes, as the Collector requires ("invalid length for ID").
//! Concretely the walker checks what prost checks: every nested known message (resource,
//! attributes and `AnyValue` recursion through arrays and key-value lists, entity refs,
//! scope, events, links, status) is walked; known fields must have their declared wire type;
//! strings must be UTF-8; unknown fields of every wire type, groups included, are skipped as
//! prost skips them; varints are at most 10 bytes without overflow; nothing may run past the
//! end of its enclosing message; nesting is limited exactly as prost's recursion limit of
//! 100. Property tests (in `tests.rs`) compare the two on mutated encodings.
//!
//! Re-framing preserves meaning: decoding (with prost) what [`TraceRequestWriter`] writes
//! gives the same (resource, scope, span) triples in the same order as decoding the input.
//! Fields of the wrappers that prost would drop (unknown fields of `ResourceSpans` and
//! `ScopeSpans`) are dropped; an absent resource or scope is written the same as an empty
//! one, which OTLP treats as equal.

pub mod attributes;
mod frame;
mod json;
mod metrics;
mod skim;
mod utf8;
mod varint;
mod wire;

#[cfg(test)]
mod tests;

/// Test fixture: an encoded trace request holding `spans` under one empty resource and
/// one empty scope, framed by [`TraceRequestWriter`] as the gateway frames its batches.
#[cfg(test)]
pub(crate) fn one_scope_request(
    spans: Vec<opentelemetry_proto::tonic::trace::v1::Span>,
) -> Vec<u8> {
    use prost::Message;
    let empty = bytes::Bytes::new();
    let mut writer = TraceRequestWriter::new();
    for span in spans {
        writer.push(&empty, &empty, &empty, &empty, &span.encode_to_vec().into());
    }
    writer.finish().request.to_vec()
}

pub use frame::{FramedRequest, TraceRequestWriter, split_batch};
pub use json::{
    JsonError, TranscodedTraces, export_trace_response_json, metrics_json_to_protobuf, status_json,
    traces_json_to_protobuf, transcode_traces_json,
};
pub use metrics::{MetricsError, count_data_points, decode_metrics_request, metric_points};
pub use skim::{parse_validated_traces_request, skim_traces_request};
pub use utf8::{CorrectedRequest, correct_metrics_utf8, correct_traces_utf8};
pub(crate) use varint::put_varint;
pub use wire::{
    ResourceSpansView, ScopeSpansView, SpanId, SpanView, TraceId, WireError, WireErrorKind,
    count_spans, parse_traces_request,
};
