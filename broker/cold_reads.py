"""Cold reads off the event loop, at a bandwidth shared by the whole broker (issue 30 item 4).

A pull or POP whose records are not in the page cache (``MessageStore.cold_spans``, by
``mincore``: ``storage.cold_read``) would stop the event loop on disk reads, and every
producer's send with it. The pull and POP paths ask first; for a cold read they await
:meth:`ColdReads.load`, which reads those bytes of the segment files through ``aiofiles`` on a
pool of :data:`THREADS` threads, so the pages come into the cache off the loop, and then read
as always (the same ``MessageStore.get``: CRC checks, the repair of a damaged record, filters,
POP's checkpoints) from pages now cached.

Cold reads share ``cold_read_bytes_per_s`` (read at each load, so a live change applies at once;
0: no limit): a :class:`TokenBucket` hands out the bytes in order of asking, so a group catching
up from the start of the log reads at that rate while the hot path (sends, reads at the tail)
goes on. Counted for the metrics ``rmq_broker_cold_reads_total``,
``rmq_broker_cold_read_bytes_total`` and ``rmq_broker_cold_read_throttled_seconds_total``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

import aiofiles
import structlog

from broker.metrics import BrokerMetrics
from storage.cold_read import ColdSpan

__all__ = ["BURST_S", "THREADS", "ColdReads", "TokenBucket"]

log = structlog.get_logger(__name__)

BURST_S: Final = 0.1
"""The bucket holds at most this many seconds of the rate: an idle broker's first cold read
goes at once, a steady stream of them at the rate."""
THREADS: Final = 2
"""Threads reading cold bytes at once (the bucket bounds the bytes; this, the threads)."""
_CHUNK: Final = 1 << 20
_ADVISE: Final = hasattr(os, "posix_fadvise")


class TokenBucket:
    """Bytes at ``rate`` a second with a burst of :data:`BURST_S` seconds' worth. Pure: the
    caller gives the time. A take larger than what the bucket holds goes into debt, which the
    next takes wait out: each caller waits in the order it asked, and the bytes handed out over
    any span of time stay within the rate and one burst."""

    def __init__(self) -> None:
        self._tokens = 0.0
        self._stamp: float | None = None

    def take(self, nbytes: int, now: float, rate: int) -> float:
        """Take ``nbytes`` at ``now`` (seconds); the seconds to wait before reading them (0: at
        once). ``rate`` 0 is no limit."""
        if rate <= 0:
            self._stamp = None  # a limit set later starts from a full bucket
            return 0.0
        burst = rate * BURST_S
        if self._stamp is None:
            self._tokens = burst
        else:
            self._tokens = min(burst, self._tokens + max(0.0, now - self._stamp) * rate)
        self._stamp = now
        self._tokens -= nbytes
        return 0.0 if self._tokens >= 0 else -self._tokens / rate


class ColdReads:
    """The broker's cold reads (module doc). Loop thread only."""

    def __init__(
        self, rate: Callable[[], int], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._rate = rate
        self._clock = clock
        self._bucket = TokenBucket()
        self._executor: ThreadPoolExecutor | None = None
        self._loading: dict[Path, list[tuple[int, int, asyncio.Future[None]]]] = {}
        """File ranges being loaded now: a load starting in one waits for it, and one reaching
        into one stops there, instead of reading (and paying for) the same bytes again (groups
        or queues reading the same part of the log at once)."""
        self.reads = 0
        """Pulls and POPs that found cold bytes to load."""
        self.bytes = 0
        """Cold bytes loaded."""
        self.throttled_s = 0.0
        """Seconds cold reads waited for the bandwidth."""

    def export_metrics(self, metrics: BrokerMetrics) -> None:
        metrics.counter_fn(
            "rmq_broker_cold_reads",
            "Pulls and POPs whose records were not in the page cache, loaded off the event loop",
            lambda: self.reads,
        )
        metrics.counter_fn(
            "rmq_broker_cold_read_bytes",
            "CommitLog bytes cold reads loaded off the event loop",
            lambda: self.bytes,
        )
        metrics.counter_fn(
            "rmq_broker_cold_read_throttled_seconds",
            "Seconds cold reads waited for their share of cold_read_bytes_per_s",
            lambda: self.throttled_s,
        )

    async def load(self, spans: list[ColdSpan]) -> None:
        """Bring ``spans`` into the page cache off the loop, at the broker's cold bandwidth;
        the parts other loads are reading now are waited for, not read again. A file that
        cannot be read is left to the read that follows to answer for."""
        self.reads += 1
        for span in spans:
            start, end = span.position, span.position + span.size
            others = [r for r in self._loading.get(span.path, ()) if r[0] < end and r[1] > start]
            try:
                for lo, hi in _gaps(start, end, others):
                    await self._load_part(span.path, lo, hi)
            except OSError as exc:  # deleted by retention meanwhile, or a failing disk
                log.warning("cold read failed", path=str(span.path), error=str(exc))
                return
            finally:
                for _, _, done in others:  # the read that follows touches their bytes too
                    await asyncio.shield(done)

    async def _load_part(self, path: Path, lo: int, hi: int) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ranges = self._loading.setdefault(path, [])
        entry = (lo, hi, done)
        ranges.append(entry)
        try:
            wait = self._bucket.take(hi - lo, self._clock(), self._rate())
            if wait > 0:
                self.throttled_s += wait
                await asyncio.sleep(wait)
            await self._read(ColdSpan(path, lo, hi - lo))
            self.bytes += hi - lo
        finally:
            ranges.remove(entry)
            if not ranges:
                del self._loading[path]
            done.set_result(None)

    async def _read(self, span: ColdSpan) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(THREADS, thread_name_prefix="cold-read")
        async with aiofiles.open(span.path, "rb", buffering=0, executor=self._executor) as f:
            if _ADVISE:
                # Only the bytes asked for: the kernel's readahead (8 MiB on some devices) would
                # load far more than the bandwidth counts, on the disk the hot path shares.
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_RANDOM)
            await f.seek(span.position)
            left = span.size
            while left > 0:
                chunk = await f.read(min(left, _CHUNK))
                if not chunk:
                    return
                left -= len(chunk)

    def close(self) -> None:
        """Let the reading threads end (a load in flight is not waited for)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


def _gaps(
    start: int, end: int, taken: list[tuple[int, int, asyncio.Future[None]]]
) -> list[tuple[int, int]]:
    """The parts of ``[start, end)`` outside every range of ``taken``."""
    out: list[tuple[int, int]] = []
    at = start
    for lo, hi, _ in sorted(taken, key=lambda r: r[0]):
        if lo > at:
            out.append((at, min(lo, end)))
        at = max(at, hi)
        if at >= end:
            break
    if at < end:
        out.append((at, end))
    return out
