"""May this broker take a write now: the one check every write goes through (a leaf module).

A write is refused with :class:`WriteRefused` (its ``code`` and ``remark`` go into the answer)
when this broker is not the master, when its write lease from the controllers lapsed (fenced),
or when its SyncStateSet is smaller than ``min_in_sync_replicas``. Request processors and the
services that write on their own (timer deliveries, POP revives, transaction check-backs) ask
the same gate, so they refuse alike.
"""

from __future__ import annotations

import time
from typing import Protocol

from broker.role import RoleCell, RoleState, fence_remark
from protocol.codes import ResponseCode
from protocol.refusal import RequestRefused

__all__ = ["InSyncReplicas", "WriteGate", "WriteRefused"]


class WriteRefused(RequestRefused):
    """A write this broker may not take now (:meth:`WriteGate.check_writable`): the code and remark to
    answer with."""


class InSyncReplicas(Protocol):
    """What the gate asks of replication (:class:`broker.ha.service.HAService`)."""

    def has_min_in_sync_replicas(self, n: int) -> bool: ...


class WriteGate:
    """The write check of one broker: its role, its lease, its in-sync replicas."""

    def __init__(
        self,
        role_cell: RoleCell,
        *,
        listen: str,
        broker_name: str,
        controller_mode: bool,
        min_in_sync_replicas: int,
    ) -> None:
        self.role_cell = role_cell
        self._listen = listen
        self._broker_name = broker_name
        self._controller_mode = controller_mode
        self._min_in_sync = min_in_sync_replicas
        self.replicas: InSyncReplicas | None = None
        """Controller mode: replication (set once, before the broker serves)."""

    @property
    def role(self) -> RoleState:
        """The current role (a frozen value: read its fields from one ``role`` read)."""
        return self.role_cell.current

    def check_writable(self) -> None:
        """Raises :class:`WriteRefused` when this broker may not take a write now."""
        role = self.role
        if not role.is_master:
            raise WriteRefused(
                ResponseCode.NOT_MASTER,
                f"broker {self._listen} is not the master of {self._broker_name}",
            )
        if not self._controller_mode:
            return
        # ``role.fenced`` (for logs and metrics) is this same lease seen from the heartbeat
        # loop; the lease itself is the check.
        now = time.monotonic()
        if now > role.lease_expires:
            raise WriteRefused(
                ResponseCode.MASTER_FENCED,
                fence_remark(self._listen, self._broker_name, role.lease_expires, now),
            )
        replicas = self.replicas
        if replicas is not None and not replicas.has_min_in_sync_replicas(self._min_in_sync):
            raise WriteRefused(
                ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH,
                f"the SyncStateSet of {self._broker_name} has fewer than "
                f"min_in_sync_replicas = {self._min_in_sync} brokers",
            )

    def writable(self) -> bool:
        """Whether a write would be taken now (:meth:`check_writable` without the reason)."""
        try:
            self.check_writable()
        except WriteRefused:
            return False
        return True
