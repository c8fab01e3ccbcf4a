//! The serving state that the health endpoint reports.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

/// Where the gateway is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthState {
    /// Binding ports and starting components: not ready.
    Starting,
    /// Accepting data: ready.
    Serving,
    /// Shutting down: intake has stopped, buffers are draining. Not ready.
    Draining,
}

/// A shared, cheap-to-clone view of the [`HealthState`].
#[derive(Clone, Debug)]
pub struct Health(Arc<AtomicU8>);

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

impl Health {
    /// Starts in [`HealthState::Starting`].
    pub fn new() -> Self {
        Self(Arc::new(AtomicU8::new(0)))
    }

    /// Moves to `state`.
    pub fn set(&self, state: HealthState) {
        let raw = match state {
            HealthState::Starting => 0,
            HealthState::Serving => 1,
            HealthState::Draining => 2,
        };
        self.0.store(raw, Ordering::Release);
    }

    /// The current state.
    pub fn get(&self) -> HealthState {
        match self.0.load(Ordering::Acquire) {
            0 => HealthState::Starting,
            1 => HealthState::Serving,
            _ => HealthState::Draining,
        }
    }
}
