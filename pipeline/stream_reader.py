"""``spark.readStream.format("rmq")``: micro-batches over queue offsets.

Streaming offsets are ``{"broker-a": {"0": 42}}`` (next offset per queue), kept by Spark's
checkpoint. ``maxOffsetsPerTrigger`` is honoured through Spark 4.2's ``ReadLimit``; on older 4.x
the reader applies it itself, relative to the offsets it returned last.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import structlog
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from pipeline import offsets as ofs
from pipeline.commit import commit_offsets
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

try:  # Spark 4.2+: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )

    HAS_READ_LIMIT = True
except ImportError:  # Spark 4.0 / 4.1
    HAS_READ_LIMIT = False

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in on Spark versions without the mixin (the method is then never called)."""

    ReadLimit = Any  # type: ignore[misc,assignment]

log = structlog.get_logger(__name__)


class RmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over queue offsets. Runs in Spark's driver-side Python process; the state
    kept here (last offsets, AvailableNow target) is never needed by ``read()``."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._last: ofs.Offsets | None = None
        self._target: ofs.Offsets | None = None
        self._latest: dict[str, dict[str, int]] | None = None
        #: what was last committed as the groupId's offsets
        self._committed: ofs.Offsets | None = None
        #: when the last non-empty batch was planned (minOffsetsPerTrigger waits from there)
        self._batch_at = time.monotonic()

    # Offsets are kept flat (:func:`pipeline.offsets.flatten`: the topic in each key), so limits
    # and minimums apply across every topic read; Spark's checkpoint holds them as JSON, by topic
    # when several topics are read.

    def _dump(self, flat: ofs.Offsets) -> dict[str, Any]:
        by_topic = ofs.unflatten(flat)
        if self.opts.multi:
            return ofs.to_json_topics(by_topic)
        return ofs.to_json(by_topic.get(self.opts.topic, {}))

    def _load(self, doc: Any, what: str) -> ofs.Offsets:
        if self.opts.multi:
            return ofs.flatten(ofs.from_json_topics(doc, what))
        return ofs.flatten({self.opts.topic: ofs.from_json(doc, what)})

    def _bounds(self, topics: list[str], when: str) -> tuple[dict[Any, ofs.QueueBounds], list[str]]:
        """The flat bounds of every queue of ``topics``; groups that did not answer are listed
        (and logged)."""
        bounds: dict[Any, ofs.QueueBounds] = {}
        missing: list[str] = []
        for topic in topics:
            snap = snapshot_of(self.opts, topic)
            if snap.missing:
                missing.append(f"{topic}: {unanswered(snap)}")
            for key in ofs.flatten({topic: dict.fromkeys(snap.bounds, 0)}):
                _, mq = ofs.unflatten_key(key)
                bounds[key] = snap.bounds[mq]
        if missing:
            log.warning(f"broker groups unreachable {when}", groups="; ".join(missing))
        return bounds, missing

    def initialOffset(self) -> dict[str, Any]:
        opts = self.opts
        topics = topics_of(opts)
        check_named_topics(opts, topics)
        start: ofs.TopicOffsets = {}
        for topic in topics:
            snap = snapshot_of(opts, topic)
            if snap.missing:
                log.warning("broker groups unreachable at start", groups=unanswered(snap))
            start[topic] = resolve_position(opts, topic, snap, opts.starting, "starting", "latest")
        flat = ofs.flatten(start)
        self._last = flat
        return self._dump(flat)

    def prepareForTriggerAvailableNow(self) -> None:
        bounds, missing = self._bounds(topics_of(self.opts), "at start")
        if missing:
            raise PipelineError(
                "Trigger.AvailableNow needs every broker group of the topics read; no replica "
                f"of {'; '.join(missing)} answered"
            )
        self._target = {key: b.max_offset for key, b in bounds.items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        if n is not None:
            return ReadMaxRows(n)
        m = self.opts.min_offsets_per_trigger
        return ReadMinRows(m) if m is not None else ReadAllAvailable()

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        """The end of the next batch. ``start`` and ``limit`` come from Spark 4.2+; older
        versions call this without them (the reader then starts from what it returned last)."""
        begin = self._load(start, "start offset") if start is not None else dict(self._last or {})
        if start is not None:
            self._commit_group(begin)
        bounds, _ = self._bounds(topics_of(self.opts), "now, not read this batch")
        available = {key: b.max_offset for key, b in bounds.items()}
        ceiling = self._target if self._target is not None else available
        end: ofs.Offsets = {}
        for mq, s in begin.items():
            # Never backwards (a lagging slave may report less); unreachable groups stay put.
            end[mq] = max(s, min(available.get(mq, s), ceiling.get(mq, s)))
        for mq, b in bounds.items():
            if mq not in begin and (self._target is None or mq in self._target):
                # A new queue (or topic) joins at its earliest offset.
                end[mq] = b.min_offset
        max_rows = self._max_rows(limit)
        if max_rows is not None:
            end = ofs.limit_rows(begin, end, max_rows)
        if self._too_few(begin, end, limit):
            end = {mq: begin.get(mq, e) for mq, e in end.items() if mq in begin}
        elif any(e > begin.get(mq, e) for mq, e in end.items()):
            self._batch_at = time.monotonic()
        self._last = end
        self._latest = self._dump({**begin, **available})
        return self._dump(end)

    def _max_rows(self, limit: ReadLimit | None) -> int | None:
        if limit is None:  # Spark before 4.2: apply the option ourselves
            return self.opts.max_offsets_per_trigger
        if HAS_READ_LIMIT and isinstance(limit, ReadMaxRows):
            return int(limit.max_rows)
        if HAS_READ_LIMIT and not isinstance(limit, ReadAllAvailable | ReadMinRows):
            log.warning("read limit not supported, reading all available", limit=repr(limit))
        return None

    def _too_few(self, begin: ofs.Offsets, end: ofs.Offsets, limit: ReadLimit | None) -> bool:
        """minOffsetsPerTrigger: hold the batch back while fewer messages are new and
        maxTriggerDelay has not passed since the last batch (never under AvailableNow, nor when
        the engine asks for everything)."""
        least = self.opts.min_offsets_per_trigger
        if least is None or self._target is not None:
            return False
        if HAS_READ_LIMIT and isinstance(limit, ReadAllAvailable):
            return False
        if HAS_READ_LIMIT and isinstance(limit, ReadMinRows):
            least = int(limit.min_rows)
        new = sum(max(0, e - begin.get(mq, e)) for mq, e in end.items())
        if new == 0 or new >= least:
            return False
        return time.monotonic() - self._batch_at < self.opts.max_trigger_delay

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._latest

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return plan_partitions(
            self.opts,
            ofs.unflatten(self._load(start, "start offset")),
            ofs.unflatten(self._load(end, "end offset")),
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        qr = range_of(partition)
        if qr is not None:
            yield from read_partition(qr, self.opts, self.schema)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark processed everything before ``end``. Offsets live in Spark's checkpoint, so
        nothing the query needs depends on this; with ``groupId`` they are also committed at
        the brokers as that consumer group's (see :meth:`_commit_group`)."""
        self._commit_group(self._load(end, "end offset"))

    def _commit_group(self, processed: ofs.Offsets) -> None:
        """Commit ``processed`` as the ``groupId``'s offsets, unless they were already.

        Spark calls ``commit()`` for a batch only when it plans the next one with data, so the
        last batch before an idle spell (or of ``Trigger.AvailableNow``) would stay uncommitted;
        ``latestOffset(start)`` (Spark 4.2+) is called only once the batch ending at ``start``
        was processed and written to the commit log, so it commits ``start`` too. A failed
        commit is a warning: the next one repairs it (offsets only grow)."""
        group = self.opts.group_id
        if group is None or not processed or processed == self._committed:
            return
        failures = [
            f"{topic}: {failure}"
            for topic, offsets in ofs.unflatten(processed).items()
            for failure in commit_offsets(
                self.opts.controllers,
                topic,
                group,
                offsets,
                self.opts.request_timeout,
                self.opts.credentials,
                self.opts.tls,
            )
        ]
        if failures:
            log.warning("consumer offsets not committed", group=group, failures="; ".join(failures))
            return
        self._committed = dict(processed)
