"""The producer's RPCs of the gRPC endpoint: SendMessage, EndTransaction, RecallMessage.

Each becomes the broker's own remoting request to the master of this broker's group (this
broker itself when it is the master, over a loopback connection), so every check, wait and
metric of the remoting path applies unchanged:

* SendMessage -> SEND_MESSAGE (10), one per message (:func:`broker.grpc.translate.send_request`:
  FIFO through ``__SHARDINGKEY``, delay through ``__STARTDELIVERTIME``, a transaction as a half
  message of producer group ``GRPC_TX_<topic>``);
* EndTransaction -> END_TRANSACTION (37) with the half's offset from the transaction id the send
  answered;
* RecallMessage -> RECALL_MESSAGE to the master of the broker group the recall handle names
  (the access point the client asks may be any broker).

A slave's endpoint hands writes to its master the same way: the clients list every broker of a
group as its endpoints, so they keep sending through a failover without a new route.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack
import structlog

from broker.grpc.translate import (
    Refused,
    half_offset_of,
    no_namespace,
    parse_recall_handle,
    recall_handle,
    send_request,
    status_code,
    transaction_group,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.controller_requests.topics import RouteQuery
from protocol.remoting import Frame, Scalar
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.rocketmq_v2 import service_pb2 as rpc
from protocol.transaction import COMMIT_TYPE, NOT_TYPE, ROLLBACK_TYPE
from remoting.client import ConnectionPool
from remoting.errors import RemotingError, ResponseError
from remoting.failover import AddressFailover, describe_failure

log = structlog.get_logger(__name__)

_RESOLUTIONS = {
    pb.COMMIT: COMMIT_TYPE,
    pb.ROLLBACK: ROLLBACK_TYPE,
    pb.TRANSACTION_RESOLUTION_UNSPECIFIED: NOT_TYPE,
}


def status(code: int, message: str = "") -> pb.Status:
    return pb.Status(code=code, message=message)  # type: ignore[arg-type]


class _NoMaster(Exception):
    pass


class Publisher:
    """SendMessage, EndTransaction and RecallMessage of one broker's gRPC endpoint."""

    def __init__(
        self,
        pool: ConnectionPool,
        routes: AddressFailover,
        master_address: Callable[[], str],
        broker_name: str,
        max_body_bytes: int,
    ) -> None:
        self.pool = pool
        self.routes = routes
        self.master_address = master_address
        """The remoting address of this broker group's master ("" while there is none)."""
        self.broker_name = broker_name
        self.max_body_bytes = max_body_bytes

    async def _request(
        self, code: int, header: dict[str, Scalar], body: bytes | None, address: str = ""
    ) -> Frame:
        """``code`` to ``address`` (default: this group's master); raises RemotingError."""
        target = address or self.master_address()
        if not target:
            raise _NoMaster(f"broker group {self.broker_name} has no master right now")
        try:
            conn = await self.pool.get(target)
            return await conn.request(code, header, body)
        except RemotingError:
            self.pool.drop(target)
            raise

    @staticmethod
    def _unavailable(exc: Exception) -> pb.Status:
        if isinstance(exc, _NoMaster):
            return status(pb.HA_NOT_AVAILABLE, str(exc))
        return status(pb.INTERNAL_ERROR, f"master unavailable: {describe_failure(exc)}")

    # -- SendMessage ---------------------------------------------------------------------------
    async def send(self, request: rpc.SendMessageRequest, peer: str) -> rpc.SendMessageResponse:
        if not request.messages:
            return rpc.SendMessageResponse(status=status(pb.BAD_REQUEST, "no message to send"))
        entries = [await self._send_one(m, peer) for m in request.messages]
        first = entries[0].status
        if any(e.status.code != first.code for e in entries):
            first = status(pb.MULTIPLE_RESULTS, "the messages had different results")
        return rpc.SendMessageResponse(status=first, entries=entries)

    async def _send_one(self, msg: pb.Message, peer: str) -> rpc.SendResultEntry:
        try:
            send = send_request(msg, peer, self.max_body_bytes)
        except Refused as exc:
            return rpc.SendResultEntry(
                status=status(exc.code, exc.message),
                message_id=msg.system_properties.message_id,
            )
        try:
            resp = await self._request(RequestCode.SEND_MESSAGE, dict(send.header), send.body)
        except (RemotingError, _NoMaster) as exc:
            return rpc.SendResultEntry(status=self._unavailable(exc), message_id=send.message_id)
        if resp.code != ResponseCode.SUCCESS:
            remark = resp.header.get("remark")
            return rpc.SendResultEntry(
                status=status(status_code(resp.code), str(remark or "")),
                message_id=send.message_id,
            )
        h = resp.header
        offset = h.get("queueOffset")
        msg_id = str(h.get("msgId") or "")
        entry = rpc.SendResultEntry(
            status=status(pb.OK),
            message_id=send.message_id,
            offset=offset if isinstance(offset, int) else -1,
        )
        if send.kind == pb.TRANSACTION:
            entry.transaction_id = msg_id
        elif send.kind == pb.DELAY and entry.offset < 0:  # scheduled: recallable until due
            entry.recall_handle = recall_handle(str(h.get("brokerName") or ""), msg_id)
        return entry

    # -- EndTransaction --------------------------------------------------------------------------
    async def end_transaction(
        self, request: rpc.EndTransactionRequest
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
        header: dict[str, Scalar] = {
            "producerGroup": transaction_group(topic),
            "transactionId": request.message_id,
            "commitLogOffset": offset,
            "commitOrRollback": _RESOLUTIONS.get(request.resolution, NOT_TYPE),
            "fromTransactionCheck": request.source == pb.SOURCE_SERVER_CHECK,
        }
        try:
            resp = await self._request(RequestCode.END_TRANSACTION, header, None)
        except (RemotingError, _NoMaster) as exc:
            return rpc.EndTransactionResponse(status=self._unavailable(exc))
        if resp.code != ResponseCode.SUCCESS:
            remark = str(resp.header.get("remark") or "")
            return rpc.EndTransactionResponse(status=status(status_code(resp.code), remark))
        return rpc.EndTransactionResponse(status=status(pb.OK))

    # -- RecallMessage ---------------------------------------------------------------------------
    async def recall(self, request: rpc.RecallMessageRequest) -> rpc.RecallMessageResponse:
        topic = request.topic.name
        try:
            if not topic:
                raise Refused(pb.ILLEGAL_TOPIC, "topic is empty")
            no_namespace(request.topic, "topic")
            broker_name, msg_id = parse_recall_handle(request.recall_handle)
            address = (
                self.master_address()
                if broker_name == self.broker_name
                else await self._master_of(topic, broker_name)
            )
        except Refused as exc:
            return rpc.RecallMessageResponse(status=status(exc.code, exc.message))
        header: dict[str, Scalar] = {"topic": topic, "msgId": msg_id}
        try:
            resp = await self._request(RequestCode.RECALL_MESSAGE, header, None, address)
        except (RemotingError, _NoMaster) as exc:
            return rpc.RecallMessageResponse(status=self._unavailable(exc))
        if resp.code != ResponseCode.SUCCESS:
            remark = str(resp.header.get("remark") or "")
            return rpc.RecallMessageResponse(status=status(status_code(resp.code), remark))
        return rpc.RecallMessageResponse(status=status(pb.OK), message_id=msg_id)

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
