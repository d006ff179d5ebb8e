"""Pulls for every front: PULL_MESSAGE's processor (:mod:`broker.processors.pull`) and the
classic door's (:mod:`broker.classic.pull`) call :meth:`PullService.answer` with a typed
:class:`~protocol.pull.PullRequest` and say its typed :data:`~protocol.pull.PullAnswer` their
own way.

The service decides everything a pull is: its limits (``max_pull_batch``, ``max_pull_bytes``,
``max_pull_suspend_ms``), the topic and queue checks, the store read up to what consumers may
see with the tag or SQL92 filter (:data:`FILTER_SCAN`, :data:`FILTER_READS`), the offset rules (a request
below the queue moves to its first offset, one past it to its end; a corrupt record is said, not
skipped) and long polling (:mod:`broker.long_polling`): a pull that finds nothing waits until a
message lands in its queue (with a tag filter, one that matches) or its suspend timeout passes.
"""

from __future__ import annotations

from collections.abc import Awaitable

from broker.pull.host import PullHost
from protocol.codes import ResponseCode
from protocol.filter import (
    SQL_FILTER_OFF,
    MessageFilter,
    SqlFilter,
    filter_records,
    parse_filter,
)
from protocol.pull import (
    PullAnswer,
    PullCorrupt,
    PullFound,
    PullNotFound,
    PullOffsetMoved,
    PullRefused,
    PullRequest,
)
from protocol.topic_attrs import read_forbidden
from storage.store import GetStatus

__all__ = ["FILTER_READS", "FILTER_SCAN", "PullService"]

FILTER_READS = 8
"""Most reads of one pull while everything read fails its tag filter."""
FILTER_SCAN = 1024
"""ConsumeQueue entries one filtered read looks at (their tag hashes; only matches are read)."""


class PullService:
    """The pull path (see the module docstring). Loop thread only."""

    def __init__(self, host: PullHost) -> None:
        self.host = host

    def answer(
        self, pull: PullRequest, *, repair: bool = True, loaded: bool = False
    ) -> PullAnswer | Awaitable[PullAnswer]:
        """The answer to ``pull`` now, or an awaitable of it when it waits for a message (long
        polling) or for the repair of a record that failed its checks (from another replica,
        ``StoreRepair.repairer``; not with ``repair`` false). Raises
        :class:`~protocol.filter.FilterError` for a subscription that does not parse (a parsed
        :class:`PullRequest` was checked already). A SQL92 subscription is refused
        SQL_FILTER_DISABLED unless ``enable_property_filter``.

        A read of records not in the page cache first loads them off the loop
        (:mod:`broker.cold_reads`), then is answered as any (``loaded``: they were)."""
        topic, queue_id, offset = pull.topic, pull.queue_id, pull.offset
        cfg = self.host.cfg
        max_count = max(1, min(pull.max_count, cfg.max_pull_batch))
        asked_bytes = cfg.max_pull_bytes if pull.max_bytes is None else pull.max_bytes
        max_bytes = max(1, min(asked_bytes, cfg.max_pull_bytes))
        suspend_ms = max(0, min(pull.suspend_ms, cfg.max_pull_suspend_ms))
        tag_filter = parse_filter(pull.filter_type, pull.subscription)
        if isinstance(tag_filter, SqlFilter) and not cfg.enable_property_filter:
            return PullRefused(code=ResponseCode.SQL_FILTER_DISABLED, remark=SQL_FILTER_OFF)
        tc = self.host.topics.get(topic)
        if tc is None:
            return PullRefused(
                code=ResponseCode.TOPIC_NOT_EXIST, remark=f"topic {topic} does not exist"
            )
        if not tc.attrs.readable:
            return PullRefused(
                code=ResponseCode.NO_PERMISSION, remark=read_forbidden(topic, tc.attrs.perm)
            )
        if not 0 <= queue_id < tc.queues:
            return PullRefused(
                code=ResponseCode.QUEUE_NOT_EXIST,
                remark=f"queueId {queue_id} out of range 0..{tc.queues - 1}",
            )
        reset = self.host.offset_resets.take(pull.group, topic, queue_id)
        if reset is not None and reset != offset:
            return self._reset(topic, queue_id, reset)
        if not loaded:
            hashes = None if tag_filter is None else tag_filter.hashes
            visible = self.host.visible_offset()
            cold = self.host.store.cold_spans(
                topic, queue_id, offset, max_count, max_bytes, visible, hashes, FILTER_SCAN
            )
            if cold:
                return self._after_cold_read(self.host.cold_reads.load(cold), pull, repair)
        resp, _ = self._read(topic, queue_id, offset, max_count, max_bytes, tag_filter)
        repairing = self._repairing(resp) if repair else None
        if repairing is not None:
            return self._after_repair(repairing, pull)
        if resp is not None or suspend_ms == 0:
            return resp if resp is not None else self._not_found(topic, queue_id, offset)
        return self._wait_and_read(
            pull.group, topic, queue_id, offset, max_count, max_bytes, suspend_ms, tag_filter
        )

    def _reset(self, topic: str, queue_id: int, offset: int) -> PullOffsetMoved:
        """The group's offset of the queue was reset (:mod:`broker.offset_resets`): go on
        from there, as RocketMQ 5 answers a pull after a server-side reset."""
        low, high = self.bounds(topic, queue_id)
        return PullOffsetMoved(
            next_offset=offset,
            remark=f"the group's offset of {topic}:{queue_id} was reset to {offset}",
            min_offset=low,
            max_offset=high,
        )

    def _repairing(self, resp: PullAnswer | None) -> Awaitable[object] | None:
        """When ``resp`` says a record fails its checks: its repair from another replica,
        started or joined (``StoreRepair.repairer``); None when none is worth trying."""
        if not isinstance(resp, PullCorrupt) or resp.physical_offset is None:
            return None
        repairer = self.host.store.repairs.repairer
        return None if repairer is None else repairer.start(resp.physical_offset)

    async def _after_cold_read(
        self, loading: Awaitable[None], pull: PullRequest, repair: bool
    ) -> PullAnswer:
        """The records of ``pull`` were not in the page cache: the answer read once they are
        loaded (read as any other, from the mapping)."""
        await loading
        answer = self.answer(pull, repair=repair, loaded=True)
        return await answer if isinstance(answer, Awaitable) else answer

    async def _after_repair(self, repairing: Awaitable[object], pull: PullRequest) -> PullAnswer:
        """The first record of ``pull`` failed its checks and is being repaired: the answer
        read once that ends (the record, or CORRUPT saying what was tried)."""
        await repairing
        answer = self.answer(pull, repair=False)
        return await answer if isinstance(answer, Awaitable) else answer

    def bounds(self, topic: str, queue_id: int) -> tuple[int, int]:
        """The queue's first retained offset and its end now (an answer that did not say them,
        :class:`~protocol.pull.PullRetry`, for a front whose answers always carry them)."""
        store = self.host.store
        return store.queue_min_offset(topic, queue_id), store.queue_max_offset(topic, queue_id)

    def commit_first(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Commit ``offset`` for ``group`` before a pull (a classic pull's commit-offset flag),
        unless it is committed already."""
        offsets = self.host.offsets
        if offsets.query(group, topic, queue_id) != offset:
            offsets.commit(group, topic, queue_id, offset, self.host.now_ms())

    async def _wait_and_read(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        max_bytes: int,
        suspend_ms: int,
        tag_filter: MessageFilter | None,
    ) -> PullAnswer:
        """Wait for a message at ``offset`` (the queue's end). With ``tag_filter`` the arrivals
        that do not match are passed over while waiting (the wait goes on past them, as
        RocketMQ's held pulls wake only for a matching message); answered at the timeout,
        PULL_NOT_FOUND's ``nextBeginOffset`` is past them, so the consumer's offset covers
        them."""
        host = self.host
        metrics = host.metrics
        metrics.pull_waits.inc()
        loop_deadline = host.now_ms() + suspend_ms
        while True:
            remaining = loop_deadline - host.now_ms()
            if remaining <= 0:
                break
            metrics.pulls_waiting.inc()
            try:
                await host.waiters.wait(topic, queue_id, remaining / 1000)
            finally:
                metrics.pulls_waiting.dec()
            reset = host.offset_resets.take(group, topic, queue_id)
            if reset is not None and reset != offset:
                return self._reset(topic, queue_id, reset)
            resp, offset = self._read(
                topic, queue_id, offset, max_count, max_bytes, tag_filter, waiting=True
            )
            repairing = self._repairing(resp)
            if repairing is not None:  # what arrived fails its checks: repaired, read again
                await repairing
                resp, offset = self._read(
                    topic, queue_id, offset, max_count, max_bytes, tag_filter, waiting=True
                )
            if resp is not None:
                return resp
        return self._not_found(topic, queue_id, offset)

    def _read(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        max_bytes: int,
        tag_filter: MessageFilter | None = None,
        *,
        waiting: bool = False,
    ) -> tuple[PullAnswer | None, int]:
        """An answer when there is something to say now, else None (the pull should wait);
        and the offset a read for this pull goes on from.

        With ``tag_filter`` the store passes over the entries whose ConsumeQueue tag hash
        cannot match (their records are not read), looking at up to :data:`FILTER_SCAN`
        entries per read, and the records it returns are confirmed on their tags (two tags may
        share a hash). A read that kept nothing reads on (up to :data:`FILTER_READS` times),
        and answers SUCCESS with ``count`` 0 and ``nextBeginOffset`` past what it looked at
        when none matched: the consumer moves on (and commits past those entries) and never
        stalls on a run of other tags. ``waiting`` (a long poll woken by new messages): when
        none matched up to the end of what may be served, no answer yet, and the offset past
        them to wait at."""
        host = self.host
        hashes = None if tag_filter is None else tag_filter.hashes
        visible = host.visible_offset()
        get = host.store.get
        res = get(topic, queue_id, offset, max_count, max_bytes, visible, hashes, FILTER_SCAN)
        if tag_filter is not None and res.status is GetStatus.FOUND:
            body, count = filter_records(res.body, tag_filter)
            reads = 1
            while not count and reads < FILTER_READS:
                more = get(
                    topic,
                    queue_id,
                    res.next_offset,
                    max_count,
                    max_bytes,
                    visible,
                    hashes,
                    FILTER_SCAN,
                )
                if waiting and more.status is GetStatus.NO_MATCHED_MESSAGE:
                    return None, res.next_offset
                if more.status is not GetStatus.FOUND:
                    break
                res = more
                body, count = filter_records(res.body, tag_filter)
                reads += 1
            res.body, res.count = body, count
        low, high = res.min_offset, res.max_offset
        status = res.status
        if status is GetStatus.FOUND:
            counts = host.metrics.topic(topic)
            counts.messages_out += res.count
            counts.bytes_out += len(res.body)
            found = PullFound(
                next_offset=res.next_offset,
                count=res.count,
                body=res.body,
                min_offset=low,
                max_offset=high,
            )
            return found, res.next_offset
        if status is GetStatus.NO_MATCHED_MESSAGE or (
            status is GetStatus.NO_MESSAGE_IN_QUEUE and offset == 0
        ):
            return None, offset
        if status is GetStatus.CORRUPT:
            corrupt = PullCorrupt(
                physical_offset=res.corrupt_offset,
                remark=(
                    f"queue {topic}:{queue_id}, offset {offset} cannot be read (commitlog "
                    f"offset {res.corrupt_offset}): {res.reason}"
                    + self._tried(res.corrupt_offset)
                    + self._way_past(topic, queue_id, offset)
                ),
                next_offset=res.next_offset,
                min_offset=low,
                max_offset=high,
            )
            return corrupt, offset
        next_offset = res.next_offset
        if status is GetStatus.OFFSET_TOO_SMALL:
            next_offset = low
        elif status in (GetStatus.OFFSET_OVERFLOW, GetStatus.NO_MESSAGE_IN_QUEUE):
            next_offset = high
        # max_offset is the next offset to be written: the readable ones end just before it.
        held = f"offsets {low}..{high - 1}" if high > low else f"no message, next offset {high}"
        moved = PullOffsetMoved(
            next_offset=next_offset,
            remark=f"offset {offset} is not in the queue, which holds {held} ({status.name})",
            min_offset=low,
            max_offset=high,
        )
        return moved, offset

    def _tried(self, physical: int) -> str:
        repairer = self.host.store.repairs.repairer
        if repairer is None:
            return "; no other replica to repair it from (a broker without controllers)"
        tried = repairer.explain(physical)
        return f"; {tried}" if tried else ""

    @staticmethod
    def _way_past(topic: str, queue_id: int, offset: int) -> str:
        return (
            f"; to read on past it: rmqctl skipCorruptMessage -t {topic} -q {queue_id} "
            f"-o {offset} (or move the group's offset past it)"
        )

    def _not_found(self, topic: str, queue_id: int, offset: int) -> PullAnswer:
        low, high = self.bounds(topic, queue_id)
        return PullNotFound(next_offset=offset, min_offset=low, max_offset=high)
