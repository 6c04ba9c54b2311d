#!/usr/bin/env bash
# Builds what the kind node image runs besides the Kubernetes binaries, each at the
# version go.mod pins, into ../../bin (or $1): containerd, its runc shim and
# ctr; runc; and the CNI plugins of a bridge network into bin/cni. Does
# nothing when bin/.node-versions says they are there at these versions.
#
# runc is built from its module, not taken from Debian: bookworm has 1.1.5,
# containerd v2.4 is tested with the 1.5 line (script/setup/runc-version
# says v1.5.2), and the node's pods run under the restricted Pod Security
# level, whose RuntimeDefault seccomp profile needs runc's seccomp build tag,
# so cgo and Debian's libseccomp-dev.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=${1:-$here/../../bin}
mkdir -p "$bin/cni"
bin=$(cd "$bin" && pwd)

v() { (cd "$here" && go list -m -f '{{.Version}}' "$1"); }
containerd=$(v github.com/containerd/containerd/v2)
runc=$(v github.com/opencontainers/runc)
plugins=$(v github.com/containernetworking/plugins)
want="containerd $containerd runc $runc plugins $plugins"
stamp=$bin/.node-versions

files=(containerd containerd-shim-runc-v2 ctr runc cni/bridge cni/host-local cni/loopback cni/portmap)
present=true
for f in "${files[@]}"; do [ -x "$bin/$f" ] || present=false; done
if $present && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
	echo "node binaries present: $want"
	exit 0
fi
rm -f "$stamp"

echo "building containerd $containerd, runc $runc, CNI plugins $plugins (about 1 minute on 2 cores from empty caches)"
cd "$here"
t0=$SECONDS
# No btrfs, devmapper or zfs snapshotters: the node uses overlayfs, and they
# would need cgo headers.
CGO_ENABLED=0 go build -trimpath -tags no_btrfs,no_devmapper,no_zfs \
	-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd" -o "$bin/" \
	github.com/containerd/containerd/v2/cmd/containerd \
	github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
	github.com/containerd/containerd/v2/cmd/ctr
echo "built containerd, containerd-shim-runc-v2 and ctr in $((SECONDS - t0)) s"
t0=$SECONDS
CGO_ENABLED=0 go build -trimpath \
	-ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$plugins" -o "$bin/cni/" \
	github.com/containernetworking/plugins/plugins/main/bridge \
	github.com/containernetworking/plugins/plugins/ipam/host-local \
	github.com/containernetworking/plugins/plugins/main/loopback \
	github.com/containernetworking/plugins/plugins/meta/portmap
echo "built the CNI plugins in $((SECONDS - t0)) s"
t0=$SECONDS
CGO_ENABLED=1 go build -trimpath -tags seccomp -ldflags "-s -w -X main.version=${runc#v}" -o "$bin/runc" github.com/opencontainers/runc
echo "built runc in $((SECONDS - t0)) s"

"$bin/containerd" --version | grep -F "$containerd" >/dev/null || { echo "bin/containerd does not report $containerd" >&2; exit 1; }
"$bin/runc" --version | grep -F "runc version ${runc#v}" >/dev/null || { echo "bin/runc does not report $runc" >&2; exit 1; }
"$bin/runc" --version | grep "libseccomp" >/dev/null || { echo "bin/runc was built without seccomp" >&2; exit 1; }
echo "$want" > "$stamp"
