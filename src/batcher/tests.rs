use std::num::NonZeroUsize;
use std::time::Duration;

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::sync::mpsc;

use super::*;
use crate::limiter::MemoryBudget;

fn config(size: usize, max: Option<usize>, timeout_ms: u64) -> BatchConfig {
    BatchConfig {
        send_batch_size: NonZeroUsize::new(size).expect("non-zero"),
        send_batch_max_size: max.and_then(NonZeroUsize::new),
        send_batch_max_bytes: NonZeroUsize::new(4 << 20).expect("non-zero"),
        timeout: Duration::from_millis(timeout_ms),
    }
}

/// A request of `spans` spans whose names are `{tag}-{i}`.
fn request(tag: &str, spans: usize) -> TraceBatch {
    let request = crate::otlp::one_scope_request(
        (0..spans)
            .map(|i| Span {
                trace_id: vec![1; 16],
                span_id: vec![2; 8],
                name: format!("{tag}-{i}"),
                ..Default::default()
            })
            .collect(),
    );
    TraceBatch::new(Bytes::from(request), spans)
}

fn span_names(batch: &TraceBatch) -> Vec<String> {
    let decoded = ExportTraceServiceRequest::decode(batch.request.clone()).expect("valid request");
    decoded
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .map(|s| s.name.clone())
        .collect()
}

fn start(config: BatchConfig) -> (mpsc::Sender<TraceBatch>, mpsc::Receiver<TraceBatch>) {
    let (in_tx, in_rx) = mpsc::channel(16);
    let (out_tx, out_rx) = mpsc::channel(16);
    let batcher = Batcher::new(
        config,
        BatchMetrics::unregistered(),
        MemoryBudget::unlimited(),
    );
    tokio::spawn(batcher.run(in_rx, Downstream::stage(out_tx)));
    (in_tx, out_rx)
}

/// Scenario: three requests of 4 spans reach a batcher with send_batch_size 10.
/// Guarantees: one batch of 12 spans leaves as soon as the size is reached, and it decodes
/// to the spans of all three requests in arrival order.
#[tokio::test(start_paused = true)]
async fn sends_when_size_is_reached() {
    let (input, mut output) = start(config(10, None, 10_000));
    for tag in ["a", "b", "c"] {
        input.send(request(tag, 4)).await.expect("batcher running");
    }
    let batch = output.recv().await.expect("a batch");
    assert_eq!(batch.span_count, 12);
    let names = span_names(&batch);
    assert_eq!(names.len(), 12);
    assert_eq!(names[0], "a-0");
    assert_eq!(names[4], "b-0");
    assert_eq!(names[11], "c-3");
}

/// Scenario: a small request waits in a batcher with a 200ms timeout.
/// Guarantees: nothing leaves before the timeout, the partial batch leaves right after it.
#[tokio::test(start_paused = true)]
async fn sends_partial_batch_on_timeout() {
    let (input, mut output) = start(config(8192, None, 200));
    input.send(request("a", 2)).await.expect("batcher running");
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(output.try_recv().is_err(), "nothing before the timeout");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let batch = output.try_recv().expect("sent after the timeout");
    assert_eq!(batch.span_count, 2);
}

/// Scenario: requests totalling more than send_batch_max_size arrive.
/// Guarantees: no batch exceeds the maximum, and every span leaves exactly once, in order.
#[tokio::test(start_paused = true)]
async fn never_exceeds_max_size() {
    let (input, mut output) = start(config(5, Some(7), 10_000));
    input.send(request("a", 4)).await.expect("running");
    input.send(request("b", 20)).await.expect("running");
    drop(input);
    let mut names = Vec::new();
    while let Some(batch) = output.recv().await {
        assert!(batch.span_count <= 7, "batch of {} spans", batch.span_count);
        let batch_names = span_names(&batch);
        assert_eq!(batch_names.len(), batch.span_count);
        names.extend(batch_names);
    }
    let expected: Vec<String> = (0..4)
        .map(|i| format!("a-{i}"))
        .chain((0..20).map(|i| format!("b-{i}")))
        .collect();
    assert_eq!(names, expected);
}

/// Scenario: the input closes while a partial batch is pending (shutdown).
/// Guarantees: the partial batch is flushed before the task ends.
#[tokio::test(start_paused = true)]
async fn flushes_on_close() {
    let (input, mut output) = start(config(8192, None, 60_000));
    input.send(request("a", 3)).await.expect("running");
    drop(input);
    let batch = output.recv().await.expect("flushed");
    assert_eq!(batch.span_count, 3);
    assert!(output.recv().await.is_none());
}

/// Scenario: downstream stops taking batches.
/// Guarantees: the batcher stops reading its input, so senders see a full queue
/// (backpressure) rather than the batcher dropping data.
#[tokio::test(start_paused = true)]
async fn pushes_back_when_downstream_is_full() {
    let (in_tx, in_rx) = mpsc::channel(1);
    let (out_tx, mut out_rx) = mpsc::channel(1);
    let batcher = Batcher::new(
        config(1, None, 10),
        BatchMetrics::unregistered(),
        MemoryBudget::unlimited(),
    );
    tokio::spawn(batcher.run(in_rx, Downstream::stage(out_tx)));
    let mut accepted = 0;
    for _ in 0..10 {
        match tokio::time::timeout(Duration::from_millis(50), in_tx.send(request("x", 1))).await {
            Ok(Ok(())) => accepted += 1,
            _ => break,
        }
    }
    assert!(
        accepted < 10,
        "input must fill up while downstream is blocked"
    );
    let mut received = 0;
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(50), out_rx.recv()).await {
        received += 1;
    }
    assert_eq!(
        received, accepted,
        "everything accepted is delivered once drained"
    );
}

/// Scenario: charged requests are batched, joined, and the joined batch is consumed.
/// Guarantees: the budget counts the bytes while they are held (pending or in the
/// joined batch) and is back to zero once the consumer drops the batch: nothing leaks.
#[tokio::test(start_paused = true)]
async fn charges_follow_the_bytes() {
    let budget = MemoryBudget::unlimited();
    let (in_tx, in_rx) = mpsc::channel(16);
    let (out_tx, mut out_rx) = mpsc::channel(16);
    let batcher = Batcher::new(
        config(100, None, 1000),
        BatchMetrics::unregistered(),
        budget.clone(),
    );
    tokio::spawn(batcher.run(in_rx, Downstream::stage(out_tx)));
    let first = request("a", 3).charged(&budget);
    let second = request("b", 3).charged(&budget);
    let total = first.byte_len() + second.byte_len();
    in_tx.send(first).await.expect("running");
    in_tx.send(second).await.expect("running");
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(budget.used(), total, "pending bytes stay charged");
    drop(in_tx);
    let joined = out_rx.recv().await.expect("flushed on close");
    assert_eq!(
        budget.used(),
        joined.byte_len(),
        "the joined copy is charged, the parts released"
    );
    drop(joined);
    assert_eq!(budget.used(), 0);
}
