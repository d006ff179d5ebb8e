"""POP over a CommitLog record that fails its CRC, against a real broker: the group receives
every other message and the broker keeps serving (a POP passes over the unreadable one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.simple_consumer import PopMessage, SimpleConsumer
from tests.storage.test_store_corruption import COUNT, TOPIC, filled_then_stopped, flip
from tests.support.procs import BrokerProc, free_port
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess


async def test_pop_passes_over_an_unreadable_record(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    broker, on_disk = await filled_then_stopped(broker_factory, tmp_path, free_port(), kill=False)
    bad = on_disk[10]
    flip(bad, 200)  # in the body: the CRC no longer matches
    since = len(broker.log())
    broker.start_and_wait()
    got: list[PopMessage] = []
    async with SimpleConsumer(broker.address, "G", TOPIC) as consumer:
        for _ in range(40):
            batch = await consumer.receive(64, invisible_duration=30, wait=0.5)
            got += batch
            if batch:
                assert set(await consumer.ack_many(batch)) == {None}
            if len(got) >= COUNT - 1:
                break
    assert sorted(m.queue_offset for m in got) == [i for i in range(COUNT) if i != 10]
    # Log lines are written by the daemon's log thread: the answers can come first.
    await wait_until_async(
        lambda: _logged(broker, since, "pop passed over an unreadable message"), "the log line", 10
    )


async def _logged(broker: BrokerProc, since: int, line: str) -> bool:
    return line in broker.log()[since:]
