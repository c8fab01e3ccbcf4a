//! Typing the `connectors` section: `forward` and `spanmetrics` (`span_metrics`).

use std::num::NonZeroUsize;

use super::common::Reader;
use super::defaults;
use super::duration;
use super::error::Problems;
use super::fields::{Fields, NOT_YET, Named as _};
use super::value::Value;
use super::{ComponentId, ConnectorConfig, HistogramUnit, SpanMetricsConfig, SpanMetricsDimension};

/// The dimensions every span metric has unless excluded.
pub(crate) const DEFAULT_DIMENSIONS: [&str; 4] =
    ["service.name", "span.name", "span.kind", "status.code"];

/// The reader of `connectors.<id>`: `spanmetrics` or `forward`.
pub(crate) fn connector(id: &ComponentId) -> &'static Reader<ConnectorConfig> {
    match id.kind.as_str() {
        "spanmetrics" => &SPAN_METRICS,
        _ => &FORWARD,
    }
}

/// `connectors.forward`, which has no settings.
const FORWARD: Reader<ConnectorConfig> = Reader {
    known: &[],
    unsupported: &[],
    typed: |_, _| ConnectorConfig::Forward,
};

/// `connectors.spanmetrics`.
///
/// `resource_metrics_cache_size` and `metrics_expiration: 0` are checked and have no effect:
/// tailgate keeps every resource's series (bounded by `aggregation_cardinality_limit`) and
/// never expires them.
const SPAN_METRICS: Reader<ConnectorConfig> = Reader {
    known: &[
        "histogram",
        "dimensions",
        "exclude_dimensions",
        "namespace",
        "metrics_flush_interval",
        "aggregation_temporality",
        "exemplars",
        "resource_metrics_key_attributes",
        "dimensions_cache_size",
        "resource_metrics_cache_size",
        "aggregation_cardinality_limit",
        "metrics_expiration",
    ],
    unsupported: &[
        ("events", NOT_YET),
        ("delta_temporality", NOT_YET),
        ("include_instrumentation_scope", NOT_YET),
        ("add_resource_attributes", NOT_YET),
        ("metric_timestamp_cache_size", NOT_YET),
    ],
    typed: |problems, fields| ConnectorConfig::SpanMetrics(span_metrics(problems, fields)),
};

fn span_metrics(problems: &mut Problems, fields: &Fields<'_>) -> SpanMetricsConfig {
    let histogram = fields.child(
        problems,
        "histogram",
        &["disable", "unit", "explicit"],
        &[("exponential", NOT_YET)],
    );
    let histogram_disabled = histogram.boolean(problems, "disable").unwrap_or(false);
    let histogram_unit = histogram
        .choice(problems, "unit", HistogramUnit::NAMES)
        .unwrap_or(HistogramUnit::Milliseconds);
    let explicit = histogram.child(problems, "explicit", &["buckets"], &[]);
    let histogram_buckets = buckets(problems, &explicit).unwrap_or_else(defaults::span_buckets);

    let dimensions = dimensions(problems, fields);
    let exclude_dimensions = fields
        .strings(problems, "exclude_dimensions")
        .unwrap_or_default();
    for (i, name) in exclude_dimensions.iter().enumerate() {
        if !DEFAULT_DIMENSIONS.contains(&name.as_str()) {
            problems.add(
                format!("{}[{i}]", fields.key_path("exclude_dimensions")),
                format!(
                    "{name:?} is not a default dimension (known: {})",
                    DEFAULT_DIMENSIONS.join(", ")
                ),
            );
        }
    }
    for (i, dimension) in dimensions.iter().enumerate() {
        let excluded = exclude_dimensions.contains(&dimension.name);
        let duplicate = dimensions[..i].iter().any(|d| d.name == dimension.name);
        if duplicate || (DEFAULT_DIMENSIONS.contains(&dimension.name.as_str()) && !excluded) {
            problems.add(
                format!("{}[{i}].name", fields.key_path("dimensions")),
                format!("duplicate dimension name {:?}", dimension.name),
            );
        }
    }

    let namespace = fields
        .string(problems, "namespace")
        .unwrap_or_else(defaults::span_metrics_namespace);
    let metrics_flush_interval = fields
        .positive_duration(problems, "metrics_flush_interval")
        .unwrap_or(defaults::SPAN_METRICS_FLUSH_INTERVAL);
    if let Some(temporality) = fields.string(problems, "aggregation_temporality") {
        match temporality.as_str() {
            "AGGREGATION_TEMPORALITY_CUMULATIVE" => {}
            "AGGREGATION_TEMPORALITY_DELTA" => problems.add(
                fields.key_path("aggregation_temporality"),
                "delta temporality is not supported yet by this version of tailgate; use \
                 AGGREGATION_TEMPORALITY_CUMULATIVE (the default)",
            ),
            other => problems.add(
                fields.key_path("aggregation_temporality"),
                format!(
                    "unknown value {other:?} (expected AGGREGATION_TEMPORALITY_CUMULATIVE or \
                     AGGREGATION_TEMPORALITY_DELTA)"
                ),
            ),
        }
    }
    let exemplars = fields.child(
        problems,
        "exemplars",
        &["enabled"],
        &[("max_per_data_point", NOT_YET)],
    );
    let exemplars_enabled = exemplars.boolean(problems, "enabled").unwrap_or(false);
    let resource_metrics_key_attributes = fields
        .strings(problems, "resource_metrics_key_attributes")
        .unwrap_or_default();
    let dimensions_cache_size = match fields.uint(problems, "dimensions_cache_size") {
        None => NonZeroUsize::new(defaults::SPAN_METRICS_DIMENSIONS_CACHE_SIZE),
        Some(n) => {
            let size = usize::try_from(n).ok().and_then(NonZeroUsize::new);
            if size.is_none() {
                problems.add(
                    fields.key_path("dimensions_cache_size"),
                    "must be at least 1",
                );
            }
            size
        }
    }
    .unwrap_or(NonZeroUsize::MIN);
    fields.uint(problems, "resource_metrics_cache_size");
    if let Some(expiration) = fields.duration(problems, "metrics_expiration")
        && !expiration.is_zero()
    {
        problems.add(
            fields.key_path("metrics_expiration"),
            "expiring series is not supported yet by this version of tailgate; use 0 (never)",
        );
    }
    let aggregation_cardinality_limit = match fields.uint(problems, "aggregation_cardinality_limit")
    {
        None => NonZeroUsize::new(defaults::SPAN_METRICS_CARDINALITY_LIMIT),
        Some(n) => usize::try_from(n).ok().and_then(NonZeroUsize::new),
    };
    SpanMetricsConfig {
        histogram_disabled,
        histogram_unit,
        histogram_buckets,
        dimensions,
        exclude_dimensions,
        namespace,
        metrics_flush_interval,
        exemplars_enabled,
        resource_metrics_key_attributes,
        dimensions_cache_size,
        aggregation_cardinality_limit,
    }
}

/// `histogram.explicit.buckets`: durations, strictly increasing.
fn buckets(problems: &mut Problems, explicit: &Fields<'_>) -> Option<Vec<std::time::Duration>> {
    let value = explicit.value("buckets")?;
    let path = explicit.key_path("buckets");
    let Value::Seq(items) = value else {
        problems.add(
            path,
            format!("expected a list of durations, found {}", value.describe()),
        );
        return None;
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let item_path = format!("{path}[{i}]");
        let parsed = match item {
            Value::Str(text) | Value::Env(text) => duration::parse(text.trim()),
            Value::Int(0) => Ok(std::time::Duration::ZERO),
            other => Err(format!(
                "expected a duration such as \"100ms\", found {}",
                other.describe()
            )),
        };
        match parsed {
            Ok(bound) => {
                if out.last().is_some_and(|last| *last >= bound) {
                    problems.add(item_path, "bucket bounds must be strictly increasing");
                    return None;
                }
                out.push(bound);
            }
            Err(message) => {
                problems.add(item_path, message);
                return None;
            }
        }
    }
    Some(out)
}

/// `dimensions: [{name, default}]`.
fn dimensions(problems: &mut Problems, fields: &Fields<'_>) -> Vec<SpanMetricsDimension> {
    let Some(value) = fields.value("dimensions") else {
        return Vec::new();
    };
    let path = fields.key_path("dimensions");
    let Value::Seq(items) = value else {
        problems.add(
            path,
            format!(
                "expected a list of {{name, default}}, found {}",
                value.describe()
            ),
        );
        return Vec::new();
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let item_path = format!("{path}[{i}]");
        let dimension = Fields::open(problems, &item_path, Some(item), &["name", "default"], &[]);
        let name = dimension.string(problems, "name").unwrap_or_default();
        if name.is_empty() && !dimension.wrong_type() {
            problems.add(dimension.key_path("name"), "must not be empty");
            continue;
        }
        out.push(SpanMetricsDimension {
            name,
            default: dimension.string(problems, "default"),
        });
    }
    out
}
