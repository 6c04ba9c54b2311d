#!/usr/bin/env bash
# Builds the pinned kube-apiserver and etcd into ../../bin (or $1).
# Does nothing when binaries of the right versions are already there.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=${1:-$here/../../bin}
mkdir -p "$bin"
bin=$(cd "$bin" && pwd)

kube_version=$(cd "$here" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd_version=$(cd "$here" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)

have() { [ -x "$bin/$1" ] && "$bin/$1" --version 2>/dev/null | grep -qF -- "$2"; }

if have kube-apiserver "Kubernetes $kube_version"; then
	echo "bin/kube-apiserver $kube_version is present"
else
	major=${kube_version#v}; major=${major%%.*}
	minor=${kube_version#v*.}; minor=${minor%%.*}
	x=""
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		x+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
		x+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
	done
	echo "building kube-apiserver $kube_version (about 8 minutes on 2 cores the first time)"
	(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w$x" -o "$bin/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
	have kube-apiserver "Kubernetes $kube_version" || { echo "bin/kube-apiserver does not report $kube_version" >&2; exit 1; }
fi

if have etcd "etcd Version: ${etcd_version#v}"; then
	echo "bin/etcd $etcd_version is present"
else
	echo "building etcd $etcd_version"
	(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$etcd_version" -o "$bin/etcd" ./etcd)
	have etcd "etcd Version: ${etcd_version#v}" || { echo "bin/etcd does not report $etcd_version" >&2; exit 1; }
fi
