//! The exporter's log events: state transitions and rate-limited losses, never one line per
//! request.
//!
//! | event | level | when |
//! |---|---|---|
//! | `exporter.started` | info | the exporter was built |
//! | `exporter.retry` | warn | the destination starts failing retryably (healthy → failing) |
//! | `exporter.recovered` | info | an attempt succeeds again (failing → healthy) |
//! | `exporter.dropped` | error | spans were dropped (permanent error, retries exhausted); at most once per [`DROP_LOG_INTERVAL`], with the count of what was not logged |
//! | `exporter.partial_success` | warn | the destination's partial-success message changes |
//! | `exporter.shutdown` | info / error | once, when shutdown completes; error if spans were dropped |

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::metrics::{FailureReason, RetryErrorType};

/// At most one `exporter.dropped` line per this interval per exporter.
pub(crate) const DROP_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Remembers what was last logged, so that only changes are.
///
/// The mutexes are std ones: held for a compare-and-set, never across an await.
#[derive(Debug, Default)]
pub(crate) struct Health {
    failing: AtomicBool,
    drops: Mutex<DropLog>,
    partial_success: Mutex<Option<String>>,
}

#[derive(Debug, Default)]
struct DropLog {
    last_logged: Option<Instant>,
    suppressed_batches: u64,
    suppressed_spans: u64,
}

impl Health {
    /// A retryable attempt failed; logs only when the exporter was healthy until now.
    pub(crate) fn attempt_failed(
        &self,
        exporter: &str,
        error_type: RetryErrorType,
        delay: Duration,
        message: &str,
    ) {
        if !self.failing.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                event = "exporter.retry",
                exporter,
                error_type = error_type.as_str(),
                retry_in = %humantime::format_duration(delay),
                error = %message,
                "destination failing, retrying with backoff",
            );
        }
    }

    /// An attempt succeeded; logs only when the exporter was failing until now.
    pub(crate) fn attempt_succeeded(&self, exporter: &str) {
        if self.failing.swap(false, Ordering::Relaxed) {
            tracing::info!(
                event = "exporter.recovered",
                exporter,
                "destination accepting again"
            );
        }
    }

    /// `spans` were dropped for `reason` (not shutdown: that is logged once at the end).
    pub(crate) fn spans_dropped(
        &self,
        exporter: &str,
        reason: FailureReason,
        spans: usize,
        message: &str,
    ) {
        let now = Instant::now();
        let (suppressed_batches, suppressed_spans) = {
            let mut log = self.drops.lock().unwrap_or_else(|e| e.into_inner());
            if matches!(log.last_logged, Some(at) if now.duration_since(at) < DROP_LOG_INTERVAL) {
                log.suppressed_batches += 1;
                log.suppressed_spans += spans as u64;
                return;
            }
            log.last_logged = Some(now);
            (
                std::mem::take(&mut log.suppressed_batches),
                std::mem::take(&mut log.suppressed_spans),
            )
        };
        tracing::error!(
            event = "exporter.dropped",
            exporter,
            reason = reason.as_str(),
            spans,
            error = %message,
            suppressed_batches,
            suppressed_spans,
            "spans dropped",
        );
    }

    /// The destination answered with a partial success (`rejected_spans` may be 0 when only
    /// a message was sent) or, with `None`, a full success.
    pub(crate) fn partial_success(&self, exporter: &str, rejected: Option<(i64, &str)>) {
        let mut last = self
            .partial_success
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match rejected {
            None => *last = None,
            Some((rejected_spans, message)) => {
                if last.as_deref() != Some(message) {
                    *last = Some(message.to_owned());
                    drop(last);
                    tracing::warn!(
                        event = "exporter.partial_success",
                        exporter,
                        rejected_spans,
                        error = %message,
                        "destination rejected part of a request",
                    );
                }
            }
        }
    }
}
