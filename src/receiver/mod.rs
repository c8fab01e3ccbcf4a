//! The OTLP receiver: gRPC ([`otlp_grpc`]) and HTTP ([`otlp_http`]), each in plaintext or
//! behind the TLS handshake of [`tls`].
//!
//! Both transports share one [`SignalIntake`] per signal: validate the request (traces with
//! the wire reader, exactly as strict as a protobuf decode plus OTLP's id lengths; metrics
//! with a prost decode), count its items, and admit it into every pipeline the receiver
//! feeds. Spans are not decoded into objects. When a stage that reads span views is among
//! those pipelines (a tail sampler fed directly or behind `forward`, span metrics), the
//! validating walk is the parse that yields the views, and those stages read them (the
//! views travel with the batch through the pipeline queue in front of connectors, charged
//! to the memory budget): each request is walked once. A traces request transcoded from
//! OTLP/JSON is valid by construction and comes with its span count, so it is not
//! validated again; its views, when wanted, are read by the skim
//! ([`crate::payload::Payload::inspect_vouched`]).
//!
//! Admission, on both transports and in this order, before a request body is read:
//!
//! 0. when the server names an authenticator (`auth.authenticator`), valid credentials
//!    (see [`auth`]), else a refusal that is not retryable, counted as `unauthenticated`;
//! 1. a slot among the receiver's `max_concurrent_requests` in flight, else a retryable
//!    refusal counted as `too_many_requests`;
//! 2. a [`Reservation`] of the memory budget for what the body may come to (its declared
//!    length, else the receiver's maximum size), else a retryable refusal counted as
//!    `overloaded`. The reservation is resized as the body is read, decompressed and
//!    decoded, and becomes the charge the request's batch carries into the pipeline.

pub mod auth;
mod in_flight;
mod metrics;
pub mod otlp_grpc;
pub mod otlp_http;
mod password;
pub mod tls;

pub use auth::Authenticator;
pub use metrics::{ReceiverMetricFamilies, ReceiverMetrics, Transport};

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use prometheus::IntGauge;

use crate::error::PipelineError;
use crate::limiter::{MemoryLimiter, Reservation};
use crate::payload::{Arrival, MetricsBatch, Payload, Sink, TraceBatch, Transcoded};

/// What both transports need of a signal's intake.
trait Intake: Clone + Send + Sync + 'static {
    /// Admission before the body is read: reserves at least `least` and at most `most`
    /// bytes of the memory budget (see [`MemoryLimiter::reserve_between`]). A refusal is
    /// counted before it is returned.
    ///
    /// # Errors
    ///
    /// [`PipelineError::Overloaded`] when the memory limiter says no for now,
    /// [`PipelineError::ExceedsMemoryLimit`] when `least` could never fit.
    fn reserve(&self, least: usize, most: usize) -> Result<Reservation, PipelineError>;

    /// Validates and admits one encoded request, held under `reservation`, which becomes
    /// the batch's charge (or is released when the request does not enter a queue);
    /// directly fed stages learn how it arrived (`arrival`). A request whose producer
    /// vouches for it (`vouched_items`, see [`crate::payload::Transcoded`]) is not
    /// validated again. Returns the items (spans or data points) admitted. Every refusal
    /// is counted.
    fn ingest(
        &self,
        request: Bytes,
        vouched_items: Option<usize>,
        reservation: Reservation,
        arrival: Arrival,
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
    fn json_to_protobuf(json: &[u8]) -> Result<Transcoded, PipelineError>;
}

/// Admission by the memory limiter when there is one; counts a refusal.
fn reserve_with(
    limiter: Option<&MemoryLimiter>,
    metrics: &ReceiverMetrics,
    least: usize,
    most: usize,
) -> Result<Reservation, PipelineError> {
    let Some(limiter) = limiter else {
        return Ok(Reservation::unlimited());
    };
    limiter.reserve_between(least, most).inspect_err(|error| {
        metrics.record_refused(0, error);
    })
}

/// Validates, counts and admits requests of one signal for one receiver and transport.
pub struct SignalIntake<P: Payload> {
    sink: Sink<P>,
    metrics: ReceiverMetrics,
    limiter: Option<Arc<MemoryLimiter>>,
}

/// The intake of trace requests.
pub type TracesIntake = SignalIntake<TraceBatch>;

/// The intake of metrics requests.
pub type MetricsIntake = SignalIntake<MetricsBatch>;

impl<P: Payload> Clone for SignalIntake<P> {
    fn clone(&self) -> Self {
        Self {
            sink: self.sink.clone(),
            metrics: self.metrics.clone(),
            limiter: self.limiter.clone(),
        }
    }
}

impl<P: Payload> SignalIntake<P> {
    /// An intake feeding `sink`, counting items into `metrics`, admitting requests through
    /// `limiter` when a memory limit is configured.
    pub fn new(
        sink: Sink<P>,
        metrics: ReceiverMetrics,
        limiter: Option<Arc<MemoryLimiter>>,
    ) -> Self {
        Self {
            sink,
            metrics,
            limiter,
        }
    }

    /// True when at least one pipeline takes this receiver's data of this signal.
    pub fn has_pipeline(&self) -> bool {
        !self.sink.is_empty()
    }

    /// Admits an encoded request, held under `reservation`; returns its item count.
    ///
    /// The request is walked once ([`Payload::inspect`]): when a stage that reads views (a
    /// tail sampler fed directly or behind `forward`, span metrics) is among the
    /// pipelines, the validating walk also yields the views it reads, rather than the
    /// request being parsed again there. A request vouched for by
    /// its producer (`vouched_items`: the JSON transcoder's output) is valid by
    /// construction and is not validated again ([`Payload::inspect_vouched`]). A request
    /// with no items succeeds without entering the pipeline, as in the Collector.
    ///
    /// # Errors
    ///
    /// [`PipelineError::Malformed`] when the bytes are not a valid request, or the
    /// pipeline's refusal. Every refusal is counted before it is returned.
    async fn ingest_request(
        &self,
        request: Bytes,
        vouched_items: Option<usize>,
        mut reservation: Reservation,
        arrival: Arrival,
    ) -> Result<usize, PipelineError> {
        let want_views = self.sink.wants_views();
        let inspected = match vouched_items {
            Some(items) => P::inspect_vouched(&request, items, want_views),
            None => P::inspect(&request, want_views),
        };
        let mut inspected = match inspected {
            Ok(inspected) => inspected,
            Err(error) => {
                self.metrics
                    .record_refused(P::refused_items(&request), &error);
                tracing::debug!(event = "receiver.refused", signal = %P::SIGNAL, error = %error);
                return Err(error);
            }
        };
        let items = inspected.items;
        if items == 0 {
            return Ok(0);
        }
        let request = match inspected.corrected.take() {
            Some(corrected) => {
                self.metrics
                    .record_utf8_corrected(corrected.strings, &corrected.first_path);
                corrected.request
            }
            None => request,
        };
        if self.sink.is_empty() {
            let error = PipelineError::NoPipeline(P::SIGNAL.as_str());
            self.metrics.record_refused(items, &error);
            return Err(error);
        }
        // From here the request's buffer is what the batch holds.
        if let Err(error) = reservation.resize(request.len()) {
            self.metrics.record_refused(items, &error);
            return Err(error);
        }
        let mut batch = P::from_request(request, items);
        batch.set_charge(reservation.into_charge());
        match self
            .sink
            .accept_with_views(batch, inspected.views, arrival)
            .await
        {
            Ok(()) => {
                self.metrics.record_accepted(items);
                Ok(items)
            }
            Err(error) => {
                self.metrics.record_refused(items, &error);
                Err(error)
            }
        }
    }
}

impl<P: Payload> Intake for SignalIntake<P> {
    fn reserve(&self, least: usize, most: usize) -> Result<Reservation, PipelineError> {
        reserve_with(self.limiter.as_deref(), &self.metrics, least, most)
    }

    fn ingest(
        &self,
        request: Bytes,
        vouched_items: Option<usize>,
        reservation: Reservation,
        arrival: Arrival,
    ) -> impl Future<Output = Result<usize, PipelineError>> + Send {
        self.ingest_request(request, vouched_items, reservation, arrival)
    }

    /// Its items are unknown: counted as a request only.
    fn refuse(&self, error: &PipelineError) {
        self.metrics.record_refused(0, error);
        tracing::debug!(event = "receiver.refused", signal = %P::SIGNAL, error = %error);
    }

    fn refuse_too_many(&self) {
        self.metrics.record_too_many_requests();
    }

    fn in_flight_gauge(&self) -> &IntGauge {
        self.metrics.in_flight()
    }

    fn json_to_protobuf(json: &[u8]) -> Result<Transcoded, PipelineError> {
        P::json_to_protobuf(json)
    }
}
