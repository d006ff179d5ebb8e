"""Administrative requests (what rmqctl's topic and cluster commands use)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from client.bootstrap import Bootstrap, describe_failure
from client.errors import BrokerError, ClientError
from client.routes import ClusterBroker, TopicRoute, fetch_cluster_info, fetch_route
from protocol.codes import RequestCode
from protocol.remoting import Scalar
from remoting.client import DEFAULT_TIMEOUT, ConnectionPool
from remoting.errors import RemotingError, ResponseError


class Admin:
    """Topic and cluster administration through the bootstrap addresses."""

    def __init__(self, bootstrap: str | Sequence[str], timeout: float = DEFAULT_TIMEOUT) -> None:
        self.timeout = timeout
        self._pool = ConnectionPool(timeout)
        self.bootstrap = Bootstrap(bootstrap, self._pool, timeout)

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._pool.close()

    async def topic_route(self, topic: str) -> TopicRoute:
        return await fetch_route(self.bootstrap, topic)

    async def cluster_info(self) -> dict[str, list[ClusterBroker]]:
        return await fetch_cluster_info(self.bootstrap)

    async def create_topic(
        self, topic: str, queues: int = 8, cluster: str | None = None
    ) -> list[str]:
        """Create or update ``topic`` with ``queues`` queues on every master of ``cluster``
        (of every cluster when None); returns the broker names, sorted."""
        clusters = await self.cluster_info()
        if cluster is not None:
            if cluster not in clusters:
                known = ", ".join(sorted(clusters)) or "none"
                raise ClientError(f"cluster {cluster!r} not found (known: {known})")
            clusters = {cluster: clusters[cluster]}
        masters = {b.broker_name: b.address for bs in clusters.values() for b in bs if b.is_master}
        if not masters:
            raise ClientError("no master broker found to create the topic on")
        header: dict[str, Scalar] = {"topic": topic, "queues": queues}

        async def one(name: str, address: str) -> str | None:
            try:
                conn = await self._pool.get(address)
                await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header, None, self.timeout)
            except ResponseError as exc:
                return f"{name} ({address}): {BrokerError(exc.code, exc.remark)}"
            except RemotingError as exc:
                return f"{name} ({address}): {describe_failure(exc)}"
            return None

        names = sorted(masters)
        failures = await asyncio.gather(*(one(n, masters[n]) for n in names))
        errors = [f for f in failures if f is not None]
        if errors:
            raise ClientError(f"creating topic {topic!r} failed on {'; '.join(errors)}")
        return names
