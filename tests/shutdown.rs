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
