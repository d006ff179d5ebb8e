"""A replay that passes over a damaged record (issue 31: POP revive and transaction records are
CommitLog records): the store knows the damage from then on, and once it is repaired (here
written back as ``RecordRepair`` does), a ``PerMasterEpoch`` service builds its state again at
its next need, with that record. Real store; the service is the smallest one that replays a
topic with ``read_system_topic``, as the POP and transaction services do."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from broker.service_host import PerMasterEpoch
from broker.system_topic import read_system_topic
from protocol.message import HEAD_SIZE
from storage.store import MessageStore
from tests.broker.test_repair_fetch import flip
from tests.storage.support import TOPIC, messages, open_store


@dataclass
class Role:
    master_epoch: int = 1


@dataclass
class Gate:
    role: Role = field(default_factory=Role)


@dataclass
class Host:
    store: MessageStore
    gate: Gate = field(default_factory=Gate)


class Replayed(PerMasterEpoch[list[bytes]]):
    """Its state: the bodies of queue 0 of TOPIC, as a replay reads them."""

    def __init__(self, host: Host) -> None:
        self.host = host  # type: ignore[assignment]
        self.state = None
        self._epoch = -1
        self.builds = 0

    def _rebuild(self) -> list[bytes]:
        self.builds += 1
        return [r.body for r in read_system_topic(self.host.store, TOPIC)]


def test_a_state_whose_replay_passed_over_damage_is_built_again_once_it_is_repaired(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path)
    try:
        sent = messages(10, 200)
        offsets = store.put(TOPIC, 0, sent, 1_700_000_000_000).physical_offsets
        store.flush()
        at, size = offsets[4], offsets[5] - offsets[4]
        intact = store.repairs.record_bytes(at, size)
        flip(store, at + HEAD_SIZE + 9)
        service = Replayed(Host(store))

        assert len(service.ready()) == 9  # passed over, now known as damage
        assert store.repairs.unrepaired() == [(at, size)]
        assert len(service.ready()) == 9 and service.builds == 1  # not built again for nothing

        store.repairs.repair(at, intact)()  # what RecordRepair writes back from a replica

        assert service.ready() == [m.body for m in sent]
        assert service.builds == 2
        service.ready()
        assert service.builds == 2
    finally:
        store.close()
