"""What rmq_consumer_group_lag costs a scrape with thousands of queues (``make bench
ONLY=consumer_lag``).

An in-process standalone broker with TOPICS x QUEUES queues, a few messages in each, and GROUPS
consumer groups that committed on every queue. Figures:

- the lag table alone (broker.consumer_stats.lag_by_group_topic, on the loop), when every
  queue's last message is confirmed (the common case: one counter read per queue) and when the
  confirm offset trails the last messages (a binary search over the queue's mapped entries);
- a whole /metrics scrape from another thread (the hop to the loop included);
- one GET_CONSUME_STATS answer for one group over a socket.

Targets: a scrape under 100 ms and the confirm-trailing lag table under 200 ms for 4096 queues x
4 groups. Prints numbers, never asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from prometheus_client import generate_latest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import smoke
from broker.broker import Broker
from broker.config import BrokerConfig
from broker.consumer_stats import lag_by_group_topic
from protocol.codes import RequestCode
from protocol.message import Message
from remoting.client import RemotingClient
from tests.broker.support import ConfirmedUpTo

TOPICS = 128
QUEUES = 32
GROUPS = 4
PER_QUEUE = 4
ROUNDS = 15
SCRAPE_TARGET_MS = 100.0
TRAILING_TARGET_MS = 200.0


def ms(samples: list[float]) -> str:
    return f"p50 {statistics.median(samples) * 1000:.1f} ms, max {max(samples) * 1000:.1f} ms"


async def timed_on_loop(b: Broker, rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        lag_by_group_topic(b.ctx)
        out.append(time.perf_counter() - t)
        await asyncio.sleep(0)
    return out


async def run(data: Path, topics: int, queues_per_topic: int, rounds: int) -> None:
    cfg = BrokerConfig(
        listen="127.0.0.1:0",
        data_dir=data,
        metrics_port=0,
        commitlog_segment_bytes=64 << 20,
        consumequeue_segment_entries=1024,
    )
    b = Broker(cfg)
    await b.start()
    try:
        ctx = b.ctx
        body = [Message(topic="x", body=b"x" * 64) for _ in range(PER_QUEUE)]
        for i in range(topics):
            topic = f"T{i}"
            ctx.create_topic(topic, queues_per_topic)
            for q in range(queues_per_topic):
                ctx.store.put(topic, q, body, now_ms=1_700_000_000_000)
                for g in range(GROUPS):
                    ctx.offsets.commit(f"G{g}", topic, q, g % PER_QUEUE, 1_700_000_000_000)
        queues = topics * queues_per_topic
        print(f"{queues} queues x {GROUPS} groups, {PER_QUEUE} messages per queue")

        confirmed = await timed_on_loop(b, rounds)
        print(f"lag table, every last message confirmed:  {ms(confirmed)}")
        scrapes = []
        for _ in range(rounds):
            t = time.perf_counter()
            text = await asyncio.to_thread(generate_latest, b.metrics.registry)
            scrapes.append(time.perf_counter() - t)
        series = text.decode().count("\nrmq_consumer_group_lag{")
        scrape_p50 = statistics.median(scrapes) * 1000
        print(f"whole /metrics scrape ({series} lag series):  {ms(scrapes)}")

        ctx.ha = ConfirmedUpTo(ctx.store.max_offset // 2)  # type: ignore[assignment]
        trailing = await timed_on_loop(b, rounds)
        ctx.ha = None
        trailing_p50 = statistics.median(trailing) * 1000
        print(f"lag table, confirm offset trailing:       {ms(trailing)}")

        conn = await RemotingClient.connect(f"127.0.0.1:{b.port}", timeout=5.0)
        try:
            answers = []
            for _ in range(rounds):
                t = time.perf_counter()
                frame = await conn.call(
                    RequestCode.GET_CONSUME_STATS, {"consumerGroup": "G1"}, None, 30.0
                )
                answers.append(time.perf_counter() - t)
        finally:
            conn.close()
        print(f"GET_CONSUME_STATS for one group ({len(frame.body or b'')} bytes): {ms(answers)}")
        print(
            f"scrape p50 {scrape_p50:.1f} ms vs target {SCRAPE_TARGET_MS:.0f} ms "
            f"(ratio {scrape_p50 / SCRAPE_TARGET_MS:.2f}); trailing lag table p50 "
            f"{trailing_p50:.1f} ms vs target {TRAILING_TARGET_MS:.0f} ms "
            f"(ratio {trailing_p50 / TRAILING_TARGET_MS:.2f})"
        )
    finally:
        await b.stop()


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--topics", type=int, default=TOPICS)
    p.add_argument("--queues", type=int, default=QUEUES, help="queues per topic")
    p.add_argument("--rounds", type=int, default=ROUNDS, help="timings per figure")
    args = smoke.parse_args(p, topics=4, queues=8, rounds=3)
    with tempfile.TemporaryDirectory(prefix="consumer-lag-bench-") as tmp:
        asyncio.run(run(Path(tmp) / "broker", args.topics, args.queues, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
