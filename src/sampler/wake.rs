//! Waking the decision task: at once when something needs it now, and for a new deadline
//! only when that deadline is earlier than the one the task already sleeps towards.
//!
//! A root span moves its trace's deadline earlier (`decision_wait_after_root_received`),
//! and nearly every request carries root spans. Waking the decision task for each of them
//! cost a thread wake-up and a round of decisions per request (4,200 rounds a second at
//! 275,000 spans a second in 60-span requests), while the new deadline, a full
//! `decision_wait_after_root_received` away, is almost never before the earliest deadline
//! the task is already waiting for.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;
use tokio::time::Instant;

/// The decision task's wake-up: a [`Notify`] and the instant the task plans to wake at on
/// its own.
///
/// The task calls [`replanning`](Self::replanning) before it reads the shards' deadlines
/// and [`plan`](Self::plan) with the earliest of them before it waits. Ingest sets a
/// deadline under its shard's lock and then calls [`wake_by`](Self::wake_by). Either the
/// task read that shard after the deadline was set (and plans for it), or the shard's lock
/// orders ingest's read of the plan after `replanning`, which wakes for any deadline: no
/// earlier deadline is slept through.
#[derive(Debug)]
pub(super) struct DecisionWake {
    notify: Notify,
    /// Nanoseconds from `epoch` to the planned wake-up; [`Self::REPLANNING`] while the task
    /// reads the deadlines.
    planned: AtomicU64,
    epoch: Instant,
}

impl DecisionWake {
    /// The plan while the task reads the deadlines: every deadline set meanwhile wakes it.
    const REPLANNING: u64 = u64::MAX;

    /// A wake-up whose task plans to wake at once (every new deadline wakes it until its
    /// first plan).
    pub(super) fn new() -> Self {
        Self {
            notify: Notify::new(),
            planned: AtomicU64::new(Self::REPLANNING),
            epoch: Instant::now(),
        }
    }

    /// Wakes the task now, or as soon as it next waits.
    pub(super) fn wake(&self) {
        self.notify.notify_one();
    }

    /// Wakes the task if `deadline` is earlier than its planned wake-up (or it is planning).
    pub(super) fn wake_by(&self, deadline: Instant) {
        if self.offset(deadline) < self.planned.load(Ordering::SeqCst) {
            self.notify.notify_one();
        }
    }

    /// Marks the plan as being made: call before reading the deadlines.
    pub(super) fn replanning(&self) {
        self.planned.store(Self::REPLANNING, Ordering::SeqCst);
    }

    /// Records that the task will wake at `at` unless woken: call after reading the
    /// deadlines, before waiting.
    pub(super) fn plan(&self, at: Instant) {
        self.planned.store(self.offset(at), Ordering::SeqCst);
    }

    /// Completes when the task is woken (at once if it was woken since it last waited).
    pub(super) async fn notified(&self) {
        self.notify.notified().await;
    }

    /// Nanoseconds from the epoch to `at`, saturating below [`Self::REPLANNING`] (an
    /// instant 584 years away is "never" either way).
    fn offset(&self, at: Instant) -> u64 {
        let nanos = at.saturating_duration_since(self.epoch).as_nanos();
        u64::try_from(nanos).map_or(Self::REPLANNING - 1, |n| n.min(Self::REPLANNING - 1))
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Waker};
    use std::time::Duration;

    use super::*;

    /// Whether `wake` has a wake-up waiting (consuming it).
    fn woken(wake: &DecisionWake) -> bool {
        let notified = pin!(wake.notified());
        notified
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_ready()
    }

    /// Scenario: a task planned to wake in 10 s; deadlines are set after, at and before
    /// that instant, then while it plans again.
    /// Guarantees: only a deadline before the plan wakes it; while it plans, any deadline
    /// does; `wake` always does.
    #[tokio::test(start_paused = true)]
    async fn wakes_only_for_a_deadline_before_the_plan() {
        let wake = DecisionWake::new();
        let now = Instant::now();
        wake.wake_by(now + Duration::from_secs(3600));
        assert!(woken(&wake), "before its first plan, any deadline wakes it");
        let planned = now + Duration::from_secs(10);
        wake.plan(planned);
        wake.wake_by(planned + Duration::from_millis(1));
        wake.wake_by(planned);
        assert!(
            !woken(&wake),
            "a deadline at or after the plan does not wake it"
        );
        wake.wake_by(planned - Duration::from_nanos(1));
        assert!(woken(&wake), "an earlier deadline wakes it");
        wake.replanning();
        wake.wake_by(now + Duration::from_secs(3600));
        assert!(woken(&wake), "while it plans, any deadline wakes it");
        wake.plan(planned);
        wake.wake();
        assert!(woken(&wake), "wake always wakes it");
        assert!(!woken(&wake), "one wake-up wakes it once");
    }
}
