"""The bounded buffer between pull tasks and the application."""

from __future__ import annotations

import asyncio

from client.buffer import MessageBuffer


def keep_all(_key: object) -> bool:
    return True


async def test_put_waits_while_full_and_resumes_when_the_application_takes() -> None:
    buf: MessageBuffer[str, int] = MessageBuffer(capacity=4)
    await buf.put("q0", [1, 2, 3, 4])
    blocked = asyncio.ensure_future(buf.put("q1", [5]))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not blocked.done()
    assert buf.take(10, keep_all) == [("q0", [1, 2, 3, 4])]
    await asyncio.wait_for(blocked, 1)
    assert len(buf) == 1


async def test_take_splits_a_batch_larger_than_asked_and_keeps_the_rest_in_order() -> None:
    buf: MessageBuffer[str, int] = MessageBuffer(capacity=100)
    await buf.put("q0", [1, 2, 3])
    await buf.put("q1", [4])
    assert buf.take(2, keep_all) == [("q0", [1, 2])]
    assert buf.take(10, keep_all) == [("q0", [3]), ("q1", [4])]
    assert len(buf) == 0


async def test_discard_drops_a_given_away_queue_and_frees_space() -> None:
    buf: MessageBuffer[str, int] = MessageBuffer(capacity=2)
    await buf.put("q0", [1, 2])
    blocked = asyncio.ensure_future(buf.put("q1", [3]))
    await asyncio.sleep(0)
    assert buf.discard("q0") == 2
    await asyncio.wait_for(blocked, 1)
    assert buf.take(10, keep_all) == [("q1", [3])]


async def test_take_skips_batches_of_dropped_queues() -> None:
    buf: MessageBuffer[str, int] = MessageBuffer(capacity=10)
    await buf.put("dead", [1])
    await buf.put("live", [2])
    assert buf.take(10, lambda k: k == "live") == [("live", [2])]


async def test_wait_returns_false_after_its_timeout_and_close_wakes_waiters() -> None:
    buf: MessageBuffer[str, int] = MessageBuffer(capacity=1)
    assert await buf.wait(0.01) is False
    waiter = asyncio.ensure_future(buf.wait(None))
    await asyncio.sleep(0)
    buf.close()
    assert await asyncio.wait_for(waiter, 1) is False
