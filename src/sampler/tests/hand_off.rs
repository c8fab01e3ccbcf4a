//! Hand-off between the samplers of replicas, on paused time, with a ring the test sets:
//! the sweep after a change, forwarding on arrival, and keep decisions that move with a
//! change so that late spans follow them.

use std::collections::HashSet;
use std::sync::Mutex;

use prometheus::{IntCounterVec, Opts, Registry};
use tokio::sync::watch;

use super::super::hand_off::{DecisionRecord, decisions_resource, write_decision};
use super::*;
use crate::config::ComponentId;
use crate::otlp::parse_traces_request;
use crate::payload::BoxFuture;

/// A ring on which the traces in `peer` belong to another replica, every other to this one.
struct TestOwnership {
    peer: HashSet<TraceId>,
}

impl Ownership for TestOwnership {
    fn owner(&self, trace_id: &TraceId) -> Owner {
        if self.peer.contains(trace_id) {
            Owner::Peer
        } else {
            Owner::Here
        }
    }

    fn leaving(&self) -> bool {
        false
    }
}

/// The peers of a replica: the ring the test publishes, and every hand-off it was given.
struct TestPeers {
    ring: watch::Sender<Arc<dyn Ownership>>,
    handed: Mutex<Vec<TraceBatch>>,
}

impl Peers for TestPeers {
    fn ownership(&self) -> watch::Receiver<Arc<dyn Ownership>> {
        self.ring.subscribe()
    }

    fn hand_off(&self, batch: TraceBatch) -> BoxFuture<'_, Result<(), HandOffRefused>> {
        Box::pin(async move {
            self.handed.lock().unwrap().push(batch);
            Ok(())
        })
    }
}

fn id(trace: u128) -> TraceId {
    TraceId(trace.to_be_bytes())
}

/// A sampler that follows a ring (debounce 200ms), with its output and counters.
struct Replica {
    ingest: SamplerIngest,
    output: mpsc::Receiver<TraceBatch>,
    peers: Arc<TestPeers>,
    registry: Registry,
}

impl Replica {
    fn start(settings: SamplerSettings) -> Self {
        let policies = seed_policies(10.0);
        let registry = Registry::new();
        let families = SamplerMetricFamilies::register(&registry).unwrap();
        let component = ComponentId::literal("tail_sampling");
        let dropped = IntCounterVec::new(Opts::new("dropped", "test"), &["reason"]).unwrap();
        let metrics = families.for_hand_off(
            &component,
            families.for_processor(&component, policies.names(), &dropped),
        );
        let here: Arc<dyn Ownership> = Arc::new(TestOwnership {
            peer: HashSet::new(),
        });
        let peers = Arc::new(TestPeers {
            ring: watch::channel(here).0,
            handed: Mutex::new(Vec::new()),
        });
        let following: Arc<dyn Peers> = peers.clone();
        let (ingest, closed) = TailSampler::start_following(
            settings,
            policies,
            metrics,
            MemoryBudget::unlimited(),
            4,
            Some((
                following,
                HandOffSettings {
                    debounce: Duration::from_millis(200),
                },
            )),
        );
        let (tx, output) = mpsc::channel(1024);
        tokio::spawn(ingest.sampler().clone().run(closed, Downstream::stage(tx)));
        tokio::spawn(ingest.sampler().clone().run_hand_off());
        Self {
            ingest,
            output,
            peers,
            registry,
        }
    }

    fn send(&self, spans: Vec<TestSpan>) {
        self.arrive(&request(&spans), Arrival::Sent);
    }

    fn arrive(&self, batch: &TraceBatch, arrival: Arrival) {
        let views = parse_traces_request(&batch.request).expect("a valid request");
        self.ingest.sampler().ingest_arrival(&views, arrival);
    }

    /// Publishes a ring on which `peer` belong to another replica.
    fn ring(&self, peer: &[u128]) {
        self.peers.ring.send_replace(Arc::new(TestOwnership {
            peer: peer.iter().copied().map(id).collect(),
        }));
    }

    fn handed(&self) -> Vec<TraceBatch> {
        std::mem::take(&mut *self.peers.handed.lock().unwrap())
    }

    fn drain(&mut self) -> Vec<OutSpan> {
        let mut out = Vec::new();
        while let Ok(batch) = self.output.try_recv() {
            out.extend(decode(&batch));
        }
        out
    }

    /// The sum of the series of counter `name` carrying `label` (`key="value"` or empty).
    fn counter(&self, name: &str, label: (&str, &str)) -> u64 {
        self.registry
            .gather()
            .iter()
            .filter(|family| family.name() == name)
            .flat_map(|family| family.get_metric())
            .filter(|m| {
                label.0.is_empty()
                    || m.get_label()
                        .iter()
                        .any(|l| l.name() == label.0 && l.value() == label.1)
            })
            .map(|m| m.get_counter().get_value() as u64)
            .sum()
    }
}

/// The trace ids of the decision records in `batches`, and the spans `(trace, span)` of
/// everything else.
fn split_records(batches: &[TraceBatch]) -> (Vec<u128>, Vec<(u128, u64)>) {
    let mut records = Vec::new();
    let mut spans = Vec::new();
    for batch in batches {
        for resource_spans in parse_traces_request(&batch.request).unwrap() {
            let is_record = resource_spans.resource == *decisions_resource();
            for span in resource_spans.scope_spans.iter().flat_map(|s| &s.spans) {
                let trace = u128::from_be_bytes(span.trace_id.0);
                if is_record {
                    records.push(trace);
                } else {
                    spans.push((trace, u64::from_be_bytes(span.span_id.0)));
                }
            }
        }
    }
    records.sort_unstable();
    spans.sort_unstable();
    (records, spans)
}

fn quick() -> SamplerSettings {
    SamplerSettings {
        decision_wait: Duration::from_secs(2),
        ..settings()
    }
}

fn error_span(trace: u128, span_id: u64, parent: Option<u64>) -> TestSpan {
    TestSpan {
        error: true,
        ..span(trace, span_id, parent)
    }
}

/// Scenario: replica A (decision_wait 2s) decides three traces (an error trace and a 10%
/// keep, both kept; one dropped), then holds two undecided ones; the ring changes so that
/// the three decided traces and one undecided trace belong to a peer. The hand-offs A
/// makes are fed to replica B as a peer's hand-off; late spans of the kept traces then
/// reach B.
/// Guarantees: after the debounce, A hands off the undecided trace it no longer owns
/// (whole) and the keep decisions of the two kept traces, not the dropped one, and keeps
/// the trace it still owns; B takes the decisions, so the late spans of both kept traces
/// leave B at once as kept (the probabilistic keep with its threshold in `th`), counted as
/// late after move; B holds the handed-off trace and decides it after its own wait.
#[tokio::test(start_paused = true)]
async fn a_change_moves_undecided_traces_and_recent_keep_decisions() {
    let mut a = Replica::start(quick());
    let errors = trace_with_randomness(1, DROPPED_AT_10);
    let dropped = trace_with_randomness(2, DROPPED_AT_10);
    let sampled = trace_with_randomness(3, KEPT_AT_10);
    let moving = trace_with_randomness(4, DROPPED_AT_10);
    let staying = trace_with_randomness(5, DROPPED_AT_10);
    a.send(vec![error_span(errors, 1, None), span(dropped, 1, None)]);
    a.send(vec![span(sampled, 1, None)]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let decided: HashSet<u128> = a.drain().iter().map(|s| s.trace).collect();
    assert_eq!(decided, HashSet::from([errors, sampled]));

    a.send(vec![span(moving, 2, Some(1)), span(moving, 3, Some(1))]);
    a.send(vec![span(staying, 2, Some(1))]);
    a.ring(&[errors, dropped, sampled, moving]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(a.handed().is_empty(), "nothing moves before the debounce");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let handed = a.handed();
    let (records, spans) = split_records(&handed);
    let mut want_records = vec![errors, sampled];
    want_records.sort_unstable();
    assert_eq!(records, want_records, "the keep decisions, not the drop");
    assert_eq!(
        spans,
        vec![(moving, 2), (moving, 3)],
        "the moving trace, whole"
    );
    assert_eq!(
        a.counter(
            "tailgate_sampler_handoff_decisions_total",
            ("direction", "sent")
        ),
        2
    );
    assert_eq!(a.ingest.sampler().traces_held(), 1, "A keeps its own trace");

    let mut b = Replica::start(quick());
    for batch in &handed {
        b.arrive(batch, Arrival::HandOff);
    }
    assert_eq!(
        b.counter(
            "tailgate_sampler_handoff_decisions_total",
            ("direction", "received")
        ),
        2
    );
    assert_eq!(
        b.ingest.sampler().traces_held(),
        1,
        "B holds the moved trace"
    );
    b.send(vec![span(errors, 2, Some(1)), span(sampled, 2, Some(1))]);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let late = b.drain();
    let mut late_ids: Vec<(u128, u64)> = late.iter().map(|s| (s.trace, s.span)).collect();
    late_ids.sort_unstable();
    let mut want = vec![(errors, 2), (sampled, 2)];
    want.sort_unstable();
    assert_eq!(late_ids, want, "late spans follow the decisions made on A");
    let sampled_state = late
        .iter()
        .find(|s| s.trace == sampled)
        .map(|s| s.trace_state.clone())
        .unwrap();
    assert!(
        read_ot(&sampled_state).th.is_some(),
        "the probabilistic keep's threshold: {sampled_state:?}"
    );
    assert_eq!(
        b.counter("tailgate_sampler_late_after_move_spans_total", ("", "")),
        2
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        b.drain().is_empty(),
        "the moved trace, without an error and below the threshold, is not kept"
    );
    assert_eq!(
        b.ingest.sampler().traces_held(),
        0,
        "B decided the moved trace"
    );
}

/// Scenario: a late span of a kept trace reaches replica B before the keep decision the
/// old owner hands over after the change (B started a trace from it); then the decision
/// record arrives as a hand-off; then another late span.
/// Guarantees: the record makes the held trace due at once (well before decision_wait)
/// and it is kept as the old owner decided, though B's own policies would drop it (no
/// error, randomness below the threshold); both late spans leave B, counted as late after
/// move.
#[tokio::test(start_paused = true)]
async fn a_keep_decision_arriving_after_late_spans_keeps_them() {
    let mut b = Replica::start(quick());
    let trace = trace_with_randomness(7, DROPPED_AT_10);
    b.send(vec![span(trace, 5, Some(1))]);
    assert_eq!(b.ingest.sampler().traces_held(), 1);

    let mut writer = TraceRequestWriter::new();
    write_decision(
        &mut writer,
        &DecisionRecord {
            trace_id: id(trace),
            policy: "errors".to_owned(),
            threshold: ThresholdUpdate::Keep,
        },
    );
    b.arrive(&TraceBatch::from(writer.finish()), Arrival::HandOff);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let out: Vec<(u128, u64)> = b.drain().iter().map(|s| (s.trace, s.span)).collect();
    assert_eq!(out, vec![(trace, 5)], "kept at once, as decided elsewhere");
    b.send(vec![span(trace, 6, Some(1))]);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let out: Vec<(u128, u64)> = b.drain().iter().map(|s| (s.trace, s.span)).collect();
    assert_eq!(out, vec![(trace, 6)], "the next late span follows");
    assert_eq!(
        b.counter("tailgate_sampler_late_after_move_spans_total", ("", "")),
        2
    );
}

/// Scenario: the ring says a peer owns a trace this replica neither holds nor decided;
/// one of its spans is sent here (a peer routed it on an older ring), then one of a trace
/// this replica owns; then a hand-off of the peer's trace arrives.
/// Guarantees: the peer's span is forwarded at once, unchanged, and counted; this
/// replica's own span stays; the hand-off is kept here whoever the ring says owns it.
#[tokio::test(start_paused = true)]
async fn spans_of_a_peers_trace_are_forwarded_and_hand_offs_kept() {
    let a = Replica::start(quick());
    let theirs = trace_with_randomness(8, DROPPED_AT_10);
    let ours = trace_with_randomness(9, DROPPED_AT_10);
    a.ring(&[theirs]);
    tokio::time::sleep(Duration::from_millis(10)).await;
    a.send(vec![span(theirs, 2, Some(1)), span(ours, 2, Some(1))]);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let (records, spans) = split_records(&a.handed());
    assert!(records.is_empty());
    assert_eq!(spans, vec![(theirs, 2)]);
    assert_eq!(
        a.counter("tailgate_sampler_forwarded_spans_total", ("", "")),
        1
    );
    assert_eq!(a.ingest.sampler().traces_held(), 1, "its own trace stays");

    a.arrive(&request(&[span(theirs, 3, Some(1))]), Arrival::HandOff);
    assert_eq!(a.ingest.sampler().traces_held(), 2, "a hand-off is kept");
    assert_eq!(
        a.counter(
            "tailgate_sampler_handoff_spans_total",
            ("direction", "received")
        ),
        1
    );
}
