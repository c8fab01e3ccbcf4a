//! Connectors: components that are an exporter of one pipeline and a receiver of another,
//! as in the Collector.
//!
//! - `forward` passes batches on unchanged into the pipelines that list it as a receiver
//!   ([`crate::pipeline::ForwardConnector`]); it lives with the pipeline graph because it
//!   is nothing but a pipeline entry seen from the other side.
//! - `spanmetrics` ([`spanmetrics`]) computes RED metrics from every span it receives and
//!   emits them into metrics pipelines every `metrics_flush_interval`, and once more when
//!   the traces pipelines feeding it have drained.

mod metrics;
pub mod spanmetrics;

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests;

pub use metrics::{SpanMetricsMetricFamilies, SpanMetricsMetrics};
pub use spanmetrics::{SpanMetricsConnector, SpanMetricsFlusher};
