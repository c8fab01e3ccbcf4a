//! SIGTERM with data in flight: it is exported before the process exits.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

use crate::support::{self, OtlpSink, SinkBehavior};

/// Scenario: the tailgate binary holds 500 spans in a batch with a 60s timeout when it
/// receives SIGTERM.
/// Guarantees: it flushes the batch, the exporter delivers every span, and the process
/// exits with status 0 well before the batch timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exports_data_in_flight() {
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let config = support::gateway_config(sink.addr, "")
        .replace("timeout: 50ms", "timeout: 60s")
        .replace("send_batch_size: 512", "send_batch_size: 100000");
    sigterm_with_500_spans_held(config, &sink).await;
}

/// Scenario: the tail sampler's buffer is full (500 traces at `num_traces: 500`, due in an
/// hour) when the tailgate binary receives SIGTERM.
/// Guarantees: every buffered trace is decided (kept, by `always_sample`) and exported
/// before the process exits with status 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_decides_and_exports_a_full_buffer() {
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let config = support::gateway_config(sink.addr, "")
        .replace(
            "processors:\n  batch:",
            "processors:
  tail_sampling:
    decision_wait: 1h
    num_traces: 500
    block_on_overflow: true
    policies: [{name: all, type: always_sample}]
  batch:",
        )
        .replace("processors: [batch]", "processors: [tail_sampling, batch]");
    sigterm_with_500_spans_held(config, &sink).await;
}

/// Runs the binary with `config`, sends 500 spans in 500 traces, checks none has left
/// yet, sends SIGTERM, and checks that all 500 were exported before a clean exit.
async fn sigterm_with_500_spans_held(config: String, sink: &OtlpSink) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, config).expect("write config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tailgate"))
        .args(["--config", path.to_str().expect("utf-8")])
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("tailgate starts");

    // The log line announcing the gRPC receiver carries the port the OS chose.
    let stderr = child.stderr.take().expect("stderr piped");
    let (address_tx, address_rx) = std::sync::mpsc::channel();
    let log_reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("receiver.grpc.started")
                && let Some(endpoint) = line.split("endpoint=").nth(1)
            {
                let endpoint = endpoint.split_whitespace().next().unwrap_or("").to_owned();
                let _ = address_tx.send(endpoint);
            }
            lines.push(line);
        }
        lines
    });
    let address = address_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("gateway announces its gRPC port");

    let mut client = TraceServiceClient::connect(format!("http://{address}"))
        .await
        .expect("connect");
    for batch in 0..5u8 {
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: (0..100u8)
                        .map(|i| Span {
                            trace_id: [[batch + 1; 8], [i + 1; 8]].concat(),
                            span_id: vec![batch + 1, i + 1, 0, 0, 0, 0, 0, 1],
                            name: format!("inflight-{batch}-{i}"),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        client.export(request).await.expect("accepted");
    }
    assert_eq!(sink.handle.span_count(), 0, "held before the signal");

    let pid = child.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let exited = support::eventually(Duration::from_secs(30), || {
        let status = child.try_wait().expect("wait works");
        async move { status.is_some() }
    })
    .await;
    assert!(exited, "tailgate exits after SIGTERM");
    let status = child.wait().expect("exit status");
    let lines = log_reader.join().expect("log reader");
    assert!(
        status.success(),
        "exit status {status:?}; log:\n{}",
        lines.join("\n")
    );
    assert_eq!(
        sink.handle.span_count(),
        500,
        "every in-flight span exported before exit"
    );
    assert!(lines.iter().any(|l| l.contains("shutdown.finished")));
}

/// Sends requests of 50 spans over gRPC until the gateway refuses one or `max` were sent;
/// returns how many spans it accepted.
async fn send_until_refused(gateway: &tailgate::service::Gateway, max: u64) -> u64 {
    let mut client = TraceServiceClient::connect(format!("http://{}", support::grpc_addr(gateway)))
        .await
        .expect("connect");
    let mut accepted = 0;
    for request in 0..max {
        let spans = (0..50u64)
            .map(|s| Span {
                trace_id: (u128::from(request) * 64 + u128::from(s) + 1)
                    .to_be_bytes()
                    .to_vec(),
                span_id: (s + 1).to_be_bytes().to_vec(),
                name: "op".into(),
                ..Default::default()
            })
            .collect();
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        match client.export(request).await {
            Ok(_) => accepted += 50,
            Err(_) => break,
        }
    }
    accepted
}

/// The sum of a counter family over all label values, from a gateway's registry.
fn counter_total(registry: &prometheus::Registry, name: &str) -> u64 {
    registry
        .gather()
        .iter()
        .filter(|family| family.name() == name)
        .flat_map(|family| family.get_metric())
        .map(|metric| metric.get_counter().get_value() as u64)
        .sum()
}

/// Runs `config` against a sink that refuses everything, fills the gateway until it
/// refuses, drains with a one-second deadline and checks the accounting identity.
async fn deadline_identity(config: String) {
    let sink = OtlpSink::start(SinkBehavior::RefuseFor(Duration::from_secs(3600))).await;
    let gateway = support::start_gateway(&config.replace("SINK", &sink.addr.to_string())).await;
    let registry = gateway.registry.clone();
    let sent = send_until_refused(&gateway, 400).await;
    let accepted = counter_total(&registry, "otelcol_receiver_accepted_spans_total");
    assert_eq!(accepted, sent, "the client's count and the gateway's agree");
    assert!(accepted >= 500, "enough held to be lost: {accepted}");

    let report = gateway.shutdown_within(Duration::from_secs(1)).await;

    let delivered = sink.handle.span_count() as u64;
    let dropped = counter_total(&registry, "tailgate_spans_dropped_total");
    assert!(!report.completed, "{report:?}");
    assert_eq!(delivered, 0, "the sink refused everything");
    assert_eq!(
        dropped,
        accepted - delivered,
        "every accepted span not delivered is counted once: {report:?}"
    );
    assert_eq!(
        report.dropped_spans, dropped,
        "the report agrees with the counter"
    );
}

/// Scenario: a pipeline `batch -> otlp` whose backend refuses everything, a one-slot
/// sending queue, filled until the gateway refuses; then a drain with a one-second
/// deadline, far too short (the exporter keeps retrying).
/// Guarantees: at exit `tailgate_spans_dropped_total` equals exactly the spans accepted
/// and not delivered (held in the exporter's queue and retry, the batcher, the pipeline's
/// input queue), and the shutdown report says the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_too_short_counts_exactly_what_was_lost() {
    let config = support::gateway_config_with(
        "otlp/sink",
        "SINK",
        "    sending_queue:\n      queue_size: 1\n      num_consumers: 1\n",
    )
    .replace("send_batch_size: 512", "send_batch_size: 100");
    deadline_identity(config).await;
}

/// Scenario: as above, with the data passing a `forward` connector into a second traces
/// pipeline (`traces/in -> forward -> traces/out[batch] -> otlp`).
/// Guarantees: spans held by the connector's wait, both pipelines' queues and the batcher
/// are all counted: dropped equals accepted minus delivered exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_too_short_counts_across_a_connector() {
    let config = support::gateway_config_with(
        "otlp/sink",
        "SINK",
        "    sending_queue:\n      queue_size: 1\n      num_consumers: 1\n",
    )
    .replace("send_batch_size: 512", "send_batch_size: 100")
    .replace(
        "extensions:\n  health_check:",
        "connectors:\n  forward:\nextensions:\n  health_check:",
    )
    .replace(
        "    traces:\n      receivers: [otlp]\n      processors: [batch]\n      exporters: [otlp/sink]",
        "    traces/in:\n      receivers: [otlp]\n      exporters: [forward]\n    traces/out:\n      receivers: [forward]\n      processors: [batch]\n      exporters: [otlp/sink]",
    );
    assert!(config.contains("traces/out"), "{config}");
    deadline_identity(config).await;
}

/// Scenario: as above, with a tail sampler keeping every trace first in the pipeline
/// (`tail_sampling -> batch -> otlp`), so spans are held in its buffer, its late-span
/// outbox and its pending output when the deadline passes.
/// Guarantees: dropped equals accepted minus delivered exactly: the sampler's decided
/// output is counted when it is given up, nothing vanishes with the sampler's task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_too_short_counts_what_the_sampler_held() {
    let config = support::gateway_config_with(
        "otlp/sink",
        "SINK",
        "    sending_queue:\n      queue_size: 1\n      num_consumers: 1\n",
    )
    .replace(
        "processors:\n  batch:",
        "processors:
  tail_sampling:
    decision_wait: 100ms
    policies:
      - {name: all, type: always_sample}
  batch:",
    )
    .replace("send_batch_size: 512", "send_batch_size: 100")
    .replace("processors: [batch]", "processors: [tail_sampling, batch]");
    assert!(config.contains("[tail_sampling, batch]"), "{config}");
    deadline_identity(config).await;
}
