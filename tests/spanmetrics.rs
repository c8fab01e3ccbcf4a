//! Span metrics before tail sampling, end to end: `traces/in -> spanmetrics + forward ->
//! traces/sampled (tail_sampling 10%)` and `metrics -> OTLP sink`. Request counts must be
//! exact while only about a tenth of the traces are kept.

use std::collections::HashMap;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

use crate::support::metrics_sink::str_attr;
use crate::support::{self, MetricsSink, OtlpSink, SinkBehavior};

const TRACES: usize = 2_000;
const TRACES_PER_REQUEST: usize = 100;

/// (span name, kind, status code name) -> spans sent.
type Expected = HashMap<(String, &'static str, &'static str), i64>;

fn config(traces_sink: std::net::SocketAddr, metrics_sink: std::net::SocketAddr) -> String {
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
processors:
  tail_sampling:
    decision_wait: 300ms
    policies:
      - name: baseline
        type: probabilistic
        probabilistic:
          sampling_percentage: 10
  batch:
    timeout: 50ms
exporters:
  otlp/tempo:
    endpoint: {traces_sink}
    tls:
      insecure: true
  otlp/prometheus:
    endpoint: {metrics_sink}
    tls:
      insecure: true
connectors:
  spanmetrics:
    metrics_flush_interval: 500ms
  forward:
service:
  pipelines:
    traces/in: {{receivers: [otlp], exporters: [spanmetrics, forward]}}
    traces/sampled: {{receivers: [forward], processors: [tail_sampling, batch], exporters: [otlp/tempo]}}
    metrics: {{receivers: [otlp, spanmetrics], processors: [batch], exporters: [otlp/prometheus]}}
  telemetry:
    metrics:
      address: 127.0.0.1:0
"#
    )
}

fn span(trace_id: &[u8; 16], index: u64, parent: Option<u64>, name: &str, kind: i32) -> Span {
    let start = 1_700_000_000_000_000_000 + index * 1_000;
    Span {
        trace_id: trace_id.to_vec(),
        span_id: (index + 1).to_be_bytes().to_vec(),
        parent_span_id: parent
            .map(|p| (p + 1).to_be_bytes().to_vec())
            .unwrap_or_default(),
        name: name.into(),
        kind,
        start_time_unix_nano: start,
        end_time_unix_nano: start + (index % 50) * 1_000_000,
        ..Default::default()
    }
}

/// Operator-shaped traces (a Reconcile server span and four client/internal children),
/// with a known set of error children; returns the requests and the expected counts.
fn traces() -> (Vec<ExportTraceServiceRequest>, Expected) {
    let mut expected = Expected::new();
    let mut requests = Vec::new();
    let mut index = 0u64;
    for chunk in 0..TRACES / TRACES_PER_REQUEST {
        let mut spans = Vec::new();
        for t in 0..TRACES_PER_REQUEST {
            let trace = chunk * TRACES_PER_REQUEST + t;
            let trace_id: [u8; 16] = rand::random();
            let root = index;
            spans.push(span(&trace_id, root, None, "Reconcile", 2));
            *expected
                .entry(("Reconcile".into(), "SPAN_KIND_SERVER", "STATUS_CODE_UNSET"))
                .or_default() += 1;
            index += 1;
            for (child, (name, kind, kind_name)) in [
                ("Get", 3, "SPAN_KIND_CLIENT"),
                ("fetchExternal", 1, "SPAN_KIND_INTERNAL"),
                ("HTTP GET", 3, "SPAN_KIND_CLIENT"),
                ("Patch", 3, "SPAN_KIND_CLIENT"),
            ]
            .into_iter()
            .enumerate()
            {
                let mut s = span(&trace_id, index, Some(root), name, kind);
                let error = (trace + child).is_multiple_of(17);
                let status = if error {
                    s.status = Some(Status {
                        message: "apply failed".into(),
                        code: 2,
                    });
                    "STATUS_CODE_ERROR"
                } else {
                    "STATUS_CODE_UNSET"
                };
                *expected
                    .entry((name.into(), kind_name, status))
                    .or_default() += 1;
                spans.push(s);
                index += 1;
            }
        }
        requests.push(ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![KeyValue {
                        key: "service.name".into(),
                        value: Some(AnyValue {
                            value: Some(any_value::Value::StringValue("widget-operator".into())),
                        }),
                        key_strindex: 0,
                    }],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                schema_url: String::new(),
            }],
        });
    }
    (requests, expected)
}

/// Scenario: 2,000 operator-shaped traces (10,000 spans, a known number of them errors)
/// enter `traces/in`, which feeds the spanmetrics connector and, through `forward`, a tail
/// sampler keeping 10% by trace id; span metrics go to an OTLP metrics sink; the gateway is
/// then shut down.
/// Guarantees: the cumulative `traces.span.metrics.calls` at the last flush equal the
/// spans sent per (service, span name, kind, status), exactly, errors included, while only
/// about 10% of the traces reach the traces sink; the last flush happens at shutdown,
/// before the metrics pipeline drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn span_metrics_are_exact_before_sampling() {
    let traces_sink = OtlpSink::start(SinkBehavior::Accept).await;
    let metrics_sink = MetricsSink::start().await;
    let gateway = support::start_gateway(&config(traces_sink.addr, metrics_sink.addr)).await;
    let (requests, expected) = traces();
    let errors: i64 = expected
        .iter()
        .filter(|((_, _, status), _)| *status == "STATUS_CODE_ERROR")
        .map(|(_, n)| n)
        .sum();
    assert!(errors > 0);

    let mut client =
        TraceServiceClient::connect(format!("http://{}", support::grpc_addr(&gateway)))
            .await
            .expect("connect");
    for request in requests {
        client.export(request).await.expect("accepted");
    }
    // The drain decides every trace and flushes the span metrics once more: no mid-run
    // flush is needed for the assertions below.
    let report = gateway.shutdown().await;
    assert!(report.completed, "{report:?}");

    // Cumulative and monotonic: the largest value per series is the last flush's.
    let mut last: HashMap<(String, String, String), f64> = HashMap::new();
    for got in metrics_sink.metrics() {
        assert_eq!(
            str_attr(&got.resource.attributes, "service.name"),
            Some("widget-operator")
        );
        if got.metric.name != "traces.span.metrics.calls" {
            continue;
        }
        let Some(metric::Data::Sum(sum)) = &got.metric.data else {
            panic!("calls is a Sum");
        };
        for point in &sum.data_points {
            assert_eq!(
                str_attr(&point.attributes, "service.name"),
                Some("widget-operator")
            );
            let key = (
                str_attr(&point.attributes, "span.name").unwrap().to_owned(),
                str_attr(&point.attributes, "span.kind").unwrap().to_owned(),
                str_attr(&point.attributes, "status.code")
                    .unwrap()
                    .to_owned(),
            );
            let Some(number_data_point::Value::AsInt(value)) = point.value else {
                panic!("calls are integers");
            };
            let entry = last.entry(key).or_insert(0.0);
            *entry = entry.max(value as f64);
        }
    }
    let want: HashMap<(String, String, String), f64> = expected
        .into_iter()
        .map(|((name, kind, status), n)| ((name, kind.to_owned(), status.to_owned()), n as f64))
        .collect();
    assert_eq!(last, want, "calls per series equal the spans sent");

    let kept_traces: std::collections::HashSet<Vec<u8>> = traces_sink
        .handle
        .spans()
        .into_iter()
        .map(|s| s.span.trace_id)
        .collect();
    assert!(
        (100..=320).contains(&kept_traces.len()),
        "about 10% of {TRACES} traces kept, got {}",
        kept_traces.len()
    );
}
