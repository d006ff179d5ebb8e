"""The POP in-flight set's cost (docs/pop.md, "The in-flight set's size"): memory and rebuild.

* ``memory``: one broker process (flush async), N messages of 128 B on a topic of 8 queues;
  one consumer pops 32 with a 1 h invisible time and quits without acking them (they stay in
  flight for the hour); then 4 ``SimpleConsumer`` members ``receive(32)`` with a 1 h invisible
  time and batch-ack at once until every message is acked. Printed: the broker's memory
  outside the page cache (RssAnon) before the members' first POP and after their last ack, and
  the growth per message acked. 32 messages are in flight at the end, so the growth is what
  the broker keeps for acked messages (the in-flight set's, the bounded memory of the last
  65,536 acks, the ConsumeQueues' growth).
* ``rebuild``: an in-process broker's revive log is filled with what a busy hour leaves: the
  checkpoints (32 messages each) of ``--acked`` + ``--inflight`` messages and ack records
  (``--ack-batch`` keys each: 32 as ``ack_many`` and ``Consumer(pop=True)`` send, 1 as
  ``ack``) for the first ``--acked``; then the in-flight set is built from the log as a newly
  promoted master does (``PopService._rebuild``, the revive log read from the store, every
  record decoded and applied). Then a snapshot of the set is written
  (``PopService.write_snapshot``) and the set built again, from the snapshot. Printed: the
  records, the seconds of each build and of the snapshot, and the in-flight count.

Nothing is asserted. Measured on the shared 2-core machine (docs/pop.md): memory, 500,000
messages: RssAnon +75 MiB before acked deliveries left the deadline heap, +26 MiB after (and
+26 MiB with 1,000,000); rebuild, 1,000,000 acked 32 a record and 100,000 in flight: 3.3 to 3.9 s
from the whole log, snapshot written in 0.15 s, 0.33 to 0.47 s from the snapshot.

    python bench/pop_state_bench.py [--only memory|rebuild] [--messages 500000]
        [--acked 1000000] [--inflight 100000] [--ack-batch 32]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import smoke
from bench.broker_bench import rss_anon_mib, run_async
from bench.pop_bench import produce
from broker.broker import Broker
from broker.config import BrokerConfig
from broker.pop.inflight import PopState
from broker.pop.service import PopService
from client.admin import Admin
from client.simple_consumer import SimpleConsumer
from protocol.pop import Ack, Checkpoint
from tests.support.procs import BrokerProc, free_port

HOUR_S = 3600
CHECKPOINT = 32


async def memory(n: int, members: int) -> None:
    with tempfile.TemporaryDirectory(prefix="pop-state-bench-") as tmp:
        broker = BrokerProc(Path(tmp), extra=["--flush", "async"], segment_bytes=1 << 30)
        broker.start_and_wait()
        try:
            async with Admin(broker.address) as admin:
                await admin.create_topic("PopMem", queues=8)
            await produce(broker.address, "PopMem", n, b"m" * 128)
            # A consumer that dies holding messages (not acked: in flight for the hour), as
            # happens: every delivery acked after them waits behind them in the revive task's
            # deadline order (without compaction the acked ones stay there until the hour ends).
            async with SimpleConsumer(broker.address, "PM", "PopMem") as quitter:
                held = len(await quitter.receive(32, invisible_duration=HOUR_S, wait=5))
            before = rss_anon_mib(broker.pid)
            acked = held
            done = asyncio.Event()
            t0 = time.perf_counter()

            async def member() -> None:
                nonlocal acked
                async with SimpleConsumer(broker.address, "PM", "PopMem") as consumer:
                    while not done.is_set():
                        msgs = await consumer.receive(32, invisible_duration=HOUR_S, wait=1.0)
                        if not msgs:
                            continue
                        refused = [e for e in await consumer.ack_many(msgs) if e is not None]
                        if refused:
                            raise SystemExit(f"{len(refused)} acks refused: {refused[0]}")
                        acked += len(msgs)
                        if acked >= n:
                            done.set()

            await asyncio.gather(*(member() for _ in range(members)))
            dt = time.perf_counter() - t0
            after = rss_anon_mib(broker.pid)
            print(
                f"memory: {acked - held:,} popped and acked, {held} held (invisible time "
                f"{HOUR_S} s) in {dt:.1f} s; "
                f"broker RssAnon {before:.0f} MiB before the first POP, {after:.0f} MiB after "
                f"the last ack: +{after - before:.0f} MiB, "
                f"{(after - before) * 1024 * 1024 / (acked - held):.0f} B per message acked",
                flush=True,
            )
        finally:
            broker.stop()


def timed_rebuilds(pop: PopService) -> Iterator[tuple[PopState, float]]:
    """Three rebuilds of the in-flight set, each with the seconds it took."""
    for _ in range(3):
        t0 = time.perf_counter()
        state = pop._rebuild()
        yield state, time.perf_counter() - t0


async def rebuild(acked: int, inflight: int, ack_batch: int) -> None:
    with tempfile.TemporaryDirectory(prefix="pop-state-bench-") as tmp:
        cfg = BrokerConfig(
            listen=f"127.0.0.1:{free_port()}",
            data_dir=Path(tmp) / "broker-a",
            metrics_port=0,
            flush="async",
            commitlog_segment_bytes=1 << 30,
            pop_snapshot_records=0,  # the snapshot is written below, when the log is full
        )
        b = Broker(cfg)
        await b.start()
        try:
            pop = b.ctx.pop
            pop.ready()
            now = b.ctx.now_ms()
            total = acked + inflight
            records = 0
            pending: list[tuple[int, int]] = []
            t0 = time.perf_counter()
            for start in range(0, total, CHECKPOINT):
                count = min(CHECKPOINT, total - start)
                popped = tuple(range(start, start + count))
                ck = Checkpoint("G", "T", 0, start, count, popped, now, HOUR_S * 1000)
                ck_id = pop.append(ck).physical_offsets[0]
                records += 1
                pending += [(ck_id, o) for o in popped if o < acked]
                while len(pending) >= ack_batch or (pending and start + count >= total):
                    pop.append(Ack(tuple(pending[:ack_batch])))
                    del pending[:ack_batch]
                    records += 1
            written = time.perf_counter() - t0
            print(f"rebuild: {records:,} revive-log records written in {written:.1f} s", flush=True)
            for state, dt in timed_rebuilds(pop):
                print(
                    f"rebuild: {acked:,} acked ({ack_batch} a record) and {inflight:,} in "
                    f"flight, {records:,} records, no snapshot: in-flight set built in "
                    f"{dt:.2f} s ({state.inflight():,} in flight, {dt / records * 1e6:.1f} us "
                    "a record)",
                    flush=True,
                )
            pop.state = state
            t0 = time.perf_counter()
            pop.write_snapshot(state)
            dt = time.perf_counter() - t0
            print(f"rebuild: snapshot of {state.inflight():,} in flight written in {dt:.2f} s")
            for state, dt in timed_rebuilds(pop):
                print(
                    f"rebuild: from the snapshot: in-flight set built in {dt:.2f} s "
                    f"({state.inflight():,} in flight)",
                    flush=True,
                )
        finally:
            await b.stop()


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--only", choices=["memory", "rebuild"])
    p.add_argument("--messages", type=int, default=500_000, help="memory: messages popped")
    p.add_argument("--members", type=int, default=4)
    p.add_argument("--acked", type=int, default=1_000_000, help="rebuild: messages acked")
    p.add_argument("--inflight", type=int, default=100_000, help="rebuild: in flight")
    p.add_argument("--ack-batch", type=int, default=32, help="rebuild: keys per ack record")
    args = smoke.parse_args(p, messages=300, acked=2_000, inflight=300)
    if args.only in (None, "memory"):
        run_async(lambda: memory(args.messages, args.members))
    if args.only in (None, "rebuild"):
        run_async(lambda: rebuild(args.acked, args.inflight, args.ack_batch))


if __name__ == "__main__":
    main()
