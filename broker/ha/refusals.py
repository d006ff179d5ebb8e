"""Why a master refuses an HA peer, and how often it says so (pure: the time is an input).

A master closes the connection of a peer that breaks one of these rules, counts it per reason
(``rmq_broker_ha_refused_total{reason}``) and logs it, at most once per reason and peer host in
every window: a peer that reconnects in a loop cannot flood the log.

- ``no_handshake``: the stream did not begin with a valid slave handshake (an ack first, or
  anything else).
- ``not_a_replica``: the handshake's broker id is not a replica the controllers list for this
  group at the address it claims (or it is the master's own id).
- ``duplicate_id``: that broker id already has a live HA connection.
- ``ack_out_of_range``: an ack beyond the master's max offset or past what this connection was
  sent, or an ack that goes back.
- ``malformed``: any other broken message after the handshake.
- ``unauthenticated``: with authentication on, the peer did not answer the challenge before the
  handshake with proof that it holds the cluster's auth key (:mod:`protocol.ha_auth`).

Refusals never touch the SyncStateSet or the confirm offset: the connection is closed before its
handshake or ack is reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from protocol.log_throttle import LogThrottle

__all__ = [
    "ACK_OUT_OF_RANGE",
    "DUPLICATE_ID",
    "MALFORMED",
    "NOT_A_REPLICA",
    "NO_HANDSHAKE",
    "REASONS",
    "UNAUTHENTICATED",
    "Refusal",
    "RefusalLog",
]

NO_HANDSHAKE: Final = "no_handshake"
NOT_A_REPLICA: Final = "not_a_replica"
DUPLICATE_ID: Final = "duplicate_id"
ACK_OUT_OF_RANGE: Final = "ack_out_of_range"
MALFORMED: Final = "malformed"
UNAUTHENTICATED: Final = "unauthenticated"
REASONS: Final = (
    NO_HANDSHAKE,
    NOT_A_REPLICA,
    DUPLICATE_ID,
    ACK_OUT_OF_RANGE,
    MALFORMED,
    UNAUTHENTICATED,
)

DEFAULT_LOG_WINDOW_MS: Final = 60_000
_MAX_KEYS: Final = 1024


@dataclass(frozen=True, slots=True)
class Refusal:
    """A peer refused: ``reason`` is one of :data:`REASONS` (None when it is not the peer's
    fault, e.g. this broker is no longer master: closed, not counted); ``detail`` says why.
    ``unknown_yet``: refused only by the controllers' list of replicas as this broker last
    heard it, which a newer answer may change (a slave that registered since)."""

    reason: str | None
    detail: str
    unknown_yet: bool = False

    def __str__(self) -> str:
        return self.detail


class RefusalLog(LogThrottle[tuple[str, str]]):
    """Counts refusals per reason and decides which to log (one per reason and peer host in
    every window)."""

    __slots__ = ("counts",)

    def __init__(self, window_ms: int = DEFAULT_LOG_WINDOW_MS) -> None:
        super().__init__(window_ms, _MAX_KEYS)
        self.counts: dict[str, int] = dict.fromkeys(REASONS, 0)
        """Refusals per reason since start (every reason present, at 0 first)."""

    def record(self, reason: str, host: str, now_ms: int) -> int | None:
        """Count one refusal; None when it is not to be logged, else how many refusals of this
        reason from ``host`` went unlogged before it."""
        self.counts[reason] += 1
        return self.admit((reason, host), now_ms)
