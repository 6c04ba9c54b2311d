#!/usr/bin/env bash
# Installs Prometheus and promtool from Debian's prometheus package, for the
# tests that run the dashboards' and rules' queries. Does nothing when both
# are already on the PATH.
set -euo pipefail
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
	echo "$(prometheus --version 2>&1 | head -1) is present"
	exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
if ! $sudo apt-get install -y --no-install-recommends prometheus; then
	$sudo apt-get update
	$sudo apt-get install -y --no-install-recommends prometheus
fi
# The package enables a system service; the tests start their own server.
if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
	$sudo systemctl disable --now prometheus || true
fi
prometheus --version 2>&1 | head -1
