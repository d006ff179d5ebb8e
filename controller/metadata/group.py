"""One broker group's replicated metadata (docs/controller.md), a plain mutable record.

Invariants, kept by every event applied in state.py and checked on restore:

- the group has at least one registered broker (an emptied group is removed);
- every id is below ``next_assign_broker_id``;
- the SyncStateSet holds registered ids only;
- the master, when there is one, is registered and in the SyncStateSet;
- topic names and queue counts are valid (events.py's checks);
- ``master_epoch`` grows whenever the master changes, ``sync_state_set_epoch`` whenever the
  SyncStateSet changes; neither ever decreases.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.metadata.events import (
    FIRST_BROKER_ID,
    check_message_type,
    check_perm,
    check_queues,
    check_topic,
)
from controller.metadata.results import Replica, ReplicaInfo
from protocol.topic_attrs import MessageType, TopicAttrs


@dataclass(slots=True, kw_only=True)
class BrokerRecord:
    """A registered broker: where it serves and the code that owns its id."""

    address: str
    register_code: str


@dataclass(slots=True, kw_only=True)
class BrokerGroup:
    cluster: str
    broker_name: str
    next_assign_broker_id: int = FIRST_BROKER_ID
    brokers: dict[int, BrokerRecord] = field(default_factory=dict)
    master_broker_id: int | None = None
    master_epoch: int = 0
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0
    topics: dict[str, int] = field(default_factory=dict)
    """topic -> queues on this group (UpdateTopic), so routes outlive the group's brokers"""
    topic_attrs: dict[str, TopicAttrs] = field(default_factory=dict)
    """topic -> its permission and message type on this group, for topics whose are not the
    default (6, NORMAL); a topic not listed has the default"""

    def attrs_of(self, topic: str) -> TopicAttrs:
        return self.topic_attrs.get(topic, _DEFAULT_ATTRS)

    def set_attrs(self, topic: str, perm: int | None, message_type: str | None) -> None:
        """UpdateTopic's ``perm`` and ``message_type`` (None: keep the topic's)."""
        old = self.attrs_of(topic)
        new = TopicAttrs(
            old.perm if perm is None else perm,
            old.message_type if message_type is None else MessageType(message_type),
        )
        if new.default:
            self.topic_attrs.pop(topic, None)
        else:
            self.topic_attrs[topic] = new

    @property
    def first_election(self) -> bool:
        """True until the group's first master is elected (RocketMQ's isFirstTimeForElect)."""
        return self.master_epoch == 0

    def address_of(self, broker_id: int | None) -> str | None:
        if broker_id is None:
            return None
        record = self.brokers.get(broker_id)
        return None if record is None else record.address

    def copy(self) -> BrokerGroup:
        return BrokerGroup(
            cluster=self.cluster,
            broker_name=self.broker_name,
            next_assign_broker_id=self.next_assign_broker_id,
            brokers={
                broker_id: BrokerRecord(address=r.address, register_code=r.register_code)
                for broker_id, r in self.brokers.items()
            },
            master_broker_id=self.master_broker_id,
            master_epoch=self.master_epoch,
            sync_state_set=self.sync_state_set,
            sync_state_set_epoch=self.sync_state_set_epoch,
            topics=dict(self.topics),
            topic_attrs=dict(self.topic_attrs),
        )

    def info(self) -> ReplicaInfo:
        return ReplicaInfo(
            cluster=self.cluster,
            broker_name=self.broker_name,
            master_broker_id=self.master_broker_id,
            master_address=self.address_of(self.master_broker_id),
            master_epoch=self.master_epoch,
            sync_state_set=self.sync_state_set,
            sync_state_set_epoch=self.sync_state_set_epoch,
            replicas=tuple(
                Replica(
                    broker_id=broker_id,
                    address=self.brokers[broker_id].address,
                    in_sync=broker_id in self.sync_state_set,
                )
                for broker_id in sorted(self.brokers)
            ),
        )

    def invariant_violations(self) -> list[str]:
        """Every broken invariant of the module docstring (epoch monotony aside); [] if none."""
        problems: list[str] = []
        name = self.broker_name
        if not self.brokers:
            problems.append(f"{name}: group has no broker")
        if self.brokers and max(self.brokers) >= self.next_assign_broker_id:
            problems.append(f"{name}: nextAssignBrokerId {self.next_assign_broker_id} not past ids")
        if not self.sync_state_set <= self.brokers.keys():
            problems.append(f"{name}: SyncStateSet has unregistered ids")
        master = self.master_broker_id
        if master is not None and master not in self.brokers:
            problems.append(f"{name}: master {master} is not registered")
        if master is not None and master not in self.sync_state_set:
            problems.append(f"{name}: master {master} is not in the SyncStateSet")
        if self.master_epoch < 0 or self.sync_state_set_epoch < 0:
            problems.append(f"{name}: negative epoch")
        for topic, queues in self.topics.items():
            try:
                check_topic("topic", topic)
                check_queues("queues", queues)
            except (TypeError, ValueError) as exc:
                problems.append(f"{name}: topic {topic!r}: {exc}")
        for topic, attrs in self.topic_attrs.items():
            if topic not in self.topics:
                problems.append(f"{name}: attributes of topic {topic!r} it does not have")
            try:
                check_perm("perm", attrs.perm)
                check_message_type("message_type", attrs.message_type.value)
            except (TypeError, ValueError) as exc:
                problems.append(f"{name}: topic {topic!r}: {exc}")
        return problems


_DEFAULT_ATTRS = TopicAttrs()
