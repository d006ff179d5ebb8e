"""Message trace records: RocketMQ's trace data format, with our records for the broker's ends.

Pure code: no clock, no I/O. The broker (:mod:`broker.trace`), the SDK (:mod:`client.trace`)
and ``rmqctl queryMsgTraceById`` share it.

A trace message is an ordinary message in the trace topic (:data:`TRACE_TOPIC`, RocketMQ's
``RMQ_SYS_TRACE_TOPIC``); its ``KEYS`` are the ids of the messages it traces, so the key index
finds a message's records by its id. Its body is text, RocketMQ's ``TraceDataEncoder`` layout:
each record is its fields joined by ``\\x01`` (:data:`CONTENT_SEP`) and ended by ``\\x02``
(:data:`FIELD_SEP`); the first field names the record type. A body holds one or more records::

    Pub            type ts region group topic msgId tags keys storeHost bodyLength costMs
                   msgType offsetMsgId success clientHost | queueId queueOffset traceparent source
    SubBefore      type ts region group requestId msgId retryTimes keys
                   | clientHost traceparent source
    SubAfter       type requestId msgId costMs success keys contextCode ts group
                   | clientHost source
    EndTransaction type ts region group topic msgId tags keys storeHost msgType transactionId
                   transactionState fromTransactionCheck | source

The fields left of ``|`` are RocketMQ's, in its order, so its ``TraceDataEncoder`` (and the
tools built on it) reads our records; the fields right of ``|`` are ours, appended where its
decoder does not look. ``success`` and ``fromTransactionCheck`` are ``true``/``false``;
``msgType`` is RocketMQ's ``MessageType`` ordinal (:class:`MessageType`), ``contextCode`` its
``ConsumeReturnType`` ordinal (:class:`ConsumeReturn`), ``transactionState`` its
``LocalTransactionState`` name. ``source`` says who wrote the record: ``broker`` or ``client``.

RocketMQ has no record for what only a broker sees after delivery; ours use the same separators
and a type name RocketMQ's decoder skips (:class:`EndRecord`)::

    Retry|DLQ|Recall|Delay  type ts region group topic msgId keys storeHost attempt detail source

``detail`` is the topic the message went to (Retry, DLQ), or the time it is due (Delay, ms).

A delivery to a group is a SubBefore (handed out: its ``requestId``, the attempt as
``retryTimes`` = attempt - 1) and a SubAfter with the same ``requestId`` (acked: success true;
nacked or timed out: success false, ``costMs`` the time between the two).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import ClassVar, Final

__all__ = [
    "CONTENT_SEP",
    "DEFAULT_REGION",
    "FIELD_SEP",
    "PROP_TRACE_CONTEXT",
    "SOURCE_BROKER",
    "SOURCE_CLIENT",
    "TRACE_TOPIC",
    "ConsumeReturn",
    "EndRecord",
    "EndTransactionRecord",
    "MessageType",
    "PubRecord",
    "SubAfterRecord",
    "SubBeforeRecord",
    "TraceFormatError",
    "TraceRecord",
    "TraceType",
    "decode_records",
    "encode_body",
    "encode_line",
    "encode_record",
    "encode_records",
    "encoded",
    "iter_records",
    "pub_fields",
    "record_msg_ids",
    "take_message",
]

TRACE_TOPIC: Final = "RMQ_SYS_TRACE_TOPIC"
"""RocketMQ's default trace topic (``TopicValidator.RMQ_SYS_TRACE_TOPIC``)."""
CONTENT_SEP: Final = "\x01"
"""Between the fields of one record (RocketMQ's ``TraceConstants.CONTENT_SPLITOR``)."""
FIELD_SEP: Final = "\x02"
"""After each record (RocketMQ's ``TraceConstants.FIELD_SPLITOR``)."""
PROP_TRACE_CONTEXT: Final = "TRACE_CONTEXT"
"""RocketMQ's message property for the W3C trace context (``traceparent``) of the official
clients (their ``SystemProperties.trace_context``)."""
DEFAULT_REGION: Final = "DefaultRegion"
"""RocketMQ's region id when none is configured."""
SOURCE_BROKER: Final = "broker"
SOURCE_CLIENT: Final = "client"


class TraceFormatError(ValueError):
    """A trace body that is not in this format (one line: which record and why)."""


class TraceType(StrEnum):
    PUB = "Pub"
    SUB_BEFORE = "SubBefore"
    SUB_AFTER = "SubAfter"
    END_TRANSACTION = "EndTransaction"
    RETRY = "Retry"
    DLQ = "DLQ"
    RECALL = "Recall"
    DELAY = "Delay"


class MessageType(IntEnum):
    """RocketMQ's ``MessageType``, by ordinal."""

    NORMAL = 0
    TRANS_HALF = 1
    TRANS_COMMIT = 2
    DELAY = 3
    ORDER = 4


# The records are values (nothing changes one once made; hashed by their fields, a lookup shows a
# record found twice once) but not frozen dataclasses: the broker makes one per message it
# stores with trace_enabled, and a frozen dataclass's __init__ sets each field through
# object.__setattr__ (PubRecord: 14.5 us against 2.6 us, on the loaded 2-core machine).


class ConsumeReturn(IntEnum):
    """RocketMQ's ``ConsumeReturnType``, by ordinal (a SubAfter's ``contextCode``)."""

    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURNNULL = 3
    FAILED = 4


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class PubRecord:
    """A send: written by the client that sent it and by the broker that stored it."""

    type: ClassVar[TraceType] = TraceType.PUB

    timestamp: int
    group: str
    topic: str
    msg_id: str
    tags: str = ""
    keys: str = ""
    store_host: str = ""
    body_length: int = 0
    cost_ms: int = 0
    msg_type: MessageType = MessageType.NORMAL
    offset_msg_id: str = ""
    success: bool = True
    client_host: str = ""
    queue_id: int = -1
    queue_offset: int = -1
    traceparent: str = ""
    source: str = SOURCE_CLIENT
    region: str = DEFAULT_REGION


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class SubBeforeRecord:
    """A message handed out to a consumer of ``group`` (attempt = ``retry_times`` + 1)."""

    type: ClassVar[TraceType] = TraceType.SUB_BEFORE

    timestamp: int
    group: str
    request_id: str
    msg_id: str
    retry_times: int = 0
    keys: str = ""
    client_host: str = ""
    traceparent: str = ""
    source: str = SOURCE_CLIENT
    region: str = DEFAULT_REGION


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class SubAfterRecord:
    """The end of one delivery: acked (``success``) or nacked/timed out, ``cost_ms`` after."""

    type: ClassVar[TraceType] = TraceType.SUB_AFTER

    timestamp: int
    group: str
    request_id: str
    msg_id: str
    cost_ms: int = 0
    success: bool = True
    keys: str = ""
    context_code: ConsumeReturn = ConsumeReturn.SUCCESS
    client_host: str = ""
    source: str = SOURCE_CLIENT


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class EndTransactionRecord:
    """A transaction's end: ``state`` is COMMIT_MESSAGE, ROLLBACK_MESSAGE or UNKNOW."""

    type: ClassVar[TraceType] = TraceType.END_TRANSACTION

    timestamp: int
    group: str
    topic: str
    msg_id: str
    tags: str = ""
    keys: str = ""
    store_host: str = ""
    msg_type: MessageType = MessageType.TRANS_HALF
    transaction_id: str = ""
    state: str = "COMMIT_MESSAGE"
    from_check: bool = False
    source: str = SOURCE_BROKER
    region: str = DEFAULT_REGION


_END_TYPES: Final = frozenset({TraceType.RETRY, TraceType.DLQ, TraceType.RECALL, TraceType.DELAY})
_TX_STATES: Final = frozenset({"COMMIT_MESSAGE", "ROLLBACK_MESSAGE", "UNKNOW"})


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class EndRecord:
    """Ours: a message sent back for retry, to the DLQ, recalled, or scheduled (``kind``)."""

    kind: TraceType
    timestamp: int
    group: str
    topic: str
    msg_id: str
    keys: str = ""
    store_host: str = ""
    attempt: int = 0
    detail: str = ""
    source: str = SOURCE_BROKER
    region: str = DEFAULT_REGION

    def __post_init__(self) -> None:
        if self.kind not in _END_TYPES:
            raise TraceFormatError(f"not an end record type: {self.kind}")

    @property
    def type(self) -> TraceType:
        return self.kind


TraceRecord = PubRecord | SubBeforeRecord | SubAfterRecord | EndTransactionRecord | EndRecord


def _b(value: bool) -> str:
    return "true" if value else "false"


def _fields(record: TraceRecord) -> list[str]:
    r = record
    if isinstance(r, PubRecord):
        return pub_fields(
            r.timestamp, r.region, r.group, r.topic, r.msg_id, r.tags, r.keys, r.store_host,
            r.body_length, r.cost_ms, r.msg_type, r.offset_msg_id, r.success, r.client_host,
            r.queue_id, r.queue_offset, r.traceparent, r.source,
        )  # fmt: skip
    if isinstance(r, SubBeforeRecord):
        return [
            "SubBefore", str(r.timestamp), r.region, r.group, r.request_id, r.msg_id,
            str(r.retry_times), r.keys, r.client_host, r.traceparent, r.source,
        ]  # fmt: skip
    if isinstance(r, SubAfterRecord):
        return [
            "SubAfter", r.request_id, r.msg_id, str(r.cost_ms), _b(r.success), r.keys,
            str(int(r.context_code)), str(r.timestamp), r.group, r.client_host, r.source,
        ]  # fmt: skip
    if isinstance(r, EndTransactionRecord):
        return [
            "EndTransaction", str(r.timestamp), r.region, r.group, r.topic, r.msg_id, r.tags,
            r.keys, r.store_host, str(int(r.msg_type)), r.transaction_id, r.state,
            _b(r.from_check), r.source,
        ]  # fmt: skip
    return [
        str(r.kind), str(r.timestamp), r.region, r.group, r.topic, r.msg_id, r.keys,
        r.store_host, str(r.attempt), r.detail, r.source,
    ]  # fmt: skip


def pub_fields(
    timestamp: int, region: str, group: str, topic: str, msg_id: str, tags: str, keys: str,
    store_host: str, body_length: int, cost_ms: int, msg_type: MessageType, offset_msg_id: str,
    success: bool, client_host: str, queue_id: int, queue_offset: int, traceparent: str,
    source: str,
) -> list[str]:  # fmt: skip
    """A Pub record's fields in order (:class:`PubRecord`'s, without making one: the broker
    encodes one per message it stores, :func:`encode_line`)."""
    return [
        "Pub", str(timestamp), region, group, topic, msg_id, tags, keys, store_host,
        str(body_length), str(cost_ms), str(int(msg_type)), offset_msg_id, _b(success),
        client_host, str(queue_id), str(queue_offset), traceparent, source,
    ]  # fmt: skip


def encode_line(fields: list[str]) -> str:
    """One record's line from its fields (:func:`encode_body` joins lines). Raises
    :class:`TraceFormatError` when a field holds a separator."""
    line = CONTENT_SEP.join(fields)
    # One look at the joined line, not two per field: a separator inside a field shows as one
    # CONTENT_SEP too many, or a FIELD_SEP.
    if line.count(CONTENT_SEP) != len(fields) - 1 or FIELD_SEP in line:
        bad = next(f for f in fields if CONTENT_SEP in f or FIELD_SEP in f)
        raise TraceFormatError(f"a {fields[0]} field holds a separator: {bad!r}")
    return line


def encode_record(record: TraceRecord) -> str:
    """``record``'s line (raises :class:`TraceFormatError` as :func:`encode_line`)."""
    return encode_line(_fields(record))


def encoded(record: TraceRecord | tuple[str, str]) -> tuple[str, str] | None:
    """What a trace writer buffers of ``record``: its message id and line (a pair already is);
    None when a field holds a separator (the writer drops it and counts it)."""
    if isinstance(record, tuple):
        return record
    try:
        return record.msg_id, encode_record(record)
    except TraceFormatError:
        return None


def encode_body(lines: Sequence[str]) -> str:
    """The body of a trace message holding the records of ``lines``, in order."""
    return FIELD_SEP.join(lines) + FIELD_SEP if lines else ""


def take_message(buffer: deque[tuple[str, str]], records: int) -> tuple[bytes, str, int]:
    """Up to ``records`` encoded records (message id, line) taken from the front of ``buffer``
    as one trace message: its body, its keys (the ids it traces, each once, space-separated:
    RocketMQ's ``KEYS``, what the key index finds it by) and how many were taken."""
    n = min(records, len(buffer))
    taken = [buffer.popleft() for _ in range(n)]
    body = encode_body([line for _, line in taken]).encode()
    return body, " ".join(dict.fromkeys(i for i, _ in taken if i)), n


def encode_records(records: Iterable[TraceRecord]) -> str:
    """The body of a trace message holding ``records``, in order."""
    return encode_body([encode_record(r) for r in records])


def record_msg_ids(records: Iterable[TraceRecord]) -> list[str]:
    """The ids a trace message holding ``records`` is keyed by (each once, in order)."""
    seen: dict[str, None] = {}
    for record in records:
        if record.msg_id:
            seen[record.msg_id] = None
    return list(seen)


def _get(line: list[str], i: int, default: str = "") -> str:
    return line[i] if i < len(line) else default


def _int(text: str, what: str, default: int | None = None) -> int:
    if text == "" and default is not None:
        return default
    try:
        return int(text)
    except ValueError:
        raise TraceFormatError(f"{what} is not a number: {text!r}") from None


def _bool(text: str) -> bool:
    # Java's Boolean.parseBoolean: "true" in any case is true, anything else false
    return text.lower() == "true"


def _need(line: list[str], n: int) -> None:
    if len(line) < n:
        raise TraceFormatError(f"a {line[0]} record has {len(line)} fields, fewer than {n}")


def _decode_one(line: list[str]) -> TraceRecord | None:
    kind = line[0]
    if kind == "Pub":
        _need(line, 13)
        # RocketMQ's writers before offsetMsgId (13 fields) and before clientHost (14)
        has_offset_id = len(line) >= 14
        return PubRecord(
            timestamp=_int(line[1], "timestamp"),
            region=line[2],
            group=line[3],
            topic=line[4],
            msg_id=line[5],
            tags=line[6],
            keys=line[7],
            store_host=line[8],
            body_length=_int(line[9], "bodyLength"),
            cost_ms=_int(line[10], "costTime"),
            msg_type=MessageType(_int(line[11], "msgType")),
            offset_msg_id=line[12] if has_offset_id else "",
            success=_bool(line[13] if has_offset_id else line[12]),
            client_host=_get(line, 14),
            queue_id=_int(_get(line, 15), "queueId", -1),
            queue_offset=_int(_get(line, 16), "queueOffset", -1),
            traceparent=_get(line, 17),
            source=_get(line, 18, SOURCE_CLIENT),
        )
    if kind == "SubBefore":
        _need(line, 8)
        return SubBeforeRecord(
            timestamp=_int(line[1], "timestamp"),
            region=line[2],
            group=line[3],
            request_id=line[4],
            msg_id=line[5],
            retry_times=_int(line[6], "retryTimes"),
            keys=line[7],
            client_host=_get(line, 8),
            traceparent=_get(line, 9),
            source=_get(line, 10, SOURCE_CLIENT),
        )
    if kind == "SubAfter":
        _need(line, 6)
        return SubAfterRecord(
            request_id=line[1],
            msg_id=line[2],
            cost_ms=_int(line[3], "costTime"),
            success=_bool(line[4]),
            keys=line[5],
            context_code=ConsumeReturn(_int(_get(line, 6), "contextCode", 0)),
            timestamp=_int(_get(line, 7), "timestamp", 0),
            group=_get(line, 8),
            client_host=_get(line, 9),
            source=_get(line, 10, SOURCE_CLIENT),
        )
    if kind == "EndTransaction":
        _need(line, 13)
        if line[11] not in _TX_STATES:
            raise TraceFormatError(f"not a transaction state: {line[11]!r}")
        return EndTransactionRecord(
            timestamp=_int(line[1], "timestamp"),
            region=line[2],
            group=line[3],
            topic=line[4],
            msg_id=line[5],
            tags=line[6],
            keys=line[7],
            store_host=line[8],
            msg_type=MessageType(_int(line[9], "msgType")),
            transaction_id=line[10],
            state=line[11],
            from_check=_bool(line[12]),
            source=_get(line, 13, SOURCE_BROKER),
        )
    if kind in _END_TYPES:
        _need(line, 10)
        return EndRecord(
            kind=TraceType(kind),
            timestamp=_int(line[1], "timestamp"),
            region=line[2],
            group=line[3],
            topic=line[4],
            msg_id=line[5],
            keys=line[6],
            store_host=line[7],
            attempt=_int(line[8], "attempt"),
            detail=line[9],
            source=_get(line, 10, SOURCE_BROKER),
        )
    return None  # a type of a later version: skipped, as RocketMQ's decoder does


def iter_records(body: str) -> Iterator[TraceRecord]:
    """The records of a trace message body, in order; unknown record types are skipped."""
    for chunk in body.split(FIELD_SEP):
        if not chunk.strip():
            continue
        try:
            record = _decode_one(chunk.split(CONTENT_SEP))
        except ValueError as exc:  # an enum ordinal out of range, a TraceFormatError
            raise TraceFormatError(f"bad trace record {chunk[:40]!r}: {exc}") from None
        if record is not None:
            yield record


def decode_records(body: str | bytes) -> list[TraceRecord]:
    """:func:`iter_records` as a list; ``body`` may be the raw UTF-8 bytes."""
    if isinstance(body, bytes):
        try:
            body = body.decode()
        except UnicodeDecodeError:
            raise TraceFormatError("a trace body that is not UTF-8") from None
    return list(iter_records(body))
