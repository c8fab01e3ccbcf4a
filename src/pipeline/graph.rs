//! Builds the running pipeline graph from the validated configuration.
//!
//! Exporters are shared: one instance per exporter id, whichever pipelines name it (as in
//! the Collector). Processors are per pipeline: a `batch` listed in two pipelines runs
//! twice. Each pipeline gets one bounded input queue; each receiver gets one
//! [`TracesSink`] over the inputs of every traces pipeline that lists it.

use std::collections::BTreeMap;
use std::sync::Arc;

use prometheus::Registry;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{
    Downstream, ExporterFanout, PIPELINE_INPUT_CAPACITY, PipelineInput, TraceBatch, TracesSink,
};
use crate::batcher::{BatchMetricFamilies, Batcher};
use crate::config::{ComponentId, Config, ProcessorConfig, Signal};
use crate::exporter::{ExporterError, ExporterMetricFamilies, TracesExporter};
use crate::limiter::MemoryBudget;
use crate::sampler::policy::{PolicyError, PolicySet};
use crate::sampler::{SamplerMetricFamilies, SamplerSettings, TailSampler};

/// Shards per tail sampler: enough that two cores rarely contend for one.
const SAMPLER_SHARDS: usize = 16;

/// Failure to build the graph.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// An exporter could not be started.
    #[error("exporters.{id}: {source}")]
    Exporter {
        /// The exporter's id.
        id: ComponentId,
        /// Why it failed.
        #[source]
        source: ExporterError,
    },
    /// A tail_sampling processor is not first in its pipeline.
    #[error(
        "service.pipelines.{pipeline}.processors: {processor} must come first, after \
         memory_limiter only (it buffers whole traces; put batch after it)"
    )]
    SamplerNotFirst {
        /// The pipeline.
        pipeline: String,
        /// The tail_sampling processor.
        processor: ComponentId,
    },
    /// A tail_sampling processor's policies could not be compiled.
    #[error("processors.{processor}.policies: {source}")]
    Policy {
        /// The processor.
        processor: ComponentId,
        /// Why.
        #[source]
        source: PolicyError,
    },
    /// Metric families could not be registered (a programming error).
    #[error("registering metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

/// The running stages behind the receivers: processor tasks and exporters.
pub struct Pipelines {
    /// The sink of each receiver that feeds at least one traces pipeline.
    pub traces_sinks: BTreeMap<ComponentId, TracesSink>,
    stage_tasks: Vec<JoinHandle<()>>,
    exporters: Vec<(ComponentId, TracesExporter)>,
}

impl Pipelines {
    /// Takes the processor tasks and exporters for the drain; see [`crate::shutdown`].
    pub fn into_parts(self) -> (Vec<JoinHandle<()>>, Vec<(ComponentId, TracesExporter)>) {
        (self.stage_tasks, self.exporters)
    }
}

/// Starts every exporter and processor of the traces pipelines in `config`.
///
/// Must be called inside a tokio runtime.
///
/// # Errors
///
/// When an exporter cannot start (bad TLS files, for example).
pub fn build_pipelines(
    config: &Config,
    registry: &Registry,
    budget: &Arc<MemoryBudget>,
) -> Result<Pipelines, BuildError> {
    let exporter_families = ExporterMetricFamilies::register(registry)?;
    let batch_families = BatchMetricFamilies::register(registry)?;
    let sampler_families = SamplerMetricFamilies::register(registry)?;

    let mut exporters: BTreeMap<ComponentId, TracesExporter> = BTreeMap::new();
    let mut inputs: BTreeMap<ComponentId, Vec<PipelineInput>> = BTreeMap::new();
    let mut stage_tasks = Vec::new();

    for (pipeline_id, pipeline) in &config.service.pipelines {
        if pipeline_id.signal != Signal::Traces {
            continue;
        }
        let mut fanout = Vec::with_capacity(pipeline.exporters.len());
        for id in &pipeline.exporters {
            let exporter = match exporters.get(id) {
                Some(exporter) => exporter.clone(),
                None => {
                    let Some(exporter_config) = config.exporters.get(id) else {
                        continue; // validation guarantees it is defined
                    };
                    let exporter = TracesExporter::start(
                        id,
                        exporter_config,
                        exporter_families.for_exporter(id),
                    )
                    .map_err(|source| BuildError::Exporter {
                        id: id.clone(),
                        source,
                    })?;
                    exporters.insert(id.clone(), exporter.clone());
                    exporter
                }
            };
            fanout.push((id.clone(), exporter));
        }

        // Wire the processors back to front, so each knows where its output goes.
        let mut downstream = Downstream::Exporters(ExporterFanout::new(fanout));
        let mut sampler_entry = None;
        for (position, id) in pipeline.processors.iter().enumerate().rev() {
            match config.processors.get(id) {
                Some(ProcessorConfig::Batch(batch)) => {
                    let (sender, receiver) = mpsc::channel(PIPELINE_INPUT_CAPACITY);
                    let batcher = Batcher::new(
                        batch.clone(),
                        batch_families.for_processor(id),
                        budget.clone(),
                    );
                    stage_tasks.push(tokio::spawn(batcher.run(receiver, downstream)));
                    downstream = Downstream::Stage(sender);
                }
                // Admission at the receivers enforces the memory limit, before decoding.
                Some(ProcessorConfig::MemoryLimiter(_)) | None => {}
                Some(ProcessorConfig::TailSampling(tail_sampling)) => {
                    let only_limiters_before = pipeline.processors[..position].iter().all(|p| {
                        matches!(
                            config.processors.get(p),
                            Some(ProcessorConfig::MemoryLimiter(_))
                        )
                    });
                    if !only_limiters_before {
                        return Err(BuildError::SamplerNotFirst {
                            pipeline: pipeline_id.to_string(),
                            processor: id.clone(),
                        });
                    }
                    let policies =
                        PolicySet::compile(tail_sampling).map_err(|source| BuildError::Policy {
                            processor: id.clone(),
                            source,
                        })?;
                    let metrics = sampler_families.for_processor(id, policies.names());
                    let (ingest, intake_closed) = TailSampler::start(
                        SamplerSettings::from(tail_sampling),
                        policies,
                        metrics,
                        budget.clone(),
                        SAMPLER_SHARDS,
                    );
                    let sampler = ingest.sampler().clone();
                    stage_tasks.push(tokio::spawn(sampler.run(intake_closed, downstream.clone())));
                    sampler_entry = Some(ingest);
                }
            }
        }
        let entry = match (sampler_entry, downstream) {
            (Some(ingest), _) => PipelineInput::Sampler {
                id: pipeline_id.clone(),
                ingest,
            },
            (None, Downstream::Stage(sender)) => PipelineInput::Queue {
                id: pipeline_id.clone(),
                sender,
            },
            (None, exporters_only @ Downstream::Exporters(_)) => {
                let (sender, receiver) = mpsc::channel(PIPELINE_INPUT_CAPACITY);
                stage_tasks.push(tokio::spawn(forward(receiver, exporters_only)));
                PipelineInput::Queue {
                    id: pipeline_id.clone(),
                    sender,
                }
            }
        };
        for receiver in &pipeline.receivers {
            inputs
                .entry(receiver.clone())
                .or_default()
                .push(entry.clone());
        }
    }

    Ok(Pipelines {
        traces_sinks: inputs
            .into_iter()
            .map(|(id, inputs)| (id, TracesSink::new(inputs, budget.clone())))
            .collect(),
        stage_tasks,
        exporters: exporters.into_iter().collect(),
    })
}

/// The stage of a pipeline without processors: passes each request to the exporters,
/// waiting for room in their queues.
async fn forward(mut input: mpsc::Receiver<TraceBatch>, output: Downstream) {
    while let Some(batch) = input.recv().await {
        if !output.send(batch).await {
            break;
        }
    }
}
