"""The producer: sends to the masters of a topic's route, round-robin over its queues.

Sends share one pipelined connection per broker (requests matched by opaque), so many
``send()`` calls may be in flight at once without a task or connection each. A send that fails
in a way another queue may not (connection lost, timeout, busy, flush timeouts, not master, no
master in the route, ...) refreshes the route and goes to another queue, preferring another
broker group; success is reported only when a broker answered SUCCESS.

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
``batch_max_count`` / ``batch_max_bytes`` fill (``client/accumulator.py`` decides, the driver
here sends). Each send keeps its own result, error and deadline.

FIFO message groups (``message_group=``): a send goes to the queue its group hashes to
(``protocol/fifo.py``) through that queue's ordered lane (``client/lane.py``: one request in
flight, sends in call order), and its retries go only to the group's queue (docs/fifo.md).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Mapping, Sequence
from typing import Any

import msgpack

from client.accumulator import Accumulator
from client.bootstrap import Bootstrap
from client.errors import (
    BrokerError,
    ClientError,
    ClosedError,
    NoRouteError,
    SendError,
    TopicNotFoundError,
    UnreachableError,
)
from client.lane import OrderedLane
from client.message import (
    Delay,
    DeliverAt,
    OutgoingMessage,
    SendResult,
    asked_delivery_time,
    delivery_properties,
)
from client.routes import MessageQueue, RouteCache, TopicRoute, fetch_cluster_info
from protocol.codes import RequestCode, ResponseCode
from protocol.fifo import PROP_MESSAGE_GROUP, group_queue, message_group_error
from protocol.message import RecordError, encode_properties, parse_msg_id
from protocol.remoting import DEFAULT_MAX_FRAME_BYTES, Frame, Scalar
from protocol.request_auth import Credentials
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

#: Answers to a route lookup that say "not now" (no master elected yet, no controller leader).
RETRIABLE_ROUTE_CODES = RETRIABLE_CODES | {
    ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE,
    ResponseCode.CONTROLLER_NOT_LEADER,
}

_CONNECTION_ERRORS = (ConnectError, ConnectionClosedError, RequestTimeoutError)
#: An attempt unanswered this long (seconds) has the route watched while it waits, every
#: ROUTE_WATCH_INTERVAL; a new master there ends the wait (``Producer._route_watch``).
ROUTE_WATCH_AFTER = 0.25
ROUTE_WATCH_INTERVAL = 0.1
# Room left in a frame for its header and msgpack framing.
_FRAME_OVERHEAD = 64 * 1024
# What a gathered message adds to a batch body besides its body, keys, tags and properties.
_ITEM_OVERHEAD = 48

# Requests that were not full when they left, in flight at once per (topic, broker group): the
# second lets a batch fill while the first is answered (1 and 4 measured slower, bench/).
_BATCHES_IN_FLIGHT = 2

_Key = tuple[str, str]  # (topic, broker group) of an accumulator
_LaneKey = tuple[str, str, int]  # (topic, broker group, queue id) of an ordered lane


class _Gathered:
    """One ``send()`` on the auto-batching path: what goes on the wire alone or in a batch."""

    __slots__ = ("at", "body", "deadline", "fut", "group", "header", "properties", "queue")

    def __init__(
        self,
        header: dict[str, Scalar],
        body: bytes,
        properties: Mapping[str, str] | None,
        at: int | None,
        deadline: float,
        queue: _Queue | None,
        group: str | None = None,
    ) -> None:
        self.header = header
        self.body = body
        self.properties = properties
        self.at = at
        self.deadline = deadline
        # The queue chosen when it was sent (None: no route yet): its first attempt goes there
        # if it leaves alone.
        self.queue = queue
        #: its FIFO message group: it goes to the group's queue, through the queue's lane
        self.group = group
        self.fut: asyncio.Future[SendResult] | None = None

    def batch_item(self) -> dict[str, Any]:
        h = self.header
        item: dict[str, Any] = {"body": self.body, "bornTimestamp": h["bornTimestamp"]}
        if "keys" in h:
            item["keys"] = h["keys"]
        if "tags" in h:
            item["tags"] = h["tags"]
        if self.properties:
            item["properties"] = dict(self.properties)
        return item

    def settle(self, result: SendResult | None, error: BaseException | None = None) -> None:
        fut = self.fut
        if fut is None or fut.done():  # its sender gave up (cancelled) meanwhile
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)  # type: ignore[arg-type]


_Queue = tuple[MessageQueue, str]  # a queue chosen for a send, and its master's address


class Producer:
    """Sends messages to a topic's broker groups.

    ``bootstrap`` is the controller addresses, or a lone broker's, ``;``-separated.
    Use as ``async with Producer(...) as p:`` or call :meth:`start` and :meth:`close`.

    - ``send_deadline``: seconds one send may take in all, every attempt, route lookup and
      back-off included; retriable failures are retried (on another queue, preferably another
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
    ) -> None:
        if retries is not None and retries < 0:
            raise ValueError("retries must be >= 0 (or None)")
        if batch_max_count < 1 or linger_ms < 0:
            raise ValueError("batch_max_count must be >= 1 and linger_ms >= 0")
        if not 1 <= batch_max_bytes <= DEFAULT_MAX_FRAME_BYTES - _FRAME_OVERHEAD:
            raise ValueError(
                f"batch_max_bytes must be 1..{DEFAULT_MAX_FRAME_BYTES - _FRAME_OVERHEAD}"
            )
        if send_deadline <= 0 or send_timeout <= 0:
            raise ValueError("send_deadline and send_timeout must be > 0")
        self.retries = retries
        self.retry_backoff = retry_backoff
        self.send_deadline = send_deadline
        self.send_timeout = send_timeout
        self.connect_timeout = connect_timeout
        self.max_message_bytes = max_message_bytes
        self._pool = ConnectionPool(connect_timeout, credentials, tls)
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
        self.auto_batch = auto_batch
        self.batch_max_count = batch_max_count
        self.batch_max_bytes = batch_max_bytes
        self.linger_ms = linger_ms
        self._accumulators: dict[_Key, Accumulator[_Gathered]] = {}
        self._batch_tasks: set[asyncio.Task[None]] = set()
        self._batch_rr: dict[_Key, int] = {}
        self._lanes: dict[_LaneKey, OrderedLane[_Gathered]] = {}
        # Message-group sends of a topic waiting for its first route, in call order.
        self._route_waits: dict[str, tuple[asyncio.Lock, list[int]]] = {}
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
        header: dict[str, Scalar] = {"topic": topic, "queueId": 0, "bornTimestamp": born}
        if keys:
            header["keys"] = keys
        if tags:
            header["tags"] = tags
        timer_props, at = delivery_properties(deliver_at, delay, born)
        if timer_props:
            properties = {**(properties or {}), **timer_props}
        if properties:
            header["properties"] = encode_properties(properties).decode()
            if at is None:  # scheduled through properties given directly?
                at = asked_delivery_time(properties, born)
        if message_group is not None:
            if at is not None:
                raise ClientError("a message with a message group cannot be scheduled")
            return await self._send_grouped(topic, header, body, properties or {}, message_group)
        if self.auto_batch:
            first, key, acc = self._accumulator_for(topic)
            if acc.try_alone():  # the idle case: exactly what a send without auto-batching does
                try:
                    resp, mq = await self._send(
                        topic, RequestCode.SEND_MESSAGE, header, body, None, first
                    )
                finally:
                    if acc.done(1):  # sends were gathered meanwhile
                        asyncio.get_running_loop().call_soon(self._drain, key, acc)
                return _single_result(resp, mq, at)
            return await self._gather(topic, header, body, properties, at, first, key, acc)
        resp, mq = await self._send(topic, RequestCode.SEND_MESSAGE, header, body)
        return _single_result(resp, mq, at)

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
        items: list[dict[str, Any]] = []
        times: list[int | None] = []
        for m in messages:
            item: dict[str, Any] = {"body": m.body, "bornTimestamp": born}
            if m.keys:
                item["keys"] = m.keys
            if m.tags:
                item["tags"] = m.tags
            props = dict(m.properties)
            timer_props, at = delivery_properties(
                getattr(m, "deliver_at", None), getattr(m, "delay", None), born
            )
            props.update(timer_props)
            if at is None:
                at = asked_delivery_time(props, born)
            times.append(at)
            if props:
                item["properties"] = props
            items.append(item)
        body: bytes = msgpack.packb(items, use_bin_type=True)
        if len(body) > DEFAULT_MAX_FRAME_BYTES - _FRAME_OVERHEAD:
            raise ClientError(f"batch of {len(body)} bytes is too large for one request")
        header: dict[str, Scalar] = {"topic": topic, "queueId": 0}
        resp, mq = await self._send(topic, RequestCode.SEND_BATCH_MESSAGE, header, body)
        return _batch_results(resp, mq, times)

    async def recall(self, topic: str, msg_id: str) -> None:
        """Recall the scheduled message ``msg_id`` (its send result's id) of ``topic`` before
        it is delivered (RocketMQ 5.3's RecallMessage). The request goes to the master of the
        broker group that stored it, retried like a send through a failover.

        Raises :class:`BrokerError`: MESSAGE_ILLEGAL (not a scheduled message of ``topic``),
        QUERY_NOT_FOUND (already delivered or recalled, or unknown), BAD_REQUEST (malformed
        id); :class:`ClientError` when no group of the topic's route stored it;
        :class:`SendError` when every attempt failed.
        """
        if self._closed or not self._started:
            raise ClosedError("producer is closed" if self._closed else "producer is not started")
        try:
            store_host, _offset = parse_msg_id(msg_id)
        except RecordError:
            raise ClientError(
                f"not a message id: {msg_id!r} (32 hex digits: store host and offset)"
            ) from None
        deadline = time.monotonic() + self.send_deadline
        header: dict[str, Scalar] = {"topic": topic, "msgId": msg_id}
        last: Exception | None = None
        fresh = False
        while time.monotonic() < deadline:
            try:
                route = await self._route(topic, deadline, fresh=fresh, first=not fresh)
            except NoRouteError as exc:
                last = exc
            else:
                group = await self._group_of(route, store_host)
                address = route.master_address(group)
                if address is None:
                    last = NoRouteError(f"broker group {group} has no master")
                else:
                    try:
                        conn = self._conns.get(address)
                        if conn is None or conn.is_closed:
                            conn = await self._connect(address, deadline)
                        timeout = max(min(self.send_timeout, deadline - time.monotonic()), 0.001)
                        resp = await conn.request(RequestCode.RECALL_MESSAGE, header, None, timeout)
                    except _CONNECTION_ERRORS as exc:
                        last = exc
                    else:
                        if resp.code == ResponseCode.SUCCESS:
                            return
                        remark = resp.header.get("remark")
                        error = BrokerError(
                            resp.code, remark if isinstance(remark, str) else "", address
                        )
                        if resp.code not in RETRIABLE_CODES:
                            raise error
                        last = error
            fresh = True
            await asyncio.sleep(min(self.retry_backoff * 4, max(deadline - time.monotonic(), 0)))
        raise SendError(f"recall of {msg_id} failed until the deadline: {last}")

    async def _group_of(self, route: TopicRoute, store_host: str) -> str:
        """The broker group of ``route`` whose broker stored a message (its id's store host)."""
        for b in route.brokers:
            if store_host == b.master_address or store_host in b.slaves:
                return b.broker_name
        names = {b.broker_name for b in route.brokers}
        try:
            clusters = await fetch_cluster_info(self._bootstrap)
        except ClientError:
            clusters = {}
        for brokers in clusters.values():
            for cb in brokers:
                if cb.address == store_host and cb.broker_name in names:
                    return cb.broker_name
        if len(names) == 1:  # one group: a failover moved its master to another address
            return next(iter(names))
        raise ClientError(
            f"no broker group of topic {route.topic} has the broker {store_host} that stored "
            "this message"
        )

    # message groups ---------------------------------------------------------------------------
    async def _send_grouped(
        self,
        topic: str,
        header: dict[str, Scalar],
        body: bytes,
        properties: Mapping[str, str],
        group: str,
    ) -> SendResult:
        """A send of a message group: into the lane of the group's queue (see
        client/lane.py), alone at once when the lane is idle."""
        if self._closed or not self._started:
            raise ClosedError("producer is closed" if self._closed else "producer is not started")
        deadline = time.monotonic() + self.send_deadline
        item = _Gathered(header, body, properties, None, deadline, None, group)
        route = self.routes.peek(topic)
        wait = self._route_waits.get(topic)
        if route is None or wait is not None:
            # No route yet (or earlier sends still wait for it): wait in call order, so that
            # the sends of a group enter their lane in the order they were made.
            if wait is None:
                wait = self._route_waits[topic] = (asyncio.Lock(), [0])
            lock, waiting = wait
            waiting[0] += 1
            try:
                async with lock:
                    route = self.routes.peek(topic) or await self._route(
                        topic, deadline, fresh=False, first=True
                    )
                    return await self._enter_lane(topic, route, item)
            finally:
                waiting[0] -= 1
                if waiting[0] == 0 and self._route_waits.get(topic) is wait:
                    del self._route_waits[topic]
        return await self._enter_lane(topic, route, item)

    def _lane_of(self, topic: str, route: TopicRoute, group: str) -> _LaneKey:
        # A static topic's message groups hash over its logical queues (each on its newest
        # item), so a group keeps its logical queue when that queue moves to another group.
        queues = route.logical_queues or route.queues  # else sorted, masters or not
        if not queues:
            raise NoRouteError(f"topic {topic!r} has no queue")
        mq = group_queue(group, queues)
        return (topic, mq.broker_name, mq.queue_id)

    async def _enter_lane(self, topic: str, route: TopicRoute, item: _Gathered) -> SendResult:
        """Add ``item`` to its lane without a pause (its place in the order is taken at once);
        then wait for its own result."""
        assert item.group is not None
        key = self._lane_of(topic, route, item.group)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = OrderedLane(
                self.batch_max_count if self.auto_batch else 1, self.batch_max_bytes
            )
        if lane.add(item, _item_size(item)):
            try:
                return await self._send_alone(topic, item, None)
            finally:
                self._lane_done(key, lane)
        item.fut = asyncio.get_running_loop().create_future()
        return await item.fut

    def _lane_done(self, key: _LaneKey, lane: OrderedLane[_Gathered]) -> None:
        """A request of ``lane`` ended: send the next on the next loop turn, after the senders
        its answer woke have added their next messages (the lane counts as in flight until
        then, so they gather)."""
        asyncio.get_running_loop().call_soon(self._lane_next, key, lane)

    def _lane_next(self, key: _LaneKey, lane: OrderedLane[_Gathered]) -> None:
        batch = lane.done()
        if batch:
            task = asyncio.get_running_loop().create_task(self._send_lane(key, lane, batch))
            self._batch_tasks.add(task)
            task.add_done_callback(self._batch_tasks.discard)
        elif self._lanes.get(key) is lane:
            del self._lanes[key]

    async def _send_lane(
        self, key: _LaneKey, lane: OrderedLane[_Gathered], batch: list[_Gathered]
    ) -> None:
        try:
            await self._deliver(key[0], batch, None)
        finally:
            self._lane_done(key, lane)

    # auto-batching ----------------------------------------------------------------------------
    def _accumulator_for(self, topic: str) -> tuple[_Queue | None, _Key, Accumulator[_Gathered]]:
        """The queue a new send of ``topic`` would go to alone (None: no route yet, or no
        master now: the send's own retries wait for one), and the accumulator of its broker
        group: sends gather per (topic, broker group); a batch takes the group's next queue
        when it leaves."""
        first: _Queue | None = None
        route = self.routes.peek(topic)
        if route is not None:
            try:
                first = self._select(route, self._isolated() if self._faulty else None)
            except NoRouteError:
                pass
        key = (topic, first[0].broker_name if first is not None else "")
        acc = self._accumulators.get(key)
        if acc is None:
            acc = self._accumulators[key] = Accumulator(
                self.batch_max_count,
                self.batch_max_bytes,
                max_in_flight=_BATCHES_IN_FLIGHT,
                linger=self.linger_ms > 0,
            )
        return first, key, acc

    async def _gather(
        self,
        topic: str,
        header: dict[str, Scalar],
        body: bytes,
        properties: Mapping[str, str] | None,
        at: int | None,
        first: _Queue | None,
        key: _Key,
        acc: Accumulator[_Gathered],
    ) -> SendResult:
        """A send that may not leave alone now: gathered with the others (see
        client/accumulator.py); its future settles with its own result or error."""
        if self._closed or not self._started:
            raise ClosedError("producer is closed" if self._closed else "producer is not started")
        item = _Gathered(header, body, properties, at, time.monotonic() + self.send_deadline, first)
        size = _item_size(item)
        batches = acc.add(item, size)
        if batches and batches[-1][0] is item and len(batches[-1]) == 1:
            batches.pop()  # too big to share: this task sends it alone
            for batch in batches:
                self._spawn(key, acc, batch)
            try:
                return await self._send_alone(topic, item, first)
            finally:
                self._request_done(key, acc, 1)
        item.fut = asyncio.get_running_loop().create_future()
        for batch in batches:
            self._spawn(key, acc, batch)
        if not batches and acc.needs_linger:
            acc.hold()
            asyncio.get_running_loop().call_later(self.linger_ms / 1000, self._drain, key, acc)
        return await item.fut

    def _spawn(self, key: _Key, acc: Accumulator[_Gathered], batch: list[_Gathered]) -> None:
        task = asyncio.get_running_loop().create_task(self._send_gathered(key, acc, batch))
        self._batch_tasks.add(task)
        task.add_done_callback(self._batch_tasks.discard)

    def _request_done(self, key: _Key, acc: Accumulator[_Gathered], woken: int) -> None:
        """A request of ``acc`` for ``woken`` messages ended: drain it on the next loop turn if
        due, after the senders this answer woke have added their next messages."""
        if acc.done(woken):
            asyncio.get_running_loop().call_soon(self._drain, key, acc)

    def _drain(self, key: _Key, acc: Accumulator[_Gathered]) -> None:
        for batch in acc.drain():
            self._spawn(key, acc, batch)

    async def _send_gathered(
        self,
        key: _Key,
        acc: Accumulator[_Gathered],
        batch: list[_Gathered],
    ) -> None:
        """Send gathered messages as one request (to the group's next queue), retried as a batch
        (on any queue) until each one's deadline; settle each message's future with its own
        result or error."""
        try:
            items = [it for it in batch if it.fut is None or not it.fut.done()]
            await self._deliver(key[0], batch, self._batch_queue(key, items))
        finally:
            self._request_done(key, acc, len(batch))

    async def _deliver(self, topic: str, batch: list[_Gathered], first: _Queue | None) -> None:
        """Send ``batch`` as one request, retried as a batch until each one's deadline (a
        message-group batch only to its group's queue); settle each message's future with its
        own result or error. A batch refused for good is sent again message by message (one
        after the other for message groups, to keep their order)."""
        try:
            items = [it for it in batch if it.fut is None or not it.fut.done()]
            while items:
                try:
                    if len(items) == 1:
                        results = [await self._send_alone(topic, items[0], first)]
                    else:
                        results = await self._send_batch_of(topic, items, first)
                except SendError as exc:  # every attempt failed until the oldest's deadline
                    now = time.monotonic()
                    if self.retries is not None or self._closed:
                        expired, items = items, []
                    else:
                        expired = [it for it in items if it.deadline <= now]
                        items = [it for it in items if it.deadline > now]
                    for it in expired:
                        it.settle(None, exc)
                    first = None
                except (TopicNotFoundError, ClosedError) as exc:
                    for it in items:
                        it.settle(None, exc)
                    return
                except BrokerError:  # refused for good: find out which, message by message
                    if len(items) == 1:
                        raise
                    if items[0].group is not None:
                        for it in items:
                            await self._settle_alone(topic, it)
                    else:
                        await asyncio.gather(*(self._settle_alone(topic, it) for it in items))
                    return
                else:
                    for it, result in zip(items, results, strict=True):
                        it.settle(result)
                    return
        except BaseException as exc:  # a malformed answer, or this task cancelled
            for it in batch:
                if isinstance(exc, Exception):
                    it.settle(None, exc)
                else:
                    it.settle(None, ClosedError("the producer stopped sending this batch"))
            if not isinstance(exc, Exception):
                raise

    def _batch_queue(self, key: _Key, items: list[_Gathered]) -> _Queue | None:
        """The queue of a request's first attempt: a lone message's own; a batch takes the
        next writable queue of its broker group, round-robin per (topic, group), so that
        batches spread over the group's queues whatever the messages' own picks were."""
        if len(items) != 1:
            route = self.routes.peek(key[0])
            if route is not None:
                group = [w for w in route.writable if w[0].broker_name == key[1]]
                if group:
                    i = self._batch_rr.get(key, 0)
                    self._batch_rr[key] = i + 1
                    return group[i % len(group)]
        return items[0].queue if items else None

    async def _settle_alone(self, topic: str, item: _Gathered) -> None:
        try:
            item.settle(await self._send_alone(topic, item, None))
        except Exception as exc:
            item.settle(None, exc)

    async def _send_alone(self, topic: str, item: _Gathered, first: _Queue | None) -> SendResult:
        resp, mq = await self._send(
            topic,
            RequestCode.SEND_MESSAGE,
            item.header,
            item.body,
            item.deadline,
            first,
            group=item.group,
        )
        return _single_result(resp, mq, item.at)

    async def _send_batch_of(
        self, topic: str, items: list[_Gathered], first: _Queue | None
    ) -> list[SendResult]:
        body: bytes = msgpack.packb([it.batch_item() for it in items], use_bin_type=True)
        header: dict[str, Scalar] = {"topic": topic, "queueId": 0}
        deadline = min(it.deadline for it in items)
        resp, mq = await self._send(
            topic,
            RequestCode.SEND_BATCH_MESSAGE,
            header,
            body,
            deadline,
            first,
            group=items[0].group,
        )
        return _batch_results(resp, mq, [it.at for it in items])

    # internals --------------------------------------------------------------------------------
    def _isolated(self) -> set[str] | None:
        now = time.monotonic()
        for name in [n for n, until in self._faulty.items() if until <= now]:
            del self._faulty[name]
        return set(self._faulty) or None

    def _group_target(self, route: TopicRoute, group: str) -> _Queue:
        """The queue of message group ``group`` in ``route`` and its master's address; a
        :class:`NoRouteError` while that queue's broker group has no master (the send waits
        for one: the group's messages never go elsewhere)."""
        _topic, broker, queue_id = self._lane_of(route.topic, route, group)
        address = route.master_address(broker)
        if address is None:
            raise NoRouteError(f"broker group {broker} of message group {group!r} has no master")
        return MessageQueue(broker, queue_id), address

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

    async def _route(
        self, topic: str, deadline: float, *, fresh: bool, first: bool = False
    ) -> TopicRoute:
        """The topic's route (fetched again when ``fresh``), waiting at most until ``deadline``.

        Raises :class:`TopicNotFoundError` and definitive :class:`BrokerError` answers as they
        are, and so :class:`UnreachableError` on a send's ``first`` lookup (no bootstrap address
        answers at all: a wrong address or a cluster down, reported at once); every "not now"
        (no leader, no master, a timeout, unreachable later on) as a :class:`NoRouteError` the
        caller retries.
        """
        remaining = max(deadline - time.monotonic(), 0.001)
        lookup = self.routes.refresh(topic) if fresh else self.routes.get(topic)
        try:
            return await asyncio.wait_for(lookup, remaining)
        except TimeoutError:
            where = ";".join(self._bootstrap.addresses)
            raise NoRouteError(f"route lookup for topic {topic!r} at {where} timed out") from None
        except TopicNotFoundError:
            raise
        except UnreachableError as exc:
            if first:
                raise
            raise NoRouteError(f"no route for topic {topic!r}: {exc}") from exc
        except ClientError as exc:  # not now, or a definitive refusal
            if isinstance(exc, BrokerError) and exc.code not in RETRIABLE_ROUTE_CODES:
                raise
            raise NoRouteError(f"no route for topic {topic!r}: {exc}") from exc

    async def _connect(self, address: str, deadline: float) -> RemotingClient:
        remaining = max(deadline - time.monotonic(), 0.001)
        try:
            conn = await asyncio.wait_for(self._pool.get(address), remaining)
        except TimeoutError:
            raise ConnectError(f"cannot connect to {address} before the send deadline") from None
        self._conns[address] = conn
        return conn

    async def _send(
        self,
        topic: str,
        code: int,
        header: dict[str, Scalar],
        body: bytes,
        deadline: float | None = None,
        first: _Queue | None = None,
        *,
        group: str | None = None,
    ) -> tuple[Frame, MessageQueue]:
        """Send one request, retried until ``deadline`` (default: ``send_deadline`` from now);
        ``first``: the queue of the first attempt, chosen by the caller. With a message
        ``group``, every attempt goes to the group's queue in the route of the moment."""
        if self._closed or not self._started:
            raise ClosedError("producer is closed" if self._closed else "producer is not started")
        start = time.monotonic()
        if deadline is None:
            deadline = start + self.send_deadline
        route = self.routes.peek(topic)
        avoid = self._isolated() if self._faulty else None
        last: Exception | None = None
        max_attempts = None if self.retries is None else self.retries + 1
        attempt = 0
        while True:
            attempt += 1
            try:
                if first is not None:
                    mq, address = first
                    first = None
                else:
                    if route is None:
                        route = await self._route(topic, deadline, fresh=False, first=attempt == 1)
                    if group is None:
                        mq, address = self._select(route, avoid)
                    else:
                        mq, address = self._group_target(route, group)
            except NoRouteError as exc:  # a route with no master, or no route yet
                last = exc
            else:
                header["queueId"] = mq.queue_id
                try:
                    conn = self._conns.get(address)
                    if conn is None or conn.is_closed:
                        conn = await self._connect(address, deadline)
                    timeout = max(min(self.send_timeout, deadline - time.monotonic()), 0.001)
                    watch: list[asyncio.Task[None]] = []
                    timer = asyncio.get_running_loop().call_later(
                        ROUTE_WATCH_AFTER, self._watch_route, watch, conn, topic, mq.broker_name
                    )
                    try:
                        resp = await conn.request(code, header, body, timeout)
                    finally:
                        timer.cancel()
                        if watch:
                            watch[0].cancel()
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
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (max_attempts is not None and attempt >= max_attempts):
                break
            if route is None or not route.writable or group is not None:
                stuck = True  # nowhere (else) to send: give the controllers time to elect
            else:  # every group of the route failed this send
                stuck = avoid is not None and {b.broker_name for b in route.brokers} <= avoid
            if self.retry_backoff > 0 and stuck:
                await asyncio.sleep(min(self.retry_backoff * 2 ** (attempt - 1), 1.0, remaining))
            if route is not None:  # else the next attempt looks it up
                try:
                    route = await self._route(topic, deadline, fresh=True)
                except NoRouteError:
                    pass  # keep the old route; ``last`` says why the last attempt failed
        elapsed = time.monotonic() - start
        raise SendError(
            f"send to topic {topic!r} failed after {attempt} attempt(s) in {elapsed:.1f}s: {last}"
        ) from last

    def _watch_route(
        self, watch: list[asyncio.Task[None]], conn: RemotingClient, topic: str, broker_name: str
    ) -> None:
        """An attempt has waited :data:`ROUTE_WATCH_AFTER` for its answer: watch the route
        until it ends (``watch`` holds the task, for the attempt to cancel)."""
        watch.append(asyncio.ensure_future(self._route_watch(conn, topic, broker_name)))

    async def _route_watch(self, conn: RemotingClient, topic: str, broker_name: str) -> None:
        """While an attempt waits on ``conn`` (a master frozen, cut off, or only slow), look the
        route up every :data:`ROUTE_WATCH_INTERVAL`; once it names another master for the
        group (the controllers replaced this one), close the connection to the old master.
        That fails the attempt, and every other one waiting on that master, at once
        (ConnectionClosedError, retried), so they go to the new master instead of waiting out
        ``send_timeout``: a failover costs the brokers' timeout plus about one interval."""
        while not conn.is_closed:
            await asyncio.sleep(ROUTE_WATCH_INTERVAL)
            try:
                route = await asyncio.wait_for(self.routes.refresh(topic), 1.0)
            except (ClientError, TimeoutError):
                continue  # the controllers did not answer: the broker's answer may still come
            master = route.master_address(broker_name)
            if master is not None and master != conn.address:
                conn.close()
                return


def _item_size(item: _Gathered) -> int:
    """What a gathered message adds to a batch request."""
    size = len(item.body) + _ITEM_OVERHEAD
    header = item.header
    if "keys" in header or "tags" in header or item.properties:
        size += len(str(header.get("keys", ""))) + len(str(header.get("tags", "")))
        size += sum(len(k) + len(v) for k, v in (item.properties or {}).items())
    return size


def _single_result(resp: Frame, mq: MessageQueue, at: int | None) -> SendResult:
    """The result of a SUCCESS answer to SEND_MESSAGE."""
    h = resp.header
    try:
        return SendResult(
            str(h["msgId"]), mq.broker_name, int(h["queueId"] or 0), int(h["queueOffset"] or 0), at
        )
    except (KeyError, TypeError, ValueError):
        raise ClientError(f"malformed send response from {mq.broker_name}: {h}") from None


def _batch_results(resp: Frame, mq: MessageQueue, times: Sequence[int | None]) -> list[SendResult]:
    """The results of a SUCCESS answer to SEND_BATCH_MESSAGE, in the order sent: the broker
    answers one message id per message (body) and the queue offset of the first message that
    is not scheduled (header); the others that are not follow it one by one, and scheduled
    ones (``times`` not None) have -1."""
    h = resp.header
    try:
        ids = msgpack.unpackb(resp.body or b"", raw=False)
        queue_id = int(h["queueId"] or 0)
        offset = int(h["queueOffset"] or 0)
        if not isinstance(ids, list) or len(ids) != len(times):
            raise ValueError("message id count does not match the batch")
        results: list[SendResult] = []
        for msg_id, at in zip(ids, times, strict=True):
            if at is None:
                results.append(SendResult(str(msg_id), mq.broker_name, queue_id, offset))
                offset += 1
            else:
                results.append(SendResult(str(msg_id), mq.broker_name, queue_id, -1, at))
        return results
    except (KeyError, TypeError, ValueError, msgpack.UnpackException) as exc:
        raise ClientError(f"malformed batch response from {mq.broker_name}: {exc}") from None
