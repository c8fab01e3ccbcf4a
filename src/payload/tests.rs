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
        _arrival: Arrival,
    ) -> Result<(), PipelineError> {
        self.with_views.store(views.is_some(), Ordering::SeqCst);
        self.taken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(batch.span_count);
        Ok(())
    }
}

/// A directly fed pipeline `name` whose stage records what it takes.
fn direct_entry(name: &str) -> (PipelineInput<TraceBatch>, Arc<RecordingEntry>) {
    let entry = Arc::new(RecordingEntry::default());
    let input = PipelineInput::Direct {
        id: pipeline(name),
        entry: entry.clone(),
    };
    (input, entry)
}

fn queue(name: &str, capacity: usize) -> (PipelineInput<TraceBatch>, mpsc::Receiver<TraceBatch>) {
    queue_reading_views(name, capacity, false)
}

fn queue_reading_views(
    name: &str,
    capacity: usize,
    wants_views: bool,
) -> (PipelineInput<TraceBatch>, mpsc::Receiver<TraceBatch>) {
    let (sender, receiver) = mpsc::channel(capacity);
    (
        PipelineInput::Queue {
            id: pipeline(name),
            sender,
            wants_views,
        },
        receiver,
    )
}

/// A pipeline queue of capacity 1 already holding a batch of 1 span.
fn full_queue(name: &str) -> (PipelineInput<TraceBatch>, mpsc::Receiver<TraceBatch>) {
    let (input, receiver) = queue(name, 1);
    let PipelineInput::Queue { sender, .. } = &input else {
        unreachable!()
    };
    sender.try_send(batch(1)).unwrap();
    (input, receiver)
}

/// Scenario: a sink over two queues and a direct entry; every input has room.
/// Guarantees: each pipeline gets the batch once; queued copies carry one charge of the
/// request's bytes, released when the last copy is dropped.
#[tokio::test(start_paused = true)]
async fn every_pipeline_gets_the_batch_and_the_charge_is_shared() {
    let budget = MemoryBudget::new(1 << 20, 1 << 19);
    let (a, mut a_rx) = queue("traces/a", 1);
    let (b, mut b_rx) = queue("traces/b", 1);
    let (direct, entry) = direct_entry("traces/c");
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
    let (direct, entry) = direct_entry("traces/s");
    let sink = Sink::new(vec![direct], budget.clone());
    sink.accept_with_views(batch(1), Some(Vec::new()), Arrival::Sent)
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
    let (a, mut a_rx) = full_queue("traces/a");
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

fn loss_counter() -> (LossCounter, prometheus::IntCounter) {
    let counter = prometheus::IntCounter::new("lost_total", "test").unwrap();
    (LossCounter::new(counter.clone()), counter)
}

/// Scenario: a connector delivers into a pipeline whose queue has closed.
/// Guarantees: `deliver` fails at once rather than waiting forever, and the batch's
/// items are counted as lost exactly once.
#[tokio::test(start_paused = true)]
async fn deliver_into_a_stopped_pipeline_fails_and_counts() {
    let budget = MemoryBudget::new(1 << 20, 1 << 19);
    let (a, a_rx) = queue("traces/a", 1);
    drop(a_rx);
    let (lost, counter) = loss_counter();
    let (_signal, give_up) = GiveUp::new(lost.clone());
    let sink = Sink::new(vec![a], budget).with_give_up(give_up);
    let delivered = tokio::time::timeout(Duration::from_secs(1), sink.deliver(batch(3))).await;
    assert!(matches!(delivered, Ok(Err(Undelivered::Closed))));
    assert_eq!(counter.get(), 3);
    assert_eq!(lost.total(), 3);
}

/// Scenario: a connector waits on a full pipeline when the shutdown gives up.
/// Guarantees: `deliver` returns `GaveUp` and counts the batch's items once; the queue
/// never receives it.
#[tokio::test(start_paused = true)]
async fn deliver_gives_up_at_the_signal() {
    let budget = MemoryBudget::new(1 << 20, 1 << 19);
    let (a, mut a_rx) = full_queue("traces/a");
    let (lost, counter) = loss_counter();
    let (signal, give_up) = GiveUp::new(lost);
    let sink = Sink::new(vec![a], budget).with_give_up(give_up);
    let delivering = tokio::spawn(async move { sink.deliver(batch(5)).await });
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(!delivering.is_finished());
    signal.raise();
    assert!(matches!(
        delivering.await.unwrap(),
        Err(Undelivered::GaveUp)
    ));
    assert_eq!(counter.get(), 5);
    assert_eq!(a_rx.recv().await.unwrap().span_count, 1);
    assert!(a_rx.try_recv().is_err());
}

/// Scenario: a stage sends into a downstream whose queue has closed.
/// Guarantees: the send fails with the batch's items, counted as lost once.
#[tokio::test(start_paused = true)]
async fn downstream_counts_what_it_could_not_send() {
    let (sender, receiver) = mpsc::channel::<TraceBatch>(1);
    drop(receiver);
    let (lost, counter) = loss_counter();
    let (_signal, give_up) = GiveUp::new(lost);
    let output = Downstream::stage(sender).with_give_up(give_up);
    assert_eq!(output.send(batch(4)).await, Err(Lost { items: 4 }));
    assert_eq!(counter.get(), 4);
}

/// Scenario: a stage waits on a full queue downstream when the shutdown gives up; a
/// later send after the signal.
/// Guarantees: the waiting send fails and counts its items; a send after the signal fails
/// at once even though room has freed, so nothing is handed on past the deadline.
#[tokio::test(start_paused = true)]
async fn downstream_gives_up_at_the_signal() {
    let (sender, mut receiver) = mpsc::channel::<TraceBatch>(1);
    sender.try_send(batch(1)).unwrap();
    let (lost, counter) = loss_counter();
    let (signal, give_up) = GiveUp::new(lost);
    let output = Downstream::stage(sender).with_give_up(give_up);
    let waiting = tokio::spawn({
        let output = output.clone();
        async move { output.send(batch(6)).await }
    });
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(!waiting.is_finished());
    signal.raise();
    assert_eq!(waiting.await.unwrap(), Err(Lost { items: 6 }));
    assert_eq!(receiver.recv().await.unwrap().span_count, 1);
    assert_eq!(output.send(batch(2)).await, Err(Lost { items: 2 }));
    assert_eq!(counter.get(), 8);
}

/// A consumer that takes batches until told to block, then waits forever.
struct Gate {
    open: bool,
    taken: Mutex<usize>,
}

impl Consumer<TraceBatch> for Gate {
    fn consume(&self, batch: TraceBatch) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if !self.open {
                std::future::pending::<()>().await;
            }
            *self.taken.lock().unwrap_or_else(|e| e.into_inner()) += batch.span_count;
        })
    }
}

/// Scenario: a pipeline's end fans out to three consumers; the second never has room;
/// the shutdown gives up.
/// Guarantees: the first consumer got the batch; the batch is counted as lost once for
/// each consumer that did not get it (two), so per-consumer accounting stays exact.
#[tokio::test(start_paused = true)]
async fn fanout_counts_each_missed_consumer() {
    let first = Arc::new(Gate {
        open: true,
        taken: Mutex::new(0),
    });
    let blocked = Arc::new(Gate {
        open: false,
        taken: Mutex::new(0),
    });
    let third = Arc::new(Gate {
        open: true,
        taken: Mutex::new(0),
    });
    let id = |name: &str| crate::config::ComponentId {
        written: name.to_owned(),
        kind: name.to_owned(),
        name: None,
    };
    let fanout = ExporterFanout::new(vec![
        (id("a"), first.clone() as SharedConsumer<TraceBatch>),
        (id("b"), blocked.clone()),
        (id("c"), third.clone()),
    ]);
    let (lost, counter) = loss_counter();
    let (signal, give_up) = GiveUp::new(lost);
    let output = Downstream::exporters(fanout).with_give_up(give_up);
    let sending = tokio::spawn(async move { output.send(batch(10)).await });
    tokio::time::sleep(Duration::from_secs(10)).await;
    signal.raise();
    assert_eq!(sending.await.unwrap(), Err(Lost { items: 20 }));
    assert_eq!(counter.get(), 20);
    assert_eq!(*first.taken.lock().unwrap(), 10);
    assert_eq!(*third.taken.lock().unwrap(), 0);
}

/// Scenario: a load generator's request (300 spans over two resources) sent as OTLP/JSON,
/// transcoded for each signal's payload, then inspected the vouched way and the validating
/// way, with and without views.
/// Guarantees: traces are vouched for and the vouched inspection finds the validating
/// walk's items and views, correcting nothing; metrics are not vouched for (their output
/// is validated as before).
#[test]
fn vouched_inspection_finds_what_the_validating_walk_finds() {
    use crate::loadgen::{Generator, GeneratorConfig};

    let mut generator = Generator::new(GeneratorConfig::default(), 7).unwrap();
    let json = serde_json::to_vec(&generator.request(50, 1_767_225_600_000_000_000)).unwrap();
    let transcoded = TraceBatch::json_to_protobuf(&json).unwrap();
    assert_eq!(transcoded.vouched_items, Some(300));
    let request = Bytes::from(transcoded.request);
    for want_views in [false, true] {
        let vouched = TraceBatch::inspect_vouched(&request, 300, want_views).unwrap();
        let walked = TraceBatch::inspect(&request, want_views).unwrap();
        assert_eq!(vouched.items, walked.items);
        assert_eq!(vouched.views, walked.views);
        assert_eq!(vouched.views.is_some(), want_views);
        assert!(vouched.corrected.is_none());
    }
    let metrics = MetricsBatch::json_to_protobuf(br#"{"resourceMetrics":[]}"#).unwrap();
    assert_eq!(metrics.vouched_items, None);
}

/// A generated request of 300 spans over two resources, and its views.
fn request_with_views() -> (Bytes, <TraceBatch as Payload>::Views) {
    use crate::loadgen::{Generator, GeneratorConfig};
    use prost::Message;

    let mut generator = Generator::new(GeneratorConfig::default(), 11).unwrap();
    let request = Bytes::from(
        generator
            .request(50, 1_767_225_600_000_000_000)
            .encode_to_vec(),
    );
    let views = TraceBatch::inspect(&request, true).unwrap().views.unwrap();
    (request, views)
}

/// Scenario: a receiver's sink over a queue whose stages read views, a queue whose stages
/// do not, and a directly fed stage; a request is accepted with its views.
/// Guarantees: the sink asks for views; the direct stage gets them; the batch in the first
/// queue carries exactly them, their heap charged to the budget beside the request's
/// bytes; the batch in the other queue carries none; each charge is released with the
/// last copy that holds it.
#[tokio::test(start_paused = true)]
async fn views_travel_only_into_queues_that_read_them_and_are_charged() {
    let budget = MemoryBudget::new(1 << 30, 1 << 29);
    let (request, views) = request_with_views();
    let views_bytes = TraceBatch::views_heap_bytes(&views);
    assert!(
        views_bytes >= 300 * std::mem::size_of::<crate::otlp::SpanView>(),
        "{views_bytes}"
    );
    let (reading, mut reading_rx) = queue_reading_views("traces/in", 1, true);
    let (plain, mut plain_rx) = queue("traces/other", 1);
    let (direct, entry) = direct_entry("traces/s");
    let sink = Sink::new(vec![reading, plain, direct], budget.clone());
    assert!(sink.wants_views());

    let batch = TraceBatch::new(request.clone(), 300);
    sink.accept_with_views(batch, Some(views.clone()), Arrival::Sent)
        .await
        .unwrap();

    assert!(entry.with_views.load(Ordering::SeqCst));
    let carrying = reading_rx.try_recv().unwrap();
    let bare = plain_rx.try_recv().unwrap();
    assert_eq!(carrying.carried_views(), Some(&views));
    assert_eq!(bare.carried_views(), None);
    assert_eq!(budget.used(), request.len() + views_bytes);
    drop(carrying);
    assert_eq!(
        budget.used(),
        request.len(),
        "the views' charge goes with them"
    );
    drop(bare);
    assert_eq!(budget.used(), 0);

    let (plain, _plain_rx) = queue("traces/other", 1);
    assert!(!Sink::new(vec![plain], budget).wants_views());
}

/// Scenario: a batch that carries views is delivered by a connector (`forward`) into a
/// directly fed stage and into a queue whose stages do not read views.
/// Guarantees: the direct stage gets the carried views without being passed any; the
/// queue gets the batch without them.
#[tokio::test(start_paused = true)]
async fn a_connector_hands_carried_views_to_direct_stages_only() {
    let budget = MemoryBudget::new(1 << 30, 1 << 29);
    let (request, views) = request_with_views();
    let (plain, mut plain_rx) = queue("traces/other", 1);
    let (direct, entry) = direct_entry("traces/sampled");
    let sink = Sink::new(vec![direct, plain], budget.clone());
    let batch = TraceBatch::new(request, 300).carrying_views(views, Some(&budget));

    sink.deliver(batch).await.unwrap();

    assert!(entry.with_views.load(Ordering::SeqCst));
    assert_eq!(plain_rx.try_recv().unwrap().carried_views(), None);
}

/// A consumer that records whether each batch it took carried views.
#[derive(Default)]
struct ViewsProbe {
    reads_views: bool,
    carried: Mutex<Vec<bool>>,
}

impl Consumer<TraceBatch> for ViewsProbe {
    fn consume(&self, batch: TraceBatch) -> BoxFuture<'_, ()> {
        self.carried
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(batch.carried_views().is_some());
        Box::pin(std::future::ready(()))
    }

    fn reads_views(&self) -> bool {
        self.reads_views
    }
}

/// Scenario: a pipeline's end fans a batch carrying views out to a consumer that reads
/// them (span metrics, `forward` into a sampler) and one that does not (an exporter).
/// Guarantees: the fan-out reports that it reads views; only the reading consumer's copy
/// carries them, so an exporter's queue never holds them.
#[tokio::test(start_paused = true)]
async fn fanout_hands_views_only_to_consumers_that_read_them() {
    let budget = MemoryBudget::new(1 << 30, 1 << 29);
    let (request, views) = request_with_views();
    let reader = Arc::new(ViewsProbe {
        reads_views: true,
        ..ViewsProbe::default()
    });
    let exporter = Arc::new(ViewsProbe::default());
    let id = |name: &str| crate::config::ComponentId {
        written: name.to_owned(),
        kind: name.to_owned(),
        name: None,
    };
    let fanout = ExporterFanout::new(vec![
        (
            id("spanmetrics"),
            reader.clone() as SharedConsumer<TraceBatch>,
        ),
        (id("otlp"), exporter.clone()),
    ]);
    assert!(fanout.reads_views());
    let exporter_only = ExporterFanout::new(vec![(
        id("otlp"),
        exporter.clone() as SharedConsumer<TraceBatch>,
    )]);
    assert!(!exporter_only.reads_views());

    let batch = TraceBatch::new(request, 300).carrying_views(views, Some(&budget));
    fanout.send(batch).await;

    assert_eq!(*reader.carried.lock().unwrap(), vec![true]);
    assert_eq!(*exporter.carried.lock().unwrap(), vec![false]);
    assert_eq!(budget.used(), 0, "the views' charge is released");
}
