//! The state changes that become Events, as components report them.

use std::time::Duration;

/// A state change of the gateway that an operator acts on.
#[derive(Clone, Debug, PartialEq)]
pub enum Transition {
    /// The memory limiter left its normal state: new data is refused.
    MemoryLimitReached {
        /// `soft` or `hard`.
        state: &'static str,
        /// The process RSS at the check.
        rss_bytes: u64,
        /// The memory budget's use at the check.
        used_bytes: u64,
        /// The soft limit.
        soft_limit_bytes: u64,
        /// The hard limit.
        hard_limit_bytes: u64,
    },
    /// The memory limiter is back to its normal state.
    MemoryPressureRelieved {
        /// The process RSS at the check.
        rss_bytes: u64,
        /// The memory budget's use at the check.
        used_bytes: u64,
    },
    /// An exporter's destination started failing (retryably).
    ExportFailing {
        /// The exporter id as written.
        exporter: String,
        /// The failure class.
        error_type: &'static str,
        /// The destination's message.
        message: String,
    },
    /// An exporter's destination accepts again.
    ExportRecovered {
        /// The exporter id as written.
        exporter: String,
    },
    /// The sampler started deciding traces before their deadline. Reported for every
    /// early decision; an Event only starts an episode (see [`PULSE_QUIET`]).
    DecisionsForcedEarly {
        /// Why (`memory_pressure`, `num_traces`, ...).
        reason: &'static str,
    },
    /// An exporter dropped spans. An Event only starts an episode (see [`PULSE_QUIET`]).
    SpansDropped {
        /// The exporter id as written.
        exporter: String,
        /// Why (`retries_exhausted`, ...).
        reason: &'static str,
        /// How many spans.
        items: usize,
        /// The destination's message.
        message: String,
    },
    /// The gateway started with its configuration.
    ConfigLoaded {
        /// Pipelines in `service.pipelines`.
        pipelines: usize,
        /// Exporters declared.
        exporters: usize,
    },
    /// Shutdown began.
    Draining {
        /// The drain's limit.
        timeout: Duration,
    },
    /// A peer joined a load-balancing exporter's ring.
    PeerJoined {
        /// The exporter id as written.
        exporter: String,
        /// The peer's address.
        peer: String,
        /// Peers in the ring now.
        peers: usize,
    },
    /// A peer left a load-balancing exporter's ring.
    PeerLeft {
        /// The exporter id as written.
        exporter: String,
        /// The peer's address.
        peer: String,
        /// Peers in the ring now.
        peers: usize,
    },
}

/// Transitions that are reported once per occurrence rather than once per change of
/// state (early decisions, dropped spans) start an Event only after this long without one:
/// a stretch of early decisions is one episode, however many traces it decides.
pub const PULSE_QUIET: Duration = Duration::from_secs(60);

impl Transition {
    /// Which pulse slot this transition uses, when it is reported per occurrence.
    pub(super) fn pulse(&self) -> Option<usize> {
        match self {
            Self::DecisionsForcedEarly { .. } => Some(0),
            Self::SpansDropped { .. } => Some(1),
            _ => None,
        }
    }
}
