"""Puts over more queues than a broker keeps mapped map no ConsumeQueue file (issue 34: the put's
cost grew 1.6 to 2 times from 1,000 to 10,000 and 50,000 queues).

A broker keeps at most a limit of ConsumeQueue segments mapped (4,096, or a quarter of its
descriptor limit: ``storage.consumequeue.SegmentMaps``). Puts over more queues than that, in
turn, found each queue's segment unmapped: each put mapped it (open, mmap, a page fault) and
unmapped another (munmap), on the master and on every replica. A write now maps a segment only
while there is room and otherwise writes through the file. Checked on a lone broker process
under ``prlimit --nofile=256`` (64 mapped at most) with 640 queues, ten times as many, the
bench's 10x column in small: the ConsumeQueue files it maps (/proc/<pid>/maps) before and after
a put to every queue in the other order, then every message after a kill -9 and a start."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Header
from remoting.client import RemotingClient
from tests.broker.test_queue_descriptors import (
    QUEUES,
    create_and_fill,
    each,
    limited_broker,
    one_more_everywhere,
)
from tests.support.procs import BrokerProc

pytestmark = pytest.mark.multiprocess

NOFILE = 256
"""The broker keeps a quarter of it, 64 segments, mapped at most."""
TOPICS = 80
"""640 queues: ten times as many as may be mapped."""


def mapped_queue_files(pid: int) -> set[str]:
    """The ConsumeQueue files process ``pid`` maps now."""
    with open(f"/proc/{pid}/maps") as maps:
        return {line.split()[-1] for line in maps if "/consumequeue/" in line}


async def start_filled(broker: BrokerProc) -> set[str]:
    """Start ``broker`` and put a message in every queue (each queue's segment created, the
    first ones mapped); the ConsumeQueue files it maps then."""
    broker.start_and_wait(60)
    await create_and_fill(broker, TOPICS)
    held = mapped_queue_files(broker.pid)
    assert 0 < len(held) <= NOFILE // 4, len(held)
    return held


async def put_everywhere_backwards(broker_address: str, queues: int) -> None:
    """``p<queue>`` to every queue, the last queue first (the order the fill did not use, so
    the segments a put maps are other ones than the fill left mapped)."""
    conn = await RemotingClient.connect(broker_address)
    try:

        async def send(i: int) -> None:
            q = queues - 1 - i
            header: Header = {"topic": f"Many{q // QUEUES:05d}", "queueId": q % QUEUES}
            resp = await conn.request(RequestCode.SEND_MESSAGE, header, b"p%d" % q, 60)
            assert resp.code == ResponseCode.SUCCESS, (q, resp.code, resp.header)
            assert int(str(resp.header["queueOffset"])) == 1, (q, resp.header)

        await each(queues, send, inflight=8)
    finally:
        conn.close()


async def test_puts_over_ten_times_the_mapped_queues_map_none(tmp_path: Path) -> None:
    queues = TOPICS * QUEUES
    broker = limited_broker(tmp_path, NOFILE)
    try:
        held = await start_filled(broker)
        await put_everywhere_backwards(broker.address, queues)
        newly = mapped_queue_files(broker.pid) - held
        assert not newly, f"{len(newly)} ConsumeQueue files mapped by {queues} puts"

        broker.kill9()  # the entries written through the files: in the page cache, as mapped
        broker.start_and_wait(120)
        await one_more_everywhere(broker, queues, [b"m%d", b"p%d"])
    finally:
        broker.stop()
