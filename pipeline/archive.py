"""The archive job: a topic streamed into Parquet, partitioned by day, exactly once.

Exactly once comes from the two ends agreeing through the checkpoint: the ``rmq`` source's
offsets are logged before a batch runs and a replayed batch reads exactly the same messages, and
Spark's file sink records every batch's files in ``<output>/_spark_metadata``, skipping a batch it
already committed. A job killed at any point and started again with the same checkpoint leaves
no duplicates and no gaps, as long as the archive is read through Spark (which follows
``_spark_metadata``; files of a killed batch that never committed may remain on disk unlisted).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.progress import offsets_behind

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

#: the partition column: the UTC day of storeTimestamp, ``yyyy-MM-dd``
DAY_COLUMN = "day"


@dataclass(frozen=True, slots=True)
class ArchiveSpec:
    controllers: str
    topic: str
    output: str
    checkpoint: str
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    #: None: read what is there now and stop (Trigger.AvailableNow); else a processing-time
    #: interval such as "30 seconds", running until stopped
    interval: str | None = None
    #: the source options of every connection: accessKey/secretKey, tls/caFile (checked)
    connection: tuple[tuple[str, str], ...] = ()


def start_archive(spark: SparkSession, spec: ArchiveSpec) -> StreamingQuery:
    """Start the archive query (the caller awaits or stops it)."""
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("rmq")
        .option("controllers", spec.controllers)
        .option("topic", spec.topic)
        .option("startingOffsets", spec.starting_offsets)
        .option("failOnDataLoss", str(spec.fail_on_data_loss).lower())
        .options(**dict(spec.connection))
    )
    if spec.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(spec.max_offsets_per_trigger))
    # The day is computed in UTC whatever the session's time zone.
    day = F.date_format(
        F.to_utc_timestamp(F.col("storeTimestamp"), _session_tz(spark)), "yyyy-MM-dd"
    )
    out = reader.load().withColumn(DAY_COLUMN, day)
    writer = (
        out.writeStream.format("parquet")
        .option("path", spec.output)
        .option("checkpointLocation", spec.checkpoint)
        .partitionBy(DAY_COLUMN)
        .outputMode("append")
        .queryName(f"rmq-archive-{spec.topic}")
    )
    if spec.interval is None:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=spec.interval)
    return writer.start()


def _session_tz(spark: SparkSession) -> str:
    return spark.conf.get("spark.sql.session.timeZone") or "UTC"


@dataclass(frozen=True, slots=True)
class ArchiveResult:
    batches: int
    rows: int
    end_offset: str | None
    #: Parquet files this run added under the output directory
    files: int = 0
    #: the Kafka source's offsets-behind-latest figures of the last batch (None: no batch)
    behind: dict[str, float] | None = None
    #: the signal (SIGINT, SIGTERM) that stopped the query, or None
    stopped_by: int | None = None


def data_files(output: str) -> set[str]:
    """The Parquet data files under ``output`` (not Spark's metadata or checksum files)."""
    root = Path(output)
    if not root.is_dir():
        return set()
    return {
        str(p.relative_to(root))
        for p in root.rglob("*.parquet")
        if not any(part.startswith(("_", ".")) for part in p.relative_to(root).parts)
    }


#: how often the job looks whether a stop signal came while its query runs (seconds)
STOP_POLL_S = 1


@contextlib.contextmanager
def stop_signals() -> Iterator[list[int]]:
    """SIGINT and SIGTERM recorded in the list it yields instead of acted on, while the block
    runs (in the main thread; elsewhere signals cannot be handled and the list stays empty);
    the handlers before it (pyspark's) come back after."""
    got: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield got
        return

    def note(signum: int, _frame: object) -> None:
        got.append(signum)

    before = {s: signal.signal(s, note) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield got
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def run_archive(spark: SparkSession, spec: ArchiveSpec) -> ArchiveResult:
    """Run the archive to the end of what is there now, or with an interval until the query is
    stopped or fails. Counts cover the progress reports Spark retains
    (``spark.sql.streaming.numRecentProgressUpdates``)."""
    before = data_files(spec.output)
    query = start_archive(spark, spec)
    with stop_signals() as stopped:
        # wait in short steps, so that a stop signal is acted on here, between calls to the
        # JVM (pyspark's own SIGINT handler calls into the JVM from inside the call it
        # interrupts: py4j errors, stacks on stderr, and the job dies unsummarised)
        while not query.awaitTermination(STOP_POLL_S):
            if stopped:
                query.stop()
                break
    progress = [p for p in query.recentProgress if int(p["numInputRows"]) > 0]
    end = None
    behind = None
    if query.lastProgress is not None and query.lastProgress["sources"]:
        end = query.lastProgress["sources"][0]["endOffset"]
        behind = offsets_behind(query.lastProgress["sources"][0])
    return ArchiveResult(
        stopped_by=stopped[0] if stopped else None,
        batches=len(progress),
        rows=sum(int(p["numInputRows"]) for p in progress),
        end_offset=str(end) if end is not None else None,
        files=len(data_files(spec.output) - before),
        behind=behind,
    )
