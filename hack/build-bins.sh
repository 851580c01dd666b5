#!/usr/bin/env bash
# Builds etcd, etcdctl and etcdutl (restores tenants from snapshots), kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok,
# the control plane of each other Kubernetes version tenants may run (KUBERNETES_VERSIONS),
# and the node binaries kubelet, kube-proxy and CoreDNS (with kube-log-runner, the images' go-runner),
# and local-path-provisioner (the real-node lab's storage),
# and Kubernetes' own end-to-end suite at the same version: e2e.test, ginkgo to run it in parallel,
# agnhost, nonewprivs and sample-apiserver, the binaries of the suite's test images (hack/conformance.py, hack/images)
# from the Go module proxy at the versions pinned in reconciler/versions.env.
# Builds are cached in $VC_CACHE (default ~/.cache/vc-apiserver); .local/bin links to them.
# A missing binary is built, a present one reused; whatever cannot be built fails the script.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=../reconciler/versions.env
source "$here/../reconciler/versions.env"

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
coredns_dir="$cache/coredns-$COREDNS_VERSION"
lpp_dir="$cache/local-path-provisioner-$LOCAL_PATH_PROVISIONER_VERSION"

link() { ln -sfn "$1" "$links/$(basename "$1")"; }

check_proxy() {
  local mod=$1 ver=$2
  go mod download -json "$mod@$ver" >/dev/null 2>"$cache/.proxy-err" ||
    die "cannot fetch $mod@$ver from the Go module proxy ($proxy): $(tail -n 3 "$cache/.proxy-err")"
}

# etcd's modules carry `replace` lines, so each binary is built from a tiny wrapper module of its own.
build_etcd_module() {
  local bin=$1 mod=$2
  [ -x "$etcd_dir/$bin" ] && return 0
  echo "build-bins: building $bin $ETCD_VERSION"
  check_proxy "$mod" "$ETCD_VERSION"
  local w="$etcd_dir/src-$bin"; rm -rf "$w"; mkdir -p "$w"
  cat >"$w/go.mod" <<MOD
module vcapiserver.local/${bin}wrapper

go 1.25

require $mod $ETCD_VERSION
MOD
  (cd "$w" && go build -trimpath -ldflags="-s -w" -o "$etcd_dir/$bin.tmp" "$mod") ||
    die "building $bin $ETCD_VERSION failed"
  mv "$etcd_dir/$bin.tmp" "$etcd_dir/$bin"
}

build_etcd() {
  build_etcd_module etcd go.etcd.io/etcd/server/v3
  build_etcd_module etcdctl go.etcd.io/etcd/etcdctl/v3
  build_etcd_module etcdutl go.etcd.io/etcd/etcdutl/v3
}

# The Kubernetes binaries and the package each is built from (kube-log-runner is go-runner, the
# entrypoint of upstream's kube-* images: its source lives in component-base).
k8s_bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy kube-log-runner)
control_plane_bins=(kube-apiserver kube-controller-manager kube-scheduler kube-log-runner)
k8s_pkg() {
  case $1 in
    kube-log-runner) echo k8s.io/component-base/logs/kube-log-runner;;
    *) echo "k8s.io/kubernetes/cmd/$1";;
  esac
}

# Builds the Kubernetes binaries of version $1 that are missing in $cache/kubernetes-$1 (the rest of the
# arguments, default all of k8s_bins), from a wrapper module that requires k8s.io/kubernetes at that version.
build_kubernetes() {
  local version=$1; shift
  local dir="$cache/kubernetes-$version" want=("$@") bins=() b
  [ ${#want[@]} = 0 ] && want=("${k8s_bins[@]}")
  for b in "${want[@]}"; do [ -x "$dir/$b" ] || bins+=("$b"); done
  [ ${#bins[@]} = 0 ] && return 0
  echo "build-bins: building kubernetes $version (${bins[*]})"
  check_proxy k8s.io/kubernetes "$version"
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -f "$gomod" ] || die "no go.mod for k8s.io/kubernetes@$version"
  local minor=${version#v1.}; minor=${minor%%.*}
  local patch=${version##*.}
  local staging="v0.$minor.$patch"
  local w="$dir/src"; rm -rf "$w"; mkdir -p "$w"
  {
    echo "module vcapiserver.local/k8swrapper"
    echo
    grep -E '^go [0-9]' "$gomod"
    grep -E '^godebug ' "$gomod" || true
    echo
    echo "require k8s.io/kubernetes $version"
    echo
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s.io/[^[:space:]]*\) => ./staging/.*#\t\1 => \1 '"$staging"'#p' "$gomod"
    echo ")"
  } >"$w/go.mod"
  local ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$version -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  local pkgs=()
  for b in "${bins[@]}"; do pkgs+=("$(k8s_pkg "$b")"); done
  mkdir -p "$dir/out"
  (cd "$w" && go build -trimpath -ldflags="$ldflags" -o "$dir/out/" "${pkgs[@]}") ||
    die "building kubernetes $version (${bins[*]}) failed"
  for b in "${bins[@]}"; do
    [ -x "$dir/out/$b" ] || die "go build made no $b"
    mv "$dir/out/$b" "$dir/$b"
  done
}

# The conformance suite is a test binary (`go test -c`), built in the same wrapper module, with the
# same version stamps (the suite logs and compares the server's version to its own); ginkgo at the
# version Kubernetes' go.mod requires.
build_e2e() {
  local missing=0 b
  for b in e2e.test ginkgo agnhost nonewprivs sample-apiserver; do [ -x "$k8s_dir/$b" ] || missing=1; done
  [ $missing = 0 ] && return 0
  [ -f "$k8s_dir/src/go.mod" ] || die "no wrapper module in $k8s_dir/src: build the kubernetes binaries first"
  echo "build-bins: building the e2e suite $KUBERNETES_VERSION (e2e.test, ginkgo, agnhost, nonewprivs, sample-apiserver)"
  local minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
  local ldflags="-s -w" p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  mkdir -p "$k8s_dir/out"
  (cd "$k8s_dir/src" &&
    go test -c -trimpath -ldflags="$ldflags" -o "$k8s_dir/out/e2e.test" k8s.io/kubernetes/test/e2e &&
    go build -trimpath -ldflags="-s -w" -o "$k8s_dir/out/" github.com/onsi/ginkgo/v2/ginkgo \
      k8s.io/kubernetes/test/images/agnhost k8s.io/kubernetes/test/images/nonewprivs) || die "building the e2e suite $KUBERNETES_VERSION failed"
  # sample-apiserver is a module of its own (a staging repository), built as it is published
  local w="$k8s_dir/src-sample-apiserver"; rm -rf "$w"; mkdir -p "$w"
  printf 'module vcapiserver.local/samplewrapper\n\ngo 1.25.0\n\nrequire k8s.io/sample-apiserver v0.%s.%s\n' \
    "$minor" "${KUBERNETES_VERSION##*.}" >"$w/go.mod"
  (cd "$w" && go build -trimpath -ldflags="-s -w" -o "$k8s_dir/out/" k8s.io/sample-apiserver) ||
    die "building sample-apiserver for $KUBERNETES_VERSION failed"
  for b in e2e.test ginkgo agnhost nonewprivs sample-apiserver; do
    [ -x "$k8s_dir/out/$b" ] || die "go build made no $b"
    mv "$k8s_dir/out/$b" "$k8s_dir/$b"
  done
}

build_kwok() {
  [ -x "$kwok_dir/kwok" ] && return 0
  echo "build-bins: building kwok $KWOK_VERSION"
  check_proxy sigs.k8s.io/kwok "$KWOK_VERSION"
  mkdir -p "$kwok_dir"
  GOBIN="$kwok_dir" GOFLAGS= go install -trimpath -ldflags="-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" ||
    die "building kwok $KWOK_VERSION failed"
}

# CoreDNS as its Makefile builds it (CGO off, GitCommit stamped: the tag's commit, from the proxy).
build_coredns() {
  [ -x "$coredns_dir/coredns" ] && return 0
  echo "build-bins: building coredns $COREDNS_VERSION"
  check_proxy github.com/coredns/coredns "$COREDNS_VERSION"
  local commit
  commit=$(go mod download -json "github.com/coredns/coredns@$COREDNS_VERSION" | sed -n 's/.*"Hash": "\([0-9a-f]*\)".*/\1/p')
  [ -n "$commit" ] || commit=$COREDNS_VERSION
  mkdir -p "$coredns_dir/bin"
  GOBIN="$coredns_dir/bin" GOFLAGS= go install -trimpath \
    -ldflags="-s -w -X github.com/coredns/coredns/coremain.GitCommit=${commit:0:7}" \
    "github.com/coredns/coredns@$COREDNS_VERSION" || die "building coredns $COREDNS_VERSION failed"
  mv "$coredns_dir/bin/coredns" "$coredns_dir/coredns"
}

build_local_path_provisioner() {
  [ -x "$lpp_dir/local-path-provisioner" ] && return 0
  echo "build-bins: building local-path-provisioner $LOCAL_PATH_PROVISIONER_VERSION"
  check_proxy github.com/rancher/local-path-provisioner "$LOCAL_PATH_PROVISIONER_VERSION"
  mkdir -p "$lpp_dir"
  GOBIN="$lpp_dir" GOFLAGS= go install -trimpath -ldflags="-s -w" \
    "github.com/rancher/local-path-provisioner@$LOCAL_PATH_PROVISIONER_VERSION" ||
    die "building local-path-provisioner $LOCAL_PATH_PROVISIONER_VERSION failed"
}

mkdir -p "$cache"
build_etcd
build_kwok
build_kubernetes "$KUBERNETES_VERSION"
# The other versions tenants may run: their control plane (and go-runner, for their images).
for v in ${KUBERNETES_VERSIONS//,/ }; do
  [ "$v" = "$KUBERNETES_VERSION" ] || build_kubernetes "$v" "${control_plane_bins[@]}"
done
build_e2e
build_coredns
build_local_path_provisioner

link "$etcd_dir/etcd"
link "$etcd_dir/etcdctl"
link "$etcd_dir/etcdutl"
link "$kwok_dir/kwok"
link "$coredns_dir/coredns"
link "$lpp_dir/local-path-provisioner"
# Each version a tenant may run, as a directory of its own (the process runtime starts a tenant's from there).
for v in ${KUBERNETES_VERSIONS//,/ }; do link "$cache/kubernetes-$v"; done
for b in "${k8s_bins[@]}" e2e.test ginkgo agnhost nonewprivs sample-apiserver; do link "$k8s_dir/$b"; done
echo "build-bins: ready in $links: $(ls "$links" | tr '\n' ' ')"
