//! The trace buffer: per shard, a map of pending traces plus an ordered deadline index.
//!
//! # The deadline index
//!
//! A trace's deadline is its first span's arrival plus `decision_wait`, moved to its root
//! span's arrival plus `decision_wait_after_root_received`, or to "now" (an oversized
//! trace, a decision handed over by a peer). Deadlines set by one of these rules are set
//! in the order they fall due, so the index is one queue per rule, each sorted by
//! `(deadline, trace id)`: a deadline is appended in O(1), where an ordered set paid
//! O(log n) to insert it and again to remove it. A deadline that would not go at the
//! back of its queue (arrival times taken on different cores, a hand-off's `not_before`,
//! equal deadlines arriving out of trace id order) goes into an ordered set beside the
//! queues instead, at the ordered set's O(log n): no order of arrivals costs more than
//! before.
//!
//! Entries are invalidated lazily: moving a deadline adds an entry and leaves the old
//! one, and a trace taken out of the shard leaves its entry. An entry is live while its
//! trace is held with that very deadline; stale entries are skipped (and dropped) when
//! they reach the front of their queue, which every entry does within `decision_wait`.
//! The earliest live deadline over the queues is that of the ordered set, ties broken by
//! trace id as the set did, so traces fall due in exactly the set's order.
//!
//! A pending trace holds copies of its spans' wire bytes in one growing arena (one copy
//! per span, so the request buffers they came in are freed at once and the bytes held
//! are exactly what is counted), each span after a 4-byte header that is the trace's only
//! span index; the resource and scope each span came under (shared between the traces of
//! a request); and the policy facts folded in span by span. The trace itself is boxed in
//! its shard's map, so the map's empty slots cost 24 bytes each, not a whole trace.

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use tokio::time::Instant;

use super::cache::{DecisionCache, KeptDecision, TraceIdHasher, trace_id_hasher};
use super::metrics::EarlyReason;
use super::policy::TraceFacts;
use crate::limiter::MemoryBudget;
use crate::otlp::TraceId;

/// The resource and scope a span arrived under.
///
/// Shared by every trace of a request that has spans under it, and charged to the memory
/// budget once, from when it is made until the last trace (or framed request) holding it
/// lets go of it: counting it in each trace instead charged a 600-span request's two
/// origins a hundred times over.
#[derive(Debug)]
pub struct Origin {
    /// The encoded `Resource` body.
    pub resource: Bytes,
    /// `ResourceSpans.schema_url`.
    pub resource_schema_url: Bytes,
    /// The encoded `InstrumentationScope` body.
    pub scope: Bytes,
    /// `ScopeSpans.schema_url`.
    pub scope_schema_url: Bytes,
    /// Where this origin's bytes are charged, released on drop.
    account: Arc<OriginAccount>,
}

impl Origin {
    /// An origin of these bytes, charged to `account` until it is dropped.
    pub fn new(
        resource: Bytes,
        resource_schema_url: Bytes,
        scope: Bytes,
        scope_schema_url: Bytes,
        account: &Arc<OriginAccount>,
    ) -> Arc<Self> {
        let origin = Self {
            resource,
            resource_schema_url,
            scope,
            scope_schema_url,
            account: account.clone(),
        };
        account.charge(origin.byte_len());
        Arc::new(origin)
    }

    /// Bytes held by this origin (shared by every span that points at it), an upper
    /// bound: its copies and its own shared allocation as the allocator sizes them, and
    /// the shared headers its copies get once cloned. A resource shared by the origins of
    /// one `ResourceSpans` is counted in each, which errs on the safe side.
    pub fn byte_len(&self) -> usize {
        // Per copy: a `Bytes` made from a `Vec` allocates a shared header when cloned.
        const SHARED_HEADER: usize = 32;
        [
            &self.resource,
            &self.resource_schema_url,
            &self.scope,
            &self.scope_schema_url,
        ]
        .iter()
        .map(|bytes| allocation_size(bytes.len()) + SHARED_HEADER)
        .sum::<usize>()
            // The `Arc`'s allocation: its two counts and the origin.
            + allocation_size(std::mem::size_of::<Self>() + 2 * std::mem::size_of::<usize>())
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.account.release(self.byte_len());
    }
}

/// The bytes of a sampler's live origins, charged to its memory budget.
#[derive(Debug)]
pub struct OriginAccount {
    budget: Arc<MemoryBudget>,
    bytes: AtomicUsize,
}

impl OriginAccount {
    /// An account charging `budget`.
    pub fn new(budget: Arc<MemoryBudget>) -> Arc<Self> {
        Arc::new(Self {
            budget,
            bytes: AtomicUsize::new(0),
        })
    }

    /// Bytes held by live origins.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    fn charge(&self, bytes: usize) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.budget.charge(bytes);
    }

    fn release(&self, bytes: usize) {
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
        self.budget.release(bytes);
    }
}

/// A held span's header in its trace's arena: the span's length, with
/// [`NEW_ORIGIN`] set when the span is the first under a new origin.
const HEADER: usize = 4;

/// The header bit of a span that starts a new origin. A trace's spans are appended in
/// arrival order and an origin is appended whenever a span's origin differs from the
/// last one's, so the origin of each span is the previous span's or the next one: one bit
/// per span says which, and the arena needs no separate index.
const NEW_ORIGIN: u32 = 1 << 31;

/// A trace awaiting its decision.
///
/// Held in its shard's map behind a `Box`: the map's table runs between 7/16 and 7/8
/// full, and a slot of the boxed trace is 24 bytes where the trace itself is ~200.
pub struct PendingTrace {
    /// The facts policies decide on.
    pub facts: TraceFacts,
    /// The spans, back to back, each after a [`HEADER`]-byte header (see [`NEW_ORIGIN`]).
    arena: Vec<u8>,
    /// The distinct origins of the spans, in arrival order.
    origins: Vec<Arc<Origin>>,
    /// When the first span arrived.
    pub first_seen: Instant,
    /// When the trace is due for its decision.
    pub deadline: Instant,
    /// Bytes charged for this trace, as last computed.
    pub charged: usize,
    /// The keep decision another replica made for this trace, handed over after a
    /// membership change: the trace is due at once and kept as that replica decided.
    /// Boxed: it is rare, and it would double the size of every trace.
    pub imposed: Option<Box<KeptDecision>>,
    /// Spans held.
    span_count: u32,
    /// True once a root span (no parent) has arrived.
    pub root_seen: bool,
    /// Set when the trace is due early, with the reason.
    pub early: Option<EarlyReason>,
}

impl PendingTrace {
    /// An empty trace first seen at `now`, due at `deadline`.
    pub fn new(facts: TraceFacts, now: Instant, deadline: Instant) -> Box<Self> {
        Box::new(Self {
            facts,
            arena: Vec::new(),
            origins: Vec::new(),
            first_seen: now,
            deadline,
            charged: 0,
            imposed: None,
            span_count: 0,
            root_seen: false,
            early: None,
        })
    }

    /// Makes room for `spans` more spans of `bytes` encoded bytes in all, before they are
    /// pushed: a trace that arrives whole in one request gets an arena of exactly its size
    /// (growing span by span doubled the arena, holding up to twice the bytes, and copied
    /// it on every growth). A trace that grows again later grows by at least half, so a
    /// trace trickling in span by span is still copied O(1) times per byte.
    pub fn reserve(&mut self, spans: usize, bytes: usize) {
        let more = bytes + spans * HEADER;
        let arena = &mut self.arena;
        if arena.capacity() - arena.len() >= more {
            return;
        }
        let target = if arena.is_empty() {
            more
        } else {
            (arena.len() + more).max(arena.len() + arena.len() / 2)
        };
        arena.reserve_exact(target - arena.len());
    }

    /// Appends one span's bytes under `origin`.
    pub fn push_span(&mut self, origin: &Arc<Origin>, span: &[u8]) {
        let mut header = span.len() as u32;
        if !self
            .origins
            .last()
            .is_some_and(|last| Arc::ptr_eq(last, origin))
        {
            self.origins.push(origin.clone());
            header |= NEW_ORIGIN;
        }
        // Spans are at most a request long, and requests are capped far below 2 GiB.
        debug_assert!(span.len() < NEW_ORIGIN as usize);
        self.arena.extend_from_slice(&header.to_le_bytes());
        self.arena.extend_from_slice(span);
        self.span_count += 1;
    }

    /// Spans held.
    pub fn span_count(&self) -> usize {
        self.span_count as usize
    }

    /// Bytes this trace holds, an upper bound: itself, its arena and its list of origins
    /// as the allocator sizes them; its share of its shard's map (a map's table is at
    /// least 7/16 full, so up to 16/7 slots and control bytes per trace are counted as 3);
    /// and its deadline entries (a live one and, after a move, a stale one) in a queue up to
    /// half empty, counted as four. The origins themselves are charged on their own: see
    /// [`Origin`].
    pub fn footprint(&self) -> usize {
        allocation_size(std::mem::size_of::<Self>())
            + 3 * (std::mem::size_of::<(TraceId, Box<Self>)>() + 1)
            + 4 * std::mem::size_of::<(Instant, TraceId)>()
            + allocation_size(self.arena.capacity())
            + allocation_size(self.origins.capacity() * std::mem::size_of::<Arc<Origin>>())
    }

    /// The encoded size of the trace's spans.
    pub fn span_bytes_len(&self) -> usize {
        self.arena.len() - self.span_count() * HEADER
    }

    /// The trace's spans, for framing: the arena as one shared buffer, the origins, and
    /// each span's place in the buffer with the index of its origin, in arrival order.
    pub fn into_spans(self) -> (Bytes, Vec<Arc<Origin>>, HeldSpans) {
        (
            Bytes::from(self.arena),
            self.origins,
            HeldSpans {
                at: 0,
                origin: None,
            },
        )
    }
}

/// What the allocator sets aside for a request of `bytes` bytes (0 for none): jemalloc's
/// size classes, multiples of 16 bytes up to 128 and then four classes per doubling, so
/// that a 2,500-byte arena is counted as the 2,560 bytes it takes.
pub fn allocation_size(bytes: usize) -> usize {
    match bytes {
        0 => 0,
        1..=8 => 8,
        9..=128 => bytes.next_multiple_of(16),
        _ => {
            // The doubling `bytes` falls in, [2^k, 2^(k+1)), is split into four classes.
            let spacing = 1usize << ((usize::BITS - 1 - (bytes - 1).leading_zeros()) - 2);
            bytes.next_multiple_of(spacing)
        }
    }
}

/// Walks the spans of an arena given by [`PendingTrace::into_spans`]: yields each span's
/// origin index and byte range.
#[derive(Debug)]
pub struct HeldSpans {
    at: usize,
    origin: Option<usize>,
}

impl HeldSpans {
    /// The next span of `arena` (the arena these positions were handed out with).
    pub fn next(&mut self, arena: &[u8]) -> Option<(usize, std::ops::Range<usize>)> {
        let header = arena.get(self.at..self.at + HEADER)?;
        let header = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let origin = match self.origin {
            Some(origin) if header & NEW_ORIGIN == 0 => origin,
            Some(origin) => origin + 1,
            None => 0,
        };
        self.origin = Some(origin);
        let start = self.at + HEADER;
        let end = start + (header & !NEW_ORIGIN) as usize;
        self.at = end;
        Some((origin, start..end))
    }
}

/// Which rule set a deadline: each rule sets its deadlines in (nearly) the order they
/// fall due, so each has its own queue in [`Deadlines`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadlineKind {
    /// `decision_wait` after the first span.
    FirstSpan,
    /// `decision_wait_after_root_received` after the root span.
    Root,
    /// At once: the trace grew too large, or a peer handed over its decision.
    Now,
}

/// The deadline index of one shard: per [`DeadlineKind`], the `(deadline, trace id)`
/// entries set by that rule, sorted, plus the entries that came out of order; live or
/// stale (see the module docs).
#[derive(Debug, Default)]
pub struct Deadlines {
    queues: [VecDeque<(Instant, TraceId)>; 3],
    out_of_order: BTreeSet<(Instant, TraceId)>,
}

/// Where an entry is: a queue (by [`DeadlineKind`]), or [`OUT_OF_ORDER`].
type Source = usize;

/// The [`Source`] of the entries that came out of order.
const OUT_OF_ORDER: Source = 3;

impl Deadlines {
    /// Adds the entry `(deadline, trace_id)`: at the back of `kind`'s queue, or, when it
    /// would not go last there, among the entries that came out of order.
    pub fn push(&mut self, kind: DeadlineKind, deadline: Instant, trace_id: TraceId) {
        let queue = &mut self.queues[kind as usize];
        let entry = (deadline, trace_id);
        if queue.back().is_none_or(|last| *last <= entry) {
            queue.push_back(entry);
        } else {
            self.out_of_order.insert(entry);
        }
    }

    /// The earliest entry (live or stale), and where it is.
    fn earliest(&self) -> Option<(Source, (Instant, TraceId))> {
        // Called for every trace that falls due: a plain loop, the set looked at only
        // when it holds anything.
        let mut earliest: Option<(Source, (Instant, TraceId))> = None;
        for (kind, queue) in self.queues.iter().enumerate() {
            if let Some(entry) = queue.front()
                && earliest.is_none_or(|(_, first)| *entry < first)
            {
                earliest = Some((kind, *entry));
            }
        }
        if !self.out_of_order.is_empty()
            && let Some(entry) = self.out_of_order.first()
            && earliest.is_none_or(|(_, first)| *entry < first)
        {
            earliest = Some((OUT_OF_ORDER, *entry));
        }
        earliest
    }

    /// Removes the first entry of `source`.
    fn pop_first(&mut self, source: Source) {
        match self.queues.get_mut(source) {
            Some(queue) => {
                queue.pop_front();
            }
            None => {
                self.out_of_order.pop_first();
            }
        }
    }

    /// Entries held, live and stale.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum::<usize>() + self.out_of_order.len()
    }

    /// Every entry, live or stale, earliest first.
    fn in_order(&self) -> impl Iterator<Item = (Instant, TraceId)> + '_ {
        let mut next = [0usize; 3];
        let mut out_of_order = self.out_of_order.iter().copied().peekable();
        std::iter::from_fn(move || {
            let queued = self
                .queues
                .iter()
                .zip(next)
                .enumerate()
                .filter_map(|(kind, (queue, at))| queue.get(at).map(|entry| (kind, *entry)))
                .min_by_key(|(_, entry)| *entry);
            match (queued, out_of_order.peek()) {
                (Some((_, entry)), Some(other)) if *other < entry => out_of_order.next(),
                (Some((kind, entry)), _) => {
                    next[kind] += 1;
                    Some(entry)
                }
                (None, _) => out_of_order.next(),
            }
        })
    }
}

/// One shard of the buffer: the traces whose id hashes to it.
pub struct Shard {
    /// Pending traces by id.
    pub traces: HashMap<TraceId, Box<PendingTrace>, TraceIdHasher>,
    /// When each pending trace is due, earliest first (with stale entries: see the
    /// module docs).
    pub deadlines: Deadlines,
    /// Decisions of traces that have left the shard.
    pub cache: DecisionCache,
    /// Bytes charged for the pending traces of this shard.
    pub bytes: usize,
    /// Spans held in this shard.
    pub spans: usize,
}

impl Shard {
    /// An empty shard with caches of the given capacities.
    pub fn new(kept_cache: usize, not_kept_cache: usize) -> Self {
        Self {
            traces: HashMap::with_hasher(trace_id_hasher()),
            deadlines: Deadlines::default(),
            cache: DecisionCache::new(kept_cache, not_kept_cache),
            bytes: 0,
            spans: 0,
        }
    }

    /// Moves `trace_id`'s deadline to `deadline` (earlier or later), set by `kind`'s rule.
    pub fn reschedule(&mut self, trace_id: TraceId, deadline: Instant, kind: DeadlineKind) {
        if let Some(trace) = self.traces.get_mut(&trace_id) {
            reschedule(&mut self.deadlines, trace_id, trace, deadline, kind);
        }
    }

    /// Takes trace `trace_id` out of the shard, uncounting it from the shard's totals
    /// (its deadline entry goes stale); `None` when it is not held.
    pub fn take(&mut self, trace_id: &TraceId) -> Option<Box<PendingTrace>> {
        let trace = self.traces.remove(trace_id)?;
        self.bytes = self.bytes.saturating_sub(trace.charged);
        self.spans = self.spans.saturating_sub(trace.span_count());
        Some(trace)
    }

    /// Removes and returns the trace due first, if it is due by `now` (or at all, when
    /// `force` is set).
    pub fn pop_due(&mut self, now: Instant, force: bool) -> Option<(TraceId, Box<PendingTrace>)> {
        loop {
            // A stale front entry is never later than the earliest live one, so when it
            // is not due, nothing is.
            let (source, (deadline, trace_id)) = self.deadlines.earliest()?;
            if deadline > now && !force {
                return None;
            }
            self.deadlines.pop_first(source);
            if let Entry::Occupied(held) = self.traces.entry(trace_id)
                && held.get().deadline == deadline
            {
                let trace = held.remove();
                self.bytes = self.bytes.saturating_sub(trace.charged);
                self.spans = self.spans.saturating_sub(trace.span_count());
                return Some((trace_id, trace));
            }
        }
    }

    /// The earliest deadline in the shard (stale entries in front of it are dropped).
    pub fn next_deadline(&mut self) -> Option<Instant> {
        loop {
            let (source, (deadline, trace_id)) = self.deadlines.earliest()?;
            if self.is_live(deadline, &trace_id) {
                return Some(deadline);
            }
            self.deadlines.pop_first(source);
        }
    }

    /// The deadlines of the pending traces, earliest first.
    pub fn deadlines_in_order(&self) -> impl Iterator<Item = Instant> + '_ {
        self.deadlines
            .in_order()
            .filter(|(deadline, trace_id)| self.is_live(*deadline, trace_id))
            .map(|(deadline, _)| deadline)
    }

    /// Whether the entry `(deadline, trace_id)` is live: the trace is held, due then.
    fn is_live(&self, deadline: Instant, trace_id: &TraceId) -> bool {
        self.traces
            .get(trace_id)
            .is_some_and(|trace| trace.deadline == deadline)
    }
}

/// Moves the deadline of `trace` (held as `trace_id` in the shard of `deadlines`) to
/// `deadline`, set by `kind`'s rule; its old entry goes stale.
pub fn reschedule(
    deadlines: &mut Deadlines,
    trace_id: TraceId,
    trace: &mut PendingTrace,
    deadline: Instant,
    kind: DeadlineKind,
) {
    if trace.deadline != deadline {
        trace.deadline = deadline;
        deadlines.push(kind, deadline, trace_id);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::sampler::policy::PolicySet;

    fn policies() -> PolicySet {
        let yaml = "receivers: {otlp: {protocols: {grpc: {}}}}
processors:
  tail_sampling:
    policies:
      - {name: all, type: always_sample}
exporters: {debug: {}}
service: {pipelines: {traces: {receivers: [otlp], processors: [tail_sampling], exporters: [debug]}}}
";
        let config = crate::config::load_str(&[yaml]).expect("valid sampler config");
        let Some(crate::config::ProcessorConfig::TailSampling(tail_sampling)) =
            config.processors.values().next()
        else {
            panic!("tail_sampling configured");
        };
        PolicySet::compile(tail_sampling).expect("policies compile")
    }

    fn id(n: u8) -> TraceId {
        TraceId([n; 16])
    }

    /// Holds trace `n` in `shard`, due at `deadline` by the first-span rule.
    fn hold(shard: &mut Shard, policies: &PolicySet, n: u8, now: Instant, deadline: Instant) {
        shard.traces.insert(
            id(n),
            PendingTrace::new(policies.new_facts(id(n)), now, deadline),
        );
        shard
            .deadlines
            .push(DeadlineKind::FirstSpan, deadline, id(n));
    }

    fn popped(shard: &mut Shard, now: Instant, force: bool) -> Option<TraceId> {
        shard.pop_due(now, force).map(|(trace_id, _)| trace_id)
    }

    /// Scenario: the size of a held trace's own state, beside its spans.
    /// Guarantees: it fits the allocator's 192-byte class (not 224): one held trace of
    /// 50,000 at the default `num_traces` is one such allocation, so 32 bytes more per
    /// trace is 1.6 MB more per replica.
    #[test]
    fn a_pending_trace_fits_the_192_byte_class() {
        assert_eq!(allocation_size(std::mem::size_of::<PendingTrace>()), 192);
    }

    /// Scenario: a trace's deadline is moved earlier (its root arrived), then later (a
    /// hand-over made it due "now" after that), each move leaving a stale entry behind.
    /// Guarantees: the trace falls due at its current deadline, not before, and once only;
    /// the stale entries are dropped on the way.
    #[test]
    fn a_rescheduled_trace_falls_due_once_at_its_new_deadline() {
        let policies = policies();
        let start = Instant::now();
        let at = |secs| start + Duration::from_secs(secs);
        let mut shard = Shard::new(0, 0);
        hold(&mut shard, &policies, 1, start, at(30));
        hold(&mut shard, &policies, 2, start, at(30));
        shard.reschedule(id(1), at(10), DeadlineKind::Root);
        assert_eq!(shard.next_deadline(), Some(at(10)));
        assert_eq!(popped(&mut shard, at(9), false), None);
        assert_eq!(popped(&mut shard, at(10), false), Some(id(1)));
        assert_eq!(popped(&mut shard, at(29), false), None);
        assert_eq!(popped(&mut shard, at(30), false), Some(id(2)));
        assert_eq!(popped(&mut shard, at(100), true), None);
        assert_eq!(shard.deadlines.len(), 0, "stale entries dropped");

        hold(&mut shard, &policies, 3, start, at(30));
        shard.reschedule(id(3), at(10), DeadlineKind::Root);
        shard.reschedule(id(3), at(20), DeadlineKind::Now);
        assert_eq!(
            shard.next_deadline(),
            Some(at(20)),
            "the stale at(10) is skipped"
        );
        assert_eq!(popped(&mut shard, at(19), false), None);
        assert_eq!(popped(&mut shard, at(20), false), Some(id(3)));
        assert_eq!(popped(&mut shard, at(100), true), None);
        assert!(shard.traces.is_empty());
    }

    /// Scenario: a held trace is taken out of the shard (handed to a peer), and later a
    /// new trace with the same id is held, due later.
    /// Guarantees: the taken trace never falls due; the new one falls due at its own
    /// deadline only, although the taken one's entry comes first.
    #[test]
    fn a_taken_trace_never_falls_due() {
        let policies = policies();
        let start = Instant::now();
        let at = |secs| start + Duration::from_secs(secs);
        let mut shard = Shard::new(0, 0);
        hold(&mut shard, &policies, 1, start, at(10));
        assert!(shard.take(&id(1)).is_some());
        assert_eq!(shard.next_deadline(), None);
        assert_eq!(popped(&mut shard, at(100), true), None);

        hold(&mut shard, &policies, 2, start, at(10));
        assert!(shard.take(&id(2)).is_some());
        hold(&mut shard, &policies, 2, at(5), at(15));
        assert_eq!(popped(&mut shard, at(14), false), None);
        assert_eq!(shard.deadlines_in_order().collect::<Vec<_>>(), vec![at(15)]);
        assert_eq!(popped(&mut shard, at(15), false), Some(id(2)));
        assert_eq!(popped(&mut shard, at(100), true), None);
    }

    /// Scenario: deadlines of all three kinds, interleaved in time, some set out of order
    /// within their kind, some equal.
    /// Guarantees: traces fall due earliest first across the kinds, equal deadlines in
    /// trace id order (the order of the ordered set this index replaced), and
    /// `deadlines_in_order` lists the same order.
    #[test]
    fn falls_due_in_deadline_order_across_kinds() {
        let policies = policies();
        let start = Instant::now();
        let at = |secs| start + Duration::from_secs(secs);
        let mut shard = Shard::new(0, 0);
        // (trace, first-span deadline, moved to)
        let plan = [
            (1, 30, Some((12, DeadlineKind::Root))),
            (2, 31, None),
            (3, 32, Some((5, DeadlineKind::Now))),
            (4, 33, Some((11, DeadlineKind::Root))),
            (5, 20, None),
            (6, 34, Some((12, DeadlineKind::Root))),
            (7, 35, Some((4, DeadlineKind::Now))),
            (8, 31, None),
        ];
        for (n, first, moved) in plan {
            hold(&mut shard, &policies, n, start, at(first));
            if let Some((to, kind)) = moved {
                shard.reschedule(id(n), at(to), kind);
            }
        }
        let expected = [
            (4, 7),
            (5, 3),
            (11, 4),
            (12, 1),
            (12, 6),
            (20, 5),
            (31, 2),
            (31, 8),
        ];
        assert_eq!(
            shard.deadlines_in_order().collect::<Vec<_>>(),
            expected.map(|(secs, _)| at(secs)).to_vec()
        );
        let order: Vec<(Instant, TraceId)> = std::iter::from_fn(|| {
            let deadline = shard.next_deadline()?;
            let (trace_id, trace) = shard.pop_due(at(1000), false)?;
            assert_eq!(trace.deadline, deadline);
            Some((deadline, trace_id))
        })
        .collect();
        assert_eq!(order, expected.map(|(secs, n)| (at(secs), id(n))).to_vec());
    }

    fn origin(resource: &'static [u8], account: &Arc<OriginAccount>) -> Arc<Origin> {
        Origin::new(
            Bytes::from_static(resource),
            Bytes::new(),
            Bytes::from_static(b"scope"),
            Bytes::new(),
            account,
        )
    }

    /// Scenario: request sizes at and around jemalloc's size-class boundaries.
    /// Guarantees: each is counted as the class it lands in, never less than asked.
    #[test]
    fn allocations_are_counted_at_their_size_class() {
        let classes = [
            (0, 0),
            (1, 8),
            (9, 16),
            (17, 32),
            (128, 128),
            (129, 160),
            (216, 224),
            (300, 320),
            (2048, 2048),
            (2049, 2560),
            (2514, 2560),
            (14_337, 16_384),
            (16_385, 20_480),
        ];
        for (bytes, class) in classes {
            assert_eq!(allocation_size(bytes), class, "{bytes} bytes");
        }
        for bytes in 0..70_000 {
            assert!(allocation_size(bytes) >= bytes);
        }
    }

    /// Scenario: origins are made, shared by clones, and dropped in turn.
    /// Guarantees: each is charged once, from when it is made until its last holder
    /// drops it, to the account and to the budget alike.
    #[test]
    fn an_origin_is_charged_until_its_last_holder_drops_it() {
        let budget = MemoryBudget::unlimited();
        let account = OriginAccount::new(budget.clone());
        let a = origin(b"resource", &account);
        let b = origin(b"other", &account);
        let held = a.byte_len() + b.byte_len();
        assert!(a.byte_len() > b"resource".len() + b"scope".len());
        assert_eq!((account.bytes(), budget.used()), (held, held));
        let shared = a.clone();
        drop(a);
        assert_eq!((account.bytes(), budget.used()), (held, held));
        drop(b);
        let left = shared.byte_len();
        assert_eq!((account.bytes(), budget.used()), (left, left));
        drop(shared);
        assert_eq!((account.bytes(), budget.used()), (0, 0));
    }

    proptest! {
        /// Scenario: spans of random lengths (empty ones too) pushed under random origins,
        /// an origin sometimes repeated after another, in parts reserved for and pushed
        /// one after the other (a trace arriving over several requests).
        /// Guarantees: the spans come back in push order, each with its own bytes and
        /// origin; the span count and encoded length are the pushed ones; and the charge
        /// covers the trace, its map slot, its arena and its list of origins.
        #[test]
        fn spans_come_back_as_pushed_under_their_origins(
            parts in prop::collection::vec(
                prop::collection::vec((0usize..3, 0usize..600), 1..12),
                1..5,
            ),
        ) {
            let policies = policies();
            let account = OriginAccount::new(MemoryBudget::unlimited());
            let origins = [
                origin(b"a", &account),
                origin(b"bb", &account),
                origin(b"ccc", &account),
            ];
            let now = Instant::now();
            let mut trace = PendingTrace::new(policies.new_facts(id(1)), now, now);
            let mut pushed: Vec<(*const Origin, Vec<u8>)> = Vec::new();
            for part in parts {
                trace.reserve(part.len(), part.iter().map(|(_, len)| len).sum());
                for (at, len) in part {
                    let span: Vec<u8> = (0..len).map(|i| (i + pushed.len()) as u8).collect();
                    trace.push_span(&origins[at], &span);
                    pushed.push((Arc::as_ptr(&origins[at]), span));
                }
            }
            prop_assert_eq!(trace.span_count(), pushed.len());
            let encoded: usize = pushed.iter().map(|(_, span)| span.len()).sum();
            prop_assert_eq!(trace.span_bytes_len(), encoded);
            let held = allocation_size(std::mem::size_of::<PendingTrace>())
                + allocation_size(trace.arena.capacity())
                + allocation_size(trace.origins.capacity() * std::mem::size_of::<Arc<Origin>>())
                + std::mem::size_of::<(TraceId, Box<PendingTrace>)>() * 16 / 7
                + std::mem::size_of::<(Instant, TraceId)>() * 2;
            prop_assert!(trace.footprint() >= held);
            prop_assert!(trace.arena.capacity() >= encoded + pushed.len() * HEADER);
            let (arena, held_origins, mut spans) = trace.into_spans();
            let mut got = Vec::new();
            while let Some((at, range)) = spans.next(&arena) {
                got.push((Arc::as_ptr(&held_origins[at]), arena[range].to_vec()));
            }
            prop_assert_eq!(got, pushed);
        }
    }

    /// One step of the model test below.
    #[derive(Clone, Debug)]
    enum Op {
        /// Hold trace `id` (if not held), due `wait` after `now`.
        Hold { id: u8, wait: u64 },
        /// Move trace `id`'s deadline to `now + wait`, set by `kind`'s rule.
        Move { id: u8, wait: u64, kind: u8 },
        /// Take trace `id` out.
        Take { id: u8 },
        /// Advance `now` by `by` and pop what is due (everything, with `force`).
        Pop { by: u64, force: bool },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..12, 0u64..40).prop_map(|(id, wait)| Op::Hold { id, wait }),
            (0u8..12, 0u64..40, 0u8..3).prop_map(|(id, wait, kind)| Op::Move { id, wait, kind }),
            (0u8..12).prop_map(|id| Op::Take { id }),
            (0u64..15, prop::bool::weighted(0.1)).prop_map(|(by, force)| Op::Pop { by, force }),
        ]
    }

    proptest! {
        /// Scenario: random holds, deadline moves (of any kind, earlier or later), takes and
        /// pops, against an ordered set of `(deadline, trace id)` as the model.
        /// Guarantees: the shard pops exactly the traces the ordered set pops, in its order,
        /// and reports the same next deadline, after every step.
        #[test]
        fn pops_as_an_ordered_set_does(ops in prop::collection::vec(op(), 1..120)) {
            let policies = policies();
            let start = Instant::now();
            let mut now = start;
            let mut shard = Shard::new(0, 0);
            let mut model: BTreeSet<(Instant, TraceId)> = BTreeSet::new();
            let kinds = [DeadlineKind::FirstSpan, DeadlineKind::Root, DeadlineKind::Now];
            for op in ops {
                match op {
                    Op::Hold { id: n, wait } => {
                        if !shard.traces.contains_key(&id(n)) {
                            let deadline = now + Duration::from_secs(wait);
                            hold(&mut shard, &policies, n, now, deadline);
                            model.insert((deadline, id(n)));
                        }
                    }
                    Op::Move { id: n, wait, kind } => {
                        let deadline = now + Duration::from_secs(wait);
                        if let Some(trace) = shard.traces.get(&id(n)) {
                            model.remove(&(trace.deadline, id(n)));
                            model.insert((deadline, id(n)));
                        }
                        shard.reschedule(id(n), deadline, kinds[usize::from(kind)]);
                    }
                    Op::Take { id: n } => {
                        if let Some(trace) = shard.take(&id(n)) {
                            model.remove(&(trace.deadline, id(n)));
                        }
                    }
                    Op::Pop { by, force } => {
                        now += Duration::from_secs(by);
                        loop {
                            let expected = model
                                .first()
                                .copied()
                                .filter(|(deadline, _)| force || *deadline <= now);
                            if let Some(entry) = expected {
                                model.remove(&entry);
                            }
                            let got = shard
                                .pop_due(now, force)
                                .map(|(trace_id, trace)| (trace.deadline, trace_id));
                            prop_assert_eq!(got, expected);
                            if got.is_none() {
                                break;
                            }
                        }
                    }
                }
                prop_assert_eq!(shard.next_deadline(), model.first().map(|(d, _)| *d));
                prop_assert_eq!(shard.traces.len(), model.len());
            }
        }
    }
}
