"""Pull consumption over gRPC: PullMessage, UpdateOffset, GetOffset and QueryOffset, what the
official clients' pull consumers send (docs/protocol.md, "Pull consumption over gRPC").

Each RPC becomes one of the broker's own requests (:mod:`protocol.pull`): PULL_MESSAGE,
UPDATE_CONSUMER_OFFSET, QUERY_CONSUMER_OFFSET, GET_MIN_OFFSET, GET_MAX_OFFSET (committed: what
consumers may read) and SEARCH_OFFSET_BY_TIMESTAMP, so every check, limit, long poll and metric
of the remoting path applies. They go to this broker group's master; while the group has none
(between masters), or its master does not answer, reads (pulls, offset queries) are served by
this broker itself from what it replicated (up to its confirm offset: the same messages at the
same offsets, perhaps fewer), as a classic consumer reads a slave then. A commit goes to the
master only: with none it is refused HA_NOT_AVAILABLE (a slave's offsets are copies of its
master's, overwritten at the next sync).

The answers are read as the clients read them: a PullMessage stream holds a ``status``, the
messages and a ``next_offset`` (where the next pull starts); ``MESSAGE_NOT_FOUND`` (nothing new
within the long polling timeout, or nothing that passed the tag filter) and ``ILLEGAL_OFFSET``
(the offset is outside the queue: continue at ``next_offset``) carry a ``next_offset`` too and
are no errors to a pull consumer. GetOffset answers ``OFFSET_NOT_FOUND`` when the group never
committed on that queue.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import structlog

from broker.grpc import delivery
from broker.grpc.translate import Refused, forward, no_namespace, status_code
from protocol.codes import ResponseCode
from protocol.message import MessageRecord, RecordError, iter_records
from protocol.pull import (
    AnswerError,
    ConsumerOffsetQuery,
    ConsumerOffsetUpdate,
    MaxOffsetQuery,
    MinOffsetQuery,
    OffsetSearch,
    PullCorrupt,
    PullFound,
    PullNotFound,
    PullOffsetMoved,
    PullRefused,
    PullRequest,
    PullRetry,
    decode_offset,
    decode_pull_answer,
)
from protocol.remoting import Frame, Header
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.rocketmq_v2 import service_pb2 as rpc
from remoting.client import ConnectionPool

log = structlog.get_logger(__name__)

__all__ = ["PullFront", "pulled_message"]

_TIMEOUT_S: Final = 5.0
"""Each request to the broker, beyond a pull's long polling."""
DEFAULT_BATCH: Final = 32
"""A PullMessage's batch when it names none (the broker caps it at ``max_pull_batch``)."""

_PULL_CODES: Final[dict[int, int]] = {
    ResponseCode.TOPIC_NOT_EXIST: pb.TOPIC_NOT_FOUND,
    ResponseCode.QUEUE_NOT_EXIST: pb.BAD_REQUEST,
    ResponseCode.NO_PERMISSION: pb.FORBIDDEN,
    ResponseCode.SQL_FILTER_DISABLED: pb.UNSUPPORTED,
}


def _status(code: int, message: str) -> pb.Status:
    return pb.Status(code=code, message=message)  # type: ignore[arg-type]


def pulled_message(record: MessageRecord, group: str) -> pb.Message:
    """A pulled record as the clients read it: what a received one carries (topic, body and
    digest, ids, tag, keys, message group, times and hosts, queue and offset, properties)
    without the POP's receipt handle and invisible duration; delivery attempt 1."""
    out = delivery.received_message(record, group, "", 1, 0)
    out.system_properties.ClearField("invisible_duration")
    return out


def _queue(mq: pb.MessageQueue, broker_name: str) -> tuple[str, int]:
    """The topic and queue id a request names; :class:`Refused` when it cannot be served here."""
    no_namespace(mq.topic, "topic")
    if not mq.topic.name:
        raise Refused(pb.ILLEGAL_TOPIC, "topic is empty")
    if mq.id < 0:
        raise Refused(pb.BAD_REQUEST, f"queue id {mq.id} is negative")
    named = mq.broker.name
    if named and broker_name and named != broker_name:
        raise Refused(
            pb.BAD_REQUEST,
            f"queue of broker group {named} asked at an endpoint of broker group {broker_name}: "
            "ask one of the endpoints the route lists for it",
        )
    return mq.topic.name, mq.id


class PullFront:
    """The pull consumer RPCs of one broker's gRPC endpoint. Loop thread only."""

    def __init__(
        self,
        pool: ConnectionPool,
        local_address: str,
        master_address: Callable[[], str],
        broker_name: str,
    ) -> None:
        self.pool = pool
        self.local_address = local_address
        self.master_address = master_address
        """The remoting address of this broker group's master ("" while there is none)."""
        self.broker_name = broker_name

    async def _read(self, code: int, header: Header, timeout: float = _TIMEOUT_S) -> Frame:
        """A read at the group's master; at this broker while the group has none, or when the
        master does not answer (dead before the controllers elected another)."""
        master = self.master_address()
        if master and master != self.local_address:
            try:
                return await forward(self.pool, master, code, header, None, timeout)
            except Refused as exc:
                log.info(
                    "grpc: master unreachable, read from this broker",
                    master=master,
                    code=code,
                    error=exc.message,
                )
        return await forward(self.pool, self.local_address, code, header, None, timeout)

    async def _offset(self, code: int, header: Header) -> int:
        resp = await self._read(code, header)
        if resp.code != ResponseCode.SUCCESS:
            raise Refused(status_code(resp.code), resp.remark or f"refused ({resp.code})")
        try:
            return decode_offset(resp)
        except AnswerError as exc:
            raise Refused(pb.INTERNAL_ERROR, f"offset answer: {exc}") from None

    # -- PullMessage ------------------------------------------------------------------------------
    async def pull(
        self, request: rpc.PullMessageRequest, context: Any
    ) -> AsyncIterator[rpc.PullMessageResponse]:
        """The answer stream: a status, the messages, and the next offset."""
        try:
            group = delivery.check_group(request.group)
            topic, queue_id = _queue(request.message_queue, self.broker_name)
            if request.offset < 0:
                raise Refused(pb.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
            if request.batch_size < 0:
                raise Refused(pb.BAD_REQUEST, f"batch size {request.batch_size} is negative")
            kind, expression = delivery.filter_expression(request.filter_expression)
            poll_ms = delivery.millis(request.long_polling_timeout)
            if poll_ms < 0:
                raise Refused(pb.ILLEGAL_POLLING_TIME, "long polling timeout is negative")
            remaining = context.time_remaining()
            if remaining is not None:  # answer before the client's deadline passes
                poll_ms = max(0, min(poll_ms, int(remaining * 1000) - 1000))
            ask = PullRequest(
                group=group,
                topic=topic,
                queue_id=queue_id,
                offset=request.offset,
                max_count=request.batch_size or DEFAULT_BATCH,
                suspend_ms=poll_ms,
                subscription=expression,
                filter_type=kind,
            )
            resp = await self._read(ask.code, ask.header(), poll_ms / 1000 + _TIMEOUT_S)
            status, messages, next_offset = self._pulled(resp, ask)
        except Refused as exc:
            yield rpc.PullMessageResponse(status=_status(exc.code, exc.message))
            return
        yield rpc.PullMessageResponse(status=status)
        for message in messages:
            yield rpc.PullMessageResponse(message=message)
        yield rpc.PullMessageResponse(next_offset=next_offset)

    def _pulled(self, resp: Frame, ask: PullRequest) -> tuple[pb.Status, list[pb.Message], int]:
        try:
            answer = decode_pull_answer(resp)
        except AnswerError as exc:
            raise Refused(pb.INTERNAL_ERROR, f"pull answer: {exc}") from None
        if isinstance(answer, PullFound):
            try:
                messages = [pulled_message(r, ask.group) for r in iter_records(answer.body)]
            except RecordError as exc:
                raise Refused(pb.INTERNAL_ERROR, f"pull answer does not decode: {exc}") from None
            if not messages:  # a tag filter passed over every entry it read
                return _status(pb.MESSAGE_NOT_FOUND, "no matching message"), [], answer.next_offset
            return _status(pb.OK, "OK"), messages, answer.next_offset
        if isinstance(answer, PullNotFound):
            nxt = ask.offset if answer.next_offset is None else answer.next_offset
            return _status(pb.MESSAGE_NOT_FOUND, "no new message"), [], nxt
        if isinstance(answer, PullRetry):
            return _status(pb.MESSAGE_NOT_FOUND, "no message yet, pull again"), [], ask.offset
        if isinstance(answer, PullOffsetMoved):
            why = answer.remark or f"offset {ask.offset} is outside the queue"
            return _status(pb.ILLEGAL_OFFSET, why), [], answer.next_offset
        if isinstance(answer, PullCorrupt):
            why = answer.reason(ask.topic, ask.queue_id, ask.offset)
            raise Refused(pb.MESSAGE_CORRUPTED, why)
        assert isinstance(answer, PullRefused)
        code = _PULL_CODES.get(answer.code, status_code(answer.code))
        raise Refused(code, answer.remark or f"pull refused ({answer.code})")

    # -- offsets ----------------------------------------------------------------------------------
    async def update_offset(self, request: rpc.UpdateOffsetRequest) -> rpc.UpdateOffsetResponse:
        """The group's committed offset, at the master (a slave's copy is overwritten by the
        next sync from its master, so a commit there would be lost)."""
        try:
            group = delivery.check_group(request.group)
            topic, queue_id = _queue(request.message_queue, self.broker_name)
            if request.offset < 0:
                raise Refused(pb.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
            master = self.master_address()
            if not master:
                raise Refused(
                    pb.HA_NOT_AVAILABLE,
                    f"broker group {self.broker_name} has no master right now: commit again",
                )
            ask = ConsumerOffsetUpdate(
                group=group, topic=topic, queue_id=queue_id, offset=request.offset
            )
            resp = await forward(self.pool, master, ask.code, ask.header(), None, _TIMEOUT_S)
            if resp.code != ResponseCode.SUCCESS:
                raise Refused(status_code(resp.code), resp.remark or f"refused ({resp.code})")
        except Refused as exc:
            return rpc.UpdateOffsetResponse(status=_status(exc.code, exc.message))
        return rpc.UpdateOffsetResponse(status=_status(pb.OK, "OK"))

    async def get_offset(self, request: rpc.GetOffsetRequest) -> rpc.GetOffsetResponse:
        try:
            group = delivery.check_group(request.group)
            topic, queue_id = _queue(request.message_queue, self.broker_name)
            ask = ConsumerOffsetQuery(group=group, topic=topic, queue_id=queue_id)
            resp = await self._read(ask.code, ask.header())
            if resp.code == ResponseCode.QUERY_NOT_FOUND:
                why = f"group {group} committed no offset on {topic}:{queue_id}"
                return rpc.GetOffsetResponse(status=_status(pb.OFFSET_NOT_FOUND, why))
            if resp.code != ResponseCode.SUCCESS:
                raise Refused(status_code(resp.code), resp.remark or f"refused ({resp.code})")
            try:
                offset = decode_offset(resp)
            except AnswerError as exc:
                raise Refused(pb.INTERNAL_ERROR, f"offset answer: {exc}") from None
        except Refused as exc:
            return rpc.GetOffsetResponse(status=_status(exc.code, exc.message))
        return rpc.GetOffsetResponse(status=_status(pb.OK, "OK"), offset=offset)

    async def query_offset(self, request: rpc.QueryOffsetRequest) -> rpc.QueryOffsetResponse:
        """BEGINNING: the queue's first retained offset; END: its end as consumers may read it
        (up to the confirm offset); TIMESTAMP: the first offset stored at or after it."""
        try:
            topic, queue_id = _queue(request.message_queue, self.broker_name)
            policy = request.query_offset_policy
            ask: MinOffsetQuery | MaxOffsetQuery | OffsetSearch
            if policy == pb.BEGINNING:
                ask = MinOffsetQuery(topic=topic, queue_id=queue_id)
            elif policy == pb.END:
                ask = MaxOffsetQuery(topic=topic, queue_id=queue_id, committed=True)
            elif policy == pb.TIMESTAMP:
                if not request.HasField("timestamp"):
                    raise Refused(pb.BAD_REQUEST, "policy TIMESTAMP needs a timestamp")
                ts = request.timestamp
                ms = int(ts.seconds) * 1000 + int(ts.nanos) // 1_000_000
                ask = OffsetSearch(topic=topic, queue_id=queue_id, timestamp=ms)
            else:
                raise Refused(pb.BAD_REQUEST, f"unknown query offset policy {policy}")
            offset = await self._offset(ask.code, ask.header())
        except Refused as exc:
            return rpc.QueryOffsetResponse(status=_status(exc.code, exc.message))
        return rpc.QueryOffsetResponse(status=_status(pb.OK, "OK"), offset=offset)
