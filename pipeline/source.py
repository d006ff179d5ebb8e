"""The ``rmq`` data source: topics as Spark DataFrames, batch and streaming, read and write.

Reading plans one Spark partition per (broker group, queue) range with data. Ranges end at the
committed end of each queue (the confirm offset), so a range is never truncated away by a
failover, and a replayed range yields exactly the same messages. Everything a task needs travels
in its partition (:class:`RangePartition`); readers and writers hold only options, so they pickle,
and connections are opened inside ``read()``/``write()``.

Streaming offsets are ``{"broker-a": {"0": 42}}`` (next offset per queue), kept by Spark's
checkpoint. Queues that appear later (a topic grown, a new broker group) join at their earliest
offset. ``maxOffsetsPerTrigger`` is honoured through Spark 4.2's ``ReadLimit`` (and ignored
there when the engine asks for everything, e.g. ``Trigger.Once``); on older 4.x the reader applies
it itself, relative to the offsets it returned last. ``Trigger.AvailableNow`` reads up to the
committed ends at the query's start and stops.

Writing produces rows in SEND_BATCH_MESSAGE batches with the producer's usual acks and retries.
It is at-least-once: a task that fails reports how many of its rows were acknowledged (they stay
in the topic) and Spark's retry of the task sends them again.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from client.message import Message
from pipeline import offsets as ofs
from pipeline.errors import OptionError, PipelineError, ReadError, WriteError
from pipeline.options import ReadOptions, WriteOptions, controllers_option, topic_option
from pipeline.range_reader import PullSettings, QueueRange, read_range
from pipeline.rows import (
    RecordDecodeError,
    arrow_schema,
    check_schema,
    message_schema,
    scan,
    to_batch,
)
from pipeline.sender import BatchSender
from pipeline.snapshot import Snapshot, snapshot

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Row

try:  # Spark 4.2+: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    HAS_READ_LIMIT = True
except ImportError:  # Spark 4.0 / 4.1
    HAS_READ_LIMIT = False

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in on Spark versions without the mixin (the method is then never called)."""

    ReadLimit = Any  # type: ignore[misc,assignment]

log = structlog.get_logger(__name__)

FORMAT = "rmq"


class RmqDataSource(DataSource):
    """``spark.read.format("rmq")``, ``spark.readStream``, ``df.write`` and ``df.writeStream``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        # Called when a read is defined (load()): check what every read needs, early.
        controllers_option(self.options)
        topic_option(self.options, required=True)
        for name in ("startingOffsets", "endingOffsets"):
            ofs.parse_spec(self.options.get(name), name, "latest")
        return message_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        check_schema(schema)
        return RmqBatchReader(ReadOptions.parse(self.options, "batch"), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        check_schema(schema)
        return RmqStreamReader(ReadOptions.parse(self.options, "stream"), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise OptionError(
                "save mode overwrite is not supported: a topic's messages cannot be replaced; "
                'use .mode("append")'
            )
        return RmqBatchWriter(_writer_setup(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return RmqStreamWriter(_writer_setup(self.options, schema))


# -- reading ----------------------------------------------------------------------------------


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
    )


def read_partition(
    qr: QueueRange, opts: ReadOptions, schema: StructType
) -> Iterator[pa.RecordBatch]:
    """The Arrow batches of one queue range (what ``read()`` yields): pull bodies are gathered
    until ``rowsPerBatch`` records, then decoded together."""
    pa_schema = arrow_schema(schema)
    bodies: list[bytes] = []
    positions: list[int] = []
    first = 0
    size = 0

    def batch() -> pa.RecordBatch:
        buf = bodies[0] if len(bodies) == 1 else b"".join(bodies)
        try:
            return to_batch(
                buf, positions, pa_schema, qr.broker, topic=qr.topic, expect_offset=first
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
    opts: ReadOptions, start: ofs.Offsets, end: ofs.Offsets
) -> list[InputPartition]:
    """One partition per queue whose range holds messages; a queue missing from ``start`` (new
    since the last batch) contributes nothing yet."""
    parts: list[InputPartition] = []
    for mq in sorted(end):
        lo = start.get(mq, end[mq])
        hi = end[mq]
        if lo < hi:
            qr = QueueRange(opts.controllers, opts.topic, mq.broker_name, mq.queue_id, lo, hi)
            parts.append(RangePartition(qr))
    return parts


def _snapshot(opts: ReadOptions) -> Snapshot:
    return snapshot(opts.controllers, opts.topic, opts.request_timeout)


def _missing(snap: Snapshot) -> str:
    return "; ".join(f"{name}: {why}" for name, why in sorted(snap.missing.items()))


class RmqBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        snap = _snapshot(opts)
        if snap.missing:
            raise PipelineError(
                f"cannot read topic {opts.topic!r} completely: no replica of "
                f"{_missing(snap)} answered"
            )
        start = ofs.resolve(
            opts.starting,
            snap.bounds,
            option="startingOffsets",
            default="earliest",
            topic=opts.topic,
        )
        end = ofs.resolve(
            opts.ending, snap.bounds, option="endingOffsets", default="latest", topic=opts.topic
        )
        # Past the committed end nothing can be read yet: clamp.
        end = {mq: min(e, snap.bounds[mq].max_offset) for mq, e in end.items()}
        return plan_partitions(opts, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        qr = range_of(partition)
        if qr is not None:
            yield from read_partition(qr, self.opts, self.schema)


class RmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over queue offsets. Runs in Spark's driver-side Python process; the state
    kept here (last offsets, AvailableNow target) is never needed by ``read()``."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._last: ofs.Offsets | None = None
        self._target: ofs.Offsets | None = None
        self._latest: dict[str, dict[str, int]] | None = None

    def initialOffset(self) -> dict[str, Any]:
        opts = self.opts
        snap = _snapshot(opts)
        if snap.missing:
            log.warning("broker groups unreachable at start", groups=_missing(snap))
        start = ofs.resolve(
            opts.starting, snap.bounds, option="startingOffsets", default="latest", topic=opts.topic
        )
        self._last = start
        return ofs.to_json(start)

    def prepareForTriggerAvailableNow(self) -> None:
        snap = _snapshot(self.opts)
        if snap.missing:
            raise PipelineError(
                f"Trigger.AvailableNow needs every broker group of {self.opts.topic!r}; "
                f"no replica of {_missing(snap)} answered"
            )
        self._target = {mq: b.max_offset for mq, b in snap.bounds.items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n is not None else ReadAllAvailable()

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        """The end of the next batch. ``start`` and ``limit`` come from Spark 4.2+; older
        versions call this without them (the reader then starts from what it returned last)."""
        begin = (
            ofs.from_json(start, "start offset") if start is not None else dict(self._last or {})
        )
        snap = _snapshot(self.opts)
        if snap.missing:
            log.warning("broker groups unreachable, not read this batch", groups=_missing(snap))
        available = {mq: b.max_offset for mq, b in snap.bounds.items()}
        ceiling = self._target if self._target is not None else available
        end: ofs.Offsets = {}
        for mq, s in begin.items():
            # Never backwards (a lagging slave may report less); unreachable groups stay put.
            end[mq] = max(s, min(available.get(mq, s), ceiling.get(mq, s)))
        for mq, b in snap.bounds.items():
            if mq not in begin and (self._target is None or mq in self._target):
                end[mq] = b.min_offset  # a new queue joins at its earliest offset
        max_rows = self._max_rows(limit)
        if max_rows is not None:
            end = ofs.limit_rows(begin, end, max_rows)
        self._last = end
        self._latest = ofs.to_json({**begin, **available})
        return ofs.to_json(end)

    def _max_rows(self, limit: ReadLimit | None) -> int | None:
        if limit is None:  # Spark before 4.2: apply the option ourselves
            return self.opts.max_offsets_per_trigger
        if HAS_READ_LIMIT and isinstance(limit, ReadMaxRows):
            return int(limit.max_rows)
        if HAS_READ_LIMIT and not isinstance(limit, ReadAllAvailable):
            log.warning("read limit not supported, reading all available", limit=repr(limit))
        return None

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._latest

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return plan_partitions(
            self.opts, ofs.from_json(start, "start offset"), ofs.from_json(end, "end offset")
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        qr = range_of(partition)
        if qr is not None:
            yield from read_partition(qr, self.opts, self.schema)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, not at the brokers (and a commit
        may arrive late, so nothing here may depend on it)."""


# -- writing ----------------------------------------------------------------------------------

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


def _writer_setup(options: Any, schema: StructType) -> WriteSetup:
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


def _summary(messages: Sequence[WriterCommitMessage | None]) -> tuple[int, int, str]:
    done = [m for m in messages if isinstance(m, RmqCommitMessage)]
    spans = ", ".join(
        f"{t}@{b}/{q} [{lo}..{hi}]" for m in done for (t, b, q), (lo, hi) in sorted(m.spans.items())
    )
    return len(done), sum(m.acknowledged for m in done), spans or "none"


class RmqBatchWriter(DataSourceWriter):
    def __init__(self, setup: WriteSetup) -> None:
        self.setup = setup

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return write_rows(self.setup, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        tasks, acked, _ = _summary(messages)
        log.info("write committed", tasks=tasks, acknowledged=acked)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        tasks, acked, spans = _summary(messages)
        log.warning(
            "write aborted; messages of tasks that succeeded stay in the topic",
            tasks=tasks,
            acknowledged=acked,
            spans=spans,
        )


class RmqStreamWriter(DataSourceStreamWriter):
    def __init__(self, setup: WriteSetup) -> None:
        self.setup = setup

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return write_rows(self.setup, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tasks, acked, _ = _summary(messages)
        log.info("micro-batch written", batch=batchId, tasks=tasks, acknowledged=acked)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tasks, acked, spans = _summary(messages)
        log.warning(
            "micro-batch write aborted; messages of tasks that succeeded stay in the topic "
            "and are written again when the batch is retried (at-least-once)",
            batch=batchId,
            tasks=tasks,
            acknowledged=acked,
            spans=spans,
        )
