//! The trace buffer: per shard, a map of pending traces plus an ordered deadline index.
//!
//! A pending trace holds copies of its spans' wire bytes in one growing arena (one copy
//! per span, so the request buffers they came in are freed at once and the bytes held
//! are exactly what is counted), the resource and scope each span came under (shared
//! between the traces of a request), and the policy facts folded in span by span.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use tokio::time::Instant;

use super::cache::{DecisionCache, KeptDecision, TraceIdHasher, trace_id_hasher};
use super::metrics::EarlyReason;
use super::policy::TraceFacts;
use crate::otlp::TraceId;

/// The resource and scope a span arrived under.
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
}

impl Origin {
    /// Bytes held by this origin (shared by every span that points at it).
    pub fn byte_len(&self) -> usize {
        self.resource.len()
            + self.resource_schema_url.len()
            + self.scope.len()
            + self.scope_schema_url.len()
            + std::mem::size_of::<Self>()
    }
}

/// Where one held span's bytes are in its trace's arena.
#[derive(Clone, Copy, Debug)]
pub struct HeldSpan {
    /// Index into [`PendingTrace::origins`].
    pub origin: u32,
    /// Offset in the arena.
    pub start: u32,
    /// Length in the arena.
    pub len: u32,
}

/// A trace awaiting its decision.
pub struct PendingTrace {
    /// The facts policies decide on.
    pub facts: TraceFacts,
    /// The spans' wire bytes, back to back.
    pub arena: Vec<u8>,
    /// Each span's place in the arena, in arrival order.
    pub spans: Vec<HeldSpan>,
    /// The distinct origins of the spans, in arrival order.
    pub origins: Vec<Arc<Origin>>,
    /// When the first span arrived.
    pub first_seen: Instant,
    /// When the trace is due for its decision.
    pub deadline: Instant,
    /// True once a root span (no parent) has arrived.
    pub root_seen: bool,
    /// Set when the trace is due early, with the reason.
    pub early: Option<EarlyReason>,
    /// Bytes charged for this trace, as last computed.
    pub charged: usize,
    /// The keep decision another replica made for this trace, handed over after a
    /// membership change: the trace is due at once and kept as that replica decided.
    pub imposed: Option<KeptDecision>,
}

impl PendingTrace {
    /// An empty trace first seen at `now`, due at `deadline`.
    pub fn new(facts: TraceFacts, now: Instant, deadline: Instant) -> Self {
        Self {
            facts,
            arena: Vec::new(),
            spans: Vec::new(),
            origins: Vec::new(),
            first_seen: now,
            deadline,
            root_seen: false,
            early: None,
            charged: 0,
            imposed: None,
        }
    }

    /// Makes room for `spans` more spans of `bytes` encoded bytes in all, before they are
    /// pushed: a trace that arrives whole in one request gets an arena of exactly its size
    /// (growing span by span doubled the arena, holding up to twice the bytes, and copied
    /// it on every growth). A trace that grows again later grows by at least half, so a
    /// trace trickling in span by span is still copied O(1) times per byte.
    pub fn reserve(&mut self, spans: usize, bytes: usize) {
        fn grow<T>(v: &mut Vec<T>, more: usize) {
            if v.capacity() - v.len() >= more {
                return;
            }
            let target = if v.is_empty() {
                more
            } else {
                (v.len() + more).max(v.len() + v.len() / 2)
            };
            v.reserve_exact(target - v.len());
        }
        grow(&mut self.arena, bytes);
        grow(&mut self.spans, spans);
    }

    /// Appends one span's bytes under `origin`.
    pub fn push_span(&mut self, origin: &Arc<Origin>, span: &[u8]) {
        let origin_index = match self.origins.last() {
            Some(last) if Arc::ptr_eq(last, origin) => self.origins.len() - 1,
            _ => {
                self.origins.push(origin.clone());
                self.origins.len() - 1
            }
        };
        // Spans are at most a request long, and requests are capped far below 4 GiB.
        let start = self.arena.len() as u32;
        self.arena.extend_from_slice(span);
        self.spans.push(HeldSpan {
            origin: origin_index as u32,
            start,
            len: span.len() as u32,
        });
    }

    /// Bytes this trace holds: its arena, index and origins (an origin shared with other
    /// traces is counted in each, which errs on the safe side).
    pub fn footprint(&self) -> usize {
        std::mem::size_of::<Self>()
            + std::mem::size_of::<TraceId>()
            + self.arena.capacity()
            + self.spans.capacity() * std::mem::size_of::<HeldSpan>()
            + self.origins.capacity() * std::mem::size_of::<Arc<Origin>>()
            + self.origins.iter().map(|o| o.byte_len()).sum::<usize>()
    }

    /// The encoded size of the trace's spans.
    pub fn span_bytes_len(&self) -> usize {
        self.arena.len()
    }
}

/// One shard of the buffer: the traces whose id hashes to it.
pub struct Shard {
    /// Pending traces by id.
    pub traces: HashMap<TraceId, PendingTrace, TraceIdHasher>,
    /// `(deadline, trace id)` of every pending trace, earliest first.
    pub deadlines: BTreeSet<(Instant, TraceId)>,
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
            deadlines: BTreeSet::new(),
            cache: DecisionCache::new(kept_cache, not_kept_cache),
            bytes: 0,
            spans: 0,
        }
    }

    /// Moves `trace_id`'s deadline to `deadline` (earlier or later).
    pub fn reschedule(&mut self, trace_id: TraceId, deadline: Instant) {
        if let Some(trace) = self.traces.get_mut(&trace_id) {
            self.deadlines.remove(&(trace.deadline, trace_id));
            trace.deadline = deadline;
            self.deadlines.insert((deadline, trace_id));
        }
    }

    /// Removes and returns the trace due first, if it is due by `now` (or at all, when
    /// `force` is set).
    /// Takes trace `trace_id` out of the shard (its deadline too), uncounting it from the
    /// shard's totals; `None` when it is not held.
    pub fn take(&mut self, trace_id: &TraceId) -> Option<PendingTrace> {
        let trace = self.traces.remove(trace_id)?;
        self.deadlines.remove(&(trace.deadline, *trace_id));
        self.bytes = self.bytes.saturating_sub(trace.charged);
        self.spans = self.spans.saturating_sub(trace.spans.len());
        Some(trace)
    }

    pub fn pop_due(&mut self, now: Instant, force: bool) -> Option<(TraceId, PendingTrace)> {
        let &(deadline, trace_id) = self.deadlines.first()?;
        if deadline > now && !force {
            return None;
        }
        self.deadlines.pop_first();
        let trace = self.traces.remove(&trace_id)?;
        self.bytes = self.bytes.saturating_sub(trace.charged);
        self.spans = self.spans.saturating_sub(trace.spans.len());
        Some((trace_id, trace))
    }

    /// The earliest deadline in the shard.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(deadline, _)| *deadline)
    }
}
