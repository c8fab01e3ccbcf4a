//! The receiver's self-metrics, with the Collector's names.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry};

use crate::config::ComponentId;
use crate::error::PipelineError;
use crate::telemetry::{counter_vec, gauge_vec};

/// The transport a request came over: the `transport` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// OTLP/gRPC.
    Grpc,
    /// OTLP/HTTP.
    Http,
}

impl Transport {
    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Grpc => "grpc",
            Self::Http => "http",
        }
    }
}

/// The `reason` of a request refused because the receiver already had
/// `max_concurrent_requests` in flight. It has no [`PipelineError`] kind of its own (the
/// answer is the retryable overload answer), so the receiver names it here, beside
/// [`PipelineError::REASON_LABELS`].
const TOO_MANY_REQUESTS: &str = "too_many_requests";

/// At most one log line per receiver and transport this often about corrected strings.
const UTF8_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// The families, registered once per registry.
#[derive(Clone)]
pub struct ReceiverMetricFamilies {
    accepted: IntCounterVec,
    refused: IntCounterVec,
    accepted_points: IntCounterVec,
    refused_points: IntCounterVec,
    refused_requests: IntCounterVec,
    in_flight: IntGaugeVec,
    utf8_corrected: IntCounterVec,
}

impl ReceiverMetricFamilies {
    /// Registers the families in `registry`.
    ///
    /// # Errors
    ///
    /// When they are already registered there.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let accepted = counter_vec(
            registry,
            (
                "otelcol_receiver_accepted_spans_total",
                "Number of spans successfully pushed into the pipeline.",
            ),
            &["receiver", "transport"],
        )?;
        let refused = counter_vec(
            registry,
            (
                "otelcol_receiver_refused_spans_total",
                "Number of spans that could not be pushed into the pipeline.",
            ),
            &["receiver", "transport"],
        )?;
        let accepted_points = counter_vec(
            registry,
            (
                "otelcol_receiver_accepted_metric_points_total",
                "Number of metric points successfully pushed into the pipeline.",
            ),
            &["receiver", "transport"],
        )?;
        let refused_points = counter_vec(
            registry,
            (
                "otelcol_receiver_refused_metric_points_total",
                "Number of metric points that could not be pushed into the pipeline.",
            ),
            &["receiver", "transport"],
        )?;
        let refused_requests = counter_vec(
            registry,
            (
                "tailgate_receiver_refused_requests_total",
                "Number of requests refused, by signal (traces, metrics) and reason: \
                 overloaded, too_many_requests and shutting_down are retryable, the others \
                 are client errors.",
            ),
            &["receiver", "transport", "signal", "reason"],
        )?;
        let in_flight = gauge_vec(
            registry,
            (
                "tailgate_receiver_requests_in_flight",
                "Export requests being read or admitted by the receiver, bounded by \
                 max_concurrent_requests.",
            ),
            &["receiver", "transport"],
        )?;
        let utf8_corrected = counter_vec(
            registry,
            (
                "tailgate_receiver_utf8_corrected_total",
                "String fields that were not valid UTF-8, accepted with each invalid \
                 sequence replaced by U+FFFD, by signal.",
            ),
            &["receiver", "transport", "signal"],
        )?;
        Ok(Self {
            accepted,
            refused,
            accepted_points,
            refused_points,
            refused_requests,
            in_flight,
            utf8_corrected,
        })
    }

    /// Creates the refusal series of one receiver at zero, so that alerts and dashboards
    /// see them before the first refusal.
    fn init_refusals(&self, id: &ComponentId, transport: Transport, signal: &str) {
        for reason in PipelineError::REASON_LABELS
            .into_iter()
            .chain([TOO_MANY_REQUESTS])
        {
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
        self.bind(id, transport, "traces", (&self.accepted, &self.refused))
    }

    /// Handles bound to one receiver and transport, for metrics (counting data points).
    pub fn for_metrics_receiver(&self, id: &ComponentId, transport: Transport) -> ReceiverMetrics {
        let items = (&self.accepted_points, &self.refused_points);
        self.bind(id, transport, "metrics", items)
    }

    /// Handles bound to one receiver and transport for `signal`, counting items in the
    /// `(accepted, refused)` families.
    fn bind(
        &self,
        id: &ComponentId,
        transport: Transport,
        signal: &'static str,
        (accepted, refused): (&IntCounterVec, &IntCounterVec),
    ) -> ReceiverMetrics {
        self.init_refusals(id, transport, signal);
        let labels = [id.written.as_str(), transport.label()];
        ReceiverMetrics {
            accepted: accepted.with_label_values(&labels),
            refused: refused.with_label_values(&labels),
            refused_requests: self.refused_requests.clone(),
            in_flight: self.in_flight.with_label_values(&labels),
            utf8_corrected: self.utf8_corrected.with_label_values(&[
                id.written.as_str(),
                transport.label(),
                signal,
            ]),
            utf8_logged: Arc::new(Mutex::new(None)),
            receiver: id.written.clone(),
            transport,
            signal,
        }
    }
}

/// One receiver transport's metric handles.
#[derive(Clone)]
pub struct ReceiverMetrics {
    accepted: IntCounter,
    refused: IntCounter,
    refused_requests: IntCounterVec,
    /// Shared by the traces and metrics handles of one receiver and transport.
    in_flight: IntGauge,
    utf8_corrected: IntCounter,
    /// When a correction was last logged, and how many strings were corrected since.
    utf8_logged: Arc<Mutex<Option<(Instant, u64)>>>,
    receiver: String,
    transport: Transport,
    signal: &'static str,
}

impl ReceiverMetrics {
    pub(super) fn record_accepted(&self, spans: usize) {
        self.accepted.inc_by(spans as u64);
    }

    pub(super) fn record_refused(&self, spans: usize, error: &PipelineError) {
        self.record_refused_as(spans, error.reason_label());
    }

    /// Counts a request refused because `max_concurrent_requests` were in flight.
    pub(super) fn record_too_many_requests(&self) {
        self.record_refused_as(0, TOO_MANY_REQUESTS);
    }

    fn record_refused_as(&self, spans: usize, reason: &str) {
        self.refused.inc_by(spans as u64);
        self.refused_requests
            .with_label_values(&[
                self.receiver.as_str(),
                self.transport.label(),
                self.signal,
                reason,
            ])
            .inc();
    }

    /// Counts `strings` string fields of one request corrected to valid UTF-8, and logs
    /// it at most once per [`UTF8_LOG_INTERVAL`] (with the field path of the first, and
    /// the count since the last log line).
    pub(super) fn record_utf8_corrected(&self, strings: usize, first_path: &str) {
        self.utf8_corrected.inc_by(strings as u64);
        let mut logged = self
            .utf8_logged
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        let since_last = match *logged {
            Some((at, pending)) if now.duration_since(at) < UTF8_LOG_INTERVAL => {
                *logged = Some((at, pending + strings as u64));
                return;
            }
            Some((_, pending)) => pending + strings as u64,
            None => strings as u64,
        };
        *logged = Some((now, 0));
        tracing::warn!(
            event = "receiver.utf8_corrected",
            receiver = %self.receiver,
            transport = self.transport.label(),
            signal = self.signal,
            field = first_path,
            strings = since_last,
            "string fields that were not valid UTF-8 were accepted with U+FFFD in place of \
             the invalid bytes; fix the sender's encoding",
        );
    }

    /// The gauge of requests in flight on this receiver and transport.
    pub(super) fn in_flight(&self) -> &IntGauge {
        &self.in_flight
    }
}

/// Test helper: the sum of the counters of `family` in `registry` whose label `label` is
/// `value`.
#[cfg(test)]
pub(crate) fn labelled_counter(
    registry: &prometheus::Registry,
    family: &str,
    label: &str,
    value: &str,
) -> u64 {
    registry
        .gather()
        .iter()
        .filter(|gathered| gathered.name() == family)
        .flat_map(|gathered| gathered.get_metric())
        .filter(|metric| {
            metric
                .get_label()
                .iter()
                .any(|pair| pair.name() == label && pair.value() == value)
        })
        .map(|metric| metric.get_counter().get_value() as u64)
        .sum()
}
