"""Auto-batched sends across a kill -9 of the master (issue 17, item 1).

Three controllers and a group of three brokers as real processes; one producer with
auto-batching on (the default) and 64 sends in flight, so most requests are gathered batches.
The master is killed while they run. Every send either succeeds or raises a client error, and
every acknowledged one is consumed afterwards with its own body at the place its result named:
a batch retried on the new master acknowledges nothing the broker did not store.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from client import Producer
from client.bootstrap import Bootstrap
from client.errors import ClientError
from client.message import SendResult
from client.routes import MessageQueue
from protocol.codes import RequestCode
from protocol.remoting import Frame
from tests.cluster.support import (
    consume_all,
    new_master,
    node_at,
    start_group_with_topic,
)
from tests.support.cluster import Cluster
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "AutoBatchTopic"
IN_FLIGHT = 64


class CountingProducer(Producer):
    """Counts the gathered batches it sends (SEND_BATCH_MESSAGE requests handed to its router,
    each retried there until it succeeds or its deadline passes)."""

    batches = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        send = self._router.send

        async def counting(
            topic: str, code: int, *rest: Any, **kw: Any
        ) -> tuple[Frame, MessageQueue]:
            if code == RequestCode.SEND_BATCH_MESSAGE:
                self.batches += 1
            return await send(topic, code, *rest, **kw)

        self._router.send = counting  # type: ignore[method-assign]


async def test_no_acknowledged_message_is_lost_when_the_master_dies_mid_batch(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path)
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    try:
        master = await start_group_with_topic(cluster, boot, TOPIC)

        acked: dict[tuple[str, int, int], bytes] = {}
        failed: list[BaseException] = []
        stop = asyncio.Event()
        async with CountingProducer(cluster.controller_addresses) as producer:
            assert producer.auto_batch

            async def sender(w: int) -> None:
                i = 0
                while not stop.is_set():
                    body = f"w{w}-{i}".encode()
                    try:
                        r: SendResult = await producer.send(TOPIC, body)
                    except ClientError as exc:
                        failed.append(exc)
                    else:
                        acked[(r.broker_name, r.queue_id, r.queue_offset)] = body
                    i += 1

            async def acked_at_least(n: int) -> bool:
                return len(acked) >= n

            tasks = [asyncio.create_task(sender(w)) for w in range(IN_FLIGHT)]
            try:
                await wait_until_async(
                    lambda: acked_at_least(500), "sends before the kill", 30, interval=0.05
                )
                before_kill = producer.batches
                node_at(cluster, master).kill9()
                await new_master(boot, cluster, master)
                after = len(acked)
                await wait_until_async(
                    lambda: acked_at_least(after + 500),
                    "sends through the new master",
                    30,
                    interval=0.05,
                    on_timeout=cluster.logs,
                )
            finally:
                stop.set()
                # Every send ends: it succeeded or raised (a ClientError, caught above).
                await asyncio.wait_for(asyncio.gather(*tasks), producer.send_deadline + 5)
        assert before_kill >= 1 and producer.batches > before_kill  # gathered on both masters
        got = await consume_all(cluster.controller_addresses, TOPIC, set(acked), timeout=60)
        missing = set(acked) - set(got)
        assert not missing, f"{len(missing)} acknowledged sends not consumed, e.g. {min(missing)}"
        assert {k: got[k] for k in acked} == acked  # each at the place its own result named
        # Each send retried until its own deadline (the default, 10 s) rides out the failover.
        assert not failed, f"{len(failed)} sends failed, e.g. {failed[:2]}"
    finally:
        boot.close()
        cluster.stop()
