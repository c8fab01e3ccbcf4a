//! The sending queue: a bounded channel of batches drained by `num_consumers` workers.
//!
//! exporterhelper semantics with `block_on_overflow: true`: a full queue makes
//! [`TracesExporter::export`](super::TracesExporter::export) wait, which is the
//! backpressure the pipeline relies on; nothing is dropped because the queue is full.
//!
//! Shutdown: intake stops (`closed`), the consumers keep draining, including retries, until
//! the queue is empty or the deadline passes; after the deadline every batch they hold or
//! still find is counted as dropped (`shutdown`). Finally the channel is closed and any batch
//! that slipped in is counted too, so every accepted span is accounted for exactly once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::Shared;
use super::retry::deliver;
use crate::payload::Payload;

/// How long past the deadline shutdown waits for consumers to notice it before aborting
/// them. They notice at once unless a transport future does not yield; this only bounds
/// that case.
pub(crate) const ABORT_SLACK: Duration = Duration::from_millis(200);

/// The consumer side of the queue, owned by the exporter handles.
pub(crate) struct SendingQueue<P> {
    // A tokio mutex: consumers hold it while awaiting the next batch (one waits, the others
    // queue on the lock), and shutdown takes it to close the channel.
    rx: Arc<Mutex<mpsc::Receiver<P>>>,
    consumers: std::sync::Mutex<Vec<JoinHandle<()>>>,
    /// Spans taken off the queue and not yet accounted for.
    in_hand: Arc<AtomicUsize>,
}

impl<P: Payload> SendingQueue<P> {
    /// Creates the channel with room for `capacity` batches and spawns `consumers` workers.
    /// Returns the queue and its sender.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub(crate) fn start(
        shared: &Arc<Shared>,
        capacity: usize,
        consumers: usize,
    ) -> (Self, mpsc::Sender<P>) {
        let (tx, rx) = mpsc::channel(capacity);
        let weak = tx.downgrade();
        shared.metrics.observe_queue(
            capacity,
            Box::new(move || {
                weak.upgrade()
                    .map(|tx| tx.max_capacity().saturating_sub(tx.capacity()))
            }),
        );
        let rx = Arc::new(Mutex::new(rx));
        let in_hand = Arc::new(AtomicUsize::new(0));
        let handles = (0..consumers)
            .map(|_| tokio::spawn(consume(shared.clone(), rx.clone(), in_hand.clone())))
            .collect();
        let queue = Self {
            rx,
            consumers: std::sync::Mutex::new(handles),
            in_hand,
        };
        (queue, tx)
    }

    /// Waits for the consumers to drain (they stop at `deadline`, see the module docs), then
    /// closes the channel and counts what is left as dropped. The caller has already set
    /// `closed` and the deadline.
    pub(crate) async fn drain(&self, shared: &Shared, deadline: Instant) {
        let handles =
            std::mem::take(&mut *self.consumers.lock().unwrap_or_else(|e| e.into_inner()));
        for handle in handles {
            let abort = handle.abort_handle();
            if tokio::time::timeout_at(deadline + ABORT_SLACK, handle)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        // Whatever an aborted consumer held was never accounted for.
        let stranded = self.in_hand.swap(0, Ordering::AcqRel);
        if stranded > 0 {
            shared.record_shutdown_drop(stranded);
        }
        let mut rx = self.rx.lock().await;
        rx.close();
        while let Ok(batch) = rx.try_recv() {
            shared.record_shutdown_drop(batch.item_count());
        }
    }
}

/// One consumer: takes batches and delivers them until the queue is closed and empty.
async fn consume<P: Payload>(
    shared: Arc<Shared>,
    rx: Arc<Mutex<mpsc::Receiver<P>>>,
    in_hand: Arc<AtomicUsize>,
) {
    let mut closed = shared.closed.subscribe();
    let mut deadline = shared.deadline.subscribe();
    loop {
        let next = {
            let mut rx = rx.lock().await;
            tokio::select! {
                biased;
                batch = rx.recv() => batch,
                // Once intake is closed, take only what is already queued.
                _ = closed.wait_for(|closed| *closed) => rx.try_recv().ok(),
            }
        };
        let Some(batch) = next else {
            return;
        };
        in_hand.fetch_add(batch.item_count(), Ordering::AcqRel);
        let outcome = deliver(&shared, &batch, &mut deadline).await;
        // No await between these two: an abort (which lands only at an await) sees the
        // batch either in `in_hand` or recorded, never both or neither.
        in_hand.fetch_sub(batch.item_count(), Ordering::AcqRel);
        shared.record_outcome(&batch, &outcome);
    }
}
