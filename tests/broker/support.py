"""Helpers shared by the broker tests."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.deletions import Deletions
from client.admin import Admin
from protocol.message import MessageRecord, encode_properties, pack_host
from protocol.pull import PullRequest
from protocol.remoting import Frame
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.rocketmq_v2 import service_pb2 as rpc
from protocol.rocketmq_v2.service_pb2_grpc import MessagingServiceStub
from remoting.client import RemotingClient
from storage.config_files import (
    ConsumerOffsetStore,
    DlqResendLedger,
    SubscriptionGroupStore,
    TopicConfigStore,
)
from tests.support.metrics import scrape
from tests.support.procs import BrokerProc, free_port
from tests.support.wait import wait_until_async


def config_sync_context(tmp_path: Path, **more: Any) -> Any:
    """What SlaveConfigSync reads of a broker's context: its topic, offset, subscription group
    and DLQ-resend stores in ``tmp_path`` and its Deletions; ``more`` besides (its role)."""
    return SimpleNamespace(
        topics=TopicConfigStore(tmp_path),
        offsets=ConsumerOffsetStore(tmp_path),
        sub_groups=SubscriptionGroupStore(tmp_path),
        dlq_resent=DlqResendLedger(tmp_path),
        deletions=Deletions(),
        **more,
    )


def small_config(tmp_path: Path, listen: str | None = None, **settings: Any) -> BrokerConfig:
    """A lone broker's config: data in ``tmp_path``/broker-a, 1 MiB CommitLog segments,
    ConsumeQueue segments of 1024 entries, /metrics on an ephemeral port, ``settings`` besides.
    It listens on ``listen``, by default on a free port that a route can name (the SDK connects
    there; ``127.0.0.1:0`` serves only who asks ``Broker.port``)."""
    return BrokerConfig(
        listen=listen or f"127.0.0.1:{free_port()}",
        data_dir=tmp_path / "broker-a",
        metrics_port=0,
        commitlog_segment_bytes=1 << 20,
        consumequeue_segment_entries=1024,
        **settings,
    )


@asynccontextmanager
async def running(cfg: BrokerConfig) -> AsyncIterator[Broker]:
    """A Broker started in this event loop with ``cfg``, stopped on the way out."""
    b = Broker(cfg)
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


BrokerFixture = Callable[..., AsyncIterator[Broker]]


def grpc_master_and_slave(topic: str, queues: int) -> tuple[BrokerFixture, BrokerFixture]:
    """Fixtures ``a`` and ``b`` for a module, each a broker in this event loop with a real gRPC
    port and ``queues`` queues by default: ``a``, a lone master holding ``topic``, and ``b``, a
    lone broker told it is a slave of ``a`` (its role swapped as the controllers would). A
    module takes them as ``a, b = grpc_master_and_slave(TOPIC, QUEUES)``."""

    def config(tmp_path: Path, name: str) -> BrokerConfig:
        return small_config(
            tmp_path / name, grpc_listen=f"127.0.0.1:{free_port()}", default_topic_queues=queues
        )

    @pytest.fixture
    async def a(tmp_path: Path) -> AsyncIterator[Broker]:
        async with running(config(tmp_path, "a")) as broker:
            broker.ctx.create_topic(topic, queues)
            yield broker

    @pytest.fixture
    async def b(tmp_path: Path, a: Broker) -> AsyncIterator[Broker]:
        async with running(config(tmp_path, "b")) as broker:
            broker.ctx.role_cell.swap(is_master=False, master_address=a.cfg.listen)
            yield broker

    return a, b


def figure(b: Broker, name: str, **labels: str) -> float:
    """The sum of ``b``'s samples named ``name`` whose labels include ``labels``, as a scrape
    of its /metrics reads them."""
    text = generate_latest(b.metrics.registry).decode()
    total = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


class ConfirmedUpTo:
    """A stand-in HA service of a master alone in its SyncStateSet: consumers may read up to
    ``confirm_offset``."""

    slave_state = None

    def __init__(self, confirm_offset: int) -> None:
        self.confirm_offset = confirm_offset

    def slave_acks(self) -> dict[int, int]:
        return {}

    def in_sync_members(self) -> frozenset[int]:
        return frozenset({1})

    def refused_counts(self) -> dict[str, int]:
        return {}


def stored_record(topic: str, props: dict[str, str], body: bytes = b"hello") -> MessageRecord:
    """A record of ``topic`` as the store hands it out: queue 1 offset 7, ``props``, ``body``."""
    return MessageRecord(
        topic=topic,
        queue_id=1,
        queue_offset=7,
        physical_offset=4096,
        size=0,
        flag=0,
        born_timestamp=1_700_000_000_123,
        store_timestamp=1_700_000_000_456,
        born_host_raw=pack_host("10.0.0.1:5000"),
        store_host_raw=pack_host("10.0.0.2:10911"),
        body=body,
        properties_raw=encode_properties(props),
    )


async def grpc_send(broker: Broker, topic: str, *bodies: bytes, tag: str | None = None) -> None:
    """One SendMessage of ``bodies`` to ``topic`` (ids ``id-<body>-<i>``, ``tag`` on each when
    given) on ``broker``'s gRPC port, answered OK."""
    messages = []
    for i, body in enumerate(bodies):
        m = pb.Message(topic=pb.Resource(name=topic), body=body)
        m.system_properties.message_id = f"id-{body.decode()}-{i}"
        if tag is not None:
            m.system_properties.tag = tag
        messages.append(m)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{broker.grpc_port}") as channel:
        stub = MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
        sent = await stub.SendMessage(rpc.SendMessageRequest(messages=messages), timeout=10)
        assert sent.status.code == pb.OK, sent


async def grpc_receive(
    broker: Broker, group: str, topic: str, tags: str, poll_s: int
) -> tuple[int, list[pb.Message]]:
    """One ReceiveMessage on ``broker``'s gRPC port (``group``, ``topic``'s messages of the tag
    expression ``tags``, 16 at most, invisible 30 s, long polling ``poll_s``): its status code
    (-1 without one) and the messages."""
    request = rpc.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression=tags),
        batch_size=16,
        invisible_duration=Duration(seconds=30),
        long_polling_timeout=Duration(seconds=poll_s),
    )
    code = -1
    got: list[pb.Message] = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{broker.grpc_port}") as channel:
        stub = MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
        async for answer in stub.ReceiveMessage(request, timeout=poll_s + 10):
            if answer.HasField("status"):
                code = answer.status.code
            elif answer.HasField("message"):
                got.append(answer.message)
    return code, got


def pulls_waiting(metrics_port: int) -> float:
    """rmq_broker_pulls_waiting on the broker's /metrics."""
    for line in scrape(metrics_port).splitlines():
        if line.startswith("rmq_broker_pulls_waiting"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("rmq_broker_pulls_waiting is not served")


@dataclasses.dataclass(frozen=True)
class LongPolls:
    """Raw long-polling pulls over ``conn``, each ``request`` from another offset, against a
    broker process serving /metrics on ``metrics_port``."""

    conn: RemotingClient
    metrics_port: int
    request: PullRequest

    def pull(self, offset: int, suspend_ms: int) -> asyncio.Task[Frame]:
        """The pull from ``offset``, waiting up to ``suspend_ms`` at the broker, on its way."""
        req = dataclasses.replace(self.request, offset=offset, suspend_ms=suspend_ms)
        return asyncio.ensure_future(
            self.conn.request(req.code, req.header(), None, suspend_ms / 1000 + 10)
        )

    async def parked(self, task: asyncio.Task[Frame]) -> None:
        """Returns once the broker holds the pull ``task`` (its only waiting pull)."""
        await wait_until_async(
            lambda: task.done() or pulls_waiting(self.metrics_port) == 1, "the pull to wait", 10
        )
        assert not task.done(), task.result().header


@asynccontextmanager
async def long_polls(
    broker: BrokerProc, metrics_port: int, request: PullRequest
) -> AsyncIterator[LongPolls]:
    """LongPolls of ``request`` on a connection to ``broker`` (serving /metrics on
    ``metrics_port``), once ``request``'s topic is created there with one queue."""
    async with Admin(broker.address) as admin:
        await admin.create_topic(request.topic, 1)
    conn = await RemotingClient.connect(broker.address, timeout=2.0)
    try:
        yield LongPolls(conn, metrics_port, request)
    finally:
        conn.close()
