#!/usr/bin/env bash
# Installs Prometheus (Debian's `prometheus` package, 2.42 on bookworm) when no `prometheus`
# is on PATH, and prints its version. The tests that read serving metrics through a real
# Prometheus (MODELPLANE_PROMETHEUS_URL) start it themselves as a child process with their
# own configuration: this script never starts the system service. Debian builds it
# without some service discoveries, `kubernetes_sd_configs` among them (its config parser
# refuses the field), so those tests hand it the pods through `file_sd_configs`.
#
# The package's postinst starts and enables prometheus.service (deb-systemd-invoke, or
# invoke-rc.d without systemd); both ask /usr/sbin/policy-rc.d first, so the install runs
# with a policy-rc.d that refuses every start (exit 101, as Debian's container images ship
# it), put in place only for the install when the machine has none. On a machine running
# systemd the unit the package enabled is disabled again, so it does not start at boot.
#
# apt-get runs as root, or through sudo otherwise; `apt-get update` runs only when the
# install fails on the package lists the machine has. When it cannot be installed (no
# apt-get, no Debian registry) it fails: the tests that need it never skip.
set -euo pipefail

if ! command -v prometheus >/dev/null; then
  if ! command -v apt-get >/dev/null; then
    echo "error: prometheus is not on PATH and there is no apt-get to install it" >&2
    exit 1
  fi
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    sudo=(sudo)
  fi
  policy=/usr/sbin/policy-rc.d
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\n# install-prometheus.sh: no service starts during its install.\nexit 101\n' |
      "${sudo[@]}" tee "$policy" >/dev/null
    "${sudo[@]}" chmod 755 "$policy"
    trap '"${sudo[@]}" rm -f "$policy"' EXIT
  fi
  install() {
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y --no-install-recommends prometheus >&2
  }
  if ! install; then
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update >&2
    if ! install; then
      echo "error: could not install prometheus (apt-get install prometheus failed)" >&2
      exit 1
    fi
  fi
  if [[ -d /run/systemd/system ]]; then
    "${sudo[@]}" systemctl disable --now prometheus.service >&2 || true
  fi
fi
version="$(prometheus --version 2>&1)"
echo "${version%%$'\n'*}"
