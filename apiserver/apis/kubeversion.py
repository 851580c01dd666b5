"""The Kubernetes versions a tenant control plane may run, and the moves between them that kube's
version-skew policy allows.

``spec.kubernetesVersion`` names a version the server offers (``--kubernetes-versions``): a full one
(``v1.35.4``, or ``1.35.4``) or a minor (``1.34``, ``v1.34``), which resolves to the newest patch of that
minor the server has. Unset, a new cluster is built at the server's newest and then keeps what it runs
(``status.kubernetesVersion``), so that a server offering a newer version later upgrades nobody by surprise.

A running cluster moves one minor at a time, and never to a minor below the one its data was written with
(``status.kubernetesVersion``): kube-apiserver supports neither a skipped minor nor a downgrade of its
storage. Patches of one minor may go either way. Everything here is pure: the registry asks it at
admission, the reconciler when it decides to upgrade.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from apiserver.machinery.errors import (
    FIELD_VALUE_FORBIDDEN,
    FIELD_VALUE_INVALID,
    FIELD_VALUE_NOT_SUPPORTED,
    Cause,
)
from apiserver.machinery.golang import go_quote

__all__ = ["FIELD", "FIELD_NAME", "PATTERN", "Offered", "Version", "kubelet_errors", "kubelet_newer", "move_errors",
           "parse"]

FIELD_NAME = "kubernetesVersion"
FIELD = f"spec.{FIELD_NAME}"
# What the schema accepts (OpenAPI ``pattern``); whether the server offers it is asked at admission.
PATTERN = r"^v?1\.[0-9]+(\.[0-9]+)?$"
_VERSION = re.compile(PATTERN)


@dataclass(frozen=True, order=True)
class Version:
    """``v1.<minor>.<patch>``; ``patch`` None for a minor that is yet to be resolved."""

    minor: int
    patch: int | None = None

    def __str__(self) -> str:
        return f"v1.{self.minor}" + ("" if self.patch is None else f".{self.patch}")

    @property
    def minor_text(self) -> str:
        return f"1.{self.minor}"


def parse(value: Any) -> Version | None:
    """The version ``value`` names, or None when it names none (the schema says why)."""
    if not isinstance(value, str) or not _VERSION.match(value):
        return None
    parts = value.lstrip("v").split(".")
    return Version(int(parts[1]), int(parts[2]) if len(parts) == 3 else None)


@dataclass(frozen=True)
class Offered:
    """The versions this server runs tenants at, newest first."""

    versions: tuple[Version, ...]

    @classmethod
    def of(cls, values: Iterable[str]) -> Offered:
        """From ``--kubernetes-versions``; raises ValueError for one that is not a full version."""
        versions = []
        for value in values:
            version = parse(value)
            if version is None or version.patch is None:
                raise ValueError(f"{value!r} is not a Kubernetes version such as v1.35.4")
            versions.append(version)
        if not versions:
            raise ValueError("no Kubernetes version is offered")
        return cls(tuple(sorted(set(versions), reverse=True)))

    @property
    def newest(self) -> Version:
        return self.versions[0]

    def resolve(self, value: Any) -> Version | None:
        """The full version ``value`` names: itself when offered, a minor's newest offered patch; None when
        the server has no such version (an unset value is the newest)."""
        if value in (None, ""):
            return self.newest
        wanted = parse(value)
        if wanted is None:
            return None
        for version in self.versions:
            if version.minor == wanted.minor and wanted.patch in (None, version.patch):
                return version
        return None

    def names(self) -> list[str]:
        """What may be written, for messages: each minor, then each full version."""
        minors = dict.fromkeys(v.minor_text for v in self.versions)
        return [*minors, *(str(v) for v in self.versions)]


def move_errors(offered: Offered, value: Any, running: str | None) -> list[Cause]:
    """Why ``spec.kubernetesVersion`` may not be ``value`` for a cluster whose data was last written by
    ``running`` (None: a new cluster): a version the server does not offer, a skipped minor, a minor
    downgrade."""
    target = offered.resolve(value)
    if target is None:
        supported = ", ".join(go_quote(v) for v in offered.names())
        return [Cause(FIELD_VALUE_NOT_SUPPORTED, f"Unsupported value: {go_quote(str(value))}: supported values: "
                                                 f"{supported}", FIELD)]
    current = parse(running) if running else None
    if current is None or target.minor == current.minor:
        return []
    if target.minor < current.minor:
        return [Cause(FIELD_VALUE_FORBIDDEN, f"Forbidden: may not go below {current.minor_text}: the cluster's "
                                             f"data was written by {running}, and Kubernetes does not support "
                                             f"downgrading it a minor; stay on {current.minor_text}"
                                             f"{_or_next(offered, current)}", FIELD)]
    if target.minor > current.minor + 1:
        step = Version(current.minor + 1)
        return [Cause(FIELD_VALUE_FORBIDDEN, f"Forbidden: may not skip a minor: the cluster runs {running}, so "
                                             f"the next step is {step.minor_text}"
                                             f"{'' if offered.resolve(step.minor_text) else ' (not offered here)'}"
                                             f", then {target.minor_text}", FIELD)]
    return []


def _or_next(offered: Offered, current: Version) -> str:
    nxt = offered.resolve(Version(current.minor + 1).minor_text)
    return f" or upgrade to {nxt.minor_text}" if nxt is not None else ""


def kubelet_newer(kubelet: str, tenant: Version | None) -> bool:
    """Whether a kubelet of version ``kubelet`` is of a newer minor than ``tenant`` (kube's skew policy: a kubelet is
    never newer than its apiserver; patches of one minor may differ either way). An unknown version says no."""
    version = parse(kubelet.split("+")[0].split("-")[0])
    return version is not None and tenant is not None and version.minor > tenant.minor


def kubelet_errors(target: Version, kubelets: Mapping[str, str]) -> list[Cause]:
    """A promoted node's kubelet may not be newer than its tenant's apiserver: ``kubelets`` is node name to
    kubelet version."""
    newer = sorted(name for name, version in kubelets.items() if kubelet_newer(version, target))
    if not newer:
        return []
    listed = ", ".join(f"{name} ({kubelets[name]})" for name in newer)
    return [Cause(FIELD_VALUE_INVALID, f"Invalid value: {go_quote(str(target))}: a node's kubelet may not be newer "
                                       f"than its tenant's apiserver, and these promoted nodes run newer kubelets: "
                                       f"{listed}", FIELD)]
