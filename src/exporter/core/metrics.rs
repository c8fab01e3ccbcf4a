//! Exporter self-metrics.
//!
//! Names follow what the Collector exposes through Prometheus (`otelcol_exporter_*`, counters
//! with `_total`; spans and metric points in parallel families, queue gauges with a
//! `data_type` label), so existing dashboards and alerts keep working; tailgate's own additions
//! are prefixed `tailgate_exporter_`. Every label comes from a closed set: `exporter` is the
//! component id as written in the config, `reason` is a [`FailureReason`], `error_type` a
//! [`RetryErrorType`].
//!
//! The families are registered once per registry ([`ExporterMetricFamilies::register`]); each
//! exporter gets label-bound handles from [`ExporterMetricFamilies::for_exporter`], so the hot
//! path never looks a label up.
//!
//! Queue depth is observed at scrape time, not pushed per item: the queue registers a reader
//! that holds only a weak reference to its channel (see [`QueueObserver`]).

use std::sync::{Arc, Mutex};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

use crate::config::ComponentId;
use crate::telemetry::{counter_vec, gauge_vec};

/// Metric names and help texts, in one place.
mod desc {
    /// The Collector's families kept once per item kind, as (verb, labels, help after the
    /// noun): `otelcol_exporter_{verb}_{item}_total` with help "Number of {noun} {help}",
    /// item and noun being `spans` and "spans", or `metric_points` and "metric points".
    pub const ITEM_FAMILIES: [(&str, &[&str], &str); 3] = [
        ("sent", &["exporter"], "successfully sent to destination."),
        (
            "send_failed",
            &["exporter", "reason"],
            "in failed attempts to send to destination, by reason (permanent, \
             retries_exhausted, partial_success, shutdown).",
        ),
        (
            "enqueue_failed",
            &["exporter"],
            "failed to be added to the sending queue (the exporter was shut down).",
        ),
    ];
    pub const QUEUE_SIZE: (&str, &str) = (
        "otelcol_exporter_queue_size",
        "Current size of the retry queue (in batches), by data_type (traces, metrics).",
    );
    pub const QUEUE_CAPACITY: (&str, &str) = (
        "otelcol_exporter_queue_capacity",
        "Fixed capacity of the retry queue (in batches), by data_type (traces, metrics).",
    );
    pub const IN_FLIGHT: (&str, &str) = (
        "otelcol_exporter_in_flight_requests",
        "Number of export requests currently in flight (attempts, not batches).",
    );
    pub const DROPPED_SPANS: (&str, &str) = (
        "tailgate_spans_dropped_total",
        "Spans lost after they were accepted, by reason: permanent, retries_exhausted, \
         partial_success and shutdown from exporters, pending_on_shutdown from the tail \
         sampler. Every loss is counted here once; not-sampled spans are not losses.",
    );
    pub const DROPPED_POINTS: (&str, &str) = (
        "tailgate_metric_points_dropped_total",
        "Metric data points lost after they were accepted, by reason (as for spans).",
    );
    pub const QUEUE_REPLAYED: (&str, &str) = (
        "tailgate_exporter_queue_replayed_items_total",
        "Items (spans or metric points, by data_type) found undelivered in a persistent \
         sending queue at startup, left by an earlier run, and queued for delivery first.",
    );
    pub const QUEUE_PERSISTED: (&str, &str) = (
        "tailgate_exporter_queue_persisted_items_total",
        "Items (spans or metric points, by data_type) written to a persistent sending queue.",
    );
    pub const QUEUE_CORRUPT: (&str, &str) = (
        "tailgate_exporter_queue_corrupt_records_total",
        "Damaged records (bad checksum, bad length, torn write) found in a persistent \
         sending queue and skipped; their items cannot be counted.",
    );
    pub const QUEUE_DISK_BYTES: (&str, &str) = (
        "tailgate_exporter_queue_disk_bytes",
        "Bytes of segment files held by a persistent sending queue.",
    );
    pub const QUEUE_DISK_LIMIT: (&str, &str) = (
        "tailgate_exporter_queue_disk_limit_bytes",
        "The most bytes a persistent sending queue may hold on disk (its file_storage \
         max_size_mib); at the limit, new batches wait and the exporter pushes back.",
    );
    pub const RETRIES: (&str, &str) = (
        "tailgate_exporter_retries_total",
        "Number of export attempts that failed with a retryable error and were retried, \
         by error type.",
    );
}

/// Why spans were not delivered: the `reason` label of
/// `otelcol_exporter_send_failed_spans_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureReason {
    /// The destination answered with an error that retrying cannot fix.
    Permanent,
    /// Retryable failures went on until `max_elapsed_time` (or retries are disabled).
    RetriesExhausted,
    /// The destination accepted the request but rejected some of its spans.
    PartialSuccess,
    /// The shutdown deadline passed before the spans could be delivered.
    Shutdown,
}

impl FailureReason {
    pub(crate) const ALL: [FailureReason; 4] = [
        FailureReason::Permanent,
        FailureReason::RetriesExhausted,
        FailureReason::PartialSuccess,
        FailureReason::Shutdown,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::Permanent => "permanent",
            FailureReason::RetriesExhausted => "retries_exhausted",
            FailureReason::PartialSuccess => "partial_success",
            FailureReason::Shutdown => "shutdown",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The kind of retryable failure: the `error_type` label of `tailgate_exporter_retries_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RetryErrorType {
    /// gRPC `UNAVAILABLE` answered by the server.
    Unavailable,
    /// gRPC `RESOURCE_EXHAUSTED` carrying `RetryInfo`.
    ResourceExhausted,
    /// gRPC `DEADLINE_EXCEEDED`, or the per-attempt `timeout` elapsed.
    DeadlineExceeded,
    /// HTTP 429.
    Http429,
    /// HTTP 5xx: 502, 503, 504 for OTLP/HTTP, any 5xx for remote write.
    Http5xx,
    /// The connection could not be made or broke.
    Transport,
    /// Any other retryable gRPC code (`CANCELLED`, `ABORTED`, `OUT_OF_RANGE`, `DATA_LOSS`).
    Other,
}

impl RetryErrorType {
    pub(crate) const ALL: [RetryErrorType; 7] = [
        RetryErrorType::Unavailable,
        RetryErrorType::ResourceExhausted,
        RetryErrorType::DeadlineExceeded,
        RetryErrorType::Http429,
        RetryErrorType::Http5xx,
        RetryErrorType::Transport,
        RetryErrorType::Other,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RetryErrorType::Unavailable => "unavailable",
            RetryErrorType::ResourceExhausted => "resource_exhausted",
            RetryErrorType::DeadlineExceeded => "deadline_exceeded",
            RetryErrorType::Http429 => "http_429",
            RetryErrorType::Http5xx => "http_5xx",
            RetryErrorType::Transport => "transport",
            RetryErrorType::Other => "other",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The item counters of one signal: spans or metric points.
#[derive(Clone, Debug)]
struct ItemFamilies {
    sent: IntCounterVec,
    send_failed: IntCounterVec,
    enqueue_failed: IntCounterVec,
    dropped: IntCounterVec,
}

impl ItemFamilies {
    /// Registers the families counting `item` (`noun` in help texts), with `dropped` the
    /// family of lost items.
    fn register(
        registry: &Registry,
        item: &str,
        noun: &str,
        dropped: (&str, &str),
    ) -> Result<Self, prometheus::Error> {
        let [sent, send_failed, enqueue_failed] =
            desc::ITEM_FAMILIES.map(|(verb, labels, help)| {
                let name = format!("otelcol_exporter_{verb}_{item}_total");
                counter_vec(
                    registry,
                    (&name, &format!("Number of {noun} {help}")),
                    labels,
                )
            });
        Ok(Self {
            sent: sent?,
            send_failed: send_failed?,
            enqueue_failed: enqueue_failed?,
            dropped: counter_vec(registry, dropped, &["reason"])?,
        })
    }
}

/// The exporter metric families, registered once per registry.
///
/// Cloning shares the families.
#[derive(Clone, Debug)]
pub struct ExporterMetricFamilies {
    spans: ItemFamilies,
    points: ItemFamilies,
    queue_capacity: IntGaugeVec,
    in_flight: IntGaugeVec,
    retries: IntCounterVec,
    queue_size: Arc<QueueSizeCollector>,
    disk: DiskQueueFamilies,
}

/// The persistent queue's families (series exist only for exporters with `storage`).
type DiskQueueFamilies = DiskQueueMetrics<IntCounterVec, IntGaugeVec>;

impl ExporterMetricFamilies {
    /// Creates the families and registers them with `registry`.
    ///
    /// # Errors
    ///
    /// Fails when a family of the same name is already registered (call this once per
    /// registry and share the result).
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let queue_size = Arc::new(QueueSizeCollector::new()?);
        let families = Self {
            spans: ItemFamilies::register(registry, "spans", "spans", desc::DROPPED_SPANS)?,
            points: ItemFamilies::register(
                registry,
                "metric_points",
                "metric points",
                desc::DROPPED_POINTS,
            )?,
            queue_capacity: gauge_vec(registry, desc::QUEUE_CAPACITY, &["exporter", "data_type"])?,
            in_flight: gauge_vec(registry, desc::IN_FLIGHT, &["exporter"])?,
            retries: counter_vec(registry, desc::RETRIES, &["exporter", "error_type"])?,
            queue_size: queue_size.clone(),
            disk: DiskQueueFamilies {
                replayed: counter_vec(registry, desc::QUEUE_REPLAYED, &["exporter", "data_type"])?,
                persisted: counter_vec(
                    registry,
                    desc::QUEUE_PERSISTED,
                    &["exporter", "data_type"],
                )?,
                corrupt: counter_vec(registry, desc::QUEUE_CORRUPT, &["exporter", "data_type"])?,
                disk_bytes: gauge_vec(
                    registry,
                    desc::QUEUE_DISK_BYTES,
                    &["exporter", "data_type"],
                )?,
                disk_limit: gauge_vec(
                    registry,
                    desc::QUEUE_DISK_LIMIT,
                    &["exporter", "data_type"],
                )?,
            },
        };
        registry.register(Box::new(SharedCollector(queue_size)))?;
        Ok(families)
    }

    /// `tailgate_spans_dropped_total`: the one counter of lost spans, shared with the
    /// other stages that can lose spans (the tail sampler at shutdown).
    pub fn dropped_spans(&self) -> IntCounterVec {
        self.spans.dropped.clone()
    }

    /// `tailgate_metric_points_dropped_total`: the one counter of lost metric points.
    pub fn dropped_points(&self) -> IntCounterVec {
        self.points.dropped.clone()
    }

    /// Label-bound handles for one traces exporter. Every `reason` and `error_type` series
    /// is created at zero, so dashboards see them before the first failure.
    pub fn for_exporter(&self, id: &ComponentId) -> ExporterMetrics {
        self.for_signal(id, "traces")
    }

    /// Label-bound handles for one exporter of `data_type` (`traces` or `metrics`): items
    /// are counted in the `*_spans_total` or `*_metric_points_total` families.
    pub fn for_signal(&self, id: &ComponentId, data_type: &'static str) -> ExporterMetrics {
        let name = id.written.as_str();
        let items = if data_type == "metrics" {
            &self.points
        } else {
            &self.spans
        };
        ExporterMetrics {
            exporter: name.to_owned(),
            data_type,
            sent_spans: items.sent.with_label_values(&[name]),
            send_failed_spans: FailureReason::ALL
                .map(|r| items.send_failed.with_label_values(&[name, r.as_str()])),
            dropped: FailureReason::ALL.map(|r| items.dropped.with_label_values(&[r.as_str()])),
            enqueue_failed_spans: items.enqueue_failed.with_label_values(&[name]),
            queue_capacity: self.queue_capacity.clone(),
            in_flight: self.in_flight.with_label_values(&[name]),
            retries: RetryErrorType::ALL
                .map(|t| self.retries.with_label_values(&[name, t.as_str()])),
            queue_size: self.queue_size.clone(),
            disk: self.disk.clone(),
        }
    }
}

/// One exporter's label-bound metric handles; cheap to clone.
#[derive(Clone, Debug)]
pub struct ExporterMetrics {
    exporter: String,
    data_type: &'static str,
    sent_spans: IntCounter,
    send_failed_spans: [IntCounter; 4],
    /// `tailgate_*_dropped_total` by the same reasons.
    dropped: [IntCounter; 4],
    enqueue_failed_spans: IntCounter,
    queue_capacity: IntGaugeVec,
    in_flight: IntGauge,
    retries: [IntCounter; 7],
    queue_size: Arc<QueueSizeCollector>,
    disk: DiskQueueFamilies,
}

/// The persistent queue's metrics: one exporter's label-bound handles, or (with the
/// vector types for `C` and `G`) the families they are bound from.
#[derive(Clone, Debug)]
pub(crate) struct DiskQueueMetrics<C = IntCounter, G = IntGauge> {
    /// `tailgate_exporter_queue_replayed_items_total`.
    replayed: C,
    /// `tailgate_exporter_queue_persisted_items_total`.
    persisted: C,
    /// `tailgate_exporter_queue_corrupt_records_total`.
    corrupt: C,
    /// `tailgate_exporter_queue_disk_bytes`.
    disk_bytes: G,
    /// `tailgate_exporter_queue_disk_limit_bytes`.
    disk_limit: G,
}

impl DiskQueueMetrics {
    /// `items` left undelivered by an earlier run were found and queued.
    pub(crate) fn record_replayed(&self, items: u64) {
        self.replayed.inc_by(items);
    }

    /// `items` were written to the queue.
    pub(crate) fn record_persisted(&self, items: usize) {
        self.persisted.inc_by(items as u64);
    }

    /// A damaged record was found and skipped.
    pub(crate) fn record_corrupt(&self) {
        self.corrupt.inc();
    }

    /// The queue's segment files now hold `bytes`.
    pub(crate) fn set_disk_bytes(&self, bytes: u64) {
        self.disk_bytes
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// The queue may hold at most `bytes` on disk.
    pub(crate) fn set_disk_limit(&self, bytes: u64) {
        self.disk_limit
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }
}

impl ExporterMetrics {
    /// `traces` or `metrics`: what the item counters count (spans or data points).
    pub(crate) fn data_type(&self) -> &'static str {
        self.data_type
    }

    /// Handles for this exporter's persistent queue; creates its series at zero.
    pub(crate) fn disk_queue(&self) -> DiskQueueMetrics {
        let labels = [self.exporter.as_str(), self.data_type];
        DiskQueueMetrics {
            replayed: self.disk.replayed.with_label_values(&labels),
            persisted: self.disk.persisted.with_label_values(&labels),
            corrupt: self.disk.corrupt.with_label_values(&labels),
            disk_bytes: self.disk.disk_bytes.with_label_values(&labels),
            disk_limit: self.disk.disk_limit.with_label_values(&labels),
        }
    }

    /// `spans` reached the destination.
    pub(crate) fn record_sent(&self, spans: usize) {
        self.sent_spans.inc_by(spans as u64);
    }

    /// `spans` were not delivered, for `reason`.
    pub(crate) fn record_failed(&self, reason: FailureReason, spans: usize) {
        self.send_failed_spans[reason.index()].inc_by(spans as u64);
        self.dropped[reason.index()].inc_by(spans as u64);
    }

    /// `spans` could not be handed to the exporter (it was shut down).
    pub(crate) fn record_enqueue_failed(&self, spans: usize) {
        self.enqueue_failed_spans.inc_by(spans as u64);
        self.dropped[FailureReason::Shutdown.index()].inc_by(spans as u64);
    }

    /// A retryable attempt failed and will be retried.
    pub(crate) fn record_retry(&self, error_type: RetryErrorType) {
        self.retries[error_type.index()].inc();
    }

    /// Marks one attempt in flight until the guard drops (also when the attempt is
    /// cancelled).
    pub(crate) fn in_flight(&self) -> InFlightGuard {
        self.in_flight.inc();
        InFlightGuard(self.in_flight.clone())
    }

    /// Publishes the queue's capacity and registers a reader of its depth, called at scrape
    /// time. The reader returns `None` once the queue is gone; its series is then removed.
    pub(crate) fn observe_queue(&self, capacity: usize, depth: QueueObserver) {
        self.queue_capacity
            .with_label_values(&[self.exporter.as_str(), self.data_type])
            .set(capacity as i64);
        self.queue_size
            .add(self.exporter.clone(), self.data_type, depth);
    }
}

/// Decrements the in-flight gauge on drop.
pub(crate) struct InFlightGuard(IntGauge);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Reads a queue's current depth; `None` when the queue no longer exists.
pub(crate) type QueueObserver = Box<dyn Fn() -> Option<usize> + Send + Sync>;

/// `otelcol_exporter_queue_size`, computed at scrape time from the registered observers.
struct QueueSizeCollector {
    gauge: IntGaugeVec,
    // A std mutex: held only to copy or prune the short list, never across an await.
    observers: Mutex<Vec<(String, &'static str, QueueObserver)>>,
}

impl std::fmt::Debug for QueueSizeCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueSizeCollector").finish_non_exhaustive()
    }
}

impl QueueSizeCollector {
    fn new() -> prometheus::Result<Self> {
        Ok(Self {
            gauge: IntGaugeVec::new(
                Opts::new(desc::QUEUE_SIZE.0, desc::QUEUE_SIZE.1),
                &["exporter", "data_type"],
            )?,
            observers: Mutex::new(Vec::new()),
        })
    }

    fn add(&self, exporter: String, data_type: &'static str, observer: QueueObserver) {
        let mut observers = self.observers.lock().unwrap_or_else(|e| e.into_inner());
        observers.retain(|(name, kind, _)| *name != exporter || *kind != data_type);
        observers.push((exporter, data_type, observer));
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut observers = self.observers.lock().unwrap_or_else(|e| e.into_inner());
        self.gauge.reset();
        observers.retain(|(name, data_type, observe)| match observe() {
            Some(depth) => {
                self.gauge
                    .with_label_values(&[name.as_str(), data_type])
                    .set(depth as i64);
                true
            }
            None => false,
        });
        self.gauge.collect()
    }
}

/// Registers the shared collector (the registry takes a `Box<dyn Collector>`).
struct SharedCollector(Arc<QueueSizeCollector>);

impl Collector for SharedCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.0.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.0.collect()
    }
}
