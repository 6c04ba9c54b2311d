#!/usr/bin/env bash
# Writes the ServiceMonitor and PrometheusRule CRDs into ../../bin/crds (or
# $1), generated with controller-gen from the prometheus-operator API module
# that the main module uses, as upstream generates them: the module proxy
# serves that API module but not the operator's repository, which holds
# the YAML. Does nothing when they are there for this version.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-$here/../../bin/crds}
cd "$here"
version=$(go list -m -f '{{.Version}}' github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring)
if [ "$(cat "$out/.version" 2>/dev/null)" = "$version" ]; then
	echo "prometheus-operator $version CRDs present in $out"
	exit 0
fi
echo "generating the prometheus-operator $version CRDs"
go build -o "$out/.controller-gen" sigs.k8s.io/controller-tools/cmd/controller-gen
# go list names the module's folder only once it is in the module cache.
go mod download github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring
api=$(go list -m -f '{{.Dir}}' github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring)
[ -d "$api/v1" ] || { echo "no prometheus-operator API module at '$api'" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Descriptions off: the apiserver limits an annotation (kubectl apply's
# last-applied) to 256 KiB.
(cd "$api" && "$out/.controller-gen" crd:crdVersions=v1,maxDescLen=0 paths=./v1 output:crd:dir="$tmp")
mkdir -p "$out"
for r in servicemonitors prometheusrules; do
	cp "$tmp/monitoring.coreos.com_$r.yaml" "$out/"
done
rm -f "$out/.controller-gen"
echo "$version" > "$out/.version"
