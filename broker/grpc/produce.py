"""The producer's RPCs of the gRPC endpoint: SendMessage, EndTransaction, RecallMessage.

* SendMessage: its messages (:func:`broker.grpc.translate.send_request`: FIFO through
  ``__SHARDINGKEY``, delay through ``__STARTDELIVERTIME``, a transaction as a half message of
  producer group ``GRPC_TX_<topic>``) are one send, all or nothing, as SEND_BATCH_MESSAGE is:
  one topic, one type and one message group for all of them, every entry answered with the same
  status. When this broker is its group's master, the send service is called in-process
  (:mod:`broker.grpc.here`: the code the remoting processor runs, with its checks, metrics and
  durability wait); otherwise the send goes to the master as SEND_MESSAGE (10) for one message,
  SEND_BATCH_MESSAGE (320) for more (their born host is then this broker).

EndTransaction and RecallMessage call the broker's own code in-process too when this broker is
the master (of the recall handle's group, for a recall): the functions END_TRANSACTION's and
RECALL_MESSAGE's processors call, then the same durability wait. Otherwise they become the
broker's own remoting requests to the master:

* EndTransaction -> END_TRANSACTION (37) with the half's offset from the transaction id the send
  answered;
* RecallMessage -> RECALL_MESSAGE to the master of the broker group the recall handle names
  (the access point the client asks may be any broker).

A slave's endpoint hands writes to its master the same way: the clients list every broker of a
group as its endpoints, so they keep sending through a failover without a new route. A write
that cannot reach the master waits for the group's next master (:mod:`broker.grpc.to_master`:
this broker itself, or another; sent again only when it never reached the old one).
"""

from __future__ import annotations

import time
from typing import Any

import msgpack
import structlog

from broker.durable_wait import wait_durable
from broker.grpc.here import Here
from broker.grpc.to_master import NOT_THE_MASTER, MasterWatch, NotDone, at_master
from broker.grpc.translate import (
    Refused,
    SendRequest,
    Unreached,
    half_offset_of,
    no_namespace,
    parse_recall_handle,
    recall_handle,
    send_request,
    status_code,
    transaction_group,
)
from broker.send.service import SendRefused, SendService
from broker.timer.recall import RecallError
from broker.transaction.ending import EndRefused
from protocol.broker_requests.recall import RecallRequest
from protocol.broker_requests.send import SendAnswer, SendBatchAnswer, SendBatchRequest
from protocol.broker_requests.transaction import EndTransaction
from protocol.codes import ResponseCode
from protocol.controller_requests.topics import RouteQuery
from protocol.fields import FieldError
from protocol.remoting import Frame, Scalar
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.rocketmq_v2 import service_pb2 as rpc
from protocol.transaction import COMMIT_TYPE, NOT_TYPE, ROLLBACK_TYPE
from remoting.client import ConnectionPool
from remoting.errors import RemotingError, ResponseError
from remoting.failover import AddressFailover, describe_failure
from storage.store import PutResult

log = structlog.get_logger(__name__)

_RESOLUTIONS = {
    pb.COMMIT: COMMIT_TYPE,
    pb.ROLLBACK: ROLLBACK_TYPE,
    pb.TRANSACTION_RESOLUTION_UNSPECIFIED: NOT_TYPE,
}


def status(code: int, message: str = "") -> pb.Status:
    return pb.Status(code=code, message=message)  # type: ignore[arg-type]


class Publisher:
    """SendMessage, EndTransaction and RecallMessage of one broker's gRPC endpoint."""

    def __init__(
        self,
        pool: ConnectionPool,
        routes: AddressFailover,
        broker_name: str,
        max_body_bytes: int,
        watch: MasterWatch,
        here: Here | None = None,
    ) -> None:
        """``watch``: the group's master, also through a failover. ``here``: this broker's
        services, called in-process while it is the master (None: every send goes over the
        network)."""
        self.pool = pool
        self.routes = routes
        self.broker_name = broker_name
        self.max_body_bytes = max_body_bytes
        self.here = here
        self.watch = watch
        self.in_process = 0
        """SendMessage requests served by calling the send service in-process."""
        self.forwarded = 0
        """SendMessage requests sent to the master over the network."""

    async def _request(
        self, code: int, header: dict[str, Scalar], body: bytes | None, address: str
    ) -> Frame:
        """``code`` to ``address``; raises :class:`Unreached` when no answer came and
        :class:`NotDone` when the broker there is not the master (it did nothing)."""
        try:
            conn = await self.pool.get(address)
            resp = await conn.request(code, header, body)
        except RemotingError as exc:
            self.pool.drop(address)
            raise Unreached(address, exc) from None
        if resp.code in NOT_THE_MASTER:
            raise NotDone(f"{address}: {resp.remark or 'not the master'}")
        return resp

    # -- SendMessage ---------------------------------------------------------------------------
    async def send(
        self, request: rpc.SendMessageRequest, peer: str, time_remaining: float | None = None
    ) -> rpc.SendMessageResponse:
        """The request's messages as one send, all or nothing: every entry answers the same
        status (the first refusal when one is refused, and then nothing is stored).
        ``time_remaining``: what is left of the call's deadline (seconds; None: none), which
        bounds a wait for the group's next master."""
        count = len(request.messages)
        if not count:
            return rpc.SendMessageResponse(status=status(pb.BAD_REQUEST, "no message to send"))
        try:
            sends = [send_request(m, peer, self.max_body_bytes) for m in request.messages]
            if count > 1:
                _one_batch(sends)
        except Refused as exc:
            return self._refused(request, status(exc.code, exc.message))
        here = self.here

        async def in_process() -> rpc.SendMessageResponse:
            assert here is not None
            self.in_process += 1
            return await self._send_here(here.sends, sends, request)

        async def remote(address: str) -> rpc.SendMessageResponse:
            self.forwarded += 1
            return await self._forward(sends, request, address)

        deadline = self.watch.deadline(time_remaining)
        try:
            return await at_master(
                self.watch, deadline, remote, None if here is None else in_process, "send"
            )
        except Refused as exc:
            return self._refused(request, status(exc.code, exc.message))

    async def _send_here(
        self, service: SendService, sends: list[SendRequest], request: rpc.SendMessageRequest
    ) -> rpc.SendMessageResponse:
        """This broker is the master: the send service in-process, the one the remoting
        processor calls (every check, metric, wait, timer admission and half message alike)."""
        start = time.perf_counter()
        try:
            result = service.put(sends[0].message.topic, -1, [s.message for s in sends])
            await service.durable(result, start)
        except SendRefused as refused:
            return self._refused(request, status(status_code(refused.code), refused.remark))
        make_id = service.msg_id
        ids = [make_id(offset) for offset in result.physical_offsets]
        return _sent(sends, ids, result.first_queue_offset, service.broker_name)

    async def _forward(
        self, sends: list[SendRequest], request: rpc.SendMessageRequest, address: str
    ) -> rpc.SendMessageResponse:
        """A slave's endpoint: SEND_MESSAGE (one message) or SEND_BATCH_MESSAGE to the master at
        ``address``; :class:`Unreached` or :class:`NotDone` as :meth:`_request` says."""
        if len(sends) == 1:
            wire = sends[0].wire
            resp = await self._request(wire.code, *wire.encode(), address)
        else:
            batch = SendBatchRequest(
                topic=sends[0].message.topic, messages=tuple(s.message for s in sends)
            )
            resp = await self._request(batch.code, *batch.encode(), address)
        if resp.code != ResponseCode.SUCCESS:
            remark = resp.remark
            return self._refused(request, status(status_code(resp.code), remark))
        try:
            if len(sends) == 1:
                one_answer = SendAnswer.parse(resp.header)
                ids = [one_answer.msg_id]
                first, broker = one_answer.queue_offset, one_answer.broker_name
            else:
                answer = SendBatchAnswer.parse(resp.header, resp.body)
                ids = list(answer.msg_ids)
                first, broker = answer.queue_offset, answer.broker_name
        except FieldError as exc:
            why = status(pb.INTERNAL_ERROR, f"the master's send answer: {exc}")
            return self._refused(request, why)
        if len(ids) != len(sends):
            why = status(pb.INTERNAL_ERROR, "the master answered a wrong number of message ids")
            return self._refused(request, why)
        return _sent(sends, ids, first, broker)

    @staticmethod
    def _refused(request: rpc.SendMessageRequest, why: pb.Status) -> rpc.SendMessageResponse:
        entries = [
            rpc.SendResultEntry(status=why, message_id=m.system_properties.message_id)
            for m in request.messages
        ]
        return rpc.SendMessageResponse(status=why, entries=entries)

    # -- EndTransaction --------------------------------------------------------------------------
    async def end_transaction(
        self, request: rpc.EndTransactionRequest, time_remaining: float | None = None
    ) -> rpc.EndTransactionResponse:
        topic = request.topic.name
        try:
            if not topic:
                raise Refused(pb.ILLEGAL_TOPIC, "topic is empty")
            no_namespace(request.topic, "topic")
            if not request.message_id:
                raise Refused(pb.ILLEGAL_MESSAGE_ID, "message_id is empty")
            offset = half_offset_of(request.transaction_id)
        except Refused as exc:
            return rpc.EndTransactionResponse(status=status(exc.code, exc.message))
        ask = EndTransaction(
            group=transaction_group(topic),
            transaction_id=request.message_id,
            offset=offset,
            commit_or_rollback=_RESOLUTIONS.get(request.resolution, NOT_TYPE),
            from_check=request.source == pb.SOURCE_SERVER_CHECK,
        )
        here = self.here

        async def in_process() -> pb.Status:
            assert here is not None
            try:
                ended = here.end_transaction(ask)
            except EndRefused as refused:
                return status(status_code(refused.code), refused.remark)
            return await _durable(here, ended.result)

        async def remote(address: str) -> pb.Status:
            resp = await self._request(ask.code, *ask.encode(), address)
            if resp.code != ResponseCode.SUCCESS:
                return status(status_code(resp.code), resp.remark)
            return status(pb.OK)

        deadline = self.watch.deadline(time_remaining)
        try:
            done = await at_master(
                self.watch,
                deadline,
                remote,
                None if here is None else in_process,
                "end of transaction",
                repeatable=True,  # a repeat finds it resolved (broker/grpc/to_master.py)
            )
        except Refused as exc:
            done = status(exc.code, exc.message)
        return rpc.EndTransactionResponse(status=done)

    # -- RecallMessage ---------------------------------------------------------------------------
    async def recall(
        self, request: rpc.RecallMessageRequest, time_remaining: float | None = None
    ) -> rpc.RecallMessageResponse:
        topic = request.topic.name
        try:
            if not topic:
                raise Refused(pb.ILLEGAL_TOPIC, "topic is empty")
            no_namespace(request.topic, "topic")
            broker_name, msg_id = parse_recall_handle(request.recall_handle)
            recall = RecallRequest(topic=topic, msg_id=msg_id)

            async def remote(address: str) -> rpc.RecallMessageResponse:
                resp = await self._request(recall.code, *recall.encode(), address)
                if resp.code != ResponseCode.SUCCESS:
                    why = status(status_code(resp.code), resp.remark)
                    return rpc.RecallMessageResponse(status=why)
                return rpc.RecallMessageResponse(status=status(pb.OK), message_id=msg_id)

            if broker_name != self.broker_name:  # another group's master, as the route says
                address = await self._master_of(topic, broker_name)
                try:
                    return await remote(address)
                except NotDone as exc:
                    raise Refused(pb.HA_NOT_AVAILABLE, exc.why) from None
            here = self.here

            async def in_process() -> rpc.RecallMessageResponse:
                assert here is not None
                return await self._recall_here(here, topic, msg_id)

            deadline = self.watch.deadline(time_remaining)
            return await at_master(
                self.watch, deadline, remote, None if here is None else in_process, "recall"
            )
        except Refused as exc:
            return rpc.RecallMessageResponse(status=status(exc.code, exc.message))

    @staticmethod
    async def _recall_here(here: Here, topic: str, msg_id: str) -> rpc.RecallMessageResponse:
        """This broker is the master of the handle's group: the timer's recall in-process, the
        one RECALL_MESSAGE's processor calls."""
        try:
            result = here.recall(topic, msg_id)
        except RecallError as refused:
            why = status(status_code(refused.code), refused.remark)
            return rpc.RecallMessageResponse(status=why)
        done = await _durable(here, result)
        if done.code != pb.OK:
            return rpc.RecallMessageResponse(status=done)
        return rpc.RecallMessageResponse(status=done, message_id=msg_id)

    async def _master_of(self, topic: str, broker_name: str) -> str:
        try:
            ask = RouteQuery(topic=topic)
            frame = await self.routes.call(ask.code, *ask.encode())
            route: Any = msgpack.unpackb(frame.body or b"", raw=False)
            for b in route.get("brokers") or ():
                if b.get("brokerName") == broker_name and b.get("masterAddress"):
                    return str(b["masterAddress"])
        except ResponseError as exc:
            raise Refused(status_code(exc.code), str(exc)) from None
        except (RemotingError, ValueError, TypeError, AttributeError) as exc:
            raise Refused(
                pb.INTERNAL_ERROR, f"route unavailable: {describe_failure(exc)}"
            ) from None
        raise Refused(
            pb.NOT_FOUND, f"broker group {broker_name} of topic {topic} has no master right now"
        )


async def _durable(here: Here, result: PutResult | None) -> pb.Status:
    """OK once ``result`` (None: nothing written) is as durable as a send must be, else why
    not (:func:`broker.durable_wait.wait_durable`, the wait every writer answers after)."""
    if result is not None:
        code, remark = await wait_durable(here.durability, result)
        if code != ResponseCode.SUCCESS:
            return status(status_code(code), remark)
    return status(pb.OK)


def _one_batch(sends: list[SendRequest]) -> None:
    """:class:`Refused` unless the messages can be stored as one batch: one topic, one type,
    one message group (what the official clients send together)."""
    first = sends[0]
    for other in sends[1:]:
        if other.message.topic != first.message.topic:
            raise Refused(
                pb.BAD_REQUEST,
                "the messages of one SendMessage are stored as one batch: they must have one "
                f"topic, not {first.message.topic!r} and {other.message.topic!r}",
            )
        if other.kind != first.kind:
            raise Refused(
                pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                "the messages of one SendMessage are stored as one batch: they must have one "
                f"type, not {pb.MessageType.Name(first.kind)} and "
                f"{pb.MessageType.Name(other.kind)}",
            )
        if other.group != first.group:
            raise Refused(
                pb.ILLEGAL_MESSAGE_GROUP,
                "the messages of one SendMessage are stored as one batch: they must have one "
                f"message group, not {first.group!r} and {other.group!r}",
            )


def _sent(
    sends: list[SendRequest], ids: list[str], first_offset: int, broker_name: str
) -> rpc.SendMessageResponse:
    """Every entry OK: its message id, its queue offset (the batch's first plus its place;
    -1 for a scheduled message, which has none until delivered), the transaction id of a half
    message, the recall handle of a scheduled one. A batch of delay messages of which some were
    due already (stored at once) has offset -1 and a recall handle in every entry: recalling
    one stored at once is refused."""
    entries = []
    scheduled = first_offset < 0 or (len(sends) > 1 and sends[0].kind == pb.DELAY)
    for i, (send, msg_id) in enumerate(zip(sends, ids, strict=True)):
        entry = rpc.SendResultEntry(
            status=status(pb.OK),
            message_id=send.message_id,
            offset=-1 if scheduled else first_offset + i,
        )
        if send.kind == pb.TRANSACTION:
            entry.transaction_id = msg_id
        elif send.kind == pb.DELAY and scheduled:  # recallable until due
            entry.recall_handle = recall_handle(broker_name, msg_id)
        entries.append(entry)
    return rpc.SendMessageResponse(status=status(pb.OK), entries=entries)
