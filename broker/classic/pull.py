"""PULL_MESSAGE (11) of classic consumers: the broker's own pull path
(:meth:`broker.pull.service.PullService.answer`: its limits, tag filter and long polling with
the request's suspend timeout), its answer said RocketMQ's way.

- the header's ``subscription`` filters as ours does: a TAG expression, or with
  ``expressionType`` SQL92 a SQL92 one (when the request does not carry it, sysFlag's
  subscription bit clear as RocketMQ's push consumers pull, the one the group's heartbeat
  declared, :mod:`broker.classic.subscriptions`); SQL92 needs ``enable_property_filter``
  (else SYSTEM_ERROR saying so, as RocketMQ answers);
- sysFlag's commit-offset bit commits ``commitOffset`` for the group first, as RocketMQ's
  broker does for its master; sysFlag's suspend bit allows the long poll (else it answers at
  once);
- the body is RocketMQ's stored-message layout (V1 records for topics under 128 bytes), rebuilt
  from our records: same queue and CommitLog offsets, timestamps, hosts, flag and properties
  (tags and keys among them); sysFlag 0 (bodies are stored uncompressed) and reconsumeTimes from
  ``RECONSUME_TIME`` when a retry carries it, else 0;
- ``suggestWhichBrokerId`` is 0 (pull from the master) while the group has a master; a slave
  that knows no master (the group is between masters) suggests itself, as the NameServer lists
  it (its broker id, 1 for id 0), so a consumer keeps reading what it has replicated until a
  master is back.
"""

from __future__ import annotations

from collections.abc import Awaitable

from broker.classic.codes import classic_code
from broker.classic.subscriptions import ClassicSubscriptions
from broker.context import BrokerContext
from broker.pull.service import PullService
from protocol.filter import SQL92, FilterError, filter_type
from protocol.message import MessageRecord, RecordError, iter_records
from protocol.pull import (
    PullAnswer,
    PullCorrupt,
    PullFound,
    PullNotFound,
    PullOffsetMoved,
    PullRefused,
    PullRequest,
    PullRetry,
)
from protocol.retry import PROP_RECONSUME_TIME
from protocol.rocketmq_remoting.codes import RequestCode, ResponseCode
from protocol.rocketmq_remoting.frame import RemotingCommand, make_response
from protocol.rocketmq_remoting.headers import (
    PullMessageHeader,
    PullMessageResponseHeader,
    PullSysFlag,
)
from protocol.rocketmq_remoting.message_decoder import StoredMessage, encode_stored_messages
from remoting.classic_door import ClassicDoor, ClassicRefusal, ClassicSession

__all__ = ["ClassicPull", "classic_pull_body", "stored_message"]

_MASTER_ID = 0


def stored_message(
    rec: MessageRecord, *, topic: str, queue_id: int, reconsume_times: int = 0
) -> StoredMessage:
    """Our record in RocketMQ's stored-message form, under ``topic`` and ``queue_id`` (a half
    message's check-back names its real ones)."""
    return StoredMessage(
        topic=topic,
        body=rec.body,
        queue_id=queue_id,
        queue_offset=rec.queue_offset,
        physical_offset=rec.physical_offset,
        properties=rec.properties,
        flag=rec.flag,
        born_timestamp=rec.born_timestamp,
        born_host=rec.born_host,
        store_timestamp=rec.store_timestamp,
        store_host=rec.store_host,
        reconsume_times=reconsume_times,
    )


def classic_pull_body(body: bytes) -> bytes:
    """Our records back to back (a pull's body) in RocketMQ's stored-message layout."""
    out = []
    for rec in iter_records(body):
        times = rec.properties.get(PROP_RECONSUME_TIME, "0")
        out.append(
            stored_message(
                rec,
                topic=rec.topic,
                queue_id=rec.queue_id,
                reconsume_times=int(times) if times.isdigit() else 0,
            )
        )
    return encode_stored_messages(out)


class ClassicPull:
    def __init__(
        self, ctx: BrokerContext, subscriptions: ClassicSubscriptions | None = None
    ) -> None:
        self.ctx = ctx
        self.service: PullService = ctx.pulls
        self.subscriptions = ClassicSubscriptions() if subscriptions is None else subscriptions

    def register(self, door: ClassicDoor) -> None:
        door.register(RequestCode.PULL_MESSAGE, self.pull)

    def pull(
        self, session: ClassicSession, req: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        h = PullMessageHeader.parse(req.ext_fields)
        try:
            kind = filter_type(h.expression_type)
        except FilterError as exc:
            raise ClassicRefusal(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc)) from None
        expression = (h.subscription or "*").strip() or "*"
        if kind == SQL92:
            heard = self.subscriptions.sql(h.consumer_group, h.topic)
            if h.subscription:
                expression = h.subscription
            elif heard is not None:
                expression = heard
            else:
                raise ClassicRefusal(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"group {h.consumer_group} declared no SQL92 subscription to {h.topic} in a "
                    "heartbeat, and the pull carries none",
                )
        if h.sys_flag & PullSysFlag.COMMIT_OFFSET and h.commit_offset >= 0:
            self.service.commit_first(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        ask = PullRequest(
            group=h.consumer_group,
            topic=h.topic,
            queue_id=h.queue_id,
            offset=h.queue_offset,
            max_count=h.max_msg_nums,
            max_bytes=h.max_msg_bytes,
            suspend_ms=h.suspend_timeout_millis if h.sys_flag & PullSysFlag.SUSPEND else 0,
            subscription=expression,
            filter_type=kind,
        )
        try:
            result = self.service.answer(ask)
        except FilterError as exc:
            raise ClassicRefusal(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"subscription: {exc}"
            ) from None
        if isinstance(result, Awaitable):
            return self._later(req, h, result)
        return self._answer(req, h, result)

    async def _later(
        self, req: RemotingCommand, h: PullMessageHeader, result: Awaitable[PullAnswer]
    ) -> RemotingCommand:
        return self._answer(req, h, await result)

    def _suggested_broker(self) -> int:
        """Where the consumer should pull next (module doc)."""
        role = self.ctx.role
        if role.is_master or role.master_address:
            return _MASTER_ID
        return role.broker_id or 1

    def _answer(
        self, req: RemotingCommand, h: PullMessageHeader, answer: PullAnswer
    ) -> RemotingCommand:
        if isinstance(answer, PullRefused):
            raise ClassicRefusal(classic_code(answer.code), answer.remark)
        if isinstance(answer, PullCorrupt):
            raise ClassicRefusal(
                ResponseCode.SYSTEM_ERROR, answer.reason(h.topic, h.queue_id, h.queue_offset)
            )
        low = None if isinstance(answer, PullRetry) else answer.min_offset
        high = None if isinstance(answer, PullRetry) else answer.max_offset
        if low is None or high is None:
            low, high = self.service.bounds(h.topic, h.queue_id)
        # Every answer a client decodes carries the four fields (the Java client requires them,
        # PULL_RETRY_IMMEDIATELY's too).
        next_offset = None if isinstance(answer, PullRetry) else answer.next_offset
        if next_offset is None:
            next_offset = h.queue_offset
        header = PullMessageResponseHeader(
            suggest_which_broker_id=self._suggested_broker(),
            next_begin_offset=next_offset,
            min_offset=low,
            max_offset=high,
        ).ext_fields()
        if isinstance(answer, PullFound):
            try:
                body = classic_pull_body(answer.body)
            except (RecordError, ValueError) as exc:
                raise ClassicRefusal(
                    ResponseCode.SYSTEM_ERROR, f"records at {h.topic}:{h.queue_id}: {exc}"
                ) from None
            if not body:  # a tag filter passed over everything it read
                return make_response(req, ResponseCode.PULL_NOT_FOUND, ext_fields=header)
            return make_response(req, ResponseCode.SUCCESS, ext_fields=header, body=body)
        if isinstance(answer, PullNotFound):
            return make_response(req, ResponseCode.PULL_NOT_FOUND, ext_fields=header)
        if isinstance(answer, PullRetry):
            return make_response(req, ResponseCode.PULL_RETRY_IMMEDIATELY, ext_fields=header)
        assert isinstance(answer, PullOffsetMoved)
        return make_response(
            req, ResponseCode.PULL_OFFSET_MOVED, ext_fields=header, remark=answer.remark
        )
