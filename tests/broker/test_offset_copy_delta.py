"""A slave's copy of its master's consumer offsets (broker/replicas/config_sync.py) asks only for
what changed since the master's last counter (issue 34): the master's answer for a copy when
nothing changed holds no group, and after any sequence of commits, resets (a lower offset),
deleted groups and deleted topics, each copy leaves the slave's table equal to the master's.
Through the real codec, without sockets (the process test is tests/cluster/
test_offset_copy_process.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.broker_stats import counters
from broker.processors.admin import offset_copy
from broker.replicas.config_sync import SlaveConfigSync
from broker.role import RoleState
from protocol.pull import AllConsumerOffsetsQuery, ConsumerOffsetTable
from storage.config_files import ConsumerOffsetStore
from tests.broker.support import config_sync_context

GROUPS = st.sampled_from(["g1", "g2", "g3"])
TOPICS = st.sampled_from(["A", "B"])
OPS = st.one_of(
    st.tuples(st.just("commit"), GROUPS, TOPICS, st.integers(0, 2), st.integers(0, 50)),
    st.tuples(st.just("delete_group"), GROUPS),
    st.tuples(st.just("delete_topic"), TOPICS),
    st.tuples(st.just("copy")),
)


def answer(
    master: ConsumerOffsetStore, query: AllConsumerOffsetsQuery, limit: int
) -> ConsumerOffsetTable:
    """What broker/processors/admin.py all_offsets answers (pages of ``limit`` groups), through
    the codec both ways."""
    table = offset_copy(master, AllConsumerOffsetsQuery.parse(*query.encode()), limit)
    return ConsumerOffsetTable.parse(*table.encode())


class Copier:
    """The slave's side: asks from the counter of the last answer, as SlaveConfigSync.run."""

    def __init__(self, tmp_path: Path) -> None:
        self.ctx = config_sync_context(tmp_path, role=RoleState(is_master=False))
        cfg: Any = SimpleNamespace(slave_config_sync_interval_ms=1000)
        self.sync = SlaveConfigSync(cfg, self.ctx, pool=None, topics_changed=lambda: None)  # type: ignore[arg-type]
        self.since: tuple[str, int] | None = None

    def copy(self, master: ConsumerOffsetStore, limit: int = 0) -> ConsumerOffsetTable:
        """One round: the first answer's table (pages of ``limit`` groups, asked until none
        is left, as SlaveConfigSync.run asks)."""
        first: ConsumerOffsetTable | None = None
        while True:
            query = AllConsumerOffsetsQuery(
                with_times=True,
                since_incarnation=None if self.since is None else self.since[0],
                since_counter=None if self.since is None else self.since[1],
            )
            table = answer(master, query, limit)
            assert self.sync._copy_offsets(table, self.ctx.deletions.count)
            assert table.incarnation is not None and table.counter is not None
            self.since = (table.incarnation, table.counter)
            first = table if first is None else first
            if not table.more:
                return first


def test_a_copy_when_nothing_changed_holds_no_group(tmp_path: Path) -> None:
    master = ConsumerOffsetStore(tmp_path / "master")
    for i in range(200):
        master.commit(f"g{i}", "T", 0, i, 1_700_000_000_000 + i)
    slave = Copier(tmp_path / "slave")
    first = slave.copy(master)
    assert not first.delta and len(first.offsets) == 200
    idle = slave.copy(master)
    assert idle.delta and dict(idle.offsets) == {} and idle.deleted_groups == ()
    master.commit("g7", "T", 0, 3, 1_700_000_001_000)  # a reset of one group
    one = slave.copy(master)
    assert one.delta and dict(one.offsets) == {"g7": {"T": {0: 3}}}
    assert slave.ctx.offsets.snapshot() == master.snapshot()
    for i in range(0, 200, 2):
        master.commit(f"g{i}", "T", 0, 1_000 + i)
    page = slave.copy(master, limit=64)  # 100 changed: pages of 64 and 36
    assert page.more and len(page.offsets) == 64
    assert slave.ctx.offsets.snapshot() == master.snapshot()


def test_a_restarted_master_is_copied_whole_again(tmp_path: Path) -> None:
    master = ConsumerOffsetStore(tmp_path / "master")
    master.commit("g", "T", 0, 5)
    master.persist()
    slave = Copier(tmp_path / "slave")
    slave.copy(master)
    restarted = ConsumerOffsetStore(tmp_path / "master")
    restarted.load()
    restarted.commit("h", "T", 0, 1)  # its counter is 1 again, as the slave's from before
    again = slave.copy(restarted)
    assert not again.delta and set(again.offsets) == {"g", "h"}


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(OPS, max_size=40), limit=st.integers(0, 2))
def test_each_copy_leaves_the_slave_equal_to_the_master(
    ops: list[tuple[Any, ...]], limit: int
) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        master = ConsumerOffsetStore(Path(tmp) / "master")
        slave = Copier(Path(tmp) / "slave")
        clock = 1_700_000_000_000
        for op in [*ops, ("copy",)]:
            clock += 1
            if op[0] == "commit":
                master.commit(op[1], op[2], op[3], op[4], clock)
            elif op[0] == "delete_group":
                master.delete_group(op[1])
            elif op[0] == "delete_topic":
                master.delete_topic(op[1])
            else:
                slave.copy(master, limit)
                assert slave.ctx.offsets.snapshot() == master.snapshot()
                assert slave.ctx.offsets.snapshot_times() == master.snapshot_times()
                assert master.consumed() == counters({}, master.snapshot()).consumed
                assert slave.ctx.offsets.consumed() == master.consumed()
