"""One Spark partition of the ``rmq`` source: a queue range (:class:`RangePartition`), planned
from the committed ends of a topic's queues and read into Arrow batches. Everything a task needs
travels in its partition; connections are opened inside ``read()``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from client.routes import LOGICAL_BROKER
from pipeline import offsets as ofs
from pipeline.errors import OptionError, PipelineError, ReadError
from pipeline.logical import logical_view
from pipeline.options import ReadOptions
from pipeline.range_reader import PullSettings, QueueRange, read_range
from pipeline.rows import RecordDecodeError, arrow_schema, scan, to_batch
from pipeline.snapshot import Snapshot, offsets_for_times, route_of, snapshot
from pipeline.topics import matching_topics
from protocol.static_topic import LogicalQueue, physical_ranges

if TYPE_CHECKING:
    import pyarrow as pa


class RangePartition(InputPartition):
    """One queue's range; the value is the :class:`QueueRange`."""

    def __init__(self, qr: QueueRange) -> None:
        super().__init__(qr)
        self.qr = qr


def range_of(partition: InputPartition) -> QueueRange | None:
    """The range a partition stands for; None for the placeholder Spark plans when there is
    nothing to read (it turns an empty list of partitions into one partition of None)."""
    value = getattr(partition, "value", None)
    if value is None:
        return None
    if not isinstance(value, QueueRange):
        raise ReadError(f"not a partition of the rmq source: {partition!r}")
    return value


def _pull_settings(opts: ReadOptions) -> PullSettings:
    return PullSettings(
        batch_size=opts.pull_batch_size,
        max_bytes=opts.pull_max_bytes,
        fail_on_data_loss=opts.fail_on_data_loss,
        read_timeout=opts.read_timeout,
        request_timeout=opts.request_timeout,
        credentials=opts.credentials,
        tls=opts.tls,
    )


def read_partition(
    qr: QueueRange, opts: ReadOptions, schema: StructType
) -> Iterator[pa.RecordBatch]:
    """The Arrow batches of one queue range (what ``read()`` yields): pull bodies are gathered
    until ``rowsPerBatch`` records, then decoded together. A static topic's logical range is
    read as the physical ranges of the items it spans, its rows shown by logical queue."""
    if qr.broker != LOGICAL_BROKER:
        yield from _read_physical(qr, opts, schema)
        return
    mapping = mapping_of(opts, qr.topic)
    if qr.queue_id >= len(mapping):
        raise ReadError(f"{qr.name}: the topic has no logical queue {qr.queue_id} now")
    for item, lo, hi in physical_ranges(mapping[qr.queue_id], qr.start, qr.end):
        part = replace(qr, broker=item.broker_name, queue_id=item.physical_queue, start=lo, end=hi)
        for batch in _read_physical(part, opts, schema):
            yield logical_view(batch, qr.topic, item.broker_name, mapping)


def _read_physical(
    qr: QueueRange, opts: ReadOptions, schema: StructType
) -> Iterator[pa.RecordBatch]:
    pa_schema = arrow_schema(schema)
    bodies: list[bytes] = []
    positions: list[int] = []
    first = 0
    size = 0

    def batch() -> pa.RecordBatch:
        buf = bodies[0] if len(bodies) == 1 else b"".join(bodies)
        try:
            return to_batch(
                buf,
                positions,
                pa_schema,
                qr.broker,
                topic=qr.topic,
                expect_offset=first,
                timestamp_type=opts.timestamp_type,
            )
        except RecordDecodeError as exc:
            raise ReadError(f"{qr.name}: bad record in a pull answer: {exc}") from None

    for chunk in read_range(qr, _pull_settings(opts)):
        found = scan(chunk.body, max_records=chunk.records)
        if found.error is not None or len(found.positions) != chunk.records:
            raise ReadError(
                f"{qr.name}: bad pull answer at offset {chunk.first}: "
                f"{found.error or 'fewer records than announced'}"
            )
        if positions and chunk.first != first + len(positions):  # skipped lost messages
            yield batch()
            bodies, positions = [], []
        if not positions:
            first, size = chunk.first, 0
        positions.extend([size + at for at in found.positions])
        body = chunk.body if found.pos == len(chunk.body) else chunk.body[: found.pos]
        bodies.append(body)
        size += len(body)
        if len(positions) >= opts.rows_per_batch:
            yield batch()
            bodies, positions = [], []
    if positions:
        yield batch()


def plan_partitions(
    opts: ReadOptions, start: ofs.TopicOffsets, end: ofs.TopicOffsets
) -> list[InputPartition]:
    """One partition per queue whose range holds messages (more with ``minPartitions``: big
    ranges are split, the budget shared over every topic read; with ``maxRecordsPerPartition``
    no partition holds more messages than that); a queue missing from ``start``
    (new since the last batch) contributes nothing yet."""
    flat_end = ofs.flatten(end)
    flat_start = ofs.flatten(start)
    ranges = [(k, flat_start.get(k, flat_end[k]), flat_end[k]) for k in sorted(flat_end)]
    parts: list[InputPartition] = []
    pieces = ofs.split_ranges(ranges, opts.min_partitions, opts.max_records_per_partition)
    for key, lo, hi in pieces:
        topic, mq = ofs.unflatten_key(key)
        parts.append(
            RangePartition(QueueRange(opts.controllers, topic, mq.broker_name, mq.queue_id, lo, hi))
        )
    return parts


def topics_of(opts: ReadOptions) -> list[str]:
    """The topics a read names now (``topicPattern``: those that match now)."""
    if opts.topic_pattern is None:
        return list(opts.topics)
    return matching_topics(
        opts.controllers,
        re.compile(opts.topic_pattern),
        opts.request_timeout,
        opts.credentials,
        opts.tls,
    )


def position_of(
    opts: ReadOptions, spec: ofs.PositionSpec, topic: str, option: str
) -> ofs.OffsetSpec | ofs.ByTimestamp:
    """One topic's part of a position (a JSON position naming topics must name it)."""
    return spec.for_topic(topic, option) if isinstance(spec, ofs.PerTopic) else spec


def resolve_position(
    opts: ReadOptions,
    topic: str,
    snap: Snapshot,
    spec: ofs.PositionSpec,
    kind: str,
    default: Literal["earliest", "latest"],
) -> ofs.Offsets:
    """Concrete offsets of every queue of ``topic`` in ``snap`` for a starting or ending
    position (offsets, or store timestamps looked up at the brokers)."""
    by_times = isinstance(spec, ofs.PerTopic) and spec.timestamps
    one = position_of(
        opts, spec, topic, f"{kind}OffsetsByTimestamp" if by_times else f"{kind}Offsets"
    )
    if not isinstance(one, ofs.ByTimestamp):
        return ofs.resolve(one, snap.bounds, option=f"{kind}Offsets", default=default, topic=topic)
    if one.per_queue is not None:
        ofs.check_complete(
            one.per_queue,
            snap.bounds,
            option=f"{kind}OffsetsByTimestamp",
            topic=topic,
            values="a store timestamp in ms for each",
        )
        times = dict(one.per_queue)
    else:
        assert one.every is not None
        times = {mq: one.every for mq in snap.bounds}
    found = offsets_for_times(snap, topic, times, opts.request_timeout, opts.credentials, opts.tls)
    if kind == "starting" and opts.by_timestamp_strategy == "error":
        # The search answers a queue's end when no message is stored at or after the time.
        late = sorted(mq for mq, at in found.items() if at >= snap.bounds[mq].max_offset)
        if late:
            raise PipelineError(
                f"topic {topic!r}: no message stored at or after the starting time in "
                f"{ofs.describe_queues(late)} (startingOffsetsByTimestampStrategy=error; "
                "'latest' starts such queues at their end)"
            )
    return found


def check_named_topics(opts: ReadOptions, topics: list[str]) -> None:
    """A JSON position naming topics may name only topics the query reads."""
    for spec, kind in ((opts.starting, "starting"), (opts.ending, "ending")):
        if isinstance(spec, ofs.PerTopic):
            option = f"{kind}OffsetsByTimestamp" if spec.timestamps else f"{kind}Offsets"
            spec.check_topics(topics, option)


def mapping_of(opts: ReadOptions, topic: str) -> tuple[LogicalQueue, ...]:
    """A static topic's mapping items from its route (task side)."""
    return route_of(
        opts.controllers, topic, opts.request_timeout, opts.credentials, opts.tls
    ).mapping


def snapshot_of(opts: ReadOptions, topic: str) -> Snapshot:
    """The route and queue bounds of one topic a read names (with ``assign``: of its assigned
    queues only; one the topic does not have is an :class:`OptionError`)."""
    snap = snapshot(opts.controllers, topic, opts.request_timeout, opts.credentials, opts.tls)
    if opts.assign is None:
        return snap
    wanted = opts.assign.get(topic, frozenset())
    unknown = sorted(
        mq for mq in wanted if mq not in snap.bounds and mq.broker_name not in snap.missing
    )
    if unknown:
        raise OptionError(
            f"option assign names {ofs.describe_queues(unknown)}, not a queue of topic "
            f"{topic!r} (its queues: {ofs.describe_queues(snap.bounds)})"
        )
    brokers = {mq.broker_name for mq in wanted}
    return replace(
        snap,
        bounds={mq: b for mq, b in snap.bounds.items() if mq in wanted},
        missing={name: why for name, why in snap.missing.items() if name in brokers},
    )


def unanswered(snap: Snapshot) -> str:
    """The broker groups of ``snap`` that did not answer, and why (for messages)."""
    return "; ".join(f"{name}: {why}" for name, why in sorted(snap.missing.items()))
