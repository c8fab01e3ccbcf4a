//! The span metrics connector's self-metrics.

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry};

use crate::config::ComponentId;
use crate::telemetry::{counter_vec, gauge_vec};

/// The families, registered once per registry.
#[derive(Clone, Debug)]
pub struct SpanMetricsMetricFamilies {
    overflow: IntCounterVec,
    series: IntGaugeVec,
}

impl SpanMetricsMetricFamilies {
    /// Registers the families in `registry`.
    ///
    /// # Errors
    ///
    /// When they are already registered there.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let overflow = counter_vec(
            registry,
            (
                "tailgate_spanmetrics_overflow_total",
                "Number of spans counted in the overflow series (otel.metric.overflow=true) \
                 because aggregation_cardinality_limit series were already held.",
            ),
            &["connector"],
        )?;
        let series = gauge_vec(
            registry,
            (
                "tailgate_spanmetrics_series",
                "Number of series the span metrics connector holds, at its last flush.",
            ),
            &["connector"],
        )?;
        Ok(Self { overflow, series })
    }

    /// Handles bound to one connector.
    pub fn for_connector(&self, id: &ComponentId) -> SpanMetricsMetrics {
        SpanMetricsMetrics {
            overflow: self.overflow.with_label_values(&[id.written.as_str()]),
            series: self.series.with_label_values(&[id.written.as_str()]),
        }
    }
}

/// One connector's metric handles.
#[derive(Clone, Debug)]
pub struct SpanMetricsMetrics {
    overflow: IntCounter,
    series: IntGauge,
}

impl SpanMetricsMetrics {
    /// Handles registered nowhere (for tests).
    #[cfg(test)]
    pub(crate) fn unregistered() -> Self {
        Self {
            overflow: IntCounter::new("overflow", "unregistered").expect("valid name"),
            series: IntGauge::new("series", "unregistered").expect("valid name"),
        }
    }

    pub(super) fn record_overflow(&self, spans: u64) {
        self.overflow.inc_by(spans);
    }

    pub(super) fn set_series(&self, series: usize) {
        self.series.set(series as i64);
    }

    /// Spans counted in overflow series so far.
    pub fn overflow_spans(&self) -> u64 {
        self.overflow.get()
    }
}
