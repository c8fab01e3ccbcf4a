//! Remote write through a Prometheus outage under steady metrics load, in the tailgate
//! binary with a memory limit: the series queued while Prometheus is down are charged to
//! the memory budget, the process stays within its limit, and every sample arrives once
//! Prometheus is back.

#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::support::process::{GatewayProcess, RssWatcher};
use crate::support::prometheus::Prometheus;
use crate::support::{self};

const LIMIT_MIB: u64 = 64;
/// Series per request: each request carries one point of each.
const SERIES: usize = 100;
/// One request every this long.
const TICK: Duration = Duration::from_millis(100);
const BEFORE: Duration = Duration::from_secs(5);
const OUTAGE: Duration = Duration::from_secs(30);
const AFTER: Duration = Duration::from_secs(5);
/// The least a queued series holds in memory: its `Series` struct alone (a `TimeSeries`
/// of four vectors and a point count) is over 100 bytes, before labels and samples.
const MIN_HELD_PER_SERIES: f64 = 100.0;

fn config(write_url: &str) -> String {
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
processors:
  memory_limiter:
    check_interval: 100ms
    limit_mib: {LIMIT_MIB}
  batch:
    timeout: 50ms
exporters:
  debug:
  prometheusremotewrite:
    endpoint: {write_url}
    retry_on_failure:
      initial_interval: 200ms
      max_interval: 1s
      max_elapsed_time: 0s
    remote_write_queue:
      num_consumers: 2
service:
  pipelines:
    # The memory_limiter of any pipeline is the process's budget and gates every receiver
    # (metrics pipelines take only batch).
    traces:
      receivers: [otlp]
      processors: [memory_limiter]
      exporters: [debug]
    metrics:
      receivers: [otlp]
      processors: [batch]
      exporters: [prometheusremotewrite]
  telemetry:
    metrics:
      address: 127.0.0.1:0
  shutdown_timeout: 10s
"#
    )
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
        ..Default::default()
    }
}

/// Request `i`: the cumulative counter `rwo.ticks` at value `i` on each of the `SERIES`
/// series, stamped now.
fn request(i: u64) -> ExportMetricsServiceRequest {
    let ts = now_ms() as u64 * 1_000_000;
    let points = (0..SERIES)
        .map(|s| NumberDataPoint {
            attributes: vec![kv("series", &format!("s{s:03}"))],
            start_time_unix_nano: 1,
            time_unix_nano: ts,
            value: Some(number_data_point::Value::AsDouble(i as f64)),
            ..Default::default()
        })
        .collect();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![kv("service.name", "rw-outage")],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "rwo.ticks".to_owned(),
                    data: Some(Data::Sum(Sum {
                        data_points: points,
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                        is_monotonic: true,
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Where the run stands, for the gauge sampler.
const BEFORE_OUTAGE: u8 = 0;
const DURING_OUTAGE: u8 = 1;
const RECOVERED: u8 = 2;

/// The largest budget and queue depth seen per phase.
#[derive(Debug, Default)]
struct Peaks {
    budget: [f64; 3],
    queue: [f64; 3],
}

/// Sends request `i` until it is accepted (retrying the gateway's retryable refusals, at
/// most 100 times); panics on anything else.
async fn send(
    client: &mut MetricsServiceClient<tonic::transport::Channel>,
    i: u64,
    refusals: &AtomicU64,
) {
    let mut backoff = Duration::from_millis(20);
    for _ in 0..100 {
        match client.export(request(i)).await {
            Ok(_) => return,
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::Unavailable | tonic::Code::ResourceExhausted
                ) =>
            {
                let _ = refusals.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
            Err(status) => panic!("request {i} refused: {status}"),
        }
    }
    panic!("request {i} not accepted after 100 tries");
}

/// Scenario: the tailgate binary with `memory_limiter: limit_mib: 64` and a
/// `prometheusremotewrite` exporter (two shards, retrying forever) to a real Prometheus
/// receives one request of 100 counter points every 100 ms over OTLP/gRPC: 5 s with
/// Prometheus up, 30 s with it stopped (its port held by the test, so nothing else takes
/// it), then 5 s after it restarted on the same port and data directory; then the load
/// stops and the exporter drains.
/// Guarantees: while Prometheus is down, `tailgate_memory_budget_used_bytes` rises above
/// its level before the outage to at least 100 bytes per queued series (the shard queues'
/// charge) and falls back once they are delivered; the queue depth does too; the process
/// RSS stays under 64 MiB throughout; every sample arrives: per series, PromQL
/// `count_over_time` equals the requests sent, `max_over_time` the last value, `resets` 0;
/// the gateway counts every point sent and none failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_outage_charges_queued_series_and_loses_nothing() {
    let mut prometheus = Prometheus::start().await;
    let gateway = GatewayProcess::start(&config(&prometheus.write_url()));
    let watcher = RssWatcher::start(gateway.pid());
    let metrics_url = gateway.metrics_url.clone();
    let mut client = MetricsServiceClient::connect(format!("http://{}", gateway.grpc))
        .await
        .expect("connect");

    let phase = Arc::new(AtomicU8::new(BEFORE_OUTAGE));
    let peaks = Arc::new(Mutex::new(Peaks::default()));
    let sampling = Arc::new(AtomicU8::new(1));
    let sampler = {
        let (phase, peaks, sampling, url) = (
            phase.clone(),
            peaks.clone(),
            sampling.clone(),
            metrics_url.clone(),
        );
        tokio::spawn(async move {
            // Bounded: the run takes about a minute; 2 minutes of samples at most.
            for _ in 0..480 {
                if sampling.load(Ordering::Relaxed) == 0 {
                    return;
                }
                let (_, text) = support::reqwest_get(&url).await;
                let budget = support::metric_value(&text, "tailgate_memory_budget_used_bytes", &[]);
                let queue = support::metric_value(
                    &text,
                    "otelcol_exporter_queue_size",
                    &["exporter=\"prometheusremotewrite\""],
                );
                let at = usize::from(phase.load(Ordering::Relaxed));
                let mut peaks = peaks.lock().await;
                peaks.budget[at] = peaks.budget[at].max(budget);
                peaks.queue[at] = peaks.queue[at].max(queue);
                drop(peaks);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };

    let refusals = AtomicU64::new(0);
    let mut sent: u64 = 0;
    let started = Instant::now();
    while started.elapsed() < BEFORE {
        send(&mut client, sent, &refusals).await;
        sent += 1;
        tokio::time::sleep(TICK).await;
    }
    let hold = prometheus.stop_holding_port().await;
    phase.store(DURING_OUTAGE, Ordering::Relaxed);
    let sent_before_outage = sent;
    let stopped = Instant::now();
    while stopped.elapsed() < OUTAGE {
        send(&mut client, sent, &refusals).await;
        sent += 1;
        tokio::time::sleep(TICK).await;
    }
    let queued_series = (sent - sent_before_outage) as f64 * SERIES as f64;
    let budget_during = support::metric_value(
        &support::reqwest_get(&metrics_url).await.1,
        "tailgate_memory_budget_used_bytes",
        &[],
    );
    prometheus.restart_on(hold).await;
    phase.store(RECOVERED, Ordering::Relaxed);
    let recovered = Instant::now();
    while recovered.elapsed() < AFTER {
        send(&mut client, sent, &refusals).await;
        sent += 1;
        tokio::time::sleep(TICK).await;
    }
    let points = (sent * SERIES as u64) as f64;

    // The exporter drains: every point counted as sent and the queue empty.
    let drained = support::eventually(Duration::from_secs(60), || {
        let url = metrics_url.clone();
        async move {
            let (_, text) = support::reqwest_get(&url).await;
            let exporter = ["exporter=\"prometheusremotewrite\""];
            support::metric_value(
                &text,
                "otelcol_exporter_sent_metric_points_total",
                &exporter,
            ) == points
                && support::metric_value(&text, "otelcol_exporter_queue_size", &exporter) == 0.0
        }
    })
    .await;
    let (_, text) = support::reqwest_get(&metrics_url).await;
    sampling.store(0, Ordering::Relaxed);
    let _ = sampler.await;
    let peak_mib = watcher.stop();
    let value = |name: &str, labels: &[&str]| support::metric_value(&text, name, labels);
    let peaks = peaks.lock().await;
    let report = format!(
        "sent {sent} requests ({points} points), refusals {}; peak RSS {peak_mib:.1} MiB; \
         budget peaks {:?} (at the end of the outage {budget_during}), queue peaks {:?}; \
         budget now {}; sent points {}; failed {}; retries {}",
        refusals.load(Ordering::Relaxed),
        peaks.budget,
        peaks.queue,
        value("tailgate_memory_budget_used_bytes", &[]),
        value("otelcol_exporter_sent_metric_points_total", &[]),
        value("otelcol_exporter_send_failed_metric_points_total", &[]),
        value("tailgate_exporter_retries_total", &[]),
    );
    eprintln!("rw_outage: {report}");
    assert!(
        drained,
        "the exporter drained after recovery: {report}\n{}",
        prometheus.log()
    );

    // The budget carried the queued series while Prometheus was down, and let them go.
    assert!(
        budget_during >= queued_series * MIN_HELD_PER_SERIES,
        "the budget includes the {queued_series} queued series: {report}"
    );
    assert!(
        peaks.budget[usize::from(DURING_OUTAGE)] > peaks.budget[usize::from(BEFORE_OUTAGE)],
        "{report}"
    );
    assert!(peaks.queue[usize::from(DURING_OUTAGE)] > 0.0, "{report}");
    assert!(
        value("tailgate_memory_budget_used_bytes", &[]) < budget_during / 100.0,
        "the budget falls back once the series are delivered: {report}"
    );
    assert!(
        peak_mib < LIMIT_MIB as f64,
        "RSS stayed under limit_mib: {report}"
    );
    assert_eq!(
        value("otelcol_exporter_send_failed_metric_points_total", &[]),
        0.0,
        "{report}"
    );
    assert!(
        value(
            "tailgate_exporter_retries_total",
            &["exporter=\"prometheusremotewrite\""]
        ) > 0.0,
        "{report}"
    );

    // Every sample is in Prometheus, once and in order.
    let last = (sent - 1) as f64;
    let at = Some(now_ms() as f64 / 1000.0);
    let per_series = |promql: &'static str| {
        let prometheus = &prometheus;
        async move {
            let mut result = prometheus.query(promql, at).await;
            result.sort_by(|a, b| a.0.get("series").cmp(&b.0.get("series")));
            result.into_iter().map(|(_, v)| v).collect::<Vec<f64>>()
        }
    };
    assert_eq!(
        per_series("count_over_time(rwo_ticks_total[10m])").await,
        vec![sent as f64; SERIES],
        "{report}"
    );
    assert_eq!(
        per_series("max_over_time(rwo_ticks_total[10m])").await,
        vec![last; SERIES],
        "{report}"
    );
    assert_eq!(
        per_series("min_over_time(rwo_ticks_total[10m])").await,
        vec![0.0; SERIES],
        "{report}"
    );
    assert_eq!(
        per_series("resets(rwo_ticks_total[10m])").await,
        vec![0.0; SERIES],
        "{report}"
    );

    gateway.sigterm();
    let (status, _lines) = gateway.wait(Duration::from_secs(20)).await;
    assert!(status.is_some(), "tailgate exits after SIGTERM");
}
