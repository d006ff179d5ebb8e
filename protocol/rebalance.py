"""The re-balance planner (shared by the controllers and rmqctl): which static topic queues to move so broker groups carry similar
traffic, and where new topics go. Pure: loads and rates in, a plan out.

A group's load is its messages put per second. The plan acts only when the spread between the
busiest and the idlest group is above the threshold. Then, one move at a time, it takes the
busiest group (ties by name) and the idlest, and moves from the first to the second the logical
queue of a static topic whose rate brings the two closest together (the busiest such queue on
a tie): topics' queues by traffic descending onto groups by traffic ascending. A queue moves at
most once per plan, only when it narrows the gap (its rate below the spread), and the plan stops
once the spread is within the threshold or no queue on the busiest group can narrow it (traffic
of ordinary topics, whose queues cannot move, is listed as such).

Each move lowers the sum of the squared loads, so the plan is short and never oscillates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

UNMOVABLE_LISTED = 10
"""Ordinary topics named in a plan (the busiest, on the busiest group)."""


@dataclass(frozen=True, slots=True)
class QueueTraffic:
    """A static topic's logical queue: the group of its newest item and its rate there."""

    topic: str
    queue: int
    group: str
    msg_per_sec: float
    movable: bool = True
    """False while a move of it is in progress (its newest item sealed)."""


@dataclass(frozen=True, slots=True)
class Move:
    topic: str
    queue: int
    source: str
    target: str
    msg_per_sec: float | None
    """None when the source measures topics only (the traffic job)."""

    def doc(self) -> dict[str, Any]:
        rate = None if self.msg_per_sec is None else round(self.msg_per_sec, 3)
        return {
            "topic": self.topic,
            "queue": self.queue,
            "from": self.source,
            "to": self.target,
            "msgPerSec": rate,
        }


@dataclass(frozen=True, slots=True)
class Unmovable:
    topic: str
    group: str
    msg_per_sec: float
    reason: str

    def doc(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "brokerName": self.group,
            "msgPerSec": round(self.msg_per_sec, 3),
            "reason": self.reason,
        }


ORDINARY = "ordinary topic: its queues cannot move (create it on another group instead)"


@dataclass(frozen=True, slots=True)
class Plan:
    threshold: float
    rate: str
    """What the loads measure (live counters or the traffic job's peak hourly rate)."""
    before: Mapping[str, float]
    after: Mapping[str, float]
    moves: tuple[Move, ...] = ()
    unmovable: tuple[Unmovable, ...] = ()
    reason: str = ""
    """Why nothing (more) moves; empty when the plan brings the spread within the threshold."""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def spread_before(self) -> float:
        return spread(self.before)

    @property
    def spread_after(self) -> float:
        return spread(self.after)

    @property
    def rebalance(self) -> bool:
        """Is the spread above the threshold?"""
        return len(self.before) >= 2 and self.spread_before > self.threshold

    def doc(self) -> dict[str, Any]:
        """The JSON document ``rmqctl rebalancePlan`` prints and ``rebalanceApply`` reads."""
        return {
            "rebalance": self.rebalance,
            "reason": self.reason or None,
            "threshold": self.threshold,
            "rate": self.rate,
            "spreadBefore": round(self.spread_before, 3),
            "groupsBefore": _rounded(self.before),
            "spreadAfter": round(self.spread_after, 3),
            "groupsAfter": _rounded(self.after),
            "moves": [m.doc() for m in self.moves],
            "unmovable": [u.doc() for u in self.unmovable],
            **self.extra,
        }


def spread(loads: Mapping[str, float]) -> float:
    return max(loads.values()) - min(loads.values()) if loads else 0.0


def _rounded(loads: Mapping[str, float]) -> dict[str, float]:
    return {g: round(v, 3) for g, v in sorted(loads.items())}


def least_loaded(loads: Mapping[str, float], count: int) -> list[str]:
    """The ``count`` groups with the least traffic (ties by name), ascending by name: where a
    new topic goes."""
    return sorted(sorted(loads, key=lambda g: (loads[g], g))[:count])


def plan_moves(
    loads: Mapping[str, float],
    queues: Sequence[QueueTraffic],
    ordinary: Mapping[tuple[str, str], float],
    threshold: float,
    rate: str = "msg/s",
    max_moves: int | None = None,
) -> Plan:
    """The plan for groups with ``loads`` (every group that may take queues: those with a
    master), the static topics' ``queues`` and the ``ordinary`` topics' (topic, group) rates;
    at most ``max_moves`` moves (None: as many as it takes)."""
    after = dict(loads)
    base = Plan(threshold, rate, dict(loads), dict(loads))
    if len(loads) < 2:
        return replace(base, reason="fewer than two broker groups with a master")
    if spread(loads) <= threshold:
        return replace(
            base,
            reason=f"spread {spread(loads):.3f} msg/s is within the threshold {threshold:g}",
        )
    moves: list[Move] = []
    moved: set[tuple[str, int]] = set()
    reason = ""
    while (gap := spread(after)) > threshold:
        if max_moves is not None and len(moves) >= max_moves:
            reason = f"stopped after {max_moves} moves"
            break
        source = sorted(after, key=lambda g: (-after[g], g))[0]
        target = sorted(after, key=lambda g: (after[g], g))[0]
        candidates = [
            q
            for q in queues
            if q.group == source
            and q.movable
            and (q.topic, q.queue) not in moved
            and 0 < q.msg_per_sec < gap
        ]
        if not candidates:
            reason = f"no static topic queue on {source} can narrow the spread"
            break
        best = min(
            candidates,
            key=lambda q: (abs(gap - 2 * q.msg_per_sec), -q.msg_per_sec, q.topic, q.queue),
        )
        moved.add((best.topic, best.queue))
        moves.append(Move(best.topic, best.queue, source, target, best.msg_per_sec))
        after[source] -= best.msg_per_sec
        after[target] += best.msg_per_sec
    busiest = sorted(loads, key=lambda g: (-loads[g], g))[0]
    unmovable = sorted(
        (
            Unmovable(topic, group, r, ORDINARY)
            for (topic, group), r in ordinary.items()
            if group == busiest and r > 0
        ),
        key=lambda u: (-u.msg_per_sec, u.topic),
    )[:UNMOVABLE_LISTED]
    return Plan(threshold, rate, dict(loads), after, tuple(moves), tuple(unmovable), reason=reason)


class PlanError(ValueError):
    """A plan document (or the traffic job's) that is not one: the one line to show."""


def plan_from_job(
    doc: Any, static: Mapping[str, Sequence[str | None]], ordinary: frozenset[str]
) -> Plan:
    """The traffic job's plan (``rmq-pipeline traffic``: topics moved whole, by peak hourly
    rate) as queue moves: each of its topic moves becomes a move of every logical queue of that
    static topic not on the target group yet; a move of an ordinary topic is listed as
    unmovable. ``static``: topic -> per logical queue, the group of its newest item (None while
    a move of it is in progress); ``ordinary``: the topics that exist and are not static.

    PlanError for a malformed document or a topic that does not exist."""
    if not isinstance(doc, dict) or not isinstance(doc.get("moves"), list):
        raise PlanError('not a traffic job plan (a JSON object with "moves")')
    try:
        threshold = float(doc["threshold"])
        before = {str(g): float(v) for g, v in dict(doc["groupsBefore"]).items()}
        after = {str(g): float(v) for g, v in dict(doc.get("groupsAfter") or before).items()}
    except (KeyError, TypeError, ValueError):
        raise PlanError(
            'not a traffic job plan: "threshold" and "groupsBefore" must be numbers'
        ) from None
    rate = f"{doc.get('rate', 'peak hourly msg/s')} (traffic job)"
    moves: list[Move] = []
    unmovable: list[Unmovable] = []
    for n, entry in enumerate(doc["moves"], 1):
        ok = (
            isinstance(entry, dict)
            and isinstance(entry.get("topic"), str)
            and isinstance(entry.get("to"), str)
            and isinstance(entry.get("from"), list)
            and isinstance(entry.get("msgPerSec"), int | float)
        )
        if not ok:
            raise PlanError(
                f'traffic job move {n} must be {{"topic", "msgPerSec", "from": [...], "to"}}'
            )
        topic, target = entry["topic"], entry["to"]
        if topic in static:
            for queue, group in enumerate(static[topic]):
                if group is not None and group != target:
                    moves.append(Move(topic, queue, group, target, None))
        elif topic in ordinary:
            for group in entry["from"]:
                unmovable.append(Unmovable(topic, str(group), float(entry["msgPerSec"]), ORDINARY))
        else:
            raise PlanError(f"traffic job move {n}: topic {topic} does not exist")
    reason = "" if doc.get("rebalance") else str(doc.get("reason") or "")
    return Plan(threshold, rate, before, after, tuple(moves), tuple(unmovable), reason=reason)
