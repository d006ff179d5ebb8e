"""The custom headers of the classic clients' broker requests: typed, read from and written to a
frame's ``extFields`` (issue 27 item 3). Pure: no sockets, no clock.

Every value in ``extFields`` is a string; Java writes each non-null header field with
``toString()`` and reads it back with ``Integer.parseInt``, ``Long.parseLong`` and
``Boolean.parseBoolean`` (only ``"true"``, in any case, is true). A field RocketMQ marks
``@CFNotNull`` is required here too. A missing or malformed field raises :class:`HeaderError`
naming it; the request gets an error answer and the connection stays.

Field names (``?``: may be left out)::

    SEND_MESSAGE 10            producerGroup topic defaultTopic defaultTopicQueueNums queueId
                               sysFlag bornTimestamp flag properties? reconsumeTimes? unitMode?
                               batch? maxReconsumeTimes? (brokerName? as bname)
    SEND_MESSAGE_V2 310        the same under one-letter names, a..n (SEND_V2_NAMES);
    SEND_BATCH_MESSAGE 320     Java clients send V2 names with m (batch) true
      answer                   msgId queueId queueOffset transactionId? batchUniqId?
    PULL_MESSAGE 11            consumerGroup topic queueId queueOffset maxMsgNums sysFlag
                               commitOffset suspendTimeoutMillis subscription? subVersion
                               expressionType? maxMsgBytes?
      answer                   suggestWhichBrokerId nextBeginOffset minOffset maxOffset
    QUERY_CONSUMER_OFFSET 14   consumerGroup topic queueId setZeroIfNotFound?; answer offset
    UPDATE_CONSUMER_OFFSET 15  consumerGroup topic queueId commitOffset
    SEARCH_OFFSET_BY_TIMESTAMP 29  topic queueId timestamp boundaryType?; answer offset
    GET_MAX_OFFSET 30, GET_MIN_OFFSET 31  topic queueId; answer offset
    UNREGISTER_CLIENT 35       clientID producerGroup? consumerGroup?
    CONSUMER_SEND_MSG_BACK 36  offset group delayLevel originMsgId? originTopic?
                               maxReconsumeTimes?
    END_TRANSACTION 37         topic? producerGroup tranStateTableOffset commitLogOffset
                               commitOrRollback fromTransactionCheck? msgId transactionId?
    GET_CONSUMER_LIST_BY_GROUP 38, NOTIFY_CONSUMER_IDS_CHANGED 40  consumerGroup
    CHECK_TRANSACTION_STATE 39 topic? tranStateTableOffset commitLogOffset msgId?
                               transactionId? offsetMsgId?
    QUERY_MESSAGE 12           topic key maxNum beginTimestamp endTimestamp;
      answer                   indexLastUpdateTimestamp indexLastUpdatePhyoffset
    VIEW_MESSAGE_BY_ID 33      topic? offset (the CommitLog offset from the message id)

Java 5.x clients add their RPC header's fields (``bname``, ``ns``, ``nsd``, ``oway``); readers
ignore fields they do not know. ``commitOrRollback`` takes the message sysFlag's transaction
values (:data:`TRANSACTION_NOT_TYPE` and the others below); PULL_MESSAGE's ``sysFlag`` holds
:class:`PullSysFlag` bits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import IntFlag
from typing import Any, Final, NamedTuple

__all__ = [
    "SEND_V2_NAMES",
    "TRANSACTION_COMMIT_TYPE",
    "TRANSACTION_NOT_TYPE",
    "TRANSACTION_PREPARED_TYPE",
    "TRANSACTION_ROLLBACK_TYPE",
    "CheckTransactionStateHeader",
    "ConsumerSendMsgBackHeader",
    "EndTransactionHeader",
    "GroupHeader",
    "HeaderError",
    "PullMessageHeader",
    "PullMessageResponseHeader",
    "PullSysFlag",
    "QueryConsumerOffsetHeader",
    "QueryMessageHeader",
    "QueueHeader",
    "SearchOffsetHeader",
    "SendMessageHeader",
    "SendMessageResponseHeader",
    "UnregisterClientHeader",
    "UpdateConsumerOffsetHeader",
    "ViewMessageHeader",
    "offset_answer",
    "opt_int_in",
]

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)

TRANSACTION_NOT_TYPE: Final = 0
TRANSACTION_PREPARED_TYPE: Final = 0x1 << 2
TRANSACTION_COMMIT_TYPE: Final = 0x2 << 2
TRANSACTION_ROLLBACK_TYPE: Final = 0x3 << 2

SEND_V2_NAMES: Final = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "brokerName",
}
"""SendMessageRequestHeaderV2's one-letter names and the V1 names they stand for."""
_SEND_V1_NAMES: Final = {long: short for short, long in SEND_V2_NAMES.items()}
_SEND_SHORT_KEYS: Final = tuple(SEND_V2_NAMES)
_SEND_LONG_KEYS: Final = (*(v for k, v in SEND_V2_NAMES.items() if k != "n"), "bname")
"""The send header's fields in SendMessageHeader's order, as each variant names them (SEND_MESSAGE
has no brokerName field of its own: 5.x clients send it as the RPC header's ``bname``)."""


class HeaderError(ValueError):
    """A header field is missing or malformed; the message names it."""


class PullSysFlag(IntFlag):
    COMMIT_OFFSET = 0x1
    """The request carries the consumer's offset to commit (``commitOffset``)."""
    SUSPEND = 0x1 << 1
    """Hold the request up to ``suspendTimeoutMillis`` when there is nothing to read."""
    SUBSCRIPTION = 0x1 << 2
    """The request carries its subscription (``subscription``, ``expressionType``)."""
    CLASS_FILTER = 0x1 << 3
    LITE_PULL = 0x1 << 4


# -- field readers ---------------------------------------------------------------------------


def _str(fields: Mapping[str, str], name: str) -> str:
    value = fields.get(name)
    if value is None:
        raise HeaderError(f"header field {name} is missing")
    return value


def _num(fields: Mapping[str, str], name: str, bounds: tuple[int, int]) -> int:
    text = _str(fields, name)
    try:
        value = int(text)
    except ValueError:
        raise HeaderError(f"header field {name} is not an integer: {text!r}") from None
    if not bounds[0] <= value <= bounds[1]:
        raise HeaderError(f"header field {name} {value} is out of range")
    return value


def _int(fields: Mapping[str, str], name: str) -> int:
    return _num(fields, name, _INT32)


def _long(fields: Mapping[str, str], name: str) -> int:
    return _num(fields, name, _INT64)


def _opt_int(fields: Mapping[str, str], name: str) -> int | None:
    return None if fields.get(name) is None else _num(fields, name, _INT32)


def opt_int_in(fields: Mapping[str, str], name: str, low: int, high: int) -> int | None:
    """Integer field ``name`` within ``low`` to ``high``, None when left out; a
    :class:`HeaderError` naming it when it is no integer or out of range."""
    return None if fields.get(name) is None else _num(fields, name, (low, high))


def _opt_bool(fields: Mapping[str, str], name: str) -> bool:
    value = fields.get(name)
    return value is not None and value.lower() == "true"


def _opt_str(fields: Mapping[str, str], name: str) -> str | None:
    return fields.get(name)


def _opt_bool_or_none(fields: Mapping[str, str], name: str) -> bool | None:
    value = fields.get(name)
    return None if value is None else value.lower() == "true"


def _pull_sys_flag(fields: Mapping[str, str], name: str) -> PullSysFlag:
    return PullSysFlag(_num(fields, name, (0, _INT32[1])))


_Fields = tuple[tuple[str, str, Callable[[Mapping[str, str], str], object]], ...]
"""A header's fields: (attribute, field name, reader), in the order they are read."""


def _read(fields: Mapping[str, str], table: _Fields) -> dict[str, Any]:
    """The header's attributes, each read by its reader in the table's order (so the first
    missing or malformed field is the one named)."""
    return {attr: read(fields, name) for attr, name, read in table}


def _put(out: dict[str, str], name: str, value: object) -> None:
    if value is not None:
        out[name] = "true" if value is True else "false" if value is False else str(value)


# -- send ------------------------------------------------------------------------------------


class SendMessageHeader(NamedTuple):
    """SEND_MESSAGE's header, or SEND_MESSAGE_V2's / SEND_BATCH_MESSAGE's under short names."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str = ""
    reconsume_times: int | None = None
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: int | None = None
    broker_name: str | None = None

    @classmethod
    def parse(cls, fields: Mapping[str, str], *, short_names: bool) -> SendMessageHeader:
        """Read the V2 one-letter names when ``short_names`` (codes 310 and 320), else the
        long names of SEND_MESSAGE (10)."""
        # The send path's fast read: direct lookups, one try. Anything it does not take (a
        # missing or malformed field, a number out of range) is read again by the checked
        # reader below, which names the field.
        n = _SEND_SHORT_KEYS if short_names else _SEND_LONG_KEYS
        g = fields.get
        try:
            header = cls(
                fields[n[0]],
                fields[n[1]],
                fields[n[2]],
                int(fields[n[3]]),
                int(fields[n[4]]),
                int(fields[n[5]]),
                int(fields[n[6]]),
                int(fields[n[7]]),
                g(n[8]) or "",
                None if (v := g(n[9])) is None else int(v),
                (v := g(n[10])) is not None and v.lower() == "true",  # unitMode, k
                (v := g(n[12])) is not None and v.lower() == "true",  # batch, m
                None if (v := g(n[11])) is None else int(v),  # maxReconsumeTimes, l
                g(n[13]),
            )
        except (KeyError, ValueError):
            return cls._parse_checked(fields, n)
        lo, hi = _INT32
        if (
            lo <= header.default_topic_queue_nums <= hi
            and lo <= header.queue_id <= hi
            and lo <= header.sys_flag <= hi
            and lo <= header.flag <= hi
            and _INT64[0] <= header.born_timestamp <= _INT64[1]
            and (header.reconsume_times is None or lo <= header.reconsume_times <= hi)
            and (header.max_reconsume_times is None or lo <= header.max_reconsume_times <= hi)
        ):
            return header
        return cls._parse_checked(fields, n)

    @classmethod
    def _parse_checked(cls, fields: Mapping[str, str], n: tuple[str, ...]) -> SendMessageHeader:
        if n is _SEND_SHORT_KEYS:
            fields = {SEND_V2_NAMES.get(k, k): v for k, v in fields.items()}
        return cls(
            producer_group=_str(fields, "producerGroup"),
            topic=_str(fields, "topic"),
            default_topic=_str(fields, "defaultTopic"),
            default_topic_queue_nums=_int(fields, "defaultTopicQueueNums"),
            queue_id=_int(fields, "queueId"),
            sys_flag=_int(fields, "sysFlag"),
            born_timestamp=_long(fields, "bornTimestamp"),
            flag=_int(fields, "flag"),
            properties=fields.get("properties") or "",
            reconsume_times=_opt_int(fields, "reconsumeTimes"),
            unit_mode=_opt_bool(fields, "unitMode"),
            batch=_opt_bool(fields, "batch"),
            max_reconsume_times=_opt_int(fields, "maxReconsumeTimes"),
            broker_name=fields.get("brokerName" if n is _SEND_SHORT_KEYS else "bname"),
        )

    def ext_fields(self, *, short_names: bool) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, value in (
            ("producerGroup", self.producer_group),
            ("topic", self.topic),
            ("defaultTopic", self.default_topic),
            ("defaultTopicQueueNums", self.default_topic_queue_nums),
            ("queueId", self.queue_id),
            ("sysFlag", self.sys_flag),
            ("bornTimestamp", self.born_timestamp),
            ("flag", self.flag),
            ("properties", self.properties or None),
            ("reconsumeTimes", self.reconsume_times),
            ("unitMode", self.unit_mode),
            ("batch", self.batch),
            ("maxReconsumeTimes", self.max_reconsume_times),
        ):
            _put(out, _SEND_V1_NAMES[name] if short_names else name, value)
        _put(out, "n" if short_names else "bname", self.broker_name)
        return out


_SEND_MESSAGE_RESPONSE_HEADER: Final[_Fields] = (
    ("msg_id", "msgId", _str),
    ("queue_id", "queueId", _int),
    ("queue_offset", "queueOffset", _long),
    ("transaction_id", "transactionId", _opt_str),
    ("batch_uniq_id", "batchUniqId", _opt_str),
)


class SendMessageResponseHeader(NamedTuple):
    msg_id: str
    queue_id: int
    queue_offset: int
    transaction_id: str | None = None
    batch_uniq_id: str | None = None

    def ext_fields(self) -> dict[str, str]:
        out = {"msgId": self.msg_id, "queueId": str(self.queue_id)}
        out["queueOffset"] = str(self.queue_offset)
        _put(out, "transactionId", self.transaction_id)
        _put(out, "batchUniqId", self.batch_uniq_id)
        return out

    @classmethod
    def parse(cls, fields: Mapping[str, str]) -> SendMessageResponseHeader:
        return cls(**_read(fields, _SEND_MESSAGE_RESPONSE_HEADER))


# -- pull ------------------------------------------------------------------------------------


_PULL_MESSAGE_HEADER: Final[_Fields] = (
    ("consumer_group", "consumerGroup", _str),
    ("topic", "topic", _str),
    ("queue_id", "queueId", _int),
    ("queue_offset", "queueOffset", _long),
    ("max_msg_nums", "maxMsgNums", _int),
    ("sys_flag", "sysFlag", _pull_sys_flag),
    ("commit_offset", "commitOffset", _long),
    ("suspend_timeout_millis", "suspendTimeoutMillis", _long),
    ("sub_version", "subVersion", _long),
    ("subscription", "subscription", _opt_str),
    ("expression_type", "expressionType", _opt_str),
    ("max_msg_bytes", "maxMsgBytes", _opt_int),
)


class PullMessageHeader(NamedTuple):
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: PullSysFlag
    commit_offset: int
    suspend_timeout_millis: int
    sub_version: int
    subscription: str | None = None
    expression_type: str | None = None
    max_msg_bytes: int | None = None

    @classmethod
    def parse(cls, fields: Mapping[str, str]) -> PullMessageHeader:
        return cls(**_read(fields, _PULL_MESSAGE_HEADER))

    def ext_fields(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, value in (
            ("consumerGroup", self.consumer_group),
            ("topic", self.topic),
            ("queueId", self.queue_id),
            ("queueOffset", self.queue_offset),
            ("maxMsgNums", self.max_msg_nums),
            ("sysFlag", int(self.sys_flag)),
            ("commitOffset", self.commit_offset),
            ("suspendTimeoutMillis", self.suspend_timeout_millis),
            ("subscription", self.subscription),
            ("subVersion", self.sub_version),
            ("expressionType", self.expression_type),
            ("maxMsgBytes", self.max_msg_bytes),
        ):
            _put(out, name, value)
        return out


_PULL_MESSAGE_RESPONSE_HEADER: Final[_Fields] = (
    ("suggest_which_broker_id", "suggestWhichBrokerId", _long),
    ("next_begin_offset", "nextBeginOffset", _long),
    ("min_offset", "minOffset", _long),
    ("max_offset", "maxOffset", _long),
)


class PullMessageResponseHeader(NamedTuple):
    suggest_which_broker_id: int
    next_begin_offset: int
    min_offset: int
    max_offset: int

    def ext_fields(self) -> dict[str, str]:
        return {
            "suggestWhichBrokerId": str(self.suggest_which_broker_id),
            "nextBeginOffset": str(self.next_begin_offset),
            "minOffset": str(self.min_offset),
            "maxOffset": str(self.max_offset),
        }

    @classmethod
    def parse(cls, fields: Mapping[str, str]) -> PullMessageResponseHeader:
        return cls(**_read(fields, _PULL_MESSAGE_RESPONSE_HEADER))


# -- offsets ---------------------------------------------------------------------------------


class QueueHeader(NamedTuple):
    """GET_MAX_OFFSET's and GET_MIN_OFFSET's header."""

    topic: str
    queue_id: int

    @classmethod
    def parse(cls, fields: Mapping[str, str]) -> QueueHeader:
        return cls(topic=_str(fields, "topic"), queue_id=_int(fields, "queueId"))


_QUERY_CONSUMER_OFFSET_HEADER: Final[_Fields] = (
    ("consumer_group", "consumerGroup", _str),
    ("topic", "topic", _str),
    ("queue_id", "queueId", _int),
    ("set_zero_if_not_found", "setZeroIfNotFound", _opt_bool_or_none),
)


class QueryConsumerOffsetHeader(NamedTuple):
    consumer_group: str
    topic: str
    queue_id: int
    set_zero_if_not_found: bool | None = None

    @classmethod
    def parse(cls, fields: Mapping[str, str]) -> QueryConsumerOffsetHeader:
        return cls(**_read(fields, _QUERY_CONSUMER_OFFSET_HEADER))


_UPDATE_CONSUMER_OFFSET_HEADER: Final[_Fields] = (
    ("consumer_group", "consumerGroup", _str),
    ("topic", "topic", _str),
    ("queue_id", "queueId", _int),
    ("commit_offset", "commitOffset", _long),
)


class UpdateConsumerOffsetHeader(NamedTuple):
    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int

    @classmethod
    def parse(cls, fields: Mapping[str, str]) -> UpdateConsumerOffsetHeader:
        return cls(**_read(fields, _UPDATE_CONSUMER_OFFSET_HEADER))


_SEARCH_OFFSET_HEADER: Final[_Fields] = (
    ("topic", "topic", _str),
    ("queue_id", "queueId", _int),
    ("timestamp", "timestamp", _long),
    ("boundary_type", "boundaryType", _opt_str),
)


class SearchOffsetHeader(NamedTuple):
    topic: str
    queue_id: int
    timestamp: int
    boundary_type: str | None = None
    """``LOWER`` (the default) or ``UPPER``: the first or the last message stored at the time."""

    @classmethod
    def parse(cls, fields: Mapping[str, str]) -> SearchOffsetHeader:
        return cls(**_read(fields, _SEARCH_OFFSET_HEADER))


def offset_answer(offset: int) -> dict[str, str]:
    """The answer header of QUERY_CONSUMER_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP, GET_MAX_OFFSET and
    GET_MIN_OFFSET."""
    return {"offset": str(offset)}


# -- clients, retries, transactions, queries -------------------------------------------------


class GroupHeader(NamedTuple):
    """GET_CONSUMER_LIST_BY_GROUP's and NOTIFY_CONSUMER_IDS_CHANGED's header."""

    consumer_group: str

    @classmethod
    def parse(cls, fields: Mapping[str, str]) -> GroupHeader:
        return cls(consumer_group=_str(fields, "consumerGroup"))

    def ext_fields(self) -> dict[str, str]:
        return {"consumerGroup": self.consumer_group}


_UNREGISTER_CLIENT_HEADER: Final[_Fields] = (
    ("client_id", "clientID", _str),
    ("producer_group", "producerGroup", _opt_str),
    ("consumer_group", "consumerGroup", _opt_str),
)


class UnregisterClientHeader(NamedTuple):
    client_id: str
    producer_group: str | None = None
    consumer_group: str | None = None

    @classmethod
    def parse(cls, fields: Mapping[str, str]) -> UnregisterClientHeader:
        return cls(**_read(fields, _UNREGISTER_CLIENT_HEADER))


_CONSUMER_SEND_MSG_BACK_HEADER: Final[_Fields] = (
    ("offset", "offset", _long),
    ("group", "group", _str),
    ("delay_level", "delayLevel", _int),
    ("origin_msg_id", "originMsgId", _opt_str),
    ("origin_topic", "originTopic", _opt_str),
    ("max_reconsume_times", "maxReconsumeTimes", _opt_int),
)


class ConsumerSendMsgBackHeader(NamedTuple):
    offset: int
    """The CommitLog offset of the message that failed."""
    group: str
    delay_level: int
    """-1: straight to the DLQ; 0: the broker picks from the reconsume count; n: level n."""
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    max_reconsume_times: int | None = None

    @classmethod
    def parse(cls, fields: Mapping[str, str]) -> ConsumerSendMsgBackHeader:
        return cls(**_read(fields, _CONSUMER_SEND_MSG_BACK_HEADER))


_END_TRANSACTION_HEADER: Final[_Fields] = (
    ("producer_group", "producerGroup", _str),
    ("tran_state_table_offset", "tranStateTableOffset", _long),
    ("commit_log_offset", "commitLogOffset", _long),
    ("commit_or_rollback", "commitOrRollback", _int),
    ("msg_id", "msgId", _str),
    ("topic", "topic", _opt_str),
    ("from_transaction_check", "fromTransactionCheck", _opt_bool),
    ("transaction_id", "transactionId", _opt_str),
)


class EndTransactionHeader(NamedTuple):
    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: int
    msg_id: str
    topic: str | None = None
    from_transaction_check: bool = False
    transaction_id: str | None = None

    @classmethod
    def parse(cls, fields: Mapping[str, str]) -> EndTransactionHeader:
        return cls(**_read(fields, _END_TRANSACTION_HEADER))


_CHECK_TRANSACTION_STATE_HEADER: Final[_Fields] = (
    ("tran_state_table_offset", "tranStateTableOffset", _long),
    ("commit_log_offset", "commitLogOffset", _long),
    ("topic", "topic", _opt_str),
    ("msg_id", "msgId", _opt_str),
    ("transaction_id", "transactionId", _opt_str),
    ("offset_msg_id", "offsetMsgId", _opt_str),
)


class CheckTransactionStateHeader(NamedTuple):
    """Broker to producer: what became of the half message at ``commit_log_offset``?"""

    tran_state_table_offset: int
    commit_log_offset: int
    topic: str | None = None
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None

    def ext_fields(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, value in (
            ("topic", self.topic),
            ("tranStateTableOffset", self.tran_state_table_offset),
            ("commitLogOffset", self.commit_log_offset),
            ("msgId", self.msg_id),
            ("transactionId", self.transaction_id),
            ("offsetMsgId", self.offset_msg_id),
        ):
            _put(out, name, value)
        return out

    @classmethod
    def parse(cls, fields: Mapping[str, str]) -> CheckTransactionStateHeader:
        return cls(**_read(fields, _CHECK_TRANSACTION_STATE_HEADER))


_QUERY_MESSAGE_HEADER: Final[_Fields] = (
    ("topic", "topic", _str),
    ("key", "key", _str),
    ("max_num", "maxNum", _int),
    ("begin_timestamp", "beginTimestamp", _long),
    ("end_timestamp", "endTimestamp", _long),
)


class QueryMessageHeader(NamedTuple):
    topic: str
    key: str
    max_num: int
    begin_timestamp: int
    end_timestamp: int

    @classmethod
    def parse(cls, fields: Mapping[str, str]) -> QueryMessageHeader:
        return cls(**_read(fields, _QUERY_MESSAGE_HEADER))

    @staticmethod
    def answer(
        index_last_update_timestamp: int, index_last_update_phyoffset: int
    ) -> dict[str, str]:
        return {
            "indexLastUpdateTimestamp": str(index_last_update_timestamp),
            "indexLastUpdatePhyoffset": str(index_last_update_phyoffset),
        }


class ViewMessageHeader(NamedTuple):
    offset: int
    topic: str | None = None

    @classmethod
    def parse(cls, fields: Mapping[str, str]) -> ViewMessageHeader:
        return cls(offset=_long(fields, "offset"), topic=fields.get("topic"))
