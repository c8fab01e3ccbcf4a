//! tailgate: a tail-sampling OTLP gateway.
//!
//! # Layout
//!
//! Layers point down only; `tests/module_graph.rs` fails the test run on any module cycle.
//!
//! At the bottom, imported by every stage and importing none:
//!
//! - [`config`]: the Collector-style YAML, parsed and validated once at startup into the
//!   typed sections each component receives.
//! - [`otlp`]: the OTLP wire reader and writer. Spans travel as their encoded bytes; this
//!   module walks requests, re-frames spans under their resource and scope, and transcodes
//!   OTLP/JSON to protobuf at the edge.
//! - [`error`]: pipeline errors and the one mapping to gRPC and HTTP status.
//! - [`limiter`]: the one memory budget every held byte is charged to, and admission.
//! - [`payload`]: the batches that flow along the edges, their charges, and the edges
//!   themselves (sinks, downstreams, consumers).
//! - [`telemetry`]: self-metrics, the health endpoint and logging.
//! - [`net`]: listening sockets and the HTTP serve loop shared by every endpoint.
//!
//! The stages, in data-flow order:
//!
//! - [`receiver`]: OTLP traces and metrics over gRPC (`:4317`) and HTTP (`:4318`), in
//!   plaintext or TLS (`receiver::tls`: mTLS, certificate reload).
//! - [`sampler`]: the `tail_sampling` processor: the trace buffer, decision timing and
//!   caches, and the policies.
//! - [`batcher`]: the `batch` processor, size- and time-triggered.
//! - [`connector`]: components that join pipelines: `forward`, and `spanmetrics` (RED
//!   metrics from every span, before sampling).
//! - [`exporter`]: the export core (sending queue, retries, drain) under the OTLP
//!   (gRPC/HTTP), remote-write and debug exporters.
//!
//! The wiring, on top:
//!
//! - [`pipeline`]: builds the graph that joins receivers, processors, connectors and
//!   exporters from the config.
//! - [`service`]: binds the ports and starts every stage from a config.
//! - [`shutdown`]: the staged drain protocol.
//!
//! Beside the gateway, not a stage: [`loadgen`], the load generator behind
//! `tailgate-loadgen`, which sends realistic OTLP traces to any endpoint for the benches
//! and load tests.

pub mod batcher;
pub mod config;
pub mod connector;
pub mod error;
pub mod exporter;
pub(crate) mod hashed_positions;
pub mod limiter;
pub mod loadgen;
pub mod net;
pub mod otlp;
pub mod payload;
pub mod pipeline;
pub mod receiver;
pub mod sampler;
pub mod service;
pub mod shutdown;
pub mod telemetry;
