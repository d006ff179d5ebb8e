"""Persisting the consumer offsets does not hold the broker's event loop (issue 34: the offset
commit p99 grew from 33 ms at 100 groups to 191 ms at 10,000). The broker persisted the whole
table on its loop every 5 s, and the table's encoding (json's C encoder, which holds the GIL for
the whole document) takes about 0.5 s at 10,000 groups of 8 queues: commits waited behind it.
The broker now persists in a thread, and the table is encoded a slice of groups at a time, so
the loop's thread gets the GIL between slices. The file's bytes are the same."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from storage.config_files import _PERSIST_SLICE, VERSION, ConsumerOffsetStore
from storage.small_file import read_atomic

GROUPS = 10_000
QUEUES = 8


def filled(data_dir: Path, groups: int) -> ConsumerOffsetStore:
    (data_dir / "config").mkdir(parents=True)
    store = ConsumerOffsetStore(data_dir)
    for g in range(groups):
        for q in (*range(QUEUES), 10):  # 10 sorts before 2 as text, as json's sort_keys does
            at = 1_700_000_000_000 + g if g % 3 else None  # some without a consume time
            store.commit(f"group-{g:05d}", f"Topic{g % 7}", q, g * 100 + q, at)
    store.commit("group-only-times", "T", 0, 5, 1)
    return store


def test_the_file_holds_what_the_whole_table_encoded_at_once_held(tmp_path: Path) -> None:
    store = filled(tmp_path, 600)  # more than two slices
    store.persist()
    raw = read_atomic(store.path)
    assert raw is not None

    def text_ids(table: dict[str, dict[str, dict[int, int]]]) -> dict[str, object]:
        return {
            g: {t: {str(q): v for q, v in sorted(qs.items())} for t, qs in topics.items()}
            for g, topics in table.items()
        }

    whole = {
        "version": VERSION,
        "offsets": text_ids(store.snapshot()),
        "lastConsumeMs": text_ids(store.snapshot_times()),
    }
    assert raw.decode() == json.dumps(whole, sort_keys=True)
    again = ConsumerOffsetStore(tmp_path)
    again.load()
    assert again.snapshot() == store.snapshot()
    assert again.snapshot_times() == store.snapshot_times()


async def test_a_persist_in_a_thread_leaves_the_event_loop_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """json's C encoder holds the GIL for the whole of one call, so what keeps the loop running
    while a thread persists is the size of each call: the table is encoded in many calls, none
    of them more than a slice of groups. Every json.dumps call of the persist is recorded with
    the groups it named (each group name is encoded in the call that writes its key)."""
    store = filled(tmp_path, GROUPS)
    loop = asyncio.get_running_loop()
    loop_thread = threading.get_ident()
    dumps = json.dumps
    groups_per_call: list[int] = []

    def recording(obj: Any, *args: Any, **kwargs: Any) -> str:
        text = dumps(obj, *args, **kwargs)
        if threading.get_ident() != loop_thread:
            groups_per_call.append(text.count('"group-'))
        return text

    monkeypatch.setattr(json, "dumps", recording)
    lateness: list[float] = []
    done = False

    async def probe() -> None:
        while not done:
            t0 = time.perf_counter()
            await asyncio.sleep(0.001)
            lateness.append(time.perf_counter() - t0 - 0.001)

    prober = asyncio.create_task(probe())
    await asyncio.sleep(0.05)
    began = time.perf_counter()
    await loop.run_in_executor(None, store.persist)
    took = time.perf_counter() - began
    done = True
    await prober
    monkeypatch.undo()
    # The figures, printed, not asserted: the loop's largest lateness and the persist's time.
    print(f"persist of {GROUPS:,} groups {took:.3f} s; the loop's largest lateness "
          f"{max(lateness):.4f} s over {len(lateness)} probes")  # fmt: skip
    assert sum(groups_per_call) >= GROUPS, "the persist's encoding was not seen"
    # Before: the whole table in one call (json.dumps of the document, every group in it).
    assert max(groups_per_call) <= _PERSIST_SLICE, (
        f"one json.dumps call encoded {max(groups_per_call):,} group entries at once "
        f"(the C encoder holds the GIL for all of it; at most {_PERSIST_SLICE} wanted)"
    )
