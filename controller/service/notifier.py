"""Pushes from the active controller to brokers (best effort: brokers also poll with 1004).

After every master change NOTIFY_BROKER_ROLE_CHANGED (1008) goes to every replica of the group,
after the group's topics went to the new master (UPDATE_AND_CREATE_TOPIC); topics also go to the
brokers that lack them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import structlog

from controller.documents import role_notification
from controller.metadata import ReplicaInfo, ReplicasInfoManager
from controller.metrics import ControllerMetrics
from controller.raft_driver import RaftDriver
from controller.service.tasks import BackgroundTasks
from protocol.broker_requests.admin import CreateTopic
from protocol.codes import RequestCode, ResponseCode, code_name
from protocol.topic_attrs import TopicAttrs
from remoting.client import ConnectionPool
from remoting.errors import RemotingError, ResponseError

log = structlog.get_logger(__name__)

PUSH_INFLIGHT = 32
"""Topic pushes (UPDATE_AND_CREATE_TOPIC to a broker) in flight at once per
:meth:`BrokerNotifier.push_topics`. A new master gets its group's topics before its role
(:meth:`BrokerNotifier.notify`): one request per topic, and they all started at once: at
100,000 topics on 100 groups, 100 masters elected together (brokers silent for 3 s) made
100,000 requests ready in one turn of the active controller's loop, which held it 5 s; the
other controllers elected another leader meanwhile (issue 34, failover). Per call, not over all
calls: a limit shared with the one-topic pushes of topic creation (hundreds a second, each
waiting for a broker's answer) would queue those behind one another."""


class BrokerNotifier:
    def __init__(
        self,
        driver: RaftDriver,
        manager: ReplicasInfoManager,
        pool: ConnectionPool,
        tasks: BackgroundTasks,
        metrics: ControllerMetrics | None,
        *,
        notify_timeout: float,
        replaying: Callable[[], bool] = lambda: False,
    ) -> None:
        """``replaying``: whether the entry being applied is one this controller committed
        before it started (its master changes are history then, logged at debug)."""
        self.driver = driver
        self.manager = manager
        self.pool = pool
        self.tasks = tasks
        self.metrics = metrics
        self.notify_timeout = notify_timeout
        self.replaying = replaying

    def master_changed(self, broker_name: str) -> None:
        """State machine listener: the group's master or master epoch changed."""
        info = self.manager.replica_info(broker_name)
        if info is not None:
            # A restarted controller applies its whole log again: those changes are history.
            (log.debug if self.replaying() else log.info)(
                "master changed",
                broker_name=broker_name,
                master=info.master_broker_id,
                master_epoch=info.master_epoch,
            )
        if self.driver.active and info is not None:
            self.tasks.spawn(self.notify(info), f"notify-{broker_name}")

    async def notify(self, info: ReplicaInfo) -> None:
        header, body = role_notification(info)
        timeout = self.notify_timeout
        topics = self.manager.group_topics(info.broker_name)
        if info.master_address and topics:
            # The new master gets the group's topics before it hears it is master, so it serves
            # them as created (not auto-created with default queues) from its first write on.
            await self.push_topics(info.broker_name, [info.master_address], topics, timeout)

        async def push(address: str) -> None:
            try:
                conn = await self.pool.get(address)
                resp = await conn.request(
                    RequestCode.NOTIFY_BROKER_ROLE_CHANGED, header, body, timeout
                )
                result = "ok" if resp.code == ResponseCode.SUCCESS else "refused"
            except (RemotingError, OSError, ValueError) as exc:
                log.debug("role notification failed", address=address, error=str(exc))
                self.pool.drop(address)
                result = "unreachable"
            if self.metrics is not None:
                self.metrics.notifications.labels(result=result).inc()

        addresses = sorted({r.address for r in info.replicas if r.address})
        await asyncio.gather(*(push(a) for a in addresses))

    async def push_topics(
        self, broker_name: str, addresses: list[str], topics: Mapping[str, int], timeout: float
    ) -> None:
        """UPDATE_AND_CREATE_TOPIC to each broker of the group ``broker_name`` (best effort),
        with each topic's permission and message type, at most :data:`PUSH_INFLIGHT` in flight.
        A broker in controller mode forwards it back to the controllers, where it changes
        nothing, and then creates it."""
        pushes = iter([(a, t, q) for a in addresses for t, q in sorted(topics.items())])

        async def worker() -> None:
            for address, topic, queues in pushes:
                attrs = self.manager.topic_attrs(broker_name, topic)
                await self.push_topic(address, topic, queues, timeout, attrs)

        await asyncio.gather(
            *(worker() for _ in range(min(PUSH_INFLIGHT, len(addresses) * len(topics))))
        )

    async def push_topic(
        self,
        address: str,
        topic: str,
        queues: int,
        timeout: float,
        attrs: TopicAttrs | None = None,
    ) -> str | None:
        """UPDATE_AND_CREATE_TOPIC of ``topic`` with ``queues`` queues (and ``attrs``, when
        given) to one broker: None once it has them, else why not (refused, unreachable)."""
        try:
            conn = await self.pool.get(address)
            push = CreateTopic(topic=topic, queues=queues)
            if attrs is not None:
                push = CreateTopic(
                    topic=topic,
                    queues=queues,
                    perm=attrs.perm,
                    message_type=attrs.message_type.value,
                )
            await conn.call(push.code, *push.encode(), timeout)
        except ResponseError as refused:  # answered: the connection is fine
            log.info(
                "topic push refused",
                address=address,
                topic=topic,
                code=code_name(refused.code),
                remark=refused.remark,
            )
            return f"refused: {refused.remark or code_name(refused.code)}"
        except (RemotingError, OSError, ValueError) as exc:
            log.debug("topic push failed", address=address, topic=topic, error=str(exc))
            self.pool.drop(address)
            return f"unreachable: {exc}"
        return None
