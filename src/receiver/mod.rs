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
//!
//! Admission, on both transports and in this order, before a request body is read:
//!
//! 1. a slot among the receiver's `max_concurrent_requests` in flight, else a retryable
//!    refusal counted as `too_many_requests`;
//! 2. a [`Reservation`] of the memory budget for what the body may come to (its declared
//!    length, else the receiver's maximum size), else a retryable refusal counted as
//!    `overloaded`. The reservation is resized as the body is read, decompressed and
//!    decoded, and becomes the charge the request's batch carries into the pipeline.

mod in_flight;
mod metrics;
pub mod otlp_grpc;
pub mod otlp_http;

pub use metrics::{ReceiverMetricFamilies, ReceiverMetrics, Transport};

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use prometheus::IntGauge;
use prost::Message;

use crate::error::PipelineError;
use crate::limiter::{MemoryLimiter, Reservation};
use crate::pipeline::{MetricsBatch, MetricsSink, TraceBatch, TracesSink};

/// What both transports need of a signal's intake.
trait Intake: Clone + Send + Sync + 'static {
    /// Admission before the body is read: reserves `bytes` of the memory budget. A refusal
    /// is counted before it is returned.
    ///
    /// # Errors
    ///
    /// [`PipelineError::Overloaded`] when the memory limiter says no.
    fn reserve(&self, bytes: usize) -> Result<Reservation, PipelineError>;

    /// Validates and admits one encoded request, held under `reservation`, which becomes
    /// the batch's charge (or is released when the request does not enter a queue).
    /// Returns the items (spans or data points) admitted. Every refusal is counted.
    fn ingest(
        &self,
        request: Bytes,
        reservation: Reservation,
    ) -> impl Future<Output = Result<usize, PipelineError>> + Send;

    /// Counts a request refused before its items could be counted.
    fn refuse(&self, error: &PipelineError);

    /// Counts a request refused because the receiver had `max_concurrent_requests` in
    /// flight.
    fn refuse_too_many(&self);

    /// The gauge of requests in flight on this receiver and transport.
    fn in_flight_gauge(&self) -> &IntGauge;

    /// Transcodes an OTLP/JSON request of this signal to protobuf.
    ///
    /// # Errors
    ///
    /// [`PipelineError::Malformed`] naming what is wrong.
    fn json_to_protobuf(json: &[u8]) -> Result<Vec<u8>, PipelineError>;
}

/// Admission by the memory limiter when there is one; counts a refusal.
fn reserve_with(
    limiter: Option<&MemoryLimiter>,
    metrics: &ReceiverMetrics,
    bytes: usize,
) -> Result<Reservation, PipelineError> {
    let Some(limiter) = limiter else {
        return Ok(Reservation::unlimited());
    };
    limiter.reserve(bytes).inspect_err(|error| {
        metrics.record_refused(0, error);
    })
}

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

    /// Admits an encoded `ExportTraceServiceRequest`, held under `reservation`; returns
    /// its span count.
    ///
    /// A request with no spans succeeds without entering the pipeline, as in the Collector.
    ///
    /// # Errors
    ///
    /// [`PipelineError::Malformed`] when the bytes are not a valid request, or the
    /// pipeline's refusal. Every refusal is counted before it is returned.
    async fn ingest_request(
        &self,
        request: Bytes,
        mut reservation: Reservation,
    ) -> Result<usize, PipelineError> {
        // A tail sampler needs the spans: parse once (the same walk, as strict, with the
        // same errors as `count_spans`) and hand the views on, rather than validating here
        // and parsing again in the sampler.
        let checked = if self.sink.feeds_sampler() {
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
                self.refuse_request(&request, &error);
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
        // From here the request's buffer is what the batch holds.
        if let Err(error) = reservation.resize(request.len()) {
            self.metrics.record_refused(spans, &error);
            return Err(error);
        }
        let mut batch = TraceBatch::new(request, spans);
        batch.charge = reservation.into_charge();
        match self.sink.accept_parsed(batch, parsed.as_deref()).await {
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

    /// Counts a request refused while decoding. The refused span count is what a lenient
    /// protobuf decode finds in `request` (zero when it finds nothing).
    fn refuse_request(&self, request: &[u8], error: &PipelineError) {
        self.metrics
            .record_refused(lenient_span_count(request), error);
        tracing::debug!(event = "receiver.refused", error = %error);
    }
}

impl Intake for TracesIntake {
    fn reserve(&self, bytes: usize) -> Result<Reservation, PipelineError> {
        reserve_with(self.limiter.as_deref(), &self.metrics, bytes)
    }

    fn ingest(
        &self,
        request: Bytes,
        reservation: Reservation,
    ) -> impl Future<Output = Result<usize, PipelineError>> + Send {
        self.ingest_request(request, reservation)
    }

    fn refuse(&self, error: &PipelineError) {
        self.refuse_request(&[], error);
    }

    fn refuse_too_many(&self) {
        self.metrics.record_too_many_requests();
    }

    fn in_flight_gauge(&self) -> &IntGauge {
        self.metrics.in_flight()
    }

    fn json_to_protobuf(json: &[u8]) -> Result<Vec<u8>, PipelineError> {
        crate::otlp::traces_json_to_protobuf(json)
            .map_err(|error| PipelineError::Malformed(error.to_string()))
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

    /// True when no metrics pipeline takes this receiver's metrics.
    pub fn has_pipeline(&self) -> bool {
        !self.sink.is_empty()
    }

    /// Admits an encoded `ExportMetricsServiceRequest`, held under `reservation`;
    /// returns its data point count.
    ///
    /// A request with no data points succeeds without entering the pipeline.
    ///
    /// # Errors
    ///
    /// [`PipelineError::Malformed`] when the bytes are not a valid request, or the
    /// pipeline's refusal. Every refusal is counted before it is returned.
    async fn ingest_request(
        &self,
        request: Bytes,
        mut reservation: Reservation,
    ) -> Result<usize, PipelineError> {
        let points = match crate::otlp::decode_metrics_request(&request) {
            Ok((_decoded, points)) => points,
            Err(error) => {
                let error = PipelineError::Malformed(error.to_string());
                Intake::refuse(self, &error);
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
        // From here the request's buffer is what the batch holds.
        if let Err(error) = reservation.resize(request.len()) {
            self.metrics.record_refused(points, &error);
            return Err(error);
        }
        let mut batch = MetricsBatch::new(request, points);
        batch.charge = reservation.into_charge();
        match self.sink.accept(batch).await {
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
}

impl Intake for MetricsIntake {
    fn reserve(&self, bytes: usize) -> Result<Reservation, PipelineError> {
        reserve_with(self.limiter.as_deref(), &self.metrics, bytes)
    }

    fn ingest(
        &self,
        request: Bytes,
        reservation: Reservation,
    ) -> impl Future<Output = Result<usize, PipelineError>> + Send {
        self.ingest_request(request, reservation)
    }

    /// Its data points are unknown: counted as a request only.
    fn refuse(&self, error: &PipelineError) {
        self.metrics.record_refused(0, error);
        tracing::debug!(event = "receiver.refused", signal = "metrics", error = %error);
    }

    fn refuse_too_many(&self) {
        self.metrics.record_too_many_requests();
    }

    fn in_flight_gauge(&self) -> &IntGauge {
        self.metrics.in_flight()
    }

    fn json_to_protobuf(json: &[u8]) -> Result<Vec<u8>, PipelineError> {
        crate::otlp::metrics_json_to_protobuf(json)
            .map_err(|error| PipelineError::Malformed(error.to_string()))
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
