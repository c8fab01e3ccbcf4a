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
    pub const SENT_POINTS: (&str, &str) = (
        "otelcol_exporter_sent_metric_points_total",
        "Number of metric points successfully sent to destination.",
    );
    pub const SEND_FAILED_POINTS: (&str, &str) = (
        "otelcol_exporter_send_failed_metric_points_total",
        "Number of metric points in failed attempts to send to destination, by reason \
         (permanent, retries_exhausted, shutdown).",
    );
    pub const ENQUEUE_FAILED_POINTS: (&str, &str) = (
        "otelcol_exporter_enqueue_failed_metric_points_total",
        "Number of metric points failed to be added to the sending queue (the exporter was \
         shut down).",
    );
    pub const DROPPED_POINTS: (&str, &str) = (
        "tailgate_remote_write_dropped_data_points_total",
        "Number of metric data points the remote-write exporter could not translate, by reason \
         (delta_temporality, invalid).",
    );
}

/// The remote-write metric families, registered once per registry.
#[derive(Clone, Debug)]
pub struct RemoteWriteMetricFamilies {
    sent: IntCounterVec,
    send_failed: IntCounterVec,
    enqueue_failed: IntCounterVec,
    dropped: IntCounterVec,
    exporter: ExporterMetricFamilies,
}

impl RemoteWriteMetricFamilies {
    /// Creates the data-point families and registers them with `registry`; queue, in-flight
    /// and retry metrics come from `exporter`, which must be registered with the same
    /// registry.
    ///
    /// # Errors
    ///
    /// Fails when a family of the same name is already registered (call this once per
    /// registry and share the result).
    pub fn register(
        registry: &Registry,
        exporter: &ExporterMetricFamilies,
    ) -> Result<Self, prometheus::Error> {
        let counter = |d: (&str, &str), labels: &[&str]| -> prometheus::Result<IntCounterVec> {
            let v = IntCounterVec::new(Opts::new(d.0, d.1), labels)?;
            registry.register(Box::new(v.clone()))?;
            Ok(v)
        };
        Ok(Self {
            sent: counter(desc::SENT_POINTS, &["exporter"])?,
            send_failed: counter(desc::SEND_FAILED_POINTS, &["exporter", "reason"])?,
            enqueue_failed: counter(desc::ENQUEUE_FAILED_POINTS, &["exporter"])?,
            dropped: counter(desc::DROPPED_POINTS, &["exporter", "reason"])?,
            exporter: exporter.clone(),
        })
    }

    /// Label-bound handles for one exporter; every `reason` series starts at zero.
    pub fn for_exporter(&self, id: &ComponentId) -> RemoteWriteMetrics {
        let name = id.written.as_str();
        RemoteWriteMetrics {
            shared: self.exporter.for_exporter(id),
            sent: self.sent.with_label_values(&[name]),
            send_failed: FAILURE_REASONS
                .map(|r| self.send_failed.with_label_values(&[name, r.as_str()])),
            enqueue_failed: self.enqueue_failed.with_label_values(&[name]),
            dropped: DropReason::ALL.map(|r| self.dropped.with_label_values(&[name, r.as_str()])),
        }
    }
}

/// The failure reasons that apply to metric points (no partial success in remote write).
const FAILURE_REASONS: [FailureReason; 3] = [
    FailureReason::Permanent,
    FailureReason::RetriesExhausted,
    FailureReason::Shutdown,
];

/// One remote-write exporter's label-bound handles; cheap to clone.
#[derive(Clone, Debug)]
pub struct RemoteWriteMetrics {
    pub(crate) shared: ExporterMetrics,
    sent: IntCounter,
    send_failed: [IntCounter; 3],
    enqueue_failed: IntCounter,
    dropped: [IntCounter; 2],
}

impl RemoteWriteMetrics {
    pub(crate) fn record_sent(&self, points: usize) {
        self.sent.inc_by(points as u64);
    }

    pub(crate) fn record_failed(&self, reason: FailureReason, points: usize) {
        let i = FAILURE_REASONS
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        self.send_failed[i].inc_by(points as u64);
    }

    pub(crate) fn record_enqueue_failed(&self, points: usize) {
        self.enqueue_failed.inc_by(points as u64);
    }

    pub(crate) fn record_dropped(&self, reason: DropReason, points: usize) {
        self.dropped[reason.index()].inc_by(points as u64);
    }
}
