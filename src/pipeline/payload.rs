//! The unit of data that flows between pipeline stages.

use std::sync::Arc;

use bytes::Bytes;

// `Charge` lives with the budget (the limiter's reservations turn into one); it is
// re-exported here, where the payload types that carry it are.
pub use crate::limiter::Charge;
use crate::limiter::MemoryBudget;

/// An encoded OTLP `ExportTraceServiceRequest` and the number of spans it holds.
///
/// The bytes are always a valid request: they were either checked by the wire reader at
/// the receiver or written by the framer. Several of these concatenated are again a valid
/// request (protobuf concatenates repeated fields), which is what makes batching cheap.
#[derive(Clone, Debug, Default)]
pub struct TraceBatch {
    /// The encoded `ExportTraceServiceRequest`.
    pub request: Bytes,
    /// How many spans `request` holds.
    pub span_count: usize,
    /// The memory-budget charge for `request`'s buffer, once charged.
    pub charge: Option<Arc<Charge>>,
}

impl PartialEq for TraceBatch {
    /// Batches are equal when they hold the same request; the charge is bookkeeping.
    fn eq(&self, other: &Self) -> bool {
        self.request == other.request && self.span_count == other.span_count
    }
}

impl Eq for TraceBatch {}

impl TraceBatch {
    /// Wraps already-validated request bytes holding `span_count` spans, uncharged.
    pub fn new(request: Bytes, span_count: usize) -> Self {
        Self {
            request,
            span_count,
            charge: None,
        }
    }

    /// The encoded size in bytes.
    pub fn byte_len(&self) -> usize {
        self.request.len()
    }

    /// True when the batch holds no span.
    pub fn is_empty(&self) -> bool {
        self.span_count == 0
    }
}

/// An encoded OTLP `ExportMetricsServiceRequest` and the number of data points it holds.
///
/// Like [`TraceBatch`], the bytes are always a valid request, and several of them
/// concatenated are again one.
#[derive(Clone, Debug, Default)]
pub struct MetricsBatch {
    /// The encoded `ExportMetricsServiceRequest`.
    pub request: Bytes,
    /// How many data points `request` holds (the Collector's `metric_points`).
    pub data_points: usize,
    /// The memory-budget charge for `request`'s buffer, once charged.
    pub charge: Option<Arc<Charge>>,
}

impl PartialEq for MetricsBatch {
    /// Batches are equal when they hold the same request; the charge is bookkeeping.
    fn eq(&self, other: &Self) -> bool {
        self.request == other.request && self.data_points == other.data_points
    }
}

impl Eq for MetricsBatch {}

impl MetricsBatch {
    /// Wraps already-validated request bytes holding `data_points` data points.
    pub fn new(request: Bytes, data_points: usize) -> Self {
        Self {
            request,
            data_points,
            charge: None,
        }
    }

    /// The encoded size in bytes.
    pub fn byte_len(&self) -> usize {
        self.request.len()
    }
}

/// What the signal-generic stages (batcher, exporters, fan-out) need of a batch: an encoded
/// OTLP request whose repeated top-level field makes concatenation a merge.
pub trait Payload: Clone + Send + Sync + std::fmt::Debug + 'static {
    /// The signal, as the Collector's `data_type` label writes it: `traces` or `metrics`.
    const SIGNAL: &'static str;

    /// Wraps already-validated request bytes holding `items` items.
    fn from_request(request: Bytes, items: usize) -> Self;

    /// The encoded request.
    fn request(&self) -> &Bytes;

    /// Items held: spans or data points.
    fn item_count(&self) -> usize;

    /// Cuts the batch so that each piece holds at most `max_items` items (when set) and
    /// `max_bytes` bytes where the payload's granularity allows. A piece that cannot be cut
    /// further is returned whole.
    fn split(self, max_items: Option<usize>, max_bytes: usize) -> Vec<Self>;

    /// The encoded size in bytes.
    fn encoded_len(&self) -> usize {
        self.request().len()
    }

    /// The memory-budget charge this batch carries, if any.
    fn charge(&self) -> Option<&Arc<Charge>>;

    /// Replaces the batch's charge.
    fn set_charge(&mut self, charge: Option<Arc<Charge>>);

    /// Charges the request's bytes to `budget`, unless the batch is already charged.
    fn charged(mut self, budget: &Arc<MemoryBudget>) -> Self {
        if self.charge().is_none() {
            let charge = Charge::new(budget, self.encoded_len());
            self.set_charge(Some(charge));
        }
        self
    }
}

impl Payload for TraceBatch {
    const SIGNAL: &'static str = "traces";

    fn from_request(request: Bytes, items: usize) -> Self {
        Self::new(request, items)
    }

    fn request(&self) -> &Bytes {
        &self.request
    }

    fn item_count(&self) -> usize {
        self.span_count
    }

    fn charge(&self) -> Option<&Arc<Charge>> {
        self.charge.as_ref()
    }

    fn set_charge(&mut self, charge: Option<Arc<Charge>>) {
        self.charge = charge;
    }

    /// Cut by span with the wire framer. The pieces share the original buffer, and so its
    /// charge.
    fn split(self, max_items: Option<usize>, max_bytes: usize) -> Vec<Self> {
        match crate::otlp::split_batch(&self, max_items, max_bytes) {
            Ok(pieces) => pieces
                .into_iter()
                .map(|piece| Self {
                    charge: self.charge.clone(),
                    ..piece
                })
                .collect(),
            // The receiver validated these bytes; a failure here is a bug. Keep the data
            // whole rather than lose it: an oversize batch may still be accepted.
            Err(error) => {
                tracing::error!(event = "batch.split_failed", error = %error);
                vec![self]
            }
        }
    }
}

impl Payload for MetricsBatch {
    const SIGNAL: &'static str = "metrics";

    fn from_request(request: Bytes, items: usize) -> Self {
        Self::new(request, items)
    }

    fn request(&self) -> &Bytes {
        &self.request
    }

    fn item_count(&self) -> usize {
        self.data_points
    }

    /// Metrics batches are cut at request granularity only: the batcher never joins
    /// requests past the limits, and one request is never cut.
    fn charge(&self) -> Option<&Arc<Charge>> {
        self.charge.as_ref()
    }

    fn set_charge(&mut self, charge: Option<Arc<Charge>>) {
        self.charge = charge;
    }

    fn split(self, _max_items: Option<usize>, _max_bytes: usize) -> Vec<Self> {
        vec![self]
    }
}
