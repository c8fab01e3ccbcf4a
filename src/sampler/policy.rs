//! Compiled tail-sampling policies and the decision over a whole trace.
//!
//! # Facts, not spans
//!
//! A trace is decided on its [`TraceFacts`]: a few running values (span count, encoded
//! bytes, earliest start and latest end, whether any span has the sampled flag, the trace's
//! randomness and the highest incoming `th`) and one bit per content predicate (attribute,
//! status code, trace state) saying whether any span, or the resource of any span, has
//! matched so far. The facts are folded in span by span at ingest
//! ([`PolicySet::observe_span`]), so a decision never walks the spans again, and the spans
//! can stay as wire bytes. Every fact is an OR, a sum, a minimum or a maximum, so the facts
//! (and the decision of every stateless policy) do not depend on the order in which spans
//! arrive.
//!
//! Resource attributes are matched once per `ResourceSpans` ([`PolicySet::observe_resource`])
//! and OR-ed into the facts of each span observed under that resource, which is what the
//! Collector's "any resource or span matches" means for the resources a trace's spans came
//! with.
//!
//! # Semantics
//!
//! Each policy follows the Collector's evaluator of the same type (reference: the contrib
//! `processor/tailsamplingprocessor/internal/sampling`), and the decisions are combined as
//! the Collector's `makeDecision` does: drop policies run first, a `Dropped` vote vetoes
//! everything and stops evaluation, any `Sampled` vote keeps the trace, and with
//! `sample_on_first_match` evaluation stops at the first `Sampled`. `invert_match` gives
//! plain `Sampled`/`NotSampled` (the Collector's behaviour since v0.155). Where tailgate
//! differs (consistent probability without `hash_salt`, latency over the whole trace,
//! composite windows) the item says so; `docs/compatibility.md` lists them.

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use regex::RegexSet;

use super::threshold::{self, Threshold};
use crate::config::{PolicyConfig, PolicyKind, StatusCodeName, TailSamplingConfig};
use crate::otlp::attributes::{self, AnyValueRef};
use crate::otlp::{SpanView, TraceId};

#[cfg(test)]
mod tests;

/// The index of a top-level policy, in configuration order; indexes [`PolicySet::names`].
pub type PolicyIndex = usize;

/// A policy configuration that cannot be compiled. The configuration module refuses it
/// (with its path), so for a loaded [`TailSamplingConfig`] this does not happen.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// There are no policies.
    #[error("tail_sampling has no policies: add at least one")]
    NoPolicies,
}

/// One policy's vote on a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vote {
    /// Keep the trace.
    Sampled,
    /// This policy does not keep the trace.
    NotSampled,
    /// A `drop` policy vetoes the trace.
    Dropped,
}

/// The decision on a whole trace.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Decision {
    /// Keep the trace. `policy` is the index of the first top-level policy that voted Sampled.
    Sampled {
        /// The first top-level policy (in evaluation order) that voted Sampled.
        policy: PolicyIndex,
        /// What to write in the `th` of every kept span.
        threshold: ThresholdUpdate,
    },
    /// No policy kept the trace.
    NotSampled,
    /// A drop policy vetoed it.
    Dropped {
        /// The drop policy that vetoed.
        policy: PolicyIndex,
    },
}

/// How a kept trace's spans' `th` (OpenTelemetry consistent probability) changes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ThresholdUpdate {
    /// Kept by a content rule (probability 1): spans keep the `th` they came with.
    Keep,
    /// Kept by the consistent probabilistic policy at threshold T (equalizing): every kept
    /// span's `th` becomes max(its incoming th, T).
    Raise(Threshold),
}

// === TraceFacts ===

/// "None" for a 56-bit value (an `rv`, a threshold) held in a `u64`: above every 56-bit
/// value. An `Option<u64>` would take 16 bytes.
const NONE_56: u64 = u64::MAX;

/// The running facts of one trace that the policies need, updated span by span at
/// ingest so a decision never re-reads spans.
#[derive(Clone, Debug)]
pub struct TraceFacts {
    trace_id: TraceId,
    /// Saturates at `u32::MAX`, far beyond any trace a memory budget can hold: the count
    /// and the two 56-bit values below are kept narrow so that a held trace's state fits
    /// a smaller allocation (see `PendingTrace`).
    span_count: u32,
    bytes: u64,
    /// Earliest `start_time_unix_nano`; `u64::MAX` before the first span.
    min_start: u64,
    /// Latest `end_time_unix_nano`.
    max_end: u64,
    any_sampled_flag: bool,
    /// The smallest valid `rv` of any span. Spans of one trace should agree; if they do not,
    /// the smallest is used so that the result does not depend on arrival order and a kept
    /// trace satisfies `rv >= T` for every span's `rv`. [`NONE_56`] when no span had one.
    min_rv: u64,
    /// The highest incoming `th`'s raw value; [`NONE_56`] when no span had one.
    max_incoming_th: u64,
    matched: Bits,
}

impl TraceFacts {
    /// Spans observed so far.
    pub fn span_count(&self) -> u64 {
        u64::from(self.span_count)
    }

    /// The trace id given to [`PolicySet::new_facts`].
    pub fn trace_id(&self) -> TraceId {
        self.trace_id
    }

    /// Encoded span bytes observed so far (the sum of each span body's length).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The trace's randomness `R`: the `rv` of the spans' `ot` tracestate entry if any span
    /// has one (the smallest, should they differ), else the low 56 bits of the trace id.
    pub fn randomness(&self) -> u64 {
        if self.min_rv == NONE_56 {
            threshold::trace_id_randomness(&self.trace_id)
        } else {
            self.min_rv
        }
    }

    /// The highest `th` any span arrived with, if any.
    pub fn max_incoming_threshold(&self) -> Option<Threshold> {
        // The sentinel is no 56-bit value, so it reads back as none.
        Threshold::from_raw(self.max_incoming_th)
    }

    /// Latest end minus earliest start, in whole milliseconds (truncated toward zero, as Go's
    /// `Duration.Milliseconds`); 0 before the first span.
    pub fn duration_ms(&self) -> i64 {
        if self.span_count == 0 {
            return 0;
        }
        let nanos = i128::from(self.max_end) - i128::from(self.min_start);
        i64::try_from(nanos / 1_000_000).unwrap_or(i64::MAX)
    }
}

/// Per-request cache of resource-level predicate results (resource attributes are
/// evaluated once per ResourceSpans, not once per span).
#[derive(Clone, Debug, Default)]
pub struct ResourceMatches {
    matched: Bits,
}

// === PolicySet ===

/// The compiled policies of one `tail_sampling` processor.
///
/// Shared by reference between the ingest path ([`observe_resource`](Self::observe_resource),
/// [`observe_span`](Self::observe_span), which only read it) and the decision path
/// ([`decide`](Self::decide)). The only mutable state is that of the stateful policies
/// (`rate_limiting`, `bytes_limiting`, `composite`), each behind its own `std::sync::Mutex`:
/// a bucket's tokens and its last refill time change together, which one atomic cannot
/// hold, and the critical section is a few arithmetic operations, never held across an
/// `.await` or another lock, so a blocking mutex is cheaper than an async one and contention
/// is negligible (decisions are made by the buffer's timer, not per request).
#[derive(Debug)]
pub struct PolicySet {
    names: Vec<String>,
    policies: Vec<Node>,
    /// Evaluation order: drop policies first, then the rest, each in configuration order.
    order: Vec<PolicyIndex>,
    predicates: Vec<Predicate>,
    /// Indexes of the attribute predicates (checked on resources and spans).
    attribute_predicates: Vec<usize>,
    /// Indexes of the status code predicates.
    status_predicates: Vec<usize>,
    /// Indexes of the trace_state predicates.
    trace_state_predicates: Vec<usize>,
    sample_on_first_match: bool,
    stateful: bool,
}

impl PolicySet {
    /// Compiles validated policies (regexes, thresholds, token buckets).
    ///
    /// # Errors
    ///
    /// [`PolicyError`] when there are no policies; the configuration module refuses that, so
    /// a loaded configuration compiles. (Regular expressions are compiled by the
    /// configuration module, which reports those that do not compile.)
    pub fn compile(config: &TailSamplingConfig) -> Result<Self, PolicyError> {
        if config.policies.is_empty() {
            return Err(PolicyError::NoPolicies);
        }
        let mut compiler = Compiler::default();
        let policies = config
            .policies
            .iter()
            .map(|policy| compiler.node(policy))
            .collect::<Result<Vec<_>, _>>()?;
        let (drops, rest): (Vec<usize>, Vec<usize>) =
            (0..policies.len()).partition(|&i| matches!(policies[i], Node::Drop(_)));
        let order = drops.into_iter().chain(rest).collect();
        let by_kind = |f: fn(&Predicate) -> bool| -> Vec<usize> {
            compiler
                .predicates
                .iter()
                .enumerate()
                .filter(|(_, p)| f(p))
                .map(|(i, _)| i)
                .collect()
        };
        let attribute_predicates = by_kind(|p| p.attribute_key().is_some());
        let status_predicates = by_kind(|p| matches!(p, Predicate::Status { .. }));
        let trace_state_predicates = by_kind(|p| matches!(p, Predicate::TraceState { .. }));
        let stateful = policies.iter().any(Node::is_stateful);
        Ok(Self {
            names: config.policies.iter().map(|p| p.name.clone()).collect(),
            policies,
            order,
            predicates: compiler.predicates,
            attribute_predicates,
            status_predicates,
            trace_state_predicates,
            sample_on_first_match: config.sample_on_first_match,
            stateful,
        })
    }

    /// Policy names for metric labels, indexed by `PolicyIndex`; top-level policies only.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Whether any policy keeps state between decisions (`rate_limiting`, `bytes_limiting`,
    /// `composite`), so that the same facts may be decided differently at another time.
    pub fn is_stateful(&self) -> bool {
        self.stateful
    }

    /// Facts for a new trace.
    pub fn new_facts(&self, trace_id: TraceId) -> TraceFacts {
        TraceFacts {
            trace_id,
            span_count: 0,
            bytes: 0,
            min_start: u64::MAX,
            max_end: 0,
            any_sampled_flag: false,
            min_rv: NONE_56,
            max_incoming_th: NONE_56,
            matched: Bits::with_len(self.predicates.len()),
        }
    }

    /// Evaluates resource-level predicates once per ResourceSpans. `resource` is the encoded
    /// `Resource` body ([`crate::otlp::ResourceSpansView::resource`]).
    pub fn observe_resource(&self, resource: &[u8]) -> ResourceMatches {
        let mut matched = Bits::with_len(self.predicates.len());
        if !self.attribute_predicates.is_empty() {
            self.match_attributes(
                resource,
                attributes::RESOURCE_ATTRIBUTES,
                false,
                &mut matched,
            );
        }
        ResourceMatches { matched }
    }

    /// Folds one span into `facts` (span count, encoded bytes, min start / max end time,
    /// per-predicate match bits including sub-policies', sampled flag, trace_state facts,
    /// the trace's randomness R and the highest incoming threshold seen).
    ///
    /// `resource` must come from [`observe_resource`](Self::observe_resource) of this
    /// policy set, for the resource the span was received under.
    pub fn observe_span(
        &self,
        facts: &mut TraceFacts,
        resource: &ResourceMatches,
        span: &SpanView,
    ) {
        facts.span_count = facts.span_count.saturating_add(1);
        facts.bytes += span.bytes.len() as u64;
        facts.min_start = facts.min_start.min(span.start_time_unix_nano);
        facts.max_end = facts.max_end.max(span.end_time_unix_nano);
        facts.any_sampled_flag |= span.flags & 0x01 != 0;
        facts.matched.or(&resource.matched);

        let trace_state = std::str::from_utf8(&span.trace_state).unwrap_or("");
        if !trace_state.is_empty() {
            let ot = threshold::read_ot(trace_state);
            if let Some(rv) = ot.rv {
                // rv has 14 hex digits, so it is below the sentinel, which any rv replaces.
                facts.min_rv = facts.min_rv.min(rv);
            }
            if let Some(th) = ot.th {
                let th = th.raw();
                facts.max_incoming_th = if facts.max_incoming_th == NONE_56 {
                    th
                } else {
                    facts.max_incoming_th.max(th)
                };
            }
            for &i in &self.trace_state_predicates {
                if !facts.matched.get(i) && self.predicates[i].matches_trace_state(trace_state) {
                    facts.matched.set(i);
                }
            }
        }
        for &i in &self.status_predicates {
            if let Predicate::Status { mask } = self.predicates[i]
                && status_bit(span.status_code) & mask != 0
            {
                facts.matched.set(i);
            }
        }
        if self
            .attribute_predicates
            .iter()
            .any(|&i| !facts.matched.get(i))
        {
            self.match_attributes(
                &span.bytes,
                attributes::SPAN_ATTRIBUTES,
                true,
                &mut facts.matched,
            );
        }
    }

    /// Sets the bit of every attribute predicate that the first attribute with its key, in
    /// `message`, matches (the Collector's pdata `Map.Get` returns the first).
    fn match_attributes(&self, message: &[u8], field: u32, on_span: bool, matched: &mut Bits) {
        let mut seen = Bits::with_len(self.predicates.len());
        let mut remaining = self.attribute_predicates.len();
        attributes::for_each_attribute(message, field, |key, value| {
            for &i in &self.attribute_predicates {
                if seen.get(i) || self.predicates[i].attribute_key() != Some(key) {
                    continue;
                }
                seen.set(i);
                remaining -= 1;
                if self.predicates[i].matches_value(value, on_span) {
                    matched.set(i);
                }
            }
            remaining > 0
        });
    }

    /// Decides a trace on its facts. Evaluates in the Collector's order (drop policies first,
    /// early stop on Dropped, and on Sampled with sample_on_first_match), combines with the
    /// Collector's precedence (drop veto; otherwise any Sampled keeps). `now` feeds the
    /// rate-limiting token buckets and composite windows (stateful policies are the only
    /// mutable state; see the type's docs for the locking). Records every evaluated
    /// top-level policy's vote in `votes` (cleared first) for the per-policy metrics;
    /// policies after an early stop have no vote.
    ///
    /// The threshold of a kept trace is [`ThresholdUpdate::Keep`] if any policy that voted
    /// Sampled did so on content (probability 1), else [`ThresholdUpdate::Raise`] with the
    /// lowest threshold (highest probability) among the consistent-probability votes.
    pub fn decide(
        &self,
        facts: &TraceFacts,
        now: Instant,
        votes: &mut Vec<(PolicyIndex, Vote)>,
    ) -> Decision {
        votes.clear();
        let mut first_sampled = None;
        let mut by_content = false;
        let mut lowest: Option<Threshold> = None;
        for &i in &self.order {
            let outcome = self.policies[i].evaluate(facts, now);
            votes.push((i, outcome.vote));
            match outcome.vote {
                Vote::Dropped => return Decision::Dropped { policy: i },
                Vote::NotSampled => {}
                Vote::Sampled => {
                    first_sampled.get_or_insert(i);
                    match outcome.threshold {
                        None => by_content = true,
                        Some(t) => lowest = Some(lowest.map_or(t, |old| old.min(t))),
                    }
                    if self.sample_on_first_match {
                        break;
                    }
                }
            }
        }
        match first_sampled {
            None => Decision::NotSampled,
            Some(policy) => Decision::Sampled {
                policy,
                threshold: match lowest {
                    Some(t) if !by_content => ThresholdUpdate::Raise(t),
                    _ => ThresholdUpdate::Keep,
                },
            },
        }
    }
}

/// The bit of a `StatusCode` value in a status predicate's mask.
fn status_bit(code: i32) -> u8 {
    match code {
        0 => 1,
        1 => 2,
        2 => 4,
        _ => 0,
    }
}

// === compiling ===

#[derive(Default)]
struct Compiler {
    predicates: Vec<Predicate>,
}

impl Compiler {
    fn predicate(&mut self, predicate: Predicate) -> usize {
        self.predicates.push(predicate);
        self.predicates.len() - 1
    }

    /// A node matching when `predicate` holds (or, `invert`ed, when it does not).
    fn matching(&mut self, predicate: Predicate, invert: bool) -> Node {
        Node::Match {
            bit: self.predicate(predicate),
            invert,
        }
    }

    fn node(&mut self, policy: &PolicyConfig) -> Result<Node, PolicyError> {
        Ok(match &policy.kind {
            PolicyKind::AlwaysSample => Node::Always,
            PolicyKind::Latency {
                threshold_ms,
                upper_threshold_ms,
            } => Node::Latency {
                lower_ms: i64::try_from(*threshold_ms).unwrap_or(i64::MAX),
                upper_ms: upper_threshold_ms.map(|u| i64::try_from(u).unwrap_or(i64::MAX)),
            },
            PolicyKind::NumericAttribute {
                key,
                min_value,
                max_value,
                invert_match,
            } => self.matching(
                Predicate::Numeric {
                    key: key.clone(),
                    min: min_value.unwrap_or(i64::MIN),
                    max: max_value.unwrap_or(i64::MAX),
                },
                *invert_match,
            ),
            PolicyKind::Probabilistic {
                sampling_percentage,
                hash_salt,
            } => Node::Probabilistic(match hash_salt {
                Some(salt) => Probabilistic::Hashed {
                    salt: salt.as_bytes().to_vec(),
                    threshold: collector_hash_threshold(sampling_percentage / 100.0),
                },
                None => match Threshold::from_probability(sampling_percentage / 100.0) {
                    Some(t) => Probabilistic::Consistent(t),
                    None => Probabilistic::Never,
                },
            }),
            PolicyKind::StatusCode { status_codes } => self.matching(
                Predicate::Status {
                    mask: status_codes.iter().fold(0, |mask, code| {
                        mask | match code {
                            StatusCodeName::Unset => 1,
                            StatusCodeName::Ok => 2,
                            StatusCodeName::Error => 4,
                        }
                    }),
                },
                false,
            ),
            PolicyKind::StringAttribute {
                key,
                values,
                regex,
                cache_max_size: _,
                invert_match,
            } => {
                let matcher = match regex {
                    Some(regex) => StringMatcher::Regex(regex.set().clone()),
                    // Empty strings never match, as in the Collector.
                    None => StringMatcher::Exact(
                        values.iter().filter(|v| !v.is_empty()).cloned().collect(),
                    ),
                };
                self.matching(
                    Predicate::Str {
                        key: key.clone(),
                        matcher,
                    },
                    *invert_match,
                )
            }
            PolicyKind::BooleanAttribute {
                key,
                value,
                invert_match,
            } => self.matching(
                Predicate::Bool {
                    key: key.clone(),
                    value: *value,
                },
                *invert_match,
            ),
            PolicyKind::TraceState { key, values } => self.matching(
                Predicate::TraceState {
                    key: key.clone(),
                    // As in the Collector: empty values, and values too long to be in a
                    // tracestate entry with this key, can never match.
                    values: values
                        .iter()
                        .filter(|v| !v.is_empty() && key.len() + v.len() < 256)
                        .cloned()
                        .collect(),
                },
                false,
            ),
            PolicyKind::TraceFlags => Node::TraceFlags,
            PolicyKind::RateLimiting {
                spans_per_second,
                burst_capacity,
            } => Node::SpanRate(TokenBucket::new(*spans_per_second, *burst_capacity)),
            PolicyKind::BytesLimiting {
                bytes_per_second,
                burst_capacity,
            } => Node::ByteRate(TokenBucket::new(*bytes_per_second, *burst_capacity)),
            PolicyKind::SpanCount {
                min_spans,
                max_spans,
            } => Node::SpanCount {
                min: *min_spans,
                max: *max_spans,
            },
            PolicyKind::And { sub_policies } => Node::And(self.nodes(sub_policies)?),
            PolicyKind::Not { sub_policy } => Node::Not(Box::new(self.node(sub_policy)?)),
            PolicyKind::Drop { sub_policies } => Node::Drop(self.nodes(sub_policies)?),
            PolicyKind::Composite {
                max_total_spans_per_second,
                policy_order: _,
                sub_policies,
                rate_allocation,
            } => {
                let max_total = *max_total_spans_per_second;
                // The Collector's getRateAllocationMap: a percent > 0 gets that share, a
                // percent <= 0 an equal share, and a sub-policy not listed gets nothing.
                let equal_share = max_total as f64 / sub_policies.len().max(1) as f64;
                let allocated = sub_policies
                    .iter()
                    .map(|sub| {
                        rate_allocation
                            .iter()
                            .rev()
                            .find(|(name, _)| *name == sub.name)
                            .map_or(0, |(_, percent)| {
                                let share = if *percent > 0.0 {
                                    percent / 100.0 * max_total as f64
                                } else {
                                    equal_share
                                };
                                // Truncated toward zero, as Go's int64(float64).
                                share as u64
                            })
                    })
                    .collect();
                Node::Composite(Composite {
                    max_total,
                    subs: self.nodes(sub_policies)?,
                    allocated,
                    state: Mutex::new(CompositeState {
                        epoch: None,
                        window: 0,
                        sampled: vec![0; sub_policies.len()],
                    }),
                })
            }
        })
    }

    fn nodes(&mut self, policies: &[PolicyConfig]) -> Result<Vec<Node>, PolicyError> {
        policies.iter().map(|p| self.node(p)).collect()
    }
}

/// `threshold = floor(MaxUint64 × ratio)` exactly as the Collector computes it with
/// `big.Float`: `MaxUint64` at 64-bit precision times the float64 `ratio`, rounded to
/// 64 significant bits (nearest, ties to even), then truncated to an integer.
fn collector_hash_threshold(ratio: f64) -> u64 {
    if ratio.is_nan() || ratio <= 0.0 {
        return 0;
    }
    if ratio >= 1.0 {
        return u64::MAX;
    }
    // ratio = m × 2^e exactly.
    let bits = ratio.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1 << 52) - 1);
    let (m, e) = if biased == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1 << 52), biased - 1075)
    };
    let product = u128::from(u64::MAX) * u128::from(m); // < 2^117
    let len = 128 - product.leading_zeros() as i32;
    let (mut mantissa, mut exponent) = (product, e);
    if len > 64 {
        let shift = (len - 64) as u32;
        let dropped = product & ((1u128 << shift) - 1);
        let half = 1u128 << (shift - 1);
        mantissa = product >> shift;
        if dropped > half || (dropped == half && mantissa & 1 == 1) {
            mantissa += 1;
        }
        exponent += shift as i32;
    }
    if exponent >= 0 {
        u64::try_from(mantissa << exponent.min(64)).unwrap_or(u64::MAX)
    } else if exponent <= -128 {
        0
    } else {
        u64::try_from(mantissa >> (-exponent) as u32).unwrap_or(u64::MAX)
    }
}

/// FNV-1a 64 over `salt` then the 16 trace id bytes: the Collector's `hashTraceID`.
fn collector_hash(salt: &[u8], trace_id: &TraceId) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in salt.iter().chain(trace_id.as_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

// === predicates ===

/// A content test whose result is a bit of [`TraceFacts`]: set once any span (or the
/// resource of any span) matches.
#[derive(Debug)]
enum Predicate {
    /// `numeric_attribute`: the value read as an integer (pdata's `Int()`: 0 for other
    /// types) is in `[min, max]`.
    Numeric { key: String, min: i64, max: i64 },
    /// `string_attribute`: the value read as a string (pdata's `Str()`: "" for other types)
    /// matches; an empty span value never matches (the Collector skips it).
    Str { key: String, matcher: StringMatcher },
    /// `boolean_attribute`: the value read as a bool (pdata's `Bool()`: false for other
    /// types) equals `value`.
    Bool { key: String, value: bool },
    /// `status_code`: the span's status code is in the mask (bit 0 unset, 1 ok, 2 error).
    Status { mask: u8 },
    /// `trace_state`: the span's tracestate parses and its value under `key` is in `values`.
    TraceState {
        key: String,
        values: HashSet<String>,
    },
}

#[derive(Debug)]
enum StringMatcher {
    Exact(HashSet<String>),
    /// Unanchored, as Go's `MatchString`: a pattern matches anywhere in the value.
    Regex(RegexSet),
}

impl Predicate {
    fn attribute_key(&self) -> Option<&str> {
        match self {
            Predicate::Numeric { key, .. }
            | Predicate::Str { key, .. }
            | Predicate::Bool { key, .. } => Some(key),
            Predicate::Status { .. } | Predicate::TraceState { .. } => None,
        }
    }

    fn matches_value(&self, value: AnyValueRef<'_>, on_span: bool) -> bool {
        match self {
            Predicate::Numeric { min, max, .. } => {
                let v = value.int_or_zero();
                *min <= v && v <= *max
            }
            Predicate::Str { matcher, .. } => {
                let s = value.str_or_empty();
                if on_span && s.is_empty() {
                    return false;
                }
                match matcher {
                    StringMatcher::Exact(set) => set.contains(s),
                    StringMatcher::Regex(set) => set.is_match(s),
                }
            }
            Predicate::Bool { value: want, .. } => value.bool_or_false() == *want,
            Predicate::Status { .. } | Predicate::TraceState { .. } => false,
        }
    }

    fn matches_trace_state(&self, trace_state: &str) -> bool {
        match self {
            Predicate::TraceState { key, values } => {
                trace_state_get(trace_state, key).is_some_and(|v| values.contains(v))
            }
            _ => false,
        }
    }
}

/// The value under `key` of a W3C tracestate, or `None` if the key is absent or the header
/// does not parse. Parsing is as strict as OpenTelemetry Go's `ParseTraceState`, which the
/// Collector uses: at most 32 members, valid keys and values, no duplicate keys; empty
/// members and whitespace around members are allowed.
fn trace_state_get<'a>(trace_state: &'a str, key: &str) -> Option<&'a str> {
    let mut found = None;
    let mut keys: Vec<&str> = Vec::new();
    for member in trace_state.split(',') {
        let member = member.trim_matches([' ', '\t']);
        if member.is_empty() {
            continue;
        }
        let (k, v) = member.split_once('=')?;
        if !valid_ts_key(k) || !valid_ts_value(v) || keys.contains(&k) || keys.len() == 32 {
            return None;
        }
        keys.push(k);
        if k == key {
            found = Some(v);
        }
    }
    found
}

fn valid_ts_key(key: &str) -> bool {
    let tail_ok = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-*/".contains(&b))
    };
    match key.split_once('@') {
        None => {
            key.len() <= 256
                && key.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
                && tail_ok(key)
        }
        Some((tenant, system)) => {
            (1..=241).contains(&tenant.len())
                && tenant
                    .as_bytes()
                    .first()
                    .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                && tail_ok(tenant)
                && (1..=14).contains(&system.len())
                && system
                    .as_bytes()
                    .first()
                    .is_some_and(u8::is_ascii_lowercase)
                && tail_ok(system)
        }
    }
}

fn valid_ts_value(value: &str) -> bool {
    let nblk = |b: u8| (0x21..=0x7e).contains(&b) && b != b',' && b != b'=';
    let bytes = value.as_bytes();
    (1..=256).contains(&bytes.len())
        && bytes.last().is_some_and(|&b| nblk(b))
        && bytes.iter().all(|&b| b == b' ' || nblk(b))
}

// === nodes ===

/// A compiled policy.
#[derive(Debug)]
enum Node {
    Always,
    /// Whole-trace duration in `[lower, ∞)`, or in `(lower, upper]` with an upper bound.
    Latency {
        lower_ms: i64,
        upper_ms: Option<i64>,
    },
    /// A content predicate's bit, possibly inverted (`invert_match`).
    Match {
        bit: usize,
        invert: bool,
    },
    Probabilistic(Probabilistic),
    TraceFlags,
    /// `rate_limiting`: `span_count` tokens per trace.
    SpanRate(TokenBucket),
    /// `bytes_limiting`: the trace's encoded span bytes, as tokens.
    ByteRate(TokenBucket),
    SpanCount {
        min: u64,
        max: Option<u64>,
    },
    And(Vec<Node>),
    Not(Box<Node>),
    Drop(Vec<Node>),
    Composite(Composite),
}

#[derive(Debug)]
enum Probabilistic {
    /// 0 %.
    Never,
    /// OpenTelemetry consistent probability: keep iff `R >= T`.
    Consistent(Threshold),
    /// The Collector's `FNV-1a-64(salt ‖ trace id) <= threshold`.
    Hashed { salt: Vec<u8>, threshold: u64 },
}

/// One evaluation: the vote and, for a Sampled vote that rests on consistent probability
/// alone, the threshold it was taken at.
#[derive(Clone, Copy, Debug)]
struct Outcome {
    vote: Vote,
    threshold: Option<Threshold>,
}

impl Outcome {
    const SAMPLED: Outcome = Outcome {
        vote: Vote::Sampled,
        threshold: None,
    };
    const NOT_SAMPLED: Outcome = Outcome {
        vote: Vote::NotSampled,
        threshold: None,
    };

    fn content(keep: bool) -> Outcome {
        if keep {
            Outcome::SAMPLED
        } else {
            Outcome::NOT_SAMPLED
        }
    }
}

impl Node {
    fn is_stateful(&self) -> bool {
        match self {
            Node::SpanRate(_) | Node::ByteRate(_) | Node::Composite(_) => true,
            Node::And(subs) | Node::Drop(subs) => subs.iter().any(Node::is_stateful),
            Node::Not(sub) => sub.is_stateful(),
            _ => false,
        }
    }

    fn evaluate(&self, facts: &TraceFacts, now: Instant) -> Outcome {
        match self {
            Node::Always => Outcome::SAMPLED,
            Node::Latency { lower_ms, upper_ms } => {
                let d = facts.duration_ms();
                Outcome::content(match upper_ms {
                    None => d >= *lower_ms,
                    Some(upper) => *lower_ms < d && d <= *upper,
                })
            }
            Node::Match { bit, invert } => Outcome::content(facts.matched.get(*bit) != *invert),
            Node::Probabilistic(Probabilistic::Never) => Outcome::NOT_SAMPLED,
            Node::Probabilistic(Probabilistic::Consistent(t)) => {
                if t.keeps(facts.randomness()) {
                    Outcome {
                        vote: Vote::Sampled,
                        threshold: Some(*t),
                    }
                } else {
                    Outcome::NOT_SAMPLED
                }
            }
            Node::Probabilistic(Probabilistic::Hashed { salt, threshold }) => {
                Outcome::content(collector_hash(salt, &facts.trace_id) <= *threshold)
            }
            Node::TraceFlags => Outcome::content(facts.any_sampled_flag),
            Node::SpanRate(bucket) => Outcome::content(bucket.allow(now, facts.span_count())),
            Node::ByteRate(bucket) => Outcome::content(bucket.allow(now, facts.bytes)),
            Node::SpanCount { min, max } => Outcome::content(
                facts.span_count() >= *min && max.is_none_or(|max| facts.span_count() <= max),
            ),
            Node::And(subs) => {
                // Every sub-policy must sample; the first that does not ends the evaluation
                // (as the Collector's `and`). Two probabilistic sub-policies keep iff R is
                // above both thresholds: the higher one.
                let mut threshold: Option<Threshold> = None;
                for sub in subs {
                    let outcome = sub.evaluate(facts, now);
                    if outcome.vote != Vote::Sampled {
                        return Outcome::NOT_SAMPLED;
                    }
                    if let Some(t) = outcome.threshold {
                        threshold = Some(threshold.map_or(t, |old| old.max(t)));
                    }
                }
                Outcome {
                    vote: Vote::Sampled,
                    threshold,
                }
            }
            Node::Not(sub) => match sub.evaluate(facts, now).vote {
                // A flipped probabilistic vote is no longer consistent sampling: the trace
                // is kept as content (probability 1).
                Vote::Sampled => Outcome::NOT_SAMPLED,
                Vote::NotSampled => Outcome::SAMPLED,
                Vote::Dropped => Outcome {
                    vote: Vote::Dropped,
                    threshold: None,
                },
            },
            Node::Drop(subs) => {
                for sub in subs {
                    if sub.evaluate(facts, now).vote != Vote::Sampled {
                        return Outcome::NOT_SAMPLED;
                    }
                }
                Outcome {
                    vote: Vote::Dropped,
                    threshold: None,
                }
            }
            Node::Composite(composite) => composite.evaluate(facts, now),
        }
    }
}

/// Locks `mutex`, recovering the data if a previous holder panicked: the state is plain
/// counters, valid after any partial update.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A token bucket as Go's `x/time/rate` limiter used with `AllowN`: `rate` tokens a second
/// up to `burst`, starting full; a request for more than `burst` never passes.
#[derive(Debug)]
struct TokenBucket {
    rate: f64,
    burst: f64,
    state: Mutex<BucketState>,
}

#[derive(Debug)]
struct BucketState {
    tokens: f64,
    /// When `tokens` was last brought up to date; `None` before the first request.
    last: Option<Instant>,
}

impl TokenBucket {
    fn new(rate: u64, burst: Option<u64>) -> Self {
        let burst = burst.unwrap_or_else(|| rate.saturating_mul(2));
        Self {
            rate: rate as f64,
            burst: burst as f64,
            state: Mutex::new(BucketState {
                tokens: burst as f64,
                last: None,
            }),
        }
    }

    /// Takes `n` tokens at `now` if there are that many. A `now` earlier than a previous
    /// one adds no tokens (time does not run backwards for the bucket).
    fn allow(&self, now: Instant, n: u64) -> bool {
        let mut state = lock(&self.state);
        let tokens = match state.last {
            None => self.burst,
            Some(last) => (state.tokens
                + now.saturating_duration_since(last).as_secs_f64() * self.rate)
                .min(self.burst),
        };
        state.last = Some(state.last.map_or(now, |last| last.max(now)));
        let n = n as f64;
        if n <= tokens {
            state.tokens = tokens - n;
            true
        } else {
            state.tokens = tokens;
            false
        }
    }
}

/// `composite`: sub-policies with a spans-per-second allocation each, counted in one-second
/// windows. The windows are whole seconds since the first decision this policy took part
/// in (the Collector uses wall-clock seconds); `now` is monotonic, so a clock step cannot
/// reset or stretch a window.
#[derive(Debug)]
struct Composite {
    max_total: u64,
    subs: Vec<Node>,
    allocated: Vec<u64>,
    state: Mutex<CompositeState>,
}

#[derive(Debug)]
struct CompositeState {
    epoch: Option<Instant>,
    window: u64,
    sampled: Vec<u64>,
}

impl Composite {
    /// The Collector's `Composite.Evaluate`: the first sub-policy that votes Sampled
    /// decides. If its spans this window, with this trace's, stay within both its
    /// allocation and `max_total`, the trace is sampled and counted; otherwise it is not
    /// sampled (and not counted, so a smaller trace may still fit), and later sub-policies
    /// are not tried.
    fn evaluate(&self, facts: &TraceFacts, now: Instant) -> Outcome {
        for (i, sub) in self.subs.iter().enumerate() {
            let outcome = sub.evaluate(facts, now);
            if outcome.vote != Vote::Sampled {
                continue;
            }
            let mut state = lock(&self.state);
            let epoch = *state.epoch.get_or_insert(now);
            let window = now.saturating_duration_since(epoch).as_secs();
            if window != state.window {
                state.window = window;
                state.sampled.iter_mut().for_each(|count| *count = 0);
            }
            let if_sampled = state.sampled[i].saturating_add(facts.span_count());
            if if_sampled <= self.allocated[i] && if_sampled <= self.max_total {
                state.sampled[i] = if_sampled;
                return Outcome {
                    vote: Vote::Sampled,
                    threshold: outcome.threshold,
                };
            }
            return Outcome::NOT_SAMPLED;
        }
        Outcome::NOT_SAMPLED
    }
}

// === bits ===

/// A fixed-length bit set: 64 bits inline, more on the heap (a policy set rarely has more
/// than 64 content predicates, so most traces' facts allocate nothing for it).
#[derive(Clone, Debug, Default)]
struct Bits {
    inline: u64,
    spill: Box<[u64]>,
}

impl Bits {
    fn with_len(len: usize) -> Self {
        let spill_words = len.saturating_sub(64).div_ceil(64);
        Self {
            inline: 0,
            spill: vec![0; spill_words].into_boxed_slice(),
        }
    }

    fn get(&self, i: usize) -> bool {
        if i < 64 {
            self.inline & (1 << i) != 0
        } else {
            self.spill
                .get((i - 64) / 64)
                .is_some_and(|word| word & (1 << ((i - 64) % 64)) != 0)
        }
    }

    fn set(&mut self, i: usize) {
        if i < 64 {
            self.inline |= 1 << i;
        } else if let Some(word) = self.spill.get_mut((i - 64) / 64) {
            *word |= 1 << ((i - 64) % 64);
        }
    }

    fn or(&mut self, other: &Bits) {
        self.inline |= other.inline;
        for (word, other) in self.spill.iter_mut().zip(other.spill.iter()) {
            *word |= other;
        }
    }
}
