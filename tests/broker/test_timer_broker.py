"""Scheduled messages on a lone broker process: delivery at the time asked, the delivered copy's
properties, bad input refused with nothing stored, and restarts (clean, kill -9) losing nothing."""

from __future__ import annotations

import time
from pathlib import Path

import msgpack
import pytest

from protocol.codes import RequestCode, ResponseCode
from protocol.message import MessageRecord, encode_properties, iter_records, parse_msg_id
from protocol.timer import PROP_TIMER_OUT_MS, PROP_TIMER_SOURCE_OFFSET, PROP_UNIQ_KEY
from remoting.client import RemotingClient
from tests.support.procs import BrokerProc, small_segments_config
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def send(
    conn: RemotingClient, topic: str, body: bytes, props: dict[str, str], queue_id: int = 0
) -> tuple[int, dict[str, object]]:
    header = {"topic": topic, "queueId": queue_id, "properties": encode_properties(props).decode()}
    resp = await conn.request(RequestCode.SEND_MESSAGE, header, body)  # type: ignore[arg-type]
    return resp.code, dict(resp.header)


async def max_offset(conn: RemotingClient, topic: str, queue_id: int = 0) -> int:
    resp = await conn.call(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id})
    return int(resp.header["offset"])  # type: ignore[arg-type]


async def read_all(conn: RemotingClient, topic: str, queue_id: int = 0) -> list[MessageRecord]:
    out: list[MessageRecord] = []
    offset = 0
    while True:
        header = {
            "consumerGroup": "g",
            "topic": topic,
            "queueId": queue_id,
            "queueOffset": offset,
            "maxMsgNums": 256,
            "suspendTimeoutMillis": 0,
        }
        resp = await conn.request(RequestCode.PULL_MESSAGE, header)
        if resp.code == ResponseCode.PULL_OFFSET_MOVED and offset == 0:  # retention moved it
            offset = int(resp.header["nextBeginOffset"])  # type: ignore[arg-type]
            continue
        if resp.code != ResponseCode.SUCCESS:
            return out
        recs = list(iter_records(resp.body or b""))
        if not recs:
            return out
        out.extend(recs)
        offset = int(resp.header["nextBeginOffset"])  # type: ignore[arg-type]


async def test_scheduled_messages_arrive_at_their_time_in_due_order(broker: BrokerProc) -> None:
    conn = await RemotingClient.connect(broker.address)
    try:
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "S", "queues": 1})
        code, h = await send(conn, "S", b"plain", {"k": "v"})
        assert code == ResponseCode.SUCCESS and h["queueOffset"] == 0
        sent_at = now_ms()
        delays = [1500, 300, 900, 0]
        ids: dict[bytes, str] = {}
        for i, delay in enumerate(delays):
            code, h = await send(conn, "S", f"m{i}".encode(), {"TIMER_DELAY_MS": str(delay)})
            assert code == ResponseCode.SUCCESS, h
            assert h["queueOffset"] == -1  # scheduled: no queue offset until delivered
            ids[f"m{i}".encode()] = str(h["msgId"])

        async def all_there() -> list[MessageRecord] | None:
            recs = await read_all(conn, "S")
            return recs if len(recs) == 1 + len(delays) else None

        recs = await wait_until_async(all_there, "every scheduled message delivered", 20)
        assert recs[0].body == b"plain"
        delivered = recs[1:]
        assert [r.body for r in delivered] == [b"m3", b"m1", b"m2", b"m0"]  # by due time
        for r in delivered:
            props = r.properties
            due = int(props[PROP_TIMER_OUT_MS])
            assert r.store_timestamp >= due  # never before its time
            assert due >= sent_at + delays[int(r.body[1:])]
            assert props[PROP_UNIQ_KEY] == ids[r.body]  # the id the send answered
            assert PROP_TIMER_SOURCE_OFFSET in props
            assert "REAL_TOPIC" not in props and "TIMER_DELAY_MS" not in props
    finally:
        conn.close()


async def test_bad_delivery_times_are_refused_and_store_nothing(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    config = small_segments_config(tmp_path, "short-delay", "timer_max_delay_ms = 60000\n")
    broker = broker_factory(tmp_path, extra=["--config", str(config)]).start_and_wait()
    conn = await RemotingClient.connect(broker.address)
    try:
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "B", "queues": 1})
        bad = [
            ({"TIMER_DELAY_MS": "-5"}, "negative"),
            ({"TIMER_DELAY_SEC": "61"}, "maximum delay of 60000 ms"),
            ({"TIMER_DELIVER_MS": str(now_ms() + 3_600_000)}, "maximum delay"),
            ({"TIMER_DELIVER_MS": "soon"}, "not an integer"),
            ({"TIMER_SOURCE_OFFSET": "0"}, "reserved"),
            ({"REAL_TOPIC": "X", "TIMER_OUT_MS": "1"}, "reserved"),
        ]
        for props, words in bad:
            code, h = await send(conn, "B", b"x", props)
            assert code == ResponseCode.MESSAGE_ILLEGAL, (props, h)
            assert words in str(h["remark"]), (props, h)
        assert await max_offset(conn, "B") == 0
        # Nothing went under the timer topic either, and the broker still serves.
        assert await max_offset(conn, "rmq_sys_wheel_timer") == 0
        code, h = await send(conn, "B", b"ok", {"TIMER_DELAY_SEC": "0"})
        assert code == ResponseCode.SUCCESS, h

        async def delivered() -> bool:
            return await max_offset(conn, "B") == 1

        await wait_until_async(delivered, "the valid one delivered", 10)
    finally:
        conn.close()


@pytest.mark.parametrize("kill", [False, True], ids=["clean", "kill9"])
async def test_a_restart_loses_no_scheduled_message(
    broker_factory: type[BrokerProc], tmp_path: Path, kill: bool
) -> None:
    broker = broker_factory(tmp_path).start_and_wait()
    conn = await RemotingClient.connect(broker.address)
    n = 60
    try:
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "R", "queues": 2})
        base = now_ms()
        for i in range(n):
            # Half are due before the restart ends, half after; some far (a far bucket).
            due = base + 200 + (i % 30) * 150 + (65_000 if i == n - 1 else 0)
            code, h = await send(
                conn, "R", f"r{i}".encode(), {"TIMER_DELIVER_MS": str(due)}, queue_id=i % 2
            )
            assert code == ResponseCode.SUCCESS, h
    finally:
        conn.close()
    if kill:
        broker.kill9()
    else:
        broker.stop()
    broker.start_and_wait()
    conn = await RemotingClient.connect(broker.address)
    try:

        async def delivered() -> list[MessageRecord] | None:
            recs = await read_all(conn, "R", 0) + await read_all(conn, "R", 1)
            bodies = {r.body for r in recs}
            return recs if len(bodies) == n - 1 else None

        recs = await wait_until_async(delivered, "all near messages delivered", 30)
        bodies = [r.body for r in recs]
        if not kill:  # a clean stop saves the progress: none delivered twice
            assert len(bodies) == len(set(bodies))
        assert b"r59" not in bodies  # the far one waits for its time
    finally:
        conn.close()


async def test_retention_keeps_the_commitlog_of_a_pending_scheduled_message(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    """Retention by age (1 s here) deletes old CommitLog segments, but not the one holding a
    scheduled message that is not delivered yet (it would be lost: its delivery reads it
    back)."""
    config = small_segments_config(
        tmp_path,
        "short-retention",
        "retention_hours = 0.0003\nretention_check_interval_ms = 200\n",
        segment_bytes=64 * 1024,
    )
    broker = broker_factory(tmp_path, extra=["--config", str(config)]).start_and_wait()
    conn = await RemotingClient.connect(broker.address)
    try:
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "K", "queues": 1})
        body = b"x" * 1024
        for _ in range(80):  # more than a segment before the scheduled message
            assert (await send(conn, "K", body, {"a": "b"}))[0] == ResponseCode.SUCCESS
        due = now_ms() + 3500
        code, h = await send(conn, "K", b"kept", {"TIMER_DELIVER_MS": str(due)})
        assert code == ResponseCode.SUCCESS, h
        scheduled_at = parse_msg_id(str(h["msgId"]))[1]
        for _ in range(200):  # three more segments after it
            assert (await send(conn, "K", body, {"a": "b"}))[0] == ResponseCode.SUCCESS

        async def min_offset() -> int | None:
            resp = await conn.call(RequestCode.GET_BROKER_RUNTIME_INFO)
            low = int(msgpack.unpackb(resp.body)["minOffset"])
            return low if low > 0 else None

        low = await wait_until_async(min_offset, "retention deleting the first segment", 20)
        assert low <= scheduled_at  # the scheduled message's segment stays

        async def delivered() -> list[MessageRecord] | None:
            recs = [r for r in await read_all(conn, "K") if r.body == b"kept"]
            return recs or None

        (rec,) = await wait_until_async(delivered, "the scheduled message delivered", 20)
        assert rec.store_timestamp >= due
    finally:
        conn.close()
