"""The change log of a consumer offset table (storage/offset_changes.py): what a slave's copy
asks for instead of the whole table (issue 34). Pure: no asyncio, no files."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_the_groups_one_topic_deletion_marked_are_never_split_across_pages() -> None:
    # A topic's deletion marks every group that held it with one counter value; a page cut
    # among them answered that counter, and the next page (after it) never listed the rest.
    log = OffsetChangeLog("inc")
    log.group_changed("a")  # 1
    log.topic_deleted("T", ["b", "c", "d"])  # 2
    log.group_changed("e")  # 3
    first = log.since("inc", 0, limit=2)
    assert first == OffsetChanges(2, ["a", "b", "c", "d"], [], ["T"], more=True)
    assert log.since("inc", first.counter, limit=2) == OffsetChanges(3, ["e"], [], [])


def _reference(marks: dict[str, int], counter: int, limit: int, now: int) -> tuple[list[str], int]:
    """The groups a page holds and the counter it brings the asker to, from the marks alone."""
    after = sorted((mark, group) for group, mark in marks.items() if mark > counter)
    if limit <= 0 or len(after) <= limit:
        return [group for _, group in after], now
    last = after[limit - 1][0]
    page = [group for mark, group in after if mark <= last]
    return page, (now if len(page) == len(after) else last)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["change", "delete", "topic"]), st.lists(st.integers(0, 12))),
        max_size=80,
    ),
    st.integers(0, 6),
)
def test_pages_read_from_any_counter_are_what_the_marks_say(
    steps: list[tuple[str, list[int]]], limit: int
) -> None:
    log = OffsetChangeLog("inc")
    marks: dict[str, int] = {}
    for kind, picks in steps:
        names = sorted({f"g{i}" for i in picks})
        if kind == "change":
            for name in names:
                log.group_changed(name)
                marks[name] = log.counter
        elif kind == "delete":
            for name in names:
                log.group_deleted(name)
                marks.pop(name, None)
        else:
            log.topic_deleted("t", names)
            marks.update(dict.fromkeys(names, log.counter))
    for counter in range(log.counter + 1):
        page = log.since("inc", counter, limit)
        assert page is not None
        groups, upto = _reference(marks, counter, limit, log.counter)
        assert (page.groups, page.counter, page.more) == (groups, upto, upto < log.counter)
    # Paging from 0 to the end lists every live group once.
    seen: list[str] = []
    counter, more = 0, True
    while more:
        page = log.since("inc", counter, limit)
        assert page is not None
        seen += page.groups
        counter, more = page.counter, page.more
    assert sorted(seen) == sorted(marks)
