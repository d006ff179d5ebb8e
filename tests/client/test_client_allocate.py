"""Queue allocation: RocketMQ's AllocateMessageQueueAveragely."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from client.allocate import allocate_averagely
from client.routes import MessageQueue


def test_eight_queues_over_three_members_are_contiguous_slices_of_three_three_two() -> None:
    queues = list(range(8))
    members = ["a", "b", "c"]
    assert allocate_averagely(queues, members, "a") == [0, 1, 2]
    assert allocate_averagely(queues, members, "b") == [3, 4, 5]
    assert allocate_averagely(queues, members, "c") == [6, 7]


def test_more_members_than_queues_leaves_the_last_members_idle() -> None:
    members = ["a", "b", "c", "d"]
    assert [allocate_averagely([0, 1], members, m) for m in members] == [[0], [1], [], []]


def test_a_consumer_missing_from_the_member_list_gets_nothing() -> None:
    assert allocate_averagely([0, 1, 2], ["a", "b"], "zz") == []


def test_no_queues_means_nothing_to_own() -> None:
    assert allocate_averagely([], ["a"], "a") == []


def test_broker_queue_pairs_are_split_in_sorted_order() -> None:
    queues = sorted(MessageQueue(b, q) for b in ("broker-b", "broker-a") for q in range(2))
    got = allocate_averagely(queues, ["c1", "c2"], "c1")
    assert got == [MessageQueue("broker-a", 0), MessageQueue("broker-a", 1)]


@given(st.integers(0, 64), st.integers(1, 20))
def test_every_queue_has_exactly_one_owner_and_shares_differ_by_at_most_one(
    n_queues: int, n_members: int
) -> None:
    queues = list(range(n_queues))
    members = [f"m{i:02d}" for i in range(n_members)]
    shares = [allocate_averagely(queues, members, m) for m in members]
    owned = sorted(q for share in shares for q in share)
    assert owned == queues
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1
