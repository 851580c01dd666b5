"""Resource accounting from ``/proc``: RSS of a process, and CPU seconds spent by each side.

CPU per round tells whether a number is bound by the server or by the load generator (this
machine has 2 cores: a Go server can use both, vc-apiserver one, the client competes with both).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

_TICK = os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process, all threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent not idle since boot (all cores)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = values[:8]
    return (user + nice + system + irq + softirq + steal) / _TICK


@dataclass
class Usage:
    wall: float
    client_cpu: float
    process_cpu: dict[str, float]  # role -> CPU seconds
    machine_cpu: float

    def cores(self) -> dict[str, float]:
        """Average cores busy per side over the interval; ``other`` is everything else on the machine
        (other people's jobs, kubectl): the noise the alternating rounds are there to spread."""
        wall = self.wall or 1e-9
        ours = self.client_cpu + sum(self.process_cpu.values())
        return {"client": self.client_cpu / wall, **{k: v / wall for k, v in self.process_cpu.items()},
                "other": max(0.0, self.machine_cpu - ours) / wall}


class Meter:
    """Wall, client and server CPU between :meth:`start` and :meth:`stop`."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._start: tuple[float, float, dict[str, float], float] = (0.0, 0.0, {}, 0.0)

    def _now(self) -> tuple[float, float, dict[str, float], float]:
        return (time.perf_counter(), time.process_time(), {k: cpu_seconds(p) for k, p in self.pids.items() if p},
                machine_busy_seconds())

    def start(self) -> Meter:
        self._start = self._now()
        return self

    def stop(self) -> Usage:
        wall, cpu, procs, busy = self._now()
        wall0, cpu0, procs0, busy0 = self._start
        return Usage(wall - wall0, cpu - cpu0, {k: procs[k] - procs0[k] for k in procs}, busy - busy0)
