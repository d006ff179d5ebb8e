"""What every service the composition root builds is given of its broker (a leaf module).

:mod:`broker.compose` fills each service's host (``PopHost``, ``TimerHost``,
``TransactionHost``: this Protocol and what that service needs besides) with these parts of the
broker's context and nothing more: the service never holds the context.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from broker.appender import Appender
from broker.config import BrokerConfig
from broker.metrics import BrokerMetrics
from broker.write_gate import WriteGate
from storage.store import MessageStore

__all__ = ["PerMasterEpoch", "ServiceHost"]

S = TypeVar("S")


class ServiceHost(Protocol):
    """The store it reads, the appender its records go through, the write gate it asks before
    writing, its figures and its settings."""

    @property
    def cfg(self) -> BrokerConfig: ...

    @property
    def store(self) -> MessageStore: ...

    @property
    def appender(self) -> Appender: ...

    @property
    def gate(self) -> WriteGate: ...

    @property
    def metrics(self) -> BrokerMetrics: ...


class PerMasterEpoch(Generic[S]):
    """A service whose in-memory state (POP's in-flight set, the open transactions) belongs to
    one master epoch: built from the log by ``_rebuild`` the first time this master needs it,
    and again under a new epoch (the master before may have written records this one never
    applied).

    A rebuild passes over a record that fails its checks (``broker.system_topic``), which makes
    the damage known to the store: the broker has it repaired from a replica (issue 31,
    ``broker.repair``). Once damage the store knew of when the state was built is repaired, the
    state is built again at its next need, with the repaired record."""

    host: ServiceHost
    state: S | None
    _epoch: int
    _damage_at_build: frozenset[int] = frozenset()

    def ready(self) -> S:
        """The state, built from the log when this master has none yet (or damage its build
        passed over was repaired since). The caller checked that this broker is master
        (``check_writable``)."""
        epoch = self.host.gate.role.master_epoch
        state = self.state
        if state is None or epoch != self._epoch or self._repaired_since_built():
            state = self.state = self._rebuild()
            self._epoch = epoch
            self._damage_at_build = self._known_damage()
        return state

    def current(self) -> S | None:
        """The state while this broker is master in the epoch it was built for, else None (a
        slave, or a new master that has not built it yet): what figures about it report."""
        role = self.host.gate.role
        if not role.is_master or role.master_epoch != self._epoch:
            return None
        return self.state

    def _known_damage(self) -> frozenset[int]:
        return frozenset(offset for offset, _size in self.host.store.repairs.unrepaired())

    def _repaired_since_built(self) -> bool:
        """Was damage the store knew of when the state was built (a record its rebuild may have
        passed over) repaired since?"""
        return bool(self._damage_at_build) and not self._damage_at_build <= self._known_damage()

    def _rebuild(self) -> S:
        raise NotImplementedError
