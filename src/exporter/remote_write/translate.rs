//! OTLP metrics → Prometheus remote-write 1.0 time series.
//!
//! Follows the OpenTelemetry specification (`compatibility/prometheus_and_openmetrics.md`,
//! "OTLP Metric points to Prometheus") as implemented by `prometheus/otlptranslator` and
//! the Collector's `prometheusremotewrite` translator:
//!
//! | OTLP | Prometheus |
//! |---|---|
//! | Gauge | gauge `name` (+ unit words, `_ratio` for unit `1`); exemplars dropped |
//! | Sum, monotonic, cumulative | counter `name_total`, exemplars attached |
//! | Sum, non-monotonic, cumulative | gauge `name` |
//! | Histogram, cumulative | `name_bucket{le}` (cumulative, `+Inf` = count), `name_sum` (if set), `name_count`; exemplars on the first bucket whose bound holds them |
//! | ExponentialHistogram, cumulative | one native histogram `name` (schema = scale, downscaled to 8; scale < −4 refused) |
//! | Summary | `name{quantile}`, `name_sum`, `name_count` |
//! | any delta temporality | refused, counted as `delta_temporality` |
//! | resource | `job` = `service.namespace/service.name`, `instance` = `service.instance.id`, one `target_info` per resource |
//! | scope | `otel_scope_name`, `otel_scope_version`, `otel_scope_<attribute>` labels |
//! | `NoRecordedValue` flag | StaleNaN (`0x7ff0000000000002`) in place of every value |
//!
//! Labels are sorted by name, unique, and never empty; attributes that map to the same label
//! name are joined with `;` in the order of their original keys. Samples of one series are
//! merged and sorted by timestamp (milliseconds), duplicates keeping the last value, because
//! a receiver silently drops out-of-order samples inside one request.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hash, Hasher};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Exemplar as OtlpExemplar, ExponentialHistogramDataPoint,
    HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, SummaryDataPoint, exemplar,
    exponential_histogram_data_point::Buckets, metric::Data, number_data_point,
};

use super::proto::prompb::{
    BucketSpan, Exemplar, Histogram, Label, MetricMetadata, Sample, TimeSeries, histogram,
    metric_metadata::MetricType,
};
use crate::hashed_positions::HashedPositions;
use crate::otlp::metric_points;

/// The NaN Prometheus reads as "this series ended" (staleness marker).
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// Default width of a native histogram's zero bucket when the point does not give one.
const DEFAULT_ZERO_THRESHOLD: f64 = 1e-128;

/// Exemplar labels longer than this (in runes, names and values) keep only the trace ids.
const MAX_EXEMPLAR_RUNES: usize = 128;

/// `DataPointFlags.FLAG_NO_RECORDED_VALUE`.
const FLAG_NO_RECORDED_VALUE: u32 = 1;

/// Why data points were refused by translation: the `reason` label of
/// `tailgate_remote_write_dropped_data_points_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Delta temporality: Prometheus needs cumulative values (put a `deltatocumulative`
    /// processor in front).
    DeltaTemporality,
    /// The metric cannot be represented: a name that normalizes to nothing, no data, an
    /// exponential histogram scale below −4, or a point with no value.
    Invalid,
}

impl DropReason {
    /// Every reason, in label order.
    pub const ALL: [DropReason; 2] = [DropReason::DeltaTemporality, DropReason::Invalid];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::DeltaTemporality => "delta_temporality",
            DropReason::Invalid => "invalid",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// How metrics are named and labelled (from the exporter's config).
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Prefix of every metric name (`<namespace>_`); empty for none.
    pub namespace: String,
    /// Labels added to every series that lacks them (already valid names, non-empty values).
    pub external_labels: BTreeMap<String, String>,
    /// Copy every resource attribute to the labels of the resource's series.
    pub resource_to_telemetry: bool,
    /// Emit one `target_info` series per resource.
    pub target_info: bool,
    /// Unit and type suffixes on names.
    pub add_metric_suffixes: bool,
    /// Collect metric metadata (type, help, unit) per family.
    pub send_metadata: bool,
}

/// One series ready to send, and how many OTLP data points it accounts for.
///
/// A data point that becomes several series (a histogram's buckets, a summary's quantiles)
/// is accounted for by its first series only, so that the sum of `points` over all series
/// equals the data points translated, whichever shard each series goes to.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Labels, samples, exemplars and native histograms, in timestamp order.
    pub series: TimeSeries,
    /// Data points accounted for.
    pub points: usize,
    /// [`label_hash`] of `series.labels`: series are looked up and sharded by it.
    pub label_hash: u64,
}

/// A hash of a series' labels, `(name, value)` in order: the same for the same labels for
/// the process's life (and across processes of one build), so that a series always goes
/// to the same shard.
pub fn label_hash<'a>(labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> u64 {
    let mut hasher = foldhash::fast::FixedState::default().build_hasher();
    for label in labels {
        label.hash(&mut hasher);
    }
    hasher.finish()
}

/// The result of translating one request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Translated {
    /// Every series, each with its samples merged and sorted.
    pub series: Vec<Series>,
    /// One entry per metric family (only with `send_metadata`).
    pub metadata: Vec<MetricMetadata>,
    /// Data points refused, by [`DropReason::index`].
    pub dropped: [usize; 2],
}

impl Translated {
    /// Data points accounted for by `series`.
    pub fn points(&self) -> usize {
        self.series.iter().map(|s| s.points).sum()
    }
}

/// Translates a decoded request.
pub fn translate(request: &ExportMetricsServiceRequest, options: &Options) -> Translated {
    let mut out = Builder::default();
    for resource_metrics in &request.resource_metrics {
        translate_resource(resource_metrics, options, &mut out);
    }
    out.finish()
}

/// Series under construction, merged by label set.
#[derive(Default)]
struct Builder {
    /// Where the series with each [`label_hash`] are.
    positions: HashedPositions,
    series: Vec<Series>,
    metadata: BTreeMap<String, MetricMetadata>,
    dropped: [usize; 2],
}

impl Builder {
    /// The series of `labels`, made (its label strings copied) only when it is new.
    fn entry(&mut self, labels: LabelSet<'_>) -> &mut Series {
        let hash = label_hash(labels.iter());
        let found = self.positions.find(hash, |i| {
            self.series[i]
                .series
                .labels
                .iter()
                .map(|label| (label.name.as_str(), label.value.as_str()))
                .eq(labels.iter())
        });
        if let Some(i) = found {
            return &mut self.series[i];
        }
        let next = self.positions.push(hash);
        let mut owned = Vec::with_capacity(labels.base.len() + labels.extra.len());
        owned.extend(labels.iter().map(|(name, value)| Label {
            name: name.to_owned(),
            value: value.to_owned(),
        }));
        self.series.push(Series {
            series: TimeSeries {
                labels: owned,
                ..TimeSeries::default()
            },
            points: 0,
            label_hash: hash,
        });
        &mut self.series[next]
    }

    fn sample(&mut self, labels: LabelSet<'_>, sample: Sample, points: usize) {
        let entry = self.entry(labels);
        entry.series.samples.push(sample);
        entry.points += points;
    }

    fn drop_points(&mut self, reason: DropReason, points: usize) {
        self.dropped[reason.index()] += points;
    }

    fn finish(self) -> Translated {
        let mut series = self.series;
        for s in &mut series {
            let ts = &mut s.series;
            sort_keeping_last(&mut ts.samples, |sample| sample.timestamp);
            sort_keeping_last(&mut ts.histograms, |h| h.timestamp);
            ts.exemplars.sort_by_key(|e| e.timestamp);
        }
        Translated {
            series,
            metadata: self.metadata.into_values().collect(),
            dropped: self.dropped,
        }
    }
}

/// The labels of one series, borrowed: `base` (sorted by name, unique) with `extra` (sorted
/// by name, unique) merged in, an extra label replacing the base label of the same name.
/// The series of one data point share their base labels and differ in `__name__` and
/// `le` or `quantile`, so a series is looked up without copying a string.
#[derive(Clone, Copy)]
struct LabelSet<'a> {
    base: &'a [(String, String)],
    extra: &'a [(&'a str, &'a str)],
}

impl<'a> LabelSet<'a> {
    fn new(base: &'a [(String, String)], extra: &'a [(&'a str, &'a str)]) -> Self {
        debug_assert!(extra.windows(2).all(|pair| pair[0].0 < pair[1].0));
        Self { base, extra }
    }

    /// The labels in name order.
    fn iter(self) -> MergedLabels<'a> {
        MergedLabels {
            base: self.base,
            extra: self.extra,
        }
    }
}

/// The iterator of [`LabelSet::iter`].
struct MergedLabels<'a> {
    base: &'a [(String, String)],
    extra: &'a [(&'a str, &'a str)],
}

impl<'a> Iterator for MergedLabels<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        let order = match (self.base.first(), self.extra.first()) {
            (None, None) => return None,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((name, _)), Some((extra, _))) => name.as_str().cmp(extra),
        };
        if order == Ordering::Less {
            let (name, value) = &self.base[0];
            self.base = &self.base[1..];
            return Some((name, value));
        }
        if order == Ordering::Equal {
            self.base = &self.base[1..];
        }
        let label = self.extra[0];
        self.extra = &self.extra[1..];
        Some(label)
    }
}

/// What every series of one resource shares.
struct ResourceContext {
    job: Option<String>,
    instance: Option<String>,
    /// All resource attributes as labels (for `resource_to_telemetry_conversion`).
    promoted: BTreeMap<String, String>,
}

fn translate_resource(rm: &ResourceMetrics, options: &Options, out: &mut Builder) {
    let attributes: &[KeyValue] = rm
        .resource
        .as_ref()
        .map(|r| r.attributes.as_slice())
        .unwrap_or_default();
    let lookup = |key: &str| {
        attributes
            .iter()
            .find(|kv| kv.key == key)
            .map(|kv| any_value_string(kv.value.as_ref()))
            .filter(|v| !v.is_empty())
    };
    let service_name = lookup("service.name");
    let job = match (lookup("service.namespace"), &service_name) {
        (Some(ns), Some(name)) => Some(format!("{ns}/{name}")),
        (None, Some(name)) => Some(name.clone()),
        _ => None,
    };
    let instance = lookup("service.instance.id");
    let ctx = ResourceContext {
        job,
        instance,
        promoted: if options.resource_to_telemetry {
            attribute_labels(attributes)
        } else {
            BTreeMap::new()
        },
    };

    let mut latest_ms: Option<i64> = None;
    for scope_metrics in &rm.scope_metrics {
        let mut scope_labels = BTreeMap::new();
        if let Some(scope) = &scope_metrics.scope {
            for kv in &scope.attributes {
                if let Some(name) = sanitize_label_name(&kv.key) {
                    let value = any_value_string(kv.value.as_ref());
                    if !value.is_empty() {
                        scope_labels.insert(format!("otel_scope_{name}"), value);
                    }
                }
            }
            // The three fixed scope labels win over attributes that collide with them.
            for (name, value) in [
                ("otel_scope_name", &scope.name),
                ("otel_scope_version", &scope.version),
            ] {
                scope_labels.remove(name);
                if !value.is_empty() {
                    scope_labels.insert(name.to_owned(), value.clone());
                }
            }
        }
        if !scope_metrics.schema_url.is_empty() {
            scope_labels.insert(
                "otel_scope_schema_url".to_owned(),
                scope_metrics.schema_url.clone(),
            );
        } else {
            scope_labels.remove("otel_scope_schema_url");
        }
        let scope = ScopeContext {
            resource: &ctx,
            labels: scope_labels,
            options,
        };
        for metric in &scope_metrics.metrics {
            if let Some(ms) = scope.metric(metric, out) {
                latest_ms = Some(latest_ms.map_or(ms, |l| l.max(ms)));
            }
        }
    }

    if options.target_info
        && let Some(timestamp) = latest_ms
        && (ctx.job.is_some() || ctx.instance.is_some())
    {
        let others: Vec<KeyValue> = attributes
            .iter()
            .filter(|kv| {
                !matches!(
                    kv.key.as_str(),
                    "service.name" | "service.namespace" | "service.instance.id"
                )
            })
            .cloned()
            .collect();
        let mut labels = attribute_labels(&others);
        if !labels.is_empty() {
            set_identity(&mut labels, &ctx);
            add_absent(&mut labels, &options.external_labels);
            let name = if options.namespace.is_empty() {
                "target_info".to_owned()
            } else {
                format!("{}_target_info", clean_namespace(&options.namespace))
            };
            labels.insert("__name__".to_owned(), name.clone());
            let labels: Vec<(String, String)> = labels.into_iter().collect();
            if options.send_metadata {
                out.metadata.entry(name.clone()).or_insert(MetricMetadata {
                    r#type: MetricType::Gauge as i32,
                    metric_family_name: name,
                    help: "Target metadata".to_owned(),
                    unit: String::new(),
                });
            }
            out.sample(
                LabelSet::new(&labels, &[]),
                Sample {
                    value: 1.0,
                    timestamp,
                },
                0,
            );
        }
    }
}

/// Sorts `values` by timestamp (stably) and, of equal timestamps, keeps the last value
/// written: a receiver refuses a second value for the same timestamp.
fn sort_keeping_last<T>(values: &mut Vec<T>, timestamp: impl Fn(&T) -> i64) {
    values.sort_by_key(&timestamp);
    values.dedup_by(|later, earlier| {
        let same = timestamp(later) == timestamp(earlier);
        if same {
            std::mem::swap(later, earlier);
        }
        same
    });
}

fn set_identity(labels: &mut BTreeMap<String, String>, ctx: &ResourceContext) {
    if let Some(job) = &ctx.job {
        labels.insert("job".to_owned(), job.clone());
    }
    if let Some(instance) = &ctx.instance {
        labels.insert("instance".to_owned(), instance.clone());
    }
}

fn add_absent(labels: &mut BTreeMap<String, String>, extra: &BTreeMap<String, String>) {
    for (name, value) in extra {
        if !labels.contains_key(name) {
            labels.insert(name.clone(), value.clone());
        }
    }
}

/// What the series of one scope share.
struct ScopeContext<'a> {
    resource: &'a ResourceContext,
    labels: BTreeMap<String, String>,
    options: &'a Options,
}

/// How a metric is named.
#[derive(Clone, Copy, PartialEq, Eq)]
enum NameKind {
    Gauge,
    Counter,
    Other,
}

impl ScopeContext<'_> {
    /// Translates one metric; returns the latest timestamp emitted, if any.
    fn metric(&self, metric: &Metric, out: &mut Builder) -> Option<i64> {
        let Some(data) = &metric.data else {
            // No data: nothing to count.
            return None;
        };
        let points = metric_points(metric);
        let cumulative = AggregationTemporality::Cumulative as i32;
        let temporality = match data {
            Data::Gauge(_) | Data::Summary(_) => cumulative,
            Data::Sum(s) => s.aggregation_temporality,
            Data::Histogram(h) => h.aggregation_temporality,
            Data::ExponentialHistogram(h) => h.aggregation_temporality,
        };
        let (kind, metric_type) = match data {
            Data::Gauge(_) => (NameKind::Gauge, MetricType::Gauge),
            Data::Sum(s) if s.is_monotonic => (NameKind::Counter, MetricType::Counter),
            Data::Sum(_) => (NameKind::Other, MetricType::Gauge),
            Data::Histogram(_) | Data::ExponentialHistogram(_) => {
                (NameKind::Other, MetricType::Histogram)
            }
            Data::Summary(_) => (NameKind::Other, MetricType::Summary),
        };
        if temporality != cumulative {
            // Delta (or unspecified) temporality: Prometheus has no way to represent it.
            let reason = if temporality == AggregationTemporality::Delta as i32 {
                DropReason::DeltaTemporality
            } else {
                DropReason::Invalid
            };
            out.drop_points(reason, points);
            return None;
        }
        let Some(name) = metric_name(
            &metric.name,
            &metric.unit,
            kind,
            &self.options.namespace,
            self.options.add_metric_suffixes,
        ) else {
            out.drop_points(DropReason::Invalid, points);
            return None;
        };
        if self.options.send_metadata && points > 0 {
            out.metadata.entry(name.clone()).or_insert(MetricMetadata {
                r#type: metric_type as i32,
                metric_family_name: name.clone(),
                help: metric.description.clone(),
                unit: unit_words(&metric.unit),
            });
        }
        let mut latest = None;
        let mut seen = |ms: i64| latest = Some(latest.map_or(ms, |l: i64| l.max(ms)));
        match data {
            Data::Gauge(g) => {
                for p in &g.data_points {
                    if let Some(ms) = self.number(&name, p, false, out) {
                        seen(ms);
                    }
                }
            }
            Data::Sum(s) => {
                for p in &s.data_points {
                    if let Some(ms) = self.number(&name, p, s.is_monotonic, out) {
                        seen(ms);
                    }
                }
            }
            Data::Histogram(h) => {
                for p in &h.data_points {
                    seen(self.histogram(&name, p, out));
                }
            }
            Data::ExponentialHistogram(h) => {
                for p in &h.data_points {
                    if let Some(ms) = self.exponential(&name, p, out) {
                        seen(ms);
                    }
                }
            }
            Data::Summary(s) => {
                for p in &s.data_points {
                    seen(self.summary(&name, p, out));
                }
            }
        }
        latest
    }

    /// The labels of one data point, without `__name__`, sorted by name.
    fn labels(&self, attributes: &[KeyValue]) -> Vec<(String, String)> {
        let mut labels = attribute_labels(attributes);
        add_absent(&mut labels, &self.resource.promoted);
        set_identity(&mut labels, self.resource);
        add_absent(&mut labels, &self.options.external_labels);
        for (name, value) in &self.labels {
            labels.insert(name.clone(), value.clone());
        }
        labels.into_iter().collect()
    }

    fn number(
        &self,
        name: &str,
        p: &NumberDataPoint,
        exemplars: bool,
        out: &mut Builder,
    ) -> Option<i64> {
        let value = match p.value {
            _ if p.flags & FLAG_NO_RECORDED_VALUE != 0 => stale_nan(),
            Some(number_data_point::Value::AsDouble(v)) => v,
            Some(number_data_point::Value::AsInt(v)) => v as f64,
            None => {
                out.drop_points(DropReason::Invalid, 1);
                return None;
            }
        };
        let timestamp = millis(p.time_unix_nano);
        let base = self.labels(&p.attributes);
        let entry = out.entry(LabelSet::new(&base, &[("__name__", name)]));
        entry.series.samples.push(Sample { value, timestamp });
        entry.points += 1;
        if exemplars {
            entry
                .series
                .exemplars
                .extend(p.exemplars.iter().map(convert_exemplar));
        }
        Some(timestamp)
    }

    fn histogram(&self, name: &str, p: &HistogramDataPoint, out: &mut Builder) -> i64 {
        let timestamp = millis(p.time_unix_nano);
        let stale = p.flags & FLAG_NO_RECORDED_VALUE != 0;
        let value = |v: f64| if stale { stale_nan() } else { v };
        let base = self.labels(&p.attributes);
        let (count_name, bucket_name) = (format!("{name}_count"), format!("{name}_bucket"));
        // The data point is accounted for by its `_count` series.
        out.sample(
            LabelSet::new(&base, &[("__name__", &count_name)]),
            Sample {
                value: value(p.count as f64),
                timestamp,
            },
            1,
        );
        if let Some(sum) = p.sum {
            out.sample(
                LabelSet::new(&base, &[("__name__", &format!("{name}_sum"))]),
                Sample {
                    value: value(sum),
                    timestamp,
                },
                0,
            );
        }
        let mut exemplars: Vec<(f64, Exemplar)> = p
            .exemplars
            .iter()
            .map(|e| {
                let converted = convert_exemplar(e);
                (converted.value, converted)
            })
            .collect();
        let mut cumulative: u64 = 0;
        for (i, bound) in p.explicit_bounds.iter().enumerate() {
            // Fewer counts than bounds + 1 is malformed; missing counts read as 0.
            cumulative = cumulative.saturating_add(p.bucket_counts.get(i).copied().unwrap_or(0));
            let le = format_float(*bound);
            let entry = out.entry(LabelSet::new(
                &base,
                &[("__name__", &bucket_name), ("le", &le)],
            ));
            entry.series.samples.push(Sample {
                value: value(cumulative as f64),
                timestamp,
            });
            if !exemplars.is_empty() {
                let (mine, rest): (Vec<_>, Vec<_>) =
                    exemplars.into_iter().partition(|(v, _)| v <= bound);
                entry
                    .series
                    .exemplars
                    .extend(mine.into_iter().map(|(_, e)| e));
                exemplars = rest;
            }
        }
        let entry = out.entry(LabelSet::new(
            &base,
            &[("__name__", &bucket_name), ("le", "+Inf")],
        ));
        entry.series.samples.push(Sample {
            value: value(p.count as f64),
            timestamp,
        });
        entry
            .series
            .exemplars
            .extend(exemplars.into_iter().map(|(_, e)| e));
        timestamp
    }

    fn summary(&self, name: &str, p: &SummaryDataPoint, out: &mut Builder) -> i64 {
        let timestamp = millis(p.time_unix_nano);
        let stale = p.flags & FLAG_NO_RECORDED_VALUE != 0;
        let value = |v: f64| if stale { stale_nan() } else { v };
        let base = self.labels(&p.attributes);
        out.sample(
            LabelSet::new(&base, &[("__name__", &format!("{name}_count"))]),
            Sample {
                value: value(p.count as f64),
                timestamp,
            },
            1,
        );
        out.sample(
            LabelSet::new(&base, &[("__name__", &format!("{name}_sum"))]),
            Sample {
                value: value(p.sum),
                timestamp,
            },
            0,
        );
        for q in &p.quantile_values {
            out.sample(
                LabelSet::new(
                    &base,
                    &[("__name__", name), ("quantile", &format_float(q.quantile))],
                ),
                Sample {
                    value: value(q.value),
                    timestamp,
                },
                0,
            );
        }
        timestamp
    }

    fn exponential(
        &self,
        name: &str,
        p: &ExponentialHistogramDataPoint,
        out: &mut Builder,
    ) -> Option<i64> {
        let Some(histogram) = native_histogram(p) else {
            out.drop_points(DropReason::Invalid, 1);
            return None;
        };
        let timestamp = histogram.timestamp;
        let base = self.labels(&p.attributes);
        let entry = out.entry(LabelSet::new(&base, &[("__name__", name)]));
        entry.series.histograms.push(histogram);
        entry
            .series
            .exemplars
            .extend(p.exemplars.iter().map(convert_exemplar));
        entry.points += 1;
        Some(timestamp)
    }
}

/// An exponential histogram point as a native histogram (integer counts), or `None` when
/// its scale is below −4 (Prometheus has no such schema).
pub(crate) fn native_histogram(p: &ExponentialHistogramDataPoint) -> Option<Histogram> {
    if p.scale < -4 {
        return None;
    }
    // Above 8, merge 2^(scale−8) buckets into one.
    let shift = (p.scale - 8).max(0) as u32;
    let schema = p.scale.min(8);
    let stale = p.flags & FLAG_NO_RECORDED_VALUE != 0;
    let (positive_spans, positive_deltas) = spans(p.positive.as_ref(), shift);
    let (negative_spans, negative_deltas) = spans(p.negative.as_ref(), shift);
    Some(Histogram {
        count: Some(histogram::Count::CountInt(p.count)),
        sum: if stale {
            stale_nan()
        } else {
            p.sum.unwrap_or(0.0)
        },
        schema,
        zero_threshold: if p.zero_threshold > 0.0 {
            p.zero_threshold
        } else {
            DEFAULT_ZERO_THRESHOLD
        },
        zero_count: Some(histogram::ZeroCount::ZeroCountInt(p.zero_count)),
        negative_spans,
        negative_deltas,
        negative_counts: Vec::new(),
        positive_spans,
        positive_deltas,
        positive_counts: Vec::new(),
        reset_hint: histogram::ResetHint::Unknown as i32,
        timestamp: millis(p.time_unix_nano),
    })
}

/// OTLP buckets (bucket `i` covers index `offset + i`) as native spans and delta-encoded
/// counts. A native bucket index is the OTLP index + 1 (OTLP buckets are lower-exclusive,
/// upper-inclusive around `base^index`, Prometheus's around `base^(index-1)`). Runs of
/// empty buckets longer than two start a new span; shorter ones are written as zeros.
fn spans(buckets: Option<&Buckets>, shift: u32) -> (Vec<BucketSpan>, Vec<i64>) {
    let Some(buckets) = buckets else {
        return (Vec::new(), Vec::new());
    };
    // (native index, count), merged for downscaling, in index order.
    let mut merged: Vec<(i64, u64)> = Vec::new();
    for (i, &count) in buckets.bucket_counts.iter().enumerate() {
        let otlp_index = i64::from(buckets.offset) + i as i64;
        let index = (otlp_index >> shift) + 1;
        match merged.last_mut() {
            Some((last, c)) if *last == index => *c = c.saturating_add(count),
            _ => merged.push((index, count)),
        }
    }
    let mut spans: Vec<BucketSpan> = Vec::new();
    let mut deltas = Vec::new();
    let mut previous_count: i64 = 0;
    let mut next_index: Option<i64> = None;
    for (index, count) in merged.into_iter().filter(|&(_, c)| c > 0) {
        match next_index {
            None => spans.push(BucketSpan {
                offset: index as i32,
                length: 0,
            }),
            Some(expected) => {
                let gap = index - expected;
                if gap > 2 {
                    spans.push(BucketSpan {
                        offset: gap as i32,
                        length: 0,
                    });
                } else {
                    for _ in 0..gap {
                        deltas.push(-previous_count);
                        previous_count = 0;
                        if let Some(span) = spans.last_mut() {
                            span.length += 1;
                        }
                    }
                }
            }
        }
        let count = count.min(i64::MAX as u64) as i64;
        deltas.push(count - previous_count);
        previous_count = count;
        if let Some(span) = spans.last_mut() {
            span.length += 1;
        }
        next_index = Some(index + 1);
    }
    (spans, deltas)
}

fn convert_exemplar(e: &OtlpExemplar) -> Exemplar {
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    let mut runes = 0;
    for kv in &e.filtered_attributes {
        let Some(name) = sanitize_label_name(&kv.key) else {
            continue;
        };
        let value = any_value_string(kv.value.as_ref());
        if value.is_empty() {
            continue;
        }
        runes += name.chars().count() + value.chars().count();
        labels.insert(name, value);
    }
    if runes > MAX_EXEMPLAR_RUNES {
        labels.clear();
    }
    if e.trace_id.len() == 16 && e.trace_id.iter().any(|&b| b != 0) {
        labels.insert("trace_id".to_owned(), hex(&e.trace_id));
    }
    if e.span_id.len() == 8 && e.span_id.iter().any(|&b| b != 0) {
        labels.insert("span_id".to_owned(), hex(&e.span_id));
    }
    Exemplar {
        labels: labels
            .into_iter()
            .map(|(name, value)| Label { name, value })
            .collect(),
        value: match e.value {
            Some(exemplar::Value::AsDouble(v)) => v,
            Some(exemplar::Value::AsInt(v)) => v as f64,
            None => 0.0,
        },
        timestamp: millis(e.time_unix_nano),
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// The StaleNaN staleness marker.
pub fn stale_nan() -> f64 {
    f64::from_bits(STALE_NAN_BITS)
}

/// Nanoseconds since the epoch → milliseconds (truncated).
fn millis(nanos: u64) -> i64 {
    (nanos / 1_000_000) as i64
}

/// A float as Go's `FormatFloat(f, 'f', -1, 64)`: shortest exact decimal, no exponent;
/// infinities as `+Inf`/`-Inf`.
pub(crate) fn format_float(f: f64) -> String {
    if f.is_nan() {
        "NaN".to_owned()
    } else if f == f64::INFINITY {
        "+Inf".to_owned()
    } else if f == f64::NEG_INFINITY {
        "-Inf".to_owned()
    } else {
        format!("{f}")
    }
}

/// Attributes as labels: names sanitized, empty values dropped, and values of attributes
/// that map to one name joined with `;` in the order of their original keys.
fn attribute_labels(attributes: &[KeyValue]) -> BTreeMap<String, String> {
    let mut named: Vec<(&str, String, String)> = attributes
        .iter()
        .filter_map(|kv| {
            let value = any_value_string(kv.value.as_ref());
            if value.is_empty() {
                return None;
            }
            Some((kv.key.as_str(), sanitize_label_name(&kv.key)?, value))
        })
        .collect();
    named.sort_by(|a, b| a.0.cmp(b.0));
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    for (_, name, value) in named {
        labels
            .entry(name)
            .and_modify(|v| {
                v.push(';');
                v.push_str(&value);
            })
            .or_insert(value);
    }
    labels
}

/// An attribute value as a label value: strings as-is, other scalars in their usual text,
/// bytes in base64, arrays and maps as JSON (as pcommon's `AsString`).
fn any_value_string(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        None => String::new(),
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => format_float(*d),
        Some(any_value::Value::BytesValue(b)) => base64(b),
        Some(v @ (any_value::Value::ArrayValue(_) | any_value::Value::KvlistValue(_))) => {
            json(Some(v)).to_string()
        }
        Some(any_value::Value::StringValueStrindex(_)) => String::new(),
    }
}

fn json(value: Option<&any_value::Value>) -> serde_json::Value {
    use serde_json::Value as J;
    match value {
        None | Some(any_value::Value::StringValueStrindex(_)) => J::Null,
        Some(any_value::Value::StringValue(s)) => J::String(s.clone()),
        Some(any_value::Value::BoolValue(b)) => J::Bool(*b),
        Some(any_value::Value::IntValue(i)) => J::from(*i),
        Some(any_value::Value::DoubleValue(d)) => J::from(*d),
        Some(any_value::Value::BytesValue(b)) => J::String(base64(b)),
        Some(any_value::Value::ArrayValue(a)) => {
            J::Array(a.values.iter().map(|v| json(v.value.as_ref())).collect())
        }
        Some(any_value::Value::KvlistValue(kv)) => J::Object(
            kv.values
                .iter()
                .map(|kv| {
                    (
                        kv.key.clone(),
                        json(kv.value.as_ref().and_then(|v| v.value.as_ref())),
                    )
                })
                .collect(),
        ),
    }
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> shift) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A label name per `otlptranslator.LabelNamer` (no UTF-8): every rune outside
/// `[A-Za-z0-9]` becomes `_`, runs of `_` collapse (a `__x__` name keeps its outer `__`),
/// a leading digit gets `key_`. `None` when nothing but `_` is left.
pub(crate) fn sanitize_label_name(name: &str) -> Option<String> {
    if name.is_empty() {
        return None;
    }
    let mapped: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let reserved = mapped.len() > 4 && mapped.starts_with("__") && mapped.ends_with("__");
    let mut sanitized = if reserved {
        format!("__{}__", collapse_underscores(&mapped[2..mapped.len() - 2]))
    } else {
        collapse_underscores(&mapped)
    };
    if sanitized.starts_with(|c: char| c.is_ascii_digit()) {
        sanitized.insert_str(0, "key_");
    }
    if sanitized.trim_matches('_').is_empty() {
        return None;
    }
    Some(sanitized)
}

fn collapse_underscores(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c == '_' && out.ends_with('_') {
            continue;
        }
        out.push(c);
    }
    out
}

fn is_metric_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == ':'
}

/// The namespace as it prefixes names: invalid runs become `_`.
fn clean_namespace(namespace: &str) -> String {
    namespace
        .split(|c: char| !(is_metric_char(c) || c == '_'))
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("_")
}

/// The unit's words as a name suffix (`By/s` → `bytes_per_second`), for metadata.
fn unit_words(unit: &str) -> String {
    let (main, per) = unit_suffixes(unit);
    let joined = match (main.is_empty(), per.is_empty()) {
        (false, false) => format!("{main}_{per}"),
        (false, true) => main,
        _ => per,
    };
    joined.trim_matches('_').to_owned()
}

/// The main and per unit suffixes, cleaned (`otlptranslator` `buildUnitSuffixes` +
/// `cleanUpUnit`).
fn unit_suffixes(unit: &str) -> (String, String) {
    let (main, per) = match unit.split_once('/') {
        Some((main, per)) => (main, Some(per)),
        None => (unit, None),
    };
    let main = main.trim();
    let main = if main.is_empty() || main.contains(['{', '}']) {
        String::new()
    } else {
        clean_unit(unit_word(main))
    };
    let per = match per.map(str::trim) {
        Some(per) if !per.is_empty() && !per.contains(['{', '}']) => {
            clean_unit(&format!("per_{}", per_unit_word(per)))
        }
        _ => String::new(),
    };
    (main, per)
}

fn clean_unit(unit: &str) -> String {
    let mapped: String = unit
        .chars()
        .map(|c| if is_metric_char(c) { c } else { '_' })
        .collect();
    collapse_underscores(&mapped)
        .trim_start_matches('_')
        .to_owned()
}

fn unit_word(unit: &str) -> &str {
    match unit {
        "d" => "days",
        "h" => "hours",
        "min" => "minutes",
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "By" => "bytes",
        "KiBy" => "kibibytes",
        "MiBy" => "mebibytes",
        "GiBy" => "gibibytes",
        "TiBy" => "tibibytes",
        "KBy" => "kilobytes",
        "MBy" => "megabytes",
        "GBy" => "gigabytes",
        "TBy" => "terabytes",
        "m" => "meters",
        "V" => "volts",
        "A" => "amperes",
        "J" => "joules",
        "W" => "watts",
        "g" => "grams",
        "Cel" => "celsius",
        "Hz" => "hertz",
        "1" => "",
        "%" => "percent",
        other => other,
    }
}

fn per_unit_word(unit: &str) -> &str {
    match unit {
        "s" => "second",
        "m" => "minute",
        "h" => "hour",
        "d" => "day",
        "w" => "week",
        "mo" => "month",
        "y" => "year",
        other => other,
    }
}

/// The Prometheus name of a metric (`otlptranslator` `MetricNamer`, no UTF-8), or `None`
/// when it normalizes to nothing.
fn metric_name(
    name: &str,
    unit: &str,
    kind: NameKind,
    namespace: &str,
    suffixes: bool,
) -> Option<String> {
    let normalized = if suffixes {
        let mut tokens: Vec<String> = name
            .split(|c: char| !is_metric_char(c))
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect();
        let (mut main, per) = unit_suffixes(unit);
        if tokens.contains(&main) {
            main.clear();
        }
        let mut per = if per == "per_" {
            String::new()
        } else {
            per.trim_end_matches('_').to_owned()
        };
        if tokens.contains(&per) {
            per.clear();
        }
        if !per.is_empty() {
            main = main.trim_end_matches('_').to_owned();
        }
        if !main.is_empty() {
            tokens.push(main);
        }
        if !per.is_empty() {
            tokens.push(per);
        }
        if kind == NameKind::Counter {
            tokens.retain(|t| t != "total");
            tokens.push("total".to_owned());
        }
        if unit == "1" && kind == NameKind::Gauge {
            tokens.retain(|t| t != "ratio");
            tokens.push("ratio".to_owned());
        }
        if !namespace.is_empty() {
            tokens.insert(0, namespace.to_owned());
        }
        let mut joined = tokens.join("_");
        if joined.starts_with(|c: char| c.is_ascii_digit()) {
            joined.insert(0, '_');
        }
        joined
    } else {
        let metric = clean_namespace(name);
        if namespace.is_empty() {
            if metric.starts_with(|c: char| c.is_ascii_digit()) {
                format!("_{metric}")
            } else {
                metric
            }
        } else {
            format!("{}_{metric}", clean_namespace(namespace))
        }
    };
    if normalized.is_empty() || (normalized != name && normalized.chars().all(|c| c == '_')) {
        return None;
    }
    Some(normalized)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests;
