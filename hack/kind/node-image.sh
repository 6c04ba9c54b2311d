#!/usr/bin/env bash
# Builds the kind node image of the pinned Kubernetes without any registry,
# into podman's image store as localhost/watchcache-exporter/kind-node:<tag>,
# and prints that name. The tag is the Kubernetes version and a hash of this
# recipe and every pinned version it takes: a second run with the same ones
# finds the image and does nothing.
#
# What kind's own `kind build node-image` would pull, it builds here:
#   - the root filesystem: Debian bookworm (mmdebstrap) with the packages of
#     kind's base image, and kind's base files from the kind module (its
#     entrypoint, systemd units, containerd config);
#   - containerd, runc and the CNI plugins of hack/node; kubeadm, kubelet
#     and kubectl of hack/kube;
#   - every image kubeadm and kind's containerd config name, built from the
#     pinned binaries by hack/image and imported into the node's containerd
#     before it first starts: kube-apiserver, kube-controller-manager,
#     kube-scheduler, kube-proxy (with Debian's iptables), etcd, CoreDNS
#     (hack/kind/coredns) and pause;
#   - no kindnetd (its module is not served): one node needs no routes, so
#     the image holds a bridge CNI config and kind's config must say
#     disableDefaultCNI (test/kind.Config); no local-path-provisioner
#     either: kind then makes a host-path StorageClass.
#
# Needs root, podman and mmdebstrap (hack/kind/host.sh), and the binaries of
# make kube-bin-kind node-bin image-tool.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=$root/bin
export CONTAINERS_CONF=$here/containers.conf

for f in kubeadm kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd \
	containerd containerd-shim-runc-v2 ctr runc cni/bridge cni/host-local cni/loopback cni/portmap pause image-tool kind-coredns; do
	[ -x "$bin/$f" ] || { echo "bin/$f is missing: make kind-image builds it" >&2; exit 1; }
done
kube_version=$("$bin/kubeadm" version -o short)
(cd "$root" && go mod download sigs.k8s.io/kind)
kind_dir=$(cd "$root" && go list -m -f '{{.Dir}}' sigs.k8s.io/kind)
[ -d "$kind_dir/images/base/files" ] || { echo "no images/base/files in the kind module ($kind_dir)" >&2; exit 1; }

# The recipe: this script, the base files, and each pinned version.
key=$({
	cat "$here/node-image.sh" "$here/containers.conf" "$root/hack/kube/go.mod" "$root/hack/node/go.mod" \
		"$here/coredns/go.mod" "$here/coredns/main.go" "$root/hack/pause/main.go"
	(cd "$root" && go list -m sigs.k8s.io/kind)
} | sha256sum | cut -c1-12)
image=localhost/watchcache-exporter/kind-node:$kube_version-$key
if podman image exists "$image"; then
	echo "$image is present" >&2
	echo "$image"
	exit 0
fi

t0=$SECONDS
work=$(mktemp -d /var/tmp/kind-node.XXXXXX)
cstate=$work/containerd-state
cleanup() {
	if [ -f "$work/containerd.pid" ]; then kill "$(cat "$work/containerd.pid")" 2>/dev/null || true; fi
	for m in $(grep -o " $work/[^ ]*" /proc/mounts | sort -r); do umount -l "$m" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
rootfs=$work/rootfs

echo "building $image: the root filesystem (Debian bookworm)" >&2
# kind's base packages, less those for rootless, NFS and iSCSI, and curl.
mmdebstrap --variant=minbase --quiet \
	--include=systemd,systemd-sysv,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,jq,procps,e2fsprogs \
	--customize-hook='chroot "$1" apt-get clean' \
	bookworm "$rootfs" \
	"deb http://deb.debian.org/debian bookworm main" \
	"deb http://deb.debian.org/debian bookworm-updates main" \
	"deb http://deb.debian.org/debian-security bookworm-security main"
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin

echo "kind's base files and systemd setup ($(basename "$kind_dir"))" >&2
files=$kind_dir/images/base/files
install -m 0755 -D -t "$rootfs/usr/local/bin" "$files"/usr/local/bin/*
mkdir -p "$rootfs/kind/bin" "$rootfs/LICENSES"
cp -R "$files/kind/." "$rootfs/kind/"
chmod -R u+w "$rootfs/kind"
find "$rootfs/kind" -type f -exec chmod 0644 {} + ; chmod 0755 "$rootfs/kind" "$rootfs/kind/bin" "$rootfs"/kind/bin/*
cp -R "$files/etc/." "$rootfs/etc/"
chmod -R u+w,go-w "$rootfs/etc/containerd" "$rootfs/etc/default" "$rootfs/etc/sysctl.d" "$rootfs/etc/systemd/system" "$rootfs/etc/crictl.yaml"
rm -f "$rootfs"/lib/systemd/system/multi-user.target.wants/* "$rootfs"/etc/systemd/system/*.wants/* \
	"$rootfs"/lib/systemd/system/local-fs.target.wants/* "$rootfs"/lib/systemd/system/sockets.target.wants/*udev* \
	"$rootfs"/lib/systemd/system/sockets.target.wants/*initctl* "$rootfs"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >> "$rootfs/etc/systemd/journald.conf"
# Where root lacks CAP_SYS_RESOURCE (this machine's does), no process may
# lower its oom_score_adj: runc would fail every pod's start on the -998 the
# kubelet asks for. Restricted, containerd gives containers its own instead.
sed -i 's/^\( *restrict_oom_score_adj\) = false/\1 = true/' "$rootfs/etc/containerd/config.toml"
grep -q '^ *restrict_oom_score_adj = true' "$rootfs/etc/containerd/config.toml" || { echo "kind's containerd config has no restrict_oom_score_adj to set" >&2; exit 1; }
systemctl --root="$rootfs" enable kubelet.service containerd.service undo-mount-hacks.service >&2
systemctl --root="$rootfs" mask systemd-binfmt.service >&2
mkdir -p "$rootfs/etc/kubernetes/manifests"

echo "binaries: containerd, runc, CNI plugins, kubeadm, kubelet, kubectl $kube_version" >&2
install -m 0755 -t "$rootfs/usr/local/bin" "$bin/containerd" "$bin/containerd-shim-runc-v2" "$bin/ctr"
install -m 0755 -D "$bin/runc" "$rootfs/usr/local/sbin/runc"
install -m 0755 -D -t "$rootfs/opt/cni/bin" "$bin"/cni/bridge "$bin"/cni/host-local "$bin"/cni/loopback "$bin"/cni/portmap
install -m 0755 -t "$rootfs/usr/bin" "$bin/kubeadm" "$bin/kubelet" "$bin/kubectl"
"$bin/ctr" oci spec \
	| chroot "$rootfs" jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
	| chroot "$rootfs" jq 'del(.process.rlimits)' > "$rootfs/etc/containerd/cri-base.json"
printf '%s' "$kube_version" > "$rootfs/kind/version"
# kind's default pod subnet; the node's pods get the first /24 of it.
mkdir -p "$rootfs/etc/cni/net.d"
cat > "$rootfs/etc/cni/net.d/10-bridge.conflist" <<'EOF'
{
  "cniVersion": "1.0.0",
  "name": "kind-bridge",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF

echo "images: what kubeadm $kube_version and kind's containerd config name" >&2
images=$work/images
mkdir -p "$images"
sandbox=$(sed -n 's/^ *sandbox_image = "\(.*\)"/\1/p' "$rootfs/etc/containerd/config.toml")
[ -n "$sandbox" ] || { echo "no sandbox_image in kind's containerd config" >&2; exit 1; }
ref() { "$bin/kubeadm" config images list --kubernetes-version "$kube_version" 2>/dev/null | grep "/$1:" ; }
img() { # name ref binary path user [extra args]
	local n=$1 r=$2 b=$3 p=$4 u=$5; shift 5
	"$bin/image-tool" -o "$images/$n.tar" -tag "$r" -binary "$b" -path "$p" -user "$u" "$@"
}
for c in kube-apiserver kube-controller-manager kube-scheduler; do
	img "$c" "$(ref "$c")" "$bin/$c" "/usr/local/bin/$c" 0:0
done
img etcd "$(ref etcd)" "$bin/etcd" /usr/local/bin/etcd 0:0
img coredns "$(ref coredns)" "$bin/kind-coredns" /coredns 0:0
img pause "$sandbox" "$bin/pause" /pause 65535:65535
# kube-proxy programs iptables: Debian's, from the root filesystem, with
# the libraries and extensions it loads.
proxy=$work/kube-proxy
mkdir -p "$proxy/usr/sbin"
cp -a "$rootfs/usr/sbin/xtables-nft-multi" "$proxy/usr/sbin/"
for t in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
	ln -s xtables-nft-multi "$proxy/usr/sbin/$t"
done
for lib in $(chroot "$rootfs" ldd /usr/sbin/xtables-nft-multi | grep -o '/[^ ]*'); do
	mkdir -p "$proxy$(dirname "$lib")"
	cp -L "$rootfs$lib" "$proxy$lib"
done
mkdir -p "$proxy/usr/lib/x86_64-linux-gnu/xtables"
cp -a "$rootfs"/usr/lib/x86_64-linux-gnu/xtables/. "$proxy/usr/lib/x86_64-linux-gnu/xtables/"
img kube-proxy "$(ref kube-proxy)" "$bin/kube-proxy" /usr/local/bin/kube-proxy 0:0 -dir "$proxy"

# Into the node's containerd store, as kind's build does: containerd runs on
# the root filesystem's /var/lib/containerd until every image is in.
mkdir -p "$cstate" "$rootfs/var/lib/containerd"
cat > "$work/containerd.toml" <<EOF
version = 3
root = "$rootfs/var/lib/containerd"
state = "$cstate"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$cstate/containerd.sock"
EOF
"$bin/containerd" --config "$work/containerd.toml" > "$work/containerd.log" 2>&1 &
echo $! > "$work/containerd.pid"
for _ in $(seq 100); do [ -S "$cstate/containerd.sock" ] && break; sleep 0.1; done
for a in "$images"/*.tar; do
	"$bin/ctr" --address "$cstate/containerd.sock" --namespace=k8s.io images import \
		--label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack --digests "$a" >&2
done
"$bin/ctr" --address "$cstate/containerd.sock" --namespace=k8s.io images list -q | grep -v '^sha256:' >&2
kill "$(cat "$work/containerd.pid")"
wait "$(cat "$work/containerd.pid")" 2>/dev/null || true
rm -f "$work/containerd.pid"

echo "importing into podman" >&2
tar -C "$rootfs" --numeric-owner -cf - . | podman import \
	--change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
	--change 'STOPSIGNAL SIGRTMIN+3' \
	--change 'ENV container=docker' \
	- "$image" >&2
echo "built $image in $((SECONDS - t0)) s: $(podman image inspect --format '{{.Size}}' "$image" | numfmt --to=iec)" >&2
# The images of earlier recipes are not needed any more.
for old in $(podman images --format '{{.Repository}}:{{.Tag}}' "${image%:*}"); do
	[ "$old" = "$image" ] || podman rmi "$old" >&2
done
echo "$image"
