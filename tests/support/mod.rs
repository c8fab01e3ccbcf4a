//! Shared helpers: an in-process gateway, OTLP sinks built from the official protos, and
//! metric scraping.

#![allow(dead_code)]

pub mod dns;
pub mod fuzz_checks;
pub mod k8s_api;
pub mod metrics_sink;
pub mod process;
pub mod prometheus;
pub mod replicas;
pub mod sink;

use std::net::SocketAddr;
use std::time::Duration;

use tailgate::service::Gateway;

pub use metrics_sink::MetricsSink;
pub use sink::{HttpSink, OtlpSink, SinkBehavior};

/// A gateway config whose ports are all chosen by the OS on loopback, exporting over
/// OTLP/gRPC to `sink`, with `extra_exporter_yaml` merged into the exporter's settings.
pub fn gateway_config(sink: SocketAddr, exporter_settings: &str) -> String {
    gateway_config_with("otlp/sink", &sink.to_string(), exporter_settings)
}

/// Like [`gateway_config`], with the exporter's id and endpoint given.
pub fn gateway_config_with(exporter: &str, endpoint: &str, exporter_settings: &str) -> String {
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
      http:
        endpoint: 127.0.0.1:0
processors:
  batch:
    send_batch_size: 512
    timeout: 50ms
exporters:
  {exporter}:
    endpoint: {endpoint}
    tls:
      insecure: true
{exporter_settings}
extensions:
  health_check:
    endpoint: 127.0.0.1:0
service:
  extensions: [health_check]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [{exporter}]
  telemetry:
    metrics:
      address: 127.0.0.1:0
"#
    )
}

/// Starts a gateway in this process from `yaml`.
pub async fn start_gateway(yaml: &str) -> Gateway {
    let config = tailgate::config::load_str(&[yaml]).expect("test config is valid");
    Gateway::start(config).await.expect("gateway starts")
}

/// The OTLP/gRPC address of the `otlp` receiver.
pub fn grpc_addr(gateway: &Gateway) -> SocketAddr {
    gateway.addresses.grpc["otlp"]
}

/// The OTLP/HTTP address of the `otlp` receiver.
pub fn http_addr(gateway: &Gateway) -> SocketAddr {
    gateway.addresses.http["otlp"]
}

/// Scrapes `/metrics` over HTTP and returns the text.
pub async fn scrape(gateway: &Gateway) -> String {
    let address = gateway.addresses.metrics.expect("metrics enabled");
    let response = reqwest_get(&format!("http://{address}/metrics")).await;
    assert_eq!(response.0, 200);
    response.1
}

/// The value of the sample `name{labels}` in a Prometheus text exposition, where
/// `labels` is a list of `key="value"` pairs that must all be present. Sums matching
/// series. Zero when absent.
pub fn metric_value(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let series_name = series.split('{').next()?;
            if series_name != name {
                return None;
            }
            if !labels.iter().all(|label| series.contains(label)) {
                return None;
            }
            value.parse::<f64>().ok()
        })
        .sum()
}

/// A GET over a fresh connection: (status, body).
pub async fn reqwest_get(url: &str) -> (u16, String) {
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || {
        let response = reqwest::blocking::get(&url).expect("GET succeeds");
        let status = response.status().as_u16();
        (status, response.text().unwrap_or_default())
    })
    .await
    .expect("GET task")
}

/// Polls `check` every 20ms until it holds or `limit` passes; returns whether it held.
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
