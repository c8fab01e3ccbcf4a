//! Several gateways on one port over distinct loopback addresses (127.0.0.2, 127.0.0.3, ...),
//! as the pods behind a headless Service: the sampling tier of the load-balancing tests.

use std::net::{SocketAddr, TcpListener};

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

use tailgate::service::Gateway;

/// The config of a sampling replica: OTLP/gRPC on `listen`, then the processors
/// `tail_sampling` (its settings as the YAML mapping `tail_sampling`, indented by four
/// spaces) and `batch`, exporting to the OTLP sink at `sink`.
pub fn sampler_config(listen: SocketAddr, sink: SocketAddr, tail_sampling: &str) -> String {
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: {listen}
processors:
  tail_sampling:
{tail_sampling}
  batch:
    send_batch_size: 512
    timeout: 50ms
exporters:
  otlp/sink:
    endpoint: {sink}
    tls:
      insecure: true
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [tail_sampling, batch]
      exporters: [otlp/sink]
  telemetry:
    metrics:
      address: 127.0.0.1:0
"#
    )
}

/// Starts one gateway per address of `ips`, all listening on one port chosen free on the
/// first address, with the config `config(listen address, index in ips)`. A port taken
/// meanwhile on another address is retried, at most 5 times.
///
/// # Panics
///
/// When a config does not load, or no port was free on every address in 5 tries.
pub async fn start_on_one_port(
    ips: &[&str],
    config: impl Fn(SocketAddr, usize) -> String,
) -> (Vec<Gateway>, u16) {
    for _ in 0..5 {
        let port = TcpListener::bind(format!("{}:0", ips[0]))
            .expect("a loopback address")
            .local_addr()
            .expect("bound")
            .port();
        let mut gateways = Vec::new();
        for (index, ip) in ips.iter().enumerate() {
            let listen: SocketAddr = format!("{ip}:{port}").parse().expect("address");
            let config = tailgate::config::load_str(&[&config(listen, index)])
                .expect("replica config is valid");
            match Gateway::start(config).await {
                Ok(gateway) => gateways.push(gateway),
                Err(_) => break,
            }
        }
        if gateways.len() == ips.len() {
            return (gateways, port);
        }
        for gateway in gateways {
            let _ = gateway.shutdown().await;
        }
    }
    panic!("no port free on all of {ips:?}");
}

/// The `loadbalancing` exporter (as an entry of `exporters:`, indented by two spaces) that
/// resolves `hostname` every 200ms through the DNS server at `nameserver`, routing by trace
/// id to port `port` of each address, retrying a refused hand-over after 100ms.
pub fn dns_loadbalancing(hostname: &str, port: u16, nameserver: SocketAddr) -> String {
    format!(
        r#"  loadbalancing:
    routing_key: traceID
    protocol:
      otlp:
        tls:
          insecure: true
        retry_on_failure:
          initial_interval: 100ms
    resolver:
      dns:
        hostname: {hostname}
        port: {port}
        interval: 200ms
        timeout: 1s
        nameserver: '{nameserver}'
"#
    )
}

/// Posts `request` as OTLP/HTTP protobuf to `http` (a receiver's HTTP address).
///
/// # Panics
///
/// When the request cannot be sent or is not answered 200.
pub async fn export_http(http: SocketAddr, request: &ExportTraceServiceRequest) {
    let url = format!("http://{http}/v1/traces");
    let body = Bytes::from(request.encode_to_vec());
    let status = tokio::task::spawn_blocking(move || {
        // A blocking client must live and die off the async workers.
        reqwest::blocking::Client::new()
            .post(&url)
            .header("content-type", "application/x-protobuf")
            .body(body)
            .send()
            .expect("HTTP export sent")
            .status()
            .as_u16()
    })
    .await
    .expect("HTTP task");
    assert_eq!(status, 200, "HTTP export accepted");
}
