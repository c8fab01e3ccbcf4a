//! Builds the running pipeline graph from the validated configuration.
//!
//! Exporters are shared: one instance per exporter id and signal, whichever pipelines name
//! it (as in the Collector). Processors are per pipeline: a `batch` listed in two pipelines
//! runs twice. Each pipeline gets one bounded input queue (or, with tail sampling first, a
//! direct sampler entry); each receiver gets one [`TracesSink`] over the inputs of every
//! traces pipeline that lists it, and one [`MetricsSink`] for metrics. A connector listed
//! as an exporter is a consumer at the end of its pipeline whose sink is the inputs of the
//! pipelines that list it as a receiver: `forward` into pipelines of the same signal,
//! `spanmetrics` from traces into metrics.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus::Registry;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::batcher::{BatchMetricFamilies, Batcher};
use crate::config::{
    ComponentId, Config, ConnectorConfig, ExporterConfig, ExtensionConfig, HandOffConfig,
    PipelineId, ProcessorConfig, Signal,
};
use crate::connector::{ForwardConnector, SpanMetricsFlusher, SpanMetricsMetricFamilies};
use crate::exporter::loadbalancing::{LoadBalancer, LoadBalancerMetricFamilies};
use crate::exporter::remote_write::RemoteWriteMetricFamilies;
use crate::exporter::{
    ExporterError, ExporterMetricFamilies, FailureReason, MetricsExporter, QueueStorage,
    TracesExporter,
};
use crate::limiter::MemoryBudget;
use crate::payload::{
    Consumer, DirectEntry, Downstream, ExporterFanout, GiveUp, GiveUpSignal, LossCounter,
    MetricsBatch, MetricsSink, Payload, PipelineInput, SharedConsumer, Sink, Target, TraceBatch,
    TracesSink,
};
use crate::sampler::policy::{PolicyError, PolicySet};
use crate::sampler::{HandOffSettings, Peers, SamplerMetricFamilies, SamplerSettings, TailSampler};

/// How many requests a pipeline's input queue holds before receivers wait.
pub const PIPELINE_INPUT_CAPACITY: usize = 64;

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
    /// Raised at the shutdown deadline: every stage stops waiting for room downstream and
    /// counts what it gives up.
    pub give_up: GiveUpSignal,
    /// Spans the stages gave up at the deadline (exporters count their own).
    pub lost_spans: LossCounter,
    /// Metric points the stages gave up at the deadline (exporters count their own).
    pub lost_points: LossCounter,
}

/// The running stages behind the receivers: processor tasks, connectors and exporters.
pub struct Pipelines {
    /// The sink of each receiver that feeds at least one traces pipeline.
    pub traces_sinks: BTreeMap<ComponentId, TracesSink>,
    /// The sink of each receiver that feeds at least one metrics pipeline.
    pub metrics_sinks: BTreeMap<ComponentId, MetricsSink>,
    stages: DrainStages,
    load_balancers: Vec<RunningLoadBalancer>,
}

/// A running `loadbalancing` exporter, as the gateway's start and shutdown need it.
struct RunningLoadBalancer {
    load_balancer: Arc<LoadBalancer>,
    /// Receivers that feed the pipelines exporting to it: never its local backends (that
    /// would route spans back into the pipeline that routed them).
    upstream: BTreeSet<ComponentId>,
    /// `hand_off.leave_delay` of the samplers that follow its ring; `None` when none does.
    leave_delay: Option<Duration>,
}

impl Pipelines {
    /// Resolves once every exporter is ready for the gateway to report ready (a load
    /// balancer's first DNS resolution, bounded by its timeout).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn started(&self) {
        for (_, exporter) in &self.stages.traces_exporters {
            exporter.started().await;
        }
    }

    /// Makes this process's OTLP/gRPC receivers (bound addresses in `grpc`, by receiver
    /// id; traces sinks in `sinks`) the local backends of every load balancer, except
    /// those receivers that feed it.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe.
    pub async fn attach_local_receivers(
        &self,
        grpc: &BTreeMap<String, SocketAddr>,
        sinks: &BTreeMap<ComponentId, TracesSink>,
    ) {
        for running in &self.load_balancers {
            let receivers = sinks
                .iter()
                .filter(|(id, _)| !running.upstream.contains(id))
                .filter_map(|(id, sink)| Some((*grpc.get(&id.written)?, sink.clone())))
                .collect();
            running.load_balancer.attach_local(receivers).await;
        }
    }

    /// Takes this process out of the rings that its samplers follow (the first step of
    /// leaving, on SIGTERM). Returns how long to keep receiving while the peers notice
    /// (the longest `hand_off.leave_delay`); `None` when no sampler follows a ring.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe.
    pub async fn leave(&self) -> Option<Duration> {
        let mut delay = None;
        for running in &self.load_balancers {
            if let Some(leave_delay) = running.leave_delay {
                running.load_balancer.leave().await;
                delay = Some(delay.unwrap_or(Duration::ZERO).max(leave_delay));
            }
        }
        delay
    }

    /// Takes the tasks and exporters for the drain; see [`crate::shutdown`].
    pub fn into_parts(self) -> DrainStages {
        self.stages
    }
}

/// One signal's share of the build: each pipeline's entry, the connectors feeding this
/// signal's pipelines, the give-up view its stages use, and the processor tasks and
/// exporters started for it (handed to the drain at the end).
struct SignalGraph<P: Wiring> {
    entries: BTreeMap<PipelineId, PipelineInput<P>>,
    connectors: BTreeMap<ComponentId, SharedConsumer<P>>,
    give_up: GiveUp,
    stage_tasks: Vec<JoinHandle<()>>,
    exporters: Vec<(ComponentId, P::Exporter)>,
}

impl<P: Wiring> SignalGraph<P> {
    fn new(give_up: GiveUp) -> Self {
        Self {
            entries: BTreeMap::new(),
            connectors: BTreeMap::new(),
            give_up,
            stage_tasks: Vec::new(),
            exporters: Vec::new(),
        }
    }

    /// The sink of each receiver (not connector) listed by this signal's pipelines.
    fn receiver_sinks(
        &self,
        config: &Config,
        budget: &Arc<MemoryBudget>,
    ) -> BTreeMap<ComponentId, Sink<P>> {
        let mut inputs: BTreeMap<ComponentId, Vec<PipelineInput<P>>> = BTreeMap::new();
        for (pipeline_id, pipeline) in &config.service.pipelines {
            let Some(entry) = self.entries.get(pipeline_id) else {
                continue;
            };
            for receiver in &pipeline.receivers {
                if config.receivers.contains_key(receiver) {
                    inputs
                        .entry(receiver.clone())
                        .or_default()
                        .push(entry.clone());
                }
            }
        }
        inputs
            .into_iter()
            .map(|(id, inputs)| (id, Sink::new(inputs, budget.clone())))
            .collect()
    }
}

/// What the build accumulates.
struct Builder<'c> {
    config: &'c Config,
    budget: &'c Arc<MemoryBudget>,
    exporter_families: ExporterMetricFamilies,
    remote_write_families: RemoteWriteMetricFamilies,
    loadbalancer_families: LoadBalancerMetricFamilies,
    batch_families: BatchMetricFamilies,
    sampler_families: SamplerMetricFamilies,
    span_metrics_families: SpanMetricsMetricFamilies,
    traces: SignalGraph<TraceBatch>,
    metrics: SignalGraph<MetricsBatch>,
    /// The span metrics flushers (see [`DrainStages::connector_tasks`]).
    connector_tasks: Vec<JoinHandle<()>>,
    /// The load balancers started, with the consumer their pipelines share.
    load_balancers: BTreeMap<ComponentId, (Arc<LoadBalancer>, SharedConsumer<TraceBatch>)>,
    /// The leave delay of the samplers that follow each load balancer.
    followed: BTreeMap<ComponentId, Duration>,
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
    let shutdown_loss = |family: prometheus::IntCounterVec| {
        LossCounter::new(family.with_label_values(&[FailureReason::Shutdown.as_str()]))
    };
    let lost_spans = shutdown_loss(exporter_families.dropped_spans());
    let lost_points = shutdown_loss(exporter_families.dropped_points());
    let (give_up, traces_give_up) = GiveUp::new(lost_spans.clone());
    let metrics_give_up = traces_give_up.for_losses(lost_points.clone());
    let mut builder = Builder {
        config,
        budget,
        exporter_families,
        remote_write_families,
        loadbalancer_families: LoadBalancerMetricFamilies::register(registry)?,
        batch_families: BatchMetricFamilies::register(registry)?,
        sampler_families: SamplerMetricFamilies::register(registry)?,
        span_metrics_families: SpanMetricsMetricFamilies::register(registry)?,
        traces: SignalGraph::new(traces_give_up),
        metrics: SignalGraph::new(metrics_give_up),
        connector_tasks: Vec::new(),
        load_balancers: BTreeMap::new(),
        followed: BTreeMap::new(),
    };
    for pipeline_id in downstream_first(config) {
        match pipeline_id.signal {
            Signal::Traces => builder.pipeline::<TraceBatch>(pipeline_id)?,
            Signal::Metrics => builder.pipeline::<MetricsBatch>(pipeline_id)?,
            Signal::Logs => {}
        }
    }
    let load_balancers = std::mem::take(&mut builder.load_balancers)
        .into_iter()
        .map(|(id, (load_balancer, _input))| RunningLoadBalancer {
            upstream: receivers_exporting_to(config, &id),
            leave_delay: builder.followed.get(&id).copied(),
            load_balancer,
        })
        .collect();
    Ok(Pipelines {
        load_balancers,
        traces_sinks: builder.traces.receiver_sinks(config, budget),
        metrics_sinks: builder.metrics.receiver_sinks(config, budget),
        stages: DrainStages {
            traces_stages: builder.traces.stage_tasks,
            connector_tasks: builder.connector_tasks,
            metrics_stages: builder.metrics.stage_tasks,
            traces_exporters: builder.traces.exporters,
            metrics_exporters: builder.metrics.exporters,
            give_up,
            lost_spans,
            lost_points,
        },
    })
}

/// The receivers of the traces pipelines that export to `exporter`.
fn receivers_exporting_to(config: &Config, exporter: &ComponentId) -> BTreeSet<ComponentId> {
    config
        .service
        .pipelines
        .iter()
        .filter(|(id, p)| id.signal == Signal::Traces && p.exporters.contains(exporter))
        .flat_map(|(_, p)| p.receivers.iter().cloned())
        .collect()
}

/// The pipeline ids ordered so that every pipeline comes after the pipelines it feeds
/// through connectors (validation has ruled out cycles).
pub(super) fn downstream_first(config: &Config) -> Vec<&PipelineId> {
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

/// What differs between signals when wiring a pipeline: where their parts are kept, how
/// their exporters and connectors start, and which processors may be directly fed.
trait Wiring: Payload {
    /// The exporter handle of this signal.
    type Exporter: Consumer<Self> + Clone + 'static;

    /// This signal's share of the build.
    fn graph<'b>(builder: &'b mut Builder<'_>) -> &'b mut SignalGraph<Self>;

    fn start_exporter(
        builder: &mut Builder<'_>,
        id: &ComponentId,
        config: &ExporterConfig,
        storage: Option<&QueueStorage>,
    ) -> Result<Self::Exporter, ExporterError>;

    /// The consumer that pipelines hold for exporter `id` (started as `exporter`).
    fn pipeline_consumer(
        builder: &Builder<'_>,
        id: &ComponentId,
        exporter: &Self::Exporter,
    ) -> SharedConsumer<Self>;

    /// This signal's consumer of connector `id` (validation has checked the connector
    /// may end a pipeline of this signal).
    fn new_connector(
        builder: &mut Builder<'_>,
        id: &ComponentId,
        connector: &ConnectorConfig,
    ) -> Option<SharedConsumer<Self>>;

    /// Starts a processor that takes its input directly rather than through a queue (a
    /// tail sampler, first in a traces pipeline), sending to `downstream`.
    fn direct_entry(
        builder: &mut Builder<'_>,
        id: &ComponentId,
        processor: &ProcessorConfig,
        downstream: &Downstream<Self>,
    ) -> Result<Option<Arc<dyn DirectEntry<Self>>>, BuildError>;
}

impl Wiring for TraceBatch {
    type Exporter = TracesExporter;

    fn graph<'b>(builder: &'b mut Builder<'_>) -> &'b mut SignalGraph<Self> {
        &mut builder.traces
    }

    fn start_exporter(
        builder: &mut Builder<'_>,
        id: &ComponentId,
        config: &ExporterConfig,
        storage: Option<&QueueStorage>,
    ) -> Result<Self::Exporter, ExporterError> {
        if let ExporterConfig::LoadBalancing(lb) = config {
            let load_balancer = LoadBalancer::start(
                id,
                lb,
                &builder.exporter_families,
                &builder.loadbalancer_families,
            )?;
            let input = load_balancer.pipeline_input();
            let handle = load_balancer.handle();
            builder
                .load_balancers
                .insert(id.clone(), (load_balancer, input));
            return Ok(handle);
        }
        let metrics = builder.exporter_families.for_exporter(id);
        TracesExporter::start(id, config, metrics, storage)
    }

    fn pipeline_consumer(
        builder: &Builder<'_>,
        id: &ComponentId,
        exporter: &Self::Exporter,
    ) -> SharedConsumer<Self> {
        match builder.load_balancers.get(id) {
            Some((_, input)) => input.clone(),
            None => Arc::new(exporter.clone()),
        }
    }

    fn new_connector(
        builder: &mut Builder<'_>,
        id: &ComponentId,
        connector: &ConnectorConfig,
    ) -> Option<SharedConsumer<Self>> {
        Some(match connector {
            ConnectorConfig::Forward => Arc::new(ForwardConnector::new(
                id.clone(),
                builder.connector_sink::<TraceBatch>(id),
            )),
            ConnectorConfig::SpanMetrics(span_metrics) => {
                let (connector, flusher) = SpanMetricsFlusher::start(
                    id,
                    span_metrics,
                    builder.span_metrics_families.for_connector(id),
                    builder.connector_sink::<MetricsBatch>(id),
                    builder.budget.clone(),
                );
                builder.connector_tasks.push(tokio::spawn(flusher.run()));
                Arc::new(connector)
            }
        })
    }

    fn direct_entry(
        builder: &mut Builder<'_>,
        id: &ComponentId,
        processor: &ProcessorConfig,
        downstream: &Downstream<Self>,
    ) -> Result<Option<Arc<dyn DirectEntry<Self>>>, BuildError> {
        let ProcessorConfig::TailSampling(tail_sampling) = processor else {
            return Ok(None);
        };
        let policies = PolicySet::compile(tail_sampling).map_err(|source| BuildError::Policy {
            processor: id.clone(),
            source,
        })?;
        let mut metrics = builder.sampler_families.for_processor(
            id,
            policies.names(),
            &builder.exporter_families.dropped_spans(),
        );
        let peers = match &tail_sampling.hand_off {
            Some(hand_off) => {
                let load_balancer = builder.followed_load_balancer(hand_off)?;
                metrics = builder.sampler_families.for_hand_off(id, metrics);
                let peers: Arc<dyn Peers> = load_balancer;
                let settings = HandOffSettings {
                    debounce: hand_off.debounce,
                };
                Some((peers, settings))
            }
            None => None,
        };
        let (ingest, intake_closed) = TailSampler::start_following(
            SamplerSettings::from(tail_sampling),
            policies,
            metrics,
            builder.budget.clone(),
            SAMPLER_SHARDS,
            peers,
        );
        let sampler = ingest.sampler().clone();
        let tasks = &mut builder.traces.stage_tasks;
        tasks.push(tokio::spawn(
            sampler.clone().run(intake_closed, downstream.clone()),
        ));
        if tail_sampling.hand_off.is_some() {
            tasks.push(tokio::spawn(sampler.run_hand_off()));
        }
        Ok(Some(Arc::new(ingest)))
    }
}

impl Wiring for MetricsBatch {
    type Exporter = MetricsExporter;

    fn graph<'b>(builder: &'b mut Builder<'_>) -> &'b mut SignalGraph<Self> {
        &mut builder.metrics
    }

    fn start_exporter(
        builder: &mut Builder<'_>,
        id: &ComponentId,
        config: &ExporterConfig,
        storage: Option<&QueueStorage>,
    ) -> Result<Self::Exporter, ExporterError> {
        let metrics = builder.exporter_families.for_signal(id, "metrics");
        MetricsExporter::start_with_storage(
            id,
            config,
            metrics,
            &builder.remote_write_families,
            storage,
            Some(builder.budget),
        )
    }

    fn pipeline_consumer(
        _builder: &Builder<'_>,
        _id: &ComponentId,
        exporter: &Self::Exporter,
    ) -> SharedConsumer<Self> {
        Arc::new(exporter.clone())
    }

    fn new_connector(
        builder: &mut Builder<'_>,
        id: &ComponentId,
        connector: &ConnectorConfig,
    ) -> Option<SharedConsumer<Self>> {
        match connector {
            ConnectorConfig::Forward => Some(Arc::new(ForwardConnector::new(
                id.clone(),
                builder.connector_sink::<MetricsBatch>(id),
            ))),
            // Validation allows only forward at the end of a metrics pipeline.
            ConnectorConfig::SpanMetrics(_) => None,
        }
    }

    /// Validation allows only `batch` in metrics pipelines: nothing is fed directly.
    fn direct_entry(
        _builder: &mut Builder<'_>,
        _id: &ComponentId,
        _processor: &ProcessorConfig,
        _downstream: &Downstream<Self>,
    ) -> Result<Option<Arc<dyn DirectEntry<Self>>>, BuildError> {
        Ok(None)
    }
}

impl Builder<'_> {
    /// The load balancer that a sampler's `hand_off.exporter` names, started if no
    /// pipeline has started it yet; the sampler's leave delay is recorded for it.
    fn followed_load_balancer(
        &mut self,
        hand_off: &HandOffConfig,
    ) -> Result<Arc<LoadBalancer>, BuildError> {
        let named = &hand_off.exporter;
        // Validation guarantees a loadbalancing exporter of that kind and name.
        let id = self
            .config
            .exporters
            .keys()
            .find(|id| id.kind == named.kind && id.name == named.name)
            .unwrap_or(named);
        self.consumer::<TraceBatch>(id)?;
        let delay = self
            .followed
            .entry(id.clone())
            .or_insert(hand_off.leave_delay);
        *delay = (*delay).max(hand_off.leave_delay);
        let load_balancer = self.load_balancers.get(id).map(|(lb, _)| lb.clone());
        load_balancer.ok_or_else(|| BuildError::Exporter {
            id: id.clone(),
            source: ExporterError::Routing {
                exporter: id.written.clone(),
            },
        })
    }

    /// The sink a connector `id` feeds: the entries of the pipelines of signal `P` that
    /// list it as a receiver, giving up with the shutdown.
    fn connector_sink<P: Wiring>(&mut self, id: &ComponentId) -> Sink<P> {
        let config = self.config;
        let budget = self.budget.clone();
        let graph = P::graph(self);
        let inputs = config
            .service
            .pipelines
            .iter()
            .filter(|(pid, p)| pid.signal == P::SIGNAL && p.receivers.contains(id))
            .filter_map(|(pid, _)| graph.entries.get(pid).cloned())
            .collect();
        Sink::new(inputs, budget).with_give_up(graph.give_up.clone())
    }

    /// The `file_storage` extension an OTLP exporter's `sending_queue.storage` names
    /// (validation guarantees it is defined and started), with the memory budget.
    fn queue_storage(&self, exporter: &ExporterConfig) -> Option<QueueStorage> {
        let storage = match exporter {
            ExporterConfig::OtlpGrpc(otlp) | ExporterConfig::OtlpHttp(otlp) => {
                otlp.sending_queue.storage.as_ref()?
            }
            ExporterConfig::Debug(_)
            | ExporterConfig::PrometheusRemoteWrite(_)
            | ExporterConfig::LoadBalancing(_) => return None,
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

    /// The consumer named `id` at the end of a pipeline of signal `P`: a connector or an
    /// exporter, started on first use and shared after.
    fn consumer<P: Wiring>(
        &mut self,
        id: &ComponentId,
    ) -> Result<Option<SharedConsumer<P>>, BuildError> {
        if let Some(connector) = self.config.connectors.get(id) {
            if let Some(existing) = P::graph(self).connectors.get(id) {
                return Ok(Some(existing.clone()));
            }
            let consumer = P::new_connector(self, id, connector);
            if let Some(consumer) = &consumer {
                P::graph(self)
                    .connectors
                    .insert(id.clone(), consumer.clone());
            }
            return Ok(consumer);
        }
        if let Some((_, exporter)) = P::graph(self).exporters.iter().find(|(e, _)| e == id) {
            let exporter = exporter.clone();
            return Ok(Some(P::pipeline_consumer(self, id, &exporter)));
        }
        let Some(exporter_config) = self.config.exporters.get(id) else {
            return Ok(None); // validation guarantees it is defined
        };
        let storage = self.queue_storage(exporter_config);
        let exporter =
            P::start_exporter(self, id, exporter_config, storage.as_ref()).map_err(|source| {
                BuildError::Exporter {
                    id: id.clone(),
                    source,
                }
            })?;
        P::graph(self)
            .exporters
            .push((id.clone(), exporter.clone()));
        Ok(Some(P::pipeline_consumer(self, id, &exporter)))
    }

    /// Wires pipeline `pipeline_id` of signal `P` back to front (exporters, then each
    /// processor, then the entry) and records its entry.
    fn pipeline<P: Wiring>(&mut self, pipeline_id: &PipelineId) -> Result<(), BuildError> {
        let config = self.config;
        let Some(pipeline) = config.service.pipelines.get(pipeline_id) else {
            return Ok(());
        };
        let mut fanout: Vec<(ComponentId, SharedConsumer<P>)> =
            Vec::with_capacity(pipeline.exporters.len());
        for id in &pipeline.exporters {
            if let Some(consumer) = self.consumer::<P>(id)? {
                fanout.push((id.clone(), consumer));
            }
        }

        // Wire the processors back to front, so each knows where its output goes.
        let give_up = P::graph(self).give_up.clone();
        let mut downstream =
            Downstream::exporters(ExporterFanout::new(fanout)).with_give_up(give_up.clone());
        let mut direct = None;
        for id in pipeline.processors.iter().rev() {
            let Some(processor) = config.processors.get(id) else {
                continue;
            };
            match processor {
                ProcessorConfig::Batch(batch) => {
                    let (sender, receiver) = mpsc::channel(PIPELINE_INPUT_CAPACITY);
                    let batcher: Batcher<P> = Batcher::new(
                        batch.clone(),
                        self.batch_families.for_processor(id),
                        self.budget.clone(),
                    );
                    P::graph(self)
                        .stage_tasks
                        .push(tokio::spawn(batcher.run(receiver, downstream)));
                    downstream = Downstream::stage(sender).with_give_up(give_up.clone());
                }
                // Admission at the receivers enforces the memory limit, before decoding.
                ProcessorConfig::MemoryLimiter(_) => {}
                // Validation puts it first (after memory limiters only): the receivers
                // feed it directly.
                ProcessorConfig::TailSampling(_) => {
                    direct = P::direct_entry(self, id, processor, &downstream)?;
                }
            }
        }
        let entry = match (direct, downstream.target()) {
            (Some(entry), _) => PipelineInput::Direct {
                id: pipeline_id.clone(),
                entry,
            },
            // A processor first: it makes batches of its own, which carry no views.
            (None, Target::Stage(sender)) => PipelineInput::Queue {
                id: pipeline_id.clone(),
                sender: sender.clone(),
                wants_views: false,
            },
            (None, Target::Exporters(fanout)) => {
                let wants_views = fanout.reads_views();
                let (sender, receiver) = mpsc::channel(PIPELINE_INPUT_CAPACITY);
                P::graph(self)
                    .stage_tasks
                    .push(tokio::spawn(forward(receiver, downstream)));
                PipelineInput::Queue {
                    id: pipeline_id.clone(),
                    sender,
                    wants_views,
                }
            }
        };
        P::graph(self).entries.insert(pipeline_id.clone(), entry);
        Ok(())
    }
}

/// The stage of a pipeline without processors: passes each request to the exporters,
/// waiting for room in their queues. It runs until its input closes, so that what is
/// still queued after the shutdown gave up is handed on (and counted as lost by the
/// output) rather than dropped with the queue.
async fn forward<P: Payload>(mut input: mpsc::Receiver<P>, output: Downstream<P>) {
    while let Some(batch) = input.recv().await {
        if let Err(lost) = output.send(batch).await {
            tracing::debug!(event = "pipeline.undelivered", items = lost.items);
        }
    }
}
