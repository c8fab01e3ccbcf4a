//! The OTLP exporters (`otlp` / `otlp_grpc`, `otlphttp` / `otlp_http`) and `debug`, one
//! handle per signal: [`TracesExporter`], and [`SignalExporter<MetricsBatch>`] inside the
//! metrics exporter. Each batch is one request, delivered through the export core's
//! sending queue (in memory or on disk) or inline.
//!
//! [`SignalExporter<MetricsBatch>`]: SignalExporter

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::watch;
use tokio::time::Instant;

use super::core::deliver::{BatchDelivery, Deliver};
use super::core::disk_queue::DiskQueue;
use super::core::error::{DrainReport, ExportError, ExporterError};
use super::core::inline::Inline;
use super::core::metrics::ExporterMetrics;
use super::core::outcome::{Accepted, AttemptError};
use super::core::queue::MemoryQueue;
use super::core::state::Shared;
use super::core::transport::Transport;
use super::debug::DebugExporter;
use super::otlp_grpc::GrpcTransport;
use super::otlp_http::HttpTransport;
use super::otlp_wire::SignalKind;
use crate::config::{ComponentId, ExporterConfig, FileStorageConfig, Signal};
use crate::limiter::MemoryBudget;
use crate::payload::{BoxFuture, Payload, TraceBatch};

/// The traces exporter handle.
pub type TracesExporter = SignalExporter<TraceBatch>;

/// What an exporter whose `sending_queue.storage` is set needs besides its own settings.
#[derive(Clone, Debug)]
pub struct QueueStorage {
    /// The `file_storage` extension named by `sending_queue.storage`.
    pub file_storage: FileStorageConfig,
    /// The memory budget that batches read back from disk are charged to while they are
    /// delivered; `None` leaves them uncharged.
    pub budget: Option<Arc<MemoryBudget>>,
}

/// The OTLP transports, one per exporter.
#[expect(
    clippy::large_enum_variant,
    reason = "one per exporter, built once and held in an Arc"
)]
pub(crate) enum OtlpTransport {
    /// OTLP/gRPC.
    Grpc(GrpcTransport),
    /// OTLP/HTTP (protobuf).
    Http(HttpTransport),
}

impl Transport for OtlpTransport {
    type Request = Bytes;

    async fn send(&self, request: &Bytes, attempt: u32) -> Result<Accepted, AttemptError> {
        match self {
            OtlpTransport::Grpc(t) => t.send(request, attempt).await,
            OtlpTransport::Http(t) => t.send(request, attempt).await,
        }
    }
}

/// Delivery of one batch as one OTLP request.
type OtlpDelivery = BatchDelivery<OtlpTransport>;

/// An exporter that routes each batch over exporters of its own (the load-balancing
/// exporter): what a [`SignalExporter`] needs of it. Defined here, below the exporters that
/// implement it, so that the handle does not depend on them.
pub(crate) trait Routed<P: Payload>: Send + Sync + 'static {
    /// The exporter id as written.
    fn id(&self) -> &str;

    /// As [`SignalExporter::export`].
    fn export(&self, batch: P) -> BoxFuture<'_, Result<(), ExportError>>;

    /// As [`SignalExporter::shutdown`]: stops intake and drains every backend exporter.
    fn shutdown(&self, deadline: Instant) -> BoxFuture<'_, DrainReport>;

    /// As [`SignalExporter::started`]: resolves once the backends' first discovery is done.
    fn started(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// Handle to a running OTLP or debug exporter of one signal; cheap to clone.
///
/// All clones share one exporter; [`shutdown`](Self::shutdown) on any of them stops it for
/// all.
pub struct SignalExporter<P: Payload> {
    inner: Inner<P>,
}

impl<P: Payload> Clone for SignalExporter<P> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

#[derive(Clone)]
enum Inner<P: Payload> {
    /// `sending_queue.enabled`: batches go through the queue to the consumers.
    Queued {
        delivery: Arc<OtlpDelivery>,
        queue: Arc<MemoryQueue<P>>,
    },
    /// `sending_queue.storage`: batches go to disk, and from there to the consumers.
    Persistent {
        delivery: Arc<OtlpDelivery>,
        queue: Arc<DiskQueue<P>>,
    },
    /// Queue disabled: the caller's task runs the export.
    Inline {
        delivery: Arc<OtlpDelivery>,
        inline: Arc<Inline>,
    },
    /// `loadbalancing`: batches are split and handed to one exporter per backend.
    Routed(Arc<dyn Routed<P>>),
    /// `debug`: logs and never fails.
    Debug {
        debug: DebugExporter,
        // Boxed: the handles are much larger than the other variants' pointers.
        metrics: Box<ExporterMetrics>,
        closed: Arc<watch::Sender<bool>>,
    },
}

impl<P: Payload> Inner<P> {
    /// The network exporter's state (`None` for `debug`).
    fn shared(&self) -> Option<&Arc<Shared>> {
        match self {
            Inner::Queued { delivery, .. }
            | Inner::Persistent { delivery, .. }
            | Inner::Inline { delivery, .. } => Some(delivery.shared()),
            Inner::Routed(_) | Inner::Debug { .. } => None,
        }
    }
}

impl<P: Payload> SignalExporter<P> {
    /// The exporter's id as written (its metric label), and how it hands batches on.
    fn describe(&self) -> (&str, &'static str) {
        match &self.inner {
            Inner::Queued { delivery, .. } => (delivery.shared().id(), "queued"),
            Inner::Persistent { delivery, .. } => (delivery.shared().id(), "persistent"),
            Inner::Inline { delivery, .. } => (delivery.shared().id(), "inline"),
            Inner::Routed(routed) => (routed.id(), "routed"),
            Inner::Debug { debug, .. } => (debug.exporter(), "debug"),
        }
    }

    /// The exporter's id as written (its metric label).
    pub(crate) fn id(&self) -> &str {
        self.describe().0
    }
}

impl<P: Payload> fmt::Debug for SignalExporter<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (exporter, mode) = self.describe();
        f.debug_struct("SignalExporter")
            .field("signal", &P::SIGNAL)
            .field("exporter", &exporter)
            .field("mode", &mode)
            .finish_non_exhaustive()
    }
}

impl<P: Payload> SignalExporter<P> {
    /// Builds the exporter for `P`'s signal and spawns its consumer tasks, with the
    /// storage extension that `sending_queue.storage` names (ignored when it names none).
    ///
    /// Network exporters connect lazily: an unreachable endpoint is not an error here, it
    /// shows up as retries. With storage, the queue starts opening here, off the async
    /// workers: batches an earlier run left on disk are queued first, and `export` waits
    /// until the queue is open.
    ///
    /// # Errors
    ///
    /// [`ExporterError`] when the endpoint, a header or the TLS settings cannot be used;
    /// [`ExporterError::Storage`] when the queue's directory is missing and may not be
    /// created, and [`ExporterError::StorageNotProvided`] when the config names a storage
    /// and `storage` is `None`.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(
        id: &ComponentId,
        config: &ExporterConfig,
        metrics: ExporterMetrics,
        storage: Option<&QueueStorage>,
    ) -> Result<Self, ExporterError> {
        let exporter = id.written.clone();
        let signal = SignalKind::of::<P>();
        let (otlp, transport, protocol) = match config {
            ExporterConfig::Debug(debug_config) => {
                tracing::info!(
                    event = "exporter.started",
                    exporter = %exporter,
                    signal = P::SIGNAL.as_str(),
                    protocol = "debug",
                    verbosity = ?debug_config.verbosity,
                );
                let (closed, _) = watch::channel(false);
                return Ok(Self {
                    inner: Inner::Debug {
                        debug: DebugExporter::new(exporter, debug_config.verbosity),
                        metrics: Box::new(metrics),
                        closed: Arc::new(closed),
                    },
                });
            }
            ExporterConfig::PrometheusRemoteWrite(_) => {
                return Err(ExporterError::WrongSignal {
                    exporter,
                    signal: P::SIGNAL.as_str(),
                });
            }
            ExporterConfig::LoadBalancing(_) => {
                return Err(if P::SIGNAL == Signal::Traces {
                    ExporterError::Routing { exporter }
                } else {
                    ExporterError::WrongSignal {
                        exporter,
                        signal: P::SIGNAL.as_str(),
                    }
                });
            }
            ExporterConfig::OtlpGrpc(otlp) => (
                otlp,
                OtlpTransport::Grpc(GrpcTransport::new(otlp, signal)?),
                "grpc",
            ),
            ExporterConfig::OtlpHttp(otlp) => (
                otlp,
                OtlpTransport::Http(HttpTransport::new(otlp, signal)?),
                "http",
            ),
        };
        let shared = Arc::new(Shared::new(exporter, metrics));
        let delivery = Arc::new(BatchDelivery::new(
            shared.clone(),
            transport,
            otlp.retry_on_failure.clone(),
        ));
        let queue = &otlp.sending_queue;
        let signal_endpoint = match signal {
            SignalKind::Traces => otlp.traces_endpoint.as_deref(),
            SignalKind::Metrics => otlp.metrics_endpoint.as_deref(),
        };
        tracing::info!(
            event = "exporter.started",
            exporter = %shared.id(),
            signal = P::SIGNAL.as_str(),
            protocol,
            endpoint = %signal_endpoint.unwrap_or(&otlp.endpoint),
            queue_enabled = queue.enabled,
            queue_size = queue.queue_size.get(),
            num_consumers = queue.num_consumers.get(),
            queue_storage = queue.storage.as_ref().map(|s| s.written.as_str()),
        );
        let inner = if let (true, Some(storage_id)) = (queue.enabled, &queue.storage) {
            let Some(storage) = storage else {
                return Err(ExporterError::StorageNotProvided {
                    storage: storage_id.written.clone(),
                });
            };
            let disk = DiskQueue::start(
                &delivery,
                id,
                &storage.file_storage,
                storage.budget.clone(),
                queue.queue_size.get(),
                queue.num_consumers.get(),
            )
            .map_err(|source| ExporterError::Storage {
                source: Box::new(source),
            })?;
            Inner::Persistent {
                delivery,
                queue: Arc::new(disk),
            }
        } else if queue.enabled {
            let memory = MemoryQueue::start(
                &shared,
                &delivery,
                1,
                queue.queue_size.get(),
                queue.num_consumers.get(),
            );
            Inner::Queued {
                delivery,
                queue: Arc::new(memory),
            }
        } else {
            Inner::Inline {
                delivery,
                inline: Arc::new(Inline::default()),
            }
        };
        Ok(Self { inner })
    }

    /// The handle of a routing exporter.
    pub(crate) fn routed(routed: Arc<dyn Routed<P>>) -> Self {
        Self {
            inner: Inner::Routed(routed),
        }
    }

    /// Takes back the batches still waiting in the sending queue, and stops its consumers
    /// from taking more: each finishes the delivery it holds, with its retries, until
    /// [`shutdown`](Self::shutdown). The caller owns the batches returned and must hand
    /// them on (this exporter never counted them). Empty for exporters without an
    /// in-memory queue: an inline export is held by its caller, and a persistent queue
    /// keeps its batches on disk.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled call may lose batches it took out.
    pub(crate) async fn reclaim(&self) -> Vec<P> {
        match &self.inner {
            Inner::Queued { queue, .. } => queue.reclaim().await,
            Inner::Persistent { .. }
            | Inner::Inline { .. }
            | Inner::Routed(_)
            | Inner::Debug { .. } => Vec::new(),
        }
    }

    /// After [`reclaim`](Self::reclaim): waits until the consumers have stopped and returns
    /// the batches whose delivery was waiting to retry when the queue was reclaimed (each
    /// attempt under way finishes first, bounded by the exporter's `timeout`). The caller
    /// owns them as those of `reclaim`. Empty for exporters without an in-memory queue.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled call may leave batches that shutdown then counts as
    /// dropped.
    pub(crate) async fn reclaim_in_flight(&self) -> Vec<P> {
        match &self.inner {
            Inner::Queued { queue, .. } => queue.reclaim_in_flight().await,
            Inner::Persistent { .. }
            | Inner::Inline { .. }
            | Inner::Routed(_)
            | Inner::Debug { .. } => Vec::new(),
        }
    }

    /// Hands a batch over.
    ///
    /// With the sending queue enabled, waits until the queue has room, then returns `Ok`:
    /// the exporter now owns the batch and will account for every item in it. This wait is
    /// the backpressure the pipeline relies on; a full queue never drops. With the queue
    /// disabled, exports in the caller's task, with retries, and returns the outcome.
    ///
    /// # Errors
    ///
    /// [`ExportError::ShutDown`] once shutdown has begun (also for a call already waiting
    /// for room); [`ExportError::QueueUnavailable`] when the persistent queue could not be
    /// opened; [`ExportError::Failed`] only with the queue disabled, when the batch was
    /// refused permanently or retries ran out.
    ///
    /// # Cancel safety
    ///
    /// With the queue enabled, cancel safe: a cancelled call has not enqueued the batch.
    /// With a persistent queue, not cancel safe: a cancelled call may have written the
    /// batch to disk, and it is then delivered.
    /// With the queue disabled, cancelling abandons the export in progress; its items are
    /// then counted as dropped at shutdown.
    pub async fn export(&self, batch: P) -> Result<(), ExportError> {
        let items = batch.item_count();
        match &self.inner {
            Inner::Debug {
                debug,
                metrics,
                closed,
            } => {
                if *closed.borrow() {
                    metrics.record_enqueue_failed(items);
                    return Err(ExportError::ShutDown { items });
                }
                debug.export(P::SIGNAL.as_str(), batch.request(), items);
                metrics.record_sent(items);
                Ok(())
            }
            Inner::Queued { delivery, queue } => {
                let shared = delivery.shared();
                queue.push(shared, 0, batch).await.map_err(|_| {
                    shared.refuse(items);
                    ExportError::ShutDown { items }
                })
            }
            Inner::Persistent { delivery, queue } => queue.push(delivery.shared(), batch).await,
            Inner::Routed(routed) => routed.export(batch).await,
            Inner::Inline { delivery, inline } => {
                let shared = delivery.shared();
                let Some(_permit) = inline.enter(shared).await else {
                    shared.refuse(items);
                    return Err(ExportError::ShutDown { items });
                };
                shared.take(items);
                delivery
                    .deliver(batch, &mut shared.deadline())
                    .await
                    .into_result()
            }
        }
    }

    /// Resolves once the exporter is ready to report the gateway ready: at once, except for
    /// a load balancer with a DNS resolver, after its first resolution (good or not).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn started(&self) {
        if let Inner::Routed(routed) = &self.inner {
            routed.started().await;
        }
    }

    /// Stops intake, lets the consumers drain what is queued (including retries in
    /// progress) until `deadline`, and reports. Whatever is still undelivered at the deadline
    /// is counted as dropped (reason `shutdown`) and logged once; with a persistent queue,
    /// it stays on disk instead.
    ///
    /// Returns shortly after `deadline` at the latest (consumers that do not notice the
    /// deadline are aborted after a short slack). Calling it on a second clone returns at
    /// once with an empty report.
    pub async fn shutdown(self, deadline: Instant) -> DrainReport {
        if let Inner::Routed(routed) = &self.inner {
            return routed.shutdown(deadline).await;
        }
        let Some(shared) = self.inner.shared() else {
            if let Inner::Debug { closed, .. } = &self.inner {
                let _ = closed.send_replace(true);
            }
            return DrainReport::default();
        };
        let drain = async {
            match &self.inner {
                Inner::Queued { queue, .. } => queue.drain(shared, deadline).await,
                Inner::Persistent { queue, .. } => queue.drain(shared, deadline).await,
                Inner::Inline { inline, .. } => inline.drain(deadline).await,
                Inner::Routed(_) | Inner::Debug { .. } => {}
            }
        };
        shared.shutdown(deadline, drain).await
    }
}
