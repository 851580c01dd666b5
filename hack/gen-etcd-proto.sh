#!/usr/bin/env bash
# Regenerates the etcd message classes, apiserver/etcd/pb/{kv,rpc}_pb2.py and their .pyi stubs,
# from the .proto files beside them. Run it after editing a .proto file, or to move to another
# protoc; then run tests/unit/test_etcdpb.py, which pins the bytes the client sends.
#
# protoc comes from grpcio-tools, pinned below, in a venv of its own (.local/protoc-venv). The
# gencode it writes requires a protobuf runtime at least as new as its own version and of the same
# major: keep pyproject.toml's protobuf pin in step (the generated files name the version).
set -euo pipefail

GRPCIO_TOOLS_VERSION=1.85.1  # protoc 35.1, Python gencode 7.35.1
cd "$(dirname "$0")/.."
out=apiserver/etcd/pb
venv=${PROTOC_VENV:-.local/protoc-venv}

if ! "$venv/bin/python" -c "import grpc_tools" 2>/dev/null \
    || [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("grpcio-tools"))')" != "$GRPCIO_TOOLS_VERSION" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "grpcio-tools==$GRPCIO_TOOLS_VERSION"
fi

# Paths relative to the repository root name the .proto files (apiserver/etcd/pb/kv.proto), so
# their descriptors cannot clash with another library's kv.proto or rpc.proto in protobuf's pool.
"$venv/bin/python" -m grpc_tools.protoc -I. --python_out=. --pyi_out=. "$out/kv.proto" "$out/rpc.proto"

# protoc imports a dependency by its path (from apiserver.etcd.pb import kv_pb2); within the
# package a relative import says the same without naming where the package lives.
sed -i 's/^from apiserver\.etcd\.pb import \([a-z_0-9]*_pb2\) as /from . import \1 as /' \
  "$out/rpc_pb2.py" "$out/rpc_pb2.pyi"
echo "generated $out/kv_pb2.py $out/rpc_pb2.py (and .pyi) with $("$venv/bin/python" -m grpc_tools.protoc --version)"
