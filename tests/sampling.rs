//! Tail sampling end to end: the OpenTelemetry Rust SDK sends operator-shaped traces from
//! two services through the seed's policies (errors kept, 10% of the rest), and what
//! reaches the OTLP sink matches the expectation trace by trace.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use opentelemetry::trace::{
    Span as _, SpanKind, Status, TraceContextExt, Tracer, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};

use crate::support::{self, OtlpSink, SinkBehavior};

const TRACES: usize = 3_000;
const SPANS_PER_TRACE: usize = 6;

/// The seed's gateway: errors kept whole, a consistent 10% of the rest.
fn sampling_config(sink: std::net::SocketAddr) -> String {
    support::gateway_config(sink, "")
        .replace(
            "processors:\n  batch:",
            "processors:
  tail_sampling:
    decision_wait: 5s
    decision_wait_after_root_received: 500ms
    policies:
      - name: errors
        type: status_code
        status_code:
          status_codes: [ERROR]
      - name: baseline
        type: probabilistic
        probabilistic:
          sampling_percentage: 10
  batch:",
        )
        .replace("processors: [batch]", "processors: [tail_sampling, batch]")
}

fn provider(endpoint: &str, service: &'static str) -> SdkTracerProvider {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .expect("exporter builds");
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(TRACES * SPANS_PER_TRACE + 1)
                .with_max_export_batch_size(512)
                .with_scheduled_delay(Duration::from_millis(50))
                .build(),
        )
        .build();
    SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(Resource::builder_empty().with_service_name(service).build())
        .build()
}

/// splitmix64, for a reproducible choice of failing spans.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Sends the traces; returns, per trace id, whether it holds an error.
fn send(endpoint: String) -> HashMap<[u8; 16], bool> {
    let operator = provider(&endpoint, "widget-operator");
    let catalog = provider(&endpoint, "catalog-api");
    let operator_tracer = operator.tracer("operator");
    let catalog_tracer = catalog.tracer("catalog");
    let mut traces = HashMap::new();
    for t in 0..TRACES {
        // About 3% of traces fail, on a span chosen at random.
        let failing =
            (mix(t as u64) % 100 < 3).then(|| mix(t as u64 ^ 0xabc) % SPANS_PER_TRACE as u64);
        let fail = |index: u64, span: &mut opentelemetry_sdk::trace::Span| {
            if failing == Some(index) {
                span.set_status(Status::error("reconcile failed"));
            }
        };
        let mut root = operator_tracer
            .span_builder("Reconcile")
            .with_kind(SpanKind::Server)
            .with_attributes([KeyValue::new("controller", "widgets")])
            .start(&operator_tracer);
        let root_cx = Context::new().with_remote_span_context(root.span_context().clone());
        let mut get = operator_tracer
            .span_builder("Get")
            .with_kind(SpanKind::Client)
            .start_with_context(&operator_tracer, &root_cx);
        fail(1, &mut get);
        get.end();
        let mut fetch = operator_tracer
            .span_builder("fetchExternal")
            .start_with_context(&operator_tracer, &root_cx);
        let fetch_cx = Context::new().with_remote_span_context(fetch.span_context().clone());
        let mut http = catalog_tracer
            .span_builder("HTTP GET")
            .with_kind(SpanKind::Server)
            .start_with_context(&catalog_tracer, &fetch_cx);
        fail(3, &mut http);
        http.end();
        fail(2, &mut fetch);
        fetch.end();
        let mut apply = operator_tracer
            .span_builder("applyDesiredState")
            .start_with_context(&operator_tracer, &root_cx);
        let apply_cx = Context::new().with_remote_span_context(apply.span_context().clone());
        let mut patch = operator_tracer
            .span_builder("Patch")
            .with_kind(SpanKind::Client)
            .start_with_context(&operator_tracer, &apply_cx);
        fail(5, &mut patch);
        patch.end();
        fail(4, &mut apply);
        apply.end();
        fail(0, &mut root);
        traces.insert(root.span_context().trace_id().to_bytes(), failing.is_some());
        root.end();
    }
    for provider in [operator, catalog] {
        provider.force_flush().expect("flush");
        provider.shutdown().expect("shutdown");
    }
    traces
}

/// Kept at 10% iff R >= T, with R the low 56 bits of the trace id.
fn kept_by_probability(trace_id: &[u8; 16]) -> bool {
    let mut low = [0u8; 8];
    low[1..].copy_from_slice(&trace_id[9..]);
    let randomness = u64::from_be_bytes(low);
    let threshold = ((1.0 - 0.10) * (1u64 << 56) as f64).round() as u64;
    randomness >= threshold
}

/// Scenario: 3,000 operator-shaped traces of 6 spans in two services, about 3% with an
/// ERROR status on a random span, sent by the SDK through tail_sampling (errors, then
/// probabilistic 10%).
/// Guarantees: every trace with an error arrives whole; every other trace arrives whole
/// exactly when its randomness clears the 10% threshold, carrying `th` in its
/// tracestate; no other span arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_traces_are_sampled_trace_by_trace() {
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let gateway = support::start_gateway(&sampling_config(sink.addr)).await;
    let endpoint = format!("http://{}", support::grpc_addr(&gateway));
    let handle = tokio::runtime::Handle::current();
    let traces = tokio::task::spawn_blocking(move || {
        let _guard = handle.enter();
        send(endpoint)
    })
    .await
    .expect("SDK thread");
    assert_eq!(traces.len(), TRACES);

    let expected: HashSet<[u8; 16]> = traces
        .iter()
        .filter(|(id, error)| **error || kept_by_probability(id))
        .map(|(id, _)| *id)
        .collect();
    let errors = traces.values().filter(|e| **e).count();
    assert!(errors > 30, "the load has errors ({errors})");
    let want_spans = expected.len() * SPANS_PER_TRACE;
    let arrived = support::eventually(Duration::from_secs(60), || {
        let handle = sink.handle.clone();
        async move { handle.span_count() >= want_spans }
    })
    .await;
    let metrics = support::scrape(&gateway).await;
    let report = gateway.shutdown().await;
    assert!(
        arrived,
        "{} of {want_spans} kept spans arrived",
        sink.handle.span_count()
    );
    assert_eq!(report.dropped_spans, 0);

    let mut by_trace: HashMap<[u8; 16], Vec<_>> = HashMap::new();
    for received in sink.handle.spans() {
        let id: [u8; 16] = received
            .span
            .trace_id
            .as_slice()
            .try_into()
            .expect("16 bytes");
        by_trace.entry(id).or_default().push(received);
    }
    let got: HashSet<[u8; 16]> = by_trace.keys().copied().collect();
    assert_eq!(got, expected, "kept exactly the expected traces");
    for (id, spans) in &by_trace {
        assert_eq!(spans.len(), SPANS_PER_TRACE, "trace kept whole");
        let services: HashSet<String> = spans
            .iter()
            .filter_map(|s| {
                s.resource
                    .attributes
                    .iter()
                    .find(|kv| kv.key == "service.name")
                    .map(|kv| format!("{:?}", kv.value))
            })
            .collect();
        assert_eq!(services.len(), 2, "both services' spans kept");
        if traces[id] {
            assert!(
                spans.iter().all(|s| s.span.trace_state.is_empty()),
                "error traces keep their (absent) th"
            );
        } else {
            assert!(
                spans
                    .iter()
                    .all(|s| s.span.trace_state.starts_with("ot=th:")),
                "probabilistic keeps carry th"
            );
        }
    }
    let sampled = support::metric_value(
        &metrics,
        "otelcol_processor_tail_sampling_global_count_traces_sampled_total",
        &["sampled=\"true\""],
    );
    assert_eq!(sampled, expected.len() as f64);
    assert_eq!(
        support::metric_value(
            &metrics,
            "otelcol_processor_tail_sampling_sampling_trace_dropped_too_early_total",
            &[]
        ),
        0.0
    );
}
