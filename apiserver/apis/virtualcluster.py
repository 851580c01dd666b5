"""A VirtualCluster as the code reads it: thin, read-only views over the decoded object.

``VirtualCluster(obj)`` wraps the dict as it is, like kopf's ``_cogs/structs/bodies.py``: nothing is
copied and nothing written, so making one costs an attribute. ``vc.meta``, ``vc.spec`` and
``vc.status`` read their section, a missing or null one (or one that is not an object) reading as
empty, and an absent field reads as its zero value ('', None, [], False; a generation of 1). What a
rule decides is asked of the module that holds the rule (:mod:`.conditions`, :mod:`.hibernation`,
:mod:`.sharedslice`, :mod:`.compute`), never decided again here. ``.raw`` is the dict itself, for
what takes one (the registry, the runtime, events).

Writes do not go through a view: a new status is built as a dict (from ``vc.status.raw``) and
written through the registry.

    vc = VirtualCluster(obj)
    vc.meta.uid, vc.meta.generation, vc.meta.deletion_timestamp
    vc.spec.slice, vc.spec.hibernation.after_inactivity
    vc.status.phase, vc.status.is_true(CONTROL_PLANE_READY), vc.status.endpoint
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from apiserver.apis import conditions as conds
from apiserver.apis import hibernation
from apiserver.apis.compute import asks_for_compute, requests_nodes
from apiserver.apis.hibernation import HibernationSpec, read_spec
from apiserver.apis.sharedslice import shared_slice
from apiserver.machinery.jsonutil import Obj
from apiserver.machinery.timefmt import time_of

__all__ = ["Meta", "Spec", "Status", "VirtualCluster"]


def _object(value: Any) -> Obj:
    """``value`` when it is an object, else an empty one of its own (writing to it reaches nothing)."""
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


class _View:
    """A section of the object (or the object itself), held, not copied."""

    __slots__ = ("_raw",)

    def __init__(self, raw: Obj) -> None:
        self._raw = raw

    @property
    def raw(self) -> Obj:
        """The dict this view reads (the object's own; an empty one where the section is missing)."""
        return self._raw

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._raw!r})"


class Meta(_View):
    """``metadata``."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return _text(self._raw.get("name"))

    @property
    def namespace(self) -> str:
        return _text(self._raw.get("namespace"))

    @property
    def uid(self) -> str:
        return _text(self._raw.get("uid"))

    @property
    def key(self) -> str:
        """``namespace/name``: how a node's claim, its node agent and the logs name the VirtualCluster."""
        return f"{self.namespace}/{self.name}"

    @property
    def resource_version(self) -> str:
        return _text(self._raw.get("resourceVersion"))

    @property
    def generation(self) -> int:
        """1 when absent: the server sets it to 1 on create and moves it with every change of the spec."""
        generation = self._raw.get("generation")
        return int(generation) if generation is not None else 1

    @property
    def deletion_timestamp(self) -> str | None:
        """When the object was asked to be deleted (RFC 3339), or None: it is not being deleted."""
        return self._raw.get("deletionTimestamp") or None

    @property
    def finalizers(self) -> Sequence[str]:
        return _list(self._raw.get("finalizers"))

    @property
    def labels(self) -> Mapping[str, str]:
        return _object(self._raw.get("labels"))

    @property
    def annotations(self) -> Mapping[str, str]:
        return _object(self._raw.get("annotations"))


class Spec(_View):
    """``spec``: what the user asks for."""

    __slots__ = ()

    @property
    def slice(self) -> dict[str, str] | None:
        """The slice of the shared host asked for (resource → quantity), or None
        (:func:`apiserver.apis.sharedslice.shared_slice`)."""
        return shared_slice(self._raw)

    @property
    def requests_nodes(self) -> bool:
        """Whether any host node is asked for (:func:`apiserver.apis.compute.requests_nodes`)."""
        return requests_nodes(self._raw)

    @property
    def asks_for_compute(self) -> bool:
        """Host nodes or a shared slice (:func:`apiserver.apis.compute.asks_for_compute`)."""
        return asks_for_compute(self._raw)

    @property
    def hibernation(self) -> HibernationSpec:
        """``spec.hibernation`` with its defaults (:func:`apiserver.apis.hibernation.read_spec`)."""
        return read_spec(self._raw.get("hibernation"))

    @property
    def backup(self) -> Obj | None:
        """``spec.backup`` as given, or None (its schedule is read by ``reconciler.backup.schedule``)."""
        backup = self._raw.get("backup")
        return backup if isinstance(backup, dict) else None

    @property
    def restore_from(self) -> Obj | None:
        """``spec.restoreFrom`` (``virtualCluster``, ``snapshot``), or None."""
        source = self._raw.get("restoreFrom")
        return source if isinstance(source, dict) else None

    @property
    def external_ip(self) -> str:
        """``externalIP``: the address clients reach the tenant apiserver at ('' when unset, as Kosmos spells it)."""
        return _text(self._raw.get("externalIP"))

    @property
    def external_ips(self) -> list[str]:
        """``externalIP`` then ``externalIps``: the addresses, beyond the host's, the tenant apiserver is
        reached at (its serving certificate names them)."""
        single = self.external_ip
        return [*([single] if single else []), *_list(self._raw.get("externalIps"))]

    @property
    def force_destroy(self) -> bool:
        """``kubeInKubeConfig.forceDestroy``: promote nodes without draining their host pods."""
        return bool(_object(self._raw.get("kubeInKubeConfig")).get("forceDestroy"))


class Status(_View):
    """``status``: what the reconciler last recorded."""

    __slots__ = ()

    @property
    def phase(self) -> str:
        """'' before the reconciler has accepted the object."""
        return _text(self._raw.get("phase"))

    @property
    def reason(self) -> str:
        return _text(self._raw.get("reason"))

    @property
    def message(self) -> str:
        return _text(self._raw.get("message"))

    @property
    def conditions(self) -> list[conds.Condition]:
        return _list(self._raw.get("conditions"))

    def condition(self, type_: str) -> conds.Condition | None:
        """The condition of ``type_`` (:mod:`apiserver.apis.resource`'s condition types), or None."""
        return conds.find_condition(self._raw.get("conditions"), type_)

    def is_true(self, type_: str) -> bool:
        return conds.is_true(self._raw.get("conditions"), type_)

    def true_since(self, type_: str) -> dt.datetime | None:
        """When the condition of ``type_`` last turned True, if it is True and says when."""
        return conds.true_since(self._raw.get("conditions"), type_)

    @property
    def endpoint(self) -> str:
        """``controlPlaneEndpoint``: the tenant apiserver's URL, once it has been built."""
        return _text(self._raw.get("controlPlaneEndpoint"))

    @property
    def nodes(self) -> list[Obj]:
        """``status.nodes``: the promoted host nodes, and a shared slice's virtual node (``shared: true``)."""
        return _list(self._raw.get("nodes"))

    @property
    def promoted_nodes(self) -> list[Obj]:
        """The host nodes promoted whole (every entry of :attr:`nodes` but a shared slice's)."""
        return [n for n in self.nodes if isinstance(n, dict) and not n.get("shared")]

    @property
    def shared_resources(self) -> Obj | None:
        """``sharedResources``: the shared slice's host namespace, capacity and use, or None."""
        return _object(self._raw.get("sharedResources")) or None

    @property
    def backups(self) -> list[Obj]:
        """``status.backups``: the snapshots kept, oldest first."""
        return _list(self._raw.get("backups"))


class VirtualCluster(_View):
    """A VirtualCluster, read: ``VirtualCluster(obj).status.phase``."""

    __slots__ = ()

    @property
    def meta(self) -> Meta:
        return Meta(_object(self._raw.get("metadata")))

    @property
    def spec(self) -> Spec:
        return Spec(_object(self._raw.get("spec")))

    @property
    def status(self) -> Status:
        return Status(_object(self._raw.get("status")))

    @property
    def asleep(self) -> str:
        """Why the cluster is hibernated or hibernating (:data:`~apiserver.apis.hibernation.SPEC` or
        :data:`~apiserver.apis.hibernation.INACTIVE`: the Hibernated condition's reason while it is True), or ''."""
        cond = self.status.condition(hibernation.CONDITION)
        return str(cond.get("reason") or hibernation.SPEC) if cond is not None and cond.get("status") == "True" else ""

    @property
    def wake_requested_at(self) -> dt.datetime | None:
        """The time in :data:`~apiserver.apis.hibernation.WAKE_ANNOTATION`, if it holds one."""
        return time_of(self.meta.annotations.get(hibernation.WAKE_ANNOTATION))

    @property
    def wake_pending(self) -> bool:
        """Hibernated for inactivity, and asked to wake since it went to sleep (a request at least as
        recent as the Hibernated condition's transition)."""
        cond = self.status.condition(hibernation.CONDITION)
        if self.asleep != hibernation.INACTIVE or cond is None:
            return False
        asked, slept = self.wake_requested_at, time_of(cond.get("lastTransitionTime"))
        return asked is not None and (slept is None or asked >= slept)

    @property
    def waking(self) -> bool:
        """Hibernating, hibernated or waking: a control plane that starts now starts from its kept data."""
        return self.status.phase in (*hibernation.HIBERNATION_PHASES, "Waking")
