//! The edges between stages: where a stage sends its output ([`Downstream`]) and what sits
//! at the end of a pipeline ([`Consumer`], fanned out by [`ExporterFanout`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::{Payload, TraceBatch};
use crate::config::ComponentId;

/// Where a stage sends its output.
pub enum Downstream<P: Payload = TraceBatch> {
    /// The input queue of the next processor.
    Stage(mpsc::Sender<P>),
    /// Every exporter (and connector) of the pipeline.
    Exporters(ExporterFanout<P>),
}

impl<P: Payload> Clone for Downstream<P> {
    fn clone(&self) -> Self {
        match self {
            Self::Stage(sender) => Self::Stage(sender.clone()),
            Self::Exporters(fanout) => Self::Exporters(fanout.clone()),
        }
    }
}

impl<P: Payload> Downstream<P> {
    /// Sends `batch` on, waiting for room: this wait is the pipeline's backpressure.
    ///
    /// # Errors
    ///
    /// Gives `batch` back when the next stage has stopped (only during shutdown): the
    /// caller counts its items as lost.
    pub async fn send(&self, batch: P) -> Result<(), P> {
        match self {
            Self::Stage(sender) => sender.send(batch).await.map_err(|refused| refused.0),
            Self::Exporters(fanout) => {
                fanout.send(batch).await;
                Ok(())
            }
        }
    }
}

/// A boxed future, as [`Consumer::consume`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What sits at the end of a pipeline: an exporter, or a connector into other pipelines.
pub trait Consumer<P>: Send + Sync {
    /// Takes `batch`, waiting for room (the pipeline's backpressure). A consumer that
    /// cannot take it has counted and logged the loss itself.
    fn consume(&self, batch: P) -> BoxFuture<'_, ()>;
}

/// A consumer shared by the pipelines that name it.
pub type SharedConsumer<P> = Arc<dyn Consumer<P>>;

/// The consumers at the end of a pipeline; each receives every batch.
pub struct ExporterFanout<P = TraceBatch> {
    consumers: Arc<[(ComponentId, SharedConsumer<P>)]>,
}

impl<P> Clone for ExporterFanout<P> {
    fn clone(&self) -> Self {
        Self {
            consumers: self.consumers.clone(),
        }
    }
}

impl<P: Payload> ExporterFanout<P> {
    /// A fan-out to `consumers`, in order.
    pub fn new(consumers: Vec<(ComponentId, SharedConsumer<P>)>) -> Self {
        Self {
            consumers: consumers.into(),
        }
    }

    /// Hands `batch` to each consumer in turn, waiting for room in each one.
    ///
    /// A consumer that refuses (an exporter that is shut down, or exports inline and failed
    /// permanently) has already counted the items it lost; the others still get the batch.
    pub async fn send(&self, batch: P) {
        for (_id, consumer) in self.consumers.iter() {
            consumer.consume(batch.clone()).await;
        }
    }
}
