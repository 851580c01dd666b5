"""``make conformance``: Kubernetes' own ``[Conformance]`` suite against three targets on the real-node lab.

- ``host``: the lab's host cluster itself, the reference for what this lab can pass at all;
- ``dedicated``: a tenant with the lab's real workers promoted into it;
- ``slice``: a tenant on a shared slice of the host (its pods run in the host under a quota).

The suite is ``e2e.test`` at the pinned Kubernetes version (hack/build-bins.sh) and its images are
built here (hack/images/e2e.py) under the names it expects. Each target's run writes a JUnit file
under ``.local/conformance/<target>/``; ``docs/conformance.md`` is regenerated from them.

  python -m hack.conformance run [--targets host,dedicated,slice] [--focus RE] [--procs N]
  python -m hack.conformance report        docs/conformance.md from the last runs' JUnit files
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from hack.harness import BIN, LOCAL, REPO, HostCluster, binary, wait_until
from hack.stack import Stack
from reconciler import versions

OUT = LOCAL / "conformance"
DOC = REPO / "docs" / "conformance.md"
TARGETS = ("host", "dedicated", "slice")
NAMESPACE = "conformance"
SLICE = {"cpu": "2", "memory": "4Gi"}
CONTROL_PLANE_TAINT = "node-role.kubernetes.io/control-plane"

# What no target here runs, each with its reason (the suite's own labels).
SKIPS: tuple[tuple[str, str], ...] = (
    (r"\[Disruptive\]", "restarts or breaks nodes and control-plane components the lab shares with every target"),
)

# What a slice cannot do by design; each is also named, with its reason, in docs/conformance.md.
HOOK_HOST = ("the hook names an address for the host's kubelet to dial from the host node's network; Pod Security "
             "`baseline` refuses a probe or lifecycle `host` (Kubernetes 1.34) because it lets a pod make the node "
             "reach anywhere, which from a slice is past the tenant into the host")
HOST_PATH = ("the test's pods mount a directory of the host node (hostPath), privileged, to keep a marker between a "
             "pod's retries; a slice's host namespace refuses both (Pod Security `baseline`): they reach the host "
             "node's filesystem")
ONE_NODE = ("a slice is one virtual node of exactly the slice's size; a tenant that needs two nodes has whole nodes "
            "promoted into it")
ETC_HOSTS = ("the host's kubelet writes a pod's /etc/hosts with the host's namespace and domain, and its IP is not known "
             "before it runs, so the tenant FQDN of a pod's hostname.subdomain cannot be written there; the tenant's "
             "DNS answers that name once a headless Service of the subdomain selects the pod (the test makes none)")
HOST_REACH = ("a slice's pods run in a host namespace under Pod Security `baseline`, which refuses host ports and "
              "the host's network: they would reach past the tenant, to other tenants' ports and the host's own")
SLICE_BY_DESIGN = {
    "[sig-network] HostPort validates that there is no conflict between pods with same hostPort but different "
    "hostIP and protocol [LinuxOnly] [Conformance]": HOST_REACH,
    "[sig-scheduling] SchedulerPredicates [Serial] validates that there exists conflict between pods with same "
    "hostPort and protocol but one using 0.0.0.0 hostIP [Conformance]": HOST_REACH,
    "[sig-apps] StatefulSet Basic StatefulSet functionality [StatefulSetBasic] Should recreate evicted statefulset "
    "[Conformance]": HOST_REACH + " (the test evicts a pod by a host-port conflict)",
    "[sig-node] KubeletManagedEtcHosts should test kubelet managed /etc/hosts file [NodeConformance] [Conformance]":
        HOST_REACH + " (the test compares a host-network pod's /etc/hosts)",
    **{f"[sig-network] Networking Granular Checks: Pods should function for node-pod communication: {proto} "
       "[LinuxOnly] [NodeConformance] [Conformance]": HOST_REACH + " (the test dials pods from a host-network pod)"
       for proto in ("http", "udp")},
    **{f"[sig-node] Container Lifecycle Hook when create a pod with lifecycle hook should execute {hook} http hook "
       "properly [NodeConformance] [Conformance]": HOOK_HOST for hook in ("poststart", "prestop")},
    "[sig-network] DNS should provide /etc/hosts entries for the cluster [Conformance]": ETC_HOSTS,
    **{f"[sig-apps] Job should allow to use {what} [Conformance]": HOST_PATH
       for what in ("the pod failure policy on exit code to fail the job early",
                    "a pod failure policy to ignore failure matching on DisruptionTarget condition")},
    "[sig-architecture] Conformance Tests should have at least two untainted nodes [Conformance]": ONE_NODE,
    "[sig-apps] Daemon set [Serial] should rollback without unnecessary restarts [Conformance]":
        ONE_NODE + " (the test asks for two)",
}

# One or two tests per area: what ``make test`` runs on the tenants (tests/e2e/test_conformance.py).
SMOKE = (
    "[sig-node] Pods should get a host IP [NodeConformance] [Conformance]",
    "[sig-node] Container Runtime blackbox test on terminated container should report termination message "
    "from file when pod succeeds and TerminationMessagePolicy FallbackToLogsOnError is set [NodeConformance] "
    "[Conformance]",
    "[sig-storage] Secrets should be consumable from pods in volume [NodeConformance] [Conformance]",
    "[sig-storage] EmptyDir volumes should support (root,0644,default) [LinuxOnly] [NodeConformance] [Conformance]",
    "[sig-network] Services should serve a basic endpoint from pods [Conformance]",
    "[sig-network] DNS should provide DNS for services [Conformance]",
    "[sig-apps] Deployment RollingUpdateDeployment should delete old pods and create new ones [Conformance]",
    "[sig-api-machinery] ResourceQuota should create a ResourceQuota and capture the life of a pod. [Conformance]",
    "[sig-cli] Kubectl logs logs should be able to retrieve and filter logs [Conformance]",
    "[sig-node] Pods should support retrieving logs from the container over websockets [NodeConformance] "
    "[Conformance]",
    "[sig-storage] Downward API volume should update labels on modification [NodeConformance] [Conformance]",
    "[sig-auth] ServiceAccounts should mount an API token into pods [Conformance]",
)


def go_regex(text: str) -> str:
    """``text`` matched literally by Go's regexp (RE2 rejects Python's escaped spaces)."""
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", text)


def focus_of(names: Iterable[str]) -> str:
    return "|".join(go_regex(n) for n in names)


SLICE_SKIPS: tuple[tuple[str, str], ...] = tuple((go_regex(name), why) for name, why in SLICE_BY_DESIGN.items())


# -- running the suite ------------------------------------------------------------------------

@dataclass
class Run:
    target: str
    kubeconfig: Path
    out: Path
    focus: str = r"\[Conformance\]"
    skips: tuple[tuple[str, str], ...] = SKIPS
    procs: int = 4
    timeout: str = "60m"
    extra: list[str] = field(default_factory=list)

    def argv(self) -> list[str]:
        skip = "|".join(r for r, _ in self.skips)
        return [binary("ginkgo"), f"--procs={self.procs}", f"--focus={self.focus}",
                *([f"--skip={skip}"] if skip else []), f"--timeout={self.timeout}", "--no-color", "--silence-skips",
                f"--output-dir={self.out}", "--junit-report=junit.xml", "--keep-going",
                binary("e2e.test"), "--",
                f"--kubeconfig={self.kubeconfig}", "--provider=skeleton", f"--kubectl-path={binary('kubectl')}",
                f"--non-blocking-taints={CONTROL_PLANE_TAINT}", "--disable-log-dump",
                f"--report-dir={self.out}", *self.extra]

    def execute(self, say: Callable[[str], None] = print) -> Results:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "junit.xml").unlink(missing_ok=True)
        started = time.monotonic()
        say(f"conformance     {self.target}: {' '.join(self.argv()[:4])} ... (log: {self.out / 'suite.log'})")
        env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "KUBECONFIG": str(self.kubeconfig)}
        with (self.out / "suite.log").open("w") as log:
            # a session of its own: ginkgo's e2e.test processes go with it on Ctrl-C or a failure here
            proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.out,
                                    start_new_session=True)
            try:
                proc.wait()
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # whatever of the run is left, once it ended or was cut
                proc.wait()
        seconds = time.monotonic() - started
        if not (self.out / "junit.xml").exists():
            tail = (self.out / "suite.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the suite against {self.target} wrote no JUnit report (exit {proc.returncode}):\n{tail}")
        results = Results.read(self.target, self.out / "junit.xml")
        results.seconds = seconds
        (self.out / "run.json").write_text(json.dumps({"seconds": round(seconds, 1), "procs": self.procs,
                                                      "focus": self.focus, "skips": list(self.skips),
                                                      "timeout": self.timeout}))
        say(f"conformance     {self.target}: {results.summary()} in {seconds / 60:.1f} min")
        return results


@dataclass
class Case:
    name: str
    status: str  # passed, failed, skipped
    seconds: float
    message: str = ""

    @property
    def sig(self) -> str:
        m = re.match(r"\[(sig-[a-z-]+)\]", self.name)
        return m.group(1) if m else "other"

    @property
    def cause(self) -> str:
        """The failure's first meaningful line."""
        for line in self.message.splitlines():
            line = line.strip().removeprefix("[FAILED]").strip()
            if line and not line.startswith(("In [", "at:")):
                return line[:200]
        return ""


@dataclass
class Results:
    target: str
    cases: list[Case]
    seconds: float = 0.0
    focus: str = r"\[Conformance\]"
    procs: int = 0
    timeout: str = ""  # the run's limit: what it had not reached by then counts as skipped
    rerun: list[str] = field(default_factory=list)  # failures of the run run again since, with their new result

    @property
    def scope(self) -> str:
        if self.focus == r"\[Conformance\]":
            return "every [Conformance] test"
        if self.focus == focus_of(SMOKE):
            return f"the smoke subset ({len(SMOKE)})"
        return f"`--focus {self.focus}`"

    @classmethod
    def read(cls, target: str, junit: Path) -> Results:
        cases = []
        for tc in ET.parse(junit).getroot().iter("testcase"):
            name = re.sub(r"^\[It\]\s*", "", tc.get("name", ""))
            name = re.sub(r"\s+\[[\w-]+(, [\w-]+)+\]$", "", name)  # ginkgo's labels, repeated at the end
            failure = tc.find("failure") if tc.find("failure") is not None else tc.find("error")
            # the [Conformance] specs, and the suite's own set-up or reports only when they failed
            if "[Conformance]" not in name and not (failure is not None and re.match(r"\[(Synchronized|Report)", name)):
                continue
            if failure is not None:
                status, message = "failed", (failure.get("message") or "") + "\n" + (failure.text or "")
            elif (skipped := tc.find("skipped")) is not None:
                status, message = "skipped", skipped.get("message", "")
            else:
                status, message = "passed", ""
            cases.append(Case(name, status, float(tc.get("time", "0") or 0), message))
        return cls(target, cases)

    def count(self, status: str, sig: str | None = None) -> int:
        return sum(1 for c in self.cases if c.status == status and (sig is None or c.sig == sig))

    def summary(self) -> str:
        return (f"{self.count('passed')} passed, {self.count('failed')} failed, "
                f"{self.count('skipped')} skipped")

    def failed(self) -> list[Case]:
        return [c for c in self.cases if c.status == "failed"]


# -- the targets --------------------------------------------------------------------------------

class Lab:
    """The real-node lab with three real nodes (a control plane and two workers) and no kwok node,
    the suite's images imported into every node's containerd."""

    def __init__(self, root: Path = OUT / "lab", real_nodes: int = 3) -> None:
        from hack.stack import StackPorts
        self.stack = Stack(root, StackPorts.free(), runtime="pods", real_nodes=real_nodes)

    def up(self, say: Callable[[str], None] = print) -> None:
        """A fresh lab: what an interrupted run left is taken down and its state removed first."""
        spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        if not (self.stack.root / "nodes").exists() and any(n.netns in spaces for n in self.stack.lab().nodes()):
            raise RuntimeError("another real-node lab runs on this machine (`make up REAL_NODES=2` or `make test`); "
                               "the lab has one bridge and fixed addresses: `make down`, or wait for the tests")
        self.stack.down()
        shutil.rmtree(self.stack.root, ignore_errors=True)
        self.stack.up(nodes=0, say=say)
        import_suite_images(self.stack, say)

    def down(self) -> None:
        self.stack.down()

    def workers(self) -> list[str]:
        return [n.name for n in self.stack.lab().nodes() if not n.control_plane]


def import_suite_images(stack: Stack, say: Callable[[str], None] = print) -> None:
    """The suite's images into each running real node (built first if not cached)."""
    from hack.images import build, e2e
    lab = stack.lab()
    running = [n for n in lab.nodes() if (n.root / "node.json").exists()]
    if not running:
        return
    built = build.build_all(ctx=None, say=lambda _: None, catalogue=e2e.recipes())
    for node in running:
        node.import_images([b.path for b in built])
    say(f"suite images    {len(built)} imported into {', '.join(n.name for n in running)}")


def create_tenant(host: HostCluster, name: str, spec: dict[str, object], directory: Path,
                  say: Callable[[str], None] = print, timeout: float = 300) -> Path:
    """A VirtualCluster in the ``conformance`` namespace, Ready with its nodes Ready; its kubeconfig."""
    host.kubectl("create", "namespace", NAMESPACE, check=False)
    host.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster",
        "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}))
    started = time.monotonic()

    def ready() -> bool:
        out = host.kubectl("get", "vc", name, "-n", NAMESPACE, "-o", "json", check=False)
        conditions = json.loads(out.stdout).get("status", {}).get("conditions", []) if out.returncode == 0 else []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    wait_until(ready, timeout, f"VirtualCluster {NAMESPACE}/{name} Ready", interval=1)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.kubeconfig"
    raw = host.kubectl("get", "--raw", f"/apis/kosmos.io/v1alpha1/namespaces/{NAMESPACE}/virtualclusters/{name}/kubeconfig")
    path.write_text(raw.stdout)

    def nodes_ready() -> bool:
        out = subprocess.run([binary("kubectl"), "--kubeconfig", str(path), "get", "nodes", "-o", "json"],
                             capture_output=True, text=True)
        if out.returncode:
            return False
        items = json.loads(out.stdout)["items"]
        return bool(items) and all(any(c["type"] == "Ready" and c["status"] == "True"
                                       for c in n["status"].get("conditions", [])) for n in items)
    wait_until(nodes_ready, timeout, f"the nodes of {name} Ready", interval=1)
    say(f"tenant          {name} Ready with its nodes in {time.monotonic() - started:.1f}s")
    return path


def delete_tenant(host: HostCluster, name: str, timeout: float = 300) -> None:
    """Delete the VirtualCluster and wait until it is gone (its nodes back in the host)."""
    host.kubectl("delete", "vc", name, "-n", NAMESPACE, "--ignore-not-found", "--wait=false")
    wait_until(lambda: host.kubectl("get", "vc", name, "-n", NAMESPACE, check=False).returncode != 0, timeout,
               f"VirtualCluster {NAMESPACE}/{name} deleted", interval=1)


def target_spec(target: str, lab: Lab) -> dict[str, object]:
    if target == "dedicated":
        return {"promoteResources": {"nodes": lab.workers()}}
    return {"promoteResources": {"resources": SLICE}}


def plan(target: str, focus: str, failed_only: bool) -> tuple[str, Path] | None:
    """What to run against ``target`` and where its report goes: with ``failed_only``, what failed in
    its last full run (its report then updates that run's: :func:`load`), or nothing if none failed."""
    if failed_only and (last := load(target)) is not None:
        if not (failed := last.failed()):
            return None
        return focus_of(c.name for c in failed), OUT / target / f"{RERUN}-{len(_reruns(target)) + 1}"
    for again in _reruns(target):
        shutil.rmtree(again, ignore_errors=True)
    return focus, OUT / target


def run_targets(targets: list[str], focus: str, procs: int, failed_only: bool = False, timeout: str = "60m",
                say: Callable[[str], None] = print) -> list[Results]:
    plans = {t: p for t in targets if (p := plan(t, focus, failed_only)) is not None}
    lab = Lab()
    results = []
    try:
        lab.up(say)
        for target, (target_focus, out) in plans.items():
            skips = SKIPS + (SLICE_SKIPS if target == "slice" else ())
            if target == "host":
                kubeconfig = lab.stack.kubeconfig
            else:
                kubeconfig = create_tenant(lab.stack.host, f"conformance-{target}", target_spec(target, lab), OUT, say)
            try:
                results.append(Run(target, kubeconfig, out, target_focus, skips, procs, timeout).execute(say))
            finally:
                if target != "host":
                    delete_tenant(lab.stack.host, f"conformance-{target}")
    finally:
        lab.down()
    return results


# -- the report ---------------------------------------------------------------------------------

RERUN = "rerun"


def _reruns(target: str) -> list[Path]:
    """The target's ``--failed`` runs since its last full one, oldest first."""
    found = [p for p in (OUT / target).glob(f"{RERUN}*") if p.is_dir()]
    return sorted(found, key=lambda p: int(p.name.removeprefix(RERUN).lstrip("-") or 1))


def load(target: str) -> Results | None:
    """The target's last run; where its failures were run again since (``--failed``, any number of times),
    their newest results in its place. On a slice, what is by design is not run: a case an older run ran
    counts as the skip it now is."""
    junit = OUT / target / "junit.xml"
    if not junit.exists():
        return None
    results = Results.read(target, junit)
    meta = OUT / target / "run.json"
    if meta.exists():
        run = json.loads(meta.read_text())
        results.seconds, results.focus, results.procs = run["seconds"], run["focus"], run["procs"]
        results.timeout = run.get("timeout", "")
    newer: dict[str, Case] = {}
    for again in _reruns(target):
        if (again / "junit.xml").exists():
            newer |= {c.name: c for c in Results.read(target, again / "junit.xml").cases if c.status != "skipped"}
    results.rerun = sorted(newer)
    results.cases = [newer.get(c.name, c) for c in results.cases]
    if target == "slice":
        results.cases = [Case(c.name, "skipped", c.seconds, SLICE_BY_DESIGN[c.name])
                         if c.name in SLICE_BY_DESIGN else c for c in results.cases]
    return results


def _minutes(duration: str) -> float:
    """Go's ``35m``, ``1h``, ``90s`` in minutes."""
    m = re.fullmatch(r"(\d+)([hms])", duration)
    return int(m.group(1)) * {"h": 60, "m": 1, "s": 1 / 60}[m.group(2)] if m else float("inf")


def report(results: list[Results]) -> str:
    """docs/conformance.md: the targets side by side, per SIG, then each failure with its cause."""
    lines = [
        "# Conformance",
        "",
        "Generated by `make conformance` (`python -m hack.conformance`); do not edit by hand.",
        "",
        f"Kubernetes' own conformance suite, `e2e.test` {versions.KUBERNETES_VERSION} built from the Go module "
        "proxy, run on the real-node lab (three kubelet + containerd nodes: a control plane and two "
        "workers) against:",
        "",
        "- **host**: the lab's host cluster itself, the reference for what this lab can pass;",
        "- **dedicated**: a tenant with both real workers promoted into it;",
        f"- **slice**: a tenant on a shared slice ({SLICE['cpu']} CPUs, {SLICE['memory']}): one virtual node, its "
        "pods running in the host under the slice's quota.",
        "",
    ]
    sigs = sorted({c.sig for r in results for c in r.cases})
    header = "| SIG | " + " | ".join(f"{r.target} passed / failed / skipped" for r in results) + " |"
    lines += [header, "|---|" + "---|" * len(results)]
    for sig in sigs:
        cells = [f"{r.count('passed', sig)} / {r.count('failed', sig)} / {r.count('skipped', sig)}" for r in results]
        lines.append(f"| {sig} | " + " | ".join(cells) + " |")
    totals = [f"**{r.count('passed')} / {r.count('failed')} / {r.count('skipped')}**" for r in results]
    lines.append("| **all** | " + " | ".join(totals) + " |")
    lines.append("| minutes | " + " | ".join(f"{r.seconds / 60:.1f} ({r.procs} processes)" for r in results) + " |")
    lines.append("| what ran | " + " | ".join(
        r.scope + (f", stopped at {r.timeout}" if r.timeout and r.seconds >= _minutes(r.timeout) * 60 else "")
        + (f"; its {len(r.rerun)} failures run again after fixes" if r.rerun else "") for r in results) + " |")
    lines += ["", "## Skipped everywhere", ""]
    lines += [f"- `{pattern}`: {reason}" for pattern, reason in SKIPS]
    lines += ["", "## Not run on a slice, by design", ""]
    lines += [f"- {name}: {reason}" for name, reason in SLICE_BY_DESIGN.items()] or ["- (none)"]
    for r in results:
        lines += ["", f"## Failures on {r.target}", ""]
        lines += [f"- {c.name}: {c.cause}" for c in r.failed()] or ["- (none)"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hack.conformance", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("run", help="start the lab, run the suite against each target, write the report")
    q.add_argument("--targets", default=",".join(TARGETS))
    q.add_argument("--focus", default=r"\[Conformance\]", help="the specs to run (a Go regexp)")
    q.add_argument("--smoke", action="store_true", help="only the short subset make test runs")
    q.add_argument("--procs", type=int, default=6, help="ginkgo processes")
    q.add_argument("--timeout", default="60m", help="each target's run stops after this (ginkgo's --timeout)")
    q.add_argument("--failed", action="store_true",
                   help="run again only what failed in each target's last run (a target without one runs in full)")
    sub.add_parser("report", help="regenerate docs/conformance.md from the last runs")
    args = p.parse_args(argv)
    try:
        if args.command == "run":
            targets = [t for t in args.targets.split(",") if t]
            if unknown := [t for t in targets if t not in TARGETS]:
                p.error(f"unknown target {', '.join(unknown)} (there are {', '.join(TARGETS)})")
            focus = focus_of(SMOKE) if args.smoke else args.focus
            run_targets(targets, focus, args.procs, failed_only=args.failed, timeout=args.timeout)
        results = [r for t in TARGETS if (r := load(t)) is not None]
        if not results:
            print("conformance: no run to report (python -m hack.conformance run)", file=sys.stderr)
            return 1
        DOC.write_text(report(results))
        print(f"conformance: wrote {DOC.relative_to(REPO)}")
    except (RuntimeError, TimeoutError, subprocess.CalledProcessError) as e:
        print(f"conformance: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
