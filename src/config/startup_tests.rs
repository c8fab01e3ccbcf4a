//! Tests of the checks that start-up used to be the first to make, now made by
//! [`super::load`] (so `tailgate validate` reports them), and of the rule that every key a
//! section knows is read.

// Tests unwrap freely: a panic is the failure report (C15).
#![allow(clippy::unwrap_used)]

use super::tests::no_env;
use super::*;

/// The directory of the test TLS files: a CA, and a certificate with its key.
const TESTDATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/exporter/testdata");

fn ca_file() -> String {
    format!("{TESTDATA}/ca.pem")
}

fn cert_file() -> String {
    format!("{TESTDATA}/sink.pem")
}

fn key_file() -> String {
    format!("{TESTDATA}/sink.key")
}

/// A directory that exists.
fn existing_dir() -> String {
    std::env::temp_dir().display().to_string()
}

/// An htpasswd file with one user (`file`, password "password", SHA-1), written in the
/// temporary directory.
fn htpasswd_file() -> String {
    let path = std::env::temp_dir().join("tailgate-config-test.htpasswd");
    std::fs::write(&path, "file:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n").unwrap();
    path.display().to_string()
}

/// The smallest valid config ([`super::tests::MINIMAL`]) listening on loopback only and
/// with `/metrics` off; tests add the section they exercise.
const MINIMAL: [&str; 2] = [
    super::tests::MINIMAL,
    "
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
service:
  telemetry:
    metrics:
      level: none
",
];

/// `MINIMAL` merged with `overlay`, which must load.
fn load_over(overlay: &str) -> Config {
    match load_str_with_env(&[MINIMAL[0], MINIMAL[1], overlay], &no_env) {
        Ok(config) => config,
        Err(error) => panic!("config should load, got:\n{error}"),
    }
}

/// The problems of `MINIMAL` merged with `overlay`, as `path: message` lines.
fn problems_with(overlay: &str) -> Vec<String> {
    match load_str_with_env(&[MINIMAL[0], MINIMAL[1], overlay], &no_env) {
        Ok(config) => panic!("config should be refused, got {config:#?}"),
        Err(error) => error.to_string().lines().map(str::to_owned).collect(),
    }
}

/// Asserts that loading `MINIMAL` with `overlay` reports exactly `expected`.
#[track_caller]
fn assert_problems(overlay: &str, expected: &[&str]) {
    let found = problems_with(overlay);
    assert_eq!(found, expected, "overlay:\n{overlay}");
}

// === every known key is read ===

/// A config that sets every key of every section tailgate knows: every component type,
/// every policy type, every protocol. `metrics` is the body of
/// `service.telemetry.metrics` (its `address` and `readers` exclude each other), `resolver`
/// the body of `exporters.loadbalancing.resolver` (its `static` and `dns` exclude each
/// other).
fn every_key(metrics: &str, resolver: &str) -> String {
    let tls = format!(
        "{{insecure: false, insecure_skip_verify: false, ca_file: {ca}, cert_file: {cert}, \
         key_file: {key}, server_name_override: sink.test}}",
        ca = ca_file(),
        cert = cert_file(),
        key = key_file(),
    );
    let server_tls = format!(
        "{{cert_file: {cert}, key_file: {key}, client_ca_file: {ca}, min_version: '1.2', \
         max_version: '1.3', reload_interval: 1m}}",
        ca = ca_file(),
        cert = cert_file(),
        key = key_file(),
    );
    let retry = "{enabled: true, initial_interval: 1s, max_interval: 2s, max_elapsed_time: 1m, \
                 multiplier: 1.5, randomization_factor: 0.5}";
    let queue = "{enabled: true, queue_size: 10, num_consumers: 2, storage: file_storage/queue}";
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
        transport: tcp
        max_recv_msg_size_mib: 8
        max_concurrent_streams: 100
        max_concurrent_requests: 256
        read_buffer_size: 524288
        write_buffer_size: 0
        include_metadata: false
        tls: {server_tls}
        auth:
          authenticator: bearertokenauth
      http:
        endpoint: 127.0.0.1:0
        traces_url_path: /t
        metrics_url_path: /m
        logs_url_path: /l
        max_request_body_size: 100000
        max_concurrent_requests: 128
        cors:
          allowed_origins: ["https://*.example.com"]
          allowed_headers: [X-Custom]
          max_age: 60
        include_metadata: false
        tls: {server_tls}
        auth:
          authenticator: basicauth
processors:
  batch:
    send_batch_size: 10
    send_batch_max_size: 20
    timeout: 1s
    send_batch_max_size_bytes: 100000
  memory_limiter:
    check_interval: 1s
    limit_mib: 512
    spike_limit_mib: 100
    limit_percentage: 80
    spike_limit_percentage: 20
    min_gc_interval_when_soft_limited: 10s
    min_gc_interval_when_hard_limited: 10s
    max_gc_interval_when_soft_limited: 10s
    max_gc_interval_when_hard_limited: 10s
  tail_sampling:
    decision_wait: 10s
    decision_wait_after_root_received: 1s
    hand_off: {{exporter: loadbalancing, debounce: 2s, leave_delay: 3s}}
    num_traces: 100
    expected_new_traces_per_sec: 10
    decision_cache: {{sampled_cache_size: 10, non_sampled_cache_size: 10}}
    sample_on_first_match: false
    drop_pending_traces_on_shutdown: false
    maximum_trace_size_bytes: 100000
    block_on_overflow: false
    record_policy: true
    sampling_strategy: trace-complete
    num_shards: 4
    policies:
      - {{name: always, type: always_sample}}
      - {{name: flags, type: trace_flags}}
{policies}exporters:
  otlp:
    endpoint: sink.test:4317
    tls: {tls}
    headers: {{X-Scope-OrgID: tenant}}
    compression: gzip
    timeout: 5s
    sending_queue: {queue}
    retry_on_failure: {retry}
  otlphttp:
    endpoint: https://sink.test:4318
    traces_endpoint: https://sink.test:4318/v1/traces
    metrics_endpoint: https://sink.test:4318/v1/metrics
    tls: {tls}
    headers: {{X-Scope-OrgID: tenant}}
    compression: zstd
    timeout: 5s
    sending_queue: {queue}
    retry_on_failure: {retry}
  loadbalancing:
    routing_key: traceID
    protocol:
      otlp:
        tls: {tls}
        headers: {{X-Scope-OrgID: tenant}}
        compression: gzip
        timeout: 5s
        sending_queue: {{enabled: true, queue_size: 10, num_consumers: 2, storage: ""}}
        retry_on_failure: {retry}
    resolver: {resolver}
  debug:
    verbosity: basic
    sampling_initial: 2
    sampling_thereafter: 500
  prometheusremotewrite:
    endpoint: https://sink.test:9090/api/v1/write
    headers: {{X-Scope-OrgID: tenant}}
    timeout: 5s
    tls: {tls}
    namespace: ns
    external_labels: {{cluster: eu-1}}
    resource_to_telemetry_conversion: {{enabled: true}}
    target_info: {{enabled: true}}
    add_metric_suffixes: true
    send_metadata: false
    max_batch_size_bytes: 100000
    remote_write_queue: {{enabled: true, queue_size: 10, num_consumers: 2}}
    retry_on_failure: {retry}
    protobuf_message: prometheus.WriteRequest
    compression: snappy
connectors:
  forward:
  spanmetrics:
    histogram:
      disable: false
      unit: ms
      explicit: {{buckets: [10ms, 100ms]}}
    dimensions: [{{name: http.method, default: GET}}]
    exclude_dimensions: [status.code]
    namespace: traces.span.metrics
    metrics_flush_interval: 15s
    aggregation_temporality: AGGREGATION_TEMPORALITY_CUMULATIVE
    exemplars: {{enabled: false}}
    resource_metrics_key_attributes: [service.name]
    dimensions_cache_size: 100
    resource_metrics_cache_size: 100
    aggregation_cardinality_limit: 100
    metrics_expiration: 0
extensions:
  health_check:
    endpoint: 127.0.0.1:0
    path: /health
  file_storage/queue:
    directory: {dir}
    create_directory: false
    directory_permissions: "0750"
    timeout: 1s
    fsync: false
    max_size_mib: 100
    compaction:
      on_start: false
      on_rebound: false
      directory: {dir}
      max_transaction_size: 100
      rebound_needed_threshold_mib: 10
      rebound_trigger_threshold_mib: 1
      check_interval: 5s
      cleanup_on_start: false
  bearertokenauth: {bearer}
  basicauth:
    htpasswd:
      file: {htpasswd}
      inline: "inline:{{SHA}}W6ph5Mm5Pz8GgiULbPgzG37mj9g="
  k8s_events:
    enabled: true
    api_server: https://127.0.0.1:6443
    token_file: /var/run/secrets/kubernetes.io/serviceaccount/token
    ca_file: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
    namespace_file: /var/run/secrets/kubernetes.io/serviceaccount/namespace
    series_window: 10m
    queue_size: 64
    timeout: 3s
service:
  extensions: [health_check, file_storage/queue, bearertokenauth, basicauth]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [memory_limiter, tail_sampling, batch]
      exporters: [otlp, otlphttp, debug, spanmetrics, forward, loadbalancing]
    traces/forwarded:
      receivers: [forward]
      processors: [batch]
      exporters: [debug]
    metrics:
      receivers: [otlp, spanmetrics]
      processors: [memory_limiter, batch]
      exporters: [prometheusremotewrite, otlphttp]
  telemetry:
    logs: {{level: info, encoding: json}}
    metrics: {metrics}
  shutdown_timeout: 10s
"#,
        dir = existing_dir(),
        htpasswd = htpasswd_file(),
        // token and tokens exclude each other: one variant sets each.
        bearer = if resolver.contains("static") {
            format!(
                "{{scheme: Bearer, header: Authorization, token: t0, filename: {}/token}}",
                existing_dir()
            )
        } else {
            "{tokens: [t1, t2]}".to_owned()
        },
        policies = POLICY_SETTINGS
            .iter()
            .map(|(kind, settings)| {
                format!("      - name: {kind}\n        type: {kind}\n        {kind}: {settings}\n")
            })
            .collect::<String>(),
    )
}

/// Every policy type that has settings, with settings that set each of its keys;
/// [`every_key`] writes each as a policy named after its type.
const POLICY_SETTINGS: &[(&str, &str)] = &[
    ("latency", "{threshold_ms: 100, upper_threshold_ms: 200}"),
    (
        "numeric_attribute",
        "{key: k, min_value: 1, max_value: 2, invert_match: false}",
    ),
    (
        "probabilistic",
        "{sampling_percentage: 10, hash_salt: salt}",
    ),
    ("status_code", "{status_codes: [ERROR]}"),
    (
        "string_attribute",
        r#"{key: k, values: ["a.*"], enabled_regex_matching: true, cache_max_size: 10, invert_match: false}"#,
    ),
    (
        "boolean_attribute",
        "{key: k, value: true, invert_match: false}",
    ),
    ("trace_state", "{key: k, values: [v]}"),
    (
        "rate_limiting",
        "{spans_per_second: 10, burst_capacity: 20}",
    ),
    (
        "bytes_limiting",
        "{bytes_per_second: 10, burst_capacity: 20}",
    ),
    ("span_count", "{min_spans: 1, max_spans: 10}"),
    ("and", "{and_sub_policy: [{name: a, type: always_sample}]}"),
    (
        "not",
        "{not_sub_policy: {name: inner, type: always_sample}}",
    ),
    ("drop", "{drop_sub_policy: [{name: d, type: trace_flags}]}"),
    (
        "composite",
        "{max_total_spans_per_second: 100, policy_order: [c], \
         composite_sub_policy: [{name: c, type: always_sample}], \
         rate_allocation: [{policy: c, percent: 50}]}",
    ),
];

/// Scenario: a config setting every key of every section, once with
/// `telemetry.metrics.address` and the load balancer's static resolver, and once with
/// `telemetry.metrics.readers` and its dns resolver; the known keys that no load sets are
/// collected.
/// Guarantees: both load, so no known key is written and left unread by its reader (a
/// key that a reader never asks for is refused with its path); every component type and every
/// policy type is in it, and every key that a section knows is set in at least one of
/// the two loads, so adding a known key without reading it fails this test.
#[test]
fn every_known_key_is_read() {
    let static_resolver = "{static: {hostnames: [sampler-0.sampler, 'sampler-1.sampler:4317']}}";
    let dns_resolver = "{dns: {hostname: sampler.monitoring, port: 4317, interval: 5s, \
                        timeout: 1s, nameserver: '127.0.0.1:53'}}";
    let variants = [
        ("{level: normal, address: 127.0.0.1:0}", static_resolver),
        (
            "{level: detailed, readers: [{pull: {exporter: {prometheus: {host: 127.0.0.1, port: 0}}}}]}",
            dns_resolver,
        ),
    ];
    let mut unwritten_everywhere: Option<Vec<String>> = None;
    for (metrics, resolver) in variants {
        let yaml = every_key(metrics, resolver);
        let (result, unwritten) = load_reporting_unwritten(&[&yaml]);
        if let Err(error) = result {
            panic!("the every-key config with {resolver} should load, got:\n{error}");
        }
        unwritten_everywhere = Some(match unwritten_everywhere {
            None => unwritten,
            Some(before) => before
                .into_iter()
                .filter(|path| unwritten.contains(path))
                .collect(),
        });
    }
    assert_eq!(
        unwritten_everywhere.unwrap(),
        Vec::<String>::new(),
        "known keys that the every-key config does not set: add them to every_key()"
    );

    let yaml = every_key(variants[0].0, variants[0].1);
    for section in [
        ids::Section::Receivers,
        ids::Section::Processors,
        ids::Section::Exporters,
        ids::Section::Connectors,
        ids::Section::Extensions,
    ] {
        for (written, canonical) in section.types() {
            let present = section.types().any(|(other, same)| {
                same == canonical
                    && (yaml.contains(&format!("\n  {other}:"))
                        || yaml.contains(&format!("\n  {other}/")))
            });
            assert!(
                present,
                "{} type {written} is missing from every_key()",
                section.singular()
            );
        }
    }
    for kind in tail_sampling::POLICY_TYPES {
        assert!(
            yaml.contains(&format!("type: {kind}\n")) || yaml.contains(&format!("type: {kind}}}")),
            "policy type {kind} is missing from every_key()"
        );
    }
}

/// Scenario: a mapping whose reader never asks for a key that the mapping lists as
/// known: a `Fields` opened with `known = [used, forgotten]` over a value setting both,
/// of which only `used` is read.
/// Guarantees: finishing refuses the config with the forgotten key's path and the
/// never-read message, and only when nothing else was wrong (with another problem a
/// reader may stop early on purpose).
#[test]
fn a_known_key_never_read_is_refused() {
    let tree = value::parse_document(
        "<test>",
        "used: 1\nforgotten: 2\n",
        &mut Problems::default(),
    )
    .unwrap();
    let open = |problems: &mut Problems| {
        Fields::open(
            problems,
            "section",
            Some(&tree),
            &["used", "forgotten"],
            &[],
        )
    };
    let mut problems = Problems::default();
    let fields = open(&mut problems);
    assert_eq!(fields.uint(&mut problems, "used"), Some(1));
    let error = problems.finish(()).unwrap_err();
    assert_eq!(
        error.problems(),
        &[Problem {
            path: "section.forgotten".to_owned(),
            message: error::NEVER_READ.to_owned(),
        }]
    );

    let mut problems = Problems::default();
    let fields = open(&mut problems);
    fields.uint(&mut problems, "used");
    problems.add("elsewhere", "wrong");
    let error = problems.finish(()).unwrap_err();
    assert_eq!(error.problems().len(), 1, "{error}");
}

// === pipelines ===

/// Scenario: `tail_sampling` after `batch` in a traces pipeline; then after a
/// `memory_limiter`.
/// Guarantees: the first is refused at the pipeline's processors with what to do (start-up
/// used to be the first to refuse it); the second loads.
#[test]
fn tail_sampling_must_come_first() {
    let processors = "
processors:
  batch:
  memory_limiter: {check_interval: 1s, limit_mib: 100}
  tail_sampling:
    policies: [{name: all, type: always_sample}]
";
    assert_problems(
        &processors_in_traces(processors, "batch, tail_sampling", ""),
        &[
            "service.pipelines.traces.processors: tail_sampling must come first (only \
           memory_limiter may precede it): it buffers whole traces; put batch after it",
        ],
    );
    load_over(&processors_in_traces(
        processors,
        "memory_limiter, tail_sampling, batch",
        "",
    ));
}

/// Scenario: `tail_sampling.hand_off.exporter` naming an undefined exporter, an OTLP
/// exporter, and a loadbalancing exporter no pipeline uses; then one the traces pipeline
/// uses, with the defaults.
/// Guarantees: each wrong one is refused at the key with what to do; the last loads with
/// debounce 1s and leave_delay 5s.
#[test]
fn hand_off_names_a_used_loadbalancing_exporter() {
    let with = |named: &str, used: &str| {
        format!(
            "
processors:
  tail_sampling:
    policies: [{{name: all, type: always_sample}}]
    hand_off: {{exporter: {named}}}
exporters:
  loadbalancing:
    protocol: {{otlp: {{tls: {{insecure: true}}}}}}
    resolver: {{static: {{hostnames: ['127.0.0.1:4317']}}}}
service:
  pipelines:
    traces:
      processors: [tail_sampling]
      exporters: [{used}]
"
        )
    };
    let key = "processors.tail_sampling.hand_off.exporter";
    assert_problems(
        &with("otlp/none", "debug"),
        &[&format!(
            "{key}: \"otlp/none\" is not defined under exporters"
        )],
    );
    assert_problems(
        &with("debug", "debug"),
        &[&format!(
            "{key}: debug is not a loadbalancing exporter: hand_off follows the ring of a \
             loadbalancing exporter"
        )],
    );
    assert_problems(
        &with("loadbalancing", "debug"),
        &[&format!(
            "{key}: loadbalancing is not used by any traces pipeline: list it in the \
             pipeline that routes the senders' spans (e.g. traces/route)"
        )],
    );
    let config = load_over(&with("load_balancing", "debug, loadbalancing"));
    let Some(ProcessorConfig::TailSampling(tail)) = config.processors.values().next() else {
        panic!("tail_sampling loaded");
    };
    let hand_off = tail.hand_off.as_ref().expect("hand_off read");
    assert_eq!(hand_off.exporter.kind, "loadbalancing");
    assert_eq!(hand_off.debounce, std::time::Duration::from_secs(1));
    assert_eq!(hand_off.leave_delay, std::time::Duration::from_secs(5));
}

/// `processors` (a `processors:` section) with `service.pipelines.traces` using `used`,
/// followed by the pipelines in `more` (indented as under `pipelines:`); for merging over
/// `MINIMAL`.
fn processors_in_traces(processors: &str, used: &str, more: &str) -> String {
    format!(
        "{processors}
service:
  pipelines:
    traces:
      processors: [{used}]
{more}"
    )
}

/// Scenario: two `memory_limiter` ids, each used by a pipeline; then one id used by two
/// pipelines while a second id is defined but unused.
/// Guarantees: the first is refused at the pipeline that uses the second limiter, naming
/// both and saying that one limiter gates every receiver (start-up used to keep the first
/// by id and ignore the other silently); the second loads.
#[test]
fn one_memory_limiter_for_the_process() {
    let processors = "
processors:
  memory_limiter: {check_interval: 1s, limit_mib: 100}
  memory_limiter/big: {check_interval: 1s, limit_mib: 1000}
";
    let big = "    traces/big:
      receivers: [otlp]
      processors: [memory_limiter/big]
      exporters: [debug]
";
    assert_problems(
        &processors_in_traces(processors, "memory_limiter", big),
        &[
            "service.pipelines.traces/big.processors: memory_limiter/big and memory_limiter are \
           two memory limiters, but one memory limiter gates every receiver of the process: \
           use memory_limiter in every pipeline that needs one (or define one memory_limiter)",
        ],
    );
    let config = load_over(&processors_in_traces(processors, "memory_limiter/big", big));
    assert_eq!(config.service.pipelines.len(), 2);
}

// === tail-sampling policies ===

/// Scenario: a `string_attribute` policy whose two regular expressions each compile but
/// are too large to compile together; then one with two small ones.
/// Guarantees: the first is refused at `values` (the sampler compiles them as one set, so
/// each compiling alone is not enough); the second loads with the compiled set, which the
/// sampler's policies are built from without error.
#[test]
fn regex_values_compile_as_one_set() {
    let policy = |values: &str| {
        format!(
            "
processors:
  tail_sampling:
    policies:
      - name: big
        type: string_attribute
        string_attribute: {{key: k, values: {values}, enabled_regex_matching: true}}
service:
  pipelines:
    traces:
      processors: [tail_sampling]
"
        )
    };
    assert_problems(
        &policy(r"['\w{150}', '\w{150}']"),
        &[
            "processors.tail_sampling.policies[0].string_attribute.values: the regular \
           expressions cannot be compiled together: Compiled regex exceeds size limit of \
           10485760 bytes; use fewer or simpler patterns",
        ],
    );

    let config = load_over(&policy("['^GET ', 'POST$']"));
    let ProcessorConfig::TailSampling(tail) = &config.processors[&id("tail_sampling")] else {
        panic!("not tail_sampling");
    };
    let PolicyKind::StringAttribute { regex, .. } = &tail.policies[0].kind else {
        panic!("not string_attribute");
    };
    let set = regex.as_ref().unwrap().set();
    assert_eq!(set.patterns(), ["^GET ", "POST$"]);
    assert!(set.is_match("GET /"));
    assert!(crate::sampler::policy::PolicySet::compile(tail).is_ok());
}

/// The id of a processor or extension (no aliases).
fn id(written: &str) -> ComponentId {
    ComponentId::literal(written)
}

// === exporters: headers and URLs ===

/// Scenario: headers that the exporters cannot send: a name with a space and a gRPC `-bin`
/// name; a line break in a gRPC, an OTLP/HTTP and a remote-write value; then non-ASCII
/// values and an uppercase gRPC name.
/// Guarantees: each is refused at its header's path (start-up used to refuse the first
/// one only, naming the exporter); the others load, as the exporters send them.
#[test]
fn headers_must_be_sendable() {
    assert_problems(
        "
exporters:
  otlp:
    endpoint: tempo:4317
    tls: {insecure: true}
    headers:
      'bad name': x
      trace-bin: x
      x-line: \"a\\nb\"
  otlphttp:
    endpoint: http://tempo:4318
    headers:
      x-line: \"a\\nb\"
  prometheusremotewrite:
    endpoint: http://prometheus:9090/api/v1/write
    headers:
      x-line: \"a\\rb\"
",
        &[
            "exporters.otlp.headers.bad name: \"bad name\" is not a valid header name: use \
             letters, digits and '-' (no spaces, no ':' and no other separators)",
            "exporters.otlp.headers.trace-bin: \"trace-bin\" names binary gRPC metadata, which \
             tailgate does not send: remove the -bin suffix",
            "exporters.otlp.headers.x-line: invalid header value: it must not contain control \
             characters such as line breaks",
            "exporters.otlphttp.headers.x-line: invalid header value: it must not contain \
             control characters such as line breaks",
            "exporters.prometheusremotewrite.headers.x-line: invalid header value: it must not \
             contain control characters such as line breaks",
        ],
    );
    load_over(
        "
exporters:
  otlp:
    endpoint: tempo:4317
    tls: {insecure: true}
    headers: {x-tenant: 'é', X-Upper: '1'}
  otlphttp:
    endpoint: http://tempo:4318
    headers: {x-tenant: 'é'}
",
    );
}

/// Scenario: URLs that pass the config's own URL rules but are not valid URIs: a '<' in an
/// OTLP/HTTP endpoint's path, a '`' in a traces_endpoint, '<' and '>' in a gRPC URL
/// endpoint and in a remote-write endpoint.
/// Guarantees: each is refused at its key (start-up used to refuse the first one only).
#[test]
fn exporter_urls_must_parse() {
    let expected = |path: &str, url: &str| {
        format!(
            "{path}: \"{url}\" is not a valid URL (invalid uri character): percent-encode \
             characters such as '<', '>' and '`'"
        )
    };
    assert_eq!(
        problems_with(
            r#"
exporters:
  otlphttp:
    endpoint: http://tempo:4318/a<b
  otlphttp/signal:
    endpoint: http://tempo:4318
    traces_endpoint: http://tempo:4318/v1/`traces
    metrics_endpoint: http://tempo:4318/v1/metrics
  otlp:
    endpoint: http://tempo:4317/<x>
  prometheusremotewrite:
    endpoint: http://prometheus:9090/api/<v1>/write
"#
        ),
        [
            expected("exporters.otlp.endpoint", "http://tempo:4317/<x>"),
            expected(
                "exporters.otlphttp.endpoint",
                "http://tempo:4318/a<b/v1/traces"
            ),
            expected(
                "exporters.otlphttp/signal.traces_endpoint",
                "http://tempo:4318/v1/`traces"
            ),
            expected(
                "exporters.prometheusremotewrite.endpoint",
                "http://prometheus:9090/api/<v1>/write"
            ),
        ]
    );
}

// === exporters: TLS files ===

/// Scenario: TLS files that cannot be used: a missing `ca_file`, a `ca_file` holding a key,
/// a `key_file` holding a certificate, a key that is not the certificate's, an invalid
/// `server_name_override`; over gRPC with TLS, OTLP/HTTP (with an `http://` URL, for which
/// the exporter still loads them) and remote write.
/// Guarantees: each is refused at its key, naming the file and saying what is wrong
/// (start-up used to refuse the first one only, naming the exporter).
#[test]
fn tls_files_must_be_usable() {
    let (ca, cert, key) = (ca_file(), cert_file(), key_file());
    assert_problems(
        &format!(
            "
exporters:
  otlp/missing:
    endpoint: tempo:4317
    tls: {{ca_file: /nonexistent/ca.pem}}
  otlp/swapped:
    endpoint: https://tempo:4317
    tls: {{ca_file: {key}, cert_file: {cert}, key_file: {ca}}}
  otlphttp:
    endpoint: http://tempo:4318
    tls: {{cert_file: {ca}, key_file: {key}, server_name_override: 'not a name'}}
  prometheusremotewrite:
    endpoint: http://prometheus:9090/api/v1/write
    tls: {{ca_file: /nonexistent/ca.pem}}
"
        ),
        &[
            "exporters.otlp/missing.tls.ca_file: cannot read /nonexistent/ca.pem: No such file \
             or directory (os error 2)"
                .to_owned(),
            format!(
                "exporters.otlp/swapped.tls.ca_file: {key}: no PEM certificate found (expected \
                 a -----BEGIN CERTIFICATE----- block)"
            ),
            format!(
                "exporters.otlp/swapped.tls.key_file: {ca}: no usable PEM private key (no items \
                 found): expected a -----BEGIN PRIVATE KEY----- (or RSA / EC PRIVATE KEY) block"
            ),
            format!(
                "exporters.otlphttp.tls.key_file: {key} cannot be used with the certificate in \
                 {ca}: keys may not be consistent: KeyMismatch; set the key that belongs to \
                 cert_file"
            ),
            "exporters.otlphttp.tls.server_name_override: \"not a name\" is not a valid server \
             name (invalid dns name): use a DNS name or an IP address"
                .to_owned(),
            "exporters.prometheusremotewrite.tls.ca_file: cannot read /nonexistent/ca.pem: No \
             such file or directory (os error 2)"
                .to_owned(),
        ]
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>(),
    );
}

/// Scenario: TLS files that do not exist where the exporter does not load them: a gRPC
/// exporter with `insecure: true` (plaintext), one with an `http://` URL, and a `ca_file`
/// with `insecure_skip_verify`; then real files for mTLS.
/// Guarantees: all load (what start-up does not refuse is not refused either).
#[test]
fn tls_files_not_loaded_are_not_checked() {
    load_over(
        "
exporters:
  otlp/plain:
    endpoint: tempo:4317
    tls: {insecure: true, ca_file: /nonexistent/ca.pem}
  otlp/url:
    endpoint: http://tempo:4317
    tls: {ca_file: /nonexistent/ca.pem}
  otlp/skip:
    endpoint: tempo:4317
    tls: {insecure_skip_verify: true, ca_file: /nonexistent/ca.pem}
",
    );
    load_over(&format!(
        "
exporters:
  otlp:
    endpoint: tempo:4317
    tls: {{ca_file: {ca}, cert_file: {cert}, key_file: {key}, server_name_override: sink.test}}
",
        ca = ca_file(),
        cert = cert_file(),
        key = key_file(),
    ));
}

// === extensions: file_storage ===

/// Scenario: a `file_storage` directory that does not exist (without and with
/// `create_directory`), and one that is a file.
/// Guarantees: the missing one is refused unless it may be created, the file always, each
/// at `directory` with what to do (start-up used to refuse them when it opened the queue).
#[test]
fn file_storage_directory_must_be_usable() {
    let storage = |directory: &str, create: bool| {
        format!(
            "
extensions:
  file_storage:
    directory: {directory}
    create_directory: {create}
"
        )
    };
    assert_problems(
        &storage("/nonexistent/queue", false),
        &[
            "extensions.file_storage.directory: directory /nonexistent/queue does not exist: \
           create it, or set create_directory: true",
        ],
    );
    load_over(&storage("/nonexistent/queue", true));
    let file = ca_file();
    for create in [false, true] {
        assert_eq!(
            problems_with(&storage(&file, create)),
            [format!(
                "extensions.file_storage.directory: {file} is not a directory: name the \
                 directory that holds the persistent queues"
            )]
        );
    }
}

// === listening addresses ===

/// Scenario: listeners of one config on one port: two receivers with the default gRPC
/// endpoint, an HTTP endpoint on the gRPC port, `/metrics` on a receiver's port, a health
/// check on `0.0.0.0` where a receiver listens on `127.0.0.1`; then ports 0, two hosts
/// on one port, and `[::]` next to an IPv4 address.
/// Guarantees: each clash is refused at the listener bound second, naming the first
/// (start-up used to fail to bind it); the others load.
#[test]
fn listeners_need_their_own_address() {
    assert_problems(
        "
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:4317
      http:
        endpoint: 127.0.0.1:4317
  otlp/2:
    protocols:
      grpc:
        endpoint: ':4317'
  otlp/3:
    protocols:
      grpc:
      http:
  otlp/4:
    protocols:
      grpc:
extensions:
  health_check:
    endpoint: 0.0.0.0:4318
service:
  extensions: [health_check]
  telemetry:
    metrics:
      level: basic
      address: localhost:9000
",
        &[
            "receivers.otlp.protocols.http.endpoint: \"127.0.0.1:4317\" is also where \
             receivers.otlp.protocols.grpc.endpoint listens: two listeners cannot share a \
             port; give each its own",
            "receivers.otlp/2.protocols.grpc.endpoint: \":4317\" is also where \
             receivers.otlp.protocols.grpc.endpoint listens: two listeners cannot share a \
             port; give each its own",
            "receivers.otlp/3.protocols.grpc.endpoint: \"0.0.0.0:4317\" is also where \
             receivers.otlp.protocols.grpc.endpoint listens: two listeners cannot share a \
             port; give each its own",
            "receivers.otlp/4.protocols.grpc.endpoint: \"0.0.0.0:4317\" is also where \
             receivers.otlp.protocols.grpc.endpoint listens: two listeners cannot share a \
             port; give each its own",
            "extensions.health_check.endpoint: \"0.0.0.0:4318\" is also where \
             receivers.otlp/3.protocols.http.endpoint listens: two listeners cannot share a \
             port; give each its own",
        ],
    );
    load_over(
        "
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
      http:
        endpoint: 127.0.0.1:0
  otlp/2:
    protocols:
      grpc:
        endpoint: 127.0.0.2:4317
      http:
        endpoint: '[::]:4317'
  otlp/3:
    protocols:
      grpc:
        endpoint: 127.0.0.3:4317
service:
  telemetry:
    metrics:
      level: basic
      address: localhost:4317
",
    );
}

// === memory_limiter ===

/// Scenario: a `limit_mib` and a `spike_limit_mib` whose byte counts do not fit in 64 bits.
/// Guarantees: both are refused at their keys (the limiter used to start with a wrapped
/// limit, or refuse to start).
#[test]
fn memory_limits_must_fit() {
    assert_problems(
        "
processors:
  memory_limiter:
    check_interval: 1s
    limit_mib: 17592186044417
    spike_limit_mib: 17592186044416
service:
  pipelines:
    traces:
      processors: [memory_limiter]
",
        &[
            "processors.memory_limiter.spike_limit_mib: 17592186044416 is too large: write the \
             limit in MiB",
            "processors.memory_limiter.limit_mib: 17592186044417 is too large: write the limit \
             in MiB",
        ],
    );
}
