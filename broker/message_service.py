"""The message store service: the asyncio side of :class:`storage.store.MessageStore`.

It owns the worker thread that fsyncs, the flush policy and retention:

- ``flush = async``: the CommitLog is fsynced every ``flush_interval_ms``;
- ``flush = sync``: a send waits (:meth:`when_flushed`) until one fsync covers its bytes. Every
  send that arrives while an fsync runs is covered by the next one (group commit). The waiters
  are :class:`~broker.offset_waiters.OffsetWaiters`: released in one pass after each fsync.

Either way a flush fsyncs a ConsumeQueue file only once its new entries cross
``flush_consumequeue_least_pages`` page boundaries; every
``flush_consumequeue_thorough_interval_ms`` (and at the stop) one flush fsyncs every ConsumeQueue
file written, which is what lets the checkpoint's dispatched offset, where recovery replays the
CommitLog into the queues from, move on (``storage.store_files``).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import structlog

from broker.config import BrokerConfig
from broker.metrics import BrokerMetrics
from broker.offset_waiters import Done, OffsetWaiters
from daemon.tasks import cancel_and_wait
from protocol.message import HEAD_SIZE, MAX_PROPERTIES_BYTES, MAX_TOPIC_BYTES
from storage.store import MessageStore, StoreConfig

log = structlog.get_logger(__name__)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def max_record_bytes(max_body_bytes: int) -> int:
    """The store's record limit for a broker whose ``max_message_bytes`` is ``max_body_bytes``.

    That key limits message bodies (the send paths check them); the store limits whole records
    (head, topic, body, properties). Given the body limit alone it refused bodies near the limit,
    and stored a message near it whose copies with more properties (a retry, a dead letter, a
    POP delivery revived, a scheduled or committed delivery) it then refused, so they failed
    again and again. This is the largest record a body within the limit makes, with a topic and
    properties as long as the record format allows."""
    return max_body_bytes + HEAD_SIZE + 2 + MAX_TOPIC_BYTES + 2 + MAX_PROPERTIES_BYTES


def store_config(cfg: BrokerConfig) -> StoreConfig:
    return StoreConfig(
        data_dir=cfg.data_dir,
        store_host=cfg.listen,
        commitlog_segment_bytes=cfg.commitlog_segment_bytes,
        consumequeue_segment_entries=cfg.consumequeue_segment_entries,
        consumequeue_open_files=cfg.consumequeue_open_files,
        consumequeue_allocate_bytes=cfg.consumequeue_allocate_bytes,
        retention_hours=cfg.retention_hours,
        disk_max_used_ratio=cfg.disk_max_used_ratio,
        max_message_bytes=max_record_bytes(cfg.max_message_bytes),
        index_enable=cfg.index_enable,
        index_slots=cfg.index_slots_per_file,
        index_max_entries=cfg.index_entries_per_file,
        index_file_span_ms=cfg.index_file_span_ms,
        filter_index=cfg.enable_property_filter,
    )


class MessageStoreService:
    def __init__(self, cfg: BrokerConfig, metrics: BrokerMetrics) -> None:
        self.cfg = cfg
        self.store = MessageStore(store_config(cfg))
        self._metrics = metrics
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="flush")
        self._flush_wanted = asyncio.Event()
        self._waiters = OffsetWaiters("flush")
        self._tasks: list[asyncio.Task[None]] = []
        self.flushed_offset = 0
        self.retention_floor: Callable[[], int | None] = lambda: None
        """The CommitLog offset retention by age must keep (scheduled messages: the timer's)."""

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self.store.open)
        self.flushed_offset = self.store.flushed_offset
        self._tasks.append(asyncio.create_task(self._flush_loop(), name="flush"))
        self._tasks.append(asyncio.create_task(self._retention_loop(), name="retention"))

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks.clear()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self.store.close)
        self._waiters.fail_all()
        self._executor.shutdown(wait=True)

    def when_flushed(self, end_offset: int, timeout: float, done: Done) -> None:
        """Call ``done(True)`` once the CommitLog is durable up to ``end_offset`` (at once when it
        is), ``done(False)`` after ``timeout`` seconds."""
        if end_offset <= self.flushed_offset:
            done(True)
            return
        self._waiters.add(end_offset, timeout, done)
        self._flush_wanted.set()

    async def flush_now(self, *, thorough: bool = True) -> int:
        """Flush the CommitLog; the ConsumeQueue files too (``thorough``), or only those with
        ``flush_consumequeue_least_pages`` of new entries."""
        loop = asyncio.get_running_loop()
        least = 0 if thorough else self.cfg.flush_consumequeue_least_pages
        start = time.perf_counter()
        durable = await loop.run_in_executor(self._executor, self.store.flush, least)
        self._metrics.flush_latency.observe(time.perf_counter() - start)
        self.flushed_offset = max(self.flushed_offset, durable)
        self._waiters.release(self.flushed_offset)
        return durable

    async def _flush_loop(self) -> None:
        sync = self.cfg.flush == "sync"
        thorough_at = time.monotonic()  # when the last thorough flush began
        while True:
            interval = self.cfg.flush_interval_ms / 1000  # a live change: the next period
            every = self.cfg.flush_consumequeue_thorough_interval_ms / 1000
            try:
                if sync:
                    # Woken by a send, or when the thorough flush is due without one.
                    due = thorough_at + every - time.monotonic() if every > 0 else None
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(due):
                            await self._flush_wanted.wait()
                    self._flush_wanted.clear()
                else:
                    await asyncio.sleep(interval)
                thorough = time.monotonic() >= thorough_at + every
                if not thorough and not sync and self.store.max_offset <= self.flushed_offset:
                    continue
                if thorough:
                    thorough_at = time.monotonic()
                await self.flush_now(thorough=thorough)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # an fsync error must be loud, but keep trying
                log.error("flush failed", error=f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(interval)

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.retention_check_interval_ms / 1000)
            try:
                usage = shutil.disk_usage(self.cfg.data_dir)
                ratio = usage.used / usage.total if usage.total else 0.0
                # On the loop thread: deleting a segment unmaps it, which must not race a read.
                deleted = self.store.delete_expired(now_ms(), ratio, self.retention_floor())
                if deleted:
                    log.info(
                        "retention deleted segments",
                        segments=deleted,
                        disk_used_ratio=round(ratio, 3),
                    )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error("retention failed", error=f"{type(exc).__name__}: {exc}")
