"""Deterministic simulation of 3- and 5-node groups under faults (see tests/raft/sim.py).

Default run (CI): 500 seeds, 250 with three voters and 250 with five (about 3 minutes). ``make
soak`` (``-m soak``) runs 10,000 more, one test each (seeds 1000 to 10999, group size drawn from
the seed); ``RAFT_SOAK_SEEDS`` and ``RAFT_SOAK_START`` choose which. A failure names its seed;
``Simulation(SimOptions.from_seed(SEED, voters=N)).run()`` replays it step for step.
"""

from __future__ import annotations

import os

import pytest

from tests.raft.sim import SimOptions, Simulation

SEEDS = range(250)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("voters", [3, 5])
def test_simulated_group_is_safe_and_live(seed: int, voters: int) -> None:
    result = Simulation(SimOptions.from_seed(seed, voters=voters, safety_ticks=400)).run()
    assert result.committed > 0


def test_same_seed_replays_the_same_run() -> None:
    options = SimOptions.from_seed(7, voters=5, safety_ticks=200)
    first, second = Simulation(options), Simulation(options)
    assert first.run() == second.run()
    assert first.checker.digests == second.checker.digests
    assert first.checker.leaders == second.checker.leaders


def test_the_workload_exercises_every_feature() -> None:
    totals = {"leaders": 0, "crashes": 0, "conf_changes": 0, "snapshots_installed": 0, "reads": 0}
    for seed in range(20):
        result = Simulation(SimOptions.from_seed(seed, safety_ticks=200)).run()
        for key in totals:
            totals[key] += getattr(result, key)
    assert all(value > 0 for value in totals.values()), totals


SOAK_START = int(os.environ.get("RAFT_SOAK_START", "1000"))
SOAK_SEEDS = int(os.environ.get("RAFT_SOAK_SEEDS", "10000"))


# One test per seed: a failure names its seed and the rest still run, and pytest's per-test
# timeout bounds one seed (about a second) rather than the whole soak (hours on two cores).
@pytest.mark.soak
@pytest.mark.parametrize("seed", range(SOAK_START, SOAK_START + SOAK_SEEDS))
def test_soak(seed: int) -> None:
    Simulation(SimOptions.from_seed(seed, safety_ticks=1000)).run()
