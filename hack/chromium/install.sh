#!/usr/bin/env bash
# Installs Debian's chromium, which the status page test drives headless.
# Does nothing when it is already on the PATH.
set -euo pipefail
if command -v chromium >/dev/null; then
	echo "$(chromium --version 2>/dev/null) is present"
	exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
if ! $sudo apt-get install -y --no-install-recommends chromium; then
	$sudo apt-get update
	$sudo apt-get install -y --no-install-recommends chromium
fi
chromium --version 2>/dev/null
