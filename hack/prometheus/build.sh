#!/usr/bin/env bash
# Builds the Prometheus server and promtool of the module go.mod pins (3.x)
# into ../../bin (or $1), with Kubernetes service discovery only. Debian's
# prometheus 2.42 is built without Kubernetes service discovery (it refuses
# kubernetes_sd_configs), and the end-to-end test finds the exporter through
# it; the dashboard and rule tests run on both versions. Does nothing when
# bin/prometheus and bin/promtool are that version.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=${1:-$here/../../bin}
mkdir -p "$bin"
cd "$here"
mod=$(go list -m -f '{{.Version}}' github.com/prometheus/prometheus)
# Module v0.3XX.Y is Prometheus 3.XX.Y.
minor=${mod#v0.3}
version=3.${minor#0}
have() { [ -x "$bin/$1" ] && "$bin/$1" --version 2>/dev/null | grep -F "version $version " >/dev/null; }
if have prometheus && have promtool; then
	echo "bin/prometheus and bin/promtool $version are present"
	exit 0
fi
echo "building prometheus and promtool $version (about 3 minutes on 2 cores the first time)"
t0=$SECONDS
CGO_ENABLED=0 go build -trimpath -tags remove_all_sd,enable_kubernetes_sd \
	-ldflags "-s -w -X github.com/prometheus/common/version.Version=$version" \
	-o "$bin/" github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
echo "built prometheus and promtool in $((SECONDS - t0)) s"
for c in prometheus promtool; do
	have $c || { echo "bin/$c does not report $version" >&2; exit 1; }
done
