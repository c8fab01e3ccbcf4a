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
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;

use bumpalo::Bump;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Exemplar as OtlpExemplar, ExponentialHistogramDataPoint,
    HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, SummaryDataPoint, exemplar,
    exponential_histogram_data_point::Buckets, metric::Data, number_data_point,
};

use super::labels::{LabelBuffer, LabelRef, SeriesLabels};
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
    /// Labels, sorted by name, unique, never empty; their strings are shared with the other
    /// series of the request (see `labels.rs`).
    pub labels: SeriesLabels,
    /// Float samples, in timestamp order.
    pub samples: Vec<Sample>,
    /// Exemplars, in timestamp order.
    pub exemplars: Vec<Exemplar>,
    /// Native histograms, in timestamp order.
    pub histograms: Vec<Histogram>,
    /// Data points accounted for.
    pub points: usize,
    /// [`label_hash`] of `labels`: series are looked up and sharded by it.
    pub label_hash: u64,
}

impl Series {
    /// A series with `labels` (in name order) and nothing else, its hash computed.
    pub fn new<'a>(labels: impl IntoIterator<Item = (&'a str, &'a str)> + Clone) -> Self {
        Self {
            label_hash: label_hash(labels.clone()),
            labels: SeriesLabels::from_pairs(labels),
            samples: Vec::new(),
            exemplars: Vec::new(),
            histograms: Vec::new(),
            points: 0,
        }
    }

    /// The series as a 1.0 `TimeSeries` message, owning copies of its strings.
    pub fn to_time_series(&self) -> TimeSeries {
        TimeSeries {
            labels: self
                .labels
                .iter()
                .map(|(name, value)| Label {
                    name: name.to_owned(),
                    value: value.to_owned(),
                })
                .collect(),
            samples: self.samples.clone(),
            exemplars: self.exemplars.clone(),
            histograms: self.histograms.clone(),
        }
    }

    /// The value of the `__name__` label (`""` when it has none).
    pub fn name(&self) -> &str {
        self.labels.get("__name__").unwrap_or_default()
    }
}

/// A hash of a series' labels: the same for the same labels for the process's life (and
/// across processes of one build), so that a series always goes to the same shard.
///
/// It is the wrapping sum of each label's [`pair_hash`]: a series' labels are unique by
/// name and sorted, so the sum is as canonical as a hash over the sequence, and the series
/// of one data point, which share all labels but one or two, are hashed by adding their
/// own labels to the point's sum instead of hashing every string again.
pub fn label_hash<'a>(labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> u64 {
    labels.into_iter().fold(0, |sum, (name, value)| {
        sum.wrapping_add(pair_hash(name, value))
    })
}

/// The hash of one label.
fn pair_hash(name: &str, value: &str) -> u64 {
    foldhash::fast::FixedState::default().hash_one((name, value))
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
    let bump = Bump::new();
    let mut scratch = Scratch::new(&bump);
    for resource_metrics in &request.resource_metrics {
        translate_resource(resource_metrics, options, &mut out, &mut scratch);
    }
    out.finish()
}

/// Where the label strings of data points that the request does not hold as they are
/// (sanitized names, formatted values, joined collisions) live while the request is
/// translated: an arena dropped with it, and the sanitized name of each attribute key,
/// computed once per request rather than once per point.
struct Scratch<'b> {
    bump: &'b Bump,
    names: HashMap<&'b str, Option<&'b str>, foldhash::fast::FixedState>,
}

impl<'b> Scratch<'b> {
    fn new(bump: &'b Bump) -> Self {
        Self {
            bump,
            names: HashMap::default(),
        }
    }

    /// The label name of attribute key `key` ([`sanitize_label_name`]).
    fn label_name(&mut self, key: &'b str) -> Option<&'b str> {
        if let Some(&name) = self.names.get(key) {
            return name;
        }
        let name = if is_plain_label_name(key) {
            Some(key)
        } else {
            sanitize_label_name(key).map(|name| &*self.bump.alloc_str(&name))
        };
        self.names.insert(key, name);
        name
    }

    /// An attribute value as a label value ([`any_value_string`]), borrowed when it is a
    /// string.
    fn label_value(&self, value: Option<&'b AnyValue>) -> &'b str {
        match value.and_then(|v| v.value.as_ref()) {
            Some(any_value::Value::StringValue(s)) => s,
            _ => self.bump.alloc_str(&any_value_string(value)),
        }
    }

    /// Attributes as labels, appended to `out`: names sanitized, empty values dropped,
    /// sorted by name, and the values of attributes that map to one name joined with `;` in
    /// the order of their original keys.
    fn attribute_labels(
        &mut self,
        attributes: impl IntoIterator<Item = &'b KeyValue>,
        out: &mut Vec<(&'b str, &'b str)>,
    ) {
        let start = out.len();
        let attributes = attributes.into_iter();
        let mut keys: Vec<(&'b str, &'b str, &'b str)> =
            Vec::with_capacity(attributes.size_hint().0);
        for kv in attributes {
            let value = self.label_value(kv.value.as_ref());
            if value.is_empty() {
                continue;
            }
            if let Some(name) = self.label_name(&kv.key) {
                keys.push((&kv.key, name, value));
            }
        }
        // Stable: attributes with the same key keep their order in the join.
        keys.sort_by(|a, b| a.1.cmp(b.1).then(a.0.cmp(b.0)));
        let mut i = 0;
        while i < keys.len() {
            let name = keys[i].1;
            let same = keys[i..].iter().take_while(|k| k.1 == name).count();
            let value = if same == 1 {
                keys[i].2
            } else {
                let joined: Vec<&str> = keys[i..i + same].iter().map(|k| k.2).collect();
                self.bump.alloc_str(&joined.join(";"))
            };
            out.push((name, value));
            i += same;
        }
        debug_assert!(out[start..].windows(2).all(|w| w[0].0 < w[1].0));
    }
}

/// True when `key` is its own label name: ASCII letters, digits and single underscores,
/// not starting with a digit or an underscore (so neither reserved nor collapsed).
fn is_plain_label_name(key: &str) -> bool {
    let bytes = key.as_bytes();
    !bytes.is_empty()
        && bytes[0].is_ascii_alphabetic()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_')
        && !key.contains("__")
}

/// Series under construction, merged by label set.
#[derive(Default)]
struct Builder {
    /// Where the series with each [`label_hash`] are.
    positions: HashedPositions,
    /// The label strings of every series made so far.
    strings: LabelBuffer,
    /// Per series (same positions as `series`), its labels in `strings`.
    label_refs: Vec<Box<[LabelRef]>>,
    /// The series, their `labels` empty until [`Builder::finish`].
    series: Vec<Series>,
    /// What `series` hold as labels until then (cloned without allocating).
    no_labels: SeriesLabels,
    /// Per position of an extra label, the last one stored: the series of one data point,
    /// and the points of one metric, repeat their `__name__`.
    last_extra: [Option<LabelRef>; 2],
    metadata: BTreeMap<String, MetricMetadata>,
    dropped: [usize; 2],
}

impl Builder {
    /// True when the label strings of a data point whose series need at most `bytes` fit
    /// in the buffer's `u32` ranges. A point that does not fit is refused whole, before any
    /// of its series is made.
    fn has_room(&self, bytes: usize) -> bool {
        self.strings.has_room(bytes)
    }

    /// The series of `base` with `extra` merged in, made (the labels it needs stored) only
    /// when it is new. The caller has checked [`Builder::has_room`] for the point.
    fn entry(&mut self, base: &mut PointLabels<'_>, extra: &[(&str, &str)]) -> &mut Series {
        let PointLabels {
            pairs,
            stored,
            hashes,
            hash_sum,
        } = base;
        let labels = LabelSet::new(pairs, extra);
        let mut hash = *hash_sum;
        for &(name, value) in extra {
            hash = hash.wrapping_add(pair_hash(name, value));
            if let Ok(replaced) = pairs.binary_search_by(|(base_name, _)| (*base_name).cmp(name)) {
                hash = hash.wrapping_sub(hashes[replaced]);
            }
        }
        debug_assert_eq!(hash, label_hash(labels.iter()));
        let (strings, label_refs) = (&self.strings, &self.label_refs);
        let found = self.positions.find(hash, |i| {
            label_refs[i]
                .iter()
                .map(|&(name, value)| (strings.get(name), strings.get(value)))
                .eq(labels.iter())
        });
        if let Some(i) = found {
            return &mut self.series[i];
        }
        let next = self.positions.push(hash);
        let mut refs = Vec::with_capacity(pairs.len() + extra.len());
        for side in labels.sides() {
            refs.push(match side {
                Side::Base(i) => *stored[i].get_or_insert_with(|| {
                    let (name, value) = &pairs[i];
                    (self.strings.push(name), self.strings.push(value))
                }),
                Side::Extra(j) => self.store_extra(j, extra[j]),
            });
        }
        self.label_refs.push(refs.into_boxed_slice());
        self.series.push(Series {
            labels: self.no_labels.clone(),
            samples: Vec::new(),
            exemplars: Vec::new(),
            histograms: Vec::new(),
            points: 0,
            label_hash: hash,
        });
        &mut self.series[next]
    }

    /// Stores the extra label at position `j` of a label set, or reuses the last one stored
    /// there when it is the same.
    fn store_extra(&mut self, j: usize, (name, value): (&str, &str)) -> LabelRef {
        let slot = self.last_extra.get(j).copied().flatten();
        if let Some(last) = slot
            && self.strings.get(last.0) == name
            && self.strings.get(last.1) == value
        {
            return last;
        }
        let stored = (self.strings.push(name), self.strings.push(value));
        if let Some(slot) = self.last_extra.get_mut(j) {
            *slot = Some(stored);
        }
        stored
    }

    fn sample(
        &mut self,
        base: &mut PointLabels<'_>,
        extra: &[(&str, &str)],
        sample: Sample,
        points: usize,
    ) {
        let entry = self.entry(base, extra);
        entry.samples.push(sample);
        entry.points += points;
    }

    fn drop_points(&mut self, reason: DropReason, points: usize) {
        self.dropped[reason.index()] += points;
    }

    fn finish(self) -> Translated {
        let strings = self.strings.freeze();
        let mut series = self.series;
        for (s, refs) in series.iter_mut().zip(self.label_refs) {
            s.labels = SeriesLabels::new(strings.clone(), refs);
            sort_keeping_last(&mut s.samples, |sample| sample.timestamp);
            sort_keeping_last(&mut s.histograms, |h| h.timestamp);
            s.exemplars.sort_by_key(|e| e.timestamp);
        }
        Translated {
            series,
            metadata: self.metadata.into_values().collect(),
            dropped: self.dropped,
        }
    }
}

/// The labels of one data point other than `__name__` and `le` or `quantile` (sorted by
/// name, unique), and where each is stored once a new series has needed it: the series of
/// one point share them.
struct PointLabels<'a> {
    pairs: Vec<(&'a str, &'a str)>,
    stored: Vec<Option<LabelRef>>,
    /// [`pair_hash`] of each label, and their wrapping sum.
    hashes: Vec<u64>,
    hash_sum: u64,
}

impl<'a> PointLabels<'a> {
    fn new(pairs: Vec<(&'a str, &'a str)>) -> Self {
        let hashes: Vec<u64> = pairs.iter().map(|&(n, v)| pair_hash(n, v)).collect();
        Self {
            stored: vec![None; pairs.len()],
            hash_sum: hashes.iter().fold(0, |sum, h| sum.wrapping_add(*h)),
            hashes,
            pairs,
        }
    }

    /// The most the label strings of a point with `series` series named at most
    /// `name_bytes` long can take in the buffer: its own labels once, and per series its
    /// `__name__` and `le` or `quantile` (a formatted float is at most 24 bytes).
    fn bound(&self, series: usize, name_bytes: usize) -> usize {
        let own: usize = self.pairs.iter().map(|(n, v)| n.len() + v.len()).sum();
        own.saturating_add(series.saturating_mul(name_bytes + "__name__quantile".len() + 32))
    }
}

/// Which side of a [`LabelSet`] a label comes from.
#[derive(Clone, Copy)]
enum Side {
    Base(usize),
    Extra(usize),
}

/// The labels of one series, borrowed: `base` (sorted by name, unique) with `extra` (sorted
/// by name, unique) merged in, an extra label replacing the base label of the same name.
/// The series of one data point share their base labels and differ in `__name__` and
/// `le` or `quantile`, so a series is looked up without copying a string.
#[derive(Clone, Copy)]
struct LabelSet<'a> {
    base: &'a [(&'a str, &'a str)],
    extra: &'a [(&'a str, &'a str)],
}

impl<'a> LabelSet<'a> {
    fn new(base: &'a [(&'a str, &'a str)], extra: &'a [(&'a str, &'a str)]) -> Self {
        debug_assert!(extra.windows(2).all(|pair| pair[0].0 < pair[1].0));
        Self { base, extra }
    }

    /// The labels in name order.
    fn iter(self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.sides().map(move |side| match side {
            Side::Base(i) => self.base[i],
            Side::Extra(j) => self.extra[j],
        })
    }

    /// Where each label of [`LabelSet::iter`] comes from, in the same order.
    fn sides(self) -> MergedSides<'a> {
        MergedSides {
            set: self,
            base: 0,
            extra: 0,
        }
    }
}

/// The iterator of [`LabelSet::sides`].
struct MergedSides<'a> {
    set: LabelSet<'a>,
    base: usize,
    extra: usize,
}

impl Iterator for MergedSides<'_> {
    type Item = Side;

    fn next(&mut self) -> Option<Side> {
        let order = match (self.set.base.get(self.base), self.set.extra.get(self.extra)) {
            (None, None) => return None,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((name, _)), Some((extra, _))) => name.cmp(extra),
        };
        if order == Ordering::Less {
            self.base += 1;
            return Some(Side::Base(self.base - 1));
        }
        if order == Ordering::Equal {
            self.base += 1;
        }
        self.extra += 1;
        Some(Side::Extra(self.extra - 1))
    }
}

/// What every series of one resource shares.
struct ResourceContext {
    job: Option<String>,
    instance: Option<String>,
    /// All resource attributes as labels (for `resource_to_telemetry_conversion`).
    promoted: BTreeMap<String, String>,
}

fn translate_resource<'b>(
    rm: &'b ResourceMetrics,
    options: &Options,
    out: &mut Builder,
    scratch: &mut Scratch<'b>,
) {
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
            owned_attribute_labels(attributes, scratch)
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
            if let Some(ms) = scope.metric(metric, out, scratch) {
                latest_ms = Some(latest_ms.map_or(ms, |l| l.max(ms)));
            }
        }
    }

    if options.target_info
        && let Some(timestamp) = latest_ms
        && (ctx.job.is_some() || ctx.instance.is_some())
    {
        let others = attributes.iter().filter(|kv| {
            !matches!(
                kv.key.as_str(),
                "service.name" | "service.namespace" | "service.instance.id"
            )
        });
        let mut labels = owned_attribute_labels(others, scratch);
        if !labels.is_empty() {
            set_identity(&mut labels, &ctx);
            add_absent(&mut labels, &options.external_labels);
            let name = if options.namespace.is_empty() {
                "target_info".to_owned()
            } else {
                format!("{}_target_info", clean_namespace(&options.namespace))
            };
            labels.insert("__name__".to_owned(), name.clone());
            let mut labels = PointLabels::new(
                labels
                    .iter()
                    .map(|(name, value)| (name.as_str(), value.as_str()))
                    .collect(),
            );
            if !out.has_room(labels.bound(1, 0)) {
                return;
            }
            if options.send_metadata {
                out.metadata.entry(name.clone()).or_insert(MetricMetadata {
                    r#type: MetricType::Gauge as i32,
                    metric_family_name: name,
                    help: "Target metadata".to_owned(),
                    unit: String::new(),
                });
            }
            out.sample(
                &mut labels,
                &[],
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
    fn metric<'b>(
        &self,
        metric: &'b Metric,
        out: &mut Builder,
        scratch: &mut Scratch<'b>,
    ) -> Option<i64> {
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
                    if let Some(ms) = self.number(&name, p, false, out, scratch) {
                        seen(ms);
                    }
                }
            }
            Data::Sum(s) => {
                for p in &s.data_points {
                    if let Some(ms) = self.number(&name, p, s.is_monotonic, out, scratch) {
                        seen(ms);
                    }
                }
            }
            Data::Histogram(h) => {
                let names = FamilyNames::new(&name);
                let mut bounds = BoundLabels::default();
                for p in &h.data_points {
                    if let Some(ms) = self.histogram(&names, &mut bounds, p, out, scratch) {
                        seen(ms);
                    }
                }
            }
            Data::ExponentialHistogram(h) => {
                for p in &h.data_points {
                    if let Some(ms) = self.exponential(&name, p, out, scratch) {
                        seen(ms);
                    }
                }
            }
            Data::Summary(s) => {
                let names = FamilyNames::new(&name);
                for p in &s.data_points {
                    if let Some(ms) = self.summary(&names, p, out, scratch) {
                        seen(ms);
                    }
                }
            }
        }
        latest
    }

    /// The labels of one data point, without `__name__`, sorted by name: its attributes',
    /// over the promoted resource attributes; `job` and `instance` over both; external
    /// labels where none of these is; the scope's over all.
    fn labels<'p, 'b: 'p>(
        &'p self,
        attributes: &'b [KeyValue],
        scratch: &mut Scratch<'b>,
    ) -> PointLabels<'p> {
        // (name, value, rank): of one name, the lowest rank wins.
        const SCOPE: u8 = 0;
        const IDENTITY: u8 = 1;
        const ATTRIBUTE: u8 = 2;
        const PROMOTED: u8 = 3;
        const EXTERNAL: u8 = 4;
        let mut own: Vec<(&'b str, &'b str)> = Vec::with_capacity(attributes.len());
        scratch.attribute_labels(attributes, &mut own);
        let resource = self.resource;
        let mut ranked: Vec<(&'p str, &'p str, u8)> = Vec::with_capacity(
            own.len()
                + resource.promoted.len()
                + 2
                + self.options.external_labels.len()
                + self.labels.len(),
        );
        ranked.extend(own.into_iter().map(|(n, v)| (n, v, ATTRIBUTE)));
        let owned = |map: &'p BTreeMap<String, String>, rank: u8| {
            map.iter().map(move |(n, v)| (n.as_str(), v.as_str(), rank))
        };
        ranked.extend(owned(&resource.promoted, PROMOTED));
        if let Some(job) = &resource.job {
            ranked.push(("job", job, IDENTITY));
        }
        if let Some(instance) = &resource.instance {
            ranked.push(("instance", instance, IDENTITY));
        }
        ranked.extend(owned(&self.options.external_labels, EXTERNAL));
        ranked.extend(owned(&self.labels, SCOPE));
        ranked.sort_unstable_by(|a, b| a.0.cmp(b.0).then(a.2.cmp(&b.2)));
        ranked.dedup_by(|later, earlier| later.0 == earlier.0);
        PointLabels::new(ranked.into_iter().map(|(n, v, _)| (n, v)).collect())
    }

    fn number<'b>(
        &self,
        name: &str,
        p: &'b NumberDataPoint,
        exemplars: bool,
        out: &mut Builder,
        scratch: &mut Scratch<'b>,
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
        let mut base = self.labels(&p.attributes, scratch);
        if !out.has_room(base.bound(1, name.len())) {
            out.drop_points(DropReason::Invalid, 1);
            return None;
        }
        let entry = out.entry(&mut base, &[("__name__", name)]);
        entry.samples.push(Sample { value, timestamp });
        entry.points += 1;
        if exemplars {
            entry
                .exemplars
                .extend(p.exemplars.iter().map(convert_exemplar));
        }
        Some(timestamp)
    }

    fn histogram<'b>(
        &self,
        names: &FamilyNames,
        bounds: &mut BoundLabels,
        p: &'b HistogramDataPoint,
        out: &mut Builder,
        scratch: &mut Scratch<'b>,
    ) -> Option<i64> {
        let timestamp = millis(p.time_unix_nano);
        let stale = p.flags & FLAG_NO_RECORDED_VALUE != 0;
        let value = |v: f64| if stale { stale_nan() } else { v };
        let mut base = self.labels(&p.attributes, scratch);
        if !out.has_room(base.bound(p.explicit_bounds.len() + 3, names.longest())) {
            out.drop_points(DropReason::Invalid, 1);
            return None;
        }
        // The data point is accounted for by its `_count` series.
        out.sample(
            &mut base,
            &[("__name__", &names.count)],
            Sample {
                value: value(p.count as f64),
                timestamp,
            },
            1,
        );
        if let Some(sum) = p.sum {
            out.sample(
                &mut base,
                &[("__name__", &names.sum)],
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
        for (i, (bound, le)) in p
            .explicit_bounds
            .iter()
            .zip(bounds.formatted(&p.explicit_bounds))
            .enumerate()
        {
            // Fewer counts than bounds + 1 is malformed; missing counts read as 0.
            cumulative = cumulative.saturating_add(p.bucket_counts.get(i).copied().unwrap_or(0));
            let entry = out.entry(&mut base, &[("__name__", &names.bucket), ("le", le)]);
            entry.samples.push(Sample {
                value: value(cumulative as f64),
                timestamp,
            });
            if !exemplars.is_empty() {
                let (mine, rest): (Vec<_>, Vec<_>) =
                    exemplars.into_iter().partition(|(v, _)| v <= bound);
                entry.exemplars.extend(mine.into_iter().map(|(_, e)| e));
                exemplars = rest;
            }
        }
        let entry = out.entry(&mut base, &[("__name__", &names.bucket), ("le", "+Inf")]);
        entry.samples.push(Sample {
            value: value(p.count as f64),
            timestamp,
        });
        entry
            .exemplars
            .extend(exemplars.into_iter().map(|(_, e)| e));
        Some(timestamp)
    }

    fn summary<'b>(
        &self,
        names: &FamilyNames,
        p: &'b SummaryDataPoint,
        out: &mut Builder,
        scratch: &mut Scratch<'b>,
    ) -> Option<i64> {
        let timestamp = millis(p.time_unix_nano);
        let stale = p.flags & FLAG_NO_RECORDED_VALUE != 0;
        let value = |v: f64| if stale { stale_nan() } else { v };
        let mut base = self.labels(&p.attributes, scratch);
        if !out.has_room(base.bound(p.quantile_values.len() + 2, names.longest())) {
            out.drop_points(DropReason::Invalid, 1);
            return None;
        }
        out.sample(
            &mut base,
            &[("__name__", &names.count)],
            Sample {
                value: value(p.count as f64),
                timestamp,
            },
            1,
        );
        out.sample(
            &mut base,
            &[("__name__", &names.sum)],
            Sample {
                value: value(p.sum),
                timestamp,
            },
            0,
        );
        for q in &p.quantile_values {
            out.sample(
                &mut base,
                &[
                    ("__name__", &names.family),
                    ("quantile", &format_float(q.quantile)),
                ],
                Sample {
                    value: value(q.value),
                    timestamp,
                },
                0,
            );
        }
        Some(timestamp)
    }

    fn exponential<'b>(
        &self,
        name: &str,
        p: &'b ExponentialHistogramDataPoint,
        out: &mut Builder,
        scratch: &mut Scratch<'b>,
    ) -> Option<i64> {
        let Some(histogram) = native_histogram(p) else {
            out.drop_points(DropReason::Invalid, 1);
            return None;
        };
        let timestamp = histogram.timestamp;
        let mut base = self.labels(&p.attributes, scratch);
        if !out.has_room(base.bound(1, name.len())) {
            out.drop_points(DropReason::Invalid, 1);
            return None;
        }
        let entry = out.entry(&mut base, &[("__name__", name)]);
        entry.histograms.push(histogram);
        entry
            .exemplars
            .extend(p.exemplars.iter().map(convert_exemplar));
        entry.points += 1;
        Some(timestamp)
    }
}

/// The `__name__` values of a histogram's or summary's series, made once per metric.
struct FamilyNames {
    family: String,
    count: String,
    sum: String,
    bucket: String,
}

impl FamilyNames {
    fn new(family: &str) -> Self {
        Self {
            family: family.to_owned(),
            count: format!("{family}_count"),
            sum: format!("{family}_sum"),
            bucket: format!("{family}_bucket"),
        }
    }

    /// The length of the longest name.
    fn longest(&self) -> usize {
        self.bucket.len().max(self.count.len())
    }
}

/// The `le` values of the last explicit bounds formatted: the points of one histogram
/// metric almost always share their bounds, so they are formatted once per metric.
#[derive(Default)]
struct BoundLabels {
    bounds: Vec<f64>,
    formatted: Vec<String>,
}

impl BoundLabels {
    /// `bounds` formatted as `le` values.
    fn formatted(&mut self, bounds: &[f64]) -> &[String] {
        let same = self.bounds.len() == bounds.len()
            && self
                .bounds
                .iter()
                .zip(bounds)
                .all(|(a, b)| a.to_bits() == b.to_bits());
        if !same {
            self.bounds = bounds.to_vec();
            self.formatted = bounds.iter().map(|b| format_float(*b)).collect();
        }
        &self.formatted
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

/// [`Scratch::attribute_labels`] as owned strings, for the labels made once per resource.
fn owned_attribute_labels<'b>(
    attributes: impl IntoIterator<Item = &'b KeyValue>,
    scratch: &mut Scratch<'b>,
) -> BTreeMap<String, String> {
    let mut labels = Vec::new();
    scratch.attribute_labels(attributes, &mut labels);
    labels
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
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
