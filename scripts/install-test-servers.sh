#!/usr/bin/env bash
# Installs the real servers the integration tests run, from Debian's packages, each only
# when it is missing:
#   - the Prometheus server (package `prometheus`), receiving remote_write
#     (tests/remote_write.rs, tests/prometheus_e2e.rs, ...);
#   - dnsmasq (package `dnsmasq-base`: the binary without the system service), the DNS
#     server of the loadbalancing exporter's resolver tests (tests/loadbalancing_dns.rs).
#   - Apache's `htpasswd` (package `apache2-utils`), which writes the htpasswd files of the
#     basicauth tests (tests/receiver_auth.rs);
#   - the `openssl` command (package `openssl`), which makes the certificates of the fake
#     Kubernetes API server (tests/support/k8s_events_server.py) and of the deploy checks'
#     TLS variant.
#
#   scripts/install-test-servers.sh
#
# Runs as root on Debian (CI and developer machines). Idempotent. A package's postinst may
# start a service; a policy-rc.d that denies service starts prevents that (only when this
# script created it does it remove it again), so no server is left running.
set -euo pipefail
export PATH="$PATH:/usr/sbin"

# package:command pairs
wanted=(prometheus:prometheus dnsmasq-base:dnsmasq apache2-utils:htpasswd openssl:openssl)
missing=()
for pair in "${wanted[@]}"; do
  command -v "${pair#*:}" >/dev/null 2>&1 || missing+=("${pair%%:*}")
done

if ((${#missing[@]})); then
  echo "installing ${missing[*]} (Debian packages)"
  own_policy=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 0755 /usr/sbin/policy-rc.d
    own_policy=1
  fi
  rc=0
  {
    apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  } || rc=$?
  ((own_policy)) && rm -f /usr/sbin/policy-rc.d
  if ((rc != 0)); then
    echo "install-test-servers: apt-get failed (exit $rc)" >&2
    exit "$rc"
  fi
fi
prometheus --version 2>&1 | head -n 1
dnsmasq --version 2>&1 | head -n 1
command -v htpasswd
openssl version
