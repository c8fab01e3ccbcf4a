//! The `loadbalancing` exporter's DNS resolver against a real DNS server: a front tailgate
//! resolving `samplers.test` through dnsmasq every 200ms, over sampling tailgates on
//! 127.0.0.2, 127.0.0.3 and 127.0.0.4 (one port for all, as pods behind a headless
//! Service), each keeping every trace and exporting to its own sink. Replicas join and
//! leave by editing dnsmasq's hosts file, as a headless Service's records change.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use rand::{Rng, SeedableRng};
use tailgate::service::Gateway;

use crate::support::dns::Dnsmasq;
use crate::support::{self, OtlpSink, SinkBehavior, replicas};

const NAME: &str = "samplers.test";
const REPLICAS: [&str; 3] = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
/// Traces per phase of the test.
const TRACES: usize = 300;
/// Spans per trace: a child, sent first, and the root, sent later.
const SPANS_PER_TRACE: usize = 2;
/// Traces per request.
const CHUNK: usize = 100;

/// A replica's `tail_sampling` settings: keep every trace.
const KEEP_ALL: &str = "    decision_wait: 1s
    policies:
      - {name: all, type: always_sample}";

/// The front tier: `loadbalancing` with the DNS resolver asking `nameserver` every 200ms.
fn front_config(nameserver: SocketAddr, port: u16) -> String {
    let loadbalancing = replicas::dns_loadbalancing(NAME, port, nameserver);
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
processors:
  batch:
    send_batch_size: 512
    timeout: 50ms
exporters:
{loadbalancing}service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [loadbalancing]
  telemetry:
    metrics:
      address: 127.0.0.1:0
"#
    )
}

/// Starts one replica per address of [`REPLICAS`] on one port, each exporting to its sink.
async fn start_samplers(sinks: &[SocketAddr]) -> (Vec<Gateway>, u16) {
    replicas::start_on_one_port(&REPLICAS, |listen, i| {
        replicas::sampler_config(listen, sinks[i], KEEP_ALL)
    })
    .await
}

/// Part 0 (the child) or 1 (the root) of each trace of `traces`, as one request.
fn request(traces: &[[u8; 16]], part: u8) -> ExportTraceServiceRequest {
    let spans = traces
        .iter()
        .map(|id| Span {
            trace_id: id.to_vec(),
            span_id: vec![part + 1; 8],
            parent_span_id: if part == 0 { vec![2; 8] } else { Vec::new() },
            name: format!("op-{part}"),
            start_time_unix_nano: 1_000_000,
            end_time_unix_nano: 2_000_000,
            ..Default::default()
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Sends part `part` of every trace of `traces` to the front tier over gRPC.
async fn send(front: SocketAddr, traces: &[[u8; 16]], part: u8) {
    let mut client = TraceServiceClient::connect(format!("http://{front}"))
        .await
        .expect("front tier accepts gRPC");
    for chunk in traces.chunks(CHUNK) {
        client
            .export(request(chunk, part))
            .await
            .expect("export accepted");
    }
}

fn new_traces(rng: &mut rand::rngs::StdRng) -> Vec<[u8; 16]> {
    (0..TRACES).map(|_| rng.random::<[u8; 16]>()).collect()
}

/// For each trace id, the sinks (by index) that received each of its spans.
fn where_spans_are(sinks: &[OtlpSink]) -> HashMap<[u8; 16], Vec<(usize, Vec<u8>)>> {
    let mut found: HashMap<[u8; 16], Vec<(usize, Vec<u8>)>> = HashMap::new();
    for (i, sink) in sinks.iter().enumerate() {
        for received in sink.handle.spans() {
            let id: [u8; 16] = received
                .span
                .trace_id
                .as_slice()
                .try_into()
                .expect("16 bytes");
            found
                .entry(id)
                .or_default()
                .push((i, received.span.span_id));
        }
    }
    found
}

/// The number of backends the front tier reports.
async fn num_backends(front: &Gateway) -> f64 {
    support::metric_value(
        &support::scrape(front).await,
        "otelcol_loadbalancer_num_backends",
        &["resolver=\"dns\""],
    )
}

/// Waits (at most 30 s) until the sinks hold `spans` spans in all.
async fn wait_for_spans(sinks: &[OtlpSink], spans: usize) -> bool {
    support::eventually(Duration::from_secs(30), || {
        let total: usize = sinks.iter().map(|s| s.handle.span_count()).sum();
        async move { total >= spans }
    })
    .await
}

/// Scenario: dnsmasq answers `samplers.test` with 127.0.0.2 and 127.0.0.3; a front tier
/// resolves it every 200ms through that server (`nameserver`) and routes 300 traces of 2
/// spans; then 127.0.0.4 is added to the hosts file (SIGHUP) and 300 more traces are
/// routed; then 300 traces get their first span, 127.0.0.2 is removed from DNS, and they
/// get their second span once the front tier reports 2 backends; then 300 more traces are
/// sent whole.
/// Guarantees: the front tier is ready with the 2 backends of the first answer, and both
/// replicas get traces; it follows DNS to 3 backends and the third replica gets new
/// traces; it follows DNS back to 2 and the removed replica gets no span of the traces
/// sent after that; every trace sent with no membership change in its way arrives whole
/// at one replica; across the run every span the front tier accepted arrives exactly
/// once (spans in == spans out over the three sinks) and none is dropped in any tier. The
/// number of traces split by the removal is reported, not asserted (handing those off
/// whole is the samplers' job).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_resolver_follows_replicas_joining_and_leaving() {
    let mut dns = Dnsmasq::start(&[(REPLICAS[0], NAME), (REPLICAS[1], NAME)]).await;
    let sinks = [
        OtlpSink::start(SinkBehavior::Accept).await,
        OtlpSink::start(SinkBehavior::Accept).await,
        OtlpSink::start(SinkBehavior::Accept).await,
    ];
    let sink_addrs: Vec<SocketAddr> = sinks.iter().map(|s| s.addr).collect();
    let (samplers, port) = start_samplers(&sink_addrs).await;
    let front = support::start_gateway(&front_config(dns.addr, port)).await;
    let front_grpc = support::grpc_addr(&front);
    assert_eq!(
        num_backends(&front).await,
        2.0,
        "ready after the first resolution"
    );

    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut sent = 0;

    // Two replicas.
    let two = new_traces(&mut rng);
    send(front_grpc, &two, 0).await;
    send(front_grpc, &two, 1).await;
    sent += two.len() * SPANS_PER_TRACE;
    assert!(
        wait_for_spans(&sinks, sent).await,
        "the first traces arrive"
    );
    assert!(sinks[0].handle.span_count() > 0 && sinks[1].handle.span_count() > 0);
    assert_eq!(
        sinks[2].handle.span_count(),
        0,
        "127.0.0.4 is not in DNS yet"
    );

    // A third replica joins.
    dns.set_hosts(
        &[
            (REPLICAS[0], NAME),
            (REPLICAS[1], NAME),
            (REPLICAS[2], NAME),
        ],
        NAME,
    )
    .await;
    let three_backends = support::eventually(Duration::from_secs(10), || {
        let front = &front;
        async move { num_backends(front).await == 3.0 }
    })
    .await;
    assert!(three_backends, "the front tier follows DNS to 3 backends");
    let three = new_traces(&mut rng);
    send(front_grpc, &three, 0).await;
    send(front_grpc, &three, 1).await;
    sent += three.len() * SPANS_PER_TRACE;
    assert!(
        wait_for_spans(&sinks, sent).await,
        "the traces sent to 3 arrive"
    );
    let found = where_spans_are(&sinks);
    let at_third = three
        .iter()
        .filter(|id| found[*id].iter().all(|(sink, _)| *sink == 2))
        .count();
    assert!(
        at_third > TRACES / 6,
        "the third replica gets its share: {at_third} of {TRACES}"
    );

    // 127.0.0.2 leaves while traces are in flight.
    let across = new_traces(&mut rng);
    send(front_grpc, &across, 0).await;
    dns.set_hosts(&[(REPLICAS[1], NAME), (REPLICAS[2], NAME)], NAME)
        .await;
    let two_backends = support::eventually(Duration::from_secs(10), || {
        let front = &front;
        async move { num_backends(front).await == 2.0 }
    })
    .await;
    assert!(
        two_backends,
        "the front tier follows DNS back to 2 backends"
    );
    send(front_grpc, &across, 1).await;
    sent += across.len() * SPANS_PER_TRACE;

    // All sent after the change settled.
    let after = new_traces(&mut rng);
    send(front_grpc, &after, 0).await;
    send(front_grpc, &after, 1).await;
    sent += after.len() * SPANS_PER_TRACE;

    let arrived = wait_for_spans(&sinks, sent).await;
    let forwarded = support::eventually(Duration::from_secs(30), || {
        let front = &front;
        async move {
            support::metric_value(
                &support::scrape(front).await,
                "otelcol_exporter_sent_spans_total",
                &["exporter=\"loadbalancing/"],
            ) >= sent as f64
        }
    })
    .await;
    let metrics = support::scrape(&front).await;
    let front_report = front.shutdown().await;
    let mut sampler_dropped = 0;
    for sampler in samplers {
        sampler_dropped += sampler.shutdown().await.dropped_spans;
    }
    let received: usize = sinks.iter().map(|s| s.handle.span_count()).sum();
    assert!(arrived, "{received} of {sent} spans arrived");
    assert!(forwarded, "the front tier forwarded every span");
    assert_eq!(front_report.dropped_spans, 0);
    assert_eq!(sampler_dropped, 0);
    assert_eq!(received, sent, "spans in == spans out over the three sinks");
    assert_eq!(
        support::metric_value(
            &metrics,
            "otelcol_exporter_sent_spans_total",
            &["exporter=\"loadbalancing/"]
        ),
        sent as f64,
        "the front tier forwarded each accepted span once"
    );

    let found = where_spans_are(&sinks);
    let unique: HashSet<([u8; 16], Vec<u8>)> = found
        .iter()
        .flat_map(|(id, spans)| spans.iter().map(|(_, span)| (*id, span.clone())))
        .collect();
    assert_eq!(unique.len(), sent, "no span twice");
    for (phase, traces) in [("two", &two), ("three", &three), ("after", &after)] {
        for id in traces.iter() {
            let spans = &found[id];
            assert_eq!(spans.len(), SPANS_PER_TRACE, "{phase}: trace whole");
            assert!(
                spans.iter().all(|(sink, _)| *sink == spans[0].0),
                "{phase}: a trace sent with no change in its way reaches one replica"
            );
        }
    }
    assert!(
        after
            .iter()
            .all(|id| found[id].iter().all(|(sink, _)| *sink != 0)),
        "the replica removed from DNS gets no new trace"
    );
    let split = across
        .iter()
        .filter(|id| {
            let spans = &found[*id];
            spans.iter().any(|(sink, _)| *sink != spans[0].0)
        })
        .count();
    eprintln!(
        "loadbalancing_dns: {split} of {TRACES} traces in flight at the removal of a \
         replica were split between the old and the new owner"
    );
    assert!(
        support::metric_value(
            &metrics,
            "otelcol_loadbalancer_num_backend_updates_total",
            &["resolver=\"dns\""]
        ) >= 3.0
    );
    assert!(
        support::metric_value(
            &metrics,
            "otelcol_loadbalancer_num_resolutions_total",
            &["resolver=\"dns\"", "success=\"true\""]
        ) >= 3.0
    );
    drop(dns);
}
