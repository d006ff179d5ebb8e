"""Reading one stored message by its CommitLog offset (a nack names its message that way, a
message id is store host + offset)."""

from __future__ import annotations

from broker.context import BrokerContext
from protocol.message import MessageRecord, RecordError, decode_record
from storage.errors import StoreError


def visible_record_at(ctx: BrokerContext, offset: int) -> MessageRecord | None:
    """The message whose record starts at CommitLog ``offset`` and that consumers may see
    (below the confirm offset in controller mode); None when there is none: a position inside
    a record, a blank tail, a deleted or corrupt record, or one not confirmed yet."""
    store = ctx.store
    visible = ctx.visible_offset()
    end = store.max_offset if visible is None else min(visible, store.max_offset)
    if not store.min_offset <= offset < end:
        return None
    try:
        raw = bytes(store.read_raw(offset, 1))
        record = decode_record(raw)
    except (StoreError, RecordError):
        return None
    if record.physical_offset != offset or offset + record.size > end:
        return None
    return record
