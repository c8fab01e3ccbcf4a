//! The `batch` processor: groups requests into batches by span count and time.
//!
//! Batches are built by concatenating encoded requests (protobuf concatenates repeated
//! fields, so the result is again one valid `ExportTraceServiceRequest`), never by
//! re-encoding spans. A request that alone exceeds `send_batch_max_size` spans or
//! `send_batch_max_size_bytes` bytes is cut by the wire framer
//! ([`crate::otlp::split_batch`]) first.
//!
//! Unlike the Collector's batch processor, the task waits for room downstream before it
//! reads more input, so a slow exporter pushes back to the receivers instead of its
//! errors being swallowed.

mod metrics;

pub use metrics::{BatchMetricFamilies, BatchMetrics};

use std::sync::Arc;

use bytes::BytesMut;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::config::BatchConfig;
use crate::limiter::MemoryBudget;
use crate::pipeline::{Downstream, TraceBatch};

/// Why a batch was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendTrigger {
    /// `send_batch_size` was reached (or a maximum would have been exceeded).
    Size,
    /// `timeout` passed since the batch's first item.
    Timeout,
    /// The input closed (shutdown): the partial batch is flushed.
    Shutdown,
}

/// One running `batch` processor.
pub struct Batcher {
    config: BatchConfig,
    metrics: BatchMetrics,
    budget: Arc<MemoryBudget>,
    pending: Vec<TraceBatch>,
    pending_spans: usize,
    pending_bytes: usize,
    deadline: Option<Instant>,
}

impl Batcher {
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
    pub async fn run(mut self, mut input: mpsc::Receiver<TraceBatch>, output: Downstream) {
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

    async fn add(&mut self, batch: TraceBatch, output: &Downstream) {
        if batch.is_empty() {
            return;
        }
        let max_spans = self.config.send_batch_max_size.map(|n| n.get());
        let max_bytes = self.config.send_batch_max_bytes.get();
        let over_spans = max_spans.is_some_and(|max| batch.span_count > max);
        let pieces = if over_spans || batch.byte_len() > max_bytes {
            match crate::otlp::split_batch(&batch, max_spans, max_bytes) {
                // The pieces share the original buffer, and so its charge.
                Ok(pieces) => pieces
                    .into_iter()
                    .map(|piece| TraceBatch {
                        charge: batch.charge.clone(),
                        ..piece
                    })
                    .collect(),
                // The receiver validated these bytes; a failure here is a bug. Keep the
                // data whole rather than lose it: an oversize batch may still be accepted.
                Err(error) => {
                    tracing::error!(event = "batch.split_failed", error = %error);
                    vec![batch]
                }
            }
        } else {
            vec![batch]
        };
        for piece in pieces {
            let spans_full =
                max_spans.is_some_and(|max| self.pending_spans + piece.span_count > max);
            let bytes_full = self.pending_bytes + piece.byte_len() > max_bytes;
            if !self.pending.is_empty() && (spans_full || bytes_full) {
                self.flush(output, SendTrigger::Size).await;
            }
            self.pending_spans += piece.span_count;
            self.pending_bytes += piece.byte_len();
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

    async fn flush(&mut self, output: &Downstream, trigger: SendTrigger) {
        self.deadline = None;
        if self.pending.is_empty() {
            return;
        }
        let batch = if self.pending.len() == 1 {
            self.pending.pop().unwrap_or_default()
        } else {
            let mut joined = BytesMut::with_capacity(self.pending_bytes);
            // The parts' buffers (and charges) are released as they are copied.
            for part in self.pending.drain(..) {
                joined.extend_from_slice(&part.request);
            }
            TraceBatch::new(joined.freeze(), self.pending_spans).charged(&self.budget)
        };
        self.pending_spans = 0;
        self.pending_bytes = 0;
        self.metrics.record_send(&batch, trigger);
        if !output.send(batch).await {
            tracing::error!(event = "batch.downstream_closed");
        }
    }
}

#[cfg(test)]
mod tests;
