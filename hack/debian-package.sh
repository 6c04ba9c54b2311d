#!/usr/bin/env bash
# Usage: hack/debian-package.sh COMMAND PACKAGE
# Installs Debian's PACKAGE with apt unless COMMAND is already on the PATH
# (or, when COMMAND is an absolute path, unless that file exists). The tests
# need prometheus (and its promtool), chromium and iproute2; the kind node
# image needs iptables, and libseccomp-dev with pkg-config to build runc.
set -euo pipefail
cmd=$1 pkg=$2
present() { case $cmd in /*) [ -e "$cmd" ] ;; *) command -v "$cmd" >/dev/null ;; esac; }
if present; then
	case $cmd in
	/*) echo "$cmd is present" ;;
	*) echo "$cmd is present: $({ "$cmd" --version 2>/dev/null || "$cmd" -V 2>/dev/null; } | head -1)" ;;
	esac
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
present
