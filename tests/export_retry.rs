//! The exporter rides out a sink that refuses for a while: nothing is lost, and the
//! retries show in /metrics.

use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

use crate::support::{self, HttpSink, OtlpSink, SinkBehavior};

const REQUESTS: usize = 50;
const SPANS_PER_REQUEST: usize = 20;

const FAST_RETRY: &str = "    retry_on_failure:
      initial_interval: 100ms
      max_interval: 500ms
      max_elapsed_time: 60s
";

fn request(batch: usize) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: (0..SPANS_PER_REQUEST)
                    .map(|i| Span {
                        trace_id: (((batch as u128) << 64) | (i as u128 + 1))
                            .to_be_bytes()
                            .to_vec(),
                        span_id: ((batch * SPANS_PER_REQUEST + i) as u64 + 1)
                            .to_be_bytes()
                            .to_vec(),
                        name: format!("span-{batch}-{i}"),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

async fn send_all(gateway: &tailgate::service::Gateway) {
    let endpoint = format!("http://{}", support::grpc_addr(gateway));
    let mut client = TraceServiceClient::connect(endpoint)
        .await
        .expect("connect");
    for batch in 0..REQUESTS {
        client
            .export(request(batch))
            .await
            .expect("accepted while the sink is down");
    }
}

fn assert_each_span_once(spans: &[crate::support::sink::ReceivedSpan]) {
    let mut names: Vec<&str> = spans.iter().map(|s| s.span.name.as_str()).collect();
    names.sort_unstable();
    let before = names.len();
    names.dedup();
    assert_eq!(names.len(), before, "no span arrives twice");
    assert_eq!(names.len(), REQUESTS * SPANS_PER_REQUEST);
}

/// Scenario: the gRPC sink answers UNAVAILABLE for its first 3 seconds while 1,000 spans
/// are sent.
/// Guarantees: every span arrives exactly once after the sink recovers; the retries are
/// counted in /metrics; nothing is counted as failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_exporter_retries_unavailable_without_loss() {
    let sink = OtlpSink::start(SinkBehavior::RefuseFor(Duration::from_secs(3))).await;
    let gateway = support::start_gateway(&support::gateway_config(sink.addr, FAST_RETRY)).await;
    send_all(&gateway).await;
    let total = REQUESTS * SPANS_PER_REQUEST;
    let arrived = support::eventually(Duration::from_secs(30), || {
        let handle = sink.handle.clone();
        async move { handle.span_count() >= total }
    })
    .await;
    assert!(arrived, "{} of {total} arrived", sink.handle.span_count());
    assert!(sink.handle.refused_calls() > 0, "the sink did refuse");
    let metrics = support::scrape(&gateway).await;
    assert!(
        support::metric_value(
            &metrics,
            "tailgate_exporter_retries_total",
            &["exporter=\"otlp/sink\""]
        ) > 0.0,
        "retries visible in /metrics"
    );
    assert_eq!(
        support::metric_value(
            &metrics,
            "otelcol_exporter_sent_spans_total",
            &["exporter=\"otlp/sink\""]
        ),
        total as f64
    );
    assert_eq!(
        support::metric_value(&metrics, "otelcol_exporter_send_failed_spans_total", &[]),
        0.0
    );
    gateway.shutdown().await;
    assert_each_span_once(&sink.handle.spans());
}

/// Scenario: the OTLP/HTTP sink answers 503 with `Retry-After: 1` for 2 seconds.
/// Guarantees: every span arrives exactly once; the retries are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_exporter_honours_retry_after_without_loss() {
    let sink = HttpSink::start(SinkBehavior::RefuseFor(Duration::from_secs(2))).await;
    let config = support::gateway_config_with(
        "otlphttp/sink",
        &format!("http://{}", sink.addr),
        FAST_RETRY,
    );
    let gateway = support::start_gateway(&config).await;
    send_all(&gateway).await;
    let total = REQUESTS * SPANS_PER_REQUEST;
    let arrived = support::eventually(Duration::from_secs(30), || {
        let handle = sink.handle.clone();
        async move { handle.span_count() >= total }
    })
    .await;
    assert!(arrived, "{} of {total} arrived", sink.handle.span_count());
    assert!(sink.handle.refused_calls() > 0, "the sink did refuse");
    let metrics = support::scrape(&gateway).await;
    assert!(
        support::metric_value(
            &metrics,
            "tailgate_exporter_retries_total",
            &["exporter=\"otlphttp/sink\""]
        ) > 0.0
    );
    gateway.shutdown().await;
    assert_each_span_once(&sink.handle.spans());
}
