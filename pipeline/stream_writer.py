"""``df.writeStream.format("rmq")``: every micro-batch's tasks produce their rows (at-least-once)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import structlog
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from pipeline.write import WriteSetup, summary, write_batches

if TYPE_CHECKING:
    import pyarrow as pa

log = structlog.get_logger(__name__)


class RmqStreamWriter(DataSourceStreamArrowWriter):
    """Every micro-batch's tasks get their rows as Arrow record batches."""

    def __init__(self, setup: WriteSetup) -> None:
        self.setup = setup

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self.setup, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tasks, acked, _ = summary(messages)
        log.info("micro-batch written", batch=batchId, tasks=tasks, acknowledged=acked)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tasks, acked, spans = summary(messages)
        log.warning(
            "micro-batch write aborted; messages of tasks that succeeded stay in the topic "
            "and are written again when the batch is retried (at-least-once)",
            batch=batchId,
            tasks=tasks,
            acknowledged=acked,
            spans=spans,
        )
