//! Decision caches: what was decided for traces that have left the buffer, so that late
//! spans follow their trace's decision.
//!
//! The sampled cache keeps, per kept trace, what its spans must carry (the threshold
//! update and the deciding policy). The non-sampled cache is compact: a 64-bit
//! fingerprint of the trace id per entry, since all a late span needs to know is "drop".
//! Both forget their oldest entries first (FIFO): a trace's late spans arrive soon after
//! its decision, so recency of insertion is what matters.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::OnceLock;
use std::time::Duration;

use foldhash::SharedSeed;
use foldhash::fast::SeedableRandomState;
use hashbrown::HashTable;
use tokio::time::Instant;

use super::policy::ThresholdUpdate;
use super::threshold::Threshold;
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
    kept: FifoMap<TraceId, PackedKept>,
    not_kept: FifoMap<u64, ()>,
    /// The instant the kept decisions' times are counted from.
    epoch: Instant,
}

impl DecisionCache {
    /// Caches holding at most `kept_capacity` and `not_kept_capacity` traces (0 disables).
    pub fn new(kept_capacity: usize, not_kept_capacity: usize) -> Self {
        Self {
            kept: FifoMap::new(kept_capacity),
            not_kept: FifoMap::new(not_kept_capacity),
            epoch: Instant::now(),
        }
    }

    /// The decision remembered for `trace_id`, if any.
    pub fn get(&self, trace_id: &TraceId) -> Option<Cached> {
        if let Some(kept) = self.kept.get(trace_id) {
            return Some(Cached::Kept(kept.unpack(self.epoch)));
        }
        if self.not_kept.get(&fingerprint(trace_id)).is_some() {
            return Some(Cached::NotKept);
        }
        None
    }

    /// Remembers that `trace_id` was kept (replacing what was remembered for it, without
    /// making it newer).
    pub fn insert_kept(&mut self, trace_id: TraceId, decision: KeptDecision) {
        self.kept
            .insert(trace_id, PackedKept::pack(decision, self.epoch));
    }

    /// The kept decisions made (or handed over) at or after `since`, newest first.
    pub fn kept_since(&self, since: Instant) -> impl Iterator<Item = (TraceId, KeptDecision)> {
        let epoch = self.epoch;
        self.kept
            .newest_first()
            .map(move |(id, kept)| (*id, kept.unpack(epoch)))
            .take_while(move |(_, kept)| kept.decided_at >= since)
    }

    /// Remembers that `trace_id` was not kept.
    pub fn insert_not_kept(&mut self, trace_id: &TraceId) {
        self.not_kept.insert(fingerprint(trace_id), ());
    }
}

/// A [`KeptDecision`] as the kept cache holds it: 24 bytes where the decision takes 48 (a
/// 16-byte `Instant`, a word for the policy index, a 16-byte threshold enum), so that an
/// entry with its trace id takes 40 bytes instead of 64. The kept cache holds up to
/// `sampled_cache_size` of them per replica (100,000 by default) for as long as the
/// gateway runs.
#[derive(Clone, Copy, Debug, PartialEq)]
struct PackedKept {
    /// The threshold's raw 56-bit value, or [`PackedKept::KEEP`] for
    /// [`ThresholdUpdate::Keep`].
    threshold: u64,
    /// Nanoseconds from the cache's epoch to the decision; negative before it. An `i64`
    /// spans 292 years either way, so every instant a running gateway meets fits.
    decided_at: i64,
    /// The deciding policy's index. A policy list is read from a config file, far below
    /// 2^32 policies.
    policy: u32,
    moved: bool,
}

impl PackedKept {
    /// The `threshold` of [`ThresholdUpdate::Keep`]: above every 56-bit threshold.
    const KEEP: u64 = u64::MAX;

    fn pack(decision: KeptDecision, epoch: Instant) -> Self {
        let decided_at = match decision.decided_at.checked_duration_since(epoch) {
            Some(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
            None => i64::try_from(epoch.duration_since(decision.decided_at).as_nanos())
                .map_or(i64::MIN, |before| -before),
        };
        Self {
            threshold: match decision.threshold {
                ThresholdUpdate::Keep => Self::KEEP,
                ThresholdUpdate::Raise(threshold) => threshold.raw(),
            },
            decided_at,
            policy: u32::try_from(decision.policy).unwrap_or(u32::MAX),
            moved: decision.moved,
        }
    }

    fn unpack(self, epoch: Instant) -> KeptDecision {
        let offset = Duration::from_nanos(self.decided_at.unsigned_abs());
        KeptDecision {
            policy: self.policy as usize,
            threshold: Threshold::from_raw(self.threshold)
                .map_or(ThresholdUpdate::Keep, ThresholdUpdate::Raise),
            decided_at: if self.decided_at >= 0 {
                epoch + offset
            } else {
                epoch - offset
            },
            moved: self.moved,
        }
    }
}

/// A map of at most `capacity` entries that forgets the oldest first.
///
/// The entries sit in insertion order in one ring; a hash index holds each entry's
/// position (a 4-byte sequence number), not a copy of its key. Beside the entries, an
/// entry costs 5 bytes of index per bucket (1.1 to 2.3 buckets per entry as the index
/// grows), where a `HashMap` (or `HashSet`) plus an order queue held the key twice and
/// paid the table's growth slack on the whole entry. The ring grows by half, not by
/// doubling, and never past `capacity`. The decision caches hold up to a million entries
/// per replica, filling at the rate traces are decided: this is memory that sits beside
/// the held spans for the whole of a busy gateway's life.
struct FifoMap<K, V> {
    /// The entries, oldest first.
    entries: VecDeque<(K, V)>,
    /// The sequence number of each entry; `entries[i]` has sequence number `front + i`
    /// (wrapping).
    index: HashTable<u32>,
    /// The sequence number of `entries[0]`.
    front: u32,
    capacity: usize,
    hasher: TraceIdHasher,
}

impl<K: Copy + Eq + Hash, V> FifoMap<K, V> {
    /// An empty map of at most `capacity` entries (0: it holds none), clamped to 2^32 - 1
    /// so that sequence numbers of the entries held never collide.
    fn new(capacity: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            index: HashTable::new(),
            front: 0,
            capacity: capacity.min(u32::MAX as usize),
            hasher: trace_id_hasher(),
        }
    }

    /// The value held for `key`, if any.
    fn get(&self, key: &K) -> Option<&V> {
        // An empty map (a cache turned off, or not yet filled) costs no hash.
        if self.entries.is_empty() {
            return None;
        }
        self.index
            .find(self.hasher.hash_one(key), |&sequence| {
                self.entries[position(self.front, sequence)].0 == *key
            })
            .map(|&sequence| &self.entries[position(self.front, sequence)].1)
    }

    /// Holds `value` for `key`: as the newest entry if `key` was not held (forgetting the
    /// oldest entry beyond the capacity), in place if it was.
    fn insert(&mut self, key: K, value: V) {
        if self.capacity == 0 {
            return;
        }
        let Self {
            entries,
            index,
            front,
            capacity,
            hasher,
        } = self;
        let hash = hasher.hash_one(key);
        let found = index.find(hash, |&sequence| {
            entries[position(*front, sequence)].0 == key
        });
        if let Some(&sequence) = found {
            entries[position(*front, sequence)].1 = value;
            return;
        }
        if entries.len() == *capacity {
            if let Some((oldest, _)) = entries.front() {
                let oldest_hash = hasher.hash_one(oldest);
                if let Ok(slot) = index.find_entry(oldest_hash, |&sequence| sequence == *front) {
                    slot.remove();
                }
            }
            entries.pop_front();
            *front = front.wrapping_add(1);
        } else if entries.len() == entries.capacity() {
            let grow = (entries.len() / 2).max(MIN_GROWTH);
            entries.reserve_exact(grow.min(*capacity - entries.len()));
        }
        let sequence = front.wrapping_add(entries.len() as u32);
        entries.push_back((key, value));
        index.insert_unique(hash, sequence, |&sequence| {
            hasher.hash_one(entries[position(*front, sequence)].0)
        });
    }

    /// The entries, newest first.
    fn newest_first(&self) -> impl Iterator<Item = (&K, &V)> {
        self.entries.iter().rev().map(|(key, value)| (key, value))
    }
}

impl<K, V> std::fmt::Debug for FifoMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FifoMap")
            .field("len", &self.entries.len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

/// The smallest growth of a map's ring, in entries.
const MIN_GROWTH: usize = 64;

/// The position in the ring of the entry with `sequence`, when the oldest has `front`.
fn position(front: u32, sequence: u32) -> usize {
    sequence.wrapping_sub(front) as usize
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
    use proptest::prelude::*;

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

    /// Scenario: kept decisions of every shape (kept by content or raised to a threshold,
    /// decided before, at and after the cache was made, moved or not) go through the kept
    /// cache's packed form.
    /// Guarantees: each comes back exactly as it went in, and an entry with its trace id
    /// takes 40 bytes.
    #[test]
    fn kept_decisions_survive_packing_and_take_40_bytes() {
        let epoch = Instant::now();
        let thresholds = [
            ThresholdUpdate::Keep,
            ThresholdUpdate::Raise(Threshold::ALWAYS),
            ThresholdUpdate::Raise(Threshold::from_probability(0.1).expect("valid")),
            ThresholdUpdate::Raise(Threshold::from_raw((1 << 56) - 1).expect("valid")),
        ];
        let offsets = [0, 1, 999_999_999, 86_400 * 1_000_000_000];
        for threshold in thresholds {
            for nanos in offsets {
                let offset = Duration::from_nanos(nanos);
                for decided_at in [epoch + offset, epoch.checked_sub(offset).unwrap_or(epoch)] {
                    for (policy, moved) in [(0, false), (7, true), (u32::MAX as usize, false)] {
                        let decision = KeptDecision {
                            policy,
                            threshold,
                            decided_at,
                            moved,
                        };
                        assert_eq!(PackedKept::pack(decision, epoch).unpack(epoch), decision);
                    }
                }
            }
        }
        assert_eq!(std::mem::size_of::<(TraceId, PackedKept)>(), 40);
    }

    /// One step of a [`FifoMap`] scenario.
    #[derive(Clone, Debug)]
    enum Step {
        Insert(u8, u16),
        Get(u8),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0u8..24, any::<u16>()).prop_map(|(key, value)| Step::Insert(key, value)),
            (0u8..24).prop_map(Step::Get),
        ]
    }

    proptest! {
        /// Scenario: any sequence of inserts and look-ups, with any capacity, starting at
        /// any sequence number (so that sequence numbers wrap).
        /// Guarantees: the map answers as a plain list that appends new keys, updates held
        /// ones in place and drops the oldest beyond the capacity; its entries, newest
        /// first, are that list's.
        #[test]
        fn fifo_map_matches_a_plain_list(
            capacity in 0usize..12,
            front in prop_oneof![Just(0u32), Just(u32::MAX - 20), any::<u32>()],
            steps in proptest::collection::vec(step(), 0..200),
        ) {
            let mut map = FifoMap::<u8, u16>::new(capacity);
            map.front = front;
            let mut model: VecDeque<(u8, u16)> = VecDeque::new();
            for step in steps {
                match step {
                    Step::Insert(key, value) => {
                        map.insert(key, value);
                        if capacity == 0 {
                            continue;
                        }
                        if let Some(held) = model.iter_mut().find(|(k, _)| *k == key) {
                            held.1 = value;
                        } else {
                            model.push_back((key, value));
                            if model.len() > capacity {
                                model.pop_front();
                            }
                        }
                    }
                    Step::Get(key) => {
                        let expected = model.iter().find(|(k, _)| *k == key).map(|(_, v)| v);
                        prop_assert_eq!(map.get(&key), expected);
                    }
                }
                prop_assert_eq!(map.index.len(), model.len());
            }
            let newest: Vec<(u8, u16)> = map.newest_first().map(|(k, v)| (*k, *v)).collect();
            let expected: Vec<(u8, u16)> = model.iter().rev().copied().collect();
            prop_assert_eq!(newest, expected);
        }
    }

    /// Scenario: a map filled far past its capacity with distinct keys.
    /// Guarantees: its ring never holds room for more than the capacity, so a full cache
    /// costs what its capacity says.
    #[test]
    fn fifo_map_ring_never_outgrows_its_capacity() {
        let mut map = FifoMap::<u64, ()>::new(1000);
        for key in 0..5000u64 {
            map.insert(key, ());
        }
        assert_eq!(map.entries.len(), 1000);
        assert_eq!(map.entries.capacity(), 1000);
        assert!(map.get(&3999).is_none());
        assert!(map.get(&4000).is_some());
        assert!(map.get(&4999).is_some());
    }
}
