"""The ``process`` runtime's processes: started in their own sessions, watched, restarted, stopped.

A component runs in its own session, so it outlives a vc-apiserver restart and is adopted (matched by
pid file and command line) rather than started twice. A component that died is restarted with capped
back-off and its last log line is reported. Hibernation stops the processes politely, etcd last; a
teardown kills them at once, since their data goes right after.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from reconciler.runtime.base import BINARIES
from reconciler.runtime.timerslack import inherited_timer_slack
from reconciler.runtime.tuning import LEAN, TenantTuning

__all__ = ["COMPONENTS", "Supervisor", "last_error", "processes_under"]

log = logging.getLogger(__name__)

COMPONENTS = BINARIES
MAX_BACKOFF = 30.0
# Hibernation stops these in turn, each group given STOP_GRACE seconds before it is killed: what
# talks to the apiserver first, etcd (which flushes on SIGTERM) last.
STOP_ORDER = (("kwok", "kube-controller-manager", "kube-scheduler"), ("kube-apiserver",), ("etcd",))
STOP_GRACE = 10.0
RESTART_GRACE = 1.0


@dataclass
class _Health:
    restarts: int = 0
    next_start: float = 0.0
    last_error: str = ""


@dataclass
class Supervisor:
    """The tenants' processes started here (with ``tuning``), and how each has fared."""

    tuning: TenantTuning = LEAN
    children: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    _health: dict[tuple[str, str, str], _Health] = field(default_factory=dict)

    def alive(self, pid: int, base: Path) -> bool:
        """Alive and ours: a recycled pid running something else does not count."""
        child = self.children.get(pid)
        if child is not None:
            # Our own child: alive until reaped, and its pid cannot be recycled before that. (Just
            # after spawning, /proc/<pid>/cmdline can still be empty while the exec completes.)
            if child.poll() is None:
                return True
            del self.children[pid]
            return False
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if not cmdline:  # in the middle of its exec: spawn() starts every component in its tenant's dir
                cmdline = os.readlink(f"/proc/{pid}/cwd").encode() + b"/"
        except OSError:
            return False
        if str(base).encode() not in cmdline:
            return False
        try:
            status = Path(f"/proc/{pid}/stat").read_text()
            return status.rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False

    @staticmethod
    def command_of(pid: int) -> list[str] | None:
        """The command line a process runs (None while it is still in its exec, or gone)."""
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        return raw.decode(errors="surrogateescape").split("\0")[:-1] if raw else None

    @staticmethod
    def pid(base: Path, component: str) -> int:
        try:
            return int((base / f"{component}.pid").read_text().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def spawn(self, base: Path, component: str, command: list[str]) -> int:
        logs = base / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"{component}.log", "ab") as out, inherited_timer_slack(self.tuning.timer_slack(component)):
            proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=base, env={**os.environ, **self.tuning.env(component)})
        (base / f"{component}.pid").write_text(str(proc.pid))
        self.children[proc.pid] = proc
        return proc.pid

    def supervise(self, namespace: str, name: str, base: Path, commands: dict[str, list[str]],
                  components: tuple[str, ...], problems: list[str]) -> bool:
        """Start what is not running (a restart waits out its back-off); True if all were running."""
        now = time.monotonic()
        all_alive = True
        for component in components:
            if self.alive(self.pid(base, component), base):
                continue
            health = self._health.setdefault((namespace, name, component), _Health())
            if self.pid(base, component):
                health.last_error = last_error(base, component)
                if health.next_start == 0.0:
                    health.restarts += 1
                    health.next_start = now + min(2 ** min(health.restarts, 5), MAX_BACKOFF)
            if now >= health.next_start:
                pid = self.spawn(base, component, commands[component])
                health.next_start = 0.0
                log.info("started %s for %s/%s (pid %d)", component, namespace, name, pid)
                all_alive = all_alive and not health.restarts  # a first start counts; a restart must prove itself
            else:
                all_alive = False
            if health.restarts:
                problems.append(f"{component} exited {health.restarts} time(s), last: {health.last_error}")
        return all_alive

    def forget(self, namespace: str, name: str) -> None:
        """A tenant's restarts, for one that is healthy again, stopped or gone."""
        for component in COMPONENTS:
            self._health.pop((namespace, name, component), None)

    async def stop(self, base: Path) -> bool:
        """Stop every process of a tenant (a polite SIGTERM, then SIGKILL after STOP_GRACE), in
        STOP_ORDER, and remove its pid files, so the components start afresh (not as restarts of crashed
        ones). True once nothing runs there."""
        for group in STOP_ORDER:
            await self._stop(base, {self.pid(base, c) for c in group})
        await self._stop(base, processes_under(base))  # anything a lost pid file no longer names
        for pidfile in base.glob("*.pid"):
            pidfile.unlink(missing_ok=True)
        return not processes_under(base)

    async def restart(self, base: Path, component: str) -> None:
        """Stop one component so that the next :meth:`supervise` starts it afresh (not as a restart of a
        crashed one): to read again what it reads only at start. It is given RESTART_GRACE seconds: kube's
        components stop listening and finish their requests within milliseconds of SIGTERM, then may take
        ten seconds more to wind down, which the one that replaces it need not wait for."""
        await self._stop(base, {self.pid(base, component)}, RESTART_GRACE)
        (base / f"{component}.pid").unlink(missing_ok=True)

    async def kill(self, base: Path) -> None:
        """Kill every process of a tenant now: its data is removed right after, nothing to flush."""
        pids = {self.pid(base, pidfile.stem) for pidfile in base.glob("*.pid")}  # components and helpers (kwok)
        pids |= processes_under(base)  # and anything a lost pid file no longer names
        for pid in pids:
            if pid and self.alive(pid, base):
                _signal(pid, signal.SIGKILL)
        for _ in range(50):  # reaped within a few hundred milliseconds
            if not any(pid and self.alive(pid, base) for pid in pids):
                return
            await asyncio.sleep(0.1)

    async def _stop(self, base: Path, pids: set[int], grace: float = STOP_GRACE) -> None:
        """SIGTERM to each process's group, SIGKILL to what is left after ``grace`` seconds."""
        pids = {pid for pid in pids if pid and self.alive(pid, base)}
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                _signal(pid, sig)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                pids = {pid for pid in pids if self.alive(pid, base)}
                if not pids:
                    return
                await asyncio.sleep(0.05)
            if sig == signal.SIGTERM and grace == STOP_GRACE:
                log.warning("killing what did not stop within %.0fs of SIGTERM in %s: pids %s", STOP_GRACE, base,
                            sorted(pids))


def processes_under(base: Path) -> set[int]:
    """Live processes whose command line points into a tenant's directory."""
    marker = str(base).encode() + b"/"
    found = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if marker in (proc / "cmdline").read_bytes():
                    found.add(int(proc.name))
    return found


def process_usage(pids: set[int]) -> tuple[float, int]:
    """cpu seconds (user and system, since each started) and resident bytes of ``pids``, from /proc;
    a process that ended meanwhile counts nothing."""
    ticks, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
    cpu, rss = 0.0, 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            cpu += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime: fields 14 and 15 of stat(5)
            rss += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
    return cpu, rss


def _signal(pid: int, sig: signal.Signals) -> None:
    """To the process's group (the component and anything it started), else to it alone (not a group leader)."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def last_error(base: Path, component: str) -> str:
    """The last line of a component's log that reads like an error, else its last line."""
    try:
        lines = (base / "logs" / f"{component}.log").read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return ""
    for line in reversed(lines[-50:]):
        text = line.strip()
        if text and any(w in text.lower() for w in ("error", "fatal", "failed", "cannot", "panic")):
            return text[-300:]
    return lines[-1][-300:] if lines else ""
