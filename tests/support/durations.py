"""Where a run's time went: every test's setup, call and teardown, written to
``.local/test-durations.txt`` at the end of each run, slowest first, with the time per file above
them. Fixtures shared by many tests are paid in the setup of the first test that asks for them,
so a file's total is what it costs the run, and a test's line says where it waited."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest

__all__ = ["Durations"]

PHASES = ("setup", "call", "teardown")


class Durations:
    """A pytest plugin: ``config.pluginmanager.register(Durations(path))``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.phases: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(PHASES, 0.0))
        self.outcomes: dict[str, str] = {}
        self.started = time.monotonic()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.phases[report.nodeid][report.when] += report.duration
        if report.when == "call" or report.outcome != "passed":
            self.outcomes[report.nodeid] = report.outcome

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.phases:
            return
        rows = sorted(self.phases.items(), key=lambda item: -sum(item[1].values()))
        per_file: dict[str, float] = defaultdict(float)
        for nodeid, phases in rows:
            per_file[nodeid.split("::", 1)[0]] += sum(phases.values())
        lines = [f"# {len(rows)} tests in {time.monotonic() - self.started:.1f} s of wall time",
                 "# seconds per file", *(f"{total:9.2f}  {name}" for name, total in
                                         sorted(per_file.items(), key=lambda item: -item[1])),
                 "# seconds per test: total setup call teardown outcome test"]
        lines += [f"{sum(p.values()):9.2f} {p['setup']:8.2f} {p['call']:8.2f} {p['teardown']:8.2f} "
                  f"{self.outcomes.get(nodeid, 'passed'):8} {nodeid}" for nodeid, p in rows]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("\n".join(lines) + "\n")
