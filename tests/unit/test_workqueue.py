"""The work queue's per-key back-off (client-go's ItemExponentialFailureRateLimiter)."""

from __future__ import annotations

import pytest

from reconciler.loop.workqueue import WorkQueue, backoff


async def test_a_key_that_keeps_failing_waits_the_longest_delay_and_the_back_off_never_overflows() -> None:
    q = WorkQueue(base_delay=0.05, max_delay=10.0)
    delays = [q.add_rate_limited("stuck") for _ in range(1_100)]
    assert delays[:3] == [0.05, 0.1, 0.2]
    assert set(delays[8:]) == {10.0}
    assert q.failures("stuck") == 1_100
    await q.shutdown()


@pytest.mark.parametrize("failures", [1_100, 10_000, 10**30])
@pytest.mark.parametrize("base_delay", [5e-324, 1e-300, 0.005])
def test_the_back_off_reaches_the_cap_from_any_base_delay_after_any_number_of_failures(
        base_delay: float, failures: int) -> None:
    assert backoff(base_delay, 60.0, failures) == 60.0


def test_the_back_off_doubles_exactly_below_the_cap() -> None:
    assert [backoff(0.05, 1.0, n) for n in range(6)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0]
