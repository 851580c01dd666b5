"""The manifests, rendered from the kustomize directories in ``deploy/``: the one source of truth.

``kubectl kustomize deploy/<mode>`` builds them exactly as a platform team's overlay sees them;
the installer then fills in only what belongs to one installation: the CA bundle, the image,
the local port, and the TLS Secrets. Each of those is one small function over the built list.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import yaml

from . import tls
from .kubectl import Kubectl

Manifest = dict[str, Any]
Mode = Literal["cluster", "local"]
MODES: tuple[Mode, ...] = ("cluster", "local")

DEPLOY = Path(__file__).resolve().parent / "deploy"
NAMESPACE = tls.NAMESPACE
SERVICE = tls.SERVICE
APISERVICE = "v1alpha1.kosmos.io"
DEPLOYMENT = "vc-apiserver"
CONTAINER = "vc-apiserver"

# Secret name → (its CA, the leaf it carries); deploy/cluster mounts them by these names.
SECRETS: dict[str, tuple[str, str]] = {
    "vc-apiserver-serving": (tls.SERVING_CA, tls.SERVING),
    "vc-apiserver-etcd-server": (tls.ETCD_CA, tls.ETCD_SERVER),
    "vc-apiserver-etcd-client": (tls.ETCD_CA, tls.ETCD_CLIENT),
}


def kustomize(kubectl: Kubectl, mode: Mode) -> list[Manifest]:
    out = kubectl.run("kustomize", str(DEPLOY / mode)).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def find(objs: Iterable[Manifest], kind: str, name: str) -> Manifest:
    for obj in objs:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    raise LookupError(f"{kind} {name} is not in the manifests under {DEPLOY}")


def identity(obj: Manifest) -> tuple[str, str, str, str]:
    meta = obj["metadata"]
    return obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"]


def set_ca_bundle(objs: list[Manifest], ca_pem: bytes) -> None:
    find(objs, "APIService", APISERVICE)["spec"]["caBundle"] = base64.b64encode(ca_pem).decode()


def set_image(objs: list[Manifest], image: str) -> None:
    containers = find(objs, "Deployment", DEPLOYMENT)["spec"]["template"]["spec"]["containers"]
    next(c for c in containers if c["name"] == CONTAINER)["image"] = image


def set_local_port(objs: list[Manifest], port: int) -> None:
    """The aggregator dials ``localhost:<APIService port>``; the Service says the same for readers."""
    find(objs, "APIService", APISERVICE)["spec"]["service"]["port"] = port
    for p in find(objs, "Service", SERVICE)["spec"]["ports"]:
        p["port"] = port


def apiservice_port(objs: list[Manifest]) -> int:
    return int(find(objs, "APIService", APISERVICE)["spec"]["service"]["port"])


def tls_secret(name: str, certs: tls.CertDir, ca: str, leaf: str) -> Manifest:
    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "labels": {"app.kubernetes.io/name": "vc-apiserver", "app.kubernetes.io/part-of": "kosmos"}},
            "data": {"ca.crt": b64(certs.crt(ca)), "tls.crt": b64(certs.crt(leaf)), "tls.key": b64(certs.key(leaf))}}


def secret_stubs() -> list[Manifest]:
    """The Secrets by name only: enough to delete them."""
    return [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NAMESPACE}}
            for name in SECRETS]


def install_order(objs: Iterable[Manifest]) -> list[Manifest]:
    """Namespace first (everything else lives in it), Secrets before the pods that mount them,
    APIService last (register a backend that exists)."""
    rank = {"Namespace": 0, "Secret": 1, "APIService": 3}
    return sorted(objs, key=lambda o: rank.get(o["kind"], 2))


def render(kubectl: Kubectl, mode: Mode, certs: tls.CertDir | None = None, port: int | None = None,
           image: str | None = None) -> list[Manifest]:
    """The manifests one installation applies. Without ``certs``: no Secrets and no caBundle."""
    objs = kustomize(kubectl, mode)
    if mode == "local" and port is not None:
        set_local_port(objs, port)
    if image and mode == "cluster":
        set_image(objs, image)
    if certs is not None:
        set_ca_bundle(objs, certs.ca_bundle)
        if mode == "cluster":
            objs += [tls_secret(name, certs, ca, leaf) for name, (ca, leaf) in SECRETS.items()]
    return install_order(objs)


def to_yaml(objs: Iterable[Manifest]) -> str:
    return yaml.safe_dump_all(objs, sort_keys=False, explicit_start=True)
