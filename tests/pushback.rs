//! Retryable refusals that clients honour: the OpenTelemetry Rust SDK, refused while the
//! gateway's buffer is full, retries (gRPC UNAVAILABLE with RetryInfo, HTTP 503 with
//! Retry-After) and gets every span in.

use std::time::Duration;

use opentelemetry::trace::{Tracer, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};

use crate::support::{self, OtlpSink, SinkBehavior};

const SPANS: usize = 1_000;

/// A gateway whose tail sampler holds at most 20 traces and refuses intake beyond them
/// (`block_on_overflow`) until they are decided a second later.
fn config(sink: std::net::SocketAddr) -> String {
    support::gateway_config(sink, "")
        .replace(
            "processors:\n  batch:",
            "processors:
  tail_sampling:
    decision_wait: 1s
    num_traces: 20
    block_on_overflow: true
    policies: [{name: all, type: always_sample}]
  batch:",
        )
        .replace("processors: [batch]", "processors: [tail_sampling, batch]")
}

fn send(protocol: Option<Protocol>, endpoint: String) {
    let exporter = match protocol {
        None => opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .build(),
        Some(protocol) => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(protocol)
            .with_endpoint(endpoint)
            .build(),
    }
    .expect("exporter builds");
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(SPANS + 1)
                .with_max_export_batch_size(250)
                .with_scheduled_delay(Duration::from_millis(20))
                .build(),
        )
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(
            Resource::builder_empty()
                .with_service_name("pushback")
                .build(),
        )
        .build();
    let tracer = provider.tracer("pushback");
    for _ in 0..SPANS {
        tracer.in_span("work", |_cx| {});
    }
    // Exports wait out the refusals (a second each), longer than the 5 s default timeout.
    provider
        .shutdown_with_timeout(Duration::from_secs(30))
        .expect("shutdown exports everything");
}

async fn run(protocol: Option<Protocol>) {
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let gateway = support::start_gateway(&config(sink.addr)).await;
    let endpoint = match protocol {
        None => format!("http://{}", support::grpc_addr(&gateway)),
        Some(_) => format!("http://{}/v1/traces", support::http_addr(&gateway)),
    };
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let _guard = handle.enter();
        send(protocol, endpoint)
    })
    .await
    .expect("SDK thread");
    let arrived = support::eventually(Duration::from_secs(20), || {
        let handle = sink.handle.clone();
        async move { handle.span_count() >= SPANS }
    })
    .await;
    let metrics = support::scrape(&gateway).await;
    gateway.shutdown().await;
    let refused = support::metric_value(
        &metrics,
        "tailgate_receiver_refused_requests_total",
        &["reason=\"overloaded\""],
    );
    assert!(
        refused > 0.0,
        "the gateway pushed back ({} export calls reached the sink)",
        sink.handle.accepted_calls()
    );
    assert!(
        arrived,
        "{} of {SPANS} spans arrived",
        sink.handle.span_count()
    );
    assert_eq!(
        sink.handle.span_count(),
        SPANS,
        "every span once, despite the refusals"
    );
}

/// Scenario: the SDK exports 1,000 spans over OTLP/gRPC in batches of 250 to a gateway
/// that refuses while its 20-trace buffer is full.
/// Guarantees: the refusals (UNAVAILABLE with RetryInfo) are retried by the SDK and every
/// span arrives exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_retries_grpc_refusals() {
    run(None).await;
}

/// Scenario: the same over OTLP/HTTP with protobuf bodies.
/// Guarantees: 503 with Retry-After is retried by the SDK; every span arrives once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_retries_http_refusals() {
    run(Some(Protocol::HttpBinary)).await;
}
