//! Builds the running pipeline graph from the validated configuration.
//!
//! Exporters are shared: one instance per exporter id and signal, whichever pipelines name
//! it (as in the Collector). Processors are per pipeline: a `batch` listed in two pipelines
//! runs twice. Each pipeline gets one bounded input queue (or, with tail sampling first, a
//! direct sampler intake); each receiver gets one [`TracesSink`] over the inputs of every
//! traces pipeline that lists it, and one [`MetricsSink`] for metrics. A connector listed
//! as an exporter is a consumer at the end of its pipeline whose sink is the inputs of the
//! pipelines that list it as a receiver: `forward` into pipelines of the same signal,
//! `spanmetrics` from traces into metrics.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use prometheus::Registry;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{
    Consumer, Downstream, ExporterFanout, ForwardConnector, MetricsBatch, MetricsInput,
    MetricsSink, PIPELINE_INPUT_CAPACITY, Payload, PipelineInput, TraceBatch, TracesSink,
};
use crate::batcher::{BatchMetricFamilies, Batcher};
use crate::config::{
    ComponentId, Config, ConnectorConfig, ExporterConfig, ExtensionConfig, PipelineId,
    ProcessorConfig, Signal,
};
use crate::connector::{SpanMetricsFlusher, SpanMetricsMetricFamilies};
use crate::exporter::remote_write::RemoteWriteMetricFamilies;
use crate::exporter::{
    ExporterError, ExporterMetricFamilies, MetricsExporter, QueueStorage, TracesExporter,
};
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

/// The running stages behind the receivers, grouped in the order they drain (see
/// [`crate::shutdown`]).
pub struct DrainStages {
    /// The processor tasks of the traces pipelines (including forward-only stages).
    pub traces_stages: Vec<JoinHandle<()>>,
    /// The connector tasks that emit into metrics pipelines (span metrics flushers): each
    /// ends after its last flush, once the traces pipelines feeding it have drained.
    pub connector_tasks: Vec<JoinHandle<()>>,
    /// The processor tasks of the metrics pipelines.
    pub metrics_stages: Vec<JoinHandle<()>>,
    /// The traces exporters, one per exporter id used in a traces pipeline.
    pub traces_exporters: Vec<(ComponentId, TracesExporter)>,
    /// The metrics exporters, one per exporter id used in a metrics pipeline.
    pub metrics_exporters: Vec<(ComponentId, MetricsExporter)>,
}

/// The running stages behind the receivers: processor tasks, connectors and exporters.
pub struct Pipelines {
    /// The sink of each receiver that feeds at least one traces pipeline.
    pub traces_sinks: BTreeMap<ComponentId, TracesSink>,
    /// The sink of each receiver that feeds at least one metrics pipeline.
    pub metrics_sinks: BTreeMap<ComponentId, MetricsSink>,
    stages: DrainStages,
}

impl Pipelines {
    /// Takes the tasks and exporters for the drain; see [`crate::shutdown`].
    pub fn into_parts(self) -> DrainStages {
        self.stages
    }
}

/// What the build accumulates.
struct Builder<'c> {
    config: &'c Config,
    budget: &'c Arc<MemoryBudget>,
    exporter_families: ExporterMetricFamilies,
    remote_write_families: RemoteWriteMetricFamilies,
    batch_families: BatchMetricFamilies,
    sampler_families: SamplerMetricFamilies,
    span_metrics_families: SpanMetricsMetricFamilies,
    traces_entries: BTreeMap<PipelineId, PipelineInput>,
    metrics_entries: BTreeMap<PipelineId, MetricsInput>,
    traces_connectors: BTreeMap<ComponentId, Arc<dyn Consumer<TraceBatch>>>,
    metrics_connectors: BTreeMap<ComponentId, Arc<dyn Consumer<MetricsBatch>>>,
    stages: DrainStages,
}

/// Starts every exporter, processor and connector of the pipelines in `config`.
///
/// Pipelines are built downstream first, so that a connector is created once every
/// pipeline it feeds has its entry. Exporters are shared per signal: one instance per
/// exporter id and signal, whichever pipelines name it.
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
    let remote_write_families = RemoteWriteMetricFamilies::register(registry, &exporter_families)?;
    let mut builder = Builder {
        config,
        budget,
        exporter_families,
        remote_write_families,
        batch_families: BatchMetricFamilies::register(registry)?,
        sampler_families: SamplerMetricFamilies::register(registry)?,
        span_metrics_families: SpanMetricsMetricFamilies::register(registry)?,
        traces_entries: BTreeMap::new(),
        metrics_entries: BTreeMap::new(),
        traces_connectors: BTreeMap::new(),
        metrics_connectors: BTreeMap::new(),
        stages: DrainStages {
            traces_stages: Vec::new(),
            connector_tasks: Vec::new(),
            metrics_stages: Vec::new(),
            traces_exporters: Vec::new(),
            metrics_exporters: Vec::new(),
        },
    };
    for pipeline_id in downstream_first(config) {
        match pipeline_id.signal {
            Signal::Traces => builder.traces_pipeline(pipeline_id)?,
            Signal::Metrics => builder.metrics_pipeline(pipeline_id)?,
            Signal::Logs => {}
        }
    }

    let mut traces_inputs: BTreeMap<ComponentId, Vec<PipelineInput>> = BTreeMap::new();
    let mut metrics_inputs: BTreeMap<ComponentId, Vec<MetricsInput>> = BTreeMap::new();
    for (pipeline_id, pipeline) in &config.service.pipelines {
        for receiver in &pipeline.receivers {
            if !config.receivers.contains_key(receiver) {
                continue; // a connector: wired above
            }
            if let Some(entry) = builder.traces_entries.get(pipeline_id) {
                traces_inputs
                    .entry(receiver.clone())
                    .or_default()
                    .push(entry.clone());
            }
            if let Some(entry) = builder.metrics_entries.get(pipeline_id) {
                metrics_inputs
                    .entry(receiver.clone())
                    .or_default()
                    .push(entry.clone());
            }
        }
    }
    Ok(Pipelines {
        traces_sinks: traces_inputs
            .into_iter()
            .map(|(id, inputs)| (id, TracesSink::new(inputs, budget.clone())))
            .collect(),
        metrics_sinks: metrics_inputs
            .into_iter()
            .map(|(id, inputs)| (id, MetricsSink::new(inputs, budget.clone())))
            .collect(),
        stages: builder.stages,
    })
}

/// The pipeline ids ordered so that every pipeline comes after the pipelines it feeds
/// through connectors (validation has ruled out cycles).
fn downstream_first(config: &Config) -> Vec<&PipelineId> {
    fn visit<'c>(
        config: &'c Config,
        at: &'c PipelineId,
        visited: &mut BTreeSet<&'c PipelineId>,
        order: &mut Vec<&'c PipelineId>,
    ) {
        if !visited.insert(at) {
            return;
        }
        if let Some(pipeline) = config.service.pipelines.get(at) {
            for exporter in &pipeline.exporters {
                if !config.connectors.contains_key(exporter) {
                    continue;
                }
                for (next_id, next) in &config.service.pipelines {
                    if next.receivers.contains(exporter) {
                        visit(config, next_id, visited, order);
                    }
                }
            }
        }
        order.push(at);
    }
    let mut visited = BTreeSet::new();
    let mut order = Vec::new();
    for id in config.service.pipelines.keys() {
        visit(config, id, &mut visited, &mut order);
    }
    order
}

impl Builder<'_> {
    /// The pipelines that list connector `id` as a receiver and carry `signal`.
    fn receiving(&self, id: &ComponentId, signal: Signal) -> Vec<&PipelineId> {
        self.config
            .service
            .pipelines
            .iter()
            .filter(|(pid, p)| pid.signal == signal && p.receivers.contains(id))
            .map(|(pid, _)| pid)
            .collect()
    }

    /// The traces-side consumer of connector `id`, created on first use.
    fn traces_connector(&mut self, id: &ComponentId) -> Option<Arc<dyn Consumer<TraceBatch>>> {
        if let Some(existing) = self.traces_connectors.get(id) {
            return Some(existing.clone());
        }
        let consumer: Arc<dyn Consumer<TraceBatch>> = match self.config.connectors.get(id)? {
            ConnectorConfig::Forward => {
                let inputs = self
                    .receiving(id, Signal::Traces)
                    .into_iter()
                    .filter_map(|pid| self.traces_entries.get(pid).cloned())
                    .collect();
                Arc::new(ForwardConnector::new(
                    id.clone(),
                    TracesSink::new(inputs, self.budget.clone()),
                ))
            }
            ConnectorConfig::SpanMetrics(span_metrics) => {
                let inputs = self
                    .receiving(id, Signal::Metrics)
                    .into_iter()
                    .filter_map(|pid| self.metrics_entries.get(pid).cloned())
                    .collect();
                let (connector, flusher) = SpanMetricsFlusher::start(
                    id,
                    span_metrics,
                    self.span_metrics_families.for_connector(id),
                    MetricsSink::new(inputs, self.budget.clone()),
                );
                self.stages
                    .connector_tasks
                    .push(tokio::spawn(flusher.run()));
                Arc::new(connector)
            }
        };
        self.traces_connectors.insert(id.clone(), consumer.clone());
        Some(consumer)
    }

    /// The metrics-side consumer of connector `id` (only `forward`), created on first use.
    fn metrics_connector(&mut self, id: &ComponentId) -> Option<Arc<dyn Consumer<MetricsBatch>>> {
        if let Some(existing) = self.metrics_connectors.get(id) {
            return Some(existing.clone());
        }
        let ConnectorConfig::Forward = self.config.connectors.get(id)? else {
            return None; // validation allows only forward here
        };
        let inputs = self
            .receiving(id, Signal::Metrics)
            .into_iter()
            .filter_map(|pid| self.metrics_entries.get(pid).cloned())
            .collect();
        let consumer: Arc<dyn Consumer<MetricsBatch>> = Arc::new(ForwardConnector::new(
            id.clone(),
            MetricsSink::new(inputs, self.budget.clone()),
        ));
        self.metrics_connectors.insert(id.clone(), consumer.clone());
        Some(consumer)
    }

    /// The `file_storage` extension an OTLP exporter's `sending_queue.storage` names
    /// (validation guarantees it is defined and started), with the memory budget.
    fn queue_storage(&self, exporter: &ExporterConfig) -> Option<QueueStorage> {
        let storage = match exporter {
            ExporterConfig::OtlpGrpc(otlp) | ExporterConfig::OtlpHttp(otlp) => {
                otlp.sending_queue.storage.as_ref()?
            }
            ExporterConfig::Debug(_) | ExporterConfig::PrometheusRemoteWrite(_) => return None,
        };
        self.config
            .extensions
            .iter()
            .find_map(|(id, extension)| match extension {
                ExtensionConfig::FileStorage(file_storage)
                    if id.kind == storage.kind && id.name == storage.name =>
                {
                    Some(QueueStorage {
                        file_storage: file_storage.clone(),
                        budget: Some(self.budget.clone()),
                    })
                }
                _ => None,
            })
    }

    fn traces_exporter(&mut self, id: &ComponentId) -> Result<Option<TracesExporter>, BuildError> {
        if let Some((_, exporter)) = self.stages.traces_exporters.iter().find(|(e, _)| e == id) {
            return Ok(Some(exporter.clone()));
        }
        let Some(exporter_config) = self.config.exporters.get(id) else {
            return Ok(None); // validation guarantees it is defined
        };
        let storage = self.queue_storage(exporter_config);
        let exporter = TracesExporter::start_with_storage(
            id,
            exporter_config,
            self.exporter_families.for_exporter(id),
            storage.as_ref(),
        )
        .map_err(|source| BuildError::Exporter {
            id: id.clone(),
            source,
        })?;
        self.stages
            .traces_exporters
            .push((id.clone(), exporter.clone()));
        Ok(Some(exporter))
    }

    fn metrics_exporter(
        &mut self,
        id: &ComponentId,
    ) -> Result<Option<MetricsExporter>, BuildError> {
        if let Some((_, exporter)) = self.stages.metrics_exporters.iter().find(|(e, _)| e == id) {
            return Ok(Some(exporter.clone()));
        }
        let Some(exporter_config) = self.config.exporters.get(id) else {
            return Ok(None);
        };
        let storage = self.queue_storage(exporter_config);
        let exporter = MetricsExporter::start_with_storage(
            id,
            exporter_config,
            self.exporter_families.for_signal(id, "metrics"),
            &self.remote_write_families,
            storage.as_ref(),
        )
        .map_err(|source| BuildError::Exporter {
            id: id.clone(),
            source,
        })?;
        self.stages
            .metrics_exporters
            .push((id.clone(), exporter.clone()));
        Ok(Some(exporter))
    }

    fn traces_pipeline(&mut self, pipeline_id: &PipelineId) -> Result<(), BuildError> {
        let config = self.config;
        let Some(pipeline) = config.service.pipelines.get(pipeline_id) else {
            return Ok(());
        };
        let mut fanout: Vec<(ComponentId, Arc<dyn Consumer<TraceBatch>>)> =
            Vec::with_capacity(pipeline.exporters.len());
        for id in &pipeline.exporters {
            if config.connectors.contains_key(id) {
                if let Some(connector) = self.traces_connector(id) {
                    fanout.push((id.clone(), connector));
                }
            } else if let Some(exporter) = self.traces_exporter(id)? {
                fanout.push((id.clone(), Arc::new(exporter)));
            }
        }

        // Wire the processors back to front, so each knows where its output goes.
        let mut downstream = Downstream::Exporters(ExporterFanout::new(fanout));
        let mut sampler_entry = None;
        for id in pipeline.processors.iter().rev() {
            match config.processors.get(id) {
                Some(ProcessorConfig::Batch(batch)) => {
                    let (sender, receiver) = mpsc::channel(PIPELINE_INPUT_CAPACITY);
                    let batcher: Batcher<TraceBatch> = Batcher::new(
                        batch.clone(),
                        self.batch_families.for_processor(id),
                        self.budget.clone(),
                    );
                    self.stages
                        .traces_stages
                        .push(tokio::spawn(batcher.run(receiver, downstream)));
                    downstream = Downstream::Stage(sender);
                }
                // Admission at the receivers enforces the memory limit, before decoding.
                Some(ProcessorConfig::MemoryLimiter(_)) | None => {}
                // Validation puts it first (after memory limiters only): the receivers
                // feed it directly.
                Some(ProcessorConfig::TailSampling(tail_sampling)) => {
                    let policies =
                        PolicySet::compile(tail_sampling).map_err(|source| BuildError::Policy {
                            processor: id.clone(),
                            source,
                        })?;
                    let metrics = self.sampler_families.for_processor(
                        id,
                        policies.names(),
                        &self.exporter_families.dropped_spans(),
                    );
                    let (ingest, intake_closed) = TailSampler::start(
                        SamplerSettings::from(tail_sampling),
                        policies,
                        metrics,
                        self.budget.clone(),
                        SAMPLER_SHARDS,
                    );
                    let sampler = ingest.sampler().clone();
                    self.stages
                        .traces_stages
                        .push(tokio::spawn(sampler.run(intake_closed, downstream.clone())));
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
                self.stages
                    .traces_stages
                    .push(tokio::spawn(forward(receiver, exporters_only)));
                PipelineInput::Queue {
                    id: pipeline_id.clone(),
                    sender,
                }
            }
        };
        self.traces_entries.insert(pipeline_id.clone(), entry);
        Ok(())
    }

    fn metrics_pipeline(&mut self, pipeline_id: &PipelineId) -> Result<(), BuildError> {
        let config = self.config;
        let Some(pipeline) = config.service.pipelines.get(pipeline_id) else {
            return Ok(());
        };
        let mut fanout: Vec<(ComponentId, Arc<dyn Consumer<MetricsBatch>>)> =
            Vec::with_capacity(pipeline.exporters.len());
        for id in &pipeline.exporters {
            if config.connectors.contains_key(id) {
                if let Some(connector) = self.metrics_connector(id) {
                    fanout.push((id.clone(), connector));
                }
            } else if let Some(exporter) = self.metrics_exporter(id)? {
                fanout.push((id.clone(), Arc::new(exporter)));
            }
        }
        let mut downstream = Downstream::Exporters(ExporterFanout::new(fanout));
        for id in pipeline.processors.iter().rev() {
            // Validation allows only `batch` in metrics pipelines.
            if let Some(ProcessorConfig::Batch(batch)) = config.processors.get(id) {
                let (sender, receiver) = mpsc::channel(PIPELINE_INPUT_CAPACITY);
                let batcher: Batcher<MetricsBatch> = Batcher::new(
                    batch.clone(),
                    self.batch_families.for_processor(id),
                    self.budget.clone(),
                );
                self.stages
                    .metrics_stages
                    .push(tokio::spawn(batcher.run(receiver, downstream)));
                downstream = Downstream::Stage(sender);
            }
        }
        let sender = match downstream {
            Downstream::Stage(sender) => sender,
            exporters_only @ Downstream::Exporters(_) => {
                let (sender, receiver) = mpsc::channel(PIPELINE_INPUT_CAPACITY);
                self.stages
                    .metrics_stages
                    .push(tokio::spawn(forward(receiver, exporters_only)));
                sender
            }
        };
        self.metrics_entries.insert(
            pipeline_id.clone(),
            MetricsInput {
                id: pipeline_id.clone(),
                sender,
            },
        );
        Ok(())
    }
}

/// The stage of a pipeline without processors: passes each request to the exporters,
/// waiting for room in their queues.
async fn forward<P: Payload>(mut input: mpsc::Receiver<P>, output: Downstream<P>) {
    while let Some(batch) = input.recv().await {
        if !output.send(batch).await {
            break;
        }
    }
}
