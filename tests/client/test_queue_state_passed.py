"""QueueState's consumed offset covers the entries a tag filter passed over (RocketMQ's
nextBeginOffset): at once when nothing of the queue is waiting in the buffer or the application,
else once the last message delivered before them is consumed; never past a held message."""

from __future__ import annotations

from client.pull import QueueState
from client.routes import MessageQueue


def started(offset: int = 0) -> QueueState:
    state = QueueState(MessageQueue("broker-a", 0), "T")
    state.next_offset = state.pulled = state.consumed = offset
    return state


def test_passed_over_entries_count_as_consumed_on_an_idle_queue() -> None:
    state = started()
    state.passed(100)  # a pull passed over 100 entries of other tags
    assert (state.next_offset, state.pulled, state.consumed) == (100, 100, 100)
    state.passed(100)  # PULL_NOT_FOUND at the same offset: nothing changes
    assert state.consumed == 100
    assert not state.acked  # nothing was consumed: a retry topic keeps no position for it


def test_entries_passed_over_after_a_batch_wait_for_its_last_message() -> None:
    state = started()
    # Matching messages at 3 and 13; the pull's nextBeginOffset went on to 20.
    state.next_offset = 20
    state.took(14, 20)
    state.passed(40)  # the next pull passed over 20..39 while the batch is with the application
    assert (state.next_offset, state.pulled, state.consumed) == (40, 40, 0)
    state.ack(4)  # the first message only
    assert state.consumed == 4
    state.ack(14)  # the batch's last message: everything pulled so far
    assert state.consumed == 40
    state.passed(60)  # idle now: at once
    assert state.consumed == 60


def test_an_older_batch_does_not_cover_what_a_newer_one_holds() -> None:
    state = started()
    state.took(5, 10)
    state.took(15, 30)  # a second batch before the first was consumed
    state.ack(5)
    assert state.consumed == 5  # not 30: the message at 14 is not consumed
    state.ack(15)
    assert state.consumed == 30


def test_a_held_message_stops_it() -> None:
    state = started()
    state.took(8, 50)
    state.hold = 7  # its nack failed
    state.ack(8)
    assert state.consumed == 7
    state.passed(90)
    assert state.consumed == 7


def test_a_rewind_forgets_the_batches_pulled() -> None:
    state = started()
    state.took(8, 50)
    state.start_at(3)  # pulled again from 3 (a FIFO retry)
    assert (state.next_offset, state.pulled, state.last_end) == (3, 3, None)
    state.ack(8)
    assert state.consumed == 8
