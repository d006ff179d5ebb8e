"""A consumer group member's membership and queue rebalance (:class:`GroupRebalancer`).

Every ``heartbeat_interval`` (or at once when a broker notifies that the group's members
changed) the member heart-beats to every broker group of its topic, reads the group's member
list, and takes its slice of the sorted (broker, queue) list
(:func:`client.allocate.allocate_averagely`) of its topic and of its group's retry topic: a
queue it gains gets a pull task, a queue it loses is committed and given away. The heartbeat
answers also say whether the group is a FIFO group and whether it consumes retries.

When a master says the group's offsets were reset (RESET_CONSUMER_CLIENT_OFFSET: an operator's
resetOffsetByTime or skipAccumulatedMessage, or a member's seek), each owned queue it names is
taken afresh from the new offset: what was pulled of it and not consumed yet is dropped, and
the new offset is committed at the next commit. A static topic's logical queue whose item it
names is taken afresh from the logical offset the notice gives for that item (a notice without
one, from an older resetter: from the group's committed offsets on its items, read back then).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from client import logs
from client.allocate import allocate_averagely
from client.buffer import MessageBuffer
from client.errors import BrokerError, ClientError, TopicNotFoundError
from client.identity import heartbeat
from client.message import ReceivedMessage
from client.offset_commit import OffsetCommitter
from client.pull import QueueState
from client.routes import LOGICAL_BROKER, MessageQueue, RouteCache, TopicRoute
from client.subscription import Subscription, queue_name
from protocol.broker_requests.clients import (
    PUSH,
    ConsumerList,
    ConsumerListQuery,
    HeartbeatAnswer,
    UnregisterClient,
)
from protocol.broker_requests.offsets import ResetNotice
from protocol.codes import RequestCode, ResponseCode
from protocol.fields import FieldError
from protocol.remoting import Frame, Header
from protocol.retry import SubscriptionGroupConfig, parse_delay_levels
from remoting.client import ConnectionPool
from remoting.errors import RemotingError

# The consumer's logger: its lines keep the name applications filter on.
log = logs.get_logger("client.consumer")

RETRY_ROUTE_CHECK_INTERVAL = 2.0
"""While the group's retry topic has no route yet, look again at most this often."""


class GroupRebalancer:
    """Heart-beats, reads the group's members and shares out the queues of ``main`` (the
    topic) and ``retry`` (the group's retry topic) among them.

    ``confirm`` marks what the application confirmed as consumed before a handover commits;
    ``closed`` says whether the consumer is closing (no queue is taken then)."""

    def __init__(
        self,
        *,
        pool: ConnectionPool,
        routes: RouteCache,
        buffer: MessageBuffer[QueueState, ReceivedMessage],
        committer: OffsetCommitter,
        main: Subscription,
        retry: Subscription,
        group: str,
        client_id: str,
        heartbeat_interval: float,
        request_timeout: float,
        consume_retry: bool,
        confirm: Callable[[], None],
        closed: Callable[[], bool],
    ) -> None:
        self._pool = pool
        self.routes = routes
        self._buffer = buffer
        self._committer = committer
        self._main = main
        self._retry = retry
        self.group = group
        self.topic = main.topic
        self.client_id = client_id
        self.heartbeat_interval = heartbeat_interval
        self.request_timeout = request_timeout
        self.consume_retry = consume_retry
        self._confirm = confirm
        self._closed = closed
        self._retry_checked = -RETRY_ROUTE_CHECK_INTERVAL
        # Brokers whose last heartbeat answer said the group does not consume retries.
        self._retry_off: set[str] = set()
        #: the group's FIFO settings when the brokers say it is a FIFO group (else None)
        self.fifo: SubscriptionGroupConfig | None = None
        self._fifo_answers: dict[str, SubscriptionGroupConfig | None] = {}
        #: the group's members as last read from a broker
        self.members: list[str] = []
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._resets: set[asyncio.Task[None]] = set()

    async def loop(self) -> None:
        """Heartbeat and rebalance every ``heartbeat_interval``, or when woken."""
        logged = ""  # the failure logged last: a run of the same one is logged once
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.heartbeat_interval):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self.tick()
                logged = ""
            except (ClientError, RemotingError) as exc:
                if str(exc) != logged:
                    logged = str(exc)
                    log.warning("group heartbeat/rebalance failed", group=self.group, error=logged)

    async def tick(self) -> None:
        """Heartbeat to every group (its master, or a slave while it has none), read the
        members, rebalance. Raises the refusal (:class:`BrokerError`, e.g. NO_PERMISSION when
        the user may not sub on the group) when every broker group that answered refused the
        heartbeat."""

        route = self.routes.peek(self.topic) or await self.routes.get(self.topic)
        groups = sorted(route.read_addresses().items())
        beat = heartbeat(self.group, self.client_id, topic=self.topic, consume_type=PUSH)
        self._retry_off.clear()
        self._fifo_answers = {}
        results = await asyncio.gather(
            *(self._heartbeat(address, beat) for _, address in groups), return_exceptions=True
        )
        if self._fifo_answers:  # a broker that answered says whether the group is FIFO
            fifo = next((c for c in self._fifo_answers.values() if c is not None), None)
            if (fifo is None) != (self.fifo is None):
                log.info("FIFO consumption", group=self.group, fifo=fifo is not None)
            self.fifo = fifo
        members: list[str] | None = None
        for (name, _), ok in zip(groups, results, strict=True):
            if ok is not True:
                continue
            try:
                members = await self._member_list(name)
                break
            except (ClientError, RemotingError) as exc:
                log.warning("member list failed", broker=name, error=str(exc))
        if members is None:
            refusals = [r for r in results if isinstance(r, BrokerError)]
            if refusals and not any(r is True for r in results):
                raise refusals[0]  # refused everywhere it was heard: say why
            return  # no group answered: keep what we own until one does
        if members != self.members:
            log.info("group members changed", group=self.group, members=members)
            self.members = members
        await self._rebalance(self._main, route, members)
        if not self.consume_retry or self._retry_off:
            # A broker says the group does not consume retries (its nacks go to the DLQ).
            await self._release(self._retry)
            return
        retry_route = await self._retry_route()
        if retry_route is not None:
            await self._rebalance(self._retry, retry_route, members)

    async def _release(self, sub: Subscription) -> None:
        """Stop reading every queue of ``sub``, committing what was consumed."""
        if not sub.owned:
            return
        async with self._lock:
            gone = list(sub.owned.values())
            for state in gone:
                self._give_away(sub, state)
            self._confirm()
            await asyncio.gather(*(self._committer.commit_dropped(s) for s in gone))
            log.info("stopped reading", group=self.group, topic=sub.topic)

    async def _retry_route(self) -> TopicRoute | None:
        """The retry topic's route; None while it has none (the brokers create the topic when
        a member first heart-beats, the route follows their next registration)."""
        route = self.routes.peek(self._retry.topic)
        if route is not None:
            return route
        now = time.monotonic()
        if now - self._retry_checked < RETRY_ROUTE_CHECK_INTERVAL:
            return None
        self._retry_checked = now
        try:
            return await self.routes.get(self._retry.topic)
        except TopicNotFoundError:
            return None

    async def _heartbeat(self, address: str, header: Header) -> bool | BrokerError:
        """True when ``address`` took the heartbeat; its refusal; False for an answer that
        cannot be read."""
        conn = await self._pool.get(address)
        if conn.on_request is None:
            conn.on_request = self._on_broker_request
        resp = await conn.request(RequestCode.HEART_BEAT, header, None, self.request_timeout)
        if resp.code != ResponseCode.SUCCESS:
            return BrokerError.of(resp, address)
        try:
            answer = HeartbeatAnswer.parse(resp.header, resp.body)
        except FieldError as exc:  # counted as not answered: its members are not asked
            log.warning("malformed heartbeat answer", broker=address, error=str(exc))
            return False
        if not answer.consume_retry:
            self._retry_off.add(address)
        self._fifo_answers[address] = fifo_config(self.group, answer)
        return True

    async def _member_list(self, broker_name: str) -> list[str]:
        members = ConsumerListQuery(group=self.group)
        resp = await self._main.caller.call(
            broker_name, members.code, members.encode()[0], timeout=self.request_timeout
        )
        try:
            return sorted(ConsumerList.parse(resp.header, resp.body).client_ids)
        except FieldError as exc:
            raise ClientError(f"malformed consumer list: {exc}") from None

    def _on_broker_request(self, frame: Frame) -> None:
        if frame.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            self._wake.set()
        elif frame.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            try:
                notice = ResetNotice.parse(frame.header, frame.body)
            except FieldError as exc:
                log.warning("malformed offset reset notice", error=str(exc))
                return
            if notice.group != self.group:
                return
            task = asyncio.ensure_future(self.reset(notice))
            self._resets.add(task)
            task.add_done_callback(self._resets.discard)

    async def resets_applied(self) -> None:
        """Wait until the reset notices received so far are applied."""
        while self._resets:
            await asyncio.gather(*self._resets, return_exceptions=True)

    async def reset(self, notice: ResetNotice) -> None:
        """Take afresh each owned queue of ``notice`` from its new offset (see the module
        docstring)."""
        async with self._lock:
            if self._closed():
                return
            for sub in (self._main, self._retry):
                if sub.topic != notice.topic:
                    continue
                route = self.routes.peek(sub.topic)
                for mq, state in list(sub.owned.items()):
                    if mq.broker_name == LOGICAL_BROKER:
                        items = route.mapping[mq.queue_id] if route is not None else ()
                        named = [
                            i.physical_queue
                            for i in items
                            if i.broker_name == notice.broker_name
                            and i.physical_queue in notice.offsets
                        ]
                        if named:
                            self._restart(sub, state, notice.logical.get(named[0]))
                    elif mq.broker_name == notice.broker_name and mq.queue_id in notice.offsets:
                        self._restart(sub, state, notice.offsets[mq.queue_id])
            log.info(
                "offsets reset",
                group=self.group,
                topic=notice.topic,
                broker=notice.broker_name,
                offsets=notice.offsets,
            )

    def _restart(self, sub: Subscription, state: QueueState, offset: int | None) -> None:
        """Drop ``state`` and read its queue again from ``offset`` (None: from the group's
        committed offsets)."""
        mq: MessageQueue = state.mq
        self._give_away(sub, state)
        fresh = QueueState(mq, sub.topic)
        if offset is not None:
            fresh.next_offset = fresh.pulled = fresh.consumed = offset
        fresh.task = asyncio.ensure_future(sub.puller.run(fresh))
        sub.owned[mq] = fresh

    async def _rebalance(self, sub: Subscription, route: TopicRoute, members: list[str]) -> None:
        if self._closed():
            return
        async with self._lock:
            owned = sub.owned
            mine = set(allocate_averagely(route.consume_queues(), members, self.client_id))
            gone = [s for mq, s in owned.items() if mq not in mine]
            added = sorted(mq for mq in mine if mq not in owned)
            if not gone and not added:
                return
            for state in gone:
                self._give_away(sub, state)
            # Commit what the old owner (us) consumed, so the new owner starts there.
            self._confirm()
            await asyncio.gather(*(self._committer.commit_dropped(s) for s in gone))
            if self._closed():
                return
            for mq in added:
                state = QueueState(mq, sub.topic)
                state.task = asyncio.ensure_future(sub.puller.run(state))
                owned[mq] = state
            log.info(
                "rebalanced",
                group=self.group,
                client=self.client_id,
                topic=sub.topic,
                queues=[queue_name(mq) for mq in sorted(owned)],
            )

    def _give_away(self, sub: Subscription, state: QueueState) -> None:
        state.dropped = True
        if state.task is not None:
            state.task.cancel()
        self._buffer.discard(state)
        del sub.owned[state.mq]

    async def unregister(self) -> None:
        """Leave the group: UNREGISTER_CLIENT to every broker group of the topic."""
        route = self.routes.peek(self.topic)
        if route is None:
            return
        leave = UnregisterClient(group=self.group, client_id=self.client_id)
        header, _ = leave.encode()

        async def one(address: str) -> None:
            conn = await self._pool.get(address)
            await conn.request(leave.code, header, None, self.request_timeout)

        await asyncio.gather(
            *(one(a) for a in route.read_addresses().values()), return_exceptions=True
        )


def fifo_config(group: str, answer: HeartbeatAnswer) -> SubscriptionGroupConfig | None:
    """The group's FIFO settings from a heartbeat answer (None: not a FIFO group); a setting
    out of range reads as its default."""
    if not answer.orderly:
        return None
    times, delays = answer.retry_max_times, answer.retry_delays
    try:
        levels = parse_delay_levels(delays) if delays is not None else None
    except ValueError:
        levels = None
    base = SubscriptionGroupConfig(group)
    return SubscriptionGroupConfig(
        group,
        times if times is not None and times >= 0 else base.retry_max_times,
        levels or base.retry_delays_ms,
        False,
        True,
    )
