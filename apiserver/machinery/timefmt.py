"""Times as kube writes them (RFC 3339, seconds, UTC) and ages as kubectl shows them."""

from __future__ import annotations

import datetime as dt
from typing import Any

__all__ = ["age", "human_duration", "now_rfc3339", "parse_rfc3339", "rfc3339", "seconds_since", "time_of"]


def human_duration(seconds: float) -> str:
    """Age as kubectl shows it (apimachinery's duration.HumanDuration rules)."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def rfc3339(moment: dt.datetime) -> str:
    """``moment`` (timezone-aware) as kube writes a time: RFC 3339 in UTC, to the second."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_rfc3339() -> str:
    return rfc3339(dt.datetime.now(dt.UTC))


def parse_rfc3339(value: str) -> dt.datetime:
    parsed = dt.datetime.fromisoformat(value)  # C-fast; Python 3.11 reads the trailing Z
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def time_of(value: Any) -> dt.datetime | None:
    """The time in an object's field (a condition's ``lastTransitionTime``, an annotation); None when
    the field is missing or holds something that is not a time."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_rfc3339(value)
    except ValueError:
        return None


def seconds_since(timestamp: str) -> float:
    """Seconds from a timestamp kube wrote until now (negative if it is ahead of this clock)."""
    return (dt.datetime.now(dt.UTC) - parse_rfc3339(timestamp)).total_seconds()


def age(timestamp: str | None) -> str:
    if not timestamp:
        return "<unknown>"
    try:
        return human_duration(seconds_since(timestamp))
    except ValueError:
        return "<unknown>"
