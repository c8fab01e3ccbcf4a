//! What the OTLP transports put on and read off the wire besides the request bytes: which
//! signal's service or path they post to, and the response's partial success.

use crate::config::Signal;
use crate::payload::Payload;

/// The signal a transport carries: which service method or URL path it posts to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SignalKind {
    /// `ExportTraceServiceRequest`s.
    Traces,
    /// `ExportMetricsServiceRequest`s.
    Metrics,
}

impl SignalKind {
    /// The signal of payload `P`.
    pub(crate) fn of<P: Payload>() -> Self {
        match P::SIGNAL {
            Signal::Metrics => Self::Metrics,
            Signal::Traces | Signal::Logs => Self::Traces,
        }
    }
}

/// The `partial_success` of any OTLP export response: `ExportTraceServiceResponse` and
/// `ExportMetricsServiceResponse` share its layout (field 1 the rejected count, field 2 the
/// message), so one message decodes both.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ExportResponse {
    /// `partial_success`.
    #[prost(message, optional, tag = "1")]
    pub(crate) partial_success: Option<PartialSuccess>,
}

/// `ExportTracePartialSuccess` / `ExportMetricsPartialSuccess`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct PartialSuccess {
    /// `rejected_spans` / `rejected_data_points`.
    #[prost(int64, tag = "1")]
    pub(crate) rejected: i64,
    /// `error_message`.
    #[prost(string, tag = "2")]
    pub(crate) error_message: String,
}
