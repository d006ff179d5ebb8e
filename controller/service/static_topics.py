"""Static topics on the controllers: UPDATE_AND_CREATE_STATIC_TOPIC (513) and REMAP_STATIC_TOPIC
(5121) committed by the active controller, GET_STATIC_TOPIC_MAPPING (5120) from any controller's
applied state.

The mapping lives in the metadata state machine (:mod:`controller.metadata.static_topics`); the
create's decision also creates the physical queues as ordinary topics on the groups (UpdateTopic
events), which the group's brokers then get pushed like any topic.

A re-map (docs/static-topics.md, "Re-mapping a queue"): decide on applied state, fence the
physical queue on the source group's master (FENCE_STATIC_QUEUE, which answers the queue's max
offset once every SyncStateSet member has everything the master accepted), then commit the
target's UpdateTopic and one RemapQueueItem (a compare-and-set on the queue's generation and the
source master's epoch). One move per queue at a time on this controller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import msgpack
import structlog

from controller.metadata import MappingItem, RemapPlan, ReplicasInfoManager, StaticTopicMapping
from controller.service.commit import DecisionCommitter
from controller.service.gate import LeadershipGate
from controller.service.notifier import BrokerNotifier
from controller.service.requests import Refused, answer_of, refuse
from protocol.broker_requests.static_queues import FenceStaticQueue, QueueFenced
from protocol.codes import ResponseCode, code_name
from protocol.controller_requests.static_topics import (
    CreateStaticTopic,
    RemapStaticTopic,
    StaticTopicMappingQuery,
)
from protocol.fields import FieldError
from protocol.remoting import Frame, response
from protocol.static_topic import item_doc
from remoting.client import ConnectionPool
from remoting.errors import RemotingError, ResponseError
from remoting.server import Connection

log = structlog.get_logger(__name__)

FENCE_MS = 30_000
"""How long a source master refuses sends to a queue being moved without hearing the seal: far
longer than a commit may take (the request timeout), far shorter than forever."""


def mapping_doc(topic: str, mapping: StaticTopicMapping) -> dict[str, Any]:
    """The document 513 and 5120 answer and ``rmqctl staticTopicMapping`` prints."""
    return {
        "topic": topic,
        "queues": [
            {"queueId": queue_id, "items": [item_doc(i) for i in items]}
            for queue_id, items in enumerate(mapping)
        ],
    }


class StaticTopicHandlers:
    def __init__(
        self,
        manager: ReplicasInfoManager,
        gate: LeadershipGate,
        committer: DecisionCommitter,
        pool: ConnectionPool | None = None,
        timeout: float = 3.0,
        least_loaded: Callable[[int], Awaitable[list[str]]] | None = None,
        notifier: BrokerNotifier | None = None,
    ) -> None:
        self.manager = manager
        self.notifier = notifier
        """Hands the groups' masters the physical queues before 513 and 5121 answer."""
        self.least_loaded = least_loaded
        """The N broker groups with a master and the least traffic (placement by traffic)."""
        self.gate = gate
        self.committer = committer
        self.pool = pool
        self.timeout = timeout
        self._moving: set[tuple[str, int]] = set()
        """Queues this controller is moving now (a second move of one is refused)."""

    async def create(self, conn: Connection, req: Frame) -> Frame:
        """Header ``topic``, ``queues``, ``brokerNames`` (';'-separated, optional: every group
        with a master) or ``placeGroups`` (that many groups with a master, the least traffic
        first). Answered with the mapping once its events are applied."""
        await self.gate.require_active()
        ask = CreateStaticTopic.parse(req.header, req.body)
        topic = ask.topic
        names = list(ask.broker_names)
        if ask.place_groups and self.manager.static_topic(topic) is None:
            names = await self._place(ask.place_groups)
        mapping = answer_of(
            await self.committer.settle(self.manager.create_static_topic(topic, ask.queues, names))
        )
        groups = {item.broker_name for items in mapping for item in items}
        missing = await self.hand_queues(topic, groups)
        if missing:
            raise Refused(
                ResponseCode.SYSTEM_ERROR,
                f"static topic {topic} is created, but {'; '.join(missing)}: run the same "
                "command again to hand them the queues",
            )
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(mapping_doc(topic, mapping)))

    async def hand_queues(self, topic: str, groups: Collection[str]) -> list[str]:
        """UPDATE_AND_CREATE_TOPIC of ``topic``'s physical queues to the masters of ``groups``,
        awaited: once this returns [], a send there finds them (a broker that has not heard of
        a topic creates it with its default queue count, queues no logical reader sees). A
        group without a master is skipped (a new master gets its group's topics before it
        hears it is master). Returns what failed, one phrase per group."""
        if self.notifier is None:
            return []
        pushes = []
        for name in sorted(groups):
            info = self.manager.replica_info(name)
            queues = self.manager.group_topics(name).get(topic)
            if info is not None and info.master_address and queues:
                pushes.append((name, info.master_address, queues))
        results = await asyncio.gather(
            *(self.notifier.push_topic(a, topic, q, self.timeout) for _, a, q in pushes)
        )
        return [
            f"the master of {name} ({address}) did not take its queues ({why})"
            for (name, address, _), why in zip(pushes, results, strict=True)
            if why is not None
        ]

    async def remap(self, conn: Connection, req: Frame) -> Frame:
        """Header ``topic``, ``queueId``, ``brokerName`` (the target group). Answered with the
        topic's mapping once the move is committed; refused with one line and nothing changed
        otherwise (see the module doc)."""
        await self.gate.require_active()
        ask = RemapStaticTopic.parse(req.header, req.body)
        topic = ask.topic
        await self.move(topic, ask.queue_id, ask.broker_name)
        found = self.manager.static_topic(topic)
        assert found is not None
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(mapping_doc(topic, found)))

    async def move(self, topic: str, queue_id: int, target: str) -> MappingItem:
        """One move (REMAP_STATIC_TOPIC, or the automatic re-balance): the new item once it is
        committed; Refused with one line and nothing changed otherwise."""
        key = (topic, queue_id)
        if key in self._moving:
            raise Refused(
                ResponseCode.BAD_REQUEST, f"a move of {topic} queue {queue_id} is in progress"
            )
        plan = answer_of(self.manager.plan_remap(topic, queue_id, target))
        self._moving.add(key)
        try:
            item = await self._move(plan)
        finally:
            self._moving.discard(key)
        log.info(
            "static topic queue moved",
            topic=topic,
            queue_id=queue_id,
            target=target,
            logical_start=item.logical_start,
            generation=item.generation,
        )
        return item

    async def _place(self, count: int) -> list[str]:
        with_master = [i.broker_name for i in self.manager.replica_infos() if i.master_address]
        if not 1 <= count <= len(with_master) or self.least_loaded is None:
            raise Refused(
                ResponseCode.BAD_REQUEST,
                f"cannot place on {count} broker groups: {len(with_master)} have a master",
            )
        return await self.least_loaded(count)

    async def _move(self, plan: RemapPlan) -> MappingItem:
        physical_max = await self._fence(plan)
        d = self.manager.remap_queue(plan, physical_max)
        if not d.ok:
            await self._release(plan)
            raise refuse(d)
        # An uncertain commit (leader lost, timeout) leaves the fence: the entry may still
        # commit, and the fence's deadline outlives any commit of it.
        settled = await self.committer.settle(d)
        if not settled.ok or settled.response is None:
            await self._release(plan)
            raise refuse(settled)
        for missing in await self.hand_queues(plan.topic, [plan.target]):
            # The move is done; the push is retried when the target's brokers register.
            log.warning("static topic queue moved, target not ready", problem=missing)
        return settled.response

    async def _fence(self, plan: RemapPlan) -> int:
        """FENCE_STATIC_QUEUE on the source master: the physical queue's max offset there."""
        info = self.manager.replica_info(plan.source)
        address = info.master_address if info is not None else None
        where = f"{plan.topic} queue {plan.queue_id}"
        if info is None or not address:
            raise Refused(
                ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE,
                f"cannot fence {where}: broker group {plan.source} has no master; nothing moved",
            )
        if info.master_epoch != plan.source_epoch:
            raise Refused(
                ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
                f"the master of {plan.source} changed (epoch {plan.source_epoch}, now "
                f"{info.master_epoch}) before {where} was fenced; nothing moved",
            )
        fence = FenceStaticQueue(
            topic=plan.topic,
            queue_id=plan.source_queue,
            master_epoch=plan.source_epoch,
            fence_ms=FENCE_MS,
        )

        def refused(why: str) -> Refused:
            return Refused(
                ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE,
                f"the master of {plan.source} ({address}) refused to fence {where}: {why}; "
                "nothing moved",
            )

        try:
            resp = await self._call(address, fence, max(self.timeout, 5.0))
        except ResponseError as exc:
            raise refused(exc.remark or code_name(exc.code)) from None
        except (RemotingError, OSError, TimeoutError) as exc:
            raise Refused(
                ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE,
                f"cannot fence {where} on the master of {plan.source} ({address}): {exc}; "
                "nothing moved",
            ) from None
        try:
            return QueueFenced.parse(resp.header, resp.body).max_offset
        except FieldError:
            raise refused(code_name(resp.code)) from None

    async def _release(self, plan: RemapPlan) -> None:
        """Best effort: the move was refused, the source master may take sends there again."""
        info = self.manager.replica_info(plan.source)
        if info is None or not info.master_address:
            return
        release = FenceStaticQueue(topic=plan.topic, queue_id=plan.source_queue, release=True)
        try:
            await self._call(info.master_address, release, self.timeout)
        except ResponseError:
            pass  # refused (not master, no fence): nothing to release here
        except (RemotingError, OSError, TimeoutError) as exc:
            log.info(
                "fence release failed (it expires)", address=info.master_address, error=str(exc)
            )

    async def _call(self, address: str, fence: FenceStaticQueue, timeout: float) -> Frame:
        """FENCE_STATIC_QUEUE to a master; a refusal raises ResponseError (the connection
        stays), anything else that fails drops the connection."""
        if self.pool is None:
            raise RemotingError("no connection pool to reach brokers")
        try:
            conn = await self.pool.get(address)
            async with asyncio.timeout(timeout + 1):
                return await conn.call(fence.code, *fence.encode(), timeout)
        except ResponseError:
            raise
        except (RemotingError, OSError, TimeoutError):
            self.pool.drop(address)
            raise

    async def mapping(self, conn: Connection, req: Frame) -> Frame:
        """Header ``topic``: its mapping, from this controller's applied state (after a read
        barrier on the leader); TOPIC_NOT_EXIST when it is not a static topic."""
        topic = StaticTopicMappingQuery.parse(req.header, req.body).topic
        await self.gate.route_view()
        found = self.manager.static_topic(topic)
        if found is None:
            raise Refused(ResponseCode.TOPIC_NOT_EXIST, f"{topic} is not a static topic")
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(mapping_doc(topic, found)))


def static_route(doc: dict[str, Any], mapping: StaticTopicMapping) -> dict[str, Any]:
    """A static topic's GET_ROUTEINFO_BY_TOPIC document: the groups' route plus, per logical
    queue, the group and physical queue of its newest item and all its items, oldest first
    (``logicalQueues``: readers translate logical offsets with them), and per group the
    physical queues sends may go to (``writeQueues``: newest items that are open; a queue whose
    move is in progress is writable nowhere until its new item exists)."""
    logical = []
    writable: dict[str, list[int]] = {}
    for queue_id, items in enumerate(mapping):
        last = items[-1]
        logical.append(
            {
                "queueId": queue_id,
                "brokerName": last.broker_name,
                "physicalQueue": last.physical_queue,
                "items": [item_doc(i) for i in items],
            }
        )
        if last.logical_end is None:
            writable.setdefault(last.broker_name, []).append(last.physical_queue)
    brokers = [
        {**b, "writeQueues": sorted(writable.get(b["brokerName"], ()))} for b in doc["brokers"]
    ]
    return {**doc, "brokers": brokers, "logicalQueues": logical}
