//! The `debug` exporter: writes what it receives to the log and never fails.

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

use crate::config::Verbosity;
use crate::pipeline::TraceBatch;

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

    /// Logs `batch`. A request that does not decode is logged as such; this never fails.
    pub(crate) fn export(&self, batch: &TraceBatch) {
        let exporter = self.exporter.as_str();
        let resource_spans = RequestSkeleton::decode(batch.request.clone())
            .map(|s| s.resource_spans.len())
            .unwrap_or(0);
        tracing::info!(
            event = "exporter.debug",
            exporter,
            spans = batch.span_count,
            resource_spans,
            bytes = batch.byte_len(),
        );
        if self.verbosity == Verbosity::Basic {
            return;
        }
        let request = match ExportTraceServiceRequest::decode(batch.request.clone()) {
            Ok(request) => request,
            Err(error) => {
                tracing::warn!(event = "exporter.debug.undecodable", exporter, error = %error);
                return;
            }
        };
        for rs in &request.resource_spans {
            for ss in &rs.scope_spans {
                for span in &ss.spans {
                    if self.verbosity == Verbosity::Detailed {
                        tracing::info!(
                            event = "exporter.debug.span",
                            exporter,
                            trace_id = %hex(&span.trace_id),
                            span_id = %hex(&span.span_id),
                            parent_span_id = %hex(&span.parent_span_id),
                            name = %span.name,
                            resource = ?rs.resource,
                            resource_schema_url = %rs.schema_url,
                            scope = ?ss.scope,
                            scope_schema_url = %ss.schema_url,
                            span = ?span,
                        );
                    } else {
                        tracing::info!(
                            event = "exporter.debug.span",
                            exporter,
                            trace_id = %hex(&span.trace_id),
                            span_id = %hex(&span.span_id),
                            name = %span.name,
                        );
                    }
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
            DebugExporter::new("debug".to_owned(), v).export(&batch);
        }
    }
}
