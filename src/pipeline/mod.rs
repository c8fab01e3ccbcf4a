//! The pipeline graph and the payload that flows along its edges.
//!
//! A pipeline is `receivers -> input queue -> processors -> exporters`, for traces
//! ([`TraceBatch`]) or metrics ([`MetricsBatch`]). Every edge is bounded:
//!
//! - receivers admit a request into every pipeline they feed through [`TracesSink`] or
//!   [`MetricsSink`], which reserve a slot in each pipeline's input queue before sending to
//!   any, so a request is taken by all of its pipelines or by none, and a full queue
//!   becomes a retryable refusal to the client instead of a drop;
//! - a processor task awaits room downstream ([`Downstream::send`]) and stops reading its
//!   input meanwhile, which is how a slow exporter pushes back to the receivers;
//! - the end of a pipeline is a fan-out to its [`Consumer`]s: exporters, and connectors,
//!   which feed other pipelines (`forward` waits for room in them, as an exporter's queue
//!   makes its caller wait).

mod graph;
mod payload;

pub use graph::{BuildError, DrainStages, Pipelines, build_pipelines};
pub use payload::{Charge, MetricsBatch, Payload, TraceBatch};

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::config::{ComponentId, PipelineId};
use crate::error::PipelineError;
use crate::exporter::{MetricsExporter, TracesExporter};
use crate::limiter::MemoryBudget;
use crate::otlp::ResourceSpansView;
use crate::sampler::SamplerIngest;

/// How many requests a pipeline's input queue holds before receivers wait.
pub const PIPELINE_INPUT_CAPACITY: usize = 64;

/// How long a connector waits before asking a full downstream pipeline again.
const CONNECTOR_RETRY: Duration = Duration::from_millis(20);

/// How long a receiver waits for room in a full pipeline before refusing the request.
pub const ADMISSION_WAIT: Duration = Duration::from_millis(500);

/// The `Retry-After` hint given with a refusal for a full pipeline.
pub const RETRY_AFTER_FULL: Duration = Duration::from_secs(1);

/// The entry of one pipeline.
#[derive(Clone, Debug)]
pub enum PipelineInput {
    /// A bounded queue into the pipeline's first stage.
    Queue {
        /// The pipeline.
        id: PipelineId,
        /// The queue.
        sender: mpsc::Sender<TraceBatch>,
    },
    /// A tail sampler first in the pipeline, fed directly on the receiver's task.
    Sampler {
        /// The pipeline.
        id: PipelineId,
        /// The sampler's intake.
        ingest: SamplerIngest,
    },
}

impl PipelineInput {
    /// The id of the pipeline this enters.
    pub fn id(&self) -> &PipelineId {
        match self {
            Self::Queue { id, .. } | Self::Sampler { id, .. } => id,
        }
    }
}

/// What a receiver hands its data to: the inputs of every pipeline it belongs to.
#[derive(Clone, Debug, Default)]
pub struct TracesSink {
    inputs: Arc<[PipelineInput]>,
    budget: Option<Arc<MemoryBudget>>,
}

impl TracesSink {
    /// A sink feeding `inputs`; requests queued for a pipeline are charged to `budget`.
    pub fn new(inputs: Vec<PipelineInput>, budget: Arc<MemoryBudget>) -> Self {
        Self {
            inputs: inputs.into(),
            budget: Some(budget),
        }
    }

    /// True when no pipeline takes this receiver's traces.
    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty()
    }

    /// True when a tail sampler is the entry of at least one of the pipelines: it needs the
    /// request's spans, so the receiver should parse the request (which validates it as
    /// strictly as [`crate::otlp::count_spans`]) and pass the views to
    /// [`accept_parsed`](Self::accept_parsed), instead of walking it twice.
    pub fn feeds_sampler(&self) -> bool {
        self.inputs
            .iter()
            .any(|input| matches!(input, PipelineInput::Sampler { .. }))
    }

    /// Admits `batch` into every pipeline, or into none.
    ///
    /// Every pipeline is asked for room first: each tail sampler checks its buffer, and a
    /// slot is reserved in each queue (waiting at most [`ADMISSION_WAIT`]). Only then is
    /// the batch handed to all of them.
    ///
    /// # Errors
    ///
    /// [`PipelineError::Overloaded`] when a pipeline stayed full, [`PipelineError::ShuttingDown`]
    /// when a pipeline has stopped. Either way no pipeline received the batch.
    ///
    /// # Cancel safety
    ///
    /// Cancelling drops the reserved slots; no pipeline receives the batch.
    pub async fn accept(&self, batch: TraceBatch) -> Result<(), PipelineError> {
        self.accept_parsed(batch, None).await
    }

    /// [`accept`](Self::accept), with the views of `batch.request` when the caller has
    /// already parsed it ([`crate::otlp::parse_traces_request`] of exactly those bytes):
    /// tail samplers then use them instead of parsing the request again.
    ///
    /// # Errors
    ///
    /// As [`accept`](Self::accept).
    ///
    /// # Cancel safety
    ///
    /// As [`accept`](Self::accept).
    pub async fn accept_parsed(
        &self,
        batch: TraceBatch,
        parsed: Option<&[ResourceSpansView]>,
    ) -> Result<(), PipelineError> {
        let mut permits = Vec::with_capacity(self.inputs.len());
        let mut samplers = Vec::new();
        for input in self.inputs.iter() {
            match input {
                PipelineInput::Sampler { ingest, .. } => {
                    ingest.check_room()?;
                    samplers.push(ingest);
                }
                PipelineInput::Queue { sender, .. } => {
                    match tokio::time::timeout(ADMISSION_WAIT, sender.reserve()).await {
                        Ok(Ok(permit)) => permits.push(permit),
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
        for ingest in samplers {
            match parsed {
                Some(resources) => ingest.ingest_parsed(resources),
                None => ingest.ingest(&batch)?,
            }
        }
        // Queued requests hold their buffer until the next stage is done with it.
        let batch = match (&self.budget, permits.is_empty()) {
            (Some(budget), false) => batch.charged(budget),
            _ => batch,
        };
        // Cloning a batch clones a reference-counted buffer, not the spans.
        for permit in permits {
            permit.send(batch.clone());
        }
        Ok(())
    }
}

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
    /// Returns false when the next stage has stopped (only during shutdown).
    pub async fn send(&self, batch: P) -> bool {
        match self {
            Self::Stage(sender) => sender.send(batch).await.is_ok(),
            Self::Exporters(fanout) => {
                fanout.send(batch).await;
                true
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

impl Consumer<TraceBatch> for TracesExporter {
    fn consume(&self, batch: TraceBatch) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Err(error) = self.export(batch).await {
                tracing::debug!(event = "pipeline.export_refused", error = %error);
            }
        })
    }
}

impl Consumer<MetricsBatch> for MetricsExporter {
    fn consume(&self, batch: MetricsBatch) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Err(error) = self.export(batch).await {
                tracing::debug!(event = "pipeline.export_refused", error = %error);
            }
        })
    }
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

/// The entry of one metrics pipeline: a bounded queue into its first stage.
#[derive(Clone, Debug)]
pub struct MetricsInput {
    /// The pipeline.
    pub id: PipelineId,
    /// The queue.
    pub sender: mpsc::Sender<MetricsBatch>,
}

/// What a metrics receiver (or connector) hands its data to: the inputs of every metrics
/// pipeline it belongs to.
#[derive(Clone, Debug, Default)]
pub struct MetricsSink {
    inputs: Arc<[MetricsInput]>,
    budget: Option<Arc<MemoryBudget>>,
}

impl MetricsSink {
    /// A sink feeding `inputs`; requests queued for a pipeline are charged to `budget`.
    pub fn new(inputs: Vec<MetricsInput>, budget: Arc<MemoryBudget>) -> Self {
        Self {
            inputs: inputs.into(),
            budget: Some(budget),
        }
    }

    /// True when no pipeline takes these metrics.
    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty()
    }

    /// Admits `batch` into every pipeline, or into none: a slot is reserved in each queue
    /// (waiting at most [`ADMISSION_WAIT`]) before the batch is sent to any.
    ///
    /// # Errors
    ///
    /// As [`TracesSink::accept`].
    ///
    /// # Cancel safety
    ///
    /// Cancelling drops the reserved slots; no pipeline receives the batch.
    pub async fn accept(&self, batch: MetricsBatch) -> Result<(), PipelineError> {
        let mut permits = Vec::with_capacity(self.inputs.len());
        for input in self.inputs.iter() {
            match tokio::time::timeout(ADMISSION_WAIT, input.sender.reserve()).await {
                Ok(Ok(permit)) => permits.push(permit),
                Ok(Err(_closed)) => return Err(PipelineError::ShuttingDown),
                Err(_elapsed) => {
                    return Err(PipelineError::Overloaded {
                        reason: "pipeline queue full",
                        retry_after: RETRY_AFTER_FULL,
                    });
                }
            }
        }
        let batch = match &self.budget {
            Some(budget) if !permits.is_empty() => batch.charged(budget),
            _ => batch,
        };
        for permit in permits {
            permit.send(batch.clone());
        }
        Ok(())
    }
}

/// The `forward` connector: what one pipeline exports enters the pipelines that list the
/// connector as a receiver, unchanged. It waits for room in them rather than refusing, so
/// a full downstream pipeline pushes back on the upstream one.
pub struct ForwardConnector<S> {
    id: ComponentId,
    sink: S,
}

impl<S> ForwardConnector<S> {
    /// A forward connector `id` into `sink`.
    pub fn new(id: ComponentId, sink: S) -> Self {
        Self { id, sink }
    }
}

/// Admits into a sink, retrying while it is full: a connector never refuses.
async fn deliver_waiting<F, Fut>(id: &ComponentId, items: usize, mut accept: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), PipelineError>>,
{
    loop {
        match accept().await {
            Ok(()) => return,
            Err(PipelineError::Overloaded { .. }) => tokio::time::sleep(CONNECTOR_RETRY).await,
            Err(error) => {
                // The downstream pipeline stopped first: the drain order makes this a bug.
                tracing::error!(
                    event = "connector.dropped",
                    connector = %id,
                    items,
                    error = %error,
                );
                return;
            }
        }
    }
}

impl Consumer<TraceBatch> for ForwardConnector<TracesSink> {
    fn consume(&self, batch: TraceBatch) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let items = batch.span_count;
            deliver_waiting(&self.id, items, || self.sink.accept(batch.clone())).await;
        })
    }
}

impl Consumer<MetricsBatch> for ForwardConnector<MetricsSink> {
    fn consume(&self, batch: MetricsBatch) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let items = batch.data_points;
            deliver_waiting(&self.id, items, || self.sink.accept(batch.clone())).await;
        })
    }
}

impl MetricsSink {
    /// Admits `batch`, waiting while the pipelines are full (for connectors, which must not
    /// refuse). Logs and drops it only if a pipeline has stopped, which the drain order
    /// rules out.
    pub async fn deliver(&self, connector: &ComponentId, batch: MetricsBatch) {
        let items = batch.data_points;
        deliver_waiting(connector, items, || self.accept(batch.clone())).await;
    }
}
