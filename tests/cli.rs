//! The `tailgate` command line: validate, print-config.

use std::process::Command;

fn tailgate(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tailgate"))
        .args(args)
        .output()
        .expect("tailgate runs")
}

fn write_config(text: &str) -> tempfile::NamedTempFile {
    use std::io::Write;
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    file.write_all(text.as_bytes()).expect("write config");
    file
}

/// A gateway config in the Collector's own format for the components tailgate has.
const COLLECTOR_CONFIG: &str = r#"
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
  debug:
    verbosity: basic
extensions:
  health_check: {}
service:
  extensions: [health_check]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlp/tempo, debug]
  telemetry:
    logs:
      level: info
"#;

/// Scenario: `tailgate validate` on a config in the Collector's own format.
/// Guarantees: it is accepted unchanged (exit 0).
#[test]
fn validate_accepts_collector_config() {
    let file = write_config(COLLECTOR_CONFIG);
    let output = tailgate(&["validate", "--config", file.path().to_str().expect("utf-8")]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Scenario: a config with a misspelt key and a pipeline naming an undefined exporter.
/// Guarantees: `validate` exits non-zero and names both problems by their path.
#[test]
fn validate_reports_every_error_with_its_path() {
    let broken = COLLECTOR_CONFIG
        .replace(
            "        endpoint: 0.0.0.0:4317",
            "        endpont: 0.0.0.0:4317",
        )
        .replace(
            "exporters: [otlp/tempo, debug]",
            "exporters: [otlp/tempo, otlp/missing]",
        );
    let file = write_config(&broken);
    let output = tailgate(&["validate", "--config", file.path().to_str().expect("utf-8")]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("receivers.otlp.protocols.grpc.endpont"),
        "unknown key named by path: {stderr}"
    );
    assert!(
        stderr.contains("service.pipelines.traces.exporters") && stderr.contains("otlp/missing"),
        "undefined exporter named by path: {stderr}"
    );
}

/// Scenario: `print-config` with no --config.
/// Guarantees: the built-in default config is printed, and it validates when fed back.
#[test]
fn print_config_round_trips_the_default() {
    let output = tailgate(&["print-config"]);
    assert!(output.status.success());
    let printed = String::from_utf8(output.stdout).expect("utf-8");
    assert!(printed.contains("otlp"), "{printed}");
    assert!(printed.contains("batch"), "{printed}");
    let file = write_config(&printed);
    let output = tailgate(&["validate", "--config", file.path().to_str().expect("utf-8")]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Scenario: two config files, the second overriding one key of the first.
/// Guarantees: the files merge as the Collector merges them: the override wins.
#[test]
fn later_config_files_override_earlier_ones() {
    let base = write_config(COLLECTOR_CONFIG);
    let overlay = write_config("processors:\n  batch:\n    send_batch_size: 77\n");
    let output = tailgate(&[
        "print-config",
        "--config",
        base.path().to_str().expect("utf-8"),
        "--config",
        overlay.path().to_str().expect("utf-8"),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = String::from_utf8(output.stdout).expect("utf-8");
    assert!(printed.contains("send_batch_size: 77"), "{printed}");
    assert!(
        printed.contains("tempo-distributor.monitoring:4317"),
        "{printed}"
    );
}

/// Runs `tailgate` with `args` and waits at most `limit` for it to exit; a process still
/// running then is killed. Returns the exit status (`None` when it had to be killed) and
/// its stderr.
fn tailgate_within(
    args: &[&str],
    limit: std::time::Duration,
) -> (Option<std::process::ExitStatus>, String) {
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_tailgate"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tailgate runs");
    let deadline = std::time::Instant::now() + limit;
    let mut status = None;
    while std::time::Instant::now() < deadline {
        if let Some(exited) = child.try_wait().expect("wait works") {
            status = Some(exited);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    if status.is_none() {
        let _ = child.kill();
    }
    let output = child.wait_with_output().expect("output");
    (status, String::from_utf8_lossy(&output.stderr).into_owned())
}

/// A config that starts (every port chosen by the OS on loopback, exporters that connect
/// lazily), with `processors`, `exporters` and `extensions` sections and the body of
/// `service` after `pipelines` given by each case.
fn startable(sections: &str, pipelines: &str) -> String {
    format!(
        "
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
{sections}
service:
  pipelines:
{pipelines}
  telemetry:
    metrics:
      address: 127.0.0.1:0
"
    )
}

/// One config per kind of refusal that start-up used to be the first to make, with the
/// path its problem is reported at.
fn refused_at_start() -> Vec<(&'static str, String, &'static str)> {
    let debug = "exporters:\n  debug:\n";
    vec![
        (
            "tail_sampling not first",
            startable(
                &format!(
                    "processors:
  batch:
  tail_sampling:
    policies: [{{name: all, type: always_sample}}]
{debug}"
                ),
                "    traces:
      receivers: [otlp]
      processors: [batch, tail_sampling]
      exporters: [debug]",
            ),
            "service.pipelines.traces.processors",
        ),
        (
            "regular expressions too large to compile together",
            startable(
                &format!(
                    r"processors:
  tail_sampling:
    policies:
      - name: big
        type: string_attribute
        string_attribute:
          key: k
          values: ['\w{{150}}', '\w{{150}}']
          enabled_regex_matching: true
{debug}"
                ),
                "    traces:
      receivers: [otlp]
      processors: [tail_sampling]
      exporters: [debug]",
            ),
            "processors.tail_sampling.policies[0].string_attribute.values",
        ),
        (
            "two memory limiters",
            startable(
                &format!(
                    "processors:
  memory_limiter: {{check_interval: 1s, limit_mib: 512}}
  memory_limiter/b: {{check_interval: 1s, limit_mib: 1024}}
{debug}"
                ),
                "    traces:
      receivers: [otlp]
      processors: [memory_limiter]
      exporters: [debug]
    traces/b:
      receivers: [otlp]
      processors: [memory_limiter/b]
      exporters: [debug]",
            ),
            "service.pipelines.traces/b.processors",
        ),
        (
            "memory limit too large to count in bytes",
            startable(
                &format!(
                    "processors:
  memory_limiter: {{check_interval: 1s, limit_mib: 17592186044417}}
{debug}"
                ),
                "    traces:
      receivers: [otlp]
      processors: [memory_limiter]
      exporters: [debug]",
            ),
            "processors.memory_limiter.limit_mib",
        ),
        (
            "missing TLS file",
            startable(
                "exporters:
  otlp/tempo:
    endpoint: 127.0.0.1:9
    tls: {ca_file: /nonexistent/tailgate/ca.pem}",
                "    traces:
      receivers: [otlp]
      exporters: [otlp/tempo]",
            ),
            "exporters.otlp/tempo.tls.ca_file",
        ),
        (
            "missing TLS file in the load balancer's template",
            startable(
                "exporters:
  loadbalancing:
    protocol: {otlp: {tls: {ca_file: /nonexistent/tailgate/ca.pem}}}
    resolver: {static: {hostnames: ['127.0.0.1:9']}}",
                "    traces:
      receivers: [otlp]
      exporters: [loadbalancing]",
            ),
            "exporters.loadbalancing.protocol.otlp.tls.ca_file",
        ),
        (
            "the load balancer's dns resolver with a name server that is not ip:port",
            startable(
                "exporters:
  load_balancing:
    protocol: {otlp: {tls: {insecure: true}}}
    resolver: {dns: {hostname: localhost, nameserver: ns.local}}",
                "    traces:
      receivers: [otlp]
      exporters: [load_balancing]",
            ),
            "exporters.load_balancing.resolver.dns.nameserver",
        ),
        (
            "header value that cannot be sent",
            startable(
                "exporters:
  otlphttp:
    endpoint: http://127.0.0.1:9
    headers: {x-line: \"a\\nb\"}",
                "    traces:
      receivers: [otlp]
      exporters: [otlphttp]",
            ),
            "exporters.otlphttp.headers.x-line",
        ),
        (
            "endpoint that is not a valid URI",
            startable(
                "exporters:
  otlphttp:
    endpoint: http://127.0.0.1:9/<tenant>",
                "    traces:
      receivers: [otlp]
      exporters: [otlphttp]",
            ),
            "exporters.otlphttp.endpoint",
        ),
        (
            "missing queue directory",
            startable(
                "exporters:
  otlp/q:
    endpoint: 127.0.0.1:9
    tls: {insecure: true}
    sending_queue: {storage: file_storage}
extensions:
  file_storage:
    directory: /nonexistent/tailgate/queue",
                "    traces:
      receivers: [otlp]
      exporters: [otlp/q]
  extensions: [file_storage]",
            ),
            "extensions.file_storage.directory",
        ),
        (
            "two listeners on one address",
            startable(
                &format!(
                    "extensions:
  health_check: {{endpoint: 127.0.0.1:47317}}
  health_check/2: {{endpoint: 127.0.0.1:47317}}
{debug}"
                ),
                "    traces:
      receivers: [otlp]
      exporters: [debug]
  extensions: [health_check, health_check/2]",
            ),
            "extensions.health_check/2.endpoint",
        ),
    ]
}

/// Scenario: one config per kind of refusal that start-up used to be the first to make
/// (tail_sampling not first, regular expressions too large together, two memory limiters,
/// a memory limit too large, a missing TLS file (also in the load balancer's template), the
/// load balancer's dns resolver with a bad name server, an unsendable header, an endpoint that is not a URI, a
/// missing queue directory, two listeners on one address), each otherwise
/// startable, run through the binary as `validate` and as the gateway.
/// Guarantees: both refuse each config: they exit non-zero within 20 s and name the
/// problem by its dotted path on stderr, the same path for both; `validate` therefore
/// refuses what the gateway would refuse at start.
#[test]
fn validate_refuses_what_start_refuses() {
    let limit = std::time::Duration::from_secs(20);
    for (case, yaml, path) in refused_at_start() {
        let file = write_config(&yaml);
        let config = file.path().to_str().expect("utf-8");
        let expected = format!("{path}: ");
        for args in [
            vec!["validate", "--config", config],
            vec!["--config", config],
        ] {
            let (status, stderr) = tailgate_within(&args, limit);
            let status = status.unwrap_or_else(|| {
                panic!(
                    "{case}: `tailgate {}` still running after {limit:?}:\n{stderr}",
                    args.join(" ")
                )
            });
            assert!(
                !status.success(),
                "{case}: `tailgate {}` succeeded:\n{stderr}",
                args.join(" ")
            );
            assert!(
                stderr.contains(&expected),
                "{case}: `tailgate {}` does not name {path}:\n{stderr}",
                args.join(" ")
            );
        }
    }
}

/// Scenario: the configs of `validate_refuses_what_start_refuses` with the problem fixed
/// where a fix is one line (sampler first, one memory limiter, TLS off, a valid header, a
/// name server written ip:port).
/// Guarantees: `validate` accepts them, so the refusals above come from the problem named
/// and not from the rest of the config.
#[test]
fn the_refused_configs_are_otherwise_valid() {
    let fixes: [(&str, &str); 5] = [
        (
            "processors: [batch, tail_sampling]",
            "processors: [tail_sampling, batch]",
        ),
        (
            "processors: [memory_limiter/b]",
            "processors: [memory_limiter]",
        ),
        (
            "tls: {ca_file: /nonexistent/tailgate/ca.pem}",
            "tls: {insecure: true}",
        ),
        ("x-line: \"a\\nb\"", "x-line: ab"),
        ("nameserver: ns.local", "nameserver: '127.0.0.1:53'"),
    ];
    let cases = refused_at_start();
    for (from, to) in fixes {
        let (case, yaml, _) = cases
            .iter()
            .find(|(_, yaml, _)| yaml.contains(from))
            .unwrap_or_else(|| panic!("no case contains {from:?}"));
        let file = write_config(&yaml.replace(from, to));
        let output = tailgate(&["validate", "--config", file.path().to_str().expect("utf-8")]);
        assert!(
            output.status.success(),
            "{case}, fixed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
