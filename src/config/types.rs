//! The validated configuration: the types the runtime uses.
//!
//! Everything here has been checked once at startup; components receive only their own
//! section and never read raw YAML or the environment. Defaults live in exactly one
//! place, `defaults.rs`, and are filled in while the YAML is typed.

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

/// A component id as written in the config: `type` or `type/name`.
///
/// `kind` is the canonical type name (aliases such as `otlp_grpc` for the `otlp` exporter
/// are resolved to one canonical spelling); `written` keeps the id exactly as the user wrote
/// it, for messages and metric labels.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ComponentId {
    /// The id as written, e.g. `otlp_grpc/tempo`.
    pub written: String,
    /// The canonical type, e.g. `otlp_grpc` for an id written `otlp/tempo` (the Collector's
    /// current names: `otlp_grpc`, `otlp_http`; types tailgate does not know stay as written).
    pub kind: String,
    /// The name part after `/`, if any.
    pub name: Option<String>,
}

impl fmt::Display for ComponentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.written)
    }
}

/// The whole validated configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Receivers by id.
    pub receivers: BTreeMap<ComponentId, ReceiverConfig>,
    /// Processors by id.
    pub processors: BTreeMap<ComponentId, ProcessorConfig>,
    /// Exporters by id.
    pub exporters: BTreeMap<ComponentId, ExporterConfig>,
    /// Extensions by id.
    pub extensions: BTreeMap<ComponentId, ExtensionConfig>,
    /// The `service` section.
    pub service: ServiceConfig,
}

/// A receiver's typed settings.
#[derive(Clone, Debug, PartialEq)]
pub enum ReceiverConfig {
    /// `otlp`.
    Otlp(OtlpReceiverConfig),
}

/// `receivers.otlp`.
#[derive(Clone, Debug, PartialEq)]
pub struct OtlpReceiverConfig {
    /// `protocols.grpc`; `None` when the protocol is not listed.
    pub grpc: Option<GrpcServerConfig>,
    /// `protocols.http`; `None` when the protocol is not listed.
    pub http: Option<HttpServerConfig>,
}

/// `receivers.otlp.protocols.grpc`.
#[derive(Clone, Debug, PartialEq)]
pub struct GrpcServerConfig {
    /// `endpoint`, `host:port` (default `0.0.0.0:4317`). Resolved when binding.
    pub endpoint: String,
    /// `max_recv_msg_size_mib` in bytes (default 4 MiB, grpc-go's default).
    pub max_recv_msg_size: usize,
}

/// `receivers.otlp.protocols.http`.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpServerConfig {
    /// `endpoint`, `host:port` (default `0.0.0.0:4318`). Resolved when binding.
    pub endpoint: String,
    /// `traces_url_path` (default `/v1/traces`).
    pub traces_url_path: String,
    /// `metrics_url_path` (default `/v1/metrics`).
    pub metrics_url_path: String,
    /// `logs_url_path` (default `/v1/logs`).
    pub logs_url_path: String,
    /// `max_request_body_size` in bytes (default 20 MiB), applied after decompression.
    pub max_request_body_size: usize,
    /// `cors`; `None` when not configured (no CORS headers are sent).
    pub cors: Option<CorsConfig>,
}

/// `receivers.otlp.protocols.http.cors`.
#[derive(Clone, Debug, PartialEq)]
pub struct CorsConfig {
    /// `allowed_origins`, each an origin or a pattern with `*` wildcards.
    pub allowed_origins: Vec<String>,
    /// `allowed_headers`, added to the always-allowed set.
    pub allowed_headers: Vec<String>,
    /// `max_age` in seconds for preflight caching; `None` sends no header.
    pub max_age: Option<u64>,
}

/// A processor's typed settings.
#[derive(Clone, Debug, PartialEq)]
pub enum ProcessorConfig {
    /// `batch`.
    Batch(BatchConfig),
}

/// `processors.batch`.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchConfig {
    /// `send_batch_size` (default 8192): span count that triggers a send.
    pub send_batch_size: NonZeroUsize,
    /// `send_batch_max_size` (default 0 = no limit): upper bound on spans per batch.
    pub send_batch_max_size: Option<NonZeroUsize>,
    /// `send_batch_max_size_bytes` (tailgate's, default 4 MiB minus framing headroom, Tempo's
    /// gRPC cap): upper bound on encoded bytes per batch.
    pub send_batch_max_bytes: NonZeroUsize,
    /// `timeout` (default 200ms): a partial batch is sent this long after its first item.
    /// Zero sends at once.
    pub timeout: Duration,
}

/// An exporter's typed settings.
#[derive(Clone, Debug, PartialEq)]
pub enum ExporterConfig {
    /// `otlp` / `otlp_grpc`.
    OtlpGrpc(OtlpExporterConfig),
    /// `otlphttp` / `otlp_http`.
    OtlpHttp(OtlpExporterConfig),
    /// `debug`.
    Debug(DebugExporterConfig),
}

/// `exporters.otlp` and `exporters.otlphttp`: one shape, two transports.
#[derive(Clone, Debug, PartialEq)]
pub struct OtlpExporterConfig {
    /// `endpoint`. gRPC: `host:port` or a URL (`http://` means plaintext, `https://` TLS).
    /// HTTP: the base URL; `/v1/traces` is appended unless `traces_endpoint` is set.
    pub endpoint: String,
    /// `traces_endpoint` (HTTP only): the full URL for traces, used as is.
    pub traces_endpoint: Option<String>,
    /// `tls`.
    pub tls: TlsClientConfig,
    /// `headers`, sent with every request.
    pub headers: BTreeMap<String, String>,
    /// `compression` (default gzip).
    pub compression: Compression,
    /// `timeout` per attempt (default 5s).
    pub timeout: Duration,
    /// `sending_queue`.
    pub sending_queue: QueueConfig,
    /// `retry_on_failure`.
    pub retry_on_failure: RetryConfig,
}

/// `tls` of a client.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsClientConfig {
    /// `insecure`: plaintext (gRPC). Default false, as in the Collector.
    pub insecure: bool,
    /// `insecure_skip_verify`: TLS without verifying the server certificate.
    pub insecure_skip_verify: bool,
    /// `ca_file`: PEM roots to trust instead of the built-in roots.
    pub ca_file: Option<PathBuf>,
    /// `cert_file`: PEM client certificate (mTLS), with `key_file`.
    pub cert_file: Option<PathBuf>,
    /// `key_file`: PEM client key (mTLS), with `cert_file`.
    pub key_file: Option<PathBuf>,
    /// `server_name_override`: the name to verify the certificate against.
    pub server_name_override: Option<String>,
}

/// Wire compression of an exporter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// `none` (or empty).
    None,
    /// `gzip` (the Collector's default).
    Gzip,
    /// `zstd`.
    Zstd,
}

/// `sending_queue`.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueConfig {
    /// `enabled` (default true). When false, the caller waits for each export.
    pub enabled: bool,
    /// `queue_size` in batches (default 1000).
    pub queue_size: NonZeroUsize,
    /// `num_consumers` (default 10): exports in flight at once.
    pub num_consumers: NonZeroUsize,
}

/// `retry_on_failure`.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryConfig {
    /// `enabled` (default true).
    pub enabled: bool,
    /// `initial_interval` (default 5s).
    pub initial_interval: Duration,
    /// `max_interval` (default 30s).
    pub max_interval: Duration,
    /// `max_elapsed_time` (default 300s); `None` when configured as 0 (retry forever).
    pub max_elapsed_time: Option<Duration>,
    /// `multiplier` (default 1.5).
    pub multiplier: f64,
    /// `randomization_factor` (default 0.5).
    pub randomization_factor: f64,
}

/// `exporters.debug`.
#[derive(Clone, Debug, PartialEq)]
pub struct DebugExporterConfig {
    /// `verbosity` (default basic).
    pub verbosity: Verbosity,
}

/// The debug exporter's `verbosity`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verbosity {
    /// One summary line per batch.
    Basic,
    /// One line per span.
    Normal,
    /// Every field of every span.
    Detailed,
}

/// An extension's typed settings.
#[derive(Clone, Debug, PartialEq)]
pub enum ExtensionConfig {
    /// `health_check`.
    HealthCheck(HealthCheckConfig),
}

/// `extensions.health_check`.
#[derive(Clone, Debug, PartialEq)]
pub struct HealthCheckConfig {
    /// `endpoint` (default `0.0.0.0:13133`).
    pub endpoint: String,
    /// `path` (default `/`).
    pub path: String,
}

/// The telemetry signal a pipeline carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Signal {
    /// `traces`.
    Traces,
    /// `metrics`.
    Metrics,
    /// `logs`.
    Logs,
}

/// A pipeline id: `traces`, `traces/name`, ...
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PipelineId {
    /// The signal part.
    pub signal: Signal,
    /// The id as written, e.g. `traces/sampled`.
    pub written: String,
}

impl fmt::Display for PipelineId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.written)
    }
}

/// `service.pipelines.<id>`: every id refers to a defined component.
#[derive(Clone, Debug, PartialEq)]
pub struct PipelineConfig {
    /// `receivers`, in order.
    pub receivers: Vec<ComponentId>,
    /// `processors`, in order of the data flow.
    pub processors: Vec<ComponentId>,
    /// `exporters`; data fans out to each.
    pub exporters: Vec<ComponentId>,
}

/// `service`.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceConfig {
    /// `extensions` to start; each is defined under `extensions`.
    pub extensions: Vec<ComponentId>,
    /// `pipelines`.
    pub pipelines: BTreeMap<PipelineId, PipelineConfig>,
    /// `telemetry`.
    pub telemetry: TelemetryConfig,
    /// `shutdown_timeout` (tailgate's, default 30s): how long a SIGTERM drain may take
    /// before what is left is counted as dropped.
    pub shutdown_timeout: Duration,
}

/// `service.telemetry`.
#[derive(Clone, Debug, PartialEq)]
pub struct TelemetryConfig {
    /// `metrics.address` (default `0.0.0.0:8888`): where `/metrics` is served.
    /// `None` when `metrics.level: none`.
    pub metrics_address: Option<String>,
    /// `logs.level` (default info).
    pub log_level: LogLevel,
    /// `logs.encoding` (default console).
    pub log_encoding: LogEncoding,
}

/// `service.telemetry.logs.level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    /// `debug`.
    Debug,
    /// `info`.
    Info,
    /// `warn`.
    Warn,
    /// `error`.
    Error,
}

/// `service.telemetry.logs.encoding`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogEncoding {
    /// Human-readable lines.
    Console,
    /// One JSON object per line.
    Json,
}
