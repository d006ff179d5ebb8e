"""deleteTopic, deleteSubGroup and topicList on the controllers: DELETE_TOPIC_IN_NAMESRV (216),
DELETE_SUBSCRIPTIONGROUP (207) and GET_TOPICS_BY_CLUSTER (224) (docs/operations.md, "Listing
and deleting topics and groups").

A topic's delete, on the active controller:

1. decided against the metadata (:meth:`ReplicasInfoManager.delete_topic`): a system topic, a
   group's retry or dead-letter topic, a bad name or a name neither the metadata nor any live
   broker registration lists is refused, changing nothing;
2. unless ``force``, every group's master is asked whether it would delete (``dryRun``): one
   that took a send to the topic lately answers TOPIC_IN_USE, which is the answer, nothing
   changed;
3. the DeleteTopic event commits (a static topic's mapping items go with it), the topic leaves
   the route table at once;
4. every broker of every group deletes it, the master first: its answer says where its queues
   ended, and the group's other replicas retire theirs at least there, so records of the old
   topic that a slave receives later are not dispatched (:mod:`storage.queues`).

The answer (:class:`DeleteReport`) lists each broker's outcome: one that was unreachable still
has the topic, and the operator runs the delete again once it is back (it registers the topic
in its routes, where step 1 finds it). A broker the controllers do not hold alive (its
heartbeats stopped past its timeout, or their connection closed) is not asked at all, neither
in step 2 nor in step 4: its outcome says so at once (SERVICE_NOT_AVAILABLE, "not asked: ..."),
where asking it waited out the request timeout for each step (a hung master: the dry run's and
the delete's). A group's delete commits a DeleteTopic only for its retry (and with ``removeDlq``
dead-letter) topic when the metadata holds it (consumer group settings and offsets are broker
metadata); it goes to every broker of every group, and is refused when none of them knew the
group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import structlog

from controller.metadata import BrokerLiveTable, ReplicaInfo, ReplicasInfoManager
from controller.routes import RouteTable
from controller.service.commit import DecisionCommitter
from controller.service.gate import LeadershipGate
from controller.service.requests import Refused, refuse
from controller.service.topics_routes import TopicRouteHandlers
from protocol.codes import ResponseCode, code_name
from protocol.controller_requests.topics import (
    BrokerOutcome,
    DeleteReport,
    DeleteSubGroup,
    DeleteTopic,
    TopicEntry,
    TopicList,
    TopicListQuery,
)
from protocol.remoting import Frame, response
from protocol.retry import dlq_topic, group_error, retry_topic
from protocol.topic_admin import (
    DeleteGroupInBroker,
    DeleteTopicInBroker,
    TopicRetired,
    group_delete_refusal,
)
from protocol.topic_attrs import TopicAttrs
from remoting.client import ConnectionPool
from remoting.errors import RemotingError, ResponseError
from remoting.server import Connection

log = structlog.get_logger(__name__)

__all__ = ["TopicAdminHandlers"]


class TopicAdminHandlers:
    def __init__(
        self,
        manager: ReplicasInfoManager,
        routes: RouteTable,
        topics: TopicRouteHandlers,
        gate: LeadershipGate,
        committer: DecisionCommitter,
        pool: ConnectionPool,
        now_ms: Callable[[], int],
        *,
        live: BrokerLiveTable,
        timeout: float,
    ) -> None:
        self.manager = manager
        self.live = live
        self.routes = routes
        self.topics = topics
        self.gate = gate
        self.committer = committer
        self.pool = pool
        self.now_ms = now_ms
        self.timeout = timeout

    # --- deleteTopic -----------------------------------------------------------------------

    async def delete_topic(self, conn: Connection, req: Frame) -> Frame:
        await self.gate.require_active()
        ask = DeleteTopic.parse(req.header, req.body)
        topic = ask.topic
        decision = self.manager.delete_topic(topic)
        # A topic not in the metadata but still on brokers (created there alone, or a delete
        # that did not reach every broker): they are still asked to delete it.
        if not decision.ok and (
            decision.code != ResponseCode.TOPIC_NOT_EXIST
            or topic not in await self.topics.topic_names()
        ):
            raise refuse(decision)
        groups = self.manager.replica_infos()
        if not ask.force:
            await self._check_not_in_use(topic, groups)
        if decision.ok:
            settled = await self.committer.settle(decision)
            if not settled.ok:
                raise refuse(settled)
        self.routes.drop_topic(topic)
        log.info("topic deleted from the metadata", topic=topic)
        rows = await asyncio.gather(*(self._delete_in_group(topic, info) for info in groups))
        report = DeleteReport(name=topic, brokers=tuple(o for group in rows for o in group))
        return response(req, ResponseCode.SUCCESS, *report.encode())

    def _not_alive(self, broker_name: str, address: str) -> str | None:
        """Why the broker at ``address`` of ``broker_name`` is not asked (the live table does not
        hold it alive: a push would wait out the timeout), or None: ask it."""
        now = self.now_ms()
        if self.live.in_grace(now):
            return None  # a controller just made active has not heard every broker yet
        info = next((i for i in self.manager.replica_infos() if i.broker_name == broker_name), None)
        ids = [r.broker_id for r in info.replicas if r.address == address] if info else []
        if not ids or self.live.is_alive(broker_name, ids[0], now):
            return None
        return (
            "not asked: not alive for the controllers (no heartbeat within its timeout, or its "
            "connection closed)"
        )

    async def _check_not_in_use(self, topic: str, groups: list[ReplicaInfo]) -> None:
        """Ask every master whether it would delete ``topic`` now; raise its refusal if one
        would not (a live producer). An unreachable master takes no sends: not a refusal."""

        async def ask(info: ReplicaInfo) -> None:
            if not info.master_address or self._not_alive(info.broker_name, info.master_address):
                return
            dry = DeleteTopicInBroker(topic=topic, dry_run=True)
            try:
                conn = await self.pool.get(info.master_address)
                await conn.call(dry.code, *dry.encode(), self.timeout)
            except ResponseError as exc:
                if exc.code == ResponseCode.TOPIC_IN_USE:
                    raise Refused(exc.code, exc.remark or code_name(exc.code)) from None
            except (RemotingError, OSError, ValueError):
                self.pool.drop(info.master_address)

        await asyncio.gather(*(ask(info) for info in groups))

    async def _delete_in_group(self, topic: str, info: ReplicaInfo) -> list[BrokerOutcome]:
        """Delete on the group's master, then on its other replicas at the master's marks."""
        addresses = [r.address for r in info.replicas if r.address]
        master = info.master_address if info.master_address in addresses else None
        outcomes: list[BrokerOutcome] = []
        marks: dict[int, int] = {}
        if master is not None:
            outcome, retired = await self._delete_topic_at(info.broker_name, master, topic, {})
            outcomes.append(outcome)
            marks = retired.retired if retired is not None else {}
        others = [a for a in addresses if a != master]
        outcomes.extend(
            o
            for o, _ in await asyncio.gather(
                *(self._delete_topic_at(info.broker_name, a, topic, marks) for a in others)
            )
        )
        return outcomes

    async def _delete_topic_at(
        self, broker_name: str, address: str, topic: str, marks: dict[int, int]
    ) -> tuple[BrokerOutcome, TopicRetired | None]:
        push = DeleteTopicInBroker(topic=topic, force=True, retire_at=marks)
        why = self._not_alive(broker_name, address)
        if why is not None:
            return BrokerOutcome(
                broker_name, address, ResponseCode.SERVICE_NOT_AVAILABLE, why
            ), None
        try:
            conn = await self.pool.get(address)
            resp = await conn.call(push.code, *push.encode(), self.timeout)
            retired = TopicRetired.parse(resp.header, resp.body)
        except ResponseError as exc:
            return BrokerOutcome(broker_name, address, exc.code, exc.remark or ""), None
        except (RemotingError, OSError, ValueError) as exc:
            self.pool.drop(address)
            code = ResponseCode.SERVICE_NOT_AVAILABLE
            return BrokerOutcome(broker_name, address, code, f"unreachable: {exc}"), None
        return BrokerOutcome(broker_name, address, ResponseCode.SUCCESS, ""), retired

    # --- deleteSubGroup --------------------------------------------------------------------

    async def delete_group(self, conn: Connection, req: Frame) -> Frame:
        await self.gate.require_active()
        ask = DeleteSubGroup.parse(req.header, req.body)
        bad_name = group_error(ask.group)
        if bad_name is not None:
            raise Refused(ResponseCode.BAD_REQUEST, bad_name)
        refusal = group_delete_refusal(ask.group)
        if refusal is not None:
            raise Refused(ResponseCode.SYSTEM_RESOURCE, refusal)
        own = [retry_topic(ask.group), *([dlq_topic(ask.group)] if ask.remove_dlq else [])]
        decision = self.manager.delete_group_topics(own)
        if decision.events:
            settled = await self.committer.settle(decision)
            if not settled.ok:
                raise refuse(settled)
        push = DeleteGroupInBroker(group=ask.group, remove_dlq=ask.remove_dlq)

        async def at(broker_name: str, address: str) -> BrokerOutcome:
            why = self._not_alive(broker_name, address)
            if why is not None:
                return BrokerOutcome(broker_name, address, ResponseCode.SERVICE_NOT_AVAILABLE, why)
            try:
                conn = await self.pool.get(address)
                await conn.call(push.code, *push.encode(), self.timeout)
            except ResponseError as exc:
                return BrokerOutcome(broker_name, address, exc.code, exc.remark or "")
            except (RemotingError, OSError, ValueError) as exc:
                self.pool.drop(address)
                code = ResponseCode.SERVICE_NOT_AVAILABLE
                return BrokerOutcome(broker_name, address, code, f"unreachable: {exc}")
            return BrokerOutcome(broker_name, address, ResponseCode.SUCCESS, "")

        targets = [
            (info.broker_name, r.address)
            for info in self.manager.replica_infos()
            for r in info.replicas
            if r.address
        ]
        outcomes = await asyncio.gather(*(at(name, address) for name, address in targets))
        if outcomes and all(o.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST for o in outcomes):
            raise Refused(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"consumer group {ask.group} does not exist on any broker",
            )
        for topic in own:
            self.routes.drop_topic(topic)
        log.info("consumer group deleted", group=ask.group, dlq_removed=ask.remove_dlq)
        report = DeleteReport(name=ask.group, brokers=tuple(outcomes))
        return response(req, ResponseCode.SUCCESS, *report.encode())

    # --- topicList -------------------------------------------------------------------------

    def _attrs(self, topic: str, groups: Mapping[str, int]) -> dict[str, TopicAttrs]:
        """The topic's permission and type on those of ``groups`` where not the default."""
        attrs = {g: self.manager.topic_attrs(g, topic) for g in sorted(groups)}
        return {g: a for g, a in attrs.items() if not a.default}

    async def topic_list(self, conn: Connection, req: Frame) -> Frame:
        """Every topic a live registration lists or the metadata holds, with its queue count on
        each group, by topic then cluster (one cluster with ``clusterName``)."""
        ask = TopicListQuery.parse(req.header, req.body)
        await self.gate.route_view()
        table: dict[tuple[str, str], dict[str, int]] = {}
        for reg in self.routes.registrations(self.now_ms()):
            for topic, queues in reg.topics.items():
                by_group = table.setdefault((topic, reg.cluster), {})
                by_group[reg.broker_name] = max(by_group.get(reg.broker_name, 0), queues)
        for info in self.manager.replica_infos():
            for topic, queues in self.manager.group_topics(info.broker_name).items():
                by_group = table.setdefault((topic, info.cluster), {})
                by_group[info.broker_name] = max(by_group.get(info.broker_name, 0), queues)
        entries = tuple(
            TopicEntry(topic, cluster, dict(sorted(groups.items())), self._attrs(topic, groups))
            for (topic, cluster), groups in sorted(table.items())
            if ask.cluster is None or cluster == ask.cluster
        )
        return response(req, ResponseCode.SUCCESS, *TopicList(topics=entries).encode())
