"""Every broker group's ReplicaInfo, built once per applied Raft index (issue 34).

The metadata changes only when the Raft driver applies an entry or installs a snapshot, and
both move ``driver.applied``. So the active controller's per-heartbeat read of the broker's
group and its scheduler's scan, ten times a second over every group, read the infos built the
last time the index moved instead of building every group's again: a heartbeat or a scan in a
quiet cluster builds nothing. No clock here; the index is the only key.
"""

from __future__ import annotations

from controller.metadata import ReplicasInfoManager
from controller.metadata.results import ReplicaInfo
from controller.raft_driver import RaftDriver


class GroupView:
    __slots__ = ("_at", "_by_name", "_driver", "_infos", "_manager")

    def __init__(self, driver: RaftDriver, manager: ReplicasInfoManager) -> None:
        self._driver = driver
        self._manager = manager
        self._at = -1
        self._infos: list[ReplicaInfo] = []
        self._by_name: dict[str, ReplicaInfo] = {}

    def _current(self) -> None:
        applied = self._driver.applied
        if applied != self._at:
            infos = self._manager.replica_infos()
            self._infos = infos
            self._by_name = {info.broker_name: info for info in infos}
            self._at = applied

    def infos(self) -> list[ReplicaInfo]:
        """Every group's metadata, ascending by broker name: the same list object until the
        metadata changes (callers may compare it by identity; they must not mutate it)."""
        self._current()
        return self._infos

    def get(self, broker_name: str) -> ReplicaInfo | None:
        """``broker_name``'s metadata, or None for a group the metadata does not have."""
        self._current()
        return self._by_name.get(broker_name)
