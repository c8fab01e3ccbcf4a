//! The `tail_sampling` processor: hold every trace until its story is told, then keep it
//! whole or drop it whole.
//!
//! # Data flow
//!
//! Receivers call [`SamplerIngest::ingest`] on their own tasks (so ingest uses every
//! core): the request is walked once by the wire reader, each span's bytes are copied
//! into its trace's arena in the shard its trace id hashes to, and the policies' facts
//! are updated span by span. One decision task ([`TailSampler::run`]) sleeps until the
//! earliest deadline, decides the due traces on their facts (the policies never re-read
//! spans), and frames the kept ones into requests for the next stage, waiting for room
//! there: a slow exporter slows decisions, and the buffer (bounded by `num_traces` and,
//! with the memory limiter, by bytes) then pushes back on the receivers.
//!
//! # Timing
//!
//! A trace is due `decision_wait` after its first span, or
//! `decision_wait_after_root_received` after its root span, whichever is first. It is
//! due at once when it grows past `maximum_trace_size_bytes`, and the oldest traces fall
//! due early when more than `num_traces` are held (down to 1/64 under it). Undecided
//! traces are never evicted: every trace is decided, and every early decision is counted
//! by reason. Ingest wakes the decision task only for a deadline earlier than the one it
//! sleeps towards (see the `wake` module).
//!
//! # Late spans
//!
//! A span whose trace was already decided follows the decision, for as long as the
//! decision caches remember it: not-kept traces' spans are dropped and counted; kept
//! traces' spans pass on (carrying the trace's threshold) through the outbox.
//!
//! The late spans of one request are framed into a request of their own on the receiver's
//! task: their bytes are copied once, into an allocation of exactly that size, so the
//! request they came in is freed at once; that copy is charged to the memory budget until
//! downstream is done with it, like every batch the sampler passes on. The decision task
//! sends what waits in the outbox before each batch of decided traces and whenever it is
//! woken, so late spans wait for room downstream, never for a round of decisions. While
//! late spans wait and the budget is at its soft limit (without a memory limit: while
//! `num_traces` late spans wait), intake is refused retryably rather than the outbox grown.
//!
//! # Concurrency
//!
//! Shards are `std::sync::Mutex`es held for short, non-async sections (a request's spans
//! of one shard, or one round of due traces): no lock is held across an `.await`, and
//! two cores rarely want the same shard at once.

mod buffer;
mod cache;
mod entry;
mod hand_off;
mod metrics;
pub mod policy;
mod rewrite;
pub mod threshold;
mod wake;

#[cfg(test)]
mod tests;

pub use hand_off::{HandOffRefused, HandOffSettings, LEAVING_SWEEP, Owner, Ownership, Peers};
pub use metrics::{EarlyReason, SamplerMetricFamilies, SamplerMetrics, SpanOutcome};

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, VecDeque};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use self::buffer::{DeadlineKind, Origin, OriginAccount, PendingTrace, Shard};
use self::cache::{Cached, KeptDecision, TraceIdHasher};
use self::hand_off::HandOffLink;
use self::policy::{Decision, PolicySet, ThresholdUpdate, Vote};
use self::threshold::Threshold;
use self::wake::DecisionWake;
use crate::error::PipelineError;
use crate::limiter::MemoryBudget;
use crate::otlp::{
    ResourceSpansView, SpanView, TraceId, TraceRequestWriter, parse_validated_traces_request,
};
use crate::payload::{Arrival, Downstream, Payload, TraceBatch};
use crate::telemetry::k8s_events::{self, Transition};

/// The scope attribute naming the policy that kept a trace (`record_policy`).
pub const POLICY_ATTRIBUTE: &str = "tailsampling.policy";

/// Kept spans are passed on in requests of about this many encoded bytes; the `batch`
/// processor after the sampler sizes the final batches.
const OUTPUT_REQUEST_BYTES: usize = 1 << 20;

/// At most this many traces are decided per shard lock, so ingest never waits long.
const DECISIONS_PER_LOCK: usize = 512;

/// How long the decision task sleeps at most when nothing is due.
const IDLE_TICK: Duration = Duration::from_secs(1);

/// The least time from one round of decisions to the next that a deadline starts (a wake-up
/// starts one at once): a due trace waits at most this long past its deadline.
///
/// Under load, traces fall due every few microseconds, and a round per tick of tokio's
/// millisecond timer cost a wake-up of the decision task and a pass over every shard each
/// time, for a handful of traces: with 60-span requests, about a tenth of the gateway's
/// CPU (BENCHMARKS.md, "Performance pass 2, sixth stop"). The Collector decides once a
/// second.
const ROUND_SPACING: Duration = Duration::from_millis(5);

/// The sampler's runtime settings, from `processors.tail_sampling`.
#[derive(Clone, Debug)]
pub struct SamplerSettings {
    /// `decision_wait`.
    pub decision_wait: Duration,
    /// `decision_wait_after_root_received`; `None` when off.
    pub decision_wait_after_root: Option<Duration>,
    /// `num_traces`: above it, the oldest traces are decided early.
    pub num_traces: usize,
    /// `decision_cache.sampled_cache_size`.
    pub sampled_cache_size: usize,
    /// `decision_cache.non_sampled_cache_size`.
    pub non_sampled_cache_size: usize,
    /// `maximum_trace_size_bytes`; `None` when off.
    pub maximum_trace_size_bytes: Option<usize>,
    /// `block_on_overflow`: refuse intake at `num_traces` instead of deciding early.
    pub block_on_overflow: bool,
    /// `drop_pending_traces_on_shutdown`.
    pub drop_pending_traces_on_shutdown: bool,
    /// `record_policy`: name the deciding policy on kept spans' scopes.
    pub record_policy: bool,
}

impl From<&crate::config::TailSamplingConfig> for SamplerSettings {
    fn from(config: &crate::config::TailSamplingConfig) -> Self {
        Self {
            decision_wait: config.decision_wait,
            decision_wait_after_root: config.decision_wait_after_root_received,
            num_traces: config.num_traces.get(),
            sampled_cache_size: config.sampled_cache_size,
            non_sampled_cache_size: config.non_sampled_cache_size,
            maximum_trace_size_bytes: config.maximum_trace_size_bytes.map(|n| n.get()),
            block_on_overflow: config.block_on_overflow,
            drop_pending_traces_on_shutdown: config.drop_pending_traces_on_shutdown,
            record_policy: config.record_policy,
        }
    }
}

impl SamplerSettings {
    /// The held-trace count at which intake is refused even without `block_on_overflow`:
    /// the early decisions that `num_traces` triggers have fallen this far behind (the
    /// decision task is waiting on a slow exporter).
    fn hard_trace_limit(&self) -> usize {
        self.num_traces
            .saturating_mul(2)
            .max(self.num_traces + 1024)
    }

    /// The held-trace count that early decisions bring the buffer down to once it is over
    /// `num_traces`: 1/64 below it (781 traces under the default 50,000; none under 64).
    ///
    /// Deciding only the excess made a round of decisions, and a wake-up of the decision
    /// task, for every request that brought a new trace while the buffer was full. With
    /// the headroom, one round makes room for many requests. The traces it decides are the
    /// oldest, those the next requests would have made due a moment later.
    fn num_traces_low_water(&self) -> usize {
        self.num_traces - self.num_traces / 64
    }
}

/// One running `tail_sampling` processor.
pub struct TailSampler {
    settings: SamplerSettings,
    policies: PolicySet,
    shards: Box<[Mutex<Shard>]>,
    /// Chooses a trace's shard (keyed apart from the shards' maps, so that the traces of
    /// one shard do not share their map's bucket bits).
    hasher: TraceIdHasher,
    traces_held: AtomicUsize,
    /// Spans of pending traces.
    pending_spans: AtomicUsize,
    /// Bytes charged for pending traces.
    pending_bytes: AtomicUsize,
    /// Bytes charged for the origins of pending traces (and, briefly, of the requests
    /// being ingested or framed).
    origin_account: Arc<OriginAccount>,
    /// Late spans of kept traces, one framed and charged request per ingested request, in
    /// arrival order, waiting for room downstream.
    outbox: Mutex<VecDeque<TraceBatch>>,
    /// Late spans held: in the outbox, or on their way out of it until downstream took
    /// them.
    late_spans: AtomicUsize,
    /// Encoded bytes of those late spans' requests (what their charges hold).
    late_bytes: AtomicUsize,
    /// Wakes the decision task.
    wake: DecisionWake,
    metrics: SamplerMetrics,
    budget: Arc<MemoryBudget>,
    /// The ring this sampler follows (`hand_off`), if any.
    hand_off: Option<HandOffLink>,
    /// Turns true when the decision task has ended: the hand-off task then flushes and
    /// ends.
    stopped: watch::Sender<bool>,
}

/// A span of a trace owned by another replica, forwarded at arrival.
struct ForwardSpan<'a> {
    /// Index of its `ScopeSpans` in the request's origins.
    origin: usize,
    span: &'a SpanView,
}

/// How a round of decisions treats traces not yet due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Force {
    /// Only due traces (and the oldest, over `num_traces` or under memory pressure).
    No,
    /// Every trace: the sampler is stopping.
    All,
    /// Every trace, counted as decided early because the replica is leaving.
    Leaving,
}

/// A late span of a kept trace, found while a request is ingested.
struct LateSpan<'a> {
    /// Index of its `ScopeSpans` in the request's origins.
    origin: usize,
    span: &'a SpanView,
    kept: KeptDecision,
}

/// One span of a request being ingested: where it goes and what it came under.
#[derive(Clone, Copy)]
struct Incoming<'a> {
    /// The shard its trace id hashes to.
    shard: usize,
    /// Index of its `ResourceSpans` in the request (and of that resource's matches).
    resource: usize,
    /// Index of its `ScopeSpans` in the request's origins.
    origin: usize,
    /// The span.
    span: &'a SpanView,
}

/// The traces decided under a round's shard locks, on their way out of the buffer.
#[derive(Default)]
struct Decided {
    /// The kept traces, in decision order, with what their spans must carry.
    kept: Vec<(Box<PendingTrace>, KeptDecision)>,
    /// The traces not kept, to free outside the shard locks. Boxed as the shard's map
    /// holds them: taking one out moves a pointer, not the whole trace.
    #[allow(clippy::vec_box)]
    dropped: Vec<Box<PendingTrace>>,
}

/// What a receiver holds to feed a sampler. When every clone is dropped (the receivers
/// have stopped), the decision task decides what is left and ends.
#[derive(Clone)]
pub struct SamplerIngest {
    sampler: Arc<TailSampler>,
    _alive: mpsc::Sender<()>,
}

impl std::fmt::Debug for SamplerIngest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SamplerIngest").finish_non_exhaustive()
    }
}

impl SamplerIngest {
    /// Checks that the buffer can take more traces, and the outbox more late spans.
    ///
    /// # Errors
    ///
    /// [`PipelineError::Overloaded`] at `num_traces` with `block_on_overflow`, when
    /// early decisions have fallen far behind, or while late spans of kept traces wait for
    /// room downstream and the memory budget is at its soft limit (without a memory
    /// limit: while `num_traces` of them wait).
    pub fn check_room(&self) -> Result<(), PipelineError> {
        self.sampler.check_room()
    }

    /// Buffers the spans of a validated request; see [`TailSampler::ingest`].
    ///
    /// # Errors
    ///
    /// [`PipelineError::Malformed`] if the bytes do not parse (the receiver validated
    /// them, so this is a bug) .
    pub fn ingest(&self, batch: &TraceBatch) -> Result<(), PipelineError> {
        self.sampler.ingest(batch)
    }

    /// Buffers the spans of a request the receiver has already parsed; see
    /// [`TailSampler::ingest_parsed`].
    pub fn ingest_parsed(&self, resources: &[ResourceSpansView]) {
        self.sampler.ingest_parsed(resources);
    }

    /// The sampler behind this handle.
    pub fn sampler(&self) -> &Arc<TailSampler> {
        &self.sampler
    }
}

impl TailSampler {
    /// A sampler with `shards` shards (at least one), and the handle receivers feed it
    /// through. Run [`TailSampler::run`] with the returned receiver to make decisions.
    pub fn start(
        settings: SamplerSettings,
        policies: PolicySet,
        metrics: SamplerMetrics,
        budget: Arc<MemoryBudget>,
        shards: usize,
    ) -> (SamplerIngest, mpsc::Receiver<()>) {
        Self::start_following(settings, policies, metrics, budget, shards, None)
    }

    /// [`start`](Self::start) for a sampler that follows `peers`' ring (`hand_off`): run
    /// [`run_hand_off`](Self::run_hand_off) too. `metrics` should carry the hand-off
    /// counters ([`SamplerMetricFamilies::for_hand_off`]).
    pub fn start_following(
        settings: SamplerSettings,
        policies: PolicySet,
        metrics: SamplerMetrics,
        budget: Arc<MemoryBudget>,
        shards: usize,
        peers: Option<(Arc<dyn Peers>, HandOffSettings)>,
    ) -> (SamplerIngest, mpsc::Receiver<()>) {
        let shards = (0..shards.max(1))
            .map(|_| {
                Mutex::new(Shard::new(
                    settings.sampled_cache_size.div_ceil(shards.max(1)),
                    settings.non_sampled_cache_size.div_ceil(shards.max(1)),
                ))
            })
            .collect();
        let sampler = Arc::new(Self {
            settings,
            policies,
            shards,
            hasher: cache::trace_id_hasher(),
            traces_held: AtomicUsize::new(0),
            pending_spans: AtomicUsize::new(0),
            pending_bytes: AtomicUsize::new(0),
            origin_account: OriginAccount::new(budget.clone()),
            outbox: Mutex::new(VecDeque::new()),
            late_spans: AtomicUsize::new(0),
            late_bytes: AtomicUsize::new(0),
            wake: DecisionWake::new(),
            metrics,
            budget,
            hand_off: peers.map(|(peers, settings)| HandOffLink::new(peers, settings)),
            stopped: watch::channel(false).0,
        });
        let (alive, closed) = mpsc::channel(1);
        (
            SamplerIngest {
                sampler,
                _alive: alive,
            },
            closed,
        )
    }

    /// Traces currently held.
    pub fn traces_held(&self) -> usize {
        self.traces_held.load(Ordering::Relaxed)
    }

    /// Bytes currently held by the sampler: charged for pending traces, plus the requests
    /// of late spans waiting for room downstream ([`late_bytes_held`](Self::late_bytes_held)).
    pub fn bytes_held(&self) -> usize {
        self.pending_bytes() + self.late_bytes_held() + self.hand_off_bytes_held()
    }

    /// Bytes of hand-offs waiting for the exporter.
    fn hand_off_bytes_held(&self) -> usize {
        self.hand_off.as_ref().map_or(0, HandOffLink::bytes_held)
    }

    /// Spans of hand-offs waiting for the exporter.
    fn hand_off_spans_held(&self) -> usize {
        self.hand_off.as_ref().map_or(0, HandOffLink::spans_held)
    }

    /// Bytes charged for pending traces, their origins included.
    fn pending_bytes(&self) -> usize {
        self.pending_bytes.load(Ordering::Relaxed) + self.origin_account.bytes()
    }

    /// Late spans of kept traces held until downstream takes them.
    pub fn late_spans_held(&self) -> usize {
        self.late_spans.load(Ordering::Relaxed)
    }

    /// Encoded bytes of the late spans' requests held until downstream takes them: exactly
    /// what their charges hold in the memory budget.
    pub fn late_bytes_held(&self) -> usize {
        self.late_bytes.load(Ordering::Relaxed)
    }

    fn check_room(&self) -> Result<(), PipelineError> {
        let held = self.traces_held();
        let full = if self.settings.block_on_overflow {
            held >= self.settings.num_traces
        } else {
            held >= self.settings.hard_trace_limit()
        };
        let reason = if full {
            "tail sampling buffer full"
        } else if self.late_spans_held() > 0 && self.late_spans_at_bound() {
            "late spans of kept traces wait for room downstream"
        } else if self.hand_off_spans_held() > 0 && self.hand_off_at_bound() {
            "hand-offs wait for room in the peers' queues"
        } else {
            return Ok(());
        };
        self.wake.wake();
        Err(PipelineError::Overloaded {
            reason,
            retry_after: crate::error::RETRY_AFTER,
        })
    }

    /// True when late spans may not be added: the memory budget is at its soft limit, the
    /// rule for everything it holds (the limiter refuses at the same line). Without a
    /// memory limit, the outbox is bounded in count instead, like the buffer: at most
    /// `num_traces` late spans. Requests admitted just below the bound (one per receiver
    /// task at most) may pass it by their own late spans; the next ones are refused.
    fn late_spans_at_bound(&self) -> bool {
        if self.budget.soft_limit() == usize::MAX {
            self.late_spans_held() >= self.settings.num_traces
        } else {
            self.budget.used() >= self.budget.soft_limit()
        }
    }

    /// True when hand-offs may not be added: as for late spans, the budget is at its soft
    /// limit, or, without a memory limit, `num_traces` spans wait.
    fn hand_off_at_bound(&self) -> bool {
        if self.budget.soft_limit() == usize::MAX {
            self.hand_off_spans_held() >= self.settings.num_traces
        } else {
            self.budget.used() >= self.budget.soft_limit()
        }
    }

    fn shard_of(&self, trace_id: &TraceId) -> usize {
        (self.hasher.hash_one(trace_id) % self.shards.len() as u64) as usize
    }

    fn lock(&self, shard: usize) -> MutexGuard<'_, Shard> {
        // A panic while holding a shard leaves it consistent enough to keep serving:
        // every mutation is a whole insert or remove.
        self.shards[shard]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Buffers every span of `batch` (an already validated request) in its trace, or
    /// passes it on / drops it at once when its trace was already decided.
    ///
    /// # Errors
    ///
    /// [`PipelineError::Malformed`] when the bytes do not parse.
    pub fn ingest(&self, batch: &TraceBatch) -> Result<(), PipelineError> {
        // Validated by the receiver: read, not validated again.
        let resources = parse_validated_traces_request(&batch.request)
            .map_err(|error| PipelineError::Malformed(error.to_string()))?;
        self.ingest_parsed(&resources);
        Ok(())
    }

    /// [`ingest`](Self::ingest) of a request already parsed by
    /// [`parse_traces_request`](crate::otlp::parse_traces_request) (the receiver's validating walk), so it is not walked
    /// twice.
    pub fn ingest_parsed(&self, resources: &[ResourceSpansView]) {
        self.ingest_arrival(resources, Arrival::Sent);
    }

    /// [`ingest_parsed`](Self::ingest_parsed) of a request that arrived as `arrival` says:
    /// a sampler that follows a ring forwards the spans of traces another replica owns
    /// when they were sent, and keeps them when they were handed off (see the `hand_off`
    /// module).
    pub fn ingest_arrival(&self, resources: &[ResourceSpansView], arrival: Arrival) {
        let now = Instant::now();
        // One look at the ring per request; `None` keeps every trace here.
        let ownership = match (&self.hand_off, arrival) {
            (Some(link), Arrival::Sent) => Some(link.ownership()),
            _ => None,
        };
        let not_before = self.hand_off.as_ref().and_then(|link| link.not_before(now));

        // One origin per ScopeSpans (its resource copied once per ResourceSpans), shared
        // by the traces of this request. Pending traces copy their spans into their arenas
        // and late spans are framed into a request of their own, so nothing held after this
        // call points into the request buffer.
        let mut matches = Vec::with_capacity(resources.len());
        let mut origins = Vec::with_capacity(resources.iter().map(|r| r.scope_spans.len()).sum());
        let mut spans = Vec::with_capacity(
            resources
                .iter()
                .flat_map(|r| &r.scope_spans)
                .map(|s| s.spans.len())
                .sum(),
        );
        let mut decisions = 0usize;
        for resource_spans in resources {
            if arrival == Arrival::HandOff
                && resource_spans.resource == *hand_off::decisions_resource()
            {
                decisions += self.take_decisions(resource_spans, now);
                continue;
            }
            let resource_index = matches.len();
            matches.push(self.policies.observe_resource(&resource_spans.resource));
            let resource = Bytes::copy_from_slice(&resource_spans.resource);
            let resource_schema_url = Bytes::copy_from_slice(&resource_spans.schema_url);
            for scope_spans in &resource_spans.scope_spans {
                let origin_index = origins.len();
                origins.push(Origin::new(
                    resource.clone(),
                    resource_schema_url.clone(),
                    Bytes::copy_from_slice(&scope_spans.scope),
                    Bytes::copy_from_slice(&scope_spans.schema_url),
                    &self.origin_account,
                ));
                for span in &scope_spans.spans {
                    spans.push(Incoming {
                        shard: self.shard_of(&span.trace_id),
                        resource: resource_index,
                        origin: origin_index,
                        span,
                    });
                }
            }
        }
        // Grouped by shard (each shard is locked once per request) and by trace within it
        // (each trace is looked up once and its arena grown once), every trace's spans in
        // arrival order.
        let spans = group_by_shard_and_trace(&spans, self.shards.len());

        let mut late = Vec::new();
        let mut forward = Vec::new();
        let mut received_traces = 0usize;
        let mut wake = false;
        // The earliest deadline this request set.
        let mut earliest_set: Option<Instant> = None;
        let mut rest = &spans[..];
        while let Some(first) = rest.first() {
            let shard_index = first.shard;
            let in_shard = rest.iter().take_while(|a| a.shard == shard_index).count();
            let (shard_spans, after) = rest.split_at(in_shard);
            rest = after;
            let mut shard = self.lock(shard_index);
            let mut trace_rest = shard_spans;
            while let Some(first) = trace_rest.first() {
                let trace_id = first.span.trace_id;
                let in_trace = trace_rest
                    .iter()
                    .take_while(|a| a.span.trace_id == trace_id)
                    .count();
                let (trace_spans, after) = trace_rest.split_at(in_trace);
                trace_rest = after;
                if arrival == Arrival::HandOff {
                    received_traces += 1;
                }
                if let Some(ownership) = &ownership
                    && ownership.owner(&trace_id) == Owner::Peer
                    && !shard.traces.contains_key(&trace_id)
                    && shard.cache.get(&trace_id).is_none()
                {
                    forward.extend(trace_spans.iter().map(|arrival| ForwardSpan {
                        origin: arrival.origin,
                        span: arrival.span,
                    }));
                    continue;
                }
                if let Some(due) = self.ingest_trace(
                    &mut shard,
                    (now, not_before),
                    &matches,
                    &origins,
                    trace_spans,
                    &mut late,
                ) {
                    earliest_set = Some(earliest_set.map_or(due, |earliest| earliest.min(due)));
                }
            }
        }
        if !late.is_empty() {
            // Framed outside the shard locks: it copies bytes and may rewrite spans.
            let batch = self.frame_late(&origins, late);
            self.late_spans
                .fetch_add(batch.span_count, Ordering::Relaxed);
            self.late_bytes
                .fetch_add(batch.byte_len(), Ordering::Relaxed);
            self.lock_outbox().push_back(batch);
            wake = true;
        }
        if let Some(link) = &self.hand_off {
            self.count_arrival(
                arrival,
                received_traces,
                spans.len() - forward.len(),
                forward.len(),
            );
            if decisions > 0 {
                wake = true;
            }
            if !forward.is_empty() {
                link.push(frame_forward(&origins, forward).charged(&self.budget));
            }
        }
        let over =
            !self.settings.block_on_overflow && self.traces_held() > self.settings.num_traces;
        if over || self.budget.under_pressure() {
            wake = true;
        }
        self.publish_gauges();
        if wake {
            self.wake.wake();
        } else if let Some(deadline) = earliest_set {
            // After the shard locks: see `DecisionWake` for why no deadline is missed.
            self.wake.wake_by(deadline);
        }
    }

    /// Takes the keep decisions a peer handed over (`resource_spans` holds decision
    /// records, see the `hand_off` module) into the decision caches, at `now`. A trace
    /// already held here (its late spans came first) is made due at once, to be kept as
    /// decided. Records of policies this sampler does not have, and traces already decided
    /// here, are skipped. Returns the traces made due.
    fn take_decisions(&self, resource_spans: &ResourceSpansView, now: Instant) -> usize {
        let mut received = 0u64;
        let mut due = 0usize;
        for span in resource_spans.scope_spans.iter().flat_map(|s| &s.spans) {
            received += 1;
            let record = hand_off::read_decision(span);
            let Some(policy) = self
                .policies
                .names()
                .iter()
                .position(|n| *n == record.policy)
            else {
                continue;
            };
            let kept = KeptDecision {
                policy,
                threshold: record.threshold,
                decided_at: now,
                moved: true,
            };
            let mut shard = self.lock(self.shard_of(&record.trace_id));
            if shard.cache.get(&record.trace_id).is_some() {
                continue;
            }
            match shard.traces.get_mut(&record.trace_id) {
                Some(trace) => {
                    trace.imposed = Some(Box::new(kept));
                    shard.reschedule(record.trace_id, now, DeadlineKind::Now);
                    due += 1;
                }
                None => shard.cache.insert_kept(record.trace_id, kept),
            }
        }
        if let Some(metrics) = &self.metrics.hand_off {
            metrics.decisions_received.inc_by(received);
        }
        due
    }

    /// Counts, for a sampler that follows a ring, the traces and spans a request handed
    /// over (`arrival` a hand-off), and the spans it forwarded.
    fn count_arrival(&self, arrival: Arrival, traces: usize, kept: usize, forwarded: usize) {
        let Some(metrics) = &self.metrics.hand_off else {
            return;
        };
        if arrival == Arrival::HandOff {
            metrics.traces_received.inc_by(traces as u64);
            metrics.spans_received.inc_by(kept as u64);
        }
        if forwarded > 0 {
            metrics.forwarded_spans.inc_by(forwarded as u64);
            metrics.spans_sent.inc_by(forwarded as u64);
            self.metrics
                .record_spans(SpanOutcome::HandedOff, forwarded as u64);
        }
    }

    /// Folds the spans of one trace from one request (`spans`, in arrival order, all of
    /// the same trace id) into its shard, one span after the other. Returns the trace's
    /// deadline when this set it (a new trace, or a root span or the trace's size moved it
    /// earlier): the decision task may be sleeping past it. Late spans of a kept trace go
    /// to `late`. `times` is the arrival time, and the earliest a root span may make the
    /// trace due (see the `hand_off` module).
    fn ingest_trace<'a>(
        &self,
        shard: &mut Shard,
        times: (Instant, Option<Instant>),
        matches: &[policy::ResourceMatches],
        origins: &[Arc<Origin>],
        spans: &[Incoming<'a>],
        late: &mut Vec<LateSpan<'a>>,
    ) -> Option<Instant> {
        let first = spans.first()?;
        let (now, not_before) = times;
        let trace_id = first.span.trace_id;
        // A new trace's deadline is entered in the index once its spans are folded in, so
        // that a trace arriving whole with its root is entered once, at its root deadline.
        let (entry, new) = match shard.traces.entry(trace_id) {
            Entry::Occupied(entry) => (entry.into_mut(), false),
            Entry::Vacant(vacant) => {
                match shard.cache.get(&trace_id) {
                    Some(Cached::Kept(kept)) => {
                        if kept.moved
                            && let Some(metrics) = &self.metrics.hand_off
                        {
                            metrics.late_after_move.inc_by(spans.len() as u64);
                        }
                        let age = now.saturating_duration_since(kept.decided_at).as_secs_f64();
                        for arrival in spans {
                            self.metrics.record_late(true, 1, Some(age));
                            late.push(LateSpan {
                                origin: arrival.origin,
                                span: arrival.span,
                                kept,
                            });
                        }
                        return None;
                    }
                    Some(Cached::NotKept) => {
                        for _ in spans {
                            self.metrics.record_late(false, 1, None);
                        }
                        return None;
                    }
                    None => {}
                }
                let deadline = now + self.settings.decision_wait;
                self.traces_held.fetch_add(1, Ordering::Relaxed);
                self.metrics.new_trace_id_received.inc();
                let trace = vacant.insert(PendingTrace::new(
                    self.policies.new_facts(trace_id),
                    now,
                    deadline,
                ));
                (trace, true)
            }
        };
        entry.reserve(
            spans.len(),
            spans.iter().map(|arrival| arrival.span.bytes.len()).sum(),
        );
        // The earliest deadline asked for by a root span or an oversized trace; deadlines
        // only ever move earlier here.
        let mut earlier: Option<(Instant, DeadlineKind)> = None;
        for arrival in spans {
            let span = arrival.span;
            self.policies
                .observe_span(&mut entry.facts, &matches[arrival.resource], span);
            entry.push_span(&origins[arrival.origin], &span.bytes);
            if span.parent_span_id.is_none() && !entry.root_seen {
                entry.root_seen = true;
                if let Some(wait) = self.settings.decision_wait_after_root {
                    let due = not_before.map_or(now + wait, |at| at.max(now + wait));
                    if due < earlier.map_or(entry.deadline, |(at, _)| at) {
                        earlier = Some((due, DeadlineKind::Root));
                    }
                }
            }
            let too_large = self
                .settings
                .maximum_trace_size_bytes
                .is_some_and(|max| entry.span_bytes_len() > max);
            if too_large && entry.early.is_none() {
                entry.early = Some(EarlyReason::TraceTooLarge);
                self.metrics.record_early(EarlyReason::TraceTooLarge);
                earlier = Some((now, DeadlineKind::Now));
            }
        }
        let footprint = entry.footprint();
        let grown = footprint.saturating_sub(entry.charged);
        entry.charged = footprint;
        shard.bytes += grown;
        shard.spans += spans.len();
        self.pending_spans.fetch_add(spans.len(), Ordering::Relaxed);
        self.pending_bytes.fetch_add(grown, Ordering::Relaxed);
        self.budget.charge(grown);
        match earlier {
            Some((due, kind)) => {
                if new {
                    entry.deadline = due;
                    shard.deadlines.push(kind, due, trace_id);
                } else {
                    buffer::reschedule(&mut shard.deadlines, trace_id, entry, due, kind);
                }
                Some(due)
            }
            None => {
                if new {
                    shard
                        .deadlines
                        .push(DeadlineKind::FirstSpan, entry.deadline, trace_id);
                    Some(entry.deadline)
                } else {
                    None
                }
            }
        }
    }

    /// Uncounts a trace that left the buffer.
    fn release(&self, trace: &PendingTrace) {
        self.traces_held.fetch_sub(1, Ordering::Relaxed);
        self.pending_spans
            .fetch_sub(trace.span_count(), Ordering::Relaxed);
        self.pending_bytes
            .fetch_sub(trace.charged, Ordering::Relaxed);
        self.budget.release(trace.charged);
    }

    /// Spans currently held by the sampler: in pending traces, plus the late spans waiting
    /// for room downstream ([`late_spans_held`](Self::late_spans_held)). What is held when
    /// the decision task is stopped before it finished is lost: this is its count.
    pub fn spans_held(&self) -> usize {
        self.pending_spans.load(Ordering::Relaxed)
            + self.late_spans_held()
            + self.hand_off_spans_held()
    }

    fn publish_gauges(&self) {
        self.metrics.traces_on_memory.set(self.traces_held() as i64);
        self.metrics.bytes_held.set(self.bytes_held() as i64);
        self.metrics.spans_held.set(self.spans_held() as i64);
        self.metrics
            .late_bytes_held
            .set(self.late_bytes_held() as i64);
        self.metrics
            .late_spans_held
            .set(self.late_spans_held() as i64);
    }

    /// The hand-off task's stop signal: true once [`run`](Self::run) has ended.
    fn stopped(&self) -> watch::Receiver<bool> {
        self.stopped.subscribe()
    }

    /// How many of the oldest traces must be decided before their deadline, and why:
    /// while `draining` (the round found more than `num_traces` held), those above
    /// [`num_traces_low_water`](SamplerSettings::num_traces_low_water); or enough to bring
    /// the memory budget back to its relief target (estimated from the average trace's
    /// footprint).
    fn early_decisions_needed(&self, draining: bool) -> (usize, EarlyReason) {
        let held = self.traces_held();
        // With block_on_overflow, num_traces refuses intake instead (see `check_room`).
        let over_count = if draining && !self.settings.block_on_overflow {
            held.saturating_sub(self.settings.num_traces_low_water())
        } else {
            0
        };
        // Only pending traces can be decided early: late spans already are.
        let excess_bytes = self.budget.excess().min(self.pending_bytes());
        let for_memory = if excess_bytes > 0 && held > 0 {
            let average = (self.pending_bytes() / held).max(1);
            excess_bytes.div_ceil(average).min(held)
        } else {
            0
        };
        if for_memory > over_count {
            (for_memory, EarlyReason::MemoryPressure)
        } else {
            (over_count, EarlyReason::NumTraces)
        }
    }

    /// The `n`-th earliest deadline (1-based) over all shards; the latest of them when
    /// fewer than `n` traces are held; `None` when none is.
    ///
    /// The shards' deadlines, each already in order, are merged through a heap, so the
    /// walk reads about `n` live entries in all. Taking the first `n` of every shard and
    /// selecting among them read up to `n` per shard, each a map look-up: with the buffer
    /// at `num_traces`, that was a fifth of the gateway's CPU. Every shard is locked for
    /// the walk (in index order; no other path holds two shards at once), so that the
    /// entries stay put while they are read.
    fn nth_deadline(&self, n: usize) -> Option<Instant> {
        let shards: Vec<MutexGuard<'_, Shard>> = (0..self.shards.len())
            .map(|shard| self.lock(shard))
            .collect();
        let mut queues: Vec<_> = shards
            .iter()
            .map(|shard| shard.deadlines_in_order())
            .collect();
        let mut fronts = BinaryHeap::with_capacity(queues.len());
        for (shard, queue) in queues.iter_mut().enumerate() {
            if let Some(deadline) = queue.next() {
                fronts.push(Reverse((deadline, shard)));
            }
        }
        let mut nth = None;
        for _ in 0..n {
            let Some(Reverse((deadline, shard))) = fronts.pop() else {
                break;
            };
            nth = Some(deadline);
            if let Some(next) = queues[shard].next() {
                fronts.push(Reverse((next, shard)));
            }
        }
        nth
    }

    /// The earliest deadline of any held trace.
    fn next_deadline(&self) -> Option<Instant> {
        (0..self.shards.len())
            .filter_map(|shard| self.lock(shard).next_deadline())
            .min()
    }

    /// Makes decisions until every [`SamplerIngest`] handle is dropped, then decides (or,
    /// with `drop_pending_traces_on_shutdown`, drops and counts) what is left, passes the
    /// kept traces and every late span still held to `output`, and returns.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: what the sampler holds when the future is dropped is lost.
    /// [`spans_held`](Self::spans_held) then counts the pending and late spans among it
    /// (not a batch of decided traces that was being passed on: those spans are already
    /// counted as sampled).
    pub async fn run(self: Arc<Self>, mut intake_closed: mpsc::Receiver<()>, output: Downstream) {
        let mut open = true;
        let mut last_round = Instant::now();
        while open {
            self.wake.replanning();
            let now = Instant::now();
            let wake_at = self.next_deadline().map_or(now + IDLE_TICK, |due| {
                due.max(last_round + ROUND_SPACING).min(now + IDLE_TICK)
            });
            self.wake.plan(wake_at);
            tokio::select! {
                biased;
                closed = intake_closed.recv() => {
                    if closed.is_none() {
                        open = false;
                    }
                }
                () = self.wake.notified() => {}
                () = tokio::time::sleep_until(wake_at) => {}
            }
            if open {
                last_round = Instant::now();
                self.decide_round(Force::No, &output).await;
            }
        }
        // A leaving replica hands on what reached it since the last sweep; what cannot be
        // handed off (no peer left) is decided here and counted.
        let leaving = self
            .hand_off
            .as_ref()
            .is_some_and(|link| link.ownership().leaving());
        if leaving {
            self.sweep(false);
        }
        if self.settings.drop_pending_traces_on_shutdown {
            self.drop_pending();
            self.decide_round(Force::No, &output).await;
        } else if leaving {
            self.decide_round(Force::Leaving, &output).await;
        } else {
            self.decide_round(Force::All, &output).await;
        }
        self.publish_gauges();
        self.stopped.send_replace(true);
    }

    /// Decides every due trace (every trace, with `force`), plus the oldest ones while
    /// more than `num_traces` are held, and passes the kept ones and any late spans on.
    ///
    /// Late spans leave before each batch of decided traces ([`send`](Self::send)) and
    /// once more at the end, so a late span waits for room downstream, not for the round:
    /// it may therefore leave before the batch of a trace decided in the same round.
    async fn decide_round(&self, force: Force, output: &Downstream) {
        let started = Instant::now();
        let mut writer = TraceRequestWriter::new();
        let mut votes = Vec::new();
        let mut thresholds = ThresholdWriter::default();
        // Once over num_traces, the round decides down to its low-water mark.
        let mut draining = false;
        loop {
            let now = Instant::now();
            draining |= self.traces_held() > self.settings.num_traces;
            // Over num_traces or under memory pressure, the oldest traces fall due now:
            // everything up to the deadline of the n-th earliest trace.
            let (early_count, mut early_reason) = self.early_decisions_needed(draining);
            if force == Force::Leaving {
                early_reason = EarlyReason::Leaving;
            }
            let due_by = if early_count > 0 {
                self.nth_deadline(early_count).map_or(now, |d| d.max(now))
            } else {
                now
            };
            let mut decided = Decided::default();
            let mut progress = false;
            for shard_index in 0..self.shards.len() {
                let mut shard = self.lock(shard_index);
                for _ in 0..DECISIONS_PER_LOCK {
                    let Some((trace_id, trace)) = shard.pop_due(due_by, force != Force::No) else {
                        break;
                    };
                    if trace.deadline > now && trace.early.is_none() {
                        self.metrics.record_early(early_reason);
                        if early_reason != EarlyReason::Leaving {
                            k8s_events::record(|| Transition::DecisionsForcedEarly {
                                reason: early_reason.label(),
                            });
                        }
                    }
                    self.release(&trace);
                    match self.decide(&mut shard, trace_id, &trace, now, &mut votes) {
                        Some(kept) => decided.kept.push((trace, kept)),
                        None => decided.dropped.push(trace),
                    }
                    progress = true;
                }
            }
            self.publish_gauges();
            drop(decided.dropped);
            for (trace, kept) in decided.kept {
                self.write_trace(&mut writer, &mut thresholds, *trace, kept);
                if writer.encoded_len() >= OUTPUT_REQUEST_BYTES {
                    self.send(output, std::mem::take(&mut writer)).await;
                }
            }
            if !progress {
                break;
            }
        }
        self.send(output, writer).await;
        // Late spans that arrived while the last batch waited for room.
        self.flush_outbox(output).await;
        self.metrics
            .decision_timer_latency
            .observe(started.elapsed().as_secs_f64() * 1000.0);
    }

    /// Decides one trace under its shard's lock (so a late span can never slip between
    /// the decision and the cache), records it, and returns what kept spans must carry.
    fn decide(
        &self,
        shard: &mut Shard,
        trace_id: TraceId,
        trace: &PendingTrace,
        now: Instant,
        votes: &mut Vec<(usize, Vote)>,
    ) -> Option<KeptDecision> {
        if let Some(imposed) = trace.imposed.as_deref().copied() {
            // Kept by the replica that owned the trace before a membership change: the
            // spans held here are its late spans.
            let kept = KeptDecision {
                decided_at: now,
                ..imposed
            };
            shard.cache.insert_kept(trace_id, kept);
            let spans = trace.span_count() as u64;
            if let Some(metrics) = &self.metrics.hand_off {
                metrics.late_after_move.inc_by(spans);
            }
            self.metrics
                .record_decision(true, spans, SpanOutcome::Sampled);
            return Some(kept);
        }
        let decision = self.policies.decide(&trace.facts, now.into_std(), votes);
        self.metrics.record_votes(votes);
        self.metrics.decision_delay.observe(
            now.saturating_duration_since(trace.first_seen)
                .as_secs_f64(),
        );
        let spans = trace.span_count() as u64;
        match decision {
            Decision::Sampled { policy, threshold } => {
                let kept = KeptDecision {
                    policy,
                    threshold,
                    decided_at: now,
                    moved: false,
                };
                shard.cache.insert_kept(trace_id, kept);
                self.metrics
                    .record_decision(true, spans, SpanOutcome::Sampled);
                Some(kept)
            }
            Decision::NotSampled | Decision::Dropped { .. } => {
                shard.cache.insert_not_kept(&trace_id);
                let outcome = if matches!(decision, Decision::NotSampled) {
                    SpanOutcome::NotSampled
                } else {
                    SpanOutcome::DroppedByPolicy
                };
                if trace.early == Some(EarlyReason::TraceTooLarge) {
                    self.metrics.dropped_too_large.inc();
                }
                self.metrics.record_decision(false, spans, outcome);
                None
            }
        }
    }

    /// Drops every pending trace undecided, counting its spans (shutdown with
    /// `drop_pending_traces_on_shutdown`).
    fn drop_pending(&self) {
        let mut dropped_spans = 0u64;
        for shard_index in 0..self.shards.len() {
            let mut shard = self.lock(shard_index);
            let far_future = Instant::now() + Duration::from_secs(86_400 * 365);
            while let Some((_id, trace)) = shard.pop_due(far_future, true) {
                self.release(&trace);
                dropped_spans += trace.span_count() as u64;
            }
        }
        if dropped_spans > 0 {
            self.metrics
                .record_spans(SpanOutcome::DroppedOnShutdown, dropped_spans);
            tracing::warn!(
                event = "sampler.pending_dropped_on_shutdown",
                spans = dropped_spans
            );
        }
    }

    /// Frames a kept trace's spans, writing its threshold (through `thresholds`, shared
    /// by the traces of a round) and the deciding policy.
    fn write_trace(
        &self,
        writer: &mut TraceRequestWriter,
        thresholds: &mut ThresholdWriter,
        trace: PendingTrace,
        kept: KeptDecision,
    ) {
        // The arena becomes the spans' shared buffer: a span leaving unchanged is a slice
        // of it, not a copy.
        let (arena, origins, mut spans) = trace.into_spans();
        let scopes: Vec<Bytes> = origins
            .iter()
            .map(|origin| self.output_scope(origin, kept))
            .collect();
        while let Some((at, range)) = spans.next(&arena) {
            let origin = &origins[at];
            let bytes = thresholds.output_span(arena.slice(range), kept.threshold);
            writer.push(
                &origin.resource,
                &origin.resource_schema_url,
                &scopes[at],
                &origin.scope_schema_url,
                &bytes,
            );
        }
    }

    /// Frames the late spans of one request (`late`, under `origins`) into a request of
    /// their own, charged to the budget: the one copy of their bytes, into an allocation
    /// of exactly the framed size, so the request they arrived in is not retained.
    fn frame_late(&self, origins: &[Arc<Origin>], mut late: Vec<LateSpan<'_>>) -> TraceBatch {
        // Spans of one origin and deciding policy share their wrappers when adjacent; the
        // stable sort keeps each trace's spans in arrival order within them.
        late.sort_by_key(|span| (span.origin, span.kept.policy));
        let mut writer = TraceRequestWriter::new();
        let mut scope: Option<(usize, usize, Bytes)> = None;
        let mut thresholds = ThresholdWriter::default();
        for span in late {
            let origin = &origins[span.origin];
            let output_scope = match &scope {
                Some((at, policy, written))
                    if *at == span.origin && *policy == span.kept.policy =>
                {
                    written.clone()
                }
                _ => {
                    let written = self.output_scope(origin, span.kept);
                    scope = Some((span.origin, span.kept.policy, written.clone()));
                    written
                }
            };
            let bytes = thresholds.output_span(span.span.bytes.clone(), span.kept.threshold);
            writer.push(
                &origin.resource,
                &origin.resource_schema_url,
                &output_scope,
                &origin.scope_schema_url,
                &bytes,
            );
        }
        TraceBatch::from(writer.finish()).charged(&self.budget)
    }

    fn lock_outbox(&self) -> MutexGuard<'_, VecDeque<TraceBatch>> {
        // Every mutation is a whole push or pop, so a panic cannot leave it inconsistent.
        self.outbox
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sends every late span in the outbox on, oldest first, waiting for room downstream.
    /// They count as held until downstream has taken them.
    async fn flush_outbox(&self, output: &Downstream) {
        while let Some((batch, held)) = self.next_late_request() {
            let spans = batch.span_count;
            self.pass_on(output, batch).await;
            self.late_spans.fetch_sub(spans, Ordering::Relaxed);
            self.late_bytes.fetch_sub(held, Ordering::Relaxed);
            self.publish_gauges();
        }
    }

    /// Takes the oldest requests of late spans out of the outbox, as one request of at
    /// most about [`OUTPUT_REQUEST_BYTES`] (requests queued behind a slow downstream are
    /// joined, as decided traces are), with the late bytes it accounts for.
    fn next_late_request(&self) -> Option<(TraceBatch, usize)> {
        let mut outbox = self.lock_outbox();
        let first = outbox.pop_front()?;
        let mut len = first.byte_len();
        let mut parts = Vec::new();
        while let Some(next) = outbox.front() {
            if len + next.byte_len() > OUTPUT_REQUEST_BYTES {
                break;
            }
            len += next.byte_len();
            parts.extend(outbox.pop_front());
        }
        drop(outbox);
        if parts.is_empty() {
            return Some((first, len));
        }
        // Concatenated requests are one request. The joined copy is charged before the
        // parts' charges are released with them.
        let mut joined = BytesMut::with_capacity(len);
        let mut spans = first.span_count;
        joined.extend_from_slice(&first.request);
        for part in &parts {
            joined.extend_from_slice(&part.request);
            spans += part.span_count;
        }
        Some((
            TraceBatch::new(joined.freeze(), spans).charged(&self.budget),
            len,
        ))
    }

    /// Passes the kept spans in `writer` on, charged to the budget while they travel,
    /// after the late spans waiting in the outbox.
    async fn send(&self, output: &Downstream, writer: TraceRequestWriter) {
        self.flush_outbox(output).await;
        if writer.is_empty() {
            return;
        }
        self.pass_on(
            output,
            TraceBatch::from(writer.finish()).charged(&self.budget),
        )
        .await;
    }

    async fn pass_on(&self, output: &Downstream, batch: TraceBatch) {
        if let Err(lost) = output.send(batch).await {
            // Counted by the output; only the shutdown deadline leads here.
            tracing::debug!(event = "sampler.undelivered", spans = lost.items);
        }
    }

    fn output_scope(&self, origin: &Origin, kept: KeptDecision) -> Bytes {
        if !self.settings.record_policy {
            return origin.scope.clone();
        }
        let name = self
            .policies
            .names()
            .get(kept.policy)
            .map_or("", String::as_str);
        rewrite::add_scope_attribute(&origin.scope, POLICY_ATTRIBUTE, name)
    }
}

/// Hand-off (see the `hand_off` module): the task, and the sweep.
impl TailSampler {
    /// The hand-off task of a sampler that follows a ring: sweeps after membership changes
    /// (and while leaving), and hands the outbox to the exporter. Ends, with the outbox
    /// flushed, once the decision task ([`run`](Self::run)) has ended. Returns at once
    /// for a sampler without `hand_off`.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: hand-offs in the outbox are lost when the future is dropped.
    pub async fn run_hand_off(self: Arc<Self>) {
        let Some(link) = &self.hand_off else {
            return;
        };
        let mut stopped = self.stopped();
        let mut changes = link.ownership.clone();
        let mut sweep_at: Option<Instant> = None;
        // Recent decisions go with the first sweep after a change only (a leaving
        // replica sweeps again and again).
        let mut decisions_due = false;
        let mut ring_open = true;
        loop {
            link.flush().await;
            let leaving = link.ownership().leaving();
            let wake_at = match (sweep_at, leaving) {
                (_, true) => Some(Instant::now() + hand_off::LEAVING_SWEEP),
                (at, false) => at,
            };
            tokio::select! {
                biased;
                _ = stopped.wait_for(|stopped| *stopped) => break,
                changed = changes.changed(), if ring_open => {
                    if changed.is_err() {
                        ring_open = false;
                        continue;
                    }
                    let now_leaving = changes.borrow_and_update().leaving();
                    link.changed(Instant::now());
                    let wait = if now_leaving { Duration::ZERO } else { link.settings.debounce };
                    sweep_at = Some(Instant::now() + wait);
                    decisions_due = true;
                }
                () = link.wake.notified() => {}
                () = hand_off::sleep_until_some(wake_at) => {
                    sweep_at = None;
                    self.sweep(std::mem::take(&mut decisions_due));
                }
            }
        }
        link.flush().await;
    }

    /// Takes every undecided trace that another replica owns out of the buffer and queues
    /// it, whole, for its owner; with `decisions`, also the keep decisions of the last
    /// `decision_wait` for traces another replica owns (they stay cached here too).
    /// Returns the traces handed off.
    pub(super) fn sweep(&self, decisions: bool) -> usize {
        let Some(link) = &self.hand_off else {
            return 0;
        };
        let ownership = link.ownership();
        let mut moving: Vec<Box<PendingTrace>> = Vec::new();
        let mut records: Vec<hand_off::DecisionRecord> = Vec::new();
        let recent = Instant::now()
            .checked_sub(self.settings.decision_wait)
            .unwrap_or_else(Instant::now);
        for shard_index in 0..self.shards.len() {
            let mut shard = self.lock(shard_index);
            if decisions {
                let names = self.policies.names();
                records.extend(
                    shard
                        .cache
                        .kept_since(recent)
                        .filter(|(id, _)| ownership.owner(id) == Owner::Peer)
                        .map(|(trace_id, kept)| hand_off::DecisionRecord {
                            trace_id,
                            policy: names.get(kept.policy).cloned().unwrap_or_default(),
                            threshold: kept.threshold,
                        }),
                );
            }
            let leaving: Vec<TraceId> = shard
                .traces
                .keys()
                .filter(|id| ownership.owner(id) == Owner::Peer)
                .copied()
                .collect();
            for trace_id in leaving {
                if let Some(trace) = shard.take(&trace_id) {
                    self.release(&trace);
                    moving.push(trace);
                }
            }
        }
        let traces = moving.len();
        if traces == 0 && records.is_empty() {
            return 0;
        }
        let mut writer = TraceRequestWriter::new();
        for (index, record) in records.iter().enumerate() {
            hand_off::write_decision(&mut writer, record);
            if writer.encoded_len() >= hand_off::HAND_OFF_REQUEST_BYTES
                || index + 1 == records.len()
            {
                let framed = std::mem::take(&mut writer).finish();
                link.push(hand_off::records_batch(framed).charged(&self.budget));
            }
        }
        let mut spans = 0usize;
        for trace in moving {
            spans += trace.span_count();
            hand_off::write_unchanged(&mut writer, *trace);
            if writer.encoded_len() >= hand_off::HAND_OFF_REQUEST_BYTES {
                link.push(
                    TraceBatch::from(std::mem::take(&mut writer).finish()).charged(&self.budget),
                );
            }
        }
        if !writer.is_empty() {
            link.push(TraceBatch::from(writer.finish()).charged(&self.budget));
        }
        if let Some(metrics) = &self.metrics.hand_off {
            metrics.traces_sent.inc_by(traces as u64);
            metrics.spans_sent.inc_by(spans as u64);
            metrics.decisions_sent.inc_by(records.len() as u64);
        }
        self.metrics
            .record_spans(SpanOutcome::HandedOff, spans as u64);
        self.publish_gauges();
        tracing::info!(
            event = "sampler.handed_off",
            traces,
            spans,
            decisions = records.len(),
            leaving = ownership.leaving(),
        );
        traces
    }
}

/// `spans` (in arrival order, each of a shard below `shards`) grouped by shard, then by
/// trace id, each trace's spans in arrival order: the order of a stable sort by
/// `(shard, trace id)`, at a fraction of its cost. Spans arrive in runs of one trace
/// (an exporter writes a trace's spans of one resource together), so the runs are
/// sorted rather than the spans: a counting sort places them by shard, and each shard's
/// runs are sorted on compact `(trace id, first arrival index)` keys, which are
/// distinct, so an unstable sort gives the stable order.
fn group_by_shard_and_trace<'a>(spans: &[Incoming<'a>], shards: usize) -> Vec<Incoming<'a>> {
    /// A run of consecutive spans of one trace: its sort key (the big-endian trace id,
    /// which orders as the id's bytes do), where it starts, how many spans, its shard.
    struct Run {
        key: (u128, u32),
        len: u32,
        shard: usize,
    }
    let mut runs: Vec<Run> = Vec::new();
    let mut bounds = vec![0usize; shards + 1];
    for (index, span) in spans.iter().enumerate() {
        let key = u128::from_be_bytes(span.span.trace_id.0);
        match runs.last_mut() {
            Some(run) if run.key.0 == key => run.len += 1,
            _ => {
                // Requests are capped far below 2^32 spans.
                runs.push(Run {
                    key: (key, index as u32),
                    len: 1,
                    shard: span.shard,
                });
                bounds[span.shard + 1] += 1;
            }
        }
    }
    for shard in 0..shards {
        bounds[shard + 1] += bounds[shard];
    }
    let mut placed = vec![((0u128, 0u32), 0u32); runs.len()];
    let mut next = bounds.clone();
    for run in &runs {
        placed[next[run.shard]] = (run.key, run.len);
        next[run.shard] += 1;
    }
    for shard in 0..shards {
        placed[bounds[shard]..bounds[shard + 1]].sort_unstable_by_key(|(key, _)| *key);
    }
    let mut grouped = Vec::with_capacity(spans.len());
    for ((_, start), len) in placed {
        grouped.extend_from_slice(&spans[start as usize..(start + len) as usize]);
    }
    grouped
}

/// Frames spans forwarded to the replica that owns their traces, unchanged, into one
/// request (the one copy of their bytes; uncharged: the caller charges it).
fn frame_forward(origins: &[Arc<Origin>], mut spans: Vec<ForwardSpan<'_>>) -> TraceBatch {
    // Adjacent spans of one origin share their wrappers; the stable sort keeps each
    // trace's spans in arrival order.
    spans.sort_by_key(|span| span.origin);
    let mut writer = TraceRequestWriter::new();
    for span in spans {
        let origin = &origins[span.origin];
        writer.push(
            &origin.resource,
            &origin.resource_schema_url,
            &origin.scope,
            &origin.scope_schema_url,
            &span.span.bytes,
        );
    }
    TraceBatch::from(writer.finish())
}

/// Writes the threshold of kept traces on their spans, remembering the `trace_state`
/// that a span which came without one gets (the same for every such span of a trace,
/// and of every trace kept at the same threshold), so it is encoded once, not per span.
#[derive(Default)]
struct ThresholdWriter {
    /// The last threshold written on a span without a `trace_state`, and what was written.
    bare: Option<(Threshold, String)>,
    /// Where rewritten spans are written (see [`rewrite::replace_span_trace_state`]).
    chunk: BytesMut,
}

impl ThresholdWriter {
    /// A kept span's bytes as they leave: with `th` raised to the trace's threshold when
    /// it was kept by the probabilistic policy (equalizing: the threshold only rises).
    fn output_span(&mut self, span: Bytes, update: ThresholdUpdate) -> Bytes {
        let ThresholdUpdate::Raise(threshold) = update else {
            return span;
        };
        let Some(field) = rewrite::find_span_trace_state(&span) else {
            // Not well formed (the receiver's validation rules this out): left as it came.
            return span;
        };
        if field.value.is_empty() {
            let trace_state = match &self.bare {
                Some((at, written)) if *at == threshold => written,
                _ => {
                    let written = threshold::with_threshold("", threshold);
                    &self.bare.insert((threshold, written)).1
                }
            };
            return rewrite::replace_span_trace_state(&span, &field, trace_state, &mut self.chunk);
        }
        let incoming = threshold::read_ot(field.value).th;
        if incoming.is_some_and(|th| th >= threshold) {
            return span;
        }
        let raised: Threshold = incoming.map_or(threshold, |th| th.max(threshold));
        let trace_state = threshold::with_threshold(field.value, raised);
        rewrite::replace_span_trace_state(&span, &field, &trace_state, &mut self.chunk)
    }
}
