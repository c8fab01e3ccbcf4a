//! The pipeline graph and the payload that flows along its edges.
//!
//! A traces pipeline is `receivers -> input queue -> processors -> exporters`. Every edge
//! is bounded:
//!
//! - receivers admit a request into every pipeline they feed through [`TracesSink`], which
//!   reserves a slot in each pipeline's input queue before sending to any, so a request
//!   is taken by all of its pipelines or by none, and a full queue becomes a retryable
//!   refusal to the client instead of a drop;
//! - a processor task awaits room downstream ([`Downstream::send`]) and stops reading its
//!   input meanwhile, which is how a slow exporter pushes back to the receivers.

mod graph;
mod payload;

pub use graph::{BuildError, Pipelines, build_pipelines};
pub use payload::{Charge, MetricsBatch, TraceBatch};

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::config::{ComponentId, PipelineId};
use crate::error::PipelineError;
use crate::exporter::TracesExporter;
use crate::limiter::MemoryBudget;
use crate::sampler::SamplerIngest;

/// How many requests a pipeline's input queue holds before receivers wait.
pub const PIPELINE_INPUT_CAPACITY: usize = 64;

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
            ingest.ingest(&batch)?;
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
#[derive(Clone)]
pub enum Downstream {
    /// The input queue of the next processor.
    Stage(mpsc::Sender<TraceBatch>),
    /// Every exporter of the pipeline.
    Exporters(ExporterFanout),
}

impl Downstream {
    /// Sends `batch` on, waiting for room: this wait is the pipeline's backpressure.
    ///
    /// Returns false when the next stage has stopped (only during shutdown).
    pub async fn send(&self, batch: TraceBatch) -> bool {
        match self {
            Self::Stage(sender) => sender.send(batch).await.is_ok(),
            Self::Exporters(fanout) => {
                fanout.send(batch).await;
                true
            }
        }
    }
}

/// The exporters at the end of a pipeline; each receives every batch.
#[derive(Clone)]
pub struct ExporterFanout {
    exporters: Arc<[(ComponentId, TracesExporter)]>,
}

impl ExporterFanout {
    /// A fan-out to `exporters`, in order.
    pub fn new(exporters: Vec<(ComponentId, TracesExporter)>) -> Self {
        Self {
            exporters: exporters.into(),
        }
    }

    /// Hands `batch` to each exporter in turn, waiting for room in each one's queue.
    ///
    /// An exporter that refuses (it is shut down, or exports inline and failed
    /// permanently) has already counted the spans it lost; the others still get the batch.
    pub async fn send(&self, batch: TraceBatch) {
        for (id, exporter) in self.exporters.iter() {
            if let Err(error) = exporter.export(batch.clone()).await {
                tracing::debug!(event = "pipeline.export_refused", exporter = %id, error = %error);
            }
        }
    }
}
