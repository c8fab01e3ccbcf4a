//! The remote-write exporter's self-metrics.
//!
//! Data-point counters follow the Collector's names for metrics exporters
//! (`otelcol_exporter_sent_metric_points_total`, `..._send_failed_metric_points_total`,
//! `..._enqueue_failed_metric_points_total`), with the same `exporter` and `reason` labels as
//! the span counters. Queue size and capacity, in-flight requests and
//! `tailgate_exporter_retries_total` are the trace exporters' families, shared (one registry
//! holds each family once). Translation refusals are counted apart, in
//! `tailgate_remote_write_dropped_data_points_total{exporter,reason}`.

use prometheus::{IntCounter, IntCounterVec, Opts, Registry};

use super::translate::DropReason;
use crate::config::ComponentId;
use crate::exporter::{ExporterMetricFamilies, ExporterMetrics, FailureReason};

/// Metric names and help texts, in one place.
mod desc {
    pub const DROPPED_POINTS: (&str, &str) = (
        "tailgate_remote_write_dropped_data_points_total",
        "Number of metric data points the remote-write exporter could not translate, by reason \
         (delta_temporality, invalid).",
    );
}

/// The remote-write metric families, registered once per registry.
///
/// Sent, failed and enqueue-failed data points, the queue, in-flight requests and retries
/// are the exporters' shared families (with `data_type="metrics"` where it applies); only
/// the translation drops are remote-write's own.
#[derive(Clone, Debug)]
pub struct RemoteWriteMetricFamilies {
    dropped: IntCounterVec,
    exporter: ExporterMetricFamilies,
}

impl RemoteWriteMetricFamilies {
    /// Registers the remote-write family with `registry`; the shared families come from
    /// `exporter`, which must be registered with the same registry.
    ///
    /// # Errors
    ///
    /// Fails when a family of the same name is already registered (call this once per
    /// registry and share the result).
    pub fn register(
        registry: &Registry,
        exporter: &ExporterMetricFamilies,
    ) -> Result<Self, prometheus::Error> {
        let dropped = IntCounterVec::new(
            Opts::new(desc::DROPPED_POINTS.0, desc::DROPPED_POINTS.1),
            &["exporter", "reason"],
        )?;
        registry.register(Box::new(dropped.clone()))?;
        Ok(Self {
            dropped,
            exporter: exporter.clone(),
        })
    }

    /// Label-bound handles for one exporter; every `reason` series starts at zero.
    pub fn for_exporter(&self, id: &ComponentId) -> RemoteWriteMetrics {
        let name = id.written.as_str();
        RemoteWriteMetrics {
            shared: self.exporter.for_signal(id, "metrics"),
            dropped: DropReason::ALL.map(|r| self.dropped.with_label_values(&[name, r.as_str()])),
        }
    }
}

/// One remote-write exporter's label-bound handles; cheap to clone.
#[derive(Clone, Debug)]
pub struct RemoteWriteMetrics {
    pub(crate) shared: ExporterMetrics,
    dropped: [IntCounter; 2],
}

impl RemoteWriteMetrics {
    pub(crate) fn record_sent(&self, points: usize) {
        self.shared.record_sent(points);
    }

    pub(crate) fn record_failed(&self, reason: FailureReason, points: usize) {
        self.shared.record_failed(reason, points);
    }

    pub(crate) fn record_enqueue_failed(&self, points: usize) {
        self.shared.record_enqueue_failed(points);
    }

    pub(crate) fn record_dropped(&self, reason: DropReason, points: usize) {
        self.dropped[reason.index()].inc_by(points as u64);
    }
}
