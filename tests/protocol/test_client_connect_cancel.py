"""A connect cancelled at any moment ends cancelled: the cancellation is never lost.

On Python 3.11 ``asyncio.wait_for`` returns the inner result when the waiting task is cancelled
in the loop turn in which the inner call completed, and the cancellation is gone: a heartbeat
loop stopped during a reconnect then ran on, and a test's teardown that waited for it hung for
its whole 300 s timeout (the fresh-clone CI at c77400f). ``RemotingClient.connect`` now bounds
the connect with ``asyncio.timeout``. A real server on loopback; the cancel lands after 0 to 39
turns of the loop, so one of them falls in the turn the connection is made.
"""

from __future__ import annotations

import asyncio

from remoting.client import RemotingClient
from remoting.server import RemotingServer


async def test_a_connect_cancelled_in_any_loop_turn_ends_cancelled() -> None:
    server = RemotingServer(name="cancel-probe")
    port = await server.start("127.0.0.1", 0)
    lost: list[int] = []
    try:
        for _ in range(3):
            for turns in range(40):
                task = asyncio.create_task(RemotingClient.connect(f"127.0.0.1:{port}", 5.0))
                for _ in range(turns):
                    await asyncio.sleep(0)
                if task.done():  # connected before the cancel was asked: nothing to lose
                    task.result().close()
                    continue
                task.cancel()
                (outcome,) = await asyncio.gather(task, return_exceptions=True)
                if not isinstance(outcome, asyncio.CancelledError):
                    lost.append(turns)
                    if isinstance(outcome, RemotingClient):
                        outcome.close()
    finally:
        await server.stop()
    assert not lost, f"cancellations lost after these numbers of loop turns: {lost}"
