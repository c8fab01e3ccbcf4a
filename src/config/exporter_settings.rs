//! The settings the OTLP exporters share with the exporters built from their template
//! (`loadbalancing`'s `protocol.otlp`): the exporterhelper keys (`sending_queue`,
//! `retry_on_failure`), `compression`, and the list of keys after `endpoint`.

use super::common::retry_with;
use super::defaults;
use super::error::Problems;
use super::fields::{Fields, NOT_YET};
use super::ids::{self, Section};
use super::{ComponentId, Compression, QueueConfig, RetryConfig};

/// The keys both OTLP exporters have after `endpoint` (and, in `otlphttp`, the per-signal
/// endpoints).
pub(crate) const OTLP_KEYS: [&str; 6] = [
    "tls",
    "headers",
    "compression",
    "timeout",
    "sending_queue",
    "retry_on_failure",
];

/// `compression`: `gzip`, `zstd`, or `none`/empty.
pub(crate) fn compression(problems: &mut Problems, exporter: &Fields<'_>) -> Compression {
    let Some(text) = exporter.string(problems, "compression") else {
        return defaults::EXPORTER_COMPRESSION;
    };
    match text.to_ascii_lowercase().as_str() {
        "gzip" => Compression::Gzip,
        "zstd" => Compression::Zstd,
        "" | "none" => Compression::None,
        _ => {
            problems.add(
                exporter.key_path("compression"),
                format!("unsupported compression {text:?} (supported: gzip, zstd, none)"),
            );
            defaults::EXPORTER_COMPRESSION
        }
    }
}

/// `sending_queue`.
pub(crate) fn sending_queue(problems: &mut Problems, exporter: &Fields<'_>) -> QueueConfig {
    let queue = exporter.child(
        problems,
        "sending_queue",
        &["enabled", "queue_size", "num_consumers", "storage"],
        &[
            ("sizer", NOT_YET),
            ("block_on_overflow", NOT_YET),
            ("wait_for_result", NOT_YET),
            ("batch", NOT_YET),
        ],
    );
    QueueConfig {
        enabled: queue
            .boolean(problems, "enabled")
            .unwrap_or(defaults::QUEUE_ENABLED),
        queue_size: queue.at_least_one(problems, "queue_size", defaults::QUEUE_SIZE),
        num_consumers: queue.at_least_one(problems, "num_consumers", defaults::QUEUE_NUM_CONSUMERS),
        storage: queue_storage(problems, &queue),
    }
}

/// `sending_queue.storage`: an extension id. That it names a `file_storage` extension
/// listed in `service.extensions` is checked with the whole config (`graph::validate`).
fn queue_storage(problems: &mut Problems, queue: &Fields<'_>) -> Option<ComponentId> {
    let written = queue.string(problems, "storage")?;
    if written.is_empty() {
        return None;
    }
    match ids::component_id(Section::Extensions, &written) {
        Ok(id) => Some(id),
        Err(message) => {
            problems.add(queue.key_path("storage"), message);
            None
        }
    }
}

/// `retry_on_failure` of the OTLP exporters.
pub(crate) fn retry(problems: &mut Problems, exporter: &Fields<'_>) -> RetryConfig {
    retry_with(problems, exporter, &defaults::EXPORTER_RETRY)
}
