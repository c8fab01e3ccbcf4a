//! Retries: the backoff policy and the per-request delivery loop.
//!
//! Semantics follow the Collector's exporterhelper (`retry_sender.go` with cenkalti/backoff):
//! exponential backoff from `initial_interval`, multiplied by `multiplier` after each
//! attempt, the interval capped at `max_interval`, each wait randomized by
//! `±randomization_factor`; a server throttle hint (gRPC `RetryInfo`, HTTP `Retry-After`)
//! stretches the wait to `max(backoff, hint)`; retrying stops once the next wait would end
//! past `max_elapsed_time` (never, when it is `None`), and always at the shutdown deadline.

use std::time::Duration;

use tokio::time::Instant;

use super::metrics::FailureReason;
use super::outcome::{AttemptError, Outcome};
use super::state::{DeadlineWatch, Shared, deadline_reached, reclaimed};
use super::transport::Transport;
use crate::config::RetryConfig;

/// The backoff state of one batch's delivery. Pure: the caller supplies elapsed time and the
/// random jitter, so the schedule is deterministic under test.
#[derive(Clone, Debug)]
pub(crate) struct Backoff {
    max_interval: Duration,
    max_elapsed_time: Option<Duration>,
    multiplier: f64,
    randomization_factor: f64,
    current_interval: Duration,
}

impl Backoff {
    /// A fresh schedule for `config` (its `enabled` flag is the caller's business).
    pub(crate) fn new(config: &RetryConfig) -> Self {
        Self {
            max_interval: config.max_interval,
            max_elapsed_time: config.max_elapsed_time,
            multiplier: config.multiplier.max(1.0),
            randomization_factor: config.randomization_factor.clamp(0.0, 1.0),
            current_interval: config.initial_interval,
        }
    }

    /// The wait before the next attempt, or `None` when retrying must stop.
    ///
    /// `elapsed` is the time since the first attempt; `throttle` the server's hint, if any;
    /// `jitter` a value in `[0, 1]` (uniformly random in production) that picks the wait in
    /// `[interval·(1−r), interval·(1+r)]`. Unlike cenkalti/backoff, the randomized wait is
    /// then clamped to `max_interval`, so `max_interval` is a true upper bound on backoff
    /// (a throttle hint may still exceed it: the server asked for that).
    pub(crate) fn next_delay(
        &mut self,
        elapsed: Duration,
        throttle: Option<Duration>,
        jitter: f64,
    ) -> Option<Duration> {
        // Nanoseconds as f64: exact for any interval below ~104 days.
        let interval = self.current_interval.as_nanos() as f64;
        let delta = self.randomization_factor * interval;
        let randomized = (interval - delta) + jitter.clamp(0.0, 1.0) * 2.0 * delta;
        let backoff = nanos(randomized).min(self.max_interval);

        let max = self.max_interval.as_nanos() as f64;
        self.current_interval = if interval >= max / self.multiplier {
            self.max_interval
        } else {
            nanos(interval * self.multiplier)
        };

        let delay = match throttle {
            Some(hint) => backoff.max(hint),
            None => backoff,
        };
        match self.max_elapsed_time {
            Some(max_elapsed) if elapsed.saturating_add(delay) > max_elapsed => None,
            _ => Some(delay),
        }
    }

    /// The interval the next randomized wait is drawn around (for tests).
    #[cfg(test)]
    pub(crate) fn current_interval(&self) -> Duration {
        self.current_interval
    }
}

/// A non-negative, finite nanosecond count as a `Duration` (saturating).
fn nanos(value: f64) -> Duration {
    if value.is_finite() && value > 0.0 {
        Duration::from_nanos(value.round().min(u64::MAX as f64) as u64)
    } else {
        Duration::ZERO
    }
}

/// Delivers `request` with retries until it is accepted, fails permanently, runs out of
/// retry time, or the shutdown deadline is reached. Counts retries and logs the
/// destination's health transitions; the caller accounts for the outcome.
///
/// Each wait is the backoff's, stretched to the server's throttle hint; a retry that would
/// start after the shutdown deadline is not waited for (the outcome is then
/// [`Outcome::ShutDown`] at once), like exporterhelper's context-deadline check.
///
/// # Cancel safety
///
/// Dropping the future abandons the request without accounting for it; the queue relies
/// on the deadline instead of cancelling this.
pub(crate) async fn deliver<T: Transport>(
    shared: &Shared,
    transport: &T,
    retry: &RetryConfig,
    request: &T::Request,
    deadline: &mut DeadlineWatch,
) -> Outcome {
    deliver_or_hand_back(shared, transport, retry, request, deadline, Reclaim::Keep).await
}

/// What a delivery does with its request when the sending queue is reclaimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reclaim {
    /// Keeps retrying it (a request of several that one queued item makes up, whose
    /// siblings may have been delivered already, cannot go back).
    Keep,
    /// Gives it back ([`Outcome::HandedBack`]) instead of waiting for the next retry: the
    /// backend was removed, and its successor should have it. An attempt under way is
    /// never cut short (the destination may be taking it).
    HandBack,
}

/// [`deliver`], which with [`Reclaim::HandBack`] also ends with [`Outcome::HandedBack`]
/// when the exporter's queue is reclaimed after an attempt failed, or while waiting to
/// retry.
///
/// # Cancel safety
///
/// As [`deliver`].
pub(crate) async fn deliver_or_hand_back<T: Transport>(
    shared: &Shared,
    transport: &T,
    retry: &RetryConfig,
    request: &T::Request,
    deadline: &mut DeadlineWatch,
    reclaim: Reclaim,
) -> Outcome {
    let mut reclaiming = shared.reclaiming();
    let started = Instant::now();
    let mut backoff = Backoff::new(retry);
    let mut attempt = 0;
    loop {
        let result = {
            let _in_flight = shared.metrics().in_flight();
            tokio::select! {
                biased;
                () = deadline_reached(deadline) => return Outcome::ShutDown,
                result = transport.send(request, attempt) => result,
            }
        };
        attempt += 1;
        let (error_type, throttle, message) = match result {
            Ok(accepted) => {
                shared.health().attempt_succeeded();
                return Outcome::Delivered(accepted);
            }
            Err(AttemptError::Permanent { message }) => {
                return Outcome::Failed {
                    reason: FailureReason::Permanent,
                    message,
                };
            }
            Err(AttemptError::Retryable {
                error_type,
                throttle,
                message,
            }) => (error_type, throttle, message),
        };
        let hand_back = reclaim == Reclaim::HandBack;
        if hand_back && shared.is_reclaiming() {
            return Outcome::HandedBack;
        }
        if !retry.enabled {
            return Outcome::Failed {
                reason: FailureReason::RetriesExhausted,
                message,
            };
        }
        let Some(delay) = backoff.next_delay(started.elapsed(), throttle, rand::random::<f64>())
        else {
            return Outcome::Failed {
                reason: FailureReason::RetriesExhausted,
                message,
            };
        };
        let resume_at = Instant::now() + delay;
        if matches!(*deadline.borrow(), Some(at) if resume_at > at) {
            return Outcome::ShutDown;
        }
        shared.metrics().record_retry(error_type);
        shared.health().attempt_failed(error_type, delay, &message);
        tokio::select! {
            biased;
            () = deadline_reached(deadline) => return Outcome::ShutDown,
            () = reclaimed(&mut reclaiming), if hand_back => return Outcome::HandedBack,
            () = tokio::time::sleep_until(resume_at) => {}
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;

    fn config(max_elapsed: Option<u64>) -> RetryConfig {
        RetryConfig {
            enabled: true,
            initial_interval: Duration::from_millis(100),
            max_interval: Duration::from_millis(1000),
            max_elapsed_time: max_elapsed.map(Duration::from_millis),
            multiplier: 2.0,
            randomization_factor: 0.5,
        }
    }

    /// Scenario: jitter fixed at the midpoint (0.5), no throttle, no elapsed-time limit.
    /// Guarantees: the waits grow by `multiplier` from `initial_interval` and stop growing at
    /// `max_interval`, which they never exceed.
    #[test]
    fn backoff_grows_exponentially_and_caps() {
        let mut b = Backoff::new(&config(None));
        assert_eq!(b.current_interval(), Duration::from_millis(100));
        let waits: Vec<u128> = (0..7)
            .map(|_| b.next_delay(Duration::ZERO, None, 0.5).unwrap().as_millis())
            .collect();
        assert_eq!(waits, vec![100, 200, 400, 800, 1000, 1000, 1000]);
        assert_eq!(b.current_interval(), Duration::from_millis(1000));
    }

    /// Scenario: jitter at its extremes 0 and 1 with randomization factor 0.5.
    /// Guarantees: the wait spans `interval·(1±r)`, clamped to `max_interval` at the top.
    #[test]
    fn backoff_jitter_bounds() {
        let mut low = Backoff::new(&config(None));
        let mut high = Backoff::new(&config(None));
        assert_eq!(
            low.next_delay(Duration::ZERO, None, 0.0),
            Some(Duration::from_millis(50))
        );
        assert_eq!(
            high.next_delay(Duration::ZERO, None, 1.0),
            Some(Duration::from_millis(150))
        );
        for _ in 0..5 {
            let d = high.next_delay(Duration::ZERO, None, 1.0).unwrap();
            assert!(d <= Duration::from_millis(1000));
        }
    }

    /// Scenario: a server throttle hint longer, then shorter, than the backoff.
    /// Guarantees: the wait is `max(backoff, hint)`, even above `max_interval`.
    #[test]
    fn throttle_hint_stretches_the_wait() {
        let mut b = Backoff::new(&config(None));
        assert_eq!(
            b.next_delay(Duration::ZERO, Some(Duration::from_secs(3)), 0.5),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            b.next_delay(Duration::ZERO, Some(Duration::from_millis(1)), 0.5),
            Some(Duration::from_millis(200))
        );
    }

    /// Scenario: `max_elapsed_time` 1s, and 950ms already spent.
    /// Guarantees: a wait that would end past the limit stops retrying (`None`); a wait that
    /// fits is granted; `None` limit never stops.
    #[test]
    fn max_elapsed_time_stops_retrying() {
        let mut b = Backoff::new(&config(Some(1000)));
        assert_eq!(b.next_delay(Duration::from_millis(950), None, 0.5), None);
        let mut b = Backoff::new(&config(Some(1000)));
        assert_eq!(
            b.next_delay(Duration::from_millis(900), None, 0.5),
            Some(Duration::from_millis(100))
        );
        let mut forever = Backoff::new(&config(None));
        assert!(
            forever
                .next_delay(Duration::from_secs(1_000_000), None, 0.5)
                .is_some()
        );
    }
}
