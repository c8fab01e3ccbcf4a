//! Bytes held against the memory budget by a value that carries them.

use std::sync::Arc;

use crate::limiter::MemoryBudget;

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
