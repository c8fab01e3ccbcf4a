//! What one attempt, one delivery and one item's settlement came to.

use std::time::Duration;

use super::error::ExportError;
use super::metrics::{FailureReason, RetryErrorType};

/// The destination accepted the request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Accepted {
    /// Items of the request the destination reported it did not take (OTLP
    /// `partial_success.rejected_*`, or a remote-write partial write); 0 when none.
    pub(crate) rejected: i64,
    /// The destination's message about them (empty when none).
    pub(crate) message: String,
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
    /// Trying again will not help: the request is dropped.
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

    /// The per-attempt `timeout` elapsed: retryable.
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

/// How one request's delivery (its attempts and retries) ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The destination accepted the request (possibly rejecting some items).
    Delivered(Accepted),
    /// Not delivered, for a reason other than shutdown.
    Failed {
        /// `Permanent` or `RetriesExhausted`.
        reason: FailureReason,
        /// The last error, for the log and the caller.
        message: String,
    },
    /// The shutdown deadline came first.
    ShutDown,
    /// The sending queue was reclaimed while the request waited to be retried: it goes back,
    /// uncounted, to whoever reclaimed the queue (a load balancer re-routes it to the
    /// backend's successor). Only deliveries that allow it see this
    /// ([`retry::Reclaim::HandBack`](super::retry::Reclaim)).
    HandedBack,
}

/// What the delivery of one queued item (one or more requests) came to, once every item in
/// it was counted.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Settled {
    /// The first failure other than shutdown, if any.
    pub(crate) failed: Option<(FailureReason, String)>,
    /// Items of requests that failed (other than at shutdown).
    pub(crate) failed_items: usize,
    /// Items not delivered because the shutdown deadline came first.
    pub(crate) shutdown_items: usize,
}

impl Settled {
    /// Adds one request of `items` items that ended in `outcome`.
    pub(crate) fn add(&mut self, items: usize, outcome: Outcome) {
        match outcome {
            Outcome::Delivered(_) => {}
            Outcome::Failed { reason, message } => {
                self.failed_items += items;
                if self.failed.is_none() {
                    self.failed = Some((reason, message));
                }
            }
            Outcome::ShutDown => self.shutdown_items += items,
            // Not this exporter's any more: whoever reclaimed them counts them.
            Outcome::HandedBack => {}
        }
    }

    /// True once the shutdown deadline stopped delivery: a consumer stops taking items.
    pub(crate) fn hit_deadline(&self) -> bool {
        self.shutdown_items > 0
    }

    /// The result an inline export returns: a failure first, then a shutdown, else `Ok`.
    ///
    /// # Errors
    ///
    /// [`ExportError::Failed`] when a request failed; [`ExportError::ShutDown`] when the
    /// deadline came first.
    pub(crate) fn into_result(self) -> Result<(), ExportError> {
        match self.failed {
            Some((reason, message)) => Err(ExportError::Failed {
                reason,
                items: self.failed_items,
                message,
            }),
            None if self.shutdown_items > 0 => Err(ExportError::ShutDown {
                items: self.shutdown_items,
            }),
            None => Ok(()),
        }
    }
}
