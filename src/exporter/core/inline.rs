//! The queue-less mode (`sending_queue.enabled: false`): the caller's task delivers, with
//! retries, and `export` returns the outcome.

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

use super::queue::ABORT_SLACK;
use super::state::Shared;

/// Bounds concurrent inline exports; far above any real concurrency.
const PERMITS: u32 = 1 << 16;

/// Tracks the inline exports in progress: each holds one permit, and shutdown takes them
/// all, so it knows when the last one has finished.
#[derive(Debug)]
pub(crate) struct Inline {
    gate: Semaphore,
}

impl Default for Inline {
    fn default() -> Self {
        Self {
            gate: Semaphore::new(PERMITS as usize),
        }
    }
}

impl Inline {
    /// Admits one export, or `None` once shutdown has begun (the caller counts the batch as
    /// refused). Hold the permit for the whole delivery.
    pub(crate) async fn enter(&self, shared: &Shared) -> Option<SemaphorePermit<'_>> {
        if shared.is_closed() {
            return None;
        }
        self.gate.acquire().await.ok()
    }

    /// Waits for the exports in progress to finish (they stop at the deadline by themselves;
    /// the slack only bounds a transport that does not yield), then refuses new ones.
    pub(crate) async fn drain(&self, deadline: Instant) {
        let all = self.gate.acquire_many(PERMITS);
        let _ = tokio::time::timeout_at(deadline + ABORT_SLACK, all).await;
        self.gate.close();
    }
}
