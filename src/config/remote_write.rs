//! `exporters.prometheusremotewrite` (alias `prometheus_remote_write`): keys and defaults of
//! the Collector's `prometheusremotewriteexporter`.

use std::num::NonZeroUsize;

use super::common::{HeaderRules, Reader, headers, retry_with, tls_client};
use super::defaults;
use super::endpoint;
use super::error::{Problems, join};
use super::fields::{Fields, NOT_YET};
use super::tls;
use super::{ExporterConfig, QueueConfig, RemoteWriteConfig, RemoteWriteMessage};

/// Headers the remote-write protocol reserves; `headers` may not set them.
pub(crate) const RESERVED_HEADERS: [&str; 4] = [
    "content-encoding",
    "content-type",
    "x-prometheus-remote-write-version",
    "user-agent",
];

/// The remote-write 1.0 message name (the default `protobuf_message`).
pub(crate) const MESSAGE_V1: &str = "prometheus.WriteRequest";

/// The remote-write 2.0 message name.
pub(crate) const MESSAGE_V2: &str = "io.prometheus.write.v2.Request";

/// `exporters.prometheusremotewrite`.
pub(crate) const EXPORTER: Reader<ExporterConfig> = Reader {
    known: &[
        "endpoint",
        "headers",
        "timeout",
        "tls",
        "namespace",
        "external_labels",
        "resource_to_telemetry_conversion",
        "target_info",
        "add_metric_suffixes",
        "send_metadata",
        "max_batch_size_bytes",
        "remote_write_queue",
        "retry_on_failure",
        "protobuf_message",
        "compression",
    ],
    unsupported: &[
        ("http", NOT_YET),
        ("auth", NOT_YET),
        ("wal", NOT_YET),
        ("export_created_metric", NOT_YET),
        ("disable_scope_info", NOT_YET),
        ("translation_strategy", NOT_YET),
        ("resource_constant_labels", NOT_YET),
        ("max_batch_request_parallelism", NOT_YET),
        ("convert_explicit_histograms_to_nhcb", NOT_YET),
        ("keep_classic_histograms", NOT_YET),
        ("include_metadata_keys", NOT_YET),
        (
            "sending_queue",
            "this exporter's queue is `remote_write_queue`",
        ),
        ("proxy_url", NOT_YET),
        ("read_buffer_size", NOT_YET),
        ("write_buffer_size", NOT_YET),
    ],
    typed: |problems, fields| ExporterConfig::PrometheusRemoteWrite(exporter(problems, fields)),
};

fn exporter(problems: &mut Problems, exporter: &Fields<'_>) -> RemoteWriteConfig {
    let endpoint = exporter.string(problems, "endpoint");
    let wrong_type =
        exporter.wrong_type() || (endpoint.is_none() && exporter.value("endpoint").is_some());
    let endpoint = endpoint.unwrap_or_default();
    if endpoint.is_empty() && !wrong_type {
        problems.add(
            exporter.key_path("endpoint"),
            "must not be empty: set the remote-write URL, e.g. http://prometheus.monitoring:9090/api/v1/write",
        );
    } else if !endpoint.is_empty()
        && let Err(message) =
            endpoint::check_url(&endpoint).and_then(|()| endpoint::check_uri(&endpoint))
    {
        problems.add(exporter.key_path("endpoint"), message);
    }

    let headers = headers(problems, exporter, HeaderRules::Http);
    for name in headers.keys() {
        if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            problems.add(
                join(&exporter.key_path("headers"), name),
                format!(
                    "{name:?} is set by the remote-write protocol and cannot be overridden; remove it"
                ),
            );
        }
    }

    let external_labels = exporter
        .string_map(problems, "external_labels")
        .unwrap_or_default();
    for (name, value) in &external_labels {
        let label_path = join(&exporter.key_path("external_labels"), name);
        if name.is_empty() {
            problems.add(label_path, "a label name must not be empty");
        } else if !valid_label_name(name) {
            problems.add(
                label_path,
                format!("invalid label name {name:?}: use letters, digits and '_', not starting with a digit"),
            );
        } else if value.is_empty() {
            problems.add(
                label_path,
                "a label value must not be empty (remote write forbids empty values)",
            );
        }
    }

    let namespace = exporter.string(problems, "namespace").unwrap_or_default();

    let enabled = |problems: &mut Problems, key: &str, default: bool| {
        let section = exporter.child(problems, key, &["enabled"], &[]);
        section.boolean(problems, "enabled").unwrap_or(default)
    };
    let resource_to_telemetry_conversion =
        enabled(problems, "resource_to_telemetry_conversion", false);
    let target_info = enabled(problems, "target_info", defaults::REMOTE_WRITE_TARGET_INFO);

    let default_max =
        NonZeroUsize::new(defaults::REMOTE_WRITE_MAX_BATCH_SIZE_BYTES).unwrap_or(NonZeroUsize::MIN);
    let max_batch_size_bytes =
        exporter.at_least_one(problems, "max_batch_size_bytes", default_max.get());

    let queue = exporter.child(
        problems,
        "remote_write_queue",
        &["enabled", "queue_size", "num_consumers"],
        &[],
    );
    let remote_write_queue = QueueConfig {
        enabled: queue
            .boolean(problems, "enabled")
            .unwrap_or(defaults::REMOTE_WRITE_QUEUE_ENABLED),
        queue_size: queue.at_least_one(problems, "queue_size", defaults::REMOTE_WRITE_QUEUE_SIZE),
        num_consumers: queue.at_least_one(
            problems,
            "num_consumers",
            defaults::REMOTE_WRITE_NUM_CONSUMERS,
        ),
        storage: None,
    };

    let protobuf_message = match exporter.string(problems, "protobuf_message") {
        None => RemoteWriteMessage::V1,
        Some(text) if text.is_empty() || text == MESSAGE_V1 => RemoteWriteMessage::V1,
        Some(text) if text == MESSAGE_V2 => RemoteWriteMessage::V2,
        Some(text) => {
            problems.add(
                exporter.key_path("protobuf_message"),
                format!("unknown message {text:?} (supported: {MESSAGE_V1}, {MESSAGE_V2})"),
            );
            RemoteWriteMessage::V1
        }
    };

    if let Some(text) = exporter.string(problems, "compression")
        && !text.eq_ignore_ascii_case("snappy")
    {
        problems.add(
            exporter.key_path("compression"),
            format!("unsupported compression {text:?}: remote write uses snappy only"),
        );
    }

    let tls = tls_client(problems, exporter);
    // The exporter loads the TLS files whatever the URL's scheme.
    tls::check_files(problems, &exporter.key_path("tls"), &tls);

    RemoteWriteConfig {
        endpoint,
        headers,
        timeout: exporter
            .positive_duration(problems, "timeout")
            .unwrap_or(defaults::REMOTE_WRITE_TIMEOUT),
        tls,
        namespace,
        external_labels,
        resource_to_telemetry_conversion,
        target_info,
        add_metric_suffixes: exporter
            .boolean(problems, "add_metric_suffixes")
            .unwrap_or(defaults::REMOTE_WRITE_ADD_METRIC_SUFFIXES),
        send_metadata: exporter.boolean(problems, "send_metadata").unwrap_or(false),
        max_batch_size_bytes,
        remote_write_queue,
        retry_on_failure: retry_with(problems, exporter, &defaults::REMOTE_WRITE_RETRY),
        protobuf_message,
    }
}

/// `[a-zA-Z_][a-zA-Z0-9_]*`.
fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use std::time::Duration;

    use crate::config::tests::{MINIMAL, assert_round_trips, no_env};
    use crate::config::{ExporterConfig, RemoteWriteConfig, load_str_with_env};

    /// A `prometheusremotewrite` exporter with only its endpoint.
    const PLAIN: &str = "
exporters:
  prometheusremotewrite:
    endpoint: http://prometheus:9090/api/v1/write
";

    /// `MINIMAL` merged with `overlays` in order.
    fn load(overlays: &[&str]) -> Result<crate::config::Config, String> {
        let docs: Vec<&str> = [MINIMAL].iter().chain(overlays).copied().collect();
        load_str_with_env(&docs, &no_env).map_err(|e| e.to_string())
    }

    fn remote_write(config: &crate::config::Config, id: &str) -> RemoteWriteConfig {
        let (_, exporter) = config
            .exporters
            .iter()
            .find(|(k, _)| k.written == id)
            .unwrap();
        match exporter {
            ExporterConfig::PrometheusRemoteWrite(rw) => rw.clone(),
            other => panic!("{other:?}"),
        }
    }

    /// Scenario: `prometheusremotewrite` with only an endpoint, and the
    /// `prometheus_remote_write` alias.
    /// Guarantees: every default is the Collector's (queue 10000/5, 3000000 bytes, target_info
    /// on, suffixes on, metadata off, retry 50ms/200ms/1m, timeout 5s, RW 1.0).
    #[test]
    fn defaults_and_alias() {
        let config = load(&[
            PLAIN,
            "
exporters:
  prometheus_remote_write/two:
    endpoint: https://prom.example/api/v1/write
",
        ])
        .unwrap();
        let rw = remote_write(&config, "prometheusremotewrite");
        assert_eq!(rw.endpoint, "http://prometheus:9090/api/v1/write");
        assert_eq!(rw.timeout, Duration::from_secs(5));
        assert_eq!(rw.max_batch_size_bytes.get(), 3_000_000);
        assert_eq!(rw.remote_write_queue.queue_size.get(), 10_000);
        assert_eq!(rw.remote_write_queue.num_consumers.get(), 5);
        assert!(rw.remote_write_queue.enabled);
        assert!(rw.target_info && rw.add_metric_suffixes);
        assert!(!rw.send_metadata && !rw.resource_to_telemetry_conversion);
        assert_eq!(rw.namespace, "");
        let retry = &rw.retry_on_failure;
        assert_eq!(retry.initial_interval, Duration::from_millis(50));
        assert_eq!(retry.max_interval, Duration::from_millis(200));
        assert_eq!(retry.max_elapsed_time, Some(Duration::from_secs(60)));
        assert_eq!(rw.protobuf_message, super::RemoteWriteMessage::V1);
        let two = remote_write(&config, "prometheus_remote_write/two");
        assert_eq!(two.endpoint, "https://prom.example/api/v1/write");
    }

    /// Scenario: a missing endpoint, a reserved header, an invalid and an empty external
    /// label, gzip compression, an unknown message, zero consumers, and the exporter in a
    /// traces pipeline.
    /// Guarantees: each is reported with its full path.
    #[test]
    fn problems_have_paths() {
        let error = load(&["
exporters:
  prometheusremotewrite/bad:
    headers:
      Content-Type: text/plain
    external_labels:
      9lives: x
      cluster: ''
    compression: gzip
    protobuf_message: io.prometheus.write.v3.Request
    remote_write_queue:
      num_consumers: 0
service:
  pipelines:
    traces:
      exporters: [prometheusremotewrite/bad]
"])
        .unwrap_err();
        for path in [
            "exporters.prometheusremotewrite/bad.endpoint: must not be empty",
            "exporters.prometheusremotewrite/bad.headers.Content-Type:",
            "exporters.prometheusremotewrite/bad.external_labels.9lives: invalid label name",
            "exporters.prometheusremotewrite/bad.external_labels.cluster: a label value must not be empty",
            "exporters.prometheusremotewrite/bad.compression: unsupported compression",
            "exporters.prometheusremotewrite/bad.protobuf_message: unknown message",
            "exporters.prometheusremotewrite/bad.remote_write_queue.num_consumers: must be at least 1",
            "service.pipelines.traces.exporters: \"prometheusremotewrite/bad\" exports metrics only",
        ] {
            assert!(error.contains(path), "missing {path:?} in:\n{error}");
        }
    }

    /// Scenario: every setting given a non-default value, rendered and read back.
    /// Guarantees: `load(render(c)) == c`.
    #[test]
    fn render_round_trips() {
        let config = load(&["
exporters:
  prometheusremotewrite/prom:
    endpoint: https://prom:9090/api/v1/write
    headers:
      X-Scope-OrgID: tenant-$$1
    timeout: 2s
    tls:
      insecure_skip_verify: true
    namespace: gw
    external_labels:
      cluster: eu-1
    resource_to_telemetry_conversion:
      enabled: true
    target_info:
      enabled: false
    add_metric_suffixes: false
    send_metadata: true
    max_batch_size_bytes: 100000
    remote_write_queue:
      enabled: false
      queue_size: 7
      num_consumers: 3
    retry_on_failure:
      initial_interval: 1s
      max_interval: 2s
      max_elapsed_time: 0s
    protobuf_message: prometheus.WriteRequest
    compression: snappy
"])
        .unwrap();
        assert_round_trips(&config);
        let rw = remote_write(&config, "prometheusremotewrite/prom");
        assert_eq!(rw.headers["X-Scope-OrgID"], "tenant-$1");
        assert_eq!(rw.retry_on_failure.max_elapsed_time, None);
        assert!(!rw.remote_write_queue.enabled);
    }

    /// Scenario: `protobuf_message: io.prometheus.write.v2.Request`, loaded and rendered.
    /// Guarantees: it selects remote write 2.0 and survives a render round trip.
    #[test]
    fn remote_write_2_message() {
        let config = load(&[
            PLAIN,
            "
exporters:
  prometheusremotewrite:
    protobuf_message: io.prometheus.write.v2.Request
",
        ])
        .unwrap();
        let rw = remote_write(&config, "prometheusremotewrite");
        assert_eq!(rw.protobuf_message, super::RemoteWriteMessage::V2);
        let text = assert_round_trips(&config);
        assert!(
            text.contains(r#"protobuf_message: "io.prometheus.write.v2.Request""#),
            "{text}"
        );
    }
}
