"""The broker as a real process: produce, pull with long polling, bad input, kill -9, clean stop.

The tests that only talk to a running broker share one (module scope, ``broker``), each on topics
of its own; kill -9 and the clean stop start their own."""

from __future__ import annotations

import asyncio
import socket
import struct
from pathlib import Path

import msgpack
import pytest

from protocol.codes import RequestCode, ResponseCode
from protocol.message import iter_records
from remoting.client import RemotingClient
from tests.cluster.support import pulls_waiting
from tests.support.procs import BrokerProc, module_broker
from tests.support.wait import stays_async, wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess


broker = module_broker("broker-process")


async def send(
    conn: RemotingClient, topic: str, body: bytes, queue_id: int = 0, **header: object
) -> dict:
    resp = await conn.call(
        RequestCode.SEND_MESSAGE, {"topic": topic, "queueId": queue_id, **header}, body
    )  # type: ignore[dict-item]
    return dict(resp.header)


async def pull(
    conn: RemotingClient, topic: str, queue_id: int, offset: int, suspend_ms: int = 0, n: int = 32
):
    header = {
        "consumerGroup": "g",
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": offset,
        "maxMsgNums": n,
        "suspendTimeoutMillis": suspend_ms,
    }
    return await conn.request(RequestCode.PULL_MESSAGE, header, timeout=10 + suspend_ms / 1000)


async def test_send_then_pull_returns_the_messages_at_their_offsets(broker: BrokerProc) -> None:
    conn = await RemotingClient.connect(broker.address)
    try:
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "T", "queues": 2})
        offsets = [
            int((await send(conn, "T", f"m{i}".encode(), keys=f"k{i}"))["queueOffset"])
            for i in range(5)
        ]
        assert offsets == [0, 1, 2, 3, 4]
        resp = await pull(conn, "T", 0, 0)
        assert resp.code == ResponseCode.SUCCESS
        recs = list(iter_records(resp.body or b""))
        assert [(r.queue_offset, r.body, r.keys) for r in recs] == [
            (i, f"m{i}".encode(), f"k{i}") for i in range(5)
        ]
        assert resp.header["nextBeginOffset"] == 5
        batch = msgpack.packb([{"body": b"b1"}, {"body": b"b2", "tags": "t"}])
        resp = await conn.call(RequestCode.SEND_BATCH_MESSAGE, {"topic": "T", "queueId": 1}, batch)
        assert resp.header["queueOffset"] == 0 and resp.header["count"] == 2
        assert len(msgpack.unpackb(resp.body)) == 2
    finally:
        conn.close()


async def test_long_poll_wakes_when_a_message_lands(broker: BrokerProc) -> None:
    conn = await RemotingClient.connect(broker.address)
    other = await RemotingClient.connect(broker.address)
    try:
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "LP", "queues": 1})
        waiting = asyncio.create_task(pull(conn, "LP", 0, 0, suspend_ms=20_000))

        async def parked() -> bool:
            return await pulls_waiting(broker.address) == 1

        await wait_until_async(parked, "the pull parked in the broker's long poll", 10)
        await stays_async(lambda: not waiting.done(), 0.2, "the parked pull unanswered")
        await send(other, "LP", b"wake up")
        resp = await asyncio.wait_for(waiting, 10)  # far below the 20 s suspend: it was woken
        assert resp.code == ResponseCode.SUCCESS
        assert [r.body for r in iter_records(resp.body or b"")] == [b"wake up"]
        empty = await pull(conn, "LP", 0, 1, suspend_ms=100)
        assert empty.code == ResponseCode.PULL_NOT_FOUND and empty.header["nextBeginOffset"] == 1
    finally:
        conn.close()
        other.close()


async def test_offsets_out_of_range_are_answered_with_where_to_continue(broker: BrokerProc) -> None:
    conn = await RemotingClient.connect(broker.address)
    try:
        await send(conn, "R", b"x")
        resp = await pull(conn, "R", 0, 99)
        assert resp.code == ResponseCode.PULL_OFFSET_MOVED and resp.header["nextBeginOffset"] == 1
        missing = await pull(conn, "NoSuchTopic", 0, 0)
        assert missing.code == ResponseCode.TOPIC_NOT_EXIST
    finally:
        conn.close()


async def test_bad_requests_get_errors_and_the_connection_survives(broker: BrokerProc) -> None:
    conn = await RemotingClient.connect(broker.address)
    try:
        unknown = await conn.request(4242, {})
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        missing = await conn.request(RequestCode.SEND_MESSAGE, {"queueId": 0}, b"x")
        assert missing.code == ResponseCode.BAD_REQUEST and "topic" in str(missing.header["remark"])
        mistyped = await conn.request(
            RequestCode.PULL_MESSAGE,
            {"consumerGroup": "g", "topic": "Bad", "queueId": "zero", "queueOffset": 0},
        )
        assert mistyped.code == ResponseCode.BAD_REQUEST
        bad_batch = await conn.request(
            RequestCode.SEND_BATCH_MESSAGE, {"topic": "Bad"}, b"\xc1garbage"
        )
        assert bad_batch.code == ResponseCode.BAD_REQUEST
        assert (await send(conn, "Bad", b"still served"))["queueOffset"] == 0
    finally:
        conn.close()


def raw_socket(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    return s


def closed_by_peer(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.mark.parametrize(
    "payload",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # garbage that happens to be a huge length
        struct.pack(">I", 0xFFFFFFFF) + b"\x00" * 16,  # a frame claiming 4 GiB
        struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1",  # undecodable msgpack
    ],
    ids=["http", "4gib", "undecodable"],
)
async def test_garbage_closes_only_the_offending_connection(
    broker: BrokerProc, payload: bytes
) -> None:
    good = await RemotingClient.connect(broker.address)
    logged = broker.log().count("bad frame")  # by the tests before, on the shared broker
    try:
        s = raw_socket(broker.port)
        s.sendall(payload)
        assert await asyncio.to_thread(closed_by_peer, s)
        s.close()
        topic = f"G-{len(payload)}"
        assert (await send(good, topic, b"after garbage"))["queueOffset"] == 0
        wait_until(lambda: broker.log().count("bad frame") > logged, "the bad-frame log line", 5)
        assert broker.log().count("bad frame") == logged + 1
        assert broker.alive()
    finally:
        good.close()


async def test_truncated_frame_then_disconnect_does_not_disturb_the_broker(
    broker: BrokerProc,
) -> None:
    s = raw_socket(broker.port)
    s.sendall(struct.pack(">I", 100) + b"\x96\x00")
    s.close()
    conn = await RemotingClient.connect(broker.address)
    try:
        assert (await send(conn, "T2", b"ok"))["queueOffset"] == 0
    finally:
        conn.close()


async def test_kill9_under_sync_flush_loses_nothing_acknowledged(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    b = broker_factory(tmp_path, extra=["--flush", "sync"]).start_and_wait()
    conn = await RemotingClient.connect(b.address)
    acked: dict[tuple[int, int], bytes] = {}
    try:
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "D", "queues": 4})

        async def producer(worker: int) -> None:
            for i in range(60):
                body = f"w{worker}-{i}".encode() * 10
                h = await send(conn, "D", body, queue_id=-1)
                acked[(int(h["queueId"]), int(h["queueOffset"]))] = body

        await asyncio.gather(*(producer(w) for w in range(4)))
    finally:
        conn.close()
    b.kill9()
    b2 = broker_factory(tmp_path, port=b.port).start_and_wait()
    conn = await RemotingClient.connect(b2.address)
    try:
        served: dict[tuple[int, int], bytes] = {}
        for qid in range(4):
            offset = 0
            while True:
                resp = await pull(conn, "D", qid, offset, n=64)
                if resp.code != ResponseCode.SUCCESS:
                    break
                for r in iter_records(resp.body or b""):
                    served[(qid, r.queue_offset)] = r.body
                offset = int(resp.header["nextBeginOffset"])  # type: ignore[arg-type]
        assert len(acked) == 240
        for key, body in acked.items():
            assert served.get(key) == body, f"acknowledged message at {key} lost or changed"
    finally:
        conn.close()


async def test_sigterm_stops_cleanly_and_restart_serves_the_same_data(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    b = broker_factory(tmp_path).start_and_wait()
    conn = await RemotingClient.connect(b.address)
    try:
        for i in range(10):
            await send(conn, "C", f"c{i}".encode())
        await conn.call(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "g", "topic": "C", "queueId": 0, "commitOffset": 7},
        )
    finally:
        conn.close()
    assert b.stop() == 0
    assert not (b.data_dir / "abort").exists()
    b2 = broker_factory(tmp_path, port=b.port).start_and_wait()
    conn = await RemotingClient.connect(b2.address)
    try:
        resp = await pull(conn, "C", 0, 0)
        assert [r.body for r in iter_records(resp.body or b"")] == [
            f"c{i}".encode() for i in range(10)
        ]
        q = await conn.call(
            RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "C", "queueId": 0}
        )
        assert q.header["offset"] == 7
    finally:
        conn.close()
