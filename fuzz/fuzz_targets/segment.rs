//! Fuzz target `segment`: runs every input through `check_segment` (tests/support/fuzz_checks.rs,
//! shared with the corpus replay in tests/fuzz_corpora.rs).

#![no_main]

#[path = "../../tests/support/fuzz_checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check_segment(data));
