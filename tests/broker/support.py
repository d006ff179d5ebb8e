"""Helpers shared by the broker tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.deletions import Deletions
from storage.config_files import (
    ConsumerOffsetStore,
    DlqResendLedger,
    SubscriptionGroupStore,
    TopicConfigStore,
)
from tests.support.procs import free_port


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
