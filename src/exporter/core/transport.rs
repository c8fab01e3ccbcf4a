//! One attempt at delivering one request: what every transport provides.

use std::future::Future;

use super::outcome::{Accepted, AttemptError};

/// Makes one attempt to deliver a request, bounded by its per-attempt timeout, and says
/// how the destination answered. Retries, backoff and accounting are the caller's (the
/// retry loop in `retry.rs`); a transport only classifies the answer (with `status.rs`).
pub(crate) trait Transport: Send + Sync + 'static {
    /// What one request is: encoded bytes for OTLP, series to encode for remote write.
    type Request: Send + Sync;

    /// One attempt. `attempt` counts the attempts made for this request before this one (0
    /// for the first), for transports that tell the destination (remote write's
    /// `Retry-Attempt`).
    ///
    /// # Errors
    ///
    /// [`AttemptError::Retryable`] when trying again may succeed (the server's throttle
    /// hint included); [`AttemptError::Permanent`] otherwise.
    ///
    /// # Cancel safety
    ///
    /// Cancelling abandons the attempt; the request may or may not have reached the
    /// destination.
    fn send(
        &self,
        request: &Self::Request,
        attempt: u32,
    ) -> impl Future<Output = Result<Accepted, AttemptError>> + Send;
}
