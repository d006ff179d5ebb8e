"""Writing rows to topics (a write task): the columns a DataFrame must have, and Spark's Arrow
batches turned into SEND_BATCH_MESSAGE batches with acks and retries.

Rows with a ``messageGroup`` carry it as their message group (``__SHARDINGKEY``, what FIFO
consumers and the official clients read) and go to the queue the group's hash picks
(:func:`pipeline.queue_sender.queue_for`), one batch per queue in flight and retried on that
queue, so one group's messages keep the order they had in the task's partition; rows without one
are spread over the writable queues. A row goes to the ``topic`` option's topic when it is set,
else to its ``topic`` column's (Kafka's rule). A ``queue`` column (an index into the topic's queues, or
``broker/queueId``) names a row's queue outright, as Kafka's ``partition`` column does; the row
keeps its message group. It is at-least-once: a task that fails reports how many of
its rows were acknowledged (they stay in the topic) and Spark's retry of the task sends them
again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import (
    BinaryType,
    ByteType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from client.routes import MessageQueue
from pipeline.errors import OptionError, WriteError
from pipeline.offsets import describe_queues
from pipeline.options import WriteOptions
from pipeline.queue_sender import QueueSender, encode_items, queue_for
from pipeline.snapshot import snapshot
from protocol.fifo import PROP_MESSAGE_GROUP, message_group_error

if TYPE_CHECKING:
    import pyarrow as pa

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
    #: the message group column (-1: absent): picks the queue by hash
    group: int = -1
    #: the queue column (-1: absent): an explicit queue, which wins over the group's hash
    queue: int = -1


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
        group=column("messageGroup", StringType, BinaryType),
        queue=column("queue", IntegerType, LongType, ShortType, ByteType, StringType),
    )
    if opts.topic is None and setup.topic < 0:
        raise OptionError(
            "writing to rmq needs the topic: set .option(\"topic\", ...) or give a 'topic' column"
        )
    if opts.topic is not None:
        # An unknown topic (or credentials the cluster refuses): fail now.
        snapshot(opts.controllers, opts.topic, opts.request_timeout, opts.credentials, opts.tls)
    return setup


@dataclass
class RmqCommitMessage(WriterCommitMessage):
    """What one write task got acknowledged."""

    rows: int = 0
    acknowledged: int = 0
    spans: dict[tuple[str, str, int], list[int]] = field(default_factory=dict)


def write_batches(setup: WriteSetup, batches: Iterator[pa.RecordBatch]) -> RmqCommitMessage:
    """Produce every row of Spark's Arrow batches; raise :class:`WriteError` (saying what was
    acknowledged) on failure."""
    opts = setup.opts
    sender = QueueSender(
        opts.controllers,
        max_in_flight=opts.max_in_flight,
        retries=opts.send_retries,
        deadline=opts.send_deadline,
        timeout=opts.request_timeout,
        credentials=opts.credentials,
        tls=opts.tls,
    )
    seen = 0
    pending: dict[tuple[str, MessageQueue | None], tuple[list[dict[str, Any]], list[int]]] = {}
    queues: dict[str, list[MessageQueue]] = {}

    def flush(key: tuple[str, MessageQueue | None]) -> None:
        items, _ = pending.pop(key)
        sender.send(key[0], key[1], encode_items(items), len(items))

    try:
        try:
            for batch in batches:
                for topic, group, chosen, item in _items(setup, batch, seen):
                    seen += 1
                    queue = None
                    if group is not None or chosen is not None:
                        known = queues.get(topic)
                        if known is None:
                            known = queues[topic] = sender.queues(topic)
                        if chosen is not None:
                            queue = explicit_queue(chosen, known, topic, seen)
                        else:
                            assert group is not None
                            queue = queue_for(group, known)
                    key = (topic, queue)
                    items, size = pending.setdefault(key, ([], [0]))
                    items.append(item)
                    size[0] += len(item["body"])
                    if len(items) >= opts.batch_size or size[0] >= _BATCH_BYTES:
                        flush(key)
            for key in list(pending):
                flush(key)
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


def explicit_queue(
    chosen: int | str, queues: list[MessageQueue], topic: str, number: int
) -> MessageQueue:
    """Row ``number``'s ``queue`` column: an index into the topic's queues in (broker group,
    queue id) order (the order message groups hash over; a static topic's logical queues), or
    ``broker/queueId`` text naming one. :class:`WriteError` for a queue the topic lacks."""
    if isinstance(chosen, str):
        broker, sep, qid = chosen.strip().rpartition("/")
        found = [
            mq
            for mq in queues
            if sep and qid.isdigit() and (mq.broker_name, mq.queue_id) == (broker, int(qid))
        ]
        if not found:
            raise WriteError(
                f"row {number} has queue {chosen!r}, not a queue of topic {topic!r} (its "
                f"queues: {describe_queues(queues)}; or give the index 0..{len(queues) - 1})"
            )
        return found[0]
    if not 0 <= chosen < len(queues):
        raise WriteError(
            f"row {number} has queue {chosen}, topic {topic!r} has {len(queues)} queues "
            f"(0..{len(queues) - 1}: {describe_queues(queues)}, in that order)"
        )
    return queues[chosen]


def _items(
    setup: WriteSetup, batch: pa.RecordBatch, before: int
) -> Iterator[tuple[str, bytes | None, int | str | None, dict[str, Any]]]:
    """(topic, message group as bytes or None, the ``queue`` column's value or None, the message
    map) of every row of ``batch``."""
    n = batch.num_rows
    if n == 0:
        return
    born = time.time_ns() // 1_000_000

    def column(i: int) -> list[Any]:
        return batch.column(i).to_pylist() if i >= 0 else [None] * n

    bodies = column(setup.body)
    keys, tags, props = column(setup.keys), column(setup.tags), column(setup.properties)
    groups, chosen = column(setup.group), column(setup.queue)
    # The option, when set, wins over a 'topic' column (Kafka's sink rule): a DataFrame read from
    # one topic and written with .option("topic", other) goes to the other, not back.
    forced = setup.opts.topic
    topics = [forced] * n if forced is not None else column(setup.topic)
    for i in range(n):
        body = bodies[i]
        number = before + i + 1
        if body is None:
            raise WriteError(f"row {number} has a null body")
        if isinstance(body, str):
            body = body.encode()
        if not body:
            raise WriteError(f"row {number} has an empty body (a message needs at least one byte)")
        topic = topics[i]
        if not topic:
            raise WriteError(f"row {number} has no topic (null column and no topic option)")
        item: dict[str, Any] = {"body": body, "bornTimestamp": born}
        if keys[i]:
            item["keys"] = keys[i]
        if tags[i]:
            item["tags"] = tags[i]
        if props[i]:
            item["properties"] = {str(k): "" if v is None else str(v) for k, v in props[i]}
        group = groups[i]
        if group is not None:
            name = _group_name(group, number)
            item.setdefault("properties", {})[PROP_MESSAGE_GROUP] = name
            group = name.encode()
        yield topic, group, chosen[i], item


def _group_name(group: str | bytes, number: int) -> str:
    """The message group of row ``number`` as the message carries it; :class:`WriteError` for
    one that cannot be a message group (not UTF-8, empty, over 128 bytes)."""
    if isinstance(group, bytes):
        try:
            group = group.decode()
        except UnicodeDecodeError:
            raise WriteError(f"row {number} has a messageGroup that is not UTF-8") from None
    why = message_group_error(group)
    if why is not None:
        raise WriteError(f"row {number} has a bad messageGroup: {why}")
    return group


def summary(messages: Sequence[WriterCommitMessage | None]) -> tuple[int, int, str]:
    done = [m for m in messages if isinstance(m, RmqCommitMessage)]
    spans = ", ".join(
        f"{t}@{b}/{q} [{lo}..{hi}]" for m in done for (t, b, q), (lo, hi) in sorted(m.spans.items())
    )
    return len(done), sum(m.acknowledged for m in done), spans or "none"
