//! Criterion benches of the OTLP wire reader against prost decode, on a realistic request:
//! one resource, one scope, 100 spans of 10 attributes each.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;
use tailgate::otlp::{TraceRequestWriter, count_spans, parse_traces_request};

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        key_strindex: 0,
    }
}

fn request() -> Bytes {
    use any_value::Value as V;
    let spans = (0..100u64)
        .map(|i| Span {
            trace_id: (0..16).map(|b| b ^ (i as u8)).collect(),
            span_id: (0..8).map(|b| b + (i as u8)).collect(),
            parent_span_id: if i == 0 { vec![] } else { vec![7; 8] },
            name: format!("GET /api/v1/items/{{id}} #{i}"),
            kind: 2,
            start_time_unix_nano: 1_700_000_000_000_000_000 + i * 1000,
            end_time_unix_nano: 1_700_000_000_000_500_000 + i * 1000,
            attributes: vec![
                kv("http.request.method", V::StringValue("GET".into())),
                kv("http.route", V::StringValue("/api/v1/items/{id}".into())),
                kv("http.response.status_code", V::IntValue(200)),
                kv(
                    "url.full",
                    V::StringValue(format!("https://shop.example.com/api/v1/items/{i}")),
                ),
                kv("server.address", V::StringValue("shop.example.com".into())),
                kv("server.port", V::IntValue(443)),
                kv("network.protocol.version", V::StringValue("1.1".into())),
                kv(
                    "user_agent.original",
                    V::StringValue("Mozilla/5.0 (X11; Linux x86_64)".into()),
                ),
                kv("app.cache_hit", V::BoolValue(i % 3 == 0)),
                kv("app.load", V::DoubleValue(0.25 * i as f64)),
            ],
            status: Some(Status {
                message: String::new(),
                code: if i % 10 == 0 { 2 } else { 0 },
            }),
            ..Default::default()
        })
        .collect();
    let req = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", V::StringValue("checkout".into())),
                    kv("service.version", V::StringValue("1.42.0".into())),
                    kv("k8s.namespace.name", V::StringValue("shop".into())),
                    kv(
                        "k8s.pod.name",
                        V::StringValue("checkout-7d9f8b6c5-x2x9z".into()),
                    ),
                ],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "opentelemetry-http".into(),
                    version: "0.33.0".into(),
                    ..Default::default()
                }),
                spans,
                schema_url: String::new(),
            }],
            schema_url: "https://opentelemetry.io/schemas/1.30.0".into(),
        }],
    };
    Bytes::from(req.encode_to_vec())
}

fn bench(c: &mut Criterion) {
    let buf = request();
    let mut group = c.benchmark_group("otlp_wire_100_spans");
    group.throughput(Throughput::Bytes(buf.len() as u64));
    group.bench_function("count_spans", |b| {
        b.iter(|| count_spans(black_box(&buf)).expect("valid"))
    });
    group.bench_function("parse_traces_request", |b| {
        b.iter(|| parse_traces_request(black_box(&buf)).expect("valid"))
    });
    group.bench_function("parse_and_reframe", |b| {
        b.iter(|| {
            let mut w = TraceRequestWriter::new();
            for rs in parse_traces_request(black_box(&buf)).expect("valid") {
                for ss in &rs.scope_spans {
                    for span in &ss.spans {
                        w.push_view(&rs, ss, span);
                    }
                }
            }
            w.finish()
        })
    });
    group.bench_function("prost_decode", |b| {
        b.iter(|| ExportTraceServiceRequest::decode(black_box(&buf[..])).expect("valid"))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
