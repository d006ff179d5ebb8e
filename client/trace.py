"""Message traces on the client side: finding a message's trace records.

:func:`query_trace` finds the trace messages whose keys hold a message id, through the key
index of the trace topic (every broker group of it), and returns the records about that id in
time order: what ``rmqctl queryMsgTraceById`` prints. The records' format is
:mod:`protocol.trace`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import os
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import structlog

from client.lookup import Lookup
from client.message import Message as ClientMessage
from protocol.message import MessageRecord, RecordError, parse_msg_id
from protocol.retry import origin_message_id
from protocol.trace import (
    DEFAULT_REGION,
    PROP_TRACE_CONTEXT,
    SOURCE_CLIENT,
    TRACE_TOPIC,
    ConsumeReturn,
    MessageType,
    SubAfterRecord,
    SubBeforeRecord,
    TraceFormatError,
    TraceRecord,
    decode_records,
    encode_line,
    encoded,
    pub_fields,
    take_message,
)

log = structlog.get_logger(__name__)

__all__ = ["ClientTracer", "TraceStep", "query_trace", "timeline", "traced_handler"]


@dataclass(frozen=True, slots=True)
class TraceStep:
    """One record of a message's timeline and the trace message it was found in."""

    record: TraceRecord
    stored_at: str
    """The broker that holds the trace message (host:port)."""


def _order(step: TraceStep) -> int:
    # Stable: records of one time stay in the order they were written (a writer writes them
    # in the order it saw the events; the lookup returns trace messages oldest first)
    return step.record.timestamp


def timeline(steps: list[TraceStep]) -> list[TraceStep]:
    """``steps`` in time order (at one millisecond in the order they were written), each
    record once (the same record found in two trace messages is shown once)."""
    seen: set[TraceRecord] = set()
    out: list[TraceStep] = []
    for step in sorted(steps, key=_order):
        if step.record in seen:
            continue
        seen.add(step.record)
        out.append(step)
    return out


async def query_trace(
    lookup: Lookup,
    msg_id: str,
    *,
    topic: str = TRACE_TOPIC,
    errors: list[str] | None = None,
) -> list[TraceStep]:
    """The trace records of ``msg_id`` in time order (empty: none found). Raises
    :class:`~client.errors.ClientError` when the trace topic is unknown or no broker group
    could answer; a trace message that is not in the trace format is skipped and said in
    ``errors``."""
    found = await lookup.by_key(topic, msg_id, max_num=1024, errors=errors)
    steps: list[TraceStep] = []
    for m in found:
        try:
            records = decode_records(m.record.body)
        except TraceFormatError as exc:
            if errors is not None:
                errors.append(f"trace message {m.msg_id}: {exc}")
            continue
        steps += [TraceStep(r, m.address) for r in records if r.msg_id == msg_id]
    return timeline(steps)


# -- writing (trace=True: RocketMQ's enableMsgTrace) ---------------------------------------------

BUFFER_RECORDS: Final = 10_000
RECORDS_PER_MESSAGE: Final = 32
_FLUSH_S: Final = 0.05
_REQUESTS_IN_FLIGHT: Final = 4
_MESSAGES_PER_REQUEST: Final = 8


class ClientTracer:
    """What a client sees (a send's cost, a consumption's duration and outcome) as trace
    records, written to the trace topic in the background by a producer of its own.

    :meth:`offer` never blocks and never raises: past ``capacity`` buffered records a record is
    dropped and counted (:attr:`dropped`), and so is a batch the trace topic refused. Loop
    thread only."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        topic: str = TRACE_TOPIC,
        capacity: int = BUFFER_RECORDS,
        client_host: str = "",
        producer_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.topic = topic
        self.capacity = capacity
        self.client_host = client_host or f"{socket.gethostname()}@{os.getpid()}"
        self._bootstrap = bootstrap
        self._options = dict(producer_options or {})
        self._buffer: deque[tuple[str, str]] = deque()
        """(message id, encoded line) of each record, oldest first."""
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._producer: Any = None
        self._started = False
        self._closing = False
        self.written = 0
        self.dropped = 0

    def offer(self, record: TraceRecord | tuple[str, str]) -> None:
        """Buffer ``record`` (or its message id and encoded line), encoded once here."""
        if len(self._buffer) >= self.capacity or self._closing:
            self.dropped += 1
            return
        item = encoded(record)
        if item is None:
            self.dropped += 1
            return
        self._buffer.append(item)
        if self._task is None:
            self._start()
        elif self._wake is not None and len(self._buffer) >= RECORDS_PER_MESSAGE:
            self._wake.set()

    def _start(self) -> None:
        from client.producer import Producer  # the tracer is part of the producer's module tree

        # Not idempotent, no trace of its own: a trace message is worth one try.
        self._producer = Producer(
            self._bootstrap, idempotent=False, send_deadline=5.0, **self._options
        )
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="client-trace")

    async def _run(self) -> None:
        assert self._wake is not None
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_FLUSH_S):
                    await self._wake.wait()
            self._wake.clear()
            await self._flush()
        await self._flush()

    async def _flush(self) -> None:
        buf = self._buffer
        if buf and not self._started:
            self._started = True
            await self._producer.start()
        while buf:
            # Up to 4 requests in flight, each one SEND_BATCH_MESSAGE of up to 8 trace messages
            # (one append each on the broker): one message a request cost the broker a request
            # per 32 records; one request at a time, a loaded broker's round trip would leave
            # records waiting behind a fast producer.
            requests: list[tuple[list[ClientMessage], int]] = []
            while buf and len(requests) < _REQUESTS_IN_FLIGHT:
                messages: list[ClientMessage] = []
                records = 0
                while buf and len(messages) < _MESSAGES_PER_REQUEST:
                    body, keys, n = take_message(buf, RECORDS_PER_MESSAGE)
                    messages.append(ClientMessage(body=body, keys=keys))
                    records += n
                requests.append((messages, records))
            results = await asyncio.gather(
                *(self._producer.send_batch(self.topic, m) for m, _ in requests),
                return_exceptions=True,
            )
            for (_, records), result in zip(requests, results, strict=True):
                if isinstance(result, BaseException):  # never the application's error
                    self.dropped += records
                    log.debug("trace records dropped", error=str(result), records=records)
                else:
                    self.written += records

    async def close(self) -> None:
        """Write what is buffered (one try each; a send in progress finishes), then stop."""
        task, self._task = self._task, None
        self._closing = True
        if task is not None:
            assert self._wake is not None
            self._wake.set()
            try:
                await task
            except Exception as exc:  # never the application's error
                log.debug("trace writer ended", error=repr(exc))
        if self._producer is not None:
            await self._producer.close()
            self._producer = None

    # -- what the client saw --------------------------------------------------------------------
    def sent(
        self,
        *,
        group: str,
        topic: str,
        body_length: int,
        keys: str,
        tags: str,
        born_ms: int,
        cost_ms: int,
        msg_id: str = "",
        broker: str = "",
        queue_id: int = -1,
        queue_offset: int = -1,
        success: bool = True,
    ) -> None:
        if not msg_id:
            return  # a failed send has no id to be found by
        try:  # encoded at once: one a send, no record object made
            line = encode_line(
                pub_fields(
                    born_ms, DEFAULT_REGION, group, topic, msg_id, tags, keys, broker,
                    body_length, cost_ms, MessageType.NORMAL, msg_id, success, self.client_host,
                    queue_id, queue_offset, "", SOURCE_CLIENT,
                )
            )  # fmt: skip
        except TraceFormatError as exc:
            self.dropped += 1
            log.debug("trace record dropped", error=str(exc))
            return
        self.offer((msg_id, line))

    def sent_result(self, topic: str, request: Any, result: Any, born_ms: int) -> None:
        """A send (``request``: its SendRequest) answered with ``result`` (a SendResult)."""
        try:
            store_host = parse_msg_id(result.msg_id)[0]
        except RecordError:
            store_host = result.broker_name
        self.sent(
            group="",
            topic=topic,
            body_length=len(request.body),
            keys=request.keys,
            tags=request.tags,
            born_ms=born_ms,
            cost_ms=max(0, now_ms() - born_ms),
            msg_id=result.msg_id,
            broker=store_host,
            queue_id=result.queue_id,
            queue_offset=result.queue_offset,
        )

    def consuming(self, group: str, record: MessageRecord, attempt: int, now_ms: int) -> str:
        """A message handed to the application (SubBefore); returns the request id for
        :meth:`consumed`."""
        props = record.properties
        msg_id = origin_message_id(props, record.msg_id)
        request_id = f"{self.client_host}-{next(self._ids)}"
        self.offer(
            SubBeforeRecord(
                timestamp=now_ms,
                group=group,
                request_id=request_id,
                msg_id=msg_id,
                retry_times=max(0, attempt - 1),
                keys=record.keys,
                client_host=self.client_host,
                traceparent=props.get(PROP_TRACE_CONTEXT, ""),
            )
        )
        return request_id

    def consumed(
        self,
        group: str,
        record: MessageRecord,
        request_id: str,
        started_ms: int,
        now_ms: int,
        *,
        success: bool,
    ) -> None:
        """The application's outcome for a message (SubAfter)."""
        self.offer(
            SubAfterRecord(
                timestamp=now_ms,
                group=group,
                request_id=request_id,
                msg_id=origin_message_id(record.properties, record.msg_id),
                cost_ms=max(0, now_ms - started_ms),
                success=success,
                keys=record.keys,
                context_code=ConsumeReturn.SUCCESS if success else ConsumeReturn.FAILED,
                client_host=self.client_host,
            )
        )

    _ids = itertools.count(1)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def traced_handler(
    tracer: ClientTracer, group: str, handler: Callable[[Any], Awaitable[object] | object]
) -> Callable[[Any], Awaitable[object]]:
    """``handler`` with a SubBefore before and a SubAfter after each call (failed when it
    raised; the exception goes on as before)."""

    async def traced(msg: Any) -> object:
        record: MessageRecord = msg.record
        attempt = getattr(msg, "attempt", None) or msg.reconsume_times + 1
        started = now_ms()
        request_id = tracer.consuming(group, record, attempt, started)
        ok = False
        try:
            result = handler(msg)
            if inspect.isawaitable(result):
                result = await result
            ok = True
            return result
        finally:
            tracer.consumed(group, record, request_id, started, now_ms(), success=ok)

    return traced
