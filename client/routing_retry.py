"""Where a producer's request goes, and its retries until a deadline (:class:`SendRouter`).

A request that fails in a way another queue may not (connection lost, timeout, busy, flush
timeouts, not master, no master in the route, ...) refreshes the route and goes to another
queue, preferring another broker group; success is reported only when a broker answered
SUCCESS. Each attempt waits at most ``send_timeout``; an attempt unanswered for
``ROUTE_WATCH_AFTER`` has the route watched while it waits: once the controllers name another
master for its group, the connection to the old one is closed and the attempt retried there at
once (a frozen master keeps its connections open; only the route tells it was replaced).

A request of a FIFO message group goes only to the group's queue (:func:`group_lane`).

An idempotent producer's request (``sequencer`` set, docs/idempotence.md) carries the queue's
sequence (``client/sequencer.py``); once an attempt may have been stored (no answer, a cut
connection, a flush or replica timeout: :data:`NOT_STORED_CODES` are the refusals that store
nothing) its retries go only to that queue, at its group's master of the moment. A topic whose
broker answers IDEMPOTENCE_OFF (its ``idempotence_off_topics``) gets the request again at once
without the fields, and every later one (:attr:`SendRouter.plain_topics`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

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
from client.routes import MessageQueue, RouteCache, TopicRoute
from client.sequencer import Lane, Sequencer
from protocol.codes import ResponseCode
from protocol.fifo import group_queue
from protocol.idempotence import SEQ_FIELD, pack_producer_seq
from protocol.producer_token import TOKEN_FIELD
from protocol.remoting import Frame, Header
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

#: Retriable answers given before anything was stored (all but the flush and replica timeouts,
#: which come after the store): an idempotent request may move to another queue after them
#: (after the others it stays on its queue, see SendRouter.send).
NOT_STORED_CODES = RETRIABLE_CODES - {
    ResponseCode.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT,
}

CONNECTION_ERRORS = (ConnectError, ConnectionClosedError, RequestTimeoutError)
#: An attempt unanswered this long (seconds) has the route watched while it waits, every
#: ROUTE_WATCH_INTERVAL; a new master there ends the wait (``SendRouter._route_watch``).
ROUTE_WATCH_AFTER = 0.25
ROUTE_WATCH_INTERVAL = 0.1

Target = tuple[MessageQueue, str]  # a queue chosen for a send, and its master's address


class QueueRequest(Protocol):
    """A request for one queue of a topic, sent to another on a retry: a SEND_MESSAGE
    (:class:`~protocol.broker_requests.send.SendRequest`) or a packed SEND_BATCH_MESSAGE
    (:class:`~protocol.broker_requests.send.PackedBatch`)."""

    def to_queue(self, queue_id: int) -> tuple[Header, bytes | None]: ...


LaneKey = tuple[str, str, int]  # (topic, broker group, queue id) of a message group's queue


def group_lane(topic: str, route: TopicRoute, group: str) -> LaneKey:
    """The queue message group ``group`` of ``topic`` hashes to in ``route``."""
    # A static topic's message groups hash over its logical queues (each on its newest
    # item), so a group keeps its logical queue when that queue moves to another group.
    queues = route.logical_queues or route.queues  # else sorted, masters or not
    if not queues:
        raise NoRouteError(f"topic {topic!r} has no queue")
    mq = group_queue(group, queues)
    return (topic, mq.broker_name, mq.queue_id)


class SendRouter:
    """Picks the queue of each attempt (round-robin, skipping broker groups that failed
    recently), looks routes up, connects, and retries retriable failures until a deadline.

    ``started`` and ``closed`` are the producer's: no request leaves unless started and not
    closed."""

    def __init__(
        self,
        pool: ConnectionPool,
        bootstrap: Bootstrap,
        routes: RouteCache,
        *,
        send_deadline: float,
        send_timeout: float,
        retries: int | None,
        retry_backoff: float,
        fault_isolation: float,
    ) -> None:
        self.send_deadline = send_deadline
        self.send_timeout = send_timeout
        self.retries = retries
        self.retry_backoff = retry_backoff
        self.routes = routes
        self._pool = pool
        self._bootstrap = bootstrap
        # The pool's live connections, looked up without a coroutine on the hot path.
        self._conns: dict[str, RemotingClient] = {}
        #: where the next round-robin pick of each topic starts (per topic, as RocketMQ's
        #: sendWhichQueue: one counter shared by topics sent to in turn would give each topic
        #: only some of its queues)
        self.rr: dict[str, int] = {}
        # Broker groups that failed a send recently -> until when new sends avoid them
        # (RocketMQ's latency fault tolerance, simplified): a dead group costs one failed
        # attempt per isolation period, not one per send.
        self.fault_isolation = fault_isolation
        self._faulty: dict[str, float] = {}
        self.started = False
        self.closed = False
        self.sequencer: Sequencer | None = None
        """An idempotent producer's sequences (set once its identity is known)."""
        self.plain_topics: set[str] = set()
        """Topics whose broker refused the fields (IDEMPOTENCE_OFF): sent without them."""
        self._lane_waits: dict[Lane, list[asyncio.Future[None]]] = {}

    def check_open(self) -> None:
        """Raise :class:`ClosedError` unless the producer is started and not closed."""
        if self.closed or not self.started:
            raise ClosedError("producer is closed" if self.closed else "producer is not started")

    def first_target(self, topic: str) -> Target | None:
        """The queue a new send of ``topic`` would go to now (None: no route yet, or no
        master now: the send's own retries wait for one)."""
        route = self.routes.peek(topic)
        if route is not None:
            try:
                return self.select(route, self._isolated() if self._faulty else None)
            except NoRouteError:
                pass
        return None

    def _isolated(self) -> set[str] | None:
        now = time.monotonic()
        for name in [n for n, until in self._faulty.items() if until <= now]:
            del self._faulty[name]
        return set(self._faulty) or None

    def _group_target(self, route: TopicRoute, group: str) -> Target:
        """The queue of message group ``group`` in ``route`` and its master's address; a
        :class:`NoRouteError` while that queue's broker group has no master (the send waits
        for one: the group's messages never go elsewhere)."""
        _topic, broker, queue_id = group_lane(route.topic, route, group)
        address = route.master_address(broker)
        if address is None:
            raise NoRouteError(f"broker group {broker} of message group {group!r} has no master")
        return MessageQueue(broker, queue_id), address

    @staticmethod
    def _pinned_target(route: TopicRoute, mq: MessageQueue) -> Target:
        """Queue ``mq`` at its group's master in ``route`` (an idempotent request that may
        have been stored there); a :class:`NoRouteError` while the group has no master."""
        address = route.master_address(mq.broker_name)
        if address is None:
            raise NoRouteError(f"broker group {mq.broker_name} has no master")
        return mq, address

    async def _sequence(self, lane: Lane, deadline: float) -> int:
        """The next sequence of ``lane``, waiting (until ``deadline``) while the lane has a
        window's worth in flight."""
        seqr = self.sequencer
        assert seqr is not None
        while True:
            seq = seqr.take(lane)
            if seq is not None:
                return seq
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise NoRouteError(f"queue {lane[2]} of {lane[1]} has a window of sends in flight")
            fut = asyncio.get_running_loop().create_future()
            self._lane_waits.setdefault(lane, []).append(fut)
            try:
                async with asyncio.timeout(remaining):
                    await fut
            except TimeoutError:
                pass
            finally:
                waits = self._lane_waits.get(lane)
                if waits is not None and fut in waits:
                    waits.remove(fut)
                    if not waits:
                        del self._lane_waits[lane]

    def _release(self, lane: Lane, seq: int) -> None:
        seqr = self.sequencer
        if seqr is not None and seqr.release(lane, seq):
            for fut in self._lane_waits.pop(lane, ()):
                if not fut.done():
                    fut.set_result(None)

    def select(self, route: TopicRoute, avoid: set[str] | None) -> Target:
        """The next writable queue round-robin, skipping broker groups in ``avoid`` if possible."""
        writable = route.writable
        n = len(writable)
        if n == 0:
            raise NoRouteError(f"topic {route.topic!r} has no broker group with a master")
        topic = route.topic
        i = self.rr.get(topic, 0)
        if avoid:
            for k in range(n):
                choice = writable[(i + k) % n]
                if choice[0].broker_name not in avoid:
                    self.rr[topic] = (i + k + 1) % n
                    return choice
        self.rr[topic] = (i + 1) % n
        return writable[i % n]

    async def route(
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
            async with asyncio.timeout(remaining):
                return await lookup
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

    async def connect(self, address: str, deadline: float) -> RemotingClient:
        """The connection to ``address`` (opened if need be, at most until ``deadline``)."""
        conn = self._conns.get(address)
        if conn is not None and not conn.is_closed:
            return conn
        remaining = max(deadline - time.monotonic(), 0.001)
        try:
            async with asyncio.timeout(remaining):
                conn = await self._pool.get(address)
        except TimeoutError:
            raise ConnectError(f"cannot connect to {address} before the send deadline") from None
        self._conns[address] = conn
        return conn

    def attempt_timeout(self, deadline: float) -> float:
        """How long one attempt may wait for its answer."""
        return max(min(self.send_timeout, deadline - time.monotonic()), 0.001)

    async def send(
        self,
        topic: str,
        code: int,
        request: QueueRequest,
        deadline: float | None = None,
        first: Target | None = None,
        *,
        group: str | None = None,
    ) -> tuple[Frame, MessageQueue]:
        """Send ``request`` (of request code ``code``) to the queue each attempt picks, retried
        until ``deadline`` (default: ``send_deadline`` from now);
        ``first``: the queue of the first attempt, chosen by the caller. With a message
        ``group``, every attempt goes to the group's queue in the route of the moment."""
        self.check_open()
        start = time.monotonic()
        if deadline is None:
            deadline = start + self.send_deadline
        route = self.routes.peek(topic)
        avoid = self._isolated() if self._faulty else None
        last: Exception | None = None
        max_attempts = None if self.retries is None else self.retries + 1
        attempt = 0
        seqr = self.sequencer if topic not in self.plain_topics else None
        held: tuple[Lane, int] | None = None  # the lane and sequence this request holds
        pinned: MessageQueue | None = None  # an attempt there may have been stored
        try:
            while True:
                attempt += 1
                try:
                    if pinned is not None:
                        if route is None:
                            route = await self.route(topic, deadline, fresh=True)
                        mq, address = self._pinned_target(route, pinned)
                    elif first is not None:
                        mq, address = first
                        first = None
                    else:
                        if route is None:
                            route = await self.route(
                                topic, deadline, fresh=False, first=attempt == 1
                            )
                        if group is None:
                            mq, address = self.select(route, avoid)
                        else:
                            mq, address = self._group_target(route, group)
                    header, body = request.to_queue(mq.queue_id)
                    if seqr is not None:
                        lane = (topic, mq.broker_name, mq.queue_id)
                        if held is None or held[0] != lane:
                            if held is not None:  # refused before stored there: a gap
                                self._release(*held)
                                held = None
                            taken = seqr.take(lane)  # no coroutine unless it must wait
                            if taken is None:
                                taken = await self._sequence(lane, deadline)
                            held = (lane, taken)
                        header[SEQ_FIELD] = pack_producer_seq(seqr.producer_id, seqr.epoch, held[1])
                        if seqr.token is not None:
                            header[TOKEN_FIELD] = seqr.token
                except NoRouteError as exc:  # a route with no master, or no route yet
                    last = exc
                else:
                    try:
                        conn = self._conns.get(address)
                        if conn is None or conn.is_closed:
                            conn = await self.connect(address, deadline)
                        timeout = self.attempt_timeout(deadline)
                        watch: list[asyncio.Task[None]] = []
                        timer = asyncio.get_running_loop().call_later(
                            ROUTE_WATCH_AFTER,
                            self._watch_route,
                            watch,
                            conn,
                            topic,
                            mq.broker_name,
                        )
                        try:
                            resp = await conn.request(code, header, body, timeout)
                        finally:
                            timer.cancel()
                            if watch:
                                watch[0].cancel()
                    except CONNECTION_ERRORS as exc:
                        last = exc
                        if seqr is not None and not isinstance(exc, ConnectError):
                            pinned = mq  # sent, unanswered: it may have been stored
                    else:
                        rcode = resp.code
                        if rcode == ResponseCode.SUCCESS:
                            if self._faulty:
                                self._faulty.pop(mq.broker_name, None)
                            return resp, mq
                        if rcode == ResponseCode.TOPIC_NOT_EXIST:
                            raise TopicNotFoundError(topic, address)
                        error = BrokerError.of(resp, address)
                        if (
                            rcode == ResponseCode.IDEMPOTENCE_OFF
                            and seqr is not None
                            and pinned is None
                        ):
                            # the topic takes no fields (the broker's idempotence_off_topics):
                            # this request and the topic's next ones go without them
                            self.plain_topics.add(topic)
                            seqr = None
                            if held is not None:
                                self._release(*held)
                                held = None
                            first = mq, address
                            last = error
                            continue
                        if rcode not in RETRIABLE_CODES:
                            raise error
                        last = error
                        if seqr is not None and rcode not in NOT_STORED_CODES:
                            pinned = mq  # stored, not yet durable as asked
                    if avoid is None:
                        avoid = set()
                    avoid.add(mq.broker_name)
                    if self.fault_isolation > 0:
                        self._faulty[mq.broker_name] = time.monotonic() + self.fault_isolation
                if self.closed:
                    raise ClosedError("producer is closed") from last
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (max_attempts is not None and attempt >= max_attempts):
                    break
                if route is None or not route.writable or group is not None or pinned:
                    stuck = True  # nowhere (else) to send: give the controllers time to elect
                else:  # every group of the route failed this send
                    stuck = avoid is not None and {b.broker_name for b in route.brokers} <= avoid
                if self.retry_backoff > 0 and stuck:
                    await asyncio.sleep(
                        min(self.retry_backoff * 2 ** (attempt - 1), 1.0, remaining)
                    )
                if route is not None:  # else the next attempt looks it up
                    try:
                        route = await self.route(topic, deadline, fresh=True)
                    except NoRouteError:
                        pass  # keep the old route; ``last`` says why the last attempt failed
        finally:
            if held is not None:
                self._release(*held)
        elapsed = time.monotonic() - start
        failed = SendError(
            f"send to topic {topic!r} failed after {attempt} attempt(s) in {elapsed:.1f}s: {last}"
        )
        failed.maybe_stored = pinned is not None
        raise failed from last

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
                async with asyncio.timeout(1.0):
                    route = await self.routes.refresh(topic)
            except (ClientError, TimeoutError):
                continue  # the controllers did not answer: the broker's answer may still come
            master = route.master_address(broker_name)
            if master is not None and master != conn.address:
                conn.close()
                return
