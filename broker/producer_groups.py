"""Producer groups' live clients, for rmqctl producerConnection (GET_PRODUCER_CONNECTION_LIST).

A producer is listed while it heart-beats with its group: our SDK's transactional producers, the
gRPC front's relay for its transactional producers, classic clients' producers (RocketMQ's
clients heart-beat every producer group they run). A client leaves when its connection closes,
or after :data:`PRODUCER_EXPIRY_MS` of silence: RocketMQ's clients heart-beat every 30 s, so the
consumers' ``client_expiry_ms`` (10 s) would drop them between two heartbeats. Time is passed in
(ms).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.consumer_groups import CHANNEL_EXPIRED_MS, ClientInfo, ConnectionIndex, unindex
from protocol.broker_requests.producers import ProducerConnection

__all__ = ["PRODUCER_EXPIRY_MS", "ProducerGroups"]

PRODUCER_EXPIRY_MS = CHANNEL_EXPIRED_MS
"""A producer silent this long is forgotten (RocketMQ's channelExpiredTimeout)."""


@dataclass(slots=True)
class _Producer:
    address: str
    info: ClientInfo
    last_seen_ms: int
    connection_id: int


class ProducerGroups:
    def __init__(self) -> None:
        self._groups: dict[str, dict[str, _Producer]] = {}
        self._by_connection: ConnectionIndex = {}
        """connection id -> (group, client id) heard over it: a closed connection drops its
        clients without a scan over every group's (issue 34)."""

    def heartbeat(
        self,
        group: str,
        client_id: str,
        now_ms: int,
        connection_id: int,
        address: str,
        info: ClientInfo,
    ) -> None:
        members = self._groups.setdefault(group, {})
        old = members.get(client_id)
        if old is not None and old.connection_id != connection_id:
            unindex(self._by_connection, old.connection_id, (group, client_id))
        members[client_id] = _Producer(address, info, now_ms, connection_id)
        self._by_connection.setdefault(connection_id, set()).add((group, client_id))

    def connection_closed(self, connection_id: int) -> None:
        """Forget the clients heard over this connection (only those: no scan of the rest)."""
        for group, cid in self._by_connection.pop(connection_id, set()):
            members = self._groups.get(group)
            if members is not None and cid in members:
                del members[cid]
                if not members:
                    del self._groups[group]

    def live(self, group: str, now_ms: int) -> list[ProducerConnection]:
        """The group's clients heard from within :data:`PRODUCER_EXPIRY_MS`, by client id (the
        silent ones are forgotten)."""
        members = self._groups.get(group, {})
        for cid in [c for c, p in members.items() if now_ms - p.last_seen_ms > PRODUCER_EXPIRY_MS]:
            unindex(self._by_connection, members.pop(cid).connection_id, (group, cid))
        if not members:
            self._groups.pop(group, None)
        return [
            ProducerConnection(
                cid, p.address, p.info.language, p.info.version, p.info.protocol, p.last_seen_ms
            )
            for cid, p in sorted(members.items())
        ]
