//! Tests of the policy layer: each policy type on traces built with prost, encoded, read
//! back by the wire reader and observed span by span, as the buffer does.

use std::time::{Duration, Instant};

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use proptest::prelude::*;
use prost::Message;

use super::*;
use crate::config::{ProcessorConfig, load_str_with_env};
use crate::sampler::threshold::{MAX_ADJUSTED_COUNT, parse_th};

// === helpers ===

/// The `tail_sampling` settings of a config whose processor has `body` (YAML, indented by
/// four spaces, under `tail_sampling:`).
fn tail_config(body: &str) -> TailSamplingConfig {
    let yaml = format!(
        "receivers:\n  otlp:\n    protocols:\n      grpc:\nprocessors:\n  tail_sampling:\n{body}\n\
         exporters:\n  debug:\nservice:\n  pipelines:\n    traces:\n      receivers: [otlp]\n      \
         processors: [tail_sampling]\n      exporters: [debug]\n"
    );
    let config = match load_str_with_env(&[&yaml], &|_| None) {
        Ok(config) => config,
        Err(error) => panic!("config should load:\n{error}\n---\n{yaml}"),
    };
    match config.processors.values().next() {
        Some(ProcessorConfig::TailSampling(tail)) => tail.clone(),
        other => panic!("expected tail_sampling, got {other:?}"),
    }
}

/// A policy set from a YAML list of policies (flow or block style, indented by six).
fn policies(list: &str) -> PolicySet {
    PolicySet::compile(&tail_config(&format!("    policies:\n{list}"))).unwrap()
}

fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn s(value: &str) -> Value {
    Value::StringValue(value.to_owned())
}

/// One trace: spans grouped under resources.
#[derive(Clone, Debug, Default)]
struct Trace {
    id: [u8; 16],
    groups: Vec<(Vec<KeyValue>, Vec<Span>)>,
}

impl Trace {
    fn new(id: u128) -> Self {
        Self {
            id: id.to_be_bytes(),
            groups: Vec::new(),
        }
    }

    /// Adds a span under a resource with `resource` attributes.
    fn span(mut self, resource: Vec<KeyValue>, edit: impl FnOnce(&mut Span)) -> Self {
        let mut span = Span {
            trace_id: self.id.to_vec(),
            span_id: vec![1; 8],
            name: "op".into(),
            start_time_unix_nano: 1_000_000_000,
            end_time_unix_nano: 1_001_000_000,
            ..Default::default()
        };
        edit(&mut span);
        self.groups.push((resource, vec![span]));
        self
    }

    fn plain(self) -> Self {
        self.span(vec![], |_| {})
    }

    fn request(&self) -> Bytes {
        let request = ExportTraceServiceRequest {
            resource_spans: self
                .groups
                .iter()
                .map(|(attributes, spans)| ResourceSpans {
                    resource: Some(Resource {
                        attributes: attributes.clone(),
                        ..Default::default()
                    }),
                    scope_spans: vec![ScopeSpans {
                        spans: spans.clone(),
                        ..Default::default()
                    }],
                    ..Default::default()
                })
                .collect(),
        };
        Bytes::from(request.encode_to_vec())
    }

    /// The facts after observing every span, in request order.
    fn facts(&self, set: &PolicySet) -> TraceFacts {
        let mut facts = set.new_facts(TraceId(self.id));
        let parsed = crate::otlp::parse_traces_request(&self.request()).unwrap();
        for rs in &parsed {
            let resource = set.observe_resource(&rs.resource);
            for ss in &rs.scope_spans {
                for span in &ss.spans {
                    set.observe_span(&mut facts, &resource, span);
                }
            }
        }
        facts
    }

    fn decide_at(&self, set: &PolicySet, now: Instant) -> Decision {
        let mut votes = Vec::new();
        set.decide(&self.facts(set), now, &mut votes)
    }

    fn decide(&self, set: &PolicySet) -> Decision {
        self.decide_at(set, Instant::now())
    }

    fn kept(&self, set: &PolicySet) -> bool {
        matches!(self.decide(set), Decision::Sampled { .. })
    }
}

fn sampled(policy: usize) -> Decision {
    Decision::Sampled {
        policy,
        threshold: ThresholdUpdate::Keep,
    }
}

/// Runs `cases` of (description, trace, kept?) against `set`.
fn table(set: &PolicySet, cases: &[(&str, Trace, bool)]) {
    for (what, trace, want) in cases {
        assert_eq!(trace.kept(set), *want, "{what}");
    }
}

/// Trace 1 with one span, edited by `edit`, under an empty resource.
fn one_span(edit: impl FnOnce(&mut Span)) -> Trace {
    Trace::new(1).span(vec![], edit)
}

/// Trace 1 with two spans, edited by `first` and `second`, under empty resources.
fn two_spans(first: impl FnOnce(&mut Span), second: impl FnOnce(&mut Span)) -> Trace {
    Trace::new(1).span(vec![], first).span(vec![], second)
}

/// Trace 1 with one plain span under a resource with `attributes`.
fn under_resource(attributes: Vec<KeyValue>) -> Trace {
    Trace::new(1).span(attributes, |_| {})
}

/// A span edit adding the attribute `key: value`.
fn with_attr(key: &'static str, value: Value) -> impl FnOnce(&mut Span) {
    move |span| span.attributes.push(kv(key, value))
}

/// Asks `set` to decide each step's trace at its instant, in order, as stateful policies
/// must see them; the note names the step in a failure.
fn in_order(set: &PolicySet, steps: &[(&Trace, Instant, Decision, &str)]) {
    for (trace, at, want, note) in steps {
        assert_eq!(trace.decide_at(set, *at), *want, "{note}");
    }
}

/// Runs `cases` against the policy set of `list` (as [`policies`]).
fn policy_table(list: &str, cases: &[(&str, Trace, bool)]) {
    table(&policies(list), cases);
}

fn with_ms(ms: u64) -> impl FnOnce(&mut Span) {
    move |span| span.end_time_unix_nano = span.start_time_unix_nano + ms * 1_000_000
}

// === one test per policy type ===

/// Scenario: `always_sample` on any trace.
/// Guarantees: it is kept by policy 0, at probability 1 (`th` left as received).
#[test]
fn always_sample() {
    let set = policies("      - {name: all, type: always_sample}");
    assert_eq!(Trace::new(1).plain().decide(&set), sampled(0));
    assert_eq!(set.names(), ["all"]);
}

/// Scenario: `latency` with and without an upper bound over traces whose spans together
/// span various durations.
/// Guarantees: the duration is latest end minus earliest start over all spans; without an
/// upper bound `>= threshold_ms` keeps; with one, `(threshold_ms, upper_threshold_ms]`.
#[test]
fn latency() {
    let set = policies("      - {name: slow, type: latency, latency: {threshold_ms: 500}}");
    let spread = two_spans(with_ms(300), |span| {
        span.start_time_unix_nano += 200_000_000;
        span.end_time_unix_nano = span.start_time_unix_nano + 300_000_000;
    });
    table(
        &set,
        &[
            ("499ms", one_span(with_ms(499)), false),
            ("500ms", one_span(with_ms(500)), true),
            ("two spans covering 500ms", spread, true),
        ],
    );
    policy_table(
        "      - {name: band, type: latency, latency: {threshold_ms: 100, upper_threshold_ms: 200}}",
        &[
            ("100ms", one_span(with_ms(100)), false),
            ("150ms", one_span(with_ms(150)), true),
            ("200ms", one_span(with_ms(200)), true),
            ("201ms", one_span(with_ms(201)), false),
        ],
    );
}

/// Scenario: `numeric_attribute` with both bounds, with only one, and inverted, over span
/// and resource attributes, duplicates and non-integer values.
/// Guarantees: a resource or span Int attribute in `[min, max]` keeps; a 0 bound is no
/// bound; the first occurrence of a key is the one read; a non-Int value reads as 0 (pdata);
/// `invert_match` keeps exactly the traces where nothing matches.
#[test]
fn numeric_attribute() {
    let attr = |v: i64| with_attr("http.status", Value::IntValue(v));
    policy_table(
        "      - {name: num, type: numeric_attribute, numeric_attribute: {key: http.status, min_value: 500, max_value: 599}}",
        &[
            ("span 503", one_span(attr(503)), true),
            ("span 404", one_span(attr(404)), false),
            ("span 599", one_span(attr(599)), true),
            ("no attribute", Trace::new(1).plain(), false),
            (
                "resource 500",
                under_resource(vec![kv("http.status", Value::IntValue(500))]),
                true,
            ),
            ("second of two spans", two_spans(attr(200), attr(502)), true),
            (
                "duplicate key: first wins",
                one_span(|span| {
                    span.attributes
                        .push(kv("http.status", Value::IntValue(200)));
                    span.attributes
                        .push(kv("http.status", Value::IntValue(500)));
                }),
                false,
            ),
            (
                "string value",
                one_span(with_attr("http.status", s("503"))),
                false,
            ),
        ],
    );
    policy_table(
        "      - {name: num, type: numeric_attribute, numeric_attribute: {key: k, max_value: 10}}",
        &[
            (
                "-100",
                one_span(with_attr("k", Value::IntValue(-100))),
                true,
            ),
            ("11", one_span(with_attr("k", Value::IntValue(11))), false),
            // pdata's Int() of a string is 0, which is within (-inf, 10].
            ("string reads as 0", one_span(with_attr("k", s("x"))), true),
        ],
    );
    policy_table(
        "      - {name: num, type: numeric_attribute, numeric_attribute: {key: http.status, min_value: 500, max_value: 599, invert_match: true}}",
        &[
            ("match", one_span(attr(503)), false),
            ("no match", one_span(attr(200)), true),
            ("missing", Trace::new(1).plain(), true),
            ("one of two matches", two_spans(attr(200), attr(500)), false),
        ],
    );
}

/// Scenario: consistent `probabilistic` (no `hash_salt`) at 100 %, 0 % and 50 %, with the
/// randomness taken from the trace id or from an `rv` in a span's tracestate.
/// Guarantees: 100 % keeps all with `Raise(th:0)`, 0 % keeps none; at 50 % a trace is kept
/// iff R >= 2^55, where R is `rv` when present (the smallest if spans disagree) else the
/// low 56 bits of the trace id; a kept trace raises `th` to the policy's threshold.
#[test]
fn probabilistic_consistent() {
    let all = policies(
        "      - {name: p, type: probabilistic, probabilistic: {sampling_percentage: 100}}",
    );
    assert_eq!(
        Trace::new(0).plain().decide(&all),
        Decision::Sampled {
            policy: 0,
            threshold: ThresholdUpdate::Raise(Threshold::ALWAYS)
        }
    );
    let none =
        policies("      - {name: p, type: probabilistic, probabilistic: {sampling_percentage: 0}}");
    assert_eq!(
        Trace::new(u128::MAX).plain().decide(&none),
        Decision::NotSampled
    );

    let half = policies(
        "      - {name: p, type: probabilistic, probabilistic: {sampling_percentage: 50}}",
    );
    let t = parse_th("8").unwrap();
    let low = 0x7f_ffff_ffff_ffff_u128; // R just below 2^55
    let high = 0x80_0000_0000_0000_u128; // R = 2^55
    assert_eq!(Trace::new(low).plain().decide(&half), Decision::NotSampled);
    assert_eq!(
        Trace::new(high).plain().decide(&half),
        Decision::Sampled {
            policy: 0,
            threshold: ThresholdUpdate::Raise(t)
        }
    );
    // The high bits of the trace id do not count.
    assert_eq!(
        Trace::new(low | (0xff << 100)).plain().decide(&half),
        Decision::NotSampled
    );
    // rv overrides the trace id.
    let rv_high = Trace::new(low).span(vec![], |sp| sp.trace_state = "ot=rv:80000000000000".into());
    assert!(rv_high.kept(&half));
    let rv_low = Trace::new(high).span(vec![], |sp| {
        sp.trace_state = "ot=th:0;rv:00000000000001".into()
    });
    assert!(!rv_low.kept(&half));
    let facts = rv_low.facts(&half);
    assert_eq!(facts.randomness(), 1);
    assert_eq!(facts.max_incoming_threshold(), Some(Threshold::ALWAYS));
    // Spans that disagree: the smallest rv is the trace's.
    let mixed = Trace::new(high)
        .span(vec![], |sp| sp.trace_state = "ot=rv:ff000000000000".into())
        .span(vec![], |sp| sp.trace_state = "ot=rv:00000000000002".into());
    assert_eq!(mixed.facts(&half).randomness(), 2);
}

/// Scenario: `probabilistic` with `hash_salt`, the Collector's FNV-1a mode.
/// Guarantees: FNV-1a-64 matches the reference vectors; the threshold is
/// floor(MaxUint64 × ratio) as Go's big.Float gives it; a trace is kept iff
/// FNV(salt ‖ id) <= threshold, and kept at probability 1 (`th` untouched).
#[test]
fn probabilistic_hashed() {
    assert_eq!(collector_hash(b"", &TraceId([0; 16])), {
        // FNV-1a over 16 zero bytes, computed independently.
        let mut h: u64 = 0xcbf29ce484222325;
        for _ in 0..16 {
            h = h.wrapping_mul(0x100000001b3);
        }
        h
    });
    let mut a = 0xcbf29ce484222325_u64 ^ u64::from(b'a');
    a = a.wrapping_mul(0x100000001b3);
    assert_eq!(a, 0xaf63dc4c8601ec8c, "FNV-1a-64(\"a\") reference vector");
    assert_eq!(collector_hash_threshold(0.5), (1 << 63) - 1);
    assert_eq!(collector_hash_threshold(1.0), u64::MAX);
    assert_eq!(collector_hash_threshold(0.0), 0);
    assert_eq!(collector_hash_threshold(0.25), (1 << 62) - 1);

    let set = policies(
        "      - {name: p, type: probabilistic, probabilistic: {sampling_percentage: 30, hash_salt: salty}}",
    );
    let threshold = collector_hash_threshold(0.3);
    let mut kept = 0;
    for id in 0..2000u128 {
        let trace = Trace::new(id * 7919 + 1).plain();
        let want = collector_hash(b"salty", &TraceId(trace.id)) <= threshold;
        let decision = trace.decide(&set);
        assert_eq!(decision == sampled(0), want, "trace {id}");
        kept += usize::from(want);
    }
    assert!((450..750).contains(&kept), "about 30 % kept, got {kept}");
}

/// Scenario: `status_code` for ERROR and for OK/UNSET.
/// Guarantees: any span with a listed status keeps the trace; others do not.
#[test]
fn status_code() {
    let set =
        policies("      - {name: e, type: status_code, status_code: {status_codes: [ERROR]}}");
    let status = |code: i32| {
        move |span: &mut Span| {
            span.status = Some(Status {
                code,
                message: String::new(),
            })
        }
    };
    table(
        &set,
        &[
            ("error", one_span(status(2)), true),
            ("ok", one_span(status(1)), false),
            ("unset", Trace::new(1).plain(), false),
            ("ok then error", two_spans(status(1), status(2)), true),
        ],
    );
    policy_table(
        "      - {name: o, type: status_code, status_code: {status_codes: [OK, UNSET]}}",
        &[
            ("error", one_span(status(2)), false),
            ("unset", Trace::new(1).plain(), true),
        ],
    );
}

/// Scenario: `string_attribute` with exact values, with regexes, with an empty span value,
/// on a resource, and inverted.
/// Guarantees: exact match against the set (empty strings never match); regexes match
/// anywhere in the value (Go's MatchString); resource attributes count; `invert_match`
/// keeps exactly the traces where nothing matches.
#[test]
fn string_attribute() {
    let svc = |v: &'static str| with_attr("service.name", s(v));
    let url = |v: &'static str| with_attr("url", s(v));
    policy_table(
        "      - {name: s, type: string_attribute, string_attribute: {key: service.name, values: [checkout, \"\"]}}",
        &[
            ("span checkout", one_span(svc("checkout")), true),
            ("span checkout-2", one_span(svc("checkout-2")), false),
            ("empty span value", one_span(svc("")), false),
            (
                "resource checkout",
                under_resource(vec![kv("service.name", s("checkout"))]),
                true,
            ),
        ],
    );
    policy_table(
        "      - {name: s, type: string_attribute, string_attribute: {key: url, values: [\"/api/v[0-9]+\", \"^health$\"], enabled_regex_matching: true}}",
        &[
            ("substring", one_span(url("https://x/api/v2/orders")), true),
            ("anchored exact", one_span(url("health")), true),
            ("anchored, not exact", one_span(url("healthz")), false),
            ("no match", one_span(url("/static")), false),
        ],
    );
    policy_table(
        "      - {name: s, type: string_attribute, string_attribute: {key: service.name, values: [noisy], invert_match: true}}",
        &[
            ("noisy", one_span(svc("noisy")), false),
            ("other", one_span(svc("quiet")), true),
            ("missing", Trace::new(1).plain(), true),
            (
                "noisy resource",
                under_resource(vec![kv("service.name", s("noisy"))]),
                false,
            ),
        ],
    );
}

/// Scenario: `boolean_attribute` true and false, on spans and resources.
/// Guarantees: a Bool attribute equal to `value` keeps; a missing key does not; inverted
/// keeps when nothing matches.
#[test]
fn boolean_attribute() {
    let flag = |v: bool| with_attr("debug", Value::BoolValue(v));
    policy_table(
        "      - {name: b, type: boolean_attribute, boolean_attribute: {key: debug, value: true}}",
        &[
            ("true", one_span(flag(true)), true),
            ("false", one_span(flag(false)), false),
            ("missing", Trace::new(1).plain(), false),
            (
                "resource",
                under_resource(vec![kv("debug", Value::BoolValue(true))]),
                true,
            ),
        ],
    );
    policy_table(
        "      - {name: b, type: boolean_attribute, boolean_attribute: {key: debug, value: true, invert_match: true}}",
        &[
            ("true", one_span(flag(true)), false),
            ("false", one_span(flag(false)), true),
        ],
    );
}

/// Scenario: `trace_state` on valid, invalid and whitespace-padded tracestates.
/// Guarantees: the value under the key must be one of `values`; a tracestate that does not
/// parse as W3C (duplicate keys, bad characters) never matches.
#[test]
fn trace_state() {
    let ts = |v: &'static str| move |span: &mut Span| span.trace_state = v.into();
    policy_table(
        "      - {name: t, type: trace_state, trace_state: {key: tenant, values: [gold, silver]}}",
        &[
            ("gold", one_span(ts("tenant=gold")), true),
            ("padded", one_span(ts("ot=th:0 , tenant=silver ")), true),
            ("bronze", one_span(ts("tenant=bronze")), false),
            ("other key", one_span(ts("vendor=gold")), false),
            (
                "duplicate keys",
                one_span(ts("tenant=gold,tenant=gold")),
                false,
            ),
            ("bad key", one_span(ts("Tenant=gold,tenant=gold")), false),
            ("empty", Trace::new(1).plain(), false),
        ],
    );
}

/// Scenario: `trace_flags` with and without the sampled bit.
/// Guarantees: any span with bit 0x01 of `flags` keeps; other bits do not count.
#[test]
fn trace_flags() {
    policy_table(
        "      - {name: f, type: trace_flags}",
        &[
            ("sampled", one_span(|sp| sp.flags = 0x101), true),
            ("not sampled", one_span(|sp| sp.flags = 0x100), false),
            (
                "one of two",
                Trace::new(1).plain().span(vec![], |sp| sp.flags = 1),
                true,
            ),
        ],
    );
}

/// Scenario: `rate_limiting` at 10 spans/s (burst 20 by default) given traces of 8 spans
/// at one instant, then time passing.
/// Guarantees: the bucket starts full; it refuses once empty; a trace larger than the
/// burst never passes; tokens come back with time at the configured rate.
#[test]
fn rate_limiting() {
    let set =
        policies("      - {name: r, type: rate_limiting, rate_limiting: {spans_per_second: 10}}");
    assert!(set.is_stateful());
    let mut trace = Trace::new(1);
    for _ in 0..8 {
        trace = trace.plain();
    }
    let t0 = Instant::now();
    let t300 = t0 + Duration::from_millis(300);
    let t400 = t0 + Duration::from_millis(400);
    // A long pause refills only to the burst.
    let later = t0 + Duration::from_secs(100);
    in_order(
        &set,
        &[
            (&trace, t0, sampled(0), "20 tokens"),
            (&trace, t0, sampled(0), "12 tokens"),
            (&trace, t0, Decision::NotSampled, "4 tokens left"),
            (&trace, t300, Decision::NotSampled, "7 tokens"),
            (&trace, t400, sampled(0), "8 tokens"),
            (&trace, later, sampled(0), "refilled to the burst, 20"),
            (&trace, later, sampled(0), "12 tokens after a pause"),
            (&trace, later, Decision::NotSampled, "4 tokens again"),
        ],
    );

    let small_burst = policies(
        "      - {name: r, type: rate_limiting, rate_limiting: {spans_per_second: 100, burst_capacity: 5}}",
    );
    assert_eq!(
        trace.decide_at(&small_burst, later),
        Decision::NotSampled,
        "8 > burst 5"
    );
}

/// Scenario: `bytes_limiting` with a burst that holds one trace's encoded spans but not two.
/// Guarantees: the trace's encoded span bytes are the tokens taken; the second trace is
/// refused until time refills the bucket.
#[test]
fn bytes_limiting() {
    let trace = one_span(|sp| sp.name = "x".repeat(100));
    let probe = policies("      - {name: a, type: always_sample}");
    let bytes = trace.facts(&probe).bytes();
    assert!(bytes > 100);
    let set = policies(&format!(
        "      - {{name: b, type: bytes_limiting, bytes_limiting: {{bytes_per_second: {bytes}, burst_capacity: {}}}}}",
        bytes + bytes / 2
    ));
    let t0 = Instant::now();
    assert_eq!(trace.decide_at(&set, t0), sampled(0));
    assert_eq!(trace.decide_at(&set, t0), Decision::NotSampled);
    assert_eq!(
        trace.decide_at(&set, t0 + Duration::from_millis(500)),
        sampled(0)
    );
}

/// Scenario: `span_count` with a minimum only and with both bounds.
/// Guarantees: keeps iff min <= count and (max unset or count <= max).
#[test]
fn span_count() {
    let n = |count: usize| {
        let mut trace = Trace::new(1);
        for _ in 0..count {
            trace = trace.plain();
        }
        trace
    };
    policy_table(
        "      - {name: c, type: span_count, span_count: {min_spans: 3}}",
        &[("2", n(2), false), ("3", n(3), true), ("30", n(30), true)],
    );
    policy_table(
        "      - {name: c, type: span_count, span_count: {min_spans: 2, max_spans: 4}}",
        &[
            ("1", n(1), false),
            ("2", n(2), true),
            ("4", n(4), true),
            ("5", n(5), false),
        ],
    );
}

// === combinations ===

fn error_span(span: &mut Span) {
    span.status = Some(Status {
        code: 2,
        message: String::new(),
    });
}

fn health(span: &mut Span) {
    span.attributes.push(kv("http.route", s("/health")));
}

/// Scenario: `and` of a status code and a latency sub-policy.
/// Guarantees: the trace is kept only when every sub-policy samples.
#[test]
fn and_needs_all() {
    policy_table(
        "      - name: slow-errors
        type: and
        and:
          and_sub_policy:
            - {name: e, type: status_code, status_code: {status_codes: [ERROR]}}
            - {name: l, type: latency, latency: {threshold_ms: 100}}",
        &[
            (
                "slow error",
                one_span(|sp| {
                    error_span(sp);
                    with_ms(200)(sp);
                }),
                true,
            ),
            ("fast error", one_span(error_span), false),
            ("slow ok", one_span(with_ms(200)), false),
        ],
    );
}

/// Scenario: `not` around a string attribute.
/// Guarantees: the sub-policy's vote is flipped.
#[test]
fn not_flips() {
    policy_table(
        "      - name: not-health
        type: not
        not:
          not_sub_policy: {name: h, type: string_attribute, string_attribute: {key: http.route, values: [/health]}}",
        &[
            ("health", one_span(health), false),
            ("other", Trace::new(1).plain(), true),
        ],
    );
}

/// Scenario: a drop policy (health checks) listed after always_sample and an error rule.
/// Guarantees: the drop runs first and vetoes any Sampled vote, evaluation stops there (no
/// other policy votes); otherwise the other policies decide.
#[test]
fn drop_vetoes_sampled() {
    let set = policies(
        "      - {name: all, type: always_sample}
      - {name: errors, type: status_code, status_code: {status_codes: [ERROR]}}
      - name: no-health
        type: drop
        drop:
          drop_sub_policy:
            - {name: h, type: string_attribute, string_attribute: {key: http.route, values: [/health]}}",
    );
    let mut votes = Vec::new();
    let health_error = one_span(|sp| {
        health(sp);
        error_span(sp);
    });
    let facts = health_error.facts(&set);
    assert_eq!(
        set.decide(&facts, Instant::now(), &mut votes),
        Decision::Dropped { policy: 2 }
    );
    assert_eq!(votes, [(2, Vote::Dropped)]);
    let other = one_span(error_span);
    let facts = other.facts(&set);
    assert_eq!(set.decide(&facts, Instant::now(), &mut votes), sampled(0));
    assert_eq!(
        votes,
        [
            (2, Vote::NotSampled),
            (0, Vote::Sampled),
            (1, Vote::Sampled)
        ]
    );
}

/// Scenario: `sample_on_first_match` with a stateful rate limiter after always_sample.
/// Guarantees: evaluation stops at the first Sampled vote: later policies get no vote and
/// take no tokens; without it every policy votes.
#[test]
fn sample_on_first_match_stops_early() {
    let list = "      - {name: all, type: always_sample}
      - {name: r, type: rate_limiting, rate_limiting: {spans_per_second: 1, burst_capacity: 1}}";
    let first = PolicySet::compile(&tail_config(&format!(
        "    sample_on_first_match: true\n    policies:\n{list}"
    )))
    .unwrap();
    let trace = Trace::new(1).plain();
    let facts = trace.facts(&first);
    let mut votes = Vec::new();
    let now = Instant::now();
    for _ in 0..3 {
        assert_eq!(first.decide(&facts, now, &mut votes), sampled(0));
        assert_eq!(votes, [(0, Vote::Sampled)]);
    }
    let all = policies(list);
    assert_eq!(all.decide(&facts, now, &mut votes), sampled(0));
    assert_eq!(votes, [(0, Vote::Sampled), (1, Vote::Sampled)]);
    assert_eq!(all.decide(&facts, now, &mut votes), sampled(0));
    assert_eq!(votes, [(0, Vote::Sampled), (1, Vote::NotSampled)]);
}

/// Scenario: an error rule and a 50 % consistent probabilistic policy both keep a trace,
/// or only the probabilistic one does.
/// Guarantees: a content vote makes the threshold `Keep` (probability 1); probabilistic
/// alone gives `Raise(T)`; `policy` is the first Sampled policy in order.
#[test]
fn content_vote_keeps_threshold() {
    let set = policies(
        "      - {name: p, type: probabilistic, probabilistic: {sampling_percentage: 50}}
      - {name: e, type: status_code, status_code: {status_codes: [ERROR]}}",
    );
    let high = 0x80_0000_0000_0000_u128;
    assert_eq!(
        Trace::new(high).span(vec![], error_span).decide(&set),
        sampled(0)
    );
    assert_eq!(
        Trace::new(high).plain().decide(&set),
        Decision::Sampled {
            policy: 0,
            threshold: ThresholdUpdate::Raise(parse_th("8").unwrap())
        }
    );
    assert_eq!(one_span(error_span).decide(&set), sampled(1));
    // Two probabilistic policies: the higher probability (lower threshold) is the trace's.
    let two = policies(
        "      - {name: p10, type: probabilistic, probabilistic: {sampling_percentage: 10}}
      - {name: p50, type: probabilistic, probabilistic: {sampling_percentage: 50}}",
    );
    assert_eq!(
        Trace::new(0xff_ffff_ffff_ffff).plain().decide(&two),
        Decision::Sampled {
            policy: 0,
            threshold: ThresholdUpdate::Raise(parse_th("8").unwrap())
        }
    );
    // Inside `and`, probabilistic keeps its threshold; `not` makes it content.
    let and = policies(
        "      - name: a
        type: and
        and:
          and_sub_policy:
            - {name: all, type: always_sample}
            - {name: p, type: probabilistic, probabilistic: {sampling_percentage: 50}}",
    );
    assert_eq!(
        Trace::new(high).plain().decide(&and),
        Decision::Sampled {
            policy: 0,
            threshold: ThresholdUpdate::Raise(parse_th("8").unwrap())
        }
    );
}

/// Scenario: `composite` with 10 spans/s total, `errors` allocated 50 % and `all` (an
/// always_sample fill) 50 %, traces of 2 spans; then a sub-policy missing from
/// `rate_allocation`.
/// Guarantees: the first Sampled sub-policy decides; once its allocation for the second is
/// used up its traces are not sampled, even though a later sub-policy would sample; the
/// window resets after a second; a sub-policy with no allocation never samples.
#[test]
fn composite_allocation() {
    let set = policies(
        "      - name: c
        type: composite
        composite:
          max_total_spans_per_second: 10
          policy_order: [errors, all]
          composite_sub_policy:
            - {name: errors, type: status_code, status_code: {status_codes: [ERROR]}}
            - {name: all, type: always_sample}
          rate_allocation:
            - {policy: errors, percent: 50}
            - {policy: all, percent: 50}",
    );
    let errors = two_spans(error_span, error_span);
    let plain = Trace::new(2).plain().plain();
    let t0 = Instant::now();
    let t1 = t0 + Duration::from_millis(1000);
    in_order(
        &set,
        &[
            (&errors, t0, sampled(0), "errors' first 2 of 5 spans"),
            (&errors, t0, sampled(0), "errors' 4 of 5 spans"),
            (&plain, t0, sampled(0), "all's first 2 of 5 spans"),
            (&errors, t0, Decision::NotSampled, "errors: 4 + 2 > 5"),
            (&plain, t0, sampled(0), "all's 4 of 5 spans"),
            (&plain, t0, Decision::NotSampled, "all's 5: 4 + 2 > 5"),
            (&errors, t1, sampled(0), "a new window"),
        ],
    );

    let missing = policies(
        "      - name: c
        type: composite
        composite:
          max_total_spans_per_second: 100
          composite_sub_policy:
            - {name: errors, type: status_code, status_code: {status_codes: [ERROR]}}
            - {name: all, type: always_sample}
          rate_allocation:
            - {policy: errors, percent: 50}",
    );
    assert_eq!(errors.decide_at(&missing, t0), sampled(0));
    assert_eq!(plain.decide_at(&missing, t0), Decision::NotSampled);
}

/// Scenario: resource attributes observed once for a request whose resource holds the
/// matching value, with several spans under it.
/// Guarantees: the resource's match counts for each of its spans' trace, through the
/// per-request `ResourceMatches`.
#[test]
fn resource_matches_are_reused() {
    let set = policies(
        "      - {name: s, type: string_attribute, string_attribute: {key: service.name, values: [api]}}",
    );
    let resource = Resource {
        attributes: vec![kv("service.name", s("api"))],
        ..Default::default()
    };
    let matches = set.observe_resource(&resource.encode_to_vec());
    let mut facts = set.new_facts(TraceId([1; 16]));
    set.observe_span(&mut facts, &matches, &SpanView::default());
    let mut votes = Vec::new();
    assert_eq!(set.decide(&facts, Instant::now(), &mut votes), sampled(0));
    assert_eq!(facts.span_count(), 1);
}

// === properties ===

/// A stateless policy list exercising every content fact.
const STATELESS: &str = "      - {name: e, type: status_code, status_code: {status_codes: [ERROR]}}
      - {name: l, type: latency, latency: {threshold_ms: 50, upper_threshold_ms: 400}}
      - {name: num, type: numeric_attribute, numeric_attribute: {key: num, min_value: 3, max_value: 5, invert_match: true}}
      - {name: s, type: string_attribute, string_attribute: {key: s, values: [\"^a\"], enabled_regex_matching: true}}
      - {name: c, type: span_count, span_count: {min_spans: 4}}
      - {name: p, type: probabilistic, probabilistic: {sampling_percentage: 20}}
      - name: d
        type: drop
        drop:
          drop_sub_policy:
            - {name: b, type: boolean_attribute, boolean_attribute: {key: b, value: true}}
            - {name: f, type: trace_flags}";

prop_compose! {
    fn arb_span()(
        status in 0..3i32,
        start in 0..500u64,
        len in 0..500u64,
        n in proptest::option::of(0..8i64),
        sv in proptest::option::of("[a-c]{0,3}"),
        b in proptest::option::of(any::<bool>()),
        flags in 0..2u32,
        rv in proptest::option::of(0..MAX_ADJUSTED_COUNT),
    ) -> (Vec<KeyValue>, Span) {
        let mut attributes = Vec::new();
        if let Some(n) = n { attributes.push(kv("num", Value::IntValue(n))); }
        if let Some(sv) = sv { attributes.push(kv("s", s(&sv))); }
        if let Some(b) = b { attributes.push(kv("b", Value::BoolValue(b))); }
        // Half the time the attributes are the resource's instead of the span's.
        let (resource, attributes) = if start % 2 == 0 {
            (attributes, Vec::new())
        } else {
            (Vec::new(), attributes)
        };
        let span = Span {
            span_id: vec![2; 8],
            start_time_unix_nano: start * 1_000_000,
            end_time_unix_nano: (start + len) * 1_000_000,
            status: Some(Status { code: status, message: String::new() }),
            flags,
            trace_state: rv.map(|rv| format!("ot=rv:{rv:014x}")).unwrap_or_default(),
            attributes,
            ..Default::default()
        };
        (resource, span)
    }
}

fn trace_of(id: u128, spans: &[(Vec<KeyValue>, Span)]) -> Trace {
    let mut trace = Trace::new(id);
    for (resource, span) in spans {
        let mut span = span.clone();
        span.trace_id = trace.id.to_vec();
        trace.groups.push((resource.clone(), vec![span]));
    }
    trace
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Scenario: random traces under stateless policies, observed in request order and in
    /// a shuffled order.
    /// Guarantees: the decision and the votes do not depend on the order spans arrive in.
    #[test]
    fn order_does_not_matter(
        id in any::<u128>(),
        spans in proptest::collection::vec(arb_span(), 1..8),
        seed in any::<u64>(),
    ) {
        let set = policies(STATELESS);
        let trace = trace_of(id, &spans);
        let mut shuffled = spans.clone();
        // A deterministic permutation from the seed.
        let len = shuffled.len();
        for i in (1..len).rev() {
            let j = (seed.rotate_left(i as u32) % (i as u64 + 1)) as usize;
            shuffled.swap(i, j);
        }
        let other = trace_of(id, &shuffled);
        let now = Instant::now();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let da = set.decide(&trace.facts(&set), now, &mut a);
        let db = set.decide(&other.facts(&set), now, &mut b);
        prop_assert_eq!(da, db);
        prop_assert_eq!(a, b);
    }

    /// Scenario: two policy sets compiled from one config (two replicas, or a restart).
    /// Guarantees: they decide every trace identically.
    #[test]
    fn replicas_agree(
        id in any::<u128>(),
        spans in proptest::collection::vec(arb_span(), 1..6),
    ) {
        let one = policies(STATELESS);
        let two = policies(STATELESS);
        let trace = trace_of(id, &spans);
        prop_assert_eq!(trace.decide(&one), trace.decide(&two));
    }

    /// Scenario: random trace ids (and rv values) under a 10 % consistent policy.
    /// Guarantees: every kept trace has R >= T, the written `th` parses back to T, and a
    /// trace with R < T is never kept.
    #[test]
    fn kept_traces_are_consistent(id in any::<u128>(), rv in proptest::option::of(0..MAX_ADJUSTED_COUNT)) {
        let set = policies("      - {name: p, type: probabilistic, probabilistic: {sampling_percentage: 10}}");
        let trace = Trace::new(id).span(vec![], |sp| {
            sp.trace_state = rv.map(|rv| format!("ot=rv:{rv:014x}")).unwrap_or_default();
        });
        let facts = trace.facts(&set);
        let r = facts.randomness();
        let t = Threshold::from_probability(0.1).unwrap();
        let mut votes = Vec::new();
        match set.decide(&facts, Instant::now(), &mut votes) {
            Decision::Sampled { threshold: ThresholdUpdate::Raise(kept_at), .. } => {
                prop_assert_eq!(kept_at, t);
                prop_assert!(r >= kept_at.raw());
                prop_assert_eq!(parse_th(&kept_at.encode_th()), Some(kept_at));
            }
            Decision::NotSampled => prop_assert!(r < t.raw()),
            other => prop_assert!(false, "unexpected {:?}", other),
        }
    }
}

/// Scenario: 100,000 random trace ids under a 10 % consistent probabilistic policy.
/// Guarantees: the share kept lies within a 99.9 % binomial band (±3.3 σ) of 10 %.
#[test]
fn probabilistic_share_is_binomial() {
    use rand::{Rng, SeedableRng};
    let set = policies(
        "      - {name: p, type: probabilistic, probabilistic: {sampling_percentage: 10}}",
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x7a11_6a7e);
    let n = 100_000u32;
    let mut votes = Vec::new();
    let now = Instant::now();
    let mut kept = 0u32;
    for _ in 0..n {
        let id = TraceId(rng.random());
        let mut facts = set.new_facts(id);
        set.observe_span(
            &mut facts,
            &ResourceMatches::default(),
            &SpanView::default(),
        );
        if matches!(
            set.decide(&facts, now, &mut votes),
            Decision::Sampled { .. }
        ) {
            kept += 1;
        }
    }
    let (n, p) = (f64::from(n), 0.1);
    let sigma = (n * p * (1.0 - p)).sqrt();
    let deviation = (f64::from(kept) - n * p).abs();
    assert!(
        deviation <= 3.3 * sigma,
        "kept {kept} of {n}: {deviation} > 3.3σ ({sigma})"
    );
}
