"""The Raft driver's state machine on a controller: committed entries are metadata events.

Wraps :class:`~controller.metadata.ReplicasInfoManager`: decodes each committed entry, applies
it, and tells listeners what changed, so the active controller can push
NOTIFY_BROKER_ROLE_CHANGED after a master change, forget the liveness of cleaned brokers and
hand a new topic to the group's brokers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import structlog

from controller.metadata import (
    Applied,
    CleanBrokerData,
    DeleteTopic,
    EventDecodeError,
    ReplicasInfoManager,
    UpdateTopic,
    decode_event,
)
from controller.metadata.events import AuthEvent, IssueProducerId, StaticTopicEvent
from protocol.codes import ResponseCode

log = structlog.get_logger(__name__)

MasterChanged = Callable[[str], None]
"""``(broker_name)``: the group's master or master epoch changed."""
Cleaned = Callable[[str, frozenset[int] | None], None]
"""``(broker_name, broker_ids or None for the whole group)``: CleanBrokerData applied."""
TopicChanged = Callable[[str, str], None]
"""``(broker_name, topic)``: UpdateTopic applied (the topic is new or grew on the group)."""


class MetadataStateMachine:
    def __init__(self, manager: ReplicasInfoManager | None = None) -> None:
        self.manager = manager or ReplicasInfoManager()
        self.on_master_changed: list[MasterChanged] = []
        self.on_cleaned: list[Cleaned] = []
        self.on_topic_changed: list[TopicChanged] = []
        self.applied_index = 0
        self.replayed_through = 0
        """Entries up to this index were committed before this controller started (its Raft
        commit index at start): applying them again rebuilds its state from its own log, so
        the listeners log what they changed at debug (:attr:`replaying`), not as news."""

    @property
    def replaying(self) -> bool:
        """The entry being applied is one this controller had committed before it started."""
        return 0 < self.applied_index <= self.replayed_through

    def apply(self, index: int, data: bytes) -> Applied:
        self.applied_index = index
        try:
            event = decode_event(data)
        except EventDecodeError as exc:
            # Never proposed by a correct controller; skipped identically everywhere.
            log.error("undecodable metadata event skipped", index=index, error=str(exc))
            return Applied(code=ResponseCode.CONTROLLER_INVALID_REQUEST, remark=str(exc))
        if isinstance(event, AuthEvent | StaticTopicEvent | DeleteTopic | IssueProducerId):
            return self.manager.apply(event)
        name = event.broker_name
        was = self.manager.master_of(name)
        outcome = self.manager.apply(event)
        if not outcome.ok:
            return outcome
        now = self.manager.master_of(name)
        if was != now and now is not None:
            for cb in self.on_master_changed:
                cb(name)
        if isinstance(event, CleanBrokerData):
            for cleaned in self.on_cleaned:
                cleaned(name, event.broker_ids)
        if isinstance(event, UpdateTopic):
            for changed in self.on_topic_changed:
                changed(name, event.topic)
        return outcome

    def snapshot(self) -> bytes:
        return self.manager.snapshot()

    def restore(self, data: bytes) -> None:
        self.manager.restore(data)

    def snapshot_parts(self) -> Iterator[bytes]:
        return self.manager.snapshot_parts()

    def prepare_restore(
        self, data: bytes, between: Callable[[], None] | None = None
    ) -> Callable[[], None]:
        return self.manager.prepare_restore(data, between)
