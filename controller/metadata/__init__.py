"""The controller's decision cores: metadata state machine, election policy, broker liveness.

Plain Python: no asyncio, no clock (time is an int of milliseconds passed in), no sockets, no
files. The asyncio driver feeds requests, committed events and heartbeats in, and carries the
decisions out.

- events.py: the Raft log's events and their byte codec;
- state.py: ReplicasInfoManager, request validation (decisions) and apply, snapshot/restore;
- rules.py: the hard-state rules and per-event mutations shared by validation and apply;
- election.py: the ElectMaster policy;
- heartbeat.py: BrokerLiveTable, liveness as soft state with the new-leader grace period, and
  BrokerBindings, which connection registered which broker;
- scheduler.py: which groups need an election now;
- static_topic.py: static topics' logical queues as mapping items, offset translation and
  re-map checks; static_topics.py: StaticTopicTable, their decisions and apply;
- traffic.py: TrafficTable, the brokers' traffic reports (soft state, like liveness);
  rebalance.py: the static topics' queues with their rates for the planner
  (protocol/rebalance.py) and the automatic re-balance's timing;
- auth.py: AuthTable, the users and their access rules (the model and the decision function
  live in protocol/acl.py, shared with the brokers);
- results.py: decisions, apply outcomes and response shapes; group.py and snapshot.py: the
  per-group record and its snapshot encoding.

The driver's contract, on the active controller::

    decision = manager.<request>(...)          # validated against applied state
    outcomes = []
    for event in decision.events:               # one Raft entry each, in order
        raft.propose(encode_event(event))
        outcome = <the Applied returned by manager.apply() when that entry is applied>
        outcomes.append(outcome)
        if not outcome.ok:                      # the events after a rejected one were
            break                               # decided as following it: not proposed
    answer(decision.settle(outcomes))           # code, remark, response

and on every controller, for every committed entry: ``manager.apply(decode_event(data))``.
Liveness lives in a BrokerLiveTable on the active controller (``became_active`` on winning
leadership, ``became_standby`` on losing it); ``elections_needed`` says which groups to run a
controller-triggered ``elect_master`` for.
"""

from controller.metadata.election import (
    ElectionInfo,
    ElectionResult,
    Verdict,
    candidate_pools,
    choose_master,
    every_candidate_alive,
    rank_candidates,
)
from controller.metadata.events import (
    AddQueueItem,
    AlterSyncStateSet,
    ApplyBrokerId,
    CleanBrokerData,
    CreateStaticTopic,
    DeleteTopic,
    DeleteUser,
    DropQueueItem,
    ElectMaster,
    Event,
    EventDecodeError,
    PutAcl,
    PutUser,
    RemapQueueItem,
    SealQueueItem,
    UpdateBrokerAddress,
    UpdateTopic,
    decode_event,
    encode_event,
)
from controller.metadata.heartbeat import BrokerBindings, BrokerLiveInfo, BrokerLiveTable
from controller.metadata.results import (
    AlterSyncStateSetResponse,
    Applied,
    ApplyBrokerIdResponse,
    CleanBrokerDataResponse,
    Decision,
    NextBrokerIdResponse,
    RegisterBrokerResponse,
    Replica,
    ReplicaInfo,
    UpdateTopicResponse,
)
from controller.metadata.rules import AlivePredicate
from controller.metadata.scheduler import ElectRequest, elections_needed, held_by_grace
from controller.metadata.snapshot import SnapshotError
from controller.metadata.state import ReplicasInfoManager
from controller.metadata.static_topic import LogicalQueue, MappingError, MappingItem
from controller.metadata.static_topics import RemapPlan, StaticTopicMapping

__all__ = [
    "AddQueueItem",
    "AlivePredicate",
    "AlterSyncStateSet",
    "AlterSyncStateSetResponse",
    "Applied",
    "ApplyBrokerId",
    "ApplyBrokerIdResponse",
    "BrokerBindings",
    "BrokerLiveInfo",
    "BrokerLiveTable",
    "CleanBrokerData",
    "CleanBrokerDataResponse",
    "CreateStaticTopic",
    "Decision",
    "DeleteTopic",
    "DeleteUser",
    "DropQueueItem",
    "ElectMaster",
    "ElectRequest",
    "ElectionInfo",
    "ElectionResult",
    "Event",
    "EventDecodeError",
    "LogicalQueue",
    "MappingError",
    "MappingItem",
    "NextBrokerIdResponse",
    "PutAcl",
    "PutUser",
    "RegisterBrokerResponse",
    "RemapPlan",
    "RemapQueueItem",
    "Replica",
    "ReplicaInfo",
    "ReplicasInfoManager",
    "SealQueueItem",
    "SnapshotError",
    "StaticTopicMapping",
    "UpdateBrokerAddress",
    "UpdateTopic",
    "UpdateTopicResponse",
    "Verdict",
    "candidate_pools",
    "choose_master",
    "decode_event",
    "elections_needed",
    "encode_event",
    "every_candidate_alive",
    "held_by_grace",
    "rank_candidates",
]
