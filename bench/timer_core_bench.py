"""Microbenchmark of the timer core (storage.timer): timing wheel + timer log, no broker.

    .venv/bin/python bench/timer_core_bench.py [--near N] [--far N] [--step-ms 100]

Schedules ``--near`` entries 1-10 s ahead and ``--far`` entries 1 hour to 40 days ahead, drains
the near ones by stepping simulated time, reopens the wheel (recovery scan of the timer log)
and loads one far bucket. Time is simulated, so the figures are CPU cost only: entries per
second through schedule, due+commit, recovery. Prints figures; asserts nothing. ``make bench
ONLY=timer`` runs it.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import smoke
from storage.timer.wheel import DAY_MS, TimingWheel, WheelConfig

T0 = 1_700_000_000_000
SIZE = 1024


def rate(count: int, secs: float) -> str:
    return f"{count / secs:,.0f} entries/s ({count:,} in {secs:.2f} s)"


def schedule(wheel: TimingWheel, ats: list[int], offset: int) -> float:
    """Schedules a message due at each of ``ats``, stored from CommitLog ``offset`` on, one after
    the other; returns the seconds it took."""
    start = time.perf_counter()
    for at in ats:
        wheel.schedule(at, offset, SIZE, T0)
        offset += SIZE
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--near", type=int, default=200_000)
    parser.add_argument("--far", type=int, default=200_000)
    parser.add_argument("--step-ms", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    args = smoke.parse_args(parser, near=300, far=300)
    rng = random.Random(args.seed)
    config = WheelConfig()

    with tempfile.TemporaryDirectory(prefix="timer-bench-") as tmp:
        directory = Path(tmp)
        wheel = TimingWheel(directory, T0, config)
        near = [T0 + rng.randrange(1_000, 10_000) for _ in range(args.near)]
        far = [T0 + rng.randrange(3_600_000, 40 * DAY_MS) for _ in range(args.far)]

        near_secs = schedule(wheel, near, 0)
        print(f"schedule near (1-10 s): {rate(len(near), near_secs)}")
        far_secs = schedule(wheel, far, len(near) * SIZE)
        print(f"schedule far (1 h-40 d): {rate(len(far), far_secs)}")

        start = time.perf_counter()
        wheel.flush()
        print(
            f"timer log flush: {wheel.log.end / (1 << 20):,.1f} MiB in "
            f"{time.perf_counter() - start:.2f} s"
        )

        start = time.perf_counter()
        drained = 0
        now = T0
        delivered: list[tuple[int, int]] = []
        while now < T0 + 10_000:
            now += args.step_ms
            for entry in wheel.due(now):
                wheel.commit(entry)
                delivered.append(entry.key)
                drained += 1
        wheel.save_progress()
        drain_secs = time.perf_counter() - start
        print(f"drain (due + commit, {args.step_ms} ms steps): {rate(drained, drain_secs)}")
        wheel.close()

        # A replica follows: the same schedules, then the master's delivery records.
        replica = TimingWheel(directory / "replica", T0, config)
        start = time.perf_counter()
        for i, at in enumerate(near):
            replica.schedule(at, i * SIZE, SIZE, T0)
        for due_ms, source in delivered:
            replica.commit_key(due_ms, source)
        secs = time.perf_counter() - start
        print(f"replica (near schedules + delivery records): {rate(len(near) + drained, secs)}")
        replica.close()

        start = time.perf_counter()
        wheel = TimingWheel(directory, now, config)
        reopen_secs = time.perf_counter() - start
        print(
            f"reopen (recovery scan): {rate(wheel.recovery.records, reopen_secs)}, "
            f"{wheel.far_buckets:,} far buckets"
        )

        until = T0 + DAY_MS
        start = time.perf_counter()
        loaded = wheel.due(until)
        print(
            f"far buckets loaded from disk and drained (first simulated day): "
            f"{rate(len(loaded), time.perf_counter() - start)}"
        )
        wheel.close()


if __name__ == "__main__":
    main()
