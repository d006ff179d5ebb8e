"""The promises a leader lease rests on (``leader_lease``; controller/raft/config.py): a follower
that acknowledged its leader votes for nobody else for ``election_ticks_min`` ticks, and a leader
that sent TimeoutNow holds no lease while the transfer's votes can be in flight. Two ways each
was broken, found by the seeded simulation (``make soak``, seeds 5860 and 4692; both are regular
tests in tests/raft/test_raft_simulation.py): a late answer of a higher term made a follower in
lease take that term, without a leader or a vote, and grant its candidate; and a TimeoutNow made
just before the leader stood still left only after the stall, its window without a lease
counted from before it."""

from __future__ import annotations

import pytest

from controller.raft import (
    AppendResponse,
    Message,
    Role,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from tests.raft.harness import Cluster
from tests.raft.test_raft_stall import LEASE, leading


@pytest.mark.parametrize(
    "late",
    [
        # n2's own pre-campaign, given up when n1's heartbeat came: n3 (a candidate of the
        # next term by now) refuses it with that term
        lambda term: VoteResponse(src="n3", dst="n2", term=term + 1, granted=False, pre_vote=True),
        # an append n2 sent while it led an earlier term, refused with a newer term
        lambda term: AppendResponse(src="n3", dst="n2", term=term + 1, index=0, reject=True),
    ],
    ids=["rejected pre-vote", "rejected append"],
)
def test_a_follower_in_lease_does_not_take_a_new_term_from_a_late_answer(late: object) -> None:
    c = Cluster(**LEASE)
    leading(c)
    leader, follower = c.nodes["n1"], c.nodes["n2"]
    term = leader.term
    assert leader.lease_remaining() > 0 and follower.lead == "n1"
    follower.step(late(term))  # type: ignore[operator]
    assert (follower.term, follower.lead, follower.role) == (term, "n1", Role.FOLLOWER)
    # ... so the next term's candidate does not get its vote within the lease
    last = follower.log.last_index()
    follower.step(
        VoteRequest(
            src="n3",
            dst="n2",
            term=term + 1,
            last_log_index=last,
            last_log_term=follower.log.term(last),
            pre_vote=False,
            transfer=False,
        )
    )
    sent: list[Message] = c.process("n2")
    assert not [m for m in sent if isinstance(m, VoteResponse) and m.granted], sent
    assert leader.lease_remaining() > 0


def test_a_timeout_now_made_before_a_stall_opens_its_window_when_it_leaves() -> None:
    c = Cluster(**LEASE)
    leading(c)
    leader = c.nodes["n1"]
    term = leader.term
    leader.transfer_leadership("n2")  # n2 is caught up: the TimeoutNow is made now
    window = leader.config.transfer_timeout + leader.config.election_ticks_max
    leader.tick_after_stall(window + 5)  # and the leader stands still before it is sent
    out = c.process("n1")
    timeout_now = [m for m in out if isinstance(m, TimeoutNow)]
    assert timeout_now
    # The followers answer the leader's heartbeats of after the stall, and of the next tick;
    # the TimeoutNow is slower.
    c.deliver(m for m in out if not isinstance(m, TimeoutNow))
    c.stabilize()
    c.tick("n1")
    # n2 obeys it and wins the next term (a transfer's votes ignore the followers' leases);
    # n1 hears nothing of it yet, and gives the transfer up at its next tick.
    c.blocked |= {("n2", "n1"), ("n3", "n1")}
    c.deliver(timeout_now)
    c.stabilize()
    assert c.nodes["n2"].role is Role.LEADER and c.nodes["n2"].term == term + 1
    c.tick("n1")
    assert leader.transferee is None
    assert leader.role is Role.LEADER and leader.term == term
    assert leader.lease_remaining() == 0
