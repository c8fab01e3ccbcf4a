//! The load generator behind `tailgate-loadgen`: realistic OTLP traces, sent to any OTLP
//! endpoint over gRPC, HTTP/protobuf or HTTP/JSON, with the ground truth written beside.
//!
//! # What it generates
//!
//! [`Generator`] makes traces of a [`Shape`] from a seed: the same seed gives the same
//! traces, ids included (only the timestamps follow the clock: each trace ends when it is
//! generated). The default shape is a Kubernetes operator's reconcile, six spans in two
//! services with about ten attributes each, the traffic tailgate's users send. A share of
//! traces carries an ERROR status on one span (`error_ratio`), a share has a root longer
//! than one second (`slow_ratio`).
//!
//! # How it sends
//!
//! [`run`] paces generation to a rate (or goes as fast as the endpoint accepts), packs
//! spans into requests of `batch_spans`, and hands requests to `connections` workers, each
//! with one request in flight. A share of traces (`split_ratio`) is split: part of its
//! spans is held back for `lateness` and sent in a later request, usually on another
//! connection, as spans of one trace reach a gateway from several pods. Retryable refusals
//! (gRPC `UNAVAILABLE` / `RESOURCE_EXHAUSTED`, HTTP 429/502/503/504) are retried with
//! bounded, jittered backoff that honours `RetryInfo` / `Retry-After`, and counted.
//!
//! # Bounds
//!
//! A run needs a span count or a duration, and is cut in any case at its duration (or
//! ten minutes) plus the lateness plus one minute; attempts per request are bounded.

mod generate;
mod run;
mod send;

#[cfg(test)]
mod tests;

pub use generate::{
    GeneratedSpan, GeneratedTrace, Generator, GeneratorConfig, GeneratorError, MAX_FANOUT_SPANS,
    STATUS_CODE_ERROR, Service, Shape, TraceTruth, build_request, hex,
};
pub use run::{DEFAULT_MAX_TIME, Latency, LoadConfig, LoadError, Summary, run};
pub use send::{
    EndpointError, Outcome, Protocol, SendConfig, Sender, classify_grpc, classify_http,
    parse_retry_after,
};
