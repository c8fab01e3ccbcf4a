//! Self-telemetry: the Collector's metric names on /metrics, and the health endpoint's
//! answers through the gateway's life.

use std::time::Duration;

use crate::support::process::GatewayProcess;
use crate::support::{self, OtlpSink, SinkBehavior};

/// Scenario: a gateway serving traffic is scraped.
/// Guarantees: every metric family the dashboards and alerts rely on is exposed under the
/// Collector's name, with bounded labels (receiver, transport, exporter, processor).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exposes_collector_metric_names() {
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let gateway = support::start_gateway(&support::gateway_config(sink.addr, "")).await;
    let metrics = support::scrape(&gateway).await;
    for family in [
        "otelcol_receiver_accepted_spans_total",
        "otelcol_receiver_refused_spans_total",
        "otelcol_exporter_sent_spans_total",
        "otelcol_exporter_send_failed_spans_total",
        "otelcol_exporter_enqueue_failed_spans_total",
        "otelcol_exporter_queue_size",
        "otelcol_exporter_queue_capacity",
        "otelcol_process_memory_rss",
        "otelcol_process_cpu_seconds_total",
        "otelcol_process_uptime_total",
        "tailgate_build_info",
        "tailgate_exporter_retries_total",
    ] {
        assert!(
            metrics.contains(&format!("# TYPE {family} ")),
            "{family} missing from /metrics:\n{metrics}"
        );
    }
    assert_eq!(
        support::metric_value(
            &metrics,
            "otelcol_exporter_queue_capacity",
            &["exporter=\"otlp/sink\""]
        ),
        1000.0,
        "the Collector's default queue_size"
    );
    assert!(support::metric_value(&metrics, "otelcol_process_memory_rss", &[]) > 0.0);
    gateway.shutdown().await;
}

/// Scenario: the tailgate binary (with its allocator) is scraped.
/// Guarantees: it exposes its allocator's statistics as gauges under the Collector's
/// names for the Go runtime's heap (`HeapAlloc`, `Sys`) and as
/// `tailgate_allocator_dirty_bytes`: bytes allocated (positive), resident bytes covering
/// them, kept freed pages among the resident ones; and the heap below the RSS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_exposes_its_allocators_statistics() {
    let gateway = GatewayProcess::start(
        "
receivers:
  otlp:
    protocols:
      grpc: {endpoint: 127.0.0.1:0}
exporters:
  debug: {}
service:
  pipelines:
    traces: {receivers: [otlp], exporters: [debug]}
  telemetry:
    metrics: {address: 127.0.0.1:0}
",
    );
    let (status, metrics) = support::reqwest_get(&gateway.metrics_url).await;
    assert_eq!(status, 200);
    for family in [
        "otelcol_process_runtime_heap_alloc_bytes",
        "otelcol_process_runtime_total_sys_memory_bytes",
        "tailgate_allocator_dirty_bytes",
    ] {
        assert!(
            metrics.contains(&format!("# TYPE {family} gauge")),
            "{family} missing from /metrics:\n{metrics}"
        );
    }
    let heap = support::metric_value(&metrics, "otelcol_process_runtime_heap_alloc_bytes", &[]);
    let resident = support::metric_value(
        &metrics,
        "otelcol_process_runtime_total_sys_memory_bytes",
        &[],
    );
    let dirty = support::metric_value(&metrics, "tailgate_allocator_dirty_bytes", &[]);
    let rss = support::metric_value(&metrics, "otelcol_process_memory_rss", &[]);
    assert!(heap > 0.0, "allocated {heap}");
    assert!(resident >= heap, "resident {resident} < allocated {heap}");
    assert!(dirty <= resident, "dirty {dirty} > resident {resident}");
    assert!(heap < rss, "allocated {heap} >= RSS {rss}");
    gateway.sigterm();
    let (exit, _log) = gateway.wait(Duration::from_secs(10)).await;
    assert!(exit.is_some_and(|status| status.success()), "{exit:?}");
}

/// Scenario: the health endpoint is polled while the gateway serves, then while it drains
/// a queue towards a sink that is down.
/// Guarantees: 200 while serving; 503 while draining (so Kubernetes stops routing to it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reports_serving_then_draining() {
    let sink = OtlpSink::start(SinkBehavior::RefuseFor(Duration::from_secs(3600))).await;
    let config = support::gateway_config(
        sink.addr,
        "    retry_on_failure:\n      initial_interval: 50ms\n",
    );
    let gateway = support::start_gateway(&config).await;
    let health_url = format!(
        "http://{}/",
        gateway.addresses.health.expect("health enabled")
    );
    let (status, body) = support::reqwest_get(&health_url).await;
    assert_eq!(status, 200);
    assert!(body.contains("Server available"), "{body}");

    // Queue one span for the dead sink, so the drain has something to wait for.
    let url = format!("http://{}/v1/traces", support::http_addr(&gateway));
    let request = serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "eee19b7ec3c1b174",
        "name": "held"
    }]}]}]});
    let posted = tokio::task::spawn_blocking(move || {
        reqwest::blocking::Client::new()
            .post(&url)
            .header("content-type", "application/json")
            .body(request.to_string())
            .send()
            .expect("POST")
            .status()
            .as_u16()
    })
    .await
    .expect("POST task");
    assert_eq!(posted, 200);

    let health = gateway.health.clone();
    let drain = tokio::spawn(gateway.shutdown_within(Duration::from_secs(3)));
    let draining = support::eventually(Duration::from_secs(2), || {
        let url = health_url.clone();
        async move { support::reqwest_get(&url).await.0 == 503 }
    })
    .await;
    assert!(draining, "health answers 503 while draining");
    assert_eq!(health.get(), tailgate::telemetry::HealthState::Draining);
    let report = drain.await.expect("drain task");
    assert_eq!(
        report.dropped_spans, 1,
        "the undeliverable span is counted, not lost silently"
    );
}

/// Scenario: a gateway running every component of the deployed pipelines is scraped: the
/// one-tier layout of `deploy/base/config/one-tier.yaml` (a `loadbalancing` exporter whose
/// only backend is this gateway's own `otlp/peers` receiver, feeding tail sampling with
/// `hand_off`), span metrics, batch and exporters, one of them with a persistent queue.
/// Guarantees: every metric family that the alert rules and the dashboard use
/// (`deploy/monitoring/metrics.txt`) is exposed, with the type listed there, so the
/// monitoring in `deploy/` cannot silently drift from the binary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exposes_every_metric_the_monitoring_uses() {
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let queue = tempfile::tempdir().expect("queue directory");
    // The ring names the peers' receiver by address, so its port is chosen here.
    let peers = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port");
    let config = format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc: {{endpoint: 127.0.0.1:0}}
  otlp/peers:
    protocols:
      grpc: {{endpoint: "{peers}"}}
processors:
  memory_limiter: {{check_interval: 1s, limit_mib: 512}}
  tail_sampling:
    hand_off: {{exporter: loadbalancing}}
    policies: [{{name: errors, type: status_code, status_code: {{status_codes: [ERROR]}}}}]
  batch: {{}}
exporters:
  otlp/sink: {{endpoint: "{sink}", tls: {{insecure: true}}, sending_queue: {{storage: file_storage/queue}}}}
  loadbalancing:
    routing_key: traceID
    protocol: {{otlp: {{tls: {{insecure: true}}}}}}
    resolver: {{static: {{hostnames: ["{peers}"]}}}}
connectors:
  spanmetrics: {{}}
extensions:
  file_storage/queue: {{directory: "{queue}"}}
service:
  extensions: [file_storage/queue]
  pipelines:
    traces/metrics: {{receivers: [otlp], processors: [memory_limiter], exporters: [spanmetrics]}}
    traces/route: {{receivers: [otlp], processors: [memory_limiter], exporters: [loadbalancing]}}
    traces/sample: {{receivers: [otlp/peers], processors: [memory_limiter, tail_sampling, batch], exporters: [otlp/sink]}}
    metrics: {{receivers: [spanmetrics], processors: [batch], exporters: [otlp/sink]}}
  telemetry:
    metrics: {{address: 127.0.0.1:0}}
"#,
        sink = sink.addr,
        queue = queue.path().display(),
    );
    let gateway = support::start_gateway(&config).await;
    let metrics = support::scrape(&gateway).await;
    let listed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/monitoring/metrics.txt"
    ))
    .expect("deploy/monitoring/metrics.txt");
    let mut checked = 0;
    for line in listed
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
    {
        let mut fields = line.split_whitespace();
        let (Some(name), Some(kind)) = (fields.next(), fields.next()) else {
            panic!("malformed line in metrics.txt: {line}");
        };
        assert!(
            metrics.contains(&format!("# TYPE {name} {kind}\n")),
            "{name} ({kind}) is used by deploy/monitoring but not exposed"
        );
        checked += 1;
    }
    assert!(
        checked >= 30,
        "metrics.txt lists the monitored families ({checked})"
    );
    gateway.shutdown().await;
}
