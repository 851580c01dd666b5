"""``kubectl vc``: VirtualClusters from kubectl, installed with the package as ``kubectl-vc``.

Every call goes through the ``kubectl`` on PATH with the caller's ``--kubeconfig``, ``--context`` and
``-n``, so the host's identity, RBAC and aggregator are exactly kubectl's. ``connect`` merges a
context whose user is an ``exec`` credential plugin (this very command's ``credential`` verb): kubectl
asks it for a fresh, short-lived credential through the ``kubeconfig`` subresource whenever the last
one expires, so access to the tenant lasts as long as the host grants it, and not longer than the
credential's lifetime after that.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import yaml

from certs.pki import load_cert

GROUP = "kosmos.io"
VERSION = "v1alpha1"
WAKE_ANNOTATION = "kosmos.io/wake-requested"
SNAPSHOT_ANNOTATION = "kosmos.io/snapshot-requested"
# what `kubectl vc rotate` names → the status's name of it (annotations kosmos.io/<name>-rotation-<step>)
ROTATIONS = {"client-ca": "clientCA", "service-account-key": "serviceAccountKey"}
CREDENTIAL_SECONDS = 900  # what `connect`'s exec plugin asks for: short-lived, renewed by kubectl when it expires
EXEC_API = "client.authentication.k8s.io/v1"


class PluginError(Exception):
    """One clear line for the user, and a non-zero exit."""


def _fail(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(1)


class Kubectl:
    """kubectl with the caller's host flags."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.kubeconfig: str | None = args.kubeconfig
        self.context: str | None = args.context
        self.namespace: str | None = args.namespace
        self.binary = shutil.which("kubectl") or _fail("kubectl is not on PATH")

    def flags(self, namespaced: bool = True) -> list[str]:
        out = []
        if self.kubeconfig:
            out += ["--kubeconfig", self.kubeconfig]
        if self.context:
            out += ["--context", self.context]
        if namespaced and self.namespace:
            out += ["-n", self.namespace]
        return out

    def run(self, *args: str, namespaced: bool = True, timeout: float = 60) -> str:
        proc = subprocess.run([self.binary, *self.flags(namespaced), *args], capture_output=True, text=True,
                              timeout=timeout)
        if proc.returncode != 0:
            lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
            last = lines[-1] if lines else f"kubectl {args[0]} failed ({proc.returncode})"
            raise PluginError(last.removeprefix("error: "))
        return proc.stdout

    def json(self, *args: str, namespaced: bool = True) -> Any:
        return json.loads(self.run(*args, "-o", "json", namespaced=namespaced))

    def current_namespace(self) -> str:
        if self.namespace:
            return self.namespace
        found = self.run("config", "view", "--minify", "-o", "jsonpath={..namespace}", namespaced=False).strip()
        return found or "default"

    def subresource(self, name: str, seconds: int | None = None) -> dict[str, Any]:
        """The kubeconfig the ``kubeconfig`` subresource mints for this caller."""
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{self.current_namespace()}/virtualclusters/{name}/kubeconfig"
        if seconds is not None:
            path += f"?expirationSeconds={seconds}"
        return dict(yaml.safe_load(self.run("get", "--raw", path, namespaced=False)))


# -- the verbs ------------------------------------------------------------------------------------------


def list_clusters(k: Kubectl, all_namespaces: bool) -> None:
    items = k.json("get", "virtualclusters", *(["-A"] if all_namespaces else []), namespaced=not all_namespaces)
    rows = [("NAMESPACE", "NAME", "PHASE", "NODES", "SLICE", "ENDPOINT")]
    for vc in items.get("items") or []:
        meta, spec, status = vc["metadata"], vc.get("spec") or {}, vc.get("status") or {}
        nodes = [n for n in status.get("nodes") or [] if not n.get("shared")]
        ready = sum(1 for n in nodes if n.get("phase") == "Ready")
        resources = (spec.get("promoteResources") or {}).get("resources") or {}
        sliced = (spec.get("promoteResources") or {}).get("resourcesMode", "Shared") == "Shared" and resources
        slice_text = ",".join(f"{k_}={v}" for k_, v in sorted(resources.items())) if sliced else "-"
        rows.append((meta["namespace"], meta["name"], status.get("phase") or "Pending", f"{ready}/{len(nodes)}",
                     slice_text, status.get("controlPlaneEndpoint") or "-"))
    _table(rows, "No VirtualClusters found.")


def wake(k: Kubectl, name: str) -> bool:
    """Wake a hibernated cluster (the spec's word, or the annotation for one asleep after inactivity);
    whether anything was asked."""
    vc = k.json("get", "virtualcluster", name)
    conditions = {c.get("type"): c for c in (vc.get("status") or {}).get("conditions") or []}
    asleep = conditions.get("Hibernated", {})
    if ((vc.get("spec") or {}).get("hibernation") or {}).get("hibernated"):
        k.run("patch", "virtualcluster", name, "--type", "merge", "-p", '{"spec":{"hibernation":{"hibernated":false}}}')
        return True
    if asleep.get("status") == "True":
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        k.run("annotate", "virtualcluster", name, f"{WAKE_ANNOTATION}={now}", "--overwrite")
        return True
    return False


def hibernate(k: Kubectl, name: str) -> None:
    k.run("patch", "virtualcluster", name, "--type", "merge", "-p", '{"spec":{"hibernation":{"hibernated":true}}}')


def snapshot(k: Kubectl, name: str) -> None:
    vc = k.json("get", "virtualcluster", name)
    if not (vc.get("spec") or {}).get("backup"):
        raise PluginError(f'virtualcluster "{name}" has no spec.backup: set one (its schedule and how many to keep) '
                          f"before asking for a snapshot")
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    k.run("annotate", "virtualcluster", name, f"{SNAPSHOT_ANNOTATION}={now}", "--overwrite")


def rotate(k: Kubectl, name: str, what: str, step: str, wait: float | None) -> str:
    """Ask for the next step of a rotation (the annotation the server acts on), and with ``wait`` seconds,
    wait until it is in force; returns the phase it is in."""
    kind = ROTATIONS[what]
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    before = _rotation(k.json("get", "virtualcluster", name), kind)
    if step == "complete" and before.get("phase") != "Prepared":
        raise PluginError(f'virtualcluster "{name}": its {what} rotation is {before.get("phase") or "not started"}; '
                          f"only a Prepared one can be completed")
    if step == "start" and before.get("phase") in ("Preparing", "Prepared", "Completing"):
        raise PluginError(f'virtualcluster "{name}": a {what} rotation is already {before["phase"]}')
    k.run("annotate", "virtualcluster", name, f"kosmos.io/{what}-rotation-{step}={now}", "--overwrite")
    goal = "Prepared" if step == "start" else "Completed"
    if wait is None:
        return before.get("phase") or "requested"
    deadline = time.monotonic() + wait
    while True:
        phase = _rotation(k.json("get", "virtualcluster", name), kind).get("phase", "")
        if phase == goal and (step == "complete" or phase != before.get("phase")):
            return phase
        if time.monotonic() > deadline:
            raise PluginError(f'virtualcluster "{name}": the {what} rotation is {phase or "not started"} after '
                              f"{wait:.0f}s, not yet {goal}")
        time.sleep(1)


def _rotation(vc: dict[str, Any], kind: str) -> dict[str, Any]:
    status = vc.get("status") or {}
    rotation: dict[str, Any] = ((status.get("credentials") or {}).get("rotation") or {}).get(kind) or {}
    return rotation


def _table(rows: list[tuple[str, ...]], empty: str) -> None:
    if len(rows) == 1:
        print(empty, file=sys.stderr)
        return
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def credentials(k: Kubectl, cluster: str | None) -> None:
    """The credentials issued in the namespace (all of them: a namespace admin's view), or with ``cluster``
    the caller's own for that cluster (the ``credentials`` subresource: anyone who may fetch a kubeconfig)."""
    if cluster is None:
        items = k.json("get", "virtualclustercredentials").get("items") or []
    else:
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{k.current_namespace()}/virtualclusters/{cluster}/credentials"
        items = json.loads(k.run("get", "--raw", path, namespaced=False)).get("items") or []
    rows = [("ID", "CLUSTER", "USER", "ISSUED", "EXPIRES", "LAST USED")]
    for c in sorted(items, key=lambda c: c["metadata"].get("creationTimestamp", "")):
        spec, status = c.get("spec") or {}, c.get("status") or {}
        rows.append((c["metadata"]["name"], spec.get("virtualCluster", "-"), spec.get("user", "-"),
                     c["metadata"].get("creationTimestamp", "-"), spec.get("expirationTimestamp", "-"),
                     status.get("lastUsedTime") or "-"))
    _table(rows, "No credentials found.")


def revoke(k: Kubectl, credential_id: str) -> None:
    k.run("delete", "virtualclustercredential", credential_id)


def exec_credential(k: Kubectl, name: str, seconds: int) -> dict[str, Any]:
    """An ExecCredential from a fresh credential of the subresource, expiring when it does."""
    config = k.subresource(name, seconds)
    user = config["users"][0]["user"]
    if "token" in user:  # an imported cluster's: a ServiceAccount token, its expiry in its claims
        claims = user["token"].split(".")[1]
        exp = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))["exp"]
        return {"apiVersion": EXEC_API, "kind": "ExecCredential",
                "status": {"token": user["token"], "expirationTimestamp": dt.datetime.fromtimestamp(
                    exp, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}}
    cert = base64.b64decode(user["client-certificate-data"])
    expires = load_cert(cert).not_valid_after_utc
    return {"apiVersion": EXEC_API, "kind": "ExecCredential",
            "status": {"clientCertificateData": cert.decode(),
                       "clientKeyData": base64.b64decode(user["client-key-data"]).decode(),
                       "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}}


def _user_kubeconfig(k: Kubectl) -> Path:
    if k.kubeconfig:
        return Path(k.kubeconfig)
    env = os.environ.get("KUBECONFIG", "")
    return Path(env.split(os.pathsep)[0]) if env else Path.home() / ".kube" / "config"


def _plugin_command() -> str:
    return shutil.which("kubectl-vc") or str(Path(sys.argv[0]).resolve())


def connect(k: Kubectl, name: str, timeout: float, switch: bool) -> str:
    """Wake it if it sleeps, wait until it is Ready, then merge a context for it into the user's kubeconfig
    (the one kubectl reads: --kubeconfig, else $KUBECONFIG's first file, else ~/.kube/config)."""
    namespace = k.current_namespace()
    if wake(k, name):
        print(f"waking virtualcluster {namespace}/{name}", file=sys.stderr)
    k.run("wait", f"virtualcluster/{name}", "--for=condition=Ready", f"--timeout={int(timeout)}s", timeout=timeout + 30)
    minted = k.subresource(name)  # the cluster's address and CA, as the subresource gives them
    cluster = dict(minted["clusters"][0]["cluster"])
    entry = f"{namespace}-{name}"
    args = ["credential", name, "-n", namespace]
    if k.kubeconfig:
        args += ["--kubeconfig", str(Path(k.kubeconfig).resolve())]
    if k.context:
        args += ["--context", k.context]
    user = {"exec": {"apiVersion": EXEC_API, "command": _plugin_command(), "args": args,
                     "interactiveMode": "Never", "provideClusterInfo": False}}
    path = _user_kubeconfig(k)
    config = (yaml.safe_load(path.read_text()) if path.exists() else None) or {
        "apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": []}

    def upsert(section: str, value: dict[str, Any]) -> None:
        kept = [e for e in config.get(section) or [] if e.get("name") != entry]
        config[section] = [*kept, {"name": entry, **value}]
    upsert("clusters", {"cluster": cluster})
    upsert("users", {"user": user})
    upsert("contexts", {"context": {"cluster": entry, "user": entry}})
    if switch:
        config["current-context"] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".kubectl-vc")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    os.replace(tmp, path)
    return entry


# -- the command line -----------------------------------------------------------------------------------


def _host_flags(default: Any) -> argparse.ArgumentParser:
    """kubectl's flags, accepted before the verb and after it (after it they must not reset what came
    before: their default there is SUPPRESS)."""
    flags = argparse.ArgumentParser(add_help=False)
    flags.add_argument("--kubeconfig", default=default, help="the host's kubeconfig, as kubectl's flag")
    flags.add_argument("--context", default=default, help="the host context, as kubectl's flag")
    flags.add_argument("-n", "--namespace", default=default,
                       help="the VirtualCluster's namespace (default: the context's)")
    return flags


def _parser() -> argparse.ArgumentParser:
    common = _host_flags(argparse.SUPPRESS)
    p = argparse.ArgumentParser(prog="kubectl vc", description="VirtualClusters from kubectl.",
                                parents=[_host_flags(None)])
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    ls = verbs.add_parser("list", parents=[common], help="VirtualClusters with phase, nodes, slice and endpoint")
    ls.add_argument("-A", "--all-namespaces", action="store_true", help="in every namespace")
    c = verbs.add_parser("connect", parents=[common], help="wake it if hibernated, wait until Ready, and merge a "
                                                           "context for it into your kubeconfig")
    c.add_argument("name")
    c.add_argument("--timeout", type=float, default=300, help="seconds to wait for Ready (default 300)")
    c.add_argument("--no-switch", action="store_true", help="do not make it the current context")
    for verb, text in (("hibernate", "stop its control plane, keeping its data, and return its nodes"),
                       ("wake", "start a hibernated one again"),
                       ("snapshot", "take a snapshot of its etcd now (spec.backup must be set)")):
        verbs.add_parser(verb, parents=[common], help=text).add_argument("name")
    creds = verbs.add_parser("credentials", parents=[common], help="credentials issued for VirtualClusters, and "
                                                                   "revoking one",
                             description="kubectl vc credentials: every credential issued in the namespace "
                                         "(needs list virtualclustercredentials). kubectl vc credentials NAME: "
                                         "yours for VirtualCluster NAME. kubectl vc credentials revoke ID: revoke "
                                         "one; the tenant refuses it within seconds.")
    creds.add_argument("words", nargs="*", metavar="NAME | revoke ID")
    rot = verbs.add_parser("rotate", parents=[common], help="rotate its client CA or service-account key, in two "
                                                          "steps: start, then complete",
                           description="start: a new CA or key is made and trusted beside the old; once Prepared "
                                       "both work and the new one signs. complete: the old one stops working "
                                       "(a service-account key after the server's overlap, which lets kubelets "
                                       "refresh their pods' tokens).")
    rot.add_argument("name")
    rot.add_argument("what", choices=sorted(ROTATIONS))
    rot.add_argument("step", choices=("start", "complete"))
    rot.add_argument("--wait", action="store_true", help="wait until it is Prepared (start) or Completed (complete)")
    rot.add_argument("--timeout", type=float, default=300, help="seconds --wait waits (default 300)")
    cred = verbs.add_parser("credential", parents=[common],
                            help="an ExecCredential for kubectl's exec plugin (what connect writes)")
    cred.add_argument("name")
    cred.add_argument("--expiration-seconds", type=int, default=CREDENTIAL_SECONDS)
    return p


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    k = Kubectl(args)
    try:
        if args.verb == "list":
            list_clusters(k, args.all_namespaces)
        elif args.verb == "connect":
            entry = connect(k, args.name, args.timeout, not args.no_switch)
            print(f'context "{entry}" written to {_user_kubeconfig(k)}' +
                  ("" if args.no_switch else '; switched to it (kubectl config use-context to go back)'))
        elif args.verb == "hibernate":
            hibernate(k, args.name)
            print(f"virtualcluster {args.name} hibernating")
        elif args.verb == "wake":
            print(f"virtualcluster {args.name} " + ("waking" if wake(k, args.name) else "is not hibernated"))
        elif args.verb == "snapshot":
            snapshot(k, args.name)
            print(f"virtualcluster {args.name}: snapshot requested (kubectl get vc {args.name} -o "
                  f"jsonpath='{{.status.backups}}' lists it once verified)")
        elif args.verb == "credentials":
            words = list(args.words)
            if words[:1] == ["revoke"]:
                if len(words) != 2:
                    raise PluginError("usage: kubectl vc credentials revoke ID")
                revoke(k, words[1])
                print(f"credential {words[1]} revoked: the tenant refuses it within seconds")
            elif len(words) > 1:
                raise PluginError("usage: kubectl vc credentials [NAME | revoke ID]")
            else:
                credentials(k, words[0] if words else None)
        elif args.verb == "rotate":
            phase = rotate(k, args.name, args.what, args.step, args.timeout if args.wait else None)
            print(f"virtualcluster {args.name}: {args.what} rotation {args.step} " +
                  (f"done: {phase}" if args.wait else
                   f"requested (kubectl get vc {args.name} -o jsonpath='{{.status.credentials.rotation}}' follows it)"))
        elif args.verb == "credential":
            print(json.dumps(exec_credential(k, args.name, args.expiration_seconds)))
    except PluginError as e:
        _fail(str(e))
    except subprocess.TimeoutExpired:
        _fail("kubectl did not answer in time")
    except (KeyError, IndexError, TypeError, ValueError) as e:
        _fail(f"unexpected answer from the host: {e}")


if __name__ == "__main__":
    main()
