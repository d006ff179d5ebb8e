"""The ``rmqstore`` data source: a broker's CommitLog read offline, without a running broker.

For audits, backups and comparing replicas::

    spark.read.format("rmqstore").load("/var/lib/rmq/broker-a")

One Spark partition per CommitLog segment file (``commitlog/<20-digit start offset>``). Every
record is checked (magic, size, CRC) and decoded from the file itself: a record is
self-describing, so neither ConsumeQueues nor the broker are needed. Nothing is written to the
directory (a store a broker holds open may be read, but its tail is then a moving target).

Options: ``path`` (the store directory or its ``commitlog`` directory; also ``load(path)``),
``topic`` (only this topic), ``brokerName`` (the ``brokerName`` column; default the group the
store's ``config/owner.json`` records, else the directory's name), ``staticTopicMapping`` (a file with a static topic's mapping as
``rmqctl --json staticTopicMapping -t TOPIC`` prints it: that topic's records are shown by
logical queue and logical offset, and its records in no item of this broker group are left out;
:mod:`pipeline.logical`), ``committedOnly`` (only records below the confirm offset in the store's checkpoint: what
consumers could have seen, the part replicas must agree on), ``corruptRecords`` (``fail``, the
default, or ``stop``: end the segment at a bad record, as recovery would), ``rowsPerBatch``.

The schema is ``rmq``'s plus physicalOffset, size, bornHost and storeHost.
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pipeline.errors import OptionError, StoreReadError
from pipeline.logical import logical_view
from pipeline.options import (
    bool_option,
    check_names,
    get_option,
    req_int_option,
    topic_option,
)
from pipeline.rows import (
    RecordDecodeError,
    arrow_schema,
    check_schema,
    message_schema,
    scan,
    to_batch,
)
from protocol.static_topic import LogicalQueue, parse_queue
from storage.checkpoint import load_checkpoint
from storage.data_dir_owner import read_owner
from storage.errors import StoreError
from storage.segment import parse_segment_name

if TYPE_CHECKING:
    import pyarrow as pa

log = structlog.get_logger(__name__)

FORMAT = "rmqstore"
#: the options of the rmqstore format, beside ``path`` (accepted as one of Spark's own)
STORE_OPTIONS: tuple[str, ...] = (
    "topic",
    "brokerName",
    "staticTopicMapping",
    "committedOnly",
    "corruptRecords",
    "rowsPerBatch",
)


@dataclass(frozen=True, slots=True)
class StoreOptions:
    commitlog: Path
    broker_name: str
    topic: str | None
    committed_only: bool
    corrupt: str
    rows_per_batch: int
    #: a static topic and its logical queues' items (option staticTopicMapping), or None
    static: tuple[str, tuple[LogicalQueue, ...]] | None = None

    @classmethod
    def parse(cls, options: Any) -> StoreOptions:
        check_names(options, STORE_OPTIONS, "reading the rmqstore format")
        raw = get_option(options, "path")
        if not raw:
            raise OptionError(
                'rmqstore needs the store directory: .load(DIR) or .option("path", DIR)'
            )
        path = Path(str(raw)).expanduser()
        commitlog = path if path.name == "commitlog" else path / "commitlog"
        if not commitlog.is_dir():
            raise OptionError(
                f"{path} is not a broker store directory (no {commitlog.name}/ directory in it)"
            )
        store_dir = commitlog.parent
        corrupt = str(get_option(options, "corruptRecords") or "fail").strip().lower()
        if corrupt not in ("fail", "stop"):
            raise OptionError(f"option corruptRecords must be fail or stop, not {corrupt!r}")
        broker_name = get_option(options, "brokerName") or default_broker_name(store_dir)
        topic = topic_option(options, required=False)
        static = _static_mapping(get_option(options, "staticTopicMapping"))
        if static is not None and topic == static[0]:
            _check_holds_items(static, str(broker_name))
        return cls(
            commitlog=commitlog,
            broker_name=broker_name,
            topic=topic,
            committed_only=bool_option(options, "committedOnly", False),
            corrupt=corrupt,
            rows_per_batch=req_int_option(options, "rowsPerBatch", 4096, 1),
            static=static,
        )


def default_broker_name(store_dir: Path) -> str:
    """The broker group the store records as its owner (``config/owner.json``, written at a
    broker's first start), else the directory's name (a store of an older broker, or a copy
    of ``commitlog/`` alone)."""
    try:
        owner = read_owner(store_dir)
    except StoreError as exc:
        raise OptionError(f"{exc}; set option brokerName to the store's broker group") from None
    return owner.broker_name if owner is not None else store_dir.resolve().name


def _static_mapping(raw: object) -> tuple[str, tuple[LogicalQueue, ...]] | None:
    """Option staticTopicMapping: the file ``rmqctl --json staticTopicMapping`` wrote."""
    if not raw:
        return None
    path = Path(str(raw)).expanduser()
    try:
        doc = json.loads(path.read_text())
        topic = doc["topic"]
        queues = sorted(doc["queues"], key=lambda q: q["queueId"])
        if not isinstance(topic, str) or [q["queueId"] for q in queues] != list(range(len(queues))):
            raise ValueError("expected a topic and queues 0 to N-1")
        return topic, tuple(parse_queue(q["items"]) for q in queues)
    except OSError as exc:
        raise OptionError(
            f"option staticTopicMapping: cannot read {path}: {exc.strerror or exc}"
        ) from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise OptionError(
            f"option staticTopicMapping: {path} is not a static topic mapping "
            f"(rmqctl --json staticTopicMapping -t TOPIC): {exc!r}"
        ) from None


def _check_holds_items(static: tuple[str, tuple[LogicalQueue, ...]], broker_name: str) -> None:
    """A static topic's records are kept by the items of the store's broker group: asked for
    that topic alone, a group that holds none of them would show nothing, with no error (a
    wrong brokerName option, or the store of a group the topic does not use)."""
    topic, queues = static
    groups = sorted({item.broker_name for queue in queues for item in queue})
    if broker_name not in groups:
        raise OptionError(
            f"option staticTopicMapping: broker group {broker_name!r} holds no item of static "
            f"topic {topic!r} (its items are on {', '.join(groups)}): this store would show "
            "none of its records; set option brokerName to the store's broker group"
        )


@dataclass(frozen=True, slots=True)
class Segment:
    path: str
    start: int
    #: read records ending at or before this CommitLog offset only (None: all)
    limit: int | None


class SegmentPartition(InputPartition):
    def __init__(self, segment: Segment) -> None:
        super().__init__(segment)
        self.segment = segment


class RmqStoreDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        StoreOptions.parse(self.options)
        return message_schema(store=True)

    def reader(self, schema: StructType) -> DataSourceReader:
        check_schema(schema, store=True)
        return RmqStoreReader(StoreOptions.parse(self.options), schema)


def segments(opts: StoreOptions) -> list[Segment]:
    """The segment files, ascending, each limited by the confirm offset when asked."""
    limit: int | None = None
    if opts.committed_only:
        try:
            cp = load_checkpoint(opts.commitlog.parent / "checkpoint")
        except StoreError as exc:
            raise OptionError(f"committedOnly: {exc}") from None
        if cp is None:
            raise OptionError(
                f"committedOnly: {opts.commitlog.parent} has no checkpoint to take the confirm "
                "offset from"
            )
        limit = cp.confirm_offset
    found: list[Segment] = []
    for path in opts.commitlog.iterdir():
        start = parse_segment_name(path.name)
        if start is not None and path.is_file() and (limit is None or start < limit):
            found.append(Segment(str(path), start, limit))
    return sorted(found, key=lambda s: s.start)


class RmqStoreReader(DataSourceReader):
    def __init__(self, opts: StoreOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        return [SegmentPartition(s) for s in segments(self.opts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        seg = getattr(partition, "value", None)
        if seg is None:  # Spark's placeholder when there is no segment at all
            return
        if not isinstance(seg, Segment):
            raise StoreReadError(f"not a partition of the rmqstore source: {partition!r}")
        yield from read_segment(seg, self.opts, arrow_schema(self.schema))


def read_segment(seg: Segment, opts: StoreOptions, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The records of one segment file as Arrow batches (``rowsPerBatch`` records scanned at a
    time, copied out of the mapping and decoded together)."""
    path = Path(seg.path)
    try:
        f = path.open("rb")
    except OSError as exc:
        raise StoreReadError(f"cannot open segment {path}: {exc.strerror or exc}") from None
    with f:
        size = path.stat().st_size
        if size == 0:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            end = size if seg.limit is None else max(0, min(size, seg.limit - seg.start))
            pos = 0
            while pos < end:
                found = scan(mm, pos, end, opts.rows_per_batch)
                error = found.error
                positions = found.positions
                if positions:
                    lo = positions[0]
                    region = mm[lo : found.pos]
                    rebased = [at - lo for at in positions]
                    try:
                        batch = to_batch(
                            region, rebased, schema, opts.broker_name, only_topic=opts.topic
                        )
                    except RecordDecodeError as exc:
                        error = RecordDecodeError(exc.pos + lo, exc.what)
                        batch = to_batch(
                            region, rebased[: exc.index], schema, opts.broker_name,
                            only_topic=opts.topic,
                        )  # fmt: skip
                    if opts.static is not None:
                        topic, mapping = opts.static
                        batch = logical_view(batch, topic, opts.broker_name, mapping)
                    if batch.num_rows and (error is None or opts.corrupt == "stop"):
                        yield batch
                if error is not None:
                    where = f"{path} at CommitLog offset {seg.start + error.pos}"
                    if opts.corrupt == "fail":
                        raise StoreReadError(
                            f"bad record in {where}: {error.what}; "
                            "set corruptRecords=stop to read up to it"
                        )
                    log.warning("bad record, segment ends here", where=where, error=str(error))
                    return
                if found.ended:
                    return
                pos = found.pos
