"""The active controller's topic push (UPDATE_AND_CREATE_TOPIC to a broker, BrokerNotifier.
push_topic) against a real remoting server on loopback: a refusal is reported with the broker's
remark (or the code's name) and keeps the connection, an unreachable broker is reported as such
and its connection dropped, a success reports nothing."""

from __future__ import annotations

from typing import Any, cast

from controller.service.notifier import BrokerNotifier
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
