//! Exporters: the sending queue, retries with backoff, and the OTLP/gRPC, OTLP/HTTP and
//! debug transports, behind one handle per signal: [`TracesExporter`] and
//! [`MetricsExporter`]. The queue, retries and transports are generic over the signal
//! ([`Payload`]): a transport differs only in the path it posts to (`TraceService/Export`
//! or `MetricsService/Export`; `/v1/traces` or `/v1/metrics`).
//!
//! ```text
//! export(batch) ──> sending queue (bounded, waits when full) ──> num_consumers workers
//!                                                                  └─> retry loop ──> transport
//! ```
//!
//! Semantics follow the Collector's exporterhelper and OTLP exporters, with one deliberate
//! difference (DESIGN.md, decision 3: nothing is lost silently): a full queue makes `export`
//! wait instead of rejecting, and every span handed over ends in exactly one of
//! `otelcol_exporter_sent_spans_total` or `otelcol_exporter_send_failed_spans_total{reason}`
//! (or, if it was never accepted, `otelcol_exporter_enqueue_failed_spans_total` and an
//! `Err` to the caller); data points likewise in the `*_metric_points_total` families. Log
//! events are listed in `events.rs`.
//!
//! With `sending_queue.storage`, the queue is persistent (`disk_queue.rs`, format in
//! `segment.rs`): batches are on disk when `export` returns, and what is not delivered by
//! the shutdown deadline stays there for the next start instead of being dropped.

mod consume;
mod debug;
mod disk_queue;
mod events;
mod metrics;
mod otlp_grpc;
mod otlp_http;
mod queue;
pub mod remote_write;
mod retry;
mod segment;
mod tls;
mod transport;

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{Semaphore, mpsc, watch};
use tokio::time::Instant;

pub use metrics::{ExporterMetricFamilies, ExporterMetrics, FailureReason, RetryErrorType};
pub use segment::StoreError;

use crate::config::{ComponentId, ExporterConfig, FileStorageConfig, RetryConfig};
use crate::limiter::MemoryBudget;
use crate::payload::{MetricsBatch, Payload, TraceBatch};
use debug::DebugExporter;
use disk_queue::DiskQueue;
use events::Health;
use queue::SendingQueue;
use retry::{Outcome, deliver};
use transport::{SignalKind, Transport};

/// The exporter could not be built from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum ExporterError {
    /// The endpoint is not a usable address.
    #[error(
        "invalid endpoint {endpoint:?}: {reason} (expected host:port, or an http:// or https:// URL)"
    )]
    InvalidEndpoint {
        /// The endpoint as configured (or the traces URL derived from it).
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A configured header name or value cannot be sent.
    #[error("invalid header {name:?}: names must be valid header tokens and values visible ASCII")]
    InvalidHeader {
        /// The header name as configured.
        name: String,
    },
    /// The TLS settings cannot be used.
    #[error("tls: {reason}")]
    Tls {
        /// What is wrong, including the file concerned.
        reason: String,
    },
    /// `sending_queue.storage` is set but no storage extension was handed to the exporter.
    #[error("sending_queue.storage: {storage:?} was not provided to the exporter")]
    StorageNotProvided {
        /// The extension id as written.
        storage: String,
    },
    /// The persistent queue could not be opened.
    #[error("sending_queue.storage: {source}")]
    Storage {
        /// Why (boxed: the error is rare and large).
        #[source]
        source: Box<StoreError>,
    },
    /// The exporter does not carry this signal (e.g. a metrics exporter asked for traces).
    #[error("exporter {exporter:?} does not export {signal}")]
    WrongSignal {
        /// The exporter id as written.
        exporter: String,
        /// The signal it was asked to carry.
        signal: &'static str,
    },
}

/// A batch was not exported.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The exporter is shutting down or shut down; the batch was not accepted (it is counted
    /// in `otelcol_exporter_enqueue_failed_spans_total`), or, with the queue disabled, the
    /// shutdown deadline passed during its retries (counted as dropped, reason `shutdown`).
    #[error("exporter is shut down; {spans} spans not exported")]
    ShutDown {
        /// Spans in the batch.
        spans: usize,
    },
    /// With the queue disabled: the destination refused the batch permanently, or retries
    /// ran out. The spans are counted as failed with `reason`.
    #[error("export failed ({reason}): {message}")]
    Failed {
        /// [`FailureReason::Permanent`] or [`FailureReason::RetriesExhausted`].
        reason: FailureReason,
        /// Spans in the batch.
        spans: usize,
        /// The last error from the destination.
        message: String,
    },
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an exporter's `shutdown` achieved. For a metrics exporter the counts are data
/// points.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Spans (data points) delivered between the start of shutdown and its end.
    pub delivered_spans: u64,
    /// Spans (data points) still undelivered at the deadline, counted as dropped (reason
    /// `shutdown`).
    pub dropped_spans: u64,
}

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

enum Inner<P: Payload> {
    /// `sending_queue.enabled`: batches go through the queue to the consumers.
    Queued {
        shared: Arc<Shared>,
        tx: mpsc::Sender<P>,
        queue: Arc<SendingQueue<P>>,
    },
    /// `sending_queue.storage`: batches go to disk, and from there to the consumers.
    Persistent {
        shared: Arc<Shared>,
        queue: Arc<DiskQueue<P>>,
    },
    /// Queue disabled: the caller's task runs the export. Each export holds one permit of
    /// `gate`; shutdown takes them all, so it knows when the last one has finished.
    Inline {
        shared: Arc<Shared>,
        gate: Arc<Semaphore>,
    },
    /// `debug`: logs and never fails.
    Debug {
        debug: DebugExporter,
        // Boxed: the handles are much larger than the other variants' pointers.
        metrics: Box<ExporterMetrics>,
        closed: Arc<watch::Sender<bool>>,
    },
}

impl<P: Payload> Clone for Inner<P> {
    fn clone(&self) -> Self {
        match self {
            Self::Queued { shared, tx, queue } => Self::Queued {
                shared: shared.clone(),
                tx: tx.clone(),
                queue: queue.clone(),
            },
            Self::Persistent { shared, queue } => Self::Persistent {
                shared: shared.clone(),
                queue: queue.clone(),
            },
            Self::Inline { shared, gate } => Self::Inline {
                shared: shared.clone(),
                gate: gate.clone(),
            },
            Self::Debug {
                debug,
                metrics,
                closed,
            } => Self::Debug {
                debug: debug.clone(),
                metrics: metrics.clone(),
                closed: closed.clone(),
            },
        }
    }
}

/// Bounds concurrent inline exports (queue disabled); far above any real concurrency.
const INLINE_PERMITS: u32 = 1 << 16;

impl<P: Payload> fmt::Debug for SignalExporter<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (exporter, mode) = match &self.inner {
            Inner::Queued { shared, .. } => (shared.id.as_str(), "queued"),
            Inner::Persistent { shared, .. } => (shared.id.as_str(), "persistent"),
            Inner::Inline { shared, .. } => (shared.id.as_str(), "inline"),
            Inner::Debug { debug, .. } => (debug.exporter(), "debug"),
        };
        f.debug_struct("SignalExporter")
            .field("signal", &P::SIGNAL)
            .field("exporter", &exporter)
            .field("mode", &mode)
            .finish_non_exhaustive()
    }
}

impl<P: Payload> SignalExporter<P> {
    /// Builds the exporter for `P`'s signal and spawns its consumer tasks.
    ///
    /// Network exporters connect lazily: an unreachable endpoint is not an error here, it
    /// shows up as retries.
    ///
    /// # Errors
    ///
    /// [`ExporterError`] when the endpoint, a header or the TLS settings cannot be used.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(
        id: &ComponentId,
        config: &ExporterConfig,
        metrics: ExporterMetrics,
    ) -> Result<Self, ExporterError> {
        Self::start_with_storage(id, config, metrics, None)
    }

    /// Like [`start`](Self::start), with the storage extension that
    /// `sending_queue.storage` names (ignored when it names none). With storage, the queue
    /// is opened here: batches an earlier run left on disk are queued first.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start); also [`ExporterError::Storage`] when the queue directory
    /// cannot be opened, and [`ExporterError::StorageNotProvided`] when the config names a
    /// storage and `storage` is `None`.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start_with_storage(
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
                    signal: "traces",
                });
            }
            ExporterConfig::OtlpGrpc(otlp) => (
                otlp,
                Transport::Grpc(otlp_grpc::GrpcTransport::new(otlp, signal)?),
                "grpc",
            ),
            ExporterConfig::OtlpHttp(otlp) => (
                otlp,
                Transport::Http(otlp_http::HttpTransport::new(otlp, signal)?),
                "http",
            ),
        };
        let (closed, _) = watch::channel(false);
        let (deadline, _) = watch::channel(None);
        let shared = Arc::new(Shared {
            id: exporter,
            transport,
            retry: otlp.retry_on_failure.clone(),
            metrics,
            health: Health::default(),
            closed,
            deadline,
            delivered_spans: AtomicU64::new(0),
            shutdown_dropped_spans: AtomicU64::new(0),
        });
        let queue = &otlp.sending_queue;
        let signal_endpoint = match signal {
            SignalKind::Traces => otlp.traces_endpoint.as_deref(),
            SignalKind::Metrics => otlp.metrics_endpoint.as_deref(),
        };
        tracing::info!(
            event = "exporter.started",
            exporter = %shared.id,
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
                &shared,
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
                shared,
                queue: Arc::new(disk),
            }
        } else if queue.enabled {
            let (queue, tx) =
                SendingQueue::start(&shared, queue.queue_size.get(), queue.num_consumers.get());
            Inner::Queued {
                shared,
                tx,
                queue: Arc::new(queue),
            }
        } else {
            Inner::Inline {
                shared,
                gate: Arc::new(Semaphore::new(INLINE_PERMITS as usize)),
            }
        };
        Ok(Self { inner })
    }

    /// Hands a batch over.
    ///
    /// With the sending queue enabled, waits until the queue has room, then returns `Ok`:
    /// the exporter now owns the batch and will account for every span in it. This wait is
    /// the backpressure the pipeline relies on; a full queue never drops. With the queue
    /// disabled, exports in the caller's task, with retries, and returns the outcome.
    ///
    /// # Errors
    ///
    /// [`ExportError::ShutDown`] once shutdown has begun (also for a call already waiting
    /// for room); [`ExportError::Failed`] only with the queue disabled, when the batch was
    /// refused permanently or retries ran out.
    ///
    /// # Cancel safety
    ///
    /// With the queue enabled, cancel safe: a cancelled call has not enqueued the batch.
    /// With a persistent queue, not cancel safe: a cancelled call may have written the
    /// batch to disk, and it is then delivered.
    /// With the queue disabled, cancelling abandons the export in progress; the batch is
    /// then the caller's to account for.
    pub async fn export(&self, batch: P) -> Result<(), ExportError> {
        let spans = batch.item_count();
        match &self.inner {
            Inner::Debug {
                debug,
                metrics,
                closed,
            } => {
                if *closed.borrow() {
                    metrics.record_enqueue_failed(spans);
                    return Err(ExportError::ShutDown { spans });
                }
                debug.export(P::SIGNAL.as_str(), batch.request(), spans);
                metrics.record_sent(spans);
                Ok(())
            }
            Inner::Queued { shared, tx, .. } => {
                let mut closed = shared.closed.subscribe();
                let sent = tokio::select! {
                    biased;
                    _ = closed.wait_for(|closed| *closed) => false,
                    result = tx.send(batch) => result.is_ok(),
                };
                if sent {
                    Ok(())
                } else {
                    shared.metrics.record_enqueue_failed(spans);
                    Err(ExportError::ShutDown { spans })
                }
            }
            Inner::Persistent { shared, queue } => queue.push(shared, batch).await,
            Inner::Inline { shared, gate } => {
                let permit = if *shared.closed.borrow() {
                    None
                } else {
                    gate.acquire().await.ok()
                };
                let Some(_permit) = permit else {
                    shared.metrics.record_enqueue_failed(spans);
                    return Err(ExportError::ShutDown { spans });
                };
                let mut deadline = shared.deadline.subscribe();
                let outcome = deliver(shared, &batch, &mut deadline).await;
                shared.record_outcome(&batch, &outcome);
                match outcome {
                    Outcome::Delivered(_) => Ok(()),
                    Outcome::Failed { reason, message } => Err(ExportError::Failed {
                        reason,
                        spans,
                        message,
                    }),
                    Outcome::ShutDown => Err(ExportError::ShutDown { spans }),
                }
            }
        }
    }

    /// Stops intake, lets the consumers drain what is queued (including retries in
    /// progress) until `deadline`, and reports. Whatever is still undelivered at the deadline
    /// is counted as dropped (reason `shutdown`) and logged once.
    ///
    /// Returns shortly after `deadline` at the latest (consumers that do not notice the
    /// deadline are aborted after a short slack). Calling it on a second clone returns at
    /// once with an empty report.
    pub async fn shutdown(self, deadline: Instant) -> DrainReport {
        let shared = match &self.inner {
            Inner::Debug { closed, .. } => {
                closed.send_replace(true);
                return DrainReport::default();
            }
            Inner::Queued { shared, .. }
            | Inner::Persistent { shared, .. }
            | Inner::Inline { shared, .. } => shared.clone(),
        };
        if shared.closed.send_replace(true) {
            return DrainReport::default();
        }
        shared.deadline.send_replace(Some(deadline));
        let delivered_before = shared.delivered_spans.load(Ordering::Acquire);
        let dropped_before = shared.shutdown_dropped_spans.load(Ordering::Acquire);
        match &self.inner {
            Inner::Queued { queue, .. } => queue.drain(&shared, deadline).await,
            Inner::Persistent { queue, .. } => queue.drain(&shared, deadline).await,
            Inner::Inline { gate, .. } => {
                // Inline exports stop at the deadline by themselves; the slack only bounds a
                // transport that does not yield.
                let all = gate.acquire_many(INLINE_PERMITS);
                let _ = tokio::time::timeout_at(deadline + queue::ABORT_SLACK, all).await;
                gate.close();
            }
            Inner::Debug { .. } => {}
        }
        let report = DrainReport {
            delivered_spans: shared.delivered_spans.load(Ordering::Acquire) - delivered_before,
            dropped_spans: shared.shutdown_dropped_spans.load(Ordering::Acquire) - dropped_before,
        };
        if report.dropped_spans > 0 {
            tracing::error!(
                event = "exporter.shutdown",
                exporter = %shared.id,
                delivered_spans = report.delivered_spans,
                dropped_spans = report.dropped_spans,
                reason = FailureReason::Shutdown.as_str(),
                "shutdown deadline reached with spans undelivered",
            );
        } else {
            tracing::info!(
                event = "exporter.shutdown",
                exporter = %shared.id,
                delivered_spans = report.delivered_spans,
                dropped_spans = 0,
            );
        }
        report
    }
}

/// State shared by a network exporter's handles and consumers.
pub(crate) struct Shared {
    /// The component id as written (metric label and log field).
    id: String,
    transport: Transport,
    retry: RetryConfig,
    metrics: ExporterMetrics,
    health: Health,
    /// True once shutdown began: no new batch is accepted.
    closed: watch::Sender<bool>,
    /// Set when shutdown begins: retries stop, and undelivered spans are dropped, then.
    deadline: watch::Sender<Option<Instant>>,
    delivered_spans: AtomicU64,
    shutdown_dropped_spans: AtomicU64,
}

impl Shared {
    /// The one place where a batch's fate is counted (and, for losses, logged).
    fn record_outcome<P: Payload>(&self, batch: &P, outcome: &Outcome) {
        let spans = batch.item_count();
        match outcome {
            Outcome::Delivered(accepted) => {
                let rejected = usize::try_from(accepted.rejected_spans.max(0))
                    .unwrap_or(usize::MAX)
                    .min(spans);
                let sent = spans - rejected;
                self.metrics.record_sent(sent);
                self.delivered_spans
                    .fetch_add(sent as u64, Ordering::AcqRel);
                if rejected > 0 {
                    self.metrics
                        .record_failed(FailureReason::PartialSuccess, rejected);
                }
                let partial = (accepted.rejected_spans > 0 || !accepted.error_message.is_empty())
                    .then_some((accepted.rejected_spans, accepted.error_message.as_str()));
                self.health.partial_success(&self.id, partial);
            }
            Outcome::Failed { reason, message } => {
                self.metrics.record_failed(*reason, spans);
                self.health.spans_dropped(&self.id, *reason, spans, message);
            }
            Outcome::ShutDown => self.record_shutdown_drop(spans),
        }
    }

    /// `spans` were not delivered by the shutdown deadline (logged once, by `shutdown`).
    fn record_shutdown_drop(&self, spans: usize) {
        self.metrics.record_failed(FailureReason::Shutdown, spans);
        self.shutdown_dropped_spans
            .fetch_add(spans as u64, Ordering::AcqRel);
    }
}

// === impl MetricsExporter ===

/// Handle to a running metrics exporter: the dispatch over the exporter types that take
/// metrics. Cheap to clone; all clones share one exporter.
#[derive(Clone, Debug)]
pub enum MetricsExporter {
    /// `otlp` / `otlp_grpc`, `otlphttp` / `otlp_http` (`MetricsService/Export`,
    /// `/v1/metrics` or `metrics_endpoint`) and `debug`.
    Otlp(SignalExporter<MetricsBatch>),
    /// `prometheusremotewrite` / `prometheus_remote_write`.
    RemoteWrite(remote_write::RemoteWriteExporter),
}

impl MetricsExporter {
    /// Builds the exporter `id` for metrics and starts its tasks.
    ///
    /// # Errors
    ///
    /// [`ExporterError`] when the endpoint, a header or the TLS settings cannot be used.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(
        id: &ComponentId,
        config: &ExporterConfig,
        metrics: ExporterMetrics,
        remote_write_families: &remote_write::RemoteWriteMetricFamilies,
    ) -> Result<Self, ExporterError> {
        Self::start_with_storage(id, config, metrics, remote_write_families, None)
    }

    /// Like [`start`](Self::start), with the storage extension that an OTLP exporter's
    /// `sending_queue.storage` names; see [`SignalExporter::start_with_storage`].
    ///
    /// # Errors
    ///
    /// As [`SignalExporter::start_with_storage`].
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start_with_storage(
        id: &ComponentId,
        config: &ExporterConfig,
        metrics: ExporterMetrics,
        remote_write_families: &remote_write::RemoteWriteMetricFamilies,
        storage: Option<&QueueStorage>,
    ) -> Result<Self, ExporterError> {
        match config {
            ExporterConfig::OtlpGrpc(_)
            | ExporterConfig::OtlpHttp(_)
            | ExporterConfig::Debug(_) => {
                SignalExporter::start_with_storage(id, config, metrics, storage).map(Self::Otlp)
            }
            ExporterConfig::PrometheusRemoteWrite(remote_write_config) => {
                remote_write::RemoteWriteExporter::start(
                    id,
                    remote_write_config,
                    remote_write_families.for_exporter(id),
                )
                .map(Self::RemoteWrite)
            }
        }
    }

    /// Hands a batch over; see [`SignalExporter::export`].
    ///
    /// # Errors
    ///
    /// As [`SignalExporter::export`].
    pub async fn export(&self, batch: MetricsBatch) -> Result<(), ExportError> {
        match self {
            Self::Otlp(exporter) => exporter.export(batch).await,
            Self::RemoteWrite(exporter) => exporter.export(batch).await,
        }
    }

    /// Stops intake and drains until `deadline`; see [`SignalExporter::shutdown`]. The
    /// report counts data points.
    pub async fn shutdown(self, deadline: Instant) -> DrainReport {
        match self {
            Self::Otlp(exporter) => exporter.shutdown(deadline).await,
            Self::RemoteWrite(exporter) => exporter.shutdown(deadline).await,
        }
    }
}
