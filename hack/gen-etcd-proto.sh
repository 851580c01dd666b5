#!/usr/bin/env bash
# Regenerates the etcd message classes in apiserver/etcd/pb/ (rpc_pb2, kv_pb2, auth_pb2,
# version_pb2 and their .pyi stubs) from etcd's own .proto files, at the etcd version pinned in
# reconciler/versions.env. Run it after changing ETCD_VERSION or the protoc below; then run
# tests/unit/test_etcdpb.py, which pins the bytes the client sends.
#
# The .proto files are not kept in this repository: they come from the module go.etcd.io/etcd/api/v3
# on the Go module proxy (the one hack/build-bins.sh builds etcd from; `go mod download` checks it
# against the checksum database), as etcdserverpb/rpc.proto, mvccpb/kv.proto, authpb/auth.proto and
# versionpb/version.proto. Copies of them are laid out under a temporary directory by the paths
# they import each other by (etcd/api/mvccpb/kv.proto, ...), and in the copies what only etcd's
# Go and HTTP-gateway code generators read is taken out, since their .proto files are not at hand
# and none of it changes a message or its wire format:
#   - gogoproto: `import "gogoproto/gogo.proto";`, file options `option (gogoproto.x) = ...;` and
#     field options `[(gogoproto.x) = ...]` (from a bracket that holds other options too, only
#     it is taken out);
#   - grpc-gateway: `import "google/api/annotations.proto";` and the `option (google.api.http) =
#     {...};` of each rpc, `import "protoc-gen-openapiv2/options/annotations.proto";` and the file's
#     `option (grpc.gateway.protoc_gen_openapiv2.options.openapiv2_swagger) = {...};`.
# Everything else is etcd's as published, including versionpb's annotations of the version that
# introduced a message, field or enum (version.proto declares them on protobuf's descriptor.proto,
# which protoc has).
#
# protoc comes from grpcio-tools, pinned below, in a venv of its own (.local/protoc-venv). The
# gencode it writes requires a protobuf runtime at least as new as its own version and of the same
# major: keep pyproject.toml's protobuf pin in step (the generated files name the version).
# The output depends only on the two pins: a second run writes the same bytes.
set -euo pipefail

GRPCIO_TOOLS_VERSION=1.85.1  # protoc 35.1, Python gencode 7.35.1

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=../reconciler/versions.env
source "$here/../reconciler/versions.env"
out="$repo/apiserver/etcd/pb"
venv=${PROTOC_VENV:-$repo/.local/protoc-venv}
module=go.etcd.io/etcd/api/v3

die() { echo "gen-etcd-proto: $*" >&2; exit 1; }

# As hack/build-bins.sh: the module comes from the Go module proxy into Go's module cache.
command -v go >/dev/null || die "Go is not installed (need go on PATH to fetch $module from the module proxy)"
proxy=$(go env GOPROXY)
case "$proxy" in off|"") die "GOPROXY is '$proxy': the Go module proxy is needed to fetch $module";; esac
export GOFLAGS=-mod=mod GOTOOLCHAIN=local

if ! "$venv/bin/python" -c "import grpc_tools" 2>/dev/null \
    || [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("grpcio-tools"))')" != "$GRPCIO_TOOLS_VERSION" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "grpcio-tools==$GRPCIO_TOOLS_VERSION"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Outside any Go module, so that no go.mod or go.work around the checkout has a say.
json=$(cd "$tmp" && go mod download -json "$module@$ETCD_VERSION") \
  || die "cannot fetch $module@$ETCD_VERSION from the Go module proxy ($proxy): $(sed -n 's/.*"Error": "\(.*\)".*/\1/p' <<<"$json")"
mod_dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
[ -d "$mod_dir" ] || die "go mod download named no directory for $module@$ETCD_VERSION"

protos=(etcdserverpb/rpc.proto mvccpb/kv.proto authpb/auth.proto versionpb/version.proto)
mkdir -p "$tmp/src" "$tmp/out"
"$venv/bin/python" - "$mod_dir" "$tmp/src/etcd/api" "${protos[@]}" <<'PY'
"""Copies etcd's .proto files without gogoproto's and the HTTP gateway's imports and options."""
import re
import sys
from pathlib import Path

IMPORTS = {"gogoproto/gogo.proto", "google/api/annotations.proto",
           "protoc-gen-openapiv2/options/annotations.proto"}
OPTIONS = ("gogoproto.", "google.api.", "grpc.gateway.")  # option names, as written in parentheses
IMPORT = re.compile(r'import\s+(?:public\s+|weak\s+)?"([^"]+)"\s*;')
OPTION = re.compile(r"option\s*\(\s*([\w.]+)\s*\)")
OPTION_NAME = re.compile(r"\s*\(\s*([\w.]+)\s*\)")
CLOSE = {"(": ")", "[": "]", "{": "}"}


def skip(src: str, i: int) -> int | None:
    """The end of the comment or string literal at i, or None if there is none there."""
    if src.startswith("//", i):
        end = src.find("\n", i)
        return len(src) if end < 0 else end
    if src.startswith("/*", i):
        return src.index("*/", i + 2) + 2
    if src[i] in "\"'":
        j = i + 1
        while src[j] != src[i]:
            j += 2 if src[j] == "\\" else 1
        return j + 1
    return None


def split(src: str, i: int, stop: str) -> tuple[list[str], int]:
    """From i to the first `stop` not nested in brackets, strings or comments: the text cut at
    the commas at that level, and the index after `stop`."""
    parts, start, depth = [], i, []
    while True:
        end = skip(src, i)
        if end is not None:
            i = end
            continue
        c = src[i]
        if depth and c == depth[-1]:
            depth.pop()
        elif c in CLOSE:
            depth.append(CLOSE[c])
        elif not depth and c in (stop, ","):
            parts.append(src[start:i])
            start = i + 1
            if c == stop:
                return parts, i + 1
        i += 1


def code(src: str) -> str:
    """src without its comments, and its string literals emptied."""
    out, i = [], 0
    while i < len(src):
        end = skip(src, i)
        if end is None:
            out.append(src[i])
            i += 1
        else:
            out.append('""' if src[i] in "\"'" else " ")
            i = end
    return "".join(out)


def dropped(option: str) -> bool:
    m = OPTION_NAME.match(option)
    return m is not None and m.group(1).startswith(OPTIONS)


def strip(src: str) -> str:
    out, i = [], 0
    while i < len(src):
        end = skip(src, i)
        if end is not None:
            out.append(src[i:end])
            i = end
            continue
        word_start = i == 0 or not (src[i - 1].isalnum() or src[i - 1] in "_.")
        m = IMPORT.match(src, i) if word_start else None
        if m and m.group(1) in IMPORTS:
            i = m.end()
            continue
        m = OPTION.match(src, i) if word_start else None
        if m and m.group(1).startswith(OPTIONS):
            i = split(src, m.end(), ";")[1]
            continue
        if src[i] == "[":
            options, i = split(src, i + 1, "]")
            kept = [o.strip() for o in options if not dropped(o)]
            if kept:
                out.append("[" + ", ".join(kept) + "]")
            else:
                while out and out[-1] in (" ", "\t"):  # the space before the bracket
                    out.pop()
            continue
        out.append(src[i])
        i += 1
    return "".join(out)


mod_dir, dest, *protos = sys.argv[1:]
for proto in protos:
    text = strip((Path(mod_dir) / proto).read_text())
    left = {name for name in OPTION_NAME.findall(code(text)) if name.startswith(OPTIONS)}
    if left:
        sys.exit(f"gen-etcd-proto: {proto} still names {sorted(left)}")
    (Path(dest) / proto).parent.mkdir(parents=True, exist_ok=True)
    (Path(dest) / proto).write_text(text)
PY

# protoc names each file by its path under -I (etcd/api/mvccpb/kv.proto, as etcd's own imports
# do); descriptor.proto comes from grpc_tools' bundled includes.
(cd "$tmp/src" && "$venv/bin/python" -m grpc_tools.protoc -I. --python_out="$tmp/out" --pyi_out="$tmp/out" \
  "${protos[@]/#/etcd/api/}")

rm -f "$out"/*_pb2.py "$out"/*_pb2.pyi
for proto in "${protos[@]}"; do
  name=$(basename "$proto" .proto)_pb2
  # protoc imports a dependency by its path (from etcd.api.mvccpb import kv_pb2); the four files
  # share one package here, so a relative import says the same without naming where it lives.
  for ext in py pyi; do
    sed 's/^from etcd\.api\.[a-z]*pb import \([a-z_0-9]*_pb2\) as /from . import \1 as /' \
      "$tmp/out/etcd/api/${proto%.proto}_pb2.$ext" >"$out/$name.$ext"
  done
done
if grep -n '^from etcd\.\|^import etcd\.' "$out"/*_pb2.py "$out"/*_pb2.pyi; then
  die "an import of the generated files was not made relative"
fi
echo "generated $(cd "$repo" && ls apiserver/etcd/pb/*_pb2.py* | tr '\n' ' ')from $module@$ETCD_VERSION" \
  "with $("$venv/bin/python" -m grpc_tools.protoc --version)"
