#!/usr/bin/env bash
# Creates the Python virtualenv the integration tests run Python from: the OpenTelemetry
# Python SDK (tests/python_sdk.rs) and the fake Kubernetes API server that validates Events
# (tests/k8s_events.rs, tests/support/k8s_events_server.py): target/test-venv with pinned
# opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http and kubernetes-validate from PyPI.
#
#   scripts/install-test-python.sh
#
# Idempotent: skips when the venv already holds exactly these pins. Installs Debian's
# python3-venv first when `python3 -m venv` cannot work (runs as root on Debian, like
# scripts/install-test-servers.sh).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$ROOT/target/test-venv"
REQUIREMENTS=(
  "opentelemetry-sdk==1.45.2"
  "opentelemetry-exporter-otlp-proto-http==1.45.2"
  # tests/k8s_events.rs: the fake events.k8s.io API server validates what it receives
  # against the Kubernetes OpenAPI schemas (same pin as scripts/check-deploy.sh).
  "kubernetes-validate==1.37.0"
)

stamp="$VENV/.requirements"
wanted="$(printf '%s\n' "${REQUIREMENTS[@]}")"
if [[ -x "$VENV/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$wanted" ]]; then
  echo "test venv: $VENV ($("$VENV/bin/python" --version)) already has ${REQUIREMENTS[*]}"
  exit 0
fi

if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
  echo "installing python3-venv (Debian package)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi

echo "creating $VENV with: ${REQUIREMENTS[*]}"
rm -rf "$VENV"
mkdir -p "$ROOT/target"
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check "${REQUIREMENTS[@]}"
printf '%s\n' "$wanted" >"$stamp"
echo "test venv: $VENV ($("$VENV/bin/python" --version))"
