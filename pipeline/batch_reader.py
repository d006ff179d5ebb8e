"""``spark.read.format("rmq")``: the queue ranges between the starting and ending offsets, each
clamped to the committed end of its queue."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pipeline import offsets as ofs
from pipeline.errors import PipelineError
from pipeline.options import ReadOptions
from pipeline.partition import (
    check_named_topics,
    plan_partitions,
    range_of,
    read_partition,
    resolve_position,
    snapshot_of,
    topics_of,
    unanswered,
)

if TYPE_CHECKING:
    import pyarrow as pa


class RmqBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        topics = topics_of(opts)
        check_named_topics(opts, topics)
        start: ofs.TopicOffsets = {}
        end: ofs.TopicOffsets = {}
        for topic in topics:
            snap = snapshot_of(opts, topic)
            if snap.missing:
                raise PipelineError(
                    f"cannot read topic {topic!r} completely: no replica of "
                    f"{unanswered(snap)} answered"
                )
            start[topic] = resolve_position(
                opts, topic, snap, opts.starting, "starting", "earliest"
            )
            ending = resolve_position(opts, topic, snap, opts.ending, "ending", "latest")
            # Past the committed end nothing can be read yet: clamp.
            end[topic] = {mq: min(e, snap.bounds[mq].max_offset) for mq, e in ending.items()}
        return plan_partitions(opts, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        qr = range_of(partition)
        if qr is not None:
            yield from read_partition(qr, self.opts, self.schema)
