"""The SDK's idempotent producer against a real broker process, through a proxy that loses a
send's answer after the broker stored it (issue 29): one copy, and the result is the first
copy's; with ``idempotent=False`` the retry stores a second copy (the difference the issue
describes). The sequencer's window (client/sequencer.py), pure."""

from __future__ import annotations

import asyncio
import types
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import client.producer_identity
from client.admin import Admin
from client.message import Message
from client.producer import Producer
from client.sequencer import Sequencer
from protocol.codes import RequestCode, ResponseCode
from protocol.idempotence import WINDOW
from protocol.message import MessageRecord, iter_records
from remoting.client import RemotingClient
from tests.support.answer_proxy import AnswerProxy
from tests.support.procs import BrokerProc

T = "lost"


def test_sequencer_keeps_a_lane_within_the_window_of_its_oldest() -> None:
    s = Sequencer(5, 1, window=4)
    lane = ("t", "b", 0)
    taken = [s.take(lane) for _ in range(4)]
    assert taken == [0, 1, 2, 3]
    assert s.take(lane) is None  # 4 - 0 >= 4
    assert s.release(lane, 2) is False  # out of order: the oldest, 0, still holds the window
    assert s.take(lane) is None
    assert s.release(lane, 0) is True
    assert s.take(lane) == 4 and s.take(lane) is None  # 1 is now the oldest
    assert s.release(lane, 1) is True  # 2 was released already: 3 is the oldest
    assert s.take(lane) == 5 and s.take(lane) == 6 and s.take(lane) is None
    assert s.take(("t", "b", 1)) == 0  # another queue, its own sequences
    assert s.fields(6).sequence == 6 and s.fields(6).producer_id == 5
    assert s.in_flight(lane) == 4


@pytest.fixture
async def proxy(broker: BrokerProc) -> AsyncIterator[AnswerProxy]:
    async with Admin(broker.address) as admin:
        await admin.create_topic(T, 1)
    p = await AnswerProxy(broker.address).start()
    yield p
    await p.close()


async def stored(broker: BrokerProc) -> list[MessageRecord]:
    conn = await RemotingClient.connect(broker.address)
    try:
        resp = await conn.request(
            RequestCode.PULL_MESSAGE,
            {
                "consumerGroup": "c",
                "topic": T,
                "queueId": 0,
                "queueOffset": 0,
                "maxMsgNums": 1000,
                "suspendTimeoutMillis": 0,
            },
        )
        assert resp.code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND), resp
        return list(iter_records(resp.body or b""))
    finally:
        conn.close()


@pytest.mark.multiprocess
@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "not-idempotent"])
async def test_a_send_whose_answer_was_lost_is_stored_once(
    broker: BrokerProc, proxy: AnswerProxy, idempotent: bool
) -> None:
    async with Producer(proxy.address, auto_batch=False, idempotent=idempotent) as p:
        await p.send(T, b"warm")  # route and connection through the proxy
        proxy.drop_send_answers(1)
        result = await p.send(T, b"lost-answer")
        proxy.drop_send_answers(1)
        batch = await p.send_batch(T, [Message(body=b"b%d" % i) for i in range(5)])
    assert proxy.answers_dropped == 2 and proxy.sends_seen == 5  # warm, 2 sends, 2 retries
    bodies = [r.body for r in await stored(broker)]
    if not idempotent:
        print(f"without idempotence, stored: {bodies}")
        assert bodies.count(b"lost-answer") == 2 and bodies.count(b"b0") == 2
        return
    assert bodies == [b"warm", b"lost-answer", b"b0", b"b1", b"b2", b"b3", b"b4"]
    records = await stored(broker)
    assert result.queue_offset == 1 and result.msg_id == records[1].msg_id
    assert [r.queue_offset for r in batch] == [2, 3, 4, 5, 6]
    assert [r.msg_id for r in batch] == [r.msg_id for r in records[2:]]


@pytest.mark.multiprocess
async def test_a_window_of_sends_in_flight_on_one_queue_all_lose_their_answers(
    broker: BrokerProc, proxy: AnswerProxy
) -> None:
    """More sends at once than the window on a one-queue topic, the first answers of as many
    lost (each attempt times out): each is stored once (the window bounds what is in flight,
    so no retry is too old)."""
    n = 3 * WINDOW
    async with Producer(proxy.address, auto_batch=False, send_timeout=0.5) as p:
        await p.send(T, b"warm")
        proxy.drop_send_answers(n, cut=False)
        results = await asyncio.gather(*(p.send(T, b"m%d" % i) for i in range(n)))
    bodies = [r.body for r in await stored(broker)]
    assert sorted(bodies) == sorted([b"warm", *(b"m%d" % i for i in range(n))])
    assert len({r.queue_offset for r in results}) == n


@pytest.mark.multiprocess
async def test_a_lone_brokers_producer_restarted_within_a_second_or_with_the_clock_set_back_is_stored(
    broker: BrokerProc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone broker gives no epochs: a producer_id_file producer takes the clock's seconds.
    Three incarnations started within one second, then one with the clock set back, each send
    one message: each is stored (the same epoch again made the broker answer a new
    incarnation's first send with the old one's offsets, storing nothing; an epoch below was
    fenced), and the epochs rise."""
    async with Admin(broker.address) as admin:
        await admin.create_topic(T, 1)
    now = [1_796_000_000.5]
    monkeypatch.setattr(
        client.producer_identity, "time", types.SimpleNamespace(time=lambda: now[0])
    )
    id_file = tmp_path / "producer.id"
    epochs: list[int | None] = []
    results = []
    for i, clock in enumerate((1_796_000_000.1, 1_796_000_000.4, 1_796_000_000.9, 1_795_999_000)):
        now[0] = clock
        async with Producer(broker.address, producer_id_file=id_file) as p:
            results.append(await p.send(T, b"incarnation-%d" % i))
            epochs.append(p.producer_epoch)
    bodies = [r.body for r in await stored(broker)]
    assert bodies == [b"incarnation-%d" % i for i in range(4)], (bodies, epochs)
    assert [r.queue_offset for r in results] == [0, 1, 2, 3]
    assert epochs == [1_796_000_000, 1_796_000_001, 1_796_000_002, 1_796_000_003]
