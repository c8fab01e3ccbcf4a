//! The remote-write exporter's self-metrics.
//!
//! Data-point counters follow the Collector's names for metrics exporters
//! (`otelcol_exporter_sent_metric_points_total`, `..._send_failed_metric_points_total`,
//! `..._enqueue_failed_metric_points_total`), with the same `exporter` and `reason` labels as
//! the span counters. Queue size and capacity, in-flight requests and
//! `tailgate_exporter_retries_total` are the trace exporters' families, shared (one registry
//! holds each family once). Translation refusals are counted apart, in
//! `tailgate_remote_write_dropped_data_points_total{exporter,reason}`; with remote write 2.0,
//! the switch to 1.0 in `tailgate_remote_write_protocol_fallbacks_total{exporter}` and what a
//! receiver acknowledged not writing in
//! `tailgate_remote_write_unwritten_total{exporter,kind}`.

use prometheus::{IntCounter, IntCounterVec, Opts, Registry};

use super::translate::DropReason;
use crate::config::ComponentId;
use crate::exporter::core::metrics::{ExporterMetricFamilies, ExporterMetrics};

/// Metric names and help texts, in one place.
mod desc {
    pub const DROPPED_POINTS: (&str, &str) = (
        "tailgate_remote_write_dropped_data_points_total",
        "Number of metric data points the remote-write exporter could not translate, by reason \
         (delta_temporality, invalid).",
    );
    pub const FALLBACKS: (&str, &str) = (
        "tailgate_remote_write_protocol_fallbacks_total",
        "Number of times the remote-write exporter, configured for remote write 2.0, switched to \
         1.0 for the rest of its life because the receiver does not support 2.0 (at most 1 per \
         exporter and process).",
    );
    pub const UNWRITTEN: (&str, &str) = (
        "tailgate_remote_write_unwritten_total",
        "Number of samples, native histograms and exemplars (kind) sent with remote write 2.0 \
         that the receiver accepted the request for but reported as not written \
         (X-Prometheus-Remote-Write-*-Written below what was sent).",
    );
}

/// What `tailgate_remote_write_unwritten_total` counts: the `kind` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unwritten {
    Samples,
    Histograms,
    Exemplars,
}

impl Unwritten {
    const ALL: [Unwritten; 3] = [
        Unwritten::Samples,
        Unwritten::Histograms,
        Unwritten::Exemplars,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Unwritten::Samples => "samples",
            Unwritten::Histograms => "histograms",
            Unwritten::Exemplars => "exemplars",
        }
    }
}

/// The remote-write metric families, registered once per registry.
///
/// Sent, failed and enqueue-failed data points, the queue, in-flight requests and retries
/// are the exporters' shared families (with `data_type="metrics"` where it applies); only
/// the translation drops are remote-write's own.
#[derive(Clone, Debug)]
pub struct RemoteWriteMetricFamilies {
    dropped: IntCounterVec,
    fallbacks: IntCounterVec,
    unwritten: IntCounterVec,
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
        let fallbacks = IntCounterVec::new(
            Opts::new(desc::FALLBACKS.0, desc::FALLBACKS.1),
            &["exporter"],
        )?;
        registry.register(Box::new(fallbacks.clone()))?;
        let unwritten = IntCounterVec::new(
            Opts::new(desc::UNWRITTEN.0, desc::UNWRITTEN.1),
            &["exporter", "kind"],
        )?;
        registry.register(Box::new(unwritten.clone()))?;
        Ok(Self {
            dropped,
            fallbacks,
            unwritten,
            exporter: exporter.clone(),
        })
    }

    /// Label-bound handles for one exporter; every `reason` series starts at zero.
    pub fn for_exporter(&self, id: &ComponentId) -> RemoteWriteMetrics {
        let name = id.written.as_str();
        RemoteWriteMetrics {
            shared: self.exporter.for_signal(id, "metrics"),
            dropped: DropReason::ALL.map(|r| self.dropped.with_label_values(&[name, r.as_str()])),
            fallbacks: self.fallbacks.with_label_values(&[name]),
            unwritten: Unwritten::ALL
                .map(|k| self.unwritten.with_label_values(&[name, k.as_str()])),
        }
    }
}

/// One remote-write exporter's label-bound handles; cheap to clone.
#[derive(Clone, Debug)]
pub struct RemoteWriteMetrics {
    pub(crate) shared: ExporterMetrics,
    dropped: [IntCounter; 2],
    fallbacks: IntCounter,
    unwritten: [IntCounter; 3],
}

impl RemoteWriteMetrics {
    pub(crate) fn record_fallback(&self) {
        self.fallbacks.inc();
    }

    pub(crate) fn record_unwritten(&self, kind: Unwritten, n: u64) {
        self.unwritten[kind as usize].inc_by(n);
    }

    pub(crate) fn record_dropped(&self, reason: DropReason, points: usize) {
        self.dropped[reason.index()].inc_by(points as u64);
    }
}
