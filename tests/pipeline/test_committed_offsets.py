"""GET_MAX_OFFSET with ``committed``: the max queue offset a reader limited to the confirm
offset can reach (what the Spark source plans batches up to)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.codes import RequestCode, ResponseCode
from remoting.client import RemotingClient
from storage.store import MessageStore
from tests.storage.support import TOPIC, messages, open_store
from tests.support.procs import BrokerProc

NOW = 1_700_000_100_000


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    s = open_store(tmp_path / "data")
    yield s
    s.close()


def test_visible_max_offset_stops_at_the_last_record_below_the_limit(store: MessageStore) -> None:
    assert store.queue_visible_max_offset(TOPIC, 0, 0) == 0  # no queue yet
    a = store.put(TOPIC, 0, messages(3), NOW)
    store.put(TOPIC, 1, messages(2), NOW)  # interleaved: another queue's records in between
    b = store.put(TOPIC, 0, messages(4), NOW)
    assert store.queue_visible_max_offset(TOPIC, 0, None) == 7
    assert store.queue_visible_max_offset(TOPIC, 0, b.end_offset) == 7
    assert store.queue_visible_max_offset(TOPIC, 0, b.end_offset - 1) == 6
    assert store.queue_visible_max_offset(TOPIC, 0, a.end_offset) == 3
    # A limit inside the other queue's records: queue 0 is visible up to its first batch.
    assert store.queue_visible_max_offset(TOPIC, 0, a.end_offset + 10) == 3
    assert store.queue_visible_max_offset(TOPIC, 0, a.physical_offsets[1]) == 1
    assert store.queue_visible_max_offset(TOPIC, 0, 0) == 0
    # Every limit agrees with what get() serves under it.
    for limit in range(0, b.end_offset + 1, 97):
        served = 0
        while True:
            res = store.get(TOPIC, 0, served, 64, 1 << 20, max_physical_offset=limit)
            if res.count == 0:
                break
            served = res.next_offset
        assert store.queue_visible_max_offset(TOPIC, 0, limit) == served


@pytest.mark.multiprocess
async def test_committed_flag_on_a_lone_broker_and_bad_values(broker: BrokerProc) -> None:
    conn = await RemotingClient.connect(broker.address)
    try:
        for i in range(3):
            await conn.call(RequestCode.SEND_MESSAGE, {"topic": "C", "queueId": 1}, b"m%d" % i)
        where = {"topic": "C", "queueId": 1}
        raw = await conn.call(RequestCode.GET_MAX_OFFSET, where)
        committed = await conn.call(RequestCode.GET_MAX_OFFSET, {**where, "committed": True})
        # A lone broker has no replicas to wait for: everything stored is committed.
        assert raw.header["offset"] == committed.header["offset"] == 3
        bad = await conn.request(RequestCode.GET_MAX_OFFSET, {**where, "committed": "yes"})
        assert bad.code == ResponseCode.BAD_REQUEST and "committed" in str(bad.header["remark"])
    finally:
        conn.close()
