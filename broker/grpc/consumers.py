"""The gRPC endpoint's consumers, the pure part: which official-client consumers are alive (by
the ``x-mq-client-id`` they send) and the deliveries of push consumers that the endpoint keeps
hidden for them (``auto_renew``). Time is an input (epoch ms); :mod:`broker.grpc.consume`
drives it.

A push consumer never changes the invisible time of what it received: RocketMQ's proxy renews it
while the client holds the message, and so does this endpoint. The client keeps the receipt
handle it was given; each renewal gives the message a new one, so the table maps the client's
handle to the current one, and an ack or a nack with the client's handle uses the current.
Renewals stop when the client acks or nacks the message, when the client terminates or goes
silent (:data:`CLIENT_SILENT_MS`), and after :data:`MAX_HOLD_MS` (the message then comes back
to the group at its deadline, as any unacked message does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

CLIENT_SILENT_MS: Final = 30_000
"""A client not heard from for this long (its heartbeats come every 10 s) is gone."""
BROKER_HEARTBEAT_MS: Final = 3_000
"""How often the endpoint heart-beats a live consumer into its group on the broker (whose
``client_expiry_ms`` is 10 s by default)."""
RENEW_AHEAD_MS: Final = 10_000
"""A held delivery is renewed once its deadline is this close."""
MAX_HOLD_MS: Final = 3600 * 1000
"""Longest a delivery is renewed for one client."""


@dataclass(frozen=True, slots=True)
class GrpcClient:
    """Who a gRPC client says it is (its ``x-mq-language`` and ``x-mq-client-version``
    headers) and its address (host:port), for consumerConnection."""

    language: str
    version: str
    address: str


def peer_address(context: Any) -> str:
    """The calling client's address as gRPC names its peer, without the scheme:
    ``ipv4:127.0.0.1:5000`` -> ``127.0.0.1:5000`` (any other peer as it is)."""
    peer = str(context.peer() or "")
    return peer.split(":", 1)[1] if peer.startswith(("ipv4:", "ipv6:")) else peer


def grpc_client(context: Any) -> GrpcClient:
    """The calling client's :class:`GrpcClient` ("" for a header it did not send)."""
    headers = {k: str(v) for k, v in context.invocation_metadata() or ()}
    return GrpcClient(
        headers.get("x-mq-language", ""),
        headers.get("x-mq-client-version", ""),
        peer_address(context),
    )


@dataclass(slots=True)
class ConsumerClient:
    client_id: str
    group: str
    topics: tuple[str, ...]
    last_seen_ms: int
    heartbeat_ms: int = 0
    """When the endpoint last heart-beat it into its group on the broker (0: never)."""
    who: GrpcClient | None = None
    """What its last Heartbeat call said of it (the endpoint's own heartbeats repeat it)."""

    @property
    def topic(self) -> str:
        """The topic it is a member for (the broker keeps one per member)."""
        return self.topics[0] if self.topics else ""


class Clients:
    """Live consumer clients of this endpoint."""

    def __init__(self) -> None:
        self._clients: dict[str, ConsumerClient] = {}

    def __len__(self) -> int:
        return len(self._clients)

    def get(self, client_id: str) -> ConsumerClient | None:
        return self._clients.get(client_id)

    def seen(
        self, client_id: str, group: str, now_ms: int, topics: tuple[str, ...] | None = None
    ) -> ConsumerClient:
        """Record a sign of life (heartbeat, receive, settings); ``topics`` from its settings."""
        client = self._clients.get(client_id)
        if client is None or client.group != group:
            client = self._clients[client_id] = ConsumerClient(
                client_id, group, topics or (client.topics if client else ()), now_ms
            )
        client.last_seen_ms = now_ms
        if topics:
            client.topics = topics
        return client

    def remove(self, client_id: str) -> ConsumerClient | None:
        return self._clients.pop(client_id, None)

    def expire(self, now_ms: int) -> list[ConsumerClient]:
        gone = [c for c in self._clients.values() if now_ms - c.last_seen_ms > CLIENT_SILENT_MS]
        for client in gone:
            del self._clients[client.client_id]
        return gone

    def heartbeat_due(self, now_ms: int) -> list[ConsumerClient]:
        return [c for c in self._clients.values() if now_ms - c.heartbeat_ms >= BROKER_HEARTBEAT_MS]


@dataclass(slots=True)
class Held:
    """A push consumer's delivery the endpoint renews."""

    original: str
    """The receipt handle the client holds."""
    current: str
    """The handle the broker knows now (after the last renewal)."""
    group: str
    topic: str
    client_id: str
    deadline_ms: int
    since_ms: int


class RenewTable:
    """Held deliveries by the client's receipt handle."""

    def __init__(self) -> None:
        self._held: dict[str, Held] = {}

    def __len__(self) -> int:
        return len(self._held)

    def hold(
        self, handle: str, group: str, topic: str, client_id: str, deadline_ms: int, now_ms: int
    ) -> None:
        self._held[handle] = Held(handle, handle, group, topic, client_id, deadline_ms, now_ms)

    def get(self, handle: str) -> Held | None:
        return self._held.get(handle)

    def current(self, handle: str) -> str:
        """The handle to use at the broker for the client's ``handle``."""
        held = self._held.get(handle)
        return held.current if held is not None else handle

    def release(self, handle: str) -> Held | None:
        return self._held.pop(handle, None)

    def renewed(self, handle: str, new_handle: str, deadline_ms: int) -> None:
        held = self._held.get(handle)
        if held is not None:
            held.current = new_handle
            held.deadline_ms = deadline_ms

    def due(self, now_ms: int) -> list[Held]:
        """Deliveries to renew now (deadline within :data:`RENEW_AHEAD_MS`); those held longer
        than :data:`MAX_HOLD_MS` or past their deadline are released instead (the message comes
        back to the group)."""
        out: list[Held] = []
        for held in list(self._held.values()):
            if held.deadline_ms <= now_ms or now_ms - held.since_ms >= MAX_HOLD_MS:
                del self._held[held.original]
            elif held.deadline_ms - now_ms <= RENEW_AHEAD_MS:
                out.append(held)
        return out

    def release_client(self, client_id: str) -> list[Held]:
        gone = [h for h in self._held.values() if h.client_id == client_id]
        for held in gone:
            del self._held[held.original]
        return gone
