"""POP of a FIFO consumer group: the driver around :mod:`broker.pop.orderly` (docs/fifo.md).

It reads the queue ahead into the order state (each record's message group and tags), asks the
state which offsets to hand out, appends the :class:`~protocol.pop.OrderlyCheckpoint` and
applies it in the same synchronous step, then reads the records handed out back for the answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Protocol

import structlog

from broker.pop.message import PopMessage
from broker.pop.orderly import OrderlyQueue
from protocol.fifo import PROP_MESSAGE_GROUP
from protocol.filter import MessageFilter, SqlFilter, TagFilter
from protocol.message import DISPATCH_HEAD, RecordError, decode_record
from protocol.pop import HandleKey, ReceiptHandle, ReviveRecord, encode_handle
from protocol.property_index import PropertyNeed
from protocol.retry import DeadLetter, SubscriptionGroupConfig, next_step
from storage.store import GetStatus, PutResult

if TYPE_CHECKING:
    from broker.pop.host import PopHost
    from broker.pop.inflight import PopState

__all__ = ["PopQueues", "exhausted", "max_attempts", "pop_orderly"]

log = structlog.get_logger(__name__)

_READ_BATCH: Final = 256
_READS: Final = 8
"""Most read-ahead rounds of one POP of one queue (while what was read is all blocked)."""


class PopQueues(Protocol):
    """What FIFO POP uses of the POP service (:class:`broker.pop.service.PopService`)."""

    @property
    def host(self) -> PopHost: ...

    def pop_offset(self, state: PopState, group: str, topic: str, queue_id: int) -> int: ...

    def append(self, record: ReviveRecord) -> PutResult: ...


def max_attempts(config: SubscriptionGroupConfig) -> int:
    """Deliveries of one message before the dead-letter step: the first and
    ``retryMaxTimes`` more (the retry decision of :func:`protocol.retry.next_step`)."""
    return config.retry_max_times + 1


def exhausted(config: SubscriptionGroupConfig, attempts: int) -> bool:
    """A message handed out ``attempts`` times and not acked goes to the DLQ."""
    return isinstance(next_step(config, attempts - 1), DeadLetter)


def pop_orderly(
    service: PopQueues,
    state: PopState,
    key: HandleKey,
    group: str,
    topic: str,
    queue_id: int,
    want: int,
    invisible_ms: int,
    now: int,
    tag_filter: MessageFilter | None,
) -> tuple[list[PopMessage], PutResult | None]:
    """Hand out up to ``want`` messages of one queue to a FIFO group; the checkpoint's append
    (None: nothing handed out or passed over)."""
    host = service.host
    q = (group, topic, queue_id)
    oq = state.order.queue(q)
    if oq is None:
        oq = state.order.open_queue(q, service.pop_offset(state, group, topic, queue_id))
    limit = max_attempts(host.sub_groups.get(group))
    sql = tag_filter if isinstance(tag_filter, SqlFilter) else None
    accepts = tag_filter.matches if isinstance(tag_filter, TagFilter) else None
    # The store passes over the entries whose ConsumeQueue tag hash cannot match without
    # reading their records; the order state passes them over for good (docs/pop.md).
    hashes = None if tag_filter is None else tag_filter.hashes
    result: PutResult | None = None
    for _ in range(_READS):
        sel = oq.select(now, want, limit, accepts)
        for _ in range(_READS):
            if len(sel.handed) >= want or not _read_ahead(host, oq, hashes, sql):
                break
            sel = oq.select(now, want, limit, accepts)
        ck = sel.checkpoint(q, oq.low, now, invisible_ms)
        if ck is None:
            # Nothing to hand out or pass over now, but acks since the last checkpoint may have
            # made everything below ``low`` done (the last messages acked, the rest passed over
            # by a filter): the consume offset follows, so the group's lag reaches 0.
            committed = host.offsets.query(group, topic, queue_id)
            if committed is None or oq.low > committed:
                host.offsets.commit(group, topic, queue_id, oq.low, now)
            return [], result
        result = service.append(ck)
        ck_id = result.physical_offsets[0]
        state.checkpoint(ck_id, ck)
        host.offsets.commit(group, topic, queue_id, oq.low, now)
        if sel.passed:
            log.debug(
                "fifo pop passed over", group=group, queue=f"{topic}:{queue_id}", n=len(sel.passed)
            )
        if sel.handed:
            break
        # Everything selected was passed over (filtered out, unreadable): the window moved
        # past it, read on (as a POP of a non-FIFO group reads a queue up to 8 times).
    else:
        return [], result
    raws = _records(host, topic, queue_id, [o for o, _ in sel.handed])
    out: list[PopMessage] = []
    name = host.cfg.broker_name
    for offset, attempt in sel.handed:
        raw = raws.get(offset)
        if raw is None:  # gone since it was read (retention): its deadline passes, it expires
            continue
        handle = ReceiptHandle(name, group, topic, queue_id, offset, now, invisible_ms, ck_id)
        out.append(PopMessage(offset, raw, encode_handle(handle, key), attempt))
    if out:
        host.metrics.popped(group, topic, len(out))
        counts = host.metrics.topic(topic)
        counts.messages_out += len(out)
        counts.bytes_out += sum(len(m.raw) for m in out)
    return out, result


def _read_ahead(
    host: PopHost,
    oq: OrderlyQueue,
    hashes: frozenset[int] | PropertyNeed | None,
    sql: SqlFilter | None = None,
) -> bool:
    """Learn the next records of the queue past the frontier; False when nothing was read.
    With ``hashes`` (a tag filter's), the entries whose tag hash is none of them are learned
    without reading their records, as records to pass over (up to the window's room a read).
    With ``sql`` (a SQL92 filter), the records it rejects are learned as records to pass over."""
    room = oq.room()
    if room <= 0:
        return False
    _, topic, queue_id = oq.key
    start = oq.frontier
    visible = host.visible_offset()
    res = host.store.get(
        topic,
        queue_id,
        start,
        min(room, _READ_BATCH),
        host.cfg.max_pull_bytes,
        visible,
        hashes,
        room,
    )
    if res.status is GetStatus.OFFSET_TOO_SMALL:
        log.warning(
            "fifo pop: messages deleted by retention before the group took them",
            group=oq.key[0],
            queue=f"{topic}:{queue_id}",
            from_offset=start,
            to_offset=res.next_offset,
        )
        oq.skip_to(res.next_offset)
        return True
    if res.status is GetStatus.CORRUPT:
        repairer = host.store.repairs.repairer
        if repairer is not None and repairer.start(res.corrupt_offset) is not None:
            return False  # being fetched from another replica: read on the next POP
        log.error(
            "pop passed over an unreadable message",
            group=oq.key[0],
            queue=f"{topic}:{queue_id}",
            queue_offset=start,
            commitlog_offset=res.corrupt_offset,
            reason=res.reason,
        )
        oq.learn(start, None, None)
        return True
    if res.status is not GetStatus.FOUND:
        return False
    body = res.body
    pos = 0
    while pos < len(body):
        size, _m, _c, _q, offset, _p, _t, _b = DISPATCH_HEAD.unpack_from(body, pos)
        raw = body[pos : pos + size]
        pos += size
        if hashes is not None:
            _hash_filtered(oq, offset)
        if sql is not None and not sql.accepts_record(raw):
            oq.learn(offset, None, None)
            continue
        try:
            record = decode_record(raw)
            oq.learn(offset, record.properties.get(PROP_MESSAGE_GROUP), record.tags)
        except RecordError:
            oq.learn(offset, None, None)
    if hashes is not None:
        _hash_filtered(oq, res.next_offset)
    return True


def _hash_filtered(oq: OrderlyQueue, end: int) -> None:
    """The offsets from the frontier to ``end`` were passed over by their tag hash: learn
    them as records to pass over for good (as unreadable ones are; a gap is not retention
    here: the store reports that as OFFSET_TOO_SMALL)."""
    for offset in range(oq.frontier, end):
        oq.learn(offset, None, None)


def _records(host: PopHost, topic: str, queue_id: int, offsets: list[int]) -> dict[int, bytes]:
    """The stored bytes of ``offsets`` of a queue (ascending), read in as few spans as fit."""
    want = sorted(offsets)
    out: dict[int, bytes] = {}
    i = 0
    while i < len(want):
        start = want[i]
        res = host.store.get(
            topic, queue_id, start, want[-1] + 1 - start, host.cfg.max_pull_bytes, None
        )
        if res.status is not GetStatus.FOUND:
            i += 1
            continue
        body = res.body
        pos = 0
        while pos < len(body):
            size, _m, _c, _q, offset, _p, _t, _b = DISPATCH_HEAD.unpack_from(body, pos)
            out[offset] = body[pos : pos + size]
            pos += size
        while i < len(want) and want[i] < res.next_offset:
            i += 1
    return {o: out[o] for o in want if o in out}
