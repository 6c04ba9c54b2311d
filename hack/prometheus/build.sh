#!/usr/bin/env bash
# Builds the Prometheus server of the module go.mod pins into ../../bin (or
# $1), with Kubernetes service discovery only. Debian's prometheus 2.42, which
# the other tests run, is built without Kubernetes service discovery (it
# refuses kubernetes_sd_configs), and the end-to-end test finds the exporter
# through it. Does nothing when bin/prometheus is that version.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=${1:-$here/../../bin}
mkdir -p "$bin"
cd "$here"
mod=$(go list -m -f '{{.Version}}' github.com/prometheus/prometheus)
# Module v0.3XX.Y is Prometheus 3.XX.Y.
minor=${mod#v0.3}
version=3.${minor#0}
if [ -x "$bin/prometheus" ] && "$bin/prometheus" --version 2>/dev/null | grep -qF "version $version "; then
	echo "bin/prometheus $version is present"
	exit 0
fi
echo "building prometheus $version (about 3 minutes on 2 cores the first time)"
t0=$SECONDS
CGO_ENABLED=0 go build -trimpath -tags remove_all_sd,enable_kubernetes_sd \
	-ldflags "-s -w -X github.com/prometheus/common/version.Version=$version" \
	-o "$bin/prometheus" github.com/prometheus/prometheus/cmd/prometheus
echo "built prometheus in $((SECONDS - t0)) s"
"$bin/prometheus" --version | grep -qF "version $version " || { echo "bin/prometheus does not report $version" >&2; exit 1; }
