"""Garbage-collector settings for a daemon whose event loop must answer within a Raft tick (the
controllers), or whose heartbeat thread must not miss a beat under load (the brokers: a full
collection pauses every thread).

With CPython's defaults (700, 10, 10) a loaded controller ran a full (generation 2) collection
about once a second, each pausing the event loop 50-230 ms on a 2-core machine: long enough,
with the scheduler's own delays, for a leader to miss its heartbeats and lose leadership under a
flood of writes. After start-up the objects that live for the whole run (modules, config, the
recovered state) are moved out of the collector's sight (``gc.freeze``), and collections are
made rarer: young cycles are still collected, full collections become seldom.

Work that allocates a burst of short-lived containers in a thread (a controller encoding or
decoding a Raft snapshot of 100,000 topics: one list per topic) runs with the collector paused
(:func:`collector_paused`): a full collection it set off would hold the GIL, hence the event loop,
for as long as it scans the heap (about 120 ms of a 135 ms loop stall at 100,000 topics, measured
in tests/controller/test_raft_snapshot_loop.py). The burst is freed by reference counting.

The broker does the same: with the defaults its collections took about 5% of the master's CPU
during all-ack sends (``perf``: ``gc_collect_main``, ``visit_reachable``, ``visit_decref``), every
send allocating a few short-lived tracked objects (its message, its waiter, its future), and each
full collection paused the sends of every connection.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

THRESHOLDS = (20_000, 20, 100)


def tune_for_latency() -> None:
    """Freeze what start-up allocated and raise the collection thresholds (call once, after
    start-up)."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)


_pause_lock = threading.Lock()
_pauses = 0
_resume = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """No garbage collection in any thread while the block runs (from any thread; nested and
    concurrent pauses end with the last). Only for a block that makes no lasting cycles."""
    global _pauses, _resume
    with _pause_lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()
