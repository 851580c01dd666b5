"""Timestamps as the API writes them: RFC 3339 in UTC, to the second (metav1.Time)."""

from __future__ import annotations

import datetime as dt

__all__ = ["now_rfc3339", "parse_rfc3339"]


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(value: str) -> dt.datetime:
    parsed = dt.datetime.fromisoformat(value)  # C-fast; Python 3.11 reads the trailing Z
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
