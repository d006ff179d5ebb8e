"""Static topics in the pipeline: the ``rmq`` source and ``rmqstore`` read them by logical queue
(docs/static-topics.md, docs/pipeline.md).

A static topic's queues are logical: the source plans and checkpoints logical offsets
(``MessageQueue(LOGICAL_BROKER, q)``), a task reads a logical range as the physical ranges of
the items it spans (:func:`protocol.static_topic.physical_ranges`, the same under every later
mapping), and rows show the logical queue id and offset (``brokerName``: where the row is
stored). ``rmqstore`` does the same for the records of one broker's CommitLog, given the
mapping.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from client.routes import LOGICAL_BROKER, MessageQueue
from pipeline.offsets import QueueBounds
from protocol.static_topic import LogicalQueue, commit_points, logical_max, logical_of

if TYPE_CHECKING:
    import pyarrow as pa


def logical_bounds(
    mapping: Sequence[LogicalQueue], physical: Mapping[MessageQueue, QueueBounds]
) -> dict[MessageQueue, QueueBounds]:
    """Each logical queue's bounds from its items' physical ones: min the first retained
    message of the oldest item that still holds one, max the newest item's max translated. A
    logical queue with an item whose group did not answer is left out (like that group's
    queues)."""
    out: dict[MessageQueue, QueueBounds] = {}
    for queue_id, items in enumerate(mapping):
        found = [physical.get(MessageQueue(i.broker_name, i.physical_queue)) for i in items]
        if any(b is None for b in found):
            continue
        maximum = logical_max(items, found[-1].max_offset)  # type: ignore[union-attr]
        minimum = maximum
        for item, b in zip(items, found, strict=True):
            assert b is not None
            first = logical_of(item, b.min_offset)
            if item.logical_end is None or first < item.logical_end:
                minimum = min(first, maximum)
                break
        out[MessageQueue(LOGICAL_BROKER, queue_id)] = QueueBounds(minimum, maximum)
    return out


def physical_commits(
    mapping: Sequence[LogicalQueue], offsets: Mapping[MessageQueue, int]
) -> dict[MessageQueue, int]:
    """Logical offsets as the physical offsets a consumer group commits for them (the SDK
    consumer's :func:`commit_points`: the item holding each, older items at their end, newer
    ones at their start)."""
    out: dict[MessageQueue, int] = {}
    for mq, offset in offsets.items():
        if mq.broker_name != LOGICAL_BROKER:
            out[mq] = offset
            continue
        if mq.queue_id >= len(mapping):
            continue
        for item, physical in commit_points(mapping[mq.queue_id], offset):
            out[MessageQueue(item.broker_name, item.physical_queue)] = physical
    return out


def logical_view(
    batch: pa.RecordBatch, topic: str, broker: str, mapping: Sequence[LogicalQueue]
) -> pa.RecordBatch:
    """``batch`` with the rows of ``topic`` stored on ``broker`` shown by logical queue: a row
    in an item's range gets the item's logical queue id and its logical offset; a row of the
    topic in no item's range (a queue no item maps, a record past a sealed item's end) is left
    out. Rows of other topics stay as they are."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    if n == 0:
        return batch
    names = batch.schema.names
    mine = np.asarray(pc.equal(batch.column(names.index("topic")), topic).fill_null(False))
    if not mine.any():
        return batch
    qcol, ocol = names.index("queueId"), names.index("queueOffset")
    queue_ids = batch.column(qcol).to_numpy(zero_copy_only=False)
    offsets = batch.column(ocol).to_numpy(zero_copy_only=False)
    new_ids, new_offsets = queue_ids.copy(), offsets.copy()
    keep = ~mine
    for logical_queue, items in enumerate(mapping):
        for item in items:
            if item.broker_name != broker:
                continue
            rows = mine & (queue_ids == item.physical_queue) & (offsets >= item.physical_start)
            end = item.physical_end()
            if end is not None:
                rows &= offsets < end
            new_ids[rows] = logical_queue
            new_offsets[rows] = offsets[rows] + (item.logical_start - item.physical_start)
            keep |= rows
    columns = list(batch.columns)
    columns[qcol] = pa.array(new_ids, batch.schema.field(qcol).type)
    columns[ocol] = pa.array(new_offsets, batch.schema.field(ocol).type)
    out = pa.RecordBatch.from_arrays(columns, schema=batch.schema)
    return out if keep.all() else out.filter(pa.array(keep))
