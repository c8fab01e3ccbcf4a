//! Unit tests of the edges: all-or-none admission into a receiver's pipelines, and the
//! connector's wait for room.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::*;
use crate::config::PipelineId;
use crate::error::PipelineError;
use crate::limiter::MemoryBudget;

fn pipeline(name: &str) -> PipelineId {
    PipelineId {
        signal: Signal::Traces,
        written: name.to_owned(),
    }
}

fn batch(spans: usize) -> TraceBatch {
    TraceBatch::new(Bytes::from(vec![0u8; 100]), spans)
}

/// A directly fed entry that records what it took and can be made full.
#[derive(Debug, Default)]
struct RecordingEntry {
    full: AtomicBool,
    taken: Mutex<Vec<usize>>,
    with_views: AtomicBool,
}

impl DirectEntry<TraceBatch> for RecordingEntry {
    fn check_room(&self) -> Result<(), PipelineError> {
        if self.full.load(Ordering::SeqCst) {
            Err(PipelineError::Overloaded {
                reason: "test entry full",
                retry_after: RETRY_AFTER_FULL,
            })
        } else {
            Ok(())
        }
    }

    fn take(
        &self,
        batch: &TraceBatch,
        views: Option<&<TraceBatch as Payload>::Views>,
    ) -> Result<(), PipelineError> {
        self.with_views.store(views.is_some(), Ordering::SeqCst);
        self.taken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(batch.span_count);
        Ok(())
    }
}

fn queue(name: &str, capacity: usize) -> (PipelineInput<TraceBatch>, mpsc::Receiver<TraceBatch>) {
    let (sender, receiver) = mpsc::channel(capacity);
    (
        PipelineInput::Queue {
            id: pipeline(name),
            sender,
        },
        receiver,
    )
}

/// Scenario: a sink over two queues and a direct entry; every input has room.
/// Guarantees: each pipeline gets the batch once; queued copies carry one charge of the
/// request's bytes, released when the last copy is dropped.
#[tokio::test(start_paused = true)]
async fn every_pipeline_gets_the_batch_and_the_charge_is_shared() {
    let budget = MemoryBudget::new(1 << 20, 1 << 19);
    let (a, mut a_rx) = queue("traces/a", 1);
    let (b, mut b_rx) = queue("traces/b", 1);
    let entry = Arc::new(RecordingEntry::default());
    let direct = PipelineInput::Direct {
        id: pipeline("traces/c"),
        entry: entry.clone(),
    };
    let sink = Sink::new(vec![a, direct, b], budget.clone());
    assert!(sink.wants_views());

    sink.accept(batch(3)).await.unwrap();

    let from_a = a_rx.try_recv().unwrap();
    let from_b = b_rx.try_recv().unwrap();
    assert_eq!(from_a.span_count, 3);
    assert_eq!(from_b.span_count, 3);
    assert_eq!(*entry.taken.lock().unwrap(), vec![3]);
    assert_eq!(budget.used(), 100, "one charge for the shared buffer");
    drop(from_a);
    assert_eq!(budget.used(), 100);
    drop(from_b);
    assert_eq!(budget.used(), 0);
}

/// Scenario: the second of two queues is full for longer than the admission wait.
/// Guarantees: the request is refused retryably and the first queue receives nothing (all
/// or none); nothing stays charged.
#[tokio::test(start_paused = true)]
async fn a_full_queue_refuses_for_every_pipeline() {
    let budget = MemoryBudget::new(1 << 20, 1 << 19);
    let (a, mut a_rx) = queue("traces/a", 1);
    let (b, mut b_rx) = queue("traces/b", 1);
    let PipelineInput::Queue {
        sender: b_sender, ..
    } = &b
    else {
        unreachable!()
    };
    b_sender.try_send(batch(1)).unwrap(); // b is now full
    let sink = Sink::new(vec![a, b], budget.clone());

    let refused = sink.accept(batch(5)).await.unwrap_err();

    assert!(
        matches!(refused, PipelineError::Overloaded { .. }),
        "{refused:?}"
    );
    assert!(
        a_rx.try_recv().is_err(),
        "a must not receive a refused batch"
    );
    assert_eq!(
        b_rx.try_recv().unwrap().span_count,
        1,
        "only the earlier batch"
    );
    assert!(b_rx.try_recv().is_err());
    assert_eq!(budget.used(), 0);
}

/// Scenario: a direct entry is full while a queue has room.
/// Guarantees: refused before anything is sent; the queue receives nothing.
#[tokio::test(start_paused = true)]
async fn a_full_direct_entry_refuses_for_every_pipeline() {
    let budget = MemoryBudget::new(1 << 20, 1 << 19);
    let (a, mut a_rx) = queue("traces/a", 4);
    let entry = Arc::new(RecordingEntry::default());
    entry.full.store(true, Ordering::SeqCst);
    let direct = PipelineInput::Direct {
        id: pipeline("traces/s"),
        entry: entry.clone(),
    };
    let sink = Sink::new(vec![a, direct], budget);

    let refused = sink.accept(batch(2)).await.unwrap_err();

    assert!(matches!(refused, PipelineError::Overloaded { .. }));
    assert!(a_rx.try_recv().is_err());
    assert!(entry.taken.lock().unwrap().is_empty());
}

/// Scenario: a pipeline's queue has closed (its stage stopped).
/// Guarantees: the receiver is told the gateway is shutting down; the other pipeline
/// receives nothing.
#[tokio::test(start_paused = true)]
async fn a_closed_queue_is_shutting_down() {
    let budget = MemoryBudget::new(1 << 20, 1 << 19);
    let (a, mut a_rx) = queue("traces/a", 4);
    let (b, b_rx) = queue("traces/b", 4);
    drop(b_rx);
    let sink = Sink::new(vec![a, b], budget);

    let refused = sink.accept(batch(2)).await.unwrap_err();

    assert!(
        matches!(refused, PipelineError::ShuttingDown),
        "{refused:?}"
    );
    assert!(a_rx.try_recv().is_err());
}

/// Scenario: views are passed with the batch.
/// Guarantees: the direct entry receives them, and a sink without direct entries does
/// not ask for them.
#[tokio::test(start_paused = true)]
async fn views_reach_direct_entries() {
    let budget = MemoryBudget::new(1 << 20, 1 << 19);
    let entry = Arc::new(RecordingEntry::default());
    let direct = PipelineInput::Direct {
        id: pipeline("traces/s"),
        entry: entry.clone(),
    };
    let sink = Sink::new(vec![direct], budget.clone());
    sink.accept_with_views(batch(1), Some(&Vec::new()))
        .await
        .unwrap();
    assert!(entry.with_views.load(Ordering::SeqCst));

    let (a, _a_rx) = queue("traces/a", 1);
    assert!(!Sink::new(vec![a], budget).wants_views());
}

/// Scenario: a connector delivers into a queue that stays full for ten admission waits,
/// then frees a slot.
/// Guarantees: `deliver` waits instead of refusing, and the batch arrives once the slot
/// frees; a receiver's `accept` in the same state is refused.
#[tokio::test(start_paused = true)]
async fn deliver_waits_for_room() {
    let budget = MemoryBudget::new(1 << 20, 1 << 19);
    let (a, mut a_rx) = queue("traces/a", 1);
    let PipelineInput::Queue { sender, .. } = &a else {
        unreachable!()
    };
    sender.try_send(batch(1)).unwrap();
    let sink = Sink::new(vec![a], budget);
    assert!(sink.accept(batch(9)).await.is_err());

    let delivering = tokio::spawn({
        let sink = sink.clone();
        async move { sink.deliver(batch(7)).await }
    });
    tokio::time::sleep(ADMISSION_WAIT * 10).await;
    assert!(!delivering.is_finished(), "deliver must wait, not refuse");
    assert_eq!(a_rx.recv().await.unwrap().span_count, 1);
    delivering.await.unwrap().unwrap();
    assert_eq!(a_rx.recv().await.unwrap().span_count, 7);
}

/// Scenario: a connector delivers into a pipeline whose queue has closed.
/// Guarantees: `deliver` returns `DownstreamClosed` at once so the caller can count the
/// loss, rather than waiting forever.
#[tokio::test(start_paused = true)]
async fn deliver_into_a_stopped_pipeline_fails() {
    let budget = MemoryBudget::new(1 << 20, 1 << 19);
    let (a, a_rx) = queue("traces/a", 1);
    drop(a_rx);
    let sink = Sink::new(vec![a], budget);
    let delivered = tokio::time::timeout(Duration::from_secs(1), sink.deliver(batch(1))).await;
    assert!(matches!(delivered, Ok(Err(DownstreamClosed { .. }))));
}

/// Scenario: a stage sends into a downstream whose queue has closed.
/// Guarantees: the batch is handed back so its items can be counted as lost.
#[tokio::test(start_paused = true)]
async fn downstream_hands_back_what_it_could_not_send() {
    let (sender, receiver) = mpsc::channel::<TraceBatch>(1);
    drop(receiver);
    let lost = Downstream::Stage(sender).send(batch(4)).await.unwrap_err();
    assert_eq!(lost.span_count, 4);
}
