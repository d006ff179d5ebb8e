"""Filtered reads with and without the ConsumeQueue tag-hash check (issue 12, docs/pop.md).

One queue of N messages (1 KiB) of which 1 in 100 has the subscribed tag. The queue is read
from start to end by a consumer subscribed to that tag, two ways:

* ``records``: the store reads every record (up to ``--batch`` per read, as a pull without the
  check did) and each one is checked on its tags;
* ``hash``: the store looks at the ConsumeQueue entries' tag hashes first and reads only the
  records whose hash matches (1,024 entries a read, as pulls and POP do now), and those are
  confirmed on their tags.

Prints the entries passed per second of each and the ratio. Nothing is asserted.

    python bench/tag_filter_bench.py [--messages 100000] [--size 1024] [--every 100]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import smoke
from protocol.filter import TagFilter, filter_records, parse_tag_expression
from protocol.message import Message
from storage.store import GetStatus, MessageStore, StoreConfig

TOPIC = "FilterBench"
SCAN = 1024


def read_all(store: MessageStore, wanted: TagFilter, use_hash: bool, batch: int) -> int:
    """Read the queue through; returns the messages kept."""
    hashes = wanted.hashes if use_hash else None
    offset = kept = 0
    while True:
        res = store.get(TOPIC, 0, offset, batch, 4 << 20, None, hashes, SCAN)
        if res.status is not GetStatus.FOUND:
            return kept
        kept += filter_records(res.body, wanted)[1]
        offset = res.next_offset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--every", type=int, default=100, help="1 message in N matches")
    parser.add_argument("--batch", type=int, default=32, help="records a read serves")
    parser.add_argument("--rounds", type=int, default=3)
    args = smoke.parse_args(parser, messages=500, every=10, rounds=1)
    wanted = parse_tag_expression("Match")
    if wanted is None:
        raise SystemExit("the tag expression parsed as '*'")
    with tempfile.TemporaryDirectory(prefix="tag-filter-bench-") as tmp:
        store = MessageStore(StoreConfig(data_dir=Path(tmp)))
        store.open()
        try:
            body = b"x" * args.size
            now = int(time.time() * 1000)
            for first in range(0, args.messages, 100):
                batch = [
                    Message(
                        topic=TOPIC,
                        body=body,
                        tags="Match" if (first + i) % args.every == 0 else "Other",
                        born_host="10.0.0.1:50000",
                    )
                    for i in range(min(100, args.messages - first))
                ]
                store.put(TOPIC, 0, batch, now)
            store.flush()
            print(
                f"{args.messages:,} messages of {args.size} B in one queue, 1 in {args.every} "
                f"tagged 'Match'; reads of {args.batch} records, best of {args.rounds}",
                flush=True,
            )
            rates: dict[bool, float] = {}
            for use_hash in (False, True):
                best = float("inf")
                for _ in range(args.rounds):
                    start = time.perf_counter()
                    kept = read_all(store, wanted, use_hash, args.batch)
                    best = min(best, time.perf_counter() - start)
                expected = (args.messages + args.every - 1) // args.every
                if kept != expected:
                    print(f"  kept {kept:,} messages, not {expected:,}", flush=True)
                rates[use_hash] = args.messages / best
                how = "tag hash, then record" if use_hash else "every record read    "
                print(
                    f"  {how}: {rates[use_hash]:>12,.0f} entries/s ({best * 1000:.1f} ms, "
                    f"{kept:,} kept)",
                    flush=True,
                )
            print(f"ratio (hash / records): {rates[True] / rates[False]:.1f}x", flush=True)
        finally:
            store.close()


if __name__ == "__main__":
    main()
