"""Replica replay benchmark: ``MessageStore.append_raw`` of CommitLog bytes, in process.

A master store is filled with ``put`` (1 KiB messages, batches of 64 over 8 queues); a fresh
slave store then replays its CommitLog the way a slave catching up does: ``read_raw`` of 1 MiB
from the master, ``append_raw`` of those bytes (every record validated, ConsumeQueues
dispatched). Prints MiB/s and records/s of the loop, of ``append_raw`` alone, and per CPU second
(the figure least moved by other work on a shared machine), each with its ratio to the issue's
target of 300 MiB/s; asserts nothing except that the slave ends with the master's bytes.
``--keys`` gives every message its own key, so no two records have the same properties (each
record's tail is decoded, and the key index gets an entry a record); ``--props`` gives each
message three user properties and ``--filter-index`` turns on the property filter index, whose
digests the replay then builds too. Also prints the CPU per record in microseconds.

    python bench/replay_bench.py [--records N] [--size 1024] [--chunk-kib 1024] [--keys]
        [--props] [--filter-index]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import smoke
from protocol.message import Message
from storage.store import MessageStore, StoreConfig

TARGET_MIB_S = 300.0


def figure(label: str, nbytes: int, records: int, seconds: float) -> str:
    mib_s = nbytes / seconds / (1 << 20)
    return (
        f"{label}: {mib_s:,.0f} MiB/s, {records / seconds:,.0f} records/s "
        f"({seconds:.2f} s), ratio to {TARGET_MIB_S:.0f} MiB/s {mib_s / TARGET_MIB_S:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024, help="body bytes")
    parser.add_argument("--batch", type=int, default=64, help="messages per put")
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--chunk-kib", type=int, default=1024, help="bytes per append_raw")
    parser.add_argument("--segment-mib", type=int, default=1024, help="CommitLog segment size")
    parser.add_argument("--keys", action="store_true", help="a distinct key per message")
    parser.add_argument("--props", action="store_true", help="three user properties a message")
    parser.add_argument(
        "--filter-index", action="store_true", help="keep the property filter index"
    )
    args = smoke.parse_args(parser, records=640, segment_mib=64)

    with tempfile.TemporaryDirectory(prefix="replay-bench-") as tmp:
        config = {
            "commitlog_segment_bytes": args.segment_mib << 20,
            "filter_index": args.filter_index,
        }
        master = MessageStore(StoreConfig(data_dir=Path(tmp) / "master", **config))
        master.open()
        body = b"x" * args.size
        batches = args.records // args.batch
        for i in range(batches):
            keys = (f"order-{i}-{j}" for j in range(args.batch))
            props = (
                {"region": ("eu", "us")[j % 2], "k": str(j % 10), "tier": "std"}
                if args.props
                else {}
                for j in range(args.batch)
            )
            batch = (
                [
                    Message(topic="T", body=body, keys=next(keys), properties=next(props))
                    for _ in range(args.batch)
                ]
                if args.keys or args.props
                else [Message(topic="T", body=body)] * args.batch
            )
            master.put("T", i % args.queues, batch, int(time.time() * 1000))
        records = batches * args.batch
        end = master.max_offset

        slave = MessageStore(StoreConfig(data_dir=Path(tmp) / "slave", **config))
        slave.open()
        chunk = args.chunk_kib << 10
        in_append = 0.0
        cpu = time.process_time()
        start = time.perf_counter()
        pos = 0
        while pos < end:
            data = bytes(master.read_raw(pos, min(chunk, end - pos)))
            t = time.perf_counter()
            slave.append_raw(pos, data)
            in_append += time.perf_counter() - t
            pos += len(data)
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu

        assert slave.max_offset == end
        for queue_id in range(args.queues):
            assert slave.queue_max_offset("T", queue_id) == master.queue_max_offset("T", queue_id)
        what = f"{records:,} records of {args.size} B"
        what += ", distinct keys" if args.keys else ""
        what += ", 3 properties" if args.props else ""
        what += ", filter index" if args.filter_index else ""
        print(f"replay of {end / (1 << 20):,.0f} MiB ({what}) in {chunk >> 10} KiB chunks")
        print("  " + figure("read_raw + append_raw", end, records, elapsed))
        print("  " + figure("append_raw alone", end, records, in_append))
        print("  " + figure("per CPU second", end, records, cpu))
        print(f"  CPU per record: {cpu / records * 1e6:.2f} us")
        slave.close()
        master.close()


if __name__ == "__main__":
    main()
