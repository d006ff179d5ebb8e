"""Read-index (Raft dissertation, section 6.4): linearizable reads without writing to the log.

The leader records its commit index for the read, then proves it is still the leader by a round
of heartbeats: every heartbeat carries the latest read sequence number ``read_seq`` and every
response echoes it. A read registered with sequence ``s`` is confirmed once a majority of voters
(the leader included) has echoed a sequence >= ``s`` in the leader's term. The state machine may
then serve the read as soon as it has applied the recorded index.

Reads are only registered once the leader has committed an entry of its own term, so its commit
index is at least that of any earlier leader.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from protocol.raft_types import NodeId

from .membership import quorum_index


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingRead:
    seq: int
    index: int
    ctx: bytes
    origin: NodeId
    """The node that asked (the leader itself, or a follower that forwarded the request)."""


class ReadOnly:
    __slots__ = ("_queue", "_sent_seq", "last_seq")

    def __init__(self) -> None:
        self.last_seq = 0
        self._sent_seq = 0
        self._queue: deque[PendingRead] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    def new_round(self) -> int:
        """The sequence number for a new heartbeat round: every round carries its own, so an
        echo names the round. A read registered since the last round gives its number to this
        one (it has not been sent yet)."""
        if self.last_seq == self._sent_seq:
            self.last_seq += 1
        self._sent_seq = self.last_seq
        return self.last_seq

    def add(self, origin: NodeId, ctx: bytes, index: int) -> int:
        self.last_seq += 1
        self._queue.append(PendingRead(seq=self.last_seq, index=index, ctx=ctx, origin=origin))
        return self.last_seq

    def release(self, acked: Mapping[NodeId, int], voters: tuple[NodeId, ...]) -> list[PendingRead]:
        """Pop every read a quorum of ``voters`` has confirmed; ``acked`` maps a voter to the
        highest sequence it echoed (the leader maps itself to ``last_seq``)."""
        if not self._queue:
            return []
        confirmed = quorum_index([acked.get(v, 0) for v in voters])
        released: list[PendingRead] = []
        while self._queue and self._queue[0].seq <= confirmed:
            released.append(self._queue.popleft())
        return released
