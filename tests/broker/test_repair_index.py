"""The broker's scrub rebuilds a key index file that fails its check (issue 31 item 5) in
slices, a task on the loop beside others (tests/storage/test_index_check.py tests the slices
themselves). Real store; a lone broker's scrub (no replica)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.repair.scrub import Scrubber
from daemon.tasks import cancel_and_wait
from tests.storage.test_index_check import COUNT, damaged_first_file, keys_found
from tests.support.wait import wait_until_async


async def test_the_scrub_rebuilds_a_damaged_file_while_the_loop_serves(tmp_path: Path) -> None:
    store, _files = damaged_first_file(tmp_path)
    index = store.index
    assert index is not None
    scrubber = Scrubber(store.repairs, None, lambda: 1 << 30, lambda: 0.0)
    ticks = 0

    async def other_work() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    tasks = [asyncio.create_task(scrubber.run()), asyncio.create_task(other_work())]
    try:
        await wait_until_async(
            lambda: scrubber.counts["index_rebuilt"] == 1 and not index.behind,
            "the scrub to rebuild the damaged index file",
            30,
        )
    finally:
        await cancel_and_wait(tasks)
    assert index.indexed_through == store.max_offset
    assert ticks > 0
    assert keys_found(store) == COUNT // 97 + 1
    store.close()
