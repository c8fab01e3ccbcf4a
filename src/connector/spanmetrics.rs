//! The `spanmetrics` connector: RED metrics from every span (DESIGN.md, decision 6).
//!
//! It sits at the end of the traces pipelines that list it as an exporter, before any tail
//! sampling, so its counts are exact whatever is sampled later. For each span it reads, from
//! the wire bytes, the name, kind, times and status code
//! ([`crate::otlp::parse_validated_traces_request`], the receiver having validated them)
//! and the dimension attributes ([`crate::otlp::attributes::find_attribute`], span first,
//! then resource, then the dimension's default), and adds one call and one duration to its
//! series. Spans whose resource has no `service.name` are skipped, as in the Collector.
//!
//! Every `metrics_flush_interval`, and once more when every traces pipeline feeding it has
//! drained, [`SpanMetricsFlusher`] emits one `ExportMetricsServiceRequest` into the metrics
//! pipelines that list the connector as a receiver: one `ResourceMetrics` per resource key,
//! each with
//!
//! - `<namespace>.calls`: a monotonic cumulative Sum; errors are the points with
//!   `status.code=STATUS_CODE_ERROR`;
//! - `<namespace>.duration`: a cumulative explicit-bucket Histogram in `ms` (or `s`), with
//!   exemplars when enabled;
//!
//! with attributes `service.name`, `span.name`, `span.kind`, `status.code` (less
//! `exclude_dimensions`) and the configured dimensions. The resource carries the first seen
//! resource's attributes plus `collector.instance.id`, so replicas do not collide.
//!
//! Memory is bounded by `aggregation_cardinality_limit`: once that many series are held, a
//! span of a new series is counted in its resource's overflow series (attribute
//! `otel.metric.overflow=true`) and in `tailgate_spanmetrics_overflow_total`. New resources
//! beyond the limit share one overflow resource.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Exemplar, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, exemplar, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use prost::Message;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};

use super::metrics::SpanMetricsMetrics;
use crate::config::{ComponentId, HistogramUnit, SpanMetricsConfig};
use crate::hashed_positions::HashedPositions;
use crate::limiter::MemoryBudget;
use crate::otlp::ResourceSpansView;
use crate::otlp::attributes::{AnyValueRef, RESOURCE_ATTRIBUTES, SPAN_ATTRIBUTES, find_attribute};
use crate::payload::{BoxFuture, Consumer, MetricsBatch, MetricsSink, TraceBatch};

/// The instrumentation scope of the emitted metrics, as the Collector names it.
const SCOPE_NAME: &str = "spanmetricsconnector";

/// Exemplars kept per series between two flushes.
const MAX_EXEMPLARS: usize = 5;

/// An attribute value that can key a series.
#[derive(Clone, Debug, PartialEq)]
enum DimValue {
    Str(String),
    Int(i64),
    Bool(bool),
    Double(f64),
}

impl Eq for DimValue {}

impl Hash for DimValue {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        match self {
            Self::Str(s) => s.hash(state),
            Self::Int(i) => i.hash(state),
            Self::Bool(b) => b.hash(state),
            Self::Double(d) => d.to_bits().hash(state),
        }
    }
}

/// A [`DimValue`] borrowed from a request (or from the config, for a default).
#[derive(Clone, Copy, Debug)]
enum DimRef<'a> {
    Str(&'a str),
    Int(i64),
    Bool(bool),
    Double(f64),
}

impl<'a> DimRef<'a> {
    /// The value of an attribute; arrays, key-value lists and bytes key as their absence.
    fn from_ref(value: AnyValueRef<'a>) -> Option<Self> {
        match value {
            AnyValueRef::String(s) => Some(Self::Str(s)),
            AnyValueRef::Int(i) => Some(Self::Int(i)),
            AnyValueRef::Bool(b) => Some(Self::Bool(b)),
            AnyValueRef::Double(d) => Some(Self::Double(d)),
            _ => None,
        }
    }

    fn to_owned(self) -> DimValue {
        match self {
            Self::Str(s) => DimValue::Str(s.to_owned()),
            Self::Int(i) => DimValue::Int(i),
            Self::Bool(b) => DimValue::Bool(b),
            Self::Double(d) => DimValue::Double(d),
        }
    }

    /// Whether `owned` is this value (doubles compared by their bits, as they hash).
    fn is(self, owned: &DimValue) -> bool {
        match (self, owned) {
            (Self::Str(a), DimValue::Str(b)) => a == b,
            (Self::Int(a), DimValue::Int(b)) => a == *b,
            (Self::Bool(a), DimValue::Bool(b)) => a == *b,
            (Self::Double(a), DimValue::Double(b)) => a.to_bits() == b.to_bits(),
            _ => false,
        }
    }

    fn hash_into(self, state: &mut impl Hasher) {
        match self {
            Self::Str(s) => {
                state.write_u8(0);
                s.hash(state);
            }
            Self::Int(i) => {
                state.write_u8(1);
                i.hash(state);
            }
            Self::Bool(b) => {
                state.write_u8(2);
                b.hash(state);
            }
            Self::Double(d) => {
                state.write_u8(3);
                d.to_bits().hash(state);
            }
        }
    }
}

impl DimValue {
    /// The value of an attribute; arrays, key-value lists and bytes key as their absence.
    fn from_ref(value: AnyValueRef<'_>) -> Option<Self> {
        DimRef::from_ref(value).map(DimRef::to_owned)
    }

    fn to_any(&self) -> AnyValue {
        let value = match self {
            Self::Str(s) => any_value::Value::StringValue(s.clone()),
            Self::Int(i) => any_value::Value::IntValue(*i),
            Self::Bool(b) => any_value::Value::BoolValue(*b),
            Self::Double(d) => any_value::Value::DoubleValue(*d),
        };
        AnyValue { value: Some(value) }
    }
}

/// How a resource's series are grouped into one `ResourceMetrics`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum ResourceKey {
    /// Every attribute: the resource's encoded bytes.
    Whole(Bytes),
    /// `service.name` and the `resource_metrics_key_attributes`, in order.
    Attributes(Vec<Option<DimValue>>),
    /// New resources beyond the cardinality limit.
    Overflow,
}

/// What tells one series of a resource from another.
#[derive(Clone, Debug)]
struct SeriesKey {
    span_name: String,
    kind: i32,
    status: i32,
    dimensions: Vec<Option<DimValue>>,
}

/// A [`SeriesKey`] borrowed from a span: what a span's series is looked up by, so that a
/// span of a series already held copies nothing.
struct SeriesProbe<'a> {
    span_name: &'a str,
    kind: i32,
    status: i32,
    dimensions: &'a [Option<DimRef<'a>>],
}

impl SeriesProbe<'_> {
    /// The hash a series is found by (fixed for the process's life).
    fn hash(&self) -> u64 {
        let mut state = foldhash::fast::FixedState::default().build_hasher();
        self.span_name.hash(&mut state);
        state.write_i32(self.kind);
        state.write_i32(self.status);
        for dimension in self.dimensions {
            match dimension {
                Some(value) => value.hash_into(&mut state),
                None => state.write_u8(0xff),
            }
        }
        state.finish()
    }

    fn matches(&self, key: &SeriesKey) -> bool {
        key.span_name == self.span_name
            && key.kind == self.kind
            && key.status == self.status
            && key.dimensions.len() == self.dimensions.len()
            && key
                .dimensions
                .iter()
                .zip(self.dimensions)
                .all(|(owned, probe)| match (owned, probe) {
                    (Some(owned), Some(probe)) => probe.is(owned),
                    (None, None) => true,
                    _ => false,
                })
    }

    fn to_key(&self) -> SeriesKey {
        SeriesKey {
            span_name: self.span_name.to_owned(),
            kind: self.kind,
            status: self.status,
            dimensions: self
                .dimensions
                .iter()
                .map(|value| value.map(DimRef::to_owned))
                .collect(),
        }
    }
}

/// The series of one resource, found by the [`SeriesProbe::hash`] of their key, in the
/// order they were first seen.
#[derive(Default)]
struct SeriesTable {
    positions: HashedPositions,
    entries: Vec<(SeriesKey, Series)>,
}

impl SeriesTable {
    fn len(&self) -> usize {
        self.entries.len()
    }

    /// The position of the series `probe` (whose hash is `hash`) names, if held.
    fn find(&self, hash: u64, probe: &SeriesProbe<'_>) -> Option<usize> {
        self.positions
            .find(hash, |position| probe.matches(&self.entries[position].0))
    }

    /// Adds a series not held yet; returns its position.
    fn insert(&mut self, hash: u64, key: SeriesKey, series: Series) -> usize {
        let position = self.positions.push(hash);
        self.entries.push((key, series));
        position
    }

    fn series_mut(&mut self, position: usize) -> &mut Series {
        &mut self.entries[position].1
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = (&SeriesKey, &mut Series)> {
        self.entries.iter_mut().map(|(key, series)| (&*key, series))
    }
}

/// One series' cumulative state.
#[derive(Clone, Debug)]
struct Series {
    start_time_unix_nano: u64,
    calls: u64,
    bucket_counts: Vec<u64>,
    sum: f64,
    exemplars: Vec<Exemplar>,
}

impl Series {
    fn new(now: u64, buckets: usize) -> Self {
        Self {
            start_time_unix_nano: now,
            calls: 0,
            bucket_counts: vec![0; buckets],
            sum: 0.0,
            exemplars: Vec::new(),
        }
    }
}

struct ResourceEntry {
    service_name: String,
    attributes: Vec<KeyValue>,
    series: SeriesTable,
    overflow: Option<Series>,
}

/// The aggregation state: every series of every resource.
pub(crate) struct Aggregator {
    config: SpanMetricsConfig,
    /// Bucket bounds in the histogram unit.
    bounds: Vec<f64>,
    /// Nanoseconds per histogram unit.
    unit_nanos: f64,
    instance_id: String,
    resources: HashMap<ResourceKey, ResourceEntry>,
    series_count: usize,
    metrics: SpanMetricsMetrics,
    /// The estimated bytes of `resources`, held against the memory budget.
    state: StateCharge,
}

/// The span-metrics state's share of the memory budget: series are cumulative and never
/// removed (the cardinality limit bounds them), so the charge only grows, and is returned
/// when the aggregator is dropped.
#[derive(Default)]
struct StateCharge {
    budget: Option<Arc<MemoryBudget>>,
    bytes: usize,
}

impl StateCharge {
    fn add(&mut self, bytes: usize) {
        if let Some(budget) = &self.budget {
            budget.charge(bytes);
            self.bytes += bytes;
        }
    }
}

impl Drop for StateCharge {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            budget.release(self.bytes);
        }
    }
}

/// The estimated heap bytes of one series: its key (name and dimension values), its
/// state (bucket counts, and room for the exemplars it keeps) and the hash map's slot.
fn series_bytes(key: &SeriesKey, buckets: usize, exemplars: bool) -> usize {
    let dimensions: usize = key
        .dimensions
        .iter()
        .map(|value| {
            std::mem::size_of::<Option<DimValue>>()
                + match value {
                    Some(DimValue::Str(text)) => text.len(),
                    _ => 0,
                }
        })
        .sum();
    let exemplar_room = if exemplars {
        MAX_EXEMPLARS * (std::mem::size_of::<Exemplar>() + 16 + 8)
    } else {
        0
    };
    std::mem::size_of::<SeriesKey>()
        + std::mem::size_of::<Series>()
        + key.span_name.len()
        + dimensions
        + buckets * std::mem::size_of::<u64>()
        + exemplar_room
        + 16
}

fn now_unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A string attribute.
pub(super) fn string_kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
        key_strindex: 0,
    }
}

impl Aggregator {
    pub(crate) fn new(config: SpanMetricsConfig, metrics: SpanMetricsMetrics) -> Self {
        let unit_nanos = match config.histogram_unit {
            HistogramUnit::Milliseconds => 1e6,
            HistogramUnit::Seconds => 1e9,
        };
        let bounds = config
            .histogram_buckets
            .iter()
            .map(|bound| bound.as_nanos() as f64 / unit_nanos)
            .collect();
        let instance_id = format!("{:032x}", rand::random::<u128>());
        Self {
            config,
            bounds,
            unit_nanos,
            instance_id,
            resources: HashMap::new(),
            series_count: 0,
            metrics,
            state: StateCharge::default(),
        }
    }

    /// The same aggregator, charging the estimated size of its state to `budget`.
    pub(crate) fn charged_to(mut self, budget: Arc<MemoryBudget>) -> Self {
        self.state.budget = Some(budget);
        self
    }

    /// The bytes of state charged to the budget so far.
    #[cfg(test)]
    pub(crate) fn charged_bytes(&self) -> usize {
        self.state.bytes
    }

    fn limit(&self) -> usize {
        self.config
            .aggregation_cardinality_limit
            .map_or(usize::MAX, |limit| limit.get())
    }

    /// Adds every span of a validated request's views.
    pub(crate) fn record(&mut self, resources: &[ResourceSpansView]) {
        let now = now_unix_nanos();
        let limit = self.limit();
        let mut overflowed = 0u64;
        for resource in resources {
            let service_name =
                match find_attribute(&resource.resource, RESOURCE_ATTRIBUTES, "service.name") {
                    Some(AnyValueRef::String(name)) => name.to_owned(),
                    _ => continue,
                };
            let key = self.resource_key(&resource.resource, &service_name);
            let key = if self.resources.contains_key(&key) || self.series_count < self.limit() {
                key
            } else {
                ResourceKey::Overflow
            };
            if !self.resources.contains_key(&key) {
                let entry = self.new_resource(&key, &resource.resource, &service_name);
                let attribute_bytes: usize = entry
                    .attributes
                    .iter()
                    .map(|kv| std::mem::size_of::<KeyValue>() + kv.key.len() + 16)
                    .sum();
                self.state.add(
                    std::mem::size_of::<ResourceKey>()
                        + std::mem::size_of::<ResourceEntry>()
                        + resource.resource.len()
                        + attribute_bytes,
                );
                self.resources.insert(key.clone(), entry);
            }
            // The resource's entry is looked up once for all its spans; the fields the span
            // loop updates are borrowed apart from it.
            let Self {
                config,
                bounds,
                unit_nanos,
                resources,
                series_count,
                state,
                ..
            } = self;
            let Some(entry) = resources.get_mut(&key) else {
                continue;
            };
            // A span's dimension values, borrowed from the resource's spans or the config
            // (no allocation without dimensions).
            let mut dimensions: Vec<Option<DimRef<'_>>> =
                Vec::with_capacity(config.dimensions.len());
            for scope in &resource.scope_spans {
                for span in &scope.spans {
                    let span_name = String::from_utf8_lossy(&span.name);
                    dimensions.clear();
                    dimensions.extend(config.dimensions.iter().map(|dimension| {
                        find_attribute(&span.bytes, SPAN_ATTRIBUTES, &dimension.name)
                            .or_else(|| {
                                find_attribute(
                                    &resource.resource,
                                    RESOURCE_ATTRIBUTES,
                                    &dimension.name,
                                )
                            })
                            .and_then(DimRef::from_ref)
                            .or_else(|| dimension.default.as_deref().map(DimRef::Str))
                    }));
                    let probe = SeriesProbe {
                        span_name: &span_name,
                        kind: span.kind,
                        status: span.status_code,
                        dimensions: &dimensions,
                    };
                    let value = span
                        .end_time_unix_nano
                        .saturating_sub(span.start_time_unix_nano)
                        as f64
                        / *unit_nanos;
                    let exemplar = config.exemplars_enabled.then(|| Exemplar {
                        filtered_attributes: Vec::new(),
                        time_unix_nano: span.end_time_unix_nano,
                        span_id: span.span_id.as_bytes().to_vec(),
                        trace_id: span.trace_id.as_bytes().to_vec(),
                        value: Some(exemplar::Value::AsDouble(value)),
                    });
                    let bucket = bounds.partition_point(|bound| *bound < value);
                    let buckets = bounds.len() + 1;
                    let at_limit = *series_count >= limit;
                    let hash = probe.hash();
                    let found = entry.series.find(hash, &probe);
                    let series = match found {
                        Some(position) => entry.series.series_mut(position),
                        None if !at_limit && key != ResourceKey::Overflow => {
                            let series_key = probe.to_key();
                            *series_count += 1;
                            state.add(series_bytes(&series_key, buckets, config.exemplars_enabled));
                            let position =
                                entry
                                    .series
                                    .insert(hash, series_key, Series::new(now, buckets));
                            entry.series.series_mut(position)
                        }
                        None => {
                            overflowed += 1;
                            entry
                                .overflow
                                .get_or_insert_with(|| Series::new(now, buckets))
                        }
                    };
                    series.calls += 1;
                    series.sum += value;
                    if let Some(count) = series.bucket_counts.get_mut(bucket) {
                        *count += 1;
                    }
                    if let Some(exemplar) = exemplar {
                        if series.exemplars.len() >= MAX_EXEMPLARS {
                            series.exemplars.remove(0);
                        }
                        series.exemplars.push(exemplar);
                    }
                }
            }
        }
        if overflowed > 0 {
            self.metrics.record_overflow(overflowed);
        }
    }

    fn resource_key(&self, resource: &Bytes, service_name: &str) -> ResourceKey {
        if self.config.resource_metrics_key_attributes.is_empty() {
            return ResourceKey::Whole(resource.clone());
        }
        let mut values = Vec::with_capacity(1 + self.config.resource_metrics_key_attributes.len());
        values.push(Some(DimValue::Str(service_name.to_owned())));
        for name in &self.config.resource_metrics_key_attributes {
            values.push(
                find_attribute(resource, RESOURCE_ATTRIBUTES, name).and_then(DimValue::from_ref),
            );
        }
        ResourceKey::Attributes(values)
    }

    fn new_resource(
        &self,
        key: &ResourceKey,
        resource: &Bytes,
        service_name: &str,
    ) -> ResourceEntry {
        let mut attributes = if *key == ResourceKey::Overflow {
            Vec::new()
        } else {
            Resource::decode(resource.clone())
                .map(|r| r.attributes)
                .unwrap_or_default()
        };
        attributes.push(string_kv("collector.instance.id", &self.instance_id));
        ResourceEntry {
            service_name: if *key == ResourceKey::Overflow {
                String::new()
            } else {
                service_name.to_owned()
            },
            attributes,
            series: SeriesTable::default(),
            overflow: None,
        }
    }

    fn name(&self, metric: &str) -> String {
        if self.config.namespace.is_empty() {
            metric.to_owned()
        } else {
            format!("{}.{metric}", self.config.namespace)
        }
    }

    fn wants(&self, dimension: &str) -> bool {
        !self
            .config
            .exclude_dimensions
            .iter()
            .any(|d| d == dimension)
    }

    /// The cumulative state of every series as one request and its data point count, or
    /// `None` when nothing has been recorded yet. Exemplars are emitted once and cleared.
    pub(crate) fn snapshot(&mut self, now: u64) -> Option<(ExportMetricsServiceRequest, usize)> {
        let mut points = 0;
        let mut resource_metrics = Vec::with_capacity(self.resources.len());
        let calls_name = self.name("calls");
        let duration_name = self.name("duration");
        let unit = match self.config.histogram_unit {
            HistogramUnit::Milliseconds => "ms",
            HistogramUnit::Seconds => "s",
        };
        let dimension_names: Vec<String> = self
            .config
            .dimensions
            .iter()
            .map(|d| d.name.clone())
            .collect();
        let wants = [
            self.wants("service.name"),
            self.wants("span.name"),
            self.wants("span.kind"),
            self.wants("status.code"),
        ];
        let histogram = !self.config.histogram_disabled;
        let bounds = self.bounds.clone();
        for entry in self.resources.values_mut() {
            let mut sums = Vec::with_capacity(entry.series.len() + 1);
            let mut histograms = Vec::with_capacity(entry.series.len() + 1);
            let mut emit = |attributes: Vec<KeyValue>, series: &mut Series| {
                sums.push(NumberDataPoint {
                    attributes: attributes.clone(),
                    start_time_unix_nano: series.start_time_unix_nano,
                    time_unix_nano: now,
                    exemplars: Vec::new(),
                    flags: 0,
                    value: Some(number_data_point::Value::AsInt(
                        i64::try_from(series.calls).unwrap_or(i64::MAX),
                    )),
                });
                let exemplars = std::mem::take(&mut series.exemplars);
                if histogram {
                    histograms.push(HistogramDataPoint {
                        attributes,
                        start_time_unix_nano: series.start_time_unix_nano,
                        time_unix_nano: now,
                        count: series.calls,
                        sum: Some(series.sum),
                        bucket_counts: series.bucket_counts.clone(),
                        explicit_bounds: bounds.clone(),
                        exemplars,
                        flags: 0,
                        min: None,
                        max: None,
                    });
                }
            };
            for (key, series) in entry.series.iter_mut() {
                let mut attributes = Vec::with_capacity(4 + key.dimensions.len());
                if wants[0] {
                    attributes.push(string_kv("service.name", &entry.service_name));
                }
                if wants[1] {
                    attributes.push(string_kv("span.name", &key.span_name));
                }
                if wants[2] {
                    let kind = SpanKind::try_from(key.kind)
                        .map_or("SPAN_KIND_UNSPECIFIED", |kind| kind.as_str_name());
                    attributes.push(string_kv("span.kind", kind));
                }
                if wants[3] {
                    let status = StatusCode::try_from(key.status)
                        .map_or("STATUS_CODE_UNSET", |code| code.as_str_name());
                    attributes.push(string_kv("status.code", status));
                }
                for (name, value) in dimension_names.iter().zip(&key.dimensions) {
                    if let Some(value) = value {
                        attributes.push(KeyValue {
                            key: name.clone(),
                            value: Some(value.to_any()),
                            key_strindex: 0,
                        });
                    }
                }
                emit(attributes, series);
            }
            if let Some(series) = entry.overflow.as_mut() {
                let attributes = vec![KeyValue {
                    key: "otel.metric.overflow".to_owned(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::BoolValue(true)),
                    }),
                    key_strindex: 0,
                }];
                emit(attributes, series);
            }
            if sums.is_empty() {
                continue;
            }
            points += sums.len() + histograms.len();
            let mut metrics = vec![Metric {
                name: calls_name.clone(),
                description: String::new(),
                unit: String::new(),
                metadata: Vec::new(),
                data: Some(metric::Data::Sum(Sum {
                    data_points: sums,
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                    is_monotonic: true,
                })),
            }];
            if histogram {
                metrics.push(Metric {
                    name: duration_name.clone(),
                    description: String::new(),
                    unit: unit.to_owned(),
                    metadata: Vec::new(),
                    data: Some(metric::Data::Histogram(Histogram {
                        data_points: histograms,
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                    })),
                });
            }
            resource_metrics.push(ResourceMetrics {
                resource: Some(Resource {
                    attributes: entry.attributes.clone(),
                    dropped_attributes_count: 0,
                    entity_refs: Vec::new(),
                }),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: SCOPE_NAME.to_owned(),
                        version: crate::telemetry::VERSION.to_owned(),
                        attributes: Vec::new(),
                        dropped_attributes_count: 0,
                    }),
                    metrics,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            });
        }
        self.metrics.set_series(self.series_count);
        if resource_metrics.is_empty() {
            return None;
        }
        Some((ExportMetricsServiceRequest { resource_metrics }, points))
    }
}

/// The handle traces pipelines export to; cheap to share. When every handle is dropped
/// (the traces pipelines feeding the connector have drained), the flusher emits a last
/// time and ends.
pub struct SpanMetricsConnector {
    state: Arc<Mutex<Aggregator>>,
    _alive: mpsc::Sender<()>,
}

impl Consumer<TraceBatch> for SpanMetricsConnector {
    fn consume(&self, batch: TraceBatch) -> BoxFuture<'_, ()> {
        // Read before the lock, when the batch carries no views.
        let resources = match batch.views() {
            Ok(resources) => resources,
            Err(error) => {
                // The receiver validated these bytes: a failure here is a bug, not the
                // client's.
                tracing::error!(event = "spanmetrics.unparsable_batch", error = %error);
                return Box::pin(std::future::ready(()));
            }
        };
        // A std mutex: held for one batch's aggregation, never across an await.
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.record(&resources);
        drop(state);
        Box::pin(std::future::ready(()))
    }

    /// Span metrics read the receiver's views rather than walking the request.
    fn reads_views(&self) -> bool {
        true
    }
}

/// Emits the connector's metrics into its metrics pipelines; run it as a task.
pub struct SpanMetricsFlusher {
    id: ComponentId,
    state: Arc<Mutex<Aggregator>>,
    interval: Duration,
    sink: MetricsSink,
    upstream_closed: mpsc::Receiver<()>,
}

impl SpanMetricsFlusher {
    /// Starts connector `id`: the handle for the traces pipelines, and the flusher feeding
    /// `sink` (the inputs of the metrics pipelines that list the connector as a receiver).
    /// The aggregation state is charged to `budget` as it grows.
    pub fn start(
        id: &ComponentId,
        config: &SpanMetricsConfig,
        metrics: SpanMetricsMetrics,
        sink: MetricsSink,
        budget: Arc<MemoryBudget>,
    ) -> (SpanMetricsConnector, Self) {
        let state = Arc::new(Mutex::new(
            Aggregator::new(config.clone(), metrics).charged_to(budget),
        ));
        let (alive, upstream_closed) = mpsc::channel(1);
        (
            SpanMetricsConnector {
                state: state.clone(),
                _alive: alive,
            },
            Self {
                id: id.clone(),
                state,
                interval: config.metrics_flush_interval,
                sink,
                upstream_closed,
            },
        )
    }

    /// Flushes every interval until the traces pipelines feeding the connector have
    /// drained, then flushes once more and returns (dropping its entry into the metrics
    /// pipelines, which may then drain).
    pub async fn run(mut self) {
        let mut ticker = tokio::time::interval_at(Instant::now() + self.interval, self.interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => self.flush().await,
                closed = self.upstream_closed.recv() => {
                    if closed.is_none() {
                        break;
                    }
                }
            }
        }
        self.flush().await;
        tracing::debug!(event = "spanmetrics.stopped", connector = %self.id);
    }

    async fn flush(&self) {
        let snapshot = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            state.snapshot(now_unix_nanos())
        };
        let Some((request, points)) = snapshot else {
            return;
        };
        let batch = MetricsBatch::new(Bytes::from(request.encode_to_vec()), points);
        if let Err(error) = self.sink.deliver(batch).await {
            // Counted as lost by the sink.
            tracing::warn!(
                event = "connector.undelivered",
                connector = %self.id,
                items = points,
                error = %error,
            );
        }
    }
}
