//! Giving up at the shutdown deadline without losing count.
//!
//! When the drain's deadline passes, the shutdown raises one signal. A stage that is
//! still waiting to hand a batch on stops waiting, and every item it gives up is counted
//! once in the one counter of lost items (`tailgate_spans_dropped_total` or
//! `tailgate_metric_points_dropped_total`, reason `shutdown`) before it is dropped. Stages
//! keep running until their input closes, so what reaches them after the deadline is
//! handed on (and fails at once, counted) rather than left in a queue that is then
//! dropped unseen: every accepted item ends exported, not sampled, or counted as lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus::IntCounter;
use tokio::sync::watch;

/// Items lost for one signal and reason: the counter, and the total this process has
/// recorded through it, which the shutdown report reads.
#[derive(Clone, Debug)]
pub struct LossCounter {
    counter: IntCounter,
    total: Arc<AtomicU64>,
}

impl LossCounter {
    /// Counts into `counter` (a label-bound child of a dropped-items family).
    pub fn new(counter: IntCounter) -> Self {
        Self {
            counter,
            total: Arc::default(),
        }
    }

    /// Records `items` lost.
    pub fn record(&self, items: usize) {
        self.counter.inc_by(items as u64);
        self.total.fetch_add(items as u64, Ordering::Relaxed);
    }

    /// Items recorded through this counter (and its clones) so far.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
}

/// The sending side of the give-up signal, held by the shutdown.
#[derive(Debug)]
pub struct GiveUpSignal(watch::Sender<bool>);

impl GiveUpSignal {
    /// Tells every stage holding a [`GiveUp`] from this signal to stop waiting.
    pub fn raise(&self) {
        self.0.send_replace(true);
    }
}

/// A stage's view of the give-up signal, with the counter for what it gives up.
///
/// The default never gives up and counts nothing (for stages built outside a gateway,
/// such as in tests and benches).
#[derive(Clone, Debug, Default)]
pub struct GiveUp {
    signal: Option<watch::Receiver<bool>>,
    lost: Option<LossCounter>,
}

impl GiveUp {
    /// A signal and the view of it for stages that count their losses in `lost`. Views for
    /// other signals' stages come from [`for_losses`](Self::for_losses).
    pub fn new(lost: LossCounter) -> (GiveUpSignal, Self) {
        let (sender, receiver) = watch::channel(false);
        (
            GiveUpSignal(sender),
            Self {
                signal: Some(receiver),
                lost: Some(lost),
            },
        )
    }

    /// The same signal, counting losses in `lost` instead.
    pub fn for_losses(&self, lost: LossCounter) -> Self {
        Self {
            signal: self.signal.clone(),
            lost: Some(lost),
        }
    }

    /// True once the signal has been raised.
    pub fn is_raised(&self) -> bool {
        self.signal.as_ref().is_some_and(|signal| *signal.borrow())
    }

    /// Completes when the signal is raised; never, without a signal (or if the shutdown
    /// dropped it without raising it).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes the signal.
    pub async fn raised(&self) {
        let Some(signal) = &self.signal else {
            return std::future::pending().await;
        };
        let mut signal = signal.clone();
        if signal.wait_for(|raised| *raised).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Counts `items` as lost at shutdown.
    pub fn count_lost(&self, items: usize) {
        if let Some(lost) = &self.lost {
            lost.record(items);
        }
    }
}
