"""Compiled against pure Python in the same run: ``python bench/build_compare.py BENCH [ARGS]``
runs ``bench/BENCH`` (e.g. ``ha_bench.py --only-produce``) on the compiled build and with
``RMQ_PURE_PYTHON=1`` (the bench, its daemons and its clients all pure), alternately for
``--rounds`` rounds (the order rotated each round), and prints each figure line of both builds
beside the ratio of their first figures (compiled / pure: above 1 is faster for a rate, slower
for a latency). Lines are paired by their text with the numbers taken out; the best of the
rounds is not picked: the ratio compares the medians. docs/compiled.md quotes its figures.

The machine may be shared: the load average at each run's start is printed with it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from rmqbuild.hook import PURE_ENV  # noqa: E402

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
# CPU per message as ha_bench prints it ("master CPU  9.80 s/100k"): on a loaded machine it
# moves far less than the rates, so its ratio is printed too.
CPU = re.compile(r"(\w+) CPU +(\d+(?:\.\d+)?) s/100k")


# A figure: a number with its unit. A line's first figure is what the ratio compares (a number
# of the label, as the 64 of "single sends (64 in flight)", is not one).
FIGURE = re.compile(r"(-?\d[\d,]*(?:\.\d+)?) ?(?:msg/s|entries/s|ops/s|MiB/s|MB/s|ms|s|µs|us)\b")


def shape(line: str) -> str:
    """The line without its numbers and column padding: what pairs it across runs."""
    return " ".join(NUMBER.sub("#", line).split())


def first_number(line: str) -> float | None:
    m = FIGURE.search(line)
    if m is not None:
        return float(m.group(1).replace(",", ""))
    # No unit: the first number after the label's last colon ("auto-batch on/off: 5.02").
    n = NUMBER.search(line, line.rfind(":") + 1) or NUMBER.search(line)
    return None if n is None else float(n.group().replace(",", ""))


def run_output(bench: list[str], pure: bool, timeout: float | None = None) -> tuple[str, int]:
    """Runs ``bench/BENCH ARGS`` on one build (``pure``: with ``RMQ_PURE_PYTHON=1``) after
    printing its line with the load average; returns its output (stdout and stderr) and exit
    status. The bench runs in a process group of its own: past ``timeout`` seconds that group
    (the bench and the daemons it started) is sent SIGTERM, then SIGKILL, and the status is -9."""
    env = dict(os.environ)
    env.pop(PURE_ENV, None)
    if pure:
        env[PURE_ENV] = "1"
    print(f"-- {build_name(pure)}: {' '.join(bench)} ({load_average()})", flush=True)
    proc = subprocess.Popen(
        [sys.executable, str(HERE / bench[0]), *bench[1:]],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        return end_group(proc) + f"\n{bench[0]}: ended after {timeout:g} s\n", -9
    except BaseException:  # Ctrl-C: the group is in a session of its own and did not get it
        end_group(proc)
        raise
    return out, proc.returncode


def end_group(proc: subprocess.Popen[str]) -> str:
    """SIGTERM the process group led by ``proc``, SIGKILL it if it is still there 15 s later;
    returns what ``proc`` printed meanwhile."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            return proc.communicate(timeout=15)[0] or ""
        except subprocess.TimeoutExpired:
            continue
    return ""


def run(bench: list[str], pure: bool) -> list[str]:
    out, status = run_output(bench, pure)
    if status != 0:
        print(out, flush=True)
        raise SystemExit(f"{bench[0]} ({build_name(pure)}) exited {status}")
    return [line for line in out.splitlines() if is_figure_line(line)]


LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d")
"""A daemon's log line (``2026-11-29 17:50:15 [info ] broker stopped``): its numbers are no
figure."""


def is_figure_line(line: str) -> bool:
    return LOG_LINE.match(line) is None and first_number(line) is not None


def build_name(pure: bool) -> str:
    return "pure" if pure else "compiled"


def load_average() -> str:
    return f"load average {os.getloadavg()[0]:.1f}"


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rounds", type=int, default=1, help="runs of each build (alternating)")
    p.add_argument("bench", nargs=argparse.REMAINDER, help="the bench file and its arguments")
    args = p.parse_args()
    if not args.bench:
        p.error("name a bench, e.g. ha_bench.py --only-produce")
    lines: dict[bool, list[list[str]]] = {True: [], False: []}
    for r in range(args.rounds):
        for pure in (False, True) if r % 2 == 0 else (True, False):
            lines[pure].append(run(args.bench, pure))
    print(f"== {' '.join(args.bench)}: compiled / pure, medians of {args.rounds} round(s)")
    for i, line in enumerate(lines[False][0]):
        key = shape(line)
        comp_lines = [_find(run_lines, key, i) for run_lines in lines[False]]
        pure_lines = [_find(run_lines, key, i) for run_lines in lines[True]]
        c = [v for v in (first_number(x) for x in comp_lines if x) if v is not None]
        q = [v for v in (first_number(x) for x in pure_lines if x) if v is not None]
        print(f"compiled  {line.strip()}")
        if q:
            print(f"pure      {(_find(lines[True][0], key, i) or '').strip()}")
            qm = statistics.median(q)
            ratio = f"{statistics.median(c) / qm:.2f}" if qm else "n/a"
            cpu = _cpu_ratios([x for x in comp_lines if x], [x for x in pure_lines if x])
            print(f"ratio     {ratio}{cpu}")
    return 0


def _cpu_ratios(comp: list[str], pure: list[str]) -> str:
    """ ", CPU per message compiled / pure: master 0.80, slave 0.85" from the lines' CPU figures
    (medians), or ""."""

    def medians(lines: list[str]) -> dict[str, float]:
        seen: dict[str, list[float]] = {}
        for line in lines:
            for who, value in CPU.findall(line):
                seen.setdefault(who, []).append(float(value))
        return {who: statistics.median(v) for who, v in seen.items()}

    c, q = medians(comp), medians(pure)
    parts = [f"{who} {c[who] / q[who]:.2f}" for who in c if q.get(who)]
    return f", CPU per message compiled / pure: {', '.join(parts)}" if parts else ""


def _find(run_lines: list[str], key: str, near: int) -> str | None:
    """The line of ``run_lines`` with ``key``'s shape nearest to position ``near``."""
    hits = [i for i, line in enumerate(run_lines) if shape(line) == key]
    if not hits:
        return None
    return run_lines[min(hits, key=lambda i: abs(i - near))]


if __name__ == "__main__":
    sys.exit(main())
