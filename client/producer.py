"""The producer: sends to the masters of a topic's route, round-robin over its queues.

Sends share one pipelined connection per broker (requests matched by opaque), so many
``send()`` calls may be in flight at once without a task or connection each. A send that fails
in a way another queue may not (connection lost, timeout, busy, flush timeouts, not master, ...)
refreshes the route and goes to another queue, preferring another broker group; success is
reported only when a broker answered SUCCESS.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import msgpack

from client.bootstrap import Bootstrap
from client.errors import (
    BrokerError,
    ClientError,
    ClosedError,
    NoRouteError,
    SendError,
    TopicNotFoundError,
)
from client.message import OutgoingMessage, SendResult
from client.routes import MessageQueue, RouteCache, TopicRoute
from protocol.codes import RequestCode, ResponseCode
from protocol.message import encode_properties
from protocol.remoting import DEFAULT_MAX_FRAME_BYTES, Frame, Scalar
from remoting.client import ConnectionPool, RemotingClient
from remoting.errors import ConnectError, ConnectionClosedError, RequestTimeoutError

#: Answers after which the same message may succeed on another queue or broker.
RETRIABLE_CODES = frozenset(
    {
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.FLUSH_DISK_TIMEOUT,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.DISK_FULL,
        ResponseCode.NOT_MASTER,
        ResponseCode.MASTER_FENCED,
        ResponseCode.TOO_MANY_IN_FLIGHT,
        ResponseCode.QUEUE_NOT_EXIST,
        ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH,
    }
)

_CONNECTION_ERRORS = (ConnectError, ConnectionClosedError, RequestTimeoutError)
# Room left in a frame for its header and msgpack framing.
_FRAME_OVERHEAD = 64 * 1024


class Producer:
    """Sends messages to a topic's broker groups.

    ``bootstrap`` is the controller addresses, or a lone broker's, ``;``-separated.
    Use as ``async with Producer(...) as p:`` or call :meth:`start` and :meth:`close`.

    - ``retries``: further attempts after a retriable failure (on another queue, preferably
      another broker group); ``send_timeout`` bounds each attempt.
    - ``retry_backoff``: seconds before a retry when every broker group of the route failed
      (doubling per attempt, at most 1 s), so a group in failover gets time to elect and
      promote its new master instead of burning every retry in a millisecond.
    - ``fault_isolation``: seconds a broker group that failed a send is skipped by new sends
      while another group can take them (0 turns it off).
    - ``max_message_bytes``: larger bodies are refused before anything is sent.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        retries: int = 2,
        send_timeout: float = 3.0,
        connect_timeout: float = 3.0,
        route_refresh_interval: float = 30.0,
        max_message_bytes: int = 4 * 1024 * 1024,
        fault_isolation: float = 1.0,
        retry_backoff: float = 0.05,
    ) -> None:
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self.retries = retries
        self.retry_backoff = retry_backoff
        self.send_timeout = send_timeout
        self.max_message_bytes = max_message_bytes
        self._pool = ConnectionPool(connect_timeout)
        # The pool's live connections, looked up without a coroutine on the hot path.
        self._conns: dict[str, RemotingClient] = {}
        self._bootstrap = Bootstrap(bootstrap, self._pool, connect_timeout)
        self.routes = RouteCache(self._bootstrap, refresh_interval=route_refresh_interval)
        self._rr = 0
        # Broker groups that failed a send recently -> until when new sends avoid them
        # (RocketMQ's latency fault tolerance, simplified): a dead group costs one failed
        # attempt per isolation period, not one per send.
        self.fault_isolation = fault_isolation
        self._faulty: dict[str, float] = {}
        self._started = False
        self._closed = False

    async def start(self) -> None:
        """Start background route refreshes. No request is sent until the first send."""
        if self._closed:
            raise ClosedError("producer is closed")
        self.routes.start()
        self._started = True

    async def close(self) -> None:
        """Close connections; sends still in flight fail."""
        if self._closed:
            return
        self._closed = True
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
    ) -> SendResult:
        """Send one message; returns where it was stored.

        Raises :class:`TopicNotFoundError` (never retried), :class:`BrokerError` for another
        definitive refusal, :class:`SendError` when every attempt failed.
        """
        if len(body) > self.max_message_bytes:
            raise ClientError(
                f"message body of {len(body)} bytes exceeds max_message_bytes "
                f"{self.max_message_bytes}"
            )
        header: dict[str, Scalar] = {
            "topic": topic,
            "queueId": 0,
            "bornTimestamp": time.time_ns() // 1_000_000,
        }
        if keys:
            header["keys"] = keys
        if tags:
            header["tags"] = tags
        if properties:
            header["properties"] = encode_properties(properties).decode()
        resp, mq = await self._send(topic, RequestCode.SEND_MESSAGE, header, body)
        h = resp.header
        try:
            return SendResult(
                str(h["msgId"]), mq.broker_name, int(h["queueId"] or 0), int(h["queueOffset"] or 0)
            )
        except (KeyError, TypeError, ValueError):
            raise ClientError(f"malformed send response from {mq.broker_name}: {h}") from None

    async def send_batch(self, topic: str, messages: Sequence[OutgoingMessage]) -> list[SendResult]:
        """Send messages as one SEND_BATCH_MESSAGE to one queue (one CommitLog append).

        They get consecutive offsets in that queue; results are in the order given.
        """
        if not messages:
            return []
        born = time.time_ns() // 1_000_000
        items: list[dict[str, Any]] = []
        for m in messages:
            item: dict[str, Any] = {"body": m.body, "bornTimestamp": born}
            if m.keys:
                item["keys"] = m.keys
            if m.tags:
                item["tags"] = m.tags
            if m.properties:
                item["properties"] = dict(m.properties)
            items.append(item)
        body: bytes = msgpack.packb(items, use_bin_type=True)
        if len(body) > DEFAULT_MAX_FRAME_BYTES - _FRAME_OVERHEAD:
            raise ClientError(f"batch of {len(body)} bytes is too large for one request")
        header: dict[str, Scalar] = {"topic": topic, "queueId": 0}
        resp, mq = await self._send(topic, RequestCode.SEND_BATCH_MESSAGE, header, body)
        h = resp.header
        try:
            ids = msgpack.unpackb(resp.body or b"", raw=False)
            queue_id = int(h["queueId"] or 0)
            first = int(h["queueOffset"] or 0)
            if not isinstance(ids, list) or len(ids) != len(messages):
                raise ValueError("message id count does not match the batch")
            return [
                SendResult(str(msg_id), mq.broker_name, queue_id, first + i)
                for i, msg_id in enumerate(ids)
            ]
        except (KeyError, TypeError, ValueError, msgpack.UnpackException) as exc:
            raise ClientError(f"malformed batch response from {mq.broker_name}: {exc}") from None

    # internals --------------------------------------------------------------------------------
    def _isolated(self) -> set[str] | None:
        now = time.monotonic()
        for name in [n for n, until in self._faulty.items() if until <= now]:
            del self._faulty[name]
        return set(self._faulty) or None

    def _select(self, route: TopicRoute, avoid: set[str] | None) -> tuple[MessageQueue, str]:
        """The next writable queue round-robin, skipping broker groups in ``avoid`` if possible."""
        writable = route.writable
        n = len(writable)
        if n == 0:
            raise NoRouteError(f"topic {route.topic!r} has no broker group with a master")
        i = self._rr
        if avoid:
            for k in range(n):
                choice = writable[(i + k) % n]
                if choice[0].broker_name not in avoid:
                    self._rr = i + k + 1
                    return choice
        self._rr = i + 1
        return writable[i % n]

    async def _send(
        self, topic: str, code: int, header: dict[str, Scalar], body: bytes
    ) -> tuple[Frame, MessageQueue]:
        if self._closed or not self._started:
            raise ClosedError("producer is closed" if self._closed else "producer is not started")
        route = self.routes.peek(topic)
        if route is None:
            route = await self.routes.get(topic)
        avoid = self._isolated() if self._faulty else None
        last: Exception | None = None
        attempts = self.retries + 1
        for attempt in range(attempts):
            try:
                mq, address = self._select(route, avoid)
            except NoRouteError as exc:
                last = exc
            else:
                header["queueId"] = mq.queue_id
                try:
                    conn = self._conns.get(address)
                    if conn is None or conn.is_closed:
                        conn = self._conns[address] = await self._pool.get(address)
                    resp = await conn.request(code, header, body, self.send_timeout)
                except _CONNECTION_ERRORS as exc:
                    last = exc
                else:
                    rcode = resp.code
                    if rcode == ResponseCode.SUCCESS:
                        if self._faulty:
                            self._faulty.pop(mq.broker_name, None)
                        return resp, mq
                    remark = resp.header.get("remark")
                    remark = remark if isinstance(remark, str) else ""
                    if rcode == ResponseCode.TOPIC_NOT_EXIST:
                        raise TopicNotFoundError(topic, address)
                    error = BrokerError(rcode, remark, address)
                    if rcode not in RETRIABLE_CODES:
                        raise error
                    last = error
                if avoid is None:
                    avoid = set()
                avoid.add(mq.broker_name)
                if self.fault_isolation > 0:
                    self._faulty[mq.broker_name] = time.monotonic() + self.fault_isolation
            if self._closed:
                raise ClosedError("producer is closed") from last
            if attempt + 1 < attempts:
                groups = {b.broker_name for b in route.brokers}
                if self.retry_backoff > 0 and avoid is not None and groups <= avoid:
                    await asyncio.sleep(min(self.retry_backoff * 2**attempt, 1.0))
                try:
                    route = await self.routes.refresh(topic)
                except TopicNotFoundError:
                    raise
                except ClientError:
                    pass  # keep the old route; the next queue may still work
        raise SendError(
            f"send to topic {topic!r} failed after {attempts} attempt(s): {last}"
        ) from last
