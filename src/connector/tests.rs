//! Span metrics aggregation: exact counts, buckets, dimensions and the cardinality cap.

use std::num::NonZeroUsize;
use std::time::Duration;

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    HistogramDataPoint, Metric, NumberDataPoint, metric,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;

use super::SpanMetricsMetrics;
use super::spanmetrics::{Aggregator, string_kv as kv};
use crate::config::{HistogramUnit, SpanMetricsConfig, SpanMetricsDimension};

fn config() -> SpanMetricsConfig {
    SpanMetricsConfig {
        histogram_disabled: false,
        histogram_unit: HistogramUnit::Milliseconds,
        histogram_buckets: [
            2, 4, 6, 8, 10, 50, 100, 200, 400, 800, 1000, 1400, 2000, 5000,
        ]
        .into_iter()
        .map(Duration::from_millis)
        .collect(),
        dimensions: Vec::new(),
        exclude_dimensions: Vec::new(),
        namespace: "traces.span.metrics".into(),
        metrics_flush_interval: Duration::from_secs(60),
        exemplars_enabled: false,
        resource_metrics_key_attributes: Vec::new(),
        dimensions_cache_size: NonZeroUsize::new(1000).unwrap(),
        aggregation_cardinality_limit: NonZeroUsize::new(10_000),
    }
}

/// A span of `millis` duration.
fn span(name: &str, kind: i32, error: bool, millis: u64, attributes: Vec<KeyValue>) -> Span {
    Span {
        trace_id: vec![1; 16],
        span_id: vec![2; 8],
        name: name.into(),
        kind,
        start_time_unix_nano: 1_000_000_000,
        end_time_unix_nano: 1_000_000_000 + millis * 1_000_000,
        attributes,
        status: Some(Status {
            message: String::new(),
            code: if error { 2 } else { 0 },
        }),
        ..Default::default()
    }
}

fn request(resource: Vec<KeyValue>, spans: Vec<Span>) -> Bytes {
    Bytes::from(
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: resource,
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                schema_url: String::new(),
            }],
        }
        .encode_to_vec(),
    )
}

/// Adds every span of `request` (valid bytes) to `aggregator`, as a batch without views.
fn record(aggregator: &mut Aggregator, request: &Bytes) {
    let views = crate::otlp::parse_validated_traces_request(request).unwrap();
    aggregator.record(&views);
}

fn attr<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn str_attr<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
    match attr(attributes, key)? {
        any_value::Value::StringValue(s) => Some(s),
        _ => None,
    }
}

/// The points of every metric named `name` in `request`, as `points` reads each metric.
fn points_of<T>(
    request: &ExportMetricsServiceRequest,
    name: &str,
    points: impl Fn(&Metric) -> Vec<T>,
) -> Vec<T> {
    request
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .filter(|m| m.name == name)
        .flat_map(points)
        .collect()
}

fn calls(request: &ExportMetricsServiceRequest) -> Vec<NumberDataPoint> {
    points_of(request, "traces.span.metrics.calls", |m| match &m.data {
        Some(metric::Data::Sum(sum)) => {
            assert!(sum.is_monotonic);
            assert_eq!(sum.aggregation_temporality, 2, "cumulative");
            sum.data_points.clone()
        }
        _ => panic!("calls is a Sum"),
    })
}

fn durations(request: &ExportMetricsServiceRequest) -> Vec<HistogramDataPoint> {
    points_of(request, "traces.span.metrics.duration", |m| {
        assert_eq!(m.unit, "ms");
        match &m.data {
            Some(metric::Data::Histogram(h)) => h.data_points.clone(),
            _ => panic!("duration is a Histogram"),
        }
    })
}

fn value(point: &NumberDataPoint) -> i64 {
    match point.value {
        Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsInt(i)) => i,
        other => panic!("calls are integers, found {other:?}"),
    }
}

/// The calls of the series with `span.name` and `status.code`.
fn calls_of(points: &[NumberDataPoint], name: &str, status: &str) -> i64 {
    points
        .iter()
        .filter(|p| str_attr(&p.attributes, "span.name") == Some(name))
        .filter(|p| str_attr(&p.attributes, "status.code") == Some(status))
        .map(value)
        .sum()
}

/// Scenario: two services send 7 server spans of "GET /a" (2 of them errors) and 3 client
/// spans of "db", in three requests, then flush twice with more spans in between.
/// Guarantees: `calls` counts every span exactly per (service, span name, kind, status);
/// errors are the points with STATUS_CODE_ERROR; the counts are cumulative across flushes;
/// one ResourceMetrics per service, carrying its attributes and collector.instance.id.
#[test]
fn counts_calls_and_errors_exactly() {
    let mut aggregator = Aggregator::new(config(), SpanMetricsMetrics::unregistered());
    let shop = vec![kv("service.name", "shop")];
    let cart = vec![kv("service.name", "cart")];
    let mut spans = Vec::new();
    for i in 0..7 {
        spans.push(span("GET /a", 2, i < 2, 5, vec![]));
    }
    record(&mut aggregator, &request(shop.clone(), spans));
    record(
        &mut aggregator,
        &request(
            cart.clone(),
            (0..3).map(|_| span("db", 3, false, 1, vec![])).collect(),
        ),
    );
    let (first, points) = aggregator.snapshot(1).expect("series recorded");
    assert_eq!(first.resource_metrics.len(), 2);
    let all = calls(&first);
    assert_eq!(all.len(), 3, "shop ok, shop error, cart ok");
    assert_eq!(points, 6, "one calls and one duration point per series");
    assert_eq!(calls_of(&all, "GET /a", "STATUS_CODE_UNSET"), 5);
    assert_eq!(calls_of(&all, "GET /a", "STATUS_CODE_ERROR"), 2);
    assert_eq!(calls_of(&all, "db", "STATUS_CODE_UNSET"), 3);
    let db = all
        .iter()
        .find(|p| str_attr(&p.attributes, "span.name") == Some("db"))
        .unwrap();
    assert_eq!(str_attr(&db.attributes, "service.name"), Some("cart"));
    assert_eq!(
        str_attr(&db.attributes, "span.kind"),
        Some("SPAN_KIND_CLIENT")
    );
    for rm in &first.resource_metrics {
        let attributes = &rm.resource.as_ref().unwrap().attributes;
        assert!(str_attr(attributes, "service.name").is_some());
        assert!(str_attr(attributes, "collector.instance.id").is_some());
    }

    record(
        &mut aggregator,
        &request(shop, vec![span("GET /a", 2, true, 5, vec![])]),
    );
    let (second, _) = aggregator.snapshot(2).unwrap();
    let all = calls(&second);
    assert_eq!(
        calls_of(&all, "GET /a", "STATUS_CODE_ERROR"),
        3,
        "cumulative"
    );
    assert_eq!(calls_of(&all, "GET /a", "STATUS_CODE_UNSET"), 5);
    assert!(
        all.iter()
            .all(|p| p.start_time_unix_nano > 0 && p.time_unix_nano == 2)
    );
}

/// Scenario: spans of 1ms, 2ms (on a bound), 3ms, 50ms and 6s against the default-like
/// bounds [2, 4, 6, 8, 10, 50, ...5000] ms.
/// Guarantees: each lands in the bucket whose upper bound is the first >= its duration
/// (a value on a bound belongs to that bound's bucket); 6s lands in the overflow bucket;
/// count and sum agree.
#[test]
fn histogram_buckets() {
    let mut aggregator = Aggregator::new(config(), SpanMetricsMetrics::unregistered());
    let spans = [1, 2, 3, 50, 6000]
        .into_iter()
        .map(|ms| span("op", 2, false, ms, vec![]))
        .collect();
    record(
        &mut aggregator,
        &request(vec![kv("service.name", "s")], spans),
    );
    let (out, _) = aggregator.snapshot(1).unwrap();
    let points = durations(&out);
    assert_eq!(points.len(), 1);
    let point = &points[0];
    assert_eq!(point.explicit_bounds.len(), 14);
    assert_eq!(point.bucket_counts.len(), 15);
    let mut expected = vec![0u64; 15];
    expected[0] = 2; // 1ms, 2ms: (-inf, 2]
    expected[1] = 1; // 3ms: (2, 4]
    expected[5] = 1; // 50ms: (10, 50]
    expected[14] = 1; // 6s: (5000, +inf)
    assert_eq!(point.bucket_counts, expected);
    assert_eq!(point.count, 5);
    assert_eq!(point.sum, Some(6056.0));
}

/// Scenario: a cardinality limit of 3 and spans of 5 distinct names, 2 spans each.
/// Guarantees: 3 series are kept exactly; the spans of the other names are counted in one
/// overflow series with only otel.metric.overflow=true, and in the overflow counter; no
/// span is lost from the total.
#[test]
fn cardinality_overflow() {
    let mut limited = config();
    limited.aggregation_cardinality_limit = NonZeroUsize::new(3);
    let metrics = SpanMetricsMetrics::unregistered();
    let mut aggregator = Aggregator::new(limited, metrics.clone());
    let spans = (0..10)
        .map(|i| span(&format!("op{}", i % 5), 2, false, 1, vec![]))
        .collect();
    record(
        &mut aggregator,
        &request(vec![kv("service.name", "s")], spans),
    );
    let (out, _) = aggregator.snapshot(1).unwrap();
    let all = calls(&out);
    assert_eq!(all.len(), 4, "3 series and the overflow series");
    let overflow: Vec<&NumberDataPoint> = all
        .iter()
        .filter(|p| {
            matches!(
                attr(&p.attributes, "otel.metric.overflow"),
                Some(any_value::Value::BoolValue(true))
            )
        })
        .collect();
    assert_eq!(overflow.len(), 1);
    assert_eq!(overflow[0].attributes.len(), 1);
    assert_eq!(value(overflow[0]), 4);
    assert_eq!(all.iter().map(value).sum::<i64>(), 10);
    assert_eq!(metrics.overflow_spans(), 4);
}

/// Scenario: dimensions `http.method` (no default), `region` (default "none"), where
/// `region` is set on the resource for one service, and `status.code` excluded.
/// Guarantees: a span attribute becomes a dimension; a resource attribute is used when the
/// span lacks it; the default fills in otherwise; a dimension with no value and no default
/// is left out; excluded default dimensions are not written.
#[test]
fn dimensions_with_defaults() {
    let mut with_dims = config();
    with_dims.dimensions = vec![
        SpanMetricsDimension {
            name: "http.method".into(),
            default: None,
        },
        SpanMetricsDimension {
            name: "region".into(),
            default: Some("none".into()),
        },
    ];
    with_dims.exclude_dimensions = vec!["status.code".into()];
    let mut aggregator = Aggregator::new(with_dims, SpanMetricsMetrics::unregistered());
    record(
        &mut aggregator,
        &request(
            vec![kv("service.name", "eu"), kv("region", "eu-west")],
            vec![span("op", 2, false, 1, vec![kv("http.method", "GET")])],
        ),
    );
    record(
        &mut aggregator,
        &request(
            vec![kv("service.name", "plain")],
            vec![span("op", 2, false, 1, vec![])],
        ),
    );
    let (out, _) = aggregator.snapshot(1).unwrap();
    let all = calls(&out);
    assert_eq!(all.len(), 2);
    let eu = all
        .iter()
        .find(|p| str_attr(&p.attributes, "service.name") == Some("eu"))
        .unwrap();
    assert_eq!(str_attr(&eu.attributes, "http.method"), Some("GET"));
    assert_eq!(str_attr(&eu.attributes, "region"), Some("eu-west"));
    assert_eq!(str_attr(&eu.attributes, "status.code"), None);
    let plain = all
        .iter()
        .find(|p| str_attr(&p.attributes, "service.name") == Some("plain"))
        .unwrap();
    assert_eq!(str_attr(&plain.attributes, "http.method"), None);
    assert_eq!(str_attr(&plain.attributes, "region"), Some("none"));
}

/// Scenario: nothing recorded, then a span whose resource has no service.name.
/// Guarantees: no request is emitted for an empty state; such spans are skipped, as in the
/// Collector.
#[test]
fn empty_and_nameless() {
    let mut aggregator = Aggregator::new(config(), SpanMetricsMetrics::unregistered());
    assert!(aggregator.snapshot(1).is_none());
    record(
        &mut aggregator,
        &request(vec![], vec![span("op", 2, false, 1, vec![])]),
    );
    assert!(aggregator.snapshot(2).is_none());
}

/// Scenario: an aggregator charged to a budget records spans of two new series, then the
/// same series again, then is dropped.
/// Guarantees: the budget grows when series are created (by at least their bucket counts)
/// and not when existing series are updated; dropping the aggregator returns every byte.
#[test]
fn state_is_charged_to_the_budget() {
    let budget = crate::limiter::MemoryBudget::new(64 << 20, 48 << 20);
    let mut aggregator =
        Aggregator::new(config(), SpanMetricsMetrics::unregistered()).charged_to(budget.clone());
    let shop = vec![kv("service.name", "shop")];
    record(
        &mut aggregator,
        &request(
            shop.clone(),
            vec![
                span("GET /a", 2, false, 5, vec![]),
                span("db", 3, false, 1, vec![]),
            ],
        ),
    );
    let after_two_series = budget.used();
    let buckets = config().histogram_buckets.len() + 1;
    assert!(
        after_two_series >= 2 * buckets * 8,
        "charged {after_two_series} bytes for two series of {buckets} buckets"
    );
    assert_eq!(aggregator.charged_bytes(), after_two_series);

    record(
        &mut aggregator,
        &request(shop, vec![span("GET /a", 2, false, 7, vec![])]),
    );
    assert_eq!(
        budget.used(),
        after_two_series,
        "an update allocates nothing new"
    );

    drop(aggregator);
    assert_eq!(budget.used(), 0);
}
