"""SEND_MESSAGE and SEND_BATCH_MESSAGE: requests and their SUCCESS answers (docs/protocol.md).
Pure: no sockets, no clock.

Requests (header fields; ``?`` may be left out)::

    SEND_MESSAGE 10          topic, queueId? (-1: the broker picks), keys?, tags?,
                             properties? (the record's property text), flag?,
                             bornTimestamp?, bornHost?, producerSeq?;
                             body: the message body
    SEND_BATCH_MESSAGE 320   topic, queueId?, producerSeq?; body: a
                             msgpack array of maps, each with a non-empty binary ``body`` and
                             keys?, tags?, properties? (a map of strings), bornTimestamp?

``producerSeq`` (20 bytes, ``>QIQ``: producer id, epoch, sequence) marks an idempotent
producer's request (:class:`~protocol.idempotence.ProducerSeq`, docs/idempotence.md); the three
integer fields ``producerId``, ``producerEpoch`` and ``sequence`` of SDKs before it are read
too (all three or none).

SUCCESS answers: a send's ``msgId``, ``queueId``, ``queueOffset``, ``brokerName``
(:class:`SendAnswer`); a batch's ``queueId``, ``queueOffset`` (of its first message),
``count``, ``brokerName`` and the msgpack array of message ids as the body
(:class:`SendBatchAnswer`).

A SEND_MESSAGE's body is the broker's to judge (an empty one is MESSAGE_ILLEGAL, not a bad
request); a batch's body is checked here: a bad one raises :class:`~protocol.fields.FieldError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, NamedTuple

import msgpack
from mypy_extensions import mypyc_attr

from protocol.codes import RequestCode
from protocol.fields import FieldError, opt_int, opt_str, req_int, req_str
from protocol.idempotence import SEQ_FIELD, SEQ_FIELD_BYTES, ProducerSeq, unpack_seq_field
from protocol.message import Message, decode_properties
from protocol.remoting import Header, Scalar

# Final: compiled, read from a C static rather than the module's dictionary on each send.
_new_tuple: Final = tuple.__new__

__all__ = ["PackedBatch", "SendAnswer", "SendBatchAnswer", "SendBatchRequest", "SendRequest"]


class _SendFields(NamedTuple):
    topic: str
    body: bytes
    queue_id: int = -1
    keys: str = ""
    tags: str = ""
    properties: str = ""
    flag: int = 0
    born_timestamp: int = 0
    born_host: str = ""
    producer: ProducerSeq | None = None


# A subclass of a NamedTuple stays a Python class when compiled (docs/compiled.md).
@mypyc_attr(native_class=False)
class SendRequest(_SendFields):
    """SEND_MESSAGE: one message for ``topic`` (queue ``queue_id``; -1: the broker picks).
    ``properties`` is the property text as the record holds it
    (:func:`protocol.message.encode_properties`).

    A NamedTuple, not a frozen dataclass like the others: it is built and parsed once per
    message sent, and a frozen dataclass's init cost 1-2 us more per send (build it with
    keywords all the same)."""

    __slots__ = ()

    code: ClassVar[RequestCode] = RequestCode.SEND_MESSAGE

    def message(self, peer: str) -> Message:
        """The message as the broker stores it; born at ``peer`` unless the request says
        (``bornHost``)."""
        topic, body, _, keys, tags, props, flag, born, host, _producer = self
        if keys or tags or props or flag or born or host:
            return Message(
                topic=topic,
                body=body,
                keys=keys,
                tags=tags,
                properties=decode_properties(props.encode()) if props else {},
                flag=flag,
                born_timestamp=born,
                born_host=host or peer,
            )
        return Message(topic=topic, body=body, born_host=peer)  # the common case

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"topic": self.topic, "queueId": self.queue_id}
        if self.born_timestamp:
            header["bornTimestamp"] = self.born_timestamp
        if self.keys:
            header["keys"] = self.keys
        if self.tags:
            header["tags"] = self.tags
        if self.properties:
            header["properties"] = self.properties
        if self.flag:
            header["flag"] = self.flag
        if self.born_host:
            header["bornHost"] = self.born_host
        if self.producer is not None:
            self.producer.add_to(header)
        return header, self.body

    def to_queue(self, queue_id: int) -> tuple[Header, bytes | None]:
        """The wire form of this request for queue ``queue_id`` (a sender's attempt there)."""
        header, body = self.encode()
        header["queueId"] = queue_id
        return header, body

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> SendRequest:
        topic = req_str(header, "topic")
        n = len(header)
        # topic and queueId (and an idempotent producer's field), in a decoded frame's dict
        # (compiled, its look-ups are then the dict's own, not a Mapping's method calls)
        if (n == 2 or n == 3) and isinstance(header, dict):
            queue_id = header.get("queueId")
            if type(queue_id) is int:
                if n == 2:  # nothing optional: the common case
                    return _new_tuple(
                        cls, (topic, body or b"", queue_id, "", "", "", 0, 0, "", None)
                    )
                packed = header.get(SEQ_FIELD)
                if type(packed) is bytes and len(packed) == SEQ_FIELD_BYTES:
                    # unsigned fields: in range unless their top bit is set (else None, and
                    # the whole parse below says why)
                    producer = unpack_seq_field(packed)
                    if producer is not None:
                        return _new_tuple(
                            cls, (topic, body or b"", queue_id, "", "", "", 0, 0, "", producer)
                        )
        return cls(
            topic=topic,
            body=body or b"",
            queue_id=opt_int(header, "queueId", -1),
            keys=opt_str(header, "keys"),
            tags=opt_str(header, "tags"),
            properties=opt_str(header, "properties"),
            flag=opt_int(header, "flag", 0),
            born_timestamp=opt_int(header, "bornTimestamp", 0),
            born_host=opt_str(header, "bornHost"),
            producer=ProducerSeq.parse(header),
        )


class _PackedFields(NamedTuple):
    topic: str
    body: bytes


@mypyc_attr(native_class=False)
class PackedBatch(_PackedFields):
    """A SEND_BATCH_MESSAGE whose body is packed already (:meth:`SendBatchRequest.pack`, or a
    sender packing its own maps of the fields :meth:`SendBatchRequest.encode` writes, as the
    pipeline's writer does): sent to one queue or another without packing it again."""

    __slots__ = ()

    code: ClassVar[RequestCode] = RequestCode.SEND_BATCH_MESSAGE

    def to_queue(self, queue_id: int) -> tuple[Header, bytes]:
        return {"topic": self.topic, "queueId": queue_id}, self.body


@dataclass(frozen=True, slots=True, kw_only=True)
class SendBatchRequest:
    """SEND_BATCH_MESSAGE: messages for one queue of ``topic`` (-1: the broker picks), stored
    as one append. Each message's ``topic`` is the request's; its ``flag`` is not sent, and its
    ``born_host`` is the one given to :meth:`parse` (where the request came from)."""

    code: ClassVar[RequestCode] = RequestCode.SEND_BATCH_MESSAGE

    topic: str
    queue_id: int = -1
    messages: tuple[Message, ...]
    producer: ProducerSeq | None = None

    def encode(self) -> tuple[Header, bytes]:
        header, body = self.pack().to_queue(self.queue_id)
        if self.producer is not None:
            self.producer.add_to(header)
        return header, body

    def pack(self) -> PackedBatch:
        """The batch with its body packed once, to send to one queue or another."""
        items: list[dict[str, Any]] = []
        for m in self.messages:
            item: dict[str, Any] = {"body": m.body}
            if m.born_timestamp:
                item["bornTimestamp"] = m.born_timestamp
            if m.keys:
                item["keys"] = m.keys
            if m.tags:
                item["tags"] = m.tags
            if m.properties:
                item["properties"] = m.properties
            items.append(item)
        body: bytes = msgpack.packb(items, use_bin_type=True)
        return PackedBatch(self.topic, body)

    @classmethod
    def parse(
        cls, header: Mapping[str, Scalar], body: bytes | None = None, *, born_host: str = ""
    ) -> SendBatchRequest:
        topic = req_str(header, "topic")
        return cls(
            topic=topic,
            queue_id=opt_int(header, "queueId", -1),
            messages=_decode_batch(topic, body, born_host),
            producer=ProducerSeq.parse(header),
        )


def _decode_batch(topic: str, body: bytes | None, born_host: str) -> tuple[Message, ...]:
    if not body:
        raise FieldError("batch body is empty")
    try:
        items = msgpack.unpackb(body, raw=False)
    except Exception:
        raise FieldError("batch body is not msgpack") from None
    if not isinstance(items, list) or not items:
        raise FieldError("batch body must be a non-empty array")
    messages: list[Message] = []
    append = messages.append
    for item in items:
        if not isinstance(item, dict):
            raise FieldError("batch entry is not a map")
        mbody = item.get("body")
        if not isinstance(mbody, bytes) or not mbody:
            raise FieldError("batch entry needs a non-empty binary 'body'")
        if len(item) == 1:  # a body only: the common case, nothing optional to check
            append(Message(topic=topic, body=mbody, born_host=born_host))
            continue
        props = item.get("properties") or {}
        keys = item.get("keys") or ""
        tags = item.get("tags") or ""
        born = item.get("bornTimestamp") or 0
        if (
            not isinstance(props, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in props.items())
            or not isinstance(keys, str)
            or not isinstance(tags, str)
            or type(born) is not int
        ):
            raise FieldError("batch entry has a mistyped keys, tags, properties or bornTimestamp")
        append(
            Message(
                topic=topic,
                body=mbody,
                keys=keys,
                tags=tags,
                properties=props,
                born_timestamp=born,
                born_host=born_host,
            )
        )
    return tuple(messages)


# -- answers ----------------------------------------------------------------------------------


class SendAnswer(NamedTuple):
    """A send's SUCCESS: the message's id, and its queue and offset in broker group
    ``broker_name`` (offset -1 for a scheduled message, which has none until delivered).
    A NamedTuple for the same reason as :class:`SendRequest`."""

    msg_id: str
    queue_id: int
    queue_offset: int
    broker_name: str

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {
            "msgId": self.msg_id,
            "queueId": self.queue_id,
            "queueOffset": self.queue_offset,
            "brokerName": self.broker_name,
        }
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> SendAnswer:
        return cls(
            msg_id=req_str(header, "msgId"),
            queue_id=req_int(header, "queueId"),
            queue_offset=req_int(header, "queueOffset"),
            broker_name=req_str(header, "brokerName"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SendBatchAnswer:
    """A batch's SUCCESS: its queue, the offset of its first ordinary message (-1 when all were
    scheduled), how many were stored, and every message's id in the order sent."""

    queue_id: int
    queue_offset: int
    count: int
    broker_name: str
    msg_ids: tuple[str, ...]

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {
            "queueId": self.queue_id,
            "queueOffset": self.queue_offset,
            "count": self.count,
            "brokerName": self.broker_name,
        }
        return header, msgpack.packb(list(self.msg_ids))

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> SendBatchAnswer:
        try:
            ids = msgpack.unpackb(body or b"\x90", raw=False)
        except Exception:
            raise FieldError("batch answer body is not msgpack") from None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise FieldError("batch answer body must be an array of message ids")
        return cls(
            queue_id=req_int(header, "queueId"),
            queue_offset=req_int(header, "queueOffset"),
            count=req_int(header, "count"),
            broker_name=req_str(header, "brokerName"),
            msg_ids=tuple(ids),
        )
