"""How a member consumes (broker/consumer_groups.py): POP members are live members of their
group (consumerConnection lists them, with their consume type) but not in the member list the
rebalancing members share the queues among (GET_CONSUMER_LIST_BY_GROUP); a member that says
nothing counts as holding queues, as before consume types were sent."""

from __future__ import annotations

from broker.consumer_groups import ConsumerGroups


def test_pop_members_are_live_but_share_no_queue() -> None:
    groups = ConsumerGroups(expiry_ms=10_000)
    groups.heartbeat("G", "p", "T", 0, 1, consume_type="pop")
    groups.heartbeat("G", "q", "T", 0, 2, consume_type="push")
    groups.heartbeat("G", "r", "T", 0, 3)  # an older client: says nothing
    assert groups.members("G", 1) == ["q", "r"]
    assert [(m.client_id, m.consume_type) for m in groups.live("G", 1)] == [
        ("p", "pop"), ("q", "push"), ("r", "")
    ]  # fmt: skip
    assert groups.is_member("G", "p", 1) and not groups.is_member("G", "x", 1)
    assert not groups.is_member("G", "p", 10_001)  # silent too long

    before = groups.member_ids("G", 1)
    groups.heartbeat("G", "q", "T", 2, 2, consume_type="pop")  # now it POPs: out of the list
    assert groups.member_ids("G", 3) == ("r",) != before
    groups.heartbeat("G", "p", "T", 4, 1, consume_type="pull")
    assert groups.members("G", 5) == ["p", "r"]
