//! The OpenTelemetry Rust SDK sends metrics through tailgate over gRPC and HTTP; every data
//! point must arrive at the OTLP metrics sink with its name, attributes, resource and
//! value. Bad metrics input is refused with 400 and counted.

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};

use crate::support::metrics_sink::str_attr;
use crate::support::{self, MetricsSink};

/// A gateway with one metrics pipeline `otlp -> batch -> otlp/sink`.
fn metrics_config(sink: std::net::SocketAddr) -> String {
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
    timeout: 50ms
exporters:
  otlp/sink:
    endpoint: {sink}
    tls:
      insecure: true
service:
  pipelines:
    metrics:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlp/sink]
  telemetry:
    metrics:
      address: 127.0.0.1:0
"#
    )
}

#[derive(Clone, Copy, Debug)]
enum Wire {
    Grpc,
    HttpProtobuf,
}

/// Records a counter, an up-down counter, a gauge and a histogram, each on two series,
/// and exports them once (at shutdown).
fn send_with_sdk(wire: Wire, endpoint: String) {
    let exporter = match wire {
        Wire::Grpc => opentelemetry_otlp::MetricExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .build(),
        Wire::HttpProtobuf => opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(endpoint)
            .build(),
    }
    .expect("exporter builds");
    let reader = PeriodicReader::builder(exporter)
        .with_interval(Duration::from_secs(3600))
        .build();
    let provider = SdkMeterProvider::builder()
        .with_reader(reader)
        .with_resource(
            Resource::builder_empty()
                .with_service_name("e2e-metrics")
                .with_attribute(KeyValue::new("k8s.namespace.name", "operators"))
                .build(),
        )
        .build();
    let meter = provider.meter("e2e-meter");
    let counter = meter.u64_counter("reconciles").build();
    let up_down = meter.i64_up_down_counter("queue_depth").build();
    let gauge = meter.f64_gauge("temperature").with_unit("Cel").build();
    let histogram = meter
        .f64_histogram("latency")
        .with_unit("ms")
        .with_boundaries(vec![10.0, 100.0])
        .build();
    for route in ["a", "b"] {
        let attrs = [KeyValue::new("route", route)];
        let n = if route == "a" { 3 } else { 5 };
        for _ in 0..n {
            counter.add(2, &attrs);
            up_down.add(-1, &attrs);
            histogram.record(42.0, &attrs);
        }
        up_down.add(10, &attrs);
        gauge.record(if route == "a" { 21.5 } else { -3.25 }, &attrs);
    }
    provider.shutdown().expect("SDK shutdown exports");
}

async fn run(wire: Wire) {
    let sink = MetricsSink::start().await;
    let gateway = support::start_gateway(&metrics_config(sink.addr)).await;
    let endpoint = match wire {
        Wire::Grpc => format!("http://{}", support::grpc_addr(&gateway)),
        Wire::HttpProtobuf => format!("http://{}/v1/metrics", support::http_addr(&gateway)),
    };
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let _guard = handle.enter();
        send_with_sdk(wire, endpoint)
    })
    .await
    .expect("SDK thread");

    let arrived = support::eventually(Duration::from_secs(20), || {
        let points = sink.data_points();
        async move { points >= 8 }
    })
    .await;
    // The exporter counts a point as sent once the sink has answered.
    let mut scraped = String::new();
    for _ in 0..100 {
        scraped = support::scrape(&gateway).await;
        let sent = support::metric_value(
            &scraped,
            "otelcol_exporter_sent_metric_points_total",
            &["exporter=\"otlp/sink\""],
        );
        if sent >= 8.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let report = gateway.shutdown().await;
    assert!(arrived, "only {} of 8 points arrived", sink.data_points());
    assert_eq!(report.dropped_metric_points, 0);
    let received = sink.metrics();
    assert_eq!(sink.data_points(), 8, "every point arrives exactly once");

    for got in &received {
        assert_eq!(
            str_attr(&got.resource.attributes, "service.name"),
            Some("e2e-metrics")
        );
        assert_eq!(
            str_attr(&got.resource.attributes, "k8s.namespace.name"),
            Some("operators")
        );
        assert_eq!(got.scope.name, "e2e-meter");
    }
    let find = |name: &str| {
        received
            .iter()
            .find(|m| m.metric.name == name)
            .unwrap_or_else(|| panic!("{name} arrived"))
            .metric
            .clone()
    };
    let int = |v: &Option<number_data_point::Value>| match v {
        Some(number_data_point::Value::AsInt(i)) => *i as f64,
        Some(number_data_point::Value::AsDouble(d)) => *d,
        None => f64::NAN,
    };
    let Some(metric::Data::Sum(reconciles)) = find("reconciles").data else {
        panic!("the counter is a Sum");
    };
    assert!(reconciles.is_monotonic);
    for point in &reconciles.data_points {
        let want = match str_attr(&point.attributes, "route") {
            Some("a") => 6.0,
            Some("b") => 10.0,
            other => panic!("unexpected route {other:?}"),
        };
        assert_eq!(int(&point.value), want);
    }
    let Some(metric::Data::Sum(depth)) = find("queue_depth").data else {
        panic!("the up-down counter is a Sum");
    };
    assert!(!depth.is_monotonic);
    for point in &depth.data_points {
        let want = match str_attr(&point.attributes, "route") {
            Some("a") => 7.0,
            _ => 5.0,
        };
        assert_eq!(int(&point.value), want);
    }
    let temperature = find("temperature");
    assert_eq!(temperature.unit, "Cel");
    let Some(metric::Data::Gauge(gauge)) = temperature.data else {
        panic!("the gauge is a Gauge");
    };
    for point in &gauge.data_points {
        let want = match str_attr(&point.attributes, "route") {
            Some("a") => 21.5,
            _ => -3.25,
        };
        assert_eq!(int(&point.value), want);
    }
    let Some(metric::Data::Histogram(latency)) = find("latency").data else {
        panic!("the histogram is a Histogram");
    };
    for point in &latency.data_points {
        let n = match str_attr(&point.attributes, "route") {
            Some("a") => 3,
            _ => 5,
        };
        assert_eq!(point.count, n);
        assert_eq!(point.sum, Some(42.0 * n as f64));
        assert_eq!(point.explicit_bounds, vec![10.0, 100.0]);
        assert_eq!(point.bucket_counts, vec![0, n, 0]);
    }
    let transport = match wire {
        Wire::Grpc => "transport=\"grpc\"",
        Wire::HttpProtobuf => "transport=\"http\"",
    };
    assert_eq!(
        support::metric_value(
            &scraped,
            "otelcol_receiver_accepted_metric_points_total",
            &[transport]
        ),
        8.0
    );
    assert_eq!(
        support::metric_value(
            &scraped,
            "otelcol_exporter_sent_metric_points_total",
            &["exporter=\"otlp/sink\""]
        ),
        8.0
    );
}

/// Scenario: the SDK records a counter, an up-down counter, a gauge and a histogram on two
/// series each and exports over OTLP/gRPC.
/// Guarantees: all 8 points arrive at the metrics sink once, with names, units,
/// attributes, resource, scope and values equal; receiver and exporter count 8 points.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_metrics_over_grpc_arrive_whole() {
    run(Wire::Grpc).await;
}

/// Scenario: the same metrics over OTLP/HTTP with protobuf bodies.
/// Guarantees: as over gRPC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_metrics_over_http_arrive_whole() {
    run(Wire::HttpProtobuf).await;
}

/// POSTs `body` to the metrics path with `content_type`; returns the status.
async fn post(url: String, content_type: &'static str, body: Vec<u8>) -> u16 {
    tokio::task::spawn_blocking(move || {
        reqwest::blocking::Client::new()
            .post(&url)
            .header("content-type", content_type)
            .body(body)
            .send()
            .expect("POST succeeds")
            .status()
            .as_u16()
    })
    .await
    .expect("POST task")
}

/// Scenario: a truncated protobuf body and a body that is not JSON are posted to
/// /v1/metrics, then a valid OTLP/JSON request with a hex exemplar id and enum names.
/// Guarantees: the bad bodies are refused with 400 and counted as malformed metrics
/// refusals; the JSON request is accepted (200) and its point counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_metrics_input_is_refused_and_counted() {
    let sink = MetricsSink::start().await;
    let gateway = support::start_gateway(&metrics_config(sink.addr)).await;
    let url = format!("http://{}/v1/metrics", support::http_addr(&gateway));
    // A ResourceMetrics field whose declared length runs past the end.
    let truncated = vec![0x0a, 0x20, 0x0a, 0x05];
    assert_eq!(
        post(url.clone(), "application/x-protobuf", truncated).await,
        400
    );
    assert_eq!(
        post(
            url.clone(),
            "application/json",
            b"{\"resourceMetrics\": [".to_vec()
        )
        .await,
        400
    );
    let json = br#"{"resourceMetrics":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"j"}}]},
        "scopeMetrics":[{"metrics":[{"name":"hits","sum":{"aggregationTemporality":"AGGREGATION_TEMPORALITY_CUMULATIVE","isMonotonic":true,
        "dataPoints":[{"asInt":"7","timeUnixNano":"1700000000000000000","exemplars":[{"asInt":"1","traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708"}]}]}}]}]}]}"#;
    assert_eq!(post(url, "application/json", json.to_vec()).await, 200);
    let scraped = support::scrape(&gateway).await;
    assert_eq!(
        support::metric_value(
            &scraped,
            "tailgate_receiver_refused_requests_total",
            &["signal=\"metrics\"", "reason=\"malformed\""]
        ),
        2.0
    );
    assert_eq!(
        support::metric_value(
            &scraped,
            "otelcol_receiver_accepted_metric_points_total",
            &["transport=\"http\""]
        ),
        1.0
    );
    gateway.shutdown().await;
    let hits = sink
        .metrics()
        .into_iter()
        .find(|m| m.metric.name == "hits")
        .expect("the JSON metric arrives");
    let Some(metric::Data::Sum(sum)) = hits.metric.data else {
        panic!("a Sum");
    };
    assert_eq!(sum.data_points[0].exemplars[0].trace_id.len(), 16);
}
