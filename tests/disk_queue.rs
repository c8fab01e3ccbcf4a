//! The persistent sending queue (`sending_queue.storage: file_storage/<name>`): batches
//! accepted while the destination is down survive a shutdown and a `kill -9`, and are
//! delivered exactly once after the next start.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

use crate::support::{self, OtlpSink, SinkBehavior};

/// A loopback address where nothing listens (the port was free a moment ago).
fn dead_address() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr")
}

/// A gateway config exporting to `endpoint` through a persistent queue in `dir`.
fn config(endpoint: &str, dir: &Path, metrics: &str, shutdown_timeout: &str) -> String {
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
processors:
  batch:
    send_batch_size: 50
    timeout: 20ms
exporters:
  otlp/tempo:
    endpoint: {endpoint}
    compression: none
    tls:
      insecure: true
    sending_queue:
      num_consumers: 2
      storage: file_storage/queue
    retry_on_failure:
      initial_interval: 50ms
      max_interval: 200ms
      max_elapsed_time: 0s
extensions:
  file_storage/queue:
    directory: {dir}
    create_directory: true
    fsync: true
service:
  extensions: [file_storage/queue]
  shutdown_timeout: {shutdown_timeout}
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlp/tempo]
  telemetry:
    metrics:
      address: {metrics}
"#,
        dir = dir.display(),
    )
}

/// `count` spans with span ids `first..first+count` (big-endian in the last 4 bytes), in
/// one request.
fn spans(first: u32, count: u32) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: (first..first + count)
                    .map(|n| {
                        let mut span_id = vec![0, 0, 0, 1];
                        span_id.extend_from_slice(&n.to_be_bytes());
                        Span {
                            trace_id: [&[7u8; 12][..], &n.to_be_bytes()].concat(),
                            span_id,
                            name: format!("queued-{n}"),
                            ..Default::default()
                        }
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Sends `requests` requests of `per_request` spans each; every one must be accepted.
async fn send(address: &str, requests: u32, per_request: u32) {
    let mut client = TraceServiceClient::connect(format!("http://{address}"))
        .await
        .expect("connect");
    for r in 0..requests {
        client
            .export(spans(r * per_request, per_request))
            .await
            .expect("accepted");
    }
}

/// How many times each span id arrived at `sink`.
fn arrivals(sink: &OtlpSink) -> BTreeMap<Vec<u8>, usize> {
    let mut seen = BTreeMap::new();
    for span in sink.handle.spans() {
        *seen.entry(span.span.span_id).or_default() += 1;
    }
    seen
}

/// Waits (at most 20 s) until the gateway's exporter has sent `spans` spans and its queue
/// holds nothing: every record on disk is done, so no further delivery (a duplicate
/// included) can follow.
async fn wait_delivered(gateway: &tailgate::service::Gateway, spans: f64) -> bool {
    support::eventually(Duration::from_secs(20), || async {
        let text = support::scrape(gateway).await;
        let exporter = ["exporter=\"otlp/tempo\""];
        support::metric_value(&text, "otelcol_exporter_sent_spans_total", &exporter) == spans
            && support::metric_value(&text, "otelcol_exporter_queue_size", &exporter) == 0.0
    })
    .await
}

/// Files named `*.seg` under `dir`, recursively, with their sizes.
fn segment_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            total += segment_bytes(&path);
        } else if path.extension().is_some_and(|e| e == "seg") {
            total += entry.metadata().map(|m| m.len()).unwrap_or(0);
        }
    }
    total
}

/// Scenario: a gateway whose exporter has a file_storage queue and whose destination is
/// down accepts 400 spans, then shuts down with a 300ms shutdown_timeout. A second gateway
/// starts on the same directory with the destination up.
/// Guarantees: the first gateway delivers nothing and counts nothing as dropped (the spans
/// are on disk: `tailgate_exporter_queue_persisted_items_total` is 400, segment files
/// hold them, and `tailgate_exporter_queue_disk_limit_bytes` shows the default
/// `max_size_mib`); the second replays them (`tailgate_exporter_queue_replayed_items_total`
/// 400) and every span arrives exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_spans_survive_a_shutdown_and_arrive_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue_dir = dir.path().join("queue");
    let down = dead_address().to_string();
    let gateway = support::start_gateway(&config(&down, &queue_dir, "127.0.0.1:0", "300ms")).await;
    let address = support::grpc_addr(&gateway).to_string();
    send(&address, 8, 50).await;
    let persisted = support::eventually(Duration::from_secs(10), || async {
        let text = support::scrape(&gateway).await;
        support::metric_value(
            &text,
            "tailgate_exporter_queue_persisted_items_total",
            &["exporter=\"otlp/tempo\""],
        ) == 400.0
    })
    .await;
    assert!(persisted, "{}", support::scrape(&gateway).await);
    let text = support::scrape(&gateway).await;
    assert!(
        support::metric_value(
            &text,
            "tailgate_exporter_queue_disk_bytes",
            &["exporter=\"otlp/tempo\""]
        ) > 0.0
    );
    assert_eq!(
        support::metric_value(
            &text,
            "tailgate_exporter_queue_disk_limit_bytes",
            &["exporter=\"otlp/tempo\""]
        ),
        f64::from(1024u32 << 20),
        "the limit is max_size_mib's default"
    );
    let report = gateway.shutdown().await;
    assert_eq!(report.delivered_spans, 0);
    assert_eq!(report.dropped_spans, 0, "what is on disk is not dropped");
    assert!(segment_bytes(&queue_dir) > 400 * 20, "spans are on disk");

    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let gateway = support::start_gateway(&config(
        &sink.addr.to_string(),
        &queue_dir,
        "127.0.0.1:0",
        "5s",
    ))
    .await;
    let delivered = wait_delivered(&gateway, 400.0).await;
    assert!(
        delivered,
        "only {} spans arrived\n{}",
        sink.handle.span_count(),
        support::scrape(&gateway).await
    );
    // Sent (400) equals received: nothing arrived twice, and nothing is left to send.
    assert_eq!(sink.handle.span_count(), 400);
    let seen = arrivals(&sink);
    assert_eq!(seen.len(), 400, "every span arrives");
    assert!(seen.values().all(|&n| n == 1), "no span arrives twice");
    let text = support::scrape(&gateway).await;
    let exporter = ["exporter=\"otlp/tempo\""];
    assert_eq!(
        support::metric_value(
            &text,
            "tailgate_exporter_queue_replayed_items_total",
            &exporter
        ),
        400.0
    );
    assert_eq!(
        support::metric_value(&text, "otelcol_exporter_sent_spans_total", &exporter),
        400.0
    );
    assert_eq!(
        support::metric_value(
            &text,
            "tailgate_exporter_queue_corrupt_records_total",
            &exporter
        ),
        0.0
    );
    let report = gateway.shutdown().await;
    assert_eq!(report.dropped_spans, 0);
}

/// The `*.seg` files under `dir`, recursively.
fn segment_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(segment_files(&path));
        } else if path.extension().is_some_and(|e| e == "seg") {
            files.push(path);
        }
    }
    files
}

/// Scenario: 4 batches of 50 spans queued on disk with the destination down and the
/// gateway shut down; one byte in the middle of the segment file is flipped; a new gateway
/// starts on the directory with the destination up.
/// Guarantees: the damaged record is skipped and counted once
/// (`tailgate_exporter_queue_corrupt_records_total` 1), the gateway does not crash, and
/// the other 3 batches (150 spans) arrive exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_record_is_skipped_and_counted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let down = dead_address().to_string();
    let gateway = support::start_gateway(&config(&down, dir.path(), "127.0.0.1:0", "300ms")).await;
    let address = support::grpc_addr(&gateway).to_string();
    send(&address, 4, 50).await;
    let exporter = ["exporter=\"otlp/tempo\""];
    let persisted = support::eventually(Duration::from_secs(10), || async {
        let text = support::scrape(&gateway).await;
        support::metric_value(
            &text,
            "tailgate_exporter_queue_persisted_items_total",
            &exporter,
        ) == 200.0
    })
    .await;
    assert!(persisted);
    let _ = gateway.shutdown().await;

    let files = segment_files(dir.path());
    let damaged = files
        .iter()
        .max_by_key(|path| std::fs::metadata(path).map(|m| m.len()).unwrap_or(0))
        .expect("a segment");
    let mut data = std::fs::read(damaged).expect("read segment");
    let middle = data.len() / 2;
    data[middle] ^= 0x5a;
    std::fs::write(damaged, &data).expect("write segment");

    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let gateway = support::start_gateway(&config(
        &sink.addr.to_string(),
        dir.path(),
        "127.0.0.1:0",
        "5s",
    ))
    .await;
    let delivered = wait_delivered(&gateway, 150.0).await;
    assert!(
        delivered,
        "only {} spans arrived\n{}",
        sink.handle.span_count(),
        support::scrape(&gateway).await
    );
    assert_eq!(sink.handle.span_count(), 150, "sent equals received");
    let seen = arrivals(&sink);
    assert_eq!(seen.len(), 150);
    assert!(seen.values().all(|&n| n == 1));
    let text = support::scrape(&gateway).await;
    assert_eq!(
        support::metric_value(
            &text,
            "tailgate_exporter_queue_corrupt_records_total",
            &exporter
        ),
        1.0
    );
    assert_eq!(
        support::metric_value(
            &text,
            "tailgate_exporter_queue_replayed_items_total",
            &exporter
        ),
        150.0
    );
    let _ = gateway.shutdown().await;
}

/// Scenario: a persistent queue limited to 2 batches (`queue_size: 2`), the destination
/// down, and a client sending 5 batches of 50 spans through a gateway; the test waits until
/// the receiver has accepted 3 of them and the queue has persisted 100 spans.
/// Guarantees: the queue holds exactly `queue_size` batches (`otelcol_exporter_queue_size`
/// 2, `otelcol_exporter_queue_capacity` 2) and has persisted no more than 2 batches (100
/// spans) although a third was accepted upstream: a full queue makes export wait instead
/// of dropping, and nothing is counted as dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_queue_waits_instead_of_dropping() {
    let dir = tempfile::tempdir().expect("temp dir");
    let down = dead_address().to_string();
    let yaml = config(&down, dir.path(), "127.0.0.1:0", "300ms")
        .replace("num_consumers: 2", "num_consumers: 1\n      queue_size: 2");
    let gateway = support::start_gateway(&yaml).await;
    let address = support::grpc_addr(&gateway).to_string();
    // Each request is one batch of 50; the client call returns once the pipeline took it.
    let sender = tokio::spawn(async move { send(&address, 5, 50).await });
    let exporter = ["exporter=\"otlp/tempo\""];
    // Three batches past the receiver, two of them on disk: the third is at the queue.
    let full = support::eventually(Duration::from_secs(20), || async {
        let text = support::scrape(&gateway).await;
        support::metric_value(&text, "otelcol_receiver_accepted_spans_total", &[]) >= 150.0
            && support::metric_value(
                &text,
                "tailgate_exporter_queue_persisted_items_total",
                &exporter,
            ) >= 100.0
    })
    .await;
    let text = support::scrape(&gateway).await;
    assert!(full, "{text}");
    assert_eq!(
        support::metric_value(&text, "otelcol_exporter_queue_capacity", &exporter),
        2.0
    );
    assert_eq!(
        support::metric_value(&text, "otelcol_exporter_queue_size", &exporter),
        2.0
    );
    let persisted = support::metric_value(
        &text,
        "tailgate_exporter_queue_persisted_items_total",
        &exporter,
    );
    assert_eq!(persisted, 100.0, "{text}");
    assert_eq!(
        support::metric_value(&text, "tailgate_spans_dropped_total", &[]),
        0.0
    );
    sender.abort();
    let _ = gateway.shutdown().await;
}

/// A running tailgate binary.
struct Running {
    child: Child,
    /// Its gRPC receiver address.
    grpc: String,
    /// Its `/metrics` address.
    metrics: String,
    log: std::thread::JoinHandle<Vec<String>>,
}

/// Starts the tailgate binary with the config `make_config(metrics_address)` written to
/// `config_path`. The metrics port is picked free beforehand, so another process may take
/// it first: a start that fails is retried with a new port, at most 3 times.
fn spawn_tailgate(config_path: &Path, make_config: impl Fn(&str) -> String) -> Running {
    let mut failures = Vec::new();
    for _ in 0..3 {
        let metrics = dead_address().to_string();
        std::fs::write(config_path, make_config(&metrics)).expect("write config");
        let mut child = Command::new(env!("CARGO_BIN_EXE_tailgate"))
            .args(["--config", config_path.to_str().expect("utf-8")])
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped())
            .spawn()
            .expect("tailgate starts");
        let stderr = child.stderr.take().expect("stderr piped");
        let (address_tx, address_rx) = std::sync::mpsc::channel();
        let log = std::thread::spawn(move || {
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
        match address_rx.recv_timeout(Duration::from_secs(20)) {
            Ok(grpc) => {
                return Running {
                    child,
                    grpc,
                    metrics,
                    log,
                };
            }
            Err(error) => {
                let _ = child.kill();
                let _ = child.wait();
                let lines = log.join().unwrap_or_default();
                failures.push(format!("{error}: {}", lines.join("\n")));
            }
        }
    }
    panic!("tailgate did not start:\n{}", failures.join("\n---\n"));
}

/// Scrapes `http://{metrics}/metrics` for `name{exporter="otlp/tempo"}`.
async fn scrape_value(metrics: &str, name: &str) -> f64 {
    let (status, text) = support::reqwest_get(&format!("http://{metrics}/metrics")).await;
    if status != 200 {
        return -1.0;
    }
    support::metric_value(&text, name, &["exporter=\"otlp/tempo\""])
}

/// Scenario: the tailgate binary with a persistent queue (fsync on) and its destination
/// down accepts 300 spans; once the queue reports them written, the process is killed
/// with SIGKILL. It is started again on the same directory with the destination up.
/// Guarantees: every acknowledged span arrives, and none twice (the kill came after the
/// writes were acknowledged and before any delivery); the restarted process reports them
/// as replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_no_acknowledged_span() {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue_dir = dir.path().join("queue");
    let config_path = dir.path().join("config.yaml");
    let down = dead_address().to_string();
    let Running {
        mut child,
        grpc,
        metrics,
        log,
    } = spawn_tailgate(&config_path, |metrics| {
        config(&down, &queue_dir, metrics, "5s")
    });
    send(&grpc, 6, 50).await;
    let written = support::eventually(Duration::from_secs(20), || {
        let metrics = metrics.clone();
        async move {
            scrape_value(&metrics, "tailgate_exporter_queue_persisted_items_total").await == 300.0
        }
    })
    .await;
    assert!(written, "the queue reports 300 spans written");
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let _ = log.join();

    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let sink_address = sink.addr.to_string();
    let Running {
        mut child,
        metrics,
        log,
        ..
    } = spawn_tailgate(&config_path, |metrics| {
        config(&sink_address, &queue_dir, metrics, "5s")
    });
    // Sent 300 and nothing left on disk: no further delivery, a duplicate included, can
    // follow.
    let arrived = support::eventually(Duration::from_secs(20), || {
        let metrics = metrics.clone();
        async move {
            scrape_value(&metrics, "otelcol_exporter_sent_spans_total").await == 300.0
                && scrape_value(&metrics, "otelcol_exporter_queue_size").await == 0.0
        }
    })
    .await;
    let replayed = scrape_value(&metrics, "tailgate_exporter_queue_replayed_items_total").await;
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let exited = support::eventually(Duration::from_secs(15), || {
        let status = child.try_wait().expect("wait works");
        async move { status.is_some() }
    })
    .await;
    if !exited {
        let _ = child.kill();
    }
    let _ = child.wait();
    let lines = log.join().expect("log reader");
    assert!(
        arrived,
        "only {} of 300 spans arrived; log:\n{}",
        sink.handle.span_count(),
        lines.join("\n")
    );
    assert_eq!(sink.handle.span_count(), 300, "sent equals received");
    let seen = arrivals(&sink);
    let duplicates: usize = seen.values().map(|n| n - 1).sum();
    assert_eq!(seen.len(), 300, "every acknowledged span arrives");
    assert_eq!(duplicates, 0, "no span arrives twice");
    assert_eq!(replayed, 300.0);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("exporter.queue.opened") && l.contains("replayed_items=300")),
        "{}",
        lines.join("\n")
    );
}
