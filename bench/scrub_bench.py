"""The background scrub's cost to the hot path, and the time to repair one record (issue 31).

Three controllers and one broker group of three replicas, all-ack, flush async, 1 GiB segments
(bench/group_of_three.py's layout), real processes on loopback:

  1. fill: ``--fill-gib`` GiB of 128 KiB messages (so the scrub has a log of several GiB to
     read; it starts at the oldest record);
  2. P1 (bench/ha_bench.py phase 1): ``--messages`` 1 KiB sends over one connection, 64 in
     flight, every one acknowledged by the whole SyncStateSet; with the scrub off
     (``scrub_bytes_per_s = 0``) and at its default rate (8 MiB/s), alternating ``--rounds``
     times (changed live on every broker with rmqctl updateBrokerConfig: no restart), printing
     each run's msg/s, p50/p99 and the master's CPU per 100k messages, then the medians and the
     ratio on/off; the scrub's bytes read during each run (rmq_broker_scrub_bytes_total on the
     master) show it was reading;
  3. the scrub alone: the master's CPU share over ``--idle`` seconds with nothing sent, off and
     at the default rate;
  4. repair: ``--repairs`` times, one byte of a record's body flipped in the running master's
     CommitLog file (the mapping sees it at once), then one PULL_MESSAGE of that record: its
     latency (read, REPAIR_RECORD to a slave, checks, write back, fsync, read again) against a
     pull of an intact record, and the master's rmq_broker_records_repaired_total after.

Nothing is asserted; the load average is printed with every figure (a loaded machine moves
them all: compare runs made at similar loads).

    python bench/scrub_bench.py [--fill-gib G] [--messages N] [--rounds R] [--idle S]
        [--repairs K] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import smoke
from bench.broker_bench import cpu_seconds, fill_log, load, pct, run_async, send_requests
from bench.group_of_three import payload
from client.bootstrap import Bootstrap
from protocol.codes import RequestCode, ResponseCode
from protocol.message import HEAD_SIZE, parse_msg_id
from protocol.pull import PullRequest
from remoting.client import RemotingClient
from tests.cluster.support import create_topic, full_sync_state_set, node_at, route_has_master
from tests.support.cluster import STEADY_MASTER, BrokerNode, Cluster
from tests.support.procs import free_port, rmqctl
from tests.support.wait import wait_until_async

TOPIC = "ScrubBench"
QUEUES = 8
DEFAULT_RATE = 8 << 20
FILL_BODY = 128 * 1024


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return float("nan")


def set_rate(cluster: Cluster, rate: int) -> None:
    done = rmqctl(
        "-a", cluster.controller_addresses, "updateBrokerConfig", "-c", "DefaultCluster",
        "-k", "scrub_bytes_per_s", "-v", str(rate),
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"updateBrokerConfig failed: {done.stderr}")


def segment_of(node: BrokerNode, offset: int) -> tuple[Path, int]:
    segments = sorted(
        (int(p.name), p) for p in (node.data_dir / "commitlog").iterdir() if p.name.isdigit()
    )
    start, path = max((s, p) for s, p in segments if s <= offset)
    return path, offset - start


def flip(node: BrokerNode, offset: int) -> None:
    path, rel = segment_of(node, offset)
    fd = os.open(path, os.O_RDWR)
    try:
        byte = os.pread(fd, 1, rel)[0]
        os.pwrite(fd, bytes([byte ^ 0x01]), rel)
    finally:
        os.close(fd)


async def pull_one(conn: RemotingClient, queue_id: int, offset: int) -> float:
    ask = PullRequest(
        group="scrub-bench", topic=TOPIC, queue_id=queue_id, offset=offset, max_count=1
    )
    t0 = time.perf_counter()
    resp = await conn.request(ask.code, *ask.encode(), timeout=30)
    dt = time.perf_counter() - t0
    if resp.code != ResponseCode.SUCCESS:
        raise SystemExit(f"pull of {queue_id}:{offset} answered {resp.code}: {resp.remark}")
    return dt


async def p1(
    conn: RemotingClient, pid: int, messages: int, port: int
) -> tuple[float, float, float, float, float]:
    """(msg/s, p50 ms, p99 ms, master CPU s per 100k, MiB the master's scrub read meanwhile)."""
    body = payload(1024)
    scrubbed0 = metric(port, "rmq_broker_scrub_bytes_total")
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    lat = await send_requests(
        conn, RequestCode.SEND_MESSAGE, TOPIC, QUEUES, body, messages, 64, timeout=30
    )
    dt, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    scrubbed = metric(port, "rmq_broker_scrub_bytes_total") - scrubbed0
    return (
        messages / dt,
        pct(lat, 0.5) * 1e3,
        pct(lat, 0.99) * 1e3,
        cpu / messages * 1e5,
        scrubbed / (1 << 20),
    )


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="rmq-scrub-bench-") as tmp:
        cluster = Cluster(Path(tmp))
        ports = [free_port() for _ in range(3)]
        boot: Bootstrap | None = None
        try:
            cluster.start_controllers()
            boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
            cluster.add_group(
                "broker-a",
                3,
                per_broker=[["--metrics-port", str(p)] for p in ports],
                # Passes back to back while on: the cost of reading at the rate, not a rest.
                # The bench times one master and flips bytes in its files: no failover mid-run.
                config="scrub_bytes_per_s = 0\nscrub_interval_hours = 0\n" + STEADY_MASTER,
                segment_bytes=1 << 30,
            )
            doc = await full_sync_state_set(boot, cluster, timeout=120)
            await wait_until_async(lambda: route_has_master(boot), "routes", 60, interval=0.2)
            master = node_at(cluster, doc["masterAddress"])
            port = ports[cluster.brokers.index(master)]
            await create_topic(boot, master.address, TOPIC, queues=QUEUES)
            conn = await RemotingClient.connect(master.address, timeout=5.0)
            try:
                fill = int(args.fill_gib * (1 << 30)) // FILL_BODY
                await fill_log(conn, TOPIC, QUEUES, payload(FILL_BODY), fill)
                results: dict[str, list[tuple[float, float, float, float, float]]] = {
                    "off": [],
                    "on": [],
                }
                for r in range(args.rounds):
                    for mode, rate in (
                        (("off", 0), ("on", DEFAULT_RATE))
                        if r % 2 == 0
                        else (("on", DEFAULT_RATE), ("off", 0))
                    ):
                        set_rate(cluster, rate)
                        await asyncio.sleep(1.0)
                        got = await p1(conn, master.pid, args.messages, port)
                        results[mode].append(got)
                        print(
                            f"P1 scrub {mode:>3} (round {r + 1}): {got[0]:>8,.0f} msg/s  p50 {got[1]:.2f} ms  "
                            f"p99 {got[2]:.2f} ms  master CPU {got[3]:.2f} s/100k  scrub read {got[4]:.0f} MiB  {load()}",
                            flush=True,
                        )
                med = {
                    m: [statistics.median(v[i] for v in results[m]) for i in range(5)]
                    for m in results
                }
                print(
                    f"P1 medians: off {med['off'][0]:,.0f} msg/s (p50 {med['off'][1]:.2f} ms), "
                    f"on {med['on'][0]:,.0f} msg/s (p50 {med['on'][1]:.2f} ms); on/off "
                    f"{med['on'][0] / med['off'][0]:.2f} (throughput), {med['on'][1] / med['off'][1]:.2f} (p50), "
                    f"master CPU per 100k {med['on'][3] / med['off'][3]:.2f}",
                    flush=True,
                )
                for mode, rate in (("off", 0), ("on", DEFAULT_RATE)):
                    set_rate(cluster, rate)
                    await asyncio.sleep(1.0)
                    s0, c0, t0 = (
                        metric(port, "rmq_broker_scrub_bytes_total"),
                        cpu_seconds(master.pid),
                        time.perf_counter(),
                    )
                    await asyncio.sleep(args.idle)
                    dt = time.perf_counter() - t0
                    read = (metric(port, "rmq_broker_scrub_bytes_total") - s0) / (1 << 20) / dt
                    print(
                        f"idle, scrub {mode:>3}: master CPU {(cpu_seconds(master.pid) - c0) / dt:.1%} of a core, scrub {read:.1f} MiB/s  {load()}",
                        flush=True,
                    )
                set_rate(cluster, 0)
                # Repair: records of queue 0 sent now, one byte of each flipped in turn.
                sent = []
                for _ in range(args.repairs * 2):
                    resp = await conn.request(
                        RequestCode.SEND_MESSAGE, {"topic": TOPIC, "queueId": 0}, payload(1024), 30
                    )
                    if resp.code != ResponseCode.SUCCESS:
                        raise SystemExit(f"send failed: {resp.remark}")
                    h = resp.header
                    sent.append((int(h["queueOffset"]), parse_msg_id(str(h["msgId"]))[1]))  # type: ignore[arg-type]
                await asyncio.sleep(1.0)  # replicated (all-ack answered) and flushed
                intact, repaired = [], []
                before = metric(port, "rmq_broker_records_repaired_total")
                for k in range(args.repairs):
                    q_ok, _ = sent[2 * k + 1]
                    q_bad, physical = sent[2 * k]
                    intact.append(await pull_one(conn, 0, q_ok))
                    flip(master, physical + HEAD_SIZE + 7)
                    repaired.append(await pull_one(conn, 0, q_bad))
                after = metric(port, "rmq_broker_records_repaired_total")
                print(
                    f"repair: a pull of a damaged record {statistics.median(repaired) * 1e3:.1f} ms median "
                    f"(min {min(repaired) * 1e3:.1f}, max {max(repaired) * 1e3:.1f}) against "
                    f"{statistics.median(intact) * 1e3:.2f} ms for an intact one, {args.repairs} each; "
                    f"repaired_total +{after - before:.0f}  {load()}",
                    flush=True,
                )
            finally:
                conn.close()
        finally:
            if boot is not None:
                boot.close()
            cluster.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fill-gib", type=float, default=3.0)
    parser.add_argument("--messages", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument("--repairs", type=int, default=5)
    args = smoke.parse_args(parser, fill_gib=0.01, messages=640, rounds=1, idle=0.5, repairs=1)
    run_async(lambda: main(args))
