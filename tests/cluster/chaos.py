"""The chaos test's pure parts: a seeded fault schedule and the checkers of what was acknowledged
against what was consumed. Nothing here touches a process, a socket or a clock, so a schedule is
replayed exactly from its seed and every checker can be tried on hand-made histories.

A schedule is a list of :class:`Fault`. Each fault hits one or two roles, resolved when it is
applied: the group's master, one of its slaves, or the controllers' Raft leader. Each target is
killed (SIGKILL, restarted at heal) or frozen (SIGSTOP, SIGCONT at heal), in a window of its own.
A fault heals before the next one starts, so at most two processes are down at a time, never two
controllers and never all three brokers: a majority of controllers stays up and, as kill -9 keeps
the page cache, every replica comes back with what it had.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

MASTER = "master"
SLAVE = "slave"
LEADER = "leader"  # the controllers' Raft leader
KILL = "kill"
FREEZE = "freeze"

Key = tuple[str, int, int]
"""(broker name, queue id, queue offset): where a message was stored."""


@dataclass(frozen=True)
class Hit:
    """One process of a fault: which role, how, when (seconds after the fault starts) and for how
    long; a killed broker may come back on another port (``moved``)."""

    role: str
    action: str
    start: float
    hold: float
    moved: bool = False

    @property
    def end(self) -> float:
        return self.start + self.hold

    def __str__(self) -> str:
        moved = " (moves)" if self.moved else ""
        return f"{self.action} {self.role}{moved} {self.start:.1f}-{self.end:.1f}s"


@dataclass(frozen=True)
class Fault:
    """Hits, each in its own window; the next fault comes ``pause`` seconds after the last heal.
    ``settle`` is what the cluster must reach before the fault starts: ``"master"`` (the group has
    a master) or ``"full"`` (all three replicas in sync)."""

    hits: tuple[Hit, ...]
    pause: float
    settle: str
    slave_pick: int  # which slave when a hit names one (index among the slaves, modulo)

    @property
    def length(self) -> float:
        return max(h.end for h in self.hits)

    def single_fault(self) -> bool:
        """A lone kill or freeze (of the master, a slave or the controller leader) in a healthy
        group: the producer's retry deadline must cover what follows (a failover, a shrink of
        the SyncStateSet, a controller election), so no send may fail during it."""
        return len(self.hits) == 1 and self.settle == "full"

    def __str__(self) -> str:
        hits = " + ".join(str(h) for h in self.hits)
        return f"{hits}, pause {self.pause:.1f}s, settle {self.settle}, slave #{self.slave_pick}"


# Pairs of roles hit in one fault; two controllers never (the majority must stay), all three
# brokers never. Master + slave leaves one slave, which may be out of the SyncStateSet: the group
# may have no master until the heal, which is what the design promises.
_COMPOUND = ((MASTER, LEADER), (SLAVE, LEADER), (MASTER, SLAVE), (SLAVE, SLAVE), (SLAVE, MASTER))


def _hold(rng: random.Random) -> float:
    # Either side of the 3 s broker heartbeat timeout: short freezes that the group rides out,
    # long ones that fence the master and elect another.
    return round(rng.choice((rng.uniform(0.3, 2.0), rng.uniform(3.5, 6.0))), 1)


def schedule(seed: int, faults: int) -> list[Fault]:
    """``faults`` faults, every choice drawn from ``seed``.

    The second hit of a pair starts anywhere from with the first to half a second after the first
    heals: the two overlap, or the second lands while the group recovers from the first (a
    controller leader dying while a thawed slave is expanded back into the SyncStateSet)."""
    rng = random.Random(seed)
    out: list[Fault] = []
    for _ in range(faults):
        roles: tuple[str, ...]
        if rng.random() < 0.35:
            roles = rng.choice(_COMPOUND)
        else:
            roles = (rng.choice((MASTER, MASTER, SLAVE, LEADER)),)
        hits: list[Hit] = []
        for role in roles:
            action = rng.choice((KILL, FREEZE))
            start = round(rng.uniform(0, hits[0].end + 0.5), 1) if hits else 0.0
            moved = action == KILL and role != LEADER and rng.random() < 0.15
            hits.append(Hit(role, action, start, _hold(rng), moved))
        single_master = len(hits) == 1 and hits[0].role == MASTER
        settle = "full" if single_master or rng.random() < 0.5 else "master"
        out.append(Fault(tuple(hits), round(rng.uniform(0.5, 3.0), 1), settle, rng.randrange(2)))
    return out


def describe(seed: int, faults: list[Fault]) -> str:
    lines = [f"chaos seed {seed}, {len(faults)} faults:"]
    lines += [f"  {i:2d}. {f}" for i, f in enumerate(faults)]
    return "\n".join(lines)


# --- checkers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ack:
    """An acknowledged send: its body, when it was issued and when its answer came, as positions
    in one sequence shared by every sender (so "acknowledged before sent" is well defined)."""

    body: bytes
    issued: int
    answered: int


def lost_or_changed(acked: Mapping[Key, Ack], consumed: Mapping[Key, bytes]) -> list[str]:
    """(a) Every acknowledged (queue, offset) is consumed, with the body that was sent."""
    problems = []
    for key, ack in sorted(acked.items()):
        got = consumed.get(key)
        if got is None:
            problems.append(f"acknowledged {key} {ack.body!r} never consumed")
        elif got != ack.body:
            problems.append(f"acknowledged {key} {ack.body!r} consumed as {got!r}")
    return problems


def gaps(consumed: Iterable[Key]) -> list[str]:
    """(b) Per queue, the consumed offsets are contiguous from 0 (a fresh topic): no hole where a
    stored message became unreadable."""
    per_queue: dict[tuple[str, int], list[int]] = {}
    for broker, queue_id, offset in consumed:
        per_queue.setdefault((broker, queue_id), []).append(offset)
    problems = []
    for queue, offsets in sorted(per_queue.items()):
        offsets.sort()
        if offsets != list(range(len(offsets))):
            missing = sorted(set(range(offsets[-1] + 1)) - set(offsets))
            problems.append(f"queue {queue} has holes at offsets {missing[:10]}")
    return problems


def out_of_order(acked: Mapping[Key, Ack]) -> list[str]:
    """(b) Per queue, a message acknowledged before another was sent sits at a lower offset."""
    per_queue: dict[tuple[str, int], list[tuple[int, Ack]]] = {}
    for (broker, queue_id, offset), ack in acked.items():
        per_queue.setdefault((broker, queue_id), []).append((offset, ack))
    problems = []
    for queue, entries in sorted(per_queue.items()):
        entries.sort(key=lambda e: e[0], reverse=True)
        # Walking down the offsets: the earliest answer among the higher offsets seen so far.
        first_answer_above: tuple[int, Ack] | None = None
        for offset, ack in entries:
            if first_answer_above is not None and first_answer_above[1].answered < ack.issued:
                above_offset, above = first_answer_above
                problems.append(
                    f"queue {queue}: {above.body!r} at offset {above_offset} was acknowledged "
                    f"before {ack.body!r} was sent, which got the lower offset {offset}"
                )
            if first_answer_above is None or ack.answered < first_answer_above[1].answered:
                first_answer_above = (offset, ack)
    return problems


def slot_conflicts(*histories: Mapping[Key, bytes]) -> list[str]:
    """(b) No two messages in one slot: every history (acknowledged sends, what live consumers
    saw, what the final consumer read) agrees on the body of each (queue, offset) it names."""
    seen: dict[Key, bytes] = {}
    problems = []
    for history in histories:
        for key, body in history.items():
            if seen.setdefault(key, body) != body:
                problems.append(f"{key} holds both {seen[key]!r} and {body!r}")
    return problems
