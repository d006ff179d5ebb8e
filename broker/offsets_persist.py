"""The consumer offsets' persist, driven from the broker's event loop every
``consumer_offset_persist_interval_ms``: the groups changed since the last persist are encoded on
the loop :data:`PERSIST_SLICE` groups at a time, the loop running its other callbacks (the
commits) between slices, and the document is written and fsynced in a worker thread.

Encoding is Python work, which holds the GIL wherever it runs. Done in a thread (as from
26ded3e), it took the GIL from the loop's thread for a switch interval (5 ms) each time the loop
gave it up (its poll): while a persist of 10,000 groups ran (0.3 s every 5 s), the loop woke every
6 ms instead of every 1 ms, and every commit then in flight waited (issue 34, the offset commit
p99). On the loop, a slice holds it for about 1 ms; and only the groups changed since the last
persist are encoded (:meth:`storage.config_files.ConsumerOffsetStore.encode_some`)."""

from __future__ import annotations

import asyncio
from typing import Final

import structlog

from storage.config_files import ConsumerOffsetStore

log = structlog.get_logger(__name__)

__all__ = ["PERSIST_SLICE", "persist_offsets"]

PERSIST_SLICE: Final = 64
"""Groups encoded in one step of the event loop (8 queues each: about 1 ms, pure Python)."""


async def persist_offsets(offsets: ConsumerOffsetStore, slice_groups: int = PERSIST_SLICE) -> None:
    """Persist the table if it changed since the last persist (a cancelled persist leaves the
    groups it did not encode for the next one)."""
    job = offsets.begin_persist()
    if job is None:
        return
    while not offsets.encode_some(job, slice_groups):
        await asyncio.sleep(0)
    await asyncio.get_running_loop().run_in_executor(None, offsets.write_persisted, job)
    log.debug("consumer offsets persisted", groups=len(job.offsets), changed=job.changed)
