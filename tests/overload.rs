//! Overload: clients offer far more than the gateway can export (a slow backend) with a
//! 64 MiB memory limit. The gateway must stay within the limit, push back with retryable
//! refusals that the clients retry, and account for every span it accepted.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use tokio::time::Instant;

use crate::support::process::{GatewayProcess, RssWatcher};
use crate::support::{self, OtlpSink, SinkBehavior};

const LIMIT_MIB: u64 = 64;
const LOAD: Duration = Duration::from_secs(12);
const SLOW: Duration = Duration::from_secs(16);
const SENDERS: u64 = 4;
const TRACES_PER_REQUEST: u64 = 40;
const SPANS_PER_TRACE: u64 = 6;

fn config(sink: std::net::SocketAddr) -> String {
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
processors:
  memory_limiter:
    check_interval: 100ms
    limit_mib: {LIMIT_MIB}
  tail_sampling:
    decision_wait: 1s
    policies:
      - {{name: errors, type: status_code, status_code: {{status_codes: [ERROR]}}}}
      - {{name: rest, type: always_sample}}
  batch:
    send_batch_size: 500
    send_batch_max_size: 500
exporters:
  otlp/slow:
    endpoint: {sink}
    tls:
      insecure: true
    sending_queue:
      num_consumers: 1
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [memory_limiter, tail_sampling, batch]
      exporters: [otlp/slow]
  telemetry:
    metrics:
      address: 127.0.0.1:0
    logs:
      level: info
  shutdown_timeout: 20s
"#
    )
}

fn string_value(value: String) -> Option<AnyValue> {
    Some(AnyValue {
        value: Some(any_value::Value::StringValue(value)),
    })
}

/// A request of whole operator-shaped traces (6 spans, 10 attributes each); every 29th
/// trace fails. Returns the request and the ids of its failing traces.
fn request(sender: u64, sequence: u64) -> (ExportTraceServiceRequest, Vec<[u8; 16]>) {
    let mut spans = Vec::new();
    let mut failing = Vec::new();
    for t in 0..TRACES_PER_REQUEST {
        let trace = (sender << 48) | (sequence * TRACES_PER_REQUEST + t);
        let trace_id = (u128::from(trace) + 1)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)
            .to_be_bytes();
        let error = trace.is_multiple_of(29);
        if error {
            failing.push(trace_id);
        }
        for s in 0..SPANS_PER_TRACE {
            spans.push(Span {
                trace_id: trace_id.to_vec(),
                span_id: ((trace << 3) | (s + 1)).to_be_bytes().to_vec(),
                parent_span_id: if s == 0 {
                    Vec::new()
                } else {
                    (trace << 3 | 1).to_be_bytes().to_vec()
                },
                name: format!("op-{s}"),
                kind: 2,
                start_time_unix_nano: 1_000_000_000,
                end_time_unix_nano: 1_000_000_000 + s * 1_000_000,
                attributes: (0..10)
                    .map(|a| KeyValue {
                        key: format!("attribute.{a}"),
                        key_strindex: 0,
                        value: string_value(format!("value-{a}-{trace}")),
                    })
                    .collect(),
                status: (error && s == 5).then(|| Status {
                    code: 2,
                    message: "failed".into(),
                }),
                ..Default::default()
            });
        }
    }
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.name".into(),
                    key_strindex: 0,
                    value: string_value("load".into()),
                }],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    (request, failing)
}

#[derive(Default)]
struct ClientCounts {
    accepted_spans: AtomicU64,
    refusals: AtomicU64,
    gave_up_spans: AtomicU64,
}

/// Sends whole-trace requests as fast as they are accepted until `until`, retrying
/// retryable refusals with a capped backoff; returns the failing traces it got accepted.
async fn sender(
    endpoint: String,
    id: u64,
    until: Instant,
    counts: Arc<ClientCounts>,
) -> Vec<[u8; 16]> {
    let mut client = TraceServiceClient::connect(endpoint)
        .await
        .expect("connect")
        .max_decoding_message_size(1 << 20);
    let mut accepted_failing = Vec::new();
    let mut sequence = 0;
    while Instant::now() < until {
        let (request, failing) = request(id, sequence);
        sequence += 1;
        let spans = TRACES_PER_REQUEST * SPANS_PER_TRACE;
        let mut backoff = Duration::from_millis(20);
        let mut accepted = false;
        for _attempt in 0..40 {
            match client.export(request.clone()).await {
                Ok(_) => {
                    accepted = true;
                    break;
                }
                Err(status)
                    if matches!(
                        status.code(),
                        tonic::Code::Unavailable | tonic::Code::ResourceExhausted
                    ) =>
                {
                    counts.refusals.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                Err(status) => panic!("non-retryable answer under load: {status}"),
            }
        }
        if accepted {
            counts.accepted_spans.fetch_add(spans, Ordering::Relaxed);
            accepted_failing.extend(failing);
        } else {
            counts.gave_up_spans.fetch_add(spans, Ordering::Relaxed);
        }
    }
    accepted_failing
}

/// Scenario: four clients send operator-shaped traces as fast as they are accepted for
/// 12 s into the tailgate binary with `memory_limiter: limit_mib: 64` and a sampler that
/// keeps everything (so the load cannot shrink away), while the backend answers each export
/// after 1 s (one consumer, 500-span batches: about 500 spans/s, a small fraction of what
/// is offered); then the backend recovers and the gateway drains.
/// Guarantees: the process RSS stays under 64 MiB for the whole run; clients receive
/// retryable refusals and get their data in by retrying; at the end
/// accepted = exported + not sampled + dropped, with nothing dropped, and every accepted
/// trace with an error reaches the backend whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_stays_within_memory_and_loses_nothing() {
    let sink = OtlpSink::start(SinkBehavior::SlowFor {
        period: SLOW,
        delay: Duration::from_secs(1),
    })
    .await;
    let gateway = GatewayProcess::start(&config(sink.addr));
    let watcher = RssWatcher::start(gateway.pid());
    let address = gateway.grpc.clone();
    let metrics_url = gateway.metrics_url.clone();

    let counts = Arc::new(ClientCounts::default());
    let until = Instant::now() + LOAD;
    let senders: Vec<_> = (0..SENDERS)
        .map(|id| {
            tokio::spawn(sender(
                format!("http://{address}"),
                id,
                until,
                counts.clone(),
            ))
        })
        .collect();
    let mut failing_accepted = Vec::new();
    for handle in senders {
        failing_accepted.extend(handle.await.expect("sender"));
    }

    // The backend recovers; wait until everything decided has been exported.
    let accepted = counts.accepted_spans.load(Ordering::Relaxed) as f64;
    let drained = support::eventually(Duration::from_secs(60), || {
        let url = metrics_url.clone();
        async move {
            let (_, text) = support::reqwest_get(&url).await;
            let value = |name: &str, labels: &[&str]| support::metric_value(&text, name, labels);
            let settled = value("otelcol_exporter_sent_spans_total", &[])
                + value("tailgate_sampler_spans_total", &["outcome=\"not_sampled\""])
                + value("tailgate_spans_dropped_total", &[]);
            value("tailgate_sampler_spans_held", &[]) == 0.0 && settled >= accepted
        }
    })
    .await;
    let (_, metrics) = support::reqwest_get(&metrics_url).await;
    let peak_mib = watcher.stop();
    gateway.sigterm();
    let (status, lines) = gateway.wait(Duration::from_secs(30)).await;
    assert!(status.is_some(), "tailgate exits after SIGTERM");

    let value = |name: &str, labels: &[&str]| support::metric_value(&metrics, name, labels);
    let refusals = counts.refusals.load(Ordering::Relaxed);
    let gave_up = counts.gave_up_spans.load(Ordering::Relaxed);
    let report = format!(
        "peak RSS {peak_mib:.1} MiB; accepted {accepted} spans; refusals {refusals}; gave up on {gave_up} spans; \
         exported {}; not sampled {}; dropped {}; early decisions (memory) {}; refused requests {}",
        value("otelcol_exporter_sent_spans_total", &[]),
        value("tailgate_sampler_spans_total", &["outcome=\"not_sampled\""]),
        value("tailgate_spans_dropped_total", &[]),
        value(
            "tailgate_sampler_early_decisions_total",
            &["reason=\"memory_pressure\""]
        ),
        value(
            "tailgate_receiver_refused_requests_total",
            &["reason=\"overloaded\""]
        ),
    );
    eprintln!("overload: {report}");
    for line in lines
        .iter()
        .filter(|l| l.contains("memory_limiter") || l.contains("WARN") || l.contains("ERROR"))
    {
        eprintln!("{line}");
    }
    assert!(
        drained,
        "the gateway drained after the backend recovered: {report}\n{}",
        lines.join("\n")
    );
    assert!(
        peak_mib < LIMIT_MIB as f64,
        "RSS stayed under limit_mib: {report}"
    );
    assert!(refusals > 0, "clients were pushed back: {report}");
    assert_eq!(
        value("otelcol_receiver_accepted_spans_total", &[]),
        accepted,
        "{report}"
    );
    assert_eq!(value("tailgate_spans_dropped_total", &[]), 0.0, "{report}");
    assert_eq!(
        accepted,
        value("otelcol_exporter_sent_spans_total", &[])
            + value("tailgate_sampler_spans_total", &["outcome=\"not_sampled\""])
            + value("tailgate_spans_dropped_total", &[]),
        "accepted = exported + not sampled + dropped: {report}"
    );

    let mut received: HashMap<[u8; 16], usize> = HashMap::new();
    for span in sink.handle.spans() {
        let id: [u8; 16] = span.span.trace_id.as_slice().try_into().expect("16 bytes");
        *received.entry(id).or_default() += 1;
    }
    assert!(!failing_accepted.is_empty());
    for trace in &failing_accepted {
        assert_eq!(
            received.get(trace).copied(),
            Some(SPANS_PER_TRACE as usize),
            "an accepted error trace arrived whole"
        );
    }
}

/// Scenario: one client streams a single trace of ~100 MB (100 requests of ~1 MB) into
/// the tailgate binary (`limit_mib: 64`, `maximum_trace_size_bytes: 1 MiB`) while another
/// sends small traces with errors; the huge trace is one the 10% draw does not keep.
/// Guarantees: the RSS never reaches the limit; the huge trace is decided as soon as it
/// passes the size cap and its later spans are dropped through the decision cache
/// (counted); every small error trace is exported, each decided within its 2 s decision
/// window plus slack (the huge trace does not hold the others up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_trace_does_not_move_memory_or_delay_others() {
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let config = format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc: {{endpoint: 127.0.0.1:0}}
processors:
  memory_limiter: {{check_interval: 100ms, limit_mib: {LIMIT_MIB}}}
  tail_sampling:
    decision_wait: 2s
    maximum_trace_size_bytes: 1048576
    policies:
      - {{name: errors, type: status_code, status_code: {{status_codes: [ERROR]}}}}
      - {{name: baseline, type: probabilistic, probabilistic: {{sampling_percentage: 10}}}}
  batch: {{}}
exporters:
  otlp/sink: {{endpoint: "{sink}", tls: {{insecure: true}}}}
service:
  pipelines:
    traces: {{receivers: [otlp], processors: [memory_limiter, tail_sampling, batch], exporters: [otlp/sink]}}
  telemetry:
    metrics: {{address: 127.0.0.1:0}}
"#,
        sink = sink.addr
    );
    let gateway = GatewayProcess::start(&config);
    let watcher = RssWatcher::start(gateway.pid());
    let endpoint = format!("http://{}", gateway.grpc);

    // The huge trace: randomness 1 (the lowest), so the 10% draw never keeps it.
    let huge_id = [[0xaa; 8], [0, 0, 0, 0, 0, 0, 0, 1]].concat();
    let huge = tokio::spawn({
        let endpoint = endpoint.clone();
        let huge_id = huge_id.clone();
        async move {
            let mut client = TraceServiceClient::connect(endpoint)
                .await
                .expect("connect");
            let mut refused = 0;
            for part in 0..100u64 {
                let spans = (0..1_500u64)
                    .map(|i| Span {
                        trace_id: huge_id.clone(),
                        span_id: ((part << 16) | (i + 1)).to_be_bytes().to_vec(),
                        parent_span_id: 1u64.to_be_bytes().to_vec(),
                        name: "chunk".into(),
                        attributes: (0..10)
                            .map(|a| KeyValue {
                                key: format!("attribute.{a}"),
                                key_strindex: 0,
                                value: string_value(format!("{:0>50}", part * 100_000 + i)),
                            })
                            .collect(),
                        ..Default::default()
                    })
                    .collect();
                let request = ExportTraceServiceRequest {
                    resource_spans: vec![ResourceSpans {
                        scope_spans: vec![ScopeSpans {
                            spans,
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                };
                // Retry refusals so the whole trace is offered.
                for _ in 0..50 {
                    match client.export(request.clone()).await {
                        Ok(_) => break,
                        Err(_) => {
                            refused += 1;
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
            }
            refused
        }
    });
    let mut client = TraceServiceClient::connect(endpoint)
        .await
        .expect("connect");
    let mut small_errors = 0u64;
    for sequence in 0..20 {
        let (request, failing) = request(7, sequence);
        small_errors += failing.len() as u64;
        client.export(request).await.expect("small traces accepted");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let refused_huge = huge.await.expect("huge sender");
    let small_error_spans = small_errors * SPANS_PER_TRACE;
    let arrived = support::eventually(Duration::from_secs(20), || {
        let handle = sink.handle.clone();
        let huge_id = huge_id.clone();
        async move {
            handle
                .spans()
                .iter()
                .filter(|s| {
                    s.span.trace_id != huge_id
                        && s.span.status.as_ref().is_some_and(|st| st.code == 2)
                })
                .count() as u64
                >= small_errors
        }
    })
    .await;
    let (_, metrics) = support::reqwest_get(&gateway.metrics_url).await;
    let peak_mib = watcher.stop();
    gateway.sigterm();
    let _ = gateway.wait(Duration::from_secs(30)).await;

    let value = |name: &str, labels: &[&str]| support::metric_value(&metrics, name, labels);
    let received = sink.handle.spans();
    let huge_received = received
        .iter()
        .filter(|s| s.span.trace_id == huge_id)
        .count();
    let report = format!(
        "peak RSS {peak_mib:.1} MiB; huge trace refusals {refused_huge}; huge spans received {huge_received}; \
         too large {}; late not-kept spans {}; small error spans expected {small_error_spans}",
        value(
            "otelcol_processor_tail_sampling_traces_dropped_too_large_total",
            &[]
        ),
        value(
            "otelcol_processor_tail_sampling_early_releases_from_cache_decision_total",
            &["sampled=\"false\""]
        ),
    );
    eprintln!("huge trace: {report}");
    assert!(arrived, "every small error trace arrived: {report}");
    assert!(
        peak_mib < LIMIT_MIB as f64,
        "RSS stayed under limit_mib: {report}"
    );
    assert_eq!(huge_received, 0, "the huge trace was not kept: {report}");
    assert_eq!(
        value(
            "otelcol_processor_tail_sampling_traces_dropped_too_large_total",
            &[]
        ),
        1.0,
        "{report}"
    );
    assert!(
        value(
            "otelcol_processor_tail_sampling_early_releases_from_cache_decision_total",
            &["sampled=\"false\""]
        ) > 100_000.0,
        "the huge trace's later spans were dropped at once through the cache: {report}"
    );
    let decided = value("tailgate_sampler_decision_delay_seconds_count", &[]);
    let within = value(
        "tailgate_sampler_decision_delay_seconds_bucket",
        &["le=\"5\""],
    );
    assert_eq!(
        within, decided,
        "every trace decided within 5 s of its first span: {report}"
    );
}
