#!/usr/bin/env bash
# Builds what the kind node image and the kind e2e test take besides the
# Kubernetes binaries, each from its own module at its pinned version, into
# ../../bin (or $1):
#   - kind-coredns: CoreDNS with kubeadm's plugins only (hack/kind/coredns);
#   - the Prometheus Operator's CRDs and RBAC, in bin/prometheus-operator/,
#     from its module (hack/kind/prometheus-operator).
# Does nothing when bin/.kind-versions says they are there at these versions.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=${1:-$here/../../bin}
mkdir -p "$bin/prometheus-operator"
bin=$(cd "$bin" && pwd)

coredns=$(cd "$here/coredns" && go list -m -f '{{.Version}}' github.com/coredns/coredns)
operator=$(cd "$here/prometheus-operator" && go list -m -f '{{.Version}}' github.com/prometheus-operator/prometheus-operator)
want="coredns $coredns prometheus-operator $operator"
stamp=$bin/.kind-versions
present=true
for f in kind-coredns prometheus-operator/crd/monitoring.coreos.com_prometheuses.yaml; do
	[ -e "$bin/$f" ] || present=false
done
if $present && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
	echo "kind binaries present: $want"
	exit 0
fi
rm -f "$stamp"

t0=$SECONDS
(cd "$here/coredns" && CGO_ENABLED=0 go build -trimpath \
	-ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$coredns" -o "$bin/kind-coredns" .)
echo "built CoreDNS $coredns in $((SECONDS - t0)) s"
(cd "$here/prometheus-operator" && go mod download github.com/prometheus-operator/prometheus-operator)
dir=$(cd "$here/prometheus-operator" && go list -m -f '{{.Dir}}' github.com/prometheus-operator/prometheus-operator)
rm -rf "$bin/prometheus-operator/crd" "$bin/prometheus-operator/rbac"
mkdir -p "$bin/prometheus-operator/crd" "$bin/prometheus-operator/rbac"
cp "$dir"/example/prometheus-operator-crd/*.yaml "$bin/prometheus-operator/crd/"
cp "$dir"/example/rbac/prometheus-operator/*.yaml "$dir"/example/rbac/prometheus/*.yaml "$bin/prometheus-operator/rbac/"
chmod -R u+w "$bin/prometheus-operator"
echo "$want" > "$stamp"
