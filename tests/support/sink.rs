//! OTLP sinks standing in for Tempo: a gRPC server built from the official
//! `TraceService` and an OTLP/HTTP server, each recording every span that arrives and able
//! to refuse for a while.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::net::TcpListener;
use tokio::time::Instant;

/// How a sink answers.
#[derive(Clone, Copy, Debug)]
pub enum SinkBehavior {
    /// Accept everything.
    Accept,
    /// Refuse (gRPC UNAVAILABLE / HTTP 503 with `Retry-After: 1`) until this long after
    /// the sink started, then accept.
    RefuseFor(Duration),
    /// Answer each gRPC call only after `delay` (a slow backend) until `period` after the
    /// sink started, then at once.
    SlowFor {
        /// How long the sink is slow.
        period: Duration,
        /// The delay of each answer meanwhile.
        delay: Duration,
    },
}

/// One span as received, with the resource and scope it arrived under.
#[derive(Clone, Debug)]
pub struct ReceivedSpan {
    /// The resource.
    pub resource: Resource,
    /// The instrumentation scope.
    pub scope: InstrumentationScope,
    /// The span.
    pub span: Span,
}

#[derive(Default)]
struct Recorded {
    spans: Vec<ReceivedSpan>,
    accepted_calls: usize,
    refused_calls: usize,
}

struct State {
    behavior: SinkBehavior,
    started: Instant,
    recorded: Mutex<Recorded>,
}

impl State {
    fn refusing(&self) -> bool {
        match self.behavior {
            SinkBehavior::Accept | SinkBehavior::SlowFor { .. } => false,
            SinkBehavior::RefuseFor(period) => self.started.elapsed() < period,
        }
    }

    /// Records a call; returns false when it was refused.
    fn record(&self, request: ExportTraceServiceRequest) -> bool {
        let mut recorded = self.recorded.lock().expect("sink lock");
        if self.refusing() {
            recorded.refused_calls += 1;
            return false;
        }
        recorded.accepted_calls += 1;
        for resource_spans in request.resource_spans {
            let resource = resource_spans.resource.unwrap_or_default();
            for scope_spans in resource_spans.scope_spans {
                let scope = scope_spans.scope.unwrap_or_default();
                for span in scope_spans.spans {
                    recorded.spans.push(ReceivedSpan {
                        resource: resource.clone(),
                        scope: scope.clone(),
                        span,
                    });
                }
            }
        }
        true
    }
}

/// A shared view of what a sink received.
#[derive(Clone)]
pub struct SinkHandle(Arc<State>);

impl SinkHandle {
    /// Every span received so far, in arrival order.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.0.recorded.lock().expect("sink lock").spans.clone()
    }

    /// How many spans arrived.
    pub fn span_count(&self) -> usize {
        self.0.recorded.lock().expect("sink lock").spans.len()
    }

    /// How many calls were accepted.
    pub fn accepted_calls(&self) -> usize {
        self.0.recorded.lock().expect("sink lock").accepted_calls
    }

    /// How many calls were refused.
    pub fn refused_calls(&self) -> usize {
        self.0.recorded.lock().expect("sink lock").refused_calls
    }
}

/// The gRPC sink.
pub struct OtlpSink {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it received.
    pub handle: SinkHandle,
    server: Option<(
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    )>,
}

struct GrpcSinkService(Arc<State>);

#[tonic::async_trait]
impl TraceService for GrpcSinkService {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        if let SinkBehavior::SlowFor { period, delay } = self.0.behavior
            && self.0.started.elapsed() < period
        {
            tokio::time::sleep(delay).await;
        }
        if self.0.record(request.into_inner()) {
            Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
        } else {
            Err(tonic::Status::unavailable("sink is refusing for this test"))
        }
    }
}

impl OtlpSink {
    /// Starts a gRPC sink on a free loopback port.
    pub async fn start(behavior: SinkBehavior) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind sink");
        let addr = listener.local_addr().expect("sink addr");
        let state = Arc::new(State {
            behavior,
            started: Instant::now(),
            recorded: Mutex::default(),
        });
        let server = Some(serve_grpc(listener, state.clone()));
        Self {
            addr,
            handle: SinkHandle(state),
            server,
        }
    }

    /// Stops listening (an outage): open connections are closed, new ones refused.
    pub async fn stop(&mut self) {
        if let Some((stop, task)) = self.server.take() {
            let _ = stop.send(());
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
    }

    /// Listens again on the same address, keeping what was received.
    pub async fn resume(&mut self) {
        if self.server.is_none() {
            let listener = TcpListener::bind(self.addr).await.expect("rebind sink");
            self.server = Some(serve_grpc(listener, self.handle.0.clone()));
        }
    }
}

fn serve_grpc(
    listener: TcpListener,
    state: Arc<State>,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let service = TraceServiceServer::new(GrpcSinkService(state))
        .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
        .accept_compressed(tonic::codec::CompressionEncoding::Zstd)
        .max_decoding_message_size(64 << 20);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                async {
                    let _ = stopped.await;
                },
            )
            .await;
    });
    (stop, task)
}

/// The OTLP/HTTP sink (`POST /v1/traces`, protobuf, gzip or zstd or none).
pub struct HttpSink {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it received.
    pub handle: SinkHandle,
}

impl HttpSink {
    /// Starts an HTTP sink on a free loopback port.
    pub async fn start(behavior: SinkBehavior) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind sink");
        let addr = listener.local_addr().expect("sink addr");
        let state = Arc::new(State {
            behavior,
            started: Instant::now(),
            recorded: Mutex::default(),
        });
        let accept_state = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let state = accept_state.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let state = state.clone();
                        async move {
                            Ok::<_, std::convert::Infallible>(
                                http_sink_answer(&state, request).await,
                            )
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
                });
            }
        });
        Self {
            addr,
            handle: SinkHandle(state),
        }
    }
}

async fn http_sink_answer(
    state: &State,
    request: http::Request<hyper::body::Incoming>,
) -> http::Response<Full<Bytes>> {
    let encoding = request
        .headers()
        .get("content-encoding")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let body = match encoding.as_str() {
        "gzip" => {
            use std::io::Read;
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&body[..])
                .read_to_end(&mut out)
                .expect("gzip body");
            Bytes::from(out)
        }
        "zstd" => Bytes::from(zstd::decode_all(&body[..]).expect("zstd body")),
        _ => body,
    };
    let decoded = ExportTraceServiceRequest::decode(body).expect("valid OTLP request");
    let mut response = http::Response::new(Full::new(Bytes::new()));
    if state.record(decoded) {
        response.headers_mut().insert(
            "content-type",
            http::HeaderValue::from_static("application/x-protobuf"),
        );
    } else {
        *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
        response
            .headers_mut()
            .insert("retry-after", http::HeaderValue::from_static("1"));
    }
    response
}
