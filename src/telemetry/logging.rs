//! Logging setup from `service.telemetry.logs`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::{LogEncoding, LogLevel, TelemetryConfig};

/// Installs the global `tracing` subscriber: the configured level (overridden by
/// `RUST_LOG` when set, for debugging) and encoding, written to stderr.
///
/// Calling it twice keeps the first subscriber (tests start several gateways).
pub fn init_logging(config: &TelemetryConfig) {
    let level = match config.log_level {
        LogLevel::Debug => "debug",
        LogLevel::Info => "info",
        LogLevel::Warn => "warn",
        LogLevel::Error => "error",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal, never in container logs.
        .with_ansi(std::io::stderr().is_terminal());
    let _already_set = match config.log_encoding {
        LogEncoding::Console => builder.try_init(),
        LogEncoding::Json => builder.json().flatten_event(true).try_init(),
    };
}
