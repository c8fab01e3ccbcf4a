#!/usr/bin/env bash
# Installs the DNS server dnsmasq (Debian package `dnsmasq-base`, the binary without the
# system service) for the loadbalancing exporter's DNS resolver tests
# (tests/loadbalancing_dns.rs), unless `dnsmasq` is already on PATH.
#
#   scripts/install-dnsmasq.sh
#
# Runs as root on Debian (CI and developer machines). Idempotent. Should a package's postinst
# try to start a service, a policy-rc.d that denies service starts prevents that (only when
# this script created it does it remove it again), so no server is left running.
set -euo pipefail

if command -v dnsmasq >/dev/null 2>&1 || [[ -x /usr/sbin/dnsmasq ]]; then
  PATH="$PATH:/usr/sbin" dnsmasq --version 2>&1 | head -n 1
  exit 0
fi

echo "installing dnsmasq (Debian package dnsmasq-base)"
own_policy=0
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod 0755 /usr/sbin/policy-rc.d
  own_policy=1
fi
rc=0
{
  apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends dnsmasq-base >/dev/null
} || rc=$?
((own_policy)) && rm -f /usr/sbin/policy-rc.d
if ((rc != 0)); then
  echo "install-dnsmasq: apt-get failed (exit $rc)" >&2
  exit "$rc"
fi
PATH="$PATH:/usr/sbin" dnsmasq --version 2>&1 | head -n 1
