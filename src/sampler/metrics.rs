//! The tail sampler's self-metrics: the Collector's `otelcol_processor_tail_sampling_*`
//! names where the meaning matches, and tailgate's own for bytes and early decisions.

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};

use super::policy::Vote;
use crate::config::ComponentId;

const PREFIX: &str = "otelcol_processor_tail_sampling_";

/// Why a trace was decided before its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EarlyReason {
    /// `num_traces` was reached: the oldest traces were decided.
    NumTraces,
    /// The memory budget was under pressure: the oldest traces were decided.
    MemoryPressure,
    /// The trace grew past `maximum_trace_size_bytes`.
    TraceTooLarge,
    /// The replica was leaving (SIGTERM) and the trace could not be handed off to a peer.
    Leaving,
}

impl EarlyReason {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::NumTraces => "num_traces",
            Self::MemoryPressure => "memory_pressure",
            Self::TraceTooLarge => "trace_too_large",
            Self::Leaving => "leaving",
        }
    }
}

/// The final outcome of a decided span, for the accounting of spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanOutcome {
    /// Kept and passed on.
    Sampled,
    /// Not kept by any policy (intentional).
    NotSampled,
    /// Vetoed by a `drop` policy (intentional).
    DroppedByPolicy,
    /// Dropped undecided at shutdown because `drop_pending_traces_on_shutdown` is set.
    DroppedOnShutdown,
    /// Undecided, sent to the replica that owns its trace (`hand_off`): decided there.
    HandedOff,
}

impl SpanOutcome {
    fn label(self) -> &'static str {
        match self {
            Self::Sampled => "sampled",
            Self::NotSampled => "not_sampled",
            Self::DroppedByPolicy => "dropped_by_policy",
            Self::DroppedOnShutdown => "dropped_on_shutdown",
            Self::HandedOff => "handed_off",
        }
    }
}

/// The families, registered once per registry.
#[derive(Clone)]
pub struct SamplerMetricFamilies {
    count_traces_sampled: IntCounterVec,
    global_count_traces_sampled: IntCounterVec,
    traces_on_memory: IntGaugeVec,
    dropped_too_early: IntCounterVec,
    new_trace_id_received: IntCounterVec,
    early_releases: IntCounterVec,
    late_span_age: HistogramVec,
    dropped_too_large: IntCounterVec,
    decision_timer_latency: HistogramVec,
    bytes_held: IntGaugeVec,
    spans_held: IntGaugeVec,
    late_bytes_held: IntGaugeVec,
    late_spans_held: IntGaugeVec,
    early_decisions: IntCounterVec,
    decision_delay: HistogramVec,
    spans: IntCounterVec,
    hand_off_traces: IntCounterVec,
    hand_off_spans: IntCounterVec,
    forwarded_spans: IntCounterVec,
    hand_off_decisions: IntCounterVec,
    late_after_move: IntCounterVec,
}

fn counter(name: &str, help: &str, labels: &[&str]) -> Result<IntCounterVec, prometheus::Error> {
    IntCounterVec::new(Opts::new(name, help), labels)
}

impl SamplerMetricFamilies {
    /// Registers the families in `registry`.
    ///
    /// # Errors
    ///
    /// When they are already registered there.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let p = |name: &str| format!("{PREFIX}{name}");
        let families = Self {
            count_traces_sampled: counter(
                &p("count_traces_sampled_total"),
                "Count of traces that each policy voted to sample (sampled=true) or not.",
                &["processor", "policy", "sampled"],
            )?,
            global_count_traces_sampled: counter(
                &p("global_count_traces_sampled_total"),
                "Count of traces by final decision.",
                &["processor", "sampled"],
            )?,
            traces_on_memory: IntGaugeVec::new(
                Opts::new(
                    p("sampling_traces_on_memory"),
                    "Number of traces held awaiting a decision.",
                ),
                &["processor"],
            )?,
            dropped_too_early: counter(
                &p("sampling_trace_dropped_too_early_total"),
                "Traces evicted before their decision. tailgate never evicts undecided \
                 traces, so this stays 0; it exists for the Collector's dashboards.",
                &["processor"],
            )?,
            new_trace_id_received: counter(
                &p("new_trace_id_received_total"),
                "Count of trace ids seen for the first time.",
                &["processor"],
            )?,
            early_releases: counter(
                &p("early_releases_from_cache_decision_total"),
                "Spans that followed a cached decision of their trace (late spans).",
                &["processor", "sampled"],
            )?,
            late_span_age: HistogramVec::new(
                HistogramOpts::new(
                    p("sampling_late_span_age"),
                    "Seconds between a trace's decision and the arrival of a late span.",
                )
                .buckets(vec![1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0]),
                &["processor"],
            )?,
            dropped_too_large: counter(
                &p("traces_dropped_too_large_total"),
                "Traces over maximum_trace_size_bytes that were not kept.",
                &["processor"],
            )?,
            decision_timer_latency: HistogramVec::new(
                HistogramOpts::new(
                    p("sampling_decision_timer_latency"),
                    "Milliseconds spent deciding and passing on one round of due traces.",
                )
                .buckets(vec![
                    1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0,
                ]),
                &["processor"],
            )?,
            bytes_held: IntGaugeVec::new(
                Opts::new(
                    "tailgate_sampler_bytes_held",
                    "Bytes held by the sampler: pending traces (span bytes, resources, \
                     scopes and index) and late spans of kept traces waiting for room \
                     downstream.",
                ),
                &["processor"],
            )?,
            spans_held: IntGaugeVec::new(
                Opts::new(
                    "tailgate_sampler_spans_held",
                    "Spans held by the sampler: awaiting a decision, or late spans of kept \
                     traces waiting for room downstream.",
                ),
                &["processor"],
            )?,
            late_bytes_held: IntGaugeVec::new(
                Opts::new(
                    "tailgate_sampler_late_bytes_held",
                    "Bytes of late spans of kept traces waiting for room downstream (part of \
                     tailgate_sampler_bytes_held), charged to the memory budget.",
                ),
                &["processor"],
            )?,
            late_spans_held: IntGaugeVec::new(
                Opts::new(
                    "tailgate_sampler_late_spans_held",
                    "Late spans of kept traces waiting for room downstream (part of \
                     tailgate_sampler_spans_held).",
                ),
                &["processor"],
            )?,
            early_decisions: counter(
                "tailgate_sampler_early_decisions_total",
                "Traces decided before their deadline, by reason.",
                &["processor", "reason"],
            )?,
            decision_delay: HistogramVec::new(
                HistogramOpts::new(
                    "tailgate_sampler_decision_delay_seconds",
                    "Seconds from a trace's first span to its decision.",
                )
                .buckets(vec![0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0]),
                &["processor"],
            )?,
            spans: counter(
                "tailgate_sampler_spans_total",
                "Spans leaving the sampler, by outcome: sampled, not_sampled and \
                 dropped_by_policy are decisions; handed_off went undecided to the \
                 replica that owns the trace; dropped_on_shutdown is a loss.",
                &["processor", "outcome"],
            )?,
            hand_off_traces: counter(
                "tailgate_sampler_handoff_traces_total",
                "Undecided traces handed whole to the replica that owns them after a \
                 membership change (direction=sent), or taken from a peer \
                 (direction=received).",
                &["processor", "direction"],
            )?,
            hand_off_spans: counter(
                "tailgate_sampler_handoff_spans_total",
                "Spans of the hand-offs in tailgate_sampler_handoff_traces_total, and \
                 spans forwarded at arrival (sent), or taken from a peer (received).",
                &["processor", "direction"],
            )?,
            forwarded_spans: counter(
                "tailgate_sampler_forwarded_spans_total",
                "Spans of traces owned by another replica, forwarded to it on arrival (a \
                 peer routed them on a ring that was not yet this one's).",
                &["processor"],
            )?,
            hand_off_decisions: counter(
                "tailgate_sampler_handoff_decisions_total",
                "Recent keep decisions of traces another replica owns after a membership \
                 change, handed to it so that their late spans follow them (sent), or taken \
                 from a peer (received).",
                &["processor", "direction"],
            )?,
            late_after_move: counter(
                "tailgate_sampler_late_after_move_spans_total",
                "Late spans that reached this replica, the new owner of their trace, after \
                 another replica had kept the trace (a membership change in between); they \
                 follow the keep decision handed over with the change.",
                &["processor"],
            )?,
        };
        registry.register(Box::new(families.count_traces_sampled.clone()))?;
        registry.register(Box::new(families.global_count_traces_sampled.clone()))?;
        registry.register(Box::new(families.traces_on_memory.clone()))?;
        registry.register(Box::new(families.dropped_too_early.clone()))?;
        registry.register(Box::new(families.new_trace_id_received.clone()))?;
        registry.register(Box::new(families.early_releases.clone()))?;
        registry.register(Box::new(families.late_span_age.clone()))?;
        registry.register(Box::new(families.dropped_too_large.clone()))?;
        registry.register(Box::new(families.decision_timer_latency.clone()))?;
        registry.register(Box::new(families.bytes_held.clone()))?;
        registry.register(Box::new(families.spans_held.clone()))?;
        registry.register(Box::new(families.late_bytes_held.clone()))?;
        registry.register(Box::new(families.late_spans_held.clone()))?;
        registry.register(Box::new(families.early_decisions.clone()))?;
        registry.register(Box::new(families.decision_delay.clone()))?;
        registry.register(Box::new(families.spans.clone()))?;
        registry.register(Box::new(families.hand_off_traces.clone()))?;
        registry.register(Box::new(families.hand_off_spans.clone()))?;
        registry.register(Box::new(families.forwarded_spans.clone()))?;
        registry.register(Box::new(families.hand_off_decisions.clone()))?;
        registry.register(Box::new(families.late_after_move.clone()))?;
        Ok(families)
    }

    /// `metrics` with the hand-off counters of processor `id` (a sampler that follows a
    /// ring with `hand_off`); only such samplers expose them.
    pub fn for_hand_off(&self, id: &ComponentId, metrics: SamplerMetrics) -> SamplerMetrics {
        let processor = id.written.as_str();
        let traces = |direction| {
            self.hand_off_traces
                .with_label_values(&[processor, direction])
        };
        let spans = |direction| {
            self.hand_off_spans
                .with_label_values(&[processor, direction])
        };
        SamplerMetrics {
            hand_off: Some(HandOffMetrics {
                traces_sent: traces("sent"),
                traces_received: traces("received"),
                spans_sent: spans("sent"),
                spans_received: spans("received"),
                forwarded_spans: self.forwarded_spans.with_label_values(&[processor]),
                decisions_sent: self
                    .hand_off_decisions
                    .with_label_values(&[processor, "sent"]),
                decisions_received: self
                    .hand_off_decisions
                    .with_label_values(&[processor, "received"]),
                late_after_move: self.late_after_move.with_label_values(&[processor]),
            }),
            ..metrics
        }
    }

    /// Handles for one tail_sampling processor and its policies (by index); spans it loses
    /// are also counted in `dropped_spans` (`tailgate_spans_dropped_total`).
    pub fn for_processor(
        &self,
        id: &ComponentId,
        policy_names: &[String],
        dropped_spans: &IntCounterVec,
    ) -> SamplerMetrics {
        let processor = id.written.as_str();
        let votes = policy_names
            .iter()
            .map(|policy| {
                [
                    self.count_traces_sampled
                        .with_label_values(&[processor, policy, "true"]),
                    self.count_traces_sampled
                        .with_label_values(&[processor, policy, "false"]),
                ]
            })
            .collect();
        let early = |reason: EarlyReason| {
            self.early_decisions
                .with_label_values(&[processor, reason.label()])
        };
        let spans =
            |outcome: SpanOutcome| self.spans.with_label_values(&[processor, outcome.label()]);
        self.dropped_too_early.with_label_values(&[processor]);
        SamplerMetrics {
            votes,
            sampled: self
                .global_count_traces_sampled
                .with_label_values(&[processor, "true"]),
            not_sampled: self
                .global_count_traces_sampled
                .with_label_values(&[processor, "false"]),
            traces_on_memory: self.traces_on_memory.with_label_values(&[processor]),
            new_trace_id_received: self.new_trace_id_received.with_label_values(&[processor]),
            late_kept: self.early_releases.with_label_values(&[processor, "true"]),
            late_not_kept: self.early_releases.with_label_values(&[processor, "false"]),
            late_span_age: self.late_span_age.with_label_values(&[processor]),
            dropped_too_large: self.dropped_too_large.with_label_values(&[processor]),
            decision_timer_latency: self.decision_timer_latency.with_label_values(&[processor]),
            bytes_held: self.bytes_held.with_label_values(&[processor]),
            spans_held: self.spans_held.with_label_values(&[processor]),
            late_bytes_held: self.late_bytes_held.with_label_values(&[processor]),
            late_spans_held: self.late_spans_held.with_label_values(&[processor]),
            early: [
                early(EarlyReason::NumTraces),
                early(EarlyReason::MemoryPressure),
                early(EarlyReason::TraceTooLarge),
                early(EarlyReason::Leaving),
            ],
            decision_delay: self.decision_delay.with_label_values(&[processor]),
            spans: [
                spans(SpanOutcome::Sampled),
                spans(SpanOutcome::NotSampled),
                spans(SpanOutcome::DroppedByPolicy),
                spans(SpanOutcome::DroppedOnShutdown),
                spans(SpanOutcome::HandedOff),
            ],
            hand_off: None,
            lost_on_shutdown: dropped_spans.with_label_values(&["pending_on_shutdown"]),
        }
    }
}

/// One tail_sampling processor's metric handles.
#[derive(Clone)]
pub struct SamplerMetrics {
    votes: Vec<[IntCounter; 2]>,
    sampled: IntCounter,
    not_sampled: IntCounter,
    pub(super) traces_on_memory: IntGauge,
    pub(super) new_trace_id_received: IntCounter,
    late_kept: IntCounter,
    late_not_kept: IntCounter,
    late_span_age: Histogram,
    pub(super) dropped_too_large: IntCounter,
    pub(super) decision_timer_latency: Histogram,
    pub(super) bytes_held: IntGauge,
    pub(super) spans_held: IntGauge,
    pub(super) late_bytes_held: IntGauge,
    pub(super) late_spans_held: IntGauge,
    early: [IntCounter; 4],
    pub(super) decision_delay: Histogram,
    spans: [IntCounter; 5],
    /// Present once the sampler follows a ring ([`SamplerMetricFamilies::for_hand_off`]).
    pub(super) hand_off: Option<HandOffMetrics>,
    lost_on_shutdown: IntCounter,
}

/// The hand-off counters of one sampler that follows a ring.
#[derive(Clone)]
pub(super) struct HandOffMetrics {
    pub(super) traces_sent: IntCounter,
    pub(super) traces_received: IntCounter,
    pub(super) spans_sent: IntCounter,
    pub(super) spans_received: IntCounter,
    pub(super) forwarded_spans: IntCounter,
    pub(super) decisions_sent: IntCounter,
    pub(super) decisions_received: IntCounter,
    pub(super) late_after_move: IntCounter,
}

impl SamplerMetrics {
    /// Handles registered nowhere, for tests.
    pub fn unregistered(policy_names: &[String]) -> Self {
        let registry = Registry::new();
        let families = SamplerMetricFamilies::register(&registry)
            .unwrap_or_else(|error| unreachable!("fresh registry: {error}"));
        let dropped = IntCounterVec::new(Opts::new("dropped", "test"), &["reason"])
            .unwrap_or_else(|error| unreachable!("valid metric: {error}"));
        families.for_processor(
            &ComponentId {
                written: "tail_sampling".into(),
                kind: "tail_sampling".into(),
                name: None,
            },
            policy_names,
            &dropped,
        )
    }

    pub(super) fn record_votes(&self, votes: &[(usize, Vote)]) {
        for (policy, vote) in votes {
            if let Some([yes, no]) = self.votes.get(*policy) {
                match vote {
                    Vote::Sampled => yes.inc(),
                    Vote::NotSampled | Vote::Dropped => no.inc(),
                }
            }
        }
    }

    pub(super) fn record_decision(&self, kept: bool, spans: u64, outcome: SpanOutcome) {
        if kept {
            self.sampled.inc();
        } else {
            self.not_sampled.inc();
        }
        self.record_spans(outcome, spans);
    }

    pub(super) fn record_spans(&self, outcome: SpanOutcome, spans: u64) {
        let index = match outcome {
            SpanOutcome::Sampled => 0,
            SpanOutcome::NotSampled => 1,
            SpanOutcome::DroppedByPolicy => 2,
            SpanOutcome::DroppedOnShutdown => {
                self.lost_on_shutdown.inc_by(spans);
                3
            }
            SpanOutcome::HandedOff => 4,
        };
        self.spans[index].inc_by(spans);
    }

    /// Counts late spans that followed a cached decision; `age_seconds` is the time since
    /// the decision when it is known (the compact not-kept cache does not keep it).
    pub(super) fn record_late(&self, kept: bool, spans: u64, age_seconds: Option<f64>) {
        if kept {
            self.late_kept.inc_by(spans);
            self.record_spans(SpanOutcome::Sampled, spans);
        } else {
            self.late_not_kept.inc_by(spans);
            self.record_spans(SpanOutcome::NotSampled, spans);
        }
        if let Some(age) = age_seconds {
            self.late_span_age.observe(age);
        }
    }

    pub(super) fn record_early(&self, reason: EarlyReason) {
        let index = match reason {
            EarlyReason::NumTraces => 0,
            EarlyReason::MemoryPressure => 1,
            EarlyReason::TraceTooLarge => 2,
            EarlyReason::Leaving => 3,
        };
        self.early[index].inc();
    }
}
