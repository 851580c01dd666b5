"""The manifests, rendered from the kustomize directories in ``deploy/``: the one source of truth.

``kubectl kustomize deploy/<mode>`` builds them exactly as a platform team's overlay sees them;
the installer then fills in only what belongs to one installation: the CA bundle, the image,
the local port, and the TLS Secrets. Each of those is one small function over the built list.

With ``--node-joiner agent`` the node agent comes along: in-cluster ``deploy/cluster-agent``
(``cluster`` + ``agent`` + vc-apiserver's joiner flags), locally ``local`` + ``agent`` (the local
server takes the ``--node-agent-*`` flags itself, with the files of the certificate directory).
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
Joiner = Literal["kwok", "agent"]
JOINERS: tuple[Joiner, ...] = ("kwok", "agent")

DEPLOY = Path(__file__).resolve().parent / "deploy"
NAMESPACE = tls.NAMESPACE
SERVICE = tls.SERVICE
APISERVICE = "v1alpha1.kosmos.io"
DEPLOYMENT = "vc-apiserver"
CONTAINER = "vc-apiserver"
AGENT_NAMESPACE = AGENT_DAEMONSET = "kosmos-node-agent"
AGENT_CONTAINER = "installer"

# Secret name → (its CA, the leaf it carries); deploy/cluster mounts them by these names.
SECRETS: dict[str, tuple[str, str]] = {
    "vc-apiserver-serving": (tls.SERVING_CA, tls.SERVING),
    "vc-apiserver-etcd-server": (tls.ETCD_CA, tls.ETCD_SERVER),
    "vc-apiserver-etcd-client": (tls.ETCD_CA, tls.ETCD_CLIENT),
}
# With the node agent: (namespace, Secret name) → (its ca.crt, its leaf). Each side's ca.crt is the CA of
# the other side: the agents trust vc-apiserver's client CA, vc-apiserver the agents' serving CA.
AGENT_SECRET = (AGENT_NAMESPACE, "kosmos-node-agent-tls")
AGENT_CLIENT_SECRET = (NAMESPACE, "vc-apiserver-node-agent-client")
AGENT_SECRETS: dict[tuple[str, str], tuple[str, str]] = {
    AGENT_SECRET: (tls.AGENT_CLIENT_CA, tls.AGENT_SERVING),
    AGENT_CLIENT_SECRET: (tls.AGENT_CA, tls.AGENT_CLIENT),
}
ENCRYPTION_SECRET = "vc-apiserver-encryption-key"  # in NAMESPACE; key tls.ENCRYPTION_KEY


def directories(mode: Mode, joiner: Joiner = "kwok") -> list[str]:
    """The kustomize directories under deploy/ that one installation is built from."""
    if joiner == "agent":
        return ["cluster-agent"] if mode == "cluster" else [mode, "agent"]
    return [mode]


def kustomize(kubectl: Kubectl, directory: str | Path) -> list[Manifest]:
    """One of deploy/'s directories by name, or any kustomize directory by path (an overlay)."""
    path = directory.resolve() if isinstance(directory, Path) else DEPLOY / directory
    out = kubectl.run("kustomize", str(path)).stdout
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
    """vc-apiserver's image, and the node agent's (its installer's, which the agent runs) when present."""
    containers = find(objs, "Deployment", DEPLOYMENT)["spec"]["template"]["spec"]["containers"]
    next(c for c in containers if c["name"] == CONTAINER)["image"] = image
    for obj in objs:
        if obj["kind"] == "DaemonSet" and obj["metadata"]["name"] == AGENT_DAEMONSET:
            for c in obj["spec"]["template"]["spec"]["containers"]:
                if c["name"] == AGENT_CONTAINER:
                    c["image"] = image


def set_local_port(objs: list[Manifest], port: int) -> None:
    """The aggregator dials ``localhost:<APIService port>``; the Service says the same for readers."""
    find(objs, "APIService", APISERVICE)["spec"]["service"]["port"] = port
    for p in find(objs, "Service", SERVICE)["spec"]["ports"]:
        p["port"] = port


def apiservice_port(objs: list[Manifest]) -> int:
    return int(find(objs, "APIService", APISERVICE)["spec"]["service"]["port"])


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _secret(namespace: str, name: str, kind: str, data: dict[str, str]) -> Manifest:
    app = "kosmos-node-agent" if namespace == AGENT_NAMESPACE else "vc-apiserver"
    return {"apiVersion": "v1", "kind": "Secret", "type": kind,
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": "kosmos"}},
            "data": data}


def tls_secret(name: str, certs: tls.CertDir, ca: str, leaf: str, namespace: str = NAMESPACE) -> Manifest:
    return _secret(namespace, name, "kubernetes.io/tls", {
        "ca.crt": _b64(certs.crt(ca)), "tls.crt": _b64(certs.crt(leaf)), "tls.key": _b64(certs.key(leaf))})


def encryption_secret(certs: tls.CertDir) -> Manifest:
    return _secret(NAMESPACE, ENCRYPTION_SECRET, "Opaque", {tls.ENCRYPTION_KEY: _b64(certs.path / tls.ENCRYPTION_KEY)})


def agent_secrets(mode: Mode, certs: tls.CertDir) -> list[Manifest]:
    """The agents' TLS Secret; in-cluster also vc-apiserver's client certificate and encryption key."""
    objs = [tls_secret(AGENT_SECRET[1], certs, *AGENT_SECRETS[AGENT_SECRET], namespace=AGENT_NAMESPACE)]
    if mode == "cluster":
        objs += [tls_secret(AGENT_CLIENT_SECRET[1], certs, *AGENT_SECRETS[AGENT_CLIENT_SECRET]),
                 encryption_secret(certs)]
    return objs


def secret_stubs() -> list[Manifest]:
    """Every Secret the installer may create, by name only: enough to delete them."""
    names = [*((NAMESPACE, name) for name in SECRETS), *AGENT_SECRETS, (NAMESPACE, ENCRYPTION_SECRET)]
    return [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace}}
            for namespace, name in names]


def install_order(objs: Iterable[Manifest]) -> list[Manifest]:
    """Namespace first (everything else lives in it), Secrets before the pods that mount them,
    APIService last (register a backend that exists)."""
    rank = {"Namespace": 0, "Secret": 1, "APIService": 3}
    return sorted(objs, key=lambda o: rank.get(o["kind"], 2))


def render(kubectl: Kubectl, mode: Mode, certs: tls.CertDir | None = None, port: int | None = None,
           image: str | None = None, joiner: Joiner = "kwok", overlay: Path | None = None) -> list[Manifest]:
    """The manifests one installation applies. Without ``certs``: no Secrets and no caBundle. An
    ``overlay`` (a platform team's kustomize directory over deploy/'s) is built instead of deploy/'s own;
    the installer fills in the same things."""
    built = [overlay] if overlay is not None else directories(mode, joiner)
    objs = [obj for directory in built for obj in kustomize(kubectl, directory)]
    if mode == "local" and port is not None:
        set_local_port(objs, port)
    if image and mode == "cluster":
        set_image(objs, image)
    if certs is not None:
        set_ca_bundle(objs, certs.ca_bundle)
        if mode == "cluster":
            objs += [tls_secret(name, certs, ca, leaf) for name, (ca, leaf) in SECRETS.items()]
        if joiner == "agent":
            objs += agent_secrets(mode, certs)
    return install_order(objs)


def to_yaml(objs: Iterable[Manifest]) -> str:
    return yaml.safe_dump_all(objs, sort_keys=False, explicit_start=True)
