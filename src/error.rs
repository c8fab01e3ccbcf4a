//! Pipeline errors and the one mapping from them to gRPC and HTTP answers.
//!
//! Receivers return `Result<_, PipelineError>` and never build a `tonic::Status` or an
//! HTTP status themselves: [`PipelineError::grpc_status`] and
//! [`PipelineError::http_answer`] are the only places where an outcome becomes a wire
//! status, so both transports always answer alike. The conversions have no side effects;
//! counting and logging happen where the error is handled.
//!
//! Retryable refusals are chosen so that every common OTLP client retries them: gRPC
//! `UNAVAILABLE` (which the Collector's exporter and the SDKs retry without needing a
//! `RetryInfo`, though one is attached) and HTTP 503 with `Retry-After`.

use std::time::Duration;

use http::StatusCode;

/// The `Retry-After` (HTTP) and `RetryInfo` (gRPC) hint given with every retryable
/// refusal: full pipelines, the memory limit, requests in flight, draining. One second
/// is what the Collector's receivers suggest, and short enough that senders' own
/// backoff dominates.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Why a request was not accepted into the pipeline.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The pipeline has no room right now; the client should retry after `retry_after`.
    #[error("the gateway is overloaded ({reason}); retry after {retry_after:?}")]
    Overloaded {
        /// What is full.
        reason: &'static str,
        /// A hint for the client's next attempt.
        retry_after: Duration,
    },
    /// The gateway is draining for shutdown and takes no new data.
    #[error("the gateway is shutting down; send to another replica or retry later")]
    ShuttingDown,
    /// The payload could not be decoded or violates OTLP (a client bug: do not retry).
    #[error("malformed request: {}", bounded(.0))]
    Malformed(String),
    /// The body is larger than the configured limit.
    #[error(
        "request body larger than {limit} bytes; send smaller batches or raise max_request_body_size"
    )]
    TooLarge {
        /// The limit in bytes, after decompression.
        limit: usize,
    },
    /// A gRPC message is larger than the receiver's `max_recv_msg_size_mib` (after
    /// decompression). Not retryable: the same message can never be taken.
    #[error(
        "message of {size} larger than the gRPC receiver's limit of {limit} bytes; send smaller \
         batches or raise max_recv_msg_size_mib"
    )]
    MessageTooLarge {
        /// The limit in bytes.
        limit: usize,
        /// The message's size, as far as known (`"unknown size"` once decompressed past
        /// the limit).
        size: String,
    },
    /// Decoding the request would hold more memory than the memory limiter's soft limit
    /// allows even with nothing else held: it can never be admitted, so retrying is
    /// pointless.
    #[error(
        "the request needs about {needed} bytes of memory to decode, more than the memory \
         limit allows ({limit} bytes below the spike margin); send smaller batches (or \
         protobuf rather than JSON) or raise processors.memory_limiter.limit_mib"
    )]
    ExceedsMemoryLimit {
        /// The bytes the request needs while it is decoded.
        needed: usize,
        /// The soft limit in bytes.
        limit: usize,
    },
    /// The `Content-Type` is not one OTLP/HTTP accepts.
    #[error(
        "unsupported content type {:?}; use application/x-protobuf or application/json",
        bounded(.0)
    )]
    UnsupportedMediaType(String),
    /// The `Content-Encoding` is not one the receiver decodes.
    #[error(
        "unsupported content encoding {:?}; use gzip, zstd, deflate, snappy, lz4 or none",
        bounded(.0)
    )]
    UnsupportedEncoding(String),
    /// The signal has no pipeline in this configuration.
    #[error("no {0} pipeline is configured on this gateway")]
    NoPipeline(&'static str),
    /// The request carries no valid credentials for the receiver's authenticator. Not
    /// retryable; the message names no credential.
    #[error(
        "authentication failed: send valid credentials in the authorization header (gRPC \
         metadata), e.g. OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20<token>"
    )]
    Unauthenticated,
}

/// A bounded label value naming the kind of refusal, for metrics.
/// The most bytes of a client's error detail (a parser's message, which quotes the
/// request's structure) that an answer or a log line carries.
pub const MAX_DETAIL_BYTES: usize = 512;

/// `detail` cut to [`MAX_DETAIL_BYTES`] on a character boundary, saying how much was cut.
fn bounded(detail: &str) -> std::borrow::Cow<'_, str> {
    if detail.len() <= MAX_DETAIL_BYTES {
        return std::borrow::Cow::Borrowed(detail);
    }
    let mut end = MAX_DETAIL_BYTES;
    while !detail.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!(
        "{}… ({} more bytes)",
        &detail[..end],
        detail.len() - end
    ))
}

impl PipelineError {
    /// Every value [`PipelineError::reason_label`] can return.
    pub const REASON_LABELS: [&'static str; 8] = [
        "overloaded",
        "shutting_down",
        "malformed",
        "too_large",
        "unsupported_media_type",
        "unsupported_encoding",
        "no_pipeline",
        "unauthenticated",
    ];

    /// The `reason` label for refusal counters: a closed set.
    pub fn reason_label(&self) -> &'static str {
        match self {
            Self::Overloaded { .. } => "overloaded",
            Self::ShuttingDown => "shutting_down",
            Self::Malformed(_) => "malformed",
            Self::TooLarge { .. }
            | Self::MessageTooLarge { .. }
            | Self::ExceedsMemoryLimit { .. } => "too_large",
            Self::UnsupportedMediaType(_) => "unsupported_media_type",
            Self::UnsupportedEncoding(_) => "unsupported_encoding",
            Self::NoPipeline(_) => "no_pipeline",
            Self::Unauthenticated => "unauthenticated",
        }
    }

    /// True when the client may send the same data again later.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Overloaded { .. } | Self::ShuttingDown)
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Overloaded { retry_after, .. } => Some(*retry_after),
            Self::ShuttingDown => Some(RETRY_AFTER),
            _ => None,
        }
    }

    /// The gRPC status for this outcome.
    ///
    /// Retryable refusals are `UNAVAILABLE` with a `RetryInfo` detail carrying the delay.
    pub fn grpc_status(&self) -> tonic::Status {
        use tonic_types::{ErrorDetails, StatusExt};
        let message = self.to_string();
        match self {
            Self::Overloaded { .. } | Self::ShuttingDown => {
                let details = ErrorDetails::with_retry_info(self.retry_after());
                tonic::Status::with_error_details(tonic::Code::Unavailable, message, details)
            }
            Self::Malformed(_) | Self::UnsupportedMediaType(_) | Self::UnsupportedEncoding(_) => {
                tonic::Status::invalid_argument(message)
            }
            // RESOURCE_EXHAUSTED without RetryInfo: OTLP clients do not retry it.
            Self::TooLarge { .. }
            | Self::MessageTooLarge { .. }
            | Self::ExceedsMemoryLimit { .. } => tonic::Status::resource_exhausted(message),
            Self::NoPipeline(_) => tonic::Status::unimplemented(message),
            Self::Unauthenticated => tonic::Status::unauthenticated(message),
        }
    }

    /// The HTTP status, the gRPC code carried in the OTLP `Status` body, and the
    /// `Retry-After` value in whole seconds (at least 1) when the client should retry.
    pub fn http_answer(&self) -> HttpAnswer {
        let (status, code) = match self {
            Self::Overloaded { .. } | Self::ShuttingDown => {
                (StatusCode::SERVICE_UNAVAILABLE, tonic::Code::Unavailable)
            }
            Self::Malformed(_) | Self::UnsupportedEncoding(_) => {
                (StatusCode::BAD_REQUEST, tonic::Code::InvalidArgument)
            }
            Self::TooLarge { .. }
            | Self::MessageTooLarge { .. }
            | Self::ExceedsMemoryLimit { .. } => {
                (StatusCode::PAYLOAD_TOO_LARGE, tonic::Code::InvalidArgument)
            }
            Self::UnsupportedMediaType(_) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                tonic::Code::InvalidArgument,
            ),
            Self::NoPipeline(_) => (StatusCode::NOT_FOUND, tonic::Code::Unimplemented),
            // As the Collector's receiver maps Unauthenticated.
            Self::Unauthenticated => (StatusCode::UNAUTHORIZED, tonic::Code::Unauthenticated),
        };
        HttpAnswer {
            status,
            grpc_code: code as i32,
            retry_after_secs: self
                .retry_after()
                .map(|d| d.as_secs_f64().ceil().max(1.0) as u64),
        }
    }
}

/// How an error is answered over OTLP/HTTP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpAnswer {
    /// The HTTP status code.
    pub status: StatusCode,
    /// The `google.rpc.Status.code` written in the body.
    pub grpc_code: i32,
    /// The `Retry-After` header in seconds, for retryable refusals.
    pub retry_after_secs: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_types::StatusExt;

    /// Scenario: an overload refusal is converted for both transports.
    /// Guarantees: gRPC gets UNAVAILABLE with a RetryInfo detail, HTTP gets 503 with a
    /// Retry-After of at least one second: codes that OTLP clients retry.
    #[test]
    fn overload_is_retryable_on_both_transports() {
        let error = PipelineError::Overloaded {
            reason: "pipeline queue full",
            retry_after: Duration::from_millis(300),
        };
        let status = error.grpc_status();
        assert_eq!(status.code(), tonic::Code::Unavailable);
        let retry = status
            .get_details_retry_info()
            .expect("retry info attached");
        assert_eq!(retry.retry_delay, Some(Duration::from_millis(300)));
        let answer = error.http_answer();
        assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(answer.retry_after_secs, Some(1));
        assert!(error.is_retryable());
    }

    /// Scenario: client mistakes are converted.
    /// Guarantees: they are not retryable and map to INVALID_ARGUMENT / 400, 413, 415.
    #[test]
    fn client_mistakes_are_permanent() {
        let malformed = PipelineError::Malformed("truncated".into());
        assert_eq!(malformed.grpc_status().code(), tonic::Code::InvalidArgument);
        assert_eq!(malformed.http_answer().status, StatusCode::BAD_REQUEST);
        assert_eq!(malformed.http_answer().retry_after_secs, None);
        assert!(!malformed.is_retryable());
        let large = PipelineError::TooLarge { limit: 10 };
        assert_eq!(large.http_answer().status, StatusCode::PAYLOAD_TOO_LARGE);
        let media = PipelineError::UnsupportedMediaType("text/plain".into());
        assert_eq!(
            media.http_answer().status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE
        );
    }

    /// Scenario: one error of every kind.
    /// Guarantees: each reason label is one of `REASON_LABELS`, and no two kinds share one,
    /// so refusal series can be created up front.
    #[test]
    fn reason_labels_are_closed() {
        let errors = [
            PipelineError::Overloaded {
                reason: "x",
                retry_after: Duration::from_secs(1),
            },
            PipelineError::ShuttingDown,
            PipelineError::Malformed("x".into()),
            PipelineError::TooLarge { limit: 1 },
            PipelineError::UnsupportedMediaType("x".into()),
            PipelineError::UnsupportedEncoding("x".into()),
            PipelineError::NoPipeline("traces"),
            PipelineError::Unauthenticated,
        ];
        let labels: Vec<&str> = errors.iter().map(PipelineError::reason_label).collect();
        assert_eq!(labels, PipelineError::REASON_LABELS);
    }
}
