//! Every default of the configuration, in one place.
//!
//! The values follow the Collector's factories (`receiver/otlpreceiver/factory.go`,
//! `processor/batchprocessor/factory.go`, `exporter/exporterhelper`, `config/configretry`)
//! except where noted: tailgate binds `0.0.0.0` rather than `localhost` because it runs in a
//! pod, where a loopback listener is unreachable from other pods.

use std::time::Duration;

use crate::config::RetryConfig;

const MIB: usize = 1024 * 1024;

/// `receivers.otlp.protocols.grpc.endpoint`. The Collector defaults to `localhost:4317`.
pub(crate) fn grpc_endpoint() -> String {
    "0.0.0.0:4317".to_owned()
}

/// `receivers.otlp.protocols.grpc.max_recv_msg_size_mib`, in MiB (grpc-go's default).
pub(crate) const GRPC_MAX_RECV_MSG_SIZE_MIB: usize = 4;

/// `receivers.otlp.protocols.http.endpoint`. The Collector defaults to `localhost:4318`.
pub(crate) fn http_endpoint() -> String {
    "0.0.0.0:4318".to_owned()
}

/// `receivers.otlp.protocols.http.traces_url_path`.
pub(crate) fn traces_url_path() -> String {
    "/v1/traces".to_owned()
}

/// `receivers.otlp.protocols.http.metrics_url_path`.
pub(crate) fn metrics_url_path() -> String {
    "/v1/metrics".to_owned()
}

/// `receivers.otlp.protocols.http.logs_url_path`.
pub(crate) fn logs_url_path() -> String {
    "/v1/logs".to_owned()
}

/// `receivers.otlp.protocols.http.max_request_body_size`, in bytes (confighttp's 20 MiB).
pub(crate) const HTTP_MAX_REQUEST_BODY_SIZE: usize = 20 * MIB;

/// `receivers.otlp.protocols.{grpc,http}.max_concurrent_requests` (tailgate's): requests in
/// flight per receiver and protocol. The Collector has no such bound. A request takes
/// milliseconds, so 1024 in flight is far more than a gateway's clients need, while it caps
/// what each request holds outside the memory budget (task, headers, connection state).
pub(crate) const RECEIVER_MAX_CONCURRENT_REQUESTS: usize = 1024;

/// `processors.batch.send_batch_size`, in spans.
pub(crate) const BATCH_SEND_BATCH_SIZE: usize = 8192;

/// `processors.batch.timeout`.
pub(crate) const BATCH_TIMEOUT: Duration = Duration::from_millis(200);

/// `processors.batch.send_batch_max_size_bytes` (tailgate's): Tempo's default gRPC message
/// cap (4 MiB) minus 64 KiB of headroom for the request framing around the spans.
pub(crate) const BATCH_SEND_BATCH_MAX_BYTES: usize = 4 * MIB - 64 * 1024;

/// The smallest `processors.batch.send_batch_max_size_bytes` accepted: below this a batch
/// could not hold one ordinary span.
pub(crate) const BATCH_SEND_BATCH_MAX_BYTES_MIN: usize = 1024;

/// `processors.tail_sampling.decision_wait`.
pub(crate) const TAIL_DECISION_WAIT: Duration = Duration::from_secs(30);

/// `processors.tail_sampling.num_traces`.
pub(crate) const TAIL_NUM_TRACES: usize = 50_000;

/// `processors.tail_sampling.decision_cache.sampled_cache_size`. The Collector's default is
/// 0 (off); tailgate keeps a cache by default so that late spans of kept traces follow them
/// instead of starting a new, partial trace (see `docs/compatibility.md`).
pub(crate) const TAIL_SAMPLED_CACHE_SIZE: usize = 100_000;

/// `processors.tail_sampling.decision_cache.non_sampled_cache_size`. The Collector's default
/// is 0 (off); see [`TAIL_SAMPLED_CACHE_SIZE`].
pub(crate) const TAIL_NON_SAMPLED_CACHE_SIZE: usize = 1_000_000;

/// `processors.tail_sampling.policies[].string_attribute.cache_max_size` (the Collector's
/// `defaultCacheSize`).
pub(crate) const TAIL_STRING_CACHE_MAX_SIZE: usize = 128;

/// `processors.tail_sampling.sampling_strategy`: the only strategy tailgate implements.
/// `tail_sampling.hand_off.debounce`: a DNS answer that changes twice in a row (a rolling
/// restart) costs one hand-off, not two.
pub(crate) const HAND_OFF_DEBOUNCE: Duration = Duration::from_secs(1);

/// `tail_sampling.hand_off.leave_delay`: one DNS `interval` (5s) of the peers' resolvers.
pub(crate) const HAND_OFF_LEAVE_DELAY: Duration = Duration::from_secs(5);

pub(crate) const TAIL_SAMPLING_STRATEGY: &str = "trace-complete";

/// `exporters.<otlp>.compression`.
pub(crate) const EXPORTER_COMPRESSION: crate::config::Compression =
    crate::config::Compression::Gzip;

/// `exporters.<otlp>.timeout`, per attempt.
pub(crate) const EXPORTER_TIMEOUT: Duration = Duration::from_secs(5);

/// `exporters.<otlp>.sending_queue.enabled`.
pub(crate) const QUEUE_ENABLED: bool = true;

/// `exporters.<otlp>.sending_queue.queue_size`, in batches.
pub(crate) const QUEUE_SIZE: usize = 1000;

/// `exporters.<otlp>.sending_queue.num_consumers`.
pub(crate) const QUEUE_NUM_CONSUMERS: usize = 10;

/// `exporters.<otlp>.retry_on_failure.enabled`.
pub(crate) const RETRY_ENABLED: bool = true;

/// `exporters.<otlp>.retry_on_failure.initial_interval`.
pub(crate) const RETRY_INITIAL_INTERVAL: Duration = Duration::from_secs(5);

/// `exporters.<otlp>.retry_on_failure.max_interval`.
pub(crate) const RETRY_MAX_INTERVAL: Duration = Duration::from_secs(30);

/// `exporters.<otlp>.retry_on_failure.max_elapsed_time` (0 in the config means forever).
pub(crate) const RETRY_MAX_ELAPSED_TIME: Duration = Duration::from_secs(300);

/// `exporters.<otlp>.retry_on_failure.multiplier`.
pub(crate) const RETRY_MULTIPLIER: f64 = 1.5;

/// `exporters.<otlp>.retry_on_failure.randomization_factor`.
pub(crate) const RETRY_RANDOMIZATION_FACTOR: f64 = 0.5;

/// `exporters.<otlp>.retry_on_failure`, all of it.
pub(crate) const EXPORTER_RETRY: RetryConfig = RetryConfig {
    enabled: RETRY_ENABLED,
    initial_interval: RETRY_INITIAL_INTERVAL,
    max_interval: RETRY_MAX_INTERVAL,
    max_elapsed_time: Some(RETRY_MAX_ELAPSED_TIME),
    multiplier: RETRY_MULTIPLIER,
    randomization_factor: RETRY_RANDOMIZATION_FACTOR,
};

/// `exporters.prometheusremotewrite.retry_on_failure`: the Collector's factory defaults for
/// this exporter (`initial_interval` 50ms, `max_interval` 200ms, `max_elapsed_time` 1m).
/// `max_elapsed_time` must stay bounded: Prometheus answers 500 to some permanent errors
/// (duplicate label names, native histograms disabled), which would block a shard forever.
pub(crate) const REMOTE_WRITE_RETRY: RetryConfig = RetryConfig {
    enabled: true,
    initial_interval: Duration::from_millis(50),
    max_interval: Duration::from_millis(200),
    max_elapsed_time: Some(Duration::from_secs(60)),
    multiplier: RETRY_MULTIPLIER,
    randomization_factor: RETRY_RANDOMIZATION_FACTOR,
};

/// `exporters.prometheusremotewrite.timeout`, per attempt.
pub(crate) const REMOTE_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// `exporters.prometheusremotewrite.max_batch_size_bytes`.
pub(crate) const REMOTE_WRITE_MAX_BATCH_SIZE_BYTES: usize = 3_000_000;

/// `exporters.prometheusremotewrite.remote_write_queue.enabled`.
pub(crate) const REMOTE_WRITE_QUEUE_ENABLED: bool = true;

/// `exporters.prometheusremotewrite.remote_write_queue.queue_size`, in requests (each one
/// export call's series for one shard).
pub(crate) const REMOTE_WRITE_QUEUE_SIZE: usize = 10_000;

/// `exporters.prometheusremotewrite.remote_write_queue.num_consumers`: the number of
/// shards, each one in-order sender.
pub(crate) const REMOTE_WRITE_NUM_CONSUMERS: usize = 5;

/// `exporters.prometheusremotewrite.target_info.enabled`.
pub(crate) const REMOTE_WRITE_TARGET_INFO: bool = true;

/// `exporters.prometheusremotewrite.add_metric_suffixes`.
pub(crate) const REMOTE_WRITE_ADD_METRIC_SUFFIXES: bool = true;

/// `exporters.debug.verbosity`.
pub(crate) const DEBUG_VERBOSITY: crate::config::Verbosity = crate::config::Verbosity::Basic;

/// `extensions.health_check.endpoint`. The Collector defaults to `localhost:13133`.
pub(crate) fn health_check_endpoint() -> String {
    "0.0.0.0:13133".to_owned()
}

/// `extensions.health_check.path`.
pub(crate) fn health_check_path() -> String {
    "/".to_owned()
}

/// `extensions.file_storage.create_directory` (the Collector's default).
pub(crate) const FILE_STORAGE_CREATE_DIRECTORY: bool = false;

/// `extensions.file_storage.directory_permissions` (the Collector's default, `0750`).
pub(crate) const FILE_STORAGE_DIRECTORY_PERMISSIONS: u32 = 0o750;

/// `extensions.file_storage.timeout`: the wait for a queue directory's lock.
pub(crate) const FILE_STORAGE_TIMEOUT: Duration = Duration::from_secs(1);

/// `extensions.file_storage.fsync` (the Collector's default).
pub(crate) const FILE_STORAGE_FSYNC: bool = false;

/// `extensions.file_storage.max_size_mib` (tailgate's): disk space per exporter queue.
pub(crate) const FILE_STORAGE_MAX_SIZE_MIB: u64 = 1024;

/// `extensions.k8s_events.enabled`.
pub(crate) const K8S_EVENTS_ENABLED: bool = true;

/// The service-account directory every Pod gets (when its token is mounted).
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// `extensions.k8s_events.token_file`.
pub(crate) fn k8s_events_token_file() -> std::path::PathBuf {
    std::path::Path::new(SERVICE_ACCOUNT_DIR).join("token")
}

/// `extensions.k8s_events.ca_file`.
pub(crate) fn k8s_events_ca_file() -> std::path::PathBuf {
    std::path::Path::new(SERVICE_ACCOUNT_DIR).join("ca.crt")
}

/// `extensions.k8s_events.namespace_file`.
pub(crate) fn k8s_events_namespace_file() -> std::path::PathBuf {
    std::path::Path::new(SERVICE_ACCOUNT_DIR).join("namespace")
}

/// `extensions.k8s_events.series_window`: client-go's events library ends a series after
/// 6 minutes without a repeat; 10 minutes keeps a flapping state in one Event a little longer.
pub(crate) const K8S_EVENTS_SERIES_WINDOW: Duration = Duration::from_secs(600);

/// `extensions.k8s_events.queue_size`.
pub(crate) const K8S_EVENTS_QUEUE_SIZE: usize = 64;

/// `extensions.k8s_events.timeout`.
pub(crate) const K8S_EVENTS_TIMEOUT: Duration = Duration::from_secs(3);

/// `service.telemetry.metrics.address`. The Collector defaults to `localhost:8888`.
pub(crate) fn metrics_address() -> String {
    "0.0.0.0:8888".to_owned()
}

/// `service.telemetry.metrics.readers[0].pull.exporter.prometheus.host` when omitted.
pub(crate) fn prometheus_host() -> String {
    "0.0.0.0".to_owned()
}

/// `service.telemetry.metrics.readers[0].pull.exporter.prometheus.port` when omitted.
pub(crate) const PROMETHEUS_PORT: u16 = 8888;

/// `service.telemetry.logs.level`.
pub(crate) const LOG_LEVEL: crate::config::LogLevel = crate::config::LogLevel::Info;

/// `service.telemetry.logs.encoding`.
pub(crate) const LOG_ENCODING: crate::config::LogEncoding = crate::config::LogEncoding::Console;

/// `service.shutdown_timeout` (tailgate's): the SIGTERM drain budget.
pub(crate) const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// `connectors.spanmetrics.histogram.explicit.buckets` (the Collector's default bounds).
pub(crate) fn span_buckets() -> Vec<Duration> {
    [
        2, 4, 6, 8, 10, 50, 100, 200, 400, 800, 1000, 1400, 2000, 5000, 10_000, 15_000,
    ]
    .into_iter()
    .map(Duration::from_millis)
    .collect()
}

/// `connectors.spanmetrics.namespace` (the Collector's `DefaultNamespace`).
pub(crate) fn span_metrics_namespace() -> String {
    "traces.span.metrics".to_owned()
}

/// `connectors.spanmetrics.metrics_flush_interval` (the Collector's current default).
pub(crate) const SPAN_METRICS_FLUSH_INTERVAL: Duration = Duration::from_secs(60);

/// `connectors.spanmetrics.dimensions_cache_size`.
pub(crate) const SPAN_METRICS_DIMENSIONS_CACHE_SIZE: usize = 1000;

/// `connectors.spanmetrics.aggregation_cardinality_limit` (tailgate's; the Collector's is 0,
/// no limit): the series a span metrics connector holds at most.
pub(crate) const SPAN_METRICS_CARDINALITY_LIMIT: usize = 10_000;
