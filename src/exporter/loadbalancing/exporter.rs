//! The load-balancing exporter: one OTLP/gRPC exporter per backend, and a ring that says
//! which backend owns each trace id.
//!
//! ```text
//! export(batch) ─> split by owner (ring over the backends) ─┬─> backend A's exporter (queue, retry)
//!                                                           └─> backend B's exporter (queue, retry)
//! ```
//!
//! Admission is all-or-none, as for the other exporters: once `export` has passed the
//! intake check, every piece of the batch is handed to its backend's exporter (waiting for
//! room in its queue), because shutdown and membership changes wait for exports in
//! progress before they change anything. A refused batch is refused whole and counted in
//! `otelcol_exporter_enqueue_failed_spans_total` under the load-balancing exporter's id;
//! pieces accepted by a backend are counted by that backend's exporter, under the label
//! `<id>/<host:port>`.
//!
//! Membership changes ([`LoadBalancer::set_backends`]): backends that stay keep their
//! exporter (and its queue); new ones get one; a removed backend's exporter gives back the
//! batches still queued (`reclaim`, in the export core), which are split again over the new
//! ring and handed to their new owners, never dropped. A request in flight to it that
//! fails (a killed backend refuses connections) comes back the same way instead of being
//! retried (`reclaim_in_flight`); one that succeeds is counted there. The removed exporter
//! is then retired: stopped and forgotten, its counts kept for the shutdown report.
//!
//! One tier (see `local.rs`): a backend that is this process's own receiver is delivered
//! to in-process. Each network backend has a second exporter for hand-offs between
//! samplers, whose requests carry [`HAND_OFF_HEADER`]; samplers that follow this ring
//! (`tail_sampling.hand_off`) see it through [`Peers`], published at every change.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::{Mutex, RwLock, watch};
use tokio::time::Instant;

use super::dns::{Backends, DnsTask, HickoryLookup, Lookup};
use super::local::{LocalReceivers, UpstreamInput};
use super::membership::Membership;
use super::metrics::{
    BackendMetrics, LoadBalancerMetricFamilies, LoadBalancerMetrics, ResolverKind,
};
use super::ring::Ring;
use crate::config::{
    ComponentId, DnsResolverConfig, ExporterConfig, LoadBalancingConfig, OtlpExporterConfig,
    ResolverConfig,
};
use crate::exporter::core::error::{DrainReport, ExportError, ExporterError};
use crate::exporter::core::metrics::{ExporterMetricFamilies, ExporterMetrics};
use crate::exporter::otlp::{Routed, SignalExporter, TracesExporter};
use crate::otlp::{TraceRequestWriter, WireError};
use crate::payload::{
    Arrival, BoxFuture, HAND_OFF_HEADER, Payload, SharedConsumer, TraceBatch, TracesSink,
};
use crate::sampler::{HandOffRefused, Ownership, Peers};

/// How often a membership change takes back, again, what exports in progress push into a
/// removed backend's queue while it waits for them to finish.
const RECLAIM_POLL: Duration = Duration::from_millis(10);

/// One backend: its address and how to reach it.
struct Backend {
    address: String,
    route: Route,
    metrics: BackendMetrics,
}

/// How a backend is reached.
enum Route {
    /// Over the network: one exporter for routed spans, one for hand-offs (its requests
    /// carry [`HAND_OFF_HEADER`]).
    Network {
        exporter: TracesExporter,
        hand_off: TracesExporter,
    },
    /// In-process: this process's own receiver bound at this address.
    Local(SocketAddr),
}

impl Route {
    /// The exporters of a network backend.
    fn exporters(&self) -> Vec<(&TracesExporter, Arrival)> {
        match self {
            Self::Network { exporter, hand_off } => {
                vec![(exporter, Arrival::Sent), (hand_off, Arrival::HandOff)]
            }
            Self::Local(_) => Vec::new(),
        }
    }
}

/// The current backends.
struct Members {
    ring: Ring,
    /// Indexed like `ring.backends()`.
    backends: Vec<Backend>,
}

/// The load-balancing exporter: owns the backends' exporters and the ring. The pipeline
/// reaches it through a [`TracesExporter`] handle ([`LoadBalancer::handle`]); a resolver
/// keeps the `Arc` to call [`LoadBalancer::set_backends`].
pub struct LoadBalancer {
    id: ComponentId,
    template: OtlpExporterConfig,
    families: ExporterMetricFamilies,
    /// Refusals of whole batches (shutdown) are counted under the exporter's own id.
    own: ExporterMetrics,
    metrics: LoadBalancerMetrics,
    /// Exports hold a read guard while they hand their pieces over; membership changes take
    /// the write guard, so they never see half of a batch handed over.
    members: RwLock<Members>,
    /// Set once shutdown began: exports are refused (checked under the read guard).
    closed: AtomicBool,
    /// One membership change at a time.
    changing: Mutex<()>,
    /// Every backend exporter started and not yet retired (a removed one is retired once
    /// its requests in flight have ended): shutdown drains them all. A std mutex: held
    /// only to push, prune or copy, never across an await.
    started: std::sync::Mutex<Vec<TracesExporter>>,
    /// What retiring removed backends' exporters delivered or dropped, for the shutdown
    /// report.
    retired: std::sync::Mutex<DrainReport>,
    /// `true` while the ring has backends: exports wait on it while it is empty (a DNS
    /// resolver that has found nothing yet), rather than refusing and losing the data.
    backends_ready: watch::Sender<bool>,
    /// The DNS resolver task, stopped at shutdown; `None` for the static resolver.
    dns: std::sync::Mutex<Option<DnsTask>>,
    /// This process's receivers that may be backends (shared with the pipelines'
    /// [`UpstreamInput`], which releases them).
    local: Arc<LocalReceivers>,
    /// The ring as samplers that follow it see it, replaced at every change.
    membership: watch::Sender<Arc<dyn Ownership>>,
    /// Set when this process leaves: its own receivers are kept out of the ring.
    leaving: AtomicBool,
    /// The addresses of the last resolution, before this process's own were taken out.
    resolved: std::sync::Mutex<Vec<String>>,
}

/// A load balancer's fields before it has backends.
fn unstarted(
    id: &ComponentId,
    template: OtlpExporterConfig,
    families: &ExporterMetricFamilies,
    metrics: LoadBalancerMetrics,
) -> LoadBalancer {
    let empty: Arc<dyn Ownership> = Arc::new(Membership {
        ring: Ring::default(),
        local: None,
        leaving: false,
    });
    LoadBalancer {
        id: id.clone(),
        template,
        families: families.clone(),
        own: families.for_exporter(id),
        metrics,
        members: RwLock::new(Members {
            ring: Ring::default(),
            backends: Vec::new(),
        }),
        closed: AtomicBool::new(false),
        changing: Mutex::new(()),
        started: std::sync::Mutex::new(Vec::new()),
        retired: std::sync::Mutex::new(DrainReport::default()),
        backends_ready: watch::channel(false).0,
        dns: std::sync::Mutex::new(None),
        local: Arc::new(LocalReceivers::default()),
        membership: watch::channel(empty).0,
        leaving: AtomicBool::new(false),
        resolved: std::sync::Mutex::new(Vec::new()),
    }
}

impl LoadBalancer {
    /// Starts one exporter per backend of `config`'s static resolver, or the DNS resolver's
    /// task, which resolves at once and then every interval (see
    /// [`LoadBalancer::first_resolution`]).
    ///
    /// # Errors
    ///
    /// [`ExporterError`] when a backend's exporter cannot be built (a bad address, header
    /// or TLS file), or the DNS resolver cannot be set up (the system's resolver
    /// configuration cannot be read).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(
        id: &ComponentId,
        config: &LoadBalancingConfig,
        families: &ExporterMetricFamilies,
        lb_families: &LoadBalancerMetricFamilies,
    ) -> Result<Arc<Self>, ExporterError> {
        let (hostnames, resolver) = match &config.resolver {
            ResolverConfig::Static { hostnames } => (hostnames.clone(), ResolverKind::Static),
            ResolverConfig::Dns(_) => (Vec::new(), ResolverKind::Dns),
        };
        let mut lb = unstarted(
            id,
            config.protocol.clone(),
            families,
            lb_families.for_exporter(resolver),
        );
        if let ResolverConfig::Dns(dns) = &config.resolver {
            let lookup = HickoryLookup::new(dns.nameserver.as_deref(), dns.timeout)
                .map_err(|reason| ExporterError::Resolver { reason })?;
            return Ok(Self::with_dns(lb, Arc::new(lookup), dns.clone()));
        }
        let ring = Ring::new(&hostnames);
        let mut backends = Vec::with_capacity(ring.backends().len());
        for address in ring.backends() {
            backends.push(lb.start_backend(address)?);
        }
        lb.metrics.record_resolution(true);
        lb.metrics.record_backends(backends.len());
        tracing::info!(
            event = "exporter.loadbalancing.backends",
            exporter = %id.written,
            resolver = resolver.as_str(),
            backends = ?ring.backends(),
        );
        *lb.resolved.get_mut().unwrap_or_else(|e| e.into_inner()) = hostnames;
        let members = Members { ring, backends };
        lb.publish(&members);
        *lb.members.get_mut() = members;
        lb.backends_ready.send_replace(true);
        Ok(Arc::new(lb))
    }

    /// Wraps `lb` (no backends yet) and starts its DNS resolver task on `lookup`.
    fn with_dns(lb: Self, lookup: Arc<dyn Lookup>, config: DnsResolverConfig) -> Arc<Self> {
        let lb = Arc::new(lb);
        let weak: Weak<Self> = Arc::downgrade(&lb);
        let backends: Weak<dyn Backends> = weak;
        let task = DnsTask::spawn(backends, lookup, config);
        *lb.dns.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
        lb
    }

    /// Starts a load balancer with the DNS resolver `config` over `lookup` instead of
    /// hickory's resolver (for tests of the resolver task).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    #[cfg(test)]
    pub(crate) fn start_dns_with(
        id: &ComponentId,
        template: OtlpExporterConfig,
        config: DnsResolverConfig,
        lookup: Arc<dyn Lookup>,
        families: &ExporterMetricFamilies,
        lb_families: &LoadBalancerMetricFamilies,
    ) -> Arc<Self> {
        let lb = unstarted(
            id,
            template,
            families,
            lb_families.for_exporter(ResolverKind::Dns),
        );
        Self::with_dns(lb, lookup, config)
    }

    /// Waits until the resolver's first resolution has been applied (at once for the
    /// static resolver): the gateway reports ready after this. A first resolution that
    /// found nothing still ends the wait; exports then wait for backends.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn first_resolution(&self) {
        let receiver = {
            let dns = self.dns.lock().unwrap_or_else(|e| e.into_inner());
            dns.as_ref().map(DnsTask::first_receiver)
        };
        if let Some(mut first) = receiver {
            let _ = first.wait_for(|done| *done).await;
        }
    }

    /// The traces exporter handle through which the pipeline exports to this load
    /// balancer; shutting it down shuts the load balancer down.
    pub fn handle(self: &Arc<Self>) -> TracesExporter {
        SignalExporter::routed(self.clone())
    }

    /// The consumer that pipelines exporting to this load balancer hold (one per load
    /// balancer, shared): when the last of them has ended, the local receivers are let go
    /// (see `local.rs`).
    pub fn pipeline_input(self: &Arc<Self>) -> SharedConsumer<TraceBatch> {
        Arc::new(UpstreamInput::new(&self.local, self.handle()))
    }

    /// Makes `receivers` (this process's OTLP/gRPC receivers, by bound address, with the
    /// sinks of their traces pipelines) candidates for backends: a backend at one of
    /// these addresses is delivered to in-process. Backends already started at such an
    /// address switch to in-process delivery (what their exporters queued is delivered to
    /// the receiver over the network).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe.
    pub async fn attach_local(&self, receivers: Vec<(SocketAddr, TracesSink)>) {
        self.local.attach(receivers);
        let mut members = self.members.write().await;
        for backend in &mut members.backends {
            if let Some(address) = self.local.is_local(&backend.address) {
                backend.route = Route::Local(address);
            }
        }
        self.publish(&members);
    }

    /// Takes this process out of its own ring for good (SIGTERM): what it owned is owned
    /// by the other backends from now on, and later resolutions keep it out. When it is
    /// the only backend the ring stays as it is (there is nobody to hand over to).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe.
    pub async fn leave(&self) {
        self.leaving.store(true, Ordering::Release);
        let resolved = self
            .resolved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        tracing::info!(event = "exporter.loadbalancing.leaving", exporter = %self.id.written);
        if let Err(error) = self.apply(&resolved).await {
            tracing::warn!(
                event = "exporter.loadbalancing.leave_failed",
                exporter = %self.id.written,
                error = %error,
            );
        }
        let _one_at_a_time = self.changing.lock().await;
        self.publish(&*self.members.read().await);
    }

    /// Publishes `members` to the samplers that follow this ring.
    fn publish(&self, members: &Members) {
        let local = members
            .backends
            .iter()
            .position(|backend| matches!(backend.route, Route::Local(_)));
        self.membership.send_replace(Arc::new(Membership {
            ring: members.ring.clone(),
            local,
            leaving: self.leaving.load(Ordering::Acquire),
        }));
    }

    /// Starts the backend at `address`: in-process when it is a local receiver, else its
    /// OTLP/gRPC exporters (routed spans and hand-offs) from the template.
    fn start_backend(&self, address: &str) -> Result<Backend, ExporterError> {
        let metrics = self.metrics.for_backend(address);
        if let Some(local) = self.local.is_local(address) {
            return Ok(Backend {
                address: address.to_owned(),
                route: Route::Local(local),
                metrics,
            });
        }
        let exporter = self.start_exporter(address, false)?;
        let hand_off = self.start_exporter(address, true)?;
        Ok(Backend {
            address: address.to_owned(),
            route: Route::Network { exporter, hand_off },
            metrics,
        })
    }

    /// Starts one OTLP/gRPC exporter to `address`, counted under `<id>/<address>` (and
    /// `<id>/<address>/hand_off` for the hand-off exporter, whose requests are marked).
    fn start_exporter(
        &self,
        address: &str,
        hand_off: bool,
    ) -> Result<TracesExporter, ExporterError> {
        let suffix = if hand_off { "/hand_off" } else { "" };
        let written = format!("{}/{address}{suffix}", self.id.written);
        let sub_id = ComponentId {
            written,
            kind: "otlp_grpc".to_owned(),
            name: Some(format!("{address}{suffix}")),
        };
        let mut otlp = OtlpExporterConfig {
            endpoint: address.to_owned(),
            ..self.template.clone()
        };
        if hand_off {
            otlp.headers
                .insert(HAND_OFF_HEADER.to_owned(), "true".to_owned());
        }
        let config = ExporterConfig::OtlpGrpc(otlp);
        let exporter =
            SignalExporter::start(&sub_id, &config, self.families.for_exporter(&sub_id), None)?;
        self.started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(exporter.clone());
        Ok(exporter)
    }

    /// The current backends (`host:port`), in the order they were given.
    pub async fn backends(&self) -> Vec<String> {
        self.members.read().await.ring.backends().to_vec()
    }

    /// Hands each trace of `batch` to the exporter of the backend that owns its id.
    ///
    /// # Errors
    ///
    /// [`ExportError::ShutDown`] for the whole batch once shutdown has begun (nothing was
    /// handed over). Otherwise the first error a backend's exporter returned for its piece
    /// (only with the queue disabled, or when shutdown overtook a wait for queue room);
    /// each piece's spans are counted by the exporter that took or refused them.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled call may have handed some pieces over and not others.
    pub(crate) async fn export(&self, batch: TraceBatch) -> Result<(), ExportError> {
        self.export_as(batch, Arrival::Sent).await
    }

    /// [`export`](Self::export) of spans that arrive at their owners as `arrival` says.
    async fn export_as(&self, batch: TraceBatch, arrival: Arrival) -> Result<(), ExportError> {
        let mut ready = self.backends_ready.subscribe();
        loop {
            {
                let members = self.members.read().await;
                if self.closed.load(Ordering::Acquire) {
                    let items = batch.item_count();
                    self.own.record_enqueue_failed(items);
                    return Err(ExportError::ShutDown { items });
                }
                if !members.backends.is_empty() {
                    return self.hand_over(&members, batch, arrival).await;
                }
            }
            // No backend yet (the resolver has found none): wait without the read guard,
            // so that the membership change that brings backends, or shutdown, can run.
            // The pipeline holds the batch meanwhile, so upstream queues push back.
            if ready.wait_for(|ready| *ready).await.is_err() {
                let items = batch.item_count();
                self.own.record_enqueue_failed(items);
                return Err(ExportError::ShutDown { items });
            }
        }
    }

    /// Splits `batch` over `members` and hands each piece to its owner.
    async fn hand_over(
        &self,
        members: &Members,
        batch: TraceBatch,
        arrival: Arrival,
    ) -> Result<(), ExportError> {
        let pieces = match split_by_owner(&members.ring, batch) {
            Ok(pieces) => pieces,
            Err(Unroutable { batch, reason }) => {
                // Receivers and the framer only produce requests that parse, and the ring
                // is never empty: this is a bug. Keep the data rather than lose it.
                tracing::error!(
                    event = "exporter.loadbalancing.split_failed",
                    exporter = %self.id.written,
                    error = %reason,
                );
                if members.backends.is_empty() {
                    let items = batch.item_count();
                    self.own.record_enqueue_failed(items);
                    return Err(ExportError::ShutDown { items });
                }
                vec![(0, batch)]
            }
        };
        let mut first_error = None;
        for (owner, piece) in pieces {
            let backend = &members.backends[owner];
            let started = Instant::now();
            let result = self.deliver(backend, piece, arrival).await;
            backend.metrics.record(started.elapsed(), result.is_ok());
            if let Err(error) = result {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Hands `piece` to `backend`: its exporter (the hand-off exporter for hand-offs), or
    /// this process's receiver.
    async fn deliver(
        &self,
        backend: &Backend,
        piece: TraceBatch,
        arrival: Arrival,
    ) -> Result<(), ExportError> {
        // A piece sent over the network leaves its views behind: an exporter's queue must
        // not hold them. One delivered here keeps them for the sampler it enters.
        match (&backend.route, arrival) {
            (Route::Network { exporter, .. }, Arrival::Sent) => {
                exporter.export(piece.without_views()).await
            }
            (Route::Network { hand_off, .. }, Arrival::HandOff) => {
                hand_off.export(piece.without_views()).await
            }
            (Route::Local(address), _) => {
                let items = piece.item_count();
                self.local
                    .deliver(*address, piece, arrival)
                    .await
                    .map_err(|_stopped| {
                        self.own.record_enqueue_failed(items);
                        ExportError::ShutDown { items }
                    })
            }
        }
    }

    /// Replaces the backends with `addresses` (`host:port`): the result of one resolution,
    /// the entry point of a resolver.
    ///
    /// Backends that stay keep their exporter; new ones get one built from the template. A
    /// removed backend's queued batches are split over the new ring and handed to their
    /// new owners, before any export that comes after this call; what it already has in
    /// flight finishes there, with its retries. Exports in progress finish first (those
    /// waiting for room in a removed backend's queue get it: the queue is emptied while
    /// they finish). An empty list is counted as a failed resolution and changes nothing.
    ///
    /// Returns whether the backends changed.
    ///
    /// # Errors
    ///
    /// [`ExporterError`] when a new backend's exporter cannot be built; nothing changed.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled call may leave a removed backend's batches unrouted.
    pub async fn set_backends(&self, addresses: &[String]) -> Result<bool, ExporterError> {
        self.metrics.record_resolution(!addresses.is_empty());
        if !addresses.is_empty() {
            addresses.clone_into(&mut self.resolved.lock().unwrap_or_else(|e| e.into_inner()));
        }
        self.apply(addresses).await
    }

    /// Applies one resolution's `addresses`, without this process's own receivers once it
    /// is leaving.
    async fn apply(&self, addresses: &[String]) -> Result<bool, ExporterError> {
        let _one_at_a_time = self.changing.lock().await;
        let leaving = self.leaving.load(Ordering::Acquire);
        let addresses: Vec<String> = addresses
            .iter()
            .filter(|address| !leaving || self.local.is_local(address).is_none())
            .cloned()
            .collect();
        let ring = Ring::new(&addresses);
        if self.closed.load(Ordering::Acquire) || ring.is_empty() {
            return Ok(false);
        }
        let (current, removing): (Vec<String>, Vec<(TracesExporter, Arrival)>) = {
            let members = self.members.read().await;
            if ring.backends() == members.ring.backends() {
                return Ok(false);
            }
            let removing = members
                .backends
                .iter()
                .filter(|b| !ring.backends().contains(&b.address))
                .flat_map(|b| b.route.exporters())
                .map(|(exporter, arrival)| (exporter.clone(), arrival))
                .collect();
            (members.ring.backends().to_vec(), removing)
        };
        let mut added = Vec::new();
        for address in ring.backends().iter().filter(|a| !current.contains(a)) {
            // On an error the exporters started so far hold nothing; dropped, they stop.
            added.push(self.start_backend(address)?);
        }

        // Exports waiting for room in a removed backend's queue hold the read guard: empty
        // that queue (its consumers stop taking) until the write guard comes, keeping the
        // batches in the order they were queued.
        let mut reclaimed = Vec::new();
        let write = self.members.write();
        tokio::pin!(write);
        let mut members = loop {
            for (exporter, arrival) in &removing {
                let batches = exporter.reclaim().await;
                reclaimed.extend(batches.into_iter().map(|batch| (batch, *arrival)));
            }
            tokio::select! {
                biased;
                guard = &mut write => break guard,
                () = tokio::time::sleep(RECLAIM_POLL) => {}
            }
        };
        for (exporter, arrival) in &removing {
            let batches = exporter.reclaim().await;
            reclaimed.extend(batches.into_iter().map(|batch| (batch, *arrival)));
        }
        let mut old: Vec<Option<Backend>> = std::mem::take(&mut members.backends)
            .into_iter()
            .map(Some)
            .collect();
        let mut added: Vec<Option<Backend>> = added.into_iter().map(Some).collect();
        let mut backends = Vec::with_capacity(ring.backends().len());
        for address in ring.backends() {
            let same =
                |slot: &Option<Backend>| slot.as_ref().is_some_and(|b| b.address == *address);
            let backend = old
                .iter_mut()
                .chain(added.iter_mut())
                .find(|slot| same(slot))
                .and_then(Option::take);
            backends.extend(backend);
        }
        members.ring = ring;
        members.backends = backends;
        self.publish(&members);
        self.metrics.record_backends(members.backends.len());
        self.backends_ready
            .send_replace(!members.backends.is_empty());
        tracing::info!(
            event = "exporter.loadbalancing.backends",
            exporter = %self.id.written,
            backends = ?members.ring.backends(),
            removed = removing.len(),
        );
        crate::telemetry::k8s_events::record_peers(
            &self.id.written,
            &current,
            members.ring.backends(),
        );
        // Under the write guard: exports waiting now would otherwise overtake the removed
        // backends' older batches.
        let mut rerouted = 0usize;
        for (batch, arrival) in reclaimed {
            rerouted += batch.item_count();
            if let Err(error) = self.hand_over(&members, batch, arrival).await {
                tracing::warn!(
                    event = "exporter.loadbalancing.reroute_failed",
                    exporter = %self.id.written,
                    error = %error,
                );
            }
        }
        drop(members);
        // Requests the removed backends were waiting to retry (a backend killed, or cut
        // off) come back once each attempt under way ends: bounded by the exporter's
        // `timeout`, which also bounds how long the next change waits for this one.
        for (exporter, arrival) in &removing {
            let in_flight = exporter.reclaim_in_flight().await;
            if in_flight.is_empty() {
                continue;
            }
            let members = self.members.read().await;
            for batch in in_flight {
                rerouted += batch.item_count();
                if let Err(error) = self.hand_over(&members, batch, *arrival).await {
                    tracing::warn!(
                        event = "exporter.loadbalancing.reroute_failed",
                        exporter = %self.id.written,
                        error = %error,
                    );
                }
            }
        }
        if rerouted > 0 {
            tracing::info!(
                event = "exporter.loadbalancing.rerouted",
                exporter = %self.id.written,
                spans = rerouted,
            );
        }
        self.retire(removing.into_iter().map(|(exporter, _)| exporter))
            .await;
        Ok(true)
    }

    /// Stops removed backends' exporters, whose queues were reclaimed and whose consumers
    /// have ended, and forgets them, so that backends coming and going (an autoscaler)
    /// leave no exporter, task or queue-depth series behind. What they still count goes
    /// to the shutdown report.
    async fn retire(&self, removed: impl Iterator<Item = TracesExporter>) {
        for exporter in removed {
            self.started
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|started| started.id() != exporter.id());
            let report = exporter.shutdown(Instant::now()).await;
            let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
            retired.delivered += report.delivered;
            retired.dropped += report.dropped;
        }
    }

    /// Refuses further exports, waits (until `deadline`) for those in progress, then
    /// drains every backend's exporter, current and removed, until `deadline`. A second
    /// call returns at once with an empty report.
    pub(crate) async fn shutdown(&self, deadline: Instant) -> DrainReport {
        if self.closed.swap(true, Ordering::AcqRel) {
            return DrainReport::default();
        }
        // Exports waiting for a first backend see `closed` and refuse.
        self.backends_ready.send_replace(true);
        let dns = self.dns.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(dns) = dns {
            dns.stop(deadline).await;
        }
        // The pipeline's stages have ended before exporters shut down, so this is normally
        // immediate; an export still waiting for queue room at the deadline is refused by
        // its backend's exporter below.
        let _ = tokio::time::timeout_at(deadline, self.members.write()).await;
        let exporters = self
            .started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let drains: Vec<_> = exporters
            .into_iter()
            .map(|exporter| tokio::spawn(exporter.shutdown(deadline)))
            .collect();
        let mut report =
            std::mem::take(&mut *self.retired.lock().unwrap_or_else(|e| e.into_inner()));
        for drain in drains {
            if let Ok(one) = drain.await {
                report.delivered += one.delivered;
                report.dropped += one.dropped;
            }
        }
        report
    }
}

impl Backends for LoadBalancer {
    fn set_backends<'a>(
        &'a self,
        addresses: &'a [String],
    ) -> BoxFuture<'a, Result<bool, ExporterError>> {
        Box::pin(LoadBalancer::set_backends(self, addresses))
    }
}

impl Peers for LoadBalancer {
    fn ownership(&self) -> watch::Receiver<Arc<dyn Ownership>> {
        self.membership.subscribe()
    }

    fn hand_off(&self, batch: TraceBatch) -> BoxFuture<'_, Result<(), HandOffRefused>> {
        Box::pin(async move {
            let spans = batch.item_count();
            self.export_as(batch, Arrival::HandOff)
                .await
                .map_err(|error| HandOffRefused {
                    spans,
                    reason: error.to_string(),
                })
        })
    }
}

impl Routed<TraceBatch> for LoadBalancer {
    fn id(&self) -> &str {
        &self.id.written
    }

    fn export(&self, batch: TraceBatch) -> BoxFuture<'_, Result<(), ExportError>> {
        Box::pin(LoadBalancer::export(self, batch))
    }

    fn shutdown(&self, deadline: Instant) -> BoxFuture<'_, DrainReport> {
        Box::pin(LoadBalancer::shutdown(self, deadline))
    }

    fn started(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.first_resolution())
    }
}

/// A batch that could not be split: the batch, whole, and why.
#[derive(Debug)]
pub(crate) struct Unroutable {
    pub(crate) batch: TraceBatch,
    pub(crate) reason: String,
}

/// Splits `batch` into one batch per owning backend (index into `ring.backends()`), each
/// span going to the owner of its trace id; pieces keep the spans' order and their resource
/// and scope wrappers. A batch whose spans all have one owner is returned as it is, without
/// a copy (and with the views it carries); an empty request yields nothing, and a batch of
/// no items with a request (a sampler's decision records, which are not spans) yields
/// pieces of no items. The pieces share the batch's memory-budget charge, which is
/// released when the last of them is.
///
/// # Errors
///
/// [`Unroutable`] with the batch when its request does not parse or the ring is empty.
pub(crate) fn split_by_owner(
    ring: &Ring,
    batch: TraceBatch,
) -> Result<Vec<(usize, TraceBatch)>, Unroutable> {
    if batch.request.is_empty() {
        return Ok(Vec::new());
    }
    let resources = match batch.views() {
        Ok(resources) => resources,
        Err(error) => return Err(unroutable(batch, &error)),
    };
    let mut owners = Vec::with_capacity(batch.span_count);
    for span in resources
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
    {
        match ring.owner(&span.trace_id) {
            Some(owner) => owners.push(owner),
            None => {
                return Err(Unroutable {
                    batch,
                    reason: "no backend to route to".to_owned(),
                });
            }
        }
    }
    let Some(&first) = owners.first() else {
        return Ok(Vec::new());
    };
    if owners.iter().all(|&owner| owner == first) {
        return Ok(vec![(first, batch)]);
    }
    let mut writers: Vec<Option<TraceRequestWriter>> =
        (0..ring.backends().len()).map(|_| None).collect();
    let mut owner_of = owners.into_iter();
    for rs in resources.iter() {
        for ss in &rs.scope_spans {
            for span in &ss.spans {
                let Some(owner) = owner_of.next() else {
                    unreachable!("one owner was computed per span");
                };
                writers[owner]
                    .get_or_insert_with(TraceRequestWriter::new)
                    .push_view(rs, ss, span);
            }
        }
    }
    Ok(writers
        .into_iter()
        .enumerate()
        .filter_map(|(owner, writer)| {
            let mut piece = TraceBatch::from(writer?.finish());
            if batch.span_count == 0 {
                // Records that are not spans (a sampler's decision hand-off) stay uncounted.
                piece.span_count = 0;
            }
            piece.charge = batch.charge.clone();
            Some((owner, piece))
        })
        .collect())
}

fn unroutable(batch: TraceBatch, error: &WireError) -> Unroutable {
    Unroutable {
        batch,
        reason: error.to_string(),
    }
}

/// Starts the load-balancing exporter `id` behind a traces exporter handle.
impl SignalExporter<TraceBatch> {
    /// Starts the load-balancing exporter `id`: one OTLP/gRPC exporter per backend, built
    /// from `config.protocol`, counted in `families` under `<id>/<host:port>`, with the
    /// load balancer's own metrics in `lb_families`.
    ///
    /// # Errors
    ///
    /// [`ExporterError`] when a backend's exporter cannot be built.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start_load_balancing(
        id: &ComponentId,
        config: &LoadBalancingConfig,
        families: &ExporterMetricFamilies,
        lb_families: &LoadBalancerMetricFamilies,
    ) -> Result<Self, ExporterError> {
        Ok(LoadBalancer::start(id, config, families, lb_families)?.handle())
    }
}
