"""POP consumption over gRPC: ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue, QueryAssignment, and the consumer side of Heartbeat,
NotifyClientTermination and Telemetry (docs/protocol.md, "POP consumption over gRPC").

Each RPC becomes the broker's own requests (POP_MESSAGE, BATCH_ACK_MESSAGE,
CHANGE_MESSAGE_INVISIBLETIME, CONSUMER_SEND_MSG_BACK, HEART_BEAT, UNREGISTER_CLIENT,
GET_SUBSCRIPTIONGROUP_CONFIG) to this broker group's master (this broker itself, over a loopback
connection, when it is the master; a slave's endpoint hands them to its master), so every
check, wait and metric of the remoting path applies. A receive's POP (with its long polling),
acks and changes of invisible time (also those of a renewal, a hand-back and a forward to the
DLQ) call :mod:`broker.pop.receive` and :mod:`broker.pop.acks` in-process instead when this
broker is the master: the code the POP processor calls, then the same durability wait. Checking and translating is in
:mod:`broker.grpc.delivery`, the consumers this endpoint knows in :mod:`broker.grpc.consumers`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Final, TypeVar

import msgpack
import structlog
from google.protobuf.timestamp_pb2 import Timestamp

from broker.durable_wait import wait_durable
from broker.grpc import delivery
from broker.grpc.consumers import Clients, GrpcClient, Held, RenewTable, grpc_client
from broker.grpc.here import Here
from broker.grpc.telemetry import client_id_of
from broker.grpc.to_master import NOT_THE_MASTER, MasterWatch, NotDone, at_master
from broker.grpc.translate import Refused, forward, no_namespace, status_code
from broker.pop.acks import HandleRefused, ack_batch, ack_one, change_invisible
from broker.pop.message import PopMessage
from broker.pop.receive import NOT_DURABLE, PopDenied, Popped, pop_messages
from protocol.broker_requests.clients import POP, Heartbeat, UnregisterClient
from protocol.broker_requests.pop import (
    AckRequest,
    BatchAckAnswer,
    BatchAckRequest,
    ChangeInvisibleRequest,
    InvisibleChanged,
    PopFound,
    PopRequest,
)
from protocol.broker_requests.send_back import SendBack
from protocol.broker_requests.subscription_groups import SubscriptionGroupQuery
from protocol.codes import ResponseCode
from protocol.fields import FieldError
from protocol.message import MessageRecord, RecordError, decode_record, iter_records
from protocol.pop import HandleError, peek_handle
from protocol.pull import AnswerError, PullFound, PullRequest, decode_pull_answer
from protocol.remoting import Frame, Header
from protocol.retry import RetryConfigError, SubscriptionGroupConfig, config_from_dict
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.rocketmq_v2 import service_pb2 as rpc
from remoting.client import ConnectionPool
from storage.store import PutResult

log = structlog.get_logger(__name__)

_T = TypeVar("_T")

_TIMEOUT_S: Final = 5.0
"""Each request to the broker, beyond a receive's long polling."""
_TICK_S: Final = 1.0
_HANDED_BACK_INVISIBLE_MS: Final = delivery.MIN_INVISIBLE_MS
"""What messages nobody will handle are hidden for (a terminated push consumer's held ones, a
cancelled receive's): they come back to the group at once."""


def _status(code: int, message: str) -> pb.Status:
    return pb.Status(code=code, message=message)  # type: ignore[arg-type]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _handle_refused(code: int, remark: str, what: str) -> Refused:
    """An ack's or a change's refusal (the broker's response code) as the client's status."""
    return Refused(
        delivery.handle_code(code, status_code(code)), remark or f"{what} refused ({code})"
    )


def _pop_refused(code: int, remark: str) -> Refused:
    """A POP's refusal (the broker's response code) as the client's status."""
    codes: dict[int, int] = {
        ResponseCode.TOPIC_NOT_EXIST: pb.TOPIC_NOT_FOUND,
        ResponseCode.NO_PERMISSION: pb.FORBIDDEN,
        ResponseCode.QUEUE_NOT_EXIST: pb.BAD_REQUEST,
        ResponseCode.SQL_FILTER_DISABLED: pb.UNSUPPORTED,
    }
    return Refused(codes.get(code, status_code(code)), remark)


async def _durable(here: Here, result: PutResult | None, what: str) -> None:
    """Once ``result`` (None: nothing written) is as durable as a send must be; else
    :class:`Refused`, as the remoting answer's error would be."""
    if result is not None:
        code, remark = await wait_durable(here.durability, result)
        if code != ResponseCode.SUCCESS:
            raise _handle_refused(code, remark, what)


@dataclass(slots=True)
class _Popped:
    """The messages one receive popped, until its answer is written whole."""

    group: str
    handles: list[str]
    written: bool = False


class ConsumeService:
    """The consumer RPCs of one broker's gRPC endpoint. Loop thread only."""

    def __init__(
        self,
        pool: ConnectionPool,
        local_address: str,
        master_address: Callable[[], str],
        broker_name: str,
        here: Here | None = None,
        watch: MasterWatch | None = None,
    ) -> None:
        """``here``: this broker's services; acks and changes of invisible time call them
        in-process while it is the master (None: every request goes over the network).
        ``watch``: the group's master through a failover (None: ``master_address`` alone)."""
        self.pool = pool
        self.local_address = local_address
        self.master_address = master_address
        """The remoting address of this broker group's master ("" while there is none)."""
        self.broker_name = broker_name
        self.here = here
        self.watch = watch or MasterWatch.of_address(master_address, local_address)
        self.in_process = 0
        """Receives, acks and changes of invisible time served in-process."""
        self.clients = Clients()
        self.held = RenewTable()
        self._locks: dict[str, asyncio.Lock] = {}
        self._task: asyncio.Task[None] | None = None
        self._chores: set[asyncio.Future[None]] = set()

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def _started(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._tend(), name="grpc-consumers")

    # -- requests to the broker ------------------------------------------------------------------
    async def _call(
        self,
        code: int,
        header: Header,
        body: bytes | None = None,
        timeout: float = _TIMEOUT_S,
        deadline: float = 0.0,
    ) -> Frame:
        """``code`` at this broker group's master (this broker when it is the master), waiting
        until ``deadline`` (monotonic; 0: not at all) for the next master when the request could
        not reach it (:func:`broker.grpc.to_master.at_master`)."""
        return await at_master(
            self.watch, deadline, partial(self._remote, code, header, body, timeout), None, "call"
        )

    async def _at_master(
        self,
        code: int,
        header: Header,
        body: bytes | None,
        here: Callable[[], Awaitable[_T]],
        answer: Callable[[Frame], _T],
        deadline: float,
        what: str,
    ) -> _T:
        """``here()`` while this broker is the master, else ``code`` at the master and its
        answer through ``answer``: through a failover as :func:`broker.grpc.to_master.at_master`
        says."""

        async def remote(address: str) -> _T:
            return answer(await self._remote(code, header, body, _TIMEOUT_S, address))

        return await at_master(
            self.watch, deadline, remote, None if self.here is None else here, what
        )

    async def _remote(
        self, code: int, header: Header, body: bytes | None, timeout: float, address: str
    ) -> Frame:
        resp = await forward(self.pool, address, code, header, body, timeout)
        if resp.code in NOT_THE_MASTER:
            raise NotDone(f"{address}: {resp.remark or 'not the master'}")
        return resp

    # -- ReceiveMessage -----------------------------------------------------------------------------
    async def receive(
        self, request: rpc.ReceiveMessageRequest, context: Any
    ) -> AsyncIterator[rpc.ReceiveMessageResponse]:
        """The answer stream: a status, then the messages and the delivery timestamp."""
        try:
            plan = delivery.receive_plan(request, context.time_remaining())
            client_id = client_id_of(context)
            if plan.auto_renew and not client_id:
                raise Refused(pb.CLIENT_ID_REQUIRED, "auto_renew needs the x-mq-client-id header")
            if client_id:
                self._started()
                self.clients.seen(client_id, plan.group, _now_ms())
            deadline = self.watch.deadline(context.time_remaining())
            pop = asyncio.ensure_future(self._pop(plan, deadline))
            try:
                resp = await asyncio.shield(pop)
            except asyncio.CancelledError:
                # The client went away (or its deadline passed) while the POP waited: what it
                # hands out now reaches nobody. Give that back to the group at once rather
                # than after its invisible time.
                log.info(
                    "grpc: receive cancelled during its long poll; what its POP hands out is "
                    "handed back",
                    group=plan.group,
                    client=client_id,
                )
                pop.add_done_callback(lambda done: self._hand_back_popped(done, plan.group))
                raise
            messages = self._received(resp, plan, client_id)
        except Refused as exc:
            yield rpc.ReceiveMessageResponse(status=_status(exc.code, exc.message))
            return
        if not messages:
            yield rpc.ReceiveMessageResponse(status=_status(pb.MESSAGE_NOT_FOUND, "no new message"))
            return
        # The client may be gone by now although the POP came back first: its cancel reaches
        # this loop after the answer did, and then fails (or cancels) a write below, which
        # leaves this generator at a yield for good. The call's end, however it ends, says
        # whether the whole answer was written; if not, the messages are handed back.
        popped = _Popped(plan.group, [m.system_properties.receipt_handle for m in messages])
        context.add_done_callback(lambda _context: self._call_ended(popped))
        yield rpc.ReceiveMessageResponse(status=_status(pb.OK, "OK"))
        for message in messages:
            yield rpc.ReceiveMessageResponse(message=message)
        now = _now_ms()
        yield rpc.ReceiveMessageResponse(
            delivery_timestamp=Timestamp(seconds=now // 1000, nanos=(now % 1000) * 1_000_000)
        )
        popped.written = True

    async def _pop(self, plan: delivery.ReceivePlan, deadline: float) -> Frame | list[PopMessage]:
        """The receive's POP: in-process while this broker is the master (what it handed out,
        durable), else POP_MESSAGE to the master (its answer); through a failover (its long
        poll shortened by the wait for the next master)."""
        start = time.monotonic()

        def request() -> PopRequest:
            waited_ms = int((time.monotonic() - start) * 1000)
            return PopRequest(
                group=plan.group,
                topic=plan.topic,
                queue_id=-1,
                max_count=plan.batch,
                invisible_ms=plan.invisible_ms,
                poll_ms=max(0, plan.poll_ms - waited_ms),
                expression=plan.expression,
                expression_type=plan.expression_type,
            )

        async def remote(address: str) -> Frame:
            ask = request()
            header, _ = ask.encode()  # POP has no body
            timeout = ask.poll_ms / 1000 + _TIMEOUT_S
            return await self._remote(ask.code, header, None, timeout, address)

        async def in_process() -> list[PopMessage]:
            return await self._pop_here(request())

        here = self.here
        return await at_master(
            self.watch, deadline, remote, None if here is None else in_process, "receive"
        )

    async def _pop_here(self, request: PopRequest) -> list[PopMessage]:
        here = self.here
        assert here is not None
        self.in_process += 1
        try:
            popped = pop_messages(here.pop, here.durability, request)
            if not isinstance(popped, Popped):
                popped = await popped
        except PopDenied as denied:
            raise _pop_refused(denied.code, denied.remark) from None
        if popped.last is not None:
            code, remark = await wait_durable(here.durability, popped.last)
            if code != ResponseCode.SUCCESS:
                raise _pop_refused(code, f"{NOT_DURABLE}: {remark}")
        return popped.messages

    def _call_ended(self, popped: _Popped) -> None:
        if not popped.written:
            log.info(
                "grpc: a receive ended before its messages were written; they are handed back",
                group=popped.group,
                count=len(popped.handles),
            )
            self._chore(self._hand_back(popped.group, popped.handles))

    def _hand_back_popped(self, pop: asyncio.Future[Frame | list[PopMessage]], group: str) -> None:
        if pop.cancelled() or pop.exception() is not None:
            return
        resp = pop.result()
        if isinstance(resp, list):
            handles = [m.handle for m in resp]
            if not handles:
                return
        else:
            if resp.code != ResponseCode.SUCCESS:
                return
            try:
                handles = list(PopFound.parse(resp.header, resp.body).receipt_handles)
            except FieldError:
                return  # an answer that names no handles: nothing to hand back
        self._chore(self._hand_back(group, handles))

    def _chore(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    async def _hand_back(self, group: str, handles: list[str]) -> None:
        """Make what a receive popped but did not deliver visible to the group again at once
        (a push consumer's hold on it ends too)."""
        for handle in handles:
            async with self._lock(handle):
                current = self.held.current(handle)
                self._release(handle)
                try:
                    await self._change(group, current, _HANDED_BACK_INVISIBLE_MS)
                except Refused as exc:
                    log.info("grpc: popped message not handed back", group=group, error=exc.message)
        log.info(
            "grpc: a cancelled receive's messages handed back", group=group, count=len(handles)
        )

    def _received(
        self, resp: Frame | list[PopMessage], plan: delivery.ReceivePlan, client_id: str
    ) -> list[pb.Message]:
        records: list[MessageRecord]
        if isinstance(resp, list):
            handles = [m.handle for m in resp]
            attempts = [str(m.attempt) for m in resp]
            try:
                records = [decode_record(m.raw) for m in resp]
            except RecordError as exc:
                raise Refused(pb.INTERNAL_ERROR, f"POP answer does not decode: {exc}") from None
        else:
            if resp.code == ResponseCode.PULL_NOT_FOUND:
                return []
            if resp.code != ResponseCode.SUCCESS:
                raise _pop_refused(resp.code, resp.remark)
            try:
                found = PopFound.parse(resp.header, resp.body)
                handles = list(found.receipt_handles)
                attempts = [str(a) for a in found.attempts]
                records = list(iter_records(found.body))
            except (FieldError, RecordError) as exc:
                raise Refused(pb.INTERNAL_ERROR, f"POP answer does not decode: {exc}") from None
        if not len(records) == len(handles) == len(attempts):
            raise Refused(pb.INTERNAL_ERROR, "POP answer: records, handles and attempts differ")
        now = _now_ms()
        out = []
        for record, handle, attempt in zip(records, handles, attempts, strict=True):
            out.append(
                delivery.received_message(
                    record, plan.group, handle, int(attempt), plan.invisible_ms
                )
            )
            if plan.auto_renew:
                self.held.hold(
                    handle, plan.group, plan.topic, client_id, now + plan.invisible_ms, now
                )
        return out

    # -- AckMessage -------------------------------------------------------------------------------
    async def ack(self, request: rpc.AckMessageRequest, context: Any) -> rpc.AckMessageResponse:
        try:
            group = delivery.check_group(request.group)
            no_namespace(request.topic, "topic")
            if not request.entries:
                raise Refused(pb.BAD_REQUEST, "no entry to ack")
            if len(request.entries) > 1024:
                raise Refused(pb.BAD_REQUEST, "at most 1024 entries per ack")
        except Refused as exc:
            return rpc.AckMessageResponse(status=_status(exc.code, exc.message))
        statuses: list[pb.Status] = [_status(pb.OK, "OK")] * len(request.entries)
        asked: list[int] = []
        for i, entry in enumerate(request.entries):
            bad = delivery.check_handle(entry.receipt_handle)
            if bad is None:
                asked.append(i)
            else:
                statuses[i] = _status(pb.INVALID_RECEIPT_HANDLE, bad)
        originals = [request.entries[i].receipt_handle for i in asked]
        locks = [self._lock(h) for h in sorted(set(originals)) if self.held.get(h) is not None]
        for lock in locks:
            await lock.acquire()
        try:
            if asked:
                deadline = self.watch.deadline(context.time_remaining())
                await self._ack_handles(group, originals, asked, statuses, deadline)
        except Refused as exc:
            for i in asked:
                statuses[i] = _status(exc.code, exc.message)
        finally:
            for lock in locks:
                lock.release()
        entries = [
            rpc.AckMessageResultEntry(
                message_id=e.message_id, receipt_handle=e.receipt_handle, status=s
            )
            for e, s in zip(request.entries, statuses, strict=True)
        ]
        return rpc.AckMessageResponse(status=delivery.overall(statuses), entries=entries)

    async def _ack_handles(
        self,
        group: str,
        originals: list[str],
        asked: list[int],
        statuses: list[pb.Status],
        deadline: float,
    ) -> None:
        handles = [self.held.current(h) for h in originals]

        async def in_process() -> tuple[list[Any], str]:
            here = self.here
            assert here is not None
            self.in_process += 1
            try:
                acked = ack_batch(here.pop, group, handles)
            except HandleRefused as refused:
                raise _handle_refused(refused.code, refused.remark, "ack") from None
            await _durable(here, acked.result, "ack")
            return list(acked.codes), acked.remark

        def answered(resp: Frame) -> tuple[list[Any], str]:
            if resp.code != ResponseCode.SUCCESS:
                raise _handle_refused(resp.code, resp.remark, "ack")
            try:
                answer = BatchAckAnswer.parse(resp.header)
            except FieldError as exc:
                raise Refused(pb.INTERNAL_ERROR, f"batch ack answer: {exc}") from None
            return list(answer.results), answer.remark

        ask = BatchAckRequest(group=group, receipt_handles=tuple(handles))
        results, remark = await self._at_master(
            ask.code, *ask.encode(), in_process, answered, deadline, "ack"
        )
        if len(results) != len(asked):
            raise Refused(pb.INTERNAL_ERROR, "batch ack answered a wrong number of results")
        whys = delivery.batch_remarks(remark, len(asked))
        for j, (i, result) in enumerate(zip(asked, results, strict=True)):
            code = int(result)
            if code == ResponseCode.SUCCESS:
                self._release(originals[j])
                continue
            statuses[i] = _status(delivery.handle_code(code, status_code(code)), whys[j])
            self._release(originals[j])  # not in flight for this client any more

    # -- ChangeInvisibleDuration --------------------------------------------------------------------
    async def change_invisible_duration(
        self, request: rpc.ChangeInvisibleDurationRequest, context: Any
    ) -> rpc.ChangeInvisibleDurationResponse:
        try:
            group = delivery.check_group(request.group)
            no_namespace(request.topic, "topic")
            bad = delivery.check_handle(request.receipt_handle)
            if bad is not None:
                raise Refused(pb.INVALID_RECEIPT_HANDLE, bad)
            ms = delivery.millis(request.invisible_duration)
            if not 0 <= ms <= delivery.MAX_INVISIBLE_MS:
                raise Refused(
                    pb.ILLEGAL_INVISIBLE_TIME,
                    f"invisible_duration must be 0..{delivery.MAX_INVISIBLE_MS} ms, not {ms}",
                )
            original = request.receipt_handle
            deadline = self.watch.deadline(context.time_remaining())
            async with self._lock(original):
                new = await self._change(group, self.held.current(original), ms, deadline)
                self._release(original)  # the client decides from now on
        except Refused as exc:
            return rpc.ChangeInvisibleDurationResponse(status=_status(exc.code, exc.message))
        return rpc.ChangeInvisibleDurationResponse(status=_status(pb.OK, "OK"), receipt_handle=new)

    async def _change(self, group: str, handle: str, ms: int, deadline: float = 0.0) -> str:
        """CHANGE_MESSAGE_INVISIBLETIME: the new handle. Below the broker's 1 s it hides the
        message for 1 s (a nack that wants it back at once). ``deadline``: how long it may
        wait for the group's next master (0: not at all)."""
        invisible = max(delivery.MIN_INVISIBLE_MS, ms)

        async def in_process() -> str:
            here = self.here
            assert here is not None
            self.in_process += 1
            try:
                changed, result = change_invisible(here.pop, group, handle, invisible)
            except HandleRefused as refused:
                raise _handle_refused(refused.code, refused.remark, "change") from None
            await _durable(here, result, "change")
            return changed

        def answered(resp: Frame) -> str:
            if resp.code != ResponseCode.SUCCESS:
                raise _handle_refused(resp.code, resp.remark, "change")
            try:
                return InvisibleChanged.parse(resp.header).receipt_handle
            except FieldError:
                raise Refused(
                    pb.INTERNAL_ERROR, "change answered without a receipt handle"
                ) from None

        ask = ChangeInvisibleRequest(group=group, receipt_handle=handle, invisible_ms=invisible)
        return await self._at_master(
            ask.code, *ask.encode(), in_process, answered, deadline, "change of invisible time"
        )

    # -- ForwardMessageToDeadLetterQueue ---------------------------------------------------------
    async def forward_to_dead_letter_queue(
        self, request: rpc.ForwardMessageToDeadLetterQueueRequest, context: Any
    ) -> rpc.ForwardMessageToDeadLetterQueueResponse:
        """The message goes to ``%DLQ%<group>`` at once, and its delivery is acked: the
        delivery is checked (and kept hidden) by a change of invisible time, the message found
        at the queue offset its handle names, sent back with no retries left
        (CONSUMER_SEND_MSG_BACK, ``maxReconsumeTimes`` 0), then acked."""
        try:
            group = delivery.check_group(request.group)
            topic = request.topic.name
            if not topic:
                raise Refused(pb.ILLEGAL_TOPIC, "topic is empty")
            no_namespace(request.topic, "topic")
            bad = delivery.check_handle(request.receipt_handle)
            if bad is not None:
                raise Refused(pb.INVALID_RECEIPT_HANDLE, bad)
            original = request.receipt_handle
            deadline = self.watch.deadline(context.time_remaining())
            async with self._lock(original):
                handle = await self._change(group, self.held.current(original), 60_000, deadline)
                self._release(original)
                await self._send_to_dlq(
                    request, group, topic, handle, client_id_of(context), deadline
                )
                not_acked = await self._ack_one(group, handle, deadline)
                if not_acked:
                    log.warning(
                        "grpc: a message forwarded to the DLQ was not acked (it comes back once)",
                        group=group,
                        error=not_acked,
                    )
        except Refused as exc:
            return rpc.ForwardMessageToDeadLetterQueueResponse(
                status=_status(exc.code, exc.message)
            )
        return rpc.ForwardMessageToDeadLetterQueueResponse(status=_status(pb.OK, "OK"))

    async def _ack_one(self, group: str, handle: str, deadline: float) -> str:
        """ACK_MESSAGE (in-process on the master): "" once acked, else why not."""

        async def in_process() -> str:
            here = self.here
            assert here is not None
            self.in_process += 1
            try:
                await _durable(here, ack_one(here.pop, group, handle), "ack")
            except HandleRefused as refused:
                return refused.remark or f"ack refused ({refused.code})"
            return ""

        def answered(resp: Frame) -> str:
            if resp.code == ResponseCode.SUCCESS:
                return ""
            return resp.remark or f"ack refused ({resp.code})"

        ack = AckRequest(group=group, receipt_handle=handle)
        try:
            return await self._at_master(
                ack.code, *ack.encode(), in_process, answered, deadline, "ack"
            )
        except Refused as exc:
            return exc.message

    async def _send_to_dlq(
        self,
        request: rpc.ForwardMessageToDeadLetterQueueRequest,
        group: str,
        topic: str,
        handle: str,
        client_id: str,
        deadline: float,
    ) -> None:
        try:
            where = peek_handle(handle)  # the broker accepted it just now
        except HandleError as exc:
            raise Refused(pb.INTERNAL_ERROR, f"the broker's new handle: {exc}") from None
        pull = PullRequest(
            group=group,
            topic=where.topic,
            queue_id=where.queue_id,
            offset=where.queue_offset,
            max_count=1,
        )
        try:
            answer = await self._call(pull.code, *pull.encode(), deadline=deadline)
            found = decode_pull_answer(answer)
            records = list(iter_records(found.body)) if isinstance(found, PullFound) else []
        except (AnswerError, RecordError):
            records = []
        if not records or records[0].queue_offset != where.queue_offset:
            raise Refused(
                pb.MESSAGE_NOT_FOUND,
                f"message {where.topic}:{where.queue_id}@{where.queue_offset} is gone",
            )
        member = client_id or f"grpc-{self.local_address}"
        beat = Heartbeat(group=group, client_id=member, topic=topic, consume_type=POP)
        await self._call(beat.code, *beat.encode(), deadline=deadline)
        back = SendBack(
            group=group,
            offset=records[0].physical_offset,
            origin_topic=topic,
            origin_msg_id=request.message_id,
            max_reconsume_times=0,
            reason=(
                f"forwarded to the DLQ by the client after {request.delivery_attempt} of "
                f"{request.max_delivery_attempts} delivery attempts"
            ),
        )
        resp = await self._call(back.code, *back.encode(), deadline=deadline)
        if resp.code != ResponseCode.SUCCESS:
            raise Refused(status_code(resp.code), resp.remark)

    # -- QueryAssignment ------------------------------------------------------------------------
    @staticmethod
    def query_assignment(
        request: rpc.QueryAssignmentRequest, route: rpc.QueryRouteResponse
    ) -> rpc.QueryAssignmentResponse:
        try:
            delivery.check_group(request.group)
        except Refused as exc:
            return rpc.QueryAssignmentResponse(status=_status(exc.code, exc.message))
        if route.status.code != pb.OK:
            return rpc.QueryAssignmentResponse(status=route.status)
        return rpc.QueryAssignmentResponse(
            status=_status(pb.OK, "OK"), assignments=delivery.assignments(route.message_queues)
        )

    # -- Heartbeat, NotifyClientTermination, Telemetry ------------------------------------------
    async def heartbeat(self, request: rpc.HeartbeatRequest, context: Any) -> rpc.HeartbeatResponse:
        try:
            group = delivery.check_group(request.group)
            client_id = client_id_of(context)
            if not client_id:
                raise Refused(pb.CLIENT_ID_REQUIRED, "the x-mq-client-id header is missing")
            self._started()
            client = self.clients.seen(client_id, group, _now_ms())
            client.who = grpc_client(context)
            deadline = self.watch.deadline(context.time_remaining())
            await self._beat(client.client_id, group, client.topic, client.who, deadline)
            client.heartbeat_ms = _now_ms()
        except Refused as exc:
            return rpc.HeartbeatResponse(status=_status(exc.code, exc.message))
        return rpc.HeartbeatResponse(status=_status(pb.OK, "OK"))

    async def _beat(
        self,
        client_id: str,
        group: str,
        topic: str,
        who: GrpcClient | None = None,
        deadline: float = 0.0,
    ) -> None:
        # Its SimpleConsumer and PushConsumer both receive by POP: the member holds no queue.
        beat = Heartbeat(
            group=group, client_id=client_id, topic=topic, protocol="gRPC", consume_type=POP
        )
        if who is not None:
            beat = replace(
                beat, language=who.language, version=who.version, client_address=who.address
            )
        resp = await self._call(beat.code, *beat.encode(), deadline=deadline)
        if resp.code != ResponseCode.SUCCESS:
            raise Refused(status_code(resp.code), resp.remark)

    async def terminated(
        self, request: rpc.NotifyClientTerminationRequest, context: Any
    ) -> rpc.NotifyClientTerminationResponse:
        """The client leaves its group; what it held comes back to the group at once."""
        try:
            group = delivery.check_group(request.group)
        except Refused as exc:
            return rpc.NotifyClientTerminationResponse(status=_status(exc.code, exc.message))
        client_id = client_id_of(context)
        self.clients.remove(client_id)
        for held in self.held.release_client(client_id):
            async with self._lock(held.original):
                try:
                    await self._change(held.group, held.current, _HANDED_BACK_INVISIBLE_MS)
                except Refused:
                    pass  # acked meanwhile, or already back: nothing to hand back
        if client_id:
            try:
                leave = UnregisterClient(group=group, client_id=client_id)
                await self._call(leave.code, *leave.encode())
            except Refused as exc:
                return rpc.NotifyClientTerminationResponse(status=_status(exc.code, exc.message))
        return rpc.NotifyClientTerminationResponse(status=_status(pb.OK, "OK"))

    async def subscription_settings(
        self, client: pb.Settings, out: pb.Settings, client_id: str
    ) -> pb.Status:
        """Fill the Telemetry answer to a consumer's settings from its group's settings on this
        broker, and remember the client (its group and topics)."""
        sub = client.subscription
        try:
            group = delivery.check_group(sub.group)
        except Refused as exc:
            return _status(exc.code, exc.message)
        if client_id:
            self._started()
            topics = tuple(e.topic.name for e in sub.subscriptions if e.topic.name)
            self.clients.seen(client_id, group, _now_ms(), topics)
        config = await self._group_config(group)
        delivery.subscription_settings(out, config, client.user_agent.language)
        return _status(pb.OK, "OK")

    async def _group_config(self, group: str) -> SubscriptionGroupConfig:
        try:
            query = SubscriptionGroupQuery(group=group)
            resp = await forward(
                self.pool, self.local_address, query.code, *query.encode(), _TIMEOUT_S
            )
            if resp.code == ResponseCode.SUCCESS:
                doc = msgpack.unpackb(resp.body or b"", raw=False)
                if isinstance(doc, Mapping):
                    return config_from_dict(doc)
        except (Refused, RetryConfigError, ValueError) as exc:
            log.warning(
                "grpc: group settings unavailable, defaults used", group=group, error=str(exc)
            )
        return SubscriptionGroupConfig(group)

    # -- the endpoint's own work ---------------------------------------------------------------------
    def _lock(self, handle: str) -> asyncio.Lock:
        lock = self._locks.get(handle)
        if lock is None:
            lock = self._locks[handle] = asyncio.Lock()
        return lock

    def _release(self, handle: str) -> Held | None:
        self._locks.pop(handle, None)
        return self.held.release(handle)

    async def _tend(self) -> None:
        """Every second: heart-beat live consumers into their groups, forget silent ones, and
        renew the deliveries held for push consumers."""
        while True:
            await asyncio.sleep(_TICK_S)
            try:
                await self._tend_once(_now_ms())
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("grpc consumers: upkeep failed")

    async def _tend_once(self, now: int) -> None:
        for gone in self.clients.expire(now):
            for held in self.held.release_client(gone.client_id):
                self._locks.pop(held.original, None)
        for client in self.clients.heartbeat_due(now):
            try:
                await self._beat(client.client_id, client.group, client.topic, client.who)
                client.heartbeat_ms = now
            except Refused as exc:
                log.warning(
                    "grpc: consumer heartbeat failed", client=client.client_id, error=exc.message
                )
        for held in self.held.due(now):
            await self._renew(held)
        for handle in [h for h in self._locks if self.held.get(h) is None]:
            if not self._locks[handle].locked():
                del self._locks[handle]

    async def _renew(self, held: Held) -> None:
        async with self._lock(held.original):
            if self.held.get(held.original) is not held:
                return  # acked or nacked meanwhile
            try:
                new = await self._change(held.group, held.current, delivery.AUTO_RENEW_INVISIBLE_MS)
            except Refused as exc:
                log.info("grpc: held delivery not renewed", group=held.group, error=exc.message)
                self._release(held.original)
                return
            self.held.renewed(held.original, new, _now_ms() + delivery.AUTO_RENEW_INVISIBLE_MS)
