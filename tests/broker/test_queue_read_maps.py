"""Reads over more queues than a broker keeps mapped map no ConsumeQueue file (issue 34: a
consumer pulling over 10,000 or 50,000 queues in turn).

A broker keeps at most a limit of ConsumeQueue segments mapped (4,096, or a quarter of its
descriptor limit: ``storage.consumequeue.SegmentMaps``). Writes past it go through the file
(tests/broker/test_queue_put_maps.py); reads of a queue whose segment was not mapped mapped it
(open, mmap, a page fault) and unmapped another (munmap): PULL, the offset search by time, the
max offset a consumer can read (the consumer stats' and the lag metric's, over every queue).
A read now maps a segment only while there is room and otherwise reads through the file.
Checked on a lone broker process under ``prlimit --nofile=256`` (64 mapped at most) with 640
queues: the ConsumeQueue files it maps (/proc/<pid>/maps) before and after a PULL and a search
by time of every queue, in the order they were filled (the first 64 queues' segments were
created mapped, so a read that maps leaves the last ones read mapped)."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.codes import RequestCode, ResponseCode
from protocol.message import iter_records
from protocol.remoting import Header
from remoting.client import RemotingClient
from tests.broker.test_queue_descriptors import QUEUES, each, limited_broker
from tests.broker.test_queue_put_maps import NOFILE, TOPICS, mapped_queue_files, start_filled

pytestmark = pytest.mark.multiprocess


async def read_everywhere(broker_address: str, queues: int) -> None:
    """Every queue's message (``m<queue>``) by PULL, and its offset by time."""
    conn = await RemotingClient.connect(broker_address)
    try:

        async def read(q: int) -> None:
            topic, queue_id = f"Many{q // QUEUES:05d}", q % QUEUES
            pull: Header = {
                "consumerGroup": "g",
                "topic": topic,
                "queueId": queue_id,
                "queueOffset": 0,
                "maxMsgNums": 32,
                "suspendTimeoutMillis": 0,
            }
            resp = await conn.request(RequestCode.PULL_MESSAGE, pull, timeout=30)
            assert resp.code == ResponseCode.SUCCESS, (q, resp.code, resp.header)
            got = [r.body for r in iter_records(resp.body or b"")]
            assert got == [b"m%d" % q], (q, got)
            search: Header = {"topic": topic, "queueId": queue_id, "timestamp": 0}
            resp = await conn.request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, search, timeout=30)
            assert resp.code == ResponseCode.SUCCESS, (q, resp.code, resp.header)
            assert int(str(resp.header["offset"])) == 0, (q, resp.header)

        await each(queues, read, inflight=8)
    finally:
        conn.close()


async def test_reads_over_ten_times_the_mapped_queues_map_none(tmp_path: Path) -> None:
    queues = TOPICS * QUEUES
    broker = limited_broker(tmp_path, NOFILE)
    try:
        held = await start_filled(broker)
        await read_everywhere(broker.address, queues)
        newly = mapped_queue_files(broker.pid) - held
        assert not newly, f"{len(newly)} ConsumeQueue files mapped by {queues} reads"
        assert len(mapped_queue_files(broker.pid)) <= NOFILE // 4
    finally:
        broker.stop()
