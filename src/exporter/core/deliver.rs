//! What a consumer does with a queued item, and the delivery every OTLP exporter uses: one
//! batch, one request.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;

use super::error::ExportError;
use super::outcome::{Outcome, Settled};
use super::retry::{self, Reclaim};
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

/// What became of an item a consumer delivered.
#[derive(Debug)]
pub(crate) enum Delivered<I> {
    /// Every item in it was counted.
    Settled(Settled),
    /// The queue was reclaimed while the item waited for a retry: it was neither delivered
    /// nor counted, and goes back to whoever reclaimed the queue.
    HandedBack(I),
}

impl<I: QueueItem> Delivered<I> {
    /// The result an inline export returns (see [`Settled::into_result`]).
    ///
    /// # Errors
    ///
    /// As [`Settled::into_result`]; an item handed back (which needs a reclaimed queue, so
    /// an inline export never sees it) is [`ExportError::ShutDown`], for the caller to
    /// account for.
    pub(crate) fn into_result(self) -> Result<(), ExportError> {
        match self {
            Delivered::Settled(settled) => settled.into_result(),
            Delivered::HandedBack(item) => Err(ExportError::ShutDown {
                items: item.items(),
            }),
        }
    }
}

/// Delivers queued items of type `I`: the exporter-specific step between the queue and the
/// retry loop.
pub(crate) trait Deliver<I>: Send + Sync + 'static {
    /// Delivers `item`, whose items the caller has [`take`](Shared::take)n, and
    /// [`settle`](Shared::settle)s every one of them, whatever happens (a request stopped by
    /// the deadline is settled as dropped at shutdown), or, for a delivery that allows it,
    /// hands the whole item back, [`hand_back`](Shared::hand_back)ed and uncounted, when the
    /// queue is reclaimed before it is delivered.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled delivery leaves items in hand, which shutdown counts as
    /// dropped.
    fn deliver(
        &self,
        item: I,
        deadline: &mut DeadlineWatch,
    ) -> impl Future<Output = Delivered<I>> + Send;

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
    /// One batch is one request: when the queue is reclaimed (its backend removed from a
    /// load balancer) while the request waits to be retried, it goes back whole.
    async fn deliver(&self, batch: P, deadline: &mut DeadlineWatch) -> Delivered<P> {
        let outcome = retry::deliver_or_hand_back(
            &self.shared,
            &self.transport,
            &self.retry,
            batch.request(),
            deadline,
            Reclaim::HandBack,
        )
        .await;
        let items = batch.item_count();
        if outcome == Outcome::HandedBack {
            self.shared.hand_back(items);
            return Delivered::HandedBack(batch);
        }
        self.shared.settle(items, &outcome);
        // The batch, and its memory-budget charge, go once it is counted.
        drop(batch);
        let mut settled = Settled::default();
        settled.add(items, outcome);
        Delivered::Settled(settled)
    }
}
