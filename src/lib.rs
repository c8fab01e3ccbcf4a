//! tailgate: a tail-sampling OTLP gateway.
//!
//! # Layout
//!
//! The modules follow the data flow, receivers first:
//!
//! - [`config`]: the Collector-style YAML, parsed and validated once at startup into the
//!   typed sections each component receives.
//! - [`otlp`]: the OTLP wire reader and writer. Spans travel as their encoded bytes; this
//!   module walks requests, re-frames spans under their resource and scope, and transcodes
//!   OTLP/JSON to protobuf at the edge.
//! - [`limiter`]: the one memory budget every held byte is charged to.
//! - [`receiver`]: OTLP traces and metrics over gRPC (`:4317`) and HTTP (`:4318`).
//! - [`pipeline`]: the graph that joins receivers, processors, connectors and exporters, for
//!   traces and metrics, and the payload types that flow along its edges.
//! - [`connector`]: components that join pipelines: `forward`, and `spanmetrics` (RED
//!   metrics from every span, before sampling).
//! - [`sampler`]: the `tail_sampling` processor: the trace buffer, decision timing and
//!   caches, and the policies.
//! - [`batcher`]: the `batch` processor, size- and time-triggered.
//! - [`exporter`]: the sending queue, retries, and the OTLP (gRPC/HTTP) and debug exporters,
//!   for traces and metrics.
//! - [`telemetry`]: self-metrics, the health endpoint and logging.
//! - [`service`]: binds the ports and starts every stage from a config: the wiring.
//! - [`shutdown`]: the staged drain protocol.
//! - [`error`]: pipeline errors and the one mapping to gRPC and HTTP status.
//! - [`net`]: listening sockets and the HTTP serve loop shared by every endpoint.
//! - [`loadgen`]: not a stage: the load generator behind `tailgate-loadgen`, which sends
//!   realistic OTLP traces to any endpoint for the benches and load tests.

pub mod batcher;
pub mod config;
pub mod connector;
pub mod error;
pub mod exporter;
pub mod limiter;
pub mod loadgen;
pub mod net;
pub mod otlp;
pub mod pipeline;
pub mod receiver;
pub mod sampler;
pub mod service;
pub mod shutdown;
pub mod telemetry;
