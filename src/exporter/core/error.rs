//! The exporters' error types and their shutdown report.

use std::fmt;

use super::metrics::FailureReason;
use super::segment::StoreError;

/// The exporter could not be built from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum ExporterError {
    /// The endpoint is not a usable address.
    #[error(
        "invalid endpoint {endpoint:?}: {reason} (expected host:port, or an http:// or https:// URL)"
    )]
    InvalidEndpoint {
        /// The endpoint as configured (or the signal URL derived from it).
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
    /// The exporter routes to several backends and is started with its metric families
    /// (`TracesExporter::start_load_balancing`), not on its own.
    #[error("exporter {exporter:?} routes to several backends and must be started as such")]
    Routing {
        /// The exporter id as written.
        exporter: String,
    },
    /// The load balancer's DNS resolver cannot be set up.
    #[error(
        "resolver.dns: {reason} (set resolver.dns.nameserver to a name server's ip:port, or \
         fix the system's /etc/resolv.conf)"
    )]
    Resolver {
        /// What failed.
        reason: String,
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

/// A batch was not exported. `items` counts spans for traces, data points for metrics.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The exporter is shutting down or shut down; the batch was not accepted (it is counted
    /// in `otelcol_exporter_enqueue_failed_*`), or, with the queue disabled, the shutdown
    /// deadline passed during its retries (counted as dropped, reason `shutdown`).
    #[error("exporter is shut down; {items} items not exported")]
    ShutDown {
        /// Items in the batch (or the part of it not accepted).
        items: usize,
    },
    /// With the queue disabled: the destination refused the batch permanently, or retries
    /// ran out. The items are counted as failed with `reason`.
    #[error("export failed ({reason}): {message}")]
    Failed {
        /// [`FailureReason::Permanent`] or [`FailureReason::RetriesExhausted`].
        reason: FailureReason,
        /// Items that failed.
        items: usize,
        /// The last error from the destination.
        message: String,
    },
    /// The persistent queue could not be opened, so nothing can be queued; the batch was
    /// not accepted (counted in `otelcol_exporter_enqueue_failed_*`). The reason was logged
    /// once as `exporter.queue.open_failed`.
    #[error("the persistent sending queue is unavailable ({message}); {items} items not exported")]
    QueueUnavailable {
        /// Items in the batch.
        items: usize,
        /// Why the queue could not be opened.
        message: String,
    },
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an exporter's `shutdown` achieved. Items are spans for a traces exporter, data
/// points for a metrics exporter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Items delivered between the start of shutdown and its end.
    pub delivered: u64,
    /// Items still undelivered at the deadline, counted as dropped (reason `shutdown`).
    pub dropped: u64,
}
