"""Times as kube writes and reads them: one parser and one writer for every part of the server."""

import datetime as dt

import pytest

from apiserver.machinery.timefmt import age, human_duration, parse_rfc3339, rfc3339, seconds_since, time_of


@pytest.mark.parametrize("written", [
    "2026-11-27T20:10:12Z",  # metadata.creationTimestamp, a condition's lastTransitionTime
    "2026-11-27T20:10:12.345678Z",  # an audit event's stageTimestamp (RFC 3339 with microseconds)
    "2026-11-27T21:10:12+01:00",  # an offset instead of Z
])
def test_a_time_kube_wrote_is_read_as_the_same_moment_in_utc(written: str) -> None:
    parsed = parse_rfc3339(written)

    assert parsed.tzinfo is not None
    assert parsed.astimezone(dt.UTC).replace(microsecond=0) == dt.datetime(2026, 11, 27, 20, 10, 12, tzinfo=dt.UTC)


def test_a_time_without_a_zone_is_taken_as_utc() -> None:
    assert parse_rfc3339("2026-11-27T20:10:12") == dt.datetime(2026, 11, 27, 20, 10, 12, tzinfo=dt.UTC)


def test_what_is_not_a_time_is_refused_with_value_error() -> None:
    with pytest.raises(ValueError):
        parse_rfc3339("yesterday")


@pytest.mark.parametrize("field", [None, "", "yesterday", 1732738212, ["2026-11-27T20:10:12Z"]])
def test_a_field_without_a_time_in_it_has_no_time(field: object) -> None:
    assert time_of(field) is None


def test_a_field_holding_a_time_has_that_time() -> None:
    assert time_of("2026-11-27T20:10:12Z") == dt.datetime(2026, 11, 27, 20, 10, 12, tzinfo=dt.UTC)


def test_a_moment_is_written_in_utc_to_the_second_whatever_its_zone() -> None:
    moment = dt.datetime(2026, 11, 27, 21, 10, 12, 999_999, tzinfo=dt.timezone(dt.timedelta(hours=1)))

    assert rfc3339(moment) == "2026-11-27T20:10:12Z"


def test_what_is_written_reads_back_as_the_same_second() -> None:
    moment = dt.datetime(2026, 2, 28, 23, 59, 59, tzinfo=dt.UTC)

    assert parse_rfc3339(rfc3339(moment)) == moment


def test_seconds_since_counts_from_the_written_time_to_now() -> None:
    ten_minutes_ago = rfc3339(dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10))

    assert 599 <= seconds_since(ten_minutes_ago) <= 602


@pytest.mark.parametrize(("seconds", "shown"), [
    (0, "0s"), (119, "119s"), (125, "2m5s"), (600, "10m"), (12_000, "3h20m"), (30 * 3600, "30h"),
    (3 * 86_400 + 7200, "3d2h"), (400 * 86_400, "400d"), (-1, "0s"), (-5, "<invalid>"),
])
def test_an_age_is_shown_as_kubectl_shows_it(seconds: int, shown: str) -> None:
    assert human_duration(seconds) == shown


def test_the_age_of_a_missing_or_unreadable_time_is_unknown() -> None:
    assert age(None) == "<unknown>"
    assert age("not a time") == "<unknown>"
