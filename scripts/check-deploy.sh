#!/usr/bin/env bash
# Checks the Kubernetes side of tailgate: deploy/, the Dockerfile and the runbook links.
#
#   scripts/check-deploy.sh                         # everything except `tailgate validate`
#   TAILGATE_BIN=target/release/tailgate scripts/check-deploy.sh   # ... and validate configs
#
# Runs as root on a fresh Debian machine (CI) and installs what is missing: promtool (Debian's
# `prometheus` package) and a Python venv in target/deploy-venv with pinned kubernetes-validate,
# checkov, jsonschema and pyyaml. Needs kubectl (for `kubectl kustomize`) and python3.
# Idempotent: re-running reuses the installs and rewrites target/deploy-check/.
# Prints a PASS/FAIL/SKIP line per check and exits non-zero if any check failed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

VENV="$ROOT/target/deploy-venv"
WORK="$ROOT/target/deploy-check"
# Pinned tools. kubernetes-validate 1.37.0 ships schemas for Kubernetes 1.25-1.37; the
# manifests are validated against the oldest version we support and a current one.
PY_REQUIREMENTS=(
  "kubernetes-validate==1.37.0"
  "checkov==3.3.30"
  "jsonschema==4.26.0"
  "pyyaml==6.0.3"
)
KUBE_VERSIONS=(1.30.0 1.33.0)
# Kinds that kubernetes-validate has no schema for; deploy/monitoring/schemas/ covers them.
CRD_KINDS="ServiceMonitor PrometheusRule Certificate"

declare -a RESULTS=()
PASSED=0 FAILED=0 SKIPPED=0

log() { printf '\n==> %s\n' "$*"; }

# check NAME CMD...: run a check, record PASS/FAIL, never abort the script.
check() {
  local name="$1"; shift
  log "$name"
  if "$@"; then
    RESULTS+=("PASS  $name"); PASSED=$((PASSED + 1))
  else
    RESULTS+=("FAIL  $name"); FAILED=$((FAILED + 1))
  fi
}

skip() {
  log "$1"
  echo "skipped: $2"
  RESULTS+=("SKIP  $1 ($2)"); SKIPPED=$((SKIPPED + 1))
}

summary() {
  printf '\n==> summary\n'
  printf '  %s\n' "${RESULTS[@]}"
  echo "check-deploy: ${PASSED} passed, ${FAILED} failed, ${SKIPPED} skipped"
  if ((FAILED > 0)); then echo "check-deploy: FAIL"; else echo "check-deploy: PASS"; fi
}

# === installs ===

APT_UPDATED=0
apt_install() {
  if ((APT_UPDATED == 0)); then
    apt-get update -qq
    APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

install_promtool() {
  command -v promtool >/dev/null 2>&1 && return 0
  echo "installing promtool (Debian package prometheus)"
  # The package would start a Prometheus server on install; policy-rc.d stops that (only
  # when we created it, we remove it again).
  local own_policy=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 0755 /usr/sbin/policy-rc.d
    own_policy=1
  fi
  local rc=0
  apt_install prometheus || rc=$?
  ((own_policy)) && rm -f /usr/sbin/policy-rc.d
  return "$rc"
}

install_venv() {
  local stamp="$VENV/.requirements" wanted
  wanted="$(printf '%s\n' "${PY_REQUIREMENTS[@]}")"
  if [[ -x "$VENV/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$wanted" ]]; then
    return 0
  fi
  if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
    echo "installing python3-venv"
    apt_install python3-venv
  fi
  echo "creating $VENV with: ${PY_REQUIREMENTS[*]}"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "${PY_REQUIREMENTS[@]}"
  printf '%s\n' "$wanted" >"$stamp"
}

log "tools"
if ! command -v kubectl >/dev/null 2>&1; then
  echo "kubectl is required (for kubectl kustomize) and was not found" >&2
  exit 2
fi
command -v python3 >/dev/null 2>&1 || apt_install python3
install_promtool
install_venv
PY="$VENV/bin/python"
DEPLOYCHECK=("$PY" "$ROOT/deploy/tools/deploycheck.py")
echo "kubectl: $(kubectl version --client 2>/dev/null | head -2 | tr '\n' ' ')"
echo "promtool: $(promtool --version 2>&1 | head -1)"
echo "python: $("$PY" --version); checkov $("$VENV/bin/checkov" --version)"

rm -rf "$WORK"
mkdir -p "$WORK/rendered" "$WORK/promtool" "$WORK/configs"

# === render ===

# name -> kustomization directory. homelab-minimal, homelab-bearer-token and homelab-tls
# are homelab with the minimal-pipeline, bearer-token or tls component (a cert-manager
# Certificate, receivers on TLS), rendered from throwaway kustomizations under target/.
for component in minimal-pipeline bearer-token tls; do
  variant="homelab-${component%-pipeline}"
  mkdir -p "$WORK/variants/$variant"
  cat >"$WORK/variants/$variant/kustomization.yaml" <<KUST
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../../../../deploy/overlays/homelab
components:
  - ../../../../deploy/components/$component
KUST
done
declare -A TARGETS=(
  [base]=deploy/base
  [monitoring]=deploy/monitoring
  [homelab]=deploy/overlays/homelab
  [production]=deploy/overlays/production
  [homelab-minimal]="$WORK/variants/homelab-minimal"
  [homelab-bearer-token]="$WORK/variants/homelab-bearer-token"
  [homelab-tls]="$WORK/variants/homelab-tls"
)
RENDER_ORDER=(base monitoring homelab production homelab-minimal homelab-bearer-token homelab-tls)
for overlay in deploy/overlays/*/; do
  name="$(basename "$overlay")"
  [[ -n "${TARGETS[$name]:-}" ]] || { TARGETS[$name]="${overlay%/}"; RENDER_ORDER+=("$name"); }
done

render_all() {
  local name ok=0
  for name in "${RENDER_ORDER[@]}"; do
    if kubectl kustomize "${TARGETS[$name]}" >"$WORK/rendered/$name.yaml"; then
      echo "rendered $name: $(grep -c '^kind:' "$WORK/rendered/$name.yaml") objects"
    else
      echo "kustomize failed for ${TARGETS[$name]}"
      ok=1
    fi
  done
  return "$ok"
}
check "kubectl kustomize (base, monitoring, every overlay, homelab+minimal-pipeline, homelab+bearer-token, homelab+tls)" render_all

# === schemas ===

validate_schemas() {
  local ok=0 version file out kind
  for version in "${KUBE_VERSIONS[@]}"; do
    for file in "$WORK"/rendered/*.yaml; do
      if ! out="$("$VENV/bin/kubernetes-validate" --strict --quiet -k "$version" "$file" 2>&1)"; then
        echo "$out"
        echo "FAIL: $file against Kubernetes $version"
        ok=1
        continue
      fi
      # A kind with no schema is only a warning for kubernetes-validate: allow it only for
      # the CRDs that deploycheck.py validates below.
      while IFS= read -r kind; do
        [[ -z "$kind" ]] && continue
        if [[ " $CRD_KINDS " != *" $kind "* ]]; then
          echo "FAIL: $file: no schema for kind $kind (Kubernetes $version)"
          ok=1
        fi
      done < <(sed -n "s/.*Couldn't find schema for kind \([A-Za-z]*\) .*/\1/p" <<<"$out" | sort -u)
      echo "ok: $(basename "$file") against Kubernetes $version (strict)"
    done
  done
  "${DEPLOYCHECK[@]}" crds "$WORK"/rendered/*.yaml || ok=1
  return "$ok"
}
check "schema validation (kubernetes-validate --strict ${KUBE_VERSIONS[*]}; CRDs by deploy/monitoring/schemas)" validate_schemas

check "deployment invariants (grace period, probes, env, several replicas only in one tier)" \
  "${DEPLOYCHECK[@]}" invariants "$WORK"/rendered/base.yaml "$WORK"/rendered/homelab.yaml \
  "$WORK"/rendered/production.yaml "$WORK"/rendered/homelab-minimal.yaml "$WORK"/rendered/homelab-ha.yaml \
  "$WORK"/rendered/homelab-tls.yaml "$WORK"/rendered/homelab-bearer-token.yaml

# === alert rules ===

prepare_rules() {
  "${DEPLOYCHECK[@]}" extract-rules deploy/monitoring/prometheusrule.yaml "$WORK/promtool/tailgate.rules.yaml" &&
    cp deploy/monitoring/tests/*.yaml "$WORK/promtool/"
}
promtool_check() { prepare_rules && promtool check rules "$WORK/promtool/tailgate.rules.yaml"; }
promtool_test() { (cd "$WORK/promtool" && promtool test rules ./*.test.yaml); }
check "promtool check rules" promtool_check
check "promtool test rules (deploy/monitoring/tests)" promtool_test
check "alert conventions (severity, summary, description, runbook anchors, tests, metric names)" \
  "${DEPLOYCHECK[@]}" rules

# === dashboard ===

check "dashboard (valid JSON, \${datasource}, metric names from deploy/monitoring/metrics.txt)" \
  "${DEPLOYCHECK[@]}" dashboard

# === security scan ===

checkov_manifests() {
  mkdir -p "$WORK/checkov"
  cp "$WORK"/rendered/*.yaml "$WORK/checkov/"
  "$VENV/bin/checkov" -d "$WORK/checkov" --framework kubernetes --skip-download --compact --quiet
}
checkov_dockerfile() {
  "$VENV/bin/checkov" -f Dockerfile --framework dockerfile --skip-download --compact --quiet
}
check "checkov: rendered manifests (0 failed; skips are annotated with reasons)" checkov_manifests
check "checkov: Dockerfile" checkov_dockerfile

# === Dockerfile essentials checkov does not know ===

dockerfile_static() {
  local ok=0 pattern
  for pattern in \
    '^FROM rust:\$\{RUST_VERSION\}-bookworm AS build' \
    '^ARG RUST_VERSION=1\.95$' \
    'cargo build --release --locked' \
    '^ARG TARGETARCH' \
    '^FROM gcr\.io/distroless/cc-debian12:nonroot' \
    '^USER 65532:65532' \
    'org\.opencontainers\.image\.version="\$\{VERSION\}"'; do
    if grep -Eq "$pattern" Dockerfile; then echo "ok: $pattern"; else echo "missing: $pattern"; ok=1; fi
  done
  for pattern in 'target/' '.git/'; do
    if grep -qxF "$pattern" .dockerignore; then echo "ok: .dockerignore has $pattern"; else echo "missing in .dockerignore: $pattern"; ok=1; fi
  done
  return "$ok"
}
check "Dockerfile essentials (builder, --locked, distroless nonroot, TARGETARCH, OCI version label)" dockerfile_static

# === tailgate validate ===

if [[ -n "${TAILGATE_BIN:-}" ]]; then
  validate_configs() {
    local ok=0 name dir file
    if [[ ! -x "$TAILGATE_BIN" ]]; then
      echo "TAILGATE_BIN=$TAILGATE_BIN is not an executable"
      return 1
    fi
    for name in base homelab production; do
      dir="$WORK/configs/$name"
      "${DEPLOYCHECK[@]}" extract-configs "$WORK/rendered/$name.yaml" "$dir" >/dev/null || { ok=1; continue; }
      for file in "$dir"/*.yaml; do
        if "$TAILGATE_BIN" validate --config "$file"; then
          echo "ok: $name/$(basename "$file")"
        else
          echo "FAIL: $name/$(basename "$file")"
          ok=1
        fi
      done
    done
    # A config overlay is valid only merged over a pipeline config, as the Deployment runs it.
    dir="$WORK/configs/homelab-bearer-token"
    "${DEPLOYCHECK[@]}" extract-configs "$WORK/rendered/homelab-bearer-token.yaml" "$dir" >/dev/null || ok=1
    for file in config.yaml one-tier.yaml minimal.yaml; do
      if "$TAILGATE_BIN" validate --config "$dir/$file" --config "$dir/bearer-token.yaml"; then
        echo "ok: homelab-bearer-token/$file + bearer-token.yaml"
      else
        echo "FAIL: homelab-bearer-token/$file + bearer-token.yaml"
        ok=1
      fi
    done
    return "$ok"
  }
  check "tailgate validate (every config of every rendered ConfigMap; bearer-token.yaml merged over each)" validate_configs

  # The tls component's config loads its files from the Secret mounted at
  # /etc/tailgate-tls, which exists only in the cluster: validate config.yaml merged with
  # its tls.yaml, the paths pointed at a throwaway certificate made here.
  validate_tls_config() {
    local dir="$WORK/configs/homelab-tls" files="$WORK/tls-files"
    "${DEPLOYCHECK[@]}" extract-configs "$WORK/rendered/homelab-tls.yaml" "$dir" >/dev/null || return 1
    mkdir -p "$files"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
      -subj "/CN=tailgate.monitoring.svc" -keyout "$files/tls.key" -out "$files/tls.crt" \
      2>/dev/null || { echo "openssl could not make a test certificate"; return 1; }
    cp "$files/tls.crt" "$files/ca.crt"
    sed "s#/etc/tailgate-tls/#$files/#g" "$dir/tls.yaml" >"$dir/tls-local.yaml"
    "$TAILGATE_BIN" validate --config "$dir/config.yaml" --config "$dir/tls-local.yaml" &&
      echo "ok: homelab-tls/config.yaml + tls.yaml"
  }
  if command -v openssl >/dev/null 2>&1; then
    check "tailgate validate (homelab-tls: config.yaml + tls.yaml, throwaway certificate)" validate_tls_config
  else
    skip "tailgate validate (homelab-tls)" "openssl is not installed"
  fi
else
  skip "tailgate validate" "TAILGATE_BIN is not set"
fi

summary
((FAILED == 0))
