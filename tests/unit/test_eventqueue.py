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


async def test_a_waiting_readers_sink_takes_events_without_waking_it_and_what_it_refuses_is_queued() -> None:
    q = EventQueue()
    taken: list[int] = []
    accept = True
    q.sink = lambda ev: accept and not taken.append(ev.rv)
    q.put_nowait(event(1))  # no reader waits: queued, in order with what follows
    assert (await q.get()).rv == 1 and taken == []
    reader = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.put_nowait(event(2))
    q.put_nowait(event(3))
    await asyncio.sleep(0)
    assert taken == [2, 3] and not reader.done()  # the reader stays parked
    accept = False
    q.put_nowait(event(4))  # refused: queued, and the reader woken for it
    q.put_nowait(event(5))  # behind a queued event: never past it into the sink
    assert (await asyncio.wait_for(reader, 1)).rv == 4
    assert taken == [2, 3] and (await q.get()).rv == 5


async def test_the_end_of_a_stream_always_wakes_the_reader() -> None:
    q = EventQueue()
    q.sink = lambda ev: True
    reader = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.put_nowait(None)
    assert await asyncio.wait_for(reader, 1) is None
