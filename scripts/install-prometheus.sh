#!/usr/bin/env bash
# Installs the Prometheus server (Debian package `prometheus`) for the remote-write
# integration tests (tests/remote_write.rs), unless `prometheus` is already on PATH.
#
#   scripts/install-prometheus.sh
#
# Runs as root on Debian (CI and developer machines). Idempotent. The package's postinst
# would start a Prometheus service; a policy-rc.d that denies service starts prevents that
# (only when this script created it does it remove it again), so no server is left running.
set -euo pipefail

if command -v prometheus >/dev/null 2>&1; then
  prometheus --version 2>&1 | head -n 1
  exit 0
fi

echo "installing prometheus (Debian package prometheus)"
own_policy=0
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod 0755 /usr/sbin/policy-rc.d
  own_policy=1
fi
rc=0
{
  apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
} || rc=$?
((own_policy)) && rm -f /usr/sbin/policy-rc.d
if ((rc != 0)); then
  echo "install-prometheus: apt-get failed (exit $rc)" >&2
  exit "$rc"
fi
prometheus --version 2>&1 | head -n 1
