//! At most one log line per interval for an event that repeats (a refusal, a failed reload
//! or resolution), with the count of those left out.

use std::time::Duration;

use tokio::time::Instant;

/// Decides whether a repeated event's log line is due: the first one is, then none until
/// `interval` has passed since the last line; the events in between are counted and
/// reported with the next line. Reads tokio's clock, so paused-time tests drive it.
#[derive(Debug)]
pub struct LogThrottle {
    interval: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl LogThrottle {
    /// A throttle allowing one line per `interval`.
    pub const fn new(interval: Duration) -> Self {
        Self {
            interval,
            last: None,
            suppressed: 0,
        }
    }

    /// For one more event: `Some(left_out)` when its line is due now, `left_out` being the
    /// events counted and not logged since the last line; `None` when it is only counted.
    pub fn due(&mut self) -> Option<u64> {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|at| now.duration_since(at) < self.interval)
        {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }

    /// The events counted and not logged since the last line.
    pub fn suppressed(&self) -> u64 {
        self.suppressed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scenario: on paused time, events every second for 25 s with a 10 s interval.
    /// Guarantees: lines are due at 0 s, 10 s and 20 s, each with the events left out since
    /// the one before.
    #[tokio::test(start_paused = true)]
    async fn one_line_per_interval_with_the_count_left_out() {
        let mut throttle = LogThrottle::new(Duration::from_secs(10));
        let mut lines = Vec::new();
        for _ in 0..25 {
            if let Some(left_out) = throttle.due() {
                lines.push(left_out);
            }
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        assert_eq!(lines, [0, 9, 9]);
        assert_eq!(throttle.suppressed(), 4);
    }
}
