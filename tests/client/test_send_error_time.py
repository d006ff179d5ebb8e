"""A send that fails says how long it took, also when it waited behind another request.

Found in a rolling-restart trial (docs/operations.md, "Upgrades, one node at a time"): while a
new master rebuilt its idempotent producers' state, eight concurrent sends failed after 10 s,
and six of them said `failed after 1 attempt(s) in 0.0s: request 320 to ... timed out after
0.001s`. Auto-batching keeps one request in flight per broker group: those sends had waited the
whole deadline behind the first one, then left as a batch with nothing left of their deadline.
The message now counts from the send() call and says how long it waited behind another request.
"""

from __future__ import annotations

import asyncio
import re
import signal
from pathlib import Path

import pytest

from client.admin import Admin
from client.errors import SendError
from client.producer import Producer
from tests.support.procs import BrokerProc, started

pytestmark = pytest.mark.multiprocess

DEADLINE = 3.0


async def test_every_failed_send_counts_its_time_from_its_own_call(tmp_path: Path) -> None:
    with started(BrokerProc(tmp_path)) as broker:
        async with Admin(broker.address) as admin:
            await admin.create_topic("frozen", 4)
        try:
            async with Producer(
                broker.address, send_deadline=DEADLINE, send_timeout=1.0
            ) as producer:
                await producer.send("frozen", b"warm-up")  # route and connection ready
                broker.signal(signal.SIGSTOP)  # answers nothing, connections stay open
                outcomes = await asyncio.gather(
                    *(producer.send("frozen", f"m{i}".encode()) for i in range(8)),
                    return_exceptions=True,
                )
        finally:
            broker.signal(signal.SIGCONT)
    errors = [o for o in outcomes if isinstance(o, SendError)]
    assert len(errors) == len(outcomes), outcomes
    for error in errors:
        took = re.search(r" in (\d+\.\d)s", str(error))
        assert took is not None and float(took.group(1)) >= DEADLINE - 0.5, str(error)
    # the ones that left behind the first say so
    assert any("waited" in str(e) for e in errors), [str(e) for e in errors]
