"""ha_bench's produce phases take a stalled master's refusals as a production client does
(bench/master_link.py): a master frozen mid-phase (SIGSTOP, as a loaded machine stalls a
process) is fenced when it resumes, or replaced by the controllers; the sends it refused are
sent again to the master the controllers name, the phase completes and says how many it
retried, and every message is stored.

Real processes on loopback (bench/group_of_three.py: three controllers, broker-a x3, all-ack);
the master is thawed and every process ended by its PID when the test ends, also on failure.
"""

from __future__ import annotations

import asyncio
import re
import signal

import pytest

from bench.group_of_three import group_of_three, payload
from bench.ha_bench import QUEUES, TOPIC, produce, producer_connection
from protocol.codes import ResponseCode
from protocol.pull import MaxOffsetQuery
from remoting.client import RemotingClient
from tests.cluster.support import epoch_cache, node_at, sync_state

pytestmark = [pytest.mark.multiprocess, pytest.mark.xdist_group("benches")]

MESSAGES = 20_000
"""Sends of the phase: far more than go through before the freeze (about 200 messages) and
the 1.5 s it lasts."""
FREEZE = 1.5
"""Seconds the master is frozen: beyond its 1 s write lease and the controllers' 1 s timeout."""


async def stored(address: str) -> int:
    """Messages in the topic's queues on the broker at ``address``."""
    conn = await RemotingClient.connect(address)
    try:
        total = 0
        for q in range(QUEUES):
            ask = MaxOffsetQuery(topic=TOPIC, queue_id=q)
            resp = await conn.request(ask.code, *ask.encode(), timeout=5.0)
            assert resp.code == ResponseCode.SUCCESS, resp.header
            total += int(resp.header["offset"])
        return total
    finally:
        conn.close()


async def test_a_produce_phase_retries_the_sends_a_frozen_master_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    body = payload(1024)
    async with group_of_three("rmq-test-ha-retry-") as broker_a:
        master = node_at(broker_a.cluster, broker_a.master)
        link = await producer_connection(broker_a)

        async def stall() -> None:
            async with asyncio.timeout(20):  # the phase has stored about 200 messages
                while int((await epoch_cache(master.address))["maxOffset"]) < 200 * 1024:
                    await asyncio.sleep(0.01)
            master.signal(signal.SIGSTOP)
            try:
                await asyncio.sleep(FREEZE)  # the stall itself, not a wait for a condition
            finally:
                master.signal(signal.SIGCONT)

        stalled = asyncio.create_task(stall())
        try:
            async with asyncio.timeout(60):
                await produce(link, MESSAGES, body, master.pid)
            await stalled  # it froze the master before the phase ended
        finally:
            master.signal(signal.SIGCONT)
            stalled.cancel()
            await asyncio.gather(stalled, return_exceptions=True)
            link.close()
        out = capsys.readouterr().out
        found = re.search(r"^  retried sends: (\d+) of (\d+)(.*)$", out, re.MULTILINE)
        assert found is not None, out
        retried, sends, refusals = int(found[1]), int(found[2]), found[3]
        assert sends == MESSAGES and retried > 0, out
        doc = await sync_state(broker_a.boot)
        assert doc is not None and doc.get("masterAddress"), doc
        # A send refused after it was stored (a flush or replica timeout) may be stored twice.
        maybe_twice = sum(int(n) for n in re.findall(r"FLUSH_\w+ (\d+)", refusals))
        assert MESSAGES <= await stored(doc["masterAddress"]) <= MESSAGES + maybe_twice, out
