//! The entry side of pipelines: what a receiver or a connector hands a batch to.
//!
//! A [`Sink`] holds the inputs of every pipeline one receiver (or connector) feeds. It
//! admits a batch into all of them or into none: each input is asked for room first (a
//! slot is reserved in each queue, each directly fed stage checks its buffer), and only
//! then is the batch handed to all of them. A full input becomes a retryable refusal for a
//! receiver ([`Sink::accept`]) and a wait for a connector ([`Sink::deliver`]), which must
//! not refuse.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::{GiveUp, MetricsBatch, Payload, TraceBatch};
use crate::config::PipelineId;
use crate::error::PipelineError;
use crate::limiter::MemoryBudget;

/// How long a receiver waits for room in a full pipeline before refusing the request.
pub const ADMISSION_WAIT: Duration = Duration::from_millis(500);

/// The `Retry-After` hint given with a refusal for a full pipeline.
pub const RETRY_AFTER_FULL: Duration = crate::error::RETRY_AFTER;

/// How long a connector waits before asking a full directly fed stage again (queues are
/// awaited instead: they wake the waiter when a slot frees).
const DIRECT_RETRY: Duration = Duration::from_millis(20);

/// The gRPC metadata key that marks an export request as a hand-off between samplers (see
/// [`Arrival::HandOff`]); its value is ignored.
pub const HAND_OFF_HEADER: &str = "tailgate-handoff";

/// How a batch reached the receiver that admits it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Arrival {
    /// Sent by a sender, or routed by a load balancer: spans as they were produced.
    #[default]
    Sent,
    /// Handed off by a peer's sampler (the request carried [`HAND_OFF_HEADER`]): whole
    /// traces it held undecided and no longer owns, or spans of traces it does not own.
    /// A sampler keeps these, whichever replica its own ring says owns them, so two
    /// samplers whose rings briefly disagree do not pass spans back and forth.
    HandOff,
}

/// A stage that takes batches synchronously on the caller's task instead of through a
/// queue (the tail sampler, whose buffer is its queue).
pub trait DirectEntry<P: Payload>: Send + Sync + fmt::Debug {
    /// Whether a batch can be taken now.
    ///
    /// # Errors
    ///
    /// A retryable [`PipelineError::Overloaded`] while the stage is full.
    fn check_room(&self) -> Result<(), PipelineError>;

    /// Takes `batch`, which arrived as `arrival` says; `views` are those of its request
    /// when the receiver's walk made them ([`Payload::inspect`] of exactly these bytes), so
    /// the stage need not walk it again.
    ///
    /// # Errors
    ///
    /// [`PipelineError::Malformed`] when the stage parses the request itself and it does
    /// not parse (receivers have validated it, so only for batches made elsewhere).
    fn take(
        &self,
        batch: &P,
        views: Option<&P::Views>,
        arrival: Arrival,
    ) -> Result<(), PipelineError>;
}

/// The entry of one pipeline.
pub enum PipelineInput<P: Payload> {
    /// A bounded queue into the pipeline's first stage.
    Queue {
        /// The pipeline.
        id: PipelineId,
        /// The queue.
        sender: mpsc::Sender<P>,
        /// Whether a stage behind the queue reads the request's views
        /// ([`Consumer::reads_views`](super::Consumer::reads_views)): batches then carry
        /// them through the queue ([`Payload::carrying_views`]), charged to the budget.
        wants_views: bool,
    },
    /// A stage first in the pipeline that is fed directly on the caller's task.
    Direct {
        /// The pipeline.
        id: PipelineId,
        /// The stage.
        entry: Arc<dyn DirectEntry<P>>,
    },
}

impl<P: Payload> Clone for PipelineInput<P> {
    fn clone(&self) -> Self {
        match self {
            Self::Queue {
                id,
                sender,
                wants_views,
            } => Self::Queue {
                id: id.clone(),
                sender: sender.clone(),
                wants_views: *wants_views,
            },
            Self::Direct { id, entry } => Self::Direct {
                id: id.clone(),
                entry: entry.clone(),
            },
        }
    }
}

impl<P: Payload> fmt::Debug for PipelineInput<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Queue {
                id, wants_views, ..
            } => f
                .debug_struct("Queue")
                .field("id", id)
                .field("wants_views", wants_views)
                .finish(),
            Self::Direct { id, entry } => f
                .debug_struct("Direct")
                .field("id", id)
                .field("entry", entry)
                .finish(),
        }
    }
}

impl<P: Payload> PipelineInput<P> {
    /// The id of the pipeline this enters.
    pub fn id(&self) -> &PipelineId {
        match self {
            Self::Queue { id, .. } | Self::Direct { id, .. } => id,
        }
    }
}

/// What a receiver (or connector) hands its data to: the inputs of every pipeline it
/// belongs to.
#[derive(Clone)]
pub struct Sink<P: Payload> {
    inputs: Arc<[PipelineInput<P>]>,
    budget: Option<Arc<MemoryBudget>>,
    give_up: GiveUp,
}

/// The sink of a traces receiver or connector.
pub type TracesSink = Sink<TraceBatch>;

/// The sink of a metrics receiver or connector.
pub type MetricsSink = Sink<MetricsBatch>;

impl<P: Payload> Default for Sink<P> {
    /// A sink that feeds no pipeline.
    fn default() -> Self {
        Self {
            inputs: Arc::from(Vec::new()),
            budget: None,
            give_up: GiveUp::default(),
        }
    }
}

impl<P: Payload> fmt::Debug for Sink<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sink")
            .field("signal", &P::SIGNAL)
            .field("inputs", &self.inputs)
            .finish()
    }
}

/// Why [`Sink::deliver`] could not hand a batch on; its items have been counted as lost.
#[derive(Debug, thiserror::Error)]
pub enum Undelivered {
    /// A pipeline the connector feeds has stopped.
    #[error("a pipeline this connector feeds has stopped")]
    Closed,
    /// The shutdown deadline passed while the pipelines were full.
    #[error("the shutdown deadline passed while the pipelines were full")]
    GaveUp,
}

impl<P: Payload> Sink<P> {
    /// A sink feeding `inputs`; batches queued for a pipeline are charged to `budget`.
    pub fn new(inputs: Vec<PipelineInput<P>>, budget: Arc<MemoryBudget>) -> Self {
        Self {
            inputs: inputs.into(),
            budget: Some(budget),
            give_up: GiveUp::default(),
        }
    }

    /// The same sink, whose [`deliver`](Self::deliver) gives up (and counts) at
    /// `give_up`'s signal.
    pub fn with_give_up(self, give_up: GiveUp) -> Self {
        Self { give_up, ..self }
    }

    /// True when no pipeline takes this receiver's data.
    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty()
    }

    /// True when a stage of at least one of the pipelines reads the request's views: a
    /// directly fed stage, or one behind a queue that carries them. The receiver should
    /// then ask [`Payload::inspect`] for them and pass them to
    /// [`accept_with_views`](Self::accept_with_views), instead of the request being
    /// walked again by each stage.
    pub fn wants_views(&self) -> bool {
        self.inputs.iter().any(|input| match input {
            PipelineInput::Direct { .. } => true,
            PipelineInput::Queue { wants_views, .. } => *wants_views,
        })
    }

    /// Admits `batch` into every pipeline, or into none.
    ///
    /// Every pipeline is asked for room first: each directly fed stage checks its buffer,
    /// and a slot is reserved in each queue (waiting at most [`ADMISSION_WAIT`]). Only then
    /// is the batch handed to all of them.
    ///
    /// # Errors
    ///
    /// [`PipelineError::Overloaded`] when a pipeline stayed full,
    /// [`PipelineError::ShuttingDown`] when a pipeline has stopped. Either way no pipeline
    /// received the batch.
    ///
    /// # Cancel safety
    ///
    /// Cancelling drops the reserved slots; no pipeline receives the batch.
    pub async fn accept(&self, batch: P) -> Result<(), PipelineError> {
        self.accept_with_views(batch, None, Arrival::Sent).await
    }

    /// [`accept`](Self::accept), with the views of `batch`'s request when the caller has
    /// already made them ([`Payload::inspect`] of exactly those bytes): directly fed
    /// stages use them instead of walking the request again, and queues whose stages read
    /// them carry them with the batch. Directly fed stages learn how it arrived
    /// (`arrival`).
    ///
    /// # Errors
    ///
    /// As [`accept`](Self::accept).
    ///
    /// # Cancel safety
    ///
    /// As [`accept`](Self::accept).
    pub async fn accept_with_views(
        &self,
        batch: P,
        views: Option<P::Views>,
        arrival: Arrival,
    ) -> Result<(), PipelineError> {
        self.admit(batch, views, arrival, Some(ADMISSION_WAIT))
            .await
    }

    /// Admits `batch` like [`accept`](Self::accept), but waits as long as a pipeline is
    /// full instead of refusing: for connectors, which must not refuse, so that a full
    /// downstream pipeline pushes back on the upstream one.
    ///
    /// # Errors
    ///
    /// [`Undelivered`] when a pipeline has stopped (the drain order stops upstream
    /// pipelines first, so only a bug leads here) or the shutdown gave up waiting. Either
    /// way the batch's items have been counted as lost.
    ///
    /// # Cancel safety
    ///
    /// As [`accept`](Self::accept); a cancelled delivery is not counted.
    pub async fn deliver(&self, batch: P) -> Result<(), Undelivered> {
        let items = batch.item_count();
        let outcome = tokio::select! {
            biased;
            () = self.give_up.raised() => Err(Undelivered::GaveUp),
            delivered = self.deliver_waiting(batch) => delivered,
        };
        if outcome.is_err() {
            self.give_up.count_lost(items);
        }
        outcome
    }

    async fn deliver_waiting(&self, batch: P) -> Result<(), Undelivered> {
        loop {
            match self.admit(batch.clone(), None, Arrival::Sent, None).await {
                Ok(()) => return Ok(()),
                Err(PipelineError::Overloaded { .. }) => tokio::time::sleep(DIRECT_RETRY).await,
                Err(_) => return Err(Undelivered::Closed),
            }
        }
    }

    /// Reserves room in every input (queues waiting at most `wait`, or for as long as it
    /// takes when `None`), then hands `batch` to all of them.
    ///
    /// `views` (or, when `None`, the views `batch` carries) go to the directly fed stages,
    /// and with the batch into the queues that want them; the other queues get the batch
    /// without views, so that nothing holds them longer than a stage that reads them.
    async fn admit(
        &self,
        batch: P,
        views: Option<P::Views>,
        arrival: Arrival,
        wait: Option<Duration>,
    ) -> Result<(), PipelineError> {
        let mut permits = Vec::with_capacity(self.inputs.len());
        let mut direct = Vec::new();
        for input in self.inputs.iter() {
            match input {
                PipelineInput::Direct { entry, .. } => {
                    entry.check_room()?;
                    direct.push(entry);
                }
                PipelineInput::Queue {
                    sender,
                    wants_views,
                    ..
                } => {
                    let reserved = match wait {
                        Some(wait) => tokio::time::timeout(wait, sender.reserve()).await,
                        None => Ok(sender.reserve().await),
                    };
                    match reserved {
                        Ok(Ok(permit)) => permits.push((permit, *wants_views)),
                        Ok(Err(_closed)) => return Err(PipelineError::ShuttingDown),
                        Err(_elapsed) => {
                            return Err(PipelineError::Overloaded {
                                reason: "pipeline queue full",
                                retry_after: RETRY_AFTER_FULL,
                            });
                        }
                    }
                }
            }
        }
        for entry in direct {
            entry.take(&batch, views.as_ref().or(batch.carried_views()), arrival)?;
        }
        if permits.is_empty() {
            return Ok(());
        }
        // Queued batches hold their buffer, and the views they carry, until the next stage
        // is done with them.
        let batch = match &self.budget {
            Some(budget) => batch.charged(budget),
            None => batch,
        };
        let with_views = match views {
            Some(views) if permits.iter().any(|(_, wants_views)| *wants_views) => {
                batch.clone().carrying_views(views, self.budget.as_ref())
            }
            _ => batch.clone(),
        };
        let without_views = batch.without_views();
        // Cloning a batch clones reference-counted buffers, not the items.
        for (permit, wants_views) in permits {
            permit.send(if wants_views {
                with_views.clone()
            } else {
                without_views.clone()
            });
        }
        Ok(())
    }
}
