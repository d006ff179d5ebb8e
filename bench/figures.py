"""What the benches read their figures with: a process's CPU time and a percentile.

Imported as ``bench.figures`` by the bench scripts (which put the repository root on sys.path).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

CLK = os.sysconf("SC_CLK_TCK")


def _process_cpu_clock(pid: int) -> int:
    """Linux's CPU-time clock of process ``pid``, all its threads, live and ended (what glibc's
    ``clock_getcpuclockid`` returns: ``MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)``)."""
    return ((~pid) << 3) | 2


def cpu_seconds(pid: int) -> float:
    """Process ``pid``'s CPU time (user + system, every thread), in seconds. Read from its
    CPU-time clock, counted in nanoseconds (the scheduler's own runtime, which /proc's utime and
    stime are scaled to); where that clock cannot be read, from /proc/PID/stat, whose utime and
    stime come in ticks of 1/SC_CLK_TCK s (10 ms): :func:`cpu_resolution` says which."""
    try:
        return time.clock_gettime_ns(_process_cpu_clock(pid)) / 1e9
    except OSError:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK


def faults_and_system(pid: int) -> tuple[int, float]:
    """Process ``pid``'s minor page faults and system CPU seconds so far (every thread, live and
    ended), from /proc/PID/stat: the faults are counted exactly, the system time in ticks of
    1/SC_CLK_TCK s (10 ms), so read it over rounds of tens of milliseconds or more."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[7]), int(fields[12]) / CLK


def cpu_resolution(pid: int) -> float:
    """The step, in seconds, of what :func:`cpu_seconds` reads for ``pid``: 1 ns from the
    process's CPU-time clock, a tick (1/SC_CLK_TCK s) from /proc/PID/stat."""
    try:
        time.clock_gettime_ns(_process_cpu_clock(pid))
    except OSError:
        return 1 / CLK
    return 1e-9


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``: the value at index ``q * len`` once sorted (the
    last for ``q`` = 1); NaN when empty."""
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]
