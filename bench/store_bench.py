"""Microbenchmark of storage.store.MessageStore: batched put and get throughput.

    .venv/bin/python bench/store_bench.py [--messages N] [--batch 64] [--size 1024]

Prints messages per second; asserts nothing. Runs in a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import smoke
from protocol.message import Message
from storage.store import GetStatus, MessageStore, StoreConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--get-batch", type=int, default=32)
    parser.add_argument("--queues", type=int, default=4)
    args = smoke.parse_args(parser, messages=640)

    with tempfile.TemporaryDirectory(prefix="store-bench-") as tmp:
        store = MessageStore(StoreConfig(data_dir=Path(tmp) / "master"))
        store.open()
        body = os.urandom(args.size)
        batch = [
            Message(topic="BenchTopic", body=body, tags="TagA", born_host="10.0.0.1:50000")
            for _ in range(args.batch)
        ]
        batches = args.messages // args.batch
        now = int(time.time() * 1000)
        start = time.perf_counter()
        for i in range(batches):
            store.put("BenchTopic", i % args.queues, batch, now)
        put_secs = time.perf_counter() - start
        put_count = batches * args.batch
        print(
            f"put: {put_count / put_secs:,.0f} msgs/s "
            f"({put_count} x {args.size} B in batches of {args.batch}, {put_secs:.2f} s)"
        )

        start = time.perf_counter()
        flushed = store.flush()
        print(f"flush: {flushed / (1 << 20):,.0f} MiB in {time.perf_counter() - start:.2f} s")

        got = 0
        start = time.perf_counter()
        for queue_id in range(args.queues):
            offset = 0
            while True:
                result = store.get("BenchTopic", queue_id, offset, args.get_batch, 4 << 20)
                if result.status is not GetStatus.FOUND:
                    break
                got += result.count
                offset = result.next_offset
        get_secs = time.perf_counter() - start
        print(f"get: {got / get_secs:,.0f} msgs/s ({got} msgs in batches of {args.get_batch})")

        replica = MessageStore(StoreConfig(data_dir=Path(tmp) / "replica"))
        replica.open()
        start = time.perf_counter()
        while replica.max_offset < store.max_offset:
            offset = replica.max_offset
            replica.append_raw(offset, store.read_raw(offset, 1 << 20))
        replay_secs = time.perf_counter() - start
        print(
            f"replay (read_raw + append_raw, 1 MiB chunks): {put_count / replay_secs:,.0f} msgs/s"
        )
        replica.close()
        store.close()


if __name__ == "__main__":
    main()
