"""The change log of a consumer offset table (storage/offset_changes.py): what a slave's copy
asks for instead of the whole table (issue 34). Pure: no asyncio, no files."""

from __future__ import annotations

from storage.offset_changes import MAX_TOMBSTONES, OffsetChangeLog, OffsetChanges


def test_nothing_changed_since_the_counter_is_an_empty_delta() -> None:
    log = OffsetChangeLog("inc")
    for group in ("a", "b", "c"):
        log.group_changed(group)
    assert log.since("inc", log.counter) == OffsetChanges(3, [], [], [])


def test_the_groups_changed_after_the_counter_oldest_first_each_once() -> None:
    log = OffsetChangeLog("inc")
    log.group_changed("a")
    log.group_changed("b")
    mark = log.counter
    log.group_changed("c")
    log.group_changed("a")
    log.group_changed("c")
    assert log.since("inc", mark) == OffsetChanges(5, ["a", "c"], [], [])
    assert log.since("inc", 0) == OffsetChanges(5, ["b", "a", "c"], [], [])


def test_deleted_groups_and_topics_are_tombstones_and_a_deleted_group_is_no_change() -> None:
    log = OffsetChangeLog("inc")
    log.group_changed("a")
    log.group_changed("b")
    mark = log.counter
    log.group_deleted("a")
    log.topic_deleted("T", ["b"])  # b lost its offsets on T, kept others
    changes = log.since("inc", mark)
    assert changes == OffsetChanges(4, ["b"], ["a"], ["T"])
    log.group_changed("a")  # committed again after its delete: both said, the delete first
    assert log.since("inc", mark) == OffsetChanges(5, ["b", "a"], ["a"], ["T"])


def test_another_incarnation_or_an_unknown_counter_gets_no_delta() -> None:
    log = OffsetChangeLog("inc")
    log.group_changed("a")
    assert log.since("other", 1) is None  # a restarted master counts again from 0
    assert log.since("inc", 2) is None  # ahead of this log: not ours
    assert OffsetChangeLog().incarnation != OffsetChangeLog().incarnation


def test_a_counter_older_than_a_trimmed_tombstone_gets_no_delta() -> None:
    log = OffsetChangeLog("inc")
    for i in range(MAX_TOMBSTONES + 1):
        log.group_deleted(f"g{i}")
    # The first tombstone (counter 1) was trimmed: a slave at 0 could miss that delete.
    assert log.since("inc", 0) is None
    changes = log.since("inc", 1)
    assert changes is not None and len(changes.deleted_groups) == MAX_TOMBSTONES


def test_a_page_is_the_oldest_changes_and_the_tombstones_up_to_them() -> None:
    log = OffsetChangeLog("inc")
    log.group_changed("a")  # 1
    log.group_deleted("x")  # 2
    log.group_changed("b")  # 3
    log.topic_deleted("T", [])  # 4
    log.group_changed("c")  # 5
    first = log.since("inc", 0, limit=2)
    assert first == OffsetChanges(3, ["a", "b"], ["x"], [], more=True)
    rest = log.since("inc", first.counter, limit=2)
    assert rest == OffsetChanges(5, ["c"], [], ["T"], more=False)
    assert log.since("inc", 0, limit=3) == OffsetChanges(5, ["a", "b", "c"], ["x"], ["T"])
