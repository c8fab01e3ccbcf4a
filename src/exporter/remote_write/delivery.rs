//! How a shard's series reach the receiver: cut into requests of at most
//! `max_batch_size_bytes`, each encoded in the protocol the receiver speaks and delivered
//! in order through the export core's retry loop.
//!
//! [`Negotiated`] is the core [`Transport`] of remote write: one attempt sends the request
//! in the exporter's current protocol; when a 2.0 request is refused as unsupported, the
//! exporter switches to 1.0 for good and the same attempt sends the request again at once,
//! as 1.0. A 2.0 acceptance is compared with the receiver's `*-Written` counts: what was
//! not written is reported as rejected (a partial write, not retried).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use prost::Message;

use super::metrics::{RemoteWriteMetrics, Unwritten};
use super::proto::prompb::MetricMetadata;
use super::shard::ShardBatch;
use super::translate::Series;
use super::transport::{Protocol, RemoteWriteTransport, Reply, Written};
use super::{v1, v2};
use crate::config::{RemoteWriteConfig, RemoteWriteMessage, RetryConfig};
use crate::exporter::core::deliver::{Deliver, Delivered};
use crate::exporter::core::outcome::{Accepted, AttemptError, Outcome, Settled};
use crate::exporter::core::retry;
use crate::exporter::core::state::{DeadlineWatch, Shared};
use crate::exporter::core::transport::Transport;

/// One request: the series and 1.0 metadata of a `WriteRequest` and what they account
/// for, with its encodings made on first use (a retry sends the same bytes).
pub(crate) struct WriteBatch {
    series: Vec<Series>,
    /// The metadata a 1.0 request carries (empty unless `send_metadata`).
    metadata: Vec<MetricMetadata>,
    /// The metadata of the batch's families, for 2.0 encoding (empty for 1.0 exporters).
    families: Arc<Vec<MetricMetadata>>,
    /// Data points accounted for.
    points: usize,
    v1: OnceLock<Result<Encoded, String>>,
    v2: OnceLock<Result<Encoded, String>>,
}

/// One request's body in one protocol.
struct Encoded {
    body: Bytes,
    /// What a 2.0 body carries (zero for 1.0).
    counts: v2::Counts,
}

impl WriteBatch {
    fn new(
        series: Vec<Series>,
        metadata: Vec<MetricMetadata>,
        families: Arc<Vec<MetricMetadata>>,
        points: usize,
    ) -> Self {
        Self {
            series,
            metadata,
            families,
            points,
            v1: OnceLock::new(),
            v2: OnceLock::new(),
        }
    }

    /// The request encoded and snappy-compressed for `protocol` (once).
    fn encoded(&self, protocol: Protocol) -> Result<&Encoded, AttemptError> {
        let cell = match protocol {
            Protocol::V1 => &self.v1,
            Protocol::V2 => &self.v2,
        };
        cell.get_or_init(|| self.encode(protocol))
            .as_ref()
            .map_err(|message| AttemptError::Permanent {
                message: message.clone(),
            })
    }

    fn encode(&self, protocol: Protocol) -> Result<Encoded, String> {
        let (raw, counts) = match protocol {
            Protocol::V1 => (
                v1::encode(&self.series, &self.metadata),
                v2::Counts::default(),
            ),
            Protocol::V2 => {
                let families = v2::Families::new(&self.families);
                let (message, counts) = v2::encode(&self.series, &families);
                (message.encode_to_vec(), counts)
            }
        };
        let body = snap::raw::Encoder::new()
            .compress_vec(&raw)
            .map_err(|error| format!("snappy compression failed: {error}"))?;
        Ok(Encoded {
            body: Bytes::from(body),
            counts,
        })
    }
}

/// The remote-write transport with the protocol it currently speaks.
pub(crate) struct Negotiated {
    http: RemoteWriteTransport,
    /// Requests go out as 2.0: set at start when configured, cleared for good on fallback.
    v2_active: AtomicBool,
    metrics: RemoteWriteMetrics,
    exporter: String,
}

impl Negotiated {
    /// Speaks 2.0 first when `v2`, else 1.0 only.
    pub(crate) fn new(
        http: RemoteWriteTransport,
        v2: bool,
        metrics: RemoteWriteMetrics,
        exporter: String,
    ) -> Self {
        Self {
            http,
            v2_active: AtomicBool::new(v2),
            metrics,
            exporter,
        }
    }

    /// The protocol requests go out with now.
    fn protocol(&self) -> Protocol {
        if self.v2_active.load(Ordering::Acquire) {
            Protocol::V2
        } else {
            Protocol::V1
        }
    }

    /// The receiver does not support 2.0: 1.0 from now on. Logged and counted once, by
    /// whichever sender sees it first.
    fn fall_back(&self, message: &str) {
        if self.v2_active.swap(false, Ordering::AcqRel) {
            self.metrics.record_fallback();
            tracing::warn!(
                event = "exporter.remote_write.fallback_v1",
                exporter = %self.exporter,
                error = %message,
                "the receiver does not support remote write 2.0; sending 1.0 from now on",
            );
        }
    }

    /// Compares a 2.0 request's counts with the receiver's `*-Written` headers: counts what
    /// was not written, and returns the acceptance with the data points to count as rejected
    /// (in proportion to the unwritten samples and histograms).
    fn check_written(&self, sent: v2::Counts, written: Written, points: usize) -> Accepted {
        // On a 2xx to a 2.0 request, a missing header means 0 (spec).
        let short = |sent: u64, written: Option<u64>| sent.saturating_sub(written.unwrap_or(0));
        let samples = short(sent.samples, written.samples);
        let histograms = short(sent.histograms, written.histograms);
        let exemplars = short(sent.exemplars, written.exemplars);
        for (kind, n) in [
            (Unwritten::Samples, samples),
            (Unwritten::Histograms, histograms),
            (Unwritten::Exemplars, exemplars),
        ] {
            if n > 0 {
                self.metrics.record_unwritten(kind, n);
            }
        }
        let missing = samples + histograms;
        if missing == 0 {
            return Accepted::default();
        }
        let total = (sent.samples + sent.histograms).max(1);
        let rejected = (points as u128 * u128::from(missing)).div_ceil(u128::from(total));
        Accepted {
            rejected: i64::try_from(rejected).unwrap_or(i64::MAX),
            message: format!(
                "partial write: the receiver wrote {} of {} samples, {} of {} histograms, {} of {} \
                 exemplars",
                sent.samples - samples,
                sent.samples,
                sent.histograms - histograms,
                sent.histograms,
                sent.exemplars - exemplars,
                sent.exemplars,
            ),
        }
    }
}

impl Transport for Negotiated {
    type Request = WriteBatch;

    async fn send(&self, batch: &WriteBatch, attempt: u32) -> Result<Accepted, AttemptError> {
        let mut attempt = attempt;
        loop {
            let protocol = self.protocol();
            if protocol == Protocol::V2 && batch.series.is_empty() {
                // Metadata alone: 2.0 carries it inside series, so there is nothing to send.
                return Ok(Accepted::default());
            }
            let encoded = batch.encoded(protocol)?;
            match self
                .http
                .send(encoded.body.clone(), attempt, protocol)
                .await?
            {
                Reply::Accepted(written) => {
                    return Ok(match protocol {
                        Protocol::V1 => Accepted::default(),
                        Protocol::V2 => self.check_written(encoded.counts, written, batch.points),
                    });
                }
                Reply::Unsupported { message } => {
                    // Now 1.0 (`answer` never calls a 1.0 reply unsupported): the same
                    // request again at once, as a first 1.0 attempt.
                    self.fall_back(&message);
                    attempt = 0;
                }
            }
        }
    }
}

/// Delivers a shard's series: requests cut at `max_batch_bytes`, in order, each settled.
pub(crate) struct ShardDelivery {
    shared: Arc<Shared>,
    transport: Negotiated,
    retry: RetryConfig,
    /// `protobuf_message` is the 2.0 message.
    v2_configured: bool,
    /// 1.0 requests carry metadata (`send_metadata`).
    v1_metadata: bool,
    max_batch_bytes: usize,
}

impl ShardDelivery {
    /// Delivery over `transport` by `config` (retries, message version, metadata, request
    /// size), counted in `shared`.
    pub(crate) fn new(
        shared: Arc<Shared>,
        transport: Negotiated,
        config: &RemoteWriteConfig,
    ) -> Self {
        Self {
            shared,
            transport,
            retry: config.retry_on_failure.clone(),
            v2_configured: config.protobuf_message == RemoteWriteMessage::V2,
            v1_metadata: config.send_metadata,
            max_batch_bytes: config.max_batch_size_bytes.get(),
        }
    }

    /// The exporter's shared state.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Cuts `batch`'s series into requests of at most `max_batch_bytes` (a single larger
    /// series goes alone). Requests are cut by their 1.0 encoded size whichever protocol
    /// carries them; a 2.0 request, which names each string once, is never larger.
    fn requests(&self, batch: &mut ShardBatch) -> Vec<WriteBatch> {
        let (series, metadata) = batch.take_contents();
        let families = Arc::new(if self.v2_configured {
            metadata.clone()
        } else {
            Vec::new()
        });
        let mut requests = Vec::new();
        let mut current_metadata = if self.v1_metadata {
            metadata
        } else {
            Vec::new()
        };
        let mut current: Vec<Series> = Vec::new();
        let mut current_points = 0;
        let mut current_bytes: usize = current_metadata.iter().map(v1::metadata_encoded_len).sum();
        for series in series {
            let len = v1::series_encoded_len(&series);
            if !current.is_empty() && current_bytes + len > self.max_batch_bytes {
                let full = std::mem::take(&mut current);
                let metadata = std::mem::take(&mut current_metadata);
                requests.push(WriteBatch::new(
                    full,
                    metadata,
                    families.clone(),
                    current_points,
                ));
                current_points = 0;
                current_bytes = 0;
            }
            current_bytes += len;
            current_points += series.points;
            current.push(series);
        }
        if !current.is_empty() || !current_metadata.is_empty() {
            requests.push(WriteBatch::new(
                current,
                current_metadata,
                families,
                current_points,
            ));
        }
        requests
    }
}

impl Deliver<ShardBatch> for ShardDelivery {
    async fn deliver(
        &self,
        mut batch: ShardBatch,
        deadline: &mut DeadlineWatch,
    ) -> Delivered<ShardBatch> {
        let mut settled = Settled::default();
        for request in self.requests(&mut batch) {
            let outcome = if settled.hit_deadline() {
                Outcome::ShutDown
            } else {
                retry::deliver(
                    &self.shared,
                    &self.transport,
                    &self.retry,
                    &request,
                    deadline,
                )
                .await
            };
            self.shared.settle(request.points, &outcome);
            settled.add(request.points, outcome);
        }
        // The series are gone: their memory-budget charge goes with the batch.
        drop(batch);
        Delivered::Settled(settled)
    }

    fn has_room(&self, batch: &ShardBatch) -> bool {
        batch.encoded_bytes < self.max_batch_bytes
    }

    fn merge(&self, batch: &mut ShardBatch, more: ShardBatch) {
        batch.absorb(more);
    }
}
