"""The options of the ``rmq`` data source, parsed and checked once (no Spark, no I/O).

Read options mirror Spark's Kafka source; names are case-insensitive (Spark hands them over in a
case-insensitive map).

| option | read/write | default | meaning |
|---|---|---|---|
| ``controllers`` | both | required | controller addresses, ``;``-separated (a lone broker's address in development mode) |
| ``topic`` | both | required for reads | the topic; for writes the default when a row has no ``topic`` |
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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from client.bootstrap import parse_addresses
from pipeline.errors import OptionError
from pipeline.offsets import OffsetSpec, parse_spec


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
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    pull_batch_size: int
    pull_max_bytes: int
    rows_per_batch: int
    read_timeout: float
    request_timeout: float

    @classmethod
    def parse(
        cls, options: Mapping[str, str], mode: Literal["batch", "stream"] = "batch"
    ) -> ReadOptions:
        """Check every read option; ``mode`` picks the defaults and the options allowed."""
        controllers = controllers_option(options)
        topic = topic_option(options, required=True)
        assert topic is not None
        starting = parse_spec(
            get_option(options, "startingOffsets"),
            "startingOffsets",
            "earliest" if mode == "batch" else "latest",
        )
        ending = parse_spec(get_option(options, "endingOffsets"), "endingOffsets", "latest")
        if mode == "stream" and get_option(options, "endingOffsets") is not None:
            raise OptionError("option endingOffsets is for batch queries only (spark.read)")
        max_per_trigger = int_option(options, "maxOffsetsPerTrigger", None, 1)
        if mode == "batch" and max_per_trigger is not None:
            raise OptionError("option maxOffsetsPerTrigger is for streaming queries only")
        return cls(
            controllers=controllers,
            topic=topic,
            starting=starting,
            ending=ending,
            max_offsets_per_trigger=max_per_trigger,
            fail_on_data_loss=bool_option(options, "failOnDataLoss", True),
            pull_batch_size=req_int_option(options, "pullBatchSize", 256, 1),
            pull_max_bytes=req_int_option(options, "pullMaxBytes", 4 * 1024 * 1024, 1024),
            rows_per_batch=req_int_option(options, "rowsPerBatch", 4096, 1),
            read_timeout=req_int_option(options, "readTimeoutMs", 60_000, 100) / 1000,
            request_timeout=req_int_option(options, "requestTimeoutMs", 5_000, 100) / 1000,
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

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        return cls(
            controllers=controllers_option(options),
            topic=topic_option(options, required=False),
            batch_size=req_int_option(options, "batchSize", 128, 1),
            max_in_flight=req_int_option(options, "maxInFlight", 4, 1),
            send_retries=int_option(options, "sendRetries", None, 0),
            send_deadline=req_int_option(options, "sendDeadlineMs", 10_000, 100) / 1000,
            request_timeout=req_int_option(options, "requestTimeoutMs", 5_000, 100) / 1000,
        )
