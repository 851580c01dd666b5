#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok
# from the Go module proxy at the versions pinned in hack/versions.env.
# Builds are cached in $VC_CACHE (default ~/.cache/vc-apiserver); .local/bin links to them.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

cache=${VC_CACHE:-$HOME/.cache/vc-apiserver}
links="$repo/.local/bin"
mkdir -p "$links"

die() { echo "build-bins: $*" >&2; exit 1; }

command -v go >/dev/null || die "Go is not installed (need go >= 1.25 on PATH); install it from your distribution or go.dev"
proxy=$(go env GOPROXY)
case "$proxy" in off|"") die "GOPROXY is '$proxy': the Go module proxy is needed to build the binaries";; esac

export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local

k8s_dir="$cache/kubernetes-$KUBERNETES_VERSION"
etcd_dir="$cache/etcd-$ETCD_VERSION"
kwok_dir="$cache/kwok-$KWOK_VERSION"

link() { ln -sfn "$1" "$links/$(basename "$1")"; }

check_proxy() {
  local mod=$1 ver=$2
  go mod download -json "$mod@$ver" >/dev/null 2>"$cache/.proxy-err" ||
    die "cannot fetch $mod@$ver from the Go module proxy ($proxy): $(tail -n 3 "$cache/.proxy-err")"
}

build_etcd() {
  [ -x "$etcd_dir/etcd" ] && return 0
  echo "build-bins: building etcd $ETCD_VERSION"
  check_proxy go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
  local w="$etcd_dir/src"; rm -rf "$w"; mkdir -p "$w"
  cat >"$w/go.mod" <<MOD
module vcapiserver.local/etcdwrapper

go 1.25

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
MOD
  (cd "$w" && go build -trimpath -ldflags="-s -w" -o "$etcd_dir/etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "$etcd_dir/etcd.tmp" "$etcd_dir/etcd"
}

build_kubernetes() {
  local bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl) b missing=0
  for b in "${bins[@]}"; do [ -x "$k8s_dir/$b" ] || missing=1; done
  [ $missing = 0 ] && return 0
  echo "build-bins: building kubernetes $KUBERNETES_VERSION (${bins[*]})"
  check_proxy k8s.io/kubernetes "$KUBERNETES_VERSION"
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -f "$gomod" ] || die "no go.mod for k8s.io/kubernetes@$KUBERNETES_VERSION"
  local minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
  local patch=${KUBERNETES_VERSION##*.}
  local staging="v0.$minor.$patch"
  local w="$k8s_dir/src"; rm -rf "$w"; mkdir -p "$w"
  {
    echo "module vcapiserver.local/k8swrapper"
    echo
    grep -E '^go [0-9]' "$gomod"
    grep -E '^godebug ' "$gomod" || true
    echo
    echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
    echo
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s.io/[^[:space:]]*\) => ./staging/.*#\t\1 => \1 '"$staging"'#p' "$gomod"
    echo ")"
  } >"$w/go.mod"
  local ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  local pkgs=()
  for b in "${bins[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  mkdir -p "$k8s_dir/out"
  (cd "$w" && go build -trimpath -ldflags="$ldflags" -o "$k8s_dir/out/" "${pkgs[@]}")
  for b in "${bins[@]}"; do mv "$k8s_dir/out/$b" "$k8s_dir/$b"; done
}

build_kwok() {
  [ -x "$kwok_dir/kwok" ] && return 0
  echo "build-bins: building kwok $KWOK_VERSION"
  check_proxy sigs.k8s.io/kwok "$KWOK_VERSION"
  mkdir -p "$kwok_dir"
  GOBIN="$kwok_dir" GOFLAGS= go install -trimpath -ldflags="-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
}

mkdir -p "$cache"
build_etcd
build_kwok
build_kubernetes

link "$etcd_dir/etcd"
link "$kwok_dir/kwok"
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do link "$k8s_dir/$b"; done
echo "build-bins: ready in $links: $(ls "$links" | tr '\n' ' ')"
