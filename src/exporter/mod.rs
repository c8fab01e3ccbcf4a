//! Exporters: OTLP/gRPC, OTLP/HTTP, remote write and debug, behind one handle per signal:
//! [`TracesExporter`] and [`MetricsExporter`]. Every network exporter runs on the export
//! core (`core/`): its sending queue (in memory or on disk) or inline mode, retries with
//! backoff, the drain at shutdown, and the one path on which each item's fate is counted.
//! The OTLP transports differ only in the path they post to (`TraceService/Export` or
//! `MetricsService/Export`; `/v1/traces` or `/v1/metrics`); remote write adds translation,
//! per-series ordering and its own protocol over the same core.
//!
//! ```text
//! export(batch) ──> sending queue (bounded, waits when full) ──> num_consumers workers
//!                                                                  └─> retry loop ──> transport
//! ```
//!
//! Layers, each importing only those below it (this file only declares and re-exports):
//!
//! ```text
//! core/ (state, errors, outcomes, queue, disk queue, inline, retry, status, http helpers)
//!   <- tls.rs, otlp_wire.rs
//!   <- otlp_grpc.rs, otlp_http.rs, remote_write/transport.rs   (transports)
//!   <- debug.rs, otlp.rs, remote_write/                        (exporters)
//!   <- loadbalancing/                  (one otlp.rs exporter per backend, routed by trace id)
//!   <- metrics_exporter.rs                                     (the metrics dispatch)
//!   <- mod.rs                                                  (this facade)
//! ```
//!
//! Semantics follow the Collector's exporterhelper and OTLP exporters, with one deliberate
//! difference (DESIGN.md, decision 3: nothing is lost silently): a full queue makes `export`
//! wait instead of rejecting, and every span handed over ends in exactly one of
//! `otelcol_exporter_sent_spans_total` or `otelcol_exporter_send_failed_spans_total{reason}`
//! (or, if it was never accepted, `otelcol_exporter_enqueue_failed_spans_total` and an
//! `Err` to the caller); data points likewise in the `*_metric_points_total` families. Log
//! events are listed in `core/events.rs`.
//!
//! With `sending_queue.storage`, the queue is persistent (`core/disk_queue.rs`, format in
//! `core/segment.rs`): batches are on disk when `export` returns, and what is not delivered
//! by the shutdown deadline stays there for the next start instead of being dropped.

mod consume;
mod core;
mod debug;
pub mod loadbalancing;
mod metrics_exporter;
mod otlp;
mod otlp_grpc;
mod otlp_http;
mod otlp_wire;
pub mod remote_write;
mod tls;

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests;

pub use self::core::error::{DrainReport, ExportError, ExporterError};
pub use self::core::metrics::{
    ExporterMetricFamilies, ExporterMetrics, FailureReason, RetryErrorType,
};
pub use self::core::segment::StoreError;

/// What [`scan_segment`] finds in a segment file: its records, `(offset, payload length,
/// items)` in file order, and its damaged places, `(offset, reason)`.
#[doc(hidden)]
pub type SegmentScan = (Vec<(u64, u32, u32)>, Vec<(u64, &'static str)>);

/// Fuzzing entry point: the records a disk-queue segment file's bytes hold, as recovery
/// finds them, and its damaged places. Recovery never fails on damage: it skips to the
/// next whole, valid record.
#[doc(hidden)]
pub fn scan_segment(data: &[u8]) -> SegmentScan {
    self::core::segment::scan(data)
}
pub use metrics_exporter::MetricsExporter;
pub use otlp::{QueueStorage, SignalExporter, TracesExporter};
