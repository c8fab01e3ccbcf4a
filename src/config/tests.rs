// Tests unwrap freely: a panic is the failure report (C15).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::Write as _;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use super::*;

/// The Collector-style gateway config from the brief, as users write it.
const COLLECTOR_CONFIG: &str = "
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 0.0.0.0:4317
      http:
        endpoint: 0.0.0.0:4318
processors:
  batch:
    send_batch_size: 1024
    timeout: 1s
exporters:
  otlp/tempo:
    endpoint: tempo-distributor.monitoring:4317
    tls:
      insecure: true
  otlphttp/backup:
    endpoint: http://tempo.monitoring:4318
    compression: zstd
    sending_queue:
      queue_size: 500
    retry_on_failure:
      max_elapsed_time: 0s
  debug:
    verbosity: detailed
extensions:
  health_check: {}
service:
  extensions: [health_check]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlp/tempo, otlphttp/backup]
    traces/debug:
      receivers: [otlp]
      exporters: [debug]
  telemetry:
    logs:
      level: info
    metrics:
      address: 0.0.0.0:8888
";

/// The smallest valid config; tests add the section they exercise.
pub(super) const MINIMAL: &str = "
receivers:
  otlp:
    protocols:
      grpc:
exporters:
  debug:
service:
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [debug]
";

/// The directory of the test TLS files: a CA, and a certificate with its key.
const TESTDATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/exporter/testdata");

/// An environment with no variable set.
pub(super) fn no_env(_: &str) -> Option<String> {
    None
}

fn load_one(yaml: &str) -> Config {
    match load_str_with_env(&[yaml], &no_env) {
        Ok(config) => config,
        Err(error) => panic!("config should load, got:\n{error}"),
    }
}

/// `MINIMAL` merged with `overlay`, which must load.
fn load_over(overlay: &str) -> Config {
    match load_str_with_env(&[MINIMAL, overlay], &no_env) {
        Ok(config) => config,
        Err(error) => panic!("config should load, got:\n{error}"),
    }
}

fn load_with(docs: &[&str], vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let vars: BTreeMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    load_str_with_env(docs, &move |name| vars.get(name).cloned())
}

/// The Display lines of the error from loading `docs` (merged in order).
fn problems_of(docs: &[&str]) -> Vec<String> {
    match load_str_with_env(docs, &no_env) {
        Ok(config) => panic!("config should be refused, got {config:#?}"),
        Err(error) => error.to_string().lines().map(str::to_owned).collect(),
    }
}

/// Renders `config` and asserts that the text reads back to an equal config and renders
/// again to the same text; returns the text.
#[track_caller]
pub(super) fn assert_round_trips(config: &Config) -> String {
    let rendered = render(config);
    let again = match load_str_with_env(&[&rendered], &no_env) {
        Ok(again) => again,
        Err(error) => panic!("rendered config should load:\n{error}\n---\n{rendered}"),
    };
    assert_eq!(&again, config, "round trip of:\n{rendered}");
    assert_eq!(render(&again), rendered);
    rendered
}

/// The problems of `MINIMAL` merged with `overlay`.
fn problems_with(overlay: &str) -> Vec<String> {
    problems_of(&[MINIMAL, overlay])
}

/// The id of a receiver, processor or extension (no aliases).
fn id(written: &str) -> ComponentId {
    ComponentId::literal(written)
}

/// The id of an exporter, with its canonical type.
fn xid(written: &str) -> ComponentId {
    let (kind, name) = match written.split_once('/') {
        Some((kind, name)) => (kind, Some(name.to_owned())),
        None => (written, None),
    };
    let kind = match kind {
        "otlp" => "otlp_grpc",
        "otlphttp" => "otlp_http",
        other => other,
    };
    ComponentId {
        written: written.to_owned(),
        kind: kind.to_owned(),
        name,
    }
}

fn nz(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap()
}

fn otlp_exporter(config: &Config, written: &str) -> OtlpExporterConfig {
    match &config.exporters[&xid(written)] {
        ExporterConfig::OtlpGrpc(otlp) | ExporterConfig::OtlpHttp(otlp) => otlp.clone(),
        other => panic!("{written} is not an OTLP exporter: {other:?}"),
    }
}

fn otlp_receiver(config: &Config) -> OtlpReceiverConfig {
    let ReceiverConfig::Otlp(otlp) = &config.receivers[&id("otlp")];
    otlp.clone()
}

fn batch(config: &Config) -> BatchConfig {
    match &config.processors[&id("batch")] {
        ProcessorConfig::Batch(batch) => batch.clone(),
        other => panic!("batch is not a batch processor: {other:?}"),
    }
}

// === defaults ===

/// Scenario: the built-in config is loaded, as when no `--config` is given.
/// Guarantees: it has grpc and http on 0.0.0.0 with the Collector's other defaults, batch
/// with 8192 / 0 / 200ms / 4 MiB - 64 KiB, a basic debug exporter, the health check on
/// 0.0.0.0:13133 at `/`, one traces pipeline otlp -> batch -> debug, and the service
/// defaults (metrics on 0.0.0.0:8888, info console logs, 30s shutdown).
#[test]
fn default_config_has_every_default() {
    let config = load_one(DEFAULT_CONFIG);
    assert_eq!(
        config,
        load(&[]).unwrap(),
        "load(&[]) is the default config"
    );

    let otlp = otlp_receiver(&config);
    assert_eq!(
        otlp.grpc,
        Some(GrpcServerConfig {
            endpoint: "0.0.0.0:4317".into(),
            max_recv_msg_size: 4 * 1024 * 1024,
            max_concurrent_streams: None,
            max_concurrent_requests: Some(nz(1024)),
            tls: None,
            auth: None,
        })
    );
    assert_eq!(
        otlp.http,
        Some(HttpServerConfig {
            endpoint: "0.0.0.0:4318".into(),
            traces_url_path: "/v1/traces".into(),
            metrics_url_path: "/v1/metrics".into(),
            logs_url_path: "/v1/logs".into(),
            max_request_body_size: 20 * 1024 * 1024,
            max_concurrent_requests: Some(nz(1024)),
            cors: None,
            tls: None,
            auth: None,
        })
    );
    assert_eq!(
        batch(&config),
        BatchConfig {
            send_batch_size: nz(8192),
            send_batch_max_size: None,
            send_batch_max_bytes: nz(4 * 1024 * 1024 - 64 * 1024),
            timeout: Duration::from_millis(200),
        }
    );
    assert_eq!(
        config.exporters[&xid("debug")],
        ExporterConfig::Debug(DebugExporterConfig {
            verbosity: Verbosity::Basic
        })
    );
    assert_eq!(
        config.extensions[&id("health_check")],
        ExtensionConfig::HealthCheck(HealthCheckConfig {
            endpoint: "0.0.0.0:13133".into(),
            path: "/".into(),
        })
    );
    assert_eq!(config.service.extensions, vec![id("health_check")]);
    let pipeline = |signal, written: &str| PipelineId {
        signal,
        written: written.into(),
    };
    assert_eq!(
        config.service.pipelines[&pipeline(Signal::Traces, "traces/in")],
        PipelineConfig {
            receivers: vec![id("otlp")],
            processors: vec![],
            exporters: vec![id("spanmetrics"), id("forward")],
        }
    );
    assert_eq!(
        config.service.pipelines[&pipeline(Signal::Traces, "traces/sampled")],
        PipelineConfig {
            receivers: vec![id("forward")],
            processors: vec![id("tail_sampling"), id("batch")],
            exporters: vec![xid("debug")],
        }
    );
    assert_eq!(
        config.service.pipelines[&pipeline(Signal::Metrics, "metrics")],
        PipelineConfig {
            receivers: vec![id("otlp"), id("spanmetrics")],
            processors: vec![id("batch")],
            exporters: vec![xid("debug")],
        }
    );
    assert_eq!(config.service.pipelines.len(), 3);
    assert_eq!(config.connectors[&id("forward")], ConnectorConfig::Forward);
    let Some(ConnectorConfig::SpanMetrics(span_metrics)) =
        config.connectors.get(&id("spanmetrics"))
    else {
        panic!("the default config derives span metrics");
    };
    assert_eq!(
        span_metrics,
        &SpanMetricsConfig {
            histogram_disabled: false,
            histogram_unit: HistogramUnit::Milliseconds,
            histogram_buckets: [
                2, 4, 6, 8, 10, 50, 100, 200, 400, 800, 1000, 1400, 2000, 5000, 10_000, 15_000
            ]
            .into_iter()
            .map(Duration::from_millis)
            .collect(),
            dimensions: vec![],
            exclude_dimensions: vec![],
            namespace: "traces.span.metrics".into(),
            metrics_flush_interval: Duration::from_secs(60),
            exemplars_enabled: false,
            resource_metrics_key_attributes: vec![],
            dimensions_cache_size: nz(1000),
            aggregation_cardinality_limit: Some(nz(10_000)),
        }
    );
    let Some(ProcessorConfig::TailSampling(sampling)) = config.processors.get(&id("tail_sampling"))
    else {
        panic!("the default config samples");
    };
    assert_eq!(
        sampling.decision_wait_after_root_received,
        Some(Duration::from_secs(2))
    );
    let names: Vec<&str> = sampling.policies.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["errors", "baseline"]);
    assert_eq!(
        config.service.telemetry,
        TelemetryConfig {
            metrics_address: Some("0.0.0.0:8888".into()),
            log_level: LogLevel::Info,
            log_encoding: LogEncoding::Console,
        }
    );
    assert_eq!(config.service.shutdown_timeout, Duration::from_secs(30));
}

/// Scenario: an OTLP exporter with only an endpoint.
/// Guarantees: the exporterhelper defaults apply: gzip, 5s timeout, queue enabled with
/// 1000 slots and 10 consumers, retry enabled 5s -> 30s, 300s cap, x1.5, jitter 0.5, TLS
/// on (insecure false), no headers.
#[test]
fn otlp_exporter_defaults() {
    let config = load_over(
        "
exporters:
  otlp:
    endpoint: tempo:4317
",
    );
    assert_eq!(
        otlp_exporter(&config, "otlp"),
        OtlpExporterConfig {
            endpoint: "tempo:4317".into(),
            traces_endpoint: None,
            metrics_endpoint: None,
            tls: TlsClientConfig::default(),
            headers: BTreeMap::new(),
            compression: Compression::Gzip,
            timeout: Duration::from_secs(5),
            sending_queue: QueueConfig {
                enabled: true,
                queue_size: nz(1000),
                num_consumers: nz(10),
                storage: None,
            },
            retry_on_failure: RetryConfig {
                enabled: true,
                initial_interval: Duration::from_secs(5),
                max_interval: Duration::from_secs(30),
                max_elapsed_time: Some(Duration::from_secs(300)),
                multiplier: 1.5,
                randomization_factor: 0.5,
            },
        }
    );
}

/// Scenario: the gateway config a Collector user runs today is loaded as is.
/// Guarantees: it loads without change and every value written in it arrives typed.
#[test]
fn collector_config_loads_unchanged() {
    let config = load_one(COLLECTOR_CONFIG);
    let otlp = otlp_receiver(&config);
    assert_eq!(otlp.grpc.unwrap().endpoint, "0.0.0.0:4317");
    assert_eq!(otlp.http.unwrap().endpoint, "0.0.0.0:4318");
    let batch = batch(&config);
    assert_eq!(batch.send_batch_size, nz(1024));
    assert_eq!(batch.timeout, Duration::from_secs(1));

    let tempo = otlp_exporter(&config, "otlp/tempo");
    assert!(matches!(
        config.exporters[&xid("otlp/tempo")],
        ExporterConfig::OtlpGrpc(_)
    ));
    assert_eq!(tempo.endpoint, "tempo-distributor.monitoring:4317");
    assert!(tempo.tls.insecure);

    let backup = otlp_exporter(&config, "otlphttp/backup");
    assert!(matches!(
        config.exporters[&xid("otlphttp/backup")],
        ExporterConfig::OtlpHttp(_)
    ));
    assert_eq!(backup.endpoint, "http://tempo.monitoring:4318");
    assert_eq!(backup.compression, Compression::Zstd);
    assert_eq!(backup.sending_queue.queue_size, nz(500));
    assert_eq!(backup.retry_on_failure.max_elapsed_time, None);
    assert_eq!(
        config.exporters[&xid("debug")],
        ExporterConfig::Debug(DebugExporterConfig {
            verbosity: Verbosity::Detailed
        })
    );

    let pipelines: Vec<(&str, &PipelineConfig)> = config
        .service
        .pipelines
        .iter()
        .map(|(id, p)| (id.written.as_str(), p))
        .collect();
    assert_eq!(pipelines.len(), 2);
    assert_eq!(pipelines[0].0, "traces");
    assert_eq!(
        pipelines[0].1.exporters,
        vec![xid("otlp/tempo"), xid("otlphttp/backup")]
    );
    assert_eq!(pipelines[1].0, "traces/debug");
    assert!(pipelines[1].1.processors.is_empty());
    assert_eq!(config.service.extensions, vec![id("health_check")]);
    assert_eq!(
        config.service.telemetry.metrics_address.as_deref(),
        Some("0.0.0.0:8888")
    );
    assert_eq!(config.service.telemetry.log_level, LogLevel::Info);
}

// === aliases and ids ===

/// Scenario: exporters written with the Collector's old and new type names, and a
/// pipeline that names one with the other spelling.
/// Guarantees: `otlp` and `otlp_grpc` are the gRPC exporter, `otlphttp` and `otlp_http`
/// the HTTP one, with the canonical kind and the written id kept; a reference in either
/// spelling resolves to the id as defined.
#[test]
fn exporter_type_aliases() {
    let config = load_one(
        "
receivers:
  otlp:
    protocols:
      http:
exporters:
  otlp/a:
    endpoint: a:4317
  otlp_grpc/b:
    endpoint: b:4317
  otlphttp/c:
    endpoint: http://c:4318
  otlp_http/d:
    endpoint: https://d
service:
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [otlp_grpc/a, otlp/b, otlp_http/c, otlphttp/d]
",
    );
    let kinds: Vec<(&str, &str, bool)> = config
        .exporters
        .iter()
        .map(|(id, exporter)| {
            (
                id.written.as_str(),
                id.kind.as_str(),
                matches!(exporter, ExporterConfig::OtlpGrpc(_)),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("otlp/a", "otlp_grpc", true),
            ("otlp_grpc/b", "otlp_grpc", true),
            ("otlp_http/d", "otlp_http", false),
            ("otlphttp/c", "otlp_http", false),
        ]
    );
    let traces = config.service.pipelines.values().next().unwrap();
    let written: Vec<&str> = traces
        .exporters
        .iter()
        .map(|id| id.written.as_str())
        .collect();
    assert_eq!(
        written,
        ["otlp/a", "otlp_grpc/b", "otlphttp/c", "otlp_http/d"]
    );
    for id in &traces.exporters {
        assert!(config.exporters.contains_key(id));
    }
}

/// Scenario: one exporter defined under both spellings of its type, and ids with an
/// empty name or type, and a name holding `/`.
/// Guarantees: the double definition and the bad ids are errors at the id's path; the
/// first `/` splits type and name, so `otlp/tempo/eu` is type otlp, name `tempo/eu`.
#[test]
fn component_id_rules() {
    assert_eq!(
        problems_with(
            "
exporters:
  otlp/tempo:
    endpoint: a:1
  otlp_grpc/tempo:
    endpoint: b:1
  otlp/:
    endpoint: c:1
  /x:
    endpoint: d:1
"
        ),
        [
            "exporters./x: invalid component id \"/x\": the type must start with a letter and hold only letters, digits and '_'",
            "exporters.otlp/: invalid component id \"otlp/\": the name after \"/\" must not be empty; write \"otlp\" or \"otlp/<name>\"",
            "exporters.otlp_grpc/tempo: \"otlp_grpc/tempo\" names the same exporter as \"otlp/tempo\" (otlp and otlp_grpc are one type): keep one",
        ]
    );
    let config = load_over(
        "
exporters:
  otlp/tempo/eu:
    endpoint: a:1
",
    );
    let key = config
        .exporters
        .keys()
        .find(|id| id.kind == "otlp_grpc")
        .unwrap();
    assert_eq!(key.name.as_deref(), Some("tempo/eu"));
    assert_eq!(key.to_string(), "otlp/tempo/eu");
}

/// Scenario: component types tailgate does not know, types it will support later, and
/// connectors.
/// Guarantees: an unknown type names the id, the section and the known types; reserved
/// processors and any connector say "not supported yet"; a pipeline reference to such a
/// component is not reported a second time.
#[test]
fn unknown_and_unsupported_types() {
    assert_eq!(
        problems_with(
            "
receivers:
  jaeger:
processors:
  filter/x:
exporters:
  kafka/out:
connectors:
  count:
extensions:
  healthcheck:
service:
  pipelines:
    traces:
      processors: [filter/x]
"
        ),
        [
            "receivers.jaeger: unknown receiver type \"jaeger\" (known: otlp)",
            "processors.filter/x: unknown processor type \"filter\" (known: batch, memory_limiter, tail_sampling)",
            "exporters.kafka/out: unknown exporter type \"kafka\" (known: otlp, otlp_grpc, otlphttp, otlp_http, debug, prometheusremotewrite, prometheus_remote_write, loadbalancing, load_balancing)",
            "connectors.count: connector type \"count\" is not supported yet by this version of tailgate; remove it",
            "extensions.healthcheck: unknown extension type \"healthcheck\" (known: health_check, file_storage, bearertokenauth, basicauth, k8s_events)",
        ]
    );
}

// === merging ===

/// Scenario: two files, the second overriding a scalar deep inside, adding a key, and
/// giving a new list.
/// Guarantees: mappings merge deeply, the later scalar wins, keys of the first file that
/// the second does not mention stay, and lists are replaced whole, not appended.
#[test]
fn later_files_merge_over_earlier_ones() {
    let base = "
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 0.0.0.0:4317
        max_recv_msg_size_mib: 16
exporters:
  otlp/tempo:
    endpoint: tempo:4317
    headers:
      x-scope-orgid: tenant-a
    retry_on_failure:
      max_interval: 1m
  debug:
service:
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [otlp/tempo, debug]
";
    let overlay = "
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:5317
exporters:
  otlp/tempo:
    headers:
      authorization: Bearer x
    retry_on_failure:
      max_interval: 2m
service:
  pipelines:
    traces:
      exporters: [otlp/tempo]
";
    let config = load_with(&[base, overlay], &[]).unwrap();
    let grpc = otlp_receiver(&config).grpc.unwrap();
    assert_eq!(grpc.endpoint, "127.0.0.1:5317");
    assert_eq!(grpc.max_recv_msg_size, 16 * 1024 * 1024);
    let tempo = otlp_exporter(&config, "otlp/tempo");
    assert_eq!(tempo.endpoint, "tempo:4317");
    assert_eq!(
        tempo.headers,
        BTreeMap::from([
            ("authorization".to_owned(), "Bearer x".to_owned()),
            ("x-scope-orgid".to_owned(), "tenant-a".to_owned()),
        ])
    );
    assert_eq!(
        tempo.retry_on_failure.max_interval,
        Duration::from_secs(120)
    );
    let traces = config.service.pipelines.values().next().unwrap();
    assert_eq!(traces.exporters, vec![xid("otlp/tempo")]);
}

/// Scenario: a later file writes `grpc:` with no value over an earlier file's settings.
/// Guarantees: the earlier settings stay (no value means "enabled with defaults", which
/// adds nothing), and an empty document changes nothing.
#[test]
fn later_null_keeps_earlier_mapping() {
    let settings = "
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 0.0.0.0:9999
";
    let overlay = "
receivers:
  otlp:
    protocols:
      grpc:
";
    let config = load_with(&[MINIMAL, settings, overlay, ""], &[]).unwrap();
    assert_eq!(
        otlp_receiver(&config).grpc.unwrap().endpoint,
        "0.0.0.0:9999"
    );
}

/// Scenario: two files on disk, and one that does not exist, and one with a YAML syntax
/// error.
/// Guarantees: `load` merges files in order; a missing file and a syntax error are
/// reported with the file name, the syntax error also with line and column.
#[test]
fn load_reads_files() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| -> PathBuf {
        let path = dir.path().join(name);
        let mut file = std::fs::File::create(&path).unwrap();
        file.write_all(text.as_bytes()).unwrap();
        path
    };
    let base = write("base.yaml", MINIMAL);
    let overlay = write("overlay.yaml", "processors:\n  batch:\n    timeout: 1s\n");
    let config = load(&[base.clone(), overlay]).unwrap();
    assert!(config.processors.contains_key(&id("batch")));

    let missing = dir.path().join("missing.yaml");
    let error = load(&[base.clone(), missing.clone()]).unwrap_err();
    assert_eq!(error.problems().len(), 1);
    assert_eq!(error.problems()[0].path, missing.display().to_string());
    assert!(
        error.problems()[0]
            .message
            .starts_with("cannot read the config file: "),
        "{error}"
    );

    let broken = write("broken.yaml", "receivers:\n  otlp: [1\n");
    let error = load(&[base, broken.clone()]).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "{}: invalid YAML: unclosed bracket '[' at line 2, column 9",
            broken.display()
        )
    );
}

/// Scenario: YAML that is valid but not a config: a duplicate key, a list at the top.
/// Guarantees: each is reported against its document with the position or the reason.
#[test]
fn yaml_shape_errors() {
    assert_eq!(
        problems_of(&["a: 1\na: 2\n", "- 1\n"]),
        [
            "<config 1>: invalid YAML: duplicate mapping key: a at line 2, column 1",
            "<config 2>: the top level must be a mapping (receivers:, exporters:, service: ...), found a list",
        ]
    );
}

// === environment variables ===

/// Scenario: `${env:NAME}`, `${NAME}`, defaults, an unset variable, `$$`, and a reference
/// that fills a whole integer value, all from an injected environment.
/// Guarantees: values are substituted as the Collector does; an unset variable without a
/// default is empty; a set-but-empty variable ignores the default; `$$` is a literal `$`;
/// a whole reference fills an integer key, and a string key keeps its text exactly
/// (`007` stays `007`); substituted text is not expanded again.
#[test]
fn env_substitution() {
    let yaml = "
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: ${env:TG_TEST_HOST}:${TG_TEST_PORT}
        max_recv_msg_size_mib: ${env:TG_TEST_MIB}
exporters:
  otlp:
    endpoint: ${env:TG_TEST_UNSET_ENDPOINT:-tempo:4317}
    headers:
      a: ${env:TG_TEST_UNSET}
      b: ${env:TG_TEST_EMPTY:-fallback}
      c: price is $$5 and ${TG_TEST_DOLLAR}
      d: ${env:TG_TEST_ZEROS}
      e: $HOME stays
    sending_queue:
      enabled: ${env:TG_TEST_BOOL}
    timeout: ${env:TG_TEST_TIMEOUT}
service:
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [otlp]
";
    let config = load_with(
        &[yaml],
        &[
            ("TG_TEST_HOST", "127.0.0.1"),
            ("TG_TEST_PORT", "4317"),
            ("TG_TEST_MIB", "8"),
            ("TG_TEST_EMPTY", ""),
            ("TG_TEST_DOLLAR", "${env:TG_TEST_HOST}"),
            ("TG_TEST_ZEROS", "007"),
            ("TG_TEST_BOOL", "false"),
            ("TG_TEST_TIMEOUT", "1m30s"),
        ],
    )
    .unwrap();
    let grpc = otlp_receiver(&config).grpc.unwrap();
    assert_eq!(grpc.endpoint, "127.0.0.1:4317");
    assert_eq!(grpc.max_recv_msg_size, 8 * 1024 * 1024);
    let otlp = otlp_exporter(&config, "otlp");
    assert_eq!(otlp.endpoint, "tempo:4317");
    assert_eq!(otlp.headers["a"], "");
    assert_eq!(otlp.headers["b"], "");
    assert_eq!(otlp.headers["c"], "price is $5 and ${env:TG_TEST_HOST}");
    assert_eq!(otlp.headers["d"], "007");
    assert_eq!(otlp.headers["e"], "$HOME stays");
    assert!(!otlp.sending_queue.enabled);
    assert_eq!(otlp.timeout, Duration::from_secs(90));
}

/// Scenario: references the gateway cannot expand, and an unset variable in a required
/// key and in an integer key.
/// Guarantees: other config sources, bad names and unterminated references are errors at
/// the value's path; an unset variable is empty, and the key that needed a value says so.
#[test]
fn env_substitution_errors() {
    assert_eq!(
        problems_with(
            "
exporters:
  otlp:
    endpoint: ${env:TG_TEST_UNSET}
    headers:
      a: ${file:/etc/token}
      b: ${env:1BAD}
      c: ${env:TG_TEST_OPEN
    sending_queue:
      queue_size: ${TG_TEST_UNSET}
"
        ),
        [
            "exporters.otlp.headers.a: unsupported config source \"file\" in \"${file:/etc/token}\": tailgate expands only environment variables, ${env:NAME}",
            "exporters.otlp.headers.b: invalid environment variable name \"1BAD\" in \"${env:1BAD}\": use letters, digits and '_', not starting with a digit",
            "exporters.otlp.headers.c: unterminated reference in \"${env:TG_TEST_OPEN\": add the closing \"}\", or write \"$$\" for a literal \"$\"",
        ]
    );
    assert_eq!(
        problems_with(
            "
exporters:
  otlp:
    endpoint: ${env:TG_TEST_UNSET}
    sending_queue:
      queue_size: ${TG_TEST_UNSET}
"
        ),
        [
            "exporters.otlp.endpoint: must not be empty: set where to send, e.g. tempo-distributor.monitoring:4317",
            "exporters.otlp.sending_queue.queue_size: expected a non-negative integer, found an empty string (an unset environment variable becomes an empty string)",
        ]
    );
}

// === errors, one kind at a time ===

/// Scenario: misspelled and unknown keys at several depths, and Collector keys tailgate
/// does not implement yet.
/// Guarantees: each is reported with its full path; unknown keys list the known ones;
/// known-but-unsupported keys say so instead.
#[test]
fn unknown_and_unsupported_keys() {
    assert_eq!(
        problems_with(
            "
receivers:
  otlp:
    protocols:
      grpc:
        endpont: 0.0.0.0:4317
        keepalive: {}
processors:
  batch:
    metadata_keys: [tenant]
exporters:
  otlp:
    endpoint: tempo:4317
    traces_endpoint: http://x
    sending_queue:
      sizer: items
    tls:
      ca_pem: xyz
service:
  telemetry:
    logs:
      output_paths: [stdout]
extra: 1
"
        ),
        [
            "extra: unknown key (known: receivers, processors, exporters, connectors, extensions, service)",
            "receivers.otlp.protocols.grpc.endpont: unknown key (known: endpoint, transport, max_recv_msg_size_mib, max_concurrent_streams, max_concurrent_requests, read_buffer_size, write_buffer_size, include_metadata, tls, auth)",
            "receivers.otlp.protocols.grpc.keepalive: not supported yet by this version of tailgate; remove it",
            "processors.batch.metadata_keys: not supported yet by this version of tailgate; remove it",
            "exporters.otlp.traces_endpoint: only the otlphttp exporter has traces_endpoint: for otlp, set endpoint",
            "exporters.otlp.tls.ca_pem: not supported yet by this version of tailgate; remove it",
            "exporters.otlp.sending_queue.sizer: not supported yet by this version of tailgate; remove it",
            "service.telemetry.logs.output_paths: not supported yet by this version of tailgate; remove it",
        ]
    );
}

/// Scenario: the OTLP receiver with bad endpoints, sizes, paths and transport, and with no
/// protocol.
/// Guarantees: each problem is reported at its key; `:4317` and `[::1]:4317` are valid;
/// a URL path without a leading `/` gets one, as in the Collector.
#[test]
fn receiver_errors() {
    assert_eq!(
        problems_of(&[
            MINIMAL,
            "
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 0.0.0.0:70000
        transport: unix
        max_recv_msg_size_mib: -1
        max_concurrent_streams: 5000000000
        max_concurrent_requests: -2
      http:
        endpoint: ::1:4318
        traces_url_path: /v1/tra ces
        max_request_body_size: lots
        cors:
          allowed_origins: http://a
  otlp/empty:
    protocols: {}
  otlp/list: []
"
        ]),
        [
            "receivers.otlp.protocols.grpc.endpoint: invalid port \"70000\" in \"0.0.0.0:70000\": expected a number from 0 to 65535",
            "receivers.otlp.protocols.grpc.transport: unsupported transport \"unix\": only \"tcp\" is supported",
            "receivers.otlp.protocols.grpc.max_recv_msg_size_mib: must not be negative",
            "receivers.otlp.protocols.grpc.max_concurrent_streams: 5000000000 is too large; the HTTP/2 limit is 4294967295",
            "receivers.otlp.protocols.grpc.max_concurrent_requests: must not be negative",
            "receivers.otlp.protocols.http.endpoint: host \"::1\" looks like an IPv6 address: put it in brackets, e.g. \"[::1]:4317\"",
            "receivers.otlp.protocols.http.traces_url_path: invalid URL path \"/v1/tra ces\": it must not contain spaces, '?' or '#'",
            "receivers.otlp.protocols.http.max_request_body_size: expected a non-negative integer, found the string \"lots\"",
            "receivers.otlp.protocols.http.cors.allowed_origins: expected a list, found the string \"http://a\"",
            "receivers.otlp/empty.protocols: must enable at least one protocol: add `grpc:` and/or `http:` (with no value for the defaults)",
            "receivers.otlp/list: expected a mapping, found a list",
        ]
    );
    let config = load_over(
        "
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: :4317
        max_recv_msg_size_mib: 0
        max_concurrent_streams: 100
        max_concurrent_requests: 0
      http:
        endpoint: '[::1]:4318'
        traces_url_path: traces
        max_request_body_size: 1048576
        max_concurrent_requests: 8
        cors:
          allowed_origins: [https://*.example.com]
          max_age: 600
",
    );
    let otlp = otlp_receiver(&config);
    let grpc = otlp.grpc.unwrap();
    assert_eq!(grpc.endpoint, ":4317");
    assert_eq!(
        grpc.max_recv_msg_size,
        4 * 1024 * 1024,
        "0 means the default"
    );
    assert_eq!(grpc.max_concurrent_streams, Some(100));
    assert_eq!(grpc.max_concurrent_requests, None, "0 means no limit");
    let http = otlp.http.unwrap();
    assert_eq!(http.endpoint, "[::1]:4318");
    assert_eq!(http.max_concurrent_requests, Some(nz(8)));
    assert_eq!(http.traces_url_path, "/traces");
    assert_eq!(http.max_request_body_size, 1024 * 1024);
    assert_eq!(
        http.cors,
        Some(CorsConfig {
            allowed_origins: vec!["https://*.example.com".into()],
            allowed_headers: vec![],
            max_age: Some(600),
        })
    );
}

/// Scenario: batch settings out of range.
/// Guarantees: send_batch_size 0, a max below the size, a byte cap below 1 KiB and a
/// bare-number timeout are each reported; a max of 0 means no limit.
#[test]
fn batch_errors() {
    assert_eq!(
        problems_with(
            "
processors:
  batch:
    send_batch_size: 100
    send_batch_max_size: 50
    send_batch_max_size_bytes: 1000
    timeout: 5
  batch/zero:
    send_batch_size: 0
"
        ),
        [
            "processors.batch.send_batch_max_size: must be 0 (no limit) or at least send_batch_size (100), found 50",
            "processors.batch.send_batch_max_size_bytes: must be at least 1024 bytes, found 1000",
            "processors.batch.timeout: a duration needs a unit: write e.g. \"5s\" or \"5ms\"",
            "processors.batch/zero.send_batch_size: must be at least 1",
        ]
    );
    let config = load_over(
        "
processors:
  batch:
    send_batch_max_size: 0
    send_batch_max_size_bytes: 1024
    timeout: 0
",
    );
    let batch = batch(&config);
    assert_eq!(batch.send_batch_max_size, None);
    assert_eq!(batch.send_batch_max_bytes, nz(1024));
    assert_eq!(batch.timeout, Duration::ZERO);
}

/// Scenario: OTLP exporters with every kind of bad setting.
/// Guarantees: an empty endpoint, a gRPC endpoint without port, an HTTP endpoint that is
/// not a URL, an unsupported compression, a lone client certificate, a zero queue, bad
/// retry ranges and a zero timeout are each reported at their key.
#[test]
fn exporter_errors() {
    assert_eq!(
        problems_with(
            "
exporters:
  otlp/tempo:
    endpoint: ''
  otlp/noport:
    endpoint: tempo
    compression: snappy
    timeout: 0s
    tls:
      cert_file: /tls/client.crt
  otlphttp:
    endpoint: tempo:4318
    traces_endpoint: ftp://tempo/v1/traces
    sending_queue:
      queue_size: 0
      num_consumers: 0
    retry_on_failure:
      initial_interval: 10s
      max_interval: 5s
      multiplier: 1
      randomization_factor: 1.5
      max_elapsed_time: 5 minutes
"
        ),
        [
            "exporters.otlp/noport.endpoint: \"tempo\" has no port: write host:port (e.g. tempo-distributor.monitoring:4317) or an http(s):// URL",
            "exporters.otlp/noport.tls.key_file: must be set when cert_file is set: a client certificate needs its key",
            "exporters.otlp/noport.compression: unsupported compression \"snappy\" (supported: gzip, zstd, none)",
            "exporters.otlp/noport.timeout: must be greater than 0",
            "exporters.otlp/tempo.endpoint: must not be empty: set where to send, e.g. tempo-distributor.monitoring:4317",
            "exporters.otlphttp.endpoint: \"tempo:4318\" is not a URL: write it with its scheme, e.g. \"http://tempo:4318\"",
            "exporters.otlphttp.traces_endpoint: unsupported URL scheme \"ftp\" in \"ftp://tempo/v1/traces\": use http:// or https://",
            "exporters.otlphttp.sending_queue.queue_size: must be at least 1",
            "exporters.otlphttp.sending_queue.num_consumers: must be at least 1",
            "exporters.otlphttp.retry_on_failure.max_elapsed_time: unknown unit \" minutes\" in duration \"5 minutes\" (units: ns, us, ms, s, m, h)",
            "exporters.otlphttp.retry_on_failure.max_interval: must not be less than initial_interval (10s)",
            "exporters.otlphttp.retry_on_failure.multiplier: must be greater than 1, found 1",
            "exporters.otlphttp.retry_on_failure.randomization_factor: must be between 0 and 1, found 1.5",
        ]
    );
}

/// Scenario: exporters with every optional setting written (the client certificate and
/// key are real files; `ca_file` does not exist, and `insecure_skip_verify` means it is not
/// loaded).
/// Guarantees: TLS files, headers, `none` compression, queue and retry values and the
/// HTTP traces_endpoint arrive as written; a disabled retry skips the range checks, as in
/// the Collector; a gRPC endpoint may be a URL.
#[test]
fn exporter_settings() {
    let (cert, key) = (
        format!("{TESTDATA}/sink.pem"),
        format!("{TESTDATA}/sink.key"),
    );
    let config = load_over(&format!(
        "
exporters:
  otlp:
    endpoint: https://tempo.example.com:443
    compression: none
    timeout: 2s
    tls:
      insecure_skip_verify: true
      ca_file: /tls/ca.pem
      cert_file: {cert}
      key_file: {key}
      server_name_override: tempo.internal
    headers:
      x-scope-orgid: tenant-a
      x-number: 12345
    sending_queue:
      enabled: false
      queue_size: 5
      num_consumers: 2
    retry_on_failure:
      enabled: false
      multiplier: 0.5
  otlphttp:
    endpoint: https://tempo.example.com
    traces_endpoint: https://tempo.example.com/otlp/v1/traces
    compression: ''
",
    ));
    let otlp = otlp_exporter(&config, "otlp");
    assert_eq!(otlp.endpoint, "https://tempo.example.com:443");
    assert_eq!(otlp.compression, Compression::None);
    assert_eq!(otlp.timeout, Duration::from_secs(2));
    assert_eq!(
        otlp.tls,
        TlsClientConfig {
            insecure: false,
            insecure_skip_verify: true,
            ca_file: Some("/tls/ca.pem".into()),
            cert_file: Some(cert.into()),
            key_file: Some(key.into()),
            server_name_override: Some("tempo.internal".into()),
        }
    );
    assert_eq!(otlp.headers["x-number"], "12345");
    assert_eq!(
        otlp.sending_queue,
        QueueConfig {
            enabled: false,
            queue_size: nz(5),
            num_consumers: nz(2),
            storage: None,
        }
    );
    assert!(!otlp.retry_on_failure.enabled);
    assert_eq!(otlp.retry_on_failure.multiplier, 0.5);
    let http = otlp_exporter(&config, "otlphttp");
    assert_eq!(
        http.traces_endpoint.as_deref(),
        Some("https://tempo.example.com/otlp/v1/traces")
    );
    assert_eq!(http.compression, Compression::None);
}

/// Scenario: the debug exporter and the health check with bad values.
/// Guarantees: an unknown verbosity lists the valid ones, `sampling_*` must be integers,
/// a health path must start with `/`, and a health endpoint must have a port.
#[test]
fn debug_and_health_check_errors() {
    assert_eq!(
        problems_with(
            "
exporters:
  debug:
    verbosity: verbose
    sampling_initial: many
extensions:
  health_check:
    endpoint: 0.0.0.0
    path: health
"
        ),
        [
            "exporters.debug.verbosity: unknown value \"verbose\" (expected one of: basic, normal, detailed)",
            "exporters.debug.sampling_initial: expected a non-negative integer, found the string \"many\"",
            "extensions.health_check.endpoint: \"0.0.0.0\" has no port: write it as host:port",
            "extensions.health_check.path: invalid path \"health\": it must start with '/' and contain no spaces",
        ]
    );
}

// === receiver tls ===

/// Scenario: TLS on both OTLP servers: files only on gRPC, mTLS with versions pinned and a
/// reload interval on HTTP; the config rendered and read back.
/// Guarantees: every key is typed as written, defaults are min_version 1.2, no
/// max_version, no reload; `load(render(c)) == c`.
#[test]
fn receiver_tls_settings() {
    let config = load_one(&format!(
        "
receivers:
  otlp:
    protocols:
      grpc:
        tls:
          cert_file: {TESTDATA}/sink.pem
          key_file: {TESTDATA}/sink.key
      http:
        tls:
          cert_file: {TESTDATA}/sink.pem
          key_file: {TESTDATA}/sink.key
          client_ca_file: {TESTDATA}/ca.pem
          min_version: \"1.3\"
          max_version: \"1.3\"
          reload_interval: 30s
exporters:
  debug:
service:
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [debug]
"
    ));
    let otlp = otlp_receiver(&config);
    let file = |name: &str| PathBuf::from(format!("{TESTDATA}/{name}"));
    assert_eq!(
        otlp.grpc.and_then(|grpc| grpc.tls),
        Some(TlsServerConfig {
            cert_file: file("sink.pem"),
            key_file: file("sink.key"),
            client_ca_file: None,
            min_version: TlsVersion::Tls12,
            max_version: None,
            reload_interval: None,
        })
    );
    assert_eq!(
        otlp.http.and_then(|http| http.tls),
        Some(TlsServerConfig {
            cert_file: file("sink.pem"),
            key_file: file("sink.key"),
            client_ca_file: Some(file("ca.pem")),
            min_version: TlsVersion::Tls13,
            max_version: Some(TlsVersion::Tls13),
            reload_interval: Some(Duration::from_secs(30)),
        })
    );
    assert_round_trips(&config);
}

/// Scenario: receiver `tls` sections each with one mistake: no key_file, TLS 1.1, max below
/// min, an unknown version, a missing file, a key that does not match its certificate, a
/// CA file that holds no certificate, and Collector keys tailgate does not implement.
/// Guarantees: each is refused at its key with a message naming the file or the fix.
#[test]
fn receiver_tls_mistakes() {
    let grpc = |tls: &str| {
        problems_with(&format!(
            "
receivers:
  otlp:
    protocols:
      grpc:
        tls:
{tls}
"
        ))
    };
    let at = "receivers.otlp.protocols.grpc.tls";
    assert_eq!(
        grpc(&format!("          cert_file: {TESTDATA}/sink.pem")),
        [format!(
            "{at}.key_file: must be set: a TLS server needs a certificate (cert_file) and its \
             private key (key_file)"
        )]
    );
    let pair = format!(
        "          cert_file: {TESTDATA}/sink.pem\n          key_file: {TESTDATA}/sink.key\n"
    );
    assert_eq!(
        grpc(&format!("{pair}          min_version: \"1.1\"")),
        [format!(
            "{at}.min_version: TLS 1.1 is not supported (only 1.2 and 1.3 are: it is obsolete \
             and rustls does not implement it); set \"1.2\" or remove the key"
        )]
    );
    assert_eq!(
        grpc(&format!(
            "{pair}          min_version: \"1.3\"\n          max_version: \"1.2\""
        )),
        [format!(
            "{at}.max_version: \"1.2\" is below min_version \"1.3\": no TLS version would be \
             left; raise max_version or lower min_version"
        )]
    );
    assert_eq!(
        grpc(&format!("{pair}          max_version: \"2.0\"")),
        [format!(
            "{at}.max_version: unknown TLS version \"2.0\" (expected one of: 1.2, 1.3)"
        )]
    );
    let missing = grpc(&format!(
        "          cert_file: {TESTDATA}/missing.pem\n          key_file: {TESTDATA}/sink.key"
    ));
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert!(
        missing[0].starts_with(&format!(
            "{at}.cert_file: cannot read {TESTDATA}/missing.pem: "
        )),
        "{missing:?}"
    );
    let mismatched = grpc(&format!(
        "          cert_file: {TESTDATA}/ca.pem\n          key_file: {TESTDATA}/sink.key"
    ));
    assert_eq!(mismatched.len(), 1, "{mismatched:?}");
    assert!(
        mismatched[0].starts_with(&format!(
            "{at}.key_file: {TESTDATA}/sink.key cannot be used with the certificate in {TESTDATA}/ca.pem: "
        )) && mismatched[0].ends_with("set the key that belongs to cert_file"),
        "{mismatched:?}"
    );
    let not_a_ca = grpc(&format!(
        "{pair}          client_ca_file: {TESTDATA}/sink.key"
    ));
    assert_eq!(
        not_a_ca,
        [format!(
            "{at}.client_ca_file: {TESTDATA}/sink.key: no PEM certificate found (expected a \
             -----BEGIN CERTIFICATE----- block)"
        )]
    );
    assert_eq!(
        grpc(&format!(
            "{pair}          ca_file: {TESTDATA}/ca.pem\n          cipher_suites: [TLS_AES_128_GCM_SHA256]"
        )),
        [
            format!(
                "{at}.ca_file: has no effect on a server (the Collector ignores it too); remove \
                 it, or set client_ca_file to require client certificates signed by that CA"
            ),
            format!("{at}.cipher_suites: not supported yet by this version of tailgate; remove it"),
        ]
    );
}

// === file_storage ===

/// A traces pipeline exporting to `otlp/tempo` with a persistent queue on `file_storage/q`.
const FILE_STORAGE: &str = "
receivers:
  otlp:
    protocols:
      grpc:
exporters:
  otlp/tempo:
    endpoint: tempo:4317
    sending_queue:
      queue_size: 5000
      storage: file_storage/q
extensions:
  file_storage/q:
    directory: /tmp
service:
  extensions: [file_storage/q]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [otlp/tempo]
";

/// Scenario: a `file_storage` extension with only `directory`, named by an exporter's
/// `sending_queue.storage`; then every key set, `compaction` included.
/// Guarantees: the Collector's defaults (`create_directory` false, `directory_permissions`
/// 0750, `timeout` 1s, `fsync` false) and tailgate's `max_size_mib` 1024 are filled in; the
/// exporter keeps the storage id; explicit values are kept; `compaction` is accepted.
#[test]
fn file_storage_defaults_and_keys() {
    let config = load_one(FILE_STORAGE);
    assert_eq!(
        config.extensions[&id("file_storage/q")],
        ExtensionConfig::FileStorage(FileStorageConfig {
            directory: PathBuf::from("/tmp"),
            create_directory: false,
            directory_permissions: 0o750,
            timeout: Duration::from_secs(1),
            fsync: false,
            max_size: 1024 << 20,
        })
    );
    let queue = otlp_exporter(&config, "otlp/tempo").sending_queue;
    assert_eq!(queue.storage, Some(id("file_storage/q")));
    assert_eq!(queue.queue_size, nz(5000));

    let every_key = FILE_STORAGE.replace(
        "    directory: /tmp\n",
        "    directory: /q
    create_directory: true
    directory_permissions: '0700'
    timeout: 250ms
    fsync: true
    max_size_mib: 64
    compaction:
      on_start: true
      on_rebound: false
      directory: /tmp
      max_transaction_size: 65536
      rebound_needed_threshold_mib: 10
      rebound_trigger_threshold_mib: 5
      check_interval: 5s
      cleanup_on_start: true
",
    );
    let config = load_one(&every_key);
    assert_eq!(
        config.extensions[&id("file_storage/q")],
        ExtensionConfig::FileStorage(FileStorageConfig {
            directory: PathBuf::from("/q"),
            create_directory: true,
            directory_permissions: 0o700,
            timeout: Duration::from_millis(250),
            fsync: true,
            max_size: 64 << 20,
        })
    );
}

/// Scenario: `sending_queue.storage` naming an undefined extension, a defined one not
/// listed in `service.extensions`, a `health_check`, and storage on a disabled queue; a
/// `file_storage` without `directory`, with a bad mode, a zero size and an unknown key.
/// Guarantees: each is reported at its path with what to do.
#[test]
fn file_storage_errors() {
    let cases: [(&str, String, &[&str]); 5] = [
        (
            "storage not listed in service.extensions",
            FILE_STORAGE.replace("  extensions: [file_storage/q]\n", ""),
            &[
                "exporters.otlp/tempo.sending_queue.storage: \"file_storage/q\" is not listed in service.extensions: add it there so it starts",
            ],
        ),
        (
            "storage undefined",
            FILE_STORAGE.replace("storage: file_storage/q", "storage: file_storage/nope"),
            &[
                "exporters.otlp/tempo.sending_queue.storage: \"file_storage/nope\" is not defined under extensions: add a file_storage extension, e.g. extensions.file_storage/queue.directory",
            ],
        ),
        (
            "storage is a health_check",
            FILE_STORAGE
                .replace("storage: file_storage/q", "storage: health_check")
                .replace("extensions:\n", "extensions:\n  health_check:\n"),
            &[
                "exporters.otlp/tempo.sending_queue.storage: \"health_check\" is a health_check extension; a sending queue needs a file_storage extension",
            ],
        ),
        (
            "storage on a disabled queue",
            FILE_STORAGE.replace("queue_size: 5000", "enabled: false"),
            &[
                "exporters.otlp/tempo.sending_queue.storage: needs the sending queue: set sending_queue.enabled to true or remove storage",
            ],
        ),
        (
            "bad file_storage settings",
            FILE_STORAGE.replace(
                "    directory: /tmp\n",
                "    directory_permissions: rwx
    max_size_mib: 0
    compaction:
      on_start: maybe
      vacuum: true
",
            ),
            &[
                "extensions.file_storage/q.compaction.vacuum: unknown key (known: on_start, on_rebound, directory, max_transaction_size, rebound_needed_threshold_mib, rebound_trigger_threshold_mib, check_interval, cleanup_on_start)",
                "extensions.file_storage/q.compaction.on_start: expected true or false, found the string \"maybe\"",
                "extensions.file_storage/q.directory: must be set: the directory that holds the persistent queues, e.g. /var/lib/tailgate/queue",
                "extensions.file_storage/q.directory_permissions: invalid mode \"rwx\": write it in octal, e.g. \"0750\"",
                "extensions.file_storage/q.max_size_mib: must be at least 1",
            ],
        ),
    ];
    for (case, yaml, expected) in cases {
        assert_eq!(problems_of(&[&yaml]), expected, "case: {case}");
    }
}

/// Scenario: a config with a file_storage extension (every key set) and an exporter whose
/// queue names it, rendered and read back.
/// Guarantees: `load(render(c)) == c`, and the rendering is stable.
#[test]
fn file_storage_render_round_trips() {
    let config = load_one(&FILE_STORAGE.replace(
        "    directory: /tmp\n",
        "    directory: /var/lib/tailgate/queue
    create_directory: true
    directory_permissions: '0700'
    fsync: true
    max_size_mib: 3
",
    ));
    let rendered = assert_round_trips(&config);
    assert!(
        rendered.contains("      storage: \"file_storage/q\"\n"),
        "{rendered}"
    );
    assert!(
        rendered.contains("    directory_permissions: \"0700\"\n"),
        "{rendered}"
    );
}

/// Scenario: a service section with wrong references, a logs pipeline, an unknown
/// signal, a pipeline without receivers or exporters, and a repeated exporter.
/// Guarantees: each is reported at the list or pipeline it is in, with the id quoted.
#[test]
fn service_errors() {
    assert_eq!(
        problems_with(
            "
processors:
  batch:
service:
  extensions: [health_check]
  pipelines:
    traces:
      receivers: [otlp/other]
      processors: [batch, batch/2]
      exporters: [otlp/missing, debug, debug]
    traces/:
      receivers: [otlp]
    traces/empty:
      receivers: []
    metrics:
      receivers: [otlp]
      exporters: [debug]
    logs/x:
    profiles:
  shutdown_timeout: 0s
"
        ),
        [
            "service.extensions: \"health_check\" is not defined under extensions",
            "service.pipelines.logs/x: logs pipelines are not supported yet by this version of tailgate; remove this pipeline",
            "service.pipelines.profiles: unknown signal \"profiles\" (known: traces, metrics, logs); write the pipeline id as traces, metrics, traces/<name> or metrics/<name>",
            "service.pipelines.traces.receivers: \"otlp/other\" is not defined under receivers or connectors",
            "service.pipelines.traces.processors: \"batch/2\" is not defined under processors",
            "service.pipelines.traces.exporters: \"otlp/missing\" is not defined under exporters or connectors",
            "service.pipelines.traces.exporters: \"debug\" is listed more than once: list each exporter once",
            "service.pipelines.traces/: the name after \"/\" must not be empty; write \"traces\" or \"traces/<name>\"",
            "service.pipelines.traces/empty.receivers: a pipeline needs at least one receiver",
            "service.pipelines.traces/empty.exporters: a pipeline needs at least one exporter",
            "service.shutdown_timeout: must be greater than 0",
        ]
    );
    assert_eq!(
        problems_of(&["receivers:\n  otlp:\n    protocols:\n      http:\n"]),
        [
            "service.pipelines: must define at least one pipeline, e.g. `traces: {receivers: [otlp], exporters: [debug]}`"
        ]
    );
}

/// Scenario: components that are defined but used by no pipeline, and an extension not
/// listed in `service.extensions`.
/// Guarantees: they are not an error (as in the Collector), are still typed, and
/// `unused_components` names exactly them.
#[test]
fn unused_components_are_fine() {
    let config = load_over(
        "
processors:
  batch:
exporters:
  otlp/unused:
    endpoint: tempo:4317
extensions:
  health_check:
",
    );
    assert!(config.exporters.contains_key(&xid("otlp/unused")));
    assert_eq!(
        unused_components(&config),
        [&id("batch"), &xid("otlp/unused"), &id("health_check")]
    );
    assert!(unused_components(&load_one(DEFAULT_CONFIG)).is_empty());
}

/// Scenario: the telemetry settings in their older (`address`) and newer (`readers`)
/// forms, `level: none`, and bad values.
/// Guarantees: `readers` with one Prometheus pull reader maps to the address (IPv6 hosts
/// bracketed); `level: none` turns `/metrics` off; log level and encoding are checked;
/// `address` and `readers` together are refused.
#[test]
fn telemetry_settings() {
    let config = load_over(
        "
service:
  telemetry:
    logs:
      level: WARN
      encoding: json
    metrics:
      readers:
        - pull:
            exporter:
              prometheus:
                host: '::'
                port: 9090
",
    );
    assert_eq!(
        config.service.telemetry,
        TelemetryConfig {
            metrics_address: Some("[::]:9090".into()),
            log_level: LogLevel::Warn,
            log_encoding: LogEncoding::Json,
        }
    );
    let config = load_over(
        "
service:
  telemetry:
    metrics:
      level: none
      address: 0.0.0.0:8888
",
    );
    assert_eq!(config.service.telemetry.metrics_address, None);

    assert_eq!(
        problems_with(
            "
service:
  telemetry:
    logs:
      level: trace
      encoding: text
    metrics:
      level: verbose
      address: 0.0.0.0:9090
      readers:
        - periodic:
            exporter: {}
"
        ),
        [
            "service.telemetry.logs.level: unknown value \"trace\" (expected one of: debug, info, warn, error)",
            "service.telemetry.logs.encoding: unknown value \"text\" (expected one of: console, json)",
            "service.telemetry.metrics.level: unknown value \"verbose\" (expected one of: none, basic, normal, detailed)",
            "service.telemetry.metrics.readers[0].periodic: tailgate serves metrics only through one Prometheus pull reader: readers: [{pull: {exporter: {prometheus: {host: 0.0.0.0, port: 8888}}}}]",
            "service.telemetry.metrics.readers: set either address or readers, not both",
        ]
    );
}

/// Scenario: one config with problems in several sections at once.
/// Guarantees: every problem is reported in one error, one `path: message` per line of
/// its Display, in section order.
#[test]
fn several_errors_are_reported_together() {
    let error = load_str_with_env(
        &["
receivers:
  otlp:
    protocols:
      grpc:
        endpont: 0.0.0.0:4317
processors:
  batch:
    timeout: 10
exporters:
  otlp/tempo:
    endpoint: ''
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlp/missing]
"],
        &no_env,
    )
    .unwrap_err();
    assert_eq!(error.problems().len(), 4);
    assert_eq!(
        error.to_string(),
        "receivers.otlp.protocols.grpc.endpont: unknown key (known: endpoint, transport, max_recv_msg_size_mib, max_concurrent_streams, max_concurrent_requests, read_buffer_size, write_buffer_size, include_metadata, tls, auth)
processors.batch.timeout: a duration needs a unit: write e.g. \"10s\" or \"10ms\"
exporters.otlp/tempo.endpoint: must not be empty: set where to send, e.g. tempo-distributor.monitoring:4317
service.pipelines.traces.exporters: \"otlp/missing\" is not defined under exporters or connectors"
    );
    assert_eq!(
        error.problems()[3],
        Problem {
            path: "service.pipelines.traces.exporters".into(),
            message: "\"otlp/missing\" is not defined under exporters or connectors".into(),
        }
    );
}

/// Scenario: values of the wrong YAML type where a mapping, list, boolean or string is
/// expected.
/// Guarantees: each says what was expected and what was found.
#[test]
fn wrong_types() {
    assert_eq!(
        problems_with(
            "
exporters:
  otlp:
    endpoint: [a]
    tls: true
    headers:
      x: [1]
    retry_on_failure:
      enabled: yes please
      multiplier: fast
  otlp/scalar: tempo:4317
service:
  extensions: health_check
"
        ),
        [
            "exporters.otlp.endpoint: expected a string, found a list",
            "exporters.otlp.tls: expected a mapping, found the boolean true",
            "exporters.otlp.headers.x: expected a string, found a list",
            "exporters.otlp.retry_on_failure.enabled: expected true or false, found the string \"yes please\"",
            "exporters.otlp.retry_on_failure.multiplier: expected a number, found the string \"fast\"",
            "exporters.otlp/scalar: expected a mapping, found the string \"tempo:4317\"",
            "service.extensions: expected a list of extension ids, found the string \"health_check\"",
        ]
    );
}

// === render ===

/// Scenario: the default config, the Collector config, and a config with every optional
/// setting (including a `$` in a header and a `/` in a name) are rendered and read back.
/// Guarantees: `load_str(render(c)) == c` for each, and the rendering writes the defaults
/// out (e.g. the retry multiplier).
#[test]
fn render_round_trips() {
    let rich = &format!(
        "
receivers:
  otlp:
    protocols:
      http:
        endpoint: '[::1]:4318'
        cors:
          allowed_origins: ['https://*.example.com']
          allowed_headers: [x-custom]
          max_age: 60
processors:
  batch/small:
    send_batch_size: 10
    send_batch_max_size: 20
    timeout: 1m30s
exporters:
  otlp_grpc/tempo/eu:
    endpoint: tempo:4317
    headers:
      authorization: 'Bearer $$ecret'
      'x-empty':
    retry_on_failure:
      max_elapsed_time: 0s
      initial_interval: 250ms
      multiplier: 2
  otlphttp:
    endpoint: https://x
    traces_endpoint: https://x/v1/traces
    tls:
      ca_file: {TESTDATA}/ca.pem
service:
  pipelines:
    traces/x:
      receivers: [otlp]
      processors: [batch/small]
      exporters: [otlp_grpc/tempo/eu, otlphttp]
  telemetry:
    metrics:
      level: none
  shutdown_timeout: 1h
"
    );
    for config in [
        load_one(DEFAULT_CONFIG),
        load_one(COLLECTOR_CONFIG),
        load_over(rich),
    ] {
        assert_round_trips(&config);
    }
    let rendered = render(&load_one(COLLECTOR_CONFIG));
    assert!(rendered.contains("    multiplier: 1.5\n"), "{rendered}");
    assert!(rendered.contains("\n  otlp/tempo:\n"), "{rendered}");
    assert!(
        rendered.contains("exporters: [otlp/tempo, otlphttp/backup]\n"),
        "{rendered}"
    );
    let rich = render(&load_over(rich));
    assert!(rich.contains("authorization: \"Bearer $$ecret\""), "{rich}");
}

// === parts ===

/// Scenario: Go durations in every form the Collector writes, and malformed ones.
/// Guarantees: units ns/us/µs/μs/ms/s/m/h, fractions and sums parse as in Go; `0` is
/// zero; a missing or unknown unit and negative values are refused; `format` writes text
/// that parses back to the same value.
#[test]
fn go_durations() {
    use super::duration::{format, parse};
    let cases = [
        ("200ms", Duration::from_millis(200)),
        ("5s", Duration::from_secs(5)),
        ("1m30s", Duration::from_secs(90)),
        ("1h", Duration::from_secs(3600)),
        ("1.5s", Duration::from_millis(1500)),
        ("500us", Duration::from_micros(500)),
        ("500µs", Duration::from_micros(500)),
        ("500μs", Duration::from_micros(500)),
        ("10ns", Duration::from_nanos(10)),
        ("1h2m3.5s", Duration::from_millis(3_723_500)),
        (".5m", Duration::from_secs(30)),
        ("0", Duration::ZERO),
        ("0s", Duration::ZERO),
        ("+3s", Duration::from_secs(3)),
    ];
    for (text, expected) in cases {
        assert_eq!(parse(text), Ok(expected), "{text}");
        assert_eq!(parse(&format(expected)), Ok(expected), "{text}");
    }
    for bad in [
        "",
        "5",
        "1m 30s",
        "5 seconds",
        "1d",
        "-1s",
        "s",
        ".s",
        "1..5s",
    ] {
        assert!(parse(bad).is_err(), "{bad:?} should be refused");
    }
    assert_eq!(format(Duration::from_secs(90)), "1m30s");
    assert_eq!(format(Duration::from_millis(200)), "200ms");
    assert_eq!(format(Duration::from_micros(1500)), "1.5ms");
    assert_eq!(format(Duration::from_secs(3600)), "1h");
    assert_eq!(format(Duration::from_millis(3_600_500)), "1h0.5s");
}

/// Scenario: listening addresses and client targets of every shape.
/// Guarantees: `host:port`, `:port`, bracketed IPv6 and ports 0..=65535 are accepted for
/// listeners; a client needs a host; URLs need http(s) and a host.
#[test]
fn endpoints() {
    use super::endpoint::{check_grpc_target, check_listen, check_url};
    type Check = fn(&str) -> Result<(), String>;
    let cases: [(&str, Check, &[&str], &[&str]); 3] = [
        (
            "check_listen",
            check_listen,
            &[
                "0.0.0.0:4317",
                ":4317",
                "[::1]:4317",
                "[::]:0",
                "localhost:65535",
                "my_host:1",
            ],
            &[
                "0.0.0.0",
                "0.0.0.0:",
                "host:65536",
                "host:-1",
                "::1:4317",
                "[::1:4317",
                "[zz]:1",
                "a b:1",
            ],
        ),
        (
            "check_grpc_target",
            check_grpc_target,
            &[
                "tempo:4317",
                "http://tempo:4317",
                "https://tempo",
                "https://[::1]:443",
            ],
            &[":4317", "tempo", "grpc://tempo:4317", "https://"],
        ),
        (
            "check_url",
            check_url,
            &[
                "http://tempo:4318",
                "https://tempo/otlp",
                "http://10.0.0.1:4318/v1/traces?x=1",
            ],
            &[
                "tempo:4318",
                "http://",
                "http://user:pw@tempo",
                "http://tempo:x",
                "http://te mpo",
            ],
        ),
    ];
    for (name, check, accepted, refused) in cases {
        for ok in accepted {
            assert_eq!(check(ok), Ok(()), "{name}({ok:?})");
        }
        for bad in refused {
            assert!(check(bad).is_err(), "{name}: {bad:?} should be refused");
        }
    }
}

/// Scenario: the substitution rules on single strings.
/// Guarantees: a lone reference is reported as whole (so its key types it); text around
/// it, two references, or an escaped `$$` make it plain text.
#[test]
fn expand_whole_and_partial() {
    use super::expand::{Expanded, expand_str};
    let env = |name: &str| (name == "A").then(|| "1".to_owned());
    assert_eq!(expand_str("${A}", &env), Ok(Expanded::Whole("1".into())));
    assert_eq!(
        expand_str("${env:A}", &env),
        Ok(Expanded::Whole("1".into()))
    );
    assert_eq!(
        expand_str("${A}${A}", &env),
        Ok(Expanded::Text("11".into()))
    );
    assert_eq!(expand_str("${A}x}", &env), Ok(Expanded::Text("1x}".into())));
    assert_eq!(expand_str("$${A}", &env), Ok(Expanded::Text("${A}".into())));
    assert_eq!(
        expand_str("${B:-x:y}", &env),
        Ok(Expanded::Whole("x:y".into()))
    );
    assert_eq!(expand_str("a$", &env), Ok(Expanded::Text("a$".into())));
}

// === tail_sampling ===

/// A `tail_sampling` processor in a traces pipeline, over `MINIMAL`.
fn tail_overlay(body: &str) -> String {
    format!(
        "processors:\n  tail_sampling:\n{body}\nservice:\n  pipelines:\n    traces:\n      processors: [tail_sampling]\n"
    )
}

fn tail(config: &Config) -> TailSamplingConfig {
    match &config.processors[&id("tail_sampling")] {
        ProcessorConfig::TailSampling(tail) => tail.clone(),
        other => panic!("not tail_sampling: {other:?}"),
    }
}

/// A Collector tail_sampling config using every policy type.
const TAIL_EVERY_POLICY: &str = "    decision_wait: 10s
    num_traces: 100
    expected_new_traces_per_sec: 10
    sampling_strategy: trace-complete
    num_shards: 4
    decision_cache:
      sampled_cache_size: 500
    policies:
      - {name: all, type: always_sample}
      - {name: slow, type: latency, latency: {threshold_ms: 5000, upper_threshold_ms: 10000}}
      - {name: num, type: numeric_attribute, numeric_attribute: {key: key1, min_value: 50, max_value: 100}}
      - {name: prob, type: probabilistic, probabilistic: {sampling_percentage: 10}}
      - {name: salted, type: probabilistic, probabilistic: {hash_salt: 'custom-salt', sampling_percentage: 12.5}}
      - {name: errors, type: status_code, status_code: {status_codes: [ERROR, UNSET]}}
      - {name: str, type: string_attribute, string_attribute: {key: key2, values: [value1, value2]}}
      - {name: re, type: string_attribute, string_attribute: {key: key2, values: ['value.*'], enabled_regex_matching: true, cache_max_size: 10, invert_match: true}}
      - {name: bool, type: boolean_attribute, boolean_attribute: {key: key4, value: true}}
      - {name: ts, type: trace_state, trace_state: {key: key3, values: [value1, value2]}}
      - {name: flags, type: trace_flags}
      - {name: rate, type: rate_limiting, rate_limiting: {spans_per_second: 35}}
      - {name: bytes, type: bytes_limiting, bytes_limiting: {bytes_per_second: 1024, burst_capacity: 4096}}
      - {name: count, type: span_count, span_count: {min_spans: 2, max_spans: 20}}
      - name: and
        type: and
        and:
          and_sub_policy:
            - {name: sub-num, type: numeric_attribute, numeric_attribute: {key: key1, min_value: 50}}
            - {name: sub-str, type: string_attribute, string_attribute: {key: key2, values: [a]}}
      - name: not
        type: not
        not:
          not_sub_policy: {name: health, type: string_attribute, string_attribute: {key: http.route, values: [/health]}}
      - name: drop
        type: drop
        drop:
          drop_sub_policy:
            - {name: d, type: string_attribute, string_attribute: {key: url.path, values: [/ping]}}
      - name: composite
        type: composite
        composite:
          max_total_spans_per_second: 1000
          policy_order: [c-errors, c-all]
          composite_sub_policy:
            - {name: c-errors, type: status_code, status_code: {status_codes: [ERROR]}}
            - {name: c-all, type: always_sample}
          rate_allocation:
            - {policy: c-errors, percent: 50}
            - {policy: c-all, percent: 25}";

/// Scenario: the Collector's example tail_sampling config with every policy type.
/// Guarantees: it loads; defaults fill what is not written (30s wait is overridden, root
/// wait off, tailgate's cache sizes, flags false); each policy keeps its settings, with 0
/// bounds as none and an equal/zero allocation as written.
#[test]
fn tail_sampling_loads_every_policy() {
    let tail = tail(&load_over(&tail_overlay(TAIL_EVERY_POLICY)));
    assert_eq!(tail.decision_wait, Duration::from_secs(10));
    assert_eq!(tail.decision_wait_after_root_received, None);
    assert_eq!(tail.num_traces, nz(100));
    assert_eq!(tail.expected_new_traces_per_sec, 10);
    assert_eq!(tail.sampled_cache_size, 500);
    assert_eq!(tail.non_sampled_cache_size, 1_000_000);
    assert!(!tail.sample_on_first_match && !tail.block_on_overflow && !tail.record_policy);
    assert_eq!(tail.maximum_trace_size_bytes, None);
    assert_eq!(tail.policies.len(), 18);
    assert_eq!(
        tail.policies[1].kind,
        PolicyKind::Latency {
            threshold_ms: 5000,
            upper_threshold_ms: Some(10000)
        }
    );
    assert_eq!(
        tail.policies[4].kind,
        PolicyKind::Probabilistic {
            sampling_percentage: 12.5,
            hash_salt: Some("custom-salt".into())
        }
    );
    assert_eq!(
        tail.policies[5].kind,
        PolicyKind::StatusCode {
            status_codes: vec![StatusCodeName::Error, StatusCodeName::Unset]
        }
    );
    let PolicyKind::And { sub_policies } = &tail.policies[14].kind else {
        panic!("and: {:?}", tail.policies[14]);
    };
    assert_eq!(
        sub_policies[0].kind,
        PolicyKind::NumericAttribute {
            key: "key1".into(),
            min_value: Some(50),
            max_value: None,
            invert_match: false
        }
    );
    let PolicyKind::Composite {
        rate_allocation,
        sub_policies,
        ..
    } = &tail.policies[17].kind
    else {
        panic!("composite: {:?}", tail.policies[17]);
    };
    assert_eq!(sub_policies.len(), 2);
    assert_eq!(
        rate_allocation,
        &[("c-errors".to_owned(), 50.0), ("c-all".to_owned(), 25.0)]
    );
    assert!(crate::sampler::policy::PolicySet::compile(&tail).is_ok());
}

/// Scenario: a tail_sampling config with a mistake in many places at once.
/// Guarantees: every problem is reported with its exact path, including inside
/// sub-policies; OTTL, span-ingest and tail_storage are refused with advice; an unknown
/// type lists the known ones; duplicate names are refused.
#[test]
fn tail_sampling_errors_have_paths() {
    let problems = problems_with(&tail_overlay(
        "    sampling_strategy: span-ingest
    tail_storage: x
    num_traces: 0
    policies:
      - {name: a, type: probabilistic, probabilistic: {sampling_percentage: 150}}
      - {name: a, type: always_sample}
      - {name: o, type: ottl_condition, ottl_condition: {span: ['true']}}
      - {name: u, type: sometimes}
      - {name: '', type: status_code, status_code: {status_codes: [FAIL]}}
      - {name: l, type: latency, latency: {threshold_ms: 10}, status_code: {status_codes: [ERROR]}}
      - name: x
        type: and
        and:
          and_sub_policy:
            - {name: bad-re, type: string_attribute, string_attribute: {key: k, values: ['('], enabled_regex_matching: true}}
            - {name: d, type: drop, drop: {drop_sub_policy: [{name: z, type: always_sample}]}}
      - {name: num, type: numeric_attribute, numeric_attribute: {key: k}}
      - name: c
        type: composite
        composite:
          max_total_spans_per_second: 0
          composite_sub_policy: [{name: s1, type: always_sample}]
          rate_allocation: [{policy: s2, percent: 50}]",
    ));
    let expect = [
        "processors.tail_sampling.num_traces: must be at least 1",
        "processors.tail_sampling.sampling_strategy: \"span-ingest\" is not supported by tailgate",
        "processors.tail_sampling.tail_storage: tail storage extensions are not supported",
        "processors.tail_sampling.policies[0].probabilistic.sampling_percentage: must be between 0 and 100",
        "processors.tail_sampling.policies[1].name: duplicate policy name \"a\" (also policies[0])",
        "processors.tail_sampling.policies[2].type: OTTL conditions are not supported by tailgate: use the typed policies",
        "processors.tail_sampling.policies[3].type: unknown policy type \"sometimes\" (known: always_sample, latency,",
        "processors.tail_sampling.policies[4].name: must be set to a non-empty policy name",
        "processors.tail_sampling.policies[4].status_code.status_codes[0]: unknown status code \"FAIL\" (known: OK, ERROR, UNSET)",
        "processors.tail_sampling.policies[5].status_code: settings for type status_code, but this policy's type is latency",
        "processors.tail_sampling.policies[6].and.and_sub_policy[0].string_attribute.values[0]: invalid regular expression",
        "processors.tail_sampling.policies[6].and.and_sub_policy[1].type: a drop policy is allowed only at the top level",
        "processors.tail_sampling.policies[7].numeric_attribute: set min_value and/or max_value",
        "processors.tail_sampling.policies[8].composite.max_total_spans_per_second: must be at least 1",
        "processors.tail_sampling.policies[8].composite.rate_allocation[0].policy: \"s2\" is not the name of a composite_sub_policy",
    ];
    for want in expect {
        assert!(
            problems.iter().any(|p| p.starts_with(want)),
            "missing {want:?} in:\n{}",
            problems.join("\n")
        );
    }
    assert_eq!(problems.len(), expect.len(), "{}", problems.join("\n"));
}

/// Scenario: a tail_sampling processor with no policies, and one with an empty list.
/// Guarantees: both are refused at `policies`.
#[test]
fn tail_sampling_needs_policies() {
    assert_eq!(
        problems_with(&tail_overlay("    decision_wait: 5s")),
        [
            "processors.tail_sampling.policies: must list at least one policy, e.g. `- {name: errors, type: status_code, status_code: {status_codes: [ERROR]}}`"
        ]
    );
    assert_eq!(
        problems_with(&tail_overlay("    policies: []")),
        ["processors.tail_sampling.policies: must list at least one policy"]
    );
}

/// Scenario: the every-policy config and one with every top-level setting changed are
/// rendered and read back.
/// Guarantees: `load(render(c)) == c` and rendering is stable.
#[test]
fn tail_sampling_render_round_trips() {
    let settings = "    decision_wait: 1m
    decision_wait_after_root_received: 2s
    num_traces: 7
    decision_cache: {sampled_cache_size: 0, non_sampled_cache_size: 3}
    sample_on_first_match: true
    drop_pending_traces_on_shutdown: true
    maximum_trace_size_bytes: 1048576
    block_on_overflow: true
    record_policy: true
    policies:
      - {name: 'odd \"$$name\"', type: probabilistic, probabilistic: {sampling_percentage: 0.5}}";
    for body in [TAIL_EVERY_POLICY, settings] {
        let config = load_over(&tail_overlay(body));
        assert_round_trips(&config);
    }
    let tail = tail(&load_over(&tail_overlay(settings)));
    assert_eq!(tail.policies[0].name, "odd \"$name\"");
    assert_eq!(
        tail.decision_wait_after_root_received,
        Some(Duration::from_secs(2))
    );
    assert_eq!(tail.maximum_trace_size_bytes, Some(nz(1 << 20)));
}

// === memory_limiter ===

/// Scenario: memory_limiter in MiB, in percentages, and with mistakes.
/// Guarantees: the Collector's keys load to bytes or percentages; check_interval is
/// required; a spike at or above the limit and a missing limit are reported with paths;
/// render round-trips.
#[test]
fn memory_limiter_keys() {
    let base = |limiter: &str| {
        format!(
            "receivers: {{otlp: {{protocols: {{grpc: {{}}}}}}}}
processors:
  memory_limiter:
{limiter}
exporters: {{debug: {{}}}}
service: {{pipelines: {{traces: {{receivers: [otlp], processors: [memory_limiter], exporters: [debug]}}}}}}
"
        )
    };
    let loads = [
        (
            "    check_interval: 1s\n    limit_mib: 64\n    spike_limit_mib: 16",
            Duration::from_secs(1),
            MemoryAmount::Bytes(64 << 20),
            MemoryAmount::Bytes(16 << 20),
        ),
        (
            "    check_interval: 2s\n    limit_percentage: 80\n    spike_limit_percentage: 20",
            Duration::from_secs(2),
            MemoryAmount::Percentage(80),
            MemoryAmount::Percentage(20),
        ),
    ];
    for (limiter, check_interval, limit, spike) in loads {
        let config = load_str(&[&base(limiter)]).expect("valid");
        assert_eq!(
            config.processors[&id("memory_limiter")],
            ProcessorConfig::MemoryLimiter(MemoryLimiterConfig {
                check_interval,
                limit,
                spike: Some(spike),
            }),
            "{limiter}"
        );
        assert_eq!(load_str(&[&render(&config)]).expect("round trip"), config);
    }
    assert_eq!(
        problems_with(&base("    limit_mib: 64\n    spike_limit_mib: 64")),
        [
            "processors.memory_limiter.check_interval: must be greater than 0 (the Collector requires it too); 1s is usual",
            "processors.memory_limiter.spike_limit_mib: must be less than limit_mib (64), found 64",
        ]
    );
    assert_eq!(
        problems_with(&base("    check_interval: 1s")),
        [
            "processors.memory_limiter: set limit_mib or limit_percentage (of the container's memory limit)"
        ]
    );
}

// === metrics pipelines and connectors ===

/// The Collector gateway config with span metrics before sampling, joined by `forward`
/// (over `MINIMAL`, whose debug exporter a traces pipeline keeps using).
const CONNECTED: &str = "
receivers:
  otlp:
    protocols:
      http:
processors:
  tail_sampling:
    policies:
      - name: baseline
        type: probabilistic
        probabilistic: {sampling_percentage: 10}
  batch:
exporters:
  otlp/tempo:
    endpoint: tempo:4317
  otlphttp/metrics:
    endpoint: http://prometheus:9090/api/v1/otlp
    metrics_endpoint: http://prometheus:9090/api/v1/otlp/v1/metrics
connectors:
  span_metrics:
    histogram:
      unit: s
      explicit:
        buckets: [100ms, 1s, 10s]
    dimensions:
      - name: http.method
      - name: region
        default: none
    exclude_dimensions: [status.code]
    namespace: ''
    metrics_flush_interval: 15s
    aggregation_temporality: AGGREGATION_TEMPORALITY_CUMULATIVE
    exemplars: {enabled: true}
    resource_metrics_key_attributes: [k8s.namespace.name]
    dimensions_cache_size: 500
    aggregation_cardinality_limit: 0
  forward:
service:
  pipelines:
    traces/in: {receivers: [otlp], exporters: [span_metrics, forward]}
    traces/sampled: {receivers: [forward], processors: [tail_sampling, batch], exporters: [otlp/tempo]}
    metrics: {receivers: [otlp, span_metrics], processors: [batch], exporters: [otlphttp/metrics]}
";

/// Scenario: the Collector's span-metrics-before-sampling config, with every spanmetrics
/// key set, is loaded and rendered.
/// Guarantees: connectors are typed with their keys (the `span_metrics` alias resolves to
/// `spanmetrics`), pipelines name them as receivers and exporters, `metrics_endpoint` is
/// kept, a cardinality limit of 0 means none; the rendering reads back to the same config.
#[test]
fn connectors_and_metrics_pipelines() {
    let config = load_over(CONNECTED);
    let span_metrics = config
        .connectors
        .iter()
        .find_map(|(id, c)| match c {
            ConnectorConfig::SpanMetrics(s) if id.kind == "spanmetrics" => Some(s),
            _ => None,
        })
        .expect("span_metrics is the spanmetrics connector");
    assert_eq!(span_metrics.histogram_unit, HistogramUnit::Seconds);
    assert_eq!(
        span_metrics.histogram_buckets,
        vec![
            Duration::from_millis(100),
            Duration::from_secs(1),
            Duration::from_secs(10)
        ]
    );
    assert_eq!(
        span_metrics.dimensions,
        vec![
            SpanMetricsDimension {
                name: "http.method".into(),
                default: None
            },
            SpanMetricsDimension {
                name: "region".into(),
                default: Some("none".into())
            },
        ]
    );
    assert_eq!(span_metrics.exclude_dimensions, vec!["status.code"]);
    assert_eq!(span_metrics.namespace, "");
    assert_eq!(span_metrics.metrics_flush_interval, Duration::from_secs(15));
    assert!(span_metrics.exemplars_enabled);
    assert_eq!(span_metrics.aggregation_cardinality_limit, None);
    let metrics = &config.service.pipelines[&PipelineId {
        signal: Signal::Metrics,
        written: "metrics".into(),
    }];
    assert_eq!(metrics.receivers.len(), 2);
    let Some(ExporterConfig::OtlpHttp(http)) = config
        .exporters
        .values()
        .find(|e| matches!(e, ExporterConfig::OtlpHttp(_)))
    else {
        panic!("otlphttp/metrics");
    };
    assert_eq!(
        http.metrics_endpoint.as_deref(),
        Some("http://prometheus:9090/api/v1/otlp/v1/metrics")
    );
    assert!(unused_components(&config).is_empty());

    assert_round_trips(&config);
}

/// Scenario: connectors used on one side only, with the wrong signal, in a cycle, and
/// tail_sampling in a metrics pipeline, delta temporality, and unordered buckets.
/// Guarantees: each is reported at the pipeline list (or key) where it is, naming the
/// connector and what is missing, as the Collector's rules require.
#[test]
fn connector_errors() {
    assert_eq!(
        problems_with(
            "
processors:
  tail_sampling:
    policies: [{name: all, type: always_sample}]
connectors:
  forward:
  forward/loop:
  spanmetrics:
    aggregation_temporality: AGGREGATION_TEMPORALITY_DELTA
    histogram:
      explicit:
        buckets: [10ms, 5ms]
  spanmetrics/alone:
service:
  pipelines:
    traces/a: {receivers: [otlp], exporters: [forward, spanmetrics/alone]}
    traces/b: {receivers: [otlp, forward/loop], exporters: [forward/loop, debug]}
    metrics: {receivers: [otlp], processors: [tail_sampling], exporters: [spanmetrics]}
"
        ),
        [
            "connectors.spanmetrics.histogram.explicit.buckets[1]: bucket bounds must be strictly increasing",
            "connectors.spanmetrics.aggregation_temporality: delta temporality is not supported yet by this version of tailgate; use AGGREGATION_TEMPORALITY_CUMULATIVE (the default)",
            "service.pipelines.traces/a.exporters: connector forward is used as an exporter here but no traces pipeline lists it under receivers",
            "service.pipelines.traces/a.exporters: connector spanmetrics/alone is used as an exporter here but no metrics pipeline lists it under receivers",
            "service.pipelines.metrics.processors: tail_sampling samples traces and cannot run in a metrics pipeline",
            "service.pipelines.metrics.exporters: connector spanmetrics cannot be used in a metrics pipeline: it reads traces: list it under exporters of traces pipelines",
            "service.pipelines: the pipelines form a cycle through connectors: traces/b -> traces/b",
        ]
    );
}
