//! Fuzz target `otlp_traces`: runs every input through `check_otlp_traces` (tests/support/fuzz_checks.rs,
//! shared with the corpus replay in tests/fuzz_corpora.rs).

#![no_main]

#[path = "../../tests/support/fuzz_checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check_otlp_traces(data));
