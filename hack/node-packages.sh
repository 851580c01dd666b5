#!/usr/bin/env bash
# Installs, from Debian, what a real node and the image build need: containerd, runc and the CNI
# plugins (a node's runtime), iptables, conntrack and socat (kubelet, kube-proxy, port-forward),
# busybox-static (the busybox image) and gcc with the C library's static archive (the pause image).
# Also makes sure Debian's package lists are there: hack/images downloads packages with apt-get.
# Idempotent; when everything is installed it only asks dpkg, and fails loudly otherwise.
set -euo pipefail

packages=(containerd runc containernetworking-plugins iptables conntrack socat busybox-static gcc libc6-dev)

die() { echo "node-packages: $*" >&2; exit 1; }

command -v dpkg-query >/dev/null && command -v apt-get >/dev/null ||
  die "this needs a Debian system (dpkg and apt-get)"

missing=()
for p in "${packages[@]}"; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
lists=$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -print -quit 2>/dev/null || true)

if [ ${#missing[@]} = 0 ] && [ -n "$lists" ]; then
  exit 0
fi
[ "$(id -u)" = 0 ] || die "missing ${missing[*]:-the Debian package lists}: run this as root"

export DEBIAN_FRONTEND=noninteractive
if [ -z "$lists" ] || [ ${#missing[@]} != 0 ]; then
  echo "node-packages: apt-get update"
  apt-get update -q >/dev/null || die "apt-get update failed"
fi
if [ ${#missing[@]} != 0 ]; then
  echo "node-packages: installing ${missing[*]}"
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null ||
    die "apt-get install ${missing[*]} failed"
fi
for p in "${packages[@]}"; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || die "$p is still not installed"
done
for tool in containerd ctr runc iptables conntrack socat busybox gcc; do
  command -v "$tool" >/dev/null || die "$tool is not on PATH after installing"
done
[ -x /usr/lib/cni/bridge ] || die "/usr/lib/cni/bridge is missing (containernetworking-plugins)"
echo "node-packages: ready"
