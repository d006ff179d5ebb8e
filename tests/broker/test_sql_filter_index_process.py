"""The property filter index in a real broker (issue 32 item 1, the cost bullet): a SQL92 pull
passes over the records its expression cannot match without reading them. Shown with a record
that cannot be read: one message's body is damaged on disk after it was stored (its CRC fails,
so any read of it answers MESSAGE_CORRUPT). A pull with ``k = 3`` reads the queue through to its
end past that record and gets exactly the messages with k = 3; a pull with ``k >= 0``, which
the digest decides on presence only, reads the record and is answered MESSAGE_CORRUPT naming
it; so is one with ``k = 5``, which matches it."""

from __future__ import annotations

import asyncio
import os
import zlib
from pathlib import Path

import pytest

from client import Producer
from client.admin import Admin
from protocol.message import DISPATCH_HEAD, HEAD_SIZE, iter_records, parse_msg_id
from protocol.pull import PullCorrupt, PullFound, PullNotFound, PullRequest, decode_pull_answer
from remoting.client import RemotingClient
from tests.support.procs import TEST_SEGMENT_BYTES, BrokerProc, started

pytestmark = pytest.mark.multiprocess

TOPIC = "Indexed"
SENT = 200


async def pull_all(address: str, expression: str) -> list[int] | PullCorrupt:
    """The queue offsets a SQL92 pull of queue 0 from its start gets, to the queue's end; or the
    corrupt answer that stopped it."""
    conn = await RemotingClient.connect(address, timeout=5.0)
    try:
        got: list[int] = []
        offset = 0
        while True:
            req = PullRequest(
                group="raw", topic=TOPIC, queue_id=0, offset=offset, filter_type="SQL92",
                subscription=expression, max_count=32,
            )  # fmt: skip
            answer = decode_pull_answer(await conn.request(req.code, req.header(), None, 10))
            if isinstance(answer, PullCorrupt):
                return answer
            if isinstance(answer, PullNotFound):
                return got
            assert isinstance(answer, PullFound), answer
            got += [r.queue_offset for r in iter_records(answer.body)]
            offset = answer.next_offset
    finally:
        conn.close()


def damage_record(data_dir: Path, msg_id: str, queue_offset: int) -> int:
    """Overwrite the first body byte of the record ``msg_id`` names in the CommitLog files of
    ``data_dir`` (checking it is queue offset ``queue_offset``), so its CRC fails; its CommitLog
    offset."""
    _, physical = parse_msg_id(msg_id)
    start = physical - physical % TEST_SEGMENT_BYTES
    fd = os.open(data_dir / "commitlog" / f"{start:020d}", os.O_RDWR)
    try:
        head = os.pread(fd, HEAD_SIZE, physical - start)
        size, _m, crc, _q, offset, _p, _t, _b = DISPATCH_HEAD.unpack(head)
        assert offset == queue_offset
        os.pwrite(fd, b"#", physical - start + HEAD_SIZE)
        record = os.pread(fd, size, physical - start)
    finally:
        os.close(fd)
    assert zlib.crc32(record[12:]) != crc  # no read of it can serve it now
    return physical


def test_a_sql92_pull_passes_over_a_record_it_cannot_match_unread(tmp_path: Path) -> None:
    with started(BrokerProc(tmp_path, extra_toml="enable_property_filter = true\n")) as broker:

        async def fill() -> list[str]:
            async with Admin(broker.address) as admin:
                await admin.create_topic(TOPIC, 1)
            async with Producer(broker.address) as producer:
                return [
                    (
                        await producer.send(
                            TOPIC, f"body-{i}".encode(), properties={"k": str(i % 10)}
                        )
                    ).msg_id
                    for i in range(SENT)
                ]

        ids = asyncio.run(fill())
        # Damage message 5 (k = 5) on disk: a byte of its body, so its CRC fails.
        physical = damage_record(broker.data_dir, ids[5], 5)

        assert asyncio.run(pull_all(broker.address, "k = 3")) == list(range(3, SENT, 10))
        for reads_it in ("k >= 0", "k = 5"):
            answer = asyncio.run(pull_all(broker.address, reads_it))
            assert isinstance(answer, PullCorrupt), (reads_it, answer)
            assert answer.physical_offset == physical, (reads_it, answer)
