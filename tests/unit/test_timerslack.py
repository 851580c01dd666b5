"""Timer slack: the tenant components' timed sleeps may end late together, which cuts an idle tenant's wakes."""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from reconciler.runtime.base import APISERVER, CONTROLLER_MANAGER, ETCD
from reconciler.runtime.process import ProcessRuntime
from reconciler.runtime.timerslack import inherited_timer_slack, timer_slack
from reconciler.runtime.tuning import LEAN, STOCK

READ_OWN_SLACK = ["cat", "/proc/self/timerslack_ns"]  # what a started process sees of its own


def test_a_process_started_inside_gets_the_slack_and_the_thread_gets_its_own_back() -> None:
    before = timer_slack()
    with inherited_timer_slack(7_000_000):
        assert timer_slack() == 7_000_000
        inside = subprocess.run(READ_OWN_SLACK, capture_output=True, text=True, check=True)
    after = subprocess.run(READ_OWN_SLACK, capture_output=True, text=True, check=True)
    assert int(inside.stdout) == 7_000_000
    assert timer_slack() == before
    assert int(after.stdout) == before


def test_no_slack_asked_leaves_the_thread_as_it_is() -> None:
    before = timer_slack()
    with inherited_timer_slack(0):
        assert timer_slack() == before


def test_the_thread_gets_its_slack_back_when_the_start_fails() -> None:
    before = timer_slack()
    with pytest.raises(FileNotFoundError), inherited_timer_slack(5_000_000):
        subprocess.Popen(["/nonexistent/component"])
    assert timer_slack() == before


def test_the_slack_is_the_calling_thread_s_alone() -> None:
    before = timer_slack()
    asked, seen = threading.Event(), []
    worker = threading.Thread(target=lambda: (asked.wait(5), seen.append(timer_slack())))
    worker.start()  # running before the slack is set, as the server's other threads are
    with inherited_timer_slack(before + 3_000_000):
        asked.set()
        worker.join()
    assert seen == [before]


def _logged_slack(runtime: ProcessRuntime, name: str, component: str = ETCD) -> int:
    base = runtime.root / name
    base.mkdir(parents=True)
    pid = runtime.spawn(base, component, READ_OWN_SLACK)
    deadline = time.monotonic() + 10
    while runtime.supervisor.children[pid].poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return int((base / "logs" / f"{component}.log").read_text())


def test_the_process_runtime_starts_each_component_with_the_profile_s_slack_for_it(tmp_path: Path) -> None:
    lean = ProcessRuntime(tmp_path / "lean", tmp_path / "bin",
                          tuning=replace(LEAN, timer_slack_ns={ETCD: 9_000_000, APISERVER: 4_000_000}))
    stock = ProcessRuntime(tmp_path / "stock", tmp_path / "bin", tuning=STOCK)
    assert _logged_slack(lean, "e", ETCD) == 9_000_000
    assert _logged_slack(lean, "a", APISERVER) == 4_000_000
    assert _logged_slack(lean, "c", CONTROLLER_MANAGER) == timer_slack()  # none asked for it: the thread's own
    assert _logged_slack(stock, "t") == timer_slack()
