//! The wiring: builds the running pipeline graph from the validated configuration.
//!
//! A pipeline is `receivers -> input -> processors -> exporters`, for traces or metrics.
//! The stages and the edges between them are defined below this module (the edges in
//! [`crate::payload`], the stages in their own modules); this module only joins them, so
//! the data flow can be read from [`build_pipelines`] alone. Every edge is bounded:
//!
//! - receivers admit a request into every pipeline they feed through a
//!   [`Sink`](crate::payload::Sink), which reserves room in each pipeline's input before
//!   sending to any, so a request is taken by all of its pipelines or by none, and a full
//!   input becomes a retryable refusal to the client instead of a drop;
//! - a processor task awaits room downstream
//!   ([`Downstream::send`](crate::payload::Downstream::send)) and stops reading its input
//!   meanwhile, which is how a slow exporter pushes back to the receivers;
//! - the end of a pipeline is a fan-out to its consumers: exporters, and connectors, which
//!   feed other pipelines (waiting for room in them, as an exporter's queue makes its
//!   caller wait).

mod graph;

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests;

pub use graph::{BuildError, DrainStages, PIPELINE_INPUT_CAPACITY, Pipelines, build_pipelines};
