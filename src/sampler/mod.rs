//! The `tail_sampling` processor: policies that decide whole traces, and OpenTelemetry consistent-probability thresholds.
pub mod policy;
pub mod threshold;
