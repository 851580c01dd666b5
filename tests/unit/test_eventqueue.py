"""A watcher's queue: events come out in the order they went in, to a reader that may wait or give up."""

from __future__ import annotations

import asyncio

import pytest

from apiserver.storage.cacher import EventQueue
from apiserver.storage.interface import MODIFIED, Event


def event(rv: int) -> Event:
    return Event(MODIFIED, rv, None)


async def test_events_come_out_in_the_order_they_were_offered() -> None:
    q = EventQueue()
    for rv in range(5):
        q.put_nowait(event(rv))
    assert q.qsize() == 5
    assert [(await q.get()).rv for _ in range(5)] == [0, 1, 2, 3, 4]
    assert q.empty()


async def test_a_waiting_reader_is_woken_by_the_next_event() -> None:
    q = EventQueue()
    reader = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    assert not reader.done()
    q.put_nowait(event(7))
    assert (await asyncio.wait_for(reader, 1)).rv == 7


async def test_a_reader_that_gave_up_loses_nothing() -> None:
    q = EventQueue()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(q.get(), 0.01)
    q.put_nowait(event(1))
    q.put_nowait(None)  # the end of the stream
    assert (await q.get()).rv == 1
    assert await q.get() is None


def test_taking_from_an_empty_queue_without_waiting_says_so() -> None:
    with pytest.raises(asyncio.QueueEmpty):
        EventQueue().get_nowait()
