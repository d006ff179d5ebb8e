"""The active controller's topic push (UPDATE_AND_CREATE_TOPIC to a broker, BrokerNotifier.
push_topic) against a real remoting server on loopback: a refusal is reported with the broker's
remark (or the code's name) and keeps the connection, an unreachable broker is reported as such
and its connection dropped, a success reports nothing."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from controller.metadata import ReplicasInfoManager
from controller.service.notifier import PUSH_INFLIGHT, BrokerNotifier
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, response
from remoting.client import ConnectionPool
from remoting.server import Connection, RemotingServer, error_response
from tests.support.procs import free_port


class Broker:
    """Answers UPDATE_AND_CREATE_TOPIC with the next of ``answers`` (code, remark or None)."""

    def __init__(self, answers: list[tuple[int, str | None]]) -> None:
        self.answers = answers
        self.asked: list[dict[str, Any]] = []
        self.server = RemotingServer(name="broker")
        self.server.register(RequestCode.UPDATE_AND_CREATE_TOPIC, self.update_topic)

    def update_topic(self, conn: Connection, req: Frame) -> Frame:
        self.asked.append(dict(req.header))
        code, remark = self.answers.pop(0)
        if remark is None:
            return response(req, code)
        return error_response(req, code, remark)


def notifier(pool: ConnectionPool) -> BrokerNotifier:
    none = cast(Any, None)  # push_topic uses the pool only
    return BrokerNotifier(none, none, pool, none, None, notify_timeout=2.0)


async def test_a_refused_push_names_the_remark_and_keeps_the_connection() -> None:
    broker = Broker(
        [
            (ResponseCode.NO_PERMISSION, "no rights on T"),
            (ResponseCode.SYSTEM_ERROR, None),
            (ResponseCode.SUCCESS, None),
        ]
    )
    port = await broker.server.start("127.0.0.1", 0)
    address = f"127.0.0.1:{port}"
    pool = ConnectionPool(2.0)
    push = notifier(pool)
    try:
        assert await push.push_topic(address, "T", 4, 2.0) == "refused: no rights on T"
        first = await pool.get(address)
        assert await push.push_topic(address, "T", 4, 2.0) == "refused: SYSTEM_ERROR"
        assert await pool.get(address) is first  # a refusal is an answer: the connection stays
        assert await push.push_topic(address, "T", 4, 2.0) is None
        assert broker.asked == [{"topic": "T", "queues": 4}] * 3
    finally:
        pool.close()
        await broker.server.stop()


async def test_an_unreachable_broker_is_reported_unreachable() -> None:
    pool = ConnectionPool(0.5)
    try:
        why = await notifier(pool).push_topic(f"127.0.0.1:{free_port()}", "T", 4, 0.5)
        assert why is not None and why.startswith("unreachable: ")
    finally:
        pool.close()


async def test_a_groups_topics_are_pushed_a_bounded_number_at_a_time() -> None:
    """A new master is sent its group's topics before its role, one request a topic: at most
    PUSH_INFLIGHT of them in flight (issue 34: 1,000 topics a group, 100 masters elected at
    once, 100,000 requests started in one turn of the loop held the active controller 5 s)."""
    in_flight = 0
    most = 0
    asked: dict[int, list[str]] = {}

    def broker() -> RemotingServer:
        server = RemotingServer(name="broker")

        async def update_topic(conn: Connection, req: Frame) -> Frame:
            nonlocal in_flight, most
            in_flight += 1
            most = max(most, in_flight)
            await asyncio.sleep(0.005)  # the broker creating the topic
            asked.setdefault(id(server), []).append(str(req.header["topic"]))
            in_flight -= 1
            return response(req, ResponseCode.SUCCESS)

        server.register(RequestCode.UPDATE_AND_CREATE_TOPIC, update_topic)
        return server

    servers = [broker(), broker()]
    addresses = [f"127.0.0.1:{await s.start('127.0.0.1', 0)}" for s in servers]
    pool = ConnectionPool(2.0)
    push = BrokerNotifier(
        cast(Any, None), ReplicasInfoManager(), pool, cast(Any, None), None, notify_timeout=2.0
    )
    topics = {f"T{i:03d}": 8 for i in range(300)}
    try:
        await push.push_topics("broker-a", addresses, topics, 10.0)
        assert [sorted(asked[id(s)]) for s in servers] == [sorted(topics)] * 2
        assert 1 < most <= PUSH_INFLIGHT
    finally:
        pool.close()
        for s in servers:
            await s.stop()
