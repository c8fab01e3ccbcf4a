//! The export core: what every exporter runs on, whatever it sends and however.
//!
//! ```text
//! export(item) ─┬─> sending queue (memory: lanes of bounded channels; or disk) ─> consumers ─┐
//!               └─> inline (the caller's task) ───────────────────────────────────────────────┤
//!                                                                                             v
//!                       Deliver (the exporter's: one request per batch, or split per shard)
//!                                 └─> retry loop (backoff + jitter, RetryInfo / Retry-After)
//!                                          └─> Transport::send (one attempt)
//! ```
//!
//! The core is generic over the queued item (an OTLP batch, a shard of remote-write series)
//! and over the transport (OTLP/gRPC, OTLP/HTTP, remote write). Each item's fate is counted
//! on one path ([`state::Shared::settle`]): sent, failed for a named reason, or dropped at
//! the shutdown deadline; losses are logged rate-limited ([`events`]).
//!
//! Layers, each importing only those below it:
//!
//! | file | job |
//! |---|---|
//! | `segment.rs` | the persistent queue's file format |
//! | `crc_ranges.rs` | CRC-32 of many ranges of one buffer in one pass (segment recovery after damage) |
//! | `metrics.rs` | self-metrics families and handles |
//! | `error.rs` | [`ExporterError`](error::ExporterError), [`ExportError`](error::ExportError), [`DrainReport`](error::DrainReport) |
//! | `outcome.rs` | what one attempt, one delivery and one item's settlement came to |
//! | `events.rs` | log events: state transitions, rate-limited losses |
//! | `http.rs` | HTTP helpers both HTTP transports use (bounded body, error chain, `Retry-After`) |
//! | `status.rs` | the status classifiers, one per protocol family |
//! | `state.rs` | [`Shared`](state::Shared): intake, deadline, counters, the loss path, the drain report |
//! | `transport.rs` | the [`Transport`](transport::Transport) trait (one attempt) |
//! | `retry.rs` | backoff and the retry loop |
//! | `deliver.rs` | the [`Deliver`](deliver::Deliver) trait, and delivery of a batch as one request |
//! | `queue.rs` | the in-memory sending queue (lanes, consumers, drain) |
//! | `inline.rs` | the queue-less mode: delivery in the caller's task |
//! | `disk_queue.rs` | the persistent sending queue |

pub(crate) mod crc_ranges;
pub(crate) mod deliver;
pub(crate) mod disk_queue;
pub(crate) mod error;
pub(crate) mod events;
pub(crate) mod http;
pub(crate) mod inline;
pub(crate) mod metrics;
pub(crate) mod outcome;
pub(crate) mod queue;
pub(crate) mod retry;
pub(crate) mod segment;
pub(crate) mod state;
pub(crate) mod status;
pub(crate) mod transport;

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests;
