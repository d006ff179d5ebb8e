"""Writing rows to topics (a write task): the columns a DataFrame must have, and the rows produced
in SEND_BATCH_MESSAGE batches with the producer's usual acks and retries. It is at-least-once: a
task that fails reports how many of its rows were acknowledged (they stay in the topic) and
Spark's retry of the task sends them again."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from client.message import Message
from pipeline.errors import OptionError, WriteError
from pipeline.options import WriteOptions
from pipeline.sender import BatchSender
from pipeline.snapshot import snapshot

if TYPE_CHECKING:
    from pyspark.sql import Row

#: flush a batch once its bodies pass this many bytes (a request must stay under 16 MiB)
_BATCH_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class WriteSetup:
    opts: WriteOptions
    #: column positions of body, keys, tags, properties, topic (-1: absent)
    body: int
    body_is_text: bool
    keys: int
    tags: int
    properties: int
    topic: int


def writer_setup(options: Any, schema: StructType) -> WriteSetup:
    opts = WriteOptions.parse(options)
    names = [f.name for f in schema.fields]
    lower = {n.lower(): i for i, n in enumerate(names)}

    def column(name: str, *types: type) -> int:
        i = lower.get(name.lower(), -1)
        if i >= 0 and not isinstance(schema.fields[i].dataType, types):
            allowed = " or ".join(t.__name__.replace("Type", "").lower() for t in types)
            raise OptionError(
                f"column {names[i]!r} must be {allowed}, not "
                f"{schema.fields[i].dataType.simpleString()}"
            )
        return i

    body = column("body", BinaryType, StringType)
    if body < 0:
        raise OptionError(
            f"writing to rmq needs a column 'body' (binary or string); the columns are {names}"
        )
    properties = column("properties", MapType)
    if properties >= 0:
        mt = schema.fields[properties].dataType
        assert isinstance(mt, MapType)
        if not isinstance(mt.keyType, StringType) or not isinstance(mt.valueType, StringType):
            raise OptionError("column 'properties' must be a map<string,string>")
    setup = WriteSetup(
        opts=opts,
        body=body,
        body_is_text=isinstance(schema.fields[body].dataType, StringType),
        keys=column("keys", StringType),
        tags=column("tags", StringType),
        properties=properties,
        topic=column("topic", StringType),
    )
    if opts.topic is None and setup.topic < 0:
        raise OptionError(
            "writing to rmq needs the topic: set .option(\"topic\", ...) or give a 'topic' column"
        )
    if opts.topic is not None:
        snapshot(opts.controllers, opts.topic, opts.request_timeout)  # unknown topic: fail now
    return setup


@dataclass
class RmqCommitMessage(WriterCommitMessage):
    """What one write task got acknowledged."""

    rows: int = 0
    acknowledged: int = 0
    spans: dict[tuple[str, str, int], list[int]] = field(default_factory=dict)


def write_rows(setup: WriteSetup, rows: Iterator[Row]) -> RmqCommitMessage:
    """Produce every row; raise :class:`WriteError` (saying what was acknowledged) on failure."""
    opts = setup.opts
    sender = BatchSender(
        opts.controllers,
        max_in_flight=opts.max_in_flight,
        retries=opts.send_retries,
        deadline=opts.send_deadline,
        timeout=opts.request_timeout,
    )
    seen = 0
    pending: dict[str, tuple[list[Message], list[int]]] = {}
    try:
        try:
            for row in rows:
                seen += 1
                topic, msg = _message(setup, row, seen)
                batch, size = pending.setdefault(topic, ([], [0]))
                batch.append(msg)
                size[0] += len(msg.body)
                if len(batch) >= opts.batch_size or size[0] >= _BATCH_BYTES:
                    del pending[topic]
                    sender.send(topic, batch)
            for topic, (batch, _) in pending.items():
                sender.send(topic, batch)
            sender.finish()
        except Exception as exc:
            tally = sender.tally
            sender.settle()  # every batch in flight answered: the tally is complete
            raise WriteError(
                f"write task failed after {seen} rows: {exc}. "
                f"{tally.acknowledged} messages were acknowledged and stay in the topic "
                f"({tally.describe()}), {sender.failed_messages} were refused or unanswered; "
                "Spark's retry of this task writes them all again (at-least-once)"
            ) from exc
    finally:
        sender.close()
    return RmqCommitMessage(
        rows=seen, acknowledged=sender.tally.acknowledged, spans=dict(sender.tally.spans)
    )


def _message(setup: WriteSetup, row: Row, number: int) -> tuple[str, Message]:
    body = row[setup.body]
    if body is None:
        raise WriteError(f"row {number} has a null body")
    if setup.body_is_text:
        body = str(body).encode()
    topic = row[setup.topic] if setup.topic >= 0 else None
    topic = topic or setup.opts.topic
    if not topic:
        raise WriteError(f"row {number} has no topic (null column and no topic option)")
    props: dict[str, str] = {}
    if setup.properties >= 0:
        raw = row[setup.properties]
        if raw:
            props = {str(k): "" if v is None else str(v) for k, v in raw.items()}
    return topic, Message(
        body=bytes(body),
        keys=(row[setup.keys] or "") if setup.keys >= 0 else "",
        tags=(row[setup.tags] or "") if setup.tags >= 0 else "",
        properties=props,
    )


def summary(messages: Sequence[WriterCommitMessage | None]) -> tuple[int, int, str]:
    done = [m for m in messages if isinstance(m, RmqCommitMessage)]
    spans = ", ".join(
        f"{t}@{b}/{q} [{lo}..{hi}]" for m in done for (t, b, q), (lo, hi) in sorted(m.spans.items())
    )
    return len(done), sum(m.acknowledged for m in done), spans or "none"
