//! Criterion benches of the span path on realistic requests from the load generator
//! (operator shape: 6-span reconcile traces, ~10 attributes per span, two services), set
//! against the floor: walking the request's bytes and copying every span once into a
//! fresh buffer, which no path that keeps spans as bytes can beat.
//!
//! Groups (each reports throughput in spans, so the figures compare per span):
//! - `floor`: the minimal scan + one copy per span.
//! - `wire`: `count_spans`, `parse_traces_request`, and prost's full decode for scale.
//! - `json`: OTLP/JSON → protobuf transcoding at the edge.
//! - `frame`: re-framing every span with `TraceRequestWriter`, and `split_batch` into
//!   100-span pieces.
//! - `sampler` and `remote_write`: marked places for the stages being written.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use tailgate::loadgen::{Generator, GeneratorConfig};
use tailgate::otlp::{
    TraceRequestWriter, count_spans, parse_traces_request, split_batch, traces_json_to_protobuf,
};
use tailgate::pipeline::TraceBatch;

/// A fixed point in time, so the requests (and the bench) are the same on every run.
const END: u64 = 1_767_225_600_000_000_000;

/// Requests of this many traces (×6 spans): one loadgen request of 100 spans is ~17
/// traces; a batch the batcher hands the exporter is larger.
const TRACES_PER_REQUEST: [usize; 2] = [17, 1000];

fn request(traces: usize) -> (ExportTraceServiceRequest, Bytes, usize) {
    let mut generator = Generator::new(
        GeneratorConfig {
            error_ratio: 0.01,
            slow_ratio: 0.01,
            ..Default::default()
        },
        1,
    )
    .expect("valid config");
    let request = generator.request(traces, END);
    let bytes = Bytes::from(request.encode_to_vec());
    let spans = count_spans(&bytes).expect("valid");
    (request, bytes, spans)
}

/// Reads a varint at `*at`; `None` past the end or on overlong input.
fn varint(buf: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *buf.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(value);
        }
    }
    None
}

/// Calls `f` with the body of every length-delimited field `tag` of the message `buf`,
/// skipping the others. No validation beyond bounds: the floor, not a parser.
fn fields(buf: &[u8], tag: u64, mut f: impl FnMut(&[u8])) -> Option<()> {
    let mut at = 0;
    while at < buf.len() {
        let key = varint(buf, &mut at)?;
        match key & 7 {
            0 => {
                varint(buf, &mut at)?;
            }
            1 => at += 8,
            5 => at += 4,
            2 => {
                let len = varint(buf, &mut at)? as usize;
                let body = buf.get(at..at + len)?;
                at += len;
                if key >> 3 == tag {
                    f(body);
                }
            }
            _ => return None,
        }
    }
    Some(())
}

/// The floor: find every span (ResourceSpans → ScopeSpans → Span) and copy its bytes once
/// into a fresh buffer.
fn floor_scan_copy(buf: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(buf.len());
    fields(buf, 1, |resource_spans| {
        fields(resource_spans, 2, |scope_spans| {
            fields(scope_spans, 2, |span| out.extend_from_slice(span));
        });
    });
    out
}

fn bench(c: &mut Criterion) {
    for traces in TRACES_PER_REQUEST {
        let (decoded, bytes, spans) = request(traces);
        let json = serde_json::to_vec(&decoded).expect("json");
        assert!(floor_scan_copy(&bytes).len() < bytes.len());

        let mut group = c.benchmark_group(format!("operator_{spans}_spans"));
        group.throughput(Throughput::Elements(spans as u64));

        // === floor ===
        group.bench_function("floor_scan_copy", |b| {
            b.iter(|| floor_scan_copy(black_box(&bytes)))
        });

        // === wire reading ===
        group.bench_function("count_spans", |b| {
            b.iter(|| count_spans(black_box(&bytes)).expect("valid"))
        });
        group.bench_function("parse_traces_request", |b| {
            b.iter(|| parse_traces_request(black_box(&bytes)).expect("valid"))
        });
        group.bench_function("prost_decode", |b| {
            b.iter(|| ExportTraceServiceRequest::decode(black_box(&bytes[..])).expect("valid"))
        });

        // === JSON transcoding (the HTTP/JSON receiver's edge) ===
        group.bench_with_input(
            BenchmarkId::new("json_to_protobuf", json.len()),
            &json,
            |b, json| b.iter(|| traces_json_to_protobuf(black_box(json)).expect("valid")),
        );

        // === batch framing ===
        group.bench_function("parse_and_reframe_all", |b| {
            b.iter(|| {
                let mut writer = TraceRequestWriter::new();
                for rs in parse_traces_request(black_box(&bytes)).expect("valid") {
                    for ss in &rs.scope_spans {
                        for span in &ss.spans {
                            writer.push_view(&rs, ss, span);
                        }
                    }
                }
                writer.finish()
            })
        });
        let batch = TraceBatch::new(bytes.clone(), spans);
        group.bench_function("split_batch_100", |b| {
            b.iter(|| split_batch(black_box(&batch), Some(100), usize::MAX).expect("valid"))
        });

        // === sampler: buffer insert and decide per span ===
        // PLACEHOLDER for `crate::sampler` (being written): parse the request, insert every
        // span into the trace buffer keyed by trace id, then decide every trace with the
        // seed policies (status_code ERROR + probabilistic 10%) and re-frame the kept spans.
        // Compare it with `floor_scan_copy` above: the target is within 3× of the floor.

        // === remote_write translation ===
        // PLACEHOLDER for the span-metrics → Prometheus remote-write path (later).

        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
