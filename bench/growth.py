"""The growth table every item of bench/scale_bench.py prints: each measure at each column
(1x, 10x, 100x of its load) and, for each column past the first, ``cost x/load x=ratio``: the
figure over the first column's, over the load it should grow with (1 for a per-operation cost,
which should not grow at all). The items' worst ratios make the run's last line,
``worst growth: RATIO (MEASURE)`` (:func:`worst_line`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

PER_OP = "per op"
"""A measure's load for a per-operation cost (a lookup, a put): its load factor is 1."""

Measure = tuple[str, str, str]
"""(name, unit, load): ``load`` names the key of each column's loads the cost should grow
with, or :data:`PER_OP`."""

Worst = tuple[float, str]

NAME_WIDTH = 34
"""The measure column's width."""


def print_growth(
    measures: Sequence[Measure],
    factors: Sequence[int],
    figures: Sequence[Mapping[str, float]],
    loads: Sequence[Mapping[str, float]],
) -> Worst:
    """Print the header and one row per measure; return the largest ratio and its measure."""
    nan = float("nan")
    head = f"{'measure':{NAME_WIDTH}s}" + "".join(f"{f'{f}x':>12s}" for f in factors)
    head += "".join(f"{f'{f}x cost/load=ratio':>28s}" for f in factors[1:])
    print(head)
    worst: Worst = (0.0, "")
    for name, unit, load in measures:
        row = f"{name + ' (' + unit + ')':{NAME_WIDTH}s}"
        row += "".join(f"{fig.get(name, nan):12,.2f}" for fig in figures)
        for i in range(1, len(factors)):
            load_x = loads[i][load] / loads[0][load] if load != PER_OP else 1.0
            was = figures[0].get(name, nan)
            # A 1x figure of 0 (a CPU reading below the clock tick in --smoke's short window)
            # gives no growth to compare: nan, left out of the worst.
            cost_x = figures[i].get(name, nan) / was if was else nan
            ratio = cost_x / load_x
            row += f"{f'{cost_x:.2f}/{load_x:g}={ratio:.2f}':>28s}"
            if ratio == ratio and ratio > worst[0]:
                worst = (ratio, f"{name} at {factors[i]}x")
        print(row)
    return worst


def rss_mib(pid: int) -> float:
    """Process ``pid``'s resident memory (VmRSS), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def worst_line(worsts: Sequence[Worst]) -> str:
    """``worst growth: RATIO (MEASURE)`` over every item's worst."""
    worst = max(worsts, default=(0.0, ""), key=lambda w: w[0])
    return f"worst growth: {worst[0]:.2f} ({worst[1]})"
