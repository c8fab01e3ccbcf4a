//! Self-telemetry: the metrics registry and its endpoint, process metrics, the health
//! endpoint, logging, and Kubernetes Events for the gateway's own state changes
//! ([`k8s_events`]).
//!
//! Components register their metric families against the one [`prometheus::Registry`]
//! built here (no global registry) and hold label-bound handles. Logs are `tracing` events
//! whose message is a stable, lowercase, dotted event name (`"receiver.started"`,
//! `"exporter.retry"`) with key/value fields; they mark state transitions, not requests.

mod health;
pub mod k8s_events;
pub mod log_throttle;
mod logging;
mod process;
mod server;

pub use health::{Health, HealthState};
pub use logging::init_logging;
pub use process::{
    AllocatorStats, ProcessCollector, proc_kib_field, read_rss_bytes as rss_bytes,
    set_allocator_stats,
};
pub use server::{serve_health, serve_metrics};

use prometheus::Registry;

/// Registers `collector` in `registry` and returns it, so that a family is built and
/// registered in one expression.
///
/// # Errors
///
/// When a family of the same name is already registered there.
pub fn registered<C>(registry: &Registry, collector: C) -> Result<C, prometheus::Error>
where
    C: prometheus::core::Collector + Clone + 'static,
{
    registry.register(Box::new(collector.clone()))?;
    Ok(collector)
}

/// Builds an integer counter family `(name, help)` with `labels` and registers it.
///
/// # Errors
///
/// As [`registered`], and when the name or a label is not a valid Prometheus name.
pub fn counter_vec(
    registry: &Registry,
    (name, help): (&str, &str),
    labels: &[&str],
) -> Result<prometheus::IntCounterVec, prometheus::Error> {
    registered(
        registry,
        prometheus::IntCounterVec::new(prometheus::Opts::new(name, help), labels)?,
    )
}

/// Builds an integer gauge family `(name, help)` with `labels` and registers it.
///
/// # Errors
///
/// As [`counter_vec`].
pub fn gauge_vec(
    registry: &Registry,
    (name, help): (&str, &str),
    labels: &[&str],
) -> Result<prometheus::IntGaugeVec, prometheus::Error> {
    registered(
        registry,
        prometheus::IntGaugeVec::new(prometheus::Opts::new(name, help), labels)?,
    )
}

/// The version of this build, for the build-info metric and logs.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Builds the registry every component registers against, with the process metrics
/// (`otelcol_process_*`) and `tailgate_build_info` already in it.
///
/// # Errors
///
/// Only if the built-in families collide, which is a programming error.
pub fn new_registry() -> Result<Registry, prometheus::Error> {
    let registry = Registry::new();
    registry.register(Box::new(ProcessCollector::new()))?;
    let build_info = prometheus::IntGaugeVec::new(
        prometheus::Opts::new(
            "tailgate_build_info",
            "A constant 1, labelled with the version of the running tailgate.",
        ),
        &["version"],
    )?;
    build_info.with_label_values(&[VERSION]).set(1);
    registry.register(Box::new(build_info))?;
    Ok(registry)
}
