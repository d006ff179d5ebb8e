"""The send path every front calls: admission, storing, durability and the send figures.

:meth:`SendService.put` decides whether a send may be stored and stores it: the write gate, the
topic (checked, or created with ``auto_create_topic``), the queue (the broker's pick for a FIFO
message group or the next open queue; a sealed queue of a static topic refused), the body sizes,
the message groups, a transactional send as a half message, delivery times admitted by the
timer against one clock reading. One call is one send, all or nothing: a refusal
(:class:`SendRefused`) stores nothing. The remoting processor (:mod:`broker.processors.send`)
answers SEND_MESSAGE and SEND_BATCH_MESSAGE with it; the gRPC front calls it in-process when this
broker is its group's master (:mod:`broker.grpc.produce`), awaiting :meth:`SendService.durable`.

Every refusal is counted (``rmq_broker_send_errors_total``), every stored send's latency is
observed once its answer is due (``rmq_broker_send_latency_seconds``), whichever front asked.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import structlog

from broker.durable_wait import wait_durable
from broker.send.host import SendHost
from broker.send.idempotence import IssuedProducerIds, ProducerSequences, batch_of, result_of
from broker.send.uniq_window import UniqKeyDedup
from broker.timer.schedule import ScheduleRefused
from broker.write_gate import WriteRefused
from protocol.codes import ResponseCode
from protocol.fifo import PROP_MESSAGE_GROUP, group_queue_index, message_group_error
from protocol.idempotence import PROP_PRODUCER_SEQ, ProducerSeq, QueueWindow, Verdict, stamp
from protocol.message import Message, MsgIdMaker
from protocol.producer_token import TOKEN_FIELD, SendTokens
from protocol.refusal import RequestRefused
from protocol.request_auth import VERIFIED_USER
from protocol.timer import REQUEST_PROPERTIES
from protocol.topic_attrs import TopicAttrs, message_type_of, type_refusal, write_forbidden
from protocol.transaction import HALF_TOPIC, OP_TOPIC, is_transactional
from storage.queues import topic_error
from storage.store import DiskFullError, MessageTooLargeError, PutResult, StoreError

__all__ = ["SendRefused", "SendService"]

log = structlog.get_logger(__name__)

_TRANSACTION_TOPICS = frozenset((HALF_TOPIC, OP_TOPIC))


class SendRefused(RequestRefused):
    """A send not stored (or stored but not durable in time): the response code and remark to
    answer with. Counted already."""


class SendService:
    """Stores sends for every front. Loop thread only."""

    def __init__(self, host: SendHost) -> None:
        self.host = host
        self.broker_name = host.cfg.broker_name
        self.msg_id = MsgIdMaker(host.cfg.listen)
        """The message id of the record at a CommitLog offset (what a send answers)."""
        self.sequences = ProducerSequences(host)
        """The idempotent producers' sequences (docs/idempotence.md)."""
        self.uniq_keys = UniqKeyDedup(host)
        """The optional UNIQ_KEY duplicate window (``uniq_key_window_topics``)."""
        self.idempotence_off = frozenset(
            t.strip() for t in host.cfg.idempotence_off_topics.split(",") if t.strip()
        )
        """Topics that refuse the idempotent producers' fields (``idempotence_off_topics``)."""
        self.issued = IssuedProducerIds(enabled=False)
        """The producer ids the controllers issued (checked with authentication on: the broker
        enables it and hands it the heartbeat answers)."""
        self.tokens: SendTokens | None = None
        """With authentication on: the sequenced sends' tokens checked against the user who
        signed each (protocol/producer_token.py), so no user sends with another's producer
        id."""

    def drop_unless_master(self) -> None:
        """No longer master: the idempotence state and the UNIQ_KEY window are dropped (their
        memory back; a new master builds both from its log)."""
        self.sequences.drop_unless_master()
        self.uniq_keys.drop_unless_master()

    def usual_window(self, topic: str, queue_id: int, seq: ProducerSeq) -> QueueWindow | None:
        """The window of a sequenced send that is the usual one, the request right after the
        newest stored in its queue at its producer's epoch, in a state built for this master
        epoch (:meth:`ProducerSequences.next_window`): such a send waits for nothing and
        :meth:`put` takes it as its ``window``. None: ask :meth:`before_sequenced` (always
        with authentication on, where every send's producer id is checked issued). Changes
        nothing."""
        if self.issued.enabled:
            return None
        return self.sequences.next_window(topic, queue_id, seq)

    def before_sequenced(
        self, topic: str, seq: ProducerSeq, header: Mapping[str, object]
    ) -> Coroutine[Any, Any, None] | None:
        """What a sequenced send must wait for before :meth:`put` (None: nothing): the
        idempotence state built for this master epoch (in steps, the loop free meanwhile), a
        producer id not yet known issued. The coroutine raises :class:`SendRefused` (counted)
        for an id the controllers did not issue, or (authentication on) did not issue to the
        user who signed the request (``header``: the request's, with the guard's
        ``verifiedUser`` and the send's ``producerToken``)."""
        issued = self.issued
        tokens = self.tokens
        if tokens is not None:
            why = tokens.refusal(
                seq.producer_id, seq.epoch, header.get(VERIFIED_USER), header.get(TOKEN_FIELD)
            )
            if why is not None:
                return self._refused(ResponseCode.PRODUCER_ID_NOT_ISSUED, why)
        if (
            self.sequences.built_now() and (not issued.enabled or issued.issued(seq.producer_id))
        ) or topic in self.idempotence_off:
            return None  # (a topic with idempotence off: put refuses it)
        return self._before_sequenced(seq)

    async def _refused(self, code: ResponseCode, remark: str) -> None:
        self.count_refusal(code)
        raise SendRefused(code, remark)

    async def _before_sequenced(self, seq: ProducerSeq) -> None:
        if not self.issued.issued(seq.producer_id):
            known = await self.issued.wait(seq.producer_id)
            if not known:
                code = (
                    ResponseCode.SERVICE_NOT_AVAILABLE
                    if known is None
                    else ResponseCode.PRODUCER_ID_NOT_ISSUED
                )
                self.count_refusal(code)
                raise SendRefused(
                    code,
                    f"producer id {seq.producer_id} was not issued by the controllers (the "
                    f"lowest not issued is {self.issued.limit})"
                    if known is False
                    else f"producer id {seq.producer_id}: no answer from the controllers "
                    "to tell whether they issued it; retry",
                )
        await self.sequences.built()

    # -- storing -------------------------------------------------------------------------------
    def put(
        self,
        topic: str,
        queue_id: int,
        messages: list[Message],
        seq: ProducerSeq | None = None,
        window: QueueWindow | None = None,
    ) -> PutResult:
        """Store one send (``queue_id`` -1: the broker picks); raises :class:`SendRefused`
        with nothing stored. With ``seq`` (an idempotent producer's request) a retry of a
        request stored before answers its offsets and stores nothing; ``window``: what
        :meth:`usual_window` gave for it just before (nothing ran between)."""
        try:
            return self._put(topic, queue_id, messages, seq, window)
        except SendRefused as refused:
            self.count_refusal(refused.code)
            raise

    def _put(
        self,
        topic: str,
        queue_id: int,
        messages: list[Message],
        seq: ProducerSeq | None,
        window: QueueWindow | None,
    ) -> PutResult:
        host = self.host
        try:
            host.gate.check_writable()
        except WriteRefused as refused:
            raise SendRefused(refused.code, refused.remark) from None
        if seq is not None and queue_id < 0:
            raise SendRefused(
                ResponseCode.BAD_REQUEST, "an idempotent send names its queue (queueId >= 0)"
            )
        if topic in _TRANSACTION_TOPICS:
            raise SendRefused(ResponseCode.NO_PERMISSION, f"topic {topic} is the broker's own")
        tc = host.topics.get(topic)
        if tc is None:
            # Known topics were checked when created; an unknown name is checked before it can
            # name a topic config or a ConsumeQueue directory.
            bad_name = topic_error(topic)
            if bad_name is not None:
                raise SendRefused(ResponseCode.BAD_REQUEST, bad_name)
            if not host.cfg.auto_create_topic:
                raise SendRefused(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist")
            tc = host.create_topic(topic, host.cfg.default_topic_queues)
        if not tc.attrs.default or host.cfg.topic_message_type_check:
            self._check_attrs(topic, tc.attrs, messages)
        sealed = host.sealed
        if queue_id < 0:
            # The broker picks: a FIFO message group always its group's queue (the gRPC
            # clients choose the broker group, not the queue), anything else the next queue.
            group = messages[0].properties.get(PROP_MESSAGE_GROUP) if messages else None
            queue_id = (
                group_queue_index(group, tc.queues) if group else host.next_queue(topic, tc.queues)
            )
            if sealed.has_closed(topic) and not group:
                queue_id = self._open_queue(topic, tc.queues, queue_id)
        elif queue_id >= tc.queues:
            raise SendRefused(
                ResponseCode.QUEUE_NOT_EXIST,
                f"queueId {queue_id} out of range 0..{tc.queues - 1}",
            )
        uniq_key: str | None = None
        if seq is not None:
            if topic in self.idempotence_off:
                raise SendRefused(
                    ResponseCode.IDEMPOTENCE_OFF,
                    f"topic {topic} takes no idempotent producers' fields (the broker's "
                    "idempotence_off_topics): send without producerSeq",
                )
            if window is None:
                window = self.sequences.next_window(topic, queue_id, seq)
            if window is None:  # not merely the next request of its queue: the whole check
                retried = self._retried(topic, queue_id, messages, seq)
                if retried is not None:
                    return retried
        elif self.uniq_keys.topics:
            uniq_key = self.uniq_keys.key(topic, messages)
            if uniq_key is not None:
                seen = self.uniq_keys.find(topic, uniq_key)
                if seen is not None and seen.count == len(messages):
                    return result_of(seen)
        if sealed.has_closed(topic) and sealed.closed(topic, queue_id, time.monotonic()):
            # A static topic's item sealed (or being sealed) here: the queue moved to another
            # group. Retriable: the producer refreshes its route and sends to the new item.
            raise SendRefused(
                ResponseCode.QUEUE_NOT_EXIST,
                f"queue {queue_id} of {topic} is sealed: it moved to another broker group; "
                "refresh the route",
            )
        limit = host.cfg.max_message_bytes
        body_bytes = 0
        for m in messages:
            size = len(m.body)
            if size > limit:
                raise SendRefused(
                    ResponseCode.MESSAGE_ILLEGAL, f"message body of {size} bytes exceeds {limit}"
                )
            body_bytes += size
        own = any(m.properties for m in messages)  # only these can ask for a delivery time
        if seq is not None:
            stamp(messages, seq, b"" if window is None else window.head)
        elif own:
            _drop_sequences(messages)
        result = self._store(topic, queue_id, messages, body_bytes, own)
        if seq is not None:
            if window is not None:
                self.sequences.stored_next(window, seq, result)
            else:
                self.sequences.stored(topic, queue_id, seq, batch_of(seq.sequence, result))
        elif uniq_key is not None:
            self.uniq_keys.stored(topic, uniq_key, batch_of(-1, result))
        return result

    def _check_attrs(self, topic: str, attrs: TopicAttrs, messages: list[Message]) -> None:
        """A topic without write permission refuses every send (RocketMQ's NO_PERMISSION);
        with ``topic_message_type_check`` one whose type is not the topic's refuses a message
        of another type (docs/operations.md, "Topic types and permissions")."""
        if not attrs.writable:
            raise SendRefused(ResponseCode.NO_PERMISSION, write_forbidden(topic, attrs.perm))
        if self.host.cfg.topic_message_type_check:
            for m in messages:
                why = type_refusal(topic, attrs.message_type, message_type_of(m.properties))
                if why is not None:
                    raise SendRefused(ResponseCode.MESSAGE_ILLEGAL, why)

    def _store(
        self,
        topic: str,
        queue_id: int,
        messages: list[Message],
        body_bytes: int,
        has_properties: bool,
    ) -> PutResult:
        host = self.host
        try:
            if has_properties:  # of the sender's, not the sequence alone
                bad_group = _message_group_refusal(messages)
                if bad_group is not None:
                    raise SendRefused(ResponseCode.MESSAGE_ILLEGAL, bad_group)
                special = self._transactional(topic, queue_id, messages)
                if special is None:
                    special = self._scheduled(topic, queue_id, messages)
                if special is not None:
                    return special
            return host.appender.put(topic, queue_id, messages, body_bytes)
        except DiskFullError as exc:
            log.error("send failed: disk full", topic=topic, error=str(exc))
            raise SendRefused(ResponseCode.DISK_FULL, f"disk full: {exc}") from None
        except MessageTooLargeError as exc:
            raise SendRefused(ResponseCode.MESSAGE_ILLEGAL, str(exc)) from None
        except StoreError as exc:
            log.error("send failed", topic=topic, error=str(exc))
            raise SendRefused(ResponseCode.SYSTEM_ERROR, str(exc)) from None

    def _retried(
        self, topic: str, queue_id: int, messages: list[Message], seq: ProducerSeq
    ) -> PutResult | None:
        """The answer to a retry of a request stored before (its offsets; the records of it a
        failover cut off stored now); None: a new request. Raises :class:`SendRefused` for a
        fenced epoch, a sequence too old to tell, a sequence reused for another request."""
        sequences = self.sequences
        state = sequences.ready()
        decision = state.check(topic, queue_id, seq)
        verdict = decision.verdict
        if verdict is Verdict.NEW:
            if decision.gap:
                sequences.gaps += 1
            return None
        if verdict is Verdict.FENCED:
            raise SendRefused(ResponseCode.PRODUCER_FENCED, decision.reason)
        if verdict is Verdict.TOO_OLD:
            raise SendRefused(ResponseCode.SEQUENCE_TOO_OLD, decision.reason)
        batch = decision.batch
        assert batch is not None
        if batch.count != len(messages):
            raise SendRefused(
                ResponseCode.BAD_REQUEST,
                f"sequence {seq.sequence} of producer {seq.producer_id} on {topic}/{queue_id} "
                f"was stored with {batch.count} message(s), not {len(messages)}",
            )
        if verdict is Verdict.PARTIAL:
            missing = batch.missing
            rest = [messages[i] for i in missing]
            n = len(messages)
            own = any(m.properties for m in rest)
            for i, m in zip(missing, rest, strict=True):
                sequences.stamp_record(m, seq, i, n)
            result = self._store(topic, queue_id, rest, sum(len(m.body) for m in rest), own)
            for i, off in zip(missing, result.physical_offsets, strict=True):
                batch.set_physical(i, off)
            batch.end_offset = max(batch.end_offset, result.end_offset)
            if batch.first_queue_offset < 0:
                batch.first_queue_offset = result.first_queue_offset
            sequences.partial_repairs += 1
            log.warning(
                "retry of a request the log held only part of: the rest stored",
                topic=topic,
                queue_id=queue_id,
                producer_id=seq.producer_id,
                sequence=seq.sequence,
                stored=len(missing),
            )
            sequences.stored(topic, queue_id, seq, batch)
        else:
            sequences.duplicates += 1
        return result_of(batch)

    def _transactional(
        self, topic: str, queue_id: int, messages: list[Message]
    ) -> PutResult | None:
        """A transactional send (``TRAN_MSG=true``): store it as a half message
        (docs/transactions.md). None: no message of the send is transactional."""
        if not any(is_transactional(m.properties) for m in messages):
            return None
        if len(messages) != 1:
            raise SendRefused(
                ResponseCode.MESSAGE_ILLEGAL,
                "a transactional message is sent alone, not in a batch",
            )
        msg = messages[0]
        if any(p in msg.properties for p in REQUEST_PROPERTIES):
            raise SendRefused(
                ResponseCode.MESSAGE_ILLEGAL,
                "a transactional message cannot have a delivery time",
            )
        try:
            return self.host.put_half(topic, queue_id, msg)
        except ValueError as exc:
            raise SendRefused(ResponseCode.MESSAGE_ILLEGAL, str(exc)) from None

    def _scheduled(self, topic: str, queue_id: int, messages: list[Message]) -> PutResult | None:
        """Messages of a send with properties: those asking for a delivery time are stored
        under the timer topic, the rest as usual, all admitted against one clock reading by
        the timer service (:meth:`~broker.timer.service.TimerService.put_send`); a refused send
        stores nothing. None: nothing scheduled, store them all as usual."""
        try:
            return self.host.put_scheduled_send(topic, queue_id, messages)
        except ScheduleRefused as exc:
            raise SendRefused(ResponseCode.MESSAGE_ILLEGAL, exc.remark) from None

    def _open_queue(self, topic: str, queues: int, first: int) -> int:
        """The broker's pick for a topic with sealed queues: the next queue from ``first`` that
        is not closed (``first`` itself when all are: the send is then refused)."""
        host = self.host
        now = time.monotonic()
        queue_id = first
        for _ in range(queues):
            if not host.sealed.closed(topic, queue_id, now):
                return queue_id
            queue_id = host.next_queue(topic, queues)
        return first

    def count_refusal(self, code: int) -> None:
        """A send a front refused before calling :meth:`put` (counted as its refusals are)."""
        self.host.metrics.send_error(code)

    # -- answering -----------------------------------------------------------------------------
    def settled(self, start: float, code: int) -> None:
        """A stored send's answer is due (``code``: SUCCESS, or why durability failed): its
        latency since ``start`` (``time.perf_counter()``) observed, a failure counted."""
        metrics = self.host.metrics
        metrics.send_latency.observe(time.perf_counter() - start)
        if code != ResponseCode.SUCCESS:
            metrics.send_error(code)

    def when_durable(
        self, result: PutResult, start: float, done: Callable[[int, str], None]
    ) -> None:
        """Call ``done(code, remark)`` once a stored send is as durable as its answer must be
        (at once when there is nothing to wait for; SUCCESS, or why durability failed), the
        send settled first: :meth:`durable` without a coroutine, for a front that answers
        from a callback."""
        host = self.host
        if not host.needs_wait(result):
            self.settled(start, ResponseCode.SUCCESS)
            done(ResponseCode.SUCCESS, "")
            return

        def finished(code: int, remark: str) -> None:
            self.settled(start, code)
            done(code, remark)

        host.when_durable(result, finished)

    async def durable(self, result: PutResult, start: float) -> None:
        """Wait until a stored send is as durable as its answer must be (the flush, the
        replicas' acks: :func:`broker.durable_wait.wait_durable`); raises
        :class:`SendRefused` when it did not become so in time. Settles the send."""
        host = self.host
        if not host.needs_wait(result):
            self.settled(start, ResponseCode.SUCCESS)
            return
        code, remark = await wait_durable(host, result)
        self.settled(start, code)
        if code != ResponseCode.SUCCESS:
            raise SendRefused(code, remark)


def _drop_sequences(messages: list[Message]) -> None:
    """A send without the fields cannot carry their property (a consumed message re-sent with
    its properties, say): it is the broker's to write."""
    for m in messages:
        props = m.properties
        if props and PROP_PRODUCER_SEQ in props:
            del props[PROP_PRODUCER_SEQ]


def _message_group_refusal(messages: list[Message]) -> str | None:
    """Why a message's FIFO group (``__SHARDINGKEY``) cannot be stored; None: all can."""
    for m in messages:
        group = m.properties.get(PROP_MESSAGE_GROUP)
        if group is not None:
            why = message_group_error(group)
            if why is not None:
                return f"property {PROP_MESSAGE_GROUP}: {why}"
    return None
