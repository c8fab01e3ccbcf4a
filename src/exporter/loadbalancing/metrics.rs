//! The load-balancing exporter's self-metrics, with the Collector's names (counters carry
//! the `_total` suffix of the Prometheus exposition, as the other `otelcol_*` counters do).
//!
//! Per-backend delivery (sent, failed, queue size, retries) is counted by each backend's
//! OTLP exporter in the exporters' shared families, under the exporter label
//! `<loadbalancing id>/<host:port>`.

use std::time::Duration;

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};

/// Metric names and help texts, in one place.
mod desc {
    pub const NUM_BACKENDS: (&str, &str) = (
        "otelcol_loadbalancer_num_backends",
        "Current number of backends in use, by resolver.",
    );
    pub const NUM_RESOLUTIONS: (&str, &str) = (
        "otelcol_loadbalancer_num_resolutions_total",
        "Number of times the resolver resolved the backends, by resolver and success.",
    );
    pub const NUM_BACKEND_UPDATES: (&str, &str) = (
        "otelcol_loadbalancer_num_backend_updates_total",
        "Number of times the list of backends changed, by resolver.",
    );
    pub const BACKEND_LATENCY: (&str, &str) = (
        "otelcol_loadbalancer_backend_latency",
        "Time, in milliseconds, to hand a request to a backend's exporter (its sending \
         queue, or the whole export when the queue is disabled), by endpoint.",
    );
    pub const BACKEND_OUTCOME: (&str, &str) = (
        "otelcol_loadbalancer_backend_outcome_total",
        "Number of requests handed to a backend's exporter, by endpoint and success.",
    );
}

/// Latency buckets in milliseconds: a queued hand-over takes microseconds, an inline export
/// up to the timeout times the retries.
const LATENCY_BUCKETS_MS: [f64; 14] = [
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 1000.0, 5000.0,
];

/// Which resolver produced the backends: the `resolver` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ResolverKind {
    /// `resolver.static`.
    Static,
    /// `resolver.dns`.
    Dns,
}

impl ResolverKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ResolverKind::Static => "static",
            ResolverKind::Dns => "dns",
        }
    }
}

/// The load-balancing families, registered once per registry.
#[derive(Clone, Debug)]
pub struct LoadBalancerMetricFamilies {
    num_backends: IntGaugeVec,
    num_resolutions: IntCounterVec,
    num_backend_updates: IntCounterVec,
    backend_latency: HistogramVec,
    backend_outcome: IntCounterVec,
}

impl LoadBalancerMetricFamilies {
    /// Creates the families and registers them with `registry`.
    ///
    /// # Errors
    ///
    /// Fails when a family of the same name is already registered (call this once per
    /// registry and share the result).
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let num_backends = IntGaugeVec::new(
            Opts::new(desc::NUM_BACKENDS.0, desc::NUM_BACKENDS.1),
            &["resolver"],
        )?;
        registry.register(Box::new(num_backends.clone()))?;
        let num_resolutions = IntCounterVec::new(
            Opts::new(desc::NUM_RESOLUTIONS.0, desc::NUM_RESOLUTIONS.1),
            &["resolver", "success"],
        )?;
        registry.register(Box::new(num_resolutions.clone()))?;
        let num_backend_updates = IntCounterVec::new(
            Opts::new(desc::NUM_BACKEND_UPDATES.0, desc::NUM_BACKEND_UPDATES.1),
            &["resolver"],
        )?;
        registry.register(Box::new(num_backend_updates.clone()))?;
        let backend_latency = HistogramVec::new(
            HistogramOpts::new(desc::BACKEND_LATENCY.0, desc::BACKEND_LATENCY.1)
                .buckets(LATENCY_BUCKETS_MS.to_vec()),
            &["endpoint"],
        )?;
        registry.register(Box::new(backend_latency.clone()))?;
        let backend_outcome = IntCounterVec::new(
            Opts::new(desc::BACKEND_OUTCOME.0, desc::BACKEND_OUTCOME.1),
            &["endpoint", "success"],
        )?;
        registry.register(Box::new(backend_outcome.clone()))?;
        Ok(Self {
            num_backends,
            num_resolutions,
            num_backend_updates,
            backend_latency,
            backend_outcome,
        })
    }

    /// Handles for a load-balancing exporter whose backends come from `resolver`.
    ///
    /// The `resolver` label is the Collector's only label on these families, so two
    /// load-balancing exporters with the same resolver kind share their series.
    pub(crate) fn for_exporter(&self, resolver: ResolverKind) -> LoadBalancerMetrics {
        let label = resolver.as_str();
        LoadBalancerMetrics {
            num_backends: self.num_backends.with_label_values(&[label]),
            resolutions_ok: self.num_resolutions.with_label_values(&[label, "true"]),
            resolutions_failed: self.num_resolutions.with_label_values(&[label, "false"]),
            backend_updates: self.num_backend_updates.with_label_values(&[label]),
            backend_latency: self.backend_latency.clone(),
            backend_outcome: self.backend_outcome.clone(),
        }
    }
}

/// One load-balancing exporter's handles; cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct LoadBalancerMetrics {
    num_backends: IntGauge,
    resolutions_ok: IntCounter,
    resolutions_failed: IntCounter,
    backend_updates: IntCounter,
    backend_latency: HistogramVec,
    backend_outcome: IntCounterVec,
}

impl LoadBalancerMetrics {
    /// A resolution finished: `ok` says whether it produced a backend list.
    pub(crate) fn record_resolution(&self, ok: bool) {
        if ok {
            self.resolutions_ok.inc();
        } else {
            self.resolutions_failed.inc();
        }
    }

    /// The backend list changed to `count` backends (also at start).
    pub(crate) fn record_backends(&self, count: usize) {
        self.backend_updates.inc();
        self.num_backends.set(count as i64);
    }

    /// Handles for one backend, created at zero. Endpoint labels come from the
    /// configuration (or, later, the resolver), a set the operator controls.
    pub(crate) fn for_backend(&self, endpoint: &str) -> BackendMetrics {
        BackendMetrics {
            latency: self.backend_latency.with_label_values(&[endpoint]),
            success: self.backend_outcome.with_label_values(&[endpoint, "true"]),
            failure: self.backend_outcome.with_label_values(&[endpoint, "false"]),
        }
    }
}

/// One backend's handles.
#[derive(Clone, Debug)]
pub(crate) struct BackendMetrics {
    latency: Histogram,
    success: IntCounter,
    failure: IntCounter,
}

impl BackendMetrics {
    /// One request was handed over (or refused) after `elapsed`.
    pub(crate) fn record(&self, elapsed: Duration, ok: bool) {
        self.latency.observe(elapsed.as_secs_f64() * 1000.0);
        if ok {
            self.success.inc();
        } else {
            self.failure.inc();
        }
    }
}
