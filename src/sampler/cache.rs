//! Decision caches: what was decided for traces that have left the buffer, so that late
//! spans follow their trace's decision.
//!
//! The sampled cache keeps, per kept trace, what its spans must carry (the threshold
//! update and the deciding policy). The non-sampled cache is compact: a 64-bit
//! fingerprint of the trace id per entry, since all a late span needs to know is "drop".
//! Both forget their oldest entries first (FIFO): a trace's late spans arrive soon after
//! its decision, so recency of insertion is what matters.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::OnceLock;

use foldhash::SharedSeed;
use foldhash::fast::SeedableRandomState;
use tokio::time::Instant;

use super::policy::ThresholdUpdate;
use crate::otlp::TraceId;

/// The hasher of the sampler's maps and sets keyed by trace id (or by a trace id's
/// fingerprint), and of the choice of a trace's shard.
pub type TraceIdHasher = SeedableRandomState;

/// A keyed hasher for a new map of trace ids: foldhash, keyed from the operating system's
/// randomness. Trace ids come from the network, so a map that they fill must not let a
/// sender pick ids that collide (HashDoS): the key stays secret, as std's SipHash key
/// does, while foldhash costs a fraction of SipHash on a 16-byte id, which was a
/// measurable part of ingest (one hash per span) and of each decision. The seed shared by
/// every map is drawn once per process from std's `RandomState` (itself keyed by the
/// operating system), each map's own seed from a fresh `RandomState`.
pub fn trace_id_hasher() -> TraceIdHasher {
    static SHARED: OnceLock<SharedSeed> = OnceLock::new();
    let shared = SHARED.get_or_init(|| SharedSeed::from_u64(RandomState::new().hash_one(0u64)));
    SeedableRandomState::with_seed(RandomState::new().hash_one(1u64), shared)
}

/// What a kept trace's late spans must carry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeptDecision {
    /// Index of the policy that kept the trace.
    pub policy: usize,
    /// The threshold to write on each span.
    pub threshold: ThresholdUpdate,
    /// When the trace was decided (for a decision handed over by a peer: when it arrived).
    pub decided_at: Instant,
    /// True when another replica decided the trace and handed the decision over after a
    /// membership change made this replica the trace's owner.
    pub moved: bool,
}

/// A cached decision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cached {
    /// The trace was kept.
    Kept(KeptDecision),
    /// The trace was not kept (or vetoed by a drop policy).
    NotKept,
}

/// The two decision caches of one buffer shard.
#[derive(Debug)]
pub struct DecisionCache {
    kept: HashMap<TraceId, KeptDecision, TraceIdHasher>,
    kept_order: VecDeque<TraceId>,
    kept_capacity: usize,
    not_kept: HashSet<u64, TraceIdHasher>,
    not_kept_order: VecDeque<u64>,
    not_kept_capacity: usize,
}

impl DecisionCache {
    /// Caches holding at most `kept_capacity` and `not_kept_capacity` traces (0 disables).
    pub fn new(kept_capacity: usize, not_kept_capacity: usize) -> Self {
        Self {
            kept: HashMap::with_hasher(trace_id_hasher()),
            kept_order: VecDeque::new(),
            kept_capacity,
            not_kept: HashSet::with_hasher(trace_id_hasher()),
            not_kept_order: VecDeque::new(),
            not_kept_capacity,
        }
    }

    /// The decision remembered for `trace_id`, if any.
    pub fn get(&self, trace_id: &TraceId) -> Option<Cached> {
        if let Some(kept) = self.kept.get(trace_id) {
            return Some(Cached::Kept(*kept));
        }
        if self.not_kept.contains(&fingerprint(trace_id)) {
            return Some(Cached::NotKept);
        }
        None
    }

    /// Remembers that `trace_id` was kept.
    pub fn insert_kept(&mut self, trace_id: TraceId, decision: KeptDecision) {
        if self.kept_capacity == 0 {
            return;
        }
        if self.kept.insert(trace_id, decision).is_none() {
            self.kept_order.push_back(trace_id);
            while self.kept_order.len() > self.kept_capacity {
                if let Some(oldest) = self.kept_order.pop_front() {
                    self.kept.remove(&oldest);
                }
            }
        }
    }

    /// The kept decisions made (or handed over) at or after `since`, newest first.
    pub fn kept_since(&self, since: Instant) -> impl Iterator<Item = (TraceId, KeptDecision)> {
        self.kept_order
            .iter()
            .rev()
            .filter_map(|id| self.kept.get(id).map(|kept| (*id, *kept)))
            .take_while(move |(_, kept)| kept.decided_at >= since)
    }

    /// Remembers that `trace_id` was not kept.
    pub fn insert_not_kept(&mut self, trace_id: &TraceId) {
        if self.not_kept_capacity == 0 {
            return;
        }
        let print = fingerprint(trace_id);
        if self.not_kept.insert(print) {
            self.not_kept_order.push_back(print);
            while self.not_kept_order.len() > self.not_kept_capacity {
                if let Some(oldest) = self.not_kept_order.pop_front() {
                    self.not_kept.remove(&oldest);
                }
            }
        }
    }
}

/// A 64-bit fingerprint of a trace id: its high half folded with its low half. Two trace
/// ids collide with probability 2^-64 per pair; a collision makes a late span of a kept
/// trace look not-kept only if that trace also missed the kept cache.
fn fingerprint(trace_id: &TraceId) -> u64 {
    let bytes = trace_id.as_bytes();
    let mut high = [0u8; 8];
    let mut low = [0u8; 8];
    high.copy_from_slice(&bytes[..8]);
    low.copy_from_slice(&bytes[8..]);
    u64::from_le_bytes(high).rotate_left(17) ^ u64::from_le_bytes(low)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> TraceId {
        TraceId([n; 16])
    }

    /// Scenario: more decisions are cached than the caches hold.
    /// Guarantees: the newest are remembered, the oldest forgotten, kept and not-kept
    /// answer independently, and a zero capacity disables a cache.
    #[tokio::test]
    async fn remembers_the_newest_decisions() {
        let kept = KeptDecision {
            policy: 1,
            threshold: ThresholdUpdate::Keep,
            decided_at: Instant::now(),
            moved: false,
        };
        let mut cache = DecisionCache::new(2, 2);
        for n in 1..=3 {
            cache.insert_kept(id(n), kept);
            cache.insert_not_kept(&id(100 + n));
        }
        assert_eq!(cache.get(&id(1)), None);
        assert_eq!(cache.get(&id(3)), Some(Cached::Kept(kept)));
        assert_eq!(cache.get(&id(101)), None);
        assert_eq!(cache.get(&id(103)), Some(Cached::NotKept));
        let mut off = DecisionCache::new(0, 0);
        off.insert_kept(id(1), kept);
        off.insert_not_kept(&id(2));
        assert_eq!(off.get(&id(1)), None);
        assert_eq!(off.get(&id(2)), None);
    }
}
