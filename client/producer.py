"""The producer: sends to the masters of a topic's route, round-robin over its queues.

Sends share one pipelined connection per broker (requests matched by opaque), so many
``send()`` calls may be in flight at once without a task or connection each. A send that fails
in a way another queue may not (connection lost, timeout, busy, flush timeouts, not master, no
master in the route, ...) refreshes the route and goes to another queue, preferring another
broker group; success is reported only when a broker answered SUCCESS
(``client/routing_retry.py``).

Retries run against a deadline, ``send_deadline`` (default 10 s), long enough to ride out a
failover (a dead or frozen master is replaced within about ``broker_heartbeat_timeout_ms``,
1 s by default, plus an election); each attempt waits at most ``send_timeout`` (default 2 s), so
one attempt against a frozen master does not use up the budget. An attempt unanswered for
``ROUTE_WATCH_AFTER`` has the route watched while it waits: once the controllers name another
master for its group, the connection to the old one is closed and the attempt retried there at
once (a frozen master keeps its connections open; only the route tells it was replaced).

Adaptive batching (``auto_batch``, on by default): a send that finds nothing in flight to its
broker group goes out at once, alone; sends made while one is in flight are gathered per
(topic, broker group) and leave as one SEND_BATCH_MESSAGE when it returns, or as soon as
``batch_max_count`` / ``batch_max_bytes`` fill (``client/accumulator.py`` decides, its driver
``client/auto_batch.py`` sends through ``client/batch_send.py``). Each send keeps its own result,
error and deadline.

FIFO message groups (``message_group=``): a send goes to the queue its group hashes to
(``protocol/fifo.py``) through that queue's ordered lane (``client/lane.py``: one request in
flight, sends in call order; driven by ``client/fifo_send.py``), and its retries go only to the
group's queue (docs/fifo.md).

Idempotence (``idempotent``, on by default; docs/idempotence.md): before its first send the
producer takes a producer id and epoch from the controllers (``client/producer_identity.py``),
and every request carries them with the sequence of its queue (``client/sequencer.py``), so the
broker, and after a failover its successor, stores a retried request once. A request that may
have been stored is retried only on its queue.

Recalling a scheduled message: ``client/recall.py``. This module builds the requests from the
application's arguments and hands them to those parts.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from client.auto_batch import AutoBatcher
from client.batch_send import FRAME_OVERHEAD, BatchSender, batch_results, single_result
from client.bootstrap import Bootstrap
from client.errors import ClientError, ClosedError
from client.fifo_send import FifoSender
from client.message import (
    Delay,
    DeliverAt,
    OutgoingMessage,
    SendResult,
    asked_delivery_time,
    delivery_properties,
)
from client.producer_identity import acquire_identity
from client.recall import Recaller
from client.routes import RouteCache
from client.routing_retry import RETRIABLE_CODES, SendRouter
from client.sequencer import Sequencer
from client.trace import ClientTracer
from protocol.broker_requests.send import SendBatchRequest, SendRequest
from protocol.fifo import PROP_MESSAGE_GROUP, message_group_error
from protocol.message import Message as WireMessage
from protocol.message import encode_properties
from protocol.remoting import DEFAULT_MAX_FRAME_BYTES
from protocol.request_auth import Credentials
from remoting.client import ConnectionPool

# RETRIABLE_CODES is re-exported: the pipeline and the transaction producer import it from here.
__all__ = ["RETRIABLE_CODES", "Producer"]


class Producer:
    """Sends messages to a topic's broker groups.

    ``bootstrap`` is the controller addresses, or a lone broker's, ``;``-separated.
    Use as ``async with Producer(...) as p:`` or call :meth:`start` and :meth:`close`.

    - ``send_deadline``: seconds one send may take in all, every attempt, route lookup,
      the producer id's request (the first send's) and back-off included; retriable failures are retried (on another queue, preferably another
      broker group) until it passes. Cover a failover: at least a few seconds more than the
      brokers' ``broker_heartbeat_timeout_ms``.
    - ``send_timeout``: seconds one attempt waits for its answer (never past the deadline).
    - ``retries``: at most this many further attempts; None (the default) lets the deadline
      alone decide.
    - ``retry_backoff``: seconds before a retry when every broker group of the route failed or
      none has a master (doubling per attempt, at most 1 s), so a group in failover gets time
      to elect and promote its new master instead of burning attempts in a millisecond.
    - ``fault_isolation``: seconds a broker group that failed a send is skipped by new sends
      while another group can take them (0 turns it off).
    - ``max_message_bytes``: larger bodies are refused before anything is sent.
    - ``auto_batch``: gather sends made while another send to the same broker group is in
      flight and send them as one batch request (see :meth:`send`); False sends every message
      as its own request.
    - ``batch_max_count`` / ``batch_max_bytes``: a gathered batch leaves as soon as it holds
      this many messages / bytes (bodies, keys, tags, properties), in flight or not; a message
      of ``batch_max_bytes`` or more always goes alone.
    - ``linger_ms``: with auto-batching, a send that finds nothing in flight waits this long
      for others to join it (0, the default: it goes at once).
    - ``credentials``: ``Credentials(access_key, secret_key)`` of a user: every request is
      signed (a cluster with authentication on refuses unsigned ones; docs/protocol.md,
      "Authentication"). The same keyword on Consumer, SimpleConsumer, TransactionProducer
      (passed to its producer), Admin, Lookup and ProgressAdmin.
    - ``tls``: an ``ssl.SSLContext`` (``remoting.tls.client_context(ca_file)`` makes one):
      every connection goes over TLS, the brokers' and controllers' certificates checked
      against its CA (a cluster with ``tls_enabled``). The same keyword on the classes above.
    - ``idempotent``: every request carries this producer's id, epoch and the sequence of its
      queue, so a retry of a request the broker stored (an answer lost, a timeout, a failover)
      is not stored again (docs/idempotence.md; the id is taken from the controllers before
      the first send). False: no fields, today's at-least-once retries.
    - ``producer_id_file``: a file keeping the producer id across restarts (created on first
      use): the id is taken up again at a higher epoch, and the brokers refuse what an earlier
      incarnation of it still sends (PRODUCER_FENCED). Without it each start is a new producer.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        send_deadline: float = 10.0,
        send_timeout: float = 2.0,
        retries: int | None = None,
        connect_timeout: float = 3.0,
        route_refresh_interval: float = 30.0,
        max_message_bytes: int = 4 * 1024 * 1024,
        fault_isolation: float = 1.0,
        retry_backoff: float = 0.05,
        auto_batch: bool = True,
        batch_max_count: int = 256,
        batch_max_bytes: int = 1024 * 1024,
        linger_ms: float = 0.0,
        credentials: Credentials | None = None,
        tls: ssl.SSLContext | None = None,
        idempotent: bool = True,
        producer_id_file: str | os.PathLike[str] | None = None,
        trace: bool = False,
    ) -> None:
        if retries is not None and retries < 0:
            raise ValueError("retries must be >= 0 (or None)")
        if batch_max_count < 1 or linger_ms < 0:
            raise ValueError("batch_max_count must be >= 1 and linger_ms >= 0")
        if not 1 <= batch_max_bytes <= DEFAULT_MAX_FRAME_BYTES - FRAME_OVERHEAD:
            raise ValueError(
                f"batch_max_bytes must be 1..{DEFAULT_MAX_FRAME_BYTES - FRAME_OVERHEAD}"
            )
        if send_deadline <= 0 or send_timeout <= 0:
            raise ValueError("send_deadline and send_timeout must be > 0")
        self.connect_timeout = connect_timeout
        self.max_message_bytes = max_message_bytes
        self._pool = ConnectionPool(connect_timeout, credentials, tls)
        bootstrap_ = Bootstrap(bootstrap, self._pool, connect_timeout)
        self._bootstrap = bootstrap_
        self.idempotent = idempotent
        self._tracer = (
            ClientTracer(bootstrap, producer_options={"credentials": credentials, "tls": tls})
            if trace
            else None
        )
        """trace=True (RocketMQ's enableMsgTrace): each send's record goes to the trace topic."""
        self.producer_id_file = Path(producer_id_file) if producer_id_file is not None else None
        if self.producer_id_file is not None and not idempotent:
            raise ValueError("producer_id_file needs idempotent=True")
        self._identity: asyncio.Future[None] | None = None
        self.routes = RouteCache(bootstrap_, refresh_interval=route_refresh_interval)
        self._router = SendRouter(
            self._pool,
            bootstrap_,
            self.routes,
            send_deadline=send_deadline,
            send_timeout=send_timeout,
            retries=retries,
            retry_backoff=retry_backoff,
            fault_isolation=fault_isolation,
        )
        self.auto_batch = auto_batch
        self.batch_max_count = batch_max_count
        self.batch_max_bytes = batch_max_bytes
        self.linger_ms = linger_ms
        sender = BatchSender(self._router)
        self._batcher = AutoBatcher(
            self._router,
            sender,
            batch_max_count=batch_max_count,
            batch_max_bytes=batch_max_bytes,
            linger_ms=linger_ms,
        )
        self._fifo = FifoSender(
            self._router,
            sender,
            batch_max_count=batch_max_count if auto_batch else 1,
            batch_max_bytes=batch_max_bytes,
        )
        self._recaller = Recaller(self._router, bootstrap_)

    @property
    def send_deadline(self) -> float:
        return self._router.send_deadline

    @property
    def send_timeout(self) -> float:
        return self._router.send_timeout

    @property
    def retries(self) -> int | None:
        return self._router.retries

    @property
    def retry_backoff(self) -> float:
        return self._router.retry_backoff

    @property
    def fault_isolation(self) -> float:
        return self._router.fault_isolation

    @property
    def producer_id(self) -> int | None:
        """The idempotent producer's id (None before its first send, or not idempotent)."""
        seqr = self._router.sequencer
        return None if seqr is None else seqr.producer_id

    @property
    def producer_epoch(self) -> int | None:
        seqr = self._router.sequencer
        return None if seqr is None else seqr.epoch

    async def _identify(self) -> None:
        """Take the producer id and epoch (once; concurrent first sends wait for the same
        request, a failed one is tried again by the next send)."""
        fut = self._identity
        if fut is None:
            fut = self._identity = asyncio.ensure_future(self._acquire())
        try:
            await asyncio.shield(fut)
        except Exception:
            if self._identity is fut:
                self._identity = None
            raise

    async def _acquire(self) -> None:
        router = self._router
        deadline = asyncio.get_running_loop().time() + router.send_deadline
        answer = await acquire_identity(
            self._bootstrap, self.producer_id_file, router.send_timeout, deadline
        )
        self._router.sequencer = Sequencer(answer.producer_id, answer.epoch, token=answer.token)

    async def start(self) -> None:
        """Start background route refreshes. No request is sent until the first send."""
        if self._router.closed:
            raise ClosedError("producer is closed")
        self.routes.start()
        self._router.started = True

    async def close(self) -> None:
        """Close connections; sends still in flight fail."""
        if self._router.closed:
            return
        self._router.closed = True
        if self._tracer is not None:
            await self._tracer.close()
        await self.routes.close()
        self._pool.close()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # sending ----------------------------------------------------------------------------------
    async def send(
        self,
        topic: str,
        body: bytes,
        keys: str = "",
        tags: str = "",
        properties: Mapping[str, str] | None = None,
        *,
        deliver_at: DeliverAt | None = None,
        delay: Delay | None = None,
        message_group: str | None = None,
    ) -> SendResult:
        """Send one message; returns where it was stored.

        ``message_group`` (a string such as an order id, at most 128 UTF-8 bytes) makes it a FIFO
        message: it goes to the queue the group hashes to (CRC-32 of the group over the topic's
        queues sorted by broker name and queue id), carrying the group in the ``__SHARDINGKEY``
        property. The messages of a group sent by this producer are stored in the order of
        their ``send()`` calls: requests of one queue's groups leave one at a time, so a message
        retried through a failover is stored before any later one of its group (a later one
        waits, also past a failure of the earlier: it then goes on). It cannot be scheduled.

        ``deliver_at`` (epoch ms or a datetime) or ``delay`` (seconds or a timedelta) makes it a
        scheduled message: acknowledged now like any send, delivered to ``topic`` at that time
        (a time in the past: at once). The result's ``msg_id`` recalls it until then
        (:meth:`recall`); its ``queue_offset`` is -1. The broker refuses a negative delay or a
        time beyond its maximum (40 days by default) with a :class:`BrokerError`
        (MESSAGE_ILLEGAL).

        With ``auto_batch``, a send made while another send of the topic to the same broker
        group is in flight may travel in one SEND_BATCH_MESSAGE with others; its result is
        still its own (id, queue, offset), and so is its error. A batch the broker refuses for
        good (a message too large, a reserved property, ...) is sent again message by message,
        so only the culprit fails; a batch that fails in a retriable way is retried as a batch,
        each message until its own deadline.

        Raises :class:`TopicNotFoundError` (never retried), :class:`BrokerError` for another
        definitive refusal, :class:`SendError` when every attempt failed.
        """
        if self.idempotent and self._router.sequencer is None:
            self._router.check_open()
            await self._identify()
        if len(body) > self.max_message_bytes:
            raise ClientError(
                f"message body of {len(body)} bytes exceeds max_message_bytes "
                f"{self.max_message_bytes}"
            )
        if message_group is not None:
            bad = message_group_error(message_group)
            if bad is not None:
                raise ClientError(bad)
            if deliver_at is not None or delay is not None:
                raise ClientError("a message with a message group cannot be scheduled")
            properties = {**(properties or {}), PROP_MESSAGE_GROUP: message_group}
        born = time.time_ns() // 1_000_000
        timer_props, at = delivery_properties(deliver_at, delay, born)
        if timer_props:
            properties = {**(properties or {}), **timer_props}
        if properties and at is None:  # scheduled through properties given directly?
            at = asked_delivery_time(properties, born)
        # Each attempt sends it to the queue the router picks (SendRequest.to_queue).
        request = SendRequest(
            topic=topic,
            body=body,
            queue_id=0,
            keys=keys or "",
            tags=tags or "",
            properties=encode_properties(properties).decode() if properties else "",
            born_timestamp=born,
        )
        result = await self._send_request(topic, request, properties, at, message_group)
        if self._tracer is not None:
            self._tracer.sent_result(topic, request, result, born)
        return result

    async def _send_request(
        self,
        topic: str,
        request: SendRequest,
        properties: Mapping[str, str] | None,
        at: int | None,
        message_group: str | None,
    ) -> SendResult:
        if message_group is not None:
            if at is not None:
                raise ClientError("a message with a message group cannot be scheduled")
            return await self._fifo.send(topic, request, properties or {}, message_group)
        if self.auto_batch:
            return await self._batcher.send(topic, request, properties, at)
        resp, mq = await self._router.send(topic, request.code, request)
        return single_result(resp, mq, at)

    async def send_batch(self, topic: str, messages: Sequence[OutgoingMessage]) -> list[SendResult]:
        """Send messages as one SEND_BATCH_MESSAGE to one queue (one CommitLog append).

        They get consecutive offsets in that queue; results are in the order given. An item
        with ``deliver_at`` or ``delay`` (:class:`client.message.Message`) is a scheduled
        message, as with :meth:`send`: it is delivered to the same queue at its time and its
        result has ``queue_offset`` -1 (the others keep consecutive offsets).

        When an item has a ``message_group``, every item is sent as by :meth:`send` (with its
        own group, or none), in the order given: each group's items go to the group's queue in
        order, possibly in several requests (no longer one append).
        """
        if not messages:
            return []
        if self.idempotent and self._router.sequencer is None:
            self._router.check_open()
            await self._identify()
        if any(getattr(m, "message_group", None) is not None for m in messages):
            sends = [
                asyncio.ensure_future(
                    self.send(
                        topic,
                        m.body,
                        m.keys,
                        m.tags,
                        m.properties,
                        deliver_at=getattr(m, "deliver_at", None),
                        delay=getattr(m, "delay", None),
                        message_group=getattr(m, "message_group", None),
                    )
                )
                for m in messages
            ]
            try:
                return list(await asyncio.gather(*sends))
            finally:
                for task in sends:
                    task.cancel()
        born = time.time_ns() // 1_000_000
        items: list[WireMessage] = []
        times: list[int | None] = []
        for m in messages:
            props = dict(m.properties)
            timer_props, at = delivery_properties(
                getattr(m, "deliver_at", None), getattr(m, "delay", None), born
            )
            props.update(timer_props)
            if at is None:
                at = asked_delivery_time(props, born)
            times.append(at)
            items.append(
                WireMessage(
                    topic=topic,
                    body=m.body,
                    keys=m.keys or "",
                    tags=m.tags or "",
                    properties=props,
                    born_timestamp=born,
                )
            )
        batch = SendBatchRequest(topic=topic, queue_id=0, messages=tuple(items)).pack()
        if len(batch.body) > DEFAULT_MAX_FRAME_BYTES - FRAME_OVERHEAD:
            raise ClientError(f"batch of {len(batch.body)} bytes is too large for one request")
        resp, mq = await self._router.send(topic, batch.code, batch)
        return batch_results(resp, mq, times)

    async def recall(self, topic: str, msg_id: str) -> None:
        """Recall the scheduled message ``msg_id`` (its send result's id) of ``topic`` before
        it is delivered (RocketMQ 5.3's RecallMessage). The request goes to the master of the
        broker group that stored it, retried like a send through a failover.

        Raises :class:`BrokerError`: MESSAGE_ILLEGAL (not a scheduled message of ``topic``),
        QUERY_NOT_FOUND (already delivered or recalled, or unknown), BAD_REQUEST (malformed
        id); :class:`ClientError` when no group of the topic's route stored it;
        :class:`SendError` when every attempt failed.
        """
        await self._recaller.recall(topic, msg_id)
