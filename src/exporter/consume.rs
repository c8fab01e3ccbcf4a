//! Exporters as the consumers at the end of a pipeline.

use super::{MetricsExporter, TracesExporter};
use crate::payload::{BoxFuture, Consumer, MetricsBatch, TraceBatch};

impl Consumer<TraceBatch> for TracesExporter {
    /// An exporter that refuses has counted the spans as lost itself.
    fn consume(&self, batch: TraceBatch) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Err(error) = self.export(batch).await {
                tracing::debug!(event = "pipeline.export_refused", error = %error);
            }
        })
    }
}

impl Consumer<MetricsBatch> for MetricsExporter {
    /// An exporter that refuses has counted the points as lost itself.
    fn consume(&self, batch: MetricsBatch) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Err(error) = self.export(batch).await {
                tracing::debug!(event = "pipeline.export_refused", error = %error);
            }
        })
    }
}
