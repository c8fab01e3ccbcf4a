//! The unit of data that flows between pipeline stages.

use bytes::Bytes;

/// An encoded OTLP `ExportTraceServiceRequest` and the number of spans it holds.
///
/// The bytes are always a valid request: they were either checked by the wire reader at
/// the receiver or written by the framer. Several of these concatenated are again a valid
/// request (protobuf concatenates repeated fields), which is what makes batching cheap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceBatch {
    /// The encoded `ExportTraceServiceRequest`.
    pub request: Bytes,
    /// How many spans `request` holds.
    pub span_count: usize,
}

impl TraceBatch {
    /// Wraps already-validated request bytes holding `span_count` spans.
    pub fn new(request: Bytes, span_count: usize) -> Self {
        Self {
            request,
            span_count,
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
