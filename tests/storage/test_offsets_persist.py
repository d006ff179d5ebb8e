"""Persisting the consumer offsets: the work of a persist grows with the groups that changed
since the last one, and none of it holds the broker's event loop for more than a slice of groups
(issue 34: the offset commit p99).

Before 26ded3e the broker encoded the whole table on its loop every 5 s (0.5 s at 10,000 groups
of 8 queues); from it, in a worker thread, in slices of 256 groups. Encoding is Python work,
which holds the GIL in any thread: while a thread encoded 10,000 groups (0.3 s), the loop's
thread got the GIL back a switch interval (5 ms) after each time it gave it up, so the loop woke
every 6 ms instead of every 1 ms, and commits in flight waited. Each persist encoded every group
again, whether it had moved or not. Now each group's entries stay encoded between persists, a
persist encodes the groups changed since (on the loop, :data:`broker.offsets_persist.PERSIST_SLICE`
at a time), and a worker thread joins the entries and writes the file. The file's bytes are
those of the whole table encoded at once, as before.

Counts, not timings: the groups each ``json.dumps`` call names, the thread it runs on, and the
event loop's steps between calls."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from broker.offsets_persist import PERSIST_SLICE, persist_offsets
from storage.config_files import VERSION, ConsumerOffsetStore
from storage.small_file import read_atomic

GROUPS = 10_000
QUEUES = 8
_GROUP_NAME = re.compile(r'"(group-[^"]*)"')


def filled(data_dir: Path, groups: int) -> ConsumerOffsetStore:
    (data_dir / "config").mkdir(parents=True)
    store = ConsumerOffsetStore(data_dir)
    for g in range(groups):
        for q in (*range(QUEUES), 10):  # 10 sorts before 2 as text, as json's sort_keys does
            at = 1_700_000_000_000 + g if g % 3 else None  # some without a consume time
            store.commit(f"group-{g:05d}", f"Topic{g % 7}", q, g * 100 + q, at)
    store.commit("group-only-times", "T", 0, 5, 1)
    return store


def whole_table(store: ConsumerOffsetStore) -> str:
    """The document json.dumps of the whole table gives (what the file held before)."""

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
    return json.dumps(whole, sort_keys=True)


def file_text(store: ConsumerOffsetStore) -> str:
    raw = read_atomic(store.path)
    assert raw is not None
    return raw.decode()


class EncodedGroups:
    """Records, for every json.dumps call, the group names it encoded, its thread, and the
    event loop's step it ran in (``step``, counted by the caller)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[list[str], int, int]] = []
        self.step = 0
        dumps = json.dumps

        def recording(obj: Any, *args: Any, **kwargs: Any) -> str:
            text = dumps(obj, *args, **kwargs)
            names = _GROUP_NAME.findall(text)
            if names:
                self.calls.append((names, threading.get_ident(), self.step))
            return text

        monkeypatch.setattr(json, "dumps", recording)

    def names(self) -> Counter[str]:
        return Counter(name for names, _, _ in self.calls for name in names)


def test_the_file_holds_what_the_whole_table_encoded_at_once_held(tmp_path: Path) -> None:
    store = filled(tmp_path, 600)
    store.persist()
    assert file_text(store) == whole_table(store)
    # Groups added, moved, deleted (one again after), a topic deleted: the kept entries follow.
    store.commit("group-00000-new", "Topic0", 1, 7, 2)
    store.commit("group-00005", "Topic5", 3, 999, None)
    store.commit("a-first-group", "T", 0, 1, 3)
    assert store.delete_group("group-00010")
    assert store.delete_group("group-00011")
    store.commit("group-00011", "Topic4", 0, 4, None)
    assert store.delete_topic("Topic6")
    store.persist()
    assert file_text(store) == whole_table(store)
    again = ConsumerOffsetStore(tmp_path)
    again.load()
    assert again.snapshot() == store.snapshot()
    assert again.snapshot_times() == store.snapshot_times()
    # A loaded table encodes every group at its first persist, to the same bytes.
    again.commit("group-00020", "Topic6", 0, 1, 4)
    store.commit("group-00020", "Topic6", 0, 1, 4)
    again.persist()
    assert file_text(again) == whole_table(store)


def test_a_persist_encodes_only_the_groups_changed_since_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = filled(tmp_path, GROUPS)
    store.persist()
    moved = [f"group-{g:05d}" for g in range(0, GROUPS, GROUPS // 50)]
    for group in moved:
        store.commit(group, "Topic0", 0, 1_000_000, 1_800_000_000_000)
    encoded = EncodedGroups(monkeypatch)
    store.persist()
    monkeypatch.undo()
    assert file_text(store) == whole_table(store)
    names = encoded.names()
    # Before: every group of the table encoded at every persist (10,001 groups for 50 moved).
    assert set(names) == set(moved), (
        f"a persist after {len(moved)} of {GROUPS + 1:,} groups moved encoded {len(names):,} groups"
    )
    assert max(names.values()) == 2  # each moved group's offsets and times, once
    encoded = EncodedGroups(monkeypatch)
    store.persist()  # nothing moved since: nothing written, nothing encoded
    assert not encoded.calls


async def test_the_broker_s_persist_encodes_on_the_loop_a_slice_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker's housekeeping persist (:func:`persist_offsets`) with every group changed:
    every group encoded on the event loop's thread, at most PERSIST_SLICE groups in one step of
    the loop (a coroutine counting the loop's steps runs beside it); the worker thread only
    joins and writes."""
    store = filled(tmp_path, GROUPS)
    loop_thread = threading.get_ident()
    encoded = EncodedGroups(monkeypatch)
    done = False

    async def count_steps() -> None:
        while not done:
            encoded.step += 1
            await asyncio.sleep(0)

    counter = asyncio.create_task(count_steps())
    await persist_offsets(store)
    done = True
    await counter
    monkeypatch.undo()
    assert file_text(store) == whole_table(store)
    # Each group's entry of each table it has one in (a third of them have no times), once.
    entries = len(store.snapshot()) + len(store.snapshot_times())
    assert encoded.names().total() == entries
    off_loop = sum(len(names) for names, thread, _ in encoded.calls if thread != loop_thread)
    assert off_loop == 0, f"{off_loop:,} group entries encoded off the event loop's thread"
    per_step = Counter[int]()
    for names, _, step in encoded.calls:
        per_step[step] += len(names)
    # Entries per step: each group's two tables' entries are encoded in the same step.
    most = max(per_step.values())
    assert most <= 2 * PERSIST_SLICE, f"{most:,} group entries encoded in one step of the loop"


async def test_a_persist_cut_short_loses_nothing(tmp_path: Path) -> None:
    """A persist cancelled between slices (the broker stopping) leaves the groups it did not
    encode for the next one; an older persist's document written late does not replace a newer
    one."""
    store = filled(tmp_path, 1_000)
    task = asyncio.create_task(persist_offsets(store))
    for _ in range(3):  # a few slices encoded
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    store.commit("group-00999", "Topic0", 0, 123_456, 5)
    old = store.begin_persist()
    assert old is not None
    while not store.encode_some(old, 0):
        pass
    store.commit("group-00998", "Topic0", 0, 654_321, 6)
    store.persist()  # what the broker's stop does
    store.write_persisted(old)  # the older document, late: not written
    assert file_text(store) == whole_table(store)
    again = ConsumerOffsetStore(tmp_path)
    again.load()
    assert again.snapshot() == store.snapshot()
    assert again.snapshot_times() == store.snapshot_times()
