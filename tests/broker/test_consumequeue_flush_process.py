"""A broker killed with kill -9 while its ConsumeQueue files hold entries no flush synced yet
starts again with every acknowledged message readable by queue offset (issue 34: a flush now
fsyncs a ConsumeQueue file only once it has ``flush_consumequeue_least_pages`` of new entries,
the others every ``flush_consumequeue_thorough_interval_ms``).

A lone broker process, 256 queues (10,000 in ``make soak``), two messages put into each, each acknowledged; the periodic flushes have made the CommitLog durable
(the checkpoint's flushed offset is past the last put) while the checkpoint's dispatched offset,
where recovery replays the CommitLog into the queues from, stays behind: the ConsumeQueues were
left unsynced. Then kill -9: the start replays the records past the dispatched offset into their
queues (its ``commitlog recovered`` line counts them), and every queue serves its two messages at
offsets 0 and 1 and takes the next at 2. On the old code the flush synced every ConsumeQueue
file with the CommitLog, so the dispatched offset followed the flushed one."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.codes import RequestCode, ResponseCode
from protocol.message import parse_msg_id
from protocol.remoting import Header
from remoting.client import RemotingClient
from storage.checkpoint import Checkpoint, load_checkpoint
from tests.broker.test_lazy_queue_start import events, start_serving
from tests.broker.test_queue_descriptors import QUEUES, create_and_fill, each, one_more_everywhere
from tests.support.procs import BrokerProc
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess


def checkpoint(broker: BrokerProc) -> Checkpoint | None:
    return load_checkpoint(broker.data_dir / "checkpoint")


async def put_second(broker: BrokerProc, queues: int) -> int:
    """One more message (``p%d``) into every queue, each acknowledged at offset 1; returns the
    CommitLog offset of the last record stored."""
    conn = await RemotingClient.connect(broker.address)
    starts: list[int] = []
    try:

        async def send(q: int) -> None:
            header: Header = {"topic": f"Many{q // QUEUES:05d}", "queueId": q % QUEUES}
            resp = await conn.request(RequestCode.SEND_MESSAGE, header, b"p%d" % q, 60)
            assert resp.code == ResponseCode.SUCCESS, (q, resp.code, resp.header)
            assert int(str(resp.header["queueOffset"])) == 1, (q, resp.header)
            starts.append(parse_msg_id(str(resp.header["msgId"]))[1])

        await each(queues, send)
    finally:
        conn.close()
    return max(starts)


async def killed_with_queues_unsynced(tmp: Path, topics: int) -> None:
    queues = topics * QUEUES
    broker = BrokerProc(
        tmp,
        extra_toml=(
            "consumequeue_segment_entries = 64\n"
            "flush_interval_ms = 50\n"
            "flush_consumequeue_thorough_interval_ms = 600000\n"
        ),
    )
    try:
        broker.start_and_wait(60)
        filled = await create_and_fill(broker, topics)
        # A flush that starts once the fill is written takes the new queues' marks (their
        # directories): when enough of them are left for one syncfs, the flush syncs every
        # file and moves the dispatched offset to where it started. Left to a flush that
        # starts during the second puts, that would make some of them durable as well, and
        # the replay below would not need them (kill -9 alone, no power loss).
        wait_until(
            lambda: (c := checkpoint(broker)) is not None and c.flushed_offset > filled,
            "a flush after the fill, before the second puts",
            60,
        )
        last = await put_second(broker, queues)
        point = wait_until(
            lambda: (c := checkpoint(broker)) is not None and c.flushed_offset > last and c,
            "the periodic flush to make the CommitLog durable past the last put",
            60,
        )
        assert point.dispatched_offset < point.flushed_offset, (
            f"the checkpoint's dispatched offset {point.dispatched_offset} reached the flushed "
            f"offset {point.flushed_offset}: the flushes synced the ConsumeQueues of {queues} "
            "queues of two entries each"
        )
        broker.kill9()
        start_serving(broker)
        opened = events(broker, "commitlog recovered")[-1]
        assert opened["clean"] is False, opened
        assert opened["replayed"] >= queues, opened  # past the dispatched offset: the queues'
        await one_more_everywhere(broker, queues, [b"m%d", b"p%d"])
    finally:
        broker.stop()


async def test_kill_9_with_consumequeues_unsynced_loses_nothing(tmp_path: Path) -> None:
    await killed_with_queues_unsynced(tmp_path, topics=32)  # 256 queues


@pytest.mark.soak
async def test_kill_9_with_ten_thousand_consumequeues_unsynced(tmp_path: Path) -> None:
    await killed_with_queues_unsynced(tmp_path, topics=1250)
