//! The metrics leg against a real Prometheus server: the OpenTelemetry Rust SDK's metrics,
//! and span metrics computed before tail sampling, read back with PromQL.

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue as ProtoKeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};

use crate::support::prometheus::Prometheus;
use crate::support::{self, OtlpSink, SinkBehavior};

fn gateway_config(write_url: &str, traces_sink: std::net::SocketAddr) -> String {
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
      - {{name: errors, type: status_code, status_code: {{status_codes: [ERROR]}}}}
      - {{name: baseline, type: probabilistic, probabilistic: {{sampling_percentage: 10}}}}
  batch:
    timeout: 50ms
exporters:
  otlp/tempo:
    endpoint: {traces_sink}
    tls:
      insecure: true
  prometheusremotewrite:
    endpoint: {write_url}
connectors:
  spanmetrics:
    metrics_flush_interval: 500ms
  forward:
service:
  pipelines:
    traces/in: {{receivers: [otlp], exporters: [spanmetrics, forward]}}
    traces/sampled: {{receivers: [forward], processors: [tail_sampling, batch], exporters: [otlp/tempo]}}
    metrics: {{receivers: [otlp, spanmetrics], processors: [batch], exporters: [prometheusremotewrite]}}
  telemetry:
    metrics:
      address: 127.0.0.1:0
"#
    )
}

/// Polls `promql` until it returns `want` or `limit` passes; returns the last value.
async fn value_eventually(
    prometheus: &Prometheus,
    promql: &str,
    want: f64,
    limit: Duration,
) -> Option<f64> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let value = prometheus.value(promql, None).await;
        if value == Some(want) || tokio::time::Instant::now() >= deadline {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Scenario: the SDK sends a counter, an up-down counter, a gauge and a histogram to
/// tailgate over OTLP/gRPC; tailgate writes them to a real Prometheus with remote_write.
/// Guarantees: PromQL returns the translated names (`_total`, unit suffixes), the
/// attributes as labels, `job`/`instance` from the resource, the values, the histogram's
/// cumulative buckets, and `target_info` with the resource's other attributes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_metrics_reach_prometheus() {
    let prometheus = Prometheus::start().await;
    let traces_sink = OtlpSink::start(SinkBehavior::Accept).await;
    let gateway =
        support::start_gateway(&gateway_config(&prometheus.write_url(), traces_sink.addr)).await;
    let endpoint = format!("http://{}", support::grpc_addr(&gateway));
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let _guard = handle.enter();
        let exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .build()
            .expect("exporter builds");
        let reader = PeriodicReader::builder(exporter)
            .with_interval(Duration::from_secs(3600))
            .build();
        let provider = SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(
                opentelemetry_sdk::Resource::builder_empty()
                    .with_service_name("widget-operator")
                    .with_attribute(KeyValue::new("service.instance.id", "pod-1"))
                    .with_attribute(KeyValue::new("k8s.namespace.name", "operators"))
                    .build(),
            )
            .build();
        let meter = provider.meter("e2e");
        let reconciles = meter.u64_counter("reconciles").build();
        let queue = meter.i64_up_down_counter("queue_depth").build();
        let temperature = meter.f64_gauge("temperature").with_unit("Cel").build();
        let latency = meter
            .f64_histogram("reconcile.duration")
            .with_unit("s")
            .with_boundaries(vec![0.1, 1.0])
            .build();
        let attrs = [KeyValue::new("controller", "widgets")];
        reconciles.add(7, &attrs);
        queue.add(5, &attrs);
        queue.add(-2, &attrs);
        temperature.record(21.5, &attrs);
        for seconds in [0.05, 0.5, 0.5, 3.0] {
            latency.record(seconds, &attrs);
        }
        provider.shutdown().expect("SDK shutdown exports");
    })
    .await
    .expect("SDK thread");

    let series = r#"{job="widget-operator",instance="pod-1",controller="widgets"}"#;
    let limit = Duration::from_secs(20);
    assert_eq!(
        value_eventually(
            &prometheus,
            &format!("reconciles_total{series}"),
            7.0,
            limit
        )
        .await,
        Some(7.0)
    );
    assert_eq!(
        prometheus
            .value(&format!("queue_depth{series}"), None)
            .await,
        Some(3.0)
    );
    assert_eq!(
        prometheus
            .value(&format!("temperature_celsius{series}"), None)
            .await,
        Some(21.5)
    );
    assert_eq!(
        prometheus.value(r#"reconcile_duration_seconds_bucket{job="widget-operator",controller="widgets",le="1"}"#, None).await,
        Some(3.0),
        "cumulative bucket counts"
    );
    assert_eq!(
        prometheus
            .value(&format!("reconcile_duration_seconds_count{series}"), None)
            .await,
        Some(4.0)
    );
    assert_eq!(
        prometheus
            .value(&format!("reconcile_duration_seconds_sum{series}"), None)
            .await,
        Some(4.05)
    );
    assert_eq!(
        prometheus.value(r#"target_info{job="widget-operator",instance="pod-1",k8s_namespace_name="operators"}"#, None).await,
        Some(1.0),
        "target_info carries the resource"
    );
    gateway.shutdown().await;
}

const TRACES: u64 = 10_000;
const TRACES_PER_REQUEST: u64 = 200;

fn string_value(value: &str) -> Option<AnyValue> {
    Some(AnyValue {
        value: Some(any_value::Value::StringValue(value.to_owned())),
    })
}

fn resource(service: &str) -> Option<Resource> {
    Some(Resource {
        attributes: vec![ProtoKeyValue {
            key: "service.name".into(),
            key_strindex: 0,
            value: string_value(service),
        }],
        ..Default::default()
    })
}

/// One request of operator-shaped traces: Reconcile (server) -> Get, fetchExternal ->
/// HTTP GET in `catalog-api`, applyDesiredState -> Patch. Every 23rd trace's Patch fails.
/// Returns the request and its error span count.
fn operator_request(first: u64) -> (ExportTraceServiceRequest, u64) {
    let mut operator = Vec::new();
    let mut catalog = Vec::new();
    let mut errors = 0;
    for trace in first..first + TRACES_PER_REQUEST {
        let trace_id = (u128::from(trace) + 1)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)
            .to_be_bytes()
            .to_vec();
        let span = |n: u64, parent: Option<u64>, name: &str, kind: i32, error: bool| Span {
            trace_id: trace_id.clone(),
            span_id: (trace * 8 + n).to_be_bytes().to_vec(),
            parent_span_id: parent
                .map(|p| (trace * 8 + p).to_be_bytes().to_vec())
                .unwrap_or_default(),
            name: name.into(),
            kind,
            start_time_unix_nano: 1_000_000_000,
            end_time_unix_nano: 1_000_000_000 + n * 1_000_000,
            status: error.then(|| Status {
                code: 2,
                message: "conflict".into(),
            }),
            ..Default::default()
        };
        let failing = trace % 23 == 0;
        errors += u64::from(failing);
        operator.extend([
            span(1, None, "Reconcile", 2, false),
            span(2, Some(1), "Get", 3, false),
            span(3, Some(1), "fetchExternal", 1, false),
            span(5, Some(1), "applyDesiredState", 1, false),
            span(6, Some(5), "Patch", 3, failing),
        ]);
        catalog.push(span(4, Some(3), "HTTP GET", 2, false));
    }
    let resource_spans = |service: &str, spans: Vec<Span>| ResourceSpans {
        resource: resource(service),
        scope_spans: vec![ScopeSpans {
            spans,
            ..Default::default()
        }],
        ..Default::default()
    };
    (
        ExportTraceServiceRequest {
            resource_spans: vec![
                resource_spans("widget-operator", operator),
                resource_spans("catalog-api", catalog),
            ],
        },
        errors,
    )
}

/// Scenario: 10,000 operator-shaped traces (60,000 spans in two services, a known number
/// failing) go through `traces/in -> spanmetrics + forward -> traces/sampled (errors + 10%)`,
/// with span metrics written to a real Prometheus.
/// Guarantees: the call and error counters in Prometheus equal the spans sent, exactly,
/// per service, although only the error traces and about a tenth of the others reach the
/// traces sink.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn span_metrics_count_every_span_before_sampling() {
    let prometheus = Prometheus::start().await;
    let traces_sink = OtlpSink::start(SinkBehavior::Accept).await;
    let gateway =
        support::start_gateway(&gateway_config(&prometheus.write_url(), traces_sink.addr)).await;
    let mut client =
        TraceServiceClient::connect(format!("http://{}", support::grpc_addr(&gateway)))
            .await
            .expect("connect");
    let mut errors = 0;
    for first in (0..TRACES).step_by(TRACES_PER_REQUEST as usize) {
        let (request, request_errors) = operator_request(first);
        errors += request_errors;
        client.export(request).await.expect("accepted");
    }
    let limit = Duration::from_secs(30);
    let calls = "traces_span_metrics_calls_total";
    let operator_calls = value_eventually(
        &prometheus,
        &format!(r#"sum({calls}{{service_name="widget-operator"}})"#),
        (TRACES * 5) as f64,
        limit,
    )
    .await;
    assert_eq!(
        operator_calls,
        Some((TRACES * 5) as f64),
        "every operator span counted"
    );
    assert_eq!(
        value_eventually(
            &prometheus,
            &format!(r#"sum({calls}{{service_name="catalog-api"}})"#),
            TRACES as f64,
            limit
        )
        .await,
        Some(TRACES as f64)
    );
    assert_eq!(
        value_eventually(
            &prometheus,
            &format!(r#"sum({calls}{{status_code="STATUS_CODE_ERROR"}})"#),
            errors as f64,
            limit
        )
        .await,
        Some(errors as f64),
        "every error span counted"
    );
    assert_eq!(
        prometheus
            .value(
                &format!(r#"sum({calls}{{span_name="Patch",status_code="STATUS_CODE_ERROR"}})"#),
                None
            )
            .await,
        Some(errors as f64)
    );
    let report = gateway.shutdown().await;
    assert_eq!(report.dropped_spans, 0);
    let kept = traces_sink.handle.span_count() as u64;
    assert!(kept >= errors * 6, "error traces kept whole");
    assert!(
        kept < TRACES * 6 / 4,
        "most traces sampled out: {kept} spans kept"
    );
}
