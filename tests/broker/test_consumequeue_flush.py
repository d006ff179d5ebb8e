"""The broker's flushes leave ConsumeQueue files with a few new entries to the thorough flush,
every ``flush_consumequeue_thorough_interval_ms`` and at the stop (issue 34: at 10,000 queues
each put wrote its entry into a page every flush had written back, 0.8 to 0.9 minor faults a
message against 0.2 to 0.3 at 1,000 queues).

The broker's own flush loop (``broker.message_service.MessageStoreService``, in this process,
its fsyncs recorded): puts over 200 queues, one entry each, flushed by the periodic flush
without a ConsumeQueue file fsynced, the checkpoint's dispatched offset left behind; the stop
fsyncs them all. With ``flush = sync`` the thorough flush comes on its interval without a
send to wake it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.message_service import MessageStoreService
from broker.metrics import BrokerMetrics
from protocol.message import Message
from storage.checkpoint import Checkpoint, load_checkpoint
from tests.storage.test_consumequeue_lazy_flush import queue_fsyncs
from tests.support.wait import wait_until_async

QUEUES = 200
"""Fewer than ``storage.store_files.SYNCFS_FROM`` files: a flush fsyncs each one it syncs."""


def put_round(service: MessageStoreService, tag: str) -> None:
    for q in range(QUEUES):
        topic = f"Flush{q // 8:03d}"
        body = f"{tag}{q}".encode()
        service.store.put(topic, q % 8, [Message(topic=topic, body=body)], 1_700_000_000_000)


def checkpoint(cfg: BrokerConfig) -> Checkpoint:
    found = load_checkpoint(Path(cfg.data_dir) / "checkpoint")
    assert found is not None
    return found


async def flushed(service: MessageStoreService) -> None:
    """Wait for the flush loop to make the CommitLog durable up to its write position."""
    end = service.store.max_offset
    await wait_until_async(lambda: service.flushed_offset >= end, "a periodic flush", 30)


async def test_periodic_flushes_leave_queues_of_one_new_entry_unsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = BrokerConfig(data_dir=tmp_path / "store", flush_interval_ms=20)  # thorough: 60 s
    synced = queue_fsyncs(monkeypatch)
    service = MessageStoreService(cfg, BrokerMetrics("c", "broker-a"))
    await service.start()
    try:
        put_round(service, "a")  # creates the queues' files
        await flushed(service)
        synced.clear()
        put_round(service, "b")
        await flushed(service)
        assert synced == [], (
            f"{len(synced)} ConsumeQueue files fsynced by the periodic flushes of {QUEUES} puts, "
            f"one into each of {QUEUES} queues; none expected before the thorough flush"
        )
        point = checkpoint(cfg)
        assert point.dispatched_offset < point.flushed_offset == service.store.max_offset
    finally:
        await service.stop()
    assert len(set(synced)) == QUEUES, len(set(synced))  # the stop's thorough flush
    point = checkpoint(cfg)
    assert point.dispatched_offset == point.flushed_offset


async def test_with_sync_flush_the_thorough_flush_comes_without_a_send(tmp_path: Path) -> None:
    cfg = BrokerConfig(
        data_dir=tmp_path / "store",
        flush="sync",
        flush_consumequeue_thorough_interval_ms=1000,
    )
    service = MessageStoreService(cfg, BrokerMetrics("c", "broker-a"))
    await service.start()
    try:
        put_round(service, "a")
        end = service.store.max_offset
        done = asyncio.get_running_loop().create_future()
        service.when_flushed(end, 30, done.set_result)
        assert await done is True
        await wait_until_async(
            lambda: checkpoint(cfg).dispatched_offset == end, "the thorough flush", 30
        )
    finally:
        await service.stop()
