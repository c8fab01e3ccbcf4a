//! What a consumer does with a queued item, and the delivery every OTLP exporter uses: one
//! batch, one request.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;

use super::outcome::{Outcome, Settled};
use super::retry;
use super::state::{DeadlineWatch, Shared};
use super::transport::Transport;
use crate::config::RetryConfig;
use crate::payload::Payload;

/// Something a sending queue holds: it knows how many items (spans, data points) it
/// accounts for.
pub(crate) trait QueueItem: Send + 'static {
    /// Items accounted for.
    fn items(&self) -> usize;
}

impl<P: Payload> QueueItem for P {
    fn items(&self) -> usize {
        self.item_count()
    }
}

/// Delivers queued items of type `I`: the exporter-specific step between the queue and the
/// retry loop.
pub(crate) trait Deliver<I>: Send + Sync + 'static {
    /// Delivers `item`, whose items the caller has [`take`](Shared::take)n, and
    /// [`settle`](Shared::settle)s every one of them, whatever happens (a request stopped by
    /// the deadline is settled as dropped at shutdown).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled delivery leaves items in hand, which shutdown counts as
    /// dropped.
    fn deliver(
        &self,
        item: I,
        deadline: &mut DeadlineWatch,
    ) -> impl Future<Output = Settled> + Send;

    /// Whether a consumer that took `item` should merge the next queued item into it before
    /// delivering (an in-order lane merging up to one request's worth). Default: never.
    fn has_room(&self, _item: &I) -> bool {
        false
    }

    /// Merges `more`, queued behind `item` on the same lane, into `item`. Called only after
    /// [`has_room`](Self::has_room) said yes.
    fn merge(&self, _item: &mut I, _more: I) {}
}

/// Delivers an OTLP batch as one request of its encoded bytes, with retries.
pub(crate) struct BatchDelivery<T> {
    shared: Arc<Shared>,
    transport: T,
    retry: RetryConfig,
}

impl<T: Transport<Request = Bytes>> BatchDelivery<T> {
    /// Delivery over `transport` with `retry`, counted in `shared`.
    pub(crate) fn new(shared: Arc<Shared>, transport: T, retry: RetryConfig) -> Self {
        Self {
            shared,
            transport,
            retry,
        }
    }

    /// The exporter's shared state.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Delivers `batch` with retries and returns the outcome without counting it (the
    /// persistent queue counts only what leaves the disk for good).
    pub(crate) async fn attempt<P: Payload>(
        &self,
        batch: &P,
        deadline: &mut DeadlineWatch,
    ) -> Outcome {
        retry::deliver(
            &self.shared,
            &self.transport,
            &self.retry,
            batch.request(),
            deadline,
        )
        .await
    }
}

impl<P: Payload, T: Transport<Request = Bytes>> Deliver<P> for BatchDelivery<T> {
    async fn deliver(&self, batch: P, deadline: &mut DeadlineWatch) -> Settled {
        let outcome = self.attempt(&batch, deadline).await;
        let items = batch.item_count();
        self.shared.settle(items, &outcome);
        // The batch, and its memory-budget charge, go once it is counted.
        drop(batch);
        let mut settled = Settled::default();
        settled.add(items, outcome);
        settled
    }
}
