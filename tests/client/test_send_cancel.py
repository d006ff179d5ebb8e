"""A send cancelled at any moment ends cancelled: the cancellation is never lost.

On Python 3.11 ``asyncio.wait_for`` returns the inner result when the waiting task is cancelled
in the loop turn in which the inner call completed, and the cancellation is gone. The send's
route lookup and connect were bounded with it (client/routing_retry.py): a send cancelled as
its route came in went on, sent the message and returned a result to nobody (a caller's own
deadline around ``send``, or a task stopped at shutdown, did not stop it). They are bounded with
``asyncio.timeout`` now. Real fake broker groups on loopback; the cancel lands after 0 to 79
turns of the loop, so one of them falls in the turn the route (or the connection) arrives.
"""

from __future__ import annotations

import asyncio

from client.producer import Producer
from tests.client.fakebroker import FakeCluster


async def test_a_send_cancelled_in_any_loop_turn_ends_cancelled(cluster: FakeCluster) -> None:
    address = cluster.brokers["broker-a"].address
    lost: list[int] = []
    for _ in range(2):
        for turns in range(80):
            producer = Producer(address, idempotent=False, send_timeout=2, connect_timeout=2)
            await producer.start()
            try:
                task = asyncio.create_task(producer.send("T", b"cancelled"))
                for _ in range(turns):
                    await asyncio.sleep(0)
                if task.done():  # sent before the cancel was asked: nothing to lose
                    task.result()
                    break
                task.cancel()
                (outcome,) = await asyncio.gather(task, return_exceptions=True)
                if not isinstance(outcome, asyncio.CancelledError):
                    lost.append(turns)
            finally:
                await producer.close()
    assert not lost, f"sends went on after a cancel that came after these loop turns: {lost}"
