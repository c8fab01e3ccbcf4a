//! Tests of the load-balancing exporter: splitting a batch by owner, and routing to real
//! loopback gRPC sinks, including a membership change that re-routes a removed backend's
//! queued batches.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prometheus::Registry;
use prost::Message;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::dns::Lookup;
use super::exporter::split_by_owner;
use super::ring::Ring;
use super::{LoadBalancer, LoadBalancerMetricFamilies};
use crate::config::{
    ComponentId, DnsResolverConfig, LoadBalancingConfig, OtlpExporterConfig, QueueConfig,
    ResolverConfig, RoutingKey,
};
use crate::exporter::core::error::ExportError;
use crate::exporter::core::metrics::ExporterMetricFamilies;
use crate::exporter::tests::{otlp_config, value};
use crate::otlp::TraceId;
use crate::payload::{Payload, TraceBatch};

// === helpers ===

/// One span as the tests compare them: trace id, span id, resource name, scope name.
type SpanKey = ([u8; 16], Vec<u8>, String, String);

fn trace_id(t: u32) -> [u8; 16] {
    let mut id = [0u8; 16];
    id[..4].copy_from_slice(&t.to_be_bytes());
    id[8..12].copy_from_slice(&t.wrapping_mul(2_654_435_761).to_be_bytes());
    id
}

/// `traces` traces of `spans_per_trace` spans each, interleaved over two resources with two
/// scopes each, so that pieces must be re-framed.
fn request(first: u32, traces: u32, spans_per_trace: u32) -> ExportTraceServiceRequest {
    let resource = |name: &str| Resource {
        attributes: vec![opentelemetry_proto::tonic::common::v1::KeyValue {
            key: "service.name".to_owned(),
            value: Some(opentelemetry_proto::tonic::common::v1::AnyValue {
                value: Some(
                    opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(
                        name.to_owned(),
                    ),
                ),
            }),
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut resource_spans: Vec<ResourceSpans> = ["checkout", "cart"]
        .iter()
        .map(|name| ResourceSpans {
            resource: Some(resource(name)),
            scope_spans: ["http", "db"]
                .iter()
                .map(|scope| ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: (*scope).to_owned(),
                        ..Default::default()
                    }),
                    spans: Vec::new(),
                    schema_url: String::new(),
                })
                .collect(),
            schema_url: String::new(),
        })
        .collect();
    let mut n = 0usize;
    for s in 0..spans_per_trace {
        for t in first..first + traces {
            let span = Span {
                trace_id: trace_id(t).to_vec(),
                span_id: [(s + 1) as u8; 8].to_vec(),
                name: format!("op-{t}-{s}"),
                ..Default::default()
            };
            resource_spans[n % 2].scope_spans[(n / 2) % 2]
                .spans
                .push(span);
            n += 1;
        }
    }
    ExportTraceServiceRequest { resource_spans }
}

fn batch(request: &ExportTraceServiceRequest) -> TraceBatch {
    TraceBatch::new(
        Bytes::from(request.encode_to_vec()),
        span_keys(request).len(),
    )
}

fn span_keys(request: &ExportTraceServiceRequest) -> Vec<SpanKey> {
    let mut keys = Vec::new();
    for rs in &request.resource_spans {
        let resource = rs
            .resource
            .as_ref()
            .and_then(|r| r.attributes.first())
            .and_then(|kv| kv.value.as_ref())
            .map(|v| format!("{v:?}"))
            .unwrap_or_default();
        for ss in &rs.scope_spans {
            let scope = ss
                .scope
                .as_ref()
                .map(|s| s.name.clone())
                .unwrap_or_default();
            for span in &ss.spans {
                let mut id = [0u8; 16];
                id.copy_from_slice(&span.trace_id);
                keys.push((id, span.span_id.clone(), resource.clone(), scope.clone()));
            }
        }
    }
    keys.sort();
    keys
}

fn addresses(ports: &[u16]) -> Vec<String> {
    ports.iter().map(|p| format!("127.0.0.1:{p}")).collect()
}

/// Plaintext, no compression, fast retries, a queue of `queue_size` with one consumer.
fn template(queue_size: usize) -> OtlpExporterConfig {
    let otlp = otlp_config(String::new());
    OtlpExporterConfig {
        timeout: Duration::from_secs(20),
        sending_queue: QueueConfig {
            queue_size: NonZeroUsize::new(queue_size).unwrap(),
            num_consumers: NonZeroUsize::new(1).unwrap(),
            ..otlp.sending_queue
        },
        ..otlp
    }
}

fn start(backends: Vec<String>, queue_size: usize) -> (Registry, Arc<LoadBalancer>) {
    let registry = Registry::new();
    let families = ExporterMetricFamilies::register(&registry).unwrap();
    let lb_families = LoadBalancerMetricFamilies::register(&registry).unwrap();
    let config = LoadBalancingConfig {
        routing_key: RoutingKey::TraceId,
        protocol: template(queue_size),
        resolver: ResolverConfig::Static {
            hostnames: backends,
        },
    };
    let lb = LoadBalancer::start(
        &ComponentId::literal("loadbalancing"),
        &config,
        &families,
        &lb_families,
    )
    .unwrap();
    (registry, lb)
}

// === gRPC sink ===

/// A sink that records what it receives; each request waits for one permit of `gate`.
struct SinkState {
    received: Mutex<Vec<ExportTraceServiceRequest>>,
    gate: Semaphore,
}

impl SinkState {
    fn open() -> Arc<Self> {
        Arc::new(Self {
            received: Mutex::new(Vec::new()),
            gate: Semaphore::new(Semaphore::MAX_PERMITS),
        })
    }

    fn closed() -> Arc<Self> {
        Arc::new(Self {
            received: Mutex::new(Vec::new()),
            gate: Semaphore::new(0),
        })
    }

    fn keys(&self) -> Vec<SpanKey> {
        let received = self.received.lock().unwrap();
        let mut keys: Vec<SpanKey> = received.iter().flat_map(span_keys).collect();
        keys.sort();
        keys
    }

    fn requests(&self) -> usize {
        self.received.lock().unwrap().len()
    }
}

struct Sink(Arc<SinkState>);

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        if let Ok(permit) = self.0.gate.acquire().await {
            permit.forget();
        }
        self.0.received.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

async fn spawn_sink(state: Arc<SinkState>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Sink(state)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    addr
}

/// The sum of every series of `name` whose `exporter` label is `exporter`.
fn total(registry: &Registry, name: &str, exporter: &str) -> f64 {
    registry
        .gather()
        .iter()
        .filter(|family| family.name() == name)
        .flat_map(|family| family.get_metric())
        .filter(|m| {
            m.get_label()
                .iter()
                .any(|l| l.name() == "exporter" && l.value() == exporter)
        })
        .map(|m| m.get_counter().get_value())
        .sum()
}

/// Polls `done` every 10ms for at most 10s.
async fn wait_for(what: &str, done: impl Fn() -> bool) {
    for _ in 0..1000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

// === splitting ===

/// Scenario: a request of 60 traces of 3 spans, interleaved over two resources with two
/// scopes each, split over a ring of 3 backends.
/// Guarantees: every piece holds only spans its backend owns, each piece's span count is
/// what it holds, and together the pieces hold every span exactly once with its own
/// resource and scope.
#[test]
fn split_by_owner_sends_each_span_to_its_owner() {
    let ring = Ring::new(&addresses(&[1, 2, 3]));
    let original = request(0, 60, 3);
    let pieces = split_by_owner(&ring, batch(&original)).unwrap();
    assert_eq!(pieces.len(), 3, "60 traces land on every backend");
    let mut all = Vec::new();
    for (owner, piece) in &pieces {
        let decoded = ExportTraceServiceRequest::decode(piece.request.clone()).unwrap();
        let keys = span_keys(&decoded);
        assert_eq!(piece.span_count, keys.len());
        for key in &keys {
            assert_eq!(ring.owner(&TraceId(key.0)), Some(*owner));
        }
        all.extend(keys);
    }
    all.sort();
    assert_eq!(all, span_keys(&original));
}

/// Scenario: a batch whose spans all belong to one trace; an empty batch.
/// Guarantees: the first goes whole to its owner without a copy (same buffer); the second
/// yields no piece.
#[test]
fn split_by_owner_passes_single_owner_batches_through() {
    let ring = Ring::new(&addresses(&[1, 2, 3]));
    let one_trace = batch(&request(5, 1, 4));
    let pieces = split_by_owner(&ring, one_trace.clone()).unwrap();
    assert_eq!(pieces.len(), 1);
    assert_eq!(Some(pieces[0].0), ring.owner(&TraceId(trace_id(5))));
    assert_eq!(pieces[0].1.request.as_ptr(), one_trace.request.as_ptr());
    assert!(
        split_by_owner(&ring, TraceBatch::default())
            .unwrap()
            .is_empty()
    );
}

/// Scenario: the same batches split with and without the receiver's views carried; then a
/// batch of 60 traces carrying the views of a one-trace request instead of its own.
/// Guarantees: the pieces are the same either way, and a batch that goes whole to its
/// owner keeps its views (for the local sampler); the split reads the carried views
/// rather than the request, so the mismatched batch follows its views: one piece, the
/// one trace's owner.
#[test]
fn split_by_owner_reads_the_views_a_batch_carries() {
    let ring = Ring::new(&addresses(&[1, 2, 3]));
    let views_of = |batch: &TraceBatch| {
        TraceBatch::inspect(&batch.request, true)
            .unwrap()
            .views
            .unwrap()
    };
    let many = batch(&request(0, 60, 3));
    let one_trace = batch(&request(5, 1, 4));
    for plain in [many.clone(), one_trace.clone()] {
        let carrying = plain.clone().carrying_views(views_of(&plain), None);
        let without: Vec<_> = split_by_owner(&ring, plain)
            .unwrap()
            .into_iter()
            .map(|(owner, piece)| (owner, piece.request))
            .collect();
        let with = split_by_owner(&ring, carrying).unwrap();
        let with_requests: Vec<_> = with
            .iter()
            .map(|(owner, piece)| (*owner, piece.request.clone()))
            .collect();
        assert_eq!(with_requests, without);
        if let [(_, whole)] = with.as_slice() {
            assert!(
                whole.carried_views().is_some(),
                "a whole batch keeps its views"
            );
        }
    }
    let mismatched = many.carrying_views(views_of(&one_trace), None);
    let pieces = split_by_owner(&ring, mismatched).unwrap();
    assert_eq!(pieces.len(), 1);
    assert_eq!(Some(pieces[0].0), ring.owner(&TraceId(trace_id(5))));
}

// === routing to sinks ===

/// Scenario: a load balancer over two loopback gRPC sinks exports 200 traces of 3 spans in
/// four batches, then shuts down, then is asked to export again.
/// Guarantees: each sink receives exactly the spans of the traces the ring gives it, all
/// 600 arrive once; the backend metrics count the hand-overs per endpoint; after shutdown
/// a batch is refused whole and counted as enqueue-failed under the exporter's id.
#[tokio::test]
async fn routes_each_trace_to_its_owner() {
    let sinks = [SinkState::open(), SinkState::open()];
    let ports = [
        spawn_sink(sinks[0].clone()).await.port(),
        spawn_sink(sinks[1].clone()).await.port(),
    ];
    let backends = addresses(&ports);
    let (registry, lb) = start(backends.clone(), 10);
    let exporter = lb.handle();
    let mut sent = Vec::new();
    for i in 0..4 {
        let request = request(i * 50, 50, 3);
        sent.extend(span_keys(&request));
        exporter.export(batch(&request)).await.unwrap();
    }
    let report = exporter
        .clone()
        .shutdown(Instant::now() + Duration::from_secs(10))
        .await;
    assert_eq!(report.dropped, 0);
    let ring = Ring::new(&backends);
    let mut received = Vec::new();
    for (i, sink) in sinks.iter().enumerate() {
        let keys = sink.keys();
        assert!(!keys.is_empty(), "sink {i} got nothing");
        for key in &keys {
            assert_eq!(ring.owner(&TraceId(key.0)), Some(i), "sink {i}");
        }
        received.extend(keys);
    }
    received.sort();
    sent.sort();
    assert_eq!(received, sent);
    assert_eq!(
        value(
            &registry,
            "otelcol_loadbalancer_num_backends",
            &[("resolver", "static")]
        ),
        Some(2.0)
    );
    for backend in &backends {
        assert_eq!(
            value(
                &registry,
                "otelcol_loadbalancer_backend_outcome_total",
                &[("endpoint", backend), ("success", "true")]
            ),
            Some(4.0),
            "{backend}: every batch had spans for both backends"
        );
    }

    let late = batch(&request(1000, 2, 1));
    match exporter.export(late).await {
        Err(ExportError::ShutDown { items: 2 }) => {}
        other => panic!("expected a refusal of 2 spans, got {other:?}"),
    }
    assert_eq!(
        value(
            &registry,
            "otelcol_exporter_enqueue_failed_spans_total",
            &[("exporter", "loadbalancing")]
        ),
        Some(2.0)
    );
}

/// Scenario: backend B is gone (its port refuses connections, as after `kill -9`); three
/// single-trace batches for B are exported: its one consumer retries the first, two wait in
/// its queue; B is then removed with `set_backends`.
/// Guarantees: the change hands back the request B's consumer was retrying as well as the
/// queued ones: A, the new owner, receives all three batches, every span exactly once;
/// nothing is counted as dropped or failed; B's exporter is retired (its queue-depth series
/// is gone).
#[tokio::test]
async fn removed_dead_backend_hands_back_its_request_in_flight() {
    let a = SinkState::open();
    let a_port = spawn_sink(a.clone()).await.port();
    let dead_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let a_addr = format!("127.0.0.1:{a_port}");
    let b_addr = format!("127.0.0.1:{dead_port}");
    let (registry, lb) = start(vec![a_addr.clone(), b_addr.clone()], 4);
    let ring = Ring::new(&[a_addr.clone(), b_addr.clone()]);
    let exporter = lb.handle();

    let mut for_b = Vec::new();
    let mut t = 0u32;
    while for_b.len() < 3 {
        if ring.owner(&TraceId(trace_id(t))) == Some(1) {
            for_b.push(request(t, 1, 2));
        }
        t += 1;
    }
    let mut sent: Vec<SpanKey> = for_b.iter().flat_map(span_keys).collect();
    for request in &for_b {
        exporter.export(batch(request)).await.unwrap();
    }
    let b_label = format!("loadbalancing/{b_addr}");
    wait_for("B's consumer retrying", || {
        value(
            &registry,
            "tailgate_exporter_retries_total",
            &[("exporter", &b_label), ("error_type", "transport")],
        )
        .is_some_and(|n| n >= 1.0)
    })
    .await;

    assert!(
        lb.set_backends(std::slice::from_ref(&a_addr))
            .await
            .unwrap()
    );
    assert_eq!(
        value(
            &registry,
            "otelcol_exporter_queue_size",
            &[("exporter", &b_label)]
        ),
        None,
        "B's exporter is retired: its queue is gone"
    );
    let report = exporter
        .clone()
        .shutdown(Instant::now() + Duration::from_secs(10))
        .await;
    assert_eq!(report.dropped, 0);
    assert_eq!(
        a.requests(),
        3,
        "A got every batch B held, the retried one too"
    );
    let mut received = a.keys();
    received.sort();
    sent.sort();
    assert_eq!(received, sent, "every span exactly once");
    for exporter in [b_label.as_str(), "loadbalancing"] {
        assert_eq!(
            total(
                &registry,
                "otelcol_exporter_send_failed_spans_total",
                exporter
            ),
            0.0,
            "{exporter} counts nothing as failed"
        );
    }
}

/// Scenario: backend B answers nothing yet (its sink holds every request), so its one
/// consumer holds one batch in flight, four more fill its queue, and the export of the
/// rest waits for room; B is then removed with `set_backends`, and its sink answers once
/// its queue has been taken back.
/// Guarantees: the change completes although an export was waiting on B's full queue, once
/// B's request in flight succeeded; B's
/// queued batches, and those the waiting export then hands over, reach A, the new owner
/// of every trace; B receives only the batch it had in flight; every span arrives exactly
/// once and none is counted as dropped; the backend count and updates are recorded.
#[tokio::test]
async fn removed_backend_hands_its_queue_to_the_new_owner() {
    let a = SinkState::open();
    let b = SinkState::closed();
    let a_port = spawn_sink(a.clone()).await.port();
    let b_port = spawn_sink(b.clone()).await.port();
    let a_addr = format!("127.0.0.1:{a_port}");
    let b_addr = format!("127.0.0.1:{b_port}");
    let (registry, lb) = start(vec![a_addr.clone(), b_addr.clone()], 4);
    let ring = Ring::new(&[a_addr.clone(), b_addr.clone()]);
    let exporter = lb.handle();

    // Ten single-trace batches for B: one goes in flight, four fill its queue, and the
    // export of the sixth waits for room.
    let mut for_b = Vec::new();
    let mut t = 0u32;
    while for_b.len() < 10 {
        if ring.owner(&TraceId(trace_id(t))) == Some(1) {
            for_b.push(request(t, 1, 2));
        }
        t += 1;
    }
    let mut sent: Vec<SpanKey> = for_b.iter().flat_map(span_keys).collect();
    let exporting = {
        let exporter = exporter.clone();
        let batches: Vec<TraceBatch> = for_b.iter().map(batch).collect();
        tokio::spawn(async move {
            for batch in batches {
                exporter.export(batch).await.unwrap();
            }
        })
    };
    let b_label = format!("loadbalancing/{b_addr}");
    wait_for("B's queue full behind one request in flight", || {
        in_flight(&registry, &b_addr) == Some(1.0)
            && value(
                &registry,
                "otelcol_exporter_queue_size",
                &[("exporter", &b_label)],
            ) == Some(4.0)
    })
    .await;
    assert!(
        !exporting.is_finished(),
        "the export waits for room in B's queue"
    );

    // The change waits for the request in flight to B to end; B answers it once its
    // queue has been taken back.
    let changing = {
        let lb = lb.clone();
        let a_addr = a_addr.clone();
        tokio::spawn(async move { lb.set_backends(std::slice::from_ref(&a_addr)).await })
    };
    wait_for("B's queue taken back", || {
        value(
            &registry,
            "otelcol_exporter_queue_size",
            &[("exporter", &b_label)],
        ) == Some(0.0)
    })
    .await;
    b.gate.add_permits(100);
    assert!(changing.await.unwrap().unwrap());
    assert_eq!(lb.backends().await, vec![a_addr.clone()]);
    exporting.await.unwrap();

    let report = exporter
        .clone()
        .shutdown(Instant::now() + Duration::from_secs(10))
        .await;
    assert_eq!(report.dropped, 0);
    assert_eq!(b.requests(), 1, "B only finished what it had in flight");
    assert_eq!(a.requests(), 9, "A got B's other nine batches");
    let mut received = a.keys();
    received.extend(b.keys());
    received.sort();
    sent.sort();
    assert_eq!(received, sent, "every span exactly once");
    assert_eq!(
        value(
            &registry,
            "otelcol_loadbalancer_num_backends",
            &[("resolver", "static")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &registry,
            "otelcol_loadbalancer_num_backend_updates_total",
            &[("resolver", "static")]
        ),
        Some(2.0),
        "the start and the change"
    );
    assert_eq!(
        value(
            &registry,
            "tailgate_spans_dropped_total",
            &[("reason", "shutdown")]
        )
        .unwrap_or(0.0),
        0.0
    );
    assert_eq!(
        value(
            &registry,
            "otelcol_exporter_sent_spans_total",
            &[("exporter", &b_label)]
        ),
        Some(2.0)
    );
}

/// `otelcol_exporter_in_flight_requests` of backend `address`'s exporter.
fn in_flight(registry: &Registry, address: &str) -> Option<f64> {
    let label = format!("loadbalancing/{address}");
    value(
        registry,
        "otelcol_exporter_in_flight_requests",
        &[("exporter", &label)],
    )
}

// === the DNS resolver task ===

/// What the fake lookup answers next.
#[derive(Clone)]
enum Answer {
    Found(Vec<std::net::IpAddr>),
    Failed,
    /// Never answers: the resolution's timeout ends it.
    Hangs,
}

/// A lookup that answers what the test set, and counts the lookups.
struct FakeLookup {
    answer: Mutex<Answer>,
    calls: std::sync::atomic::AtomicUsize,
}

impl FakeLookup {
    fn set(&self, answer: Answer) {
        *self.answer.lock().unwrap() = answer;
    }

    fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Lookup for FakeLookup {
    fn lookup<'a>(
        &'a self,
        hostname: &'a str,
    ) -> crate::payload::BoxFuture<'a, Result<Vec<std::net::IpAddr>, String>> {
        assert_eq!(hostname, "samplers.test");
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let answer = self.answer.lock().unwrap().clone();
        Box::pin(async move {
            match answer {
                Answer::Found(found) => Ok(found),
                Answer::Failed => Err("NXDOMAIN".to_owned()),
                Answer::Hangs => std::future::pending().await,
            }
        })
    }
}

fn ip(text: &str) -> std::net::IpAddr {
    text.parse().unwrap()
}

/// Scenario: a load balancer with a DNS resolver (interval 5s, timeout 1s, port 9) over a
/// fake lookup, on paused time: the first lookup fails, an export waits; then the name
/// resolves to two addresses given out of order (one twice); then lookups fail, answer
/// nothing, and hang; then one address is left; then shutdown.
/// Guarantees: the first resolution is done before `first_resolution` returns, and a
/// failed one leaves the ring empty while an export waits for backends (it is neither
/// refused nor lost) and completes once they come; backends are the sorted, deduplicated
/// addresses with the port; failed, empty and timed-out resolutions are counted as
/// unsuccessful and keep the last backends; a change replaces them and is counted; after
/// shutdown no lookup happens anymore.
#[tokio::test(start_paused = true)]
async fn dns_resolver_task_follows_the_name() {
    let registry = Registry::new();
    let families = ExporterMetricFamilies::register(&registry).unwrap();
    let lb_families = LoadBalancerMetricFamilies::register(&registry).unwrap();
    let lookup = Arc::new(FakeLookup {
        answer: Mutex::new(Answer::Failed),
        calls: std::sync::atomic::AtomicUsize::new(0),
    });
    let interval = Duration::from_secs(5);
    let lb = LoadBalancer::start_dns_with(
        &ComponentId::literal("loadbalancing"),
        template(10),
        DnsResolverConfig {
            hostname: "samplers.test".to_owned(),
            port: 9,
            interval,
            timeout: Duration::from_secs(1),
            nameserver: None,
        },
        lookup.clone(),
        &families,
        &lb_families,
    );
    let resolutions = |success: &str| {
        value(
            &registry,
            "otelcol_loadbalancer_num_resolutions_total",
            &[("resolver", "dns"), ("success", success)],
        )
        .unwrap_or(0.0)
    };
    let num_backends = || {
        value(
            &registry,
            "otelcol_loadbalancer_num_backends",
            &[("resolver", "dns")],
        )
        .unwrap_or(0.0)
    };

    lb.first_resolution().await;
    assert_eq!(lookup.calls(), 1);
    assert_eq!(resolutions("false"), 1.0);
    assert!(lb.backends().await.is_empty());

    // A batch with no span: the wait for backends is what is tested, not the network.
    let exporter = lb.handle();
    let waiting = tokio::spawn(async move { exporter.export(TraceBatch::default()).await });
    tokio::time::sleep(interval / 2).await;
    assert!(
        !waiting.is_finished(),
        "an export waits while there is no backend"
    );

    lookup.set(Answer::Found(vec![
        ip("127.0.0.3"),
        ip("127.0.0.2"),
        ip("127.0.0.3"),
    ]));
    tokio::time::sleep(interval).await;
    assert_eq!(lookup.calls(), 2);
    let two = vec!["127.0.0.2:9".to_owned(), "127.0.0.3:9".to_owned()];
    assert_eq!(lb.backends().await, two);
    assert_eq!(resolutions("true"), 1.0);
    assert_eq!(num_backends(), 2.0);
    waiting.await.unwrap().unwrap();

    for (n, answer) in [Answer::Failed, Answer::Found(Vec::new()), Answer::Hangs]
        .into_iter()
        .enumerate()
    {
        lookup.set(answer);
        tokio::time::sleep(interval).await;
        assert_eq!(lookup.calls(), 3 + n);
        assert_eq!(resolutions("false"), 2.0 + n as f64);
        assert_eq!(
            lb.backends().await,
            two,
            "a failed resolution keeps the backends"
        );
        assert_eq!(num_backends(), 2.0);
    }

    lookup.set(Answer::Found(vec![ip("127.0.0.2")]));
    // The hanging lookup ends at its timeout, so the next one comes 1s later.
    tokio::time::sleep(interval + Duration::from_secs(1)).await;
    assert_eq!(lb.backends().await, vec!["127.0.0.2:9".to_owned()]);
    assert_eq!(resolutions("true"), 2.0);
    assert_eq!(num_backends(), 1.0);
    assert_eq!(
        value(
            &registry,
            "otelcol_loadbalancer_num_backend_updates_total",
            &[("resolver", "dns")],
        ),
        Some(2.0)
    );

    let report = lb.shutdown(Instant::now() + Duration::from_secs(1)).await;
    assert_eq!(report.dropped, 0);
    let calls = lookup.calls();
    tokio::time::sleep(interval * 3).await;
    assert_eq!(lookup.calls(), calls, "the task ended at shutdown");
}

/// Scenario: one resolution of a name with IPv6 and IPv4 addresses, given unsorted.
/// Guarantees: IPv4 sorts before IPv6, and IPv6 backends are written `[ip]:port`, as the
/// OTLP exporter's endpoint needs them.
#[tokio::test(start_paused = true)]
async fn resolve_sorts_and_brackets_ipv6() {
    let lookup = FakeLookup {
        answer: Mutex::new(Answer::Found(vec![
            ip("fd00::2"),
            ip("10.0.0.9"),
            ip("fd00::1"),
        ])),
        calls: std::sync::atomic::AtomicUsize::new(0),
    };
    let config = DnsResolverConfig {
        hostname: "samplers.test".to_owned(),
        port: 4317,
        interval: Duration::from_secs(5),
        timeout: Duration::from_secs(1),
        nameserver: None,
    };
    assert_eq!(
        super::dns::resolve(&lookup, &config).await.unwrap(),
        vec![
            "10.0.0.9:4317".to_owned(),
            "[fd00::1]:4317".to_owned(),
            "[fd00::2]:4317".to_owned(),
        ]
    );
}
