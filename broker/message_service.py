"""The message store service: the asyncio side of :class:`storage.store.MessageStore`.

It owns the worker thread that fsyncs, the flush policy and retention:

- ``flush = async``: the CommitLog is fsynced every ``flush_interval_ms``;
- ``flush = sync``: a send waits in :meth:`wait_flushed` until one fsync covers its bytes. Every
  send that arrives while an fsync runs is covered by the next one (group commit).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

import structlog

from broker.config import BrokerConfig
from broker.metrics import BrokerMetrics
from storage.store import MessageStore, StoreConfig

log = structlog.get_logger(__name__)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def store_config(cfg: BrokerConfig) -> StoreConfig:
    return StoreConfig(
        data_dir=cfg.data_dir,
        store_host=cfg.listen,
        commitlog_segment_bytes=cfg.commitlog_segment_bytes,
        consumequeue_segment_entries=cfg.consumequeue_segment_entries,
        retention_hours=cfg.retention_hours,
        disk_max_used_ratio=cfg.disk_max_used_ratio,
        max_message_bytes=cfg.max_message_bytes,
    )


class MessageStoreService:
    def __init__(self, cfg: BrokerConfig, metrics: BrokerMetrics) -> None:
        self.cfg = cfg
        self.store = MessageStore(store_config(cfg))
        self._metrics = metrics
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="flush")
        self._flush_wanted = asyncio.Event()
        self._waiters: list[tuple[int, int, asyncio.Future[bool]]] = []
        self._seq = itertools.count()
        self._tasks: list[asyncio.Task[None]] = []
        self.flushed_offset = 0

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self.store.open)
        self.flushed_offset = self.store.flushed_offset
        self._tasks.append(asyncio.create_task(self._flush_loop(), name="flush"))
        self._tasks.append(asyncio.create_task(self._retention_loop(), name="retention"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self.store.close)
        self._fail_waiters()
        self._executor.shutdown(wait=True)

    async def wait_flushed(self, end_offset: int, timeout: float) -> bool:
        """Wait until the CommitLog is durable up to ``end_offset``; False on timeout."""
        if end_offset <= self.flushed_offset:
            return True
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (end_offset, next(self._seq), fut))
        self._flush_wanted.set()
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            return False

    async def flush_now(self) -> int:
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        durable = await loop.run_in_executor(self._executor, self.store.flush)
        self._metrics.flush_latency.observe(time.perf_counter() - start)
        self.flushed_offset = max(self.flushed_offset, durable)
        waiters = self._waiters
        while waiters and waiters[0][0] <= self.flushed_offset:
            _, _, fut = heapq.heappop(waiters)
            if not fut.done():
                fut.set_result(True)
        return durable

    async def _flush_loop(self) -> None:
        interval = self.cfg.flush_interval_ms / 1000
        sync = self.cfg.flush == "sync"
        while True:
            try:
                if sync:
                    await self._flush_wanted.wait()
                    self._flush_wanted.clear()
                else:
                    await asyncio.sleep(interval)
                    if self.store.max_offset <= self.flushed_offset:
                        continue
                await self.flush_now()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # an fsync error must be loud, but keep trying
                log.error("flush failed", error=f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(interval)

    async def _retention_loop(self) -> None:
        interval = self.cfg.retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                usage = shutil.disk_usage(self.cfg.data_dir)
                ratio = usage.used / usage.total if usage.total else 0.0
                # On the loop thread: deleting a segment unmaps it, which must not race a read.
                deleted = self.store.delete_expired(now_ms(), ratio)
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

    def _fail_waiters(self) -> None:
        for _, _, fut in self._waiters:
            if not fut.done():
                fut.set_result(False)
        self._waiters.clear()
