//! Admission's hold on the memory budget for one request, from before its body is read until
//! the pipeline's own charge takes over.

use std::sync::Arc;

use super::budget::{Charge, MemoryBudget};
use crate::error::{PipelineError, RETRY_AFTER};

/// The retryable refusal of admission for memory, for `reason`.
pub(super) fn overloaded(reason: &'static str) -> PipelineError {
    PipelineError::Overloaded {
        reason,
        retry_after: RETRY_AFTER,
    }
}

/// Bytes of the memory budget held for one request, taken by admission
/// ([`MemoryLimiter::reserve`](super::MemoryLimiter::reserve)) before the request's body is
/// read.
///
/// It starts at what the request may come to (its declared length, else the receiver's
/// maximum size) and is [resized](Self::resize) as the body is read, decompressed and
/// decoded, so that it covers what the request holds at each step. Growing is checked
/// against the budget's soft limit in the same atomic step as the charge, so concurrent
/// requests cannot all grow into the same free room.
///
/// # When the bytes are released
///
/// - [`into_charge`](Self::into_charge) hands them to the [`Charge`] that the request's
///   batch carries into the pipeline: they stay charged, never counted twice nor dropped
///   for a moment, until the last holder of the batch (a queue, the batcher, an exporter)
///   drops it;
/// - otherwise they are released when the reservation is dropped: the request ended
///   without entering the pipeline (refused, malformed, the client went away), or entered
///   only pipelines that charge their own copy (a tail sampler).
#[derive(Debug)]
#[must_use = "dropping a reservation releases it at once"]
pub struct Reservation {
    /// `None` when no memory limit is configured: nothing is counted.
    budget: Option<Arc<MemoryBudget>>,
    bytes: usize,
}

impl Reservation {
    /// Takes `bytes` of `budget` if use stays at or below `ceiling`; `None` otherwise.
    pub(super) fn try_take(
        budget: &Arc<MemoryBudget>,
        bytes: usize,
        ceiling: usize,
    ) -> Option<Self> {
        budget.try_charge(bytes, ceiling).then(|| Self {
            budget: Some(budget.clone()),
            bytes,
        })
    }

    /// A reservation that counts nothing, for receivers without a memory limit.
    pub fn unlimited() -> Self {
        Self {
            budget: None,
            bytes: 0,
        }
    }

    /// The bytes held (0 when unlimited).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Moves the reservation to `bytes`: shrinking always succeeds; growing succeeds only
    /// while the budget stays at or below its soft limit, and never past the soft limit
    /// itself (a request that needs more could not be admitted even into an empty budget).
    ///
    /// # Errors
    ///
    /// [`PipelineError::Overloaded`] (retryable) when growing would pass the soft limit
    /// with what else is held; [`PipelineError::ExceedsMemoryLimit`] (not retryable) when
    /// `bytes` alone is above the soft limit. The reservation is then unchanged.
    pub fn resize(&mut self, bytes: usize) -> Result<(), PipelineError> {
        let Some(budget) = &self.budget else {
            return Ok(());
        };
        if bytes <= self.bytes {
            budget.release(self.bytes - bytes);
        } else if bytes > budget.soft_limit() {
            return Err(PipelineError::ExceedsMemoryLimit {
                needed: bytes,
                limit: budget.soft_limit(),
            });
        } else if !budget.try_charge(bytes - self.bytes, budget.soft_limit()) {
            return Err(overloaded("memory budget full"));
        }
        self.bytes = bytes;
        Ok(())
    }

    /// Hands the reserved bytes to a [`Charge`], which keeps them charged until its last
    /// handle is dropped; `None` when unlimited (the pipeline charges the batch itself).
    pub fn into_charge(mut self) -> Option<Arc<Charge>> {
        let budget = self.budget.take()?;
        Some(Charge::adopt(budget, std::mem::take(&mut self.bytes)))
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            budget.release(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::MemoryLimiter;
    use crate::limiter::tests::limiter;

    /// A limiter with a hard limit of 1000 bytes and a soft limit of 800, and its budget.
    fn limiter_and_budget() -> (Arc<MemoryLimiter>, Arc<MemoryBudget>) {
        let limiter = limiter(1000, 800);
        let budget = limiter.budget().clone();
        (limiter, budget)
    }

    /// Scenario: 16 threads, released together by a barrier, each take reservations of 70
    /// bytes until refused (soft limit 800), hold them until all are done, then drop them;
    /// 200 rounds.
    /// Guarantees: while all hold, the budget is at most the soft limit and within one
    /// reservation of it (the room was taken, no more); its peak never passed the soft
    /// limit; every refusal is retryable; everything is released at the end.
    #[test]
    fn concurrent_reservations_never_pass_the_soft_limit_together() {
        const THREADS: usize = 16;
        let (limiter, budget) = limiter_and_budget();
        let barrier = std::sync::Barrier::new(THREADS);
        std::thread::scope(|scope| {
            for _ in 0..THREADS {
                scope.spawn(|| {
                    for _round in 0..200 {
                        barrier.wait();
                        let mut held = Vec::new();
                        loop {
                            match limiter.reserve(70) {
                                Ok(reservation) => held.push(reservation),
                                Err(error) => {
                                    assert!(error.is_retryable());
                                    break;
                                }
                            }
                        }
                        barrier.wait();
                        let used = budget.used();
                        assert!(used <= 800, "{used} bytes passed the soft limit");
                        assert!(used > 800 - 70, "only {used} bytes were taken");
                        barrier.wait();
                        drop(held);
                    }
                });
            }
        });
        assert!(budget.peak() <= 800, "peak {}", budget.peak());
        assert_eq!(budget.used(), 0);
    }

    /// Scenario: a reservation of 300 bytes (budget soft limit 800) is shrunk to 100, grown
    /// to 700, then asked to grow to 900, then to 790 while another holder has 50.
    /// Guarantees: each resize moves the budget by the difference; growth to more than the
    /// soft limit itself is refused for good (not retryable: it could never fit), growth
    /// that does not fit beside what others hold is refused retryably; a refused resize
    /// leaves the reservation as it was.
    #[test]
    fn resizes_down_and_up_within_the_soft_limit() {
        let (limiter, budget) = limiter_and_budget();
        let mut reservation = limiter.reserve(300).expect("fits");
        assert_eq!(budget.used(), 300);
        reservation.resize(100).expect("shrinking always works");
        assert_eq!((reservation.bytes(), budget.used()), (100, 100));
        reservation.resize(700).expect("fits");
        assert_eq!((reservation.bytes(), budget.used()), (700, 700));
        let refused = reservation.resize(900).expect_err("past the soft limit");
        assert!(
            matches!(
                refused,
                PipelineError::ExceedsMemoryLimit {
                    needed: 900,
                    limit: 800
                }
            ),
            "{refused:?}"
        );
        assert!(!refused.is_retryable());
        assert_eq!((reservation.bytes(), budget.used()), (700, 700));
        // Another holder's bytes count against growth too.
        budget.charge(50);
        let refused = reservation
            .resize(790)
            .expect_err("no room beside the other holder");
        assert!(refused.is_retryable());
        reservation.resize(750).expect("exactly at the soft limit");
        assert_eq!(budget.used(), 800);
    }

    /// Scenario: a budget with a soft limit of 800. Admission of a body of undeclared
    /// length (at least 10, at most 5000 bytes), with an empty budget and then with 100
    /// bytes held elsewhere; then of a body declared at 900 bytes.
    /// Guarantees: the bounded request is admitted into the empty budget with the whole
    /// soft limit reserved (it may still turn out to fit) rather than refused forever, and
    /// refused retryably when that room is not free; the declared 900 bytes are refused
    /// for good (not retryable), since they could never fit.
    #[test]
    fn admission_above_the_soft_limit() {
        let (limiter, budget) = limiter_and_budget();
        let reservation = limiter
            .reserve_between(10, 5000)
            .expect("admitted into an empty budget");
        assert_eq!((reservation.bytes(), budget.used()), (800, 800));
        drop(reservation);
        budget.charge(100);
        let refused = limiter
            .reserve_between(10, 5000)
            .expect_err("no room for the whole soft limit");
        assert!(refused.is_retryable());
        budget.release(100);
        let refused = limiter.reserve(900).expect_err("could never fit");
        assert!(!refused.is_retryable(), "{refused:?}");
        assert_eq!(budget.used(), 0);
    }

    /// Scenario: reservations are dropped, one after being resized.
    /// Guarantees: dropping releases exactly what the reservation held at that moment.
    #[test]
    fn releases_on_drop() {
        let (limiter, budget) = limiter_and_budget();
        let first = limiter.reserve(200).expect("fits");
        let mut second = limiter.reserve(300).expect("fits");
        second.resize(50).expect("shrinks");
        assert_eq!(budget.used(), 250);
        drop(first);
        assert_eq!(budget.used(), 50);
        drop(second);
        assert_eq!(budget.used(), 0);
    }

    /// Scenario: a reservation becomes a charge, which is cloned (as split batches share
    /// it) and dropped handle by handle.
    /// Guarantees: the bytes stay charged, never counted twice (the peak does not move),
    /// until the last handle goes; an unlimited reservation yields no charge.
    #[test]
    fn into_charge_keeps_the_bytes() {
        let (limiter, budget) = limiter_and_budget();
        let mut reservation = limiter.reserve(600).expect("fits");
        reservation.resize(400).expect("shrinks");
        let charge = reservation.into_charge().expect("limited");
        assert_eq!(charge.bytes(), 400);
        assert_eq!(budget.used(), 400);
        assert_eq!(budget.peak(), 600);
        let shared = charge.clone();
        drop(charge);
        assert_eq!(budget.used(), 400, "a handle still holds the bytes");
        drop(shared);
        assert_eq!(budget.used(), 0);
        assert!(Reservation::unlimited().into_charge().is_none());
    }

    /// Scenario: an unlimited reservation (no memory limit configured) is resized.
    /// Guarantees: it never refuses and counts nothing.
    #[test]
    fn unlimited_counts_nothing() {
        let mut reservation = Reservation::unlimited();
        reservation.resize(usize::MAX).expect("no limit");
        assert_eq!(reservation.bytes(), 0);
    }
}
