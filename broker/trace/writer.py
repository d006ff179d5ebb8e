"""The trace writer: a bounded buffer of trace records, written in batches to the trace topic.

:meth:`TraceWriter.offer` never blocks and never fails its caller (a send, a POP, an ack): a
record that does not fit in the buffer (``trace_buffer_records``) is dropped and counted
(``rmq_broker_trace_dropped_total``), and so is a batch whose append fails (this broker is not
master, the disk is full). A task writes what is buffered every ``flush_interval_s``, or at once
when a batch is full: each trace message holds up to ``records_per_message`` records, keyed by
the ids of the messages they trace (RocketMQ's ``KEYS``, space-separated), so the key index finds
a message's records by its id; one append writes the whole batch.

Trace messages are ordinary CommitLog messages: they replicate like any other and survive a
failover once replicated.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Sequence
from typing import Final

import structlog

from daemon.tasks import sleep_or_wake
from protocol.message import Message
from protocol.trace import TraceRecord, encoded, take_message

__all__ = ["TraceWriter"]

log = structlog.get_logger(__name__)

RECORDS_PER_MESSAGE: Final = 32
MESSAGES_PER_APPEND: Final = 64
_WARN_EVERY_S: Final = 60.0


class TraceWriter:
    """Buffers trace records and writes them with ``put(messages, body_bytes)``. Loop thread
    only."""

    def __init__(
        self,
        topic: str,
        capacity: int,
        put: Callable[[Sequence[Message], int], object],
        *,
        born_host: str = "",
        records_per_message: int = RECORDS_PER_MESSAGE,
        flush_interval_s: float = 0.05,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        self.topic = topic
        self.capacity = capacity
        self._put = put
        self._born_host = born_host
        self._per_message = records_per_message
        self._interval = flush_interval_s
        self._now_ms = now_ms
        self._buffer: deque[tuple[str, str]] = deque()
        """(message id, encoded line): a record is encoded once, when offered."""
        self._wake = asyncio.Event() if _has_loop() else None
        self._task: asyncio.Task[None] | None = None
        self._warned_at = -_WARN_EVERY_S
        self.written = 0
        """Records written to the trace topic."""
        self.dropped = 0
        """Records dropped: the buffer was full, or their append failed."""

    def __len__(self) -> int:
        return len(self._buffer)

    def offer(self, record: TraceRecord | tuple[str, str]) -> bool:
        """Buffer ``record`` (or a record already encoded: its message id and line,
        :func:`protocol.trace.encode_line`); False (and counted) when the buffer is full or it
        cannot be encoded. Never raises."""
        if len(self._buffer) >= self.capacity:
            self.dropped += 1
            return False
        item = encoded(record)
        if item is None:
            self.dropped += 1
            return False
        self._buffer.append(item)
        if self._wake is not None and len(self._buffer) >= self._per_message:
            self._wake.set()
        return True

    def flush(self) -> int:
        """Write up to one append's worth of buffered records; returns how many were taken
        (written or, when the append failed, dropped)."""
        buf = self._buffer
        if not buf:
            return 0
        messages: list[Message] = []
        body_bytes = 0
        taken = 0
        while buf and len(messages) < MESSAGES_PER_APPEND:
            body, keys, n = take_message(buf, self._per_message)
            taken += n
            body_bytes += len(body)
            messages.append(
                Message(
                    topic=self.topic,
                    body=body,
                    keys=keys,
                    born_timestamp=self._now_ms() if self._now_ms is not None else 0,
                    born_host=self._born_host,
                )
            )
        try:
            self._put(messages, body_bytes)
        except Exception as exc:  # a refused append (not master, disk full): never the caller's
            self.dropped += taken
            self._warn(exc, taken)
            return taken
        self.written += taken
        return taken

    def _warn(self, exc: Exception, taken: int) -> None:
        loop_time = asyncio.get_running_loop().time() if _has_loop() else 0.0
        if loop_time - self._warned_at >= _WARN_EVERY_S:
            self._warned_at = loop_time
            log.warning(
                "trace records dropped: the trace topic took no append",
                topic=self.topic,
                records=taken,
                error=f"{type(exc).__name__}: {exc}",
            )

    # -- the task --------------------------------------------------------------------------------
    def start(self) -> None:
        if self._wake is None:
            self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="trace-writer")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        while self.flush():  # what is buffered still goes out (if the log takes it)
            pass

    async def _run(self) -> None:
        wake = self._wake
        assert wake is not None
        while True:
            await sleep_or_wake(wake, self._interval)
            wake.clear()
            while self.flush():
                await asyncio.sleep(0)  # let sends run between appends


def _has_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
