"""What the tests share beyond fixtures: etcd's history and the checks against it, the load the fault
tests run under, the Status contract and the client the fuzzers check it with, the generators of
hostile input, the servers the differential suites compare and their raw client, and reporting.
Fixtures themselves stay in tests/conftest.py (pytest finds them there).
"""

from __future__ import annotations

import os

__all__ = ["SOAK"]

SOAK = os.environ.get("VC_SOAK", "") not in ("", "0")
"""``VC_SOAK=1`` (``make soak``): more rounds, longer outages, many more (non-deterministic) examples."""
