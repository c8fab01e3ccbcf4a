//! The accounting identity: every accepted span is exported, not sampled, or dropped for a
//! named reason — nothing is unexplained.

use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

use crate::support::{self, OtlpSink, SinkBehavior};

/// The terms of `accepted = exported + not_sampled + dropped{reason} + held`, read from a
/// gateway's metrics.
#[derive(Debug)]
struct Accounts {
    accepted: f64,
    exported: f64,
    not_sampled: f64,
    dropped: f64,
    held: f64,
}

fn accounts(text: &str) -> Accounts {
    let value = |name: &str, labels: &[&str]| support::metric_value(text, name, labels);
    Accounts {
        accepted: value("otelcol_receiver_accepted_spans_total", &[]),
        exported: value("otelcol_exporter_sent_spans_total", &[]),
        not_sampled: value("tailgate_sampler_spans_total", &["outcome=\"not_sampled\""])
            + value(
                "tailgate_sampler_spans_total",
                &["outcome=\"dropped_by_policy\""],
            ),
        dropped: value("otelcol_exporter_send_failed_spans_total", &[])
            + value("otelcol_exporter_enqueue_failed_spans_total", &[])
            + value(
                "tailgate_sampler_spans_total",
                &["outcome=\"dropped_on_shutdown\""],
            ),
        held: value("tailgate_sampler_spans_held", &[]),
    }
}

fn gather(gateway_registry: &prometheus::Registry) -> String {
    let mut out = Vec::new();
    prometheus::Encoder::encode(
        &prometheus::TextEncoder::new(),
        &gateway_registry.gather(),
        &mut out,
    )
    .expect("encode metrics");
    String::from_utf8(out).expect("utf-8")
}

fn config(sink: std::net::SocketAddr, decision_wait: &str, drop_pending: bool) -> String {
    support::gateway_config(sink, "    retry_on_failure:\n      initial_interval: 50ms\n")
        .replace(
            "processors:\n  batch:",
            &format!(
                "processors:
  tail_sampling:
    decision_wait: {decision_wait}
    drop_pending_traces_on_shutdown: {drop_pending}
    policies:
      - {{name: errors, type: status_code, status_code: {{status_codes: [ERROR]}}}}
      - {{name: drop-health, type: drop, drop: {{drop_sub_policy: [{{name: health, type: string_attribute, string_attribute: {{key: http.route, values: [/healthz]}}}}]}}}}
      - {{name: baseline, type: probabilistic, probabilistic: {{sampling_percentage: 10}}}}
  batch:"
            ),
        )
        .replace("processors: [batch]", "processors: [tail_sampling, batch]")
}

/// 400 traces of 5 spans; every 10th is a health check (dropped by policy), every 13th
/// has an error.
fn requests() -> Vec<ExportTraceServiceRequest> {
    (0..40u64)
        .map(|request| ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: (0..10u64)
                        .flat_map(|t| {
                            let trace = request * 10 + t;
                            (0..5u64).map(move |s| {
                                let route = if trace % 10 == 0 { "/healthz" } else { "/api" };
                                Span {
                                    trace_id: (u128::from(trace) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)
                                        .to_be_bytes()
                                        .to_vec(),
                                    span_id: (trace * 8 + s + 1).to_be_bytes().to_vec(),
                                    parent_span_id: if s == 0 { vec![] } else { (trace * 8 + 1).to_be_bytes().to_vec() },
                                    name: format!("op-{s}"),
                                    attributes: vec![opentelemetry_proto::tonic::common::v1::KeyValue {
                                        key: "http.route".into(),
                                        key_strindex: 0,
                                        value: Some(opentelemetry_proto::tonic::common::v1::AnyValue {
                                            value: Some(opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(route.into())),
                                        }),
                                    }],
                                    status: (trace % 13 == 0 && s == 3).then(|| Status { code: 2, message: "x".into() }),
                                    ..Default::default()
                                }
                            })
                        })
                        .collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        })
        .collect()
}

async fn run(decision_wait: &str, drop_pending: bool) -> (Accounts, usize) {
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let gateway = support::start_gateway(&config(sink.addr, decision_wait, drop_pending)).await;
    let mut client =
        TraceServiceClient::connect(format!("http://{}", support::grpc_addr(&gateway)))
            .await
            .expect("connect");
    for request in requests() {
        client.export(request).await.expect("accepted");
    }
    // No wait: each export was answered after admission, and the drain decides what the
    // sampler still holds (or drops and counts it, with drop_pending).
    let registry = gateway.registry.clone();
    let report = gateway.shutdown_within(Duration::from_secs(10)).await;
    assert!(report.completed || drop_pending, "{report:?}");
    (accounts(&gather(&registry)), sink.handle.span_count())
}

/// Scenario: 2,000 spans through errors + drop(health checks) + 10%, decided before the
/// gateway shuts down.
/// Guarantees: accepted = exported + not_sampled + dropped, with nothing held and nothing
/// dropped; the exporter's count equals what the sink received.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_accepted_span_is_accounted_for() {
    let (accounts, received) = run("200ms", false).await;
    assert_eq!(accounts.accepted, 2000.0);
    assert_eq!(accounts.held, 0.0);
    assert_eq!(accounts.dropped, 0.0, "{accounts:?}");
    assert_eq!(accounts.exported, received as f64);
    assert!(
        accounts.not_sampled > 0.0 && accounts.exported > 0.0,
        "{accounts:?}"
    );
    assert_eq!(
        accounts.accepted,
        accounts.exported + accounts.not_sampled + accounts.dropped + accounts.held,
        "{accounts:?}"
    );
}

/// Scenario: the same load, but the gateway shuts down before any decision is due, with
/// drop_pending_traces_on_shutdown set.
/// Guarantees: the pending spans are counted as dropped on shutdown, so the identity
/// still holds and nothing is exported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_dropped_at_shutdown_are_counted() {
    let (accounts, received) = run("1h", true).await;
    assert_eq!(received, 0);
    assert_eq!(accounts.dropped, 2000.0, "{accounts:?}");
    assert_eq!(
        accounts.accepted,
        accounts.exported + accounts.not_sampled + accounts.dropped + accounts.held,
        "{accounts:?}"
    );
}
