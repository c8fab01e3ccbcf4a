//! Checks across pipelines: which signals each component takes, how connectors join
//! pipelines, that the pipeline graph has no cycle, where `tail_sampling` may stand, and
//! that the pipelines share one `memory_limiter`.
//!
//! The rules are the Collector's: a connector is an exporter of one pipeline and a receiver
//! of another. `forward` joins pipelines of one signal (traces to traces, metrics to
//! metrics); `spanmetrics` joins traces pipelines to metrics pipelines. A connector used as
//! an exporter must be used as a receiver by a pipeline of a signal it can emit, and vice
//! versa.

use std::collections::BTreeMap;

use super::error::{Problems, join};
use super::{
    ComponentId, Config, ConnectorConfig, ExporterConfig, ExtensionConfig, PipelineId,
    ProcessorConfig, Signal,
};

/// The signal a pipeline id names, as written in messages.
fn signal_name(signal: Signal) -> &'static str {
    match signal {
        Signal::Traces => "traces",
        Signal::Metrics => "metrics",
        Signal::Logs => "logs",
    }
}

/// Whether `connector` can take `from` (as an exporter) and emit `to` (as a receiver).
pub(crate) fn connects(connector: &ConnectorConfig, from: Signal, to: Signal) -> bool {
    match connector {
        ConnectorConfig::Forward => from == to && from != Signal::Logs,
        ConnectorConfig::SpanMetrics(_) => from == Signal::Traces && to == Signal::Metrics,
    }
}

/// `exporters.<otlp>.sending_queue.storage` names a `file_storage` extension that
/// `service.extensions` starts, and the queue is enabled.
fn check_queue_storage(problems: &mut Problems, config: &Config) {
    for (id, exporter) in &config.exporters {
        let queue = match exporter {
            ExporterConfig::OtlpGrpc(otlp) | ExporterConfig::OtlpHttp(otlp) => &otlp.sending_queue,
            ExporterConfig::Debug(_)
            | ExporterConfig::PrometheusRemoteWrite(_)
            | ExporterConfig::LoadBalancing(_) => continue,
        };
        let Some(storage) = &queue.storage else {
            continue;
        };
        let path = join(
            &join(&join("exporters", &id.written), "sending_queue"),
            "storage",
        );
        if !queue.enabled {
            problems.add(
                &path,
                "needs the sending queue: set sending_queue.enabled to true or remove storage",
            );
        }
        let defined = config.extensions.iter().find(|(extension, _)| {
            extension.kind == storage.kind && extension.name == storage.name
        });
        match defined {
            None => problems.add(
                path,
                format!(
                    "{storage:?} is not defined under extensions: add a file_storage extension, e.g. extensions.file_storage/queue.directory",
                    storage = storage.written
                ),
            ),
            Some((_, ExtensionConfig::FileStorage(_))) => {
                if !config
                    .service
                    .extensions
                    .iter()
                    .any(|listed| listed.kind == storage.kind && listed.name == storage.name)
                {
                    problems.add(
                        path,
                        format!(
                            "{storage:?} is not listed in service.extensions: add it there so it starts",
                            storage = storage.written
                        ),
                    );
                }
            }
            Some((other, _)) => problems.add(
                path,
                format!(
                    "{storage:?} is a {} extension; a sending queue needs a file_storage extension",
                    other.kind,
                    storage = storage.written
                ),
            ),
        }
    }
}

/// Records every problem of the pipeline graph of `config`.
pub(crate) fn validate(problems: &mut Problems, config: &Config) {
    let pipelines = &config.service.pipelines;
    for (id, pipeline) in pipelines {
        let path = join("service.pipelines", &id.written);
        for (position, processor) in pipeline.processors.iter().enumerate() {
            if !matches!(
                config.processors.get(processor),
                Some(ProcessorConfig::TailSampling(_))
            ) {
                continue;
            }
            if id.signal != Signal::Traces {
                problems.add(
                    join(&path, "processors"),
                    format!(
                        "{processor} samples traces and cannot run in a {} pipeline",
                        signal_name(id.signal)
                    ),
                );
            } else if !only_memory_limiters(config, &pipeline.processors[..position]) {
                problems.add(
                    join(&path, "processors"),
                    format!(
                        "{processor} must come first (only memory_limiter may precede it): it \
                         buffers whole traces; put batch after it"
                    ),
                );
            }
        }
        for (key, as_exporter) in [("receivers", false), ("exporters", true)] {
            let list = if as_exporter {
                &pipeline.exporters
            } else {
                &pipeline.receivers
            };
            for connector_id in list {
                let Some(connector) = config.connectors.get(connector_id) else {
                    continue;
                };
                check_connector_use(
                    problems,
                    config,
                    &join(&path, key),
                    (connector_id, connector),
                    id.signal,
                    as_exporter,
                );
            }
        }
    }
    check_queue_storage(problems, config);
    check_hand_off(problems, config);
    check_one_memory_limiter(problems, config);
    if let Some(cycle) = find_cycle(config) {
        problems.add(
            "service.pipelines",
            format!("the pipelines form a cycle through connectors: {cycle}"),
        );
    }
}

/// `processors.<tail_sampling>.hand_off.exporter` names a `loadbalancing` exporter that a
/// traces pipeline uses: the one whose ring the sampler follows, started with the pipelines.
fn check_hand_off(problems: &mut Problems, config: &Config) {
    for (id, processor) in &config.processors {
        let ProcessorConfig::TailSampling(tail) = processor else {
            continue;
        };
        let Some(hand_off) = &tail.hand_off else {
            continue;
        };
        let path = join(
            &join(&join("processors", &id.written), "hand_off"),
            "exporter",
        );
        let named = &hand_off.exporter;
        let defined = config
            .exporters
            .iter()
            .find(|(exporter, _)| exporter.kind == named.kind && exporter.name == named.name);
        let Some((exporter_id, exporter)) = defined else {
            problems.add(
                &path,
                format!("{:?} is not defined under exporters", named.written),
            );
            continue;
        };
        if !matches!(exporter, ExporterConfig::LoadBalancing(_)) {
            problems.add(
                &path,
                format!(
                    "{} is not a loadbalancing exporter: hand_off follows the ring of a \
                     loadbalancing exporter",
                    named.written
                ),
            );
            continue;
        }
        let used = config
            .service
            .pipelines
            .iter()
            .any(|(pid, p)| pid.signal == Signal::Traces && p.exporters.contains(exporter_id));
        if !used {
            problems.add(
                &path,
                format!(
                    "{} is not used by any traces pipeline: list it in the pipeline that \
                     routes the senders' spans (e.g. traces/route)",
                    named.written
                ),
            );
        }
    }
}

/// Whether every processor in `processors` is a `memory_limiter`: the only processors
/// that may come before `tail_sampling`, which is fed directly by the receivers.
fn only_memory_limiters(config: &Config, processors: &[ComponentId]) -> bool {
    processors.iter().all(|id| {
        matches!(
            config.processors.get(id),
            Some(ProcessorConfig::MemoryLimiter(_))
        )
    })
}

/// The pipelines use at most one `memory_limiter` id. The memory budget is one for the
/// process, and the memory limiter that sets it gates every receiver, including the
/// receivers of pipelines that do not list it; a second one could only be ignored.
/// The same id in several pipelines is fine.
fn check_one_memory_limiter(problems: &mut Problems, config: &Config) {
    let mut first: Option<&ComponentId> = None;
    for (pipeline_id, pipeline) in &config.service.pipelines {
        for processor in &pipeline.processors {
            if !matches!(
                config.processors.get(processor),
                Some(ProcessorConfig::MemoryLimiter(_))
            ) {
                continue;
            }
            match first {
                None => first = Some(processor),
                Some(first) if first == processor => {}
                Some(first) => problems.add(
                    join(
                        &join("service.pipelines", &pipeline_id.written),
                        "processors",
                    ),
                    format!(
                        "{processor} and {first} are two memory limiters, but one memory \
                         limiter gates every receiver of the process: use {first} in every \
                         pipeline that needs one (or define one memory_limiter)"
                    ),
                ),
            }
        }
    }
}

/// One use of a connector in a pipeline of `signal`: the connector must take that signal
/// in that role, and a pipeline on the other side must use it in the opposite role.
fn check_connector_use(
    problems: &mut Problems,
    config: &Config,
    path: &str,
    (id, connector): (&ComponentId, &ConnectorConfig),
    signal: Signal,
    as_exporter: bool,
) {
    let here = signal_name(signal);
    let role_ok = [Signal::Traces, Signal::Metrics, Signal::Logs]
        .into_iter()
        .any(|other| {
            if as_exporter {
                connects(connector, signal, other)
            } else {
                connects(connector, other, signal)
            }
        });
    if !role_ok {
        let what = match (connector, as_exporter) {
            (ConnectorConfig::SpanMetrics(_), true) => {
                "reads traces: list it under exporters of traces pipelines"
            }
            (ConnectorConfig::SpanMetrics(_), false) => {
                "emits metrics: list it under receivers of metrics pipelines"
            }
            (ConnectorConfig::Forward, _) => "joins traces or metrics pipelines only",
        };
        problems.add(
            path,
            format!("connector {id} cannot be used in a {here} pipeline: it {what}"),
        );
        return;
    }
    let matched = config.service.pipelines.iter().any(|(other_id, other)| {
        if as_exporter {
            other.receivers.contains(id) && connects(connector, signal, other_id.signal)
        } else {
            other.exporters.contains(id) && connects(connector, other_id.signal, signal)
        }
    });
    if !matched {
        // A span metrics connector takes traces and gives metrics; a forward one keeps the
        // signal.
        let (role, other_side, span_metrics_wants) = if as_exporter {
            ("an exporter", "receivers", "metrics")
        } else {
            ("a receiver", "exporters", "traces")
        };
        let wanted = match connector {
            ConnectorConfig::SpanMetrics(_) => span_metrics_wants,
            ConnectorConfig::Forward => here,
        };
        problems.add(
            path,
            format!(
                "connector {id} is used as {role} here but no {wanted} pipeline lists it under \
                 {other_side}"
            ),
        );
    }
}

/// The pipelines that `from` feeds through its connectors.
pub(crate) fn downstream_of<'c>(config: &'c Config, from: &PipelineId) -> Vec<&'c PipelineId> {
    let Some(pipeline) = config.service.pipelines.get(from) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for exporter in &pipeline.exporters {
        let Some(connector) = config.connectors.get(exporter) else {
            continue;
        };
        for (to_id, to) in &config.service.pipelines {
            if to.receivers.contains(exporter)
                && connects(connector, from.signal, to_id.signal)
                && !out.contains(&to_id)
            {
                out.push(to_id);
            }
        }
    }
    out
}

/// A cycle of pipelines joined by connectors, rendered `a -> b -> a`, if there is one.
fn find_cycle(config: &Config) -> Option<String> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Visiting,
        Done,
    }
    fn visit<'c>(
        config: &'c Config,
        at: &'c PipelineId,
        marks: &mut BTreeMap<&'c PipelineId, Mark>,
        stack: &mut Vec<&'c PipelineId>,
    ) -> Option<String> {
        match marks.get(at) {
            Some(Mark::Done) => return None,
            Some(Mark::Visiting) => {
                let start = stack.iter().position(|id| *id == at).unwrap_or(0);
                let mut names: Vec<&str> = stack[start..]
                    .iter()
                    .map(|id| id.written.as_str())
                    .collect();
                names.push(&at.written);
                return Some(names.join(" -> "));
            }
            None => {}
        }
        marks.insert(at, Mark::Visiting);
        stack.push(at);
        for next in downstream_of(config, at) {
            if let Some(cycle) = visit(config, next, marks, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        marks.insert(at, Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for id in config.service.pipelines.keys() {
        let mut stack = Vec::new();
        if let Some(cycle) = visit(config, id, &mut marks, &mut stack) {
            return Some(cycle);
        }
    }
    None
}
