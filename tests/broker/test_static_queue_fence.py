"""FENCE_STATIC_QUEUE on a broker and the send path's refusals (an in-process lone broker, real
sockets): a fenced or sealed physical queue refuses single and batch sends with QUEUE_NOT_EXIST,
a send whose queue the broker picks skips it, the fence answers the queue's max offset, expires
at its deadline, can be released, and bad fence requests fence nothing."""

from __future__ import annotations

from pathlib import Path

import msgpack

from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, Scalar
from remoting.client import RemotingClient
from tests.broker.support import running, small_config
from tests.support.wait import wait_until_async


async def test_a_fenced_queue_refuses_sends_until_released_or_expired(tmp_path: Path) -> None:
    async with running(small_config(tmp_path, listen="127.0.0.1:0")) as b:
        b.ctx.create_topic("T", 2)
        conn = await RemotingClient.connect(f"127.0.0.1:{b.port}", timeout=2.0)
        try:

            async def req(code: int, header: dict[str, Scalar], body: bytes | None) -> Frame:
                return await conn.request(code, header, body, 5.0)

            async def send(queue: int) -> Frame:
                return await req(RequestCode.SEND_MESSAGE, {"topic": "T", "queueId": queue}, b"m")

            for _ in range(3):
                assert (await send(1)).code == ResponseCode.SUCCESS
            fence: dict[str, Scalar] = {"topic": "T", "queueId": 1, "masterEpoch": 0}
            for bad, code in [
                ({**fence, "masterEpoch": 7}, ResponseCode.NOT_MASTER),
                ({**fence, "fenceMillis": 0}, ResponseCode.BAD_REQUEST),
                ({**fence, "topic": "a b"}, ResponseCode.BAD_REQUEST),
            ]:
                resp = await req(RequestCode.FENCE_STATIC_QUEUE, bad, None)
                assert resp.code == code, resp.header
                assert (await send(1)).code == ResponseCode.SUCCESS  # nothing fenced
            resp = await req(RequestCode.FENCE_STATIC_QUEUE, fence, None)
            assert resp.code == ResponseCode.SUCCESS and resp.header["maxOffset"] == 6
            refused = await send(1)
            assert refused.code == ResponseCode.QUEUE_NOT_EXIST
            assert "queue 1 of T is sealed" in str(refused.header["remark"])
            batch = msgpack.packb([{"body": b"a"}, {"body": b"b"}])
            resp = await req(RequestCode.SEND_BATCH_MESSAGE, {"topic": "T", "queueId": 1}, batch)
            assert resp.code == ResponseCode.QUEUE_NOT_EXIST
            # The broker's own pick (gRPC clients send without a queue) skips the fenced queue.
            for _ in range(4):
                resp = await req(RequestCode.SEND_MESSAGE, {"topic": "T", "queueId": -1}, b"p")
                assert resp.code == ResponseCode.SUCCESS and resp.header["queueId"] == 0
            assert b.ctx.store.queue_max_offset("T", 1) == 6  # nothing past the fence
            release = {"topic": "T", "queueId": 1, "release": True}
            assert (await req(RequestCode.FENCE_STATIC_QUEUE, release, None)).code == 0
            assert (await send(1)).code == ResponseCode.SUCCESS

            # A fence not followed by a seal lapses at its deadline.
            short = {**fence, "fenceMillis": 300}
            assert (await req(RequestCode.FENCE_STATIC_QUEUE, short, None)).code == 0
            assert (await send(1)).code == ResponseCode.QUEUE_NOT_EXIST

            async def open_again() -> bool:
                return (await send(1)).code == ResponseCode.SUCCESS

            await wait_until_async(open_again, "the fence to lapse", 10, interval=0.1)

            # Sealed by the controllers: refused for good, a release changes nothing.
            b.ctx.sealed.learn([("T", 1)])
            assert (await req(RequestCode.FENCE_STATIC_QUEUE, release, None)).code == 0
            assert (await send(1)).code == ResponseCode.QUEUE_NOT_EXIST
            assert (await send(0)).code == ResponseCode.SUCCESS
        finally:
            conn.close()
