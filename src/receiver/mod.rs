//! The OTLP receiver: gRPC ([`otlp_grpc`]) and HTTP ([`otlp_http`]).
//!
//! Both transports share one [`TracesIntake`]: validate the request with the wire reader
//! (exactly as strict as a protobuf decode, plus OTLP's id lengths), count its spans, and
//! admit it into every pipeline the receiver feeds. Spans are not decoded into objects.
//! When a tail sampler is among those pipelines, the validating walk is the parse that
//! yields the span views, and the sampler takes the views: each request is walked once.
//!
//! Metrics go through a [`MetricsIntake`] beside it: a prost decode validates the request
//! and counts its data points, and the original bytes go on.

mod metrics;
pub mod otlp_grpc;
pub mod otlp_http;

pub use metrics::{ReceiverMetricFamilies, ReceiverMetrics, Transport};

use std::sync::Arc;

use bytes::Bytes;
use prost::Message;

use crate::error::PipelineError;
use crate::limiter::MemoryLimiter;
use crate::payload::{MetricsBatch, MetricsSink, TraceBatch, TracesSink};

/// Validates, counts and admits trace requests for one receiver and transport.
#[derive(Clone)]
pub struct TracesIntake {
    sink: TracesSink,
    metrics: ReceiverMetrics,
    limiter: Option<Arc<MemoryLimiter>>,
}

impl TracesIntake {
    /// An intake feeding `sink`, counting into `metrics`, admitting requests through
    /// `limiter` when a memory limit is configured.
    pub fn new(
        sink: TracesSink,
        metrics: ReceiverMetrics,
        limiter: Option<Arc<MemoryLimiter>>,
    ) -> Self {
        Self {
            sink,
            metrics,
            limiter,
        }
    }

    /// Admission, before the request body is read: refuses (retryably, counted) while the
    /// memory limiter says no. `size_hint` is the body's length when known, else 0.
    ///
    /// # Errors
    ///
    /// [`PipelineError::Overloaded`].
    pub fn admit(&self, size_hint: usize) -> Result<(), PipelineError> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        limiter.admit(size_hint).inspect_err(|error| {
            self.metrics.record_refused(0, error);
        })
    }

    /// Admits an encoded `ExportTraceServiceRequest`; returns its span count.
    ///
    /// A request with no spans succeeds without entering the pipeline, as in the Collector.
    ///
    /// # Errors
    ///
    /// [`PipelineError::Malformed`] when the bytes are not a valid request, or the
    /// pipeline's refusal. Every refusal is counted before it is returned.
    pub async fn ingest(&self, request: Bytes) -> Result<usize, PipelineError> {
        // A tail sampler needs the spans: parse once (the same walk, as strict, with the
        // same errors as `count_spans`) and hand the views on, rather than validating here
        // and parsing again in the sampler.
        let checked = if self.sink.wants_views() {
            crate::otlp::parse_traces_request(&request).map(|resources| {
                let spans = resources
                    .iter()
                    .flat_map(|r| &r.scope_spans)
                    .map(|s| s.spans.len())
                    .sum();
                (spans, Some(resources))
            })
        } else {
            crate::otlp::count_spans(&request).map(|spans| (spans, None))
        };
        let (spans, parsed) = match checked {
            Ok(checked) => checked,
            Err(error) => {
                let error = PipelineError::Malformed(error.to_string());
                self.refuse(&request, &error);
                return Err(error);
            }
        };
        if spans == 0 {
            return Ok(0);
        }
        if self.sink.is_empty() {
            let error = PipelineError::NoPipeline("traces");
            self.metrics.record_refused(spans, &error);
            return Err(error);
        }
        match self
            .sink
            .accept_with_views(TraceBatch::new(request, spans), parsed.as_ref())
            .await
        {
            Ok(()) => {
                self.metrics.record_accepted(spans);
                Ok(spans)
            }
            Err(error) => {
                self.metrics.record_refused(spans, &error);
                Err(error)
            }
        }
    }

    /// Counts a request refused before or during decoding. The refused span count is what
    /// a lenient protobuf decode finds in `request` (zero when it finds nothing).
    pub fn refuse(&self, request: &[u8], error: &PipelineError) {
        self.metrics
            .record_refused(lenient_span_count(request), error);
        tracing::debug!(event = "receiver.refused", error = %error);
    }
}

/// Validates, counts and admits metrics requests for one receiver and transport.
#[derive(Clone)]
pub struct MetricsIntake {
    sink: MetricsSink,
    metrics: ReceiverMetrics,
    limiter: Option<Arc<MemoryLimiter>>,
}

impl MetricsIntake {
    /// An intake feeding `sink`, counting data points into `metrics`, admitting requests
    /// through `limiter` when a memory limit is configured.
    pub fn new(
        sink: MetricsSink,
        metrics: ReceiverMetrics,
        limiter: Option<Arc<MemoryLimiter>>,
    ) -> Self {
        Self {
            sink,
            metrics,
            limiter,
        }
    }

    /// Admission before the body is read; see [`TracesIntake::admit`].
    ///
    /// # Errors
    ///
    /// [`PipelineError::Overloaded`].
    pub fn admit(&self, size_hint: usize) -> Result<(), PipelineError> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        limiter.admit(size_hint).inspect_err(|error| {
            self.metrics.record_refused(0, error);
        })
    }

    /// True when no metrics pipeline takes this receiver's metrics.
    pub fn has_pipeline(&self) -> bool {
        !self.sink.is_empty()
    }

    /// Admits an encoded `ExportMetricsServiceRequest`; returns its data point count.
    ///
    /// A request with no data points succeeds without entering the pipeline.
    ///
    /// # Errors
    ///
    /// [`PipelineError::Malformed`] when the bytes are not a valid request, or the
    /// pipeline's refusal. Every refusal is counted before it is returned.
    pub async fn ingest(&self, request: Bytes) -> Result<usize, PipelineError> {
        let points = match crate::otlp::decode_metrics_request(&request) {
            Ok((_decoded, points)) => points,
            Err(error) => {
                let error = PipelineError::Malformed(error.to_string());
                self.refuse(&error);
                return Err(error);
            }
        };
        if points == 0 {
            return Ok(0);
        }
        if self.sink.is_empty() {
            let error = PipelineError::NoPipeline("metrics");
            self.metrics.record_refused(points, &error);
            return Err(error);
        }
        match self.sink.accept(MetricsBatch::new(request, points)).await {
            Ok(()) => {
                self.metrics.record_accepted(points);
                Ok(points)
            }
            Err(error) => {
                self.metrics.record_refused(points, &error);
                Err(error)
            }
        }
    }

    /// Counts a request refused before or during decoding (its data points are unknown).
    pub fn refuse(&self, error: &PipelineError) {
        self.metrics.record_refused(0, error);
        tracing::debug!(event = "receiver.refused", signal = "metrics", error = %error);
    }
}

/// The spans a plain protobuf decode sees, ignoring OTLP's id-length rules; 0 if it fails.
/// Only used on the error path, to count what was refused.
fn lenient_span_count(request: &[u8]) -> usize {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    ExportTraceServiceRequest::decode(request)
        .map(|decoded| {
            decoded
                .resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .map(|s| s.spans.len())
                .sum()
        })
        .unwrap_or(0)
}
