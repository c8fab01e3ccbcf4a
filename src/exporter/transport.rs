//! What a transport does with one attempt, and how its failures are classified.

use std::time::Duration;

use bytes::Bytes;

use super::metrics::RetryErrorType;
use super::otlp_grpc::GrpcTransport;
use super::otlp_http::HttpTransport;

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
    pub(crate) fn of<P: crate::payload::Payload>() -> Self {
        if P::SIGNAL == crate::config::Signal::Metrics {
            Self::Metrics
        } else {
            Self::Traces
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

/// The destination accepted the request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Accepted {
    /// `partial_success.rejected_spans` (or `rejected_data_points`) of the response (0 when
    /// absent).
    pub(crate) rejected_spans: i64,
    /// `partial_success.error_message` of the response (empty when absent).
    pub(crate) error_message: String,
}

/// Why one attempt failed. The message is for logs and callers only, never a metric label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AttemptError {
    /// Trying again may succeed.
    Retryable {
        /// The bounded class, for `tailgate_exporter_retries_total`.
        error_type: RetryErrorType,
        /// The server's throttle hint (gRPC `RetryInfo`, HTTP `Retry-After`).
        throttle: Option<Duration>,
        /// What went wrong.
        message: String,
    },
    /// Trying again will not help: the batch is dropped.
    Permanent {
        /// What went wrong.
        message: String,
    },
}

impl AttemptError {
    /// The request did not get an answer (connect or I/O failure): retryable.
    pub(crate) fn transport(message: String) -> Self {
        AttemptError::Retryable {
            error_type: RetryErrorType::Transport,
            throttle: None,
            message,
        }
    }

    /// The per-attempt `timeout` elapsed.
    pub(crate) fn timed_out(timeout: Duration) -> Self {
        AttemptError::Retryable {
            error_type: RetryErrorType::DeadlineExceeded,
            throttle: None,
            message: format!(
                "export attempt timed out after {}",
                humantime::format_duration(timeout)
            ),
        }
    }
}

/// A network transport of OTLP export requests of one signal.
#[expect(
    clippy::large_enum_variant,
    reason = "one per exporter, built once and held in an Arc"
)]
pub(crate) enum Transport {
    /// OTLP/gRPC.
    Grpc(GrpcTransport),
    /// OTLP/HTTP (protobuf).
    Http(HttpTransport),
}

impl Transport {
    /// Makes one attempt to deliver `request` (an encoded export request of the signal),
    /// bounded by the per-attempt timeout.
    pub(crate) async fn send(&self, request: Bytes) -> Result<Accepted, AttemptError> {
        match self {
            Transport::Grpc(t) => t.send(request).await,
            Transport::Http(t) => t.send(request).await,
        }
    }
}
