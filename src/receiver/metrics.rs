//! The receiver's self-metrics, with the Collector's names.

use prometheus::{IntCounter, IntCounterVec, Opts, Registry};

use crate::config::ComponentId;
use crate::error::PipelineError;

/// The transport a request came over: the `transport` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// OTLP/gRPC.
    Grpc,
    /// OTLP/HTTP.
    Http,
}

impl Transport {
    fn label(self) -> &'static str {
        match self {
            Self::Grpc => "grpc",
            Self::Http => "http",
        }
    }
}

/// The families, registered once per registry.
#[derive(Clone)]
pub struct ReceiverMetricFamilies {
    accepted: IntCounterVec,
    refused: IntCounterVec,
    accepted_points: IntCounterVec,
    refused_points: IntCounterVec,
    refused_requests: IntCounterVec,
}

impl ReceiverMetricFamilies {
    /// Registers the families in `registry`.
    ///
    /// # Errors
    ///
    /// When they are already registered there.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let accepted = IntCounterVec::new(
            Opts::new(
                "otelcol_receiver_accepted_spans_total",
                "Number of spans successfully pushed into the pipeline.",
            ),
            &["receiver", "transport"],
        )?;
        let refused = IntCounterVec::new(
            Opts::new(
                "otelcol_receiver_refused_spans_total",
                "Number of spans that could not be pushed into the pipeline.",
            ),
            &["receiver", "transport"],
        )?;
        let accepted_points = IntCounterVec::new(
            Opts::new(
                "otelcol_receiver_accepted_metric_points_total",
                "Number of metric points successfully pushed into the pipeline.",
            ),
            &["receiver", "transport"],
        )?;
        let refused_points = IntCounterVec::new(
            Opts::new(
                "otelcol_receiver_refused_metric_points_total",
                "Number of metric points that could not be pushed into the pipeline.",
            ),
            &["receiver", "transport"],
        )?;
        let refused_requests = IntCounterVec::new(
            Opts::new(
                "tailgate_receiver_refused_requests_total",
                "Number of requests refused, by signal (traces, metrics) and reason: \
                 overloaded and shutting_down are retryable, the others are client errors.",
            ),
            &["receiver", "transport", "signal", "reason"],
        )?;
        registry.register(Box::new(accepted.clone()))?;
        registry.register(Box::new(refused.clone()))?;
        registry.register(Box::new(accepted_points.clone()))?;
        registry.register(Box::new(refused_points.clone()))?;
        registry.register(Box::new(refused_requests.clone()))?;
        Ok(Self {
            accepted,
            refused,
            accepted_points,
            refused_points,
            refused_requests,
        })
    }

    /// Creates the refusal series of one receiver at zero, so that alerts and dashboards
    /// see them before the first refusal.
    fn init_refusals(&self, id: &ComponentId, transport: Transport, signal: &str) {
        for reason in PipelineError::REASON_LABELS {
            self.refused_requests.with_label_values(&[
                id.written.as_str(),
                transport.label(),
                signal,
                reason,
            ]);
        }
    }

    /// Handles bound to one receiver and transport, for traces.
    pub fn for_receiver(&self, id: &ComponentId, transport: Transport) -> ReceiverMetrics {
        self.init_refusals(id, transport, "traces");
        let labels = [id.written.as_str(), transport.label()];
        ReceiverMetrics {
            accepted: self.accepted.with_label_values(&labels),
            refused: self.refused.with_label_values(&labels),
            refused_requests: self.refused_requests.clone(),
            receiver: id.written.clone(),
            transport,
            signal: "traces",
        }
    }

    /// Handles bound to one receiver and transport, for metrics (counting data points).
    pub fn for_metrics_receiver(&self, id: &ComponentId, transport: Transport) -> ReceiverMetrics {
        self.init_refusals(id, transport, "metrics");
        let labels = [id.written.as_str(), transport.label()];
        ReceiverMetrics {
            accepted: self.accepted_points.with_label_values(&labels),
            refused: self.refused_points.with_label_values(&labels),
            refused_requests: self.refused_requests.clone(),
            receiver: id.written.clone(),
            transport,
            signal: "metrics",
        }
    }
}

/// One receiver transport's metric handles.
#[derive(Clone)]
pub struct ReceiverMetrics {
    accepted: IntCounter,
    refused: IntCounter,
    refused_requests: IntCounterVec,
    receiver: String,
    transport: Transport,
    signal: &'static str,
}

impl ReceiverMetrics {
    pub(super) fn record_accepted(&self, spans: usize) {
        self.accepted.inc_by(spans as u64);
    }

    pub(super) fn record_refused(&self, spans: usize, error: &PipelineError) {
        self.refused.inc_by(spans as u64);
        self.refused_requests
            .with_label_values(&[
                self.receiver.as_str(),
                self.transport.label(),
                self.signal,
                error.reason_label(),
            ])
            .inc();
    }
}
