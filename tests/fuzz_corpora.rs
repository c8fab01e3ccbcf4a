//! Replays the fuzz corpora and regression inputs (`fuzz/corpus/<target>/`,
//! `fuzz/regressions/<target>/`) through the checks the fuzz targets make
//! (`support::fuzz_checks`), so that the test command keeps every property the fuzzer
//! established, without fuzzing. See docs/fuzzing.md.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use tailgate::error::PipelineError;
use tailgate::receiver::otlp_http::decompress_body;

use crate::support::fuzz_checks::{self, Check, TARGETS};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The files of `dir`, sorted; none when it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.expect("readable corpus directory").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

/// Runs `check` on every file of `dir`; returns how many ran and the failures, each
/// `file: panic message`.
fn replay(dir: &Path, check: Check) -> (usize, Vec<String>) {
    let mut failures = Vec::new();
    let files = files(dir);
    for path in &files {
        let data = std::fs::read(path).expect("readable corpus file");
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| check(&data))) {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            failures.push(format!("{}: {message}", path.display()));
        }
    }
    (files.len(), failures)
}

/// Scenario: every file of every fuzz target's corpus is run through the target's checks.
/// Guarantees: every target has a corpus of at least its seeds, and every file passes
/// (the wire readers agree with prost, the JSON transcoder with the reference mapping,
/// decompression with the reference decoders and the limit, config render round trips,
/// remote-write series are well formed, segment recovery finds exactly the valid records).
#[test]
fn corpora_pass_the_fuzz_checks() {
    let mut failures = Vec::new();
    for &(target, check) in TARGETS {
        let (ran, failed) = replay(&fuzz_dir().join("corpus").join(target), check);
        assert!(ran >= 3, "fuzz/corpus/{target} holds {ran} files; seed it");
        failures.extend(failed);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Scenario: every input that once made a fuzz target fail (kept under
/// `fuzz/regressions/<target>/`) is run through the target's checks.
/// Guarantees: each passes now, and each file belongs to a known target.
#[test]
fn regression_inputs_pass_the_fuzz_checks() {
    let root = fuzz_dir().join("regressions");
    let stray = files(&root);
    assert!(
        stray.is_empty(),
        "files outside a target's directory: {stray:?}"
    );
    let mut failures = Vec::new();
    for &(target, check) in TARGETS {
        failures.extend(replay(&root.join(target), check).1);
    }
    if let Ok(entries) = std::fs::read_dir(&root) {
        for entry in entries {
            let name = entry.expect("readable directory").file_name();
            let name = name.to_string_lossy();
            assert!(
                TARGETS.iter().any(|(target, _)| *target == name),
                "fuzz/regressions/{name} is not a fuzz target"
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Scenario: a damaged segment file (a record cut short after a whole one), and the same
/// bytes compressed with every encoding, go through the checks directly.
/// Guarantees: the checks themselves can fail: a record the scan must find is found, and
/// a body over the limit is refused as too large.
#[test]
fn checks_hold_on_hand_made_inputs() {
    let mut file = fuzz_checks::SEGMENT_MAGIC.to_vec();
    file.extend_from_slice(&fuzz_checks::encode_record(b"payload", 3));
    let whole = file.len();
    file.extend_from_slice(&fuzz_checks::encode_record(b"cut short", 1)[..20]);
    let (records, damaged) = tailgate::exporter::scan_segment(&file);
    assert_eq!(records, vec![(8, 7, 3)]);
    assert_eq!(damaged.len(), 1);
    assert_eq!(damaged[0].0, whole as u64);
    fuzz_checks::check_segment(&file);

    // Limit 97 bytes, 300 bytes of body: every encoding must refuse it as too large.
    let mut input = vec![1, 0];
    input.extend(std::iter::repeat_n(b'a', 300));
    fuzz_checks::check_http_decompress(&input);
    for encoding in fuzz_checks::ENCODINGS {
        let body = bytes::Bytes::from(fuzz_checks::compress(encoding, &[b'a'; 300]));
        let got = decompress_body(encoding, body.clone(), 97, 1);
        assert!(
            matches!(got, Err(PipelineError::TooLarge { limit: 97 })),
            "{encoding}: {got:?}"
        );
        let got = decompress_body(encoding, body, 300, 1).expect("at the limit");
        assert_eq!(got.len(), 300, "{encoding}");
    }
}
