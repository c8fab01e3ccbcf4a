//! Integration tests: one binary, one module per capability, shared helpers in `support`.

mod accounting;
mod admission;
mod bad_input;
mod cli;
mod disk_queue;
mod export_retry;
mod fuzz_corpora;
mod http_encodings;
mod late_spans;
mod loadbalancing;
mod loadbalancing_dns;
mod metrics_e2e;
mod module_graph;
mod one_tier;
mod outage;
mod overload;
mod prometheus_e2e;
mod pushback;
mod remote_write;
mod rw_outage;
mod sampling;
mod sdk_e2e;
mod shutdown;
mod spanmetrics;
mod support;
mod telemetry;
