"""Route cache: failover across dead bootstrap addresses, leader following, refreshes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import msgpack
import pytest

from client.bootstrap import Bootstrap
from client.errors import BrokerError, TopicNotFoundError, UnreachableError
from client.routes import MessageQueue, RouteCache
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, response
from remoting.server import Connection, RemotingServer, error_response
from tests.support.procs import dead_address
from tests.support.wait import wait_until_async


def route_doc(topic: str, queues: int = 4, master: str | None = "127.0.0.1:10911") -> bytes:
    doc = {
        "topic": topic,
        "brokers": [
            {"brokerName": "broker-b", "masterAddress": master, "slaves": [], "queues": queues},
            {"brokerName": "broker-a", "masterAddress": master, "slaves": ["x:1"], "queues": 2},
        ],
    }
    return msgpack.packb(doc)


class RouteServer:
    """A tiny controller stand-in answering GET_ROUTEINFO_BY_TOPIC with ``answer``."""

    def __init__(self, answer: Callable[[Frame], Frame]) -> None:
        self.server = RemotingServer(name="route")
        self.answer = answer
        self.requests = 0
        self.address = ""
        self.server.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self._handle)

    def _handle(self, conn: Connection, req: Frame) -> Frame:
        self.requests += 1
        return self.answer(req)

    async def start(self) -> RouteServer:
        port = await self.server.start("127.0.0.1", 0)
        self.address = f"127.0.0.1:{port}"
        return self


@pytest.fixture
async def servers() -> AsyncIterator[list[RouteServer]]:
    started: list[RouteServer] = []
    yield started
    for s in started:
        await s.server.stop()


async def serve(servers: list[RouteServer], answer: Callable[[Frame], Frame]) -> RouteServer:
    s = await RouteServer(answer).start()
    servers.append(s)
    return s


def ok(req: Frame) -> Frame:
    return response(req, ResponseCode.SUCCESS, None, route_doc(str(req.header["topic"])))


async def test_route_is_fetched_from_the_first_live_address_after_dead_ones(
    servers: list[RouteServer],
) -> None:
    live = await serve(servers, ok)
    boot = Bootstrap([dead_address(), dead_address(), live.address], timeout=2)
    cache = RouteCache(boot)
    try:
        route = await cache.get("orders")
    finally:
        await cache.close()
        boot.close()
    assert [b.broker_name for b in route.brokers] == ["broker-a", "broker-b"]
    assert route.queues[:3] == (
        MessageQueue("broker-a", 0),
        MessageQueue("broker-a", 1),
        MessageQueue("broker-b", 0),
    )
    assert len(route.writable) == 6
    assert route.to_dict()["brokers"][0] == {
        "brokerName": "broker-a",
        "masterAddress": "127.0.0.1:10911",
        "slaves": ["x:1"],
        "queues": 2,
    }


async def test_the_address_that_answered_is_asked_first_next_time(
    servers: list[RouteServer],
) -> None:
    first = await serve(servers, lambda req: error_response(req, ResponseCode.SYSTEM_BUSY, "busy"))
    second = await serve(servers, ok)
    boot = Bootstrap(f"{first.address};{second.address}", timeout=2)
    cache = RouteCache(boot)
    try:
        await cache.refresh("t", force=True)
        await cache.refresh("t", force=True)
    finally:
        await cache.close()
        boot.close()
    assert (first.requests, second.requests) == (1, 2)


async def test_not_leader_answer_is_followed_to_the_leader_address(
    servers: list[RouteServer],
) -> None:
    leader = await serve(servers, ok)
    follower = await serve(
        servers,
        lambda req: response(
            req,
            ResponseCode.CONTROLLER_NOT_LEADER,
            {"remark": "not leader", "leaderAddress": leader.address},
        ),
    )
    # The leader is not even in the bootstrap list: it is learnt from the follower.
    boot = Bootstrap([dead_address(), follower.address], timeout=2)
    cache = RouteCache(boot)
    try:
        route = await cache.get("t")
        await cache.refresh("t", force=True)
    finally:
        await cache.close()
        boot.close()
    assert route.topic == "t"
    assert follower.requests == 1
    assert leader.requests == 2


async def test_the_leaders_not_now_is_the_answer_not_the_followers_pointers(
    servers: list[RouteServer],
) -> None:
    """Every address answered: the followers "not the leader, ask X", X "not now" with its
    reason. The error is X's answer (rmqctl printed a list of all three, the reason in the
    middle); a round of followers only is still "cannot reach any"."""
    leader = await serve(
        servers, lambda req: error_response(req, ResponseCode.SYSTEM_BUSY, "not heard yet; retry")
    )

    def follower(req: Frame) -> Frame:
        header = {"remark": "not leader", "leaderAddress": leader.address}
        return response(req, ResponseCode.CONTROLLER_NOT_LEADER, header)

    followers = [await serve(servers, follower) for _ in range(2)]
    boot = Bootstrap([f.address for f in followers], timeout=2, busy_rounds=2, busy_delay=0.01)
    try:
        with pytest.raises(BrokerError) as err:
            await RouteCache(boot).get("t")
    finally:
        boot.close()
    assert err.value.code == ResponseCode.SYSTEM_BUSY
    assert "not heard yet; retry" in str(err.value) and "not leader" not in str(err.value)
    assert leader.requests == 2

    lost = [
        await serve(servers, lambda req: response(req, ResponseCode.CONTROLLER_NOT_LEADER))
        for _ in range(2)
    ]
    boot = Bootstrap([s.address for s in lost], timeout=2, busy_rounds=2, busy_delay=0.01)
    try:
        with pytest.raises(UnreachableError):
            await RouteCache(boot).get("t")
    finally:
        boot.close()


async def test_no_live_address_names_every_address_and_the_reason() -> None:
    a, b = dead_address(), dead_address()
    boot = Bootstrap(f"{a};{b}", timeout=2)
    try:
        with pytest.raises(UnreachableError) as err:
            await RouteCache(boot).get("t")
    finally:
        boot.close()
    assert str(err.value) == f"cannot reach any of {a};{b}: connection refused"


async def test_unknown_topic_is_a_definitive_answer_not_tried_elsewhere(
    servers: list[RouteServer],
) -> None:
    missing = await serve(
        servers, lambda req: error_response(req, ResponseCode.TOPIC_NOT_EXIST, "no route")
    )
    other = await serve(servers, ok)
    boot = Bootstrap([missing.address, other.address], timeout=2)
    try:
        with pytest.raises(TopicNotFoundError):
            await RouteCache(boot).get("nope")
    finally:
        boot.close()
    assert other.requests == 0


async def test_concurrent_refreshes_share_one_request(servers: list[RouteServer]) -> None:
    live = await serve(servers, ok)
    boot = Bootstrap(live.address, timeout=2)
    cache = RouteCache(boot)
    try:
        routes = await asyncio.gather(*(cache.refresh("t", force=True) for _ in range(20)))
        # A refresh asked right after a fetch returns the cached route.
        await cache.refresh("t")
    finally:
        await cache.close()
        boot.close()
    assert all(r is routes[0] for r in routes)
    assert live.requests == 1


async def test_periodic_refresh_picks_up_a_changed_route(servers: list[RouteServer]) -> None:
    queues = {"n": 4}
    live = await serve(
        servers,
        lambda req: response(req, ResponseCode.SUCCESS, None, route_doc("t", queues["n"])),
    )
    boot = Bootstrap(live.address, timeout=2)
    cache = RouteCache(boot, refresh_interval=0.05, min_refresh_interval=0)
    try:
        assert len((await cache.get("t")).queues) == 6
        queues["n"] = 8
        cache.start()
        await wait_until_async(
            lambda: len(cache.peek("t").queues) == 10,  # type: ignore[union-attr]
            "the route refreshed",
            5,
        )
    finally:
        await cache.close()
        boot.close()


async def test_a_group_without_master_has_no_writable_queues(servers: list[RouteServer]) -> None:
    live = await serve(
        servers, lambda req: response(req, ResponseCode.SUCCESS, None, route_doc("t", master=None))
    )
    boot = Bootstrap(live.address, timeout=2)
    try:
        route = await RouteCache(boot).get("t")
    finally:
        boot.close()
    assert route.writable == ()
    assert len(route.queues) == 6
    assert route.master_address("broker-a") is None


async def test_a_leaderless_moment_is_waited_out(servers: list[RouteServer]) -> None:
    answers = iter(
        [
            ResponseCode.CONTROLLER_NOT_LEADER,
            ResponseCode.CONTROLLER_NOT_LEADER,
            ResponseCode.SUCCESS,
        ]
    )

    def election(req: Frame) -> Frame:
        code = next(answers)
        if code == ResponseCode.SUCCESS:
            return ok(req)
        return error_response(req, code, "election in progress")

    live = await serve(servers, election)
    boot = Bootstrap([dead_address(), live.address], timeout=2, busy_delay=0.01)
    try:
        route = await RouteCache(boot).get("t")
    finally:
        boot.close()
    assert route.topic == "t" and live.requests == 3
