//! The effective configuration as Collector-style YAML, every default written out.

use std::fmt::Write as _;

use super::duration;
use super::{
    ComponentId, Compression, Config, ExporterConfig, ExtensionConfig, LogEncoding, LogLevel,
    OtlpExporterConfig, ProcessorConfig, ReceiverConfig, Verbosity,
};

const MIB: usize = 1024 * 1024;

/// Renders `config` as YAML that [`super::load_str`] reads back to an equal `Config`.
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
                }
                if let Some(http) = &otlp.http {
                    out.line(3, "http:");
                    out.string(4, "endpoint", &http.endpoint);
                    out.string(4, "traces_url_path", &http.traces_url_path);
                    out.string(4, "metrics_url_path", &http.metrics_url_path);
                    out.string(4, "logs_url_path", &http.logs_url_path);
                    out.plain(4, "max_request_body_size", http.max_request_body_size);
                    if let Some(cors) = &http.cors {
                        out.line(4, "cors:");
                        out.strings(5, "allowed_origins", &cors.allowed_origins);
                        out.strings(5, "allowed_headers", &cors.allowed_headers);
                        if let Some(max_age) = cors.max_age {
                            out.plain(5, "max_age", max_age);
                        }
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
                out.plain(
                    2,
                    "send_batch_max_size",
                    batch.send_batch_max_size.map_or(0, |max| max.get()),
                );
                out.plain(2, "send_batch_max_size_bytes", batch.send_batch_max_bytes);
                out.plain(2, "timeout", duration::format(batch.timeout));
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
                let verbosity = match debug.verbosity {
                    Verbosity::Basic => "basic",
                    Verbosity::Normal => "normal",
                    Verbosity::Detailed => "detailed",
                };
                out.plain(2, "verbosity", verbosity);
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
    let level = match telemetry.log_level {
        LogLevel::Debug => "debug",
        LogLevel::Info => "info",
        LogLevel::Warn => "warn",
        LogLevel::Error => "error",
    };
    out.plain(3, "level", level);
    let encoding = match telemetry.log_encoding {
        LogEncoding::Console => "console",
        LogEncoding::Json => "json",
    };
    out.plain(3, "encoding", encoding);
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

fn otlp_exporter(out: &mut Out, otlp: &OtlpExporterConfig, http: bool) {
    out.string(2, "endpoint", &otlp.endpoint);
    if http && let Some(traces) = &otlp.traces_endpoint {
        out.string(2, "traces_endpoint", traces);
    }
    let tls = &otlp.tls;
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
    if otlp.headers.is_empty() {
        out.line(2, "headers: {}");
    } else {
        out.line(2, "headers:");
        for (name, value) in &otlp.headers {
            out.string_with_key(3, name, value);
        }
    }
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
    let retry = &otlp.retry_on_failure;
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
