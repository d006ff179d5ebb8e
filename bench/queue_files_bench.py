"""The store's CPU a put and a get over more queues than it keeps mapped, with the ConsumeQueue
files past the mapped ones kept open and without (issue 34: ``consumequeue_open_files``).

    .venv/bin/python bench/queue_files_bench.py [--queues 10000] [--recent 1000] [--rounds 5]

One process, one :class:`storage.store.MessageStore` per setting (``consumequeue_open_files`` 0,
each read and write past the mapped segments opening its file, and ``--open-files``), each in a
fresh directory: a message put in every queue first (the first 4,096 queues' segments created
mapped, the others not), then, over the last ``--recent`` queues in turn (queues used lately,
past the mapped ones) and over every queue in turn, one put of one message a queue and one get
of one message a queue at offset 0. Each figure is the CPU time (``time.process_time``) of a
pass over those queues, microseconds a message, the least of ``--rounds`` passes; printed with
the ratio kept open / opened each time. The two stores are open together and their passes
alternate, so the machine's load swings weigh on both alike. Asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import smoke
from protocol.message import Message
from storage.consumequeue import mapped_limit, open_limit
from storage.store import GetStatus, MessageStore, StoreConfig

QUEUES_A_TOPIC = 8


def topic(q: int) -> tuple[str, int]:
    return f"Bench{q // QUEUES_A_TOPIC:05d}", q % QUEUES_A_TOPIC


def cpu_a_message(one_pass: Callable[[], int]) -> float:
    """CPU seconds a message of one pass."""
    start = time.process_time()
    count = one_pass()
    return (time.process_time() - start) / count


class Store:
    """One store and its passes: a put of one message a queue, a get of one at offset 0."""

    def __init__(self, data_dir: Path, open_files: int, args: argparse.Namespace) -> None:
        self.store = MessageStore(
            StoreConfig(
                data_dir=data_dir,
                commitlog_segment_bytes=256 << 20,
                consumequeue_segment_entries=1024,
                index_enable=False,
                consumequeue_open_files=open_files,
            )
        )
        self.store.open()
        self.body = b"x" * args.body
        self.now = int(time.time() * 1000)
        self.puts(range(args.queues))()
        self.store.flush()

    def puts(self, queues: range) -> Callable[[], int]:
        def one_pass() -> int:
            for q in queues:
                name, queue_id = topic(q)
                self.store.put(name, queue_id, [Message(topic=name, body=self.body)], self.now)
            return len(queues)

        return one_pass

    def gets(self, queues: range) -> Callable[[], int]:
        def one_pass() -> int:
            for q in queues:
                name, queue_id = topic(q)
                got = self.store.get(name, queue_id, 0, 1, 1 << 20)
                assert got.status is GetStatus.FOUND, (q, got.status)
            return len(queues)

        return one_pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--recent", type=int, default=1000, help="queues used lately")
    parser.add_argument("--open-files", type=int, default=2048, help="consumequeue_open_files")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--body", type=int, default=256)
    args = smoke.parse_args(parser, queues=300, recent=100, rounds=1)
    args.recent = min(args.recent, args.queues)
    print(
        f"{args.queues:,} queues, {mapped_limit():,} segments mapped at most, "
        f"open files {open_limit(args.open_files):,} (of --open-files {args.open_files:,})"
    )
    recent = range(args.queues - args.recent, args.queues)
    every = range(args.queues)
    passes: list[tuple[str, Callable[[Store], Callable[[], int]]]] = [
        (f"put, the last {args.recent:,} queues in turn", lambda st: st.puts(recent)),
        (f"get, the last {args.recent:,} queues in turn", lambda st: st.gets(recent)),
        (f"put, all {args.queues:,} queues in turn", lambda st: st.puts(every)),
        (f"get, all {args.queues:,} queues in turn", lambda st: st.gets(every)),
    ]
    off: dict[str, float] = {}
    on: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="queue-files-bench-") as tmp:
        stores = (Store(Path(tmp) / "off", 0, args), Store(Path(tmp) / "on", args.open_files, args))
        try:
            for name, make in passes:
                for _ in range(args.rounds):  # the two stores' passes in turn, the least of each
                    for store, best in zip(stores, (off, on), strict=True):
                        took = cpu_a_message(make(store))
                        best[name] = min(best.get(name, took), took)
        finally:
            for store in stores:
                store.store.flush()
                store.store.close()
    print(f"{'CPU a message, us':44} {'opened each':>12} {'kept open':>10} {'ratio':>6}")
    for name, before in off.items():
        after = on[name]
        print(f"{name:44} {before * 1e6:12.2f} {after * 1e6:10.2f} {after / before:6.2f}")


if __name__ == "__main__":
    main()
