//! The Collector-style configuration.
//!
//! tailgate reads the OpenTelemetry Collector's YAML: `receivers`, `processors`,
//! `exporters`, `connectors`, `extensions` and `service`, with the Collector's component
//! names, keys and defaults, so that an existing gateway config runs unchanged once the
//! components tailgate lacks are removed. Everything is checked once, here, at startup;
//! the runtime receives the typed [`Config`] and never reads YAML or the environment.
//!
//! # Loading
//!
//! [`load`] reads one or more files and merges them as the Collector merges several
//! `--config` flags (mappings merge deeply, later scalars win, lists are replaced whole),
//! then expands `${env:NAME}` references (see below), then types and checks every
//! section. [`load_str`] does the same from strings.
//!
//! Every problem is reported, not only the first, each with its dotted path:
//!
//! ```text
//! exporters.otlp/tempo.endpoint: must not be empty: set where to send, e.g. tempo-distributor.monitoring:4317
//! receivers.otlp.protocols.grpc.endpont: unknown key (known: endpoint, transport, ...)
//! service.pipelines.traces.exporters: "otlp/missing" is not defined under exporters or connectors
//! ```
//!
//! # Environment variables
//!
//! `${env:NAME}` and `${NAME}` in string values are replaced by the variable's value;
//! `${env:NAME:-default}` gives a default for an unset variable; `$$` is a literal `$`.
//! **An unset variable without a default becomes the empty string**, as in the Collector;
//! a required key left empty that way is then reported by name. A value that is exactly one
//! reference takes the type of its key (`${env:QUEUE_SIZE}` may fill an integer).
//!
//! # Values
//!
//! - Durations are written as the Collector writes them: `200ms`, `5s`, `1m30s`, `1h`. A
//!   bare number other than `0` is refused, since the Collector would read `5` as 5ns.
//! - `null` (a key with no value) means the default, and for a component or protocol it
//!   means "enabled with defaults" (`grpc:`, `debug:`).
//! - Endpoints are `host:port`; `:4317` listens on all interfaces, IPv6 goes in brackets.
//!   Listeners default to `0.0.0.0` rather than the Collector's `localhost`, because
//!   tailgate runs in a pod, where a loopback listener is unreachable.
//! - Keys the Collector has and tailgate does not implement yet are refused by name, so
//!   that no setting is silently ignored. A few keys are accepted, checked, and have no
//!   effect; each is documented where it is read (`include_metadata`, the gRPC buffer sizes
//!   and `transport`, the debug exporter's `sampling_*`, metrics `level` other than `none`).
//! - A component that is defined but in no pipeline is not an error, as in the Collector.
//! - A pipeline may name a component by either spelling of its type (`otlp_grpc/tempo`
//!   finds `otlp/tempo`); defining both spellings of one id is an error.
//!
//! # What start-up would refuse
//!
//! Loading also makes every check that start-up would make for a reason that is in the
//! config, so that `tailgate validate` refuses what `tailgate` would refuse: `tail_sampling`
//! after another processor than `memory_limiter`; regular expressions that do not compile
//! together; two `memory_limiter` ids in the pipelines (one limiter gates every receiver);
//! exporter URLs that are not valid URIs, headers that cannot be sent, TLS files that
//! cannot be read or used (loaded as the exporter loads them); a `file_storage` directory
//! that is missing without `create_directory`, or is not a directory; two listeners on one
//! address; memory limits too large to count in bytes. Files are read on the machine that
//! loads the config. What depends on the machine at start (a port taken by another
//! process, a host name that does not resolve, a directory that cannot be created or is
//! locked, the container's memory total) is left to start-up.

mod auth;
mod common;
mod components;
mod connectors;
mod defaults;
mod duration;
mod endpoint;
mod error;
mod expand;
mod exporter_settings;
mod fields;
mod graph;
mod htpasswd;
mod ids;
mod listen;
mod loadbalancing;
mod memory_limiter;
mod remote_write;
mod render;
mod service;
mod tail_sampling;
mod tls;
mod types;
mod value;

#[cfg(test)]
mod startup_tests;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

pub use error::{ConfigError, Problem};
pub use htpasswd::{Htpasswd, HtpasswdError, PasswordHash};
pub use render::render;
pub use tls::{ServerTlsError, ServerTlsFiles};
pub use types::*;

use error::Problems;
use fields::Fields;
use ids::Section;
use value::Value;

/// The configuration used when no `--config` is given: OTLP in over gRPC (`0.0.0.0:4317`)
/// and HTTP (`0.0.0.0:4318`). Traces enter `traces/in`, which hands every span to the
/// `spanmetrics` connector (RED metrics before sampling) and, through `forward`, to
/// `traces/sampled`: tail sampling that keeps every trace with an error and a consistent
/// 10% of the others, deciding 2s after the root span (30s at most); batched, printed by
/// the debug exporter. Metrics received over OTLP and the span metrics are batched and
/// printed by the debug exporter. The health check listens on `0.0.0.0:13133`.
pub const DEFAULT_CONFIG: &str = "\
receivers:
  otlp:
    protocols:
      grpc:
      http:
processors:
  tail_sampling:
    decision_wait: 30s
    decision_wait_after_root_received: 2s
    policies:
      - name: errors
        type: status_code
        status_code:
          status_codes: [ERROR]
      - name: baseline
        type: probabilistic
        probabilistic:
          sampling_percentage: 10
  batch:
exporters:
  debug:
    verbosity: basic
connectors:
  spanmetrics:
  forward:
extensions:
  health_check:
service:
  extensions: [health_check]
  pipelines:
    traces/in:
      receivers: [otlp]
      exporters: [spanmetrics, forward]
    traces/sampled:
      receivers: [forward]
      processors: [tail_sampling, batch]
      exporters: [debug]
    metrics:
      receivers: [otlp, spanmetrics]
      processors: [batch]
      exporters: [debug]
";

/// Loads the configuration from `paths`, merged in order (later files override earlier
/// ones), expanding `${env:NAME}` from the process environment. With no paths, loads
/// [`DEFAULT_CONFIG`].
///
/// # Errors
///
/// Every problem found: files that cannot be read, YAML syntax errors (with file, line and
/// column), unknown keys and components, wrong values, undefined references, and every
/// reason in the config for which start-up would refuse it (see the module docs).
pub fn load(paths: &[PathBuf]) -> Result<Config, ConfigError> {
    if paths.is_empty() {
        return load_str(&[DEFAULT_CONFIG]);
    }
    let mut problems = Problems::default();
    let mut texts = Vec::with_capacity(paths.len());
    for path in paths {
        match std::fs::read_to_string(path) {
            Ok(text) => texts.push((display_name(path), text)),
            Err(error) => problems.add(
                display_name(path),
                format!("cannot read the config file: {error}"),
            ),
        }
    }
    if !problems.is_empty() {
        return Err(problems.into_error());
    }
    let docs: Vec<(String, &str)> = texts
        .iter()
        .map(|(name, text)| (name.clone(), text.as_str()))
        .collect();
    load_docs(&docs, &process_env)
}

/// Loads the configuration from YAML documents given as strings, merged in order, expanding
/// `${env:NAME}` from the process environment. In messages, the documents are named
/// `<config 1>`, `<config 2>`, ...
///
/// # Errors
///
/// As [`load`].
pub fn load_str(yaml_docs: &[&str]) -> Result<Config, ConfigError> {
    load_str_with_env(yaml_docs, &process_env)
}

/// As [`load_str`], with environment variables looked up by `env` (`None` = unset) rather
/// than in the process environment.
///
/// # Errors
///
/// As [`load`].
pub fn load_str_with_env(
    yaml_docs: &[&str],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let docs: Vec<(String, &str)> = yaml_docs
        .iter()
        .enumerate()
        .map(|(i, text)| (format!("<config {}>", i + 1), *text))
        .collect();
    load_docs(&docs, env)
}

/// The receivers, processors, exporters and connectors that no pipeline uses, and the extensions that
/// `service.extensions` does not list. They are not an error (as in the Collector), and are
/// not started; worth a log line at startup.
pub fn unused_components(config: &Config) -> Vec<&ComponentId> {
    let pipelines = config.service.pipelines.values();
    let used: std::collections::BTreeSet<&ComponentId> = pipelines
        .flat_map(|p| p.receivers.iter().chain(&p.processors).chain(&p.exporters))
        .chain(&config.service.extensions)
        .collect();
    config
        .receivers
        .keys()
        .chain(config.processors.keys())
        .chain(config.exporters.keys())
        .chain(config.connectors.keys())
        .chain(config.extensions.keys())
        .filter(|id| !used.contains(id))
        .collect()
}

fn process_env(name: &str) -> Option<String> {
    std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
}

fn display_name(path: &Path) -> String {
    path.display().to_string()
}

/// Parses, merges, expands and types named documents.
fn load_docs(
    docs: &[(String, &str)],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let mut problems = Problems::default();
    match read_docs(docs, env, &mut problems) {
        Some(config) => problems.finish(config),
        None => Err(problems.into_error()),
    }
}

/// Parses, merges, expands and types named documents, recording problems. `None` when
/// the documents could not be parsed or expanded; otherwise the typed config, meaningful
/// only when no problem was recorded.
fn read_docs(
    docs: &[(String, &str)],
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Problems,
) -> Option<Config> {
    let mut merged = Value::Map(Default::default());
    for (name, text) in docs {
        if let Some(doc) = value::parse_document(name, text, problems) {
            value::merge(&mut merged, doc);
        }
    }
    if !problems.is_empty() {
        return None;
    }
    expand::expand(&mut merged, "", env, problems);
    if !problems.is_empty() {
        return None;
    }
    Some(typed(&merged, problems))
}

/// As [`load_str_with_env`] with no environment, also returning the path of every known
/// key that the documents do not set (for tests that must set every key).
#[cfg(test)]
pub(crate) fn load_reporting_unwritten(
    yaml_docs: &[&str],
) -> (Result<Config, ConfigError>, Vec<String>) {
    let docs: Vec<(String, &str)> = yaml_docs
        .iter()
        .enumerate()
        .map(|(i, text)| (format!("<config {}>", i + 1), *text))
        .collect();
    let mut problems = Problems::default();
    let config = read_docs(&docs, &|_| None, &mut problems);
    let unwritten = problems.unwritten_keys();
    let result = match config {
        Some(config) => problems.finish(config),
        None => Err(problems.into_error()),
    };
    (result, unwritten)
}

/// Types the merged, expanded tree. Problems are recorded; the result is meaningful only
/// when there are none.
fn typed(tree: &Value, problems: &mut Problems) -> Config {
    let root = Fields::open(
        problems,
        "",
        Some(tree),
        &[
            "receivers",
            "processors",
            "exporters",
            "connectors",
            "extensions",
            "service",
        ],
        &[],
    );
    let receivers = components::section(problems, &root, Section::Receivers, components::receiver);
    let processors =
        components::section(problems, &root, Section::Processors, components::processor);
    let exporters = components::section(problems, &root, Section::Exporters, components::exporter);
    let connectors =
        components::section(problems, &root, Section::Connectors, connectors::connector);
    let extensions =
        components::section(problems, &root, Section::Extensions, components::extension);
    let service = service::service(
        problems,
        &root,
        &service::Declarations {
            receivers: &receivers.declared,
            processors: &processors.declared,
            exporters: &exporters.declared,
            connectors: &connectors.declared,
            extensions: &extensions.declared,
        },
    );
    let config = Config {
        receivers: receivers.components,
        processors: processors.components,
        exporters: exporters.components,
        connectors: connectors.components,
        extensions: extensions.components,
        service,
    };
    graph::validate(problems, &config);
    auth::check_references(problems, &config);
    listen::check(problems, &config);
    config
}
