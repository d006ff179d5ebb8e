"""SEND_MESSAGE (10, long field names), SEND_MESSAGE_V2 (310, one-letter names) and
SEND_BATCH_MESSAGE (320, the batch body) of classic producers: one call of the send service
(:meth:`broker.send.service.SendService.put`, where every decision is), answered once the send
is as durable as the broker's own answers wait for (:meth:`SendService.durable`).

What is translated on the way in, the rest of the properties kept as they came:

- ``TAGS`` and ``KEYS`` become the message's tags (the tag filter's hash) and keys (the key
  index);
- ``DELAY`` (a delay level 1..18 of RocketMQ's default table, 1s .. 2h) becomes our timer's
  ``TIMER_DELAY_MS``; ``__STARTDELIVERTIME`` (epoch ms) reaches the timer as it is;
- ``__SHARDING_KEY`` (what ali-ons names the sharding key) becomes our FIFO message group
  ``__SHARDINGKEY``, which RocketMQ's Java client already uses;
- a body the client compressed (sysFlag bit 0) is inflated: stored records have no sysFlag, so
  pulls serve bodies uncompressed;
- a transactional send (``TRAN_MSG`` true, with ``PGROUP``) is stored as a half message whose
  transaction id is its ``UNIQ_KEY`` (the Java client's ``transactionId``; END_TRANSACTION
  names it so); the answer carries it as ``transactionId``.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from typing import Final

from broker.classic.codes import classic_code
from broker.context import BrokerContext
from broker.send.service import SendRefused, SendService
from protocol.fifo import PROP_MESSAGE_GROUP
from protocol.message import PROP_KEYS, PROP_TAGS, Message
from protocol.retry import parse_delay_levels
from protocol.rocketmq_remoting.codes import RequestCode, ResponseCode
from protocol.rocketmq_remoting.frame import RemotingCommand, make_response
from protocol.rocketmq_remoting.headers import SendMessageHeader, SendMessageResponseHeader
from protocol.rocketmq_remoting.message_decoder import decode_batch
from protocol.rocketmq_remoting.properties import decode_properties
from protocol.timer import PROP_TIMER_DELAY_MS, PROP_UNIQ_KEY
from protocol.transaction import PROP_TRANSACTION_ID, is_transactional
from remoting.classic_door import ClassicAnswer, ClassicDoor, ClassicRefusal, ClassicSession

__all__ = ["CLASSIC_DELAY_LEVELS_MS", "ClassicSend", "classic_message"]

CLASSIC_DELAY_LEVELS_MS: Final = parse_delay_levels(
    "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
)
"""RocketMQ's default ``messageDelayLevel``: level n (from 1) waits the n-th of these."""

PROP_DELAY: Final = "DELAY"
PROP_SHARDING_KEY_ALIONS: Final = "__SHARDING_KEY"
SYSFLAG_COMPRESSED: Final = 0x1


def classic_message(
    topic: str, body: bytes, properties: dict[str, str], flag: int, born_ms: int, peer: str
) -> Message:
    """A classic producer's message as the broker stores it (see the module docstring)."""
    tags = properties.pop(PROP_TAGS, "")
    keys = properties.pop(PROP_KEYS, "")
    level = properties.pop(PROP_DELAY, None)
    if level is not None:
        try:
            n = int(level)
        except ValueError:
            raise ClassicRefusal(
                ResponseCode.MESSAGE_ILLEGAL, f"property DELAY {level!r} is not a delay level"
            ) from None
        if n > 0:
            delay = CLASSIC_DELAY_LEVELS_MS[min(n, len(CLASSIC_DELAY_LEVELS_MS)) - 1]
            properties.setdefault(PROP_TIMER_DELAY_MS, str(delay))
    if is_transactional(properties) and PROP_UNIQ_KEY in properties:
        # The classic producer's transaction id is its half message's UNIQ_KEY.
        properties.setdefault(PROP_TRANSACTION_ID, properties[PROP_UNIQ_KEY])
    sharding = properties.pop(PROP_SHARDING_KEY_ALIONS, None)
    if sharding:
        properties.setdefault(PROP_MESSAGE_GROUP, sharding)
    return Message(
        topic=topic,
        body=body,
        keys=keys,
        tags=tags,
        properties=properties,
        flag=flag,
        born_timestamp=born_ms,
        born_host=peer,
    )


def _inflate(body: bytes, sys_flag: int) -> bytes:
    if not sys_flag & SYSFLAG_COMPRESSED:
        return body
    try:
        return zlib.decompress(body)
    except zlib.error as exc:
        raise ClassicRefusal(
            ResponseCode.MESSAGE_ILLEGAL, f"compressed body does not inflate: {exc}"
        ) from None


class ClassicSend:
    def __init__(self, ctx: BrokerContext) -> None:
        self.service: SendService = ctx.sends

    def register(self, door: ClassicDoor) -> None:
        door.register(RequestCode.SEND_MESSAGE, self.send_message)
        door.register(RequestCode.SEND_MESSAGE_V2, self.send_message_v2)
        door.register(RequestCode.SEND_BATCH_MESSAGE, self.send_batch)

    def send_message(self, session: ClassicSession, req: RemotingCommand) -> ClassicAnswer:
        return self._send(session, req, SendMessageHeader.parse(req.ext_fields, short_names=False))

    def send_message_v2(self, session: ClassicSession, req: RemotingCommand) -> ClassicAnswer:
        return self._send(session, req, SendMessageHeader.parse(req.ext_fields, short_names=True))

    def send_batch(self, session: ClassicSession, req: RemotingCommand) -> ClassicAnswer:
        h = SendMessageHeader.parse(req.ext_fields, short_names=True)
        messages = [
            classic_message(
                h.topic,
                _inflate(m.body, h.sys_flag),
                dict(m.properties),
                m.flag,
                h.born_timestamp,
                session.peer,
            )
            for m in decode_batch(req.body)
        ]
        return self._put(req, h, messages)

    def _send(
        self, session: ClassicSession, req: RemotingCommand, h: SendMessageHeader
    ) -> ClassicAnswer:
        if not req.body:
            self.service.count_refusal(ResponseCode.MESSAGE_ILLEGAL)
            raise ClassicRefusal(ResponseCode.MESSAGE_ILLEGAL, "message body is empty")
        props = decode_properties(h.properties) if h.properties else {}
        msg = classic_message(
            h.topic, _inflate(req.body, h.sys_flag), props, h.flag, h.born_timestamp, session.peer
        )
        return self._put(req, h, [msg])

    def _put(
        self, req: RemotingCommand, h: SendMessageHeader, messages: list[Message]
    ) -> ClassicAnswer:
        """The answer at once when the send needs no wait, else a future of it set when the
        durability wait ends (a callback: no task per send, as our own door answers)."""
        start = time.perf_counter()
        service = self.service
        try:
            result = service.put(h.topic, h.queue_id, messages)
        except SendRefused as refused:
            raise ClassicRefusal(classic_code(refused.code), refused.remark) from None
        answer = SendMessageResponseHeader(
            msg_id=",".join(service.msg_id(off) for off in result.physical_offsets),
            queue_id=result.queue_id,
            queue_offset=result.first_queue_offset,
            transaction_id=messages[0].properties.get(PROP_TRANSACTION_ID),
        )
        resp = make_response(req, ResponseCode.SUCCESS, ext_fields=answer.ext_fields())
        now: list[RemotingCommand] = []  # the answer, when it was settled before we return
        later: asyncio.Future[RemotingCommand | None] | None = None

        def done(code: int, remark: str) -> None:
            if code == ResponseCode.SUCCESS:
                answered = resp
            else:
                answered = make_response(req, classic_code(code), remark=remark)
            if later is None:
                now.append(answered)
            elif not later.done():  # not cancelled by the connection's close
                later.set_result(answered)

        service.when_durable(result, start, done)
        if now:
            return now[0]
        later = asyncio.get_running_loop().create_future()
        return later
