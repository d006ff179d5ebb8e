"""An in-memory broker group fake for SDK and rmqctl tests that need no real broker.

It speaks the broker requests of docs/protocol.md over a real RemotingServer, keeps messages in
lists of encoded records, supports long polling, consumer offsets and group membership, and lets a
test inject answers (``send_errors``) or take a group's master away (``master_down``). Several
fakes share one :class:`FakeCluster`, which answers routes and cluster info for all of them, as a
controller would.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgpack

from protocol.codes import RequestCode, ResponseCode
from protocol.message import Message, RecordEncoder, decode_properties, make_msg_id
from protocol.remoting import Frame, response
from remoting.server import Connection, RemotingServer, error_response


class FakeCluster:
    def __init__(self, name: str = "DefaultCluster") -> None:
        self.name = name
        self.brokers: dict[str, FakeBroker] = {}
        self.topics: dict[str, int] = {}

    async def add(self, broker_name: str) -> FakeBroker:
        broker = FakeBroker(broker_name, self)
        await broker.start()
        self.brokers[broker_name] = broker
        return broker

    async def stop(self) -> None:
        for broker in self.brokers.values():
            await broker.stop()

    def route(self, topic: str) -> dict[str, Any] | None:
        holders = [b for b in self.brokers.values() if topic in b.topics]
        if not holders:
            return None
        return {
            "topic": topic,
            "brokers": [
                {
                    "brokerName": b.name,
                    "masterAddress": None if b.master_down else b.address,
                    "slaves": [],
                    "queues": b.topics[topic],
                }
                for b in holders
            ],
        }

    def cluster_info(self) -> dict[str, Any]:
        return {
            "clusters": {
                self.name: [
                    {"brokerName": b.name, "brokerId": 1, "address": b.address, "role": "MASTER"}
                    for b in self.brokers.values()
                ]
            }
        }


class FakeBroker:
    def __init__(self, name: str, cluster: FakeCluster) -> None:
        self.name = name
        self.cluster = cluster
        self.server = RemotingServer(name=name)
        self.address = ""
        self.topics: dict[str, int] = {}
        self.queues: dict[tuple[str, int], list[bytes]] = {}
        self.offsets: dict[tuple[str, str, int], int] = {}
        self.members: dict[str, dict[str, int]] = {}
        self.send_errors: list[int] = []
        self.batch_errors: list[int] = []  # answers to the next SEND_BATCH_MESSAGE requests
        self.master_down = False
        self.requests: list[int] = []
        self._physical = 0
        self._waiters: dict[tuple[str, int], asyncio.Event] = {}
        self._rr = 0
        self._encoder: RecordEncoder | None = None
        handlers = {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.create_topic,
            RequestCode.SEND_MESSAGE: self.send,
            RequestCode.SEND_BATCH_MESSAGE: self.send_batch,
            RequestCode.PULL_MESSAGE: self.pull,
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_offset,
            RequestCode.GET_MIN_OFFSET: self.min_offset,
            RequestCode.GET_MAX_OFFSET: self.max_offset,
            RequestCode.HEART_BEAT: self.heartbeat,
            RequestCode.UNREGISTER_CLIENT: self.unregister,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.cluster_info,
        }
        for code, handler in handlers.items():
            self.server.register(code, self._recording(code, handler))
        self.server.on_close.append(self._closed)

    def _recording(self, code: int, handler: Any) -> Any:
        def wrapped(conn: Connection, req: Frame) -> Any:
            self.requests.append(code)
            return handler(conn, req)

        return wrapped

    async def start(self) -> None:
        port = await self.server.start("127.0.0.1", 0)
        self.address = f"127.0.0.1:{port}"
        self._encoder = RecordEncoder(self.address)

    async def stop(self) -> None:
        await self.server.stop()

    # helpers for tests ----------------------------------------------------------------------------
    def create(self, topic: str, queues: int) -> None:
        self.topics[topic] = queues
        for q in range(queues):
            self.queues.setdefault((topic, q), [])

    def stored(self, topic: str) -> int:
        return sum(len(v) for (t, _), v in self.queues.items() if t == topic)

    # handlers -----------------------------------------------------------------------------------
    def create_topic(self, conn: Connection, req: Frame) -> Frame:
        topic = str(req.header["topic"])
        queues = int(req.header.get("queues") or 8)
        self.create(topic, queues)
        return response(req, ResponseCode.SUCCESS, {"topic": topic, "queues": queues})

    def _append(self, topic: str, queue_id: int, msg: Message) -> tuple[int, str]:
        assert self._encoder is not None
        log = self.queues[(topic, queue_id)]
        record = self._encoder.encode(
            msg,
            queue_id=queue_id,
            queue_offset=len(log),
            physical_offset=self._physical,
            store_timestamp=int(time.time() * 1000),
        )
        msg_id = make_msg_id(self.address, self._physical)
        self._physical += len(record)
        log.append(record)
        event = self._waiters.pop((topic, queue_id), None)
        if event is not None:
            event.set()
        return len(log) - 1, msg_id

    def _check_send(self, req: Frame) -> tuple[str, int] | Frame:
        if self.send_errors:
            code = self.send_errors.pop(0)
            return error_response(req, code, "injected")
        if self.master_down:
            return error_response(req, ResponseCode.NOT_MASTER, "not master")
        topic = str(req.header["topic"])
        if topic not in self.topics:
            return error_response(req, ResponseCode.TOPIC_NOT_EXIST, topic)
        queue_id = int(req.header["queueId"] or 0)
        if queue_id < 0:
            queue_id = self._rr % self.topics[topic]
            self._rr += 1
        return topic, queue_id

    def send(self, conn: Connection, req: Frame) -> Frame:
        checked = self._check_send(req)
        if isinstance(checked, Frame):
            return checked
        topic, queue_id = checked
        h = req.header
        props = decode_properties(str(h.get("properties") or "").encode())
        msg = Message(
            topic=topic,
            body=req.body or b"",
            keys=str(h.get("keys") or ""),
            tags=str(h.get("tags") or ""),
            properties=props,
            born_timestamp=int(h.get("bornTimestamp") or 0),
        )
        offset, msg_id = self._append(topic, queue_id, msg)
        return response(
            req,
            ResponseCode.SUCCESS,
            {"msgId": msg_id, "queueId": queue_id, "queueOffset": offset, "brokerName": self.name},
        )

    def send_batch(self, conn: Connection, req: Frame) -> Frame:
        if self.batch_errors:
            return error_response(req, self.batch_errors.pop(0), "injected")
        checked = self._check_send(req)
        if isinstance(checked, Frame):
            return checked
        topic, queue_id = checked
        items = msgpack.unpackb(req.body or b"\x90", raw=False)
        ids = []
        first = -1
        for item in items:
            msg = Message(
                topic=topic,
                body=item["body"],
                keys=item.get("keys", ""),
                tags=item.get("tags", ""),
                properties=item.get("properties", {}),
                born_timestamp=item.get("bornTimestamp", 0),
            )
            offset, msg_id = self._append(topic, queue_id, msg)
            first = offset if first < 0 else first
            ids.append(msg_id)
        return response(
            req,
            ResponseCode.SUCCESS,
            {"queueId": queue_id, "queueOffset": first, "count": len(ids), "brokerName": self.name},
            msgpack.packb(ids),
        )

    async def pull(self, conn: Connection, req: Frame) -> Frame:
        h = req.header
        topic = str(h["topic"])
        queue_id = int(h["queueId"] or 0)
        offset = int(h["queueOffset"] or 0)
        if self.master_down:
            return error_response(req, ResponseCode.NOT_MASTER, "not master")
        if (topic, queue_id) not in self.queues:
            return error_response(req, ResponseCode.TOPIC_NOT_EXIST, topic)
        log = self.queues[(topic, queue_id)]
        if offset > len(log) or offset < 0:
            return response(
                req,
                ResponseCode.PULL_OFFSET_MOVED,
                {"nextBeginOffset": len(log), "minOffset": 0, "maxOffset": len(log)},
            )
        if offset == len(log):
            suspend = int(h.get("suspendTimeoutMillis") or 0) / 1000
            if suspend > 0:
                event = self._waiters.setdefault((topic, queue_id), asyncio.Event())
                try:
                    await asyncio.wait_for(event.wait(), suspend)
                except TimeoutError:
                    pass
            if offset == len(log):
                return response(
                    req,
                    ResponseCode.PULL_NOT_FOUND,
                    {"nextBeginOffset": offset, "minOffset": 0, "maxOffset": len(log)},
                )
        count = min(int(h.get("maxMsgNums") or 32), len(log) - offset)
        body = b"".join(log[offset : offset + count])
        return response(
            req,
            ResponseCode.SUCCESS,
            {
                "nextBeginOffset": offset + count,
                "minOffset": 0,
                "maxOffset": len(log),
                "count": count,
            },
            body,
        )

    def query_offset(self, conn: Connection, req: Frame) -> Frame:
        h = req.header
        key = (str(h["consumerGroup"]), str(h["topic"]), int(h["queueId"] or 0))
        if key not in self.offsets:
            return error_response(req, ResponseCode.QUERY_NOT_FOUND, "no offset")
        return response(req, ResponseCode.SUCCESS, {"offset": self.offsets[key]})

    def update_offset(self, conn: Connection, req: Frame) -> Frame:
        h = req.header
        key = (str(h["consumerGroup"]), str(h["topic"]), int(h["queueId"] or 0))
        self.offsets[key] = int(h["commitOffset"] or 0)
        return response(req, ResponseCode.SUCCESS)

    def min_offset(self, conn: Connection, req: Frame) -> Frame:
        return response(req, ResponseCode.SUCCESS, {"offset": 0})

    def max_offset(self, conn: Connection, req: Frame) -> Frame:
        key = (str(req.header["topic"]), int(req.header["queueId"] or 0))
        return response(req, ResponseCode.SUCCESS, {"offset": len(self.queues.get(key, []))})

    def heartbeat(self, conn: Connection, req: Frame) -> Frame:
        group = str(req.header["consumerGroup"])
        self.members.setdefault(group, {})[str(req.header["clientId"])] = id(conn)
        return response(req, ResponseCode.SUCCESS)

    def unregister(self, conn: Connection, req: Frame) -> Frame:
        self.members.get(str(req.header["consumerGroup"]), {}).pop(
            str(req.header["clientId"]), None
        )
        return response(req, ResponseCode.SUCCESS)

    def consumer_list(self, conn: Connection, req: Frame) -> Frame:
        members = sorted(self.members.get(str(req.header["consumerGroup"]), {}))
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(members))

    def _closed(self, conn: Connection) -> None:
        for members in self.members.values():
            for client_id in [c for c, cid in members.items() if cid == id(conn)]:
                del members[client_id]

    def route(self, conn: Connection, req: Frame) -> Frame:
        doc = self.cluster.route(str(req.header["topic"]))
        if doc is None:
            return error_response(req, ResponseCode.TOPIC_NOT_EXIST, "no route")
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(doc))

    def cluster_info(self, conn: Connection, req: Frame) -> Frame:
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(self.cluster.cluster_info()))


@contextmanager
def cluster_in_thread(
    *broker_names: str,
) -> Iterator[tuple[FakeCluster, asyncio.AbstractEventLoop]]:
    """A FakeCluster served by its own event loop in a thread (for code that runs asyncio.run)."""
    loop = asyncio.new_event_loop()
    cluster = FakeCluster()
    ready = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)

        async def setup() -> None:
            for name in broker_names:
                await cluster.add(name)

        loop.run_until_complete(setup())
        ready.set()
        loop.run_forever()
        loop.run_until_complete(cluster.stop())
        # Let the cancelled request handlers (long polls) finish, as asyncio.run would.
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10), "fake cluster did not start"
    try:
        yield cluster, loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
