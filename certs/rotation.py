"""Two-phase rotation of a tenant's client CA and service-account key, as pure steps over its PKI.

A rotation is what a platform team does when every credential of a kind must be replaced: a CA key or
a signing key may have leaked, or policy says so. Each kind moves through the phases Gardener's users
know, and the PKI carries where it stands (``rotation.json``), so the keys and the phase are stored
together and a server that restarts mid-rotation goes on from the same step:

* client CA (the CA of the credentials the ``kubeconfig`` subresource issues; the components' own
  certificates are the cluster CA's and do not change):

  ``Preparing``  both CAs trusted, the old one still signs, until every tenant apiserver trusts the new;
  ``Prepared``   the new one signs, both trusted: credentials of either kind work;
  ``Completing`` only the new one trusted, until the tenant apiserver refuses the old;
  ``Completed``  the old one is gone.

* service-account key (``sa.key`` signs, ``sa.pub`` holds every key that verifies):

  ``Preparing``  step ``trust``: both verify, the old signs; then step ``sign``: the new signs;
  ``Prepared``   both verify: live tokens keep working, new ones carry the new key;
  ``Completing`` step ``wait``: until every token a kubelet holds has been refreshed; then step ``drop``:
                 only the new key verifies, until every apiserver runs with that;
  ``Completed``.

Which step comes next, and when, is the reconciler's (:mod:`reconciler.controlplane.rotation`); this
module only makes each step's files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from . import pki

__all__ = ["CLIENT_CA", "KINDS", "SERVICE_ACCOUNT_KEY", "State", "client_ca_bundle", "complete", "drop",
           "finish", "prepared", "sign", "start", "state_of", "verify_keys", "with_bundles"]

CLIENT_CA, SERVICE_ACCOUNT_KEY = "clientCA", "serviceAccountKey"
KINDS = (CLIENT_CA, SERVICE_ACCOUNT_KEY)
STATE_FILE = "rotation.json"
CLIENT_CA_CN = "kubernetes-client-ca"

PREPARING, PREPARED, COMPLETING, COMPLETED = "Preparing", "Prepared", "Completing", "Completed"


@dataclass(frozen=True)
class State:
    """Where one kind's rotation stands (all empty: never rotated)."""

    phase: str = ""
    step: str = ""  # within a phase, for the service-account key: trust, sign, wait, drop
    start_request: str = ""  # the annotation value that started it (one request starts one rotation)
    complete_request: str = ""
    initiated: str = ""  # RFC 3339
    prepared: str = ""
    completed: str = ""

    @property
    def in_flight(self) -> bool:
        return self.phase in (PREPARING, PREPARED, COMPLETING)

    def status(self) -> dict[str, str]:
        """As ``status.credentials.rotation.<kind>`` shows it."""
        out = {"phase": self.phase, "lastInitiationTime": self.initiated,
               "lastInitiationFinishedTime": self.prepared, "lastCompletionTime": self.completed}
        return {k: v for k, v in out.items() if v}


def _states(files: Mapping[str, bytes]) -> dict[str, dict[str, str]]:
    raw = files.get(STATE_FILE)
    return json.loads(raw) if raw else {}


def state_of(files: Mapping[str, bytes], kind: str) -> State:
    return State(**_states(files).get(kind, {}))


def _with_state(files: Mapping[str, bytes], kind: str, state: State) -> dict[str, bytes]:
    states = _states(files)
    states[kind] = {k: v for k, v in state.__dict__.items() if v}
    return with_bundles({**files, STATE_FILE: json.dumps(states, sort_keys=True).encode()})


def client_ca_bundle(files: Mapping[str, bytes]) -> bytes:
    """The CAs the tenant apiserver takes client certificates from: the cluster CA (its components, nodes,
    the server's own access), the client CA, and the one being rotated in or out while both must work."""
    phase = state_of(files, CLIENT_CA).phase
    names = ["ca.crt", "client-ca.crt"]
    if phase == PREPARING:
        names.append("client-ca-next.crt")
    if phase == PREPARED:
        names.append("client-ca-previous.crt")
    return b"".join(files[n] for n in names if n in files)


def verify_keys(files: Mapping[str, bytes]) -> bytes:
    """The public keys service-account tokens are verified with: the signing key's, and during a rotation
    the key it replaces or is to be replaced by (``sa.pub``)."""
    names = ["sa.key", "sa-next.key", "sa-previous.key"]
    return b"".join(pki.public_key_pem(pki.load_key(files[n])) for n in names if n in files)


def with_bundles(files: Mapping[str, bytes]) -> dict[str, bytes]:
    """The files, with the two derived from the others made again: what the apiserver trusts."""
    out = dict(files)
    if "client-ca.crt" in out:
        out["client-ca-bundle.crt"] = client_ca_bundle(out)
    if "sa.key" in out:
        out["sa.pub"] = verify_keys(out)
    return out


def start(files: Mapping[str, bytes], kind: str, request: str, now: str) -> dict[str, bytes]:
    """A new CA or key, trusted beside the current one, which still signs."""
    out = dict(files)
    if kind == CLIENT_CA:
        pair = pki.new_ca(CLIENT_CA_CN)
        out["client-ca-next.crt"], out["client-ca-next.key"] = pair.cert_pem, pair.key_pem
    else:
        out["sa-next.key"] = pki.key_pem(pki.new_key())
    step = "trust" if kind == SERVICE_ACCOUNT_KEY else ""
    return _with_state(out, kind, State(PREPARING, step, request, initiated=now))


def sign(files: Mapping[str, bytes], kind: str, now: str) -> dict[str, bytes]:
    """The new CA or key signs from now on; the old one is still trusted. The client CA is then Prepared;
    the service-account key stays Preparing (step ``sign``) until every apiserver signs with the new key,
    so no token one signs meets another that cannot verify it."""
    out = dict(files)
    if kind == CLIENT_CA:
        out["client-ca-previous.crt"], out["client-ca-previous.key"] = out["client-ca.crt"], out["client-ca.key"]
        out["client-ca.crt"], out["client-ca.key"] = out.pop("client-ca-next.crt"), out.pop("client-ca-next.key")
        return prepared(out, kind, now)
    state = state_of(files, kind)
    out["sa-previous.key"], out["sa.key"] = out["sa.key"], out.pop("sa-next.key")
    return _with_state(out, kind, State(PREPARING, "sign", state.start_request, initiated=state.initiated))


def prepared(files: Mapping[str, bytes], kind: str, now: str) -> dict[str, bytes]:
    """Both work; the new one signs."""
    state = state_of(files, kind)
    return _with_state(files, kind, State(PREPARED, "", state.start_request, initiated=state.initiated,
                                          prepared=now))


def complete(files: Mapping[str, bytes], kind: str, request: str) -> dict[str, bytes]:
    """Completion asked for: the client CA is no longer trusted from now on; the service-account key
    waits first (step ``wait``) for the tokens kubelets hold to be refreshed."""
    state = state_of(files, kind)
    step = "wait" if kind == SERVICE_ACCOUNT_KEY else ""
    return _with_state(files, kind, State(COMPLETING, step, state.start_request, request, state.initiated,
                                          state.prepared))


def drop(files: Mapping[str, bytes]) -> dict[str, bytes]:
    """The service-account key's old half is dropped: only the new key verifies."""
    state = state_of(files, SERVICE_ACCOUNT_KEY)
    out = {k: v for k, v in files.items() if k != "sa-previous.key"}
    return _with_state(out, SERVICE_ACCOUNT_KEY, State(COMPLETING, "drop", state.start_request,
                                                       state.complete_request, state.initiated, state.prepared))


def finish(files: Mapping[str, bytes], kind: str, now: str) -> dict[str, bytes]:
    """Completed: nothing of the old CA or key is left."""
    state = state_of(files, kind)
    gone = {"client-ca-previous.crt", "client-ca-previous.key"} if kind == CLIENT_CA else {"sa-previous.key"}
    out = {k: v for k, v in files.items() if k not in gone}
    return _with_state(out, kind, State(COMPLETED, "", state.start_request, state.complete_request,
                                        state.initiated, state.prepared, now))
