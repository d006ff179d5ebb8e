"""How recovery and retention grow with the log's size (issue 34 item 2's log sizes).

For each size (``--log-gib``, GiB, e.g. ``1,10``) a fresh store in a temporary directory with the
production settings (:class:`storage.store_config.StoreConfig`'s defaults: 1 GiB CommitLog
segments, 300,000-entry ConsumeQueue segments, the key index on) is written by the store's own
writer (:meth:`MessageStore.put`, batches of 64 messages of ``--log-body`` bytes over 8 queues,
flushed every 256 MiB as the broker's flusher does), then:

  clean recovery       close (a clean stop), open again: seconds
  kill -9 recovery     a forked child opens the store, puts one batch, flushes and kills itself
                       (SIGKILL: the abort marker stays); open again here: seconds
  retention            every segment past retention (now moved past it): delete_expired's
                       seconds (it keeps the segment being written)

and the growth table over the sizes, with each measure extrapolated to 1 TiB on the line through
the two largest sizes.
The data is deleted after each size. Needs the size plus 20 GiB free (checked first: a size that
does not fit is skipped and said so).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.growth import Measure, Worst, print_growth
from protocol.message import Message
from storage.store import MessageStore, StoreConfig

GIB = 1 << 30
SPARE = 20 * GIB
BATCH = 64
QUEUES = 8
FLUSH_EVERY = 256 << 20
TOPIC = "ScaleLog"
SIZE_LOAD = "log size"

MEASURES: tuple[Measure, ...] = (
    ("write", "s", SIZE_LOAD),
    ("clean recovery", "s", SIZE_LOAD),
    ("kill -9 recovery", "s", SIZE_LOAD),
    ("retention", "s", SIZE_LOAD),
)


@dataclass
class LogColumn:
    gib: float
    figures: dict[str, float] = field(default_factory=dict)


def open_store(data_dir: Path) -> MessageStore:
    store = MessageStore(StoreConfig(data_dir=data_dir))
    store.open()
    return store


def batch(body_bytes: int) -> list[Message]:
    body = os.urandom(body_bytes // 2).hex().encode()
    return [Message(topic=TOPIC, body=body, born_host="10.0.0.1:50000") for _ in range(BATCH)]


def write(data_dir: Path, size: int, body_bytes: int) -> float:
    """``size`` bytes of records by MessageStore.put, flushed as it goes; seconds."""
    store = open_store(data_dir)
    messages = batch(body_bytes)
    now = int(time.time() * 1000)
    t0 = time.perf_counter()
    flushed_at = 0
    i = 0
    while store.max_offset < size:
        store.put(TOPIC, i % QUEUES, messages, now)
        i += 1
        if store.max_offset - flushed_at >= FLUSH_EVERY:
            store.flush()
            flushed_at = store.max_offset
    store.close()
    return time.perf_counter() - t0


def timed_open(data_dir: Path) -> float:
    t0 = time.perf_counter()
    store = open_store(data_dir)
    took = time.perf_counter() - t0
    store.close()
    return took


def crash(data_dir: Path, body_bytes: int) -> None:
    """A child opens the store, puts a batch, flushes, and is killed (-9) with it open."""
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            store = open_store(data_dir)
            store.put(TOPIC, 0, batch(body_bytes), int(time.time() * 1000))
            store.flush()
        finally:
            os.kill(os.getpid(), signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if not os.WIFSIGNALED(status) or os.WTERMSIG(status) != signal.SIGKILL:
        raise RuntimeError(f"the crashing child ended with status {status}")
    if not (data_dir / "abort").exists():
        raise RuntimeError("the killed store left no abort marker")


def retention(data_dir: Path) -> tuple[float, int]:
    """Every segment past retention: (seconds of delete_expired, segments deleted)."""
    store = open_store(data_dir)
    try:
        later = int(time.time() * 1000) + int((store.config.retention_hours + 1) * 3_600_000)
        t0 = time.perf_counter()
        deleted = store.delete_expired(later, disk_used_ratio=0.0)
        return time.perf_counter() - t0, deleted
    finally:
        store.close()


def measure(col: LogColumn, body_bytes: int, root: Path) -> None:
    f = col.figures
    data_dir = Path(tempfile.mkdtemp(prefix=f"scale-log-{col.gib:g}g-", dir=root))
    try:
        f["write"] = write(data_dir, int(col.gib * GIB), body_bytes)
        f["clean recovery"] = timed_open(data_dir)
        crash(data_dir, body_bytes)
        f["kill -9 recovery"] = timed_open(data_dir)
        f["retention"], deleted = retention(data_dir)
        print(
            f"  log {col.gib:g} GiB: written at {col.gib * 1024 / f['write']:,.0f} MiB/s, "
            f"clean recovery {f['clean recovery']:.2f} s, kill -9 recovery "
            f"{f['kill -9 recovery']:.2f} s, retention {f['retention']:.2f} s "
            f"({deleted} segments)",
            flush=True,
        )
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def run(sizes: list[float], body_bytes: int, root: Path) -> Worst:
    """Each size that fits the disk, then the table and the 1 TiB extrapolation."""
    cols: list[LogColumn] = []
    for gib in sizes:
        free = shutil.disk_usage(root).free
        if gib * GIB + SPARE > free:
            print(
                f"log {gib:g} GiB skipped: {free / GIB:.0f} GiB free at {root}, "
                f"{gib:g} GiB + 20 GiB spare needed",
                flush=True,
            )
            continue
        print(f"log {gib:g} GiB ({free / GIB:.0f} GiB free at {root})", flush=True)
        col = LogColumn(gib)
        measure(col, body_bytes, root)
        cols.append(col)
    if not cols:
        return (0.0, "")
    print()
    print(f"log sizes: {', '.join(f'{c.gib:g} GiB' for c in cols)} (load x: the size)")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (a shared machine)")
    base = cols[0].gib
    factors = [round(c.gib / base) for c in cols]
    worst = print_growth(
        MEASURES, factors, [c.figures for c in cols], [{SIZE_LOAD: c.gib} for c in cols]
    )
    print(extrapolation(cols))
    return worst


def extrapolation(cols: list[LogColumn]) -> str:
    """Each measure at 1 TiB: a line through the two largest sizes (the largest one's cost per
    GiB when there is one size)."""
    last = cols[-1]
    prev = cols[-2] if len(cols) > 1 else LogColumn(0.0, {name: 0.0 for name, _, _ in MEASURES})
    parts = []
    for name, _, _ in MEASURES:
        slope = (last.figures[name] - prev.figures[name]) / (last.gib - prev.gib)
        at = max(0.0, last.figures[name] + slope * (1024 - last.gib))  # noise may slope down
        parts.append(f"{name} {at:,.0f} s")
    return f"1 TiB, on the line through {prev.gib:g} and {last.gib:g} GiB: " + ", ".join(parts)


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-gib",
        default="",
        help="log sizes to write and recover, GiB, comma-separated (e.g. 1,10; none: skipped)",
    )
    parser.add_argument("--log-body", type=int, default=16 * 1024, help="message body bytes")
    parser.add_argument(
        "--log-dir", default=tempfile.gettempdir(), help="where the logs are written"
    )
