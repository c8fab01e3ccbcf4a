//! `exporters.prometheusremotewrite`: OTLP metrics to Prometheus remote write 1.0 or 2.0.
//!
//! ```text
//! export(batch) ─ decode ─ translate ─┬─> shard 0 queue ─> in-order sender ─┐
//!                  (translate.rs)     ├─> shard 1 queue ─> in-order sender ─┼─> POST snappy(WriteRequest)
//!                                     └─> ...   (by series hash)            ┘   retry 5xx/429 with backoff
//! ```
//!
//! Remote write requires the samples of one series to arrive in timestamp order, and a
//! receiver such as Prometheus drops (or refuses with 400) samples older than the newest it
//! has. Series are therefore sharded by a hash of their labels over `num_consumers` shards;
//! each shard is one lane of the export core's sending queue, with one sender that delivers
//! its requests one at a time, retrying each until it is accepted, refused or out of time,
//! before the next. Different series go out in parallel. A sender merges queued items into
//! one request up to `max_batch_size_bytes` (encoded, before compression) and splits larger
//! ones. The queue, the retry loop, inline mode, the drain and the counting are the export
//! core's (`exporter/core/`); this module adds translation, sharding and the protocol.
//!
//! Memory (DESIGN.md, decision 2): the translated series are charged to the memory budget
//! (their in-memory size, an upper bound, see `shard.rs`) from translation until they are
//! sent, failed or dropped, so the budget's gauge includes what the shard queues hold, and
//! admission refuses new data retryably while they fill it.
//!
//! Accounting (DESIGN.md, decision 3): every data point handed to [`export`] ends in
//! exactly one of `otelcol_exporter_sent_metric_points_total`,
//! `otelcol_exporter_send_failed_metric_points_total{reason}`,
//! `tailgate_remote_write_dropped_data_points_total{reason}` (not translatable), or, when
//! it was never accepted, `otelcol_exporter_enqueue_failed_metric_points_total` and an
//! `Err`. A data point that becomes several series (histogram buckets, quantiles) is
//! counted with its first series; it is counted as sent when that series was sent.
//!
//! Retries: 5xx, 429 and transport errors are retried with the exporter's backoff
//! (`retry_on_failure`, honouring `Retry-After`), bounded by `max_elapsed_time`; every other
//! status is permanent: the request is dropped, counted, and the receiver's message logged
//! (`exporter.dropped`, at most once per 10 s). Log events are those of every exporter
//! (see `exporter/core/events.rs`).
//!
//! Remote write 2.0 (`protobuf_message: io.prometheus.write.v2.Request`): translation is the
//! same; each request is encoded as a 2.0 `Request` (`v2.rs`) when it is sent, with every
//! series carrying its family's metadata (collected whatever `send_metadata` says; metadata
//! is therefore routed to the shards of its family's series rather than by family name).
//! When the receiver does not support 2.0 (415; 400 naming the message or content type; or a
//! 2xx without `X-Prometheus-Remote-Write-*-Written` headers, which is how a 1.x receiver
//! such as Prometheus 2.42 answers: it decodes the body as an empty 1.0 request and stores
//! nothing), that request is sent again at once as 1.0, and the exporter stays on 1.0 for
//! the rest of its life: the switch is logged once (`exporter.remote_write.fallback_v1`) and
//! counted in `tailgate_remote_write_protocol_fallbacks_total`. 1.0 requests carry metadata
//! only with `send_metadata`. A 2xx whose `*-Written` counts are below what was sent is a
//! partial write: it is not retried; the unwritten samples, histograms and exemplars are
//! counted in `tailgate_remote_write_unwritten_total{kind}`, and the request's data points
//! in proportion to the unwritten samples and histograms as failed with reason
//! `partial_success` (the rest as sent).
//!
//! Files, each importing only those above it in this list: `proto.rs` (the generated
//! messages), `labels.rs` (series' label strings, shared per request), `translate.rs`,
//! `v1.rs` and `v2.rs` (the two encodings), `metrics.rs`, `shard.rs` (the queued item and its
//! charge), `transport.rs` (one HTTP attempt), `delivery.rs` (requests, protocol
//! negotiation), `exporter.rs` (the handle); this file only declares and re-exports.
//!
//! [`export`]: RemoteWriteExporter::export

mod delivery;
mod exporter;
pub mod labels;
mod metrics;
mod proto;
mod shard;
pub mod translate;
mod transport;
pub mod v1;
mod v2;

pub use exporter::RemoteWriteExporter;
pub use metrics::{RemoteWriteMetricFamilies, RemoteWriteMetrics};
pub use proto::{prompb, writev2};
pub use transport::{CONTENT_TYPE_V2, REMOTE_WRITE_VERSION, REMOTE_WRITE_VERSION_2};
