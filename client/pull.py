"""Per-queue pulling: one long-polling task per owned queue feeds the consumer's buffer."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
from collections.abc import Callable
from typing import Final

from client import logs
from client.brokers import MasterCaller
from client.buffer import MessageBuffer
from client.errors import BrokerError, ClientError, CorruptMessageError
from client.message import ReceivedMessage
from client.routes import LOGICAL_BROKER, MessageQueue, RouteCache
from protocol.codes import ResponseCode
from protocol.filter import TAG
from protocol.message import RecordError, iter_records
from protocol.pull import (
    AnswerError,
    ConsumerOffsetQuery,
    MaxOffsetQuery,
    MinOffsetQuery,
    PullAnswer,
    PullCorrupt,
    PullFound,
    PullNotFound,
    PullOffsetMoved,
    PullRequest,
    PullRetry,
    decode_offset,
    decode_pull_answer,
)
from protocol.remoting import Frame
from protocol.static_topic import (
    LogicalQueue,
    MappingError,
    MappingItem,
    first_offset,
    logical_max,
    logical_of,
    newest,
    read_at,
    resume_offset,
)
from remoting.errors import RemotingError

log = logs.get_logger(__name__)

START_FROM = ("earliest", "latest")

_FOR_GOOD = frozenset({ResponseCode.SQL_FILTER_DISABLED})
"""Refusals that asking again never changes: pulling the queue stops and the next receive
raises them (a SQL92 subscription to a broker with enable_property_filter off). NO_PERMISSION
is one too when the topic's route says its group does not let it be read (:meth:`Puller._take`;
the same code from the authentication guard, e.g. a session to open again or a broker that
has not fetched the users yet, is retried). Every other refusal is retried with a back-off,
TOPIC_NOT_EXIST and QUEUE_NOT_EXIST among them: a topic being created or a stale route."""


class _Step(enum.Enum):
    """What the pulling of a queue does after an answer (:meth:`Puller._take`)."""

    ANSWERED = "answered"
    AGAIN = "again"
    STOP = "stop"
    STUCK = "stuck"


_ANSWERED, _AGAIN, _STOP, _STUCK = _Step.ANSWERED, _Step.AGAIN, _Step.STOP, _Step.STUCK

#: how long a queue stuck at a message its broker cannot read waits before asking again: from
#: the first wait, doubling up to the last (the broker answers the same until an operator skips
#: the message, rmqctl skipCorruptMessage, or a replica repairs it; then pulling goes on)
CORRUPT_RETRY_FIRST: Final = 1.0
CORRUPT_RETRY_MAX: Final = 30.0


def _physical_batch(body: bytes | None, broker: str) -> list[ReceivedMessage]:
    return [ReceivedMessage(r, broker) for r in iter_records(body)] if body else []


def _same(offset: int) -> int:
    return offset


ROUTE_RECHECK = 1.0
"""A logical queue that found nothing new on its newest item looks at the route again when it
is older than this many seconds (the item may have been sealed and continued elsewhere)."""
MOVE_WAIT = 0.2
"""A logical queue at the end of a sealed newest item (a move between its two steps) looks for
the next item this often."""


class QueueState:
    """A queue the consumer owns (RocketMQ's ProcessQueue): where pulls and consumption are.

    Offsets are queue offsets; ``None`` until the start offset is known. For a static topic's
    logical queue (``mq.broker_name`` is :data:`client.routes.LOGICAL_BROKER`) they are logical
    offsets, and ``item_commits`` holds the physical offset last committed on each item, by
    generation.
    """

    __slots__ = (
        "acked",
        "committed",
        "consumed",
        "dropped",
        "failure",
        "fifo_offset",
        "fifo_retries",
        "hold",
        "item_commits",
        "last_end",
        "mq",
        "next_offset",
        "pulled",
        "task",
        "topic",
    )

    def __init__(self, mq: MessageQueue, topic: str = "") -> None:
        self.mq = mq
        #: the topic the queue belongs to (the consumer's topic, or its group's retry topic)
        self.topic = topic
        #: where the next pull starts
        self.next_offset: int | None = None
        #: where the pulls got to: past the last batch put into the buffer, and past the
        #: entries a tag filter passed over after it (:meth:`passed`)
        self.pulled: int | None = None
        #: the offset after the last message put into the buffer (None: none since the start
        #: offset was set); only entries the filter passed over lie between it and ``pulled``
        self.last_end: int | None = None
        #: every message below this offset was handed to the application and confirmed
        self.consumed: int | None = None
        #: the offset the broker last acknowledged as this group's committed offset
        self.committed: int | None = None
        #: set when the queue is given away; the state is dead from then on
        self.dropped = False
        #: set when pulling stopped for good (a SQL92 subscription the broker does not serve),
        #: or while it is stuck at a message the broker cannot read (a CorruptMessageError,
        #: cleared once a pull there is answered otherwise)
        self.failure: BrokerError | None = None
        self.task: asyncio.Task[None] | None = None
        #: a message whose nack failed: consumption never counts past it (it is delivered
        #: again from there after a restart or a handover)
        self.hold: int | None = None
        #: whether the application consumed a message of this queue since it was taken
        self.acked = False
        #: FIFO groups: the queue offset of the message that failed and blocks the queue, and
        #: how many times it was retried in place
        self.fifo_offset: int | None = None
        self.fifo_retries = 0
        self.item_commits: dict[int, int] = {}

    def start_at(self, offset: int) -> None:
        """Pull from ``offset`` on, nothing pulled yet (the start offset, or a rewind)."""
        self.next_offset = self.pulled = offset
        self.last_end = None

    def took(self, end: int, pulled: int) -> None:
        """A batch ending before ``end`` goes into the buffer; its pull answered ``pulled``
        as the next offset (further than ``end`` when a tag filter passed over entries)."""
        self.last_end = end
        self.pulled = pulled

    def passed(self, offset: int) -> None:
        """A pull moved on to ``offset`` with no message to hand out (a tag filter passed over
        the entries in between, as RocketMQ's nextBeginOffset does). With nothing of the queue
        waiting in the buffer or the application, they count as consumed now; else when the
        last message delivered before them is (:meth:`ack`)."""
        self.next_offset = offset
        if self.pulled is None or offset <= self.pulled:
            return
        idle = self.consumed is not None and self.consumed == self.pulled
        self.pulled = offset
        if idle:
            self._advance(offset)

    def ack(self, offset: int) -> None:
        """Messages below ``offset`` are consumed (never moves backwards, nor past ``hold``).
        When that is the last message put into the buffer, so are the entries the filter passed
        over after it (up to ``pulled``)."""
        self.acked = True
        if offset == self.last_end and self.pulled is not None:
            offset = max(offset, self.pulled)
        self._advance(offset)

    def _advance(self, offset: int) -> None:
        if self.hold is not None and offset > self.hold:
            offset = self.hold
        if self.consumed is None or offset > self.consumed:
            self.consumed = offset

    def __repr__(self) -> str:
        return (
            f"QueueState({self.mq.broker_name}/{self.mq.queue_id}, next={self.next_offset}, "
            f"consumed={self.consumed}, committed={self.committed}, dropped={self.dropped})"
        )


def corrupt_error(
    answer: PullCorrupt,
    *,
    broker_name: str,
    topic: str,
    queue_id: int,
    queue_offset: int,
    address: str,
) -> CorruptMessageError:
    """The error that says a broker cannot read the message at ``queue_offset`` (a
    MESSAGE_CORRUPT answer to a pull there)."""
    return CorruptMessageError(
        broker_name=broker_name,
        topic=topic,
        queue_id=queue_id,
        queue_offset=queue_offset,
        physical_offset=answer.physical_offset if answer.physical_offset is not None else -1,
        reason=answer.reason(topic, queue_id, queue_offset),
        address=address,
    )


class Puller:
    """Runs the pull loop of one queue at a time (one :meth:`run` task per owned queue)."""

    def __init__(
        self,
        *,
        caller: MasterCaller,
        routes: RouteCache,
        buffer: MessageBuffer[QueueState, ReceivedMessage],
        group: str,
        topic: str,
        start_from: str,
        batch_size: int,
        max_bytes: int,
        suspend_ms: int,
        request_timeout: float,
        max_backoff: float = 3.0,
        on_failure: Callable[[QueueState], None] | None = None,
        subscription: str = "*",
        filter_type: str = TAG,
    ) -> None:
        if start_from not in START_FROM:
            raise ValueError(f"start_from must be one of {START_FROM}, not {start_from!r}")
        self.caller = caller
        self.routes = routes
        self.buffer = buffer
        self.group = group
        self.topic = topic
        self.start_from = start_from
        self.batch_size = batch_size
        self.max_bytes = max_bytes
        self.suspend_ms = suspend_ms
        self.request_timeout = request_timeout
        self.max_backoff = max_backoff
        self.subscription = subscription
        """The expression pulls carry (``*``: every message), of ``filter_type``."""
        self.filter_type = filter_type
        self.on_failure = on_failure

    async def start_offset(self, mq: MessageQueue) -> int:
        """The group's committed offset, else the earliest retained (or latest) offset."""
        broker = mq.broker_name
        query = ConsumerOffsetQuery(group=self.group, topic=self.topic, queue_id=mq.queue_id)
        resp = await self.caller.request(
            broker, query.code, query.header(), timeout=self.request_timeout
        )
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            bound = (
                MaxOffsetQuery(topic=self.topic, queue_id=mq.queue_id)
                if self.start_from == "latest"
                else MinOffsetQuery(topic=self.topic, queue_id=mq.queue_id)
            )
            resp = await self.caller.call(
                broker, bound.code, bound.header(), timeout=self.request_timeout
            )
        elif resp.code != ResponseCode.SUCCESS:
            raise BrokerError.of(resp, self.caller.address(broker))
        try:
            return decode_offset(resp)
        except AnswerError as exc:
            raise BrokerError(resp.code, str(exc)) from None

    async def run(self, state: QueueState) -> None:
        """Pull until the queue is dropped (or the task cancelled)."""
        mq = state.mq
        if mq.broker_name == LOGICAL_BROKER:
            await self._run_logical(state)
            return
        broker = mq.broker_name
        timeout = self.suspend_ms / 1000 + self.request_timeout
        backoff = stuck = 0.0
        while not state.dropped:
            failure: Exception
            try:
                if state.next_offset is None:
                    start = await self.start_offset(mq)
                    state.next_offset = state.pulled = state.consumed = start
                resp, answer = await self._pull(broker, mq.queue_id, state.next_offset, timeout)
                step = await self._take(
                    state, broker, resp, answer, lambda body: _physical_batch(body, broker), _same
                )
                if step is _STOP:
                    return
                if step is _STUCK:
                    stuck = await self._stuck_wait(stuck)
                    continue
                stuck = 0.0
                if not isinstance(step, Exception):
                    if step is _ANSWERED:
                        backoff = 0.0
                    continue
                failure = step
            except (RemotingError, ClientError, RecordError) as exc:
                failure = exc
            backoff = await self._back_off(backoff, f"{broker}/{mq.queue_id}", failure)

    async def _pull(
        self, broker: str, queue_id: int, offset: int, timeout: float
    ) -> tuple[Frame, PullAnswer]:
        """One long-polling pull of a physical queue: the response and what it says."""
        pull = PullRequest(
            group=self.group,
            topic=self.topic,
            queue_id=queue_id,
            offset=offset,
            max_count=self.batch_size,
            max_bytes=self.max_bytes,
            suspend_ms=self.suspend_ms,
            subscription=self.subscription,
            filter_type=self.filter_type,
        )
        resp = await self.caller.request(broker, pull.code, pull.header(), None, timeout)
        try:
            return resp, decode_pull_answer(resp)
        except AnswerError as exc:
            raise BrokerError(resp.code, str(exc)) from None

    async def _back_off(self, backoff: float, where: str, failure: Exception) -> float:
        """After a failed pull: log the first of a run, wait (doubling up to ``max_backoff``)
        and look again where the group's master is; the next wait."""
        if backoff == 0.0:
            log.warning("pull failed", queue=where, error=str(failure))
        backoff = min(max(backoff * 2, 0.05), self.max_backoff)
        await asyncio.sleep(backoff)
        with contextlib.suppress(ClientError):
            await self.routes.refresh(self.topic)
        return backoff

    async def _stuck_wait(self, waited: float) -> float:
        """Wait before asking again at a message the broker cannot read (doubling from
        :data:`CORRUPT_RETRY_FIRST` up to :data:`CORRUPT_RETRY_MAX`); the wait."""
        wait = min(max(waited * 2, CORRUPT_RETRY_FIRST), CORRUPT_RETRY_MAX)
        await asyncio.sleep(wait)
        return wait

    async def _items(self, queue: int) -> LogicalQueue:
        route = self.routes.peek(self.topic) or await self.routes.get(self.topic)
        if queue >= len(route.mapping):
            raise ClientError(f"the route of {self.topic} has no logical queue {queue}")
        return route.mapping[queue]

    async def logical_start_offset(self, items: LogicalQueue) -> int:
        """The group's logical offset in a static topic's logical queue, read back from its
        committed offsets on the items, newest first, up to the first past its item's start
        (:func:`resume_offset`); else the first mapped offset (the earliest: a pull there moves
        on past what retention deleted) or the logical max."""
        committed: dict[int, int] = {}
        for item in reversed(items):
            query = ConsumerOffsetQuery(
                group=self.group, topic=self.topic, queue_id=item.physical_queue
            )
            broker = item.broker_name
            resp = await self.caller.request(
                broker, query.code, query.header(), timeout=self.request_timeout
            )
            if resp.code == ResponseCode.QUERY_NOT_FOUND:
                continue
            if resp.code != ResponseCode.SUCCESS:
                raise BrokerError.of(resp, self.caller.address(broker))
            try:
                committed[item.generation] = offset = decode_offset(resp)
            except AnswerError as exc:
                raise BrokerError(resp.code, str(exc)) from None
            if logical_of(item, offset) > item.logical_start:
                break
        found = resume_offset(items, committed)
        if found is not None:
            return found
        if self.start_from == "earliest":
            return first_offset(items)
        last = newest(items)
        bound = MaxOffsetQuery(topic=self.topic, queue_id=last.physical_queue)
        resp = await self.caller.call(
            last.broker_name, bound.code, bound.header(), timeout=self.request_timeout
        )
        try:
            return logical_max(items, decode_offset(resp))
        except AnswerError as exc:
            raise BrokerError(resp.code, str(exc)) from None

    async def _run_logical(self, state: QueueState) -> None:
        """Pull a static topic's logical queue: at logical offset L, pull the item holding it
        from L's physical offset there, never past a sealed item's physical end, and hand the
        messages on with their logical offsets; at a sealed item's end go on with the next item
        (docs/static-topics.md, "Logical reads")."""
        queue = state.mq.queue_id
        timeout = self.suspend_ms / 1000 + self.request_timeout
        backoff = 0.0
        where = f"{self.topic} logical queue {queue}"
        stuck = 0.0
        while not state.dropped:
            failure: Exception
            try:
                items = await self._items(queue)
                if state.next_offset is None:
                    start = await self.logical_start_offset(items)
                    state.next_offset = state.pulled = state.consumed = start
                if state.next_offset < first_offset(items):
                    # Retention deleted the item it was in and the item was dropped: go on
                    # from the first remaining one, as past a queue's min offset.
                    self._offset_moved(state, first_offset(items))
                try:
                    found = read_at(items, state.next_offset)
                except MappingError:
                    found = None  # past the items this route knows: a newer route has more
                if found is None:
                    await asyncio.sleep(MOVE_WAIT)
                    await self.routes.refresh(self.topic)
                    continue
                item, physical = found
                broker = item.broker_name
                resp, answer = await self._pull(broker, item.physical_queue, physical, timeout)
                step = await self._take(
                    state,
                    broker,
                    resp,
                    answer,
                    functools.partial(self._logical_batch, item, queue),
                    functools.partial(logical_of, item),
                    item,
                )
                if step is _STOP:
                    return
                if step is _STUCK:
                    stuck = await self._stuck_wait(stuck)
                    continue
                stuck = 0.0
                if not isinstance(step, Exception):
                    if step is _ANSWERED:
                        backoff = 0.0
                    if (
                        isinstance(answer, PullNotFound)
                        and item is newest(items)
                        and self.routes.age(self.topic) > ROUTE_RECHECK
                    ):
                        await self.routes.refresh(self.topic)  # sealed and moved meanwhile?
                    continue
                failure = step
            except (RemotingError, ClientError, RecordError) as exc:
                failure = exc
            backoff = await self._back_off(backoff, where, failure)

    async def _take(
        self,
        state: QueueState,
        broker: str,
        resp: Frame,
        answer: PullAnswer,
        batch_of: Callable[[bytes | None], list[ReceivedMessage]],
        offset_of: Callable[[int], int],
        item: MappingItem | None = None,
    ) -> _Step | BrokerError:
        """What one pull's answer does to the queue, for a physical queue and a logical one
        alike (``batch_of`` reads the body's messages, ``offset_of`` turns the broker's offsets
        into the queue's): _ANSWERED (pull again, the back-off starts over), _AGAIN (pull again
        at once), _STOP (pulling this queue ends), _STUCK (the broker cannot read the message
        there: ask again later), or the broker's refusal to back off on."""
        if isinstance(answer, PullCorrupt):
            self._corrupt(state, answer, item)
            return _STUCK
        if isinstance(answer, (PullFound, PullNotFound, PullOffsetMoved)):
            self._unstuck(state)  # not a refusal (a failover, say): the offset was read
        if isinstance(answer, PullFound):
            batch = batch_of(answer.body)
            nxt = offset_of(answer.next_offset)
            if state.dropped:
                return _ANSWERED
            if batch:
                state.next_offset = nxt
                state.took(batch[-1].queue_offset + 1, nxt)
                await self.buffer.put(state, batch)
            else:
                state.passed(nxt)
            return _ANSWERED
        if isinstance(answer, PullNotFound):
            if answer.next_offset is not None and not state.dropped:
                state.passed(offset_of(answer.next_offset))
            return _ANSWERED
        if isinstance(answer, PullOffsetMoved):
            self._offset_moved(state, offset_of(answer.next_offset))
            return _AGAIN
        if isinstance(answer, PullRetry):
            return _AGAIN
        failure = BrokerError.of(resp, self.caller.address(broker))
        if resp.code in _FOR_GOOD or (
            resp.code == ResponseCode.NO_PERMISSION and self._unreadable(broker)
        ):
            self._stop(state, failure)
            return _STOP
        return failure

    def _unreadable(self, broker: str) -> bool:
        """Whether the topic's cached route says ``broker``'s group does not let the topic be
        read (its permission lacks PERM_READ): a NO_PERMISSION pull answer then is the topic's
        permission, which only an operator changes, not an authentication refusal. A route
        cached before the permission changed says readable: the back-off after the refusal
        fetches it again, and the next refusal stops the queue."""
        route = self.routes.peek(self.topic)
        if route is None:
            return False
        return any(b.broker_name == broker and not b.attrs.readable for b in route.brokers)

    def _logical_batch(
        self, item: MappingItem, queue: int, body: bytes | None
    ) -> list[ReceivedMessage]:
        """The records of one pull on ``item`` with their logical offsets; a record past a
        sealed item's end (none is accepted there after the seal) is not part of the queue."""
        if not body:
            return []
        end = item.physical_end()
        broker = item.broker_name
        return [
            ReceivedMessage(r, broker, queue, logical_of(item, r.queue_offset))
            for r in iter_records(body)
            if end is None or r.queue_offset < end
        ]

    def _corrupt(
        self, state: QueueState, answer: PullCorrupt, item: MappingItem | None = None
    ) -> None:
        """The broker cannot read the message at ``state.next_offset``: the failure goes to the
        application (once per message) and to the log, and the queue is asked again later
        (:meth:`_stuck_wait`): after an operator's ``rmqctl skipCorruptMessage``, or a repair
        from another replica, pulling goes on by itself. Other queues are not held up."""
        mq = state.mq
        broker, queue_id = (
            (mq.broker_name, mq.queue_id)
            if item is None
            else (item.broker_name, item.physical_queue)
        )
        offset = state.next_offset if state.next_offset is not None else -1
        if item is not None and offset >= 0:
            offset = item.physical_start + (offset - item.logical_start)
        failure = corrupt_error(
            answer,
            broker_name=broker,
            topic=self.topic,
            queue_id=queue_id,
            queue_offset=offset,
            address=self.caller.address(broker),
        )
        where = f"{state.mq.broker_name}/{state.mq.queue_id}"
        known = state.failure
        if isinstance(known, CorruptMessageError) and (
            known.broker_name,
            known.queue_id,
            known.queue_offset,
        ) == (failure.broker_name, failure.queue_id, failure.queue_offset):
            log.warning(
                "pulling still stuck at an unreadable message", queue=where, error=str(failure)
            )
            return
        state.failure = failure
        # A warning, as every pull failure (rmqctl -v shows it): the application gets the error.
        log.warning(
            "pulling stuck at an unreadable message: asked again every "
            f"{CORRUPT_RETRY_MAX:g} s at most until it is skipped or repaired",
            queue=where,
            error=str(failure),
        )
        if self.on_failure is not None:
            self.on_failure(state)

    def _unstuck(self, state: QueueState) -> None:
        """A pull answered past a message the broker could not read: pulling goes on."""
        if isinstance(state.failure, CorruptMessageError):
            log.warning(
                "pulling goes on past the unreadable message",
                queue=f"{state.mq.broker_name}/{state.mq.queue_id}",
                offset=state.failure.queue_offset,
            )
            state.failure = None

    def _stop(self, state: QueueState, failure: BrokerError) -> None:
        """Pulling ``state``'s queue stops for good with ``failure``."""
        mq = state.mq
        state.failure = failure
        # Raised to the application by Consumer.receive; a warning for its logs (and rmqctl -v).
        log.warning("pulling stopped", queue=f"{mq.broker_name}/{mq.queue_id}", error=str(failure))
        if self.on_failure is not None:
            self.on_failure(state)

    def _offset_moved(self, state: QueueState, nxt: int) -> None:
        log.warning(
            "pull offset moved",
            queue=f"{state.mq.broker_name}/{state.mq.queue_id}",
            requested=state.next_offset,
            next=nxt,
        )
        if state.consumed == state.pulled:
            # Nothing of this queue is waiting in the buffer or the application: the committed
            # offset may follow the pull position (forwards past expired messages, or backwards
            # when the broker holds fewer messages than we had seen).
            state.consumed = nxt
        state.start_at(nxt)
