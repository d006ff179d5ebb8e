"""The fencing lease a master writes under (docs/architecture.md, "Fencing lease").

``broker_heartbeat_timeout_ms`` from the moment the broker *sent* the last heartbeat the active
controller answered, as long as that answer named it master at its epoch (slaves renew theirs
the same way, so a slave that becomes master already holds one; a registration or a role change
renews nothing: the controllers time a broker out from its heartbeats alone). Every write checks
it, so a master cut off from the controllers (or frozen, then resumed) refuses writes with
MASTER_FENCED before the controllers can have declared it dead and elected another, and a
deposed master whose heartbeat is answered again does not write before it learned its new role.

Written from the controller link's thread: the lease is one swap of the role (``broker.role``).
"""

from __future__ import annotations

import time

import structlog

from broker.role import RoleCell
from protocol.controller_requests.heartbeats import HeartbeatAnswer

log = structlog.get_logger(__name__)


def monotonic() -> float:
    return time.monotonic()


class FencingLease:
    def __init__(self, role: RoleCell, heartbeat_timeout_ms: int) -> None:
        self._role = role
        self._timeout_ms = heartbeat_timeout_ms
        self.last_contact = monotonic()
        """When the last heartbeat the active controller answered was sent."""

    def answered(self, at: float, answer: HeartbeatAnswer, broker_id: int) -> bool:
        """An answer from the active controller to a heartbeat sent at ``at``: renew the lease,
        unless this broker takes writes and the answer names another master or a newer epoch.
        A deposed master (frozen, partitioned) whose heartbeat is answered again must not write
        on that lease until it learned its new role: True then (the caller polls at once). An
        answer that names no one (a controller of an earlier version) renews it, for the
        broker's own timeout unless the answer tells the controller's."""
        role = self._role.current
        master, epoch = answer.master_broker_id, answer.master_epoch
        named = epoch is not None
        if role.is_master and named and (master, epoch) != (broker_id, role.master_epoch):
            return True
        held = answer.heartbeat_timeout_ms
        self.renew(at, held if held > 0 else None)
        return False

    def renew(self, at: float, held_ms: int | None = None) -> None:
        """The active controller answered a heartbeat sent at ``at``: renew the lease, for the
        shorter of our own timeout and the one the controller holds us to (it caps what a
        broker may ask for: ``broker_heartbeat_timeout_max_ms``)."""
        timeout_ms = self._timeout_ms
        if held_ms is not None:
            timeout_ms = min(timeout_ms, held_ms)
        self.last_contact = at
        self._role.swap(lease_expires=at + timeout_ms / 1000)
        self.set_fenced(False)

    def silent_for(self, now: float) -> float:
        """Seconds since the last answered heartbeat was sent."""
        return now - self.last_contact

    def check(self, now: float) -> None:
        """Fence a master whose last answered heartbeat is older than the timeout."""
        if self._role.current.is_master and now - self.last_contact > self._timeout_ms / 1000:
            self.set_fenced(True)

    def set_fenced(self, fenced: bool) -> None:
        if fenced != self._role.current.fenced:
            self._role.swap(fenced=fenced)
            if fenced:
                log.error(
                    "master fenced: active controller unreachable; rejecting writes",
                    timeout_ms=self._timeout_ms,
                )
            else:
                log.info("master unfenced: active controller reachable again")
