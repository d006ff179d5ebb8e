"""What the metadata state machine hands back: decisions, apply outcomes and response shapes.

The active controller turns a request into a :class:`Decision`: either an error to answer at once
(``events`` empty, ``code`` not SUCCESS), or events to append to the Raft log plus the response to
give once they are applied. Some decisions carry both an error code and events (an election that
found no candidate still clears the dead master); the code is what the caller is told.

Applying an event returns an :class:`Applied`. An event decided against a state that changed
before it committed is rejected, identically on every controller, and changes nothing; the driver
then answers with the rejection (:meth:`Decision.settle`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from controller.metadata.events import Event
from protocol.codes import ResponseCode
from protocol.topic_attrs import DEFAULT_PERM, MessageType

R = TypeVar("R")


@dataclass(frozen=True, slots=True, kw_only=True)
class Applied:
    """The outcome of applying one event: SUCCESS, or why it changed nothing."""

    code: ResponseCode = ResponseCode.SUCCESS
    remark: str = ""

    @property
    def ok(self) -> bool:
        return self.code == ResponseCode.SUCCESS


APPLIED: Applied = Applied()


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision(Generic[R]):
    """The answer to one request, and the events that must commit before it is given."""

    code: ResponseCode = ResponseCode.SUCCESS
    remark: str = ""
    events: tuple[Event, ...] = ()
    response: R | None = None

    @property
    def ok(self) -> bool:
        return self.code == ResponseCode.SUCCESS

    def settle(self, outcomes: Sequence[Applied]) -> Decision[R]:
        """The reply to give once ``events`` were applied, in order, with ``outcomes``.

        ``outcomes`` holds one outcome per event, or stops at the first rejection (the events
        after a rejected one were decided as following it: they are not proposed). The
        decision itself (without events) when every event applied; else the first rejection,
        with no response.
        """
        if len(outcomes) > len(self.events):
            raise ValueError(f"{len(outcomes)} outcomes for {len(self.events)} events")
        for outcome in outcomes:
            if not outcome.ok:
                return Decision(code=outcome.code, remark=outcome.remark)
        if len(outcomes) < len(self.events):
            raise ValueError(f"{len(outcomes)} outcomes for {len(self.events)} events")
        # Built directly, not by dataclasses.replace (which works the fields out each call):
        # once per committed request.
        return Decision(code=self.code, remark=self.remark, response=self.response)


def rejected(code: ResponseCode, remark: str) -> Decision[R]:
    """A decision that answers ``code`` at once and appends nothing."""
    return Decision(code=code, remark=remark)


# Response shapes -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class NextBrokerIdResponse:
    cluster: str
    broker_name: str
    next_broker_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ApplyBrokerIdResponse:
    cluster: str
    broker_name: str
    broker_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Replica:
    """One registered broker of a group, as the controller records it."""

    broker_id: int
    address: str
    in_sync: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaInfo:
    """A group's metadata: GetReplicaInfo, GetSyncStateData, ElectMaster's answer.

    ``master_broker_id`` and ``master_address`` are None while the group has no master.
    ``replicas`` is ordered by broker id.
    """

    cluster: str
    broker_name: str
    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int
    replicas: tuple[Replica, ...]

    def address_of(self, broker_id: int) -> str | None:
        for replica in self.replicas:
            if replica.broker_id == broker_id:
                return replica.address
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBrokerResponse:
    """RegisterBrokerToController's answer: the broker's id and, when known, its master."""

    cluster: str
    broker_name: str
    broker_id: int
    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterSyncStateSetResponse:
    broker_name: str
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CleanBrokerDataResponse:
    broker_name: str
    broker_ids: frozenset[int] | None


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateTopicResponse:
    """UPDATE_AND_CREATE_TOPIC on the controllers: the topic as the group now has it."""

    broker_name: str
    topic: str
    queues: int
    perm: int = DEFAULT_PERM
    message_type: str = MessageType.NORMAL.value
