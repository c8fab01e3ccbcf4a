//! The `debug` exporter: writes what it receives (traces or metrics) to the log and never
//! fails.

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use tracing::field;

use crate::config::Verbosity;
#[cfg(test)]
use crate::payload::TraceBatch;

/// Logs batches at the configured verbosity, as `exporter.debug` events.
#[derive(Clone, Debug)]
pub(crate) struct DebugExporter {
    exporter: String,
    verbosity: Verbosity,
}

/// Just the top-level `resource_spans` of a request, kept as bytes: enough to count them
/// without decoding the spans (what `basic` needs).
#[derive(Clone, PartialEq, Message)]
struct RequestSkeleton {
    #[prost(bytes = "bytes", repeated, tag = "1")]
    resource_spans: Vec<Bytes>,
}

impl DebugExporter {
    /// A debug exporter labelled `exporter` in its events.
    pub(crate) fn new(exporter: String, verbosity: Verbosity) -> Self {
        Self {
            exporter,
            verbosity,
        }
    }

    /// The exporter id, as written.
    pub(crate) fn exporter(&self) -> &str {
        &self.exporter
    }

    /// Logs one encoded export request of `signal` (`traces` or `metrics`) holding `items`
    /// spans or data points. A request that does not decode is logged as such; this never
    /// fails.
    pub(crate) fn export(&self, signal: &str, request: &Bytes, items: usize) {
        if signal == "metrics" {
            self.export_metrics(request, items);
        } else {
            self.export_traces(request, items);
        }
    }

    /// The decoded request when the verbosity asks for a line per item, decoded only then;
    /// `None` at `basic`, and when the bytes do not decode (logged).
    fn per_item<T>(&self, decode: impl FnOnce() -> Result<T, prost::DecodeError>) -> Option<T> {
        if self.verbosity == Verbosity::Basic {
            return None;
        }
        decode()
            .inspect_err(|error| {
                tracing::warn!(
                    event = "exporter.debug.undecodable",
                    exporter = self.exporter.as_str(),
                    error = %error,
                );
            })
            .ok()
    }

    /// One summary line per batch; at `normal` and `detailed`, one line per metric.
    fn export_metrics(&self, request: &Bytes, data_points: usize) {
        use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
        let exporter = self.exporter.as_str();
        let decoded = ExportMetricsServiceRequest::decode(request.clone());
        let (resource_metrics, metrics) = decoded.as_ref().map_or((0, 0), |r| {
            let metrics = r
                .resource_metrics
                .iter()
                .flat_map(|rm| &rm.scope_metrics)
                .map(|sm| sm.metrics.len())
                .sum();
            (r.resource_metrics.len(), metrics)
        });
        tracing::info!(
            event = "exporter.debug.metrics",
            exporter,
            resource_metrics,
            metrics,
            data_points,
            bytes = request.len(),
        );
        let Some(request) = self.per_item(|| decoded) else {
            return;
        };
        let detailed = self.verbosity == Verbosity::Detailed;
        for rm in &request.resource_metrics {
            for sm in &rm.scope_metrics {
                for metric in &sm.metrics {
                    let points = crate::otlp::metric_points(metric);
                    // The `detailed` fields are `None`, and so left out, at `normal`.
                    tracing::info!(
                        event = "exporter.debug.metric",
                        exporter,
                        name = %metric.name,
                        unit = %metric.unit,
                        data_points = points,
                        resource = detailed.then(|| field::debug(&rm.resource)),
                        scope = detailed.then(|| field::debug(&sm.scope)),
                        metric = detailed.then(|| field::debug(metric)),
                    );
                }
            }
        }
    }

    fn export_traces(&self, request: &Bytes, spans: usize) {
        let exporter = self.exporter.as_str();
        let resource_spans = RequestSkeleton::decode(request.clone())
            .map(|s| s.resource_spans.len())
            .unwrap_or(0);
        tracing::info!(
            event = "exporter.debug",
            exporter,
            spans,
            resource_spans,
            bytes = request.len(),
        );
        let Some(request) = self.per_item(|| ExportTraceServiceRequest::decode(request.clone()))
        else {
            return;
        };
        let detailed = self.verbosity == Verbosity::Detailed;
        for rs in &request.resource_spans {
            for ss in &rs.scope_spans {
                for span in &ss.spans {
                    // The `detailed` fields are `None`, and so left out, at `normal`.
                    tracing::info!(
                        event = "exporter.debug.span",
                        exporter,
                        trace_id = %hex(&span.trace_id),
                        span_id = %hex(&span.span_id),
                        parent_span_id = detailed.then(|| field::display(hex(&span.parent_span_id))),
                        name = %span.name,
                        resource = detailed.then(|| field::debug(&rs.resource)),
                        resource_schema_url = detailed.then(|| field::display(&rs.schema_url)),
                        scope = detailed.then(|| field::debug(&ss.scope)),
                        scope_schema_url = detailed.then(|| field::display(&ss.schema_url)),
                        span = detailed.then(|| field::debug(span)),
                    );
                }
            }
        }
    }
}

/// Lowercase hex, as OTLP/JSON writes ids.
fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;

    /// Scenario: ids of 16 and 8 bytes, and an empty id.
    /// Guarantees: rendered as lowercase hex, empty as empty.
    #[test]
    fn hex_ids() {
        assert_eq!(hex(&[0x01, 0xab, 0xff]), "01abff");
        assert_eq!(hex(&[]), "");
    }

    /// Scenario: a batch whose bytes are not a request, at every verbosity.
    /// Guarantees: the debug exporter does not panic or fail on it.
    #[test]
    fn undecodable_batches_are_logged_not_fatal() {
        let batch = TraceBatch::new(Bytes::from_static(&[0xff, 0xff, 0xff]), 1);
        for v in [Verbosity::Basic, Verbosity::Normal, Verbosity::Detailed] {
            for signal in ["traces", "metrics"] {
                DebugExporter::new("debug".to_owned(), v).export(
                    signal,
                    &batch.request,
                    batch.span_count,
                );
            }
        }
    }
}
