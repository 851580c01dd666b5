"""What tests tell the person running them: lines that reach the terminal even while pytest
captures output, and tallies of answers printed at the end of a run."""

from __future__ import annotations

import pytest

__all__ = ["TALLY", "bind", "say", "tally"]

_config: pytest.Config | None = None


def bind(config: pytest.Config) -> None:
    """Called once per run (``pytest_configure`` in tests/conftest.py)."""
    global _config
    _config = config


def say(line: str) -> None:
    reporter = _config.pluginmanager.get_plugin("terminalreporter") if _config else None
    capture = _config.pluginmanager.get_plugin("capturemanager") if _config else None
    if reporter is None or capture is None:
        print(line, flush=True)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(line)


TALLY: dict[str, dict[int, int]] = {}  # fuzzer -> HTTP status -> how many times, printed at the end


def tally(fuzzer: str, code: int) -> None:
    counts = TALLY.setdefault(fuzzer, {})
    counts[code] = counts.get(code, 0) + 1
