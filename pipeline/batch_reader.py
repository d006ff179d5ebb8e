"""``spark.read.format("rmq")``: the queue ranges between the starting and ending offsets, each
clamped to the committed end of its queue."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pipeline.errors import PipelineError
from pipeline.options import ReadOptions
from pipeline.partition import (
    plan_partitions,
    range_of,
    read_partition,
    resolve_position,
    snapshot_of,
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
        snap = snapshot_of(opts)
        if snap.missing:
            raise PipelineError(
                f"cannot read topic {opts.topic!r} completely: no replica of "
                f"{unanswered(snap)} answered"
            )
        start = resolve_position(opts, snap, opts.starting, "starting", "earliest")
        end = resolve_position(opts, snap, opts.ending, "ending", "latest")
        # Past the committed end nothing can be read yet: clamp.
        end = {mq: min(e, snap.bounds[mq].max_offset) for mq, e in end.items()}
        return plan_partitions(opts, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        qr = range_of(partition)
        if qr is not None:
            yield from read_partition(qr, self.opts, self.schema)
