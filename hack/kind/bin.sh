#!/usr/bin/env bash
# Builds what the kind node image and the kind e2e test take besides the
# Kubernetes binaries, each from its own module at its pinned version, into
# ../../bin (or $1):
#   - kind-coredns: CoreDNS with kubeadm's plugins only (hack/kind/coredns);
#   - the Prometheus Operator and its config reloader, their images and
#     Prometheus's (from make e2e-bin's), and the operator's CRDs and RBAC,
#     in bin/prometheus-operator/, from its module (hack/kind/prometheus-operator).
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
for f in kind-coredns prometheus-operator/crd/monitoring.coreos.com_prometheuses.yaml prometheus-operator/images/prometheus.tar; do
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
t0=$SECONDS
v=github.com/prometheus/common/version
(cd "$here/prometheus-operator" && CGO_ENABLED=0 go build -trimpath \
	-ldflags "-s -w -X $v.Version=${operator#v} -X $v.Revision=$operator -X $v.Branch=$operator" -o "$bin/prometheus-operator/" \
	github.com/prometheus-operator/prometheus-operator/cmd/operator \
	github.com/prometheus-operator/prometheus-operator/cmd/prometheus-config-reloader)
echo "built the Prometheus Operator $operator and its config reloader in $((SECONDS - t0)) s"
# Their images, and Prometheus's (make e2e-bin), as the operator runs them:
# it gives each container its arguments and the reloader its command.
prom=$("$bin/prometheus" --version 2>/dev/null | sed -n 's/^prometheus, version \([^ ]*\).*/v\1/p')
[ "$prom" = v3.16.0 ] || { echo "bin/prometheus is $prom, want v3.16.0 (test/kind.PromVersion)" >&2; exit 1; }
mkdir -p "$bin/prometheus-operator/images"
"$bin/image-tool" -o "$bin/prometheus-operator/images/operator.tar" -tag "localhost/watchcache-exporter/prometheus-operator:$operator" \
	-binary "$bin/prometheus-operator/operator" -path /bin/operator -user 65534:65534
"$bin/image-tool" -o "$bin/prometheus-operator/images/prometheus-config-reloader.tar" -tag "localhost/watchcache-exporter/prometheus-config-reloader:$operator" \
	-binary "$bin/prometheus-operator/prometheus-config-reloader" -path /bin/prometheus-config-reloader -user 65534:65534
"$bin/image-tool" -o "$bin/prometheus-operator/images/prometheus.tar" -tag "localhost/watchcache-exporter/prometheus:$prom" \
	-binary "$bin/prometheus" -path /bin/prometheus -user 65534:65534
(cd "$here/prometheus-operator" && go mod download github.com/prometheus-operator/prometheus-operator)
dir=$(cd "$here/prometheus-operator" && go list -m -f '{{.Dir}}' github.com/prometheus-operator/prometheus-operator)
rm -rf "$bin/prometheus-operator/crd" "$bin/prometheus-operator/rbac"
mkdir -p "$bin/prometheus-operator/crd" "$bin/prometheus-operator/rbac"
cp "$dir"/example/prometheus-operator-crd/*.yaml "$bin/prometheus-operator/crd/"
cp "$dir"/example/rbac/prometheus-operator/*.yaml "$dir"/example/rbac/prometheus/*.yaml "$bin/prometheus-operator/rbac/"
chmod -R u+w "$bin/prometheus-operator"
echo "$want" > "$stamp"
