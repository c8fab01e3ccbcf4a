//! The metrics exporter handle: the dispatch over the exporter types that take metrics.

use std::sync::Arc;

use tokio::time::Instant;

use super::core::error::{DrainReport, ExportError, ExporterError};
use super::core::metrics::ExporterMetrics;
use super::otlp::{QueueStorage, SignalExporter};
use super::remote_write::{RemoteWriteExporter, RemoteWriteMetricFamilies};
use crate::config::{ComponentId, ExporterConfig};
use crate::limiter::MemoryBudget;
use crate::payload::MetricsBatch;

/// Handle to a running metrics exporter. Cheap to clone; all clones share one exporter.
#[derive(Clone, Debug)]
pub enum MetricsExporter {
    /// `otlp` / `otlp_grpc`, `otlphttp` / `otlp_http` (`MetricsService/Export`,
    /// `/v1/metrics` or `metrics_endpoint`) and `debug`.
    Otlp(SignalExporter<MetricsBatch>),
    /// `prometheusremotewrite` / `prometheus_remote_write`.
    RemoteWrite(RemoteWriteExporter),
}

impl MetricsExporter {
    /// Builds the exporter `id` for metrics and starts its tasks; remote-write queues are
    /// not charged to a memory budget.
    ///
    /// # Errors
    ///
    /// [`ExporterError`] when the endpoint, a header or the TLS settings cannot be used.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(
        id: &ComponentId,
        config: &ExporterConfig,
        metrics: ExporterMetrics,
        remote_write_families: &RemoteWriteMetricFamilies,
    ) -> Result<Self, ExporterError> {
        Self::start_with_storage(id, config, metrics, remote_write_families, None, None)
    }

    /// Like [`start`](Self::start), with the storage extension that an OTLP exporter's
    /// `sending_queue.storage` names (see [`SignalExporter::start`]), and the
    /// memory budget that a remote-write exporter charges its queued series to (see
    /// [`RemoteWriteExporter::start_with_budget`]).
    ///
    /// # Errors
    ///
    /// As [`SignalExporter::start`].
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start_with_storage(
        id: &ComponentId,
        config: &ExporterConfig,
        metrics: ExporterMetrics,
        remote_write_families: &RemoteWriteMetricFamilies,
        storage: Option<&QueueStorage>,
        budget: Option<&Arc<MemoryBudget>>,
    ) -> Result<Self, ExporterError> {
        match config {
            ExporterConfig::OtlpGrpc(_)
            | ExporterConfig::OtlpHttp(_)
            | ExporterConfig::Debug(_)
            | ExporterConfig::LoadBalancing(_) => {
                SignalExporter::start(id, config, metrics, storage).map(Self::Otlp)
            }
            ExporterConfig::PrometheusRemoteWrite(remote_write_config) => {
                RemoteWriteExporter::start_with_budget(
                    id,
                    remote_write_config,
                    remote_write_families.for_exporter(id),
                    budget.cloned(),
                )
                .map(Self::RemoteWrite)
            }
        }
    }

    /// Hands a batch over; see [`SignalExporter::export`] and
    /// [`RemoteWriteExporter::export`].
    ///
    /// # Errors
    ///
    /// As [`SignalExporter::export`].
    pub async fn export(&self, batch: MetricsBatch) -> Result<(), ExportError> {
        match self {
            Self::Otlp(exporter) => exporter.export(batch).await,
            Self::RemoteWrite(exporter) => exporter.export(batch).await,
        }
    }

    /// Stops intake and drains until `deadline`; see [`SignalExporter::shutdown`]. The
    /// report counts data points.
    pub async fn shutdown(self, deadline: Instant) -> DrainReport {
        match self {
            Self::Otlp(exporter) => exporter.shutdown(deadline).await,
            Self::RemoteWrite(exporter) => exporter.shutdown(deadline).await,
        }
    }
}
