//! An OTLP metrics sink standing in for Prometheus' OTLP endpoint: the tonic
//! `MetricsService` from the official protos, recording every request that arrives.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::Metric;
use opentelemetry_proto::tonic::resource::v1::Resource;
use tokio::net::TcpListener;

/// One metric as received, with the resource and scope it arrived under.
#[derive(Clone, Debug)]
pub struct ReceivedMetric {
    /// The resource.
    pub resource: Resource,
    /// The instrumentation scope.
    pub scope: InstrumentationScope,
    /// The metric with its data points.
    pub metric: Metric,
}

struct Service(Arc<Mutex<Vec<ReceivedMetric>>>);

#[tonic::async_trait]
impl MetricsService for Service {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let mut recorded = self.0.lock().expect("sink lock");
        for rm in request.into_inner().resource_metrics {
            let resource = rm.resource.unwrap_or_default();
            for sm in rm.scope_metrics {
                let scope = sm.scope.unwrap_or_default();
                for metric in sm.metrics {
                    recorded.push(ReceivedMetric {
                        resource: resource.clone(),
                        scope: scope.clone(),
                        metric,
                    });
                }
            }
        }
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// The gRPC metrics sink.
pub struct MetricsSink {
    /// Where it listens.
    pub addr: SocketAddr,
    received: Arc<Mutex<Vec<ReceivedMetric>>>,
}

impl MetricsSink {
    /// Starts a sink on a free loopback port.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind sink");
        let addr = listener.local_addr().expect("sink addr");
        let received = Arc::new(Mutex::new(Vec::new()));
        let service = MetricsServiceServer::new(Service(received.clone()))
            .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
            .accept_compressed(tonic::codec::CompressionEncoding::Zstd)
            .max_decoding_message_size(64 << 20);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        Self { addr, received }
    }

    /// Every metric received so far, in arrival order.
    pub fn metrics(&self) -> Vec<ReceivedMetric> {
        self.received.lock().expect("sink lock").clone()
    }

    /// Data points received so far.
    pub fn data_points(&self) -> usize {
        self.metrics()
            .iter()
            .map(|m| tailgate::otlp::metric_points(&m.metric))
            .sum()
    }
}

/// The string value of attribute `key`.
pub fn str_attr<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    match attributes
        .iter()
        .find(|kv| kv.key == key)?
        .value
        .as_ref()?
        .value
        .as_ref()?
    {
        Value::StringValue(s) => Some(s),
        _ => None,
    }
}
