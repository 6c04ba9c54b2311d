#!/usr/bin/env bash
# Builds the pinned kube-apiserver and etcd into ../../bin (or $1), and with
# --node also kube-controller-manager, kube-scheduler, kubelet and kube-proxy
# for the kind node image, and the kubectl that applies deploy/ to it (the
# same version, so no version skew); --kind adds kubeadm, for the node image
# (hack/kind). Does nothing for binaries of the
# right version that are already there.
#
# With --version v1.XX it builds only that minor's kube-apiserver, pinned by
# versions/v1.XX/go.mod, into bin/v1.XX/ (for make test-versions), beside a
# link to bin/etcd: etcd is the same for every version.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
node=false kind=false
mod=$here
if [ "${1:-}" = --node ]; then node=true; shift; fi
if [ "${1:-}" = --kind ]; then node=true kind=true; shift; fi
if [ "${1:-}" = --version ]; then
	[ -f "$here/versions/${2:-}/go.mod" ] || { echo "--version: no module hack/kube/versions/${2:-}/go.mod (have: $(ls "$here/versions"))" >&2; exit 2; }
	mod=$here/versions/$2
	bin=${3:-$here/../../bin}/$2
	mkdir -p "$bin"
	bin=$(cd "$bin" && pwd)
else
	bin=${1:-$here/../../bin}
	mkdir -p "$bin"
	bin=$(cd "$bin" && pwd)
fi

kube_version=$(cd "$mod" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd_version=$(cd "$here" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)

have() {
	[ -x "$bin/$1" ] || return 1
	# Read the whole output first: grep -q exits at its first match, and with
	# pipefail the writer's SIGPIPE would fail the check now and then.
	local out
	case $1 in
	kubectl) out=$("$bin/kubectl" version --client 2>/dev/null) && grep -qF -- "Client Version: ${2#Kubernetes }" <<<"$out" ;;
	kubeadm) out=$("$bin/kubeadm" version -o short 2>/dev/null) && [ "$out" = "${2#Kubernetes }" ] ;;
	*) out=$("$bin/$1" --version 2>/dev/null) && grep -qF -- "$2" <<<"$out" ;;
	esac
}

cmds=(kube-apiserver)
$node && cmds+=(kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
$kind && cmds+=(kubeadm)
todo=()
for c in "${cmds[@]}"; do
	if have "$c" "Kubernetes $kube_version"; then
		echo "${bin#"$(cd "$here/../.." && pwd)/"}/$c $kube_version is present"
	else
		todo+=("$c")
	fi
done
if [ ${#todo[@]} -gt 0 ]; then
	major=${kube_version#v}; major=${major%%.*}
	minor=${kube_version#v*.}; minor=${minor%%.*}
	x=""
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		x+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
		x+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
	done
	pkgs=()
	for c in "${todo[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
	echo "building ${todo[*]} $kube_version (from empty Go caches on 2 cores: kube-apiserver about 5 minutes, the node's five about 2.5 more)"
	# One go build: the commands share most packages.
	t0=$SECONDS
	(cd "$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w$x" -o "$bin/" "${pkgs[@]}")
	echo "built ${todo[*]} in $((SECONDS - t0)) s"
	for c in "${todo[@]}"; do
		have "$c" "Kubernetes $kube_version" || { echo "bin/$c does not report $kube_version" >&2; exit 1; }
	done
fi

if [ "$mod" != "$here" ]; then
	# The tests take etcd from the same folder (testcluster's BinDir).
	ln -sfn ../etcd "$bin/etcd"
	exit 0
fi

if have etcd "etcd Version: ${etcd_version#v}"; then
	echo "bin/etcd $etcd_version is present"
else
	echo "building etcd $etcd_version"
	t0=$SECONDS
	(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$etcd_version" -o "$bin/etcd" ./etcd)
	echo "built etcd in $((SECONDS - t0)) s"
	have etcd "etcd Version: ${etcd_version#v}" || { echo "bin/etcd does not report $etcd_version" >&2; exit 1; }
fi
