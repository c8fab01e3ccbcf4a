//! The shared count of held bytes and its limits, and the [`Charge`] that holds bytes of it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Use falls back to this share of the soft limit before pressure is relieved.
const RELIEF_SHARE: f64 = 0.9;

/// A shared count of bytes held, with its limits.
#[derive(Debug)]
pub struct MemoryBudget {
    hard_limit: usize,
    soft_limit: usize,
    used: AtomicUsize,
    /// The highest `used` has been since the budget was made.
    peak: AtomicUsize,
}

impl MemoryBudget {
    /// A budget that never comes under pressure (no memory limit configured).
    pub fn unlimited() -> Arc<Self> {
        Arc::new(Self {
            hard_limit: usize::MAX,
            soft_limit: usize::MAX,
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        })
    }

    /// A budget of `hard_limit` bytes that comes under pressure above `soft_limit`
    /// (clamped to the hard limit).
    pub fn new(hard_limit: usize, soft_limit: usize) -> Arc<Self> {
        Arc::new(Self {
            hard_limit,
            soft_limit: soft_limit.min(hard_limit),
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        })
    }

    /// Counts `bytes` more as held, whatever the limits: for holders that were admitted
    /// already (see [`try_charge`](Self::try_charge) for admission).
    pub fn charge(&self, bytes: usize) {
        let before = self.used.fetch_add(bytes, Ordering::Relaxed);
        self.peak
            .fetch_max(before.saturating_add(bytes), Ordering::Relaxed);
    }

    /// Counts `bytes` more as held if use then stays at or below `ceiling`, and returns
    /// true; otherwise charges nothing and returns false.
    ///
    /// The check and the charge are one atomic step, so concurrent callers cannot all pass
    /// on the same free room: together they never take use past `ceiling`.
    pub fn try_charge(&self, bytes: usize, ceiling: usize) -> bool {
        let charged = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|after| *after <= ceiling)
            });
        match charged {
            Ok(before) => {
                self.peak.fetch_max(before + bytes, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        }
    }

    /// Counts `bytes` fewer as held. Releasing more than was charged is a bug; the count
    /// saturates at zero rather than wrapping.
    pub fn release(&self, bytes: usize) {
        let _ = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                Some(used.saturating_sub(bytes))
            });
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The most bytes held at any one time since the budget was made.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// The hard limit in bytes (`usize::MAX` when unlimited).
    pub fn hard_limit(&self) -> usize {
        self.hard_limit
    }

    /// The soft limit in bytes (`usize::MAX` when unlimited).
    pub fn soft_limit(&self) -> usize {
        self.soft_limit
    }

    /// True while use is above the soft limit: holders should free what they can.
    pub fn under_pressure(&self) -> bool {
        self.used() > self.soft_limit
    }

    /// How many bytes must be freed to bring use down to the relief target (zero when
    /// not under pressure).
    pub fn excess(&self) -> usize {
        if !self.under_pressure() {
            return 0;
        }
        let target = (self.soft_limit as f64 * RELIEF_SHARE) as usize;
        self.used().saturating_sub(target)
    }
}

/// Bytes charged to the memory budget for as long as this value lives: dropping the last
/// handle releases them. A batch carries its charge through queues and exporters, so
/// whoever holds the data last gives the bytes back, whatever path it took.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<MemoryBudget>,
    bytes: usize,
}

impl Charge {
    /// Charges `bytes` to `budget` until the returned value is dropped.
    pub fn new(budget: &Arc<MemoryBudget>, bytes: usize) -> Arc<Self> {
        budget.charge(bytes);
        Arc::new(Self {
            budget: budget.clone(),
            bytes,
        })
    }

    /// Takes over `bytes` that are already charged to `budget` (by a reservation), so
    /// that they are counted neither twice nor not at all while changing hands.
    pub(super) fn adopt(budget: Arc<MemoryBudget>, bytes: usize) -> Arc<Self> {
        Arc::new(Self { budget, bytes })
    }

    /// The bytes this charge holds.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scenario: a budget is charged past its soft limit, then released.
    /// Guarantees: pressure starts above the soft limit, the excess aims below it (the
    /// relief target), and an unlimited budget is never under pressure.
    #[test]
    fn pressure_and_excess() {
        let budget = MemoryBudget::new(1000, 800);
        budget.charge(700);
        assert!(!budget.under_pressure());
        assert_eq!(budget.excess(), 0);
        budget.charge(200);
        assert!(budget.under_pressure());
        assert_eq!(budget.excess(), 900 - 720);
        budget.release(5000);
        assert_eq!(budget.used(), 0);
        let unlimited = MemoryBudget::unlimited();
        unlimited.charge(usize::MAX / 2);
        assert!(!unlimited.under_pressure());
    }
}
