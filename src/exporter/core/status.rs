//! How a destination's answer is classified, one rule per protocol family: retryable (with
//! its bounded error type and the server's throttle hint) or permanent.
//!
//! | family | retryable | permanent |
//! |---|---|---|
//! | OTLP/gRPC (Collector `otlpexporter`) | `CANCELLED`, `DEADLINE_EXCEEDED`, `ABORTED`, `OUT_OF_RANGE`, `UNAVAILABLE`, `DATA_LOSS`; `RESOURCE_EXHAUSTED` only with `RetryInfo`; a local transport failure whatever its code | everything else |
//! | OTLP/HTTP (Collector `otlphttpexporter`) | 429, 502, 503, 504 | every other non-2xx, 500 included |
//! | remote write (spec: MUST retry 5xx, MAY retry 429) | 429 and every 5xx | every other non-2xx |
//!
//! The hint is gRPC `RetryInfo.retry_delay` or HTTP `Retry-After`; the retry loop waits at
//! least that long. The message keeps the start of the answer's body (the receiver's own
//! words, which the spec asks senders to log).

use std::error::Error as _;
use std::ops::RangeInclusive;
use std::time::Duration;

use http::StatusCode;
use tonic::{Code, Status};
use tonic_types::StatusExt;

use super::http::status_message;
use super::metrics::RetryErrorType;
use super::outcome::AttemptError;

/// How much of an OTLP/HTTP error body goes into the error message.
const OTLP_BODY_EXCERPT: usize = 256;

/// How much of a remote-write error body goes into the error message (the receiver's
/// message is logged as it wrote it).
pub(crate) const REMOTE_WRITE_BODY_EXCERPT: usize = 1024;

/// The answer rule of an HTTP protocol family: 429 and the 5xx statuses in `retryable_5xx`
/// are retryable, with the `Retry-After` hint; every other non-2xx is permanent.
pub(crate) struct HttpRule {
    retryable_5xx: RangeInclusive<u16>,
    /// How much of an error body goes into the error message.
    body_excerpt: usize,
}

/// OTLP/HTTP: 429, 502, 503 and 504 are retryable, everything else is permanent.
pub(crate) const OTLP_HTTP: HttpRule = HttpRule {
    retryable_5xx: 502..=504,
    body_excerpt: OTLP_BODY_EXCERPT,
};

/// Remote write: 429 and every 5xx are retryable, every other status is permanent.
pub(crate) const REMOTE_WRITE: HttpRule = HttpRule {
    retryable_5xx: 500..=599,
    body_excerpt: REMOTE_WRITE_BODY_EXCERPT,
};

/// Classifies a failed OTLP/gRPC call.
///
/// A status that tonic synthesized from a local transport error (it has a `source`; a
/// status sent by the server never does) is a transport failure, retryable whatever its
/// code.
pub(crate) fn grpc(status: &Status) -> AttemptError {
    let message = format!("{:?}: {}", status.code(), status.message());
    if status.source().is_some() {
        return AttemptError::transport(message);
    }
    let retry_info = status.get_details_retry_info();
    let throttle = retry_info.as_ref().and_then(|info| info.retry_delay);
    let error_type = match status.code() {
        Code::Unavailable => RetryErrorType::Unavailable,
        Code::DeadlineExceeded => RetryErrorType::DeadlineExceeded,
        Code::Cancelled | Code::Aborted | Code::OutOfRange | Code::DataLoss => {
            RetryErrorType::Other
        }
        Code::ResourceExhausted if retry_info.is_some() => RetryErrorType::ResourceExhausted,
        _ => return AttemptError::Permanent { message },
    };
    AttemptError::Retryable {
        error_type,
        throttle,
        message,
    }
}

impl HttpRule {
    /// Classifies a non-2xx answer by this rule; the message keeps the start of `body`.
    pub(crate) fn classify(
        &self,
        status: StatusCode,
        retry_after: Option<Duration>,
        body: &[u8],
    ) -> AttemptError {
        let message = status_message(status, body, self.body_excerpt);
        let error_type = match status.as_u16() {
            429 => RetryErrorType::Http429,
            code if self.retryable_5xx.contains(&code) => RetryErrorType::Http5xx,
            _ => return AttemptError::Permanent { message },
        };
        AttemptError::Retryable {
            error_type,
            throttle: retry_after,
            message,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;
    use tonic_types::ErrorDetails;

    /// `Some((error_type, throttle))` when retryable, `None` when permanent.
    fn retryable(error: AttemptError) -> Option<(RetryErrorType, Option<Duration>)> {
        match error {
            AttemptError::Retryable {
                error_type,
                throttle,
                ..
            } => Some((error_type, throttle)),
            AttemptError::Permanent { .. } => None,
        }
    }

    /// Scenario: every HTTP status class either HTTP family can meet, with a `Retry-After`
    /// hint, classified by both the OTLP/HTTP and the remote-write rule.
    /// Guarantees: OTLP/HTTP retries exactly 429, 502, 503, 504; remote write retries 429
    /// and every 5xx (500, 501, 505, 507, 599 included); both refuse every 4xx but 429 and
    /// every 3xx; a retryable answer carries the hint and the right error type; the message
    /// holds the status and the receiver's words.
    #[test]
    fn http_table() {
        let hint = Some(Duration::from_secs(3));
        let http5xx = Some((RetryErrorType::Http5xx, hint));
        let http429 = Some((RetryErrorType::Http429, hint));
        // (status, OTLP/HTTP, remote write)
        let table = [
            (301, None, None),
            (400, None, None),
            (401, None, None),
            (403, None, None),
            (404, None, None),
            (409, None, None),
            (413, None, None),
            (415, None, None),
            (429, http429, http429),
            (500, None, http5xx),
            (501, None, http5xx),
            (502, http5xx, http5xx),
            (503, http5xx, http5xx),
            (504, http5xx, http5xx),
            (505, None, http5xx),
            (507, None, http5xx),
            (599, None, http5xx),
        ];
        for (code, otlp, rw) in table {
            let status = StatusCode::from_u16(code).unwrap();
            assert_eq!(
                retryable(OTLP_HTTP.classify(status, hint, b"x")),
                otlp,
                "otlp {code}"
            );
            assert_eq!(
                retryable(REMOTE_WRITE.classify(status, hint, b"x")),
                rw,
                "rw {code}"
            );
        }
        match REMOTE_WRITE.classify(StatusCode::BAD_REQUEST, None, b"out of order sample\n") {
            AttemptError::Permanent { message } => {
                assert_eq!(message, "HTTP 400 Bad Request: out of order sample");
            }
            other => panic!("{other:?}"),
        }
        // The excerpt is bounded per family.
        let long = vec![b'a'; 4096];
        let otlp_len = match OTLP_HTTP.classify(StatusCode::BAD_REQUEST, None, &long) {
            AttemptError::Permanent { message } => message.len(),
            other => panic!("{other:?}"),
        };
        let rw_len = match REMOTE_WRITE.classify(StatusCode::BAD_REQUEST, None, &long) {
            AttemptError::Permanent { message } => message.len(),
            other => panic!("{other:?}"),
        };
        let prefix = "HTTP 400 Bad Request: ".len();
        assert_eq!(otlp_len, prefix + OTLP_BODY_EXCERPT);
        assert_eq!(rw_len, prefix + REMOTE_WRITE_BODY_EXCERPT);
    }

    /// Scenario: every gRPC code, as a server would send it, with and without `RetryInfo`;
    /// and a status tonic built from a local connection error.
    /// Guarantees: the Collector's retryable set is retried with the right error type;
    /// RESOURCE_EXHAUSTED is retried only with RetryInfo; RetryInfo's delay becomes the
    /// throttle hint of any retryable code; the rest is permanent; a local transport
    /// failure is retried as `transport`.
    #[test]
    fn grpc_table() {
        use RetryErrorType as T;
        let table = [
            (Code::Ok, None),
            (Code::Cancelled, Some(T::Other)),
            (Code::Unknown, None),
            (Code::InvalidArgument, None),
            (Code::DeadlineExceeded, Some(T::DeadlineExceeded)),
            (Code::NotFound, None),
            (Code::AlreadyExists, None),
            (Code::PermissionDenied, None),
            (Code::ResourceExhausted, None),
            (Code::FailedPrecondition, None),
            (Code::Aborted, Some(T::Other)),
            (Code::OutOfRange, Some(T::Other)),
            (Code::Unimplemented, None),
            (Code::Internal, None),
            (Code::Unavailable, Some(T::Unavailable)),
            (Code::DataLoss, Some(T::Other)),
            (Code::Unauthenticated, None),
        ];
        for (code, expected) in table {
            assert_eq!(
                retryable(grpc(&Status::new(code, "x"))),
                expected.map(|t| (t, None)),
                "{code:?}"
            );
        }
        let delay = Some(Duration::from_millis(40));
        for (code, expected) in [
            (Code::ResourceExhausted, Some(T::ResourceExhausted)),
            (Code::Unavailable, Some(T::Unavailable)),
            (Code::InvalidArgument, None),
        ] {
            let status =
                Status::with_error_details(code, "slow down", ErrorDetails::with_retry_info(delay));
            assert_eq!(
                retryable(grpc(&status)),
                expected.map(|t| (t, delay)),
                "{code:?} with RetryInfo"
            );
        }
        let local = Status::from_error(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "connection refused",
        )));
        assert_eq!(retryable(grpc(&local)), Some((T::Transport, None)));
    }
}
