//! What an exporter's handles, consumers and shutdown share: intake and the shutdown
//! deadline, the one path on which every item's fate is counted, and the drain report.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::watch;
use tokio::time::Instant;

use super::error::DrainReport;
use super::events::Health;
use super::metrics::{ExporterMetrics, FailureReason};
use super::outcome::Outcome;

/// A subscription to the shutdown deadline: `None` until shutdown begins.
pub(crate) type DeadlineWatch = watch::Receiver<Option<Instant>>;

/// State shared by an exporter's handles, consumers and shutdown.
pub(crate) struct Shared {
    metrics: ExporterMetrics,
    health: Health,
    /// True once shutdown began: no new item is accepted.
    closed: watch::Sender<bool>,
    /// Set when shutdown begins: retries stop, and undelivered items are dropped, then.
    deadline: watch::Sender<Option<Instant>>,
    /// Set when the sending queue is reclaimed: consumers take no further item, and a
    /// delivery waiting to retry hands its item back instead (see [`Outcome::HandedBack`]).
    reclaiming: watch::Sender<bool>,
    /// Items delivered, ever (the drain report takes the difference).
    delivered: AtomicU64,
    /// Items dropped at the shutdown deadline, ever.
    shutdown_dropped: AtomicU64,
    /// Items taken off a queue (or handed in inline) and not yet counted: what an aborted
    /// consumer held.
    in_hand: AtomicUsize,
}

impl Shared {
    /// The state of exporter `exporter` (the id as written), counting its items with
    /// `metrics` (whose `data_type` names them).
    pub(crate) fn new(exporter: String, metrics: ExporterMetrics) -> Self {
        let (closed, _) = watch::channel(false);
        let (deadline, _) = watch::channel(None);
        let (reclaiming, _) = watch::channel(false);
        let data_type = metrics.data_type();
        Self {
            metrics,
            health: Health::new(exporter, data_type),
            closed,
            deadline,
            reclaiming,
            delivered: AtomicU64::new(0),
            shutdown_dropped: AtomicU64::new(0),
            in_hand: AtomicUsize::new(0),
        }
    }

    /// The exporter id as written (metric label and log field).
    pub(crate) fn id(&self) -> &str {
        self.health.exporter()
    }

    /// The exporter's metric handles.
    pub(crate) fn metrics(&self) -> &ExporterMetrics {
        &self.metrics
    }

    /// The exporter's log state.
    pub(crate) fn health(&self) -> &Health {
        &self.health
    }

    /// True once shutdown began.
    pub(crate) fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Resolves once shutdown begins.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes a watch channel.
    pub(crate) async fn closed(&self) {
        let mut closed = self.closed.subscribe();
        let _ = closed.wait_for(|closed| *closed).await;
    }

    /// A subscription to the shutdown deadline, for [`deadline_reached`].
    pub(crate) fn deadline(&self) -> DeadlineWatch {
        self.deadline.subscribe()
    }

    /// Marks the sending queue as reclaimed, for good (see [`reclaimed`]).
    pub(crate) fn start_reclaim(&self) {
        let _ = self.reclaiming.send_replace(true);
    }

    /// True once the sending queue is reclaimed.
    pub(crate) fn is_reclaiming(&self) -> bool {
        *self.reclaiming.borrow()
    }

    /// A subscription to the reclaim flag, for [`reclaimed`].
    pub(crate) fn reclaiming(&self) -> watch::Receiver<bool> {
        self.reclaiming.subscribe()
    }

    /// `items` could not be handed over (the exporter is shut down, or its queue is
    /// unavailable).
    pub(crate) fn refuse(&self, items: usize) {
        self.metrics.record_enqueue_failed(items);
    }

    /// `items` are now in a consumer's (or an inline caller's) hands, to be [`settle`]d.
    ///
    /// [`settle`]: Self::settle
    pub(crate) fn take(&self, items: usize) {
        let _ = self.in_hand.fetch_add(items, Ordering::AcqRel);
    }

    /// Counts the fate of one request of `items` items that were [`take`]n. No await
    /// separates the two updates, so an abort (which lands only at an await) sees the items
    /// either in hand or counted, never both or neither.
    ///
    /// [`take`]: Self::take
    pub(crate) fn settle(&self, items: usize, outcome: &Outcome) {
        let _ = self
            .in_hand
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(items))
            });
        self.record(items, outcome);
    }

    /// The one place where the fate of a request's items is counted and, for losses, logged
    /// (rate-limited). A partial success counts the rejected items as failed with reason
    /// `partial_success` and the rest as sent.
    pub(crate) fn record(&self, items: usize, outcome: &Outcome) {
        match outcome {
            Outcome::Delivered(accepted) => {
                let rejected = usize::try_from(accepted.rejected.max(0))
                    .unwrap_or(usize::MAX)
                    .min(items);
                let sent = items - rejected;
                self.metrics.record_sent(sent);
                let _ = self.delivered.fetch_add(sent as u64, Ordering::AcqRel);
                if rejected > 0 {
                    self.metrics
                        .record_failed(FailureReason::PartialSuccess, rejected);
                    self.health
                        .dropped(FailureReason::PartialSuccess, rejected, &accepted.message);
                } else {
                    self.health.partial_success(
                        Some(accepted.message.as_str()).filter(|message| !message.is_empty()),
                    );
                }
            }
            Outcome::Failed { reason, message } => {
                self.metrics.record_failed(*reason, items);
                self.health.dropped(*reason, items, message);
            }
            Outcome::ShutDown => self.drop_at_shutdown(items),
            // Whoever reclaimed the queue holds them now, and counts them.
            Outcome::HandedBack => {}
        }
    }

    /// `items` were not delivered by the shutdown deadline (logged once, by [`shutdown`]).
    ///
    /// [`shutdown`]: Self::shutdown
    pub(crate) fn drop_at_shutdown(&self, items: usize) {
        if items == 0 {
            return;
        }
        self.metrics.record_failed(FailureReason::Shutdown, items);
        let _ = self
            .shutdown_dropped
            .fetch_add(items as u64, Ordering::AcqRel);
    }

    /// `items` that were [`take`]n go back to whoever reclaimed the queue: out of hand, and
    /// never counted by this exporter (the new holder counts them).
    ///
    /// [`take`]: Self::take
    pub(crate) fn hand_back(&self, items: usize) {
        let _ = self
            .in_hand
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(items))
            });
    }

    /// Items in hand when consumers were aborted: they can no longer be settled. Resets the
    /// count.
    pub(crate) fn take_stranded(&self) -> usize {
        self.in_hand.swap(0, Ordering::AcqRel)
    }

    /// Stops intake, sets the deadline, runs `drain` (which delivers until the deadline and
    /// returns shortly after it at the latest), and reports what was delivered and dropped
    /// meanwhile, logging it once. A second call returns at once with an empty report.
    pub(crate) async fn shutdown(
        &self,
        deadline: Instant,
        drain: impl Future<Output = ()>,
    ) -> DrainReport {
        if self.closed.send_replace(true) {
            return DrainReport::default();
        }
        let _ = self.deadline.send_replace(Some(deadline));
        let delivered_before = self.delivered.load(Ordering::Acquire);
        let dropped_before = self.shutdown_dropped.load(Ordering::Acquire);
        drain.await;
        let report = DrainReport {
            delivered: self.delivered.load(Ordering::Acquire) - delivered_before,
            dropped: self.shutdown_dropped.load(Ordering::Acquire) - dropped_before,
        };
        if report.dropped > 0 {
            tracing::error!(
                event = "exporter.shutdown",
                exporter = %self.id(),
                data_type = self.health.data_type(),
                delivered = report.delivered,
                dropped = report.dropped,
                reason = FailureReason::Shutdown.as_str(),
                "shutdown deadline reached with items undelivered",
            );
        } else {
            tracing::info!(
                event = "exporter.shutdown",
                exporter = %self.id(),
                data_type = self.health.data_type(),
                delivered = report.delivered,
                dropped = 0,
            );
        }
        report
    }
}

/// Resolves once a shutdown deadline is set and reached; pends forever otherwise.
///
/// # Cancel safety
///
/// Cancel safe: it only observes the watch channel.
pub(crate) async fn deadline_reached(deadline: &mut DeadlineWatch) {
    loop {
        let current = *deadline.borrow_and_update();
        if let Some(at) = current {
            tokio::time::sleep_until(at).await;
            return;
        }
        if deadline.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Resolves once the sending queue is reclaimed; pends forever otherwise (also once the
/// exporter, and with it the flag's sender, is gone).
///
/// # Cancel safety
///
/// Cancel safe: it only observes a watch channel.
pub(crate) async fn reclaimed(reclaiming: &mut watch::Receiver<bool>) {
    if reclaiming.wait_for(|reclaimed| *reclaimed).await.is_err() {
        std::future::pending::<()>().await;
    }
}
