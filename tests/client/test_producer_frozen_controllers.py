"""A send gives up at its deadline when two of three controllers are frozen.

The producer's first send asks the controllers for its producer id. That request waited up to
``send_deadline`` for each address, and repeated its rounds while the third controller answered
"not the leader, no leader known": with two controllers frozen (SIGSTOP: the connection is
accepted, no answer ever comes) ``rmqctl sendMessage`` (10 s deadline) failed after 82 s. Now
each request waits ``send_timeout`` at most and the rounds end at the send's deadline.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from client import Producer
from client.errors import ClientError
from tests.controller.support import ControllerCluster, agreed_leader

pytestmark = pytest.mark.multiprocess

DEADLINE = 2.0


@pytest.fixture
def controllers(tmp_path: Path) -> Iterator[ControllerCluster]:
    with ControllerCluster(tmp_path) as c:
        yield c


async def test_a_send_fails_by_its_deadline_with_two_controllers_frozen(
    controllers: ControllerCluster,
) -> None:
    leader = await agreed_leader([p.address for p in controllers.procs.values()])
    follower = next(i for i in controllers.procs if i != leader)
    frozen = [controllers.procs[leader], controllers.procs[follower]]
    # The answering one first, as an operator's list may have it: its "no leader known" makes
    # the request go round again.
    answering = next(p for i, p in controllers.procs.items() if i not in (leader, follower))
    bootstrap = ";".join([answering.address, *(p.address for p in frozen)])
    try:
        for p in frozen:
            p.signal(signal.SIGSTOP)
        async with Producer(bootstrap, send_deadline=DEADLINE, send_timeout=1.0) as producer:
            started = time.monotonic()
            with pytest.raises(ClientError) as failure:
                # Four times the deadline bounds a hang only; before, the send took 8.5 times it.
                async with asyncio.timeout(4 * DEADLINE):
                    await producer.send("T", b"x")
            print(f"failed after {time.monotonic() - started:.2f} s: {failure.value}")
        assert "timed out" in str(failure.value)
    finally:
        for p in frozen:
            p.signal(signal.SIGCONT)
