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
//! - `spanmetrics_record`: the default config's span-metrics connector recording every span
//!   of a request into a warm aggregator (its series already exist);
//!   `spanmetrics_record_views`: the same request carrying the receiver's views.
//! - `sampler`: the tail sampler with the seed policies (status_code ERROR + probabilistic
//!   10%): parse + insert every span of a request into a fresh buffer (`sampler_insert`),
//!   and deciding every buffered trace and framing the kept ones (`sampler_decide`).
//!
//! A separate group, `remote_write`, times the translation of a span-metrics-shaped
//! `ExportMetricsServiceRequest` into Prometheus series, per data point.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics,
    ScopeMetrics, Sum, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use tailgate::config::{ComponentId, ConnectorConfig, ProcessorConfig, TailSamplingConfig};
use tailgate::connector::{SpanMetricsFlusher, SpanMetricsMetricFamilies};
use tailgate::exporter::remote_write::translate::{Options, translate};
use tailgate::exporter::remote_write::v1;
use tailgate::limiter::MemoryBudget;
use tailgate::loadgen::{Generator, GeneratorConfig};
use tailgate::otlp::{
    TraceRequestWriter, count_spans, parse_traces_request, split_batch, traces_json_to_protobuf,
};
use tailgate::payload::{Consumer, Downstream, MetricsSink, Payload, TraceBatch};
use tailgate::sampler::policy::PolicySet;
use tailgate::sampler::{SamplerIngest, SamplerMetrics, SamplerSettings, TailSampler};
use tokio::sync::mpsc;

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
            b.iter(|| split_batch(black_box(&bytes), spans, Some(100), usize::MAX).expect("valid"))
        });

        // === span metrics: every span of a request into a warm aggregator, per span ===
        // The default topology's connector with its default dimensions; its series exist
        // after the first iteration, as in a running gateway.
        let (id, span_metrics) = default_span_metrics_config();
        let (connector, _flusher) = SpanMetricsFlusher::start(
            &id,
            &span_metrics,
            SpanMetricsMetricFamilies::register(&prometheus::Registry::new())
                .expect("fresh registry")
                .for_connector(&id),
            MetricsSink::new(Vec::new(), MemoryBudget::unlimited()),
            MemoryBudget::unlimited(),
        );
        group.bench_function("spanmetrics_record", |b| {
            // Recording is done when `consume` returns; its future is ready.
            b.iter(|| drop(connector.consume(black_box(batch.clone()))))
        });
        // The same batch carrying the receiver's views (the default topology's path since
        // views travel through the queue in front of connectors): no skim.
        let views = TraceBatch::inspect(&batch.request, true)
            .expect("valid")
            .views
            .expect("asked for");
        let carrying = batch.clone().carrying_views(views, None);
        group.bench_function("spanmetrics_record_views", |b| {
            b.iter(|| drop(connector.consume(black_box(carrying.clone()))))
        });

        // === sampler: buffer insert and decide, per span ===
        // Each iteration gets a fresh sampler (built outside the timing), as in the
        // gateway: 16 shards, the seed's policies and timings. Compare with
        // `floor_scan_copy`: the target is within 3× of the floor.
        let tail_sampling = seed_sampler_config();
        group.bench_function("sampler_insert", |b| {
            b.iter_batched(
                || start_sampler(&tail_sampling),
                |(ingest, closed)| {
                    ingest.ingest(black_box(&batch)).expect("valid");
                    (ingest, closed)
                },
                BatchSize::PerIteration,
            )
        });
        // Decides every buffered trace (the shutdown round: all of them at once) and frames
        // the kept ~11 % into requests; per span, so a trace (6 spans) costs 6× this.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        group.bench_function("sampler_decide", |b| {
            b.iter_batched(
                || {
                    let (ingest, closed) = start_sampler(&tail_sampling);
                    ingest.ingest(&batch).expect("valid");
                    let (tx, rx) = mpsc::channel(1024);
                    (ingest.sampler().clone(), closed, tx, rx)
                },
                |(sampler, closed, tx, rx)| {
                    // The ingest handle is gone: `run` decides everything and returns.
                    runtime.block_on(sampler.run(closed, Downstream::stage(tx)));
                    rx
                },
                BatchSize::PerIteration,
            )
        });

        group.finish();
    }

    // === remote_write translation (span metrics → Prometheus series) ===
    let metrics = span_metrics_request(2, 40);
    let points = 2 * 40 * 2;
    let options = Options {
        target_info: true,
        add_metric_suffixes: true,
        ..Options::default()
    };
    assert_eq!(translate(&metrics, &options).points(), points);
    let mut group = c.benchmark_group(format!("remote_write_{points}_points"));
    group.throughput(Throughput::Elements(points as u64));
    group.bench_function("translate", |b| {
        b.iter(|| translate(black_box(&metrics), &options))
    });
    group.bench_function("translate_encode_v1", |b| {
        b.iter(|| translate_encode_v1(black_box(&metrics), &options))
    });
    group.finish();
}

/// What the remote-write exporter does per request on the 1.0 path, short of sharding and
/// compression: translate, encode the series, and drop them. Returns the encoded size.
#[inline(never)]
fn translate_encode_v1(metrics: &ExportMetricsServiceRequest, options: &Options) -> usize {
    let translated = translate(metrics, options);
    v1::encode(&translated.series, &translated.metadata).len()
}

/// The seed's `tail_sampling` (benches/configs/seed.yaml): status_code ERROR, then
/// probabilistic 10%; decision_wait 2s, 1s after the root.
fn seed_sampler_config() -> TailSamplingConfig {
    let yaml = "receivers: {otlp: {protocols: {grpc: {}}}}
processors:
  tail_sampling:
    decision_wait: 2s
    decision_wait_after_root_received: 1s
    policies:
      - {name: errors, type: status_code, status_code: {status_codes: [ERROR]}}
      - {name: baseline, type: probabilistic, probabilistic: {sampling_percentage: 10}}
exporters: {debug: {}}
service: {pipelines: {traces: {receivers: [otlp], processors: [tail_sampling], exporters: [debug]}}}
";
    let config = tailgate::config::load_str(&[yaml]).expect("valid sampler config");
    match config.processors.into_values().next() {
        Some(ProcessorConfig::TailSampling(tail_sampling)) => tail_sampling,
        _ => panic!("tail_sampling configured"),
    }
}

/// The built-in default config's span-metrics connector.
fn default_span_metrics_config() -> (ComponentId, tailgate::config::SpanMetricsConfig) {
    let config = tailgate::config::load_str(&[tailgate::config::DEFAULT_CONFIG])
        .expect("the default config loads");
    config
        .connectors
        .into_iter()
        .find_map(|(id, connector)| match connector {
            ConnectorConfig::SpanMetrics(span_metrics) => Some((id, span_metrics)),
            _ => None,
        })
        .expect("the default config has a spanmetrics connector")
}

/// A sampler as the gateway builds it (16 shards, unlimited budget).
fn start_sampler(config: &TailSamplingConfig) -> (SamplerIngest, mpsc::Receiver<()>) {
    let policies = PolicySet::compile(config).expect("policies compile");
    let metrics = SamplerMetrics::unregistered(policies.names());
    TailSampler::start(
        SamplerSettings::from(config),
        policies,
        metrics,
        MemoryBudget::unlimited(),
        16,
    )
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

/// What the spanmetrics connector emits for `services` services of `series` span
/// (name, kind, status) combinations each: a cumulative `traces.span.metrics.calls` sum
/// and a cumulative `traces.span.metrics.duration` histogram (the connector's 16 default
/// bounds, in ms), one point per combination in each.
fn span_metrics_request(services: usize, series: usize) -> ExportMetricsServiceRequest {
    const BOUNDS: [f64; 16] = [
        2.0, 4.0, 6.0, 8.0, 10.0, 50.0, 100.0, 200.0, 400.0, 800.0, 1000.0, 1400.0, 2000.0, 5000.0,
        10000.0, 15000.0,
    ];
    let start = END - 60_000_000_000;
    let attributes = |service: usize, i: usize| {
        vec![
            kv("service.name", &format!("service-{service}")),
            kv("span.name", &format!("operation-{}", i / 4)),
            kv(
                "span.kind",
                if i.is_multiple_of(2) {
                    "SPAN_KIND_SERVER"
                } else {
                    "SPAN_KIND_INTERNAL"
                },
            ),
            kv(
                "status.code",
                if i % 4 < 2 {
                    "STATUS_CODE_UNSET"
                } else {
                    "STATUS_CODE_ERROR"
                },
            ),
        ]
    };
    let resource_metrics = (0..services)
        .map(|service| {
            let calls = (0..series)
                .map(|i| NumberDataPoint {
                    attributes: attributes(service, i),
                    start_time_unix_nano: start,
                    time_unix_nano: END,
                    value: Some(number_data_point::Value::AsInt(100 + i as i64)),
                    ..Default::default()
                })
                .collect();
            let durations = (0..series)
                .map(|i| {
                    let bucket_counts: Vec<u64> =
                        (0..=BOUNDS.len() as u64).map(|b| b + i as u64).collect();
                    HistogramDataPoint {
                        attributes: attributes(service, i),
                        start_time_unix_nano: start,
                        time_unix_nano: END,
                        count: bucket_counts.iter().sum(),
                        sum: Some(1234.5 + i as f64),
                        bucket_counts,
                        explicit_bounds: BOUNDS.to_vec(),
                        ..Default::default()
                    }
                })
                .collect();
            ResourceMetrics {
                resource: Some(Resource {
                    attributes: vec![
                        kv("service.name", &format!("service-{service}")),
                        kv("service.instance.id", &format!("instance-{service}")),
                        kv("k8s.namespace.name", "operators"),
                    ],
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![
                        Metric {
                            name: "traces.span.metrics.calls".into(),
                            data: Some(metric::Data::Sum(Sum {
                                data_points: calls,
                                aggregation_temporality: AggregationTemporality::Cumulative as i32,
                                is_monotonic: true,
                            })),
                            ..Default::default()
                        },
                        Metric {
                            name: "traces.span.metrics.duration".into(),
                            unit: "ms".into(),
                            data: Some(metric::Data::Histogram(
                                opentelemetry_proto::tonic::metrics::v1::Histogram {
                                    data_points: durations,
                                    aggregation_temporality: AggregationTemporality::Cumulative
                                        as i32,
                                },
                            )),
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }
        })
        .collect();
    ExportMetricsServiceRequest { resource_metrics }
}

criterion_group!(benches, bench);
criterion_main!(benches);
