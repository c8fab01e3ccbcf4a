//! The `loadbalancing` exporter (alias `load_balancing`): the front tier of a tail-sampling
//! tier. Every span goes to the backend that owns its trace id on a consistent-hash ring,
//! so that all spans of a trace reach one sampler.
//!
//! | file | job |
//! |---|---|
//! | `ring.rs` | the consistent-hash ring: trace id to backend, stable across replicas |
//! | `metrics.rs` | `otelcol_loadbalancer_*` |
//! | `dns.rs` | `resolver.dns`: the task that resolves the backends every interval |
//! | `exporter.rs` | one OTLP/gRPC exporter per backend on the export core; splitting a batch by owner; membership changes |
//! | `local.rs` | one tier: backends that are this process's own receivers, delivered to in-process |
//! | `membership.rs` | the ring as samplers that follow it (`tail_sampling.hand_off`) see it |
//!
//! Backends come from `resolver.static.hostnames`, or from `resolver.dns`, whose task
//! drives [`LoadBalancer::set_backends`], which re-routes a removed backend's queued
//! batches to their new owners.

pub(crate) mod dns;
mod exporter;
mod local;
mod membership;
mod metrics;
pub(crate) mod ring;

pub use ring::Ring;

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests;

pub use exporter::LoadBalancer;
pub use metrics::LoadBalancerMetricFamilies;
