"""``df.write.format("rmq")``: every task produces its rows from Arrow batches; the driver logs
the outcome."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import structlog
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from pipeline.write import WriteSetup, summary, write_batches

if TYPE_CHECKING:
    import pyarrow as pa

log = structlog.get_logger(__name__)


class RmqBatchWriter(DataSourceArrowWriter):
    """Spark hands each task its rows as Arrow record batches (no per-row conversion)."""

    def __init__(self, setup: WriteSetup) -> None:
        self.setup = setup

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self.setup, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        tasks, acked, _ = summary(messages)
        log.info("write committed", tasks=tasks, acknowledged=acked)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        tasks, acked, spans = summary(messages)
        log.warning(
            "write aborted; messages of tasks that succeeded stay in the topic",
            tasks=tasks,
            acknowledged=acked,
            spans=spans,
        )
