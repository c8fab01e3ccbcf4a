//! What a transport does with one attempt, and how its failures are classified.

use std::time::Duration;

use bytes::Bytes;

use super::metrics::RetryErrorType;
use super::otlp_grpc::GrpcTransport;
use super::otlp_http::HttpTransport;

/// The destination accepted the request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Accepted {
    /// `partial_success.rejected_spans` of the response (0 when absent).
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

/// A network transport of OTLP trace requests.
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
    /// Makes one attempt to deliver `request` (an encoded `ExportTraceServiceRequest`),
    /// bounded by the per-attempt timeout.
    pub(crate) async fn send(&self, request: Bytes) -> Result<Accepted, AttemptError> {
        match self {
            Transport::Grpc(t) => t.send(request).await,
            Transport::Http(t) => t.send(request).await,
        }
    }
}
