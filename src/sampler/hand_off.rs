//! Hand-off: a sampler that is one of several replicas keeps each trace whole through
//! membership changes (`tail_sampling.hand_off`, see `docs/scaling.md`).
//!
//! The sampler follows the ring of a `loadbalancing` exporter of the same process
//! ([`Peers`]), one of whose backends is this process. Three rules keep a trace in one
//! place:
//!
//! 1. **Sweep after a change.** When the ring changes, the hand-off task waits `debounce`
//!    (a second change restarts the wait), then takes every undecided trace that another
//!    replica now owns out of the buffer and sends it to that replica whole: all of a
//!    trace's buffered spans go in one request, marked as a hand-off. Decided traces stay:
//!    their decision, and their late spans, stay where they were decided.
//! 2. **Forward what is not ours.** A span of a trace that is neither held nor decided
//!    here, and that the ring says another replica owns, is forwarded to it at once (a peer
//!    routed it on a ring that was not yet this one's) rather than starting a partial
//!    trace here.
//! 3. **Keep what is handed to us.** Spans that arrive marked as a hand-off are buffered
//!    whoever the ring says owns them: two replicas whose rings disagree for a moment do
//!    not pass a trace back and forth; the next sweep settles it.
//!
//! Leaving (SIGTERM): the exporter takes this process out of its own ring, so every trace
//! is some other replica's; the task then sweeps every [`LEAVING_SWEEP`], so that what
//! still arrives is handed on too, and what is left when the sampler stops is decided here
//! and counted (early decisions, reason `leaving`).
//!
//! Decisions move too. With the traces it hands off after a change, the sweep sends the
//! keep decisions of the last `decision_wait` for traces another replica now owns, as
//! decision records ([`write_decision`]: spans of a reserved resource, in the same
//! hand-off requests). The new owner caches them, so that late spans of a kept trace that
//! now reach it follow the decision made before the change, counted as late after move;
//! a trace it already started from such late spans is kept at once, as decided. Not-kept
//! decisions are not handed over (their cache holds fingerprints, not trace ids): a late
//! part of a dropped trace is decided on its own by the new owner, which agrees unless
//! that part alone matches a content policy (an ERROR span arriving late).
//!
//! Everything sent waits in an outbox, charged to the memory budget, until the exporter
//! has taken it; intake is refused retryably while the outbox is at its bound, as for late
//! spans.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::buffer::PendingTrace;
use super::policy::ThresholdUpdate;
use super::threshold::{self, Threshold};
use crate::otlp::{FramedRequest, SpanView, TraceId, TraceRequestWriter};
use crate::payload::{BoxFuture, TraceBatch};

/// How often a leaving replica sweeps what still reaches it.
pub const LEAVING_SWEEP: Duration = Duration::from_millis(200);

/// After a membership change, how long past the sweep a trace's root span may not bring
/// its decision forward: the hand-off of its earlier spans from the old owner is on its
/// way, and deciding before it arrives would split the trace.
const SETTLE: Duration = Duration::from_secs(1);

/// Hand-off requests are about this many encoded bytes (a trace is never split: one
/// larger than this goes alone).
pub(super) const HAND_OFF_REQUEST_BYTES: usize = 1 << 20;

/// Which replica owns a trace, as this process's ring says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// This process.
    Here,
    /// Another replica.
    Peer,
    /// Nobody yet (the ring is empty): the trace stays here.
    Unknown,
}

/// The ring at one moment, as a sampler needs it.
pub trait Ownership: Send + Sync {
    /// Who owns `trace_id`.
    fn owner(&self, trace_id: &TraceId) -> Owner;

    /// True once this process has begun leaving: it is out of its own ring for good.
    fn leaving(&self) -> bool;
}

/// What a sampler hands traces to: the `loadbalancing` exporter it follows.
pub trait Peers: Send + Sync {
    /// The current ownership; the receiver wakes at every membership change.
    fn ownership(&self) -> watch::Receiver<Arc<dyn Ownership>>;

    /// Sends `batch` to the replicas that own its traces, marked as a hand-off, waiting for
    /// room in their queues.
    ///
    /// # Errors
    ///
    /// The spans that could not be handed over (the exporter has shut down); they have
    /// been counted as lost by the exporter.
    fn hand_off(&self, batch: TraceBatch) -> BoxFuture<'_, Result<(), HandOffRefused>>;
}

/// A hand-off the exporter did not take.
#[derive(Debug, thiserror::Error)]
#[error("{spans} spans not handed off: {reason}")]
pub struct HandOffRefused {
    /// Spans not handed over.
    pub spans: usize,
    /// Why.
    pub reason: String,
}

/// The hand-off settings of a sampler (`tail_sampling.hand_off`).
#[derive(Clone, Copy, Debug)]
pub struct HandOffSettings {
    /// How long after a membership change to wait for the next before sweeping.
    pub debounce: Duration,
}

/// A sampler's link to its peers: the ring it follows and the hand-offs on their way.
pub(super) struct HandOffLink {
    peers: Arc<dyn Peers>,
    pub(super) ownership: watch::Receiver<Arc<dyn Ownership>>,
    pub(super) settings: HandOffSettings,
    /// Hand-offs and forwarded spans waiting for the exporter, oldest first.
    outbox: Mutex<VecDeque<TraceBatch>>,
    /// Spans in the outbox, or on their way out of it until the exporter took them.
    spans: AtomicUsize,
    /// Encoded bytes of those spans' requests (what their charges hold).
    bytes: AtomicUsize,
    pub(super) wake: Notify,
    /// Until when root spans may not bring decisions forward (see [`SETTLE`]).
    settle_until: Mutex<Option<Instant>>,
}

impl HandOffLink {
    pub(super) fn new(peers: Arc<dyn Peers>, settings: HandOffSettings) -> Self {
        let ownership = peers.ownership();
        Self {
            peers,
            ownership,
            settings,
            outbox: Mutex::new(VecDeque::new()),
            spans: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            wake: Notify::new(),
            settle_until: Mutex::new(None),
        }
    }

    /// The ownership as of now.
    pub(super) fn ownership(&self) -> Arc<dyn Ownership> {
        self.ownership.borrow().clone()
    }

    /// The earliest a root span may make a trace due, while hand-offs of a membership
    /// change may still be on their way; `None` when no change is recent.
    pub(super) fn not_before(&self, now: Instant) -> Option<Instant> {
        let settle = *self.settle_until.lock().unwrap_or_else(|e| e.into_inner());
        settle.filter(|until| *until > now)
    }

    /// Records a membership change seen at `now`.
    pub(super) fn changed(&self, now: Instant) {
        let until = now + self.settings.debounce + SETTLE;
        *self.settle_until.lock().unwrap_or_else(|e| e.into_inner()) = Some(until);
    }

    /// Spans waiting to be handed off.
    pub(super) fn spans_held(&self) -> usize {
        self.spans.load(Ordering::Relaxed)
    }

    /// Bytes of the requests waiting to be handed off.
    pub(super) fn bytes_held(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    fn lock_outbox(&self) -> MutexGuard<'_, VecDeque<TraceBatch>> {
        // Every mutation is a whole push or pop.
        self.outbox
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues `batch` (charged) for the exporter and wakes the hand-off task.
    pub(super) fn push(&self, batch: TraceBatch) {
        self.spans.fetch_add(batch.span_count, Ordering::Relaxed);
        self.bytes.fetch_add(batch.byte_len(), Ordering::Relaxed);
        self.lock_outbox().push_back(batch);
        self.wake.notify_one();
    }

    /// Hands everything in the outbox to the exporter, oldest first.
    pub(super) async fn flush(&self) {
        loop {
            let Some(batch) = self.lock_outbox().pop_front() else {
                return;
            };
            let (spans, bytes) = (batch.span_count, batch.byte_len());
            if let Err(refused) = self.peers.hand_off(batch).await {
                tracing::warn!(event = "sampler.hand_off_failed", error = %refused);
            }
            self.spans.fetch_sub(spans, Ordering::Relaxed);
            self.bytes.fetch_sub(bytes, Ordering::Relaxed);
        }
    }
}

/// Sleeps until `at`, or forever when `None`.
pub(super) async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Frames a pending trace's spans as they arrived (no threshold, no policy name: it is
/// undecided) into `writer`.
pub(super) fn write_unchanged(writer: &mut TraceRequestWriter, trace: PendingTrace) {
    let (arena, origins, mut spans) = trace.into_spans();
    while let Some((at, range)) = spans.next(&arena) {
        let origin = &origins[at];
        writer.push(
            &origin.resource,
            &origin.resource_schema_url,
            &origin.scope,
            &origin.scope_schema_url,
            &arena.slice(range),
        );
    }
}

/// The resource attribute that marks the decision records of a hand-off request.
const DECISIONS_ATTRIBUTE: (&str, &str) = ("tailgate.handoff", "decisions");

/// The span id every decision record carries (a record is not a span of its trace).
const DECISION_SPAN_ID: [u8; 8] = [0xff; 8];

/// The encoded `Resource` body of decision records: its one attribute is
/// [`DECISIONS_ATTRIBUTE`]. A `ResourceSpans` whose resource is exactly these bytes holds
/// decision records; senders never write it (an application's resource would have to be
/// byte for byte this one), and it is looked for only in hand-off requests.
pub(super) fn decisions_resource() -> &'static Bytes {
    static RESOURCE: LazyLock<Bytes> = LazyLock::new(|| {
        let (key, value) = DECISIONS_ATTRIBUTE;
        Bytes::from(
            Resource {
                attributes: vec![KeyValue {
                    key: key.to_owned(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue(value.to_owned())),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }
            .encode_to_vec(),
        )
    });
    &RESOURCE
}

/// A keep decision as a hand-off carries it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct DecisionRecord {
    /// The trace decided.
    pub(super) trace_id: TraceId,
    /// The name of the policy that kept it.
    pub(super) policy: String,
    /// What its spans' `th` becomes.
    pub(super) threshold: ThresholdUpdate,
}

/// Appends the record of a keep decision to `writer`: a span of the trace under
/// [`decisions_resource`], whose name is the deciding policy's name and whose trace state
/// holds the threshold (`ot=th:...`) when the probabilistic policy kept it.
pub(super) fn write_decision(writer: &mut TraceRequestWriter, record: &DecisionRecord) {
    let trace_state = match record.threshold {
        ThresholdUpdate::Keep => String::new(),
        ThresholdUpdate::Raise(th) => threshold::with_threshold("", th),
    };
    let span = Span {
        trace_id: record.trace_id.0.to_vec(),
        span_id: DECISION_SPAN_ID.to_vec(),
        name: record.policy.clone(),
        trace_state,
        ..Default::default()
    };
    let empty = Bytes::new();
    writer.push(
        decisions_resource(),
        &empty,
        &empty,
        &empty,
        &Bytes::from(span.encode_to_vec()),
    );
}

/// A request of decision records as a batch of no items: records are not spans, so no
/// exporter, queue or drain on the way counts them as spans sent or lost (losing one only
/// means the late spans of its trace are decided on their own).
pub(super) fn records_batch(framed: FramedRequest) -> TraceBatch {
    TraceBatch::new(framed.request, 0)
}

/// The decision a record (a span under [`decisions_resource`]) carries.
pub(super) fn read_decision(span: &SpanView) -> DecisionRecord {
    let trace_state = std::str::from_utf8(&span.trace_state).unwrap_or("");
    let threshold = threshold::read_ot(trace_state)
        .th
        .map_or(ThresholdUpdate::Keep, |th: Threshold| {
            ThresholdUpdate::Raise(th)
        });
    DecisionRecord {
        trace_id: span.trace_id,
        policy: String::from_utf8_lossy(&span.name).into_owned(),
        threshold,
    }
}
