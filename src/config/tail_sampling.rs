//! `processors.tail_sampling`: the Collector's keys, its policy language, and tailgate's
//! few differences (see `docs/compatibility.md`).
//!
//! A policy is written as in the Collector:
//!
//! ```yaml
//! policies:
//!   - name: errors
//!     type: status_code
//!     status_code: {status_codes: [ERROR]}
//!   - name: rest
//!     type: probabilistic
//!     probabilistic: {sampling_percentage: 10}
//! ```
//!
//! and sub-policies of `and`, `drop` and `composite` (and the single `not_sub_policy` of
//! `not`) have the same shape. `drop` and `composite` are allowed only at the top level:
//! the Collector offers them nowhere else either.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;

use super::common::Reader;
use super::defaults;
use super::error::{Problems, join};
use super::fields::Fields;
use super::ids::{self, Section};
use super::value::Value;
use super::{
    HandOffConfig, PolicyConfig, PolicyKind, ProcessorConfig, RegexValues, StatusCodeName,
    TailSamplingConfig,
};

/// Every policy type tailgate knows, in the Collector's documentation order.
pub(crate) const POLICY_TYPES: &[&str] = &[
    "always_sample",
    "latency",
    "numeric_attribute",
    "probabilistic",
    "status_code",
    "string_attribute",
    "boolean_attribute",
    "trace_state",
    "trace_flags",
    "rate_limiting",
    "bytes_limiting",
    "span_count",
    "and",
    "not",
    "drop",
    "composite",
];

/// The keys that hold a policy's settings: one per policy type that has settings (named
/// after the type, in [`POLICY_TYPES`] order), and `ottl_condition`, so that it is reported
/// as unsupported rather than unknown.
/// (`'a` lets the keys join lists of shorter-lived ones.)
fn settings_keys<'a>() -> impl Iterator<Item = &'a str> {
    let types: &'a [&'a str] = POLICY_TYPES;
    types
        .iter()
        .copied()
        .filter(|kind| settings_reader(kind).is_some())
        .chain([OTTL])
}

const OTTL: &str = "ottl_condition";

const OTTL_MESSAGE: &str = "OTTL conditions are not supported by tailgate: use the typed \
    policies instead (status_code, string_attribute, numeric_attribute, boolean_attribute, \
    latency, span_count, trace_state, combined with and / not / drop)";

/// `processors.tail_sampling`.
pub(crate) const PROCESSOR: Reader<ProcessorConfig> = Reader {
    known: &[
        "decision_wait",
        "decision_wait_after_root_received",
        "num_traces",
        "expected_new_traces_per_sec",
        "decision_cache",
        "sample_on_first_match",
        "drop_pending_traces_on_shutdown",
        "maximum_trace_size_bytes",
        "block_on_overflow",
        "record_policy",
        "policies",
        "hand_off",
        "sampling_strategy",
        "num_shards",
    ],
    unsupported: &[(
        "tail_storage",
        "tail storage extensions are not supported by tailgate: spans are held in memory, \
         bounded by num_traces and the memory limit; remove it",
    )],
    typed: processor,
};

fn processor(problems: &mut Problems, fields: &Fields<'_>) -> ProcessorConfig {
    let decision_wait = fields
        .positive_duration(problems, "decision_wait")
        .unwrap_or(defaults::TAIL_DECISION_WAIT);
    let decision_wait_after_root_received = fields
        .duration(problems, "decision_wait_after_root_received")
        .filter(|wait| !wait.is_zero());
    let num_traces = match fields.uint(problems, "num_traces") {
        None => NonZeroUsize::new(defaults::TAIL_NUM_TRACES).unwrap_or(NonZeroUsize::MIN),
        Some(n) => match usize::try_from(n).ok().and_then(NonZeroUsize::new) {
            Some(n) => n,
            None => {
                problems.add(fields.key_path("num_traces"), "must be at least 1");
                NonZeroUsize::MIN
            }
        },
    };
    let expected_new_traces_per_sec = size(problems, fields, "expected_new_traces_per_sec", 0);
    let cache = fields.child(
        problems,
        "decision_cache",
        &["sampled_cache_size", "non_sampled_cache_size"],
        &[],
    );
    let sampled_cache_size = size(
        problems,
        &cache,
        "sampled_cache_size",
        defaults::TAIL_SAMPLED_CACHE_SIZE,
    );
    let non_sampled_cache_size = size(
        problems,
        &cache,
        "non_sampled_cache_size",
        defaults::TAIL_NON_SAMPLED_CACHE_SIZE,
    );
    let maximum_trace_size_bytes =
        NonZeroUsize::new(size(problems, fields, "maximum_trace_size_bytes", 0));
    if let Some(strategy) = fields.string(problems, "sampling_strategy")
        && strategy != defaults::TAIL_SAMPLING_STRATEGY
    {
        let message = if strategy == "span-ingest" {
            "\"span-ingest\" is not supported by tailgate: remove the key (tailgate decides \
             whole traces, \"trace-complete\")"
                .to_owned()
        } else {
            format!("unknown sampling strategy {strategy:?} (known: trace-complete)")
        };
        problems.add(fields.key_path("sampling_strategy"), message);
    }
    // Accepted for compatibility and otherwise ignored: tailgate shards by itself.
    fields.uint(problems, "num_shards");

    let policies = policy_list(problems, fields, "policies", true);
    ProcessorConfig::TailSampling(TailSamplingConfig {
        decision_wait,
        decision_wait_after_root_received,
        num_traces,
        expected_new_traces_per_sec,
        sampled_cache_size,
        non_sampled_cache_size,
        sample_on_first_match: fields
            .boolean(problems, "sample_on_first_match")
            .unwrap_or(false),
        drop_pending_traces_on_shutdown: fields
            .boolean(problems, "drop_pending_traces_on_shutdown")
            .unwrap_or(false),
        maximum_trace_size_bytes,
        block_on_overflow: fields
            .boolean(problems, "block_on_overflow")
            .unwrap_or(false),
        record_policy: fields.boolean(problems, "record_policy").unwrap_or(false),
        policies,
        hand_off: hand_off(problems, fields),
    })
}

/// `hand_off`: which `loadbalancing` exporter's ring to follow. That it names a
/// `loadbalancing` exporter of a traces pipeline is checked with the whole config
/// (`graph::validate`).
fn hand_off(problems: &mut Problems, fields: &Fields<'_>) -> Option<HandOffConfig> {
    if !fields.has("hand_off") {
        return None;
    }
    let hand_off = fields.child(
        problems,
        "hand_off",
        &["exporter", "debounce", "leave_delay"],
        &[],
    );
    let debounce = hand_off
        .duration(problems, "debounce")
        .unwrap_or(defaults::HAND_OFF_DEBOUNCE);
    let leave_delay = hand_off
        .duration(problems, "leave_delay")
        .unwrap_or(defaults::HAND_OFF_LEAVE_DELAY);
    let Some(written) = hand_off.string(problems, "exporter") else {
        if !hand_off.wrong_type() {
            problems.add(
                hand_off.key_path("exporter"),
                "must name the loadbalancing exporter whose ring this sampler follows, e.g. \
                 `exporter: loadbalancing`",
            );
        }
        return None;
    };
    match ids::component_id(Section::Exporters, &written) {
        Ok(exporter) => Some(HandOffConfig {
            exporter,
            debounce,
            leave_delay,
        }),
        Err(message) => {
            problems.add(hand_off.key_path("exporter"), message);
            None
        }
    }
}

/// A non-negative size that fits `usize`.
fn size(problems: &mut Problems, fields: &Fields<'_>, key: &str, default: usize) -> usize {
    match fields.uint(problems, key) {
        None => default,
        Some(n) => usize::try_from(n).unwrap_or_else(|_| {
            problems.add(fields.key_path(key), format!("{n} is too large"));
            default
        }),
    }
}

/// A required, non-empty list of policies under `key`, names non-empty and unique.
fn policy_list(
    problems: &mut Problems,
    fields: &Fields<'_>,
    key: &str,
    top_level: bool,
) -> Vec<PolicyConfig> {
    let path = fields.key_path(key);
    let items = match fields.value(key) {
        None => {
            if !fields.wrong_type() {
                problems.add(
                    path,
                    "must list at least one policy, e.g. `- {name: errors, type: status_code, status_code: {status_codes: [ERROR]}}`",
                );
            }
            return Vec::new();
        }
        Some(Value::Seq(items)) if items.is_empty() => {
            problems.add(path, "must list at least one policy");
            return Vec::new();
        }
        Some(Value::Seq(items)) => items,
        Some(other) => {
            problems.add(
                path,
                format!("expected a list of policies, found {}", other.describe()),
            );
            return Vec::new();
        }
    };
    let mut policies = Vec::with_capacity(items.len());
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        let item_path = format!("{path}[{i}]");
        let Some(policy) = policy(problems, &item_path, item, top_level) else {
            continue;
        };
        if !policy.name.is_empty() {
            if let Some(first) = names.get(&policy.name) {
                problems.add(
                    join(&item_path, "name"),
                    format!(
                        "duplicate policy name {:?} (also {key}[{first}]): names must be unique",
                        policy.name
                    ),
                );
            } else {
                names.insert(policy.name.clone(), i);
            }
        }
        policies.push(policy);
    }
    policies
}

/// One policy at `path`. `None` when it has no usable type (already reported).
fn policy(
    problems: &mut Problems,
    path: &str,
    value: &Value,
    top_level: bool,
) -> Option<PolicyConfig> {
    // The type decides which settings key is expected; read it before opening the mapping
    // so that settings for another type are reported precisely.
    let kind = match value {
        Value::Map(map) => match map.get("type") {
            Some(Value::Str(kind)) | Some(Value::Env(kind)) => Some(kind.as_str()),
            _ => None,
        },
        _ => None,
    };
    let own_key = kind.filter(|kind| *kind == OTTL || settings_reader(kind).is_some());
    let messages: Vec<(&str, String)> = match kind {
        Some(kind) if POLICY_TYPES.contains(&kind) => settings_keys()
            .filter(|key| Some(*key) != own_key)
            .map(|key| {
                (
                    key,
                    format!(
                        "settings for type {key}, but this policy's type is {kind}: remove them"
                    ),
                )
            })
            .collect(),
        _ => Vec::new(),
    };
    let unsupported: Vec<(&str, &str)> = messages
        .iter()
        .map(|(key, message)| (*key, message.as_str()))
        .collect();
    let mut known = vec!["name", "type"];
    match kind {
        Some(kind) if POLICY_TYPES.contains(&kind) => known.extend(own_key),
        // Unknown or missing type: reported below; do not add noise about the other keys.
        _ => known.extend(settings_keys()),
    }
    let fields = Fields::open(problems, path, Some(value), &known, &unsupported);
    if fields.wrong_type() {
        return None;
    }

    let name = fields.string(problems, "name").unwrap_or_default();
    if name.is_empty()
        && fields
            .value("name")
            .is_none_or(|v| matches!(v, Value::Str(_) | Value::Env(_)))
    {
        problems.add(
            fields.key_path("name"),
            "must be set to a non-empty policy name",
        );
    }
    let type_path = fields.key_path("type");
    let Some(kind_text) = fields.string(problems, "type") else {
        if fields.value("type").is_none() {
            problems.add(
                type_path,
                format!("must be set (known: {})", POLICY_TYPES.join(", ")),
            );
        }
        return None;
    };
    if kind_text == OTTL {
        problems.add(type_path, OTTL_MESSAGE);
        return None;
    }
    if !POLICY_TYPES.contains(&kind_text.as_str()) {
        problems.add(
            type_path,
            format!(
                "unknown policy type {kind_text:?} (known: {})",
                POLICY_TYPES.join(", ")
            ),
        );
        return None;
    }
    if !top_level && matches!(kind_text.as_str(), "drop" | "composite") {
        problems.add(
            type_path,
            format!("a {kind_text} policy is allowed only at the top level of policies, not as a sub-policy"),
        );
        return None;
    }
    let kind = policy_kind(problems, &fields, &kind_text)?;
    Some(PolicyConfig { name, kind })
}

/// The settings of a policy of type `kind` (a known type).
fn policy_kind(problems: &mut Problems, fields: &Fields<'_>, kind: &str) -> Option<PolicyKind> {
    match kind {
        "always_sample" => Some(PolicyKind::AlwaysSample),
        "trace_flags" => Some(PolicyKind::TraceFlags),
        _ => {
            let (known, read) = settings_reader(kind)?;
            let settings = fields.child(problems, kind, known, &[]);
            read(problems, &settings)
        }
    }
}

/// The keys of the settings mapping of policy type `kind`, in the order the reader lists
/// them; empty for a type without settings. The renderer writes them from here.
pub(crate) fn settings_keys_of(kind: &str) -> &'static [&'static str] {
    settings_reader(kind).map_or(&[], |(known, _)| known)
}

/// Reads the settings mapping of one policy type (the mapping under the key named after
/// the type). `None` when there is no usable policy (already reported).
type SettingsReader = fn(&mut Problems, &Fields<'_>) -> Option<PolicyKind>;

/// The keys of the settings mapping of policy type `kind`, and its reader; `None` for a
/// type without settings.
fn settings_reader(kind: &str) -> Option<(&'static [&'static str], SettingsReader)> {
    Some(match kind {
        "latency" => (&["threshold_ms", "upper_threshold_ms"], latency),
        "numeric_attribute" => (
            &["key", "min_value", "max_value", "invert_match"],
            numeric_attribute,
        ),
        "probabilistic" => (&["sampling_percentage", "hash_salt"], probabilistic),
        "status_code" => (&["status_codes"], status_code),
        "string_attribute" => (
            &[
                "key",
                "values",
                "enabled_regex_matching",
                "cache_max_size",
                "invert_match",
            ],
            string_attribute,
        ),
        "boolean_attribute" => (&["key", "value", "invert_match"], boolean_attribute),
        "trace_state" => (&["key", "values"], trace_state),
        "rate_limiting" => (&["spans_per_second", "burst_capacity"], rate_limiting),
        "bytes_limiting" => (&["bytes_per_second", "burst_capacity"], bytes_limiting),
        "span_count" => (&["min_spans", "max_spans"], span_count),
        "and" => (&["and_sub_policy"], and_policy),
        "drop" => (&["drop_sub_policy"], drop_policy),
        "not" => (&["not_sub_policy"], not_policy),
        "composite" => (
            &[
                "max_total_spans_per_second",
                "policy_order",
                "composite_sub_policy",
                "rate_allocation",
            ],
            composite,
        ),
        _ => return None,
    })
}

/// `latency`.
fn latency(problems: &mut Problems, f: &Fields<'_>) -> Option<PolicyKind> {
    let threshold_ms = f.uint(problems, "threshold_ms").unwrap_or(0);
    let upper_threshold_ms = f.uint(problems, "upper_threshold_ms").filter(|&u| u > 0);
    if let Some(upper) = upper_threshold_ms
        && upper <= threshold_ms
    {
        problems.add(
            f.key_path("upper_threshold_ms"),
            format!("must be greater than threshold_ms ({threshold_ms}), or 0 for no upper bound"),
        );
    }
    Some(PolicyKind::Latency {
        threshold_ms,
        upper_threshold_ms,
    })
}

/// `numeric_attribute`.
fn numeric_attribute(problems: &mut Problems, f: &Fields<'_>) -> Option<PolicyKind> {
    let key = required_key(problems, f);
    // As in the Collector, 0 means "no bound".
    let min_value = f.int(problems, "min_value").filter(|&v| v != 0);
    let max_value = f.int(problems, "max_value").filter(|&v| v != 0);
    match (min_value, max_value) {
        (None, None) if !f.wrong_type() => problems.add(
            f.path(),
            "set min_value and/or max_value (a bound of 0 means no bound, as in the Collector)",
        ),
        (Some(min), Some(max)) if min > max => problems.add(
            f.key_path("max_value"),
            format!("must not be less than min_value ({min})"),
        ),
        _ => {}
    }
    Some(PolicyKind::NumericAttribute {
        key,
        min_value,
        max_value,
        invert_match: f.boolean(problems, "invert_match").unwrap_or(false),
    })
}

/// `probabilistic`.
fn probabilistic(problems: &mut Problems, f: &Fields<'_>) -> Option<PolicyKind> {
    let sampling_percentage = match f.float(problems, "sampling_percentage") {
        Some(pct) if (0.0..=100.0).contains(&pct) => pct,
        Some(_) => {
            problems.add(
                f.key_path("sampling_percentage"),
                "must be between 0 and 100",
            );
            0.0
        }
        None => {
            if f.value("sampling_percentage").is_none() {
                problems.add(
                    f.key_path("sampling_percentage"),
                    "must be set: the percentage of traces to keep, 0 to 100",
                );
            }
            0.0
        }
    };
    // An empty salt (e.g. an unset variable) is the same as none.
    let hash_salt = f
        .string(problems, "hash_salt")
        .filter(|salt| !salt.is_empty());
    Some(PolicyKind::Probabilistic {
        sampling_percentage,
        hash_salt,
    })
}

/// `status_code`.
fn status_code(problems: &mut Problems, f: &Fields<'_>) -> Option<PolicyKind> {
    let names = f.strings(problems, "status_codes").unwrap_or_default();
    let mut status_codes = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        match name.as_str() {
            "OK" => status_codes.push(StatusCodeName::Ok),
            "ERROR" => status_codes.push(StatusCodeName::Error),
            "UNSET" => status_codes.push(StatusCodeName::Unset),
            other => problems.add(
                format!("{}[{i}]", f.key_path("status_codes")),
                format!("unknown status code {other:?} (known: OK, ERROR, UNSET)"),
            ),
        }
    }
    if names.is_empty()
        && f.value("status_codes")
            .is_none_or(|v| matches!(v, Value::Seq(_)))
    {
        problems.add(
            f.key_path("status_codes"),
            "must list at least one status code (OK, ERROR, UNSET)",
        );
    }
    Some(PolicyKind::StatusCode { status_codes })
}

/// `string_attribute`.
fn string_attribute(problems: &mut Problems, f: &Fields<'_>) -> Option<PolicyKind> {
    let key = required_key(problems, f);
    let values = required_values(problems, f);
    let regex = if f
        .boolean(problems, "enabled_regex_matching")
        .unwrap_or(false)
    {
        regex_values(problems, f, &values)
    } else {
        None
    };
    // 0 means the default, as in the Collector.
    let cache_max_size = match size(problems, f, "cache_max_size", 0) {
        0 => defaults::TAIL_STRING_CACHE_MAX_SIZE,
        n => n,
    };
    Some(PolicyKind::StringAttribute {
        key,
        values,
        regex,
        cache_max_size,
        invert_match: f.boolean(problems, "invert_match").unwrap_or(false),
    })
}

/// `boolean_attribute`.
fn boolean_attribute(problems: &mut Problems, f: &Fields<'_>) -> Option<PolicyKind> {
    Some(PolicyKind::BooleanAttribute {
        key: required_key(problems, f),
        value: f.boolean(problems, "value").unwrap_or(false),
        invert_match: f.boolean(problems, "invert_match").unwrap_or(false),
    })
}

/// `trace_state`.
fn trace_state(problems: &mut Problems, f: &Fields<'_>) -> Option<PolicyKind> {
    Some(PolicyKind::TraceState {
        key: required_key(problems, f),
        values: required_values(problems, f),
    })
}

/// `rate_limiting`.
fn rate_limiting(problems: &mut Problems, f: &Fields<'_>) -> Option<PolicyKind> {
    Some(PolicyKind::RateLimiting {
        spans_per_second: positive_rate(problems, f, "spans_per_second"),
        burst_capacity: f.uint(problems, "burst_capacity").filter(|&b| b > 0),
    })
}

/// `bytes_limiting`.
fn bytes_limiting(problems: &mut Problems, f: &Fields<'_>) -> Option<PolicyKind> {
    Some(PolicyKind::BytesLimiting {
        bytes_per_second: positive_rate(problems, f, "bytes_per_second"),
        burst_capacity: f.uint(problems, "burst_capacity").filter(|&b| b > 0),
    })
}

/// `span_count`.
fn span_count(problems: &mut Problems, f: &Fields<'_>) -> Option<PolicyKind> {
    let min_spans = f.uint(problems, "min_spans").unwrap_or(0);
    let max_spans = f.uint(problems, "max_spans").filter(|&m| m > 0);
    if let Some(max) = max_spans
        && max < min_spans
    {
        problems.add(
            f.key_path("max_spans"),
            format!("must not be less than min_spans ({min_spans}), or 0 for no upper bound"),
        );
    }
    Some(PolicyKind::SpanCount {
        min_spans,
        max_spans,
    })
}

/// `and`.
fn and_policy(problems: &mut Problems, f: &Fields<'_>) -> Option<PolicyKind> {
    Some(PolicyKind::And {
        sub_policies: policy_list(problems, f, "and_sub_policy", false),
    })
}

/// `drop`.
fn drop_policy(problems: &mut Problems, f: &Fields<'_>) -> Option<PolicyKind> {
    Some(PolicyKind::Drop {
        sub_policies: policy_list(problems, f, "drop_sub_policy", false),
    })
}

/// `not`: one sub-policy, required.
fn not_policy(problems: &mut Problems, f: &Fields<'_>) -> Option<PolicyKind> {
    let path = f.key_path("not_sub_policy");
    match f.value("not_sub_policy") {
        Some(value) => Some(PolicyKind::Not {
            sub_policy: Box::new(policy(problems, &path, value, false)?),
        }),
        None => {
            if !f.wrong_type() {
                problems.add(path, "must be set to one policy: {name, type, ...}");
            }
            None
        }
    }
}

/// `composite`.
fn composite(problems: &mut Problems, f: &Fields<'_>) -> Option<PolicyKind> {
    let max_total_spans_per_second = positive_rate(problems, f, "max_total_spans_per_second");
    let sub_policies = policy_list(problems, f, "composite_sub_policy", false);
    let is_sub = |name: &str| sub_policies.iter().any(|p| p.name == name);
    let policy_order = f.strings(problems, "policy_order").unwrap_or_default();
    for (i, name) in policy_order.iter().enumerate() {
        if !sub_policies.is_empty() && !is_sub(name) {
            problems.add(
                format!("{}[{i}]", f.key_path("policy_order")),
                format!("{name:?} is not the name of a composite_sub_policy"),
            );
        }
    }
    let mut rate_allocation = Vec::new();
    let path = f.key_path("rate_allocation");
    match f.value("rate_allocation") {
        None => {}
        Some(Value::Seq(items)) => {
            for (i, item) in items.iter().enumerate() {
                let entry = Fields::open(
                    problems,
                    &format!("{path}[{i}]"),
                    Some(item),
                    &["policy", "percent"],
                    &[],
                );
                if entry.wrong_type() {
                    continue;
                }
                let policy = entry.string(problems, "policy").unwrap_or_default();
                if policy.is_empty() {
                    problems.add(entry.key_path("policy"), "must name a composite_sub_policy");
                } else if !sub_policies.is_empty() && !is_sub(&policy) {
                    problems.add(
                        entry.key_path("policy"),
                        format!("{policy:?} is not the name of a composite_sub_policy"),
                    );
                }
                let percent = match entry.float(problems, "percent") {
                    Some(pct) if (0.0..=100.0).contains(&pct) => pct,
                    Some(_) => {
                        problems.add(entry.key_path("percent"), "must be between 0 and 100");
                        0.0
                    }
                    None => 0.0,
                };
                rate_allocation.push((policy, percent));
            }
        }
        Some(other) => problems.add(
            path,
            format!(
                "expected a list of {{policy, percent}}, found {}",
                other.describe()
            ),
        ),
    }
    Some(PolicyKind::Composite {
        max_total_spans_per_second,
        policy_order,
        sub_policies,
        rate_allocation,
    })
}

/// `values` compiled as one set of regular expressions, as the sampler matches them. Each
/// pattern that does not compile is reported at its index; a set of patterns that each
/// compile but are too large together is reported at `values`.
fn regex_values(problems: &mut Problems, f: &Fields<'_>, values: &[String]) -> Option<RegexValues> {
    let mut valid = true;
    for (i, pattern) in values.iter().enumerate() {
        if let Err(error) = regex::Regex::new(pattern) {
            valid = false;
            problems.add(
                format!("{}[{i}]", f.key_path("values")),
                format!(
                    "invalid regular expression: {}",
                    one_line(&error.to_string())
                ),
            );
        }
    }
    if !valid {
        return None;
    }
    match RegexValues::new(values) {
        Ok(set) => Some(set),
        Err(error) => {
            problems.add(
                f.key_path("values"),
                format!(
                    "the regular expressions cannot be compiled together: {}; use fewer or \
                     simpler patterns",
                    one_line(&error.to_string()).trim_end_matches('.')
                ),
            );
            None
        }
    }
}

/// A required, non-empty `key`.
fn required_key(problems: &mut Problems, f: &Fields<'_>) -> String {
    let key = f.string(problems, "key");
    if key.as_deref().is_none_or(str::is_empty)
        && f.value("key")
            .is_none_or(|v| matches!(v, Value::Str(_) | Value::Env(_)))
        && !f.wrong_type()
    {
        problems.add(
            f.key_path("key"),
            "must be set to the attribute key to match",
        );
    }
    key.unwrap_or_default()
}

/// A required, non-empty `values` list.
fn required_values(problems: &mut Problems, f: &Fields<'_>) -> Vec<String> {
    let values = f.strings(problems, "values");
    if values.as_ref().is_none_or(Vec::is_empty)
        && f.value("values").is_none_or(|v| matches!(v, Value::Seq(_)))
        && !f.wrong_type()
    {
        problems.add(f.key_path("values"), "must list at least one value");
    }
    values.unwrap_or_default()
}

/// A required rate of at least 1 per second.
fn positive_rate(problems: &mut Problems, f: &Fields<'_>, key: &str) -> u64 {
    match f.uint(problems, key) {
        Some(0) => {
            problems.add(f.key_path(key), "must be at least 1");
            1
        }
        Some(rate) => rate,
        None => {
            if f.value(key).is_none() && !f.wrong_type() {
                problems.add(f.key_path(key), "must be set (at least 1 per second)");
            }
            1
        }
    }
}

/// An error message on one line (the regex crate's messages span several).
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}
