"""Cron schedules as a CronJob's ``schedule`` reads them (robfig/cron's standard parser, which kube
uses): five fields, ``minute hour day-of-month month day-of-week``, each a comma list of ``*``, a
value or a range, with an optional ``/step``, month and weekday names allowed; the descriptors
``@yearly`` (``@annually``), ``@monthly``, ``@weekly``, ``@daily`` (``@midnight``), ``@hourly``;
and ``@every <Go duration>``. Times are UTC. Errors carry robfig's wording."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from apiserver.machinery.golang import parse_duration

__all__ = ["CronError", "Schedule", "parse"]

_DESCRIPTORS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
                "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
_MONTHS = {name: i + 1 for i, name in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep",
                                                 "oct", "nov", "dec"))}
_DAYS = {name: i for i, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
# (minimum, maximum, names) of minute, hour, day of month, month, day of week
_BOUNDS = ((0, 59, {}), (0, 23, {}), (1, 31, {}), (1, 12, _MONTHS), (0, 6, _DAYS))
SEARCH_DAYS = 5 * 366  # a schedule that matches no day in five years (31 February) never fires


class CronError(ValueError):
    """A schedule robfig/cron would refuse; the message is its own."""


@dataclass(frozen=True)
class Schedule:
    """When a schedule fires: a fixed interval (``@every``), or the sets of each cron field."""

    every: dt.timedelta | None = None
    minutes: frozenset[int] = frozenset()
    hours: frozenset[int] = frozenset()
    days: frozenset[int] = frozenset()
    months: frozenset[int] = frozenset()
    weekdays: frozenset[int] = frozenset()
    any_day: bool = True  # day of month is *: the day of week alone decides (and the other way round)
    any_weekday: bool = True

    def next_after(self, moment: dt.datetime) -> dt.datetime | None:
        """The first time strictly after ``moment`` that the schedule fires (None: never)."""
        moment = moment.astimezone(dt.UTC)
        if self.every is not None:
            return moment.replace(microsecond=0) + self.every
        start = moment.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
        day = start.replace(hour=0, minute=0)
        for _ in range(SEARCH_DAYS):
            if self._day_matches(day):
                for hour in sorted(self.hours):
                    for minute in sorted(self.minutes):
                        candidate = day.replace(hour=hour, minute=minute)
                        if candidate >= start:
                            return candidate
            day += dt.timedelta(days=1)
        return None

    def _day_matches(self, day: dt.datetime) -> bool:
        if day.month not in self.months:
            return False
        dom, dow = day.day in self.days, (day.weekday() + 1) % 7 in self.weekdays
        if self.any_day or self.any_weekday:  # robfig: a star in either means both must match
            return dom and dow
        return dom or dow


def parse(text: str) -> Schedule:
    spec = text.strip()
    if not spec:
        raise CronError("empty spec string")
    if spec.startswith("@every "):
        nanoseconds = parse_duration(spec[len("@every "):].strip())
        if nanoseconds is None:
            raise CronError(f"failed to parse duration {spec}: time: invalid duration "
                            f"\"{spec[len('@every '):].strip()}\"")
        if nanoseconds < 10**9:  # robfig rounds below a second up to one; a schedule is not a busy loop
            nanoseconds = 10**9
        return Schedule(every=dt.timedelta(seconds=nanoseconds // 10**9))
    if spec.startswith("@"):
        if spec not in _DESCRIPTORS:
            raise CronError(f"unrecognized descriptor: {spec}")
        spec = _DESCRIPTORS[spec]
    if spec.startswith(("TZ=", "CRON_TZ=")):
        raise CronError("a time zone in the schedule is not supported: schedules are in UTC")
    fields = spec.split()
    if len(fields) != 5:
        raise CronError(f"expected exactly 5 fields, found {len(fields)}: [{' '.join(fields)}]")
    sets = [_field(f, *bounds) for f, bounds in zip(fields, _BOUNDS, strict=True)]
    return Schedule(minutes=sets[0], hours=sets[1], days=sets[2], months=sets[3], weekdays=sets[4],
                    any_day=fields[2] in ("*", "?"), any_weekday=fields[4] in ("*", "?"))


def _field(text: str, low: int, high: int, names: dict[str, int]) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        out |= _range(part, low, high, names)
    return frozenset(out)


def _range(expr: str, low: int, high: int, names: dict[str, int]) -> set[int]:
    range_and_step = expr.split("/")
    if len(range_and_step) > 2:
        raise CronError(f"too many slashes: {expr}")
    low_and_high = range_and_step[0].split("-")
    if len(low_and_high) > 2:
        raise CronError(f"too many hyphens: {expr}")
    if low_and_high[0] in ("*", "?"):
        start, end = low, high
    else:
        start = _number(low_and_high[0], names)
        end = _number(low_and_high[1], names) if len(low_and_high) == 2 else start
    step = 1
    if len(range_and_step) == 2:
        step = _number(range_and_step[1], {})
        if len(low_and_high) == 1 and low_and_high[0] not in ("*", "?"):
            end = high  # "N/step" is "N-max/step"
        if step <= 0:
            raise CronError(f"step of range should be a positive number: {expr}")
    if start < low:
        raise CronError(f"beginning of range ({start}) below minimum ({low}): {expr}")
    if end > high:
        raise CronError(f"end of range ({end}) above maximum ({high}): {expr}")
    if start > end:
        raise CronError(f"beginning of range ({start}) beyond end of range ({end}): {expr}")
    return set(range(start, end + 1, step))


def _number(text: str, names: dict[str, int]) -> int:
    named = names.get(text.lower())
    if named is not None:
        return named
    if not text.isdigit():
        raise CronError(f"failed to parse int from {text}: strconv.Atoi: parsing \"{text}\": invalid syntax")
    return int(text)
