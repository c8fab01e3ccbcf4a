//! The `prometheusremotewrite` exporter: the remote-write compliance cases (prometheus/
//! compliance `remote_write_sender`) against a receiver built from the official protos, and
//! end to end against a real Prometheus server (the 30 s outage is in `rw_outage.rs`); and remote write
//! 2.0 (`protobuf_message: io.prometheus.write.v2.Request`): its encoding, partial writes and
//! the fallback to 1.0, against the mock receiver and Prometheus 2.42.

#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Exemplar, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge,
    Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    Summary, SummaryDataPoint, exemplar, exponential_histogram_data_point::Buckets, metric::Data,
    number_data_point, summary_data_point::ValueAtQuantile,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prometheus::{Encoder, Registry, TextEncoder};
use prost::Message;
use tailgate::config::{ComponentId, ExporterConfig, RemoteWriteConfig};
use tailgate::exporter::ExporterMetricFamilies;
use tailgate::exporter::remote_write::prompb::TimeSeries;
use tailgate::exporter::remote_write::{RemoteWriteExporter, RemoteWriteMetricFamilies};
use tailgate::payload::MetricsBatch;
use tokio::time::Instant;

use crate::support::metric_value;
use crate::support::prometheus::{Answer, Prometheus, Received, RwReceiver, V2Support, v2_labels};

const CUMULATIVE: i32 = AggregationTemporality::Cumulative as i32;
const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

// === helpers ===

/// The exporter's config from YAML settings under `exporters.prometheusremotewrite`.
fn config(endpoint: &str, settings: &str) -> RemoteWriteConfig {
    let yaml = format!(
        "
receivers:
  otlp:
    protocols:
      grpc:
exporters:
  debug:
  prometheusremotewrite:
    endpoint: {endpoint}
{settings}
service:
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [debug]
"
    );
    let config = tailgate::config::load_str(&[&yaml]).expect("test config is valid");
    config
        .exporters
        .into_values()
        .find_map(|e| match e {
            ExporterConfig::PrometheusRemoteWrite(rw) => Some(rw),
            _ => None,
        })
        .expect("remote-write exporter")
}

struct Harness {
    exporter: RemoteWriteExporter,
    registry: Registry,
}

impl Harness {
    fn start(endpoint: &str, settings: &str) -> Self {
        let registry = Registry::new();
        let families = ExporterMetricFamilies::register(&registry).unwrap();
        let rw = RemoteWriteMetricFamilies::register(&registry, &families).unwrap();
        let id = ComponentId {
            written: "prometheusremotewrite".to_owned(),
            kind: "prometheusremotewrite".to_owned(),
            name: None,
        };
        let exporter =
            RemoteWriteExporter::start(&id, &config(endpoint, settings), rw.for_exporter(&id))
                .unwrap();
        Self { exporter, registry }
    }

    async fn export(&self, request: &ExportMetricsServiceRequest) {
        let points = count_points(request);
        self.exporter
            .export(MetricsBatch::new(request.encode_to_vec().into(), points))
            .await
            .expect("export accepted");
    }

    /// Waits (at most [`WAIT`]) until `points` data points are accounted for: sent or
    /// counted as failed. Then nothing is in flight or queued, so no further request (a
    /// retry included) can follow.
    async fn settled(&self, points: f64) -> bool {
        let deadline = Instant::now() + WAIT;
        loop {
            let settled = self.metric("otelcol_exporter_sent_metric_points_total", &[])
                + self.metric("otelcol_exporter_send_failed_metric_points_total", &[]);
            if settled == points {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn metric(&self, name: &str, labels: &[&str]) -> f64 {
        let mut text = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut text)
            .unwrap();
        metric_value(&String::from_utf8(text).unwrap(), name, labels)
    }
}

fn count_points(request: &ExportMetricsServiceRequest) -> usize {
    request
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .map(|m| match &m.data {
            Some(Data::Gauge(g)) => g.data_points.len(),
            Some(Data::Sum(s)) => s.data_points.len(),
            Some(Data::Histogram(h)) => h.data_points.len(),
            Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
            Some(Data::Summary(s)) => s.data_points.len(),
            None => 0,
        })
        .sum()
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
        ..KeyValue::default()
    }
}

/// The resource of the compliance suite's scrape target: job `test`, an instance
/// `127.0.0.1:<port>`, and one more attribute (so that `target_info` is emitted).
fn resource() -> Vec<KeyValue> {
    vec![
        kv("service.name", "test"),
        kv("service.instance.id", "127.0.0.1:9999"),
        kv("host.name", "node-1"),
    ]
}

fn request(metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
    request_with(resource(), metrics)
}

fn request_with(resource: Vec<KeyValue>, metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: resource,
                ..Resource::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "compliance".to_owned(),
                    ..InstrumentationScope::default()
                }),
                metrics,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

fn metric(name: &str, data: Data) -> Metric {
    Metric {
        name: name.to_owned(),
        data: Some(data),
        ..Metric::default()
    }
}

fn number(ms: i64, value: f64, attributes: Vec<KeyValue>) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        time_unix_nano: ms as u64 * 1_000_000,
        value: Some(number_data_point::Value::AsDouble(value)),
        ..NumberDataPoint::default()
    }
}

fn gauge(points: Vec<NumberDataPoint>) -> Data {
    Data::Gauge(Gauge {
        data_points: points,
    })
}

fn counter(points: Vec<NumberDataPoint>) -> Data {
    Data::Sum(Sum {
        data_points: points,
        aggregation_temporality: CUMULATIVE,
        is_monotonic: true,
    })
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn label<'a>(series: &'a TimeSeries, name: &str) -> Option<&'a str> {
    series
        .labels
        .iter()
        .find(|l| l.name == name)
        .map(|l| l.value.as_str())
}

/// `name{k="v",...}` with labels in their sent order (excluding `__name__`).
fn key(series: &TimeSeries) -> String {
    let labels: Vec<String> = series
        .labels
        .iter()
        .filter(|l| l.name != "__name__")
        .map(|l| format!("{}={:?}", l.name, l.value))
        .collect();
    format!(
        "{}{{{}}}",
        label(series, "__name__").unwrap_or(""),
        labels.join(",")
    )
}

/// (timestamp, value) of every accepted sample of the series whose name is `name` and that
/// has all `labels`, in arrival order.
fn samples(receiver: &RwReceiver, name: &str, labels: &[(&str, &str)]) -> Vec<(i64, f64)> {
    receiver
        .accepted_series()
        .iter()
        .filter(|s| label(s, "__name__") == Some(name))
        .filter(|s| labels.iter().all(|(k, v)| label(s, k) == Some(*v)))
        .flat_map(|s| s.samples.iter().map(|p| (p.timestamp, p.value)))
        .collect()
}

const WAIT: Duration = Duration::from_secs(10);

// === compliance cases against a mock receiver ===

/// Scenario: a gauge `test{b="2",a="1",c=""}` exported to a receiver built from the
/// official remote.proto.
/// Guarantees: every request carries exactly `Content-Encoding: snappy`,
/// `Content-Type: application/x-protobuf`, `X-Prometheus-Remote-Write-Version: 0.1.0` and a
/// `User-Agent` naming tailgate; the body is the snappy block format (not framed) of a
/// `WriteRequest`; every series has `__name__`, sorted unique label names and no empty
/// value; `test{a="1",b="2"}` arrives with `job="test"` and `instance="127.0.0.1:9999"`;
/// timestamps are the point's, in ms.
#[tokio::test]
async fn headers_snappy_and_labels() {
    let receiver = RwReceiver::start().await;
    let h = Harness::start(&receiver.url(), "");
    let ts = now_ms();
    h.export(&request(vec![metric(
        "test",
        gauge(vec![number(
            ts,
            42.0,
            vec![kv("b", "2"), kv("a", "1"), kv("c", "")],
        )]),
    )]))
    .await;
    assert!(receiver.wait_for(WAIT, |r| !r.is_empty()).await);
    for r in receiver.received() {
        let header = |name: &str| r.headers.get(name).and_then(|v| v.to_str().ok());
        assert_eq!(header("content-encoding"), Some("snappy"));
        assert_eq!(header("content-type"), Some("application/x-protobuf"));
        assert_eq!(header("x-prometheus-remote-write-version"), Some("0.1.0"));
        assert!(header("user-agent").unwrap().starts_with("tailgate/"));
        assert!(
            !r.body.starts_with(b"\xff\x06\x00\x00sNaPpY"),
            "framed snappy"
        );
        let request = r.request.expect("snappy block + WriteRequest");
        for series in &request.timeseries {
            assert!(label(series, "__name__").is_some());
            let names: Vec<&str> = series.labels.iter().map(|l| l.name.as_str()).collect();
            let mut sorted = names.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(names, sorted, "sorted, unique: {}", key(series));
            assert!(series.labels.iter().all(|l| !l.value.is_empty()));
        }
    }
    let series = receiver.accepted_series();
    let test = series
        .iter()
        .find(|s| label(s, "__name__") == Some("test"))
        .unwrap();
    assert_eq!(
        key(test),
        r#"test{a="1",b="2",instance="127.0.0.1:9999",job="test",otel_scope_name="compliance"}"#
    );
    assert_eq!(test.samples[0].timestamp, ts);
    assert_eq!(test.samples[0].value, 42.0);
}

/// Scenario: the suite's Counter, Gauge, Histogram and Summary payloads, scraped three times
/// a second apart (a counter at 0,1,2; a gauge equal to its timestamp; a histogram with
/// buckets {1,2} after observing 1 and 2; a summary after 1, 2, 3).
/// Guarantees: `counter_total` has 0,1,2 in order; each gauge value equals its timestamp;
/// `histogram_bucket{le="1"}`=1, `{le="2"}`=2, `{le="+Inf"}`=2, `_sum`=3, `_count`=2;
/// `summary{quantile}` 2/3/3, `_sum` 6, `_count` 3; every series of one family has the same
/// number of samples; `target_info` carries job, instance and `host_name`.
#[tokio::test]
async fn counter_gauge_histogram_summary() {
    let receiver = RwReceiver::start().await;
    let h = Harness::start(&receiver.url(), "");
    let start = now_ms() - 3000;
    for i in 0..3 {
        let ts = start + i * 1000;
        let ns = ts as u64 * 1_000_000;
        let histogram = Data::Histogram(Histogram {
            data_points: vec![HistogramDataPoint {
                time_unix_nano: ns,
                count: 2,
                sum: Some(3.0),
                bucket_counts: vec![1, 1, 0],
                explicit_bounds: vec![1.0, 2.0],
                ..HistogramDataPoint::default()
            }],
            aggregation_temporality: CUMULATIVE,
        });
        let summary = Data::Summary(Summary {
            data_points: vec![SummaryDataPoint {
                time_unix_nano: ns,
                count: 3,
                sum: 6.0,
                quantile_values: [(0.5, 2.0), (0.9, 3.0), (0.99, 3.0)]
                    .into_iter()
                    .map(|(quantile, value)| ValueAtQuantile { quantile, value })
                    .collect(),
                ..SummaryDataPoint::default()
            }],
        });
        h.export(&request(vec![
            metric("counter", counter(vec![number(ts, i as f64, vec![])])),
            metric("now", gauge(vec![number(ts, ts as f64, vec![])])),
            metric("histogram", histogram),
            metric("summary", summary),
        ]))
        .await;
    }
    assert!(
        receiver
            .wait_for(WAIT, |_| samples(&receiver, "summary_count", &[]).len()
                == 3
                && samples(&receiver, "counter_total", &[]).len() == 3
                && samples(&receiver, "histogram_count", &[]).len() == 3)
            .await
    );
    let counter: Vec<f64> = samples(&receiver, "counter_total", &[])
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(counter, vec![0.0, 1.0, 2.0]);
    for (ts, value) in samples(&receiver, "now", &[]) {
        assert_eq!(value, ts as f64);
    }
    let last = |name: &str, labels: &[(&str, &str)]| {
        let all = samples(&receiver, name, labels);
        assert_eq!(all.len(), 3, "{name} {labels:?}");
        all.last().unwrap().1
    };
    assert_eq!(last("histogram_bucket", &[("le", "1")]), 1.0);
    assert_eq!(last("histogram_bucket", &[("le", "2")]), 2.0);
    assert_eq!(last("histogram_bucket", &[("le", "+Inf")]), 2.0);
    assert_eq!(last("histogram_sum", &[]), 3.0);
    assert_eq!(last("histogram_count", &[]), 2.0);
    assert_eq!(last("summary", &[("quantile", "0.5")]), 2.0);
    assert_eq!(last("summary", &[("quantile", "0.9")]), 3.0);
    assert_eq!(last("summary", &[("quantile", "0.99")]), 3.0);
    assert_eq!(last("summary_sum", &[]), 6.0);
    assert_eq!(last("summary_count", &[]), 3.0);
    let info = samples(
        &receiver,
        "target_info",
        &[
            ("job", "test"),
            ("instance", "127.0.0.1:9999"),
            ("host_name", "node-1"),
        ],
    );
    assert!(!info.is_empty() && info.iter().all(|(_, v)| *v == 1.0));
    assert_eq!(
        h.metric(
            "otelcol_exporter_sent_metric_points_total",
            &[r#"exporter="prometheusremotewrite""#]
        ),
        12.0
    );
}

/// Scenario: a gauge `stale` reported once, then reported with the `NoRecordedValue` flag
/// (the series ended).
/// Guarantees: the second sample is the StaleNaN bit pattern `0x7ff0000000000002`.
#[tokio::test]
async fn staleness_marker() {
    let receiver = RwReceiver::start().await;
    let h = Harness::start(&receiver.url(), "");
    let ts = now_ms();
    let mut ended = number(ts + 1000, 0.0, vec![]);
    ended.flags = 1;
    h.export(&request(vec![metric(
        "stale",
        gauge(vec![number(ts, 1.0, vec![]), ended]),
    )]))
    .await;
    assert!(
        receiver
            .wait_for(WAIT, |_| samples(&receiver, "stale", &[]).len() == 2)
            .await
    );
    let got = samples(&receiver, "stale", &[]);
    assert_eq!(got[0], (ts, 1.0));
    assert_eq!(got[1].0, ts + 1000);
    assert_eq!(got[1].1.to_bits(), STALE_NAN_BITS);
}

/// Scenario: 200 gauges exported 10 times, 100 ms of timestamps apart, while the receiver
/// sleeps a random 0–300 ms before answering each request (5 shards in parallel).
/// Guarantees: for every series, the timestamps received across all requests are strictly
/// increasing, and all 2000 samples arrive; every timestamp lies between the test's start
/// and end.
#[tokio::test]
async fn ordering_under_receiver_delays() {
    let receiver = RwReceiver::start().await;
    receiver.delay_up_to(Duration::from_millis(300));
    let h = Harness::start(&receiver.url(), "");
    let start = now_ms();
    for round in 0..10 {
        let ts = start + round * 100;
        let points = (0..200)
            .map(|i| number(ts, round as f64, vec![kv("i", &i.to_string())]))
            .collect();
        h.export(&request_with(
            vec![kv("service.name", "test")],
            vec![metric("ordered", gauge(points))],
        ))
        .await;
    }
    let end = start + 1000;
    let total = |_: &[_]| samples(&receiver, "ordered", &[]).len() == 2000;
    assert!(receiver.wait_for(Duration::from_secs(30), total).await);
    let mut last: HashMap<String, i64> = HashMap::new();
    for series in receiver.accepted_series() {
        for sample in &series.samples {
            assert!((start..end).contains(&sample.timestamp));
            let previous = last.insert(key(&series), sample.timestamp);
            if let Some(previous) = previous {
                assert!(
                    sample.timestamp > previous,
                    "{}: {} after {previous}",
                    key(&series),
                    sample.timestamp
                );
            }
        }
    }
    assert_eq!(last.len(), 200);
}

/// Scenario: the receiver answers the first request 500, then accepts.
/// Guarantees: the request is retried (more than one attempt carrying the first
/// timestamp), the sample then arrives, the retry is counted, and the retry carries
/// `Retry-Attempt`.
#[tokio::test]
async fn retries_on_500() {
    let receiver = RwReceiver::start().await;
    receiver.script([Answer::status(500, "try later")]);
    let h = Harness::start(&receiver.url(), "");
    let ts = now_ms();
    // Only service.name: no target_info, so the one request is the one answered 500.
    h.export(&request_with(
        vec![kv("service.name", "test")],
        vec![metric("now", gauge(vec![number(ts, 1.0, vec![])]))],
    ))
    .await;
    assert!(
        receiver
            .wait_for(WAIT, |_| !samples(&receiver, "now", &[]).is_empty())
            .await
    );
    let carrying: Vec<_> = receiver
        .received()
        .into_iter()
        .filter(|r| {
            r.request.as_ref().is_some_and(|q| {
                q.timeseries
                    .iter()
                    .any(|s| label(s, "__name__") == Some("now") && s.samples[0].timestamp == ts)
            })
        })
        .collect();
    assert!(carrying.len() >= 2, "retried: {}", carrying.len());
    assert_eq!(carrying[0].status, 500);
    assert_eq!(
        carrying[1]
            .headers
            .get("retry-attempt")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    assert_eq!(samples(&receiver, "now", &[]), vec![(ts, 1.0)]);
    assert!(
        h.metric(
            "tailgate_exporter_retries_total",
            &[r#"error_type="http_5xx""#]
        ) >= 1.0
    );
}

/// Scenario: the receiver answers the first request 400 ("out of order sample"); a later
/// export follows.
/// Guarantees: the refused sample's timestamp is never sent again (no retry), its point is
/// counted as failed with reason `permanent`, and the exporter keeps delivering.
#[tokio::test]
async fn no_retry_on_400() {
    let receiver = RwReceiver::start().await;
    receiver.script([Answer::status(400, "out of order sample")]);
    let h = Harness::start(&receiver.url(), "");
    let ts = now_ms();
    h.export(&request_with(
        vec![kv("service.name", "test")],
        vec![metric("now", gauge(vec![number(ts, 1.0, vec![])]))],
    ))
    .await;
    assert!(receiver.wait_for(WAIT, |r| r.len() == 1).await);
    h.export(&request_with(
        vec![kv("service.name", "test")],
        vec![metric("now", gauge(vec![number(ts + 1000, 2.0, vec![])]))],
    ))
    .await;
    assert!(h.settled(2.0).await, "both points accounted for");
    assert_eq!(h.metric("tailgate_exporter_retries_total", &[]), 0.0);
    let received = receiver.received();
    assert_eq!(received.len(), 2, "one request per export, none retried");
    let carrying = received
        .iter()
        .filter(|r| {
            r.request.as_ref().is_some_and(|q| {
                q.timeseries
                    .iter()
                    .any(|s| s.samples.iter().any(|p| p.timestamp == ts))
            })
        })
        .count();
    assert_eq!(carrying, 1, "never retried");
    assert_eq!(samples(&receiver, "now", &[]), vec![(ts + 1000, 2.0)]);
    assert_eq!(
        h.metric(
            "otelcol_exporter_send_failed_metric_points_total",
            &[r#"reason="permanent""#]
        ),
        1.0
    );
}

/// Scenario: the receiver answers 429 with `Retry-After: 1`, then accepts; separately, a
/// receiver that always answers 503 with `max_elapsed_time: 1s`.
/// Guarantees: the 429 is retried once (counted as `http_429`, the retry carrying
/// `Retry-Attempt: 1`) and the point is then sent; retries against the permanent 503 stop
/// (the points are counted as `retries_exhausted`). The exact waits, `Retry-After`
/// included, are shown on paused time in the export core's tests.
#[tokio::test]
async fn retry_after_and_bounded_retries() {
    let receiver = RwReceiver::start().await;
    receiver.script([Answer {
        status: 429,
        body: "slow down",
        retry_after: Some("1"),
        written: None,
    }]);
    let h = Harness::start(&receiver.url(), "");
    // One series (no resource, so no target_info): one shard, one request and its retry.
    h.export(&request_with(
        vec![],
        vec![metric("g", gauge(vec![number(now_ms(), 1.0, vec![])]))],
    ))
    .await;
    assert!(h.settled(1.0).await);
    let received = receiver.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].status, 429);
    assert_eq!(header(&received[1], "retry-attempt"), Some("1"));
    assert_eq!(
        h.metric(
            "tailgate_exporter_retries_total",
            &[r#"error_type="http_429""#]
        ),
        1.0
    );
    assert_eq!(
        h.metric("otelcol_exporter_sent_metric_points_total", &[]),
        1.0
    );

    let failing = RwReceiver::start().await;
    failing.script((0..1000).map(|_| Answer::status(503, "down")));
    let h = Harness::start(
        &failing.url(),
        "    retry_on_failure:\n      max_elapsed_time: 1s",
    );
    h.export(&request_with(
        vec![],
        vec![metric("g", gauge(vec![number(now_ms(), 1.0, vec![])]))],
    ))
    .await;
    assert!(h.settled(1.0).await, "retries are bounded");
    assert_eq!(
        h.metric(
            "otelcol_exporter_send_failed_metric_points_total",
            &[r#"reason="retries_exhausted""#],
        ),
        1.0
    );
    let attempts = failing.received().len() as f64;
    assert!(attempts > 2.0);
    assert_eq!(
        h.metric(
            "tailgate_exporter_retries_total",
            &[r#"error_type="http_5xx""#]
        ),
        attempts - 1.0,
        "every attempt but the last was retried"
    );
}

/// Scenario: a delta monotonic sum next to a cumulative one.
/// Guarantees: only the cumulative one is sent; the delta point is counted in
/// `tailgate_remote_write_dropped_data_points_total{reason="delta_temporality"}`.
#[tokio::test]
async fn delta_is_refused_and_counted() {
    let receiver = RwReceiver::start().await;
    let h = Harness::start(&receiver.url(), "");
    let ts = now_ms();
    let delta = Data::Sum(Sum {
        data_points: vec![number(ts, 1.0, vec![])],
        aggregation_temporality: AggregationTemporality::Delta as i32,
        is_monotonic: true,
    });
    h.export(&request(vec![
        metric("delta", delta),
        metric("cumulative", counter(vec![number(ts, 1.0, vec![])])),
    ]))
    .await;
    assert!(
        receiver
            .wait_for(WAIT, |_| !samples(&receiver, "cumulative_total", &[])
                .is_empty())
            .await
    );
    assert!(samples(&receiver, "delta_total", &[]).is_empty());
    assert_eq!(
        h.metric(
            "tailgate_remote_write_dropped_data_points_total",
            &[r#"reason="delta_temporality""#]
        ),
        1.0
    );
}

/// Scenario: 300 series in one export with `max_batch_size_bytes: 4000`.
/// Guarantees: they arrive split over several requests, each within the limit, none lost.
#[tokio::test]
async fn splits_above_max_batch_size() {
    let receiver = RwReceiver::start().await;
    let h = Harness::start(
        &receiver.url(),
        "    max_batch_size_bytes: 4000\n    remote_write_queue:\n      num_consumers: 1",
    );
    let ts = now_ms();
    let points = (0..300)
        .map(|i| number(ts, 1.0, vec![kv("i", &i.to_string())]))
        .collect();
    h.export(&request_with(vec![], vec![metric("wide", gauge(points))]))
        .await;
    assert!(
        receiver
            .wait_for(WAIT, |_| samples(&receiver, "wide", &[]).len() == 300)
            .await
    );
    let received = receiver.received();
    assert!(received.len() > 1);
    for r in &received {
        assert!(r.request.as_ref().unwrap().encode_to_vec().len() <= 4000);
    }
}

/// Scenario: exports queued behind a slow receiver, then shutdown with a 10 s deadline.
/// Guarantees: shutdown drains the queue: the report counts every point delivered, none
/// dropped; a later export is refused as shut down.
#[tokio::test]
async fn shutdown_drains() {
    let receiver = RwReceiver::start().await;
    receiver.delay_up_to(Duration::from_millis(100));
    let h = Harness::start(&receiver.url(), "");
    let ts = now_ms();
    for i in 0..20 {
        h.export(&request_with(
            vec![],
            vec![metric("g", gauge(vec![number(ts + i, 1.0, vec![])]))],
        ))
        .await;
    }
    let exporter = h.exporter.clone();
    let report = exporter
        .shutdown(Instant::now() + Duration::from_secs(10))
        .await;
    let delivered = h.metric("otelcol_exporter_sent_metric_points_total", &[]);
    assert_eq!(delivered, 20.0);
    assert_eq!(report.dropped, 0);
    assert!(report.delivered <= 20);
    assert_eq!(samples(&receiver, "g", &[]).len(), 20);
    let refused = h
        .exporter
        .export(MetricsBatch::new(request(vec![]).encode_to_vec().into(), 0))
        .await;
    assert!(refused.is_err());
}

// === remote write 2.0 against a mock receiver ===

const V2: &str = "    protobuf_message: io.prometheus.write.v2.Request";
const V2_ONE_SHARD: &str = "    protobuf_message: io.prometheus.write.v2.Request\n    remote_write_queue:\n      num_consumers: 1";

fn header<'a>(r: &'a Received, name: &str) -> Option<&'a str> {
    r.headers.get(name).and_then(|v| v.to_str().ok())
}

fn is_v2(r: &Received) -> bool {
    header(r, "content-type") == Some("application/x-protobuf;proto=io.prometheus.write.v2.Request")
}

/// Three exports, a second apart, of a counter (two points per export, one with an exemplar
/// naming a trace), a gauge with attributes, an explicit histogram, a summary and an
/// exponential histogram, from a resource that yields `target_info`.
fn mixed_exports(start: i64) -> Vec<ExportMetricsServiceRequest> {
    (0..3)
        .map(|i| {
            let ts = start + i * 1000;
            let mut first = number(ts, (2 * i) as f64, vec![kv("route", "/a")]);
            first.exemplars = vec![Exemplar {
                time_unix_nano: ts as u64 * 1_000_000,
                value: Some(exemplar::Value::AsDouble(0.25)),
                trace_id: vec![0xab; 16],
                span_id: vec![0xcd; 8],
                ..Exemplar::default()
            }];
            let second = number(ts + 500, (2 * i + 1) as f64, vec![kv("route", "/a")]);
            let mut requests = metric("requests", counter(vec![second, first]));
            requests.description = "Requests served.".to_owned();
            let mut latency = metric(
                "latency",
                Data::Histogram(Histogram {
                    data_points: vec![HistogramDataPoint {
                        time_unix_nano: ts as u64 * 1_000_000,
                        count: 2 + i as u64,
                        sum: Some(3.0),
                        bucket_counts: vec![1, 1 + i as u64, 0],
                        explicit_bounds: vec![1.0, 2.0],
                        ..HistogramDataPoint::default()
                    }],
                    aggregation_temporality: CUMULATIVE,
                }),
            );
            latency.unit = "s".to_owned();
            let summary = Data::Summary(Summary {
                data_points: vec![SummaryDataPoint {
                    time_unix_nano: ts as u64 * 1_000_000,
                    count: 3,
                    sum: 6.0,
                    quantile_values: vec![ValueAtQuantile {
                        quantile: 0.5,
                        value: 2.0,
                    }],
                    ..SummaryDataPoint::default()
                }],
            });
            request(vec![
                requests,
                metric(
                    "temperature",
                    gauge(vec![number(ts, 20.0 + i as f64, vec![kv("room", "ü 1")])]),
                ),
                latency,
                metric("summary", summary),
                metric("sizes", exp_histogram(ts)),
            ])
        })
        .collect()
}

/// Every accepted series as `key → [(timestamp, value bits)]`, samples in arrival order,
/// with native histograms as `(timestamp, count)` and exemplars as `(timestamp, labels)`.
type Content = BTreeMap<String, (Vec<(i64, u64)>, Vec<(i64, u64)>, Vec<String>)>;

fn content(receiver: &RwReceiver) -> Content {
    let mut out: Content = BTreeMap::new();
    for series in receiver.accepted_series() {
        let entry = out.entry(key(&series)).or_default();
        entry.0.extend(
            series
                .samples
                .iter()
                .map(|p| (p.timestamp, p.value.to_bits())),
        );
        entry.1.extend(series.histograms.iter().map(|h| {
            let count = match h.count {
                Some(tailgate::exporter::remote_write::prompb::histogram::Count::CountInt(n)) => n,
                _ => u64::MAX,
            };
            (h.timestamp, count)
        }));
        entry.2.extend(series.exemplars.iter().map(|e| {
            let labels: Vec<String> = e
                .labels
                .iter()
                .map(|l| format!("{}={}", l.name, l.value))
                .collect();
            format!("{}@{}:{}", e.value, e.timestamp, labels.join(","))
        }));
    }
    out
}

/// Scenario: the same mixed exports (counter with exemplars, gauge, histogram, summary,
/// exponential histogram, `target_info`) through a 1.0 exporter and a 2.0 exporter, each to
/// its own receiver; the 2.0 receiver decodes `io.prometheus.write.v2.Request` and answers
/// with `*-Written` headers.
/// Guarantees: every 2.0 request carries `Content-Type:
/// application/x-protobuf;proto=io.prometheus.write.v2.Request`, `Content-Encoding: snappy`,
/// `X-Prometheus-Remote-Write-Version: 2.0.0` and a tailgate `User-Agent`, in the snappy
/// block format; `symbols[0]` is `""`, symbols are unique, every ref is valid and label refs
/// come in pairs sorted by name; no series has both samples and histograms; every series has
/// metadata with a type (the counter `COUNTER` with its help, the histogram's series
/// `HISTOGRAM` with unit `seconds`); the label sets, samples (in timestamp order per
/// series), the native histograms and the exemplars (with `trace_id`) decode to exactly what
/// the 1.0 exporter sent; nothing falls back or fails.
#[tokio::test]
async fn v2_carries_what_v1_carries() {
    let v1_receiver = RwReceiver::start().await;
    let v2_receiver = RwReceiver::start().await;
    let v1 = Harness::start(&v1_receiver.url(), "");
    let v2 = Harness::start(&v2_receiver.url(), V2);
    let start = now_ms() - 5000;
    for export in mixed_exports(start) {
        v1.export(&export).await;
        v2.export(&export).await;
    }
    // Everything sent: the last summary and all six counter samples, at both receivers.
    for r in [&v1_receiver, &v2_receiver] {
        let done = |_: &[Received]| {
            samples(r, "summary_count", &[]).len() == 3
                && samples(r, "requests_total", &[]).len() == 6
        };
        assert!(r.wait_for(WAIT, done).await);
    }
    // Every point accounted for (sent) by both exporters: nothing is still in flight.
    let deadline = Instant::now() + WAIT;
    while [&v1, &v2]
        .iter()
        .any(|h| h.metric("otelcol_exporter_sent_metric_points_total", &[]) < 18.0)
    {
        assert!(Instant::now() < deadline, "not all points sent");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let received = v2_receiver.received();
    assert!(!received.is_empty());
    for r in &received {
        assert!(is_v2(r), "{:?}", r.headers);
        assert_eq!(header(r, "content-encoding"), Some("snappy"));
        assert_eq!(
            header(r, "x-prometheus-remote-write-version"),
            Some("2.0.0")
        );
        assert!(header(r, "user-agent").unwrap().starts_with("tailgate/"));
        assert!(
            !r.body.starts_with(b"\xff\x06\x00\x00sNaPpY"),
            "framed snappy"
        );
        assert_eq!(r.status, 204);
        let request = r.request_v2.as_ref().expect("a v2 Request");
        assert_eq!(request.symbols[0], "");
        let mut unique = request.symbols.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), request.symbols.len(), "symbols deduplicated");
        for series in &request.timeseries {
            assert!(
                series
                    .labels_refs
                    .iter()
                    .all(|&i| (i as usize) < request.symbols.len())
            );
            let labels = v2_labels(request, &series.labels_refs);
            let names: Vec<&str> = labels.iter().map(|l| l.name.as_str()).collect();
            let mut sorted = names.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(names, sorted);
            assert!(series.samples.is_empty() != series.histograms.is_empty());
            for e in &series.exemplars {
                assert_eq!(e.labels_refs.len() % 2, 0);
                assert!(e.timestamp != 0);
            }
            let metadata = series.metadata.expect("metadata");
            assert_ne!(metadata.r#type, 0, "type of {labels:?}");
            let name = &labels.iter().find(|l| l.name == "__name__").unwrap().value;
            let help = &request.symbols[metadata.help_ref as usize];
            let unit = &request.symbols[metadata.unit_ref as usize];
            match name.as_str() {
                "requests_total" => {
                    assert_eq!(metadata.r#type, 1);
                    assert_eq!(help, "Requests served.");
                }
                "latency_seconds_bucket" | "latency_seconds_count" => {
                    assert_eq!(metadata.r#type, 3);
                    assert_eq!(unit, "seconds");
                }
                "sizes" => assert_eq!(metadata.r#type, 3),
                _ => {}
            }
        }
    }
    let via_v1 = content(&v1_receiver);
    let via_v2 = content(&v2_receiver);
    assert_eq!(via_v1, via_v2);
    let counter = &via_v2[r#"requests_total{instance="127.0.0.1:9999",job="test",otel_scope_name="compliance",route="/a"}"#];
    let timestamps: Vec<i64> = counter.0.iter().map(|(t, _)| *t).collect();
    let expected: Vec<i64> = (0..3)
        .flat_map(|i| [start + i * 1000, start + i * 1000 + 500])
        .collect();
    assert_eq!(timestamps, expected, "in order");
    assert_eq!(counter.2.len(), 3);
    assert!(
        counter.2[0].contains(&format!("trace_id={}", "ab".repeat(16))),
        "{:?}",
        counter.2
    );
    let sizes = via_v2
        .iter()
        .find(|(k, _)| k.starts_with("sizes{"))
        .expect("native histogram");
    assert_eq!(
        sizes.1.1,
        vec![(start, 6), (start + 1000, 6), (start + 2000, 6)]
    );
    assert!(via_v2.keys().any(|k| k.starts_with("target_info{")));
    for h in [&v1, &v2] {
        assert_eq!(
            h.metric("otelcol_exporter_sent_metric_points_total", &[]),
            18.0
        );
        assert_eq!(
            h.metric("otelcol_exporter_send_failed_metric_points_total", &[]),
            0.0
        );
    }
    assert_eq!(
        v2.metric("tailgate_remote_write_protocol_fallbacks_total", &[]),
        0.0
    );
}

/// Scenario: a 2.0 receiver that refuses the message (415), and one that behaves like a
/// 1.x receiver (decodes the body as an empty 1.0 request and answers 204 without
/// `*-Written` headers, as Prometheus 2.42 does); one shard; four exports of two series.
/// Guarantees: only the first request goes out as 2.0; it is sent again at once as 1.0
/// (`Content-Type: application/x-protobuf`, version `0.1.0`), and every later request is
/// 1.0; every sample arrives exactly once, in order; the fallback is counted once and no
/// point is counted as failed.
#[tokio::test]
async fn v2_falls_back_to_v1() {
    for support in [V2Support::Refuse415, V2Support::Legacy] {
        let receiver = RwReceiver::start().await;
        receiver.v2_support(support);
        let h = Harness::start(&receiver.url(), V2_ONE_SHARD);
        let start = now_ms() - 5000;
        for i in 0..4 {
            let ts = start + i * 100;
            h.export(&request_with(
                vec![],
                vec![metric(
                    "g",
                    gauge(vec![
                        number(ts, i as f64, vec![kv("k", "a")]),
                        number(ts, i as f64, vec![kv("k", "b")]),
                    ]),
                )],
            ))
            .await;
        }
        assert!(h.settled(8.0).await, "{support:?}");
        assert_eq!(
            h.metric("tailgate_exporter_retries_total", &[]),
            0.0,
            "{support:?}: the fallback is not a retry"
        );
        let received = receiver.received();
        assert!(is_v2(&received[0]), "{support:?}");
        for r in &received[1..] {
            assert!(!is_v2(r), "{support:?}: later requests are 1.0");
            assert_eq!(header(r, "content-type"), Some("application/x-protobuf"));
            assert_eq!(
                header(r, "x-prometheus-remote-write-version"),
                Some("0.1.0")
            );
            assert!((200..300).contains(&r.status));
        }
        // The 1.x-like receiver accepted the 2.0 body as an empty 1.0 request: nothing of it
        // counts as received.
        assert!(
            received[0]
                .request
                .as_ref()
                .is_none_or(|q| q.timeseries.is_empty())
        );
        for k in ["a", "b"] {
            let got: Vec<(i64, f64)> = samples(&receiver, "g", &[("k", k)]);
            let expected: Vec<(i64, f64)> = (0..4).map(|i| (start + i * 100, i as f64)).collect();
            assert_eq!(got, expected, "{support:?} k={k}: once each, in order");
        }
        assert_eq!(
            h.metric("tailgate_remote_write_protocol_fallbacks_total", &[]),
            1.0,
            "{support:?}"
        );
        assert_eq!(
            h.metric("otelcol_exporter_sent_metric_points_total", &[]),
            8.0
        );
        assert_eq!(
            h.metric("otelcol_exporter_send_failed_metric_points_total", &[]),
            0.0
        );
    }
}

/// Scenario: a 2.0 receiver answers 204 but reports writing 1 of the 2 samples (and 0 of 1
/// exemplar) of a request holding two gauge series, one with an exemplar-less counter
/// point; then a normal answer.
/// Guarantees: the request is not retried; one of its two points is counted as failed
/// with reason `partial_success` and the other as sent; the unwritten sample and exemplar
/// are counted by kind; no fallback; the next request is still 2.0.
#[tokio::test]
async fn v2_partial_write_is_counted_not_retried() {
    let receiver = RwReceiver::start().await;
    receiver.script([Answer {
        written: Some([1, 0, 0]),
        ..Answer::ok()
    }]);
    let h = Harness::start(&receiver.url(), V2_ONE_SHARD);
    let ts = now_ms() - 1000;
    let mut with_exemplar = number(ts, 1.0, vec![kv("k", "a")]);
    with_exemplar.exemplars = vec![Exemplar {
        time_unix_nano: ts as u64 * 1_000_000,
        value: Some(exemplar::Value::AsDouble(1.0)),
        trace_id: vec![1; 16],
        ..Exemplar::default()
    }];
    h.export(&request_with(
        vec![],
        vec![metric(
            "c",
            counter(vec![with_exemplar, number(ts, 2.0, vec![kv("k", "b")])]),
        )],
    ))
    .await;
    assert!(receiver.wait_for(WAIT, |r| r.len() == 1).await);
    h.export(&request_with(
        vec![],
        vec![metric(
            "c",
            counter(vec![number(ts + 1000, 3.0, vec![kv("k", "a")])]),
        )],
    ))
    .await;
    assert!(h.settled(3.0).await);
    assert_eq!(h.metric("tailgate_exporter_retries_total", &[]), 0.0);
    let received = receiver.received();
    assert_eq!(received.len(), 2, "not retried");
    assert!(received.iter().all(is_v2));
    let failed = |reason: &str| {
        h.metric(
            "otelcol_exporter_send_failed_metric_points_total",
            &[&format!(r#"reason="{reason}""#)],
        )
    };
    assert_eq!(failed("partial_success"), 1.0);
    assert_eq!(
        h.metric("otelcol_exporter_sent_metric_points_total", &[]),
        2.0
    );
    assert_eq!(
        h.metric(
            "tailgate_remote_write_unwritten_total",
            &[r#"kind="samples""#]
        ),
        1.0
    );
    assert_eq!(
        h.metric(
            "tailgate_remote_write_unwritten_total",
            &[r#"kind="exemplars""#]
        ),
        1.0
    );
    assert_eq!(
        h.metric(
            "tailgate_remote_write_unwritten_total",
            &[r#"kind="histograms""#]
        ),
        0.0
    );
    assert_eq!(
        h.metric("tailgate_remote_write_protocol_fallbacks_total", &[]),
        0.0
    );
}

// === against a real Prometheus ===

fn exp_histogram(ms: i64) -> Data {
    Data::ExponentialHistogram(ExponentialHistogram {
        data_points: vec![ExponentialHistogramDataPoint {
            time_unix_nano: ms as u64 * 1_000_000,
            count: 6,
            sum: Some(20.0),
            scale: 0,
            zero_count: 1,
            positive: Some(Buckets {
                offset: 0,
                bucket_counts: vec![2, 0, 3],
            }),
            ..ExponentialHistogramDataPoint::default()
        }],
        aggregation_temporality: CUMULATIVE,
    })
}

/// Scenario: a counter, an up-down counter (non-monotonic sum), a gauge, an explicit
/// histogram and an exponential histogram, from a resource with service name, namespace,
/// instance id and a pod name, pushed through the exporter to Prometheus 2.42 started with
/// the remote-write receiver and native histograms.
/// Guarantees: PromQL returns `app_requests_total` = 7 with `job="shop/api"`,
/// `instance="pod-1"` and the data point's label; `app_queue_depth` = -3 (no `_total`);
/// `app_temperature_celsius` = 21.5; `app_latency_seconds_bucket{le="0.5"}` = 4 and `_count`
/// = 10; the native histogram's `histogram_count` = 6 and `histogram_sum` = 20;
/// `app_target_info` = 1 with `k8s_pod_name`.
#[tokio::test]
async fn prometheus_receives_every_type() {
    let prometheus = Prometheus::start().await;
    let h = Harness::start(&prometheus.write_url(), "    namespace: app");
    let ts = now_ms() - 1000;
    let resource = vec![
        kv("service.name", "api"),
        kv("service.namespace", "shop"),
        kv("service.instance.id", "pod-1"),
        kv("k8s.pod.name", "api-7d9"),
    ];
    let histogram = Data::Histogram(Histogram {
        data_points: vec![HistogramDataPoint {
            time_unix_nano: ts as u64 * 1_000_000,
            count: 10,
            sum: Some(4.2),
            bucket_counts: vec![4, 5, 1],
            explicit_bounds: vec![0.5, 1.0],
            ..HistogramDataPoint::default()
        }],
        aggregation_temporality: CUMULATIVE,
    });
    let mut requests = metric(
        "requests",
        counter(vec![number(ts, 7.0, vec![kv("http.method", "GET")])]),
    );
    requests.unit = "{request}".to_owned();
    let mut temperature = metric("temperature", gauge(vec![number(ts, 21.5, vec![])]));
    temperature.unit = "Cel".to_owned();
    let mut latency = metric("latency", histogram);
    latency.unit = "s".to_owned();
    h.export(&request_with(
        resource,
        vec![
            requests,
            metric(
                "queue.depth",
                Data::Sum(Sum {
                    data_points: vec![number(ts, -3.0, vec![])],
                    aggregation_temporality: CUMULATIVE,
                    is_monotonic: false,
                }),
            ),
            temperature,
            latency,
            metric("sizes", exp_histogram(ts)),
        ],
    ))
    .await;
    let at = Some(ts as f64 / 1000.0 + 1.0);
    let deadline = Instant::now() + WAIT;
    while prometheus.value("app_target_info", at).await.is_none() {
        assert!(
            Instant::now() < deadline,
            "nothing arrived; log:\n{}",
            prometheus.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let requests = prometheus.query("app_requests_total", at).await;
    assert_eq!(requests.len(), 1, "{requests:?}");
    let (labels, value) = &requests[0];
    assert_eq!(*value, 7.0);
    let expected: BTreeMap<String, String> = [
        ("__name__", "app_requests_total"),
        ("http_method", "GET"),
        ("instance", "pod-1"),
        ("job", "shop/api"),
        ("otel_scope_name", "compliance"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(labels, &expected);
    assert_eq!(prometheus.value("app_queue_depth", at).await, Some(-3.0));
    assert_eq!(prometheus.value("app_queue_depth_total", at).await, None);
    assert_eq!(
        prometheus.value("app_temperature_celsius", at).await,
        Some(21.5)
    );
    assert_eq!(
        prometheus
            .value(r#"app_latency_seconds_bucket{le="0.5"}"#, at)
            .await,
        Some(4.0)
    );
    assert_eq!(
        prometheus
            .value(r#"app_latency_seconds_bucket{le="+Inf"}"#, at)
            .await,
        Some(10.0)
    );
    assert_eq!(
        prometheus.value("app_latency_seconds_count", at).await,
        Some(10.0)
    );
    assert_eq!(
        prometheus.value("histogram_count(app_sizes)", at).await,
        Some(6.0)
    );
    assert_eq!(
        prometheus.value("histogram_sum(app_sizes)", at).await,
        Some(20.0)
    );
    let info = prometheus
        .query(r#"app_target_info{k8s_pod_name="api-7d9"}"#, at)
        .await;
    assert_eq!(info.len(), 1, "{info:?}");
    assert_eq!(info[0].1, 1.0);
    assert_eq!(info[0].0["job"], "shop/api");
    assert_eq!(info[0].0["instance"], "pod-1");
    assert_eq!(
        h.metric("otelcol_exporter_send_failed_metric_points_total", &[]),
        0.0
    );
}

/// Scenario: `protobuf_message: io.prometheus.write.v2.Request` against Prometheus 2.42,
/// which answers a 2.0 request 204 without `*-Written` headers and stores nothing; a counter
/// and an exponential histogram, then a second export of the counter.
/// Guarantees: the exporter falls back to 1.0 (counted once) and the data is queryable:
/// `v2_requests_total` is 1 then 2 and the native histogram's count is 6; no point is counted
/// as failed.
#[tokio::test]
async fn prometheus_v2_falls_back_and_is_queryable() {
    let prometheus = Prometheus::start().await;
    let h = Harness::start(&prometheus.write_url(), V2);
    let ts = now_ms() - 2000;
    h.export(&request_with(
        vec![kv("service.name", "v2")],
        vec![
            metric("v2.requests", counter(vec![number(ts, 1.0, vec![])])),
            metric("v2.sizes", exp_histogram(ts)),
        ],
    ))
    .await;
    let at = Some(ts as f64 / 1000.0 + 0.5);
    let deadline = Instant::now() + WAIT;
    while prometheus.value("v2_requests_total", at).await.is_none() {
        assert!(
            Instant::now() < deadline,
            "nothing arrived; log:\n{}",
            prometheus.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    h.export(&request_with(
        vec![kv("service.name", "v2")],
        vec![metric(
            "v2.requests",
            counter(vec![number(ts + 1000, 2.0, vec![])]),
        )],
    ))
    .await;
    let later = Some(ts as f64 / 1000.0 + 1.5);
    let deadline = Instant::now() + WAIT;
    while prometheus.value("v2_requests_total", later).await != Some(2.0) {
        assert!(Instant::now() < deadline, "second export missing");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(prometheus.value("v2_requests_total", at).await, Some(1.0));
    assert_eq!(
        prometheus.value("histogram_count(v2_sizes)", at).await,
        Some(6.0)
    );
    assert_eq!(
        h.metric("tailgate_remote_write_protocol_fallbacks_total", &[]),
        1.0
    );
    assert_eq!(
        h.metric("otelcol_exporter_send_failed_metric_points_total", &[]),
        0.0
    );
}
