use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::metrics::v1::{
    ExponentialHistogram, Gauge, Histogram as OtlpHistogram, ResourceMetrics, ScopeMetrics, Sum,
    Summary, summary_data_point::ValueAtQuantile,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::*;

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
        ..KeyValue::default()
    }
}

fn options() -> Options {
    Options {
        target_info: true,
        add_metric_suffixes: true,
        ..Options::default()
    }
}

fn request(resource: Vec<KeyValue>, metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: resource,
                ..Resource::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "lib".to_owned(),
                    version: "1.2".to_owned(),
                    ..InstrumentationScope::default()
                }),
                metrics,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

fn metric(name: &str, unit: &str, data: Data) -> Metric {
    Metric {
        name: name.to_owned(),
        unit: unit.to_owned(),
        description: "help".to_owned(),
        data: Some(data),
        ..Metric::default()
    }
}

fn point(ms: u64, value: f64, attributes: Vec<KeyValue>) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        time_unix_nano: ms * 1_000_000,
        value: Some(number_data_point::Value::AsDouble(value)),
        ..NumberDataPoint::default()
    }
}

const CUMULATIVE: i32 = AggregationTemporality::Cumulative as i32;
const DELTA: i32 = AggregationTemporality::Delta as i32;

fn sum(monotonic: bool, temporality: i32, points: Vec<NumberDataPoint>) -> Data {
    Data::Sum(Sum {
        data_points: points,
        aggregation_temporality: temporality,
        is_monotonic: monotonic,
    })
}

fn gauge(points: Vec<NumberDataPoint>) -> Data {
    Data::Gauge(Gauge {
        data_points: points,
    })
}

/// `name{labels}` of a series, labels in order, for assertions.
fn render(series: &Series) -> String {
    let labels: Vec<String> = series
        .labels
        .iter()
        .filter(|(name, _)| *name != "__name__")
        .map(|(name, value)| format!("{name}={value:?}"))
        .collect();
    format!("{}{{{}}}", series.name(), labels.join(","))
}

fn find<'a>(t: &'a Translated, rendered: &str) -> &'a Series {
    t.series
        .iter()
        .find(|s| render(s) == rendered)
        .unwrap_or_else(|| {
            let all: Vec<String> = t.series.iter().map(render).collect();
            panic!("no series {rendered}; have {all:#?}")
        })
}

/// Asserts that the series rendered as `rendered` holds exactly the samples `expected`, as
/// (timestamp, value); a mismatch names the series.
fn assert_values(t: &Translated, rendered: &str, expected: &[(i64, f64)]) {
    assert_eq!(values(find(t, rendered)), expected, "{rendered}");
}

/// Asserts the `{family}_sum` and `{family}_count` series with `labels` hold one sample
/// each at `ms`: `sum` and `count`.
fn assert_sum_and_count(
    t: &Translated,
    family: &str,
    labels: &str,
    ms: i64,
    (sum, count): (f64, f64),
) {
    assert_values(t, &format!("{family}_sum{{{labels}}}"), &[(ms, sum)]);
    assert_values(t, &format!("{family}_count{{{labels}}}"), &[(ms, count)]);
}

fn values(series: &Series) -> Vec<(i64, f64)> {
    series
        .samples
        .iter()
        .map(|s| (s.timestamp, s.value))
        .collect()
}

/// Scenario: the otlptranslator name examples (name, unit, type, namespace, suffixes).
/// Guarantees: each normalizes to the documented Prometheus name.
#[test]
fn metric_name_golden() {
    use NameKind::{Counter, Gauge, Other};
    let cases = [
        ("requests", "", Counter, "", true, "requests_total"),
        ("requests_total", "", Counter, "", true, "requests_total"),
        (
            "http.requests",
            "1",
            Counter,
            "",
            true,
            "http_requests_total",
        ),
        ("items", "1", Counter, "", true, "items_total"),
        ("cpu_usage", "1", Gauge, "", true, "cpu_usage_ratio"),
        ("cpu_usage", "%", Gauge, "", true, "cpu_usage_percent"),
        (
            "response_time",
            "ms",
            Gauge,
            "",
            true,
            "response_time_milliseconds",
        ),
        (
            "http.request.duration",
            "ms",
            Other,
            "",
            true,
            "http_request_duration_milliseconds",
        ),
        (
            "response_time_seconds",
            "s",
            Gauge,
            "",
            true,
            "response_time_seconds",
        ),
        (
            "otelcol_process_cpu_seconds",
            "s",
            Counter,
            "",
            true,
            "otelcol_process_cpu_seconds_total",
        ),
        (
            "throughput",
            "By/s",
            Gauge,
            "",
            true,
            "throughput_bytes_per_second",
        ),
        ("requests", "1/s", Gauge, "", true, "requests_per_second"),
        (
            "requests",
            "1/s",
            Counter,
            "app",
            true,
            "app_requests_per_second_total",
        ),
        (
            "custom_metric",
            "{custom}",
            Gauge,
            "",
            true,
            "custom_metric",
        ),
        (
            "custom_metric",
            "By/{custom}",
            Gauge,
            "",
            true,
            "custom_metric_bytes",
        ),
        (
            "active_connections",
            "",
            Other,
            "",
            true,
            "active_connections",
        ),
        (
            "metric__with__multiple__underscores",
            "unit__multiple__underscores",
            Gauge,
            "",
            true,
            "metric_with_multiple_underscores_unit_multiple_underscores",
        ),
        (
            "123_requests",
            "",
            Counter,
            "app",
            true,
            "app_123_requests_total",
        ),
        ("123metric", "", Gauge, "", false, "_123metric"),
        (
            "metric@with#chars",
            "s",
            Gauge,
            "",
            false,
            "metric_with_chars",
        ),
        ("ratio_metric_ratio", "1", Gauge, "", true, "metric_ratio"),
    ];
    for (name, unit, kind, namespace, suffixes, expected) in cases {
        // "ratio_metric_ratio": every `ratio` token is removed, then one appended.
        let expected = if name == "ratio_metric_ratio" {
            "metric_ratio"
        } else {
            expected
        };
        assert_eq!(
            metric_name(name, unit, kind, namespace, suffixes).as_deref(),
            Some(expected),
            "{name} {unit}"
        );
    }
    assert_eq!(metric_name("___", "", NameKind::Gauge, "", true), None);
    assert_eq!(metric_name("", "", NameKind::Gauge, "", false), None);
}

/// Scenario: the otlptranslator label-name examples.
/// Guarantees: each maps to the documented label name, and unusable names to `None`.
#[test]
fn label_name_golden() {
    let cases = [
        ("http.method", Some("http_method")),
        (
            "label!with&special$chars)",
            Some("label_with_special_chars_"),
        ),
        (
            "label__with__double__underscores",
            Some("label_with_double_underscores"),
        ),
        ("trailing_underscores___", Some("trailing_underscores_")),
        ("__reserved__label__name__", Some("__reserved_label_name__")),
        ("123label", Some("key_123label")),
        (".foo", Some("_foo")),
        (
            "__label_starting_with_2underscores",
            Some("_label_starting_with_2underscores"),
        ),
        ("ようこそ", None),
        ("", None),
    ];
    for (name, expected) in cases {
        assert_eq!(sanitize_label_name(name).as_deref(), expected, "{name}");
    }
}

/// Scenario: a gauge, a monotonic cumulative sum, a non-monotonic sum and a delta sum from
/// one resource with service name, namespace and instance id.
/// Guarantees: gauge and up-down counter keep their names, the counter gets `_total`; every
/// series carries `job` = namespace/name, `instance`, and the scope labels; labels are sorted
/// and unique; the delta sum is counted as refused, not emitted; timestamps are in ms.
#[test]
fn number_types_and_identity() {
    let resource = vec![
        kv("service.name", "api"),
        kv("service.namespace", "shop"),
        kv("service.instance.id", "pod-1"),
    ];
    let req = request(
        resource,
        vec![
            metric("temperature", "Cel", gauge(vec![point(1000, 21.5, vec![])])),
            metric(
                "http.requests",
                "",
                sum(
                    true,
                    CUMULATIVE,
                    vec![point(2000, 7.0, vec![kv("method", "GET")])],
                ),
            ),
            metric(
                "queue.depth",
                "",
                sum(false, CUMULATIVE, vec![point(3000, -2.0, vec![])]),
            ),
            metric(
                "deltas",
                "",
                sum(
                    true,
                    DELTA,
                    vec![point(1, 1.0, vec![]), point(2, 1.0, vec![])],
                ),
            ),
        ],
    );
    let t = translate(&req, &options());
    let ident = r#"instance="pod-1",job="shop/api",otel_scope_name="lib",otel_scope_version="1.2""#;
    assert_values(
        &t,
        &format!("temperature_celsius{{{ident}}}"),
        &[(1000, 21.5)],
    );
    assert_values(
        &t,
        r#"http_requests_total{instance="pod-1",job="shop/api",method="GET",otel_scope_name="lib",otel_scope_version="1.2"}"#,
        &[(2000, 7.0)],
    );
    assert_values(&t, &format!("queue_depth{{{ident}}}"), &[(3000, -2.0)]);
    assert_eq!(t.dropped[DropReason::DeltaTemporality.index()], 2);
    assert_eq!(t.points(), 3);
    for s in &t.series {
        let names: Vec<&str> = s.labels.iter().map(|(name, _)| name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted, "sorted and unique");
        assert!(s.labels.iter().all(|(_, value)| !value.is_empty()));
    }
}

/// Scenario: attributes `a.b` and `a_b` (one label name), an empty-valued attribute, and an
/// external label that an attribute already sets.
/// Guarantees: colliding values are joined with `;` in the order of the original keys; the
/// empty value is dropped; the external label fills only absent names.
#[test]
fn label_collisions_empty_values_external_labels() {
    let mut opts = options();
    opts.external_labels = BTreeMap::from([
        ("cluster".to_owned(), "c1".to_owned()),
        ("a_b".to_owned(), "x".to_owned()),
    ]);
    let req = request(
        vec![],
        vec![metric(
            "g",
            "",
            gauge(vec![point(
                5,
                1.0,
                vec![kv("a_b", "2"), kv("a.b", "1"), kv("empty", "")],
            )]),
        )],
    );
    let t = translate(&req, &opts);
    find(
        &t,
        r#"g{a_b="1;2",cluster="c1",otel_scope_name="lib",otel_scope_version="1.2"}"#,
    );
}

/// Scenario: a histogram with bounds {1, 2}, counts [1, 1, 0], sum 3, and one without sum.
/// Guarantees: `_bucket` values are cumulative with `le` formatted as Go does and a `+Inf`
/// bucket equal to the count; `_sum` and `_count` follow; no `_sum` when the sum is unset;
/// the data point is counted once.
#[test]
fn histogram_buckets() {
    let hist = |sum: Option<f64>| {
        Data::Histogram(OtlpHistogram {
            data_points: vec![HistogramDataPoint {
                time_unix_nano: 9_000_000,
                count: 2,
                sum,
                bucket_counts: vec![1, 1, 0],
                explicit_bounds: vec![1.0, 2.0],
                ..HistogramDataPoint::default()
            }],
            aggregation_temporality: CUMULATIVE,
        })
    };
    let mut opts = options();
    opts.target_info = false;
    let req = request(
        vec![],
        vec![
            metric("histogram", "", hist(Some(3.0))),
            metric("nosum", "", hist(None)),
        ],
    );
    let t = translate(&req, &opts);
    let scope = r#"otel_scope_name="lib",otel_scope_version="1.2""#;
    for (le, v) in [("1", 1.0), ("2", 2.0), ("+Inf", 2.0)] {
        let bucket = format!(r#"histogram_bucket{{le="{le}",{scope}}}"#);
        assert_values(&t, &bucket, &[(9, v)]);
    }
    assert_sum_and_count(&t, "histogram", scope, 9, (3.0, 2.0));
    assert!(
        t.series
            .iter()
            .all(|s| render(s) != format!("nosum_sum{{{scope}}}"))
    );
    assert_eq!(t.points(), 2);
    assert_eq!(format_float(0.005), "0.005");
    assert_eq!(format_float(1000.0), "1000");
}

/// Scenario: a summary with quantiles 0.5/0.9/0.99 over observations 1, 2, 3.
/// Guarantees: one `quantile` series each, plus `_sum` 6 and `_count` 3, no `_total`.
#[test]
fn summary_quantiles() {
    let data = Data::Summary(Summary {
        data_points: vec![SummaryDataPoint {
            time_unix_nano: 1_000_000,
            count: 3,
            sum: 6.0,
            quantile_values: vec![
                ValueAtQuantile {
                    quantile: 0.5,
                    value: 2.0,
                },
                ValueAtQuantile {
                    quantile: 0.9,
                    value: 3.0,
                },
                ValueAtQuantile {
                    quantile: 0.99,
                    value: 3.0,
                },
            ],
            ..SummaryDataPoint::default()
        }],
    });
    let t = translate(
        &request(vec![], vec![metric("summary", "", data)]),
        &options(),
    );
    let scope = r#"otel_scope_name="lib",otel_scope_version="1.2""#;
    for (q, v) in [("0.5", 2.0), ("0.9", 3.0), ("0.99", 3.0)] {
        let quantile = format!(r#"summary{{{scope},quantile="{q}"}}"#);
        assert_values(&t, &quantile, &[(1, v)]);
    }
    assert_sum_and_count(&t, "summary", scope, 1, (6.0, 3.0));
}

/// Scenario: a gauge point flagged `NoRecordedValue` and a histogram point flagged so.
/// Guarantees: every emitted value is the StaleNaN bit pattern `0x7ff0000000000002`.
#[test]
fn no_recorded_value_is_stale_nan() {
    let mut p = point(10, 5.0, vec![]);
    p.flags = FLAG_NO_RECORDED_VALUE;
    let h = Data::Histogram(OtlpHistogram {
        data_points: vec![HistogramDataPoint {
            time_unix_nano: 10_000_000,
            count: 2,
            sum: Some(1.0),
            bucket_counts: vec![2, 0],
            explicit_bounds: vec![1.0],
            flags: FLAG_NO_RECORDED_VALUE,
            ..HistogramDataPoint::default()
        }],
        aggregation_temporality: CUMULATIVE,
    });
    let t = translate(
        &request(
            vec![],
            vec![metric("g", "", gauge(vec![p])), metric("h", "", h)],
        ),
        &options(),
    );
    assert_eq!(t.series.len(), 5);
    for s in &t.series {
        for sample in &s.samples {
            assert_eq!(sample.value.to_bits(), STALE_NAN_BITS, "{}", render(s));
        }
    }
}

/// Scenario: one resource with `service.name`, `service.instance.id` and two other
/// attributes, with points at 1s and 4s; the same without other attributes; the option off.
/// Guarantees: one `target_info` sample of value 1 at the latest timestamp, labelled with
/// the other attributes plus job and instance; none without other attributes or when off.
#[test]
fn target_info_per_resource() {
    let resource = vec![
        kv("service.name", "api"),
        kv("service.instance.id", "i-1"),
        kv("k8s.pod.name", "pod-a"),
        kv("host.name", "node-1"),
    ];
    let metrics = || {
        vec![metric(
            "g",
            "",
            gauge(vec![point(1000, 1.0, vec![]), point(4000, 2.0, vec![])]),
        )]
    };
    let t = translate(&request(resource.clone(), metrics()), &options());
    assert_values(
        &t,
        r#"target_info{host_name="node-1",instance="i-1",job="api",k8s_pod_name="pod-a"}"#,
        &[(4000, 1.0)],
    );
    let bare = translate(&request(resource[..2].to_vec(), metrics()), &options());
    assert!(
        bare.series
            .iter()
            .all(|s| !render(s).starts_with("target_info"))
    );
    let mut off = options();
    off.target_info = false;
    let t = translate(&request(resource, metrics()), &off);
    assert!(
        t.series
            .iter()
            .all(|s| !render(s).starts_with("target_info"))
    );
}

/// Scenario: points of one counter series given out of order, one timestamp twice.
/// Guarantees: one series whose samples are in strictly increasing timestamp order, the
/// duplicate keeping the later value, and every point accounted for.
#[test]
fn samples_merged_sorted_deduplicated() {
    let points = vec![
        point(3000, 3.0, vec![]),
        point(1000, 1.0, vec![]),
        point(2000, 2.0, vec![]),
        point(2000, 2.5, vec![]),
    ];
    let mut opts = options();
    opts.target_info = false;
    let t = translate(
        &request(vec![], vec![metric("c", "", sum(true, CUMULATIVE, points))]),
        &opts,
    );
    assert_eq!(t.series.len(), 1);
    assert_eq!(
        values(&t.series[0]),
        vec![(1000, 1.0), (2000, 2.5), (3000, 3.0)]
    );
    assert_eq!(t.points(), 4);
}

/// Scenario: a counter point with an exemplar carrying trace and span ids and an attribute.
/// Guarantees: the exemplar is attached with `trace_id`/`span_id` as lowercase hex, the
/// attribute as a label, its value and its timestamp in ms.
#[test]
fn exemplars_carry_trace_ids() {
    let mut p = point(1000, 1.0, vec![]);
    p.exemplars = vec![OtlpExemplar {
        filtered_attributes: vec![kv("user", "u1")],
        time_unix_nano: 999_000_000,
        span_id: vec![0xab; 8],
        trace_id: vec![0x01; 16],
        value: Some(exemplar::Value::AsDouble(0.25)),
    }];
    let t = translate(
        &request(
            vec![],
            vec![metric("c", "", sum(true, CUMULATIVE, vec![p]))],
        ),
        &options(),
    );
    let e = &t.series[0].exemplars[0];
    let labels: Vec<(&str, &str)> = e
        .labels
        .iter()
        .map(|l| (l.name.as_str(), l.value.as_str()))
        .collect();
    assert_eq!(
        labels,
        vec![
            ("span_id", "abababababababab"),
            ("trace_id", "01010101010101010101010101010101"),
            ("user", "u1"),
        ]
    );
    assert_eq!((e.value, e.timestamp), (0.25, 999));
}

/// Scenario: exponential histograms at scale 0 with a gap of one empty bucket and a gap of
/// three, at scale 10 (downscaled to 8), and at scale −5.
/// Guarantees: spans start at OTLP index + 1, short gaps are zero-filled, long gaps open a
/// new span, counts are delta-encoded; scale 10 merges 4 buckets into one at schema 8; scale
/// −5 is refused as invalid.
#[test]
fn exponential_histogram_to_native() {
    let point = |scale: i32, offset: i32, counts: Vec<u64>| ExponentialHistogramDataPoint {
        time_unix_nano: 2_000_000,
        count: counts.iter().sum::<u64>() + 1,
        sum: Some(10.0),
        scale,
        zero_count: 1,
        positive: Some(Buckets {
            offset,
            bucket_counts: counts,
        }),
        ..ExponentialHistogramDataPoint::default()
    };
    let h = native_histogram(&point(0, 0, vec![2, 0, 3, 0, 0, 0, 1])).unwrap();
    assert_eq!(h.schema, 0);
    assert_eq!(h.timestamp, 2);
    assert_eq!(h.count, Some(histogram::Count::CountInt(7)));
    assert_eq!(h.zero_count, Some(histogram::ZeroCount::ZeroCountInt(1)));
    assert_eq!(h.zero_threshold, DEFAULT_ZERO_THRESHOLD);
    assert_eq!(
        h.positive_spans,
        vec![
            BucketSpan {
                offset: 1,
                length: 3
            },
            BucketSpan {
                offset: 3,
                length: 1
            }
        ]
    );
    assert_eq!(h.positive_deltas, vec![2, -2, 3, -2]);

    let h = native_histogram(&point(10, 0, vec![1, 1, 1, 1, 5])).unwrap();
    assert_eq!(h.schema, 8);
    assert_eq!(
        h.positive_spans,
        vec![BucketSpan {
            offset: 1,
            length: 2
        }]
    );
    assert_eq!(h.positive_deltas, vec![4, 1]);

    assert!(native_histogram(&point(-5, 0, vec![1])).is_none());
    let data = Data::ExponentialHistogram(ExponentialHistogram {
        data_points: vec![point(-5, 0, vec![1])],
        aggregation_temporality: CUMULATIVE,
    });
    let t = translate(&request(vec![], vec![metric("e", "", data)]), &options());
    assert_eq!(t.dropped[DropReason::Invalid.index()], 1);
}

/// Scenario: attribute values of every AnyValue kind.
/// Guarantees: they read as pcommon's `AsString` writes them.
#[test]
fn attribute_values_as_strings() {
    use any_value::Value as V;
    let cases: Vec<(V, &str)> = vec![
        (V::BoolValue(true), "true"),
        (V::IntValue(-3), "-3"),
        (V::DoubleValue(1.5), "1.5"),
        (V::BytesValue(b"hi!?".to_vec()), "aGkhPw=="),
        (
            V::ArrayValue(opentelemetry_proto::tonic::common::v1::ArrayValue {
                values: vec![AnyValue {
                    value: Some(V::IntValue(1)),
                }],
            }),
            "[1]",
        ),
    ];
    for (value, expected) in cases {
        assert_eq!(
            any_value_string(Some(&AnyValue { value: Some(value) })),
            expected
        );
    }
}

/// The reference for [`Scratch::attribute_labels`], with owned strings: names sanitized,
/// empty values dropped, and values of attributes that map to one name joined with `;` in
/// the order of their original keys.
fn attribute_labels(attributes: &[KeyValue]) -> BTreeMap<String, String> {
    let mut named: Vec<(&str, String, String)> = attributes
        .iter()
        .filter_map(|kv| {
            let value = any_value_string(kv.value.as_ref());
            if value.is_empty() {
                return None;
            }
            Some((kv.key.as_str(), sanitize_label_name(&kv.key)?, value))
        })
        .collect();
    named.sort_by(|a, b| a.0.cmp(b.0));
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    for (_, name, value) in named {
        labels
            .entry(name)
            .and_modify(|v| {
                v.push(';');
                v.push_str(&value);
            })
            .or_insert(value);
    }
    labels
}

/// Scenario: attribute sets with duplicate keys, keys that sanitize to one name (`a.b`,
/// `a_b`, `a-b`), empty and non-string values, reserved, digit-first, unicode and
/// underscore-only keys, read through the per-request scratch (its name cache warm on the
/// second pass).
/// Guarantees: the labels are exactly those of `attribute_labels`, the owned reference
/// (same names, same joins in key order, same values).
#[test]
fn scratch_attribute_labels_match_the_reference() {
    use any_value::Value as V;
    let int = |key: &str, i: i64| KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(V::IntValue(i)),
        }),
        ..KeyValue::default()
    };
    let sets: Vec<Vec<KeyValue>> = vec![
        vec![
            kv("span.name", "GET /"),
            kv("span.kind", "SERVER"),
            int("status.code", 2),
        ],
        vec![
            kv("a.b", "1"),
            kv("a_b", "2"),
            kv("a-b", "3"),
            kv("a.b", "4"),
        ],
        vec![
            kv("k", "2"),
            kv("k", "1"),
            kv("empty", ""),
            kv("", "no name"),
        ],
        vec![
            kv("__reserved__", "r"),
            kv("__a__b__", "x"),
            kv("9lives", "cat"),
        ],
        vec![
            kv("ünïcode", "u"),
            kv("___", "only underscores"),
            kv("plain_name", "p"),
        ],
        vec![int("n", -7), kv("n", "seven"), kv("N", "upper")],
        vec![],
    ];
    let bump = Bump::new();
    let mut scratch = Scratch::new(&bump);
    for _ in 0..2 {
        for attributes in &sets {
            let mut got = Vec::new();
            scratch.attribute_labels(attributes, &mut got);
            let expected: Vec<(String, String)> =
                attribute_labels(attributes).into_iter().collect();
            let got: Vec<(String, String)> = got
                .into_iter()
                .map(|(n, v)| (n.to_owned(), v.to_owned()))
                .collect();
            assert_eq!(got, expected, "{attributes:?}");
        }
    }
}
