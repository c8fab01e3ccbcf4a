//! The exporters' log events: state transitions and rate-limited losses, never one line per
//! request. Every event carries `exporter` (the id as written) and, where items are
//! counted, `data_type` (`traces`: items are spans; `metrics`: data points).
//!
//! | event | level | when |
//! |---|---|---|
//! | `exporter.started` | info | the exporter was built |
//! | `exporter.retry` | warn | the destination starts failing retryably (healthy → failing) |
//! | `exporter.recovered` | info | an attempt succeeds again (failing → healthy) |
//! | `exporter.dropped` | error | items were dropped (permanent error, retries exhausted, or rejected by a partial success); at most once per [`DROP_LOG_INTERVAL`], with the count of what was not logged |
//! | `exporter.partial_success` | warn | the destination's message on an accepted request changes (nothing rejected) |
//! | `exporter.shutdown` | info / error | once, when shutdown completes; error if items were dropped |

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::metrics::{FailureReason, RetryErrorType};
use crate::telemetry::k8s_events::{self, Transition};

/// At most one `exporter.dropped` line per this interval per exporter.
pub(crate) const DROP_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Remembers what was last logged for one exporter, so that only changes are.
///
/// The mutexes are std ones: held for a compare-and-set, never across an await.
#[derive(Debug)]
pub(crate) struct Health {
    exporter: String,
    data_type: &'static str,
    failing: AtomicBool,
    drops: Mutex<DropLog>,
    partial_success: Mutex<Option<String>>,
}

#[derive(Debug, Default)]
struct DropLog {
    last_logged: Option<Instant>,
    suppressed_requests: u64,
    suppressed_items: u64,
}

impl Health {
    /// The log state of exporter `exporter` carrying `data_type`.
    pub(crate) fn new(exporter: String, data_type: &'static str) -> Self {
        Self {
            exporter,
            data_type,
            failing: AtomicBool::new(false),
            drops: Mutex::new(DropLog::default()),
            partial_success: Mutex::new(None),
        }
    }

    /// The exporter id as written.
    pub(crate) fn exporter(&self) -> &str {
        &self.exporter
    }

    /// `traces` or `metrics`.
    pub(crate) fn data_type(&self) -> &'static str {
        self.data_type
    }

    /// A retryable attempt failed; logs only when the exporter was healthy until now.
    pub(crate) fn attempt_failed(
        &self,
        error_type: RetryErrorType,
        delay: Duration,
        message: &str,
    ) {
        if !self.failing.swap(true, Ordering::Relaxed) {
            k8s_events::record(|| Transition::ExportFailing {
                exporter: self.exporter.clone(),
                error_type: error_type.as_str(),
                message: message.to_owned(),
            });
            tracing::warn!(
                event = "exporter.retry",
                exporter = %self.exporter,
                error_type = error_type.as_str(),
                retry_in = %humantime::format_duration(delay),
                error = %message,
                "destination failing, retrying with backoff",
            );
        }
    }

    /// An attempt succeeded; logs only when the exporter was failing until now.
    pub(crate) fn attempt_succeeded(&self) {
        if self.failing.swap(false, Ordering::Relaxed) {
            k8s_events::record(|| Transition::ExportRecovered {
                exporter: self.exporter.clone(),
            });
            tracing::info!(
                event = "exporter.recovered",
                exporter = %self.exporter,
                "destination accepting again"
            );
        }
    }

    /// `items` were dropped for `reason` (not shutdown: that is logged once at the end),
    /// with the destination's `message`. Logged at most once per [`DROP_LOG_INTERVAL`].
    pub(crate) fn dropped(&self, reason: FailureReason, items: usize, message: &str) {
        let now = Instant::now();
        let (suppressed_requests, suppressed_items) = {
            let mut log = self.drops.lock().unwrap_or_else(|e| e.into_inner());
            if matches!(log.last_logged, Some(at) if now.duration_since(at) < DROP_LOG_INTERVAL) {
                log.suppressed_requests += 1;
                log.suppressed_items += items as u64;
                return;
            }
            log.last_logged = Some(now);
            (
                std::mem::take(&mut log.suppressed_requests),
                std::mem::take(&mut log.suppressed_items),
            )
        };
        if self.data_type == "traces" {
            k8s_events::record(|| Transition::SpansDropped {
                exporter: self.exporter.clone(),
                reason: reason.as_str(),
                items,
                message: message.to_owned(),
            });
        }
        tracing::error!(
            event = "exporter.dropped",
            exporter = %self.exporter,
            data_type = self.data_type,
            reason = reason.as_str(),
            items,
            error = %message,
            suppressed_requests,
            suppressed_items,
            "items dropped",
        );
    }

    /// The destination accepted a request with a message but rejected nothing
    /// (`Some(message)`), or with no message (`None`). Logs when the message changes.
    pub(crate) fn partial_success(&self, message: Option<&str>) {
        let mut last = self
            .partial_success
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match message {
            None => *last = None,
            Some(message) => {
                if last.as_deref() != Some(message) {
                    *last = Some(message.to_owned());
                    drop(last);
                    tracing::warn!(
                        event = "exporter.partial_success",
                        exporter = %self.exporter,
                        error = %message,
                        "destination accepted a request with a warning",
                    );
                }
            }
        }
    }
}
