"""The ElectMaster policy (docs/controller.md) as a pure function.

Candidates are the alive members of the SyncStateSet. Only when none is alive, and only with
``enable_elect_unclean_master``, are all alive registered replicas candidates (RocketMQ tries the
SyncStateSet first, then all replicas). Before a group's first election its SyncStateSet is empty
and nothing was ever replicated under a master, so every alive replica is a clean candidate.

Among candidates the best is one without unrepaired damage (a replica reports with its
heartbeats the damaged CommitLog records it holds that no other replica could repair, issue 31:
every SyncStateSet member holds every acknowledged message, so an intact one loses nothing), then
the highest epoch, then the highest max offset, then the LOWEST election priority, then the
lowest broker id. An alive old master among the candidates stays
master (a request with no designated broker, or designating the old master, gets
MASTER_STILL_ALIVE). A designated broker must be a candidate: alive, registered, and in the
SyncStateSet unless unclean election is enabled; and one that reports damage is not a
candidate (DESIGNATED_INVALID, saying so): an operator who forces it (``rmqctl electMaster
--force``) has the controller leave its damage out of the view it elects from.

A planned switch (an operator's election naming no broker: ``rmqctl electMaster`` without
``-i``) moves an alive master's role to the best alive SyncStateSet member other than it, by
the same ordering; never to a replica outside the SyncStateSet, whatever
``enable_elect_unclean_master`` says (a planned switch loses nothing). With no such member it
fails (NO_SWITCH_CANDIDATE) and the master stays. A group whose master is not alive, or has
none, is elected as by any other request.

``every_candidate_alive`` says when such a choice is final: every registered broker of the pool
it is made from is alive, so no broker turning alive later could change it (the scheduler's
test for electing during a newly active controller's grace period).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectionInfo:
    """What an alive broker last said about itself in a heartbeat."""

    epoch: int
    max_offset: int
    election_priority: int
    damaged: int = 0
    """Damaged CommitLog records it holds that no replica could repair (0: none known)."""


class Verdict(Enum):
    ELECTED = "elected"
    MASTER_STILL_ALIVE = "master still alive"
    NO_CANDIDATE = "no candidate"
    DESIGNATED_INVALID = "designated broker is not a candidate"
    NO_SWITCH_CANDIDATE = "no other in-sync replica to switch to"


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectionResult:
    verdict: Verdict
    broker_id: int | None = None
    reason: str = ""


def rank_key(broker_id: int, info: ElectionInfo) -> tuple[bool, int, int, int, int]:
    """Sort key: the best candidate sorts first."""
    return (info.damaged > 0, -info.epoch, -info.max_offset, info.election_priority, broker_id)


def rank_candidates(candidates: Iterable[int], alive: Mapping[int, ElectionInfo]) -> list[int]:
    """``candidates`` (all keys of ``alive``) from best to worst."""
    return sorted(candidates, key=lambda broker_id: rank_key(broker_id, alive[broker_id]))


def candidate_pools(
    *,
    sync_state_set: Set[int],
    replicas: Set[int],
    enable_elect_unclean_master: bool = False,
    first_election: bool = False,
) -> list[tuple[str, frozenset[int]]]:
    """The registered brokers ``choose_master`` draws from, alive or not, labelled, in the
    order it tries them: the first pool with an alive member is the one it picks from."""
    registered = frozenset(replicas)
    if first_election:
        return [("replicas (first election)", registered)]
    pools = [("SyncStateSet members", registered & frozenset(sync_state_set))]
    if enable_elect_unclean_master:
        pools.append(("replicas (unclean election)", registered))
    return pools


def every_candidate_alive(
    *,
    sync_state_set: Set[int],
    replicas: Set[int],
    alive: Mapping[int, ElectionInfo],
    enable_elect_unclean_master: bool = False,
    first_election: bool = False,
) -> bool:
    """Whether an election of a group without a master (no designated broker) would choose the
    same whichever other registered brokers became alive: every member of the first pool with a
    registered member is alive. Then ``choose_master`` picks from that whole pool, and a broker
    becoming alive later could neither join it nor fill an earlier pool. False when no broker
    could be chosen at all."""
    for _, pool in candidate_pools(
        sync_state_set=sync_state_set,
        replicas=replicas,
        enable_elect_unclean_master=enable_elect_unclean_master,
        first_election=first_election,
    ):
        if pool:
            return all(broker_id in alive for broker_id in pool)
    return False


def choose_master(
    *,
    sync_state_set: Set[int],
    replicas: Set[int],
    old_master: int | None,
    alive: Mapping[int, ElectionInfo],
    designated: int | None = None,
    enable_elect_unclean_master: bool = False,
    first_election: bool = False,
    planned: bool = False,
) -> ElectionResult:
    """Pick the group's master.

    ``replicas`` are the registered ids, ``alive`` the heartbeat info of alive brokers (ids not
    registered are ignored), ``old_master`` the current master or None. ``planned`` (without
    ``designated``): an alive master gives way to the best alive SyncStateSet member other
    than it (module doc).
    """
    if (
        planned
        and designated is None
        and old_master is not None
        and old_master in replicas
        and old_master in alive
    ):
        return _switch(sync_state_set, replicas, old_master, alive)
    pools = [
        (f"alive {label}", frozenset(broker_id for broker_id in pool if broker_id in alive))
        for label, pool in candidate_pools(
            sync_state_set=sync_state_set,
            replicas=replicas,
            enable_elect_unclean_master=enable_elect_unclean_master,
            first_election=first_election,
        )
    ]
    for label, pool in pools:
        if not pool:
            continue
        if old_master in pool and (designated is None or designated == old_master):
            return ElectionResult(
                verdict=Verdict.MASTER_STILL_ALIVE,
                broker_id=old_master,
                reason=f"broker {old_master} is already the master"
                if designated == old_master
                else f"master {old_master} is still alive",
            )
        if designated is not None:
            if designated in pool:
                damaged = alive[designated].damaged
                if damaged:
                    return ElectionResult(
                        verdict=Verdict.DESIGNATED_INVALID,
                        broker_id=designated,
                        reason=f"designated broker {designated} holds {damaged} damaged "
                        "CommitLog records no replica could repair (its log says which); elect "
                        "it anyway with --force",
                    )
                return ElectionResult(
                    verdict=Verdict.ELECTED,
                    broker_id=designated,
                    reason=f"designated broker {designated} is among the {label}",
                )
            continue
        best = rank_candidates(pool, alive)[0]
        return ElectionResult(
            verdict=Verdict.ELECTED, broker_id=best, reason=f"best of the {label} {sorted(pool)}"
        )
    if designated is not None:
        if designated not in replicas:
            why = "is not registered"
        elif designated not in alive:
            why = "is not alive"
        else:
            why = "is not in the SyncStateSet and unclean election is disabled"
        return ElectionResult(
            verdict=Verdict.DESIGNATED_INVALID,
            broker_id=designated,
            reason=f"designated broker {designated} {why}",
        )
    unclean = first_election or enable_elect_unclean_master
    what = "alive replica" if unclean else "alive SyncStateSet member"
    return ElectionResult(verdict=Verdict.NO_CANDIDATE, reason=f"no {what} to elect")


def _switch(
    sync_state_set: Set[int],
    replicas: Set[int],
    old_master: int,
    alive: Mapping[int, ElectionInfo],
) -> ElectionResult:
    """A planned switch away from the alive ``old_master``."""
    in_sync = sorted((frozenset(sync_state_set) & frozenset(replicas)) - {old_master})
    pool = [broker_id for broker_id in in_sync if broker_id in alive]
    if pool:
        best = rank_candidates(pool, alive)[0]
        return ElectionResult(
            verdict=Verdict.ELECTED,
            broker_id=best,
            reason=f"planned switch from master {old_master}: best of the alive SyncStateSet "
            f"members other than it {pool}",
        )
    if in_sync:
        why = f"SyncStateSet members {in_sync} are not alive"
    else:
        members = sorted(frozenset(sync_state_set) & frozenset(replicas))
        why = f"the SyncStateSet is {members}: the master alone"
    return ElectionResult(
        verdict=Verdict.NO_SWITCH_CANDIDATE,
        broker_id=old_master,
        reason=f"no in-sync replica to switch master {old_master} to: {why}; the master stays",
    )


MAX_EPOCH = 2**63 - 1


def next_master_epoch(master_epoch: int, alive: Mapping[int, ElectionInfo]) -> int:
    """The masterEpoch an election gives the group: one past both the group's epoch and every
    epoch an alive replica reports holding. A replica can hold a higher epoch than the group's
    metadata when that metadata was cleaned and registered again; a new master must never be
    named an epoch a replica already passed (it could not become master of it, and the slaves
    would not follow it). A reported epoch that cannot be incremented is ignored."""
    reported = [info.epoch for info in alive.values() if info.epoch < MAX_EPOCH]
    return max([master_epoch, *reported]) + 1
