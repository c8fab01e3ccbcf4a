//! OTLP/gRPC: `TraceService/Export` served from the request's bytes.
//!
//! The trace service is a hand-written tonic service whose codec hands the handler the
//! request message as bytes, so spans are validated by the wire reader and never decoded
//! into objects. The metrics and logs services answer `UNIMPLEMENTED` with a message until
//! this gateway has pipelines for them.

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

use super::TracesIntake;
use crate::config::GrpcServerConfig;
use crate::error::PipelineError;

const TRACE_SERVICE: &str = "opentelemetry.proto.collector.trace.v1.TraceService";
const TRACE_EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

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
    mut stop: watch::Receiver<bool>,
) -> Result<(), tonic::transport::Error> {
    let trace_service = RawTraceService {
        intake: traces,
        max_message_size: config.max_recv_msg_size,
    };
    let metrics_service = MetricsServiceServer::new(NoPipeline)
        .max_decoding_message_size(config.max_recv_msg_size)
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Zstd);
    let logs_service = LogsServiceServer::new(NoPipeline)
        .max_decoding_message_size(config.max_recv_msg_size)
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Zstd);
    tonic::transport::Server::builder()
        .add_service(trace_service)
        .add_service(metrics_service)
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

/// `TraceService` over raw request bytes.
#[derive(Clone)]
struct RawTraceService {
    intake: TracesIntake,
    max_message_size: usize,
}

impl NamedService for RawTraceService {
    const NAME: &'static str = TRACE_SERVICE;
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'static>>;

impl<B> tower::Service<http::Request<B>> for RawTraceService
where
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
        if request.uri().path() != TRACE_EXPORT_PATH {
            let status = tonic::Status::unimplemented(format!(
                "unknown method {}; the trace service has only Export",
                request.uri().path()
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
            let mut grpc = tonic::server::Grpc::new(RawRequestCodec)
                .accept_compressed(CompressionEncoding::Gzip)
                .accept_compressed(CompressionEncoding::Zstd)
                .send_compressed(CompressionEncoding::Gzip)
                .send_compressed(CompressionEncoding::Zstd)
                .max_decoding_message_size(max_message_size);
            Ok(grpc.unary(handler, request).await)
        })
    }
}

struct ExportHandler {
    intake: TracesIntake,
}

impl UnaryService<Bytes> for ExportHandler {
    type Response = ExportTraceServiceResponse;
    type Future = BoxFuture<tonic::Response<Self::Response>, tonic::Status>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        let intake = self.intake.clone();
        Box::pin(async move {
            match intake.ingest(request.into_inner()).await {
                Ok(_spans) => Ok(tonic::Response::new(ExportTraceServiceResponse {
                    partial_success: None,
                })),
                Err(error) => Err(error.grpc_status()),
            }
        })
    }
}

/// Decodes a request message as its bytes; encodes the response with prost.
#[derive(Clone, Copy, Debug, Default)]
struct RawRequestCodec;

impl Codec for RawRequestCodec {
    type Encode = ExportTraceServiceResponse;
    type Decode = Bytes;
    type Encoder = tonic_prost::ProstEncoder<ExportTraceServiceResponse>;
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

/// Answers the metrics and logs services until pipelines exist for them.
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
