"""Helpers for the metadata tests: commit decisions, liveness stubs, ready-made groups, static
topics' mapping items and re-mapped queues."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from hypothesis import strategies as st

from controller.metadata import (
    Applied,
    Decision,
    ElectionInfo,
    ReplicasInfoManager,
    decode_event,
    encode_event,
)
from protocol.codes import ResponseCode as RC
from protocol.static_topic import LogicalQueue, MappingItem

CLUSTER = "DefaultCluster"
GROUP = "broker-a"


def commit(manager: ReplicasInfoManager, decision: Decision[Any]) -> Decision[Any]:
    """What the driver does: append the events in order (through the codec, as Raft would
    carry them), apply them up to the first rejection, answer the settled decision."""
    outcomes: list[Applied] = []
    for ev in decision.events:
        outcomes.append(manager.apply(decode_event(encode_event(ev))))
        if not outcomes[-1].ok:
            break
    return decision.settle(outcomes)


def alive_all(broker_name: str, broker_id: int) -> bool:
    return True


def alive_none(broker_name: str, broker_id: int) -> bool:
    return False


def alive_only(*ids: int) -> Callable[[str, int], bool]:
    return lambda broker_name, broker_id: broker_id in ids


def info(epoch: int = 0, offset: int = 0, priority: int = 0) -> ElectionInfo:
    return ElectionInfo(epoch=epoch, max_offset=offset, election_priority=priority)


def view(*ids: int) -> dict[int, ElectionInfo]:
    """Alive brokers with identical heartbeats (the lowest id wins ties)."""
    return {broker_id: info() for broker_id in ids}


def address(broker_id: int) -> str:
    return f"127.0.0.1:{10900 + 10 * broker_id}"


def register_group(
    manager: ReplicasInfoManager, count: int = 3, name: str = GROUP, cluster: str = CLUSTER
) -> None:
    """Brokers 1..count of ``name`` run the whole BrokerId flow and register."""
    for _ in range(count):
        next_id = manager.get_next_broker_id(cluster, name).response
        assert next_id is not None
        broker_id = next_id.next_broker_id
        code = f"{address(broker_id)};code-{broker_id}"
        applied = commit(manager, manager.apply_broker_id(cluster, name, broker_id, code))
        assert applied.code == RC.SUCCESS, applied.remark
        registered = commit(
            manager, manager.register_broker(cluster, name, broker_id, address(broker_id))
        )
        assert registered.code == RC.SUCCESS, registered.remark


def elect(
    manager: ReplicasInfoManager, alive_ids: Iterable[int], name: str = GROUP, **kwargs: Any
) -> Decision[Any]:
    return commit(manager, manager.elect_master(name, alive_replicas=view(*alive_ids), **kwargs))


def group_with_master(count: int = 3, master: int = 1) -> ReplicasInfoManager:
    """A group of ``count`` registered brokers whose first election made ``master`` master
    (masterEpoch 1, SyncStateSet {master}, syncStateSetEpoch 1)."""
    manager = ReplicasInfoManager()
    register_group(manager, count)
    elected = elect(manager, [master])
    assert elected.code == RC.SUCCESS, elected.remark
    return manager


def two_groups() -> ReplicasInfoManager:
    """broker-a and broker-b, one broker each (id 1), each elected master."""
    m = ReplicasInfoManager()
    for name in ("broker-a", "broker-b"):
        register_group(m, 1, name)
        elect(m, [1], name)
    return m


class CountingDict(dict[Any, Any]):
    """A dict that counts how often it is walked (``items()``, ``values()``, iteration) and the
    entries read (each key iterated or looked up with ``[]``, each entry of ``items()`` and
    ``values()``): put in place of a table's dict to show an operation reads only its index."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.walks = 0
        self.reads = 0

    def items(self) -> Any:
        self.walks += 1
        self.reads += len(self)
        return super().items()

    def values(self) -> Any:
        self.walks += 1
        self.reads += len(self)
        return super().values()

    def __iter__(self) -> Iterator[Any]:
        self.walks += 1
        for key in super().__iter__():
            self.reads += 1
            yield key

    def __getitem__(self, key: Any) -> Any:
        self.reads += 1
        return super().__getitem__(key)


def mapping_item(
    broker: str, queue: int, start: int, gen: int, end: int | None, physical_start: int = 0
) -> MappingItem:
    """A static topic's mapping item of generation ``gen``: ``broker``'s physical queue
    ``queue``, from its offset ``physical_start``, holds the logical offsets from ``start`` up to
    ``end`` (None: the newest item, still open)."""
    return MappingItem(
        broker_name=broker,
        physical_queue=queue,
        logical_start=start,
        physical_start=physical_start,
        generation=gen,
        logical_end=end,
    )


@st.composite
def remapped_queues(draw: st.DrawFn, min_sealed: int = 0) -> LogicalQueue:
    """A logical queue re-mapped a few times: ``min_sealed`` to five sealed items, each of 0 to 6
    logical offsets from a physical offset 0 to 4, then the newest, open item. Generation ``g``
    is on physical queue ``g`` of broker ``b{g % 3}``."""
    items: list[MappingItem] = []
    start = 0
    for gen in range(draw(st.integers(min_sealed, 5))):
        physical_start = draw(st.integers(0, 4))
        count = draw(st.integers(0, 6))
        items.append(mapping_item(f"b{gen % 3}", gen, start, gen, start + count, physical_start))
        start += count
    gen = len(items)
    items.append(mapping_item(f"b{gen % 3}", gen, start, gen, None))
    return tuple(items)
