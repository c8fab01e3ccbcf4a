//! Late spans behind a blocked exporter: spans of traces the sampler already kept keep
//! arriving while the backend refuses everything. They are held in the memory budget, the
//! gateway refuses retryably once the budget is full instead of growing, and every span it
//! accepted reaches the backend once the backend recovers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
    TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{RetryPolicy, WithExportConfig, WithTonicConfig};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use tokio::net::TcpListener;

use crate::support::process::{GatewayProcess, RssWatcher};
use crate::support::{self};

const LIMIT_MIB: u64 = 64;
/// Traces kept first, whose late spans then arrive.
const TRACES: u64 = 200;
/// Late spans offered while the backend refuses: about 64 MiB, more than the budget holds.
const LATE_SPANS: u64 = 8_000;
/// Each late span carries this many bytes of attribute, so the budget fills in a few
/// dozen requests.
const PAYLOAD_BYTES: usize = 8 << 10;
/// What the budget must hold in late spans before the backend recovers: far more than the
/// exporter's queue (one batch) and the batch it is retrying (about 1 MiB each).
const HELD_AT_LEAST: f64 = 8.0 * 1048576.0;

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
    decision_wait: 200ms
    policies: [{{name: all, type: always_sample}}]
exporters:
  otlp/blocked:
    endpoint: {sink}
    tls:
      insecure: true
    sending_queue:
      queue_size: 1
      num_consumers: 1
    retry_on_failure:
      initial_interval: 50ms
      max_interval: 200ms
      max_elapsed_time: 0s
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [memory_limiter, tail_sampling]
      exporters: [otlp/blocked]
  telemetry:
    metrics:
      address: 127.0.0.1:0
    logs:
      level: info
  shutdown_timeout: 20s
"#
    )
}

/// A backend that refuses every export (gRPC UNAVAILABLE) while closed, and counts the
/// spans it accepts while open.
#[derive(Default)]
struct Gate {
    closed: AtomicBool,
    spans: AtomicU64,
    refused_calls: AtomicU64,
}

struct GateService(Arc<Gate>);

#[tonic::async_trait]
impl TraceService for GateService {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        if self.0.closed.load(Ordering::SeqCst) {
            self.0.refused_calls.fetch_add(1, Ordering::Relaxed);
            return Err(tonic::Status::unavailable("backend blocked for this test"));
        }
        let spans: usize = request
            .get_ref()
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.0.spans.fetch_add(spans as u64, Ordering::SeqCst);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// Starts the gated backend on a free loopback port; it serves until the test ends.
async fn start_gate() -> (std::net::SocketAddr, Arc<Gate>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind sink");
    let addr = listener.local_addr().expect("sink addr");
    let gate = Arc::new(Gate::default());
    let service = TraceServiceServer::new(GateService(gate.clone()))
        .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
        .max_decoding_message_size(64 << 20);
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await;
    });
    (addr, gate)
}

fn trace_id(trace: u64) -> TraceId {
    TraceId::from_bytes(
        (u128::from(trace) + 1)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)
            .to_be_bytes(),
    )
}

/// The context of a remote parent in `trace`, so that the SDK's spans join that trace.
fn in_trace(trace: u64) -> Context {
    Context::new().with_remote_span_context(SpanContext::new(
        trace_id(trace),
        SpanId::from_bytes((trace + 1).to_be_bytes()),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    ))
}

/// Sends `count` spans over OTLP/gRPC with the OpenTelemetry SDK, spread round-robin over
/// the `TRACES` traces, each with `payload` bytes of attribute; returns when the SDK has
/// exported (or given up on) all of them. Refusals are retried as the SDK does, honouring
/// RetryInfo, a bounded number of times.
fn send_spans(endpoint: String, count: u64, payload: usize) {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .with_timeout(Duration::from_secs(10))
        .with_retry_policy(
            RetryPolicy::default()
                .with_max_retries(20)
                .with_initial_delay(Duration::from_millis(100))
                .with_max_delay(Duration::from_secs(1)),
        )
        .build()
        .expect("exporter builds");
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(count as usize + 1)
                .with_max_export_batch_size(100)
                .with_scheduled_delay(Duration::from_millis(20))
                .build(),
        )
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(
            Resource::builder_empty()
                .with_service_name("late-spans")
                .build(),
        )
        .build();
    let tracer = provider.tracer("late-spans");
    let value = "x".repeat(payload);
    for n in 0..count {
        let mut span = tracer.start_with_context("late", &in_trace(n % TRACES));
        span.set_attribute(KeyValue::new("payload", value.clone()));
        span.end();
    }
    // Export waits out the blocked backend and the refusals.
    let _ = provider.shutdown_with_timeout(Duration::from_secs(60));
}

async fn metrics(gateway: &GatewayProcess) -> String {
    support::reqwest_get(&gateway.metrics_url).await.1
}

/// Scenario: the tailgate binary (`memory_limiter: limit_mib: 64`, a sampler keeping every
/// trace after 200 ms, an exporter with a one-batch queue) keeps 200 traces sent by the
/// OpenTelemetry SDK; then the backend refuses everything while the SDK sends ~64 MiB of
/// late spans (8 KiB each) to those traces; then the backend recovers.
/// Guarantees: while blocked, the late spans are held in the memory budget (the budget's
/// used bytes cover the sampler's late bytes, several MiB of them, and the sampler holds
/// nothing else), the gateway refuses retryably once it is full, and the process RSS stays
/// under the limit; after recovery, exactly the spans the gateway accepted reach the
/// backend and nothing stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_spans_behind_a_blocked_exporter_are_bounded_and_delivered() {
    let (sink, gate) = start_gate().await;
    let gateway = GatewayProcess::start(&config(sink));
    let watcher = RssWatcher::start(gateway.pid());
    let endpoint = format!("http://{}", gateway.grpc);
    let handle = tokio::runtime::Handle::current();

    // 1. Keep the traces: one span each, decided and exported.
    let first = endpoint.clone();
    let runtime = handle.clone();
    tokio::task::spawn_blocking(move || {
        let _guard = runtime.enter();
        send_spans(first, TRACES, 16);
    })
    .await
    .expect("SDK thread");
    let kept = support::eventually(Duration::from_secs(20), || {
        let gate = gate.clone();
        async move { gate.spans.load(Ordering::SeqCst) >= TRACES }
    })
    .await;
    if !kept {
        let text = metrics(&gateway).await;
        let lines = gateway.wait(Duration::from_secs(1)).await.1;
        panic!(
            "{} of {TRACES} first spans exported; the gateway accepted {}, exported {}\n{}",
            gate.spans.load(Ordering::SeqCst),
            support::metric_value(&text, "otelcol_receiver_accepted_spans_total", &[]),
            support::metric_value(&text, "otelcol_exporter_sent_spans_total", &[]),
            lines.join("\n")
        );
    }

    // 2. The backend blocks; late spans of the kept traces storm in.
    gate.closed.store(true, Ordering::SeqCst);
    let runtime = handle.clone();
    let storm = tokio::task::spawn_blocking(move || {
        let _guard = runtime.enter();
        send_spans(endpoint, LATE_SPANS, PAYLOAD_BYTES);
    });
    let full = support::eventually(Duration::from_secs(40), || {
        let url = gateway.metrics_url.clone();
        async move {
            let (_, text) = support::reqwest_get(&url).await;
            let value = |name: &str, labels: &[&str]| support::metric_value(&text, name, labels);
            let refused = value(
                "tailgate_receiver_refused_requests_total",
                &["reason=\"overloaded\""],
            );
            let late = value("tailgate_sampler_late_bytes_held", &[]);
            let used = value("tailgate_memory_budget_used_bytes", &[]);
            refused > 0.0 && late >= HELD_AT_LEAST && used >= late
        }
    })
    .await;
    // Refusing, the gateway holds still until the backend recovers.
    let blocked_metrics = metrics(&gateway).await;
    // 3. The backend recovers (before any assertion, so that a failure does not leave the
    // SDK retrying against it).
    gate.closed.store(false, Ordering::SeqCst);
    let value = |text: &str, name: &str, labels: &[&str]| support::metric_value(text, name, labels);
    let blocked_report = format!(
        "refused requests {}; budget used {}; late bytes held {}; late spans held {}; spans \
         held {}; traces held {}; backend refusals {}",
        value(
            &blocked_metrics,
            "tailgate_receiver_refused_requests_total",
            &["reason=\"overloaded\""]
        ),
        value(&blocked_metrics, "tailgate_memory_budget_used_bytes", &[]),
        value(&blocked_metrics, "tailgate_sampler_late_bytes_held", &[]),
        value(&blocked_metrics, "tailgate_sampler_late_spans_held", &[]),
        value(&blocked_metrics, "tailgate_sampler_spans_held", &[]),
        value(
            &blocked_metrics,
            "otelcol_processor_tail_sampling_sampling_traces_on_memory",
            &[]
        ),
        gate.refused_calls.load(Ordering::Relaxed),
    );
    eprintln!("late spans, blocked: {blocked_report}");
    assert!(
        full,
        "the budget held the late spans and intake was refused: {blocked_report}"
    );
    assert_eq!(
        value(&blocked_metrics, "tailgate_sampler_spans_held", &[]),
        value(&blocked_metrics, "tailgate_sampler_late_spans_held", &[]),
        "every held span is a late span of a kept trace: {blocked_report}"
    );
    assert_eq!(
        value(
            &blocked_metrics,
            "otelcol_processor_tail_sampling_sampling_traces_on_memory",
            &[]
        ),
        0.0,
        "{blocked_report}"
    );

    // Everything accepted leaves.
    storm.await.expect("SDK thread");
    let drained = support::eventually(Duration::from_secs(30), || {
        let url = gateway.metrics_url.clone();
        let gate = gate.clone();
        async move {
            let (_, text) = support::reqwest_get(&url).await;
            let accepted =
                support::metric_value(&text, "otelcol_receiver_accepted_spans_total", &[]);
            let held = support::metric_value(&text, "tailgate_sampler_spans_held", &[]);
            held == 0.0 && gate.spans.load(Ordering::SeqCst) as f64 >= accepted
        }
    })
    .await;
    let last = metrics(&gateway).await;
    let peak_mib = watcher.stop();
    let accepted = value(&last, "otelcol_receiver_accepted_spans_total", &[]);
    let received = gate.spans.load(Ordering::SeqCst);
    let report = format!(
        "peak RSS {peak_mib:.1} MiB; accepted {accepted}; received {received}; exported {}; \
         dropped {}; late spans sampled {}",
        value(&last, "otelcol_exporter_sent_spans_total", &[]),
        value(&last, "tailgate_spans_dropped_total", &[]),
        value(
            &last,
            "otelcol_processor_tail_sampling_early_releases_from_cache_decision_total",
            &["sampled=\"true\""]
        ),
    );
    eprintln!("late spans, recovered: {report}");
    gateway.sigterm();
    let (status, _lines) = gateway.wait(Duration::from_secs(30)).await;
    assert!(status.is_some(), "tailgate exits after SIGTERM");

    assert!(drained, "everything accepted was exported: {report}");
    assert_eq!(
        received as f64, accepted,
        "exactly the accepted spans arrived: {report}"
    );
    assert!(
        accepted > (TRACES as f64) + HELD_AT_LEAST / PAYLOAD_BYTES as f64,
        "the late spans held while blocked were among them: {report}"
    );
    assert_eq!(
        value(&last, "tailgate_spans_dropped_total", &[]),
        0.0,
        "{report}"
    );
    assert!(
        peak_mib < LIMIT_MIB as f64,
        "RSS stayed under limit_mib: {report}"
    );
}
