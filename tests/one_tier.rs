//! One tier: every replica is router and sampler, as the `production` overlay runs them.
//! Replicas on 127.0.0.2, 127.0.0.3, ... take senders' spans on `otlp`, route them by trace
//! id (`loadbalancing`, DNS resolver through a real dnsmasq) to `otlp/peers` on one port
//! (their own share in-process), sample with the seed's policies and `hand_off`, and
//! export to one sink. Replicas join and leave mid-run; what the sink receives must be
//! exactly what one instance would keep.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::trace::v1::Span;
use rand::{Rng, SeedableRng};
use tailgate::exporter::loadbalancing::Ring;
use tailgate::otlp::TraceId;
use tailgate::sampler::threshold::{Threshold, trace_id_randomness};
use tailgate::service::Gateway;

use crate::loadbalancing::{SEED_POLICIES, SPANS_PER_TRACE, request};
use crate::support::dns::Dnsmasq;
use crate::support::process::GatewayProcess;
use crate::support::{self, OtlpSink, SinkBehavior, replicas};

const NAME: &str = "peers.test";
/// The first three replicas, and the one that joins.
const IPS: [&str; 4] = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"];
const TRACES: usize = 10_000;
/// Traces are sent in waves; each wave's three parts go out one step apart.
const WAVES: usize = 10;
/// Traces per request.
const CHUNK: usize = 125;
const STEP: Duration = Duration::from_millis(400);
/// The step after which the fourth replica joins, and the one after which the first leaves.
const JOIN_AFTER: usize = 3;
const LEAVE_AFTER: usize = 7;
/// Error traces sent whole before the join (decided before it), whose late span (part 3)
/// is sent after it: those whose owner the join changed meet a decision handed over.
const LATE_TRACES: usize = 400;
const LATE_AFTER: usize = 5;

/// A one-tier replica: senders on `otlp` (ephemeral ports), peers on `peers` (one port for
/// all replicas), routing through DNS at `nameserver`, sampling with hand-off.
fn replica_config(peers: SocketAddr, nameserver: SocketAddr, sink: SocketAddr) -> String {
    let ip = peers.ip();
    let loadbalancing = replicas::dns_loadbalancing(NAME, peers.port(), nameserver);
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: {ip}:0
      http:
        endpoint: {ip}:0
  otlp/peers:
    protocols:
      grpc:
        endpoint: {peers}
processors:
  tail_sampling:
{SEED_POLICIES}
    hand_off:
      exporter: loadbalancing
      debounce: 200ms
      leave_delay: 1s
  batch:
    send_batch_size: 512
    timeout: 50ms
exporters:
{loadbalancing}  otlp/sink:
    endpoint: {sink}
    tls:
      insecure: true
service:
  pipelines:
    traces/route:
      receivers: [otlp]
      exporters: [loadbalancing]
    traces/sample:
      receivers: [otlp/peers]
      processors: [tail_sampling, batch]
      exporters: [otlp/sink]
  telemetry:
    metrics:
      address: 127.0.0.1:0
"#
    )
}

/// Where senders reach a replica.
#[derive(Clone, Copy)]
struct SenderPorts {
    grpc: SocketAddr,
    http: SocketAddr,
}

fn sender_ports(gateway: &Gateway) -> SenderPorts {
    SenderPorts {
        grpc: gateway.addresses.grpc["otlp"],
        http: gateway.addresses.http["otlp"],
    }
}

/// Sends one request, over gRPC or HTTP.
async fn send_one(to: SenderPorts, request: ExportTraceServiceRequest, grpc: bool) {
    if !grpc {
        return replicas::export_http(to.http, &request).await;
    }
    TraceServiceClient::connect(format!("http://{}", to.grpc))
        .await
        .expect("replica accepts gRPC")
        .export(request)
        .await
        .expect("gRPC export accepted");
}

/// The value of counter/gauge `name` with `labels` summed over the replicas' registries.
fn total(registries: &[prometheus::Registry], name: &str, labels: &[&str]) -> f64 {
    registries
        .iter()
        .map(|registry| {
            let text = prometheus::TextEncoder::new()
                .encode_to_string(&registry.gather())
                .expect("metrics encode");
            support::metric_value(&text, name, labels)
        })
        .sum()
}

/// Scenario: three one-tier replicas (127.0.0.2-4, peers on one port, DNS through
/// dnsmasq re-read on SIGHUP every change, resolved every 200ms) with the seed's policies
/// and `hand_off` (debounce 200ms, leave_delay 1s); 10,000 traces of 4 spans, 40% with an
/// ERROR span, sent in waves: each trace's spans in three parts 400ms apart, each part's
/// requests to a random replica over gRPC or HTTP. After step 3 a fourth replica joins
/// (started, then added to DNS); after step 7 the first leaves (taken out of DNS and of the
/// senders' choice, then shut down as SIGTERM does), with traces in flight at both changes.
/// Guarantees: the sink receives exactly what one instance would keep (every error trace,
/// every other trace exactly when R >= T for 10%), each kept trace whole (4 distinct spans,
/// none twice), so no trace in flight at a change was split; no replica drops a span
/// (shutdown reports 0); hand-offs happened at the changes and every span handed off
/// arrived; the leaving replica decided nothing early. Also, 400 error traces are sent
/// whole before the join and decided, and one more span of each two steps after it: each
/// reaches the sink with its trace (5 spans), and exactly the late spans of traces the
/// join moved to a new owner (the ring says which) are counted as late after move, having
/// met the keep decision handed over; every decision record handed over arrived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_keep_traces_whole_through_join_and_leave() {
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let mut dns = Dnsmasq::start(&[(IPS[0], NAME), (IPS[1], NAME), (IPS[2], NAME)]).await;
    let nameserver = dns.addr;
    let (mut gateways, port) = replicas::start_on_one_port(&IPS[..3], |peers, _| {
        replica_config(peers, nameserver, sink.addr)
    })
    .await;
    let registries: Vec<prometheus::Registry> =
        gateways.iter().map(|g| g.registry.clone()).collect();
    let mut registries = registries;
    let mut senders: Vec<SenderPorts> = gateways.iter().map(sender_ports).collect();

    let mut rng = rand::rngs::StdRng::seed_from_u64(23);
    let traces: Vec<([u8; 16], bool)> = (0..TRACES)
        .map(|_| (rng.random::<[u8; 16]>(), rng.random_bool(0.4)))
        .collect();
    let waves: Vec<&[([u8; 16], bool)]> = traces.chunks(TRACES / WAVES).collect();
    let late_traces: Vec<([u8; 16], bool)> = (0..LATE_TRACES)
        .map(|_| (rng.random::<[u8; 16]>(), true))
        .collect();
    for part in 0..3 {
        for chunk in late_traces.chunks(CHUNK) {
            let to = senders[rng.random_range(0..senders.len())];
            send_one(to, request(chunk, part), true).await;
        }
    }

    let mut leaving = None;
    let mut sent_requests = 0usize;
    for step in 0..WAVES + 2 {
        for part in 0..3 {
            let Some(wave) = step.checked_sub(part).and_then(|w| waves.get(w)) else {
                continue;
            };
            for chunk in wave.chunks(CHUNK) {
                let to = senders[rng.random_range(0..senders.len())];
                send_one(to, request(chunk, part), sent_requests.is_multiple_of(2)).await;
                sent_requests += 1;
            }
        }
        if step == JOIN_AFTER {
            let peers: SocketAddr = format!("{}:{port}", IPS[3]).parse().expect("address");
            let config =
                tailgate::config::load_str(&[&replica_config(peers, nameserver, sink.addr)])
                    .expect("replica config is valid");
            let joiner = Gateway::start(config).await.expect("fourth replica starts");
            senders.push(sender_ports(&joiner));
            registries.push(joiner.registry.clone());
            gateways.push(joiner);
            dns.set_hosts(&IPS.map(|ip| (ip, NAME)), NAME).await;
        }
        if step == LATE_AFTER {
            for chunk in late_traces.chunks(CHUNK) {
                let to = senders[rng.random_range(0..senders.len())];
                send_one(to, request(chunk, 3), true).await;
            }
        }
        if step == LEAVE_AFTER {
            // A terminating pod leaves the Service's endpoints and the headless records.
            dns.set_hosts(&[(IPS[1], NAME), (IPS[2], NAME), (IPS[3], NAME)], NAME)
                .await;
            senders.remove(0);
            let first = gateways.remove(0);
            leaving = Some(tokio::spawn(first.shutdown()));
        }
        tokio::time::sleep(STEP).await;
    }

    let ten_percent = Threshold::from_probability(0.10).expect("a probability");
    let expected: HashSet<[u8; 16]> = traces
        .iter()
        .filter(|(id, error)| *error || ten_percent.keeps(trace_id_randomness(&TraceId(*id))))
        .map(|(id, _)| *id)
        .collect();
    let late_ids: HashSet<[u8; 16]> = late_traces.iter().map(|(id, _)| *id).collect();
    let want_spans = expected.len() * SPANS_PER_TRACE + LATE_TRACES * (SPANS_PER_TRACE + 1);
    let arrived = support::eventually(Duration::from_secs(60), || {
        let count = sink.handle.span_count();
        async move { count >= want_spans }
    })
    .await;
    // Every replica has decided everything it holds.
    let settled = support::eventually(Duration::from_secs(30), || {
        let held = total(&registries[1..], "tailgate_sampler_spans_held", &[]);
        async move { held == 0.0 }
    })
    .await;

    // Read before the others shut down: each leaves then, handing its recent decisions
    // to peers that may be gone already.
    let late_after_move = total(
        &registries,
        "tailgate_sampler_late_after_move_spans_total",
        &[],
    );
    let decisions_sent = total(
        &registries,
        "tailgate_sampler_handoff_decisions_total",
        &["direction=\"sent\""],
    );
    let decisions_received = total(
        &registries,
        "tailgate_sampler_handoff_decisions_total",
        &["direction=\"received\""],
    );
    let left = leaving
        .expect("a replica left")
        .await
        .expect("shutdown task");
    let mut dropped = left.dropped_spans;
    for gateway in gateways {
        dropped += gateway.shutdown().await.dropped_spans;
    }
    assert!(
        arrived,
        "{} of {want_spans} kept spans arrived",
        sink.handle.span_count()
    );
    assert!(settled, "every replica decided what it held");
    assert_eq!(dropped, 0, "no replica dropped a span");

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
    let incomplete: Vec<_> = by_trace
        .iter()
        .filter(|(id, spans)| {
            let whole = SPANS_PER_TRACE + usize::from(late_ids.contains(*id));
            let ids: HashSet<&[u8]> = spans.iter().map(|s| s.span_id.as_slice()).collect();
            spans.len() != whole || ids.len() != whole
        })
        .collect();
    // The late traces whose owner the join changed: their late span reached the new owner.
    let ring_of = |ips: &[&str]| {
        Ring::new(
            &ips.iter()
                .map(|ip| format!("{ip}:{port}"))
                .collect::<Vec<_>>(),
        )
    };
    let (before_join, after_join) = (ring_of(&IPS[..3]), ring_of(&IPS));
    let moved = late_traces
        .iter()
        .filter(|(id, _)| {
            let id = TraceId(*id);
            before_join.owner_address(&id) != after_join.owner_address(&id)
        })
        .count();
    let handed_traces = total(
        &registries,
        "tailgate_sampler_handoff_traces_total",
        &["direction=\"sent\""],
    );
    let handed_sent = total(
        &registries,
        "tailgate_sampler_handoff_spans_total",
        &["direction=\"sent\""],
    );
    let handed_received = total(
        &registries,
        "tailgate_sampler_handoff_spans_total",
        &["direction=\"received\""],
    );
    let forwarded = total(&registries, "tailgate_sampler_forwarded_spans_total", &[]);
    for (i, registry) in registries.iter().enumerate() {
        let one = std::slice::from_ref(registry);
        eprintln!(
            "replica {i}: forwarded {}, hand-off spans sent {} received {}, traces sent {} received {}",
            total(one, "tailgate_sampler_forwarded_spans_total", &[]),
            total(
                one,
                "tailgate_sampler_handoff_spans_total",
                &["direction=\"sent\""]
            ),
            total(
                one,
                "tailgate_sampler_handoff_spans_total",
                &["direction=\"received\""]
            ),
            total(
                one,
                "tailgate_sampler_handoff_traces_total",
                &["direction=\"sent\""]
            ),
            total(
                one,
                "tailgate_sampler_handoff_traces_total",
                &["direction=\"received\""]
            ),
        );
    }
    let leaving_early = total(
        &registries,
        "tailgate_sampler_early_decisions_total",
        &["reason=\"leaving\""],
    );
    eprintln!(
        "one tier: {} traces kept of {TRACES}; hand-offs: {handed_traces} traces, \
         {handed_sent} spans sent, {handed_received} received, {forwarded} forwarded; \
         split or duplicated traces: {}; decided on leave: {leaving_early}; keep decisions \
         handed over {decisions_sent} (received {decisions_received}); late spans after a \
         move {late_after_move} (late traces moved by the join: {moved})",
        by_trace.len(),
        incomplete.len()
    );
    assert!(
        incomplete.is_empty(),
        "{} kept traces are split or duplicated, e.g. {:?}",
        incomplete.len(),
        incomplete.first().map(|(_, spans)| spans.len())
    );
    let kept: HashSet<[u8; 16]> = by_trace.keys().copied().collect();
    let expected: HashSet<[u8; 16]> = expected.union(&late_ids).copied().collect();
    let missing = expected.difference(&kept).count();
    let extra = kept.difference(&expected).count();
    assert_eq!(
        (missing, extra),
        (0, 0),
        "exactly the traces one instance keeps"
    );
    // Each replica's own share went in-process: outcomes recorded for its own address,
    // and nothing sent over the network to it.
    for (i, registry) in registries.iter().enumerate().skip(1) {
        let own = format!("{}:{port}", IPS[i]);
        let one = std::slice::from_ref(registry);
        let endpoint = format!("endpoint=\"{own}\"");
        let exporter = format!("exporter=\"loadbalancing/{own}\"");
        assert!(
            total(
                one,
                "otelcol_loadbalancer_backend_outcome_total",
                &[&endpoint, "success=\"true\""]
            ) > 0.0,
            "replica {i} routed to itself"
        );
        assert_eq!(
            total(one, "otelcol_exporter_sent_spans_total", &[&exporter]),
            0.0,
            "replica {i} reached itself in-process, not over the network"
        );
    }
    assert!(handed_traces > 0.0, "the changes moved undecided traces");
    assert_eq!(
        handed_sent, handed_received,
        "every span handed off arrived at its new owner"
    );
    assert_eq!(
        leaving_early, 0.0,
        "the leaving replica handed everything off"
    );
    assert!(moved > 0, "the join moved some late traces");
    assert_eq!(
        late_after_move, moved as f64,
        "each late span that reached a new owner met the decision handed over, and was counted"
    );
    assert_eq!(
        decisions_sent, decisions_received,
        "every keep decision handed over arrived"
    );
}

/// The replicas of the kill test: two in this process, and one child process to kill.
const KILL_IPS: [&str; 3] = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
const KILL_TRACES: usize = 6_000;
const KILL_WAVES: usize = 8;
/// The step after which the child replica is killed.
const KILL_AFTER: usize = 3;

/// Scenario: three one-tier replicas as in the join-and-leave test, the third a child
/// process (127.0.0.4); 6,000 traces of 4 spans (40% errors) sent in waves of three parts
/// 400ms apart to random replicas (gRPC; HTTP to the in-process ones on odd requests).
/// After step 3 the child is killed with SIGKILL and taken out of the senders' choice;
/// the survivors go on routing its share to it for one more step (their requests to it
/// fail and are retried), then it is taken out of DNS.
/// Guarantees: what the killed replica held is the only loss: every trace it neither owned
/// (on the ring of three) while in flight nor received from a sender is exported exactly as
/// one instance would (every error trace, the 10% with R >= T, each whole); no span reaches
/// the sink twice and no trace is kept that one instance would not keep; the survivors
/// accepted every span sent to them after the kill and drop nothing, and their exporters
/// count no failure: the requests they were retrying towards the dead replica went to its
/// successors. The loss is counted and printed (traces and spans, and what the killed
/// replica reported holding just before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_loses_only_what_it_held() {
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let mut dns = Dnsmasq::start(&KILL_IPS.map(|ip| (ip, NAME))).await;
    let nameserver = dns.addr;
    let (gateways, port) = replicas::start_on_one_port(&KILL_IPS[..2], |peers, _| {
        replica_config(peers, nameserver, sink.addr)
    })
    .await;
    let victim_peers: SocketAddr = format!("{}:{port}", KILL_IPS[2]).parse().expect("address");
    let victim = GatewayProcess::start(&replica_config(victim_peers, nameserver, sink.addr));
    let victim_grpc: SocketAddr = victim.grpc.parse().expect("the child's gRPC address");
    let registries: Vec<prometheus::Registry> =
        gateways.iter().map(|g| g.registry.clone()).collect();
    let survivors: Vec<SenderPorts> = gateways.iter().map(sender_ports).collect();
    let ring = Ring::new(&KILL_IPS.map(|ip| format!("{ip}:{port}")));
    let victim_address = victim_peers.to_string();

    let mut rng = rand::rngs::StdRng::seed_from_u64(29);
    let traces: Vec<([u8; 16], bool)> = (0..KILL_TRACES)
        .map(|_| (rng.random::<[u8; 16]>(), rng.random_bool(0.4)))
        .collect();
    let waves: Vec<&[([u8; 16], bool)]> = traces.chunks(KILL_TRACES / KILL_WAVES).collect();

    let mut touched: HashSet<[u8; 16]> = HashSet::new();
    let mut victim = Some(victim);
    let mut victim_held = 0.0;
    let mut sent_to_survivors = 0usize;
    let mut sent_requests = 0usize;
    for step in 0..KILL_WAVES + 2 {
        for part in 0..3 {
            let Some(wave) = step.checked_sub(part).and_then(|w| waves.get(w)) else {
                continue;
            };
            for chunk in wave.chunks(CHUNK) {
                let pick = rng.random_range(0..if victim.is_some() { 3 } else { 2 });
                let grpc = sent_requests.is_multiple_of(2) || pick == 2;
                sent_requests += 1;
                if pick == 2 {
                    touched.extend(chunk.iter().map(|(id, _)| *id));
                    let to = SenderPorts {
                        grpc: victim_grpc,
                        http: victim_grpc,
                    };
                    send_one(to, request(chunk, part), true).await;
                } else {
                    sent_to_survivors += chunk.len() * part_spans(part);
                    send_one(survivors[pick], request(chunk, part), grpc).await;
                }
            }
        }
        if step == KILL_AFTER {
            let killed = victim.take().expect("the victim runs");
            let text = support::reqwest_get(&killed.metrics_url).await.1;
            victim_held = support::metric_value(&text, "tailgate_sampler_spans_held", &[]);
            let _log = killed.kill9();
            // Traces the victim owned and had seen a part of are its to lose.
            for wave in &waves[..=KILL_AFTER] {
                touched.extend(
                    wave.iter()
                        .filter(|(id, _)| {
                            ring.owner_address(&TraceId(*id)) == Some(victim_address.as_str())
                        })
                        .map(|(id, _)| *id),
                );
            }
        }
        if step == KILL_AFTER + 1 {
            // The survivors learn of the death only now: meanwhile they routed this step's
            // spans of the victim's traces to it, and keep retrying them.
            dns.set_hosts(&[(KILL_IPS[0], NAME), (KILL_IPS[1], NAME)], NAME)
                .await;
        }
        tokio::time::sleep(STEP).await;
    }

    let ten_percent = Threshold::from_probability(0.10).expect("a probability");
    let keeps = |(id, error): &([u8; 16], bool)| {
        *error || ten_percent.keeps(trace_id_randomness(&TraceId(*id)))
    };
    let expected: HashSet<[u8; 16]> = traces.iter().filter(|t| keeps(t)).map(|t| t.0).collect();
    let expected_untouched: HashSet<[u8; 16]> = expected.difference(&touched).copied().collect();
    // Wait until every untouched kept trace has arrived whole, and the survivors hold
    // nothing more.
    let arrived = support::eventually(Duration::from_secs(60), || {
        let ids: HashSet<[u8; 16]> = sink
            .handle
            .spans()
            .iter()
            .filter_map(|s| s.span.trace_id.as_slice().try_into().ok())
            .collect();
        let all = expected_untouched.is_subset(&ids);
        async move { all }
    })
    .await;
    let settled = support::eventually(Duration::from_secs(30), || {
        let held = total(&registries, "tailgate_sampler_spans_held", &[]);
        async move { held == 0.0 }
    })
    .await;
    // One more decision window's worth, for anything still on its way.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let accepted = total(
        &registries,
        "otelcol_receiver_accepted_spans_total",
        &["receiver=\"otlp\""],
    );
    let refused = total(
        &registries,
        "otelcol_receiver_refused_spans_total",
        &["receiver=\"otlp\""],
    );
    let export_failed = total(&registries, "otelcol_exporter_send_failed_spans_total", &[]);
    let mut dropped = 0;
    for gateway in gateways {
        dropped += gateway.shutdown().await.dropped_spans;
    }
    assert!(arrived, "every kept trace the victim did not hold arrived");
    assert!(settled, "the survivors decided everything they held");

    let mut by_trace: HashMap<[u8; 16], Vec<Vec<u8>>> = HashMap::new();
    for received in sink.handle.spans() {
        let id: [u8; 16] = received
            .span
            .trace_id
            .as_slice()
            .try_into()
            .expect("16 bytes");
        by_trace.entry(id).or_default().push(received.span.span_id);
    }
    let twice = by_trace
        .values()
        .filter(|spans| spans.iter().collect::<HashSet<_>>().len() != spans.len())
        .count();
    let kept: HashSet<[u8; 16]> = by_trace.keys().copied().collect();
    let extra = kept.difference(&expected).count();
    let untouched_wrong = by_trace
        .iter()
        .filter(|(id, spans)| !touched.contains(*id) && spans.len() != SPANS_PER_TRACE)
        .count();
    let untouched_missing = expected_untouched.difference(&kept).count();
    let touched_expected: Vec<&[u8; 16]> = expected.intersection(&touched).collect();
    let touched_spans_arrived: usize = touched_expected
        .iter()
        .map(|id| by_trace.get(*id).map_or(0, Vec::len))
        .sum();
    let lost_spans = touched_expected.len() * SPANS_PER_TRACE - touched_spans_arrived;
    let lost_traces = touched_expected
        .iter()
        .filter(|id| by_trace.get(**id).map_or(0, Vec::len) < SPANS_PER_TRACE)
        .count();
    eprintln!(
        "kill -9: {} traces touched by the victim ({} kept by one instance), of which {lost_traces} \
         incomplete or missing ({lost_spans} spans); the victim reported {victim_held} spans held \
         just before; survivors accepted {accepted} of {sent_to_survivors} spans sent to them",
        touched.len(),
        touched_expected.len()
    );
    assert_eq!(twice, 0, "no span reaches the sink twice");
    assert_eq!(
        extra, 0,
        "no trace is kept that one instance would not keep"
    );
    assert_eq!(
        (untouched_missing, untouched_wrong),
        (0, 0),
        "every trace the victim did not hold is exported exactly as one instance would"
    );
    assert_eq!(
        (accepted, refused),
        (sent_to_survivors as f64, 0.0),
        "the survivors accepted every span sent to them"
    );
    assert_eq!(dropped, 0, "the survivors drop nothing");
    assert_eq!(
        export_failed, 0.0,
        "no export failed: what was on its way to the victim went to its successors"
    );
}

/// Spans in part `part` of a trace sent by [`request`].
fn part_spans(part: usize) -> usize {
    if part == 0 { 2 } else { 1 }
}
