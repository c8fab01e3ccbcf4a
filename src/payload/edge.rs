//! The edges between stages: where a stage sends its output ([`Downstream`]) and what sits
//! at the end of a pipeline ([`Consumer`], fanned out by [`ExporterFanout`]). A stage's
//! output is also where it counts what it could not hand on (see [`GiveUp`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::{GiveUp, Payload, TraceBatch};
use crate::config::ComponentId;

/// Where a stage's output goes.
pub enum Target<P: Payload = TraceBatch> {
    /// The input queue of the next processor.
    Stage(mpsc::Sender<P>),
    /// Every exporter (and connector) of the pipeline.
    Exporters(ExporterFanout<P>),
}

impl<P: Payload> Clone for Target<P> {
    fn clone(&self) -> Self {
        match self {
            Self::Stage(sender) => Self::Stage(sender.clone()),
            Self::Exporters(fanout) => Self::Exporters(fanout.clone()),
        }
    }
}

/// A stage's output: where it sends, and when to stop waiting for room there.
pub struct Downstream<P: Payload = TraceBatch> {
    target: Target<P>,
    give_up: GiveUp,
}

impl<P: Payload> Clone for Downstream<P> {
    fn clone(&self) -> Self {
        Self {
            target: self.target.clone(),
            give_up: self.give_up.clone(),
        }
    }
}

/// Items a stage could not hand on; they have been counted as lost.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{items} items could not be handed on and were counted as lost")]
pub struct Lost {
    /// How many (a batch's items once for each consumer that did not get it).
    pub items: usize,
}

impl<P: Payload> Downstream<P> {
    /// Output into the next processor's input queue.
    pub fn stage(sender: mpsc::Sender<P>) -> Self {
        Self {
            target: Target::Stage(sender),
            give_up: GiveUp::default(),
        }
    }

    /// Output to the consumers at the end of the pipeline.
    pub fn exporters(fanout: ExporterFanout<P>) -> Self {
        Self {
            target: Target::Exporters(fanout),
            give_up: GiveUp::default(),
        }
    }

    /// The same output, giving up (and counting) at `give_up`'s signal.
    pub fn with_give_up(self, give_up: GiveUp) -> Self {
        Self { give_up, ..self }
    }

    /// Where the output goes.
    pub fn target(&self) -> &Target<P> {
        &self.target
    }

    /// The shutdown's give-up signal this output obeys.
    pub fn give_up(&self) -> &GiveUp {
        &self.give_up
    }

    /// Sends `batch` on, waiting for room: this wait is the pipeline's backpressure.
    ///
    /// # Errors
    ///
    /// [`Lost`] when the batch (or its copy for some consumer) could not be handed on: the
    /// next stage has stopped, or the shutdown gave up waiting. The items are counted as
    /// lost before this returns; the caller only decides whether to go on.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled send drops the batch uncounted. Stages give up through
    /// the signal instead of being cancelled.
    pub async fn send(&self, batch: P) -> Result<(), Lost> {
        match &self.target {
            Target::Stage(sender) => {
                let permit = tokio::select! {
                    biased;
                    () = self.give_up.raised() => None,
                    reserved = sender.reserve() => reserved.ok(),
                };
                match permit {
                    Some(permit) => {
                        permit.send(batch);
                        Ok(())
                    }
                    None => Err(self.lose(batch.item_count())),
                }
            }
            Target::Exporters(fanout) => {
                let missed = fanout.send_until(batch.clone(), &self.give_up).await;
                match missed {
                    0 => Ok(()),
                    copies => Err(self.lose(batch.item_count() * copies)),
                }
            }
        }
    }

    fn lose(&self, items: usize) -> Lost {
        self.give_up.count_lost(items);
        Lost { items }
    }
}

/// A boxed future, as [`Consumer::consume`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What sits at the end of a pipeline: an exporter, or a connector into other pipelines.
pub trait Consumer<P>: Send + Sync {
    /// Takes `batch`, waiting for room (the pipeline's backpressure). A consumer that
    /// cannot take it has counted and logged the loss itself.
    fn consume(&self, batch: P) -> BoxFuture<'_, ()>;

    /// Whether this consumer reads the views a batch carries
    /// ([`Payload::carried_views`]) instead of walking its request. Fixed for the
    /// consumer's life; consumers that do not read them get batches without views, so
    /// that a queue of theirs does not hold views nobody reads.
    fn reads_views(&self) -> bool {
        false
    }
}

/// A consumer shared by the pipelines that name it.
pub type SharedConsumer<P> = Arc<dyn Consumer<P>>;

/// The consumers at the end of a pipeline; each receives every batch.
pub struct ExporterFanout<P = TraceBatch> {
    consumers: Arc<[(ComponentId, SharedConsumer<P>)]>,
    /// [`Consumer::reads_views`] of each consumer, in the same order.
    reads_views: Arc<[bool]>,
}

impl<P> Clone for ExporterFanout<P> {
    fn clone(&self) -> Self {
        Self {
            consumers: self.consumers.clone(),
            reads_views: self.reads_views.clone(),
        }
    }
}

impl<P: Payload> ExporterFanout<P> {
    /// A fan-out to `consumers`, in order.
    pub fn new(consumers: Vec<(ComponentId, SharedConsumer<P>)>) -> Self {
        let reads_views = consumers
            .iter()
            .map(|(_, consumer)| consumer.reads_views())
            .collect();
        Self {
            consumers: consumers.into(),
            reads_views,
        }
    }

    /// True when at least one consumer reads the views a batch carries.
    pub fn reads_views(&self) -> bool {
        self.reads_views.iter().any(|reads| *reads)
    }

    /// Hands `batch` to each consumer in turn, waiting for room in each one.
    ///
    /// A consumer that refuses (an exporter that is shut down, or exports inline and failed
    /// permanently) has already counted the items it lost; the others still get the batch.
    pub async fn send(&self, batch: P) {
        self.send_until(batch, &GiveUp::default()).await;
    }

    /// [`send`](Self::send) until `give_up` is raised; returns how many consumers did not
    /// get the batch because of it (0 when all did). A consumer whose wait is cut short
    /// has not taken the batch. Consumers that do not read views get the batch without
    /// them.
    pub async fn send_until(&self, batch: P, give_up: &GiveUp) -> usize {
        let without_views = batch.clone().without_views();
        for (index, ((_id, consumer), reads_views)) in self
            .consumers
            .iter()
            .zip(self.reads_views.iter())
            .enumerate()
        {
            let copy = if *reads_views {
                batch.clone()
            } else {
                without_views.clone()
            };
            tokio::select! {
                biased;
                () = give_up.raised() => return self.consumers.len() - index,
                () = consumer.consume(copy) => {}
            }
        }
        0
    }
}
