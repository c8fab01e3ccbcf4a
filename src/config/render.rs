//! The effective configuration as Collector-style YAML, every default written out.

use std::fmt::Write as _;
use std::num::NonZeroUsize;

use super::duration;
use super::fields::Named as _;
use super::{BearerTokens, Secret};
use super::{
    ComponentId, Compression, Config, ConnectorConfig, ExporterConfig, ExtensionConfig,
    LoadBalancingConfig, MemoryAmount, OtlpExporterConfig, PolicyConfig, PolicyKind,
    ProcessorConfig, ReceiverConfig, RemoteWriteConfig, RemoteWriteMessage, ResolverConfig,
    RetryConfig, RoutingKey, SpanMetricsConfig, StatusCodeName, TailSamplingConfig,
    TlsClientConfig, TlsServerConfig,
};

const MIB: usize = 1024 * 1024;

/// Renders `config` as YAML that [`super::load_str`] reads back to an equal `Config`, except
/// for secrets: tokens and inline htpasswd text are written as `[REDACTED]` (a `token`
/// is written in the `tokens` list), so the output can be shared.
///
/// Every setting is written, defaults included. Strings are double-quoted and `$` is
/// written `$$`, so values are never re-typed or re-expanded when read back. Keys the
/// typed configuration does not keep (those documented as having no effect) are left out.
pub fn render(config: &Config) -> String {
    let mut out = Out::default();

    out.line(0, "receivers:");
    for (id, receiver) in &config.receivers {
        out.key(1, &id.written);
        match receiver {
            ReceiverConfig::Otlp(otlp) => {
                out.line(2, "protocols:");
                if let Some(grpc) = &otlp.grpc {
                    out.line(3, "grpc:");
                    out.string(4, "endpoint", &grpc.endpoint);
                    // Stored in bytes; written in whole MiB, rounding up to stay within it.
                    out.plain(
                        4,
                        "max_recv_msg_size_mib",
                        grpc.max_recv_msg_size.div_ceil(MIB),
                    );
                    out.plain(
                        4,
                        "max_concurrent_streams",
                        grpc.max_concurrent_streams.unwrap_or(0),
                    );
                    out.limit(4, "max_concurrent_requests", grpc.max_concurrent_requests);
                    if let Some(tls) = &grpc.tls {
                        render_server_tls(&mut out, tls);
                    }
                    server_auth(&mut out, grpc.auth.as_ref());
                }
                if let Some(http) = &otlp.http {
                    out.line(3, "http:");
                    out.string(4, "endpoint", &http.endpoint);
                    out.string(4, "traces_url_path", &http.traces_url_path);
                    out.string(4, "metrics_url_path", &http.metrics_url_path);
                    out.string(4, "logs_url_path", &http.logs_url_path);
                    out.plain(4, "max_request_body_size", http.max_request_body_size);
                    out.limit(4, "max_concurrent_requests", http.max_concurrent_requests);
                    server_auth(&mut out, http.auth.as_ref());
                    if let Some(cors) = &http.cors {
                        out.line(4, "cors:");
                        out.strings(5, "allowed_origins", &cors.allowed_origins);
                        out.strings(5, "allowed_headers", &cors.allowed_headers);
                        if let Some(max_age) = cors.max_age {
                            out.plain(5, "max_age", max_age);
                        }
                    }
                    if let Some(tls) = &http.tls {
                        render_server_tls(&mut out, tls);
                    }
                }
            }
        }
    }

    out.line(0, "processors:");
    for (id, processor) in &config.processors {
        out.key(1, &id.written);
        match processor {
            ProcessorConfig::Batch(batch) => {
                out.plain(2, "send_batch_size", batch.send_batch_size);
                out.limit(2, "send_batch_max_size", batch.send_batch_max_size);
                out.plain(2, "send_batch_max_size_bytes", batch.send_batch_max_bytes);
                out.plain(2, "timeout", duration::format(batch.timeout));
            }
            ProcessorConfig::TailSampling(tail) => tail_sampling(&mut out, tail),
            ProcessorConfig::MemoryLimiter(limiter) => {
                out.plain(
                    2,
                    "check_interval",
                    duration::format(limiter.check_interval),
                );
                let amount = |out: &mut Out, mib_key: &str, percent_key: &str, amount| match amount
                {
                    MemoryAmount::Bytes(bytes) => out.plain(2, mib_key, bytes >> 20),
                    MemoryAmount::Percentage(percent) => out.plain(2, percent_key, percent),
                };
                amount(&mut out, "limit_mib", "limit_percentage", limiter.limit);
                if let Some(spike) = limiter.spike {
                    amount(&mut out, "spike_limit_mib", "spike_limit_percentage", spike);
                }
            }
        }
    }

    out.line(0, "exporters:");
    for (id, exporter) in &config.exporters {
        out.key(1, &id.written);
        match exporter {
            ExporterConfig::OtlpGrpc(otlp) => otlp_exporter(&mut out, otlp, false),
            ExporterConfig::OtlpHttp(otlp) => otlp_exporter(&mut out, otlp, true),
            ExporterConfig::Debug(debug) => {
                out.plain(2, "verbosity", debug.verbosity.name());
            }
            ExporterConfig::PrometheusRemoteWrite(rw) => remote_write_exporter(&mut out, rw),
            ExporterConfig::LoadBalancing(lb) => load_balancing_exporter(&mut out, lb),
        }
    }

    out.line(0, "connectors:");
    for (id, connector) in &config.connectors {
        out.key(1, &id.written);
        match connector {
            ConnectorConfig::Forward => {}
            ConnectorConfig::SpanMetrics(span_metrics) => {
                render_span_metrics(&mut out, span_metrics)
            }
        }
    }

    out.line(0, "extensions:");
    for (id, extension) in &config.extensions {
        out.key(1, &id.written);
        match extension {
            ExtensionConfig::HealthCheck(health) => {
                out.string(2, "endpoint", &health.endpoint);
                out.string(2, "path", &health.path);
            }
            ExtensionConfig::FileStorage(storage) => {
                out.string(2, "directory", &storage.directory.to_string_lossy());
                out.plain(2, "create_directory", storage.create_directory);
                out.string(
                    2,
                    "directory_permissions",
                    &format!("{:04o}", storage.directory_permissions),
                );
                out.plain(2, "timeout", duration::format(storage.timeout));
                out.plain(2, "fsync", storage.fsync);
                // Stored in bytes, always a whole number of MiB.
                out.plain(2, "max_size_mib", storage.max_size >> 20);
            }
            ExtensionConfig::BearerTokenAuth(bearer) => {
                out.string(2, "scheme", &bearer.scheme);
                out.string(2, "header", &bearer.header);
                match &bearer.tokens {
                    BearerTokens::File(file) => {
                        out.string(2, "filename", &file.to_string_lossy());
                    }
                    BearerTokens::Inline(tokens) => {
                        let redacted = vec![Secret::REDACTED.to_owned(); tokens.len()];
                        out.strings(2, "tokens", &redacted);
                    }
                }
            }
            ExtensionConfig::BasicAuth(basic) => {
                out.line(2, "htpasswd:");
                if let Some(file) = &basic.file {
                    out.string(3, "file", &file.to_string_lossy());
                }
                if basic.inline.is_some() {
                    out.string(3, "inline", Secret::REDACTED);
                }
            }
            ExtensionConfig::K8sEvents(events) => {
                out.plain(2, "enabled", events.enabled);
                if let Some(api_server) = &events.api_server {
                    out.string(2, "api_server", api_server);
                }
                out.string(2, "token_file", &events.token_file.to_string_lossy());
                out.string(2, "ca_file", &events.ca_file.to_string_lossy());
                out.string(
                    2,
                    "namespace_file",
                    &events.namespace_file.to_string_lossy(),
                );
                out.plain(2, "series_window", duration::format(events.series_window));
                out.plain(2, "queue_size", events.queue_size);
                out.plain(2, "timeout", duration::format(events.timeout));
            }
        }
    }

    let service = &config.service;
    out.line(0, "service:");
    out.ids(1, "extensions", &service.extensions);
    out.line(1, "pipelines:");
    for (id, pipeline) in &service.pipelines {
        out.key(2, &id.written);
        out.ids(3, "receivers", &pipeline.receivers);
        out.ids(3, "processors", &pipeline.processors);
        out.ids(3, "exporters", &pipeline.exporters);
    }
    let telemetry = &service.telemetry;
    out.line(1, "telemetry:");
    out.line(2, "logs:");
    out.plain(3, "level", telemetry.log_level.name());
    out.plain(3, "encoding", telemetry.log_encoding.name());
    out.line(2, "metrics:");
    match &telemetry.metrics_address {
        Some(address) => {
            out.plain(3, "level", "normal");
            out.string(3, "address", address);
        }
        None => out.plain(3, "level", "none"),
    }
    out.plain(
        1,
        "shutdown_timeout",
        duration::format(service.shutdown_timeout),
    );

    out.text
}

/// `auth` of an OTLP server, when it has one.
fn server_auth(out: &mut Out, authenticator: Option<&ComponentId>) {
    if let Some(authenticator) = authenticator {
        out.line(4, "auth:");
        out.string(5, "authenticator", &authenticator.written);
    }
}

fn render_span_metrics(out: &mut Out, config: &SpanMetricsConfig) {
    out.line(2, "histogram:");
    out.plain(3, "disable", config.histogram_disabled);
    out.plain(3, "unit", config.histogram_unit.name());
    out.line(3, "explicit:");
    let buckets: Vec<String> = config
        .histogram_buckets
        .iter()
        .map(|bound| duration::format(*bound))
        .collect();
    out.strings(4, "buckets", &buckets);
    if config.dimensions.is_empty() {
        out.line(2, "dimensions: []");
    } else {
        out.line(2, "dimensions:");
        for dimension in &config.dimensions {
            out.line(3, &format!("- name: {}", quote_value(&dimension.name)));
            if let Some(default) = &dimension.default {
                out.string(4, "default", default);
            }
        }
    }
    out.strings(2, "exclude_dimensions", &config.exclude_dimensions);
    out.string(2, "namespace", &config.namespace);
    out.plain(
        2,
        "metrics_flush_interval",
        duration::format(config.metrics_flush_interval),
    );
    out.plain(
        2,
        "aggregation_temporality",
        "AGGREGATION_TEMPORALITY_CUMULATIVE",
    );
    out.line(2, "exemplars:");
    out.plain(3, "enabled", config.exemplars_enabled);
    out.strings(
        2,
        "resource_metrics_key_attributes",
        &config.resource_metrics_key_attributes,
    );
    out.plain(2, "dimensions_cache_size", config.dimensions_cache_size);
    out.limit(
        2,
        "aggregation_cardinality_limit",
        config.aggregation_cardinality_limit,
    );
}

fn tail_sampling(out: &mut Out, tail: &TailSamplingConfig) {
    out.plain(2, "decision_wait", duration::format(tail.decision_wait));
    out.plain(
        2,
        "decision_wait_after_root_received",
        tail.decision_wait_after_root_received
            .map_or_else(|| "0s".to_owned(), duration::format),
    );
    out.plain(2, "num_traces", tail.num_traces);
    out.plain(
        2,
        "expected_new_traces_per_sec",
        tail.expected_new_traces_per_sec,
    );
    out.line(2, "decision_cache:");
    out.plain(3, "sampled_cache_size", tail.sampled_cache_size);
    out.plain(3, "non_sampled_cache_size", tail.non_sampled_cache_size);
    out.plain(2, "sample_on_first_match", tail.sample_on_first_match);
    out.plain(
        2,
        "drop_pending_traces_on_shutdown",
        tail.drop_pending_traces_on_shutdown,
    );
    out.limit(2, "maximum_trace_size_bytes", tail.maximum_trace_size_bytes);
    out.plain(2, "block_on_overflow", tail.block_on_overflow);
    out.plain(2, "record_policy", tail.record_policy);
    if let Some(hand_off) = &tail.hand_off {
        out.line(2, "hand_off:");
        out.plain(3, "exporter", &hand_off.exporter.written);
        out.plain(3, "debounce", duration::format(hand_off.debounce));
        out.plain(3, "leave_delay", duration::format(hand_off.leave_delay));
    }
    out.line(2, "policies:");
    for policy in &tail.policies {
        render_policy(out, 3, policy);
    }
}

/// One policy as a list item at `depth`: `- name: ...`, its keys one level deeper.
fn render_policy(out: &mut Out, depth: usize, policy: &PolicyConfig) {
    out.line(depth, &format!("- name: {}", quote_value(&policy.name)));
    let d = depth + 1;
    let s = d + 1;
    let type_name = match &policy.kind {
        PolicyKind::AlwaysSample => "always_sample",
        PolicyKind::Latency { .. } => "latency",
        PolicyKind::NumericAttribute { .. } => "numeric_attribute",
        PolicyKind::Probabilistic { .. } => "probabilistic",
        PolicyKind::StatusCode { .. } => "status_code",
        PolicyKind::StringAttribute { .. } => "string_attribute",
        PolicyKind::BooleanAttribute { .. } => "boolean_attribute",
        PolicyKind::TraceState { .. } => "trace_state",
        PolicyKind::TraceFlags => "trace_flags",
        PolicyKind::RateLimiting { .. } => "rate_limiting",
        PolicyKind::BytesLimiting { .. } => "bytes_limiting",
        PolicyKind::SpanCount { .. } => "span_count",
        PolicyKind::And { .. } => "and",
        PolicyKind::Not { .. } => "not",
        PolicyKind::Drop { .. } => "drop",
        PolicyKind::Composite { .. } => "composite",
    };
    out.plain(d, "type", type_name);
    if !matches!(
        policy.kind,
        PolicyKind::AlwaysSample | PolicyKind::TraceFlags
    ) {
        // Settings live under a key named after the type.
        out.line(d, &format!("{type_name}:"));
    }
    match &policy.kind {
        PolicyKind::AlwaysSample | PolicyKind::TraceFlags => {}
        PolicyKind::NumericAttribute {
            key,
            min_value,
            max_value,
            invert_match,
        } => {
            out.string(s, "key", key);
            out.plain(s, "min_value", min_value.unwrap_or(0));
            out.plain(s, "max_value", max_value.unwrap_or(0));
            out.plain(s, "invert_match", invert_match);
        }
        PolicyKind::Probabilistic {
            sampling_percentage,
            hash_salt,
        } => {
            out.plain(s, "sampling_percentage", format!("{sampling_percentage:?}"));
            if let Some(salt) = hash_salt {
                out.string(s, "hash_salt", salt);
            }
        }
        PolicyKind::StatusCode { status_codes } => {
            let names: Vec<String> = status_codes
                .iter()
                .map(|code| {
                    match code {
                        StatusCodeName::Ok => "OK",
                        StatusCodeName::Error => "ERROR",
                        StatusCodeName::Unset => "UNSET",
                    }
                    .to_owned()
                })
                .collect();
            out.strings(s, "status_codes", &names);
        }
        PolicyKind::StringAttribute {
            key,
            values,
            regex,
            cache_max_size,
            invert_match,
        } => {
            out.string(s, "key", key);
            out.strings(s, "values", values);
            out.plain(s, "enabled_regex_matching", regex.is_some());
            out.plain(s, "cache_max_size", cache_max_size);
            out.plain(s, "invert_match", invert_match);
        }
        PolicyKind::BooleanAttribute {
            key,
            value,
            invert_match,
        } => {
            out.string(s, "key", key);
            out.plain(s, "value", value);
            out.plain(s, "invert_match", invert_match);
        }
        PolicyKind::TraceState { key, values } => {
            out.string(s, "key", key);
            out.strings(s, "values", values);
        }
        PolicyKind::Latency {
            threshold_ms: first,
            upper_threshold_ms: second,
        }
        | PolicyKind::RateLimiting {
            spans_per_second: first,
            burst_capacity: second,
        }
        | PolicyKind::BytesLimiting {
            bytes_per_second: first,
            burst_capacity: second,
        }
        | PolicyKind::SpanCount {
            min_spans: first,
            max_spans: second,
        } => {
            // A bound and an optional second one, written 0 when unset, under the keys the
            // reader reads, in its order.
            if let [first_key, second_key] = super::tail_sampling::settings_keys_of(type_name) {
                out.plain(s, first_key, first);
                out.plain(s, second_key, second.unwrap_or(0));
            }
        }
        PolicyKind::And { sub_policies } | PolicyKind::Drop { sub_policies } => {
            out.line(s, &format!("{type_name}_sub_policy:"));
            for sub in sub_policies {
                render_policy(out, s + 1, sub);
            }
        }
        PolicyKind::Not { sub_policy } => {
            out.line(s, "not_sub_policy:");
            // `not_sub_policy` is one mapping, not a list.
            render_policy_mapping(out, s + 1, sub_policy);
        }
        PolicyKind::Composite {
            max_total_spans_per_second,
            policy_order,
            sub_policies,
            rate_allocation,
        } => {
            out.plain(s, "max_total_spans_per_second", max_total_spans_per_second);
            out.strings(s, "policy_order", policy_order);
            out.line(s, "composite_sub_policy:");
            for sub in sub_policies {
                render_policy(out, s + 1, sub);
            }
            if rate_allocation.is_empty() {
                out.line(s, "rate_allocation: []");
            } else {
                out.line(s, "rate_allocation:");
                for (policy, percent) in rate_allocation {
                    out.line(s + 1, &format!("- policy: {}", quote_value(policy)));
                    out.plain(s + 2, "percent", format!("{percent:?}"));
                }
            }
        }
    }
}

/// A policy as a plain mapping at `depth` (for `not_sub_policy`): rendered as a list item
/// one level up, with the dash replaced by a space, which YAML reads as the same keys.
fn render_policy_mapping(out: &mut Out, depth: usize, policy: &PolicyConfig) {
    let mut item = Out::default();
    render_policy(&mut item, depth.saturating_sub(1), policy);
    let prefix = format!("{:width$}- ", "", width = depth.saturating_sub(1) * 2);
    let replacement = format!("{:width$}", "", width = depth * 2);
    for (i, line) in item.text.lines().enumerate() {
        let line = match line.strip_prefix(&prefix) {
            Some(rest) if i == 0 => format!("{replacement}{rest}"),
            _ => line.to_owned(),
        };
        out.text.push_str(&line);
        out.text.push('\n');
    }
}

fn otlp_exporter(out: &mut Out, otlp: &OtlpExporterConfig, http: bool) {
    out.string(2, "endpoint", &otlp.endpoint);
    if http && let Some(metrics) = &otlp.metrics_endpoint {
        out.string(2, "metrics_endpoint", metrics);
    }
    if http && let Some(traces) = &otlp.traces_endpoint {
        out.string(2, "traces_endpoint", traces);
    }
    render_tls(out, &otlp.tls);
    string_map(out, "headers", &otlp.headers);
    let compression = match otlp.compression {
        Compression::None => "none",
        Compression::Gzip => "gzip",
        Compression::Zstd => "zstd",
    };
    out.plain(2, "compression", compression);
    out.plain(2, "timeout", duration::format(otlp.timeout));
    let queue = &otlp.sending_queue;
    out.line(2, "sending_queue:");
    out.plain(3, "enabled", queue.enabled);
    out.plain(3, "queue_size", queue.queue_size);
    out.plain(3, "num_consumers", queue.num_consumers);
    if let Some(storage) = &queue.storage {
        out.string(3, "storage", &storage.written);
    }
    render_retry(out, &otlp.retry_on_failure);
}

fn render_tls(out: &mut Out, tls: &TlsClientConfig) {
    out.line(2, "tls:");
    out.plain(3, "insecure", tls.insecure);
    out.plain(3, "insecure_skip_verify", tls.insecure_skip_verify);
    for (key, file) in [
        ("ca_file", &tls.ca_file),
        ("cert_file", &tls.cert_file),
        ("key_file", &tls.key_file),
    ] {
        if let Some(file) = file {
            out.string(3, key, &file.to_string_lossy());
        }
    }
    if let Some(name) = &tls.server_name_override {
        out.string(3, "server_name_override", name);
    }
}

/// A receiver protocol's `tls`, at depth 4.
fn render_server_tls(out: &mut Out, tls: &TlsServerConfig) {
    out.line(4, "tls:");
    out.string(5, "cert_file", &tls.cert_file.to_string_lossy());
    out.string(5, "key_file", &tls.key_file.to_string_lossy());
    if let Some(file) = &tls.client_ca_file {
        out.string(5, "client_ca_file", &file.to_string_lossy());
    }
    out.string(5, "min_version", tls.min_version.name());
    if let Some(max) = tls.max_version {
        out.string(5, "max_version", max.name());
    }
    let interval = tls.reload_interval.unwrap_or_default();
    out.plain(5, "reload_interval", duration::format(interval));
}

fn string_map(out: &mut Out, key: &str, map: &std::collections::BTreeMap<String, String>) {
    if map.is_empty() {
        out.line(2, &format!("{key}: {{}}"));
    } else {
        out.line(2, &format!("{key}:"));
        for (name, value) in map {
            out.string_with_key(3, name, value);
        }
    }
}

fn render_retry(out: &mut Out, retry: &RetryConfig) {
    out.line(2, "retry_on_failure:");
    out.plain(3, "enabled", retry.enabled);
    out.plain(
        3,
        "initial_interval",
        duration::format(retry.initial_interval),
    );
    out.plain(3, "max_interval", duration::format(retry.max_interval));
    out.plain(
        3,
        "max_elapsed_time",
        retry
            .max_elapsed_time
            .map_or_else(|| "0s".to_owned(), duration::format),
    );
    // `{:?}` is the shortest text that parses back to the same f64.
    out.plain(3, "multiplier", format!("{:?}", retry.multiplier));
    out.plain(
        3,
        "randomization_factor",
        format!("{:?}", retry.randomization_factor),
    );
}

fn load_balancing_exporter(out: &mut Out, lb: &LoadBalancingConfig) {
    let routing_key = match lb.routing_key {
        RoutingKey::TraceId => "traceID",
    };
    out.string(2, "routing_key", routing_key);
    out.line(2, "protocol:");
    out.line(3, "otlp:");
    // The template is an OTLP exporter's mapping two levels deeper, without `endpoint`
    // (which the template must not set).
    let mut template = Out::default();
    otlp_exporter(&mut template, &lb.protocol, false);
    for line in template.text.lines().skip(1) {
        let _ = writeln!(out.text, "    {line}");
    }
    out.line(2, "resolver:");
    match &lb.resolver {
        ResolverConfig::Static { hostnames } => {
            out.line(3, "static:");
            out.strings(4, "hostnames", hostnames);
        }
        ResolverConfig::Dns(dns) => {
            out.line(3, "dns:");
            out.string(4, "hostname", &dns.hostname);
            out.plain(4, "port", dns.port);
            out.plain(4, "interval", duration::format(dns.interval));
            out.plain(4, "timeout", duration::format(dns.timeout));
            if let Some(server) = &dns.nameserver {
                out.string(4, "nameserver", server);
            }
        }
    }
}

fn remote_write_exporter(out: &mut Out, rw: &RemoteWriteConfig) {
    out.string(2, "endpoint", &rw.endpoint);
    string_map(out, "headers", &rw.headers);
    out.plain(2, "timeout", duration::format(rw.timeout));
    render_tls(out, &rw.tls);
    out.string(2, "namespace", &rw.namespace);
    string_map(out, "external_labels", &rw.external_labels);
    out.line(2, "resource_to_telemetry_conversion:");
    out.plain(3, "enabled", rw.resource_to_telemetry_conversion);
    out.line(2, "target_info:");
    out.plain(3, "enabled", rw.target_info);
    out.plain(2, "add_metric_suffixes", rw.add_metric_suffixes);
    out.plain(2, "send_metadata", rw.send_metadata);
    out.plain(2, "max_batch_size_bytes", rw.max_batch_size_bytes);
    let queue = &rw.remote_write_queue;
    out.line(2, "remote_write_queue:");
    out.plain(3, "enabled", queue.enabled);
    out.plain(3, "queue_size", queue.queue_size);
    out.plain(3, "num_consumers", queue.num_consumers);
    render_retry(out, &rw.retry_on_failure);
    let message = match rw.protobuf_message {
        RemoteWriteMessage::V1 => super::remote_write::MESSAGE_V1,
        RemoteWriteMessage::V2 => super::remote_write::MESSAGE_V2,
    };
    out.string(2, "protobuf_message", message);
    out.plain(2, "compression", "snappy");
}

/// A YAML writer for the few shapes the configuration has.
#[derive(Default)]
struct Out {
    text: String,
}

impl Out {
    fn line(&mut self, depth: usize, text: &str) {
        let _ = writeln!(self.text, "{:width$}{text}", "", width = depth * 2);
    }

    /// A user-chosen key (a component or pipeline id) opening a mapping.
    fn key(&mut self, depth: usize, key: &str) {
        self.line(depth, &format!("{}:", quote_key(key)));
    }

    /// A value that YAML reads back as written: a number, a boolean, a word.
    fn plain(&mut self, depth: usize, key: &str, value: impl std::fmt::Display) {
        self.line(depth, &format!("{key}: {value}"));
    }

    /// An optional limit, written 0 for none (the Collector's convention).
    fn limit(&mut self, depth: usize, key: &str, limit: Option<NonZeroUsize>) {
        self.plain(depth, key, limit.map_or(0, NonZeroUsize::get));
    }

    fn string(&mut self, depth: usize, key: &str, value: &str) {
        self.line(depth, &format!("{key}: {}", quote_value(value)));
    }

    fn string_with_key(&mut self, depth: usize, key: &str, value: &str) {
        self.line(
            depth,
            &format!("{}: {}", quote_key(key), quote_value(value)),
        );
    }

    fn strings(&mut self, depth: usize, key: &str, values: &[String]) {
        let items: Vec<String> = values.iter().map(|value| quote_value(value)).collect();
        self.line(depth, &format!("{key}: [{}]", items.join(", ")));
    }

    fn ids(&mut self, depth: usize, key: &str, ids: &[ComponentId]) {
        let items: Vec<String> = ids.iter().map(|id| quote_key(&id.written)).collect();
        self.line(depth, &format!("{key}: [{}]", items.join(", ")));
    }
}

/// A key or id: plain when YAML reads it back as the same string, else double-quoted
/// (JSON quoting is valid YAML). Keys are never expanded, so `$` needs no escape.
fn quote_key(text: &str) -> String {
    let mut chars = text.chars();
    let plain = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
        && !matches!(
            text.to_ascii_lowercase().as_str(),
            "true" | "false" | "null" | "yes" | "no" | "on" | "off" | "y" | "n"
        );
    if plain { text.to_owned() } else { quoted(text) }
}

fn quoted(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

/// A string value: quoted, and `$` escaped as `$$` so it is not expanded when read back.
fn quote_value(text: &str) -> String {
    quoted(&text.replace('$', "$$"))
}
