#!/usr/bin/env bash
# promtool, which tests/it/dashboard.rs runs on deploy/prometheus/ (`promtool
# check rules`, `promtool test rules`). Debian ships it in the `prometheus`
# package, whose server we do not want: this installs the package only when
# `promtool` is not found, and leaves no Prometheus server running.
#
# - A policy-rc.d that refuses every start is in place during the install
#   (kept as it is if the machine has one: a container image's usually refuses
#   already), so the package's postinst starts nothing, through invoke-rc.d or
#   deb-systemd-invoke alike. The server would listen on 9090.
# - --no-install-recommends leaves out prometheus-node-exporter (a server on
#   9100).
# - On a machine that runs systemd, the unit the postinst enabled is disabled
#   (and stopped, had anything started it), so no boot starts it either. A
#   machine without systemd needs nothing more: nothing starts it there.
#
# Run by .ci/run; idempotent. Needs root (or sudo) only to install.
set -euo pipefail

say() { printf '[promtool] %s\n' "$*"; }
if command -v promtool >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO=sudo; fi

policy=/usr/sbin/policy-rc.d
made_policy=""
if [ ! -e "$policy" ]; then
  $SUDO sh -c "printf '#!/bin/sh\n# .ci/promtool.sh: start no service while it installs prometheus\nexit 101\n' > $policy && chmod 755 $policy"
  made_policy=1
fi
remove_policy() { if [ -n "$made_policy" ]; then $SUDO rm -f "$policy"; fi; }
trap remove_policy EXIT

say "installing Debian's prometheus package for promtool (its server is not started)"
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null

if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  $SUDO systemctl disable --now prometheus.service >/dev/null 2>&1 || true
fi
command -v promtool >/dev/null 2>&1 || { say "the prometheus package installed no promtool"; exit 1; }
say "$(promtool --version 2>&1 | head -1)"
