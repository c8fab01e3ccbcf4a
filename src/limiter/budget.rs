//! The shared count of held bytes and its limits.

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
}

impl MemoryBudget {
    /// A budget that never comes under pressure (no memory limit configured).
    pub fn unlimited() -> Arc<Self> {
        Arc::new(Self {
            hard_limit: usize::MAX,
            soft_limit: usize::MAX,
            used: AtomicUsize::new(0),
        })
    }

    /// A budget of `hard_limit` bytes that comes under pressure above `soft_limit`
    /// (clamped to the hard limit).
    pub fn new(hard_limit: usize, soft_limit: usize) -> Arc<Self> {
        Arc::new(Self {
            hard_limit,
            soft_limit: soft_limit.min(hard_limit),
            used: AtomicUsize::new(0),
        })
    }

    /// Counts `bytes` more as held.
    pub fn charge(&self, bytes: usize) {
        self.used.fetch_add(bytes, Ordering::Relaxed);
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
