//! The batch processor's self-metrics, with the Collector's names.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Registry};

use crate::config::ComponentId;
use crate::payload::Payload;
use crate::telemetry::{counter_vec, registered};

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

/// The Collector's bucket bounds for `batch_send_size`.
const SIZE_BUCKETS: &[f64] = &[
    10.0, 25.0, 50.0, 75.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 2000.0, 3000.0, 4000.0, 5000.0,
    6000.0, 7000.0, 8000.0, 9000.0, 10000.0, 20000.0, 30000.0, 50000.0, 100000.0,
];

/// The families, registered once per registry; see [`BatchMetricFamilies::for_processor`].
#[derive(Clone)]
pub struct BatchMetricFamilies {
    send_size: HistogramVec,
    send_size_bytes: HistogramVec,
    size_trigger: IntCounterVec,
    timeout_trigger: IntCounterVec,
}

impl BatchMetricFamilies {
    /// Registers the families in `registry`.
    ///
    /// # Errors
    ///
    /// When they are already registered there.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let send_size = registered(
            registry,
            HistogramVec::new(
                HistogramOpts::new(
                    "otelcol_processor_batch_batch_send_size",
                    "Number of items (spans or data points) in each batch that was sent.",
                )
                .buckets(SIZE_BUCKETS.to_vec()),
                &["processor"],
            )?,
        )?;
        let send_size_bytes = registered(
            registry,
            HistogramVec::new(
                HistogramOpts::new(
                    "otelcol_processor_batch_batch_send_size_bytes",
                    "Encoded size in bytes of each batch that was sent.",
                )
                .buckets(prometheus::exponential_buckets(1024.0, 4.0, 10)?),
                &["processor"],
            )?,
        )?;
        let size_trigger = counter_vec(
            registry,
            (
                "otelcol_processor_batch_batch_size_trigger_send_total",
                "Number of times a batch was sent because it reached its size.",
            ),
            &["processor"],
        )?;
        let timeout_trigger = counter_vec(
            registry,
            (
                "otelcol_processor_batch_timeout_trigger_send_total",
                "Number of times a batch was sent because its timeout passed.",
            ),
            &["processor"],
        )?;
        Ok(Self {
            send_size,
            send_size_bytes,
            size_trigger,
            timeout_trigger,
        })
    }

    /// Handles bound to one processor id.
    pub fn for_processor(&self, id: &ComponentId) -> BatchMetrics {
        let label = [id.written.as_str()];
        BatchMetrics {
            send_size: self.send_size.with_label_values(&label),
            send_size_bytes: self.send_size_bytes.with_label_values(&label),
            size_trigger: self.size_trigger.with_label_values(&label),
            timeout_trigger: self.timeout_trigger.with_label_values(&label),
        }
    }
}

/// One batch processor's metric handles.
#[derive(Clone)]
pub struct BatchMetrics {
    send_size: prometheus::Histogram,
    send_size_bytes: prometheus::Histogram,
    size_trigger: prometheus::IntCounter,
    timeout_trigger: prometheus::IntCounter,
}

impl BatchMetrics {
    /// Handles registered nowhere, for tests.
    pub fn unregistered() -> Self {
        let registry = Registry::new();
        let families = BatchMetricFamilies::register(&registry)
            .unwrap_or_else(|error| unreachable!("fresh registry: {error}"));
        families.for_processor(&ComponentId {
            written: "batch".into(),
            kind: "batch".into(),
            name: None,
        })
    }

    pub(super) fn record_send<P: Payload>(&self, batch: &P, trigger: SendTrigger) {
        self.send_size.observe(batch.item_count() as f64);
        self.send_size_bytes.observe(batch.encoded_len() as f64);
        match trigger {
            SendTrigger::Size => self.size_trigger.inc(),
            SendTrigger::Timeout => self.timeout_trigger.inc(),
            SendTrigger::Shutdown => {}
        }
    }
}
