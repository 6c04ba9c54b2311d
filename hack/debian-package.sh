#!/usr/bin/env bash
# Usage: hack/debian-package.sh COMMAND PACKAGE
# Installs Debian's PACKAGE with apt unless COMMAND is already on the PATH.
# The tests need prometheus (and its promtool) and chromium.
set -euo pipefail
cmd=$1 pkg=$2
if command -v "$cmd" >/dev/null; then
	echo "$cmd is present: $("$cmd" --version 2>/dev/null | head -1)"
	exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
if ! $sudo apt-get install -y --no-install-recommends "$pkg"; then
	$sudo apt-get update
	$sudo apt-get install -y --no-install-recommends "$pkg"
fi
# A package that enables a system service (prometheus does): the tests
# start their own servers.
if command -v systemctl >/dev/null && systemctl is-active --quiet "$pkg" 2>/dev/null; then
	$sudo systemctl disable --now "$pkg" || true
fi
command -v "$cmd" >/dev/null
