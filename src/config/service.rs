//! Typing the `service` section and checking that it refers only to defined components.

use std::collections::BTreeMap;

use super::defaults;
use super::endpoint;
use super::error::{Problems, join};
use super::fields::{Fields, NOT_YET, Named as _, as_string};
use super::ids::{Declared, Section};
use super::value::Value;
use super::{
    ComponentId, LogEncoding, LogLevel, PipelineConfig, PipelineId, ServiceConfig, Signal,
    TelemetryConfig,
};

/// The ids declared in each section that `service` may refer to.
pub(crate) struct Declarations<'a> {
    pub(crate) receivers: &'a Declared,
    pub(crate) processors: &'a Declared,
    pub(crate) exporters: &'a Declared,
    pub(crate) connectors: &'a Declared,
    pub(crate) extensions: &'a Declared,
}

/// `service`.
pub(crate) fn service(
    problems: &mut Problems,
    root: &Fields<'_>,
    declared: &Declarations<'_>,
) -> ServiceConfig {
    let service = root.child(
        problems,
        "service",
        &["extensions", "pipelines", "telemetry", "shutdown_timeout"],
        &[],
    );
    let extensions = references(
        problems,
        &service,
        "extensions",
        &[(Section::Extensions, declared.extensions)],
    );
    let pipelines = pipelines(problems, &service, declared);
    let telemetry = telemetry(problems, &service);
    let shutdown_timeout = service
        .positive_duration(problems, "shutdown_timeout")
        .unwrap_or(defaults::SHUTDOWN_TIMEOUT);
    ServiceConfig {
        extensions,
        pipelines,
        telemetry,
        shutdown_timeout,
    }
}

/// `service.pipelines`.
fn pipelines(
    problems: &mut Problems,
    service: &Fields<'_>,
    declared: &Declarations<'_>,
) -> BTreeMap<PipelineId, PipelineConfig> {
    let path = service.key_path("pipelines");
    let mut pipelines = BTreeMap::new();
    let map = match service.value("pipelines") {
        Some(Value::Map(map)) if !map.is_empty() => map,
        None | Some(Value::Map(_)) => {
            problems.add(
                path,
                "must define at least one pipeline, e.g. `traces: {receivers: [otlp], exporters: [debug]}`",
            );
            return pipelines;
        }
        Some(other) => {
            problems.add(
                path,
                format!(
                    "expected a mapping of pipeline ids to pipelines, found {}",
                    other.describe()
                ),
            );
            return pipelines;
        }
    };
    for (written, value) in map {
        let pipeline_path = join(&path, written);
        let (signal_name, name) = match written.split_once('/') {
            Some((signal, name)) => (signal, Some(name)),
            None => (written.as_str(), None),
        };
        let signal = match signal_name {
            "traces" => Signal::Traces,
            "metrics" => Signal::Metrics,
            "logs" => {
                problems.add(
                    pipeline_path,
                    format!("{signal_name} pipelines are not supported yet by this version of tailgate; remove this pipeline"),
                );
                continue;
            }
            _ => {
                problems.add(
                    pipeline_path,
                    format!("unknown signal {signal_name:?} (known: traces, metrics, logs); write the pipeline id as traces, metrics, traces/<name> or metrics/<name>"),
                );
                continue;
            }
        };
        if name == Some("") {
            problems.add(
                pipeline_path,
                format!("the name after \"/\" must not be empty; write \"{signal_name}\" or \"{signal_name}/<name>\""),
            );
            continue;
        }
        let pipeline = Fields::open(
            problems,
            &pipeline_path,
            Some(value),
            &["receivers", "processors", "exporters"],
            &[],
        );
        // Receivers and exporters may also name connectors, which join two pipelines.
        let or_connector = |problems: &mut Problems, key: &str, own: (Section, &Declared)| {
            references(
                problems,
                &pipeline,
                key,
                &[own, (Section::Connectors, declared.connectors)],
            )
        };
        let receivers = or_connector(
            problems,
            "receivers",
            (Section::Receivers, declared.receivers),
        );
        let processors = references(
            problems,
            &pipeline,
            "processors",
            &[(Section::Processors, declared.processors)],
        );
        let exporters = or_connector(
            problems,
            "exporters",
            (Section::Exporters, declared.exporters),
        );
        if signal == Signal::Traces {
            for id in exporters
                .iter()
                .filter(|id| id.kind == "prometheusremotewrite")
            {
                problems.add(
                    pipeline.key_path("exporters"),
                    format!(
                        "{:?} exports metrics only and cannot be in a traces pipeline",
                        id.written
                    ),
                );
            }
        }
        if signal != Signal::Traces {
            for id in exporters.iter().filter(|id| id.kind == "loadbalancing") {
                problems.add(
                    pipeline.key_path("exporters"),
                    format!(
                        "{:?} routes traces only in this version of tailgate: remove it from this \
                         pipeline",
                        id.written
                    ),
                );
            }
        }
        for (key, list) in [("receivers", &receivers), ("exporters", &exporters)] {
            if list.is_empty() && pipeline.value(key).is_none_or(is_empty_seq) {
                problems.add(
                    pipeline.key_path(key),
                    format!("a pipeline needs at least one {}", &key[..key.len() - 1]),
                );
            }
        }
        pipelines.insert(
            PipelineId {
                signal,
                written: written.clone(),
            },
            PipelineConfig {
                receivers,
                processors,
                exporters,
            },
        );
    }
    pipelines
}

fn is_empty_seq(value: &Value) -> bool {
    matches!(value, Value::Seq(items) if items.is_empty())
}

/// A list of component ids under `key`, each resolved to its definition in the first of
/// `sections` that defines it (receivers before connectors, exporters before connectors).
/// Undefined and repeated ids are reported; each resolves to the id as defined, so that
/// `otlp_grpc/tempo` finds `otlp/tempo`.
fn references(
    problems: &mut Problems,
    fields: &Fields<'_>,
    key: &str,
    sections: &[(Section, &Declared)],
) -> Vec<ComponentId> {
    let section = sections[0].0;
    let path = fields.key_path(key);
    let items = match fields.value(key) {
        None => return Vec::new(),
        Some(Value::Seq(items)) => items,
        Some(other) => {
            problems.add(
                path,
                format!(
                    "expected a list of {} ids, found {}",
                    section.singular(),
                    other.describe()
                ),
            );
            return Vec::new();
        }
    };
    let mut ids: Vec<ComponentId> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Some(written) = as_string(problems, &format!("{path}[{i}]"), item) else {
            continue;
        };
        let mut resolved = Err(String::new());
        for (section, declared) in sections {
            resolved = declared.resolve(*section, &written);
            if resolved.is_ok() {
                break;
            }
        }
        let resolved = match resolved {
            Err(_) if sections.len() > 1 && super::ids::parse(&written).is_ok() => {
                let keys: Vec<&str> = sections.iter().map(|(section, _)| section.key()).collect();
                Err(format!(
                    "{written:?} is not defined under {}",
                    keys.join(" or ")
                ))
            }
            other => other,
        };
        match resolved {
            Ok(id) => {
                if ids.contains(&id) {
                    problems.add(
                        path.clone(),
                        format!(
                            "{written:?} is listed more than once: list each {} once",
                            section.singular()
                        ),
                    );
                } else {
                    ids.push(id);
                }
            }
            Err(message) => problems.add(path.clone(), message),
        }
    }
    ids
}

/// `service.telemetry`.
fn telemetry(problems: &mut Problems, service: &Fields<'_>) -> TelemetryConfig {
    let telemetry = service.child(
        problems,
        "telemetry",
        &["logs", "metrics"],
        &[("resource", NOT_YET), ("traces", NOT_YET)],
    );
    let logs = telemetry.child(
        problems,
        "logs",
        &["level", "encoding"],
        &[
            ("development", NOT_YET),
            ("sampling", NOT_YET),
            ("output_paths", NOT_YET),
            ("error_output_paths", NOT_YET),
            ("initial_fields", NOT_YET),
            ("disable_caller", NOT_YET),
            ("disable_stacktrace", NOT_YET),
            ("processors", NOT_YET),
        ],
    );
    let log_level = logs
        .choice(problems, "level", LogLevel::NAMES)
        .unwrap_or(defaults::LOG_LEVEL);
    let log_encoding = logs
        .choice(problems, "encoding", LogEncoding::NAMES)
        .unwrap_or(defaults::LOG_ENCODING);
    TelemetryConfig {
        metrics_address: metrics_address(problems, &telemetry),
        log_level,
        log_encoding,
    }
}

/// `service.telemetry.metrics`: `address`, or the newer `readers` form with one Prometheus
/// pull reader; `level: none` turns `/metrics` off. Levels other than `none` all serve the
/// same metrics.
fn metrics_address(problems: &mut Problems, telemetry: &Fields<'_>) -> Option<String> {
    let metrics = telemetry.child(problems, "metrics", &["level", "address", "readers"], &[]);
    #[derive(Clone, Copy, PartialEq)]
    enum Level {
        None,
        On,
    }
    let level = metrics.choice(
        problems,
        "level",
        &[
            ("none", Level::None),
            ("basic", Level::On),
            ("normal", Level::On),
            ("detailed", Level::On),
        ],
    );
    let address = metrics.listen_endpoint(problems, "address");
    let from_readers = metrics
        .value("readers")
        .and_then(|readers| reader_address(problems, &metrics.key_path("readers"), readers));
    if metrics.value("address").is_some() && metrics.value("readers").is_some() {
        problems.add(
            metrics.key_path("readers"),
            "set either address or readers, not both",
        );
    }
    if level == Some(Level::None) {
        return None;
    }
    Some(
        address
            .or(from_readers)
            .unwrap_or_else(defaults::metrics_address),
    )
}

/// `readers: [{pull: {exporter: {prometheus: {host, port}}}}]`, the one form tailgate serves.
fn reader_address(problems: &mut Problems, path: &str, readers: &Value) -> Option<String> {
    let only_form = "tailgate serves metrics only through one Prometheus pull reader: \
                     readers: [{pull: {exporter: {prometheus: {host: 0.0.0.0, port: 8888}}}}]";
    let reader = match readers {
        Value::Seq(items) if items.len() == 1 => &items[0],
        Value::Seq(items) if items.len() > 1 => {
            problems.add(
                path,
                format!("{} readers are configured; {only_form}", items.len()),
            );
            return None;
        }
        _ => {
            problems.add(path, only_form);
            return None;
        }
    };
    let reader_path = format!("{path}[0]");
    let reader = Fields::open(
        problems,
        &reader_path,
        Some(reader),
        &["pull"],
        &[("periodic", only_form)],
    );
    let pull = reader.child(problems, "pull", &["exporter"], &[]);
    let exporter = pull.child(problems, "exporter", &["prometheus"], &[]);
    let prometheus = exporter.child(
        problems,
        "prometheus",
        &["host", "port"],
        &[
            ("without_scope_info", NOT_YET),
            ("without_units", NOT_YET),
            ("without_type_suffix", NOT_YET),
        ],
    );
    if !exporter.has("prometheus") {
        // A `periodic` reader was reported above.
        if !reader.has("periodic") {
            problems.add(reader_path, only_form);
        }
        return None;
    }
    let host = prometheus
        .string(problems, "host")
        .unwrap_or_else(defaults::prometheus_host);
    let port = match prometheus.uint(problems, "port") {
        None => defaults::PROMETHEUS_PORT,
        Some(port) => match u16::try_from(port) {
            Ok(port) => port,
            Err(_) => {
                problems.add(
                    prometheus.key_path("port"),
                    format!("invalid port {port}: expected a number from 0 to 65535"),
                );
                return None;
            }
        },
    };
    let address = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    match endpoint::check_listen(&address) {
        Ok(()) => Some(address),
        Err(message) => {
            problems.add(prometheus.key_path("host"), message);
            None
        }
    }
}
