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

use super::fields::named;
use super::htpasswd::Htpasswd;

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

#[cfg(test)]
impl ComponentId {
    /// The id `written` taken literally, for tests: the type is the part before `/` (no
    /// alias resolved), the name the part after.
    pub(crate) fn literal(written: &str) -> Self {
        let (kind, name) = match written.split_once('/') {
            Some((kind, name)) => (kind, Some(name.to_owned())),
            None => (written, None),
        };
        Self {
            written: written.to_owned(),
            kind: kind.to_owned(),
            name,
        }
    }
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
    /// Connectors by id: each is an exporter of some pipelines and a receiver of others.
    pub connectors: BTreeMap<ComponentId, ConnectorConfig>,
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
    /// `max_recv_msg_size_mib` in bytes (default 4 MiB, grpc-go's default). Also what
    /// admission reserves of the memory budget for a compressed message before it is read
    /// (its decompressed size is not known until then).
    pub max_recv_msg_size: usize,
    /// `max_concurrent_streams`: the HTTP/2 limit on concurrent streams (requests) per
    /// connection, advertised to clients, which wait for a free stream beyond it, as in the
    /// Collector. `None` (the default, or 0) leaves it unlimited.
    pub max_concurrent_streams: Option<u32>,
    /// *tailgate* `max_concurrent_requests`: requests in flight on this receiver's gRPC
    /// server, over all connections (default 1024; 0 for no limit). A request over it is
    /// refused at once with a retryable `UNAVAILABLE` (with `RetryInfo`) and counted as
    /// `reason="too_many_requests"`; see [`HttpServerConfig::max_concurrent_requests`].
    pub max_concurrent_requests: Option<NonZeroUsize>,
    /// `tls`; `None` serves plaintext (h2c).
    pub tls: Option<TlsServerConfig>,
    /// `auth.authenticator`: the `bearertokenauth` or `basicauth` extension that every
    /// request must satisfy; `None` admits every request. See [`HttpServerConfig::auth`].
    pub auth: Option<ComponentId>,
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
    /// Also what admission reserves of the memory budget for a body that declares no
    /// `Content-Length` before it is read.
    pub max_request_body_size: usize,
    /// *tailgate* `max_concurrent_requests`: requests in flight on this receiver's HTTP
    /// server, over all connections (default 1024; 0 for no limit). A request over it is
    /// refused at once with a retryable 503 and `Retry-After`, and counted as
    /// `reason="too_many_requests"`. The memory budget bounds the bytes an admitted
    /// request holds; this bounds their number, and with it what the budget does not see
    /// (each request's task, headers and connection state).
    pub max_concurrent_requests: Option<NonZeroUsize>,
    /// `cors`; `None` when not configured (no CORS headers are sent).
    pub cors: Option<CorsConfig>,
    /// `tls`; `None` serves plaintext (HTTP/1.1 and h2c).
    pub tls: Option<TlsServerConfig>,
    /// `auth.authenticator`: the `bearertokenauth` or `basicauth` extension (defined, and
    /// listed in `service.extensions`) that every request must satisfy. A request without
    /// valid credentials is refused before its body is read or memory is reserved for it:
    /// 401 with `WWW-Authenticate` (gRPC `UNAUTHENTICATED`), never retryable, counted as
    /// `reason="unauthenticated"`. CORS preflights are answered without credentials, as in
    /// the Collector. `None` admits every request.
    pub auth: Option<ComponentId>,
}

/// `tls` of a server: `receivers.otlp.protocols.{grpc,http}.tls` (the Collector's
/// `configtls.ServerConfig`, file keys only).
///
/// Configured, the port speaks TLS only: a plaintext client fails its handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsServerConfig {
    /// `cert_file` (required): the PEM certificate chain the server presents, leaf first.
    pub cert_file: PathBuf,
    /// `key_file` (required): the PEM private key of the leaf certificate (PKCS#8, PKCS#1
    /// or SEC1).
    pub key_file: PathBuf,
    /// `client_ca_file`: PEM CA certificates. When set (mTLS), every client must present
    /// a certificate that chains to one of them, or its handshake fails.
    pub client_ca_file: Option<PathBuf>,
    /// `min_version` (default `"1.2"`): the lowest TLS version accepted.
    pub min_version: TlsVersion,
    /// `max_version` (default: the highest supported, 1.3).
    pub max_version: Option<TlsVersion>,
    /// `reload_interval`: how often `cert_file`, `key_file` and `client_ca_file` are read
    /// again; when their content changed, handshakes from then on use the new files, and
    /// connections already open keep what they were established with. A reload that
    /// fails (a half-written file, a key that does not match the certificate) keeps the
    /// files in use. `None` (the default, or 0) reads them once, at start.
    pub reload_interval: Option<Duration>,
}

/// A TLS protocol version. rustls has no TLS 1.0 or 1.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    /// `"1.2"`.
    Tls12,
    /// `"1.3"`.
    Tls13,
}

named!(TlsVersion { "1.2" => Tls12, "1.3" => Tls13 });

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
    /// `memory_limiter`.
    MemoryLimiter(MemoryLimiterConfig),
    /// `batch`.
    Batch(BatchConfig),
    /// `tail_sampling`.
    TailSampling(TailSamplingConfig),
}

/// `processors.memory_limiter`: sets the one memory budget every held byte is charged
/// to, and the process RSS guard. One budget serves the whole process: with several
/// memory_limiter processors, the first (by id) sets it.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryLimiterConfig {
    /// `check_interval` (required, > 0): how often the process RSS is read.
    pub check_interval: Duration,
    /// `limit_mib` or `limit_percentage` (of the container's memory limit): the hard limit.
    pub limit: MemoryAmount,
    /// `spike_limit_mib` or `spike_limit_percentage`: the soft limit is `limit - spike`.
    /// `None` means 20% of the limit, as in the Collector.
    pub spike: Option<MemoryAmount>,
}

/// An amount of memory as configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryAmount {
    /// A number of bytes (`*_mib` keys, converted).
    Bytes(u64),
    /// A percentage of the container's memory limit (cgroup), else of total memory.
    Percentage(u32),
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

/// `processors.tail_sampling`: spans are held per trace and the trace is decided by
/// [`policies`](Self::policies) once `decision_wait` has passed since its first span.
///
/// Keys and defaults are the Collector's, except where noted (see `docs/compatibility.md`).
/// `sampling_strategy` (only `trace-complete`) and `num_shards` (tailgate shards by itself)
/// are checked and not kept.
#[derive(Clone, Debug, PartialEq)]
pub struct TailSamplingConfig {
    /// `decision_wait` (default 30s): how long after a trace's first span it is decided.
    /// Memory held grows linearly with it at a given ingest rate.
    pub decision_wait: Duration,
    /// `decision_wait_after_root_received` (default 0s = off): once the root span (no
    /// parent) arrives, decide this long after it if that is sooner.
    pub decision_wait_after_root_received: Option<Duration>,
    /// `num_traces` (default 50000): the most traces held undecided. At the limit the oldest
    /// is decided early (the Collector evicts it undecided), unless `block_on_overflow`.
    pub num_traces: NonZeroUsize,
    /// `expected_new_traces_per_sec` (default 0): a capacity hint only.
    pub expected_new_traces_per_sec: usize,
    /// `decision_cache.sampled_cache_size` (tailgate's default 100000; the Collector's is
    /// 0 = off): trace ids recently kept, so late spans follow at once. 0 turns it off.
    pub sampled_cache_size: usize,
    /// `decision_cache.non_sampled_cache_size` (tailgate's default 1000000; the
    /// Collector's is 0 = off): trace ids recently dropped, so late spans are dropped at
    /// once. 0 turns it off.
    pub non_sampled_cache_size: usize,
    /// `sample_on_first_match` (default false): stop evaluating at the first policy that
    /// votes to sample.
    pub sample_on_first_match: bool,
    /// `drop_pending_traces_on_shutdown` (default false): on shutdown drop undecided traces
    /// instead of deciding them on the spans received so far.
    pub drop_pending_traces_on_shutdown: bool,
    /// `maximum_trace_size_bytes` (default 0 = off): a trace whose encoded spans exceed this
    /// is decided at once on the spans it has; its later spans follow that decision.
    pub maximum_trace_size_bytes: Option<NonZeroUsize>,
    /// `block_on_overflow` (default false): at `num_traces`, refuse intake (retryably)
    /// instead of deciding the oldest trace early.
    pub block_on_overflow: bool,
    /// `record_policy` (tailgate's key for the Collector's `recordpolicy` feature gate,
    /// default false): write `tailsampling.policy` on the scope of kept spans.
    pub record_policy: bool,
    /// `policies`: at least one; names non-empty and unique.
    pub policies: Vec<PolicyConfig>,
    /// `hand_off` (tailgate key, default off): follow a `loadbalancing` exporter's ring and
    /// hand undecided traces to their new owner when its membership changes.
    pub hand_off: Option<HandOffConfig>,
}

/// `processors.tail_sampling.hand_off`: how a sampler that is one of several replicas keeps
/// traces whole through membership changes (see `docs/scaling.md`).
#[derive(Clone, Debug, PartialEq)]
pub struct HandOffConfig {
    /// `exporter`: the `loadbalancing` exporter whose ring says which replica owns a trace;
    /// one of its backends is this process's own receiver.
    pub exporter: ComponentId,
    /// `debounce` (default 1s): how long after a membership change the sampler waits for
    /// the next one before it hands off the traces it no longer owns.
    pub debounce: Duration,
    /// `leave_delay` (default 5s): on SIGTERM, how long the replica, out of its own ring,
    /// keeps receiving and forwarding what its peers still send it before its receivers
    /// stop (the peers' resolvers need about one `interval` to see it gone).
    pub leave_delay: Duration,
}

/// One policy of `tail_sampling.policies` (or a sub-policy of `and`, `not`, `drop` or
/// `composite`).
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyConfig {
    /// `name`: non-empty; unique among its siblings. Used in metric labels and
    /// `tailsampling.policy`.
    pub name: String,
    /// `type` and its settings.
    pub kind: PolicyKind,
}

/// The `values` of a `string_attribute` policy with `enabled_regex_matching`, compiled
/// into one [`regex::RegexSet`] (index `i` is `values[i]`).
///
/// The config reader compiles it, once, and reports a pattern that does not compile (or a
/// set too large to compile) with its path; the sampler uses the compiled set, so a loaded
/// config has nothing left to fail on. Two are equal when their patterns are.
#[derive(Clone, Debug)]
pub struct RegexValues(regex::RegexSet);

impl RegexValues {
    /// Compiles `values` as one set, as the sampler matches them.
    ///
    /// # Errors
    ///
    /// When a pattern does not compile, or the set exceeds the regex crate's size limits.
    pub fn new(values: &[String]) -> Result<Self, regex::Error> {
        regex::RegexSet::new(values).map(Self)
    }

    /// The compiled set.
    pub fn set(&self) -> &regex::RegexSet {
        &self.0
    }
}

impl PartialEq for RegexValues {
    fn eq(&self, other: &Self) -> bool {
        self.0.patterns() == other.0.patterns()
    }
}

/// A policy's `type` and the settings under the key of the same name.
#[derive(Clone, Debug, PartialEq)]
pub enum PolicyKind {
    /// `always_sample`.
    AlwaysSample,
    /// `latency`: the trace's duration (latest span end minus earliest span start) is at
    /// least `threshold_ms`, or with an upper bound in (`threshold_ms`, `upper_threshold_ms`].
    Latency {
        /// `threshold_ms`.
        threshold_ms: u64,
        /// `upper_threshold_ms` (0 = none).
        upper_threshold_ms: Option<u64>,
    },
    /// `numeric_attribute`: a resource or span attribute read as an integer lies in
    /// [`min_value`, `max_value`]; a 0 (or absent) bound means unbounded, as in the Collector.
    NumericAttribute {
        /// `key`.
        key: String,
        /// `min_value` (0 = none).
        min_value: Option<i64>,
        /// `max_value` (0 = none).
        max_value: Option<i64>,
        /// `invert_match`: sample when no resource or span matches.
        invert_match: bool,
    },
    /// `probabilistic`: keep `sampling_percentage` % of traces by trace id.
    Probabilistic {
        /// `sampling_percentage`, 0 to 100.
        sampling_percentage: f64,
        /// `hash_salt`: when set (non-empty), the Collector's FNV-1a hash of salt and trace
        /// id decides; when unset, OpenTelemetry consistent probability (`R >= T`, `th`
        /// written on kept spans).
        hash_salt: Option<String>,
    },
    /// `status_code`: any span's status is one of `status_codes`.
    StatusCode {
        /// `status_codes`: at least one.
        status_codes: Vec<StatusCodeName>,
    },
    /// `string_attribute`: a resource or span string attribute equals one of `values` (or
    /// matches one of them as a regular expression).
    StringAttribute {
        /// `key`.
        key: String,
        /// `values`: at least one.
        values: Vec<String>,
        /// `enabled_regex_matching: true`: `values` as regular expressions, matched anywhere
        /// in the value (as Go's `MatchString`), compiled into one set when the config is
        /// read. `None`: `values` are compared exactly.
        regex: Option<RegexValues>,
        /// `cache_max_size` (default 128): accepted; tailgate matches all expressions in one
        /// pass of a compiled set and keeps no result cache.
        cache_max_size: usize,
        /// `invert_match`: sample when no resource or span matches.
        invert_match: bool,
    },
    /// `boolean_attribute`: a resource or span boolean attribute equals `value`.
    BooleanAttribute {
        /// `key`.
        key: String,
        /// `value`.
        value: bool,
        /// `invert_match`: sample when no resource or span matches.
        invert_match: bool,
    },
    /// `trace_state`: any span's W3C tracestate has `key` with one of `values`.
    TraceState {
        /// `key`.
        key: String,
        /// `values`: at least one.
        values: Vec<String>,
    },
    /// `trace_flags`: any span has the W3C sampled flag.
    TraceFlags,
    /// `rate_limiting`: a token bucket of spans.
    RateLimiting {
        /// `spans_per_second`: the refill rate.
        spans_per_second: u64,
        /// `burst_capacity` (0/absent = twice the rate): the bucket size.
        burst_capacity: Option<u64>,
    },
    /// `bytes_limiting`: a token bucket of encoded span bytes.
    BytesLimiting {
        /// `bytes_per_second`: the refill rate.
        bytes_per_second: u64,
        /// `burst_capacity` (0/absent = twice the rate): the bucket size.
        burst_capacity: Option<u64>,
    },
    /// `span_count`: the trace has at least `min_spans` and at most `max_spans` spans.
    SpanCount {
        /// `min_spans`.
        min_spans: u64,
        /// `max_spans` (0 = unbounded).
        max_spans: Option<u64>,
    },
    /// `and`: every sub-policy votes to sample.
    And {
        /// `and.and_sub_policy`: at least one.
        sub_policies: Vec<PolicyConfig>,
    },
    /// `not`: the sub-policy's vote, flipped.
    Not {
        /// `not.not_sub_policy`.
        sub_policy: Box<PolicyConfig>,
    },
    /// `drop`: when every sub-policy votes to sample, the trace is dropped whatever other
    /// policies say.
    Drop {
        /// `drop.drop_sub_policy`: at least one.
        sub_policies: Vec<PolicyConfig>,
    },
    /// `composite`: sub-policies tried in order, each with a share of a spans-per-second
    /// budget.
    Composite {
        /// `max_total_spans_per_second`.
        max_total_spans_per_second: u64,
        /// `policy_order`: checked to name sub-policies; as in the Collector, evaluation
        /// follows the order of `composite_sub_policy`.
        policy_order: Vec<String>,
        /// `composite_sub_policy`: at least one.
        sub_policies: Vec<PolicyConfig>,
        /// `rate_allocation`: `(policy, percent)`. A sub-policy not listed gets 0 spans/s;
        /// a percent of 0 gets an equal share of the total.
        rate_allocation: Vec<(String, f64)>,
    },
}

/// A span status code named in `status_code.status_codes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StatusCodeName {
    /// `OK`.
    Ok,
    /// `ERROR`.
    Error,
    /// `UNSET`.
    Unset,
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
    /// `prometheusremotewrite` / `prometheus_remote_write` (metrics only).
    PrometheusRemoteWrite(RemoteWriteConfig),
    /// `loadbalancing` / `load_balancing` (traces only).
    LoadBalancing(LoadBalancingConfig),
}

/// `exporters.loadbalancing`: routes each span by its trace id to one of several OTLP/gRPC
/// backends, so that every span of a trace reaches the same backend (the Collector's
/// `loadbalancingexporter`, front tier of a tail-sampling tier).
#[derive(Clone, Debug, PartialEq)]
pub struct LoadBalancingConfig {
    /// `routing_key` (default `traceID`, the only one implemented).
    pub routing_key: RoutingKey,
    /// `protocol.otlp`: the template every backend's OTLP/gRPC exporter is built from; its
    /// `endpoint` is empty (each backend's address comes from the resolver). Each backend
    /// gets its own sending queue, retries and timeout with these settings.
    pub protocol: OtlpExporterConfig,
    /// `resolver`: where the backends come from (exactly one).
    pub resolver: ResolverConfig,
}

/// What the load-balancing exporter routes by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoutingKey {
    /// `traceID`: the whole 16-byte trace id.
    TraceId,
}

/// `resolver` of the load-balancing exporter.
#[derive(Clone, Debug, PartialEq)]
pub enum ResolverConfig {
    /// `static.hostnames`: a fixed list of backends, each `host:port` (the port defaults to
    /// 4317), in the order written, without duplicates.
    Static {
        /// The backends as `host:port`.
        hostnames: Vec<String>,
    },
    /// `dns`: the A/AAAA records of a name, re-resolved every `interval`. Checked, but
    /// refused by validation in this version.
    Dns(DnsResolverConfig),
}

/// `resolver.dns`.
#[derive(Clone, Debug, PartialEq)]
pub struct DnsResolverConfig {
    /// `hostname`: the name to resolve, e.g. a headless Service.
    pub hostname: String,
    /// `port` (default 4317) of every resolved address.
    pub port: u16,
    /// `interval` (default 5s) between resolutions.
    pub interval: Duration,
    /// `timeout` (default 1s) of one resolution.
    pub timeout: Duration,
    /// `nameserver` (`host:port`, tailgate's own key): the name server to ask instead of
    /// the system's resolver configuration.
    pub nameserver: Option<String>,
}

/// `exporters.prometheusremotewrite`: OTLP metrics to a Prometheus remote-write endpoint.
///
/// Keys and defaults are the Collector's `prometheusremotewriteexporter`, except
/// `retry_on_failure`, whose `max_elapsed_time` is always bounded by default (Prometheus
/// answers 500 to some permanent errors, which would otherwise be retried forever).
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteWriteConfig {
    /// `endpoint`: the remote-write URL, e.g. `http://prometheus:9090/api/v1/write`.
    pub endpoint: String,
    /// `headers`, sent with every request. The remote-write headers (`Content-Encoding`,
    /// `Content-Type`, `X-Prometheus-Remote-Write-Version`, `User-Agent`) cannot be set.
    pub headers: BTreeMap<String, String>,
    /// `timeout` per attempt (default 5s).
    pub timeout: Duration,
    /// `tls`.
    pub tls: TlsClientConfig,
    /// `namespace` (default empty): prefix of every metric name, `<namespace>_`.
    pub namespace: String,
    /// `external_labels`: added to every series that does not already have the label.
    pub external_labels: BTreeMap<String, String>,
    /// `resource_to_telemetry_conversion.enabled` (default false): every resource attribute
    /// becomes a label of every series of that resource (where absent).
    pub resource_to_telemetry_conversion: bool,
    /// `target_info.enabled` (default true): one `target_info` series per resource.
    pub target_info: bool,
    /// `add_metric_suffixes` (default true): unit and type suffixes (`_seconds`, `_total`,
    /// `_ratio`) on metric names.
    pub add_metric_suffixes: bool,
    /// `send_metadata` (default false): send each metric family's type, help and unit.
    pub send_metadata: bool,
    /// `max_batch_size_bytes` (default 3000000): requests are split above this encoded
    /// (uncompressed) size.
    pub max_batch_size_bytes: NonZeroUsize,
    /// `remote_write_queue`.
    pub remote_write_queue: QueueConfig,
    /// `retry_on_failure` (defaults: 50ms initial, 200ms max interval, 1m max elapsed).
    pub retry_on_failure: RetryConfig,
    /// `protobuf_message` (default `prometheus.WriteRequest`): the remote-write version.
    /// With `io.prometheus.write.v2.Request`, every series carries its metadata whatever
    /// `send_metadata` says, and a receiver that does not support 2.0 makes the exporter
    /// fall back to 1.0 for the rest of its life.
    pub protobuf_message: RemoteWriteMessage,
}

/// `protobuf_message` of the remote-write exporter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteWriteMessage {
    /// `prometheus.WriteRequest`: remote-write 1.0.
    V1,
    /// `io.prometheus.write.v2.Request`: remote-write 2.0, falling back to 1.0 when the
    /// receiver does not support it.
    V2,
}

/// `exporters.otlp` and `exporters.otlphttp`: one shape, two transports.
#[derive(Clone, Debug, PartialEq)]
pub struct OtlpExporterConfig {
    /// `endpoint`. gRPC: `host:port` or a URL (`http://` means plaintext, `https://` TLS).
    /// HTTP: the base URL; `/v1/traces` is appended unless `traces_endpoint` is set.
    pub endpoint: String,
    /// `traces_endpoint` (HTTP only): the full URL for traces, used as is.
    pub traces_endpoint: Option<String>,
    /// `metrics_endpoint` (HTTP only): the full URL for metrics, used as is; otherwise
    /// `/v1/metrics` is appended to `endpoint`.
    pub metrics_endpoint: Option<String>,
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
    /// `storage` (default none): the `file_storage` extension that makes the queue
    /// persistent. Batches are then written to disk before `export` returns, `queue_size`
    /// counts the batches on disk, and what is not delivered at shutdown (or at a crash) is
    /// delivered after the next start. Always `None` for the remote-write queue.
    pub storage: Option<ComponentId>,
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

named!(Verbosity { "basic" => Basic, "normal" => Normal, "detailed" => Detailed });

/// A connector's typed settings.
#[derive(Clone, Debug, PartialEq)]
pub enum ConnectorConfig {
    /// `forward`: passes what one pipeline exports, unchanged, into the pipelines that list
    /// it as a receiver (traces to traces, metrics to metrics).
    Forward,
    /// `spanmetrics` / `span_metrics`: RED metrics from every span (traces to metrics).
    SpanMetrics(SpanMetricsConfig),
}

/// `connectors.spanmetrics`: request counts and duration histograms computed from every
/// span the connector receives, emitted as cumulative OTLP metrics.
///
/// Keys and defaults are the Collector's `spanmetricsconnector`, except
/// `aggregation_cardinality_limit`, whose tailgate default is 10000 rather than 0 (no
/// limit), so that the memory the series take stays bounded.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanMetricsConfig {
    /// `histogram.disable` (default false): emit no `duration` histogram.
    pub histogram_disabled: bool,
    /// `histogram.unit` (default `ms`): the unit of `duration` values and bucket bounds.
    pub histogram_unit: HistogramUnit,
    /// `histogram.explicit.buckets` (default 2ms, 4ms, 6ms, 8ms, 10ms, 50ms, 100ms, 200ms,
    /// 400ms, 800ms, 1s, 1400ms, 2s, 5s, 10s, 15s): the explicit bucket upper bounds,
    /// strictly increasing.
    pub histogram_buckets: Vec<Duration>,
    /// `dimensions`: span (then resource) attributes added to each series, in order.
    pub dimensions: Vec<SpanMetricsDimension>,
    /// `exclude_dimensions`: default dimensions (`service.name`, `span.name`, `span.kind`,
    /// `status.code`) left out of the series.
    pub exclude_dimensions: Vec<String>,
    /// `namespace` (default `traces.span.metrics`): prefix of the metric names, joined with
    /// `.`; empty for bare `calls` and `duration`.
    pub namespace: String,
    /// `metrics_flush_interval` (default 60s): how often the cumulative metrics are emitted.
    pub metrics_flush_interval: Duration,
    /// `exemplars.enabled` (default false): attach exemplars (trace and span ids of recent
    /// spans) to the `duration` points.
    pub exemplars_enabled: bool,
    /// `resource_metrics_key_attributes`: resource attributes that, with `service.name`,
    /// tell resources apart; spans of resources equal on these share one `ResourceMetrics`.
    /// Empty (the default) keys resources by all their attributes.
    pub resource_metrics_key_attributes: Vec<String>,
    /// `dimensions_cache_size` (default 1000): checked and kept; tailgate keys its series
    /// directly and needs no separate attribute cache.
    pub dimensions_cache_size: NonZeroUsize,
    /// `aggregation_cardinality_limit` (tailgate default 10000; 0 = no limit): the most
    /// series held. Spans of new series beyond it are counted in one overflow series per
    /// resource, whose only attribute is `otel.metric.overflow=true`.
    pub aggregation_cardinality_limit: Option<NonZeroUsize>,
}

/// One of `connectors.spanmetrics.dimensions`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpanMetricsDimension {
    /// `name`: the span or resource attribute.
    pub name: String,
    /// `default`: the value used when neither the span nor its resource has the attribute;
    /// without one, the dimension is left out of that series.
    pub default: Option<String>,
}

/// `connectors.spanmetrics.histogram.unit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistogramUnit {
    /// `ms`.
    Milliseconds,
    /// `s`.
    Seconds,
}

named!(HistogramUnit { "ms" => Milliseconds, "s" => Seconds });

/// An extension's typed settings.
#[derive(Clone, Debug, PartialEq)]
pub enum ExtensionConfig {
    /// `health_check`.
    HealthCheck(HealthCheckConfig),
    /// `file_storage`: a directory for the persistent sending queues of the exporters
    /// whose `sending_queue.storage` names it.
    FileStorage(FileStorageConfig),
    /// `bearertokenauth`: a server authenticator that takes requests carrying one of its
    /// tokens.
    BearerTokenAuth(BearerTokenAuthConfig),
    /// `basicauth`: a server authenticator that takes requests carrying a user and password
    /// of its htpasswd entries.
    BasicAuth(BasicAuthConfig),
    /// `k8s_events` (tailgate's): Kubernetes Events for the gateway's own state changes.
    K8sEvents(K8sEventsConfig),
}

/// A credential from the config (a token, an inline htpasswd): compared and used, never
/// shown. Its `Debug` is `[REDACTED]` and it has no `Display`, so it cannot reach a log
/// line, an error message or `print-config` by formatting; [`Secret::expose`] is the one way
/// to its text.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// What `print-config` and `Debug` write in place of a secret.
    pub const REDACTED: &'static str = "[REDACTED]";

    /// Wraps `text`.
    pub fn new(text: String) -> Self {
        Self(text)
    }

    /// The secret text, for comparing and sending only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Self::REDACTED)
    }
}

/// `extensions.bearertokenauth`: requests must carry `<scheme> <token>` in `header`, for
/// one of the tokens (the Collector's `bearertokenauth` extension used as a server
/// authenticator).
#[derive(Clone, Debug, PartialEq)]
pub struct BearerTokenAuthConfig {
    /// `scheme` (default `Bearer`): the word before the token; empty for the token alone.
    pub scheme: String,
    /// `header` (default `Authorization`, matched without regard to case): the header (gRPC
    /// metadata key) that carries the credentials.
    pub header: String,
    /// `token`, `tokens` or `filename`.
    pub tokens: BearerTokens,
}

/// Where a `bearertokenauth` extension's tokens come from.
#[derive(Clone, Debug, PartialEq)]
pub enum BearerTokens {
    /// `tokens` (a list, any of which is taken), else `token`.
    Inline(Vec<Secret>),
    /// `filename`: one token per line (blank lines and surrounding space ignored), read at
    /// start and again when the file changes, so a rotated token (a Kubernetes Secret
    /// mounted as a file) is taken without a restart. As in the Collector, `token` and
    /// `tokens` are ignored when `filename` is set.
    File(PathBuf),
}

/// `extensions.basicauth`: requests must carry HTTP Basic credentials (`authorization:
/// Basic base64(user:password)`) of one of the htpasswd entries (the Collector's
/// `basicauth` extension used as a server authenticator).
#[derive(Clone, Debug, PartialEq)]
pub struct BasicAuthConfig {
    /// `htpasswd.file`: an htpasswd file, read when the config is loaded.
    pub file: Option<PathBuf>,
    /// `htpasswd.inline`: htpasswd lines written in the config (after those of `file`).
    pub inline: Option<Secret>,
    /// The entries of `file` then `inline` (a user in both: the later line wins), parsed
    /// when the config is loaded.
    pub users: Htpasswd,
}

/// `extensions.k8s_events` (tailgate's own extension): posts an `events.k8s.io/v1` Event
/// about the gateway's own Pod when it enters or leaves a state an operator acts on
/// (refusing data, exporter failing, deciding traces early, draining, peers changing).
///
/// Runs when listed in `service.extensions`, `enabled` and inside a cluster: without the
/// service-account token file it stays off (logged once at start). Every path and the API
/// server default to the in-cluster values, so in a Pod with a token nothing needs setting.
#[derive(Clone, Debug, PartialEq)]
pub struct K8sEventsConfig {
    /// `enabled` (default true): false turns the Events off without removing the section.
    pub enabled: bool,
    /// `api_server` (default `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`):
    /// the API server's base URL; must be `https://`.
    pub api_server: Option<String>,
    /// `token_file` (default the service-account token): read again for every request, so
    /// a projected token that the kubelet rotates keeps working.
    pub token_file: PathBuf,
    /// `ca_file` (default the service-account `ca.crt`): the CA that signed the API
    /// server's certificate.
    pub ca_file: PathBuf,
    /// `namespace_file` (default the service-account `namespace`): the Pod's namespace
    /// when the `POD_NAMESPACE` environment variable is not set.
    pub namespace_file: PathBuf,
    /// `series_window` (default 10m): a repeat of the same transition within this time of
    /// the last one updates the existing Event's `series` (count, last observed time)
    /// instead of creating a new Event.
    pub series_window: Duration,
    /// `queue_size` (default 64): transitions waiting to be posted. When full, a new one
    /// is dropped and counted (`tailgate_k8s_events_failed_total{reason="queue_full"}`);
    /// the data path never waits for the API server.
    pub queue_size: NonZeroUsize,
    /// `timeout` (default 3s): the limit on one request to the API server, so that a slow
    /// server only delays the background task.
    pub timeout: Duration,
}

/// `extensions.file_storage`: where persistent sending queues live, and how they write.
///
/// Keys are the Collector's `filestorage` extension's, with the same defaults except that
/// `directory` is required (the Collector defaults to `/var/lib/otelcol/file_storage`), plus
/// tailgate's `max_size_mib`. `compaction` is accepted and has no effect: the queue is a set
/// of append-only segment files deleted once delivered, so there is nothing to compact.
#[derive(Clone, Debug, PartialEq)]
pub struct FileStorageConfig {
    /// `directory` (required): each exporter's queue lives in a sub-directory named after
    /// the exporter id and signal. Must be writable; put it on a persistent volume for the
    /// queue to survive a pod being rescheduled.
    pub directory: PathBuf,
    /// `create_directory` (default false, as in the Collector): create `directory` (and its
    /// parents) at startup when it does not exist; otherwise a missing directory is a
    /// startup error.
    pub create_directory: bool,
    /// `directory_permissions` (default `0750`, octal): the mode of directories created
    /// because of `create_directory`, minus the process umask.
    pub directory_permissions: u32,
    /// `timeout` (default 1s): how long to wait at startup for the lock on a queue directory
    /// held by another process (another tailgate using the same directory) before failing.
    pub timeout: Duration,
    /// `fsync` (default false): fsync each batch before `export` returns (and the read
    /// position after each delivery). Without it a batch survives a process crash (the
    /// page cache has it) but maybe not a power loss or kernel crash.
    pub fsync: bool,
    /// `max_size_mib` (tailgate's; default 1024): the most disk space, in bytes, one
    /// exporter's queue under this extension takes. When it is full, `export` waits
    /// (backpressure up to the receivers) rather than dropping. A single batch larger than
    /// this is still written when the queue is empty.
    pub max_size: u64,
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

impl Signal {
    /// The signal's name as the config and the Collector's `data_type` label write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Traces => "traces",
            Self::Metrics => "metrics",
            Self::Logs => "logs",
        }
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
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

named!(LogLevel { "debug" => Debug, "info" => Info, "warn" => Warn, "error" => Error });

/// `service.telemetry.logs.encoding`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogEncoding {
    /// Human-readable lines.
    Console,
    /// One JSON object per line.
    Json,
}

named!(LogEncoding { "console" => Console, "json" => Json });
