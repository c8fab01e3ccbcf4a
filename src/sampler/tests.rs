//! The sampler's timing, caches and invariants, with paused time and property tests.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use proptest::prelude::*;
use prost::Message;
use tokio::sync::mpsc;

use super::threshold::{Threshold, read_ot};
use super::*;
use crate::limiter::MemoryBudget;

mod hand_off;

/// The seed's policies: status_code ERROR, then probabilistic at `percent`.
fn seed_policies(percent: f64) -> PolicySet {
    let yaml = format!(
        "receivers: {{otlp: {{protocols: {{grpc: {{}}}}}}}}
processors:
  tail_sampling:
    policies:
      - {{name: errors, type: status_code, status_code: {{status_codes: [ERROR]}}}}
      - {{name: baseline, type: probabilistic, probabilistic: {{sampling_percentage: {percent}}}}}
exporters: {{debug: {{}}}}
service: {{pipelines: {{traces: {{receivers: [otlp], processors: [tail_sampling], exporters: [debug]}}}}}}
"
    );
    let config = crate::config::load_str(&[&yaml]).expect("valid sampler config");
    let Some(crate::config::ProcessorConfig::TailSampling(tail_sampling)) =
        config.processors.values().next()
    else {
        panic!("tail_sampling configured");
    };
    PolicySet::compile(tail_sampling).expect("policies compile")
}

fn settings() -> SamplerSettings {
    SamplerSettings {
        decision_wait: Duration::from_secs(30),
        decision_wait_after_root: None,
        num_traces: 50_000,
        sampled_cache_size: 1000,
        non_sampled_cache_size: 1000,
        maximum_trace_size_bytes: None,
        block_on_overflow: false,
        drop_pending_traces_on_shutdown: false,
        record_policy: false,
    }
}

/// A running sampler whose kept output arrives on the returned receiver.
struct Harness {
    ingest: Option<SamplerIngest>,
    output: mpsc::Receiver<TraceBatch>,
    task: tokio::task::JoinHandle<()>,
}

impl Harness {
    fn start(settings: SamplerSettings, percent: f64) -> Self {
        Self::start_with_budget(settings, percent, MemoryBudget::unlimited())
    }

    fn start_with_budget(
        settings: SamplerSettings,
        percent: f64,
        budget: Arc<MemoryBudget>,
    ) -> Self {
        Self::start_with_output(settings, percent, budget, 1024)
    }

    /// A sampler whose downstream holds `capacity` batches until the test reads them: with
    /// a small capacity and nothing read, downstream is blocked.
    fn start_with_output(
        settings: SamplerSettings,
        percent: f64,
        budget: Arc<MemoryBudget>,
        capacity: usize,
    ) -> Self {
        let policies = seed_policies(percent);
        let metrics = SamplerMetrics::unregistered(policies.names());
        let (ingest, closed) = TailSampler::start(settings, policies, metrics, budget, 4);
        let (tx, output) = mpsc::channel(capacity);
        let task = tokio::spawn(ingest.sampler().clone().run(closed, Downstream::stage(tx)));
        Self {
            ingest: Some(ingest),
            output,
            task,
        }
    }

    fn sampler(&self) -> &Arc<TailSampler> {
        self.ingest.as_ref().expect("running").sampler()
    }

    fn send(&self, spans: Vec<TestSpan>) {
        let ingest = self.ingest.as_ref().expect("running");
        ingest.check_room().expect("room");
        ingest.ingest(&request(&spans)).expect("valid request");
    }

    /// Sends `count` single-span root traces, 1 ms apart: trace `t` (from 0) is
    /// `trace_with_randomness(t + 1, t)`, its span 1.
    async fn send_traces_1ms_apart(&self, count: u64) {
        for t in 0..count {
            self.send(vec![span(trace_with_randomness(t + 1, t), 1, None)]);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// The rounds of decisions the decision task has run so far.
    fn rounds(&self) -> u64 {
        self.sampler()
            .metrics
            .decision_timer_latency
            .get_sample_count()
    }

    /// Every span that has come out so far.
    fn drain(&mut self) -> Vec<OutSpan> {
        let mut out = Vec::new();
        while let Ok(batch) = self.output.try_recv() {
            out.extend(decode(&batch));
        }
        out
    }

    /// Closes intake (shutdown) and returns everything that comes out.
    async fn close(mut self) -> Vec<OutSpan> {
        self.ingest = None;
        (&mut self.task).await.expect("decision task");
        self.drain()
    }
}

#[derive(Clone, Debug)]
struct TestSpan {
    trace: u128,
    span: u64,
    parent: Option<u64>,
    error: bool,
    service: &'static str,
    trace_state: String,
}

fn span(trace: u128, span: u64, parent: Option<u64>) -> TestSpan {
    TestSpan {
        trace,
        span,
        parent,
        error: false,
        service: "svc",
        trace_state: String::new(),
    }
}

#[derive(Clone, Debug, PartialEq)]
struct OutSpan {
    trace: u128,
    span: u64,
    service: String,
    scope_attributes: Vec<String>,
    trace_state: String,
}

fn request(spans: &[TestSpan]) -> TraceBatch {
    let mut by_service: BTreeMap<&str, Vec<Span>> = BTreeMap::new();
    for s in spans {
        by_service.entry(s.service).or_default().push(Span {
            trace_id: s.trace.to_be_bytes().to_vec(),
            span_id: s.span.to_be_bytes().to_vec(),
            parent_span_id: s
                .parent
                .map(|p| p.to_be_bytes().to_vec())
                .unwrap_or_default(),
            trace_state: s.trace_state.clone(),
            name: format!("op-{}", s.span),
            status: s.error.then(|| Status {
                code: 2,
                message: "boom".into(),
            }),
            ..Default::default()
        });
    }
    let request = ExportTraceServiceRequest {
        resource_spans: by_service
            .into_iter()
            .map(|(service, spans)| ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![opentelemetry_proto::tonic::common::v1::KeyValue {
                        key: "service.name".into(),
                        key_strindex: 0,
                        value: Some(opentelemetry_proto::tonic::common::v1::AnyValue {
                            value: Some(
                                opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(
                                    service.into(),
                                ),
                            ),
                        }),
                    }],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "lib".into(),
                        ..Default::default()
                    }),
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
    };
    let count = spans.len();
    TraceBatch::new(Bytes::from(request.encode_to_vec()), count)
}

fn decode(batch: &TraceBatch) -> Vec<OutSpan> {
    let request = ExportTraceServiceRequest::decode(batch.request.clone()).expect("valid output");
    let mut out = Vec::new();
    for rs in request.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s) => {
                    Some(s.clone())
                }
                _ => None,
            })
            .unwrap_or_default();
        for ss in rs.scope_spans {
            let scope_attributes = ss
                .scope
                .iter()
                .flat_map(|s| &s.attributes)
                .map(|kv| format!("{}={:?}", kv.key, kv.value))
                .collect::<Vec<_>>();
            for s in ss.spans {
                out.push(OutSpan {
                    trace: u128::from_be_bytes(s.trace_id.try_into().expect("16 bytes")),
                    span: u64::from_be_bytes(s.span_id.try_into().expect("8 bytes")),
                    service: service.clone(),
                    scope_attributes: scope_attributes.clone(),
                    trace_state: s.trace_state,
                });
            }
        }
    }
    out
}

/// A trace id whose randomness (low 56 bits) is `r`: kept at probability p iff
/// r >= (1 - p) * 2^56.
fn trace_with_randomness(high: u64, r: u64) -> u128 {
    (u128::from(high) << 64) | u128::from(r & ((1 << 56) - 1))
}

const KEPT_AT_10: u64 = (1 << 56) - 1; // the highest randomness: kept at any probability
const DROPPED_AT_10: u64 = 1; // the lowest: dropped below 100%

/// Scenario: a trace's spans arrive over 10s; decision_wait is 30s.
/// Guarantees: nothing leaves before 30s after the first span; the whole trace leaves
/// right after.
#[tokio::test(start_paused = true)]
async fn decides_decision_wait_after_first_span() {
    let mut h = Harness::start(settings(), 10.0);
    let trace = trace_with_randomness(1, KEPT_AT_10);
    h.send(vec![span(trace, 1, None)]);
    tokio::time::sleep(Duration::from_secs(10)).await;
    h.send(vec![span(trace, 2, Some(1)), span(trace, 3, Some(1))]);
    tokio::time::sleep(Duration::from_millis(19_900)).await;
    assert!(h.drain().is_empty(), "nothing before decision_wait");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let out = h.drain();
    assert_eq!(out.len(), 3, "the whole trace leaves together");
    assert_eq!(h.sampler().traces_held(), 0);
    assert_eq!(h.sampler().bytes_held(), 0);
}

/// Scenario: decision_wait 30s with decision_wait_after_root_received 2s; children
/// arrive first, the root 5s later.
/// Guarantees: the trace is decided 2s after the root, not 30s after the first span.
#[tokio::test(start_paused = true)]
async fn decides_soon_after_the_root() {
    let mut config = settings();
    config.decision_wait_after_root = Some(Duration::from_secs(2));
    let mut h = Harness::start(config, 10.0);
    let trace = trace_with_randomness(2, KEPT_AT_10);
    h.send(vec![span(trace, 2, Some(1))]);
    tokio::time::sleep(Duration::from_secs(5)).await;
    h.send(vec![span(trace, 1, None)]);
    tokio::time::sleep(Duration::from_millis(1_900)).await;
    assert!(h.drain().is_empty(), "not before root + wait");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(h.drain().len(), 2);
}

/// Scenario: num_traces is 10 and 25 traces arrive at once (nothing due yet).
/// Guarantees: the oldest 15 are decided early (counted), the buffer settles back to 10
/// traces, and no trace is lost undecided.
#[tokio::test(start_paused = true)]
async fn decides_oldest_early_over_num_traces() {
    let mut config = settings();
    config.num_traces = 10;
    let mut h = Harness::start(config, 100.0);
    h.send_traces_1ms_apart(25).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let early: HashSet<u128> = h.drain().iter().map(|s| s.trace).collect();
    assert_eq!(h.sampler().traces_held(), 10);
    assert_eq!(early.len(), 15, "the excess is decided early");
    for t in 0..15u64 {
        assert!(
            early.contains(&trace_with_randomness(t + 1, t)),
            "oldest first"
        );
    }
    let rest = h.close().await;
    assert_eq!(
        rest.len(),
        10,
        "the rest are decided at shutdown, none lost"
    );
}

/// Scenario: num_traces is 128 (a low-water mark of 126) and 129 traces arrive 1 ms
/// apart, then one more (nothing due yet).
/// Guarantees: going over num_traces decides the oldest down to the low-water mark, not
/// just the excess, so the next new trace fits without another round of decisions.
#[tokio::test(start_paused = true)]
async fn decides_down_to_the_low_water_mark_over_num_traces() {
    let mut config = settings();
    config.num_traces = 128;
    let mut h = Harness::start(config, 100.0);
    h.send_traces_1ms_apart(129).await;
    let early: HashSet<u128> = h.drain().iter().map(|s| s.trace).collect();
    let oldest: HashSet<u128> = (0..3u64).map(|t| trace_with_randomness(t + 1, t)).collect();
    assert_eq!(early, oldest, "the three oldest are decided");
    assert_eq!(h.sampler().traces_held(), 126);
    let rounds = h.rounds();
    h.send(vec![span(trace_with_randomness(500, 1), 1, None)]);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(
        h.drain().is_empty(),
        "under num_traces nothing is decided early"
    );
    assert_eq!(h.sampler().traces_held(), 127);
    assert_eq!(h.rounds(), rounds, "and the decision task was not woken");
    assert_eq!(h.close().await.len(), 127, "none is lost");
}

/// Scenario: decision_wait 10 s, decision_wait_after_root_received 2 s. A root span makes
/// a first trace due in 2 s; 20 more traces arrive with their root spans from 10 to 30 ms
/// later (each due later than the first); then a trace grows past
/// maximum_trace_size_bytes.
/// Guarantees: the root spans, due after the deadline the decision task sleeps towards,
/// do not wake it (no round of decisions); the oversized trace, due at once, does; every
/// trace is still decided when due.
#[tokio::test(start_paused = true)]
async fn wakes_the_decision_task_only_for_an_earlier_deadline() {
    let mut config = settings();
    config.decision_wait = Duration::from_secs(10);
    config.decision_wait_after_root = Some(Duration::from_secs(2));
    config.maximum_trace_size_bytes = Some(2_000);
    let mut h = Harness::start(config, 100.0);
    h.send(vec![span(trace_with_randomness(1, 1), 1, None)]);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let before = h.rounds();
    for t in 0..20u64 {
        h.send(vec![span(trace_with_randomness(t + 2, t), 1, None)]);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        h.rounds(),
        before,
        "later deadlines do not wake the decision task"
    );
    let big = trace_with_randomness(100, 1);
    h.send((1..=100).map(|i| span(big, i, Some(1000))).collect());
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(h.rounds() > before, "a trace due at once wakes it");
    assert_eq!(h.drain().len(), 100, "and is decided at once");
    // 31 ms in: the first trace is due at 2 s, the others from 2.010 to 2.029 s.
    tokio::time::sleep(Duration::from_millis(1_974)).await;
    assert_eq!(h.drain().len(), 1, "the first trace is decided when due");
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(h.drain().len(), 20, "and so are the others");
    assert_eq!(h.sampler().traces_held(), 0);
}

/// Scenario: decision_wait is 100 ms and the buffer is empty, so the decision task
/// sleeps its idle second; a trace without a root span arrives.
/// Guarantees: the new trace's deadline wakes the task to plan for it: the trace is
/// decided 100 ms after it arrived, not at the end of the idle second.
#[tokio::test(start_paused = true)]
async fn a_new_trace_due_before_the_idle_tick_is_decided_on_time() {
    let mut config = settings();
    config.decision_wait = Duration::from_millis(100);
    let mut h = Harness::start(config, 100.0);
    tokio::time::sleep(Duration::from_millis(10)).await;
    h.send(vec![span(trace_with_randomness(1, 1), 2, Some(1))]);
    tokio::time::sleep(Duration::from_millis(99)).await;
    assert!(h.drain().is_empty(), "not before decision_wait");
    tokio::time::sleep(Duration::from_millis(2)).await;
    assert_eq!(h.drain().len(), 1, "decided when due");
}

/// Scenario: decision_wait is 100 ms and 20 traces arrive 1 ms apart, so one falls due
/// every millisecond from 100 ms on.
/// Guarantees: rounds of decisions start at least ROUND_SPACING apart (a few rounds for
/// the 20 deadlines, not one per millisecond), no trace leaves before its deadline, and
/// each leaves within ROUND_SPACING (plus the timer's millisecond) after it.
#[tokio::test(start_paused = true)]
async fn deadlines_one_millisecond_apart_are_decided_in_spaced_rounds() {
    let mut config = settings();
    config.decision_wait = Duration::from_millis(100);
    let mut h = Harness::start(config, 100.0);
    let start = Instant::now();
    h.send_traces_1ms_apart(20).await;
    tokio::time::sleep_until(start + Duration::from_millis(99)).await;
    assert!(h.drain().is_empty());
    let rounds_before = h.rounds();
    for now_ms in 100..=130u64 {
        tokio::time::sleep_until(start + Duration::from_millis(now_ms)).await;
        for out in h.drain() {
            let due_ms = u64::try_from(out.trace >> 64).expect("small") - 1 + 100;
            assert!(
                now_ms >= due_ms,
                "trace due at {due_ms} ms left at {now_ms} ms"
            );
            let late = Duration::from_millis(now_ms - due_ms);
            assert!(
                late <= ROUND_SPACING + Duration::from_millis(1),
                "trace due at {due_ms} ms left at {now_ms} ms"
            );
        }
    }
    assert_eq!(h.sampler().traces_held(), 0);
    let rounds = h.rounds() - rounds_before;
    let most = 30 / ROUND_SPACING.as_millis() as u64 + 1;
    assert!(
        rounds <= most,
        "{rounds} rounds for 20 deadlines, at most {most}"
    );
}

/// Scenario: 40 traces held across the shards, first seen 1 ms apart, a third of them
/// moved earlier by their root span (leaving a stale deadline entry behind).
/// Guarantees: `nth_deadline(n)` is the n-th of every held trace's deadline sorted, the
/// latest when fewer than n are held, and none when nothing is.
#[tokio::test(start_paused = true)]
async fn nth_deadline_is_the_nth_of_all_shards_deadlines() {
    let mut config = settings();
    config.decision_wait_after_root = Some(Duration::from_millis(500));
    let h = Harness::start(config, 100.0);
    assert_eq!(h.sampler().nth_deadline(1), None);
    for t in 0..40u64 {
        let trace = trace_with_randomness(t + 1, t);
        h.send(vec![span(trace, 2, Some(1))]);
        if t % 3 == 0 {
            h.send(vec![span(trace, 1, None)]);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let sampler = h.sampler();
    let mut deadlines: Vec<_> = (0..sampler.shards.len())
        .flat_map(|shard| {
            let shard = sampler.lock(shard);
            shard
                .traces
                .values()
                .map(|trace| trace.deadline)
                .collect::<Vec<_>>()
        })
        .collect();
    deadlines.sort();
    assert_eq!(deadlines.len(), 40);
    for n in 1..=40 {
        assert_eq!(sampler.nth_deadline(n), Some(deadlines[n - 1]), "n = {n}");
    }
    assert_eq!(sampler.nth_deadline(41), deadlines.last().copied());
}

/// Scenario: num_traces is 3 with block_on_overflow, and 5 traces arrive in one request.
/// Guarantees: nothing is decided early; further intake is refused retryably until the
/// traces are decided at their deadline, then admitted again.
#[tokio::test(start_paused = true)]
async fn block_on_overflow_refuses_instead_of_deciding_early() {
    let mut config = settings();
    config.num_traces = 3;
    config.block_on_overflow = true;
    let mut h = Harness::start(config, 100.0);
    let spans: Vec<TestSpan> = (0..5u64)
        .map(|t| span(trace_with_randomness(t + 1, t), 1, None))
        .collect();
    h.send(spans);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(h.drain().is_empty(), "nothing decided early");
    let ingest = h.ingest.as_ref().expect("running");
    let refused = ingest.check_room().expect_err("full");
    assert!(refused.is_retryable());
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(h.drain().len(), 5, "decided at the deadline");
    assert!(
        h.ingest.as_ref().expect("running").check_room().is_ok(),
        "room again"
    );
}

/// Scenario: a memory budget with a soft limit of 64 KiB, and 300 traces of ~600 bytes each
/// arriving 10ms apart, none due for 30s.
/// Guarantees: the sampler decides its oldest traces early (counted as memory pressure)
/// so the budget settles under its soft limit; the newest traces are still held; no trace
/// is lost: every one is decided by shutdown.
#[tokio::test(start_paused = true)]
async fn decides_oldest_early_under_memory_pressure() {
    let budget = MemoryBudget::new(128 << 10, 64 << 10);
    let mut h = Harness::start_with_budget(settings(), 100.0, budget.clone());
    let mut early = Vec::new();
    for t in 0..300u64 {
        let trace = trace_with_randomness(t + 1, t);
        let spans: Vec<TestSpan> = (0..4)
            .map(|i| span(trace, i + 1, (i > 0).then_some(1)))
            .collect();
        h.send(spans);
        tokio::time::sleep(Duration::from_millis(10)).await;
        early.extend(h.drain());
        // At most one trace's worth over the soft limit, between a send and the decisions
        // it triggers.
        assert!(
            budget.used() <= (64 << 10) + 2048,
            "budget held near its soft limit: {}",
            budget.used()
        );
    }
    assert!(budget.used() <= 64 << 10, "settled under the soft limit");
    let early_traces: HashSet<u128> = early.iter().map(|s| s.trace).collect();
    assert!(
        early_traces.len() > 150,
        "most traces were decided early: {}",
        early_traces.len()
    );
    assert!(
        early_traces.contains(&trace_with_randomness(1, 0)),
        "the oldest first"
    );
    assert!(
        !early_traces.contains(&trace_with_randomness(300, 299)),
        "the newest still held"
    );
    assert_eq!(
        early.len(),
        early_traces.len() * 4,
        "early traces leave whole"
    );
    let held = h.sampler().traces_held();
    assert!(held > 0);
    let rest = h.close().await;
    assert_eq!(
        early.len() + rest.len(),
        300 * 4,
        "every trace decided, none lost"
    );
}

/// Scenario: a trace is kept and another is not; a late span of each arrives after the
/// decision.
/// Guarantees: the kept trace's late span passes on at once with the trace's threshold;
/// the other's is dropped; both are counted as cache releases.
#[tokio::test(start_paused = true)]
async fn late_spans_follow_cached_decisions() {
    let mut h = Harness::start(settings(), 10.0);
    let kept = trace_with_randomness(3, KEPT_AT_10);
    let dropped = trace_with_randomness(4, DROPPED_AT_10);
    h.send(vec![span(kept, 1, None), span(dropped, 1, None)]);
    tokio::time::sleep(Duration::from_secs(31)).await;
    let first = h.drain();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].trace, kept);
    let th = first[0].trace_state.clone();
    assert!(th.starts_with("ot=th:"), "{th}");

    tokio::time::sleep(Duration::from_secs(5)).await;
    h.send(vec![span(kept, 2, Some(1)), span(dropped, 2, Some(1))]);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let late = h.drain();
    assert_eq!(late.len(), 1, "only the kept trace's late span passes");
    assert_eq!(late[0].trace, kept);
    assert_eq!(late[0].span, 2);
    assert_eq!(
        late[0].trace_state, th,
        "late span carries the trace's threshold"
    );
    assert_eq!(
        h.sampler().traces_held(),
        0,
        "late spans are not buffered again"
    );
}

/// Spans `first..first + count` of trace `trace`, children of its span 1.
fn children(trace: u128, first: u64, count: u64) -> Vec<TestSpan> {
    (first..first + count)
        .map(|id| span(trace, id, Some(1)))
        .collect()
}

/// The encoded bytes of the spans in `batch`, wrappers not counted.
fn span_bytes(batch: &TraceBatch) -> usize {
    crate::otlp::parse_traces_request(&batch.request)
        .expect("valid request")
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .map(|s| s.bytes.len())
        .sum()
}

/// Scenario: two requests, each with spans of several traces under two services, the
/// second adding spans to traces of the first; then every trace is decided (all kept,
/// and downstream drops what it receives) and intake closes.
/// Guarantees: while the traces are held, what the sampler charges (and what the budget
/// holds) covers at least the spans' bytes plus each trace and its origins; once the
/// traces have left, nothing stays charged: the origins shared between traces are
/// released with the last trace that held them.
#[tokio::test(start_paused = true)]
async fn charges_cover_what_is_held_and_are_all_released() {
    let budget = MemoryBudget::unlimited();
    let mut h = Harness::start_with_budget(settings(), 100.0, budget.clone());
    let mut first: Vec<TestSpan> = (1..=6u128).map(|trace| span(trace, 1, None)).collect();
    for span in first.iter_mut().skip(3) {
        span.service = "other";
    }
    let second: Vec<TestSpan> = (1..=6u128)
        .flat_map(|trace| children(trace, 2, 3))
        .collect();
    let mut encoded = 0;
    for spans in [first, second] {
        encoded += span_bytes(&request(&spans));
        h.send(spans);
    }
    let held = h.sampler().bytes_held();
    let floor = encoded + 6 * std::mem::size_of::<PendingTrace>();
    assert!(held >= floor, "charged {held} < held {floor}");
    assert_eq!(
        budget.used(),
        held,
        "the budget holds what the sampler charges"
    );
    tokio::time::sleep(Duration::from_secs(31)).await;
    assert_eq!(h.drain().len(), 24);
    assert_eq!(h.sampler().bytes_held(), 0);
    assert!(h.close().await.is_empty());
    assert_eq!(budget.used(), 0, "nothing stays charged");
}

/// Reads `expected` spans from a sampler's output, dropping each batch once read (which
/// releases its charge); fails if they do not come within a (paused-time) minute.
async fn receive_spans(
    output: &mut mpsc::Receiver<TraceBatch>,
    expected: usize,
) -> (Vec<OutSpan>, usize) {
    let mut spans = Vec::new();
    let mut batches = 0;
    while spans.len() < expected {
        let batch = tokio::time::timeout(Duration::from_secs(60), output.recv())
            .await
            .expect("every accepted span is passed on")
            .expect("output open");
        spans.extend(decode(&batch));
        batches += 1;
    }
    (spans, batches)
}

/// Scenario: a kept trace's batch fills downstream's one slot and nobody reads it (a
/// blocked exporter); requests of 50 late spans of that trace keep arriving, the memory
/// budget's soft limit being 32 KiB; then downstream frees up.
/// Guarantees: each request's late spans are copied out of it (the request buffer is not
/// retained) and charged to the budget by exactly the copy's size, which covers at least
/// their bytes; `spans_held` counts them; intake is admitted while the budget is below its
/// soft limit and refused retryably (Overloaded) once it is at it, instead of the outbox
/// growing; once downstream reads, every accepted late span leaves exactly once (the queued
/// requests joined), nothing stays held and the budget returns to zero.
#[tokio::test(start_paused = true)]
async fn late_spans_are_charged_bounded_and_all_delivered() {
    const SOFT: usize = 32 << 10;
    let budget = MemoryBudget::new(4 * SOFT, SOFT);
    let mut h = Harness::start_with_output(settings(), 100.0, budget.clone(), 1);
    let trace = trace_with_randomness(10, KEPT_AT_10);
    h.send(vec![span(trace, 1, None)]);
    tokio::time::sleep(Duration::from_secs(31)).await;
    assert_eq!(h.sampler().traces_held(), 0, "decided");
    assert!(
        budget.used() > 0,
        "the decided batch is charged while downstream holds it"
    );

    let ingest = h.ingest.clone().expect("running");
    let mut accepted = Vec::new();
    let mut requests = 0;
    let mut refusal = None;
    for round in 0..200u64 {
        let used = budget.used();
        if let Err(error) = ingest.check_room() {
            refusal = Some((error, used));
            break;
        }
        assert!(used < SOFT, "admitted below the soft limit only: {used}");
        let first = 2 + round * 50;
        let batch = request(&children(trace, first, 50));
        let late_bytes = h.sampler().late_bytes_held();
        ingest.ingest(&batch).expect("valid request");
        // The decision task takes the first late request and waits for room with it.
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(
            batch.request.is_unique(),
            "nothing held points into the request buffer"
        );
        let charged = budget.used() - used;
        assert!(
            charged >= span_bytes(&batch),
            "the late spans' bytes are charged: {charged}"
        );
        assert_eq!(
            charged,
            h.sampler().late_bytes_held() - late_bytes,
            "the charge is the size of the copy held"
        );
        accepted.extend(first..first + 50);
        requests += 1;
        assert_eq!(h.sampler().late_spans_held(), accepted.len());
        assert_eq!(h.sampler().spans_held(), accepted.len());
        assert_eq!(
            h.sampler().traces_held(),
            0,
            "late spans are not buffered again"
        );
    }
    let (error, used) = refusal.expect("intake refused before 200 requests");
    assert!(
        matches!(error, PipelineError::Overloaded { .. }) && error.is_retryable(),
        "{error}"
    );
    assert!(used >= SOFT, "refused at the soft limit: {used}");
    assert!(
        used < SOFT + 4096,
        "the outbox passes its bound by at most one request: {used}"
    );
    assert!(ingest.check_room().is_err(), "still refused while blocked");
    assert!(
        accepted.len() >= 500,
        "the budget held {} late spans",
        accepted.len()
    );

    let (out, batches) = receive_spans(&mut h.output, 1 + accepted.len()).await;
    tokio::time::sleep(Duration::from_millis(1)).await;
    let mut ids: Vec<u64> = out.iter().map(|s| s.span).collect();
    ids.sort_unstable();
    let mut want = accepted.clone();
    want.push(1);
    want.sort_unstable();
    assert_eq!(ids, want, "every accepted span left, once");
    assert!(out.iter().all(|s| s.trace == trace));
    assert!(
        batches < requests,
        "queued late requests left joined: {batches}"
    );
    assert_eq!(h.sampler().late_spans_held(), 0);
    assert_eq!(h.sampler().late_bytes_held(), 0);
    assert_eq!(h.sampler().spans_held(), 0);
    assert_eq!(budget.used(), 0, "every charge was released");
    assert!(ingest.check_room().is_ok(), "room again");
}

/// Scenario: without a memory limit, num_traces is 30, downstream is blocked, and late
/// spans of a kept trace arrive 20 per request.
/// Guarantees: the outbox is bounded in count instead: intake is refused retryably once 30
/// late spans wait, and admitted again after they have left.
#[tokio::test(start_paused = true)]
async fn late_spans_are_bounded_without_a_memory_limit() {
    let mut config = settings();
    config.num_traces = 30;
    let mut h = Harness::start_with_output(config, 100.0, MemoryBudget::unlimited(), 1);
    let trace = trace_with_randomness(11, KEPT_AT_10);
    h.send(vec![span(trace, 1, None)]);
    tokio::time::sleep(Duration::from_secs(31)).await;
    h.send(children(trace, 2, 20));
    h.send(children(trace, 22, 20));
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(h.sampler().late_spans_held(), 40);
    let ingest = h.ingest.clone().expect("running");
    let refused = ingest.check_room().expect_err("30 late spans wait");
    assert!(refused.is_retryable());
    let (out, _) = receive_spans(&mut h.output, 41).await;
    assert_eq!(out.len(), 41);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(h.sampler().late_spans_held(), 0);
    assert!(ingest.check_room().is_ok());
}

/// Scenario: with drop_pending_traces_on_shutdown, intake closes while 20 late spans of a
/// kept trace wait behind a blocked downstream and one new trace is pending.
/// Guarantees: `spans_held` counts the late spans until they leave; at shutdown they are
/// sent on (they belong to a kept trace), the pending trace is dropped, and nothing stays
/// held.
#[tokio::test(start_paused = true)]
async fn shutdown_sends_the_late_spans_held() {
    let mut config = settings();
    config.drop_pending_traces_on_shutdown = true;
    let mut h = Harness::start_with_output(config, 100.0, MemoryBudget::unlimited(), 1);
    let kept = trace_with_randomness(12, KEPT_AT_10);
    let pending = trace_with_randomness(13, KEPT_AT_10);
    h.send(vec![span(kept, 1, None)]);
    tokio::time::sleep(Duration::from_secs(31)).await;
    let mut spans = children(kept, 2, 20);
    spans.push(span(pending, 1, None));
    h.send(spans);
    tokio::time::sleep(Duration::from_millis(1)).await;
    let sampler = h.sampler().clone();
    assert_eq!(sampler.late_spans_held(), 20);
    assert_eq!(sampler.spans_held(), 21, "late and pending spans are held");

    h.ingest = None;
    let mut out = Vec::new();
    while let Some(batch) = tokio::time::timeout(Duration::from_secs(60), h.output.recv())
        .await
        .expect("the decision task ends")
    {
        out.extend(decode(&batch));
    }
    (&mut h.task).await.expect("decision task");
    assert_eq!(out.len(), 21, "the decided trace and its 20 late spans");
    assert!(out.iter().all(|s| s.trace == kept));
    assert_eq!(sampler.spans_held(), 0);
    assert_eq!(sampler.late_spans_held(), 0);
}

/// Scenario: a trace grows past maximum_trace_size_bytes while others wait.
/// Guarantees: it is decided at once on what has arrived; the other traces keep their
/// deadlines; later spans of the big trace follow its decision instead of piling up.
#[tokio::test(start_paused = true)]
async fn decides_oversized_trace_at_once() {
    let mut config = settings();
    config.maximum_trace_size_bytes = Some(2_000);
    let mut h = Harness::start(config, 100.0);
    let big = trace_with_randomness(5, 7);
    let small = trace_with_randomness(6, 8);
    h.send(vec![span(small, 1, None)]);
    let spans: Vec<TestSpan> = (1..=100).map(|i| span(big, i, Some(1000))).collect();
    h.send(spans);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let out = h.drain();
    assert_eq!(out.len(), 100, "the big trace leaves at once");
    assert!(out.iter().all(|s| s.trace == big));
    h.send(vec![span(big, 101, Some(1000))]);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(h.drain().len(), 1, "its late span follows the decision");
    assert_eq!(h.sampler().traces_held(), 1, "the small trace still waits");
}

/// Scenario: intake closes (shutdown) with traces pending, with and without
/// drop_pending_traces_on_shutdown.
/// Guarantees: by default every pending trace is decided and the kept ones leave; with
/// the flag nothing leaves and the buffer is empty.
#[tokio::test(start_paused = true)]
async fn shutdown_decides_or_drops_pending() {
    let h = Harness::start(settings(), 100.0);
    h.send(vec![span(trace_with_randomness(7, 1), 1, None)]);
    assert_eq!(h.close().await.len(), 1);

    let mut config = settings();
    config.drop_pending_traces_on_shutdown = true;
    let h = Harness::start(config, 100.0);
    h.send(vec![span(trace_with_randomness(8, 1), 1, None)]);
    let sampler = h.sampler().clone();
    assert!(h.close().await.is_empty());
    assert_eq!(sampler.traces_held(), 0);
}

/// Scenario: record_policy is on.
/// Guarantees: kept spans' scopes name the deciding policy.
#[tokio::test(start_paused = true)]
async fn records_the_deciding_policy() {
    let mut config = settings();
    config.record_policy = true;
    let mut h = Harness::start(config, 0.0);
    let mut failing = span(trace_with_randomness(9, 1), 1, None);
    failing.error = true;
    h.send(vec![failing]);
    tokio::time::sleep(Duration::from_secs(31)).await;
    let out = h.drain();
    assert_eq!(out.len(), 1);
    assert!(
        out[0]
            .scope_attributes
            .iter()
            .any(|a| a.contains(POLICY_ATTRIBUTE) && a.contains("errors")),
        "{:?}",
        out[0].scope_attributes
    );
}

/// A random trace: its spans, split into several requests, in random order.
#[derive(Clone, Debug)]
struct GenTrace {
    id: u128,
    spans: Vec<TestSpan>,
}

/// A span id unique within its trace and never zero.
fn span_id(trace: u128, index: usize) -> u64 {
    ((index as u64 + 1) << 48) | (trace as u64 & 0xffff_ffff_ffff)
}

fn gen_trace() -> impl Strategy<Value = GenTrace> {
    (
        any::<u128>(),
        1usize..8,
        prop::collection::vec(any::<bool>(), 8),
        0u8..4,
        any::<bool>(),
    )
        .prop_map(|(id, count, errors, head, with_th)| {
            let id = id | 1; // never the invalid all-zero id
            let head_th = if with_th {
                // An upstream head sampler's threshold: 50% (th:8) or 100% (th:0).
                if head % 2 == 0 { "ot=th:8" } else { "ot=th:0" }
            } else {
                ""
            };
            let spans = (0..count)
                .map(|i| TestSpan {
                    trace: id,
                    span: span_id(id, i),
                    parent: (i > 0).then(|| span_id(id, 0)),
                    error: errors[i] && (head == 0),
                    service: if i % 2 == 0 { "front" } else { "back" },
                    trace_state: head_th.to_owned(),
                })
                .collect();
            GenTrace { id, spans }
        })
}

/// Runs `traces` through a fresh sampler at `percent`, the spans shuffled with `seed`
/// and cut into requests of `chunk` spans, and returns what left, by trace.
async fn run_sampler(
    traces: &[GenTrace],
    seed: u64,
    chunk: usize,
    percent: f64,
) -> HashMap<u128, Vec<OutSpan>> {
    let mut config = settings();
    config.decision_wait = Duration::from_secs(5);
    let h = Harness::start(config, percent);
    let mut shuffled: Vec<TestSpan> = traces.iter().flat_map(|t| t.spans.clone()).collect();
    let mut state = seed;
    for i in (1..shuffled.len()).rev() {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        shuffled.swap(i, (state >> 33) as usize % (i + 1));
    }
    for request in shuffled.chunks(chunk.max(1)) {
        h.send(request.to_vec());
    }
    let out = h.close().await;
    let mut by_trace: HashMap<u128, Vec<OutSpan>> = HashMap::new();
    for s in out {
        by_trace.entry(s.trace).or_default().push(s);
    }
    by_trace
}

fn randomness(trace: u128) -> u64 {
    (trace as u64) & ((1 << 56) - 1)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Scenario: random traces (some with ERROR spans, some head-sampled upstream) split
    /// at random across requests and arriving in random order, sampled at 10%.
    /// Guarantees: (a) each trace leaves whole or not at all; (b) every trace with an
    /// error leaves; (c) a second sampler instance decides every trace the same way;
    /// (e) every span kept by the probabilistic policy carries a `th` that decodes to at
    /// most the configured probability with R >= T, and error traces keep the `th` they
    /// came with.
    #[test]
    fn kept_traces_leave_whole_and_consistently(
        traces in prop::collection::vec(gen_trace(), 1..40),
        seed in any::<u64>(),
        chunk in 1usize..20,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime");
        let (first, second) = runtime.block_on(async {
            let first = run_sampler(&traces, seed, chunk, 10.0).await;
            let second = run_sampler(&traces, seed ^ 0x5555, chunk + 3, 10.0).await;
            (first, second)
        });
        let configured = Threshold::from_probability(0.10).expect("valid probability");
        for trace in &traces {
            let out = first.get(&trace.id);
            let has_error = trace.spans.iter().any(|s| s.error);
            // (a) whole or nothing
            if let Some(out) = out {
                let mut ids: Vec<u64> = out.iter().map(|s| s.span).collect();
                ids.sort_unstable();
                let mut want: Vec<u64> = trace.spans.iter().map(|s| s.span).collect();
                want.sort_unstable();
                prop_assert_eq!(ids, want);
            }
            // (b) errors kept
            if has_error {
                prop_assert!(out.is_some(), "error trace {:x} dropped", trace.id);
            }
            // (c) same decision on a second instance, with other request cuts and order
            prop_assert_eq!(out.is_some(), second.contains_key(&trace.id));
            // (e) thresholds
            if let Some(out) = out {
                let r = randomness(trace.id);
                for s in out {
                    let th = read_ot(&s.trace_state).th;
                    if has_error {
                        prop_assert_eq!(s.trace_state.as_str(), trace.spans[0].trace_state.as_str());
                    } else {
                        let th = th.expect("probabilistic keep writes th");
                        prop_assert!(th >= configured, "threshold only rises");
                        prop_assert!(r >= th.raw(), "R >= T for kept spans");
                    }
                }
            } else if !has_error {
                prop_assert!(randomness(trace.id) < configured.raw(), "dropped only when R < T");
            }
        }
    }
}

/// Scenario: 100,000 single-span traces with random ids, sampled at 10%.
/// Guarantees: the kept share lies within a 99.9% binomial band around 10%
/// (±3.29 standard deviations).
#[tokio::test(start_paused = true)]
async fn probabilistic_share_is_within_binomial_band() {
    let mut config = settings();
    config.decision_wait = Duration::from_secs(1);
    config.num_traces = 200_000;
    let h = Harness::start(config, 10.0);
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        // splitmix64: deterministic, well-spread ids
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    const TRACES: usize = 100_000;
    for chunk in 0..(TRACES / 1000) {
        let spans: Vec<TestSpan> = (0..1000)
            .map(|i| {
                span(
                    (u128::from(next()) << 64) | u128::from(next()),
                    (chunk * 1000 + i) as u64 + 1,
                    None,
                )
            })
            .collect();
        h.send(spans);
    }
    let kept = h.close().await.len() as f64;
    let n = TRACES as f64;
    let p = 0.10;
    let sigma = (n * p * (1.0 - p)).sqrt();
    assert!(
        (kept - n * p).abs() <= 3.29 * sigma,
        "kept {kept} of {n}, expected {} ± {}",
        n * p,
        3.29 * sigma
    );
}

/// Scenario: the same requests reach two samplers, once as bytes (the sampler parses them)
/// and once as the views the receiver parsed while validating (one walk per request);
/// traces are interleaved within a request and one trace continues in a second request.
/// Guarantees: both buffer the same traces, spans and bytes, and keep the same spans,
/// each trace's in arrival order.
#[tokio::test(start_paused = true)]
async fn parsed_views_buffer_like_bytes() {
    let mut by_bytes = Harness::start(settings(), 100.0);
    let mut by_views = Harness::start(settings(), 100.0);
    let first: Vec<TestSpan> = (1..=3)
        .flat_map(|index| (1..=4u128).map(move |trace| span(trace, index, None)))
        .collect();
    let second = vec![span(2, 9, Some(1)), span(5, 1, None)];
    for spans in [first, second] {
        let batch = request(&spans);
        by_bytes.send(spans);
        let views = crate::otlp::parse_traces_request(&batch.request).expect("valid");
        let ingest = by_views.ingest.as_ref().expect("running");
        ingest.check_room().expect("room");
        ingest.ingest_parsed(&views);
    }
    let (a, b) = (by_bytes.sampler(), by_views.sampler());
    assert_eq!(a.traces_held(), 5);
    assert_eq!(a.spans_held(), 14);
    assert_eq!(
        (a.traces_held(), a.spans_held(), a.bytes_held()),
        (b.traces_held(), b.spans_held(), b.bytes_held())
    );
    tokio::time::sleep(Duration::from_secs(31)).await;
    // Traces leave in shard order, and each sampler hashes ids with its own key: compare
    // trace by trace (a stable sort keeps each trace's span order).
    let (mut out_a, mut out_b) = (by_bytes.drain(), by_views.drain());
    out_a.sort_by_key(|span| span.trace);
    out_b.sort_by_key(|span| span.trace);
    assert_eq!(out_a.len(), 14);
    assert_eq!(out_a, out_b);
}

proptest! {
    /// Scenario: the spans of a request, of traces whose ids differ in their first and
    /// last bytes, spread over shards, in arbitrary arrival order, in runs of one trace
    /// of one to three spans (a trace may have several runs).
    /// Guarantees: they are grouped exactly as a stable sort by `(shard, trace id bytes)`
    /// groups them: by shard, then by trace id, each trace's spans in arrival order.
    #[test]
    fn groups_spans_as_a_stable_sort_by_shard_and_trace_does(
        runs in prop::collection::vec(((0u8..4, 0u8..4), 1usize..4), 0..60),
    ) {
        let shards = 5;
        let arrivals: Vec<(u8, u8)> = runs
            .iter()
            .flat_map(|&(trace, len)| std::iter::repeat_n(trace, len))
            .collect();
        let views: Vec<crate::otlp::SpanView> = arrivals
            .iter()
            .enumerate()
            .map(|(index, &(high, low))| {
                let mut trace_id = [0u8; 16];
                trace_id[0] = high;
                trace_id[15] = low;
                crate::otlp::SpanView {
                    trace_id: TraceId(trace_id),
                    span_id: crate::otlp::SpanId((index as u64).to_be_bytes()),
                    ..Default::default()
                }
            })
            .collect();
        let incoming: Vec<Incoming<'_>> = views
            .iter()
            .enumerate()
            .map(|(index, span)| Incoming {
                shard: usize::from(span.trace_id.0[0] ^ span.trace_id.0[15]) % shards,
                resource: index,
                origin: index,
                span,
            })
            .collect();
        let mut expected = incoming.clone();
        expected.sort_by(|a, b| (a.shard, &a.span.trace_id.0).cmp(&(b.shard, &b.span.trace_id.0)));
        let got = group_by_shard_and_trace(&incoming, shards);
        let arrival_order = |spans: &[Incoming<'_>]| -> Vec<usize> {
            spans.iter().map(|span| span.resource).collect()
        };
        prop_assert_eq!(arrival_order(&got), arrival_order(&expected));
    }
}
