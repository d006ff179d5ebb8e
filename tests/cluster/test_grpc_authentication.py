"""The gRPC endpoint with the broker's authentication on (issues 13 item 4 and 14 item 2): the
official Python client signs its calls (MQv2-HMAC-SHA1 ``authorization`` over
``x-mq-date-time``) with an access key and secret key; the endpoint verifies them against the
users the broker caches from the controllers, decides each RPC's permissions with the user's
rules, and forwards what it admits to the master signed as the cluster.

One cluster for the module: 3 controllers and broker-a (one replica) with ``auth_enabled`` and a
gRPC port. The official client runs in a process of its own with HOME at a temp dir (it writes
its logs there) and TZ=UTC (it writes its local time as the signed UTC date-time).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest

from client import Credentials
from protocol.acl import make_rule
from protocol.codes import ControllerCode, RequestCode, ResponseCode
from protocol.grpc_auth import DATE_TIME_FORMAT, sign_date_time
from protocol.remoting import Frame, Scalar
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.rocketmq_v2 import service_pb2 as rpc
from protocol.rocketmq_v2.service_pb2_grpc import MessagingServiceStub
from remoting.client import ConnectionPool
from tests.cluster.secured import ROOT, WINDOW_MS, admin_call, create_root, secured_cluster
from tests.support.cluster import BrokerNode, Cluster
from tests.support.metrics import by_reason, scrape
from tests.support.official_client import client_env, run_script
from tests.support.procs import free_port
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

FULL = Credentials("full", "full-Secret-4242")  # pub and sub on A, sub on group g
APP = Credentials("app", "app-Secret-4242")  # pub on A only


class SecuredGrpc:
    def __init__(self, cluster: Cluster, broker: BrokerNode, endpoint: str, metrics: int):
        self.cluster = cluster
        self.broker = broker
        self.endpoint = endpoint
        self.metrics_port = metrics
        self.tmp = cluster.tmp

    async def admin(
        self, code: int, header: dict[str, Scalar], doc: dict[str, Any] | None = None
    ) -> Frame:
        return await admin_call(self.cluster.controller_addresses, code, header, doc)

    async def max_offset(self, topic: str) -> int:
        pool = ConnectionPool(3.0, ROOT)
        try:
            conn = await pool.get(self.broker.address)
            header: dict[str, Scalar] = {"topic": topic, "queueId": 0, "committed": False}
            resp = await conn.request(RequestCode.GET_MAX_OFFSET, header, None, 5.0)
        finally:
            pool.close()
        assert resp.code == ResponseCode.SUCCESS, resp.header
        value = resp.header["offset"]
        assert isinstance(value, int)
        return value

    def refusals(self) -> dict[str, float]:
        """reason -> rmq_broker_auth_refused_total from the broker's /metrics."""
        return by_reason(scrape(self.metrics_port), "rmq_broker_auth_refused_total")

    def run(self, script: str, *args: str, timeout: float = 90) -> str:
        """``script`` (the official client) in a process of its own; its last stdout line."""
        env = client_env(self.tmp, TZ="UTC")
        return run_script(script, self.tmp, *args, env=env, timeout=timeout, logs=self.cluster.logs)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredGrpc]:
    cluster, key, settings = secured_cluster(tmp_path_factory.mktemp("grpc-auth"))
    try:
        cluster.start_controllers()
        create_root(cluster, key)
        port, metrics = free_port(), free_port()
        (broker,) = cluster.add_group(
            "broker-a",
            1,
            extra=["--grpc-listen", f"127.0.0.1:{port}", "--metrics-port", str(metrics)],
            config=settings + "auth_refresh_interval_ms = 1000\n",
        )
        secured = SecuredGrpc(cluster, broker, f"127.0.0.1:{port}", metrics)
        asyncio.run(_users_and_topics(secured))
        yield secured
    finally:
        cluster.stop()


async def _users_and_topics(s: SecuredGrpc) -> None:
    for creds, rules in (
        (FULL, [("Topic:A", "pub,sub"), ("Group:g", "sub")]),
        (APP, [("Topic:A", "pub")]),
    ):
        user = {"username": creds.access_key}
        await s.admin(ControllerCode.AUTH_CREATE_USER, user, {"secret": creds.secret_key})
        docs = [make_rule(r, a.split(","), "allow").to_doc() for r, a in rules]
        await s.admin(ControllerCode.AUTH_CREATE_ACL, user, {"rules": docs})

    async def topics_created() -> bool:
        try:
            for topic in ("A", "B"):
                header: dict[str, Scalar] = {"topic": topic, "queues": 1, "brokerName": "broker-a"}
                await s.admin(RequestCode.UPDATE_AND_CREATE_TOPIC, header)
        except Exception:
            return False
        return True

    await wait_until_async(topics_created, "topics A and B", 30, on_timeout=s.cluster.logs)

    async def users_known() -> bool:  # the broker's cache follows the controllers
        async with grpc.aio.insecure_channel(s.endpoint) as channel:
            stub = MessagingServiceStub(channel)
            for creds in (FULL, APP):
                answer = await stub.QueryRoute(
                    rpc.QueryRouteRequest(topic=pb.Resource(name="A")),
                    metadata=signed(creds),
                    timeout=5,
                )
                if answer.status.code != pb.OK:
                    return False
        return True

    await wait_until_async(
        users_known, "the broker to know the users", 30, on_timeout=s.cluster.logs
    )


def signed(creds: Credentials, at: float | None = None) -> tuple[tuple[str, str], ...]:
    """The metadata the official clients send, signed at ``at`` (default now)."""
    date = time.strftime(DATE_TIME_FORMAT, time.gmtime(time.time() if at is None else at))
    sig = sign_date_time(creds.secret_key, date)
    authorization = (
        f"MQv2-HMAC-SHA1 Credential={creds.access_key}, SignedHeaders=x-mq-date-time, "
        f"Signature={sig}"
    )
    return (("x-mq-date-time", date), ("authorization", authorization), ("x-mq-client-id", "t1"))


_CLIENTS = """
import json, sys, time
from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message, Producer,
                      SimpleConsumer)

endpoint, creds = sys.argv[1], json.loads(sys.argv[2])

def config(name):
    return ClientConfiguration(endpoint, Credentials(*creds[name]), request_timeout=5)

def err(e):
    return f"{type(e).__name__}: {e}"

def send(name, topic, body):
    producer = Producer(config(name), (topic,))
    producer.startup()
    try:
        m = Message()
        m.topic, m.body, m.tag = topic, body.encode(), "T"
        return {"id": producer.send(m).message_id}
    except Exception as e:
        return {"error": err(e)}
    finally:
        producer.shutdown()

def receive(name, topic, group):
    consumer = SimpleConsumer(config(name), group, {topic: FilterExpression("*")},
                              await_duration=2)
    consumer.startup()
    try:
        got, deadline = [], time.time() + 30
        while not got and time.time() < deadline:
            got = consumer.receive(16, 15)
        for m in got:
            consumer.ack(m)
        return {"bodies": sorted(m.body.decode() for m in got)}
    except Exception as e:
        return {"error": err(e)}
    finally:
        consumer.shutdown()

out = {
    "full_send": send("full", "A", "signed"),
    "full_receive": receive("full", "A", "g"),
    "wrong_send": send("wrong", "A", "wrong secret"),
    "anonymous_send": send("anonymous", "A", "anonymous"),
    "app_send_a": send("app", "A", "app to A"),
    "app_send_b": send("app", "B", "app to B"),
    "app_receive_a": receive("app", "A", "g"),
}
print(json.dumps(out))
"""


async def test_the_official_client_signs_and_is_held_to_its_users_rules(
    secured: SecuredGrpc,
) -> None:
    """With an access key and secret key the official producer sends and its SimpleConsumer
    receives and acks; a wrong secret and no credentials are refused UNAUTHORIZED; a user with
    pub on A only cannot send to B nor receive from A (FORBIDDEN), and nothing refused is
    stored."""
    creds = {
        "full": [FULL.access_key, FULL.secret_key],
        "wrong": [FULL.access_key, "not-the-Secret"],
        "anonymous": ["", ""],
        "app": [APP.access_key, APP.secret_key],
    }
    b_before = await secured.max_offset("B")
    out = json.loads(
        await asyncio.to_thread(secured.run, _CLIENTS, secured.endpoint, json.dumps(creds))
    )
    assert "id" in out["full_send"], out
    assert out["full_receive"] == {"bodies": ["signed"]}, out
    # Refused at the client's first call, its route query: the client raises its own words and
    # logs the server's status (code and message) in its log under HOME.
    for name in ("wrong_send", "anonymous_send"):
        assert out[name] == {"error": "Exception: failed to fetch topic:A route."}, out
    client_log = (secured.tmp / "logs" / "rocketmq_python" / "rocketmq_client.log").read_text()
    assert (
        "40100, bad_signature: signature does not match for access key 'full' (wrong secret key?)"
        in client_log
    ), client_log[-3000:]
    assert "40100, unsigned: call signed without an access key" in client_log, client_log[-3000:]
    assert "id" in out["app_send_a"], out
    to_b = out["app_send_b"]["error"]
    assert "Forbidden" in to_b and "no rule of app allows pub on Topic:B" in to_b, out
    from_a = out["app_receive_a"]["error"]
    assert "Forbidden" in from_a and "no rule of app allows sub on Topic:A" in from_a, out
    assert await secured.max_offset("B") == b_before  # the refused send stored nothing
    assert await secured.max_offset("A") == 2  # "signed" and "app to A"
    refused = secured.refusals()
    assert refused.get("bad_signature", 0) >= 1 and refused.get("denied", 0) >= 2, refused
    assert refused.get("unsigned", 0) >= 1, refused


async def _telemetry(
    stub: MessagingServiceStub, metadata: Any, settings: pb.Settings | None
) -> rpc.TelemetryCommand:
    """The first command the server writes on a Telemetry stream (after ``settings``)."""

    async def commands() -> AsyncIterator[rpc.TelemetryCommand]:
        if settings is not None:
            yield rpc.TelemetryCommand(settings=settings)
        await asyncio.sleep(30)  # keep the stream open until the test cancels it

    call = stub.Telemetry(commands(), metadata=metadata, timeout=10)
    try:
        async for command in call:
            return command
    finally:
        call.cancel()
    raise AssertionError("the stream ended without a command")


async def test_each_refusal_names_its_reason_and_is_logged_once_per_source(
    secured: SecuredGrpc,
) -> None:
    """Raw calls: unsigned, an expired date-time, a namespace, a Telemetry stream opened
    without credentials or writing Settings for a topic the user may not publish."""
    async with grpc.aio.insecure_channel(secured.endpoint) as channel:
        stub = MessagingServiceStub(channel)
        route = rpc.QueryRouteRequest(topic=pb.Resource(name="A"))
        unsigned = await stub.QueryRoute(route, timeout=5)
        assert unsigned.status.code == pb.UNAUTHORIZED, unsigned
        assert unsigned.status.message.startswith("unsigned:"), unsigned
        stale = await stub.QueryRoute(
            route, metadata=signed(APP, time.time() - 2 * WINDOW_MS / 1000), timeout=5
        )
        assert stale.status.code == pb.UNAUTHORIZED, stale
        assert stale.status.message.startswith("expired:"), stale
        ghost = await stub.QueryRoute(
            route, metadata=signed(Credentials("ghost", "ghost-Secret-1")), timeout=5
        )
        assert ghost.status.message.startswith("unknown_user:"), ghost
        spaced = await stub.QueryRoute(
            route, metadata=(*signed(APP), ("x-mq-namespace", "prod")), timeout=5
        )
        assert spaced.status.code == pb.UNSUPPORTED and "namespace 'prod'" in spaced.status.message
        # A consumer's acknowledgement needs sub on the group: refused before any handle is read.
        ack = await stub.AckMessage(
            rpc.AckMessageRequest(
                group=pb.Resource(name="g"),
                topic=pb.Resource(name="A"),
                entries=[rpc.AckMessageEntry(message_id="x", receipt_handle="forged")],
            ),
            metadata=signed(APP),
            timeout=5,
        )
        assert ack.status.code == pb.FORBIDDEN and "sub on Topic:A" in ack.status.message, ack

        opened = await _telemetry(stub, (), None)
        assert opened.status.code == pb.UNAUTHORIZED, opened
        publishing = pb.Settings(
            client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="B")])
        )
        denied = await _telemetry(stub, signed(APP), publishing)
        assert denied.status.code == pb.FORBIDDEN and "Topic:B" in denied.status.message, denied
        assert not denied.HasField("settings")
        publishing.publishing.topics[0].name = "A"
        allowed = await _telemetry(stub, signed(APP), publishing)
        assert allowed.status.code == pb.OK and allowed.settings.publishing.max_body_size > 0
    # Every refusal came from 127.0.0.1: logged once in the minute, with the reason.
    lines = [ln for ln in secured.broker.log().splitlines() if '"grpc call refused"' in ln]
    assert 1 <= len(lines) <= 2, lines
    secrets = (FULL.secret_key, APP.secret_key, ROOT.secret_key)
    assert all('"reason"' in ln and not any(x in ln for x in secrets) for ln in lines), lines
