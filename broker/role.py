"""The broker's role: one frozen value, replaced whole by its one writer.

Readers (request processors, the metrics scrape thread) take :attr:`RoleCell.current` once and
read its fields from that value, so they never see half a role change (a new epoch with the old
master address, a master flag without its lease). The one writer is the ReplicasManager, which
flips the role as the controllers say (a lone broker run without controllers keeps the role it
started with); it builds the next value with :meth:`RoleCell.swap`, from the main loop and from
the controller link's thread (the lease; :mod:`broker.controller_link`), so a swap holds a lock
while it copies; reading needs none.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

__all__ = ["RoleCell", "RoleState", "fence_remark"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RoleState:
    """The broker's role as the group's metadata says; a lone broker is always master."""

    broker_id: int = 0
    is_master: bool = True
    master_address: str = ""
    master_epoch: int = 0
    lease_expires: float = 0.0
    """Controller mode: the monotonic time until which the master may take writes, renewed by
    answered heartbeats; past it, writes answer MASTER_FENCED."""
    fenced: bool = False
    """The lease seen from the heartbeat loop (logs, metrics); the lease itself is the check."""

    @property
    def name(self) -> str:
        """``master``, ``slave``, or ``none`` (no master known yet)."""
        if self.is_master:
            return "master"
        return "slave" if self.master_address else "none"


class RoleCell:
    """Holds the current :class:`RoleState`; a change replaces it in one assignment."""

    __slots__ = ("_lock", "_state")

    def __init__(self, initial: RoleState) -> None:
        self._state = initial
        self._lock = threading.Lock()

    @property
    def current(self) -> RoleState:
        return self._state

    def swap(
        self,
        *,
        broker_id: int | None = None,
        is_master: bool | None = None,
        master_address: str | None = None,
        master_epoch: int | None = None,
        lease_expires: float | None = None,
        fenced: bool | None = None,
    ) -> RoleState:
        """Replace the role with a copy of it with the fields given changed; returns the new one.
        Called only by the role's one writer (see the module docstring)."""
        with self._lock:  # two threads swapping at once must not lose either's change
            old = self._state
            new = RoleState(
                broker_id=old.broker_id if broker_id is None else broker_id,
                is_master=old.is_master if is_master is None else is_master,
                master_address=old.master_address if master_address is None else master_address,
                master_epoch=old.master_epoch if master_epoch is None else master_epoch,
                lease_expires=old.lease_expires if lease_expires is None else lease_expires,
                fenced=old.fenced if fenced is None else fenced,
            )
            self._state = new
        return new


def fence_remark(master: str, group: str, lease_expires: float, now: float) -> str:
    """The remark of a write refused with MASTER_FENCED: the master's write lease, renewed by each
    heartbeat the active controller answers, ran out at ``lease_expires`` (monotonic seconds), or
    was never granted (0.0: no heartbeat of this broker answered since it started)."""
    if lease_expires == 0.0:
        return (
            f"master {master} of {group} is fenced: the active controller has answered none of "
            "its heartbeats since it started"
        )
    return (
        f"master {master} of {group} is fenced: its write lease, renewed by each heartbeat the "
        f"active controller answers, ran out {max(0.0, now - lease_expires) * 1000:.0f} ms ago"
    )
