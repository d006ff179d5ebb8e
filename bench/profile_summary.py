"""Fold py-spy's raw output (``py-spy record -f raw``: one ``frame;frame;...;leaf count`` line per
distinct stack) into the top functions by self time and by inclusive time.

    python bench/profile_summary.py master-p1.txt [--top 25]

Self: samples where the function was the innermost frame. Inclusive: samples where it was
anywhere on the stack (counted once per sample, also when it recurses). Both as a share of all
samples, so a function at 30% inclusive held the broker's CPU for 30% of the time sampled (idle
time, waiting in epoll, is not sampled unless py-spy ran with ``--idle``).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Profile", "fold", "format_table", "main"]

SCAFFOLD = re.compile(
    r"\((<frozen runpy>|click/core\.py|daemon/cli\.py|daemon/signals\.py|uvloop/__init__\.py"
    r"|asyncio/runners\.py|broker/__main__\.py|threading\.py|concurrent/futures/thread\.py)\)$"
)
"""Frames on every stack of their thread (start-up, the loop's run, a worker's loop): left out of
the inclusive table, where they would only fill the top rows (their self time is still listed:
``Runner.run`` self is the event loop's own C code, uvloop's I/O and scheduling)."""

_LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")
_SITE = re.compile(r" \((?P<file>[^():]+)(?::\d+)?\)$")


@dataclass(frozen=True, slots=True)
class Profile:
    samples: int
    self_: Counter[str]
    inclusive: Counter[str]


def _name(frame: str) -> str:
    """``func (path/to/file.py:123)`` -> ``func (path/to/file.py)``: one row per function, not per
    line (record with ``-F`` to have py-spy do that itself)."""
    m = _SITE.search(frame)
    if m is None:
        return frame.strip()
    return f"{frame[: m.start()].strip()} ({m.group('file')})"


def fold(text: str) -> Profile:
    self_: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in text.splitlines():
        m = _LINE.match(line.rstrip())
        if m is None:
            continue
        count = int(m.group("count"))
        frames = [_name(f) for f in m.group("stack").split(";") if f]
        # py-spy puts the thread ("process 123:...", "thread (0x...)") first: not a function.
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += count
        self_[frames[-1]] += count
        for f in set(frames):
            inclusive[f] += count
    return Profile(total, self_, inclusive)


def format_table(profile: Profile, top: int, title: str = "") -> str:
    n = max(profile.samples, 1)
    out = [f"{title}{profile.samples} samples"]
    for label, counts in (("self", profile.self_), ("inclusive", profile.inclusive)):
        out.append(f"  top {top} by {label} time:")
        rows = counts.most_common()
        if label == "inclusive":
            rows = [(name, c) for name, c in rows if not SCAFFOLD.search(name)]
        for name, c in rows[:top]:
            out.append(f"    {100 * c / n:5.1f}%  {c:>6}  {name}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", type=Path, help="py-spy raw outputs")
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args(argv)
    for path in args.files:
        print(format_table(fold(path.read_text()), args.top, f"{path}: "))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
