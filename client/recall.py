"""Recalling a scheduled message before it is delivered (RocketMQ 5.3's RecallMessage):
:meth:`client.producer.Producer.recall`'s request, sent to the master of the broker group that
stored the message and retried like a send through a failover."""

from __future__ import annotations

import asyncio
import time

from client.bootstrap import Bootstrap
from client.errors import BrokerError, ClientError, NoRouteError, SendError
from client.routes import TopicRoute, fetch_cluster_info
from client.routing_retry import CONNECTION_ERRORS, RETRIABLE_CODES, SendRouter
from protocol.broker_requests.recall import RecallRequest
from protocol.codes import ResponseCode
from protocol.message import RecordError, parse_msg_id


class Recaller:
    """Sends RECALL_MESSAGE through a producer's router (its routes, connections, deadline)."""

    def __init__(self, router: SendRouter, bootstrap: Bootstrap) -> None:
        self._router = router
        self._bootstrap = bootstrap

    async def recall(self, topic: str, msg_id: str) -> None:
        """See :meth:`client.producer.Producer.recall`."""
        router = self._router
        router.check_open()
        try:
            store_host, _offset = parse_msg_id(msg_id)
        except RecordError:
            raise ClientError(
                f"not a message id: {msg_id!r} (32 hex digits: store host and offset)"
            ) from None
        deadline = time.monotonic() + router.send_deadline
        recall = RecallRequest(topic=topic, msg_id=msg_id)
        header, _ = recall.encode()
        last: Exception | None = None
        fresh = False
        while time.monotonic() < deadline:
            try:
                route = await router.route(topic, deadline, fresh=fresh, first=not fresh)
            except NoRouteError as exc:
                last = exc
            else:
                group = await self._group_of(route, store_host)
                address = route.master_address(group)
                if address is None:
                    last = NoRouteError(f"broker group {group} has no master")
                else:
                    try:
                        conn = await router.connect(address, deadline)
                        timeout = router.attempt_timeout(deadline)
                        resp = await conn.request(recall.code, header, None, timeout)
                    except CONNECTION_ERRORS as exc:
                        last = exc
                    else:
                        if resp.code == ResponseCode.SUCCESS:
                            return
                        error = BrokerError.of(resp, address)
                        if resp.code not in RETRIABLE_CODES:
                            raise error
                        last = error
            fresh = True
            await asyncio.sleep(min(router.retry_backoff * 4, max(deadline - time.monotonic(), 0)))
        raise SendError(f"recall of {msg_id} failed until the deadline: {last}")

    async def _group_of(self, route: TopicRoute, store_host: str) -> str:
        """The broker group of ``route`` whose broker stored a message (its id's store host)."""
        for b in route.brokers:
            if store_host == b.master_address or store_host in b.slaves:
                return b.broker_name
        names = {b.broker_name for b in route.brokers}
        try:
            clusters = await fetch_cluster_info(self._bootstrap)
        except ClientError:
            clusters = {}
        for brokers in clusters.values():
            for cb in brokers:
                if cb.address == store_host and cb.broker_name in names:
                    return cb.broker_name
        if len(names) == 1:  # one group: a failover moved its master to another address
            return next(iter(names))
        raise ClientError(
            f"no broker group of topic {route.topic} has the broker {store_host} that stored "
            "this message"
        )
