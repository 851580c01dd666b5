"""The versions pinned in ``reconciler/versions.env`` (the file bash sources), for Python: the
Kubernetes, etcd and add-on versions tenant control planes run, and what hack/ builds them from.

Only ``KEY=VALUE`` lines are read, as bash would assign them: no expansion, no quotes."""

from __future__ import annotations

import re
from pathlib import Path

ENV_FILE = Path(__file__).resolve().with_name("versions.env")
_LINE = re.compile(r"^([A-Z][A-Z0-9_]*)=([^\s#'\"$`]*)\s*(?:#.*)?$")


def parse(text: str) -> dict[str, str]:
    """The assignments of a versions file; any other line than a comment or a blank is an error."""
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            raise ValueError(f"versions.env:{n}: not a plain KEY=VALUE line: {line!r}")
        out[m.group(1)] = m.group(2)
    return out


VERSIONS = parse(ENV_FILE.read_text())
KUBERNETES_VERSION = VERSIONS["KUBERNETES_VERSION"]
# What tenants may run, newest first (vc-apiserver's --kubernetes-versions default).
KUBERNETES_VERSIONS = tuple(VERSIONS["KUBERNETES_VERSIONS"].split(","))
ETCD_VERSION = VERSIONS["ETCD_VERSION"]
COREDNS_VERSION = VERSIONS["COREDNS_VERSION"]
PAUSE_VERSION = VERSIONS["PAUSE_VERSION"]
LOCAL_PATH_PROVISIONER_VERSION = VERSIONS["LOCAL_PATH_PROVISIONER_VERSION"]

# The images built by hack/images, under the names real manifests use.
ETCD_IMAGE = f"quay.io/coreos/etcd:{ETCD_VERSION}"
