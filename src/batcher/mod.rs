//! The `batch` processor: groups requests into batches by item count and time.
//!
//! One batcher serves every signal ([`Payload`]): spans in traces pipelines, data points in
//! metrics pipelines. Batches are built by concatenating encoded requests (protobuf
//! concatenates repeated fields, so the result is again one valid export request), never by
//! re-encoding items. A trace request that alone exceeds `send_batch_max_size` spans or
//! `send_batch_max_size_bytes` bytes is cut by the wire framer
//! ([`crate::otlp::split_batch`]) first; a metrics request is never cut, but is not joined
//! with others past those limits.
//!
//! Unlike the Collector's batch processor, the task waits for room downstream before it
//! reads more input, so a slow exporter pushes back to the receivers instead of its
//! errors being swallowed.

mod metrics;

pub use metrics::{BatchMetricFamilies, BatchMetrics, SendTrigger};

use std::sync::Arc;

use bytes::BytesMut;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::config::BatchConfig;
use crate::limiter::MemoryBudget;
use crate::payload::{Downstream, Payload, TraceBatch};

/// One running `batch` processor, for traces (the default) or metrics.
pub struct Batcher<P: Payload = TraceBatch> {
    config: BatchConfig,
    metrics: BatchMetrics,
    budget: Arc<MemoryBudget>,
    pending: Vec<P>,
    pending_spans: usize,
    pending_bytes: usize,
    deadline: Option<Instant>,
}

impl<P: Payload> Batcher<P> {
    /// A batcher with nothing pending, charging the batches it builds to `budget`.
    pub fn new(config: BatchConfig, metrics: BatchMetrics, budget: Arc<MemoryBudget>) -> Self {
        Self {
            config,
            metrics,
            budget,
            pending: Vec::new(),
            pending_spans: 0,
            pending_bytes: 0,
            deadline: None,
        }
    }

    /// Runs until `input` closes, then flushes what is pending and returns.
    ///
    /// Reads no input while a send downstream is waiting for room.
    pub async fn run(mut self, mut input: mpsc::Receiver<P>, output: Downstream<P>) {
        loop {
            let deadline = self.deadline;
            tokio::select! {
                biased;
                _ = async { tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)).await },
                    if deadline.is_some() =>
                {
                    self.flush(&output, SendTrigger::Timeout).await;
                }
                received = input.recv() => match received {
                    Some(batch) => self.add(batch, &output).await,
                    None => break,
                },
            }
        }
        self.flush(&output, SendTrigger::Shutdown).await;
    }

    async fn add(&mut self, batch: P, output: &Downstream<P>) {
        if batch.item_count() == 0 {
            return;
        }
        let max_spans = self.config.send_batch_max_size.map(|n| n.get());
        let max_bytes = self.config.send_batch_max_bytes.get();
        let over_spans = max_spans.is_some_and(|max| batch.item_count() > max);
        let pieces = if over_spans || batch.encoded_len() > max_bytes {
            batch.split(max_spans, max_bytes)
        } else {
            vec![batch]
        };
        for piece in pieces {
            let spans_full =
                max_spans.is_some_and(|max| self.pending_spans + piece.item_count() > max);
            let bytes_full = self.pending_bytes + piece.encoded_len() > max_bytes;
            if !self.pending.is_empty() && (spans_full || bytes_full) {
                self.flush(output, SendTrigger::Size).await;
            }
            self.pending_spans += piece.item_count();
            self.pending_bytes += piece.encoded_len();
            self.pending.push(piece);
            if self.pending_spans >= self.config.send_batch_size.get()
                || self.config.timeout.is_zero()
            {
                self.flush(output, SendTrigger::Size).await;
            } else if self.deadline.is_none() {
                self.deadline = Some(Instant::now() + self.config.timeout);
            }
        }
    }

    async fn flush(&mut self, output: &Downstream<P>, trigger: SendTrigger) {
        self.deadline = None;
        if self.pending.is_empty() {
            return;
        }
        let batch = match self.pending.pop() {
            Some(only) if self.pending.is_empty() => only,
            last => {
                let mut joined = BytesMut::with_capacity(self.pending_bytes);
                // The parts' buffers (and their charges) are released as they are copied.
                for part in self.pending.drain(..).chain(last) {
                    joined.extend_from_slice(part.request());
                }
                P::from_request(joined.freeze(), self.pending_spans).charged(&self.budget)
            }
        };
        self.pending_spans = 0;
        self.pending_bytes = 0;
        self.metrics.record_send(&batch, trigger);
        if let Err(lost) = output.send(batch).await {
            // Counted by the output; only the shutdown deadline leads here.
            tracing::debug!(event = "batch.undelivered", items = lost.items);
        }
    }
}

#[cfg(test)]
mod tests;
