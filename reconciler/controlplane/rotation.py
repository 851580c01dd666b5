"""Rotating a tenant's client CA and service-account key: when each next step of :mod:`certs.rotation`
may be taken.

Who may update a VirtualCluster asks for one with annotations (:mod:`apiserver.apis.rotation`).
A step is taken only once the last one is in force: the runtime has every component running from the
PKI as it is now (:meth:`reconciler.runtime.base.ControlPlaneRuntime.rolled_out`), and for the client CA
the tenant apiserver is seen to accept a certificate of the new CA (or to refuse one of the old).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass

from apiserver.apis.rotation import ANNOTATIONS, NAMES
from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient, access_from_pem
from apiserver.machinery.jsonutil import Obj
from apiserver.machinery.timefmt import now_rfc3339, rfc3339, time_of
from certs import pki as pkilib
from certs import rotation
from certs.rotation import CLIENT_CA, COMPLETING, PREPARED, PREPARING, SERVICE_ACCOUNT_KEY
from certs.tenant import TenantPki

__all__ = ["Rotating", "Rotations", "Step", "status_of"]

PROBE_USER = "kosmos:rotation-probe"
# Tokens a kubelet holds are refreshed at 80% of their life (an hour by default), so an hour after the new
# key signs, no pod presents one of the old key.
DEFAULT_OVERLAP = 3600.0
STEP_POLL = 1.0  # seconds between two looks at whether a step is in force


@dataclass(frozen=True)
class Step:
    """What one pass did: the PKI to store, and the Event that says so."""

    files: dict[str, bytes]
    reason: str
    message: str
    finished_client_ca: bool = False  # the old client CA is trusted no more: what it signed is dead


@dataclass(frozen=True)
class Rotating:
    """Where a tenant's rotations stand: ``status.credentials``, and when to look again (None: nothing to
    wait for)."""

    status: Obj
    next_in: float | None


@dataclass
class Rotations:
    """Takes the next step of each rotation a tenant has asked for, at most one per pass."""

    overlap: float = DEFAULT_OVERLAP  # seconds the old service-account key verifies after the new one signs

    def asked(self, vc: VirtualCluster, pki: TenantPki) -> bool:
        """Whether a rotation was ever asked for or is under way: every other tenant costs nothing here."""
        annotations = vc.meta.annotations
        return (any(key in annotations for keys in ANNOTATIONS.values() for key in keys)
                or rotation.STATE_FILE in pki.files)

    def pending(self, vc: VirtualCluster, pki: TenantPki) -> bool:
        """Whether a rotation is under way or asked for anew: only then is the runtime asked whether the
        last step is in force (on the pods runtime, a look at the host)."""
        for kind, (start_key, _) in ANNOTATIONS.items():
            state = rotation.state_of(pki.files, kind)
            start = vc.meta.annotations.get(start_key)
            if state.in_flight or (start and start != state.start_request):
                return True
        return False

    def progress(self, pki: TenantPki) -> Rotating:
        in_flight = any(rotation.state_of(pki.files, kind).in_flight for kind in rotation.KINDS)
        waiting = self.next_in(pki)
        return Rotating(status_of(pki), waiting if waiting else (STEP_POLL if in_flight else None))

    def next_in(self, pki: TenantPki) -> float | None:
        """Seconds until a waiting step may be taken (the overlap ending), None when none waits."""
        state = rotation.state_of(pki.files, SERVICE_ACCOUNT_KEY)
        if state.phase != COMPLETING or state.step != "wait":
            return None
        prepared = time_of(state.prepared)
        if prepared is None:
            return 0.0
        return max((prepared - dt.datetime.now(dt.UTC)).total_seconds() + self.overlap, 0.0)

    async def advance(self, vc: VirtualCluster, pki: TenantPki, endpoint: str, rolled_out: bool,
                      in_place: bool = False) -> Step | None:
        """The next step of the first rotation that can take one; ``rolled_out``: the runtime runs every
        component from ``pki`` as it is; ``in_place``: it never runs two apiservers at once."""
        for kind in rotation.KINDS:
            step = await self._advance(kind, vc, pki, endpoint, rolled_out, in_place)
            if step is not None:
                return step
        return None

    async def _advance(self, kind: str, vc: VirtualCluster, pki: TenantPki, endpoint: str,
                       rolled_out: bool, in_place: bool) -> Step | None:
        files, name = pki.files, NAMES[kind]
        state = rotation.state_of(files, kind)
        start_key, complete_key = ANNOTATIONS[kind]
        start, complete = vc.meta.annotations.get(start_key), vc.meta.annotations.get(complete_key)
        now = now_rfc3339()
        if not state.in_flight:
            if start and time_of(start) is not None and start != state.start_request:
                what = "both are trusted, the current one signs until the new one is trusted everywhere"
                started = await asyncio.to_thread(rotation.start, files, kind, start, now)
                if kind == SERVICE_ACCOUNT_KEY and in_place:  # one apiserver at a time: it may sign at once
                    started, what = rotation.sign(started, kind, now), "both verify, the new one signs"
                return Step(started, "RotationStarted", f"{name} rotation started: a new one was made; {what}")
            return None
        if not rolled_out:
            return None
        if state.phase == PREPARING:
            if kind == CLIENT_CA:
                if await _answer(pki, "client-ca-next", endpoint) != 200:
                    return None
                return Step(rotation.sign(files, kind, now), "RotationPrepared",
                            f"{name} rotation prepared: credentials are issued by the new CA; those of the old one "
                            f"keep working until the rotation is completed")
            if state.step == "trust":
                return Step(rotation.sign(files, kind, now), "RotationSigning",
                            f"{name} rotation: every apiserver verifies both keys; the new key signs from now on")
            return Step(rotation.prepared(files, kind, now), "RotationPrepared",
                        f"{name} rotation prepared: new tokens carry the new key; tokens of the old one keep "
                        f"working until the rotation is completed")
        if state.phase == PREPARED:
            if complete and _later(complete, state.start_request):
                step = rotation.complete(files, kind, complete)
                if kind == CLIENT_CA:
                    return Step(step, "RotationCompleting", f"{name} rotation completing: the old CA is no "
                                "longer trusted")
                until = _after(state.prepared, self.overlap)
                return Step(step, "RotationCompleting",
                            f"{name} rotation completing: the old key is dropped at {until}, once every token a "
                            f"kubelet holds has been refreshed with the new one")
            return None
        if state.phase == COMPLETING:
            if kind == CLIENT_CA:
                if await _answer(pki, "client-ca-previous", endpoint) != 401:
                    return None
                return Step(rotation.finish(files, kind, now), "RotationCompleted",
                            f"{name} rotation completed: only credentials of the new CA work",
                            finished_client_ca=True)
            if state.step == "wait":
                if self.next_in(pki):
                    return None
                return Step(rotation.drop(files), "RotationCompleting",
                            f"{name} rotation completing: the old key no longer verifies")
            return Step(rotation.finish(files, kind, now), "RotationCompleted",
                        f"{name} rotation completed: only the new key signs and verifies")
        return None


def status_of(pki: TenantPki) -> Obj:
    """``status.credentials``: where each rotation stands, for those ever started."""
    out = {kind: rotation.state_of(pki.files, kind).status() for kind in rotation.KINDS}
    return {"rotation": {k: v for k, v in out.items() if v}}


def _later(a: str, b: str) -> bool:
    ta, tb = time_of(a), time_of(b)
    return ta is not None and (tb is None or ta > tb)


def _after(stamp: str, seconds: float) -> str:
    moment = time_of(stamp) or dt.datetime.now(dt.UTC)
    return rfc3339(moment + dt.timedelta(seconds=seconds))


async def _answer(pki: TenantPki, ca: str, endpoint: str) -> int | None:
    """How the tenant apiserver answers a client certificate of CA ``ca`` (a stem of the PKI): 200 where it
    trusts the CA, 401 where it does not; None without an answer. A fresh connection, a throwaway
    certificate."""
    if f"{ca}.key" not in pki.files:
        return None
    pair = pkilib.KeyPair(pki.cert(ca), pkilib.load_key(pki.files[f"{ca}.key"]))
    probe = await asyncio.to_thread(pkilib.new_leaf, pair, PROBE_USER,
                                    not_after=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5))
    client = KubeClient(access_from_pem(endpoint, pki.files["ca.crt"], probe.cert_pem, probe.key_pem), timeout=5)
    try:
        await client.request("GET", "/apis")
        return 200
    except HostError as e:
        return e.code
    except HostUnavailable:
        return None
    finally:
        await client.close()

