"""GET_CONSUME_STATS, GET_CONSUMER_CONNECTION_LIST and rmq_consumer_group_lag on an in-process
broker over a real socket: the lag arithmetic against the store, the confirm offset as the max
offset a consumer can read, the last consume time, the metric read from the scrape thread, and
bad requests answered BAD_REQUEST."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import msgpack
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.broker import Broker
from broker.consumer_stats import LAG_QUEUE_LOADS_PER_SCRAPE
from protocol.codes import RequestCode, ResponseCode
from protocol.consume_stats import ConsumeStats, decode_connections
from protocol.message import Message
from protocol.remoting import Scalar
from remoting.client import RemotingClient
from tests.broker.support import ConfirmedUpTo, running, small_config

NOW = 1_700_000_000_000


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with running(small_config(tmp_path, listen="127.0.0.1:0")) as b:
        b.ctx.create_topic("T", 2)
        for queue_id, count in ((0, 10), (1, 4)):
            batch = [Message(topic="T", body=b"x" * 100) for _ in range(count)]
            b.ctx.store.put("T", queue_id, batch, now_ms=NOW)
        yield b


async def call(b: Broker, code: int, header: dict[str, Scalar]) -> tuple[int, bytes | None]:
    conn = await RemotingClient.connect(f"127.0.0.1:{b.port}", timeout=2.0)
    try:
        resp = await conn.request(code, header, None, 5.0)
        return resp.code, resp.body
    finally:
        conn.close()


async def stats(b: Broker, **header: Scalar) -> ConsumeStats:
    code, body = await call(b, RequestCode.GET_CONSUME_STATS, header)
    assert code == ResponseCode.SUCCESS
    return ConsumeStats.decode(body)


async def commit(b: Broker, group: str, queue_id: int, offset: int) -> None:
    header: dict[str, Scalar] = {
        "consumerGroup": group,
        "topic": "T",
        "queueId": queue_id,
        "commitOffset": offset,
    }
    code, _ = await call(b, RequestCode.UPDATE_CONSUMER_OFFSET, header)
    assert code == ResponseCode.SUCCESS


def scraped_lag(b: Broker) -> dict[tuple[str, str], float]:
    text = generate_latest(b.metrics.registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        if family.name == "rmq_consumer_group_lag":
            for s in family.samples:
                out[(s.labels["group"], s.labels["topic"])] = s.value
    return out


async def test_lag_per_queue_is_max_minus_committed_and_the_metric_sums_it(broker: Broker) -> None:
    await commit(broker, "g", 0, 3)
    await commit(broker, "g", 1, 4)
    doc = await stats(broker, consumerGroup="g")
    assert doc.role == "MASTER" and doc.broker_name == "broker-a"
    rows = doc.groups["g"]
    assert [(q.queue_id, q.max_offset, q.consumer_offset, q.lag) for q in rows] == [
        (0, 10, 3, 7),
        (1, 4, 4, 0),
    ]
    assert all(q.last_consume_ms for q in rows)
    # Read from the scrape thread (as /metrics does) and from the loop thread: the same sum.
    assert await asyncio.to_thread(scraped_lag, broker) == {("g", "T"): 7.0}
    assert scraped_lag(broker) == {("g", "T"): 7.0}
    # Unknown group: nothing; every group without consumerGroup; one topic with topic.
    assert (await stats(broker, consumerGroup="nobody")).groups == {}
    await commit(broker, "h", 0, 10)
    assert sorted((await stats(broker)).groups) == ["g", "h"]
    assert (await stats(broker, topic="other")).groups == {}
    assert await asyncio.to_thread(scraped_lag, broker) == {("g", "T"): 7.0, ("h", "T"): 4.0}


async def test_a_queue_never_committed_counts_from_its_min_offset(broker: Broker) -> None:
    await commit(broker, "g", 0, 10)
    (q0, q1) = (await stats(broker, consumerGroup="g")).groups["g"]
    assert (q0.lag, q1.consumer_offset, q1.lag, q1.last_consume_ms) == (0, None, 4, None)


async def test_max_offset_is_what_consumers_can_read_up_to_the_confirm_offset(
    broker: Broker,
) -> None:
    """In controller mode a consumer reads up to the confirm offset: a group that consumed all
    of that has lag 0 although more is stored."""
    # Confirmed: the first 6 messages of queue 0 (queue 0's batch was stored first).
    sixth_end = _end_of_entry(broker, 5)
    broker.ctx.ha = ConfirmedUpTo(sixth_end)  # type: ignore[assignment]
    await commit(broker, "g", 0, 6)
    await commit(broker, "g", 1, 0)
    rows = (await stats(broker, consumerGroup="g")).groups["g"]
    assert [(q.max_offset, q.lag) for q in rows] == [(6, 0), (0, 0)]
    assert await asyncio.to_thread(scraped_lag, broker) == {("g", "T"): 0.0}


def _end_of_entry(b: Broker, index: int) -> int:
    """CommitLog offset just past queue 0's message ``index``."""
    store = b.ctx.store
    queue = store._queues.get("T", 0)
    assert queue is not None
    physical, size, _ = queue.entry(index)
    return physical + size


async def test_last_consume_time_moves_only_with_the_offset(broker: Broker) -> None:
    offsets = broker.ctx.offsets
    await commit(broker, "g", 0, 2)
    first = offsets.last_consume_ms("g", "T", 0)
    assert first is not None
    offsets.commit("g", "T", 0, 2, first - 5_000)  # as if committed 5 s ago
    await commit(broker, "g", 0, 2)  # the same offset again: the time stays
    assert offsets.last_consume_ms("g", "T", 0) == first - 5_000
    await commit(broker, "g", 0, 3)
    moved = offsets.last_consume_ms("g", "T", 0)
    assert moved is not None and moved >= first


async def test_all_consumer_offsets_with_times_is_what_a_slave_copies(broker: Broker) -> None:
    await commit(broker, "g", 1, 2)
    code, body = await call(broker, RequestCode.GET_ALL_CONSUMER_OFFSET, {"withTimes": True})
    assert code == ResponseCode.SUCCESS
    doc = msgpack.unpackb(body, strict_map_key=False)
    assert doc["offsets"] == {"g": {"T": {1: 2}}}
    assert doc["lastConsumeMs"] == {
        "g": {"T": {1: broker.ctx.offsets.last_consume_ms("g", "T", 1)}}
    }
    code, body = await call(broker, RequestCode.GET_ALL_CONSUMER_OFFSET, {})
    assert msgpack.unpackb(body, strict_map_key=False) == {"g": {"T": {1: 2}}}  # as before


async def test_connection_list_names_live_members_with_their_address(broker: Broker) -> None:
    conn = await RemotingClient.connect(f"127.0.0.1:{broker.port}", timeout=2.0)
    try:
        beat = {"consumerGroup": "g", "clientId": "c-1", "topic": "T"}
        assert (await conn.request(RequestCode.HEART_BEAT, beat, None, 5.0)).code == 0
        code, body = await call(
            broker, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "g"}
        )
        assert code == ResponseCode.SUCCESS
        (member,) = decode_connections(body)
        assert (member.client_id, member.topic) == ("c-1", "T")
        assert member.address.startswith("127.0.0.1:") and member.last_heartbeat_ms > 0
        # A live member's topic is reported even before the group committed anything.
        rows = (await stats(broker, consumerGroup="g")).groups["g"]
        assert [(q.consumer_offset, q.lag) for q in rows] == [(None, 10), (None, 4)]
    finally:
        conn.close()
    code, body = await call(
        broker, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "x"}
    )
    assert code == ResponseCode.SUCCESS and decode_connections(body) == []


@pytest.mark.parametrize(
    ("code", "header"),
    [
        (RequestCode.GET_CONSUME_STATS, {"consumerGroup": 7}),
        (RequestCode.GET_CONSUME_STATS, {"topic": 1.5}),
        (RequestCode.GET_CONSUMER_CONNECTION_LIST, {}),
        (RequestCode.GET_ALL_CONSUMER_OFFSET, {"withTimes": "yes"}),
    ],
)
async def test_malformed_requests_are_bad_requests(
    broker: Broker, code: int, header: dict[str, Scalar]
) -> None:
    answer, _ = await call(broker, code, header)
    assert answer == ResponseCode.BAD_REQUEST
    assert (await stats(broker)).groups == {}  # nothing stored, the broker still answers


async def test_the_metric_sums_exactly_the_rows_consumer_progress_shows(broker: Broker) -> None:
    """Committed, never committed, a live member's topic only, and a topic this broker does not
    have: the metric's (group, topic) sums equal the GET_CONSUME_STATS rows summed."""
    broker.ctx.create_topic("U", 3)
    broker.ctx.store.put("U", 2, [Message(topic="U", body=b"u") for _ in range(5)], now_ms=NOW)
    await commit(broker, "g", 0, 1)
    broker.ctx.offsets.commit("g", "Gone", 0, 9)
    broker.ctx.groups.heartbeat("m", "c-1", "U", broker.ctx.now_ms(), 1)
    rows = (await stats(broker)).groups
    expected = {}
    for group, queues in rows.items():
        for q in queues:
            expected[(group, q.topic)] = expected.get((group, q.topic), 0.0) + q.lag
    assert expected == {("g", "T"): 9 + 4, ("m", "U"): 5}
    assert await asyncio.to_thread(scraped_lag, broker) == expected


async def test_a_scrape_after_a_restart_loads_a_bounded_number_of_queues(tmp_path: Path) -> None:
    """After a clean restart the ConsumeQueues are loaded when first read. The lag of every
    group read them all in the first scrape, on the event loop: with 1,500 queues of 6 MB on a
    busy machine that held the loop for half a minute and the slaves' HA connections timed out.
    A scrape now loads at most LAG_QUEUE_LOADS_PER_SCRAPE of them (and the topic that crosses
    it); the other topics' series come with the next scrapes, every one right."""
    cfg = small_config(tmp_path, listen="127.0.0.1:0")
    topics = [f"T{i:03d}" for i in range(LAG_QUEUE_LOADS_PER_SCRAPE // 2 + 40)]  # 2 queues each
    async with running(cfg) as b:
        for t in topics:
            b.ctx.create_topic(t, 2)
            for queue_id in (0, 1):
                b.ctx.store.put(t, queue_id, [Message(topic=t, body=b"x")] * 3, now_ms=NOW)
            b.ctx.offsets.commit(f"g-{t}", t, 0, 1)
        expected = {(f"g-{t}", t): 5.0 for t in topics}  # 2 of queue 0, 3 of queue 1
        assert await asyncio.to_thread(scraped_lag, b) == expected
    async with running(cfg) as b:
        pending = sum(b.ctx.store.queues_pending(t) for t in topics)
        assert pending == 2 * len(topics)  # nothing read yet: loaded when first used
        first = await asyncio.to_thread(scraped_lag, b)
        loaded = pending - sum(b.ctx.store.queues_pending(t) for t in topics)
        assert LAG_QUEUE_LOADS_PER_SCRAPE <= loaded <= LAG_QUEUE_LOADS_PER_SCRAPE + 2
        assert len(first) == loaded // 2 and first.items() <= expected.items()
        assert await asyncio.to_thread(scraped_lag, b) == expected
