//! Two tiers on loopback, as the Collector's scale-out layout runs them: a front tailgate
//! with the `loadbalancing` exporter (static resolver) routing by trace id to two sampling
//! tailgates on 127.0.0.2 and 127.0.0.3 (one port for both, as pods behind a headless
//! Service), each sampling with the seed's policies and exporting to its own sink. What the
//! two sinks receive together must be exactly what one instance would keep.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, status};
use rand::{Rng, SeedableRng};
use tailgate::otlp::TraceId;
use tailgate::sampler::threshold::{Threshold, trace_id_randomness};
use tailgate::service::Gateway;

use crate::support::{self, OtlpSink, SinkBehavior, replicas};

const TRACES: usize = 3_000;
/// Spans per trace: two leaves, a middle span (ERROR in error traces), and the root.
pub(crate) const SPANS_PER_TRACE: usize = 4;
/// Traces per request.
const CHUNK: usize = 150;

/// The seed's policies (errors, then 10%), as a replica's `tail_sampling` settings.
pub(crate) const SEED_POLICIES: &str = "    decision_wait: 5s
    decision_wait_after_root_received: 500ms
    policies:
      - {name: errors, type: status_code, status_code: {status_codes: [ERROR]}}
      - {name: baseline, type: probabilistic, probabilistic: {sampling_percentage: 10}}";

/// The front tier: OTLP over gRPC and HTTP in, `load_balancing` (the new type name) out.
fn front_config(backends: &[SocketAddr]) -> String {
    let hostnames: Vec<String> = backends.iter().map(|b| format!("'{b}'")).collect();
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
      http:
        endpoint: 127.0.0.1:0
processors:
  batch:
    send_batch_size: 512
    timeout: 50ms
exporters:
  load_balancing:
    routing_key: traceID
    protocol:
      otlp:
        tls:
          insecure: true
        retry_on_failure:
          initial_interval: 100ms
    resolver:
      static:
        hostnames: [{}]
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [load_balancing]
  telemetry:
    metrics:
      address: 127.0.0.1:0
"#,
        hostnames.join(", ")
    )
}

/// Starts the two sampling replicas on 127.0.0.2 and 127.0.0.3 with one port, each
/// exporting to its sink; returns them and their addresses.
async fn start_samplers(sinks: [SocketAddr; 2]) -> (Vec<Gateway>, Vec<SocketAddr>) {
    let ips = ["127.0.0.2", "127.0.0.3"];
    let (gateways, port) = replicas::start_on_one_port(&ips, |listen, i| {
        replicas::sampler_config(listen, sinks[i], SEED_POLICIES)
    })
    .await;
    let addrs = ips
        .iter()
        .map(|ip| format!("{ip}:{port}").parse().expect("address"))
        .collect();
    (gateways, addrs)
}

fn span(trace: &[u8; 16], n: u8, parent: Option<u8>, error: bool) -> Span {
    Span {
        trace_id: trace.to_vec(),
        span_id: vec![n; 8],
        parent_span_id: parent.map(|p| vec![p; 8]).unwrap_or_default(),
        name: format!("op-{n}"),
        start_time_unix_nano: 1_000_000 + u64::from(n),
        end_time_unix_nano: 2_000_000 - u64::from(n),
        status: error.then(|| Status {
            code: status::StatusCode::Error as i32,
            message: "failed".to_owned(),
        }),
        ..Default::default()
    }
}

/// Part `part` (0, 1 or 2) of each trace in `traces`, as one request: the two leaves, then
/// the middle span (ERROR in error traces), then the root, as real traces end. Part 3 is
/// one more leaf, for a test that sends it late (after the trace was decided).
pub(crate) fn request(traces: &[([u8; 16], bool)], part: usize) -> ExportTraceServiceRequest {
    let spans = traces
        .iter()
        .flat_map(|(id, error)| match part {
            0 => vec![span(id, 3, Some(2), false), span(id, 4, Some(2), false)],
            1 => vec![span(id, 2, Some(1), *error)],
            2 => vec![span(id, 1, None, false)],
            _ => vec![span(id, 5, Some(2), false)],
        })
        .collect();
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
                spans,
                ..Default::default()
            }],
            schema_url: String::new(),
        }],
    }
}

/// Sends every trace in three parts about 300ms apart, each part's chunks alternating
/// between OTLP/gRPC and OTLP/HTTP (a trace's parts travel by both).
async fn send(front_grpc: SocketAddr, front_http: SocketAddr, traces: &[([u8; 16], bool)]) {
    let mut grpc = TraceServiceClient::connect(format!("http://{front_grpc}"))
        .await
        .expect("front tier accepts gRPC");
    for part in 0..3 {
        for (i, chunk) in traces.chunks(CHUNK).enumerate() {
            let request = request(chunk, part);
            if (i + part) % 2 == 0 {
                grpc.export(request).await.expect("gRPC export accepted");
            } else {
                replicas::export_http(front_http, &request).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Scenario: a front tailgate (`load_balancing`, static resolver over 127.0.0.2:P and
/// 127.0.0.3:P) before two sampling tailgates with the seed's policies; 3,000 traces of 4
/// spans, 40% with an ERROR span, each trace's spans sent in three parts 300ms apart over
/// gRPC and HTTP to the front tier.
/// Guarantees: the two sinks together receive exactly what one instance would keep: every
/// error trace, and every other trace exactly when R >= T for 10% (computed with the
/// crate's threshold functions), each whole (all 4 spans, each once), each at one sink
/// only; both replicas get a share; nothing is dropped in any tier; the front tier reports
/// 2 backends and successful hand-overs to each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tiers_keep_what_one_instance_keeps() {
    let sinks = [
        OtlpSink::start(SinkBehavior::Accept).await,
        OtlpSink::start(SinkBehavior::Accept).await,
    ];
    let (samplers, backends) = start_samplers([sinks[0].addr, sinks[1].addr]).await;
    let front = support::start_gateway(&front_config(&backends)).await;

    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let traces: Vec<([u8; 16], bool)> = (0..TRACES)
        .map(|_| (rng.random::<[u8; 16]>(), rng.random_bool(0.4)))
        .collect();
    send(
        support::grpc_addr(&front),
        support::http_addr(&front),
        &traces,
    )
    .await;

    let ten_percent = Threshold::from_probability(0.10).expect("a probability");
    let expected: HashSet<[u8; 16]> = traces
        .iter()
        .filter(|(id, error)| *error || ten_percent.keeps(trace_id_randomness(&TraceId(*id))))
        .map(|(id, _)| *id)
        .collect();
    let errors = traces.iter().filter(|(_, error)| *error).count();
    assert!(
        expected.len() > errors,
        "some traces are kept by probability"
    );
    let want_spans = expected.len() * SPANS_PER_TRACE;
    let arrived = support::eventually(Duration::from_secs(60), || {
        let total = sinks[0].handle.span_count() + sinks[1].handle.span_count();
        async move { total >= want_spans }
    })
    .await;

    // Kept spans arriving does not imply the dropped ones all left the front tier.
    let all_forwarded = support::eventually(Duration::from_secs(30), || {
        let front = &front;
        async move {
            let metrics = support::scrape(front).await;
            support::metric_value(
                &metrics,
                "otelcol_exporter_sent_spans_total",
                &["exporter=\"load_balancing/"],
            ) >= (TRACES * SPANS_PER_TRACE) as f64
        }
    })
    .await;
    let metrics = support::scrape(&front).await;
    let front_report = front.shutdown().await;
    let mut sampler_dropped = 0;
    for sampler in samplers {
        sampler_dropped += sampler.shutdown().await.dropped_spans;
    }
    assert!(
        arrived,
        "{} of {want_spans} kept spans arrived",
        sinks[0].handle.span_count() + sinks[1].handle.span_count()
    );
    assert!(all_forwarded, "the front tier forwarded every span");
    assert_eq!(front_report.dropped_spans, 0);
    assert_eq!(sampler_dropped, 0);

    let mut at_sink: Vec<HashMap<[u8; 16], Vec<Span>>> = Vec::new();
    for sink in &sinks {
        let mut by_trace: HashMap<[u8; 16], Vec<Span>> = HashMap::new();
        for received in sink.handle.spans() {
            let id: [u8; 16] = received
                .span
                .trace_id
                .as_slice()
                .try_into()
                .expect("16 bytes");
            by_trace.entry(id).or_default().push(received.span);
        }
        at_sink.push(by_trace);
    }
    for (i, by_trace) in at_sink.iter().enumerate() {
        assert!(
            by_trace.len() > expected.len() / 4,
            "replica {i} kept a share: {} of {}",
            by_trace.len(),
            expected.len()
        );
    }
    let split: Vec<_> = at_sink[0]
        .keys()
        .filter(|id| at_sink[1].contains_key(*id))
        .collect();
    assert!(
        split.is_empty(),
        "{} traces reached both replicas",
        split.len()
    );

    let kept: HashSet<[u8; 16]> = at_sink.iter().flat_map(|m| m.keys().copied()).collect();
    assert_eq!(
        kept.len(),
        expected.len(),
        "as many traces as one instance keeps"
    );
    assert_eq!(kept, expected, "exactly the traces one instance keeps");
    let error_of: HashMap<[u8; 16], bool> = traces.iter().copied().collect();
    for (id, spans) in at_sink.iter().flat_map(|m| m.iter()) {
        let ids: HashSet<&[u8]> = spans.iter().map(|s| s.span_id.as_slice()).collect();
        assert_eq!(
            spans.len(),
            SPANS_PER_TRACE,
            "trace kept whole, no span twice"
        );
        assert_eq!(ids.len(), SPANS_PER_TRACE, "every span of the trace, once");
        if !error_of[id] {
            assert!(
                spans.iter().all(|s| s.trace_state.starts_with("ot=th:")),
                "probabilistic keeps carry th"
            );
        }
    }

    assert_eq!(
        support::metric_value(
            &metrics,
            "otelcol_loadbalancer_num_backends",
            &["resolver=\"static\""]
        ),
        2.0
    );
    for backend in &backends {
        let endpoint = format!("endpoint=\"{backend}\"");
        assert!(
            support::metric_value(
                &metrics,
                "otelcol_loadbalancer_backend_outcome_total",
                &[&endpoint, "success=\"true\""]
            ) > 0.0,
            "hand-overs to {backend}"
        );
    }
    assert_eq!(
        support::metric_value(
            &metrics,
            "otelcol_exporter_sent_spans_total",
            &["exporter=\"load_balancing/"]
        ),
        (TRACES * SPANS_PER_TRACE) as f64,
        "the front tier forwarded every span"
    );
}
