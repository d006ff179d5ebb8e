"""The ``rmq`` data source: topics as Spark DataFrames, batch and streaming, read and write.

Reading plans one Spark partition per (broker group, queue) range with data (``minPartitions``
splits big ranges, ``maxRecordsPerPartition`` caps them), over one topic, a ``topics`` list,
every topic matching ``topicPattern`` or the queues ``assign`` names.
Ranges end at the committed end of each queue (the confirm offset), so a range is never
truncated away by a failover, and a replayed range yields exactly the same messages. Everything a
task needs travels in its partition (:class:`~pipeline.partition.RangePartition`); readers and
writers hold only options, so they pickle, and connections are opened inside
``read()``/``write()``. Every option is checked on the driver before any task runs
(:mod:`pipeline.options`).

Streaming offsets are ``{"broker-a": {"0": 42}}`` (next offset per queue; by topic first when
several topics are read), kept by Spark's checkpoint. Queues that appear later (a topic grown, a
new broker group, a new matching topic) join at their earliest offset. ``maxOffsetsPerTrigger``
and ``minOffsetsPerTrigger`` go through Spark 4.2+'s ``ReadLimit`` (on older 4.x the reader
applies the maximum itself, relative to the offsets it returned last). ``Trigger.AvailableNow``
reads up to the committed ends at the query's start and stops. With ``groupId`` the processed
offsets are committed at the brokers as that consumer group's.

Writing goes through PySpark's Arrow writers: each task turns its record batches into
SEND_BATCH_MESSAGE batches; a ``messageGroup`` column picks the queue by hash and keeps a group's
order, a ``queue`` column names it. It is at-least-once: a task that fails reports how many of its rows were acknowledged
(they stay in the topic) and Spark's retry of the task sends them again.

:class:`RmqDataSource` is the format; its readers and writers are :mod:`pipeline.batch_reader`,
:mod:`pipeline.stream_reader` (planning and reading in :mod:`pipeline.partition`),
:mod:`pipeline.batch_writer` and :mod:`pipeline.stream_writer` (producing in
:mod:`pipeline.write` and :mod:`pipeline.queue_sender`).
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from pipeline.batch_reader import RmqBatchReader
from pipeline.batch_writer import RmqBatchWriter
from pipeline.errors import OptionError
from pipeline.options import ReadOptions
from pipeline.rows import check_schema, message_schema
from pipeline.stream_reader import RmqStreamReader
from pipeline.stream_writer import RmqStreamWriter
from pipeline.write import writer_setup

FORMAT = "rmq"


class RmqDataSource(DataSource):
    """``spark.read.format("rmq")``, ``spark.readStream``, ``df.write`` and ``df.writeStream``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        # Called on the driver when a read is defined (load()): every option is checked here,
        # before any task runs; the mode's own checks follow in reader()/streamReader().
        opts = ReadOptions.parse(self.options, "any")
        return message_schema(properties=opts.include_properties)

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = ReadOptions.parse(self.options, "batch")
        check_schema(schema, properties=opts.include_properties)
        return RmqBatchReader(opts, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = ReadOptions.parse(self.options, "stream")
        check_schema(schema, properties=opts.include_properties)
        return RmqStreamReader(opts, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise OptionError(
                "save mode overwrite is not supported: a topic's messages cannot be replaced; "
                'use .mode("append")'
            )
        return RmqBatchWriter(writer_setup(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return RmqStreamWriter(writer_setup(self.options, schema))
