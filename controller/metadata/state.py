"""The controller's metadata state machine (docs/controller.md), RocketMQ's ReplicasInfoManager.

Two halves, as in RocketMQ:

- request methods (``get_next_broker_id`` ... ``get_sync_state_data``) run on the active
  controller against applied state and return a :class:`~controller.metadata.results.Decision`:
  an error to answer now, or events to append to the Raft log and the response to give once they
  are applied. Liveness (soft state) is an input here, never stored.
- :meth:`ReplicasInfoManager.apply` runs on every controller for every committed event. It uses
  nothing but the event and the applied state, so every controller ends in the same state. Events
  carry the epochs they were decided at, so an event whose premise changed before it committed is
  rejected (identically everywhere) and changes nothing; the driver answers that rejection
  (``Decision.settle``).

Nothing here does I/O or reads a clock. Not thread safe: one caller at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Set

from controller.metadata.auth import AuthTable
from controller.metadata.election import ElectionInfo, Verdict, choose_master, next_master_epoch
from controller.metadata.events import (
    FIRST_BROKER_ID,
    FIRST_PRODUCER_EPOCH,
    FIRST_PRODUCER_ID,
    MAX_PRODUCER_EPOCH,
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
    IssueProducerId,
    PutAcl,
    PutUser,
    RemapQueueItem,
    SealQueueItem,
    UpdateBrokerAddress,
    UpdateTopic,
    check_broker_id,
    check_epoch,
    check_id_set,
    check_message_type,
    check_name,
    check_perm,
    check_queues,
    check_text,
    check_topic,
)
from controller.metadata.group import BrokerGroup, BrokerRecord
from controller.metadata.results import (
    APPLIED,
    AlterSyncStateSetResponse,
    Applied,
    ApplyBrokerIdResponse,
    CleanBrokerDataResponse,
    Decision,
    NextBrokerIdResponse,
    RegisterBrokerResponse,
    ReplicaInfo,
    UpdateTopicResponse,
    rejected,
)
from controller.metadata.rules import (
    AlivePredicate,
    check_alter,
    check_apply_broker_id,
    check_elect,
    check_registered,
    fail,
    mutate_address,
    mutate_alter,
    mutate_elect,
)
from controller.metadata.snapshot import (
    decode_groups,
    decode_producers,
    decode_static_topics,
    decode_users,
    encode_groups,
    encode_groups_in_parts,
)
from controller.metadata.static_topic import MappingItem
from controller.metadata.static_topics import RemapPlan, StaticTopicMapping, StaticTopicTable
from protocol.codes import ResponseCode as RC
from protocol.topic_admin import topic_delete_refusal
from protocol.topic_attrs import MessageType, TopicAttrs


class _BadRequest(Exception):
    """A request argument that no state could make valid (answered INVALID_REQUEST)."""


def _field(check: Callable[[str, object], object], what: str, value: object) -> None:
    try:
        check(what, value)
    except (TypeError, ValueError) as exc:
        raise _BadRequest(str(exc)) from None


def _check_topic_update(group: BrokerGroup, topic: str, queues: int) -> Applied:
    current = group.topics.get(topic)
    if current is not None and queues < current:
        return fail(
            RC.BAD_REQUEST,
            f"topic {topic} has {current} queues on {group.broker_name}; "
            "shrinking is not supported",
        )
    return APPLIED


_GROUP_EVENTS = (
    ApplyBrokerId,
    UpdateBrokerAddress,
    ElectMaster,
    AlterSyncStateSet,
    CleanBrokerData,
)
"""The events that may change what a group's ReplicaInfo reads (``groups_version``)."""


class ReplicasInfoManager:
    """Per broker group: cluster, nextAssignBrokerId, brokerId -> (address, registerCode),
    master, masterEpoch, SyncStateSet, syncStateSetEpoch; and the users and their rules
    (``auth``, :mod:`controller.metadata.auth`)."""

    __slots__ = (
        "_groups",
        "_topic_groups",
        "auth",
        "groups_version",
        "next_producer_epoch",
        "next_producer_id",
        "static_topics",
    )

    def __init__(self) -> None:
        self._groups: dict[str, BrokerGroup] = {}
        self._topic_groups: dict[str, set[str]] = {}
        """Topic -> the groups that have it: a route lookup reads those, not every group
        (issue 34). Kept by UpdateTopic, DeleteTopic, CleanBrokerData and restore."""
        self.groups_version = 0
        """Moves whenever a group's ReplicaInfo may read differently: an event that changes
        a group's brokers, addresses, master or SyncStateSet applied (not a topic's, a user's
        or a producer id's), a snapshot installed. GroupView builds the infos again only then
        (issue 34: every applied entry, topic creations included, built every group's)."""
        self.auth = AuthTable()
        self.static_topics = StaticTopicTable()
        self.next_producer_id = FIRST_PRODUCER_ID
        """The id the next new idempotent producer gets (docs/idempotence.md)."""
        self.next_producer_epoch = FIRST_PRODUCER_EPOCH
        """The epoch the next producer that takes its id up again gets."""

    # Reads -------------------------------------------------------------------------------------

    def broker_names(self) -> list[str]:
        """Every known broker group, ascending."""
        return sorted(self._groups)

    def replica_info(self, broker_name: str) -> ReplicaInfo | None:
        group = self._groups.get(broker_name)
        return None if group is None else group.info()

    def master_of(self, broker_name: str) -> tuple[int | None, int] | None:
        """The group's master broker id (None: none) and master epoch; None for a group it
        does not know. What ``replica_info`` says of the master, without building the rest."""
        group = self._groups.get(broker_name)
        return None if group is None else (group.master_broker_id, group.master_epoch)

    def master_address_of(self, broker_name: str) -> tuple[int | None, str | None]:
        """The group's master broker id and its address ((None, None): no master, or a group
        it does not know). What ``replica_info`` says of the master, without building the rest:
        a route build asks it per group (issue 34)."""
        group = self._groups.get(broker_name)
        if group is None or group.master_broker_id is None:
            return None, None
        return group.master_broker_id, group.address_of(group.master_broker_id)

    def broker_address(self, broker_name: str, broker_id: int) -> str | None:
        """The address recorded for a broker of the group (None: no such broker); "" while its
        first CONTROLLER_REGISTER_BROKER is pending. A route build asks it per registration."""
        group = self._groups.get(broker_name)
        return None if group is None else group.address_of(broker_id)

    def replica_infos(self) -> list[ReplicaInfo]:
        """Every group's metadata, ascending by broker name."""
        return [self._groups[name].info() for name in sorted(self._groups)]

    def get_next_broker_id(self, cluster: str, broker_name: str) -> Decision[NextBrokerIdResponse]:
        """CONTROLLER_GET_NEXT_BROKER_ID: the id a new broker of the group should apply for."""
        try:
            _field(check_name, "cluster", cluster)
            _field(check_name, "broker_name", broker_name)
        except _BadRequest as exc:
            return rejected(RC.CONTROLLER_INVALID_REQUEST, str(exc))
        group = self._groups.get(broker_name)
        next_id = FIRST_BROKER_ID if group is None else group.next_assign_broker_id
        return Decision(
            response=NextBrokerIdResponse(
                cluster=cluster, broker_name=broker_name, next_broker_id=next_id
            )
        )

    def get_producer_id(self, producer_id: int | None) -> Decision[tuple[int, int]]:
        """CONTROLLER_GET_PRODUCER_ID: a new producer id at epoch 0, or ``producer_id`` (issued
        before) at the next producer epoch; the response is (id, epoch). An id never issued is
        CONTROLLER_INVALID_REQUEST."""
        if producer_id is None:
            pid, epoch = self.next_producer_id, 0
        elif not FIRST_PRODUCER_ID <= producer_id < self.next_producer_id:
            return rejected(
                RC.CONTROLLER_INVALID_REQUEST,
                f"producer id {producer_id} was never issued by the controllers",
            )
        elif self.next_producer_epoch > MAX_PRODUCER_EPOCH:
            return rejected(RC.CONTROLLER_INVALID_REQUEST, "producer epochs are used up")
        else:
            pid, epoch = producer_id, self.next_producer_epoch
        return Decision(
            events=(IssueProducerId(producer_id=pid, epoch=epoch),), response=(pid, epoch)
        )

    def get_replica_info(self, broker_name: str) -> Decision[ReplicaInfo]:
        """CONTROLLER_GET_REPLICA_INFO; CONTROLLER_BROKER_METADATA_NOT_EXIST for unknown groups."""
        group = self._groups.get(broker_name)
        if group is None:
            return rejected(
                RC.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                f"broker set {broker_name} has no metadata",
            )
        return Decision(response=group.info())

    def get_sync_state_data(self, broker_names: Iterable[str]) -> Decision[dict[str, ReplicaInfo]]:
        """CONTROLLER_GET_SYNC_STATE_DATA: metadata of the named groups; unknown names are left out."""
        found = {
            name: self._groups[name].info()
            for name in sorted(set(broker_names))
            if name in self._groups
        }
        return Decision(response=found)

    def topic_queues(self, topic: str) -> dict[str, int]:
        """The groups that have ``topic`` (UpdateTopic) and its queue count on each, by name."""
        return {
            name: self._groups[name].topics[topic]
            for name in sorted(self._topic_groups.get(topic, ()))
        }

    def group_topics(self, broker_name: str) -> dict[str, int]:
        """The group's topics and their queue counts, by topic name ({} for an unknown group)."""
        group = self._groups.get(broker_name)
        return {} if group is None else {t: group.topics[t] for t in sorted(group.topics)}

    def topic_attrs(self, broker_name: str, topic: str) -> TopicAttrs:
        """The permission and message type of ``topic`` on a group (the default for a topic
        or group it does not know)."""
        group = self._groups.get(broker_name)
        return TopicAttrs() if group is None else group.attrs_of(topic)

    def static_topic(self, topic: str) -> StaticTopicMapping | None:
        """A static topic's logical queues and their mapping items (None: not static)."""
        return self.static_topics.get(topic)

    # Writes ------------------------------------------------------------------------------------

    def apply_broker_id(
        self,
        cluster: str,
        broker_name: str,
        broker_id: int,
        register_code: str,
        address: str = "",
    ) -> Decision[ApplyBrokerIdResponse]:
        """CONTROLLER_APPLY_BROKER_ID: the compare-and-set of persistent BrokerId.

        Succeeds when ``broker_id`` is the group's nextAssignBrokerId (1 for a new group) or
        already belongs to ``register_code`` (a retry, or a restart after a crash); fails with
        CONTROLLER_BROKER_ID_INVALID when it belongs to another register code or is any other id.
        """
        try:
            _field(check_name, "cluster", cluster)
            _field(check_name, "broker_name", broker_name)
            _field(check_text, "register_code", register_code)
            _field(check_text, "address", address)
            _field(check_broker_id, "broker_id", broker_id)
        except _BadRequest as exc:
            if type(broker_id) is int and broker_id < FIRST_BROKER_ID:
                return rejected(RC.CONTROLLER_BROKER_ID_INVALID, str(exc))
            return rejected(RC.CONTROLLER_INVALID_REQUEST, str(exc))
        event = ApplyBrokerId(
            cluster=cluster,
            broker_name=broker_name,
            broker_id=broker_id,
            register_code=register_code,
            address=address,
        )
        check = check_apply_broker_id(self._groups.get(broker_name), event)
        if not check.ok:
            return rejected(check.code, check.remark)
        return Decision(
            events=(event,),
            response=ApplyBrokerIdResponse(
                cluster=cluster, broker_name=broker_name, broker_id=broker_id
            ),
        )

    def register_broker(
        self,
        cluster: str,
        broker_name: str,
        broker_id: int,
        address: str,
        *,
        alive: AlivePredicate | None = None,
        register_code: str | None = None,
    ) -> Decision[RegisterBrokerResponse]:
        """CONTROLLER_REGISTER_BROKER: a broker with an applied id says where it serves.

        CONTROLLER_BROKER_NEED_TO_BE_REGISTERED when the group or the id is unknown;
        CONTROLLER_BROKER_ID_INVALID when ``register_code`` is given and is not the one the id
        was applied with (the id belongs to another broker). Appends an
        UpdateBrokerAddress only when the address changed. The response names the master when
        there is one and, if ``alive`` is given, it is alive.
        """
        try:
            _field(check_name, "cluster", cluster)
            _field(check_name, "broker_name", broker_name)
            _field(check_text, "address", address)
        except _BadRequest as exc:
            return rejected(RC.CONTROLLER_INVALID_REQUEST, str(exc))
        group = self._groups.get(broker_name)
        if type(broker_id) is not int:
            return rejected(RC.CONTROLLER_INVALID_REQUEST, "broker_id must be an integer")
        check = check_registered(group, broker_name, broker_id)
        if not check.ok or group is None:
            return rejected(check.code, check.remark)
        if group.cluster != cluster:
            return rejected(
                RC.CONTROLLER_INVALID_REQUEST,
                f"broker set {broker_name} belongs to cluster {group.cluster}, not {cluster}",
            )
        if register_code is not None and group.brokers[broker_id].register_code != register_code:
            return rejected(
                RC.CONTROLLER_BROKER_ID_INVALID,
                f"broker id {broker_id} of {broker_name} belongs to another broker "
                "(registerCheckCode does not match)",
            )
        events: tuple[Event, ...] = ()
        after = group
        if group.brokers[broker_id].address != address:
            events = (
                UpdateBrokerAddress(
                    cluster=cluster, broker_name=broker_name, broker_id=broker_id, address=address
                ),
            )
            after = group.copy()
            mutate_address(after, broker_id, address)
        master = after.master_broker_id
        if master is not None and alive is not None and not alive(broker_name, master):
            master = None
        return Decision(
            events=events,
            response=RegisterBrokerResponse(
                cluster=cluster,
                broker_name=broker_name,
                broker_id=broker_id,
                master_broker_id=master,
                master_address=after.address_of(master),
                master_epoch=after.master_epoch,
                sync_state_set=after.sync_state_set,
                sync_state_set_epoch=after.sync_state_set_epoch,
            ),
        )

    def alter_sync_state_set(
        self,
        broker_name: str,
        master_broker_id: int,
        master_epoch: int,
        new_sync_state_set: Set[int],
        sync_state_set_epoch: int,
        alive: AlivePredicate,
    ) -> Decision[AlterSyncStateSetResponse]:
        """CONTROLLER_ALTER_SYNC_STATE_SET from a group's master, with RocketMQ's checks in order:

        group unknown 2013; not the master 2002; stale master epoch 2000; stale SyncStateSet
        epoch 2001; a member not registered 2003 or not alive 2006; the set without the master
        2013. A set equal to the current one (from the master of the current master epoch, based
        on an epoch not past the current one) is accepted with no event and the current
        syncStateSetEpoch: it means an earlier attempt committed, not a failure.
        """
        try:
            _field(check_name, "broker_name", broker_name)
            _field(check_broker_id, "master_broker_id", master_broker_id)
            _field(check_epoch, "master_epoch", master_epoch)
            _field(check_epoch, "sync_state_set_epoch", sync_state_set_epoch)
            new_set = frozenset(new_sync_state_set)
            if new_set:
                _field(check_id_set, "new_sync_state_set", new_set)
        except _BadRequest as exc:
            return rejected(RC.CONTROLLER_INVALID_REQUEST, str(exc))
        group = self._groups.get(broker_name)
        if group is None:
            return rejected(
                RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                f"broker set {broker_name} has no metadata",
            )
        if new_set == group.sync_state_set and sync_state_set_epoch <= group.sync_state_set_epoch:
            # The set already is this one (e.g. the master's earlier attempt committed and its
            # answer was lost): accepted, at the current epoch, if the master is still the master.
            check = check_alter(
                group, master_broker_id, master_epoch, group.sync_state_set_epoch, new_set, None
            )
            if not check.ok:
                return rejected(check.code, check.remark)
            return Decision(
                response=AlterSyncStateSetResponse(
                    broker_name=broker_name,
                    sync_state_set=new_set,
                    sync_state_set_epoch=group.sync_state_set_epoch,
                )
            )
        check = check_alter(
            group, master_broker_id, master_epoch, sync_state_set_epoch, new_set, alive
        )
        if not check.ok:
            return rejected(check.code, check.remark)
        event = AlterSyncStateSet(
            broker_name=broker_name,
            master_broker_id=master_broker_id,
            master_epoch=master_epoch,
            sync_state_set_epoch=sync_state_set_epoch,
            new_sync_state_set=new_set,
        )
        return Decision(
            events=(event,),
            response=AlterSyncStateSetResponse(
                broker_name=broker_name,
                sync_state_set=new_set,
                sync_state_set_epoch=group.sync_state_set_epoch + 1,
            ),
        )

    def elect_master(
        self,
        broker_name: str,
        *,
        alive_replicas: Mapping[int, ElectionInfo],
        designated_broker_id: int | None = None,
        enable_elect_unclean_master: bool = False,
        planned: bool = False,
    ) -> Decision[ReplicaInfo]:
        """CONTROLLER_ELECT_MASTER, from a broker, the controller itself, or an admin.

        ``alive_replicas`` maps the group's alive broker ids to their last heartbeat
        (BrokerLiveTable.election_view); ``designated_broker_id`` is the admin's choice;
        ``planned`` an admin's election naming no broker (a planned switch, election.py).

        - unknown group: 2010, nothing appended;
        - a new master (policy of election.py): SUCCESS, ElectMaster appended, the response is
          the group after it (masterEpoch + 1, SyncStateSet = {new master});
        - the current master is alive and not displaced by a designation or a planned switch:
          2011 with the current metadata, nothing appended;
        - the designated broker is not a candidate, or a planned switch has no alive
          SyncStateSet member other than the master: 2012 naming why, nothing appended;
        - no candidate: 2004 (CONTROLLER_MASTER_NOT_AVAILABLE). If the group still names a
          master, an ElectMaster that clears it is appended (masterEpoch + 1, SyncStateSet
          kept, as RocketMQ does) so brokers learn the group has no master; the response is the
          group after it.
        """
        group = self._groups.get(broker_name)
        if group is None:
            return rejected(
                RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"broker set {broker_name} has not been registered",
            )
        if designated_broker_id is not None and type(designated_broker_id) is not int:
            return rejected(RC.CONTROLLER_INVALID_REQUEST, "designated broker id must be an int")
        result = choose_master(
            sync_state_set=group.sync_state_set,
            replicas=group.brokers.keys(),
            old_master=group.master_broker_id,
            alive=alive_replicas,
            designated=designated_broker_id,
            enable_elect_unclean_master=enable_elect_unclean_master,
            first_election=group.first_election,
            planned=planned,
        )
        if result.verdict is Verdict.MASTER_STILL_ALIVE:
            return Decision(
                code=RC.CONTROLLER_MASTER_STILL_EXIST, remark=result.reason, response=group.info()
            )
        if result.verdict in (Verdict.DESIGNATED_INVALID, Verdict.NO_SWITCH_CANDIDATE):
            return rejected(RC.CONTROLLER_ELECT_MASTER_FAILED, result.reason)
        if result.verdict is Verdict.NO_CANDIDATE and group.master_broker_id is None:
            return Decision(
                code=RC.CONTROLLER_MASTER_NOT_AVAILABLE, remark=result.reason, response=group.info()
            )
        new_master = result.broker_id if result.verdict is Verdict.ELECTED else None
        event = ElectMaster(
            broker_name=broker_name,
            new_master_broker_id=new_master,
            master_epoch=group.master_epoch,
            sync_state_set_epoch=group.sync_state_set_epoch,
            new_master_epoch=next_master_epoch(group.master_epoch, alive_replicas),
        )
        after = group.copy()
        mutate_elect(after, new_master, event.next_epoch)
        code = RC.SUCCESS if new_master is not None else RC.CONTROLLER_MASTER_NOT_AVAILABLE
        return Decision(code=code, remark=result.reason, events=(event,), response=after.info())

    def clean_broker_data(
        self,
        cluster: str | None,
        broker_name: str,
        broker_ids: Set[int] | None,
        *,
        alive: AlivePredicate,
        clean_living_broker: bool = False,
    ) -> Decision[CleanBrokerDataResponse]:
        """CLEAN_BROKER_DATA (rmqctl cleanBrokerMetadata): forget dead brokers or a dead group.

        ``broker_ids`` None or empty means the whole group. CONTROLLER_INVALID_CLEAN_BROKER_METADATA
        (2009) when the group is unknown, the cluster does not match, an id is not registered, a
        broker to clean is alive (always: ``clean_living_broker`` does not override it), or,
        unless ``clean_living_broker``, the whole group is to go while it still names a (dead)
        master.
        """
        invalid = RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
        try:
            _field(check_name, "broker_name", broker_name)
            ids = frozenset(broker_ids) if broker_ids else None
            if ids is not None:
                _field(check_id_set, "broker_ids", ids)
        except _BadRequest as exc:
            return rejected(invalid, str(exc))
        group = self._groups.get(broker_name)
        if group is None:
            return rejected(invalid, f"broker set {broker_name} does not exist")
        if cluster and cluster != group.cluster:
            return rejected(
                invalid,
                f"broker set {broker_name} belongs to cluster {group.cluster}, not {cluster}",
            )
        if ids is not None:
            unknown = sorted(ids - group.brokers.keys())
            if unknown:
                return rejected(
                    invalid, f"broker ids {unknown} of {broker_name} are not registered"
                )
        whole = ids is None or ids >= group.brokers.keys()
        mapped = self.static_topics.mapped_on(broker_name) if whole else []
        if mapped:
            return rejected(invalid, _still_mapped(broker_name, mapped))
        # A living broker is never cleaned, whatever the request says: its data would be
        # forgotten while it serves, and the group left without a master it cannot rejoin.
        for broker_id in sorted(group.brokers if ids is None else ids):
            if alive(broker_name, broker_id):
                return rejected(invalid, f"broker {broker_id} of {broker_name} is still alive")
        if not clean_living_broker and ids is None and group.master_broker_id is not None:
            return rejected(
                invalid,
                f"broker set {broker_name} still has master {group.master_broker_id}",
            )
        return Decision(
            events=(CleanBrokerData(broker_name=broker_name, broker_ids=ids),),
            response=CleanBrokerDataResponse(broker_name=broker_name, broker_ids=ids),
        )

    def update_topic(
        self,
        cluster: str | None,
        broker_name: str,
        topic: str,
        queues: int,
        perm: int | None = None,
        message_type: str | None = None,
    ) -> Decision[UpdateTopicResponse]:
        """UPDATE_AND_CREATE_TOPIC on the controllers: create or grow ``topic`` on a group, and
        set its permission and message type (None: keep them; a new topic's are 6, NORMAL).

        CONTROLLER_BROKER_METADATA_NOT_EXIST for an unknown group, INVALID_REQUEST for a bad name,
        count, permission or type or another cluster, BAD_REQUEST when it would take queues
        away. Nothing is appended when the group already has the topic as asked.
        """
        try:
            _field(check_name, "broker_name", broker_name)
            _field(check_topic, "topic", topic)
            _field(check_queues, "queues", queues)
            if perm is not None:
                _field(check_perm, "perm", perm)
            if message_type is not None:
                _field(check_message_type, "message_type", message_type)
        except _BadRequest as exc:
            return rejected(RC.CONTROLLER_INVALID_REQUEST, str(exc))
        group = self._groups.get(broker_name)
        if group is None:
            return rejected(
                RC.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                f"broker set {broker_name} has no metadata",
            )
        if cluster and cluster != group.cluster:
            return rejected(
                RC.CONTROLLER_INVALID_REQUEST,
                f"broker set {broker_name} belongs to cluster {group.cluster}, not {cluster}",
            )
        old = group.attrs_of(topic)
        attrs = TopicAttrs(
            old.perm if perm is None else perm,
            old.message_type if message_type is None else MessageType(message_type),
        )
        response = UpdateTopicResponse(
            broker_name=broker_name,
            topic=topic,
            queues=queues,
            perm=attrs.perm,
            message_type=attrs.message_type.value,
        )
        event = UpdateTopic(
            broker_name=broker_name,
            topic=topic,
            queues=queues,
            perm=None if attrs.perm == old.perm else attrs.perm,
            message_type=(
                None if attrs.message_type is old.message_type else attrs.message_type.value
            ),
        )
        if topic in self.static_topics:
            if group.topics.get(topic) == queues:
                # The controllers' own push of the physical queues, which a broker in controller
                # mode forwards back before creating them: it changes nothing (but the
                # permission or type it was asked to change).
                return Decision(events=() if attrs == old else (event,), response=response)
            return rejected(
                RC.BAD_REQUEST,
                f"topic {topic} is static: its queues are placed by updateStaticTopic",
            )
        check = _check_topic_update(group, topic, queues)
        if not check.ok:
            return rejected(check.code, check.remark)
        if group.topics.get(topic) == queues and attrs == old:
            return Decision(response=response)
        return Decision(events=(event,), response=response)

    def delete_topic(self, topic: str) -> Decision[dict[str, int]]:
        """DELETE_TOPIC_IN_NAMESRV (rmqctl deleteTopic): forget ``topic`` on every group.

        CONTROLLER_INVALID_REQUEST for a bad name, SYSTEM_RESOURCE for a system topic or a
        group's retry or dead-letter topic, TOPIC_NOT_EXIST when no group has it and it is not
        static. The response: the groups that had it and its queue count on each (a static
        topic's: its physical queues)."""
        try:
            _field(check_topic, "topic", topic)
        except _BadRequest as exc:
            return rejected(RC.CONTROLLER_INVALID_REQUEST, str(exc))
        refusal = topic_delete_refusal(topic)
        if refusal is not None:
            return rejected(RC.SYSTEM_RESOURCE, refusal)
        had = self.topic_queues(topic)
        if not had and topic not in self.static_topics:
            return rejected(RC.TOPIC_NOT_EXIST, f"topic {topic} does not exist")
        return Decision(events=(DeleteTopic(topic=topic),), response=had)

    def delete_group_topics(self, topics: Sequence[str]) -> Decision[list[str]]:
        """DELETE_SUBSCRIPTIONGROUP (rmqctl deleteSubGroup): a DeleteTopic for each of a
        consumer group's own topics (``%RETRY%``, ``%DLQ%``) that the metadata holds (created
        by updateTopic; brokers create them on their own too), so no broker is handed them
        again. The response: the topics it deletes."""
        held = [t for t in topics if self.topic_queues(t) or t in self.static_topics]
        return Decision(events=tuple(DeleteTopic(topic=t) for t in held), response=held)

    def create_static_topic(
        self, topic: str, queues: int, broker_names: Sequence[str] = ()
    ) -> Decision[StaticTopicMapping]:
        """UPDATE_AND_CREATE_STATIC_TOPIC: ``queues`` logical queues spread over
        ``broker_names`` (default: every group that has a master). Refused when the topic is
        ordinary somewhere, static with another queue count, or a named group is unknown."""
        unknown = sorted(set(broker_names) - self._groups.keys())
        if unknown:
            return rejected(
                RC.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                f"broker group {unknown[0]} does not exist",
            )
        if broker_names:
            groups = sorted(set(broker_names))
        else:
            groups = [n for n in sorted(self._groups) if self._groups[n].master_broker_id]
        ordinary = [] if topic in self.static_topics else list(self.topic_queues(topic))
        return self.static_topics.create(topic, queues, groups, ordinary)

    def seal_queue_item(
        self, topic: str, queue_id: int, physical_max: int, target: str
    ) -> Decision[int]:
        """Step 1 of re-mapping a logical queue to ``target`` (see StaticTopicTable.seal)."""
        return self.static_topics.seal(topic, queue_id, physical_max, target, self._groups.keys())

    def add_queue_item(self, topic: str, queue_id: int, target: str) -> Decision[MappingItem]:
        """Step 2: the sealed queue continues on ``target`` (see StaticTopicTable.add_item)."""
        group = self._groups.get(target)
        if group is None:
            return rejected(
                RC.CONTROLLER_BROKER_METADATA_NOT_EXIST, f"broker group {target} does not exist"
            )
        return self.static_topics.add_item(topic, queue_id, target, group.topics.get(topic, 0))

    def plan_remap(self, topic: str, queue_id: int, target: str) -> Decision[RemapPlan]:
        """REMAP_STATIC_TOPIC, before the fence: may ``topic``'s queue move to ``target`` now?
        Refused for an ordinary topic, an unknown one, a queue out of range, an unknown target
        or one without a master, the group that holds it, a move in progress, a source group
        without a master (see StaticTopicTable.plan_remap)."""
        if topic not in self.static_topics and self.topic_queues(topic):
            return rejected(RC.TOPIC_NOT_EXIST, f"{topic} is not a static topic")
        masters = {
            name: (group.master_epoch if group.master_broker_id is not None else None)
            for name, group in self._groups.items()
        }
        return self.static_topics.plan_remap(topic, queue_id, target, masters)

    def remap_queue(self, plan: RemapPlan, physical_max: int) -> Decision[MappingItem]:
        """REMAP_STATIC_TOPIC, after the fence reported ``physical_max``: the commit's events."""
        group = self._groups.get(plan.target)
        if group is None:
            return rejected(
                RC.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                f"broker group {plan.target} does not exist",
            )
        return self.static_topics.remap(plan, physical_max, group.topics.get(plan.topic, 0))

    def droppable_items(self) -> list[tuple[str, int, MappingItem]]:
        """Each static topic queue's oldest item when it is not the newest (retention may have
        deleted it): (topic, queue id, item)."""
        return self.static_topics.droppable()

    def drop_queue_item(self, topic: str, queue_id: int, generation: int) -> Decision[MappingItem]:
        """Drop a static topic queue's oldest item (its data was deleted by retention)."""
        return self.static_topics.drop_item(topic, queue_id, generation)

    def sealed_queues(self, broker_name: str) -> list[tuple[str, int]]:
        """The group's static topic queues whose items are sealed (see SealedQueues, broker)."""
        return self.static_topics.sealed_on(broker_name)

    # Apply -------------------------------------------------------------------------------------

    def apply(self, event: Event) -> Applied:
        """Apply one committed event; the same event on the same state has the same effect and
        outcome on every controller. A rejected event changes nothing."""
        if isinstance(event, _GROUP_EVENTS):
            self.groups_version += 1
        return self._apply(event)

    def _apply(self, event: Event) -> Applied:
        match event:
            case ApplyBrokerId():
                return self._apply_broker_id(event)
            case UpdateBrokerAddress():
                group = self._groups.get(event.broker_name)
                check = check_registered(group, event.broker_name, event.broker_id)
                if check.ok and group is not None:
                    mutate_address(group, event.broker_id, event.address)
                return check
            case ElectMaster():
                group = self._groups.get(event.broker_name)
                check = check_elect(group, event)
                if check.ok and group is not None:
                    mutate_elect(group, event.new_master_broker_id, event.next_epoch)
                return check
            case AlterSyncStateSet():
                group = self._groups.get(event.broker_name)
                if group is None:
                    return fail(
                        RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                        f"broker set {event.broker_name} has no metadata",
                    )
                check = check_alter(
                    group,
                    event.master_broker_id,
                    event.master_epoch,
                    event.sync_state_set_epoch,
                    event.new_sync_state_set,
                    None,
                )
                if check.ok:
                    mutate_alter(group, event.new_sync_state_set)
                return check
            case CleanBrokerData():
                return self._apply_clean(event)
            case PutUser() | DeleteUser() | PutAcl():
                return self.auth.apply(event)
            case CreateStaticTopic() | SealQueueItem() | AddQueueItem() | DropQueueItem():
                return self.static_topics.apply(event, self._groups.keys())
            case RemapQueueItem():
                # The fence was set on the source group's master at this epoch: a master
                # elected since may have taken sends past the reported end; nothing moves.
                source = self.static_topics.source_of(event)
                held = self._groups.get(source) if source is not None else None
                if held is not None and held.master_epoch != event.source_master_epoch:
                    return fail(
                        RC.CONTROLLER_FENCED_MASTER_EPOCH,
                        f"the master of {source} changed during the move of {event.topic} "
                        f"queue {event.queue_id} (epoch {event.source_master_epoch}, now "
                        f"{held.master_epoch}); nothing moved",
                    )
                return self.static_topics.apply(event, self._groups.keys())
            case DeleteTopic():
                had = [g for g in self._groups.values() if event.topic in g.topics]
                if not had and event.topic not in self.static_topics:
                    return fail(RC.TOPIC_NOT_EXIST, f"topic {event.topic} does not exist")
                for group in had:
                    del group.topics[event.topic]
                    group.topic_attrs.pop(event.topic, None)
                self._topic_groups.pop(event.topic, None)
                self.static_topics.remove(event.topic)
                return APPLIED
            case IssueProducerId():
                return self._issue_producer_id(event)
            case UpdateTopic():
                group = self._groups.get(event.broker_name)
                if group is None:
                    return fail(
                        RC.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                        f"broker set {event.broker_name} has no metadata",
                    )
                check = _check_topic_update(group, event.topic, event.queues)
                if check.ok:
                    group.topics[event.topic] = event.queues
                    group.set_attrs(event.topic, event.perm, event.message_type)
                    self._topic_groups.setdefault(event.topic, set()).add(event.broker_name)
                return check
            case _:
                raise TypeError(f"not an event: {type(event).__name__}")

    def _issue_producer_id(self, event: IssueProducerId) -> Applied:
        if event.epoch == 0:
            if event.producer_id != self.next_producer_id:
                return fail(
                    RC.CONTROLLER_INVALID_REQUEST,
                    f"producer id {event.producer_id} was issued already: ask again",
                )
            self.next_producer_id += 1
            return APPLIED
        if event.producer_id >= self.next_producer_id or event.epoch != self.next_producer_epoch:
            return fail(
                RC.CONTROLLER_INVALID_REQUEST,
                f"producer epoch {event.epoch} was issued already: ask again",
            )
        self.next_producer_epoch += 1
        return APPLIED

    def _apply_broker_id(self, event: ApplyBrokerId) -> Applied:
        group = self._groups.get(event.broker_name)
        check = check_apply_broker_id(group, event)
        if not check.ok:
            return check
        if group is None:
            group = BrokerGroup(cluster=event.cluster, broker_name=event.broker_name)
            self._groups[event.broker_name] = group
        if event.broker_id not in group.brokers:
            group.brokers[event.broker_id] = BrokerRecord(
                address=event.address, register_code=event.register_code
            )
            group.next_assign_broker_id = event.broker_id + 1
        return check

    def _drop_group(self, group: BrokerGroup) -> None:
        del self._groups[group.broker_name]
        for topic in group.topics:
            names = self._topic_groups.get(topic)
            if names is not None:
                names.discard(group.broker_name)
                if not names:
                    del self._topic_groups[topic]

    def _apply_clean(self, event: CleanBrokerData) -> Applied:
        group = self._groups.get(event.broker_name)
        if group is None:
            return fail(
                RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                f"broker set {event.broker_name} does not exist",
            )
        whole = event.broker_ids is None or event.broker_ids >= group.brokers.keys()
        mapped = self.static_topics.mapped_on(event.broker_name) if whole else []
        if mapped:
            return fail(
                RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                _still_mapped(event.broker_name, mapped),
            )
        if event.broker_ids is None:
            self._drop_group(group)
            return APPLIED
        removed = event.broker_ids & group.brokers.keys()
        for broker_id in removed:
            del group.brokers[broker_id]
        if not group.brokers:
            self._drop_group(group)
            return APPLIED
        if group.master_broker_id in removed:
            group.master_broker_id = None
            group.master_epoch += 1
        kept = group.sync_state_set - removed
        if kept != group.sync_state_set:
            group.sync_state_set = kept
            group.sync_state_set_epoch += 1
        return APPLIED

    # Snapshot ----------------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The whole state as bytes; equal states give equal bytes."""
        return encode_groups(
            self._groups,
            self.auth.records(),
            self.static_topics.records(),
            (self.next_producer_id, self.next_producer_epoch),
        )

    def snapshot_parts(self) -> Iterator[bytes]:
        """The state as it is now, copied without encoding it (a copy of each group; users,
        static topics' mappings and counters are immutable values), encoded a group at a time
        as it is iterated: the parts join into :meth:`snapshot`'s bytes of now, however many
        events are applied here in between (a Raft snapshot encoded in steps)."""
        groups = {name: group.copy() for name, group in self._groups.items()}
        return encode_groups_in_parts(
            groups,
            self.auth.records(),
            self.static_topics.records(),
            (self.next_producer_id, self.next_producer_epoch),
        )

    def restore(self, data: bytes) -> None:
        """Replace the whole state with a snapshot's; SnapshotError (state untouched) if invalid."""
        self.prepare_restore(data)()

    def prepare_restore(
        self, data: bytes, between: Callable[[], None] | None = None
    ) -> Callable[[], None]:
        """Decode and check a snapshot (SnapshotError, state untouched, if invalid) into new
        objects nothing else sees yet, so it may run in another thread; the function returned
        swaps them in, in one step, on the thread that applies events. ``between``: called
        between two groups decoded."""
        groups = decode_groups(data, between)
        users = decode_users(data)
        statics = decode_static_topics(data)
        producers = decode_producers(data)
        topic_groups = _topic_index(groups)
        static_table = StaticTopicTable(statics)
        auth = AuthTable({u.username: u for u in users})

        def install() -> None:
            self._groups = groups
            self.groups_version += 1
            self._topic_groups = topic_groups
            self.next_producer_id, self.next_producer_epoch = producers
            self.static_topics = static_table
            self.auth = auth

        return install

    @classmethod
    def from_snapshot(cls, data: bytes) -> ReplicasInfoManager:
        manager = cls()
        manager.restore(data)
        return manager

    def invariant_violations(self) -> list[str]:
        """Broken invariants of group.py across all groups; [] when the state is sound."""
        problems: list[str] = []
        for name in sorted(self._groups):
            group = self._groups[name]
            if group.broker_name != name:
                problems.append(f"{name}: group is filed under another name")
            problems.extend(group.invariant_violations())
        if self._topic_groups != _topic_index(self._groups):
            problems.append("the topic index does not match the groups' topics")
        return problems


def _topic_index(groups: Mapping[str, BrokerGroup]) -> dict[str, set[str]]:
    """Topic -> the names of the groups that have it."""
    index: dict[str, set[str]] = {}
    for name, group in groups.items():
        for topic in group.topics:
            index.setdefault(topic, set()).add(name)
    return index


def _still_mapped(broker_name: str, mapped: Sequence[tuple[str, int]]) -> str:
    """CLEAN_BROKER_DATA of a whole group that static topic items are mapped to: refused (its
    items would point at a group that no longer exists)."""
    topic, queue_id = mapped[0]
    more = f" and {len(mapped) - 1} more" if len(mapped) > 1 else ""
    return (
        f"broker set {broker_name} holds static topic items ({topic} queue {queue_id}{more}): "
        "move those queues to another group (remapStaticTopic) and wait until retention drops "
        "the old items"
    )
