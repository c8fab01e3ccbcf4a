//! Exporter tests against real loopback sinks: a tonic server built from opentelemetry-proto's
//! `TraceServiceServer`, and a hyper HTTP server.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prometheus::Registry;
use prost::Message;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tonic::codec::CompressionEncoding;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::config::{
    ComponentId, Compression, DebugExporterConfig, ExporterConfig, OtlpExporterConfig, QueueConfig,
    RetryConfig, TlsClientConfig, Verbosity,
};
use crate::exporter::core::error::{DrainReport, ExportError, ExporterError};
use crate::exporter::core::metrics::{
    ExporterMetricFamilies, ExporterMetrics, FailureReason, RetryErrorType,
};
use crate::exporter::otlp::TracesExporter;
use crate::otlp::count_spans;
use crate::payload::TraceBatch;

// === helpers ===

fn nz(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap()
}

fn id(written: &str) -> ComponentId {
    ComponentId::literal(written)
}

/// A request with `spans` spans whose ids and names are derived from `tag`.
fn request(tag: u8, spans: usize) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.name".to_owned(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue("checkout".to_owned())),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: None,
                spans: (0..spans)
                    .map(|i| Span {
                        trace_id: vec![tag; 16],
                        span_id: vec![i as u8 + 1; 8],
                        name: format!("op-{tag}-{i}"),
                        start_time_unix_nano: 1_000 + i as u64,
                        end_time_unix_nano: 2_000 + i as u64,
                        ..Default::default()
                    })
                    .collect(),
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

fn batch(req: &ExportTraceServiceRequest) -> TraceBatch {
    let request = Bytes::from(req.encode_to_vec());
    let spans = count_spans(&request).unwrap();
    TraceBatch::new(request, spans)
}

fn metrics(exporter: &str) -> (Registry, ExporterMetrics) {
    let registry = Registry::new();
    let families = ExporterMetricFamilies::register(&registry).unwrap();
    let metrics = families.for_exporter(&id(exporter));
    (registry, metrics)
}

/// The value of the series of `name` carrying all of `labels`, or `None` if absent (also
/// read by the loadbalancing exporter's tests).
pub(super) fn value(registry: &Registry, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let family = registry.gather().into_iter().find(|mf| mf.name() == name)?;
    let metric = family.get_metric().iter().find(|m| {
        labels.iter().all(|(k, v)| {
            m.get_label()
                .iter()
                .any(|l| l.name() == *k && l.value() == *v)
        })
    })?;
    Some(if name.ends_with("_total") {
        metric.get_counter().get_value()
    } else {
        metric.get_gauge().get_value()
    })
}

fn failed(registry: &Registry, exporter: &str, reason: &str) -> Option<f64> {
    value(
        registry,
        "otelcol_exporter_send_failed_spans_total",
        &[("exporter", exporter), ("reason", reason)],
    )
}

fn retries(registry: &Registry, exporter: &str, error_type: &str) -> Option<f64> {
    value(
        registry,
        "tailgate_exporter_retries_total",
        &[("exporter", exporter), ("error_type", error_type)],
    )
}

fn sent(registry: &Registry, exporter: &str) -> Option<f64> {
    value(
        registry,
        "otelcol_exporter_sent_spans_total",
        &[("exporter", exporter)],
    )
}

/// Fast retries, a bounded queue, plaintext (also the loadbalancing tests' template).
pub(super) fn otlp_config(endpoint: String) -> OtlpExporterConfig {
    OtlpExporterConfig {
        endpoint,
        traces_endpoint: None,
        metrics_endpoint: None,
        tls: TlsClientConfig {
            insecure: true,
            ..Default::default()
        },
        headers: BTreeMap::new(),
        compression: Compression::None,
        timeout: Duration::from_secs(10),
        sending_queue: QueueConfig {
            enabled: true,
            queue_size: nz(10),
            num_consumers: nz(2),
            storage: None,
        },
        retry_on_failure: RetryConfig {
            enabled: true,
            initial_interval: Duration::from_millis(10),
            max_interval: Duration::from_millis(50),
            max_elapsed_time: Some(Duration::from_secs(30)),
            multiplier: 1.5,
            randomization_factor: 0.5,
        },
    }
}

fn far_deadline() -> Instant {
    Instant::now() + Duration::from_secs(20)
}

/// Starts traces exporter `name` on `config`, without a storage extension.
fn start_traces(
    name: &str,
    config: ExporterConfig,
    metrics: ExporterMetrics,
) -> Result<TracesExporter, ExporterError> {
    TracesExporter::start(&id(name), &config, metrics, None)
}

/// Serves `sink` and starts OTLP gRPC exporter `otlp` on it with the queue disabled (so
/// that `export` returns the outcome of the delivery), after `configure` edits its config;
/// with the registry of the exporter's metrics.
async fn unqueued_grpc_to(
    sink: &Arc<GrpcSinkState>,
    configure: impl FnOnce(&mut OtlpExporterConfig),
) -> (Registry, TracesExporter) {
    let addr = spawn_grpc_sink(sink.clone()).await;
    let (registry, metrics) = metrics("otlp");
    let mut config = otlp_config(addr.to_string());
    configure(&mut config);
    config.sending_queue.enabled = false;
    let exporter = start_traces("otlp", ExporterConfig::OtlpGrpc(config), metrics).unwrap();
    (registry, exporter)
}

// === gRPC sink ===

#[derive(Default)]
struct GrpcSinkState {
    /// Answers for the next calls, in order; then OK.
    script: Mutex<VecDeque<Status>>,
    received: Mutex<Vec<(ExportTraceServiceRequest, MetadataMap)>>,
    attempts: AtomicUsize,
    partial_success: Option<ExportTracePartialSuccess>,
}

impl GrpcSinkState {
    /// A sink that answers `script` to its first calls, then OK.
    fn scripted(script: impl IntoIterator<Item = Status>) -> Arc<Self> {
        Arc::new(Self {
            script: Mutex::new(script.into_iter().collect()),
            ..Self::default()
        })
    }

    fn received(&self) -> Vec<ExportTraceServiceRequest> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .map(|(r, _)| r.clone())
            .collect()
    }
}

struct GrpcSink(Arc<GrpcSinkState>);

#[tonic::async_trait]
impl TraceService for GrpcSink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, Status> {
        self.0.attempts.fetch_add(1, Ordering::SeqCst);
        if let Some(status) = self.0.script.lock().unwrap().pop_front() {
            return Err(status);
        }
        let metadata = request.metadata().clone();
        self.0
            .received
            .lock()
            .unwrap()
            .push((request.into_inner(), metadata));
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: self.0.partial_success.clone(),
        }))
    }
}

async fn spawn_grpc_sink(state: Arc<GrpcSinkState>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = TraceServiceServer::new(GrpcSink(state))
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Zstd);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    addr
}

// === HTTP sink ===

#[derive(Debug, Clone, PartialEq)]
enum HttpEvent {
    /// A scripted error status was answered.
    Refused(u16),
    /// A request was accepted and recorded.
    Accepted,
}

#[derive(Default)]
struct HttpSinkState {
    /// (status, Retry-After) for the next requests, in order; then 200.
    script: Mutex<VecDeque<(u16, Option<&'static str>)>>,
    received: Mutex<Vec<(ExportTraceServiceRequest, http::HeaderMap)>>,
    events: Mutex<Vec<(Instant, HttpEvent)>>,
    attempts: AtomicUsize,
}

async fn spawn_http_sink(state: Arc<HttpSinkState>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        // Bounded: no test opens more than a handful of connections.
        for _ in 0..64 {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let state = state.clone();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |req| handle_http(state.clone(), req));
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

async fn handle_http(
    state: Arc<HttpSinkState>,
    req: http::Request<Incoming>,
) -> Result<http::Response<Full<Bytes>>, Infallible> {
    state.attempts.fetch_add(1, Ordering::SeqCst);
    let headers = req.headers().clone();
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let scripted = state.script.lock().unwrap().pop_front();
    if let Some((code, retry_after)) = scripted {
        state
            .events
            .lock()
            .unwrap()
            .push((Instant::now(), HttpEvent::Refused(code)));
        let mut response = http::Response::builder().status(code);
        if let Some(value) = retry_after {
            response = response.header(http::header::RETRY_AFTER, value);
        }
        return Ok(response
            .body(Full::new(Bytes::from_static(b"busy")))
            .unwrap());
    }
    let body = match headers
        .get(http::header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap())
    {
        None => body.to_vec(),
        Some("gzip") => {
            let mut out = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&body[..]), &mut out)
                .unwrap();
            out
        }
        Some("zstd") => zstd::decode_all(&body[..]).unwrap(),
        Some(other) => panic!("unexpected encoding {other}"),
    };
    let request = ExportTraceServiceRequest::decode(&body[..]).unwrap();
    state.received.lock().unwrap().push((request, headers));
    state
        .events
        .lock()
        .unwrap()
        .push((Instant::now(), HttpEvent::Accepted));
    let response = ExportTraceServiceResponse::default().encode_to_vec();
    Ok(http::Response::builder()
        .status(200)
        .header(http::header::CONTENT_TYPE, "application/x-protobuf")
        .body(Full::new(Bytes::from(response)))
        .unwrap())
}

// === tests ===

/// Scenario: a gRPC sink answers UNAVAILABLE twice, then RESOURCE_EXHAUSTED with RetryInfo,
/// then OK; five batches go through the queue with two consumers; shutdown drains.
/// Guarantees: every batch arrives exactly once and decodes to what was sent; the retries
/// are counted by error type; all spans are counted as sent and none as failed.
#[tokio::test]
async fn grpc_retries_until_every_batch_arrives_once() {
    let sink = GrpcSinkState::scripted([
        Status::unavailable("warming up"),
        Status::unavailable("warming up"),
        Status::with_error_details(
            Code::ResourceExhausted,
            "slow down",
            ErrorDetails::with_retry_info(Some(Duration::from_millis(30))),
        ),
    ]);
    let addr = spawn_grpc_sink(sink.clone()).await;
    let (registry, m) = metrics("otlp/tempo");
    let config = ExporterConfig::OtlpGrpc(otlp_config(addr.to_string()));
    let exporter = start_traces("otlp/tempo", config, m).unwrap();

    let sent_requests: Vec<_> = (1..=5).map(|tag| request(tag, tag as usize)).collect();
    for req in &sent_requests {
        exporter.export(batch(req)).await.unwrap();
    }
    let report = exporter.shutdown(far_deadline()).await;

    let mut received = sink.received();
    received.sort_by_key(|r| r.resource_spans[0].scope_spans[0].spans[0].trace_id.clone());
    assert_eq!(received, sent_requests);
    assert_eq!(sink.attempts.load(Ordering::SeqCst), 5 + 3);
    assert_eq!(
        report,
        DrainReport {
            delivered: 15,
            dropped: 0
        }
    );
    assert_eq!(sent(&registry, "otlp/tempo"), Some(15.0));
    assert_eq!(retries(&registry, "otlp/tempo", "unavailable"), Some(2.0));
    assert_eq!(
        retries(&registry, "otlp/tempo", "resource_exhausted"),
        Some(1.0)
    );
    for reason in [
        "permanent",
        "retries_exhausted",
        "partial_success",
        "shutdown",
    ] {
        assert_eq!(
            failed(&registry, "otlp/tempo", reason),
            Some(0.0),
            "{reason}"
        );
    }
    assert_eq!(
        value(
            &registry,
            "otelcol_exporter_queue_capacity",
            &[("exporter", "otlp/tempo")]
        ),
        Some(10.0)
    );
}

/// Scenario: an HTTP sink answers 503 with `Retry-After: 1`, then 200; the queue is disabled
/// so `export` returns the outcome.
/// Guarantees: the real HTTP answer is classified retryable and the batch delivered once;
/// the retry is counted as `http_5xx` and the spans as sent. (That the wait is exactly
/// `max(backoff, Retry-After)` is shown on paused time in `core::tests`.)
#[tokio::test]
async fn http_retry_after_is_honoured() {
    let sink = Arc::new(HttpSinkState::default());
    sink.script.lock().unwrap().push_back((503, Some("1")));
    let addr = spawn_http_sink(sink.clone()).await;
    let (registry, m) = metrics("otlphttp");
    let mut config = otlp_config(format!("http://{addr}"));
    config.sending_queue.enabled = false;
    let exporter = start_traces("otlphttp", ExporterConfig::OtlpHttp(config), m).unwrap();

    let req = request(7, 3);
    exporter.export(batch(&req)).await.unwrap();

    let events = sink.events.lock().unwrap().clone();
    assert_eq!(
        events.iter().map(|(_, e)| e.clone()).collect::<Vec<_>>(),
        vec![HttpEvent::Refused(503), HttpEvent::Accepted]
    );
    let received = sink.received.lock().unwrap().clone();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].0, req);
    assert_eq!(
        received[0].1.get(http::header::CONTENT_TYPE).unwrap(),
        "application/x-protobuf"
    );
    assert_eq!(retries(&registry, "otlphttp", "http_5xx"), Some(1.0));
    assert_eq!(sent(&registry, "otlphttp"), Some(3.0));
    exporter.shutdown(far_deadline()).await;
}

/// Scenario: a gRPC sink answers INVALID_ARGUMENT; the queue is disabled.
/// Guarantees: exactly one attempt, `export` returns a permanent failure, the spans are
/// counted as failed with reason `permanent`, and no retry is counted.
#[tokio::test]
async fn grpc_permanent_error_is_not_retried() {
    let sink = GrpcSinkState::scripted([Status::invalid_argument("bad span")]);
    let (registry, exporter) = unqueued_grpc_to(&sink, |_| {}).await;

    let err = exporter.export(batch(&request(1, 4))).await.unwrap_err();
    assert!(matches!(
        err,
        ExportError::Failed {
            reason: FailureReason::Permanent,
            items: 4,
            ..
        }
    ));
    assert_eq!(sink.attempts.load(Ordering::SeqCst), 1);
    assert_eq!(failed(&registry, "otlp", "permanent"), Some(4.0));
    assert_eq!(sent(&registry, "otlp"), Some(0.0));
    for t in RetryErrorType::ALL {
        assert_eq!(retries(&registry, "otlp", t.as_str()), Some(0.0));
    }
    exporter.shutdown(far_deadline()).await;
}

/// Scenario: an HTTP sink answers 400; the batch goes through the queue.
/// Guarantees: exactly one attempt; the spans are counted as failed with reason `permanent`
/// (not `shutdown`), and shutdown reports nothing undelivered.
#[tokio::test]
async fn http_permanent_error_is_not_retried() {
    let sink = Arc::new(HttpSinkState::default());
    sink.script.lock().unwrap().push_back((400, None));
    let addr = spawn_http_sink(sink.clone()).await;
    let (registry, m) = metrics("otlphttp/tempo");
    let config = ExporterConfig::OtlpHttp(otlp_config(format!("http://{addr}")));
    let exporter = start_traces("otlphttp/tempo", config, m).unwrap();

    exporter.export(batch(&request(1, 5))).await.unwrap();
    let report = exporter.shutdown(far_deadline()).await;

    assert_eq!(report, DrainReport::default());
    assert_eq!(sink.attempts.load(Ordering::SeqCst), 1);
    assert_eq!(failed(&registry, "otlphttp/tempo", "permanent"), Some(5.0));
    assert_eq!(failed(&registry, "otlphttp/tempo", "shutdown"), Some(0.0));
    assert_eq!(retries(&registry, "otlphttp/tempo", "http_5xx"), Some(0.0));
}

/// Scenario: gzip and zstd over gRPC, with a configured header.
/// Guarantees: the sink decodes each request to what was sent, sees the compression in
/// `grpc-encoding`, and receives the header as metadata.
#[tokio::test]
async fn grpc_compression_reaches_sink_decodable() {
    for (compression, name) in [(Compression::Gzip, "gzip"), (Compression::Zstd, "zstd")] {
        let sink = Arc::new(GrpcSinkState::default());
        let (registry, exporter) = unqueued_grpc_to(&sink, |config| {
            config.compression = compression;
            config
                .headers
                .insert("X-Scope-OrgID".to_owned(), "tenant-1".to_owned());
        })
        .await;
        let req = request(3, 20);
        exporter.export(batch(&req)).await.unwrap();

        let received = sink.received.lock().unwrap().clone();
        assert_eq!(received.len(), 1, "{name}");
        assert_eq!(received[0].0, req, "{name}");
        assert_eq!(received[0].1.get("grpc-encoding").unwrap(), name);
        assert_eq!(received[0].1.get("x-scope-orgid").unwrap(), "tenant-1");
        assert_eq!(sent(&registry, "otlp"), Some(20.0));
        exporter.shutdown(far_deadline()).await;
    }
}

/// Scenario: gzip and zstd over HTTP, with `traces_endpoint` and a configured header.
/// Guarantees: the sink decompresses per `Content-Encoding` and decodes each request to what
/// was sent; the header arrives.
#[tokio::test]
async fn http_compression_reaches_sink_decodable() {
    for (compression, name) in [(Compression::Gzip, "gzip"), (Compression::Zstd, "zstd")] {
        let sink = Arc::new(HttpSinkState::default());
        let addr = spawn_http_sink(sink.clone()).await;
        let (registry, m) = metrics("otlphttp");
        let mut config = otlp_config("http://unused.invalid".to_owned());
        config.traces_endpoint = Some(format!("http://{addr}/custom/traces"));
        config.compression = compression;
        config.sending_queue.enabled = false;
        config
            .headers
            .insert("x-scope-orgid".to_owned(), "tenant-1".to_owned());
        let exporter = start_traces("otlphttp", ExporterConfig::OtlpHttp(config), m).unwrap();
        let req = request(5, 20);
        exporter.export(batch(&req)).await.unwrap();

        let received = sink.received.lock().unwrap().clone();
        assert_eq!(received.len(), 1, "{name}");
        assert_eq!(received[0].0, req, "{name}");
        assert_eq!(
            received[0].1.get(http::header::CONTENT_ENCODING).unwrap(),
            name
        );
        assert_eq!(received[0].1.get("x-scope-orgid").unwrap(), "tenant-1");
        assert_eq!(sent(&registry, "otlphttp"), Some(20.0));
        exporter.shutdown(far_deadline()).await;
    }
}

/// Scenario: the gRPC sink accepts every request but reports 2 rejected spans each time.
/// Guarantees: rejected spans are counted as failed with reason `partial_success` and the
/// rest as sent; the export itself succeeds (no retry).
#[tokio::test]
async fn grpc_partial_success_is_counted() {
    let sink = Arc::new(GrpcSinkState {
        partial_success: Some(ExportTracePartialSuccess {
            rejected_spans: 2,
            error_message: "spans too old".to_owned(),
        }),
        ..Default::default()
    });
    let (registry, exporter) = unqueued_grpc_to(&sink, |_| {}).await;
    exporter.export(batch(&request(1, 5))).await.unwrap();
    exporter.export(batch(&request(2, 5))).await.unwrap();

    assert_eq!(failed(&registry, "otlp", "partial_success"), Some(4.0));
    assert_eq!(sent(&registry, "otlp"), Some(6.0));
    assert_eq!(sink.attempts.load(Ordering::SeqCst), 2);
    exporter.shutdown(far_deadline()).await;
}

/// Scenario: a retryable failure with retries disabled, queue disabled.
/// Guarantees: one attempt, and the spans fail with reason `retries_exhausted`.
#[tokio::test]
async fn retries_disabled_fails_after_one_attempt() {
    let sink = GrpcSinkState::scripted([Status::unavailable("down")]);
    let (registry, exporter) = unqueued_grpc_to(&sink, |config| {
        config.retry_on_failure.enabled = false;
    })
    .await;
    let err = exporter.export(batch(&request(1, 2))).await.unwrap_err();
    assert!(matches!(
        err,
        ExportError::Failed {
            reason: FailureReason::RetriesExhausted,
            ..
        }
    ));
    assert_eq!(sink.attempts.load(Ordering::SeqCst), 1);
    assert_eq!(failed(&registry, "otlp", "retries_exhausted"), Some(2.0));
    exporter.shutdown(far_deadline()).await;
}

/// Scenario: the debug exporter at every verbosity.
/// Guarantees: export never fails and counts the spans as sent; after shutdown, export is
/// refused.
#[tokio::test]
async fn debug_exporter_logs_and_counts() {
    for verbosity in [Verbosity::Basic, Verbosity::Normal, Verbosity::Detailed] {
        let (registry, m) = metrics("debug");
        let config = ExporterConfig::Debug(DebugExporterConfig { verbosity });
        let exporter = start_traces("debug", config, m).unwrap();
        exporter.export(batch(&request(1, 3))).await.unwrap();
        assert_eq!(sent(&registry, "debug"), Some(3.0));
        let handle = exporter.clone();
        assert_eq!(
            exporter.shutdown(far_deadline()).await,
            DrainReport::default()
        );
        assert!(handle.export(batch(&request(2, 1))).await.is_err());
    }
}

/// Scenario: the metric families registered twice on one registry, and a bad config.
/// Guarantees: the second registration fails (the caller registers once and shares);
/// invalid endpoints, headers and TLS files are rejected at start with a typed error.
#[tokio::test]
async fn registration_and_start_errors() {
    let registry = Registry::new();
    let families = ExporterMetricFamilies::register(&registry).unwrap();
    assert!(ExporterMetricFamilies::register(&registry).is_err());
    let m = families.for_exporter(&id("otlp"));

    let config = otlp_config("http://".to_owned());
    assert!(matches!(
        start_traces("otlp", ExporterConfig::OtlpGrpc(config), m.clone()),
        Err(ExporterError::InvalidEndpoint { .. })
    ));
    let config = otlp_config("tempo:4318".to_owned());
    assert!(matches!(
        start_traces("otlp", ExporterConfig::OtlpHttp(config), m.clone()),
        Err(ExporterError::InvalidEndpoint { .. })
    ));
    let mut config = otlp_config("tempo:4317".to_owned());
    config
        .headers
        .insert("bad header".to_owned(), "x".to_owned());
    assert!(matches!(
        start_traces("otlp", ExporterConfig::OtlpGrpc(config), m.clone()),
        Err(ExporterError::InvalidHeader { .. })
    ));
    let mut config = otlp_config("tempo:4317".to_owned());
    config.tls = TlsClientConfig {
        ca_file: Some("/nonexistent/ca.pem".into()),
        ..Default::default()
    };
    assert!(matches!(
        start_traces("otlp", ExporterConfig::OtlpGrpc(config), m.clone()),
        Err(ExporterError::Tls { .. })
    ));
    // TLS with the built-in roots and with verification skipped both build.
    let mut config = otlp_config("tempo:4317".to_owned());
    config.tls = TlsClientConfig {
        insecure_skip_verify: true,
        ..Default::default()
    };
    start_traces("otlp", ExporterConfig::OtlpGrpc(config), m.clone()).unwrap();
    let config = otlp_config("https://tempo:4318".to_owned());
    start_traces("otlp", ExporterConfig::OtlpHttp(config), m).unwrap();
}

/// A gRPC sink over TLS, with a leaf certificate for `sink.test` issued by `testdata/ca.pem`.
async fn spawn_grpc_tls_sink(state: Arc<GrpcSinkState>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let identity = tonic::transport::Identity::from_pem(
        include_str!("testdata/sink.pem"),
        include_str!("testdata/sink.key"),
    );
    let server = tonic::transport::Server::builder()
        .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
        .unwrap()
        .add_service(TraceServiceServer::new(GrpcSink(state)));
    tokio::spawn(
        server.serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    addr
}

/// Scenario: a TLS gRPC sink whose certificate names `sink.test`, reached at 127.0.0.1 with
/// (a) `ca_file` and `server_name_override`, (b) `insecure_skip_verify`, (c) neither.
/// Guarantees: (a) and (b) deliver over TLS; (c) fails certificate verification, so
/// verification is really done by default (retries disabled: one attempt, then
/// `retries_exhausted`).
#[tokio::test]
async fn grpc_over_tls() {
    let ca_file =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/exporter/testdata/ca.pem");
    let cases = [
        (
            TlsClientConfig {
                ca_file: Some(ca_file),
                server_name_override: Some("sink.test".to_owned()),
                ..Default::default()
            },
            true,
        ),
        (
            TlsClientConfig {
                insecure_skip_verify: true,
                ..Default::default()
            },
            true,
        ),
        (TlsClientConfig::default(), false),
    ];
    for (tls, delivers) in cases {
        let sink = Arc::new(GrpcSinkState::default());
        let addr = spawn_grpc_tls_sink(sink.clone()).await;
        let (_registry, m) = metrics("otlp/tls");
        let mut config = otlp_config(addr.to_string());
        config.tls = tls.clone();
        config.sending_queue.enabled = false;
        config.retry_on_failure.enabled = false;
        let exporter = start_traces("otlp/tls", ExporterConfig::OtlpGrpc(config), m).unwrap();
        let req = request(8, 2);
        let result = exporter.export(batch(&req)).await;
        if delivers {
            result.unwrap();
            assert_eq!(sink.received(), vec![req], "{tls:?}");
        } else {
            assert!(
                matches!(
                    result,
                    Err(ExportError::Failed {
                        reason: FailureReason::RetriesExhausted,
                        ..
                    })
                ),
                "{result:?}"
            );
            assert!(sink.received().is_empty());
        }
        exporter.shutdown(far_deadline()).await;
    }
}
