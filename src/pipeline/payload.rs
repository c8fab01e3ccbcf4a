//! The unit of data that flows between pipeline stages.

use std::sync::Arc;

use bytes::Bytes;

use crate::limiter::MemoryBudget;

/// Bytes charged to the memory budget for as long as this value lives: dropping the last
/// handle releases them. A batch carries its charge through queues and exporters, so
/// whoever holds the data last gives the bytes back, whatever path it took.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<MemoryBudget>,
    bytes: usize,
}

impl Charge {
    /// Charges `bytes` to `budget` until the returned value is dropped.
    pub fn new(budget: &Arc<MemoryBudget>, bytes: usize) -> Arc<Self> {
        budget.charge(bytes);
        Arc::new(Self {
            budget: budget.clone(),
            bytes,
        })
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

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

    /// Charges the request's bytes to `budget`, unless the batch is already charged.
    pub fn charged(mut self, budget: &Arc<MemoryBudget>) -> Self {
        if self.charge.is_none() {
            self.charge = Some(Charge::new(budget, self.request.len()));
        }
        self
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
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetricsBatch {
    /// The encoded `ExportMetricsServiceRequest`.
    pub request: Bytes,
    /// How many data points `request` holds (the Collector's `metric_points`).
    pub data_points: usize,
}

impl MetricsBatch {
    /// Wraps already-validated request bytes holding `data_points` data points.
    pub fn new(request: Bytes, data_points: usize) -> Self {
        Self {
            request,
            data_points,
        }
    }

    /// The encoded size in bytes.
    pub fn byte_len(&self) -> usize {
        self.request.len()
    }
}
