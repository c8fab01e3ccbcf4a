#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, the deploy checks, then every
# test. Installs what the tests need when it is missing, so it runs on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --all-targets --locked -- -D warnings

echo "== test dependencies (Prometheus server for the remote-write tests, dnsmasq for the DNS resolver tests, htpasswd for the basicauth tests, openssl for test certificates)"
./scripts/install-test-servers.sh
./scripts/install-test-python.sh

echo "== deploy checks (kustomize, schemas, promtool, checkov, tailgate validate)"
cargo build --locked --bin tailgate
TAILGATE_BIN="$PWD/target/debug/tailgate" ./scripts/check-deploy.sh

echo "== benches, once each (criterion's test mode)"
cargo test --locked --bench otlp_wire --bench pipeline_paths --bench segment_recovery

echo "== cargo test"
# Two test threads: the machine has two cores and the integration tests run servers.
RUST_TEST_THREADS=2 cargo test --lib --bins --tests --locked
