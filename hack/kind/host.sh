#!/usr/bin/env bash
# What the kind node needs on this host, installed once per machine (as
# root, as CI runs): Debian's podman (with runc and the CNI plugins of its
# networks) and mmdebstrap, which builds the node's root filesystem. kind
# mounts /lib/modules into the node read-only; a host without one (a
# container) gets an empty folder. podman's settings are the project's own
# (hack/kind/containers.conf, passed as CONTAINERS_CONF), not /etc's.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
"$here/../debian-package.sh" podman podman
"$here/../debian-package.sh" /usr/sbin/runc runc
"$here/../debian-package.sh" /usr/lib/cni/bridge containernetworking-plugins
"$here/../debian-package.sh" mmdebstrap mmdebstrap
[ -d /lib/modules ] || mkdir -p /lib/modules
