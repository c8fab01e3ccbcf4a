//! Export-core tests on paused time, with scripted in-memory transports: the retry
//! schedule (backoff, jitter bounds, RetryInfo and Retry-After hints, `max_elapsed_time`),
//! the sending queue (backpressure, in-order lanes that merge, drain at the deadline), inline
//! mode, and the counting of every item.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use prometheus::Registry;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tonic::Code;
use tonic_types::{ErrorDetails, StatusExt};

use super::deliver::{BatchDelivery, Deliver, Delivered};
use super::error::{DrainReport, ExportError};
use super::http::retry_after_header;
use super::inline::Inline;
use super::metrics::{ExporterMetricFamilies, FailureReason, RetryErrorType};
use super::outcome::{Accepted, AttemptError, Outcome, Settled};
use super::queue::MemoryQueue;
use super::retry;
use super::state::{DeadlineWatch, Shared};
use super::status;
use super::transport::Transport;
use crate::config::{ComponentId, RetryConfig};
use crate::payload::{Payload, TraceBatch};

// === helpers ===

fn id(written: &str) -> ComponentId {
    ComponentId {
        written: written.to_owned(),
        kind: written.to_owned(),
        name: None,
    }
}

/// A fresh registry and the state of exporter `otlp` for traces.
fn shared() -> (Registry, Arc<Shared>) {
    let registry = Registry::new();
    let families = ExporterMetricFamilies::register(&registry).unwrap();
    let metrics = families.for_exporter(&id("otlp"));
    (registry, Arc::new(Shared::new("otlp".to_owned(), metrics)))
}

fn value(registry: &Registry, name: &str, labels: &[(&str, &str)]) -> f64 {
    let Some(family) = registry.gather().into_iter().find(|mf| mf.name() == name) else {
        return 0.0;
    };
    family
        .get_metric()
        .iter()
        .filter(|m| {
            labels.iter().all(|(k, v)| {
                m.get_label()
                    .iter()
                    .any(|l| l.name() == *k && l.value() == *v)
            })
        })
        .map(|m| {
            if name.ends_with("_total") {
                m.get_counter().get_value()
            } else {
                m.get_gauge().get_value()
            }
        })
        .sum()
}

fn sent(registry: &Registry) -> f64 {
    value(registry, "otelcol_exporter_sent_spans_total", &[])
}

fn failed(registry: &Registry, reason: &str) -> f64 {
    value(
        registry,
        "otelcol_exporter_send_failed_spans_total",
        &[("reason", reason)],
    )
}

fn retries(registry: &Registry, error_type: &str) -> f64 {
    value(
        registry,
        "tailgate_exporter_retries_total",
        &[("error_type", error_type)],
    )
}

/// One `retry::deliver` of `request` through `transport` with `retry`, watching `shared`'s
/// drain deadline.
async fn deliver(
    shared: &Shared,
    transport: &Scripted,
    retry: &RetryConfig,
    request: &Bytes,
) -> Outcome {
    retry::deliver(shared, transport, retry, request, &mut shared.deadline()).await
}

/// Retries with no jitter, so that every wait is exact.
fn exact(initial_ms: u64, max_ms: u64, max_elapsed_ms: Option<u64>) -> RetryConfig {
    RetryConfig {
        enabled: true,
        initial_interval: Duration::from_millis(initial_ms),
        max_interval: Duration::from_millis(max_ms),
        max_elapsed_time: max_elapsed_ms.map(Duration::from_millis),
        multiplier: 2.0,
        randomization_factor: 0.0,
    }
}

fn unavailable() -> AttemptError {
    status::grpc(&tonic::Status::unavailable("down"))
}

/// One recorded attempt: when (since the test's start), the request, the attempt number.
type Attempt = (Duration, Bytes, u32);

/// A transport that answers from a script (then accepts), records every attempt, and can
/// hold every attempt until a permit is given.
#[derive(Clone)]
struct Scripted {
    start: Instant,
    script: Arc<Mutex<VecDeque<Result<Accepted, AttemptError>>>>,
    attempts: Arc<Mutex<Vec<Attempt>>>,
    gate: Option<Arc<Semaphore>>,
    /// Answer every attempt with this, after the script runs out.
    always: Option<AttemptError>,
}

impl Scripted {
    fn new(script: impl IntoIterator<Item = Result<Accepted, AttemptError>>) -> Self {
        Self {
            start: Instant::now(),
            script: Arc::new(Mutex::new(script.into_iter().collect())),
            attempts: Arc::default(),
            gate: None,
            always: None,
        }
    }

    fn attempts(&self) -> Vec<Attempt> {
        self.attempts.lock().unwrap().clone()
    }

    /// When each attempt started, in milliseconds since the test's start.
    fn at_ms(&self) -> Vec<u128> {
        self.attempts()
            .iter()
            .map(|(at, ..)| at.as_millis())
            .collect()
    }
}

impl Transport for Scripted {
    type Request = Bytes;

    async fn send(&self, request: &Bytes, attempt: u32) -> Result<Accepted, AttemptError> {
        self.attempts
            .lock()
            .unwrap()
            .push((self.start.elapsed(), request.clone(), attempt));
        if let Some(gate) = &self.gate {
            gate.acquire().await.unwrap().forget();
        }
        if let Some(answer) = self.script.lock().unwrap().pop_front() {
            return answer;
        }
        match &self.always {
            Some(error) => Err(error.clone()),
            None => Ok(Accepted::default()),
        }
    }
}

fn batch(tag: u8, spans: usize) -> TraceBatch {
    TraceBatch::new(Bytes::from(vec![tag; 8]), spans)
}

// === retry schedule ===

/// Scenario: five UNAVAILABLE answers, then success; backoff 100 ms doubling to at most
/// 1 s, no jitter; paused time.
/// Guarantees: the attempts start at exactly 0, 100, 300, 700, 1500 and 2500 ms (waits 100,
/// 200, 400, 800, then capped at 1000); attempt numbers count up from 0; five retries are
/// counted as `unavailable`; the request is delivered.
#[tokio::test(start_paused = true)]
async fn retries_follow_the_backoff_exactly() {
    let (registry, shared) = shared();
    let transport = Scripted::new((0..5).map(|_| Err(unavailable())));
    let outcome = deliver(
        &shared,
        &transport,
        &exact(100, 1000, None),
        &Bytes::from_static(b"r"),
    )
    .await;
    assert_eq!(outcome, Outcome::Delivered(Accepted::default()));
    assert_eq!(transport.at_ms(), vec![0, 100, 300, 700, 1500, 2500]);
    let numbers: Vec<u32> = transport.attempts().iter().map(|(_, _, n)| *n).collect();
    assert_eq!(numbers, vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(retries(&registry, "unavailable"), 5.0);
}

/// Scenario: with `randomization_factor` 0.5 and backoff 100 ms doubling, a server that
/// always answers UNAVAILABLE; 200 runs of four waits each; paused time.
/// Guarantees: every wait lies within `interval·(1±0.5)` of its step (50–150, 100–300,
/// 200–600, 400–1200 ms, the last capped at `max_interval` 1 s), and the waits are not all
/// equal (jitter is applied).
#[tokio::test(start_paused = true)]
async fn jitter_stays_within_its_bounds() {
    let (_registry, shared) = shared();
    let mut config = exact(100, 1000, None);
    config.randomization_factor = 0.5;
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..200 {
        let mut transport = Scripted::new((0..4).map(|_| Err(unavailable())));
        transport.start = Instant::now();
        let _ = deliver(&shared, &transport, &config, &Bytes::new()).await;
        let at = transport.at_ms();
        let waits: Vec<u128> = at.windows(2).map(|w| w[1] - w[0]).collect();
        for (wait, (low, high)) in
            waits
                .iter()
                .zip([(50, 150), (100, 300), (200, 600), (400, 1000)])
        {
            assert!((low..=high).contains(wait), "{waits:?}");
        }
        let _ = seen.insert(waits[0]);
    }
    assert!(seen.len() > 10, "jitter varies the waits: {seen:?}");
}

/// Scenario: a gRPC RESOURCE_EXHAUSTED with `RetryInfo` of 3 s, an HTTP 503 with
/// `Retry-After: 2`, an HTTP 429 with `Retry-After: 0`, then success; each built by the
/// real classifiers from the wire answer; backoff 100 ms doubling, no jitter; paused time.
/// Guarantees: each wait is `max(backoff, hint)`: the attempts start at exactly 0, 3000,
/// 5000 and 5400 ms (3 s hint, 2 s hint, then the 400 ms backoff beats the 0 s hint); the
/// retries are counted by type.
#[tokio::test(start_paused = true)]
async fn throttle_hints_stretch_the_backoff_exactly() {
    let (registry, shared) = shared();
    let retry_info = tonic::Status::with_error_details(
        Code::ResourceExhausted,
        "slow down",
        ErrorDetails::with_retry_info(Some(Duration::from_secs(3))),
    );
    let retry_after = |value: &'static str| {
        let mut headers = HeaderMap::new();
        let _ = headers.insert(http::header::RETRY_AFTER, HeaderValue::from_static(value));
        retry_after_header(&headers)
    };
    let transport = Scripted::new([
        Err(status::grpc(&retry_info)),
        Err(status::OTLP_HTTP.classify(StatusCode::SERVICE_UNAVAILABLE, retry_after("2"), b"busy")),
        Err(status::REMOTE_WRITE.classify(
            StatusCode::TOO_MANY_REQUESTS,
            retry_after("0"),
            b"slow down",
        )),
    ]);
    let outcome = deliver(&shared, &transport, &exact(100, 1000, None), &Bytes::new()).await;
    assert!(matches!(outcome, Outcome::Delivered(_)));
    assert_eq!(transport.at_ms(), vec![0, 3000, 5000, 5400]);
    assert_eq!(retries(&registry, "resource_exhausted"), 1.0);
    assert_eq!(retries(&registry, "http_5xx"), 1.0);
    assert_eq!(retries(&registry, "http_429"), 1.0);
}

/// Scenario: a destination that always fails retryably; backoff 1 s doubling to 10 s,
/// `max_elapsed_time` 5 s; and separately, retries disabled; paused time.
/// Guarantees: attempts at 0, 1 and 3 s, then no wait of 4 s that would end past 5 s: the
/// outcome is `retries_exhausted` at 3 s with the last error; with retries disabled, one
/// attempt only. No retry is counted for the attempt that gave up.
#[tokio::test(start_paused = true)]
async fn max_elapsed_time_and_disabled_retries_give_up() {
    let (registry, shared) = shared();
    let mut transport = Scripted::new([]);
    transport.always = Some(unavailable());
    let started = Instant::now();
    let outcome = deliver(
        &shared,
        &transport,
        &exact(1000, 10_000, Some(5000)),
        &Bytes::new(),
    )
    .await;
    assert_eq!(
        outcome,
        Outcome::Failed {
            reason: FailureReason::RetriesExhausted,
            message: "Unavailable: down".to_owned(),
        }
    );
    assert_eq!(transport.at_ms(), vec![0, 1000, 3000]);
    assert_eq!(started.elapsed(), Duration::from_secs(3));
    assert_eq!(retries(&registry, "unavailable"), 2.0);

    let mut disabled = exact(1000, 10_000, None);
    disabled.enabled = false;
    let mut once = Scripted::new([]);
    once.always = Some(unavailable());
    let outcome = deliver(&shared, &once, &disabled, &Bytes::new()).await;
    assert!(matches!(
        outcome,
        Outcome::Failed {
            reason: FailureReason::RetriesExhausted,
            ..
        }
    ));
    assert_eq!(once.at_ms(), vec![0]);
}

/// Scenario: a permanent error (gRPC INVALID_ARGUMENT) through inline delivery of a
/// 4-span batch.
/// Guarantees: one attempt; `export`'s result is `Failed { permanent, items: 4 }`; the
/// spans are counted as failed `permanent`, none as sent, no retry counted.
#[tokio::test(start_paused = true)]
async fn permanent_errors_are_not_retried() {
    let (registry, shared) = shared();
    let transport = Scripted::new([Err(status::grpc(&tonic::Status::invalid_argument("bad")))]);
    let delivery = BatchDelivery::new(shared.clone(), transport.clone(), exact(10, 100, None));
    shared.take(4);
    let result = delivery
        .deliver(batch(1, 4), &mut shared.deadline())
        .await
        .into_result();
    assert!(matches!(
        result,
        Err(ExportError::Failed {
            reason: FailureReason::Permanent,
            items: 4,
            ..
        })
    ));
    assert_eq!(transport.at_ms(), vec![0]);
    assert_eq!(failed(&registry, "permanent"), 4.0);
    assert_eq!(sent(&registry), 0.0);
    for t in RetryErrorType::ALL {
        assert_eq!(retries(&registry, t.as_str()), 0.0);
    }
    assert_eq!(shared.take_stranded(), 0, "settled, not left in hand");
}

/// Scenario: a destination accepts a 5-span request but reports 2 rejected; another
/// accepts with a message and nothing rejected.
/// Guarantees: 2 spans are counted as failed `partial_success` and 3 as sent; a message
/// alone loses nothing (5 more sent).
#[tokio::test(start_paused = true)]
async fn partial_success_counts_the_rejected() {
    let (registry, shared) = shared();
    shared.record(
        5,
        &Outcome::Delivered(Accepted {
            rejected: 2,
            message: "too old".to_owned(),
        }),
    );
    shared.record(
        5,
        &Outcome::Delivered(Accepted {
            rejected: 0,
            message: "fyi".to_owned(),
        }),
    );
    assert_eq!(failed(&registry, "partial_success"), 2.0);
    assert_eq!(sent(&registry), 8.0);
}

// === sending queue ===

/// A delivery whose transport holds every attempt until `gate` gets a permit (the gate,
/// the transport to read its attempts, and the delivery).
fn held_delivery(shared: &Arc<Shared>) -> (Arc<Semaphore>, Scripted, Arc<BatchDelivery<Scripted>>) {
    let gate = Arc::new(Semaphore::new(0));
    let mut transport = Scripted::new([]);
    transport.gate = Some(gate.clone());
    let delivery = Arc::new(BatchDelivery::new(
        shared.clone(),
        transport.clone(),
        exact(10, 100, None),
    ));
    (gate, transport, delivery)
}

/// Scenario: a queue of capacity 2 with one consumer whose transport holds every attempt;
/// batch 1 is in the consumer's hands, batches 2 and 3 fill the queue; then the transport
/// is released; paused time.
/// Guarantees: the fourth push pends (an hour of paused time passes without it completing:
/// backpressure, not a drop); the depth gauge reads 2; once released, every batch is
/// delivered once, none counted as failed or refused.
#[tokio::test(start_paused = true)]
async fn a_full_queue_makes_push_wait() {
    let (registry, shared) = shared();
    let (gate, transport, delivery) = held_delivery(&shared);
    let queue = Arc::new(MemoryQueue::start(&shared, &delivery, 1, 2, 1));
    queue.push(&shared, 0, batch(1, 1)).await.unwrap();
    tokio::task::yield_now().await;
    assert_eq!(transport.attempts().len(), 1, "the consumer took batch 1");
    queue.push(&shared, 0, batch(2, 1)).await.unwrap();
    queue.push(&shared, 0, batch(3, 1)).await.unwrap();
    assert_eq!(
        value(
            &registry,
            "otelcol_exporter_queue_size",
            &[("exporter", "otlp")]
        ),
        2.0
    );
    let fourth = {
        let (queue, shared) = (queue.clone(), shared.clone());
        tokio::spawn(async move { queue.push(&shared, 0, batch(4, 1)).await.is_ok() })
    };
    let mut fourth = std::pin::pin!(fourth);
    assert!(
        tokio::time::timeout(Duration::from_secs(3600), &mut fourth)
            .await
            .is_err(),
        "push waits while the queue is full"
    );
    gate.add_permits(4);
    assert!(fourth.await.unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    let report = shared
        .shutdown(deadline, queue.drain(&shared, deadline))
        .await;
    // Some were delivered before shutdown began: the report counts only the drain's.
    assert_eq!(report.dropped, 0);
    assert!(report.delivered <= 4);
    let mut tags: Vec<u8> = transport.attempts().iter().map(|(_, r, _)| r[0]).collect();
    tags.sort_unstable();
    assert_eq!(tags, vec![1, 2, 3, 4]);
    assert_eq!(sent(&registry), 4.0);
    assert_eq!(
        value(
            &registry,
            "otelcol_exporter_enqueue_failed_spans_total",
            &[]
        ),
        0.0
    );
}

/// Scenario: a queue of one consumer whose destination holds every attempt; four batches
/// pushed (one taken, three queued); the queue is reclaimed, then the destination answers
/// and the exporter shuts down; paused time.
/// Guarantees: reclaim returns the three queued batches in order and nothing else; the
/// consumer takes no further batch after it, finishes the one it held and is counted for
/// it alone (1 span sent); the reclaimed spans are neither sent nor dropped by this
/// exporter, and the drain reports nothing dropped.
#[tokio::test(start_paused = true)]
async fn reclaim_hands_back_what_is_queued() {
    let (registry, shared) = shared();
    let (gate, transport, delivery) = held_delivery(&shared);
    let queue = MemoryQueue::start(&shared, &delivery, 1, 10, 1);
    for tag in 1..=4 {
        queue.push(&shared, 0, batch(tag, 1)).await.unwrap();
    }
    tokio::task::yield_now().await;
    assert_eq!(transport.attempts().len(), 1, "the consumer took batch 1");

    let reclaimed = queue.reclaim().await;
    let tags: Vec<u8> = reclaimed.iter().map(|b| b.request[0]).collect();
    assert_eq!(tags, vec![2, 3, 4]);
    gate.add_permits(10);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        transport.attempts().len(),
        1,
        "no batch taken after reclaim"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let report = shared
        .shutdown(deadline, queue.drain(&shared, deadline))
        .await;
    assert_eq!(report.dropped, 0);
    assert_eq!(sent(&registry), 1.0);
    assert_eq!(failed(&registry, "shutdown"), 0.0);
}

/// Scenario: five 2-span batches queued for a destination that never recovers (retries
/// unbounded in time); shutdown with a 1 s deadline; then a late export; paused time.
/// Guarantees: shutdown returns by the deadline (plus the abort slack); the report and
/// `send_failed{reason="shutdown"}` count all 10 spans as dropped and none delivered;
/// retries stop at the deadline; the late push is refused.
#[tokio::test(start_paused = true)]
async fn the_deadline_ends_retries_and_counts_what_is_left() {
    let (registry, shared) = shared();
    let mut transport = Scripted::new([]);
    transport.always = Some(AttemptError::transport("connection refused".to_owned()));
    let delivery = Arc::new(BatchDelivery::new(
        shared.clone(),
        transport.clone(),
        exact(100, 400, None),
    ));
    let queue = MemoryQueue::start(&shared, &delivery, 1, 10, 2);
    for tag in 1..=5 {
        queue.push(&shared, 0, batch(tag, 2)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(retries(&registry, "transport") >= 2.0);
    let deadline = Instant::now() + Duration::from_secs(1);
    let report = shared
        .shutdown(deadline, queue.drain(&shared, deadline))
        .await;
    assert!(Instant::now() <= deadline + super::queue::ABORT_SLACK);
    assert_eq!(
        report,
        DrainReport {
            delivered: 0,
            dropped: 10
        }
    );
    assert_eq!(failed(&registry, "shutdown"), 10.0);
    let last = transport.attempts().last().unwrap().0;
    assert!(
        last <= Duration::from_secs(6),
        "no attempt after the deadline: {last:?}"
    );
    assert!(queue.push(&shared, 0, batch(9, 3)).await.is_err());
}

/// Scenario: a queue of two consumers whose destination refuses every attempt (a backend
/// killed), retries unbounded in time; three 2-span batches pushed (two in retry, one
/// queued); the queue is reclaimed, then its in-flight batches; then shutdown; paused
/// time.
/// Guarantees: reclaim returns the queued batch; reclaim_in_flight returns the two batches
/// that were waiting to retry, promptly (no further attempt is made), so every batch comes
/// back exactly once; this exporter counts none of them as sent or failed, and the drain
/// reports nothing dropped.
#[tokio::test(start_paused = true)]
async fn reclaim_hands_back_deliveries_waiting_to_retry() {
    let (registry, shared) = shared();
    let mut transport = Scripted::new([]);
    transport.always = Some(AttemptError::transport("connection refused".to_owned()));
    let delivery = Arc::new(BatchDelivery::new(
        shared.clone(),
        transport.clone(),
        exact(100, 400, None),
    ));
    let queue = MemoryQueue::start(&shared, &delivery, 1, 10, 2);
    for tag in 1..=3 {
        queue.push(&shared, 0, batch(tag, 2)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        retries(&registry, "transport") >= 2.0,
        "both consumers retry"
    );

    let queued: Vec<u8> = queue.reclaim().await.iter().map(|b| b.request[0]).collect();
    let attempts_at_reclaim = transport.attempts().len();
    let started = Instant::now();
    let mut in_flight: Vec<u8> = queue
        .reclaim_in_flight()
        .await
        .iter()
        .map(|b| b.request[0])
        .collect();
    assert!(
        started.elapsed() < Duration::from_millis(10),
        "no wait for the next retry"
    );
    in_flight.sort_unstable();
    assert_eq!(queued, vec![3]);
    assert_eq!(in_flight, vec![1, 2]);
    assert_eq!(transport.attempts().len(), attempts_at_reclaim);
    assert_eq!(sent(&registry), 0.0);
    assert_eq!(failed(&registry, "retries_exhausted"), 0.0);
    assert_eq!(failed(&registry, "shutdown"), 0.0);
    let deadline = Instant::now() + Duration::from_secs(1);
    let report = shared
        .shutdown(deadline, queue.drain(&shared, deadline))
        .await;
    assert_eq!(report, DrainReport::default());
}

/// A delivery that merges small items (up to three numbers) and records what it delivered.
#[derive(Default)]
struct Recorder {
    delivered: Mutex<Vec<(usize, Vec<u32>)>>,
}

/// Numbers routed to one lane.
struct Numbers {
    lane: usize,
    values: Vec<u32>,
}

impl super::deliver::QueueItem for Numbers {
    fn items(&self) -> usize {
        self.values.len()
    }
}

impl Deliver<Numbers> for Recorder {
    async fn deliver(&self, item: Numbers, _deadline: &mut DeadlineWatch) -> Delivered<Numbers> {
        tokio::time::sleep(Duration::from_millis(10)).await;
        self.delivered
            .lock()
            .unwrap()
            .push((item.lane, item.values.clone()));
        Delivered::Settled(Settled::default())
    }

    fn has_room(&self, item: &Numbers) -> bool {
        item.values.len() < 3
    }

    fn merge(&self, item: &mut Numbers, more: Numbers) {
        assert_eq!(item.lane, more.lane, "merged across lanes");
        item.values.extend(more.values);
    }
}

/// Scenario: three lanes with one consumer each (remote write's shape); 30 numbers pushed,
/// each to lane `n % 3`, faster than they are delivered; paused time.
/// Guarantees: every number is delivered once, on its lane, and each lane's numbers arrive
/// in push order; queued items behind a taken one are merged (some deliveries carry more
/// than one number) but never past the delivery's limit of three once merging started.
#[tokio::test(start_paused = true)]
async fn lanes_keep_order_and_merge() {
    let (_registry, shared) = shared();
    let recorder = Arc::new(Recorder::default());
    let queue = MemoryQueue::start(&shared, &recorder, 3, 100, 1);
    for n in 0..30u32 {
        let lane = (n % 3) as usize;
        queue
            .push(
                &shared,
                lane,
                Numbers {
                    lane,
                    values: vec![n],
                },
            )
            .await
            .unwrap_or_else(|_| panic!("refused"));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let _ = shared
        .shutdown(deadline, queue.drain(&shared, deadline))
        .await;
    let delivered = recorder.delivered.lock().unwrap().clone();
    for lane in 0..3 {
        let order: Vec<u32> = delivered
            .iter()
            .filter(|(l, _)| *l == lane)
            .flat_map(|(_, values)| values.clone())
            .collect();
        let expected: Vec<u32> = (0..30).filter(|n| (n % 3) as usize == lane).collect();
        assert_eq!(order, expected, "lane {lane}");
    }
    assert!(
        delivered.iter().any(|(_, values)| values.len() > 1),
        "merged"
    );
    assert!(delivered.iter().all(|(_, values)| values.len() <= 3));
}

/// Scenario: inline mode; one export in progress against a held transport while shutdown
/// begins with a 2 s deadline; then a late export; paused time.
/// Guarantees: shutdown waits for the export in progress, which ends at the deadline with
/// `ShutDown` (its spans counted as dropped, reason `shutdown`); the late export is refused
/// before any attempt.
#[tokio::test(start_paused = true)]
async fn inline_exports_end_at_the_deadline() {
    let (registry, shared) = shared();
    let mut transport = Scripted::new([]);
    transport.gate = Some(Arc::new(Semaphore::new(0)));
    let delivery = Arc::new(BatchDelivery::new(
        shared.clone(),
        transport.clone(),
        exact(10, 100, None),
    ));
    let inline = Arc::new(Inline::default());
    let running = {
        let (shared, delivery, inline) = (shared.clone(), delivery.clone(), inline.clone());
        tokio::spawn(async move {
            let _permit = inline.enter(&shared).await.unwrap();
            shared.take(3);
            delivery
                .deliver(batch(1, 3), &mut shared.deadline())
                .await
                .into_result()
        })
    };
    tokio::task::yield_now().await;
    assert_eq!(transport.attempts().len(), 1);
    let deadline = Instant::now() + Duration::from_secs(2);
    let report = shared.shutdown(deadline, inline.drain(deadline)).await;
    assert_eq!(
        report,
        DrainReport {
            delivered: 0,
            dropped: 3
        }
    );
    assert!(matches!(
        running.await.unwrap(),
        Err(ExportError::ShutDown { items: 3 })
    ));
    assert_eq!(failed(&registry, "shutdown"), 3.0);
    assert!(inline.enter(&shared).await.is_none());
    assert_eq!(transport.attempts().len(), 1);
}

/// Scenario: `TraceBatch` as a queue item.
/// Guarantees: its item count is its span count (what the queue counts and drops).
#[test]
fn payload_items_are_spans() {
    assert_eq!(super::deliver::QueueItem::items(&batch(1, 7)), 7);
    assert_eq!(batch(1, 7).item_count(), 7);
}
