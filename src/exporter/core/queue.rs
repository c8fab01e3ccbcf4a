//! The in-memory sending queue: `lanes` bounded channels, each drained by its own
//! consumers.
//!
//! - One lane with `num_consumers` consumers is exporterhelper's queue (OTLP exporters):
//!   batches go out in parallel, in no particular order.
//! - `num_consumers` lanes of one consumer each is remote write's: items routed to a lane
//!   by series hash go out one at a time, in order, and a consumer merges what is queued
//!   behind its item up to one request's worth ([`Deliver::has_room`]).
//!
//! exporterhelper semantics with `block_on_overflow: true`: a full lane makes
//! [`MemoryQueue::push`] wait, which is the backpressure the pipeline relies on; nothing is
//! dropped because a queue is full.
//!
//! Shutdown: intake stops (`closed`), the consumers keep draining, including retries, until
//! the lanes are empty or the deadline passes; a consumer stops at the first delivery the
//! deadline cut short. Consumers that do not notice the deadline are aborted after
//! [`ABORT_SLACK`]. Then what they held, and every item still queued, is counted as dropped
//! (`shutdown`), so every accepted item is accounted for exactly once.
//!
//! Reclaim (a load balancer removing a backend): [`MemoryQueue::reclaim`] takes back what
//! is queued and stops the consumers from taking more; a consumer whose delivery is waiting
//! to retry gives its item back ([`Delivered::HandedBack`]), and
//! [`MemoryQueue::reclaim_in_flight`] collects those once every consumer has stopped.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::deliver::{Deliver, Delivered, QueueItem};
use super::state::{Shared, reclaimed};

/// How long past the deadline shutdown waits for consumers (or inline exports) to notice it
/// before aborting them. They notice at once unless a transport future does not yield;
/// this only bounds that case.
pub(crate) const ABORT_SLACK: Duration = Duration::from_millis(200);

/// Waits for `task` until [`ABORT_SLACK`] past `deadline`, and aborts it if it is still
/// running then.
pub(crate) async fn join_or_abort<T>(task: JoinHandle<T>, deadline: Instant) {
    let abort = task.abort_handle();
    if tokio::time::timeout_at(deadline + ABORT_SLACK, task)
        .await
        .is_err()
    {
        abort.abort();
    }
}

/// One lane's receiving end, shared by its consumers and the drain.
// A tokio mutex: a consumer holds it while awaiting the next item (the lane's other
// consumers queue on the lock), and the drain takes it to close the channel.
type Lane<I> = Arc<Mutex<mpsc::Receiver<I>>>;

/// The in-memory sending queue.
pub(crate) struct MemoryQueue<I> {
    senders: Vec<mpsc::Sender<I>>,
    lanes: Vec<Lane<I>>,
    // A std mutex: held only to take the handles out, never across an await.
    consumers: std::sync::Mutex<Vec<JoinHandle<()>>>,
    /// Items the consumers gave back after the queue was reclaimed.
    handed_back: HandedBack<I>,
    /// The exporter's state, which holds the reclaim flag.
    shared: Arc<Shared>,
}

/// Items given back by consumers, shared between them and the queue.
type HandedBack<I> = Arc<std::sync::Mutex<Vec<I>>>;

impl<I: QueueItem> MemoryQueue<I> {
    /// Creates `lanes` lanes with room for `capacity` items each, spawns
    /// `consumers_per_lane` consumers on each, delivering with `deliver`, and registers the
    /// queue's depth (all lanes) and capacity with the exporter's metrics.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, or when `lanes` or `capacity` is zero.
    pub(crate) fn start<D: Deliver<I>>(
        shared: &Arc<Shared>,
        deliver: &Arc<D>,
        lanes: usize,
        capacity: usize,
        consumers_per_lane: usize,
    ) -> Self {
        let mut senders = Vec::with_capacity(lanes);
        let mut receivers = Vec::with_capacity(lanes);
        let mut handles = Vec::with_capacity(lanes * consumers_per_lane);
        let handed_back: HandedBack<I> = Arc::new(std::sync::Mutex::new(Vec::new()));
        for _ in 0..lanes {
            let (tx, rx) = mpsc::channel(capacity);
            let lane: Lane<I> = Arc::new(Mutex::new(rx));
            for _ in 0..consumers_per_lane {
                handles.push(tokio::spawn(consume(
                    shared.clone(),
                    deliver.clone(),
                    lane.clone(),
                    handed_back.clone(),
                )));
            }
            senders.push(tx);
            receivers.push(lane);
        }
        let weak: Vec<_> = senders.iter().map(mpsc::Sender::downgrade).collect();
        shared.metrics().observe_queue(
            capacity * lanes,
            Box::new(move || {
                let mut depth = 0;
                for tx in &weak {
                    let tx = tx.upgrade()?;
                    depth += tx.max_capacity().saturating_sub(tx.capacity());
                }
                Some(depth)
            }),
        );
        Self {
            senders,
            lanes: receivers,
            consumers: std::sync::Mutex::new(handles),
            handed_back,
            shared: shared.clone(),
        }
    }

    /// The number of lanes.
    pub(crate) fn lanes(&self) -> usize {
        self.senders.len()
    }

    /// Queues `item` on `lane` (taken modulo the number of lanes), waiting while the lane
    /// is full. Gives the item back once shutdown has begun (also to a call already
    /// waiting); the caller then counts it as refused.
    ///
    /// # Errors
    ///
    /// The item, when the exporter is shut down.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a cancelled call has not queued the item.
    pub(crate) async fn push(&self, shared: &Shared, lane: usize, item: I) -> Result<(), I> {
        if shared.is_closed() {
            return Err(item);
        }
        let tx = &self.senders[lane % self.senders.len()];
        let permit = tokio::select! {
            biased;
            () = shared.closed() => None,
            permit = tx.reserve() => permit.ok(),
        };
        match permit {
            Some(permit) => {
                permit.send(item);
                Ok(())
            }
            None => Err(item),
        }
    }

    /// Takes back every item still queued, in lane order, and stops the consumers from
    /// taking any further item: each finishes the delivery it holds and returns, so that a
    /// later [`drain`](Self::drain) only waits for those. A delivery that allows it gives
    /// its item back rather than wait to retry it; [`reclaim_in_flight`] collects those.
    /// The caller owns the items returned and must account for them (re-route them
    /// elsewhere); they were never counted by this queue's exporter. Items pushed after
    /// this call stay queued until the drain counts them as dropped.
    ///
    /// [`reclaim_in_flight`]: Self::reclaim_in_flight
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled call may have taken items out of a lane and lost them.
    pub(crate) async fn reclaim(&self) -> Vec<I> {
        self.shared.start_reclaim();
        let mut items = Vec::new();
        for lane in &self.lanes {
            // A consumer waiting for an item holds the lane's lock; the flag wakes it and it
            // lets go without taking anything.
            let mut rx = lane.lock().await;
            while let Ok(item) = rx.try_recv() {
                items.push(item);
            }
        }
        items
    }

    /// After [`reclaim`](Self::reclaim): waits for every consumer to stop (each finishes the
    /// attempt under way: bounded by the exporter's `timeout`, or by the shutdown deadline)
    /// and returns the items they gave back, which the caller owns as those of `reclaim`.
    /// Items whose delivery ended otherwise were counted by this exporter.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled call may leave given-back items uncollected, and the
    /// drain then does not count them.
    pub(crate) async fn reclaim_in_flight(&self) -> Vec<I> {
        let handles =
            std::mem::take(&mut *self.consumers.lock().unwrap_or_else(|e| e.into_inner()));
        for handle in handles {
            // A consumer that panicked held nothing it could give back.
            let _ = handle.await;
        }
        std::mem::take(&mut *self.handed_back.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Waits for the consumers to drain (they stop at the deadline, see the module docs),
    /// aborting those still running `ABORT_SLACK` past it, then closes the lanes and counts
    /// what is left as dropped. [`Shared::shutdown`] has closed intake and set `deadline`.
    pub(crate) async fn drain(&self, shared: &Shared, deadline: Instant) {
        let handles =
            std::mem::take(&mut *self.consumers.lock().unwrap_or_else(|e| e.into_inner()));
        for handle in handles {
            join_or_abort(handle, deadline).await;
        }
        // What an aborted consumer held was never counted, nor was what consumers gave
        // back that no reclaimer collected.
        shared.drop_at_shutdown(shared.take_stranded());
        let uncollected =
            std::mem::take(&mut *self.handed_back.lock().unwrap_or_else(|e| e.into_inner()));
        for item in uncollected {
            shared.drop_at_shutdown(item.items());
        }
        for lane in &self.lanes {
            let mut rx = lane.lock().await;
            rx.close();
            while let Ok(item) = rx.try_recv() {
                shared.drop_at_shutdown(item.items());
            }
        }
    }
}

/// One consumer: takes items off its lane and delivers them until the lane is closed and
/// empty, or a delivery is cut short by the shutdown deadline.
///
/// Once the queue is reclaimed, it takes nothing more and returns; an item its delivery
/// gave back goes to `handed_back`.
async fn consume<I: QueueItem, D: Deliver<I>>(
    shared: Arc<Shared>,
    deliver: Arc<D>,
    lane: Lane<I>,
    handed_back: HandedBack<I>,
) {
    let mut deadline = shared.deadline();
    let mut reclaiming = shared.reclaiming();
    loop {
        let next = {
            let mut rx = lane.lock().await;
            let first = tokio::select! {
                biased;
                () = reclaimed(&mut reclaiming) => None,
                item = rx.recv() => item,
                // Once intake is closed, take only what is already queued.
                () = shared.closed() => rx.try_recv().ok(),
            };
            first.map(|mut item| {
                shared.take(item.items());
                while deliver.has_room(&item) {
                    let Ok(more) = rx.try_recv() else {
                        break;
                    };
                    shared.take(more.items());
                    deliver.merge(&mut item, more);
                }
                item
            })
        };
        let Some(item) = next else {
            return;
        };
        match deliver.deliver(item, &mut deadline).await {
            Delivered::Settled(settled) if settled.hit_deadline() => return,
            Delivered::Settled(_) => {}
            Delivered::HandedBack(item) => handed_back
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(item),
        }
    }
}
