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
