//! OTLP/gRPC: `TraceService/Export` served from the request's bytes.
//!
//! The trace service is a hand-written tonic service whose codec hands the handler the
//! request message as bytes, so spans are validated by the wire reader and never decoded
//! into objects. The metrics service is built the same way (the handler validates with a
//! prost decode and passes the original bytes on) when the receiver feeds a metrics
//! pipeline. Otherwise the metrics service, and the logs service, answer `UNIMPLEMENTED`
//! with a message at once, without reading the request.
//!
//! Admission (see the [module docs](super)) happens before the message is read: the
//! credentials are checked first when the server has an authenticator (a refusal is
//! `UNAUTHENTICATED`), then the service reads only the 5-byte gRPC frame header, which
//! carries the message length, and reserves that length (uncompressed), or the compressed
//! length plus `max_recv_msg_size_mib` (compressed: the decompressed size is known only
//! once tonic has inflated it, within that maximum). After decoding, the reservation
//! shrinks to the message and travels with it into the pipeline.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::codec::{BufferSettings, Codec, CompressionEncoding, DecodeBuf, Decoder};
use tonic::server::{NamedService, UnaryService};

use super::in_flight::InFlightLimit;
use super::tls::ServerTls;
use super::{Authenticator, Intake, MetricsIntake, TracesIntake};
use crate::config::GrpcServerConfig;
use crate::error::PipelineError;
use crate::limiter::Reservation;
use crate::net::Acceptor;
use crate::payload::{Arrival, HAND_OFF_HEADER};

const TRACE_SERVICE: &str = "opentelemetry.proto.collector.trace.v1.TraceService";
const TRACE_EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
const METRICS_SERVICE: &str = "opentelemetry.proto.collector.metrics.v1.MetricsService";
const METRICS_EXPORT_PATH: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";
const LOGS_SERVICE: &str = "opentelemetry.proto.collector.logs.v1.LogsService";

/// The length of a gRPC message's frame header: a compression flag and a 32-bit length.
const FRAME_HEADER_LEN: usize = 5;

/// HTTP/2 flow-control windows and frame size the server announces. h2's defaults (64 KiB
/// windows, 16 KiB frames) cut a 250 KiB request into 16 frames and stall the sender for a
/// WINDOW_UPDATE every 64 KiB: each a wake-up and a syscall on both sides. With these, a
/// request up to 1 MiB arrives without waiting, in frames of up to 256 KiB. The connection
/// window bounds what a client can have sent but the receiver not yet read (and not yet
/// reserved in the memory budget): 4 MiB per connection.
const STREAM_WINDOW: u32 = 1024 * 1024;
const CONNECTION_WINDOW: u32 = 4 * 1024 * 1024;
const MAX_FRAME_SIZE: u32 = 256 * 1024;

/// Serves OTLP/gRPC on `listener` until `stop` turns true, then finishes in-flight
/// requests and returns. With `tls` (built from `config.tls`), every connection is a TLS
/// connection offering `h2` by ALPN; without, plaintext h2c.
/// requests and returns. With `auth`, every export request must pass it first.
///
/// # Errors
///
/// When the server fails to run (the listener is already bound, so this is rare).
pub async fn serve(
    listener: TcpListener,
    config: GrpcServerConfig,
    traces: TracesIntake,
    metrics: MetricsIntake,
    auth: Option<Authenticator>,
    mut stop: watch::Receiver<bool>,
    tls: Option<ServerTls>,
) -> Result<(), tonic::transport::Error> {
    // One limit for both services: it bounds the receiver's requests, whatever the signal.
    let in_flight = InFlightLimit::new(
        config.max_concurrent_requests,
        traces.in_flight_gauge().clone(),
    );
    let trace_service = RawExportService {
        intake: traces,
        max_message_size: config.max_recv_msg_size,
        in_flight: in_flight.clone(),
        auth: auth.clone(),
    };
    let (raw_metrics_service, metrics_service) = if metrics.has_pipeline() {
        let raw = RawExportService {
            intake: metrics,
            max_message_size: config.max_recv_msg_size,
            in_flight,
            auth,
        };
        (Some(raw), None)
    } else {
        (None, Some(NoPipeline::<MetricsSignal>::default()))
    };
    let router = tonic::transport::Server::builder()
        .max_concurrent_streams(config.max_concurrent_streams)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME_SIZE)
        .add_service(trace_service)
        .add_optional_service(raw_metrics_service)
        .add_optional_service(metrics_service)
        .add_service(NoPipeline::<LogsSignal>::default());
    let stopped = async move {
        let _ = stop.wait_for(|stopped| *stopped).await;
    };
    let acceptor = Acceptor::new(listener);
    match tls {
        Some(tls) => {
            router
                .serve_with_incoming_shutdown(tls.incoming(acceptor), stopped)
                .await
        }
        None => router.serve_with_incoming_shutdown(acceptor, stopped).await,
    }
}

/// What a raw export service needs from a signal's intake.
trait RawIntake: Intake {
    /// The gRPC service name.
    const SERVICE: &'static str;
    /// The path of its `Export` method.
    const EXPORT_PATH: &'static str;
    /// The empty success answer.
    type Response: prost::Message + Default + Send + 'static;
}

impl RawIntake for TracesIntake {
    const SERVICE: &'static str = TRACE_SERVICE;
    const EXPORT_PATH: &'static str = TRACE_EXPORT_PATH;
    type Response = ExportTraceServiceResponse;
}

impl RawIntake for MetricsIntake {
    const SERVICE: &'static str = METRICS_SERVICE;
    const EXPORT_PATH: &'static str = METRICS_EXPORT_PATH;
    type Response = ExportMetricsServiceResponse;
}

/// An OTLP export service (`TraceService` or `MetricsService`) over raw request bytes.
#[derive(Clone)]
struct RawExportService<I> {
    intake: I,
    max_message_size: usize,
    in_flight: InFlightLimit,
    /// Checked before anything else is done for a request.
    auth: Option<Authenticator>,
}

impl<I: RawIntake> NamedService for RawExportService<I> {
    const NAME: &'static str = I::SERVICE;
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'static>>;

impl<I, B> tower::Service<http::Request<B>> for RawExportService<I>
where
    I: RawIntake,
    B: Body + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    /// Always ready: requests over the limits are answered with a refusal in `call`
    /// rather than held back here (see [`InFlightLimit`] for why).
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != I::EXPORT_PATH {
            let status = tonic::Status::unimplemented(format!(
                "unknown method {}; {} has only Export",
                request.uri().path(),
                I::SERVICE
            ));
            return Box::pin(async move { Ok(status.into_http()) });
        }
        let intake = self.intake.clone();
        let max_message_size = self.max_message_size;
        let in_flight = self.in_flight.clone();
        let auth = self.auth.clone();
        Box::pin(async move {
            // Credentials first: a sender without them takes no slot and no memory.
            if let Some(auth) = auth {
                let peer = request
                    .extensions()
                    .get::<tonic::transport::server::TcpConnectInfo>()
                    .and_then(|info| info.remote_addr());
                if let Err(error) = auth.authenticate(request.headers(), peer).await {
                    intake.refuse(&error);
                    return Ok(error.grpc_status().into_http());
                }
            }
            let _permit = match in_flight.try_acquire() {
                Ok(permit) => permit,
                Err(error) => {
                    intake.refuse_too_many();
                    return Ok(error.grpc_status().into_http());
                }
            };
            // Admission before the message is read or decoded: only its frame header.
            let (parts, body) = request.into_parts();
            let mut body = Peeked::new(body);
            let header = body.frame_header().await;
            let (least, most) = match header {
                // Over the maximum: refused without reading it, as not retryable.
                Some((_, len)) if len > max_message_size => {
                    let error = PipelineError::MessageTooLarge {
                        limit: max_message_size,
                        size: format!("{len} bytes"),
                    };
                    intake.refuse(&error);
                    return Ok(error.grpc_status().into_http());
                }
                Some((false, len)) => (len, len),
                // Compressed: the message and what it inflates to, at most the maximum.
                Some((true, len)) => (len, len + max_message_size),
                // No complete header: tonic answers the protocol error.
                None => (0, 0),
            };
            let reservation = match intake.reserve(least, most) {
                Ok(reservation) => reservation,
                Err(error) => return Ok(error.grpc_status().into_http()),
            };
            let handled = Arc::new(AtomicBool::new(false));
            let handler = ExportHandler {
                intake: intake.clone(),
                reservation: Some(reservation),
                handled: handled.clone(),
            };
            let codec = match header {
                Some((false, len)) => RawRequestCodec::for_message(len),
                _ => RawRequestCodec::default(),
            };
            let mut grpc = tonic::server::Grpc::new(codec)
                .accept_compressed(CompressionEncoding::Gzip)
                .accept_compressed(CompressionEncoding::Zstd)
                // Answers go uncompressed whatever the client accepts: an OTLP answer is a
                // few bytes, and compressing it cost a fresh deflate state per request
                // (8% of a one-tier replica's CPU, BENCHMARKS.md "Scale-out").
                .max_decoding_message_size(max_message_size);
            let response = grpc
                .unary(handler, http::Request::from_parts(parts, body))
                .await;
            // A message tonic refused before the handler saw it because it inflates past
            // the maximum: tonic answers OUT_OF_RANGE (which OTLP clients retry) or
            // RESOURCE_EXHAUSTED with a message that names no setting, and counts nothing.
            let refused_by_size = matches!(
                grpc_status(&response),
                Some(tonic::Code::OutOfRange | tonic::Code::ResourceExhausted)
            );
            if refused_by_size && !handled.load(Ordering::Acquire) {
                let error = PipelineError::MessageTooLarge {
                    limit: max_message_size,
                    size: "unknown size (compressed)".to_owned(),
                };
                intake.refuse(&error);
                return Ok(error.grpc_status().into_http());
            }
            Ok(response)
        })
    }
}

/// The status of a trailers-only gRPC answer (an error answered before any message), if
/// `response` is one.
fn grpc_status<B>(response: &http::Response<B>) -> Option<tonic::Code> {
    let value = response.headers().get("grpc-status")?.to_str().ok()?;
    value.parse::<i32>().ok().map(tonic::Code::from)
}

/// Handles one decoded request under the reservation admission took for it.
struct ExportHandler<I> {
    intake: I,
    reservation: Option<Reservation>,
    /// Set once the decoded message reached the handler (its answers are its own).
    handled: Arc<AtomicBool>,
}

impl<I: RawIntake> UnaryService<Bytes> for ExportHandler<I> {
    type Response = I::Response;
    type Future = BoxFuture<tonic::Response<Self::Response>, tonic::Status>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        self.handled.store(true, Ordering::Release);
        let intake = self.intake.clone();
        // Called once per request (the handler is made per request); the ingest resizes
        // the reservation to the message and hands it on with the batch.
        let reservation = self
            .reservation
            .take()
            .unwrap_or_else(Reservation::unlimited);
        Box::pin(async move {
            // The receiver never fills partial_success, as the Collector's.
            let arrival = if request.metadata().contains_key(HAND_OFF_HEADER) {
                Arrival::HandOff
            } else {
                Arrival::Sent
            };
            match intake
                .ingest(request.into_inner(), None, reservation, arrival)
                .await
            {
                Ok(_items) => Ok(tonic::Response::new(I::Response::default())),
                Err(error) => Err(error.grpc_status()),
            }
        })
    }
}

/// A request body whose first frames can be read ahead (to learn the message length) and
/// are then yielded again, followed by the rest of the body.
struct Peeked<B: Body> {
    inner: Pin<Box<B>>,
    read_ahead: VecDeque<Result<Frame<Bytes>, B::Error>>,
    /// The inner body has ended (or failed) while reading ahead.
    ended: bool,
}

impl<B: Body> Peeked<B> {
    fn new(body: B) -> Self {
        Self {
            inner: Box::pin(body),
            read_ahead: VecDeque::new(),
            ended: false,
        }
    }

    /// Reads ahead until the first message's frame header is in: its compression flag
    /// and length. `None` when the body ends, fails or carries trailers first.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: frames read ahead are kept and yielded by the body.
    async fn frame_header(&mut self) -> Option<(bool, usize)> {
        loop {
            let buffered: usize = self
                .read_ahead
                .iter()
                .filter_map(|frame| frame.as_ref().ok()?.data_ref().map(Bytes::len))
                .sum();
            if buffered >= FRAME_HEADER_LEN {
                let mut header = [0u8; FRAME_HEADER_LEN];
                let mut at = 0;
                for data in self
                    .read_ahead
                    .iter()
                    .filter_map(|frame| frame.as_ref().ok()?.data_ref())
                {
                    let take = (FRAME_HEADER_LEN - at).min(data.len());
                    header[at..at + take].copy_from_slice(&data[..take]);
                    at += take;
                    if at == FRAME_HEADER_LEN {
                        break;
                    }
                }
                let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
                return Some((header[0] != 0, len as usize));
            }
            if self.ended {
                return None;
            }
            match std::future::poll_fn(|cx| self.inner.as_mut().poll_frame(cx)).await {
                None => {
                    self.ended = true;
                    return None;
                }
                Some(Ok(frame)) => {
                    let frame = frame.map_data(|mut data| data.copy_to_bytes(data.remaining()));
                    let trailers = frame.is_trailers();
                    self.read_ahead.push_back(Ok(frame));
                    if trailers {
                        return None;
                    }
                }
                Some(Err(error)) => {
                    self.read_ahead.push_back(Err(error));
                    self.ended = true;
                    return None;
                }
            }
        }
    }
}

// Nothing is pinned in place: the inner body is boxed, and frames read ahead are plain
// values moved in and out of the queue.
impl<B: Body> Unpin for Peeked<B> {}

impl<B: Body> Body for Peeked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        if let Some(frame) = this.read_ahead.pop_front() {
            return Poll::Ready(Some(frame));
        }
        if this.ended {
            return Poll::Ready(None);
        }
        this.inner.as_mut().poll_frame(cx).map(|frame| {
            frame.map(|frame| {
                frame.map(|frame| frame.map_data(|mut data| data.copy_to_bytes(data.remaining())))
            })
        })
    }

    fn is_end_stream(&self) -> bool {
        self.read_ahead.is_empty() && (self.ended || self.inner.is_end_stream())
    }
}

/// Decodes a request message as its bytes; encodes the response `R` with prost.
#[derive(Debug)]
struct RawRequestCodec<R> {
    /// The first size of tonic's buffer for the request's frames; tonic's default when
    /// `None`.
    read_buffer: Option<usize>,
    response: std::marker::PhantomData<fn() -> R>,
}

impl<R> Default for RawRequestCodec<R> {
    /// tonic's own first buffer size (8 KiB), grown as frames arrive.
    fn default() -> Self {
        Self {
            read_buffer: None,
            response: std::marker::PhantomData,
        }
    }
}

impl<R> RawRequestCodec<R> {
    /// For an uncompressed message of `len` bytes (its frame header read ahead). tonic
    /// copies the frames into its buffer, then reserves `len` bytes more than it holds
    /// for the message; grown from 8 KiB, that took a reallocation and a second copy of
    /// the message whenever it had all arrived. A buffer of the header and twice `len`
    /// is what that growth ends with anyway, allocated once. (Admission has reserved
    /// `len` against the memory budget, and `len` is within the maximum message size.)
    fn for_message(len: usize) -> Self {
        Self {
            read_buffer: Some(FRAME_HEADER_LEN + 2 * len),
            ..Self::default()
        }
    }
}

impl<R> Codec for RawRequestCodec<R>
where
    R: prost::Message + Send + 'static,
{
    type Encode = R;
    type Decode = Bytes;
    type Encoder = tonic_prost::ProstEncoder<R>;
    type Decoder = BytesDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstEncoder::new(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        BytesDecoder {
            read_buffer: self.read_buffer,
        }
    }
}

/// Yields a gRPC message's bytes as they arrived (after decompression).
#[derive(Clone, Copy, Debug)]
struct BytesDecoder {
    /// See [`RawRequestCodec`].
    read_buffer: Option<usize>,
}

impl Decoder for BytesDecoder {
    type Item = Bytes;
    type Error = tonic::Status;

    fn buffer_settings(&self) -> BufferSettings {
        match self.read_buffer {
            // Decoding reads only the buffer size; the yield threshold (tonic's default,
            // 32 KiB) is the encoder's.
            Some(size) => BufferSettings::new(size, 32 * 1024),
            None => BufferSettings::default(),
        }
    }

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        let len = src.remaining();
        Ok(Some(src.copy_to_bytes(len)))
    }
}

/// A signal that a gRPC service of this receiver does not take.
trait UnservedSignal: Send + Sync + 'static {
    /// The gRPC service name.
    const SERVICE: &'static str;
    /// The signal, for the message.
    const SIGNAL: &'static str;
}

#[derive(Clone, Copy, Debug, Default)]
struct MetricsSignal;

impl UnservedSignal for MetricsSignal {
    const SERVICE: &'static str = METRICS_SERVICE;
    const SIGNAL: &'static str = "metrics";
}

#[derive(Clone, Copy, Debug, Default)]
struct LogsSignal;

impl UnservedSignal for LogsSignal {
    const SERVICE: &'static str = LOGS_SERVICE;
    const SIGNAL: &'static str = "logs";
}

/// Answers a service whose signal has no pipeline (metrics when none is configured, and
/// logs) with `UNIMPLEMENTED` at once, without reading the request: nothing of it is
/// held.
#[derive(Debug, Default)]
struct NoPipeline<S>(std::marker::PhantomData<fn() -> S>);

impl<S> Clone for NoPipeline<S> {
    fn clone(&self) -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<S: UnservedSignal> NamedService for NoPipeline<S> {
    const NAME: &'static str = S::SERVICE;
}

impl<S: UnservedSignal, B> tower::Service<http::Request<B>> for NoPipeline<S> {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: http::Request<B>) -> Self::Future {
        std::future::ready(Ok(PipelineError::NoPipeline(S::SIGNAL)
            .grpc_status()
            .into_http()))
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroUsize;
    use std::sync::Arc;
    use std::time::Duration;

    use http_body_util::{BodyExt, Full, StreamBody};
    use opentelemetry_proto::tonic::trace::v1::Span;
    use prometheus::Registry;
    use tower::Service;

    use super::*;
    use crate::config::ComponentId;
    use crate::limiter::{Limits, MemoryLimiter};
    use crate::payload::TracesSink;
    use crate::receiver::metrics::labelled_counter;
    use crate::receiver::{ReceiverMetricFamilies, Transport};

    fn limiter(soft: u64) -> Arc<MemoryLimiter> {
        MemoryLimiter::with_limits(
            Limits {
                hard: soft * 2,
                soft,
            },
            Duration::from_secs(1),
            &Registry::new(),
        )
        .expect("fresh registry")
    }

    /// A trace service feeding no pipeline, admitting through `limiter`, with room for
    /// `in_flight` requests; and the registry its counters are in.
    fn service(
        limiter: &Arc<MemoryLimiter>,
        in_flight: usize,
    ) -> (RawExportService<TracesIntake>, Registry) {
        let registry = Registry::new();
        let id = ComponentId {
            written: "otlp".into(),
            kind: "otlp".into(),
            name: None,
        };
        let metrics = ReceiverMetricFamilies::register(&registry)
            .expect("fresh registry")
            .for_receiver(&id, Transport::Grpc);
        let intake = TracesIntake::new(TracesSink::default(), metrics, Some(limiter.clone()));
        let in_flight = InFlightLimit::new(
            NonZeroUsize::new(in_flight),
            intake.in_flight_gauge().clone(),
        );
        let service = RawExportService {
            intake,
            max_message_size: 4 << 20,
            in_flight,
            auth: None,
        };
        (service, registry)
    }

    fn export(body: Vec<u8>) -> http::Request<Full<Bytes>> {
        http::Request::post(TRACE_EXPORT_PATH)
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(Bytes::from(body)))
            .expect("request")
    }

    /// A gRPC frame: uncompressed flag, the declared length, then `payload`.
    fn frame(declared: u32, payload: &[u8]) -> Vec<u8> {
        let mut framed = vec![0];
        framed.extend_from_slice(&declared.to_be_bytes());
        framed.extend_from_slice(payload);
        framed
    }

    /// The grpc-status `service` answers the gRPC body `framed` with; `None` for OK.
    async fn status_of(
        service: &mut RawExportService<TracesIntake>,
        framed: Vec<u8>,
    ) -> Option<tonic::Code> {
        let response = service.call(export(framed)).await.expect("infallible");
        response
            .headers()
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<i32>().ok())
            .map(tonic::Code::from)
    }

    fn refused(registry: &Registry, reason: &str) -> u64 {
        labelled_counter(
            registry,
            "tailgate_receiver_refused_requests_total",
            "reason",
            reason,
        )
    }

    /// Scenario: a body whose 5-byte frame header arrives split over two chunks, followed
    /// by the message and trailers.
    /// Guarantees: the header's flag and length are read ahead, and the body then yields
    /// every byte and the trailers as they came.
    #[tokio::test]
    async fn reads_the_frame_header_ahead_and_replays_it() {
        let framed = frame(3, b"abc");
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-end", http::HeaderValue::from_static("1"));
        let chunks: Vec<Result<Frame<Bytes>, Infallible>> = vec![
            Ok(Frame::data(Bytes::copy_from_slice(&framed[..2]))),
            Ok(Frame::data(Bytes::copy_from_slice(&framed[2..]))),
            Ok(Frame::trailers(trailers)),
        ];
        let mut body = Peeked::new(StreamBody::new(tokio_stream::iter(chunks)));
        assert_eq!(body.frame_header().await, Some((false, 3)));
        let collected = body.collect().await.expect("infallible");
        assert_eq!(collected.trailers().map(|t| t.len()), Some(1));
        assert_eq!(&collected.to_bytes()[..], &framed[..]);

        let mut empty = Peeked::new(Full::new(Bytes::new()));
        assert_eq!(empty.frame_header().await, None);
    }

    /// Scenario: a soft limit of 1000 bytes, 500 of them held elsewhere; a request whose
    /// frame header declares 800 bytes and whose message never comes; the same with 2000
    /// declared once the other bytes are released; then a valid request of a few spans.
    /// Guarantees: the first is refused UNAVAILABLE (retryable) on its declared length
    /// alone, without waiting for the message, and counted as overloaded; the second is
    /// refused RESOURCE_EXHAUSTED (not retryable: it could never fit), counted as
    /// too_large; the third is admitted, reserved for its length while decoded, and its
    /// reservation released once it ends (it feeds no pipeline here, so it is answered
    /// UNIMPLEMENTED).
    #[tokio::test]
    async fn reserves_the_declared_message_length_before_reading() {
        let limiter = limiter(1000);
        let (mut service, registry) = service(&limiter, 8);
        limiter.budget().charge(500);
        assert_eq!(
            status_of(&mut service, frame(800, &[])).await,
            Some(tonic::Code::Unavailable)
        );
        assert_eq!(refused(&registry, "overloaded"), 1);
        limiter.budget().release(500);
        assert_eq!(
            status_of(&mut service, frame(2000, &[])).await,
            Some(tonic::Code::ResourceExhausted)
        );
        assert_eq!(refused(&registry, "too_large"), 1);

        let request = crate::otlp::one_scope_request(
            (0..3u8)
                .map(|i| Span {
                    trace_id: vec![1; 16],
                    span_id: vec![i + 1; 8],
                    ..Default::default()
                })
                .collect(),
        );
        let len = request.len();
        assert_eq!(
            status_of(&mut service, frame(len as u32, &request)).await,
            Some(tonic::Code::Unimplemented)
        );
        assert!(limiter.budget().peak() >= len);
        assert_eq!(limiter.budget().used(), 0);
    }

    /// Scenario: a trace service that requires the bearer token `t0k`, with the memory
    /// budget full; requests whose body never arrives (only headers), without a token, with
    /// a wrong one, and one with the token and a frame header declaring 800 bytes.
    /// Guarantees: the first two are answered UNAUTHENTICATED at once, without reading the
    /// body (it never comes) or asking the budget (nothing counted as overloaded, nothing
    /// reserved), counted as unauthenticated; the third passes authentication and only
    /// then meets the memory limit (UNAVAILABLE, overloaded).
    #[tokio::test]
    async fn refuses_without_credentials_before_reading_or_reserving() {
        use crate::config::{BearerTokenAuthConfig, BearerTokens, ExtensionConfig, Secret};
        let limiter = limiter(1000);
        let (mut service, registry) = service(&limiter, 8);
        let config = ExtensionConfig::BearerTokenAuth(BearerTokenAuthConfig {
            scheme: "Bearer".into(),
            header: "Authorization".into(),
            tokens: BearerTokens::Inline(vec![Secret::new("t0k".into())]),
        });
        service.auth = Authenticator::new(&ComponentId::literal("bearertokenauth"), &config);
        limiter.budget().charge(1000);
        for authorization in [None, Some("Bearer wrong")] {
            let never: StreamBody<tokio_stream::Pending<Result<Frame<Bytes>, Infallible>>> =
                StreamBody::new(tokio_stream::pending());
            let mut request = http::Request::post(TRACE_EXPORT_PATH)
                .header("content-type", "application/grpc")
                .body(never)
                .expect("request");
            if let Some(value) = authorization {
                request.headers_mut().insert(
                    http::header::AUTHORIZATION,
                    http::HeaderValue::from_static(value),
                );
            }
            let response = tokio::time::timeout(Duration::from_secs(10), service.call(request))
                .await
                .expect("answered without the body")
                .expect("infallible");
            assert_eq!(
                grpc_status(&response),
                Some(tonic::Code::Unauthenticated),
                "{authorization:?}"
            );
        }
        assert_eq!(refused(&registry, "unauthenticated"), 2);
        assert_eq!(refused(&registry, "overloaded"), 0);
        assert_eq!(limiter.budget().used(), 1000);

        let mut request = export(frame(800, &[]));
        request.headers_mut().insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_static("Bearer t0k"),
        );
        let response = service.call(request).await.expect("infallible");
        assert_eq!(grpc_status(&response), Some(tonic::Code::Unavailable));
        assert_eq!(refused(&registry, "overloaded"), 1);
        assert_eq!(refused(&registry, "unauthenticated"), 2);
        limiter.budget().release(1000);
    }

    /// Scenario: a trace service with room for one request in flight, which is taken.
    /// Guarantees: the next request is refused UNAVAILABLE at once and counted as
    /// too_many_requests; once the slot is free, requests go through again.
    #[tokio::test]
    async fn sheds_requests_over_the_in_flight_limit() {
        let limiter = limiter(1 << 20);
        let (mut service, registry) = service(&limiter, 1);
        let held = service.in_flight.try_acquire().expect("a free slot");
        assert_eq!(
            status_of(&mut service, frame(0, &[])).await,
            Some(tonic::Code::Unavailable)
        );
        assert_eq!(refused(&registry, "too_many_requests"), 1);
        drop(held);
        // An empty request succeeds without entering a pipeline.
        assert_eq!(status_of(&mut service, frame(0, &[])).await, None);
        assert_eq!(refused(&registry, "too_many_requests"), 1);
    }
}
