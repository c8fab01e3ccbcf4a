//! The bottom layer every stage builds on: the payloads that flow along the pipeline's
//! edges and the edges themselves. It imports no stage; receivers, the sampler, the
//! batcher, connectors and exporters depend on it, and the wiring (`pipeline`, `service`,
//! `shutdown`) sits on top of them.
//!
//! - [`TraceBatch`] and [`MetricsBatch`]: an encoded OTLP request and its item count,
//!   generic through [`Payload`] (whose [`Payload::SIGNAL`] is a [`Signal`]).
//! - [`Charge`] (from the limiter): bytes held against the one memory budget for as long
//!   as a batch lives.
//! - [`Sink`]: a pipeline's entry side, which admits a batch into all of a receiver's
//!   pipelines or into none.
//! - [`Downstream`], [`Consumer`], [`ExporterFanout`]: where a stage's output goes.
//! - [`GiveUp`], [`LossCounter`]: how stages stop waiting at the shutdown deadline and
//!   count, once, every item they give up.
//!
//! Pipeline errors and their wire mapping are in [`crate::error`], below this layer too.

mod batch;
mod edge;
mod give_up;
mod sink;

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests;

pub use batch::{Inspected, MetricsBatch, Payload, TraceBatch, Transcoded};
pub use edge::{BoxFuture, Consumer, Downstream, ExporterFanout, Lost, SharedConsumer, Target};
pub use give_up::{GiveUp, GiveUpSignal, LossCounter};
pub use sink::{
    ADMISSION_WAIT, Arrival, DirectEntry, HAND_OFF_HEADER, MetricsSink, PipelineInput,
    RETRY_AFTER_FULL, Sink, TracesSink, Undelivered,
};

pub use crate::config::Signal;
// `Charge` lives with the budget (the limiter's reservations turn into one); it is
// re-exported here, beside the payload types that carry it.
pub use crate::limiter::Charge;
