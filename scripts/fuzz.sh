#!/usr/bin/env bash
# Coverage-guided fuzzing on the stable toolchain: libFuzzer (the libfuzzer-sys crate builds
# it with the C++ compiler) driven by rustc's SanitizerCoverage passes. See docs/fuzzing.md.
#
#   scripts/fuzz.sh                    # every target, 600 s each, one after another
#   scripts/fuzz.sh otlp_traces 60     # one target for 60 s
#   scripts/fuzz.sh --list             # the targets
#   scripts/fuzz.sh --build            # build the targets only
#   scripts/fuzz.sh --minimize config  # re-minimize the corpus of the targets named
#
# Each run fuzzes a scratch copy of fuzz/corpus/<target> (under fuzz/work/), then merges
# what it found back into fuzz/corpus/<target> minimized (libFuzzer -set_cover_merge=1):
# the seeds, plus a small set of inputs reaching every edge the others reach. A failing
# input is written to fuzz/artifacts/<target>/ (the run goes on) and the script exits
# non-zero; turn it into a regression input under fuzz/regressions/<target>/ once fixed
# (the test command replays both directories:
# tests/fuzz_corpora.rs). The log of each run is fuzz/work/<target>.log; its last lines
# hold the figures (executions, exec/s, cov, ft, corpus) docs/fuzzing.md records.
#
# Environment: CARGO_TARGET_DIR (default fuzz/target), FUZZ_ARGS (extra libFuzzer flags). Needs a C++ compiler (g++ or clang++).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FUZZ="$ROOT/fuzz"
TARGETS=(otlp_traces otlp_metrics otlp_json http_decompress config remote_write segment)
TRIPLE="$(rustc -vV | sed -n 's/^host: //p')"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$FUZZ/target}"
# Stable rustc's sancov module pass with libFuzzer's instrumentation: inline 8-bit edge
# counters, the PC table, comparison tracing (for CMP-guided mutations) and stack depth.
# `--cfg fuzzing` is what cargo-fuzz sets. No sanitizer: -Zsanitizer needs nightly.
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares \
-Cllvm-args=-sanitizer-coverage-stack-depth"

build() {
  # --target keeps RUSTFLAGS off build scripts and proc macros (which must not be
  # instrumented); the release profile of fuzz/Cargo.toml keeps debug assertions and
  # overflow checks on.
  cargo build --manifest-path "$FUZZ/Cargo.toml" --release --locked --target "$TRIPLE" --bins
}

# Replaces fuzz/corpus/<target> by its seeds plus a greedy set cover of the edges that it
# and the extra directories given reach (edges, not hit counts: -use_counters=0 keeps the
# corpus to a few hundred files).
minimize() {
  local target="$1"; shift
  local bin="$CARGO_TARGET_DIR/$TRIPLE/release/$target" corpus="$FUZZ/corpus/$target"
  local merged="$FUZZ/work/$target.merged"
  rm -rf "$merged" && mkdir -p "$merged"
  cp "$corpus"/seed-* "$merged"/ 2>/dev/null || true
  if "$bin" -set_cover_merge=1 -use_counters=0 "$merged" "$corpus" "$@" \
      >"$FUZZ/work/$target.merge.log" 2>&1; then
    rm -rf "$corpus" && mv "$merged" "$corpus"
  else
    echo "== $target: merge failed (see $FUZZ/work/$target.merge.log); corpus unchanged" >&2
    return 1
  fi
}

run() {
  local target="$1" seconds="$2"
  local bin="$CARGO_TARGET_DIR/$TRIPLE/release/$target"
  local corpus="$FUZZ/corpus/$target" work="$FUZZ/work/$target"
  local artifacts="$FUZZ/artifacts/$target/" log="$FUZZ/work/$target.log"
  # Failing inputs of an earlier run are cleared: keep them under fuzz/regressions/.
  rm -rf "$work" "$artifacts" && mkdir -p "$work" "$artifacts" "$corpus"
  cp -r "$corpus"/. "$work"/
  echo "== $target: ${seconds}s, log $log"
  local status=0
  # -fork=1: one worker process at a time (one core), restarted after a failing input so a
  # time-boxed run goes on; every failing input is still written to $artifacts.
  # shellcheck disable=SC2086
  "$bin" "$work" -max_total_time="$seconds" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 \
    -ignore_ooms=1 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$artifacts" \
    ${FUZZ_ARGS:-} >"$log" 2>&1 || status=$?
  grep -E '^#[0-9]+: cov:' "$log" | tail -n 1
  tail -n 3 "$log"
  local failures
  failures="$(find "$artifacts" -type f | wc -l)"
  if [[ $status -ne 0 || $failures -ne 0 ]]; then
    echo "== $target FAILED (exit $status, $failures failing inputs in $artifacts)" >&2
    status=1
  fi
  minimize "$target" "$work" || status=1
  echo "== $target: corpus $(find "$corpus" -type f | wc -l) files, $(du -sk "$corpus" | cut -f1) KiB"
  return "$status"
}

case "${1:-}" in
  --list) printf '%s\n' "${TARGETS[@]}"; exit 0 ;;
  --build) build; exit 0 ;;
  --minimize)
    build
    mkdir -p "$FUZZ/work"
    for t in "${@:2}"; do minimize "$t"; done
    exit 0 ;;
esac

target="${1:-all}"
seconds="${2:-600}"
build
if [[ "$target" == all ]]; then
  failed=0
  for t in "${TARGETS[@]}"; do run "$t" "$seconds" || failed=1; done
  exit "$failed"
else
  [[ " ${TARGETS[*]} " == *" $target "* ]] || { echo "unknown target $target (see --list)" >&2; exit 2; }
  run "$target" "$seconds"
fi
