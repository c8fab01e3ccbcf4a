//! Connectors: components that are an exporter of one pipeline and a receiver of another,
//! as in the Collector.
//!
//! - `forward` ([`ForwardConnector`]) passes batches on unchanged into the pipelines that
//!   list it as a receiver, for either signal.
//! - `spanmetrics` ([`spanmetrics`]) computes RED metrics from every span it receives and
//!   emits them into metrics pipelines every `metrics_flush_interval`, and once more when
//!   the traces pipelines feeding it have drained.

mod forward;
mod metrics;
pub mod spanmetrics;

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests;

pub use forward::ForwardConnector;
pub use metrics::{SpanMetricsMetricFamilies, SpanMetricsMetrics};
pub use spanmetrics::{SpanMetricsConnector, SpanMetricsFlusher};
