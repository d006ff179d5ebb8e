"""Which broker groups the active controller should run an election for, now.

Level-triggered: the answer depends only on the applied metadata and the liveness table at
``now_ms``, so the driver may call it whenever something changed (``expired()`` or
``on_connection_closed()`` returned brokers, a heartbeat revived one, an event was applied, it
became active) and on a periodic scan, and run ``ReplicasInfoManager.elect_master`` (no
designated broker) for each request, skipping groups with an election still in flight.

A group needs an election when

- its master is declared dead (BrokerLiveTable.declared_dead: never by silence during the grace
  period after becoming active, never while standby). The election elects a successor or, with
  no candidate, clears the master so brokers learn the group has none;
- it has no master and the election policy has a candidate (a SyncStateSet member came back, or
  the group was never elected and a replica is alive). During the grace period only when the
  table already knows every candidate (election.every_candidate_alive: every registered broker of
  the pool the policy would pick from is alive, e.g. every replica of a group never elected):
  then waiting could not bring a better one. Otherwise it waits for the grace period to end,
  since a candidate that has not heartbeated to this controller yet may be the best.

A broker that is not registered is no candidate, during the grace period or after it: at a
group's first start whichever replicas registered and heartbeated first are the candidates.

An election someone asks for (CONTROLLER_ELECT_MASTER from a broker or an admin, naming no
broker) is held by the same grace period (``held_by_grace``): without it a request answered
while the master had not heartbeated to a newly active controller yet elected another master
over one that may still hold its lease.

A group's first election waits ``first_election_wait_ms`` from when the first of its alive
replicas became alive, when one of them reports stored data (an epoch or a max offset above
0): the group had a history the controllers no longer hold (a whole group cleaned with
cleanBrokerMetadata, or the controllers' data lost), and electing the first replica to arrive
would make a master of one that may hold less than the others, whose acknowledged messages
consumers then would not see. The replicas heard in that time are ranked by the policy (epoch,
then max offset). A group's real first start (no replica holds anything) is not held.
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass

from controller.metadata.election import Verdict, choose_master, every_candidate_alive
from controller.metadata.heartbeat import BrokerLiveTable
from controller.metadata.results import Decision, ReplicaInfo
from protocol.codes import ResponseCode as RC


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectRequest:
    """Run a controller-triggered ElectMaster for ``broker_name``; ``reason`` is for the log."""

    broker_name: str
    reason: str


def elections_needed(
    groups: Iterable[ReplicaInfo],
    live: BrokerLiveTable,
    now_ms: int,
    *,
    enable_elect_unclean_master: bool = False,
    in_flight: Set[str] = frozenset(),
    first_election_wait_ms: int = 0,
) -> list[ElectRequest]:
    """Elections to run now, ascending by broker name (see module doc)."""
    if not live.active:
        return []
    requests: list[ElectRequest] = []
    for info in sorted(groups, key=lambda g: g.broker_name):
        name = info.broker_name
        if name in in_flight:
            continue
        master = info.master_broker_id
        if master is not None:
            if live.declared_dead(name, master, now_ms):
                requests.append(
                    ElectRequest(broker_name=name, reason=f"master {master} is inactive")
                )
            continue
        held = held_by_grace(
            info,
            live,
            now_ms,
            enable_elect_unclean_master=enable_elect_unclean_master,
            first_election_wait_ms=first_election_wait_ms,
        )
        if held is not None:
            continue
        result = choose_master(
            sync_state_set=info.sync_state_set,
            replicas=frozenset(r.broker_id for r in info.replicas),
            old_master=None,
            alive=live.election_view(name, now_ms),
            enable_elect_unclean_master=enable_elect_unclean_master,
            first_election=info.master_epoch == 0,
        )
        if result.verdict is Verdict.ELECTED:
            requests.append(ElectRequest(broker_name=name, reason=f"no master; {result.reason}"))
    return requests


def held_by_grace(
    info: ReplicaInfo,
    live: BrokerLiveTable,
    now_ms: int,
    *,
    enable_elect_unclean_master: bool = False,
    first_election_wait_ms: int = 0,
) -> Decision[ReplicaInfo] | None:
    """The answer to an election of ``info``'s group naming no broker, asked at ``now_ms``,
    while the grace period or the wait of a first election holds it (nothing appended); None
    when it may run now.

    Held while the group's master has not heartbeated to this controller and is not declared
    dead (CONTROLLER_MASTER_STILL_EXIST: it may be alive and leasing), or, for a group without
    a master, while a candidate has not (CONTROLLER_MASTER_NOT_AVAILABLE, see module doc), or
    while a first election with a history waits for the group's other replicas (the same
    code).
    """
    until = first_election_held_until(info, live, now_ms, first_election_wait_ms)
    if until is not None:
        return Decision(
            code=RC.CONTROLLER_MASTER_NOT_AVAILABLE,
            remark=f"the group's replicas hold data the controllers have no metadata for: the "
            f"first election waits {until - now_ms} ms more for its other replicas, to elect "
            "the one that holds the most",
            response=info,
        )
    if not live.in_grace(now_ms):
        return None
    name = info.broker_name
    master = info.master_broker_id
    if master is not None:
        if live.is_alive(name, master, now_ms) or live.declared_dead(name, master, now_ms):
            return None  # the policy keeps an alive master; a closed connection is dead
        return Decision(
            code=RC.CONTROLLER_MASTER_STILL_EXIST,
            remark=f"master {master} may still be alive: not heard yet in the grace period "
            "of a newly active controller",
            response=info,
        )
    if every_candidate_alive(
        sync_state_set=info.sync_state_set,
        replicas=frozenset(r.broker_id for r in info.replicas),
        alive=live.election_view(name, now_ms),
        enable_elect_unclean_master=enable_elect_unclean_master,
        first_election=info.master_epoch == 0,
    ):
        return None
    return Decision(
        code=RC.CONTROLLER_MASTER_NOT_AVAILABLE,
        remark="not every candidate heard yet in the grace period of a newly active controller",
        response=info,
    )


def first_election_held_until(
    info: ReplicaInfo, live: BrokerLiveTable, now_ms: int, wait_ms: int
) -> int | None:
    """When the first election of ``info``'s group may run, if it must wait now (see module
    doc); None when it need not."""
    if wait_ms <= 0 or info.master_epoch != 0 or info.master_broker_id is not None:
        return None
    name = info.broker_name
    alive = live.election_view(name, now_ms)
    if not any(e.epoch > 0 or e.max_offset > 0 for e in alive.values()):
        return None  # a group's first start: nothing to lose by electing now
    since = live.alive_since(name, now_ms)
    if since is None or now_ms >= since + wait_ms:
        return None
    return since + wait_ms
