"""A watcher's queue: events come out in the order they went in, to a reader that may wait or give up; a
reader that falls its capacity behind loses its watch, not the server's memory."""

from __future__ import annotations

import asyncio

import pytest

from apiserver.storage.cacher import EventQueue, Watcher
from apiserver.storage.interface import ADDED, MODIFIED, Entry, Event, match_all


def event(rv: int) -> Event:
    return Event(MODIFIED, rv, None)


def added(rv: int) -> Event:
    return Event(ADDED, rv, Entry.of(f"/vc/ns/o{rv}", "ns", f"o{rv}", rv, {"metadata": {"name": f"o{rv}"}}))


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


async def test_a_full_queue_refuses_the_next_event_keeps_what_it_holds_and_still_takes_the_end() -> None:
    q = EventQueue(capacity=2)
    assert q.put_nowait(event(1)) and q.put_nowait(event(2))
    assert not q.put_nowait(event(3))
    assert q.put_nowait(None)  # the end of the stream is never refused
    assert [await q.get() for _ in range(3)] == [event(1), event(2), None]


async def test_a_reader_waiting_on_an_empty_queue_takes_events_through_its_sink_whatever_the_capacity() -> None:
    q = EventQueue(capacity=1)
    taken: list[int] = []
    q.sink = lambda ev: not taken.append(ev.rv)
    reader = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    assert all(q.put_nowait(event(rv)) for rv in range(5))
    assert taken == [0, 1, 2, 3, 4] and q.empty()
    reader.cancel()


def test_a_watcher_that_falls_its_capacity_behind_is_closed_after_what_it_holds() -> None:
    watcher = Watcher(None, match_all, False, 3)
    for rv in range(1, 6):
        watcher.offer(added(rv))
    assert watcher.closed_reason == "the watcher fell too far behind"
    held = [watcher.queue.get_nowait() for _ in range(watcher.queue.qsize())]
    assert [ev.rv if ev else None for ev in held] == [1, 2, 3, None]  # nothing after the end of its stream
