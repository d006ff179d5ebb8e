"""The consistent point (DESIGN.md section 5) on RocketMQ's failover scenarios.

Histories are written ``[(epoch, startOffset), ...]``; each scenario names what happened.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.ha.truncation import (
    ConsistentPoint,
    EmptyLog,
    NoCommonEntry,
    TruncationDecision,
    find_consistent_point,
)
from protocol.ha import EpochEntry, check_epoch_entries
from tests.hypothesis_profiles import examples


def H(*pairs: tuple[int, int]) -> list[EpochEntry]:
    return [EpochEntry(epoch=e, start_offset=s) for e, s in pairs]


def decide(
    local: list[EpochEntry], local_max: int, master: list[EpochEntry], master_max: int
) -> TruncationDecision:
    return find_consistent_point(
        local_entries=local,
        local_max_offset=local_max,
        master_entries=master,
        master_max_offset=master_max,
    )


@pytest.mark.parametrize(
    ("local", "local_max", "master", "master_max", "offset", "epoch"),
    [
        pytest.param(H((1, 0), (2, 100)), 200, H((1, 0), (2, 100)), 200, 200, 2, id="same-history"),
        pytest.param(H((1, 0), (2, 100)), 150, H((1, 0), (2, 100)), 300, 150, 2, id="slave-behind"),
        pytest.param(
            H((1, 0)), 90, H((1, 0), (2, 100), (3, 250)), 400, 90, 1, id="slave-behind-old-epoch"
        ),
        pytest.param(
            H((1, 0), (2, 100)), 300, H((1, 0), (2, 100)), 250, 250, 2, id="slave-ahead-same-epoch"
        ),
        pytest.param(
            H((1, 0)), 500, H((1, 0), (2, 300)), 600, 300, 1, id="old-master-ahead-in-old-epoch"
        ),
        pytest.param(
            H((1, 0), (2, 100), (3, 200)),
            260,
            H((1, 0), (2, 100), (4, 200)),
            400,
            200,
            2,
            id="diverged-tails-in-a-later-epoch",
        ),
        pytest.param(
            H((1, 0), (2, 100)),
            150,
            H((1, 0), (3, 120)),
            300,
            100,
            1,
            id="slave-has-an-epoch-the-master-never-had",
        ),
        pytest.param(
            H((1, 0)),
            100,
            H((1, 0), (2, 100), (3, 200), (4, 350)),
            500,
            100,
            1,
            id="master-has-epochs-the-slave-never-saw",
        ),
        pytest.param(
            H((1, 0), (2, 150)),
            300,
            H((1, 0), (2, 100)),
            300,
            100,
            1,
            id="same-epoch-different-start-is-not-common",
        ),
        pytest.param(
            H((1, 0), (2, 100)),
            100,
            H((1, 0), (3, 100)),
            300,
            100,
            1,
            id="empty-epoch-the-master-never-had",
        ),
        pytest.param(
            H((1, 0), (2, 300)),
            250,
            H((1, 0), (2, 300)),
            500,
            250,
            2,
            id="stale-entry-beyond-a-torn-tail-is-clamped",
        ),
        pytest.param(H((1, 0)), 0, H((1, 0)), 0, 0, 1, id="both-empty-same-epoch"),
        pytest.param(H((5, 1000)), 1500, H((5, 1000)), 1200, 1200, 5, id="log-not-starting-at-0"),
    ],
)
def test_consistent_point(
    local: list[EpochEntry],
    local_max: int,
    master: list[EpochEntry],
    master_max: int,
    offset: int,
    epoch: int,
) -> None:
    assert decide(local, local_max, master, master_max) == ConsistentPoint(
        offset=offset, epoch=epoch
    )


def test_newest_common_entry_wins() -> None:
    # Epoch 1 is common too, but epoch 3 is the newest shared one.
    assert decide(H((1, 0), (3, 50)), 80, H((1, 0), (3, 50), (4, 70)), 90) == ConsistentPoint(
        offset=70, epoch=3
    )


@pytest.mark.parametrize(
    ("local", "master", "master_max"),
    [
        pytest.param([], H((1, 0)), 100, id="empty-slave"),
        pytest.param(H((1, 0)), H((2, 0)), 100, id="slave-with-epochs-but-no-bytes"),
        pytest.param([], [], 0, id="empty-slave-empty-master"),
    ],
)
def test_empty_slave_starts_from_scratch(
    local: list[EpochEntry], master: list[EpochEntry], master_max: int
) -> None:
    assert decide(local, 0, master, master_max) == EmptyLog()


@pytest.mark.parametrize(
    ("local", "local_max", "master", "master_max"),
    [
        pytest.param(H((1, 0)), 100, H((2, 0)), 50, id="no-common-epoch"),
        pytest.param(H((1, 0)), 100, [], 0, id="empty-master"),
        pytest.param([], 100, H((1, 0)), 300, id="bytes-without-epochs"),
        pytest.param(H((1, 0), (2, 50)), 100, H((1, 10), (2, 60)), 100, id="same-epochs-moved"),
    ],
)
def test_no_common_entry_with_bytes_is_refused(
    local: list[EpochEntry], local_max: int, master: list[EpochEntry], master_max: int
) -> None:
    decision = decide(local, local_max, master, master_max)
    assert isinstance(decision, NoCommonEntry)
    assert "no epoch in common" in decision.reason
    assert f"max offset {local_max}" in decision.reason
    assert "refusing" in decision.reason


def test_refusal_names_long_histories_briefly() -> None:
    local = H(*[(e, e * 10) for e in range(1, 30)])
    decision = decide(local, 1000, H((100, 0)), 10)
    assert isinstance(decision, NoCommonEntry)
    assert (
        "..." in decision.reason and "29@290" in decision.reason and "1@10" not in decision.reason
    )


# --------------------------------------------------------------------------- model check
#
# A byte's content is the epoch that wrote it (one master per epoch), so two logs hold the same
# bytes exactly where their labels agree. A node's epoch history is derived from its labels the
# way replication builds it. Then the consistent point must be the longest common prefix.


def history_of(labels: list[int], extra: list[tuple[int, int]]) -> list[EpochEntry]:
    """Entries from per-byte labels, plus empty epochs ``(epoch, at)`` the node also recorded."""
    pairs: dict[int, int] = {}
    for i, e in enumerate(labels):
        pairs.setdefault(e, i)
    for e, at in extra:
        pairs.setdefault(e, at)
    entries = H(*sorted(pairs.items()))
    check_epoch_entries(entries)
    return entries


@st.composite
def divergent_logs(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    """Two logs sharing a prefix, then diverging in epochs the other never saw."""
    common_runs = draw(st.lists(st.integers(min_value=1, max_value=20), min_size=1, max_size=4))
    common: list[int] = []
    for epoch, n in enumerate(common_runs, start=1):
        common += [epoch] * n
    cut = draw(st.integers(min_value=1, max_value=len(common)))
    common = common[:cut]
    last = common[-1]
    a_tail = draw(st.lists(st.integers(min_value=1, max_value=20), max_size=3))
    b_tail = draw(st.lists(st.integers(min_value=1, max_value=20), max_size=3))
    a = list(common)
    b = list(common)
    # The local node keeps writing in the last common epoch (it was its master), then in odd
    # epochs; the master moves on in even epochs. Epoch numbers never collide.
    a += [last] * draw(st.integers(min_value=0, max_value=10))
    for i, n in enumerate(a_tail):
        a += [100 + 2 * i + 1] * n
    for i, n in enumerate(b_tail):
        b += [100 + 2 * i + 2] * n
    return a, b


def longest_common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@settings(max_examples=examples(400), deadline=None)
@given(logs=divergent_logs())
def test_consistent_point_is_the_longest_common_prefix(logs: tuple[list[int], list[int]]) -> None:
    local, master = logs
    decision = decide(history_of(local, []), len(local), history_of(master, []), len(master))
    assert isinstance(decision, ConsistentPoint)
    assert decision.offset == longest_common_prefix(local, master)
    assert local[: decision.offset] == master[: decision.offset]


@settings(max_examples=examples(200), deadline=None)
@given(
    logs=divergent_logs(),
    local_empty=st.integers(min_value=0, max_value=3),
)
def test_empty_epochs_recorded_by_heartbeats_do_not_change_the_point(
    logs: tuple[list[int], list[int]], local_empty: int
) -> None:
    """A slave that heard a heartbeat of an epoch which never wrote still truncates safely."""
    local, master = logs
    extra = [(200 + local_empty, len(local))]  # a newer epoch that wrote nothing here
    decision = decide(history_of(local, extra), len(local), history_of(master, []), len(master))
    assert isinstance(decision, ConsistentPoint)
    assert local[: decision.offset] == master[: decision.offset]
    assert decision.offset == longest_common_prefix(local, master)
