"""Timer slack: the tenant components' timed sleeps may end late together, which cuts an idle tenant's wakes."""

from __future__ import annotations

import os
import subprocess
import threading
from dataclasses import replace
from pathlib import Path

from reconciler.runtime.process import ProcessRuntime
from reconciler.runtime.timerslack import inherited_timer_slack, timer_slack
from reconciler.runtime.tuning import LEAN, STOCK

KERNEL_DEFAULT = 50_000  # ns, what a thread has unless told otherwise


def _child_slack(pid: int) -> int:
    return int(Path(f"/proc/{pid}/timerslack_ns").read_text())


def test_a_process_started_inside_gets_the_slack_and_the_thread_gets_its_own_back() -> None:
    before = timer_slack()
    with inherited_timer_slack(7_000_000):
        assert timer_slack() == 7_000_000
        out = subprocess.run(["cat", "/proc/self/timerslack_ns"], capture_output=True, text=True, check=True)
    assert int(out.stdout) == 7_000_000
    assert timer_slack() == before
    after = subprocess.run(["cat", "/proc/self/timerslack_ns"], capture_output=True, text=True, check=True)
    assert int(after.stdout) == before


def test_no_slack_asked_leaves_the_thread_as_it_is() -> None:
    before = timer_slack()
    with inherited_timer_slack(0):
        assert timer_slack() == before


def test_the_slack_is_the_calling_thread_s_alone() -> None:
    asked, seen = threading.Event(), []
    worker = threading.Thread(target=lambda: (asked.wait(5), seen.append(timer_slack())))
    worker.start()  # running before the slack is set, as the server's other threads are
    with inherited_timer_slack(3_000_000):
        asked.set()
        worker.join()
    assert seen == [KERNEL_DEFAULT]


def test_the_process_runtime_starts_components_with_the_profile_s_slack(tmp_path: Path) -> None:
    lean = ProcessRuntime(tmp_path / "lean", tmp_path / "bin", tuning=replace(LEAN, timer_slack_ns=9_000_000))
    stock = ProcessRuntime(tmp_path / "stock", tmp_path / "bin", tuning=STOCK)
    pids = []
    try:
        for runtime in (lean, stock):
            base = runtime.root / "t"
            base.mkdir(parents=True)
            pids.append(runtime.spawn(base, "etcd", ["sleep", "30"]))
        assert _child_slack(pids[0]) == 9_000_000
        assert _child_slack(pids[1]) == KERNEL_DEFAULT
    finally:
        for pid in pids:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
