//! Unit tests of the wiring: the order pipelines are built in, and a graph built from the
//! built-in config carrying a request through a connector into the sampler.

use std::time::Duration;

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prometheus::Registry;
use prost::Message;

use super::build_pipelines;
use super::graph::downstream_first;
use crate::config::{ComponentId, DEFAULT_CONFIG, load_str};
use crate::limiter::MemoryBudget;
use crate::payload::{Arrival, Payload, TraceBatch};

fn order(yaml: &str) -> Vec<String> {
    let config = load_str(&[yaml]).unwrap();
    downstream_first(&config)
        .into_iter()
        .map(|id| id.to_string())
        .collect()
}

fn position(order: &[String], id: &str) -> usize {
    order.iter().position(|p| p == id).unwrap()
}

/// Scenario: the built-in config: `traces/in` feeds `traces/sampled` (forward) and
/// `metrics` (spanmetrics).
/// Guarantees: both fed pipelines are built before `traces/in`, so its connectors find
/// their entries.
#[test]
fn connectors_are_built_after_the_pipelines_they_feed() {
    let order = order(DEFAULT_CONFIG);
    assert_eq!(order.len(), 3, "{order:?}");
    assert!(position(&order, "traces/sampled") < position(&order, "traces/in"));
    assert!(position(&order, "metrics") < position(&order, "traces/in"));
}

/// Scenario: a chain of three traces pipelines joined by two forward connectors, listed
/// in the config in data-flow order.
/// Guarantees: they are built last-first: c, b, a.
#[test]
fn a_chain_of_forwards_is_built_from_its_end() {
    let yaml = format!(
        "
receivers:
  otlp:
    protocols:
      grpc:
exporters:
  debug:
connectors:
  forward/1:
  forward/2:
{CHAIN_OF_FORWARDS}      exporters: [debug]
"
    );
    assert_eq!(order(&yaml), vec!["traces/c", "traces/b", "traces/a"]);
}

/// The pipelines `traces/a` → `forward/1` → `traces/b` → `forward/2` → `traces/c`, in
/// data-flow order, up to `traces/c`'s receivers: the config that uses it ends `traces/c`.
const CHAIN_OF_FORWARDS: &str = "service:
  pipelines:
    traces/a:
      receivers: [otlp]
      exporters: [forward/1]
    traces/b:
      receivers: [forward/1]
      exporters: [forward/2]
    traces/c:
      receivers: [forward/2]
";

fn one_span_request(trace_byte: u8) -> Bytes {
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![Span {
                    trace_id: vec![trace_byte; 16],
                    span_id: vec![1; 8],
                    name: "op".to_owned(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    Bytes::from(request.encode_to_vec())
}

fn counter_sum(registry: &Registry, name: &str) -> f64 {
    registry
        .gather()
        .iter()
        .filter(|family| family.name() == name)
        .flat_map(|family| family.get_metric())
        .map(|metric| metric.get_counter().get_value())
        .sum()
}

/// Scenario: the graph of the built-in config; one request is admitted through the
/// `otlp` receiver's sink with its views.
/// Guarantees: the receiver's sink enters `traces/in` only and asks for views (span
/// metrics and the sampler behind `forward` read them); the `forward` connector carries
/// the spans into the tail sampler of `traces/sampled` (its new-trace counter counts the
/// trace).
#[tokio::test]
async fn forward_carries_a_request_into_the_sampler() {
    let config = load_str(&[DEFAULT_CONFIG]).unwrap();
    let registry = Registry::new();
    let budget = MemoryBudget::new(64 << 20, 48 << 20);
    let pipelines = build_pipelines(&config, &registry, &budget).unwrap();
    let (otlp, sink) = pipelines
        .traces_sinks
        .iter()
        .find(|(id, _)| id.written == "otlp")
        .unwrap();
    assert_eq!(
        pipelines.traces_sinks.len(),
        1,
        "only the receiver has a sink"
    );
    let _: &ComponentId = otlp;
    assert!(
        sink.wants_views(),
        "traces/in's queue carries views to span metrics and to the sampler"
    );

    let request = one_span_request(7);
    let views = TraceBatch::inspect(&request, true).unwrap().views;
    sink.accept_with_views(TraceBatch::new(request, 1), views, Arrival::Sent)
        .await
        .unwrap();

    let name = "otelcol_processor_tail_sampling_new_trace_id_received_total";
    for _ in 0..200 {
        if counter_sum(&registry, name) >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(counter_sum(&registry, name), 1.0);
}

/// Whether the `otlp` receiver's traces sink asks for views in the graph of `yaml`.
async fn receiver_wants_views(yaml: &str) -> bool {
    let config = load_str(&[yaml]).unwrap();
    let budget = MemoryBudget::new(64 << 20, 48 << 20);
    let pipelines = build_pipelines(&config, &Registry::new(), &budget).unwrap();
    let (_, sink) = pipelines
        .traces_sinks
        .iter()
        .find(|(id, _)| id.written == "otlp")
        .unwrap();
    sink.wants_views()
}

/// Scenario: graphs where a stage that reads views sits behind the receiver's queue
/// directly (span metrics, a load balancer), behind two `forward`s, behind a batch
/// processor, or nowhere.
/// Guarantees: the receiver asks for views exactly when a stage that reads them gets the
/// receiver's batches as they are: through connectors, not behind a processor that makes
/// batches of its own.
#[tokio::test]
async fn the_receiver_asks_for_views_when_a_stage_behind_its_queue_reads_them() {
    let head = "
receivers:
  otlp:
    protocols:
      grpc:
processors:
  batch:
  tail_sampling:
    policies:
      - name: all
        type: always_sample
exporters:
  debug:
connectors:
  forward/1:
  forward/2:
  spanmetrics:
";
    let chain = format!(
        "{head}{CHAIN_OF_FORWARDS}      processors: [tail_sampling]
      exporters: [debug]
"
    );
    assert!(
        receiver_wants_views(&chain).await,
        "two forwards, then the sampler"
    );
    let batched = format!(
        "{head}
service:
  pipelines:
    traces/in:
      receivers: [otlp]
      processors: [batch]
      exporters: [spanmetrics, debug]
    metrics:
      receivers: [spanmetrics]
      exporters: [debug]
"
    );
    assert!(
        !receiver_wants_views(&batched).await,
        "batches made by the batcher"
    );
    let unbatched = batched.replace("      processors: [batch]\n", "");
    assert!(receiver_wants_views(&unbatched).await, "span metrics");
    let plain = format!(
        "{head}
service:
  pipelines:
    traces/in:
      receivers: [otlp]
      exporters: [debug]
"
    );
    assert!(!receiver_wants_views(&plain).await, "an exporter only");
    let one_tier = include_str!("../../benches/configs/one-tier-single.yaml");
    assert!(
        receiver_wants_views(one_tier).await,
        "the load balancer routes by views"
    );
}
