//! The OpenTelemetry Rust SDK sends through tailgate over gRPC, HTTP/protobuf and
//! HTTP/JSON; every span must arrive at the OTLP sink exactly once and unchanged.

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry::trace::{
    Link, Span as _, SpanKind, Status, TraceContextExt, Tracer, TracerProvider as _,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue, Value};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};

use crate::support::{self, OtlpSink, SinkBehavior};

/// Spans per protocol: 2,000 traces of 5 spans.
const TRACES: usize = 2_000;
const SPANS_PER_TRACE: usize = 5;

/// What the SDK was asked to send for one span.
#[derive(Clone, Debug)]
struct Expected {
    trace_id: [u8; 16],
    parent_span_id: Option<[u8; 8]>,
    name: String,
    kind: i32,
    index: i64,
    error: bool,
    link: Option<([u8; 16], [u8; 8])>,
    /// The double attribute `ratio` of a root span.
    ratio: Option<f64>,
}

/// The `ratio` of trace `trace`: neighbouring doubles near 0.407, most of which need all 17
/// significant digits in decimal (0.40700000000000003 is one).
fn ratio(trace: usize) -> f64 {
    f64::from_bits(0.407_f64.to_bits() + trace as u64)
}

#[derive(Clone, Copy, Debug)]
enum Wire {
    Grpc,
    HttpProtobuf,
    HttpJson,
}

/// Sends `TRACES` operator-shaped traces with the SDK and returns what each span should
/// look like, keyed by span id.
fn send_with_sdk(
    wire: Wire,
    endpoint: String,
    service: &'static str,
) -> HashMap<[u8; 8], Expected> {
    let exporter = match wire {
        Wire::Grpc => opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .build(),
        Wire::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(endpoint)
            .build(),
        Wire::HttpJson => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpJson)
            .with_endpoint(endpoint)
            .build(),
    }
    .expect("exporter builds");
    // The SDK drops spans silently when its queue is full: size it for the whole run.
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(TRACES * SPANS_PER_TRACE + 1)
                .with_max_export_batch_size(512)
                .with_scheduled_delay(Duration::from_millis(50))
                .build(),
        )
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(
            Resource::builder_empty()
                .with_service_name(service)
                .with_attribute(KeyValue::new("k8s.namespace.name", "operators"))
                .build(),
        )
        .build();
    let tracer = provider.tracer_with_scope(
        InstrumentationScope::builder("e2e-operator")
            .with_version("1.2.3")
            .build(),
    );

    let mut expected = HashMap::new();
    let mut previous_root = None;
    let mut index = 0i64;
    for trace in 0..TRACES {
        let mut record = |span: &opentelemetry_sdk::trace::Span,
                          parent: Option<[u8; 8]>,
                          name: &str,
                          kind: i32,
                          error: bool,
                          link: Option<([u8; 16], [u8; 8])>,
                          index: i64,
                          ratio: Option<f64>| {
            let context = span.span_context();
            expected.insert(
                context.span_id().to_bytes(),
                Expected {
                    trace_id: context.trace_id().to_bytes(),
                    parent_span_id: parent,
                    name: name.to_owned(),
                    kind,
                    index,
                    error,
                    link,
                    ratio,
                },
            );
        };
        let mut root = tracer
            .span_builder("Reconcile")
            .with_kind(SpanKind::Server)
            .with_attributes([
                KeyValue::new("index", index),
                KeyValue::new("controller", "widgets"),
                KeyValue::new("requeue", trace % 3 == 0),
                KeyValue::new("ratio", ratio(trace)),
                KeyValue::new(
                    "finalizers",
                    Value::Array(opentelemetry::Array::String(vec!["a".into(), "b".into()])),
                ),
            ])
            .with_links(
                previous_root
                    .iter()
                    .map(|context: &opentelemetry::trace::SpanContext| {
                        Link::with_context(context.clone())
                    })
                    .collect(),
            )
            .start(&tracer);
        let link = previous_root
            .as_ref()
            .map(|c: &opentelemetry::trace::SpanContext| {
                (c.trace_id().to_bytes(), c.span_id().to_bytes())
            });
        record(
            &root,
            None,
            "Reconcile",
            2,
            false,
            link,
            index,
            Some(ratio(trace)),
        );
        index += 1;
        let root_id = root.span_context().span_id().to_bytes();
        previous_root = Some(root.span_context().clone());
        let parent_cx = Context::new().with_remote_span_context(root.span_context().clone());
        for (child, (name, kind)) in [
            ("Get", SpanKind::Client),
            ("fetchExternal", SpanKind::Internal),
            ("HTTP GET", SpanKind::Client),
            ("Patch", SpanKind::Client),
        ]
        .into_iter()
        .enumerate()
        {
            let error = (trace + child) % 17 == 0;
            let mut span = tracer
                .span_builder(name)
                .with_kind(kind.clone())
                .with_attributes([KeyValue::new("index", index)])
                .start_with_context(&tracer, &parent_cx);
            span.add_event("step", vec![KeyValue::new("attempt", child as i64)]);
            if error {
                span.set_status(Status::error("apply failed"));
            }
            let kind = match kind {
                SpanKind::Client => 3,
                _ => 1,
            };
            record(&span, Some(root_id), name, kind, error, None, index, None);
            index += 1;
            span.end();
        }
        root.end();
    }
    provider.force_flush().expect("SDK flush succeeds");
    provider.shutdown().expect("SDK shutdown succeeds");
    expected
}

fn int_attribute(
    attributes: &[opentelemetry_proto::tonic::common::v1::KeyValue],
    key: &str,
) -> Option<i64> {
    attributes.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            any_value::Value::IntValue(v) => Some(*v),
            _ => None,
        }
    })
}

async fn run(wire: Wire) {
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let gateway = support::start_gateway(&support::gateway_config(sink.addr, "")).await;
    let endpoint = match wire {
        Wire::Grpc => format!("http://{}", support::grpc_addr(&gateway)),
        Wire::HttpProtobuf | Wire::HttpJson => {
            format!("http://{}/v1/traces", support::http_addr(&gateway))
        }
    };
    let service = "e2e-operator";
    let handle = tokio::runtime::Handle::current();
    let expected = tokio::task::spawn_blocking(move || {
        let _guard = handle.enter();
        send_with_sdk(wire, endpoint, service)
    })
    .await
    .expect("SDK thread");
    let total = TRACES * SPANS_PER_TRACE;
    assert_eq!(expected.len(), total, "span ids are unique");

    let arrived = support::eventually(Duration::from_secs(60), || {
        let handle = sink.handle.clone();
        async move { handle.span_count() >= total }
    })
    .await;
    let metrics = support::scrape(&gateway).await;
    let report = gateway.shutdown().await;
    assert!(
        arrived,
        "only {} of {total} spans arrived",
        sink.handle.span_count()
    );
    assert_eq!(report.dropped_spans, 0);

    let received = sink.handle.spans();
    assert_eq!(received.len(), total, "every span arrives exactly once");
    let mut seen = std::collections::HashSet::new();
    for got in &received {
        let span = &got.span;
        let span_id: [u8; 8] = span.span_id.as_slice().try_into().expect("8-byte span id");
        assert!(seen.insert(span_id), "span {span_id:?} arrived twice");
        let want = expected.get(&span_id).expect("span was sent");
        assert_eq!(span.trace_id, want.trace_id.to_vec());
        assert_eq!(
            span.parent_span_id,
            want.parent_span_id.map(|p| p.to_vec()).unwrap_or_default()
        );
        assert_eq!(span.name, want.name);
        assert_eq!(span.kind, want.kind);
        assert_eq!(int_attribute(&span.attributes, "index"), Some(want.index));
        let status = span.status.clone().unwrap_or_default();
        if want.error {
            assert_eq!(status.code, 2, "error status kept");
            assert_eq!(status.message, "apply failed");
        } else {
            assert_ne!(status.code, 2);
        }
        if want.parent_span_id.is_some() {
            assert_eq!(span.events.len(), 1);
            assert_eq!(span.events[0].name, "step");
            assert!(int_attribute(&span.events[0].attributes, "attempt").is_some());
        } else {
            assert_eq!(span.attributes.len(), 5, "all root attributes arrive");
            let got_ratio = span
                .attributes
                .iter()
                .find(|kv| kv.key == "ratio")
                .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                    any_value::Value::DoubleValue(v) => Some(*v),
                    _ => None,
                });
            assert_eq!(
                got_ratio.map(f64::to_bits),
                want.ratio.map(f64::to_bits),
                "the double arrives bit for bit"
            );
        }
        match want.link {
            Some((trace_id, linked_span)) => {
                assert_eq!(span.links.len(), 1);
                assert_eq!(span.links[0].trace_id, trace_id.to_vec());
                assert_eq!(span.links[0].span_id, linked_span.to_vec());
            }
            None => assert!(span.links.is_empty()),
        }
        assert!(span.end_time_unix_nano >= span.start_time_unix_nano);
        let service_name = got
            .resource
            .attributes
            .iter()
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| kv.value.as_ref()?.value.clone());
        assert_eq!(
            service_name,
            Some(any_value::Value::StringValue(service.to_owned()))
        );
        assert!(
            got.resource
                .attributes
                .iter()
                .any(|kv| kv.key == "k8s.namespace.name")
        );
        assert_eq!(got.scope.name, "e2e-operator");
        assert_eq!(got.scope.version, "1.2.3");
    }
    let transport = match wire {
        Wire::Grpc => "transport=\"grpc\"",
        _ => "transport=\"http\"",
    };
    assert_eq!(
        support::metric_value(
            &metrics,
            "otelcol_receiver_accepted_spans_total",
            &[transport]
        ),
        total as f64
    );
}

/// Scenario: 10,000 spans in 2,000 traces sent by the SDK over OTLP/gRPC.
/// Guarantees: each span arrives at the gRPC sink once, with ids, parent, name, kind,
/// attributes, events, links, status, resource and scope unchanged; the receiver counts
/// them as accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_over_grpc_arrives_whole() {
    run(Wire::Grpc).await;
}

/// Scenario: the same load over OTLP/HTTP with protobuf bodies.
/// Guarantees: as over gRPC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_over_http_protobuf_arrives_whole() {
    run(Wire::HttpProtobuf).await;
}

/// Scenario: the same load over OTLP/HTTP with JSON bodies, transcoded at the edge; each
/// root span's double attribute needs all 17 significant digits.
/// Guarantees: as over gRPC: the JSON path loses nothing, doubles arrive bit for bit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_over_http_json_arrives_whole() {
    run(Wire::HttpJson).await;
}
