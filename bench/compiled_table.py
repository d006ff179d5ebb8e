"""Issue 30's benchmarks in one table: each on the compiled build and the pure one (alternately,
as bench/build_compare.py runs them), beside its peer, against its target.

    python bench/compiled_table.py [--only ha,broker,controller,pop,timer,pipeline,cold]
        [--evict drop_caches|fadvise] [--timeout S] [--log DIR] [--smoke]

Runs, in this order (each compiled and with ``RMQ_PURE_PYTHON=1``, the first build of each
alternating; the peers once, after both builds of their bench, on a machine without our
processes):

  ha          ha_bench.py --only-produce: P1 single sends, 64 in flight, R3 all-ack, without
              the SDK's auto-batching, and P2 batches of 64; then NATS JetStream R3
              (bench/nats_peer.py, where ``nats-server`` is installed) with the same messages
  broker      broker_bench.py: batches of 64 into one broker alone
  controller  controller_bench.py --only controller: P6, 1 KiB fsynced entries at 256 in flight;
              then ``--only pysyncobj``: PySyncObj's best in the same run
  pop         pop_bench.py: POP receive + ack through 4 SDK SimpleConsumers
  timer       timer_bench.py --far 0: scheduled messages written, and delivered and consumed
  pipeline    pipeline_bench.py: the Spark sink (parquet -> rmq)
  cold        cold_read_bench.py: the producer's p99 with a cold reader of 2 GiB over its p99
              alone (``--evict`` as the bench's: drop_caches drops the whole machine's cache)

and prints each run's load average at its start, then one table: benchmark, compiled, pure,
compiled / pure, peer, target, whether the compiled build meets it. ``--log DIR`` keeps each
run's whole output (DIR/RUN-BUILD.log); a run that fails or passes ``--timeout`` shows its
output's tail and "failed" in the table. ``--smoke`` runs every bench in its tiny mode
(bench/smoke.py) and no peer: the figures mean nothing, it checks the table still reads them.
Nothing is asserted. docs/compiled.md quotes its figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.build_compare import build_name, load_average, run_output
from bench.nats_peer import run_nats_r3

FIGURE = r"([\d,]+(?:\.\d+)?)"

HA_MESSAGES = 100_000
HA_ONE_AT_A_TIME = 500


@dataclass(frozen=True)
class Run:
    """One bench command line: ``args`` always, ``full`` only outside ``--smoke``."""

    key: str
    args: tuple[str, ...]
    full: tuple[str, ...] = ()

    def argv(self, smoke: bool) -> list[str]:
        return [*self.args, "--smoke"] if smoke else [*self.args, *self.full]


RUNS = (
    Run(
        "ha",
        ("ha_bench.py", "--only-produce"),
        ("--messages", str(HA_MESSAGES), "--one-at-a-time", str(HA_ONE_AT_A_TIME)),
    ),
    Run("broker", ("broker_bench.py",), ("--messages", "100000", "--sdk-messages", "5000")),
    Run(
        "controller",
        ("controller_bench.py", "--only", "controller", "--kills", "0", "--flood", "0"),
        ("--latency", "200"),
    ),
    Run("pop", ("pop_bench.py",), ("--transactions", "1000", "--groups", "100")),
    Run("timer", ("timer_bench.py", "--far", "0"), ("--messages", "100000")),
    Run("pipeline", ("pipeline_bench.py",), ("--messages", "100000")),
    Run("cold", ("cold_read_bench.py",)),
)
KEYS = tuple(r.key for r in RUNS)

PYSYNCOBJ = ("controller_bench.py", "--only", "pysyncobj")
"""PySyncObj beside P6: the same bench's peer side (its best of two windows, 256 and 4,096)."""


@dataclass(frozen=True)
class Row:
    """A figure of the table: the number ``pattern``'s group captures in run ``run``'s output
    (the largest where several lines match), its target (a number, or a multiple of the
    peer's figure), and whether higher is better."""

    name: str
    run: str
    pattern: str
    unit: str
    target: float | None
    peer: str | None = None
    higher_is_better: bool = True
    places: int = 0
    """Decimals shown."""
    skipped: str | None = None
    """A line saying the bench could not run this phase here (a missing extra)."""

    def figure(self, out: str) -> float | None:
        found = [float(m.replace(",", "")) for m in re.findall(self.pattern, out, re.MULTILINE)]
        return max(found) if found else None

    def was_skipped(self, out: str) -> bool:
        return self.skipped is not None and re.search(self.skipped, out, re.MULTILINE) is not None

    def goal(self, peers: dict[str, float | None]) -> float | None:
        """The target as a number (``target`` times the peer's figure where there is a peer)."""
        if self.target is None:
            return None
        if self.peer is None:
            return self.target
        peer = peers.get(self.peer)
        return None if peer is None else self.target * peer

    def met(self, value: float | None, peers: dict[str, float | None]) -> str:
        goal = self.goal(peers)
        if goal is None:
            return "-"
        if value is None:
            return "?"
        ok = value >= goal if self.higher_is_better else value <= goal
        return "yes" if ok else "no"


ROWS = (
    Row(
        "P1 single sends, 64 in flight, R3 all-ack",
        "ha",
        rf"^produce, 64 in flight, all-ack R3 +{FIGURE} msg/s",
        "msg/s",
        2.0,
        peer="NATS JetStream R3, 64 in flight",
    ),
    Row(
        "P2 batches of 64, R3 all-ack",
        "ha",
        rf"^produce, batches of 64, all-ack R3 +{FIGURE} msg/s",
        "msg/s",
        150_000,
    ),
    Row(
        "P2 batches of 64, one broker alone",
        "broker",
        rf"^batch sends \(64 per request\) +{FIGURE} msg/s",
        "msg/s",
        300_000,
    ),
    Row(
        "P6 controllers, 1 KiB fsynced entries",
        "controller",
        rf"^throughput \(\d+ in flight on \d+ connections, fsynced\): .* = {FIGURE} entries/s",
        "entries/s",
        1.0,
        peer="PySyncObj's best",
    ),
    Row(
        "POP, 4 SimpleConsumers, receive + ack",
        "pop",
        rf"^POP receive \+ ack \(\d+ SimpleConsumers\) +{FIGURE} msg/s",
        "msg/s",
        30_000,
    ),
    Row(
        "timer: scheduled messages written",
        "timer",
        rf"^scheduled \(1-\d+ s ahead\), written: +{FIGURE} msg/s",
        "msg/s",
        30_000,
    ),
    Row(
        "timer: delivered and consumed",
        "timer",
        rf"^scheduled, delivered and consumed: +{FIGURE} msg/s",
        "msg/s",
        30_000,
    ),
    Row(
        "Spark sink (parquet -> rmq)",
        "pipeline",
        rf"^parquet -> rmq +{FIGURE} msg/s",
        "msg/s",
        50_000,
        skipped=r"^the Spark phases are skipped: ",
    ),
    Row(
        "cold reads: producer p99 with the reader / alone",
        "cold",
        rf"^producer p99 with the cold reader / alone: {FIGURE} ",
        "",
        1.5,
        higher_is_better=False,
        places=2,
    ),
    Row(
        "cold reads: the cold reader",
        "cold",
        rf"^cold reader: {FIGURE} MiB/s",
        "MiB/s",
        None,
        places=1,
    ),
)


def unread(bench: str, out: str) -> list[str]:
    """The rows read from ``bench``'s output (e.g. ``ha_bench.py``) whose line ``out`` lacks,
    a phase it says it skipped aside: tests/bench/test_benches_run.py checks each bench's tiny
    run with it, so a changed figure line shows there, not in the table."""
    runs = {run.key for run in RUNS if run.args[0] == bench}
    return [
        row.name
        for row in ROWS
        if row.run in runs and row.figure(out) is None and not row.was_skipped(out)
    ]


def nats_peer(smoke: bool) -> float | None:
    """NATS JetStream R3's msg/s with 64 in flight, ha_bench's messages (None: it could not
    run, and said why)."""
    if smoke:
        return None
    print(f"-- peer: NATS JetStream R3 (bench/nats_peer.py) ({load_average()})", flush=True)
    r = asyncio.run(run_nats_r3(1024, HA_MESSAGES, HA_ONE_AT_A_TIME))
    if r is None:
        return None
    print(f"NATS JetStream R3, 64 in flight: {r['rate']:,.0f} msg/s", flush=True)
    return r["rate"]


def pysyncobj_peer(smoke: bool, timeout: float, log: Path | None) -> float | None:
    """PySyncObj's best puts/s of the controller bench's windows (None: it could not run)."""
    if smoke:
        return None
    out, status = run_output(list(PYSYNCOBJ), False, timeout)
    keep(log, "pysyncobj", out)
    found = re.findall(rf"^PySyncObj throughput \(\d+ in flight\): .* = {FIGURE} ops/s", out, re.M)
    if status != 0 or not found:
        print(f"PySyncObj: no figure (exit status {status}); output's tail:\n{out[-3000:]}")
        return None
    return max(float(f.replace(",", "")) for f in found)


PEER_RUNS: dict[str, tuple[str, Callable[[bool, float, Path | None], float | None]]] = {
    "ha": ("NATS JetStream R3, 64 in flight", lambda smoke, _t, _l: nats_peer(smoke)),
    "controller": ("PySyncObj's best", pysyncobj_peer),
}
"""The peer measured after both builds of a run: its name in ROWS and how it is measured."""


def keep(log: Path | None, name: str, out: str) -> None:
    if log is not None:
        log.mkdir(parents=True, exist_ok=True)
        (log / f"{name}.log").write_text(out)


def number(value: float | None, unit: str, places: int = 0) -> str:
    if value is None:
        return "failed"
    return f"{value:,.{places}f} {unit}".strip()


def table(
    figures: dict[tuple[str, bool], str | None], peers: dict[str, float | None], smoke: bool
) -> list[str]:
    """The table's lines (markdown), from each run's output per build (None: not run)."""
    lines = [
        "| benchmark | compiled | pure | compiled / pure | peer | target | met (compiled) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in ROWS:
        outs = {pure: figures.get((row.run, pure)) for pure in (False, True)}
        if all(out is None for out in outs.values()):
            continue  # not among --only
        values = {pure: row.figure(out) if out is not None else None for pure, out in outs.items()}
        cells = []
        for pure in (False, True):
            out = outs[pure]
            skipped = values[pure] is None and out is not None and row.was_skipped(out)
            cells.append("skipped" if skipped else number(values[pure], row.unit, row.places))
        comp, pure_value = values[False], values[True]
        ratio = f"{comp / pure_value:.2f}" if comp is not None and pure_value else "-"
        peer = "-"
        if row.peer is not None:
            value = peers.get(row.peer)
            peer = f"{row.peer}: " + (
                number(value, row.unit, row.places)
                if value is not None
                else "skipped"
                if smoke
                else "n/a"
            )
        goal = row.goal(peers)
        if row.target is None:
            target = "-"
        elif row.peer is not None:
            shown = f" = {number(goal, row.unit, row.places)}" if goal is not None else ""
            target = f">= {row.target:g} x peer{shown}"
        else:
            target = f"{'>=' if row.higher_is_better else '<='} {number(row.target, row.unit, row.places)}"
        lines.append(
            f"| {row.name} | {cells[0]} | {cells[1]} | {ratio} | {peer} | {target} | "
            f"{row.met(comp, peers)} |"
        )
    return lines


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--only", default=",".join(KEYS), help="runs, comma-separated: " + ",".join(KEYS)
    )
    p.add_argument("--evict", choices=("drop_caches", "fadvise"), help="cold_read_bench's --evict")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds one bench run may take")
    p.add_argument("--log", type=Path, help="keep each run's output in DIR/RUN-BUILD.log")
    p.add_argument("--smoke", action="store_true", help="tiny runs, no peers: checks it runs")
    args = p.parse_args()
    only = [k.strip() for k in args.only.split(",") if k.strip()]
    unknown = sorted(set(only) - set(KEYS))
    if unknown:
        p.error(f"unknown runs {unknown}; they are {', '.join(KEYS)}")
    figures: dict[tuple[str, bool], str | None] = {}
    peers: dict[str, float | None] = {}
    loads = [os.getloadavg()[0]]
    for i, run in enumerate(r for r in RUNS if r.key in only):
        argv = run.argv(args.smoke)
        if run.key == "cold" and args.evict:
            argv += ["--evict", args.evict]
        for pure in (False, True) if i % 2 == 0 else (True, False):
            loads.append(os.getloadavg()[0])
            out, status = run_output(argv, pure, args.timeout)
            keep(args.log, f"{run.key}-{build_name(pure)}", out)
            if status != 0:
                print(f"{argv[0]} ({build_name(pure)}) exited {status}; output's tail:")
                print(out[-3000:], flush=True)
            figures[run.key, pure] = out
        if run.key in PEER_RUNS:
            name, measure = PEER_RUNS[run.key]
            loads.append(os.getloadavg()[0])
            peers[name] = measure(args.smoke, args.timeout, args.log)
    loads.append(os.getloadavg()[0])
    print(
        f"== issue 30's benchmarks, compiled and pure (RMQ_PURE_PYTHON=1), {os.cpu_count()} cores, "
        f"load average (1 min) {min(loads):.1f} to {max(loads):.1f} at the runs' starts"
        + (" (--smoke: the figures mean nothing)" if args.smoke else ""),
        flush=True,
    )
    print("\n".join(table(figures, peers, args.smoke)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
