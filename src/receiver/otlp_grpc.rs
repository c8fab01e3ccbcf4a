//! OTLP/gRPC: `TraceService/Export` served from the request's bytes.
//!
//! The trace service is a hand-written tonic service whose codec hands the handler the
//! request message as bytes, so spans are validated by the wire reader and never decoded
//! into objects. The metrics service is built the same way (the handler validates with a
//! prost decode and passes the original bytes on) when the receiver feeds a metrics
//! pipeline, and answers `UNIMPLEMENTED` with a message otherwise; so does the logs service.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::codec::{BufferSettings, Codec, CompressionEncoding, DecodeBuf, Decoder};
use tonic::server::{NamedService, UnaryService};
use tonic::transport::server::TcpIncoming;

use super::{MetricsIntake, TracesIntake};
use crate::config::GrpcServerConfig;
use crate::error::PipelineError;

const TRACE_SERVICE: &str = "opentelemetry.proto.collector.trace.v1.TraceService";
const TRACE_EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
const METRICS_SERVICE: &str = "opentelemetry.proto.collector.metrics.v1.MetricsService";
const METRICS_EXPORT_PATH: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

/// Serves OTLP/gRPC on `listener` until `stop` turns true, then finishes in-flight
/// requests and returns.
///
/// # Errors
///
/// When the server fails to run (the listener is already bound, so this is rare).
pub async fn serve(
    listener: TcpListener,
    config: GrpcServerConfig,
    traces: TracesIntake,
    metrics: MetricsIntake,
    mut stop: watch::Receiver<bool>,
) -> Result<(), tonic::transport::Error> {
    let trace_service = RawExportService {
        intake: traces,
        max_message_size: config.max_recv_msg_size,
    };
    let (raw_metrics_service, metrics_service) = if metrics.has_pipeline() {
        let raw = RawExportService {
            intake: metrics,
            max_message_size: config.max_recv_msg_size,
        };
        (Some(raw), None)
    } else {
        let none = MetricsServiceServer::new(NoPipeline)
            .max_decoding_message_size(config.max_recv_msg_size)
            .accept_compressed(CompressionEncoding::Gzip)
            .accept_compressed(CompressionEncoding::Zstd);
        (None, Some(none))
    };
    let logs_service = LogsServiceServer::new(NoPipeline)
        .max_decoding_message_size(config.max_recv_msg_size)
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Zstd);
    tonic::transport::Server::builder()
        .add_service(trace_service)
        .add_optional_service(raw_metrics_service)
        .add_optional_service(metrics_service)
        .add_service(logs_service)
        .serve_with_incoming_shutdown(
            // Small unary answers: do not let Nagle's algorithm delay them.
            TcpIncoming::from(listener).with_nodelay(Some(true)),
            async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
            },
        )
        .await
}

/// What a raw export service needs from a signal's intake.
trait RawIntake: Clone + Send + Sync + 'static {
    /// The gRPC service name.
    const SERVICE: &'static str;
    /// The path of its `Export` method.
    const EXPORT_PATH: &'static str;
    /// The empty success answer.
    type Response: prost::Message + Default + Send + 'static;

    /// Admission before the body is read; see [`TracesIntake::admit`].
    fn admit(&self, size_hint: usize) -> Result<(), PipelineError>;

    /// Validates and admits one request.
    fn ingest(&self, request: Bytes) -> impl Future<Output = Result<usize, PipelineError>> + Send;
}

impl RawIntake for TracesIntake {
    const SERVICE: &'static str = TRACE_SERVICE;
    const EXPORT_PATH: &'static str = TRACE_EXPORT_PATH;
    type Response = ExportTraceServiceResponse;

    fn admit(&self, size_hint: usize) -> Result<(), PipelineError> {
        TracesIntake::admit(self, size_hint)
    }

    fn ingest(&self, request: Bytes) -> impl Future<Output = Result<usize, PipelineError>> + Send {
        TracesIntake::ingest(self, request)
    }
}

impl RawIntake for MetricsIntake {
    const SERVICE: &'static str = METRICS_SERVICE;
    const EXPORT_PATH: &'static str = METRICS_EXPORT_PATH;
    type Response = ExportMetricsServiceResponse;

    fn admit(&self, size_hint: usize) -> Result<(), PipelineError> {
        MetricsIntake::admit(self, size_hint)
    }

    fn ingest(&self, request: Bytes) -> impl Future<Output = Result<usize, PipelineError>> + Send {
        MetricsIntake::ingest(self, request)
    }
}

/// An OTLP export service (`TraceService` or `MetricsService`) over raw request bytes.
#[derive(Clone)]
struct RawExportService<I> {
    intake: I,
    max_message_size: usize,
}

impl<I: RawIntake> NamedService for RawExportService<I> {
    const NAME: &'static str = I::SERVICE;
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'static>>;

impl<I, B> tower::Service<http::Request<B>> for RawExportService<I>
where
    I: RawIntake,
    B: http_body::Body + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

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
        // Admission before the body is read or decoded. gRPC carries no length up front,
        // so the check is the limiter's state and the budget's headroom.
        if let Err(error) = self.intake.admit(0) {
            return Box::pin(async move { Ok(error.grpc_status().into_http()) });
        }
        let handler = ExportHandler {
            intake: self.intake.clone(),
        };
        let max_message_size = self.max_message_size;
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(RawRequestCodec::<I::Response>::default())
                .accept_compressed(CompressionEncoding::Gzip)
                .accept_compressed(CompressionEncoding::Zstd)
                .send_compressed(CompressionEncoding::Gzip)
                .send_compressed(CompressionEncoding::Zstd)
                .max_decoding_message_size(max_message_size);
            Ok(grpc.unary(handler, request).await)
        })
    }
}

struct ExportHandler<I> {
    intake: I,
}

impl<I: RawIntake> UnaryService<Bytes> for ExportHandler<I> {
    type Response = I::Response;
    type Future = BoxFuture<tonic::Response<Self::Response>, tonic::Status>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        let intake = self.intake.clone();
        Box::pin(async move {
            // The receiver never fills partial_success, as the Collector's.
            match intake.ingest(request.into_inner()).await {
                Ok(_items) => Ok(tonic::Response::new(I::Response::default())),
                Err(error) => Err(error.grpc_status()),
            }
        })
    }
}

/// Decodes a request message as its bytes; encodes the response `R` with prost.
#[derive(Debug)]
struct RawRequestCodec<R>(std::marker::PhantomData<fn() -> R>);

impl<R> Default for RawRequestCodec<R> {
    fn default() -> Self {
        Self(std::marker::PhantomData)
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
        BytesDecoder
    }
}

/// Yields a gRPC message's bytes as they arrived (after decompression).
#[derive(Clone, Copy, Debug, Default)]
struct BytesDecoder;

impl Decoder for BytesDecoder {
    type Item = Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        let len = src.remaining();
        Ok(Some(src.copy_to_bytes(len)))
    }
}

/// Answers the metrics service when the receiver feeds no metrics pipeline, and the logs
/// service.
#[derive(Clone, Copy, Debug)]
struct NoPipeline;

#[tonic::async_trait]
impl MetricsService for NoPipeline {
    async fn export(
        &self,
        _request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        Err(PipelineError::NoPipeline("metrics").grpc_status())
    }
}

#[tonic::async_trait]
impl LogsService for NoPipeline {
    async fn export(
        &self,
        _request: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        Err(PipelineError::NoPipeline("logs").grpc_status())
    }
}
