//! Integration tests: one binary, one module per capability, shared helpers in `support`.

mod bad_input;
mod cli;
mod export_retry;
mod remote_write;
mod sampling;
mod sdk_e2e;
mod shutdown;
mod support;
mod telemetry;
