"""The options of the ``rmq`` data source, parsed and checked once (no Spark, no I/O).

Read options mirror Spark's Kafka source; names are case-insensitive (Spark hands them over in a
case-insensitive map).

| option | read/write | default | meaning |
|---|---|---|---|
| ``controllers`` | both | required | controller addresses, ``;``-separated (a lone broker's address in development mode) |
| ``topic`` | both | required for reads (or ``topics`` / ``topicPattern``) | the topic; for writes the default when a row has no ``topic`` |
| ``startingOffsets`` | read | batch ``earliest``, stream ``latest`` | ``earliest``, ``latest`` or JSON ``{"broker-a": {"0": 42}}`` (-2 earliest, -1 latest) |
| ``endingOffsets`` | batch read | ``latest`` | as above, end exclusive; past the committed end it is clamped |
| ``maxOffsetsPerTrigger`` | stream read | none | at most this many messages per micro-batch, shared by backlog |
| ``failOnDataLoss`` | read | ``true`` | fail when messages a query needs are gone or unreadable; false skips them |
| ``pullBatchSize`` | read | 256 | messages per pull request |
| ``pullMaxBytes`` | read | 4194304 | bytes per pull response |
| ``rowsPerBatch`` | read | 4096 | rows per Arrow record batch handed to Spark |
| ``readTimeoutMs`` | read | 60000 | how long a task waits for its range without progress before failing |
| ``requestTimeoutMs`` | both | 5000 | timeout of one request |
| ``batchSize`` | write | 128 | messages per SEND_BATCH_MESSAGE |
| ``maxInFlight`` | write | 4 | batches in flight per task |
| ``sendDeadlineMs`` | write | 10000 | how long a batch may keep being retried after retriable failures (covers a failover) |
| ``sendRetries`` | write | none | at most this many further attempts of a batch (none: the deadline alone decides) |
| ``accessKey``, ``secretKey`` | both | none | a user's credentials: every request is signed (a cluster with authentication on); both or neither |
| ``tls`` | both | ``false`` | connect over TLS (a cluster with ``tls_enabled``), the servers checked against the system's CAs or ``caFile`` |
| ``caFile`` | both | none | PEM CA certificates the servers' certificates must chain to; implies ``tls`` (the path must exist on every executor) |

Also for reads: ``topics`` (comma-separated), ``topicPattern`` or ``assign`` (JSON, the queues
to read: ``{"orders": {"broker-a": [0, 1]}}``) instead of ``topic``,
``startingTimestamp`` / ``endingTimestamp`` (ms, every queue),
``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp`` (JSON, ms per queue),
``startingOffsetsByTimestampStrategy`` (``latest``, the default, or ``error``: what a starting
time with no message at or after it in a queue does), ``minPartitions``,
``maxRecordsPerPartition``, ``minOffsetsPerTrigger`` and ``maxTriggerDelay`` (streaming),
``includeProperties`` (alias ``includeHeaders``), ``timestampType`` (``born``, the default, or
``store``: what the ``timestamp`` column holds). docs/pipeline.md has the full table.

Every option name is checked: an unknown one is an :class:`OptionError` naming it and the
nearest valid name, raised on the driver when the query is defined, before any task runs.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from client import Credentials
from client.bootstrap import parse_addresses
from client.routes import MessageQueue
from pipeline.errors import OptionError
from pipeline.offsets import ByTimestamp, PerTopic, PositionSpec, parse_spec, parse_timestamps
from pipeline.tls import ClientTls

#: every option a read takes (batch and streaming; some are for one mode only)
READ_OPTIONS: tuple[str, ...] = (
    "controllers",
    "topic",
    "topics",
    "topicPattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "minPartitions",
    "maxRecordsPerPartition",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "failOnDataLoss",
    "groupId",
    "includeProperties",
    "includeHeaders",
    "timestampType",
    "pullBatchSize",
    "pullMaxBytes",
    "rowsPerBatch",
    "readTimeoutMs",
    "requestTimeoutMs",
    "accessKey",
    "secretKey",
    "tls",
    "caFile",
)
#: every option a write takes
WRITE_OPTIONS: tuple[str, ...] = (
    "controllers",
    "topic",
    "batchSize",
    "maxInFlight",
    "sendDeadlineMs",
    "sendRetries",
    "requestTimeoutMs",
    "accessKey",
    "secretKey",
    "tls",
    "caFile",
)
#: options Spark itself adds (``load(path)``/``save(path)``; a streaming sink's checkpoint)
SPARK_OPTIONS: tuple[str, ...] = ("path", "checkpointLocation")
#: Kafka's default maxTriggerDelay
DEFAULT_TRIGGER_DELAY = 15 * 60.0
#: ``assign``: topic -> the queues of it to read
Assignment = dict[str, frozenset[MessageQueue]]
#: ``timestampType``: what the ``timestamp`` column holds, with Kafka's numbers (the
#: ``timestampType`` column): the producer's born time (CreateTime) or the store time
#: (LogAppendTime)
TIMESTAMP_TYPES: dict[str, int] = {"born": 0, "store": 1}


def word_option(options: Mapping[str, str], name: str, words: Iterable[str], default: str) -> str:
    """One of ``words`` (case-insensitive)."""
    raw = get_option(options, name)
    if raw is None or not str(raw).strip():
        return default
    word = str(raw).strip().lower()
    allowed = list(words)
    if word not in allowed:
        raise OptionError(f"option {name} must be {' or '.join(allowed)}, not {raw!r}")
    return word


def check_names(options: Mapping[str, str], valid: Iterable[str], what: str) -> None:
    """Every option must be one of ``valid`` (case-insensitive): an unknown one is an error
    naming it and the nearest valid name."""
    names = {v.lower(): v for v in valid}
    ignored = {v.lower() for v in SPARK_OPTIONS}
    for key in options:
        low = str(key).lower()
        if low in names or low in ignored:
            continue
        close = difflib.get_close_matches(low, list(names), n=1, cutoff=0.6)
        hint = (
            f"did you mean {names[close[0]]}?"
            if close
            else f"the options are {', '.join(sorted(names.values(), key=str.lower))}"
        )
        raise OptionError(f"unknown option {key!r} for {what}; {hint}")


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")
_UNITS = {
    "": 0.001,
    "ms": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
}


def duration_option(options: Mapping[str, str], name: str, default: float) -> float:
    """A duration as Spark writes them (``15m``, ``30s``, ``500ms``; a bare number is ms), in
    seconds."""
    raw = get_option(options, name)
    if raw is None or not str(raw).strip():
        return default
    found = _DURATION.match(str(raw).lower())
    if found is None or found.group(2) not in _UNITS:
        raise OptionError(f"option {name} must be a duration like 15m, 30s or 500ms, not {raw!r}")
    return float(found.group(1)) * _UNITS[found.group(2)]


def position_option(
    options: Mapping[str, str],
    kind: Literal["starting", "ending"],
    default: Literal["earliest", "latest"],
    *,
    multi: bool = False,
) -> PositionSpec:
    """``startingOffsets``, ``startingTimestamp`` or ``startingOffsetsByTimestamp`` (or the
    ``ending`` ones): at most one of them may be set."""
    by_offsets = f"{kind}Offsets"
    by_time = f"{kind}Timestamp"
    by_times = f"{kind}OffsetsByTimestamp"
    given = [n for n in (by_offsets, by_time, by_times) if get_option(options, n) is not None]
    if len(given) > 1:
        raise OptionError(f"options {' and '.join(given)} exclude each other: set one")
    if get_option(options, by_time) is not None:
        return ByTimestamp(every=int_option(options, by_time, None, 0))
    raw = get_option(options, by_times)
    if raw is not None:
        times = parse_timestamps(str(raw), by_times, multi=multi)
        return times if isinstance(times, PerTopic) else ByTimestamp(per_queue=times)
    return parse_spec(get_option(options, by_offsets), by_offsets, default, multi=multi)


def get_option(options: Mapping[str, str], name: str) -> str | None:
    # Spark's CaseInsensitiveDict lower-cases keys; a plain dict (tests, direct use) may not.
    value = options.get(name)
    if value is None:
        value = options.get(name.lower())
    if value is None:
        for key, v in options.items():
            if key.lower() == name.lower():
                return v
    return value


def int_option(
    options: Mapping[str, str], name: str, default: int | None, minimum: int
) -> int | None:
    raw = get_option(options, name)
    if raw is None or not str(raw).strip():
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option {name} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option {name} must be >= {minimum}, not {value}")
    return value


def req_int_option(options: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    value = int_option(options, name, default, minimum)
    assert value is not None
    return value


def bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = get_option(options, name)
    if raw is None or not str(raw).strip():
        return default
    word = str(raw).strip().lower()
    if word in ("true", "1", "yes"):
        return True
    if word in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name} must be true or false, not {raw!r}")


def credentials_option(options: Mapping[str, str]) -> Credentials | None:
    """``accessKey`` and ``secretKey``: both (every request is signed) or neither."""
    access = (get_option(options, "accessKey") or "").strip()
    secret = get_option(options, "secretKey") or ""
    if bool(access) != bool(secret):
        raise OptionError(
            "options accessKey and secretKey go together: give both (a cluster with "
            "authentication on) or neither"
        )
    return Credentials(access, secret) if access else None


def tls_option(options: Mapping[str, str]) -> ClientTls | None:
    """``tls`` (true/false) and ``caFile`` (a CA bundle's path; implies ``tls``). The file is
    read when a connection is made (on the driver first), not here."""
    raw_ca = get_option(options, "caFile")
    ca_file = str(raw_ca).strip() if raw_ca is not None else ""
    if raw_ca is not None and not ca_file:
        raise OptionError("option caFile must be the path of a PEM CA file, not empty")
    enabled = bool_option(options, "tls", bool(ca_file))
    if ca_file and not enabled:
        raise OptionError(
            "options tls=false and caFile disagree: caFile turns TLS on (drop tls, or caFile)"
        )
    return ClientTls(ca_file or None) if enabled else None


def controllers_option(options: Mapping[str, str]) -> str:
    raw = get_option(options, "controllers")
    if raw is None or not parse_addresses(raw):
        raise OptionError(
            "option controllers is required: the controller addresses, ';'-separated "
            '(e.g. .option("controllers", "127.0.0.1:9878;127.0.0.1:9868"))'
        )
    for address in parse_addresses(raw):
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise OptionError(f"option controllers: {address!r} is not a host:port address")
    return ";".join(parse_addresses(raw))


def assign_option(options: Mapping[str, str]) -> Assignment | None:
    """``assign``: the queues to read, ``{"orders": {"broker-a": [0, 1]}}`` (Kafka's
    ``{"orders": [0, 1]}`` with the broker group a queue id belongs to); None when not set."""
    raw = get_option(options, "assign")
    if raw is None:
        return None
    example = '{"orders": {"broker-a": [0, 1]}}'
    try:
        doc = json.loads(str(raw))
    except json.JSONDecodeError as exc:
        raise OptionError(
            f"option assign must be a JSON object like {example}; {raw!r} is not valid JSON "
            f"({exc.msg} at character {exc.pos})"
        ) from None
    if not isinstance(doc, dict) or not doc:
        raise OptionError(f"option assign must name at least one topic, like {example}")
    out: dict[str, frozenset[MessageQueue]] = {}
    for topic, brokers in doc.items():
        if not isinstance(topic, str) or not topic.strip():
            raise OptionError(f"option assign: {topic!r} is not a topic name")
        if not isinstance(brokers, dict) or not brokers:
            raise OptionError(
                f"option assign: the value for topic {topic!r} must be an object of broker "
                f"group to queue ids like {example}, not {brokers!r}"
            )
        queues: set[MessageQueue] = set()
        for broker, ids in brokers.items():
            if not isinstance(broker, str) or not broker:
                raise OptionError(f"option assign: {broker!r} is not a broker group name")
            if (
                not isinstance(ids, list)
                or not ids
                or not all(type(q) is int and q >= 0 for q in ids)
            ):
                raise OptionError(
                    f"option assign: the queues of {topic}@{broker} must be a non-empty list of "
                    f"queue ids >= 0, not {ids!r}"
                )
            queues.update(MessageQueue(broker, q) for q in ids)
        out[topic.strip()] = frozenset(queues)
    return out


def subscription_option(
    options: Mapping[str, str],
) -> tuple[tuple[str, ...], re.Pattern[str] | None, bool]:
    """``topic``, ``topics`` (comma-separated), ``topicPattern`` (a regular expression a whole
    topic name must match) or ``assign`` (JSON: topics and their queues): exactly one. Returns
    (topics, pattern, several-topics form)."""
    forms = ("topic", "topics", "topicPattern", "assign")
    given = [n for n in forms if get_option(options, n) is not None]
    if len(given) > 1:
        raise OptionError(f"options {' and '.join(given)} exclude each other: set one")
    if given == ["assign"]:
        assigned = assign_option(options)
        assert assigned is not None
        topics = tuple(sorted(assigned))
        return topics, None, len(topics) > 1
    if given == ["topics"]:
        names = [t.strip() for t in str(get_option(options, "topics")).split(",")]
        if not all(names):
            raise OptionError(
                'option topics must be topic names separated by commas, e.g. "orders,clicks"'
            )
        return tuple(dict.fromkeys(names)), None, True
    if given == ["topicPattern"]:
        raw = str(get_option(options, "topicPattern"))
        try:
            pattern = re.compile(raw)
        except re.error as exc:
            raise OptionError(
                f"option topicPattern {raw!r} is not a regular expression: {exc}"
            ) from None
        return (), pattern, True
    topic = topic_option(options, required=False)
    if topic is None:
        raise OptionError(
            'option topic is required (e.g. .option("topic", "orders")), or topics (a '
            "comma-separated list), topicPattern (a regular expression) or assign (JSON: "
            "topics and their queues)"
        )
    return (topic,), None, False


def group_option(options: Mapping[str, str]) -> str | None:
    """``groupId``: a consumer group name as the brokers accept one."""
    raw = get_option(options, "groupId")
    if raw is None:
        return None
    group = str(raw).strip()
    if not 0 < len(group) <= 255 or not all(c.isalnum() or c in "-_%." for c in group):
        raise OptionError(
            f"option groupId must be a consumer group name (letters, digits, - _ % .), not {raw!r}"
        )
    return group


def topic_option(options: Mapping[str, str], *, required: bool) -> str | None:
    raw = get_option(options, "topic")
    topic = raw.strip() if raw is not None else ""
    if not topic:
        if required:
            raise OptionError('option topic is required (e.g. .option("topic", "orders"))')
        return None
    return topic


@dataclass(frozen=True, slots=True)
class ReadOptions:
    controllers: str
    topic: str
    starting: PositionSpec
    ending: PositionSpec
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    pull_batch_size: int
    pull_max_bytes: int
    rows_per_batch: int
    read_timeout: float
    request_timeout: float
    min_partitions: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay: float = DEFAULT_TRIGGER_DELAY
    include_properties: bool = True
    #: streaming: commit processed offsets at the brokers as this consumer group's
    group_id: str | None = None
    #: the topics read (``topic``, or the ``topics`` list; empty with a pattern)
    topics: tuple[str, ...] = ()
    #: ``topicPattern``: read every topic whose whole name matches
    topic_pattern: str | None = None
    #: ``accessKey`` and ``secretKey``: every request is signed (a cluster with auth_enabled)
    credentials: Credentials | None = None
    #: ``tls`` and ``caFile``: every connection over TLS (a cluster with tls_enabled)
    tls: ClientTls | None = None
    #: ``assign``: only these queues of each topic are read (None: every queue)
    assign: Assignment | None = None
    #: ``startingOffsetsByTimestampStrategy``: a starting time with no message at or after it
    #: in a queue starts at the queue's end (``latest``) or fails the query (``error``)
    by_timestamp_strategy: Literal["latest", "error"] = "latest"
    #: ``maxRecordsPerPartition``: no Spark partition reads more messages than this
    max_records_per_partition: int | None = None
    #: ``timestampType``: 0 the ``timestamp`` column is the born time, 1 the store time
    timestamp_type: int = 0

    @property
    def multi(self) -> bool:
        """Several topics (``topics`` or ``topicPattern``): offsets are keyed by topic."""
        return not self.topic

    @classmethod
    def parse(
        cls, options: Mapping[str, str], mode: Literal["batch", "stream", "any"] = "batch"
    ) -> ReadOptions:
        """Check every read option; ``mode`` picks the defaults and the options allowed
        (``any``: the checks common to both, when the mode is not known yet)."""
        check_names(options, READ_OPTIONS, "reading the rmq format")
        controllers = controllers_option(options)
        topics, pattern, multi = subscription_option(options)
        starting = position_option(
            options, "starting", "latest" if mode == "stream" else "earliest", multi=multi
        )
        ending = position_option(options, "ending", "latest", multi=multi)
        if mode == "stream":
            for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
                if get_option(options, name) is not None:
                    raise OptionError(f"option {name} is for batch queries only (spark.read)")
        max_per_trigger = int_option(options, "maxOffsetsPerTrigger", None, 1)
        min_per_trigger = int_option(options, "minOffsetsPerTrigger", None, 1)
        delay = duration_option(options, "maxTriggerDelay", DEFAULT_TRIGGER_DELAY)
        if mode == "batch":
            for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
                if get_option(options, name) is not None:
                    raise OptionError(f"option {name} is for streaming queries only")
        if (
            max_per_trigger is not None
            and min_per_trigger is not None
            and min_per_trigger > max_per_trigger
        ):
            raise OptionError(
                f"option minOffsetsPerTrigger ({min_per_trigger}) must not exceed "
                f"maxOffsetsPerTrigger ({max_per_trigger})"
            )
        group_id = group_option(options)
        if mode == "batch" and group_id is not None:
            raise OptionError(
                "option groupId is for streaming queries only (a batch read commits nothing)"
            )
        strategy = word_option(
            options, "startingOffsetsByTimestampStrategy", ("latest", "error"), "latest"
        )
        include = bool_option(options, "includeProperties", True)
        if get_option(options, "includeHeaders") is not None:
            alias = bool_option(options, "includeHeaders", True)
            if get_option(options, "includeProperties") is not None and alias != include:
                raise OptionError("options includeProperties and includeHeaders disagree")
            include = alias
        return cls(
            controllers=controllers,
            topic=topics[0] if not multi else "",
            topics=topics,
            topic_pattern=pattern.pattern if pattern is not None else None,
            starting=starting,
            ending=ending,
            max_offsets_per_trigger=max_per_trigger,
            fail_on_data_loss=bool_option(options, "failOnDataLoss", True),
            pull_batch_size=req_int_option(options, "pullBatchSize", 256, 1),
            pull_max_bytes=req_int_option(options, "pullMaxBytes", 4 * 1024 * 1024, 1024),
            rows_per_batch=req_int_option(options, "rowsPerBatch", 4096, 1),
            read_timeout=req_int_option(options, "readTimeoutMs", 60_000, 100) / 1000,
            request_timeout=req_int_option(options, "requestTimeoutMs", 5_000, 100) / 1000,
            min_partitions=int_option(options, "minPartitions", None, 1),
            min_offsets_per_trigger=min_per_trigger,
            max_trigger_delay=delay,
            include_properties=include,
            group_id=group_id,
            credentials=credentials_option(options),
            tls=tls_option(options),
            assign=assign_option(options),
            by_timestamp_strategy="error" if strategy == "error" else "latest",
            max_records_per_partition=int_option(options, "maxRecordsPerPartition", None, 1),
            timestamp_type=TIMESTAMP_TYPES[
                word_option(options, "timestampType", TIMESTAMP_TYPES, "born")
            ],
        )


@dataclass(frozen=True, slots=True)
class WriteOptions:
    controllers: str
    topic: str | None
    batch_size: int
    max_in_flight: int
    send_retries: int | None
    send_deadline: float
    request_timeout: float
    credentials: Credentials | None = None
    tls: ClientTls | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        check_names(options, WRITE_OPTIONS, "writing the rmq format")
        return cls(
            controllers=controllers_option(options),
            topic=topic_option(options, required=False),
            batch_size=req_int_option(options, "batchSize", 128, 1),
            max_in_flight=req_int_option(options, "maxInFlight", 4, 1),
            send_retries=int_option(options, "sendRetries", None, 0),
            send_deadline=req_int_option(options, "sendDeadlineMs", 10_000, 100) / 1000,
            request_timeout=req_int_option(options, "requestTimeoutMs", 5_000, 100) / 1000,
            credentials=credentials_option(options),
            tls=tls_option(options),
        )
