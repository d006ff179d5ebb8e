"""What a broker heartbeat costs the active controller in CPU (issue 34's target: under 50 us),
measured alone: bench/scale_bench.py's "CPU per heartbeat" without the rest of its column.

Three ``rmq-controller`` processes on loopback (as bench/scale_bench.py starts them) and, in this
process, ``--brokers`` simulated brokers (``--brokers`` / 3 groups of 3; scale_bench's 10x
column has 300), each on its own connection, heartbeating every 500 ms with the real request
(BROKER_HEARTBEAT, 904), as scale_bench's load does. No topics: a heartbeat reads none.

Per window of ``--window`` seconds: the leader's utime+stime (/proc/<pid>/stat) less its idle
CPU (measured before any broker joined), divided by the heartbeats answered; ``--windows``
windows, printed each and as their median and least. ``--profile FILE`` records one more
window with ``py-spy record --native`` on the leader (the bench extras; py-spy needs ptrace
permission on the leader, a child of this process) and writes its flame graph to FILE;
``--top N`` prints the N heaviest frames of the loop's thread (inclusive, as shares of its
busy samples) from a raw (collapsed) recording.

    python bench/heartbeat_bench.py [--brokers 300] [--window 10] [--windows 5]
        [--profile FILE] [--top 25]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import smoke
from bench.controller_bench import leader_address
from bench.scale_bench import CONFIG, Column, Load, heartbeat_cpu, idle_cpu
from protocol.controller_requests.heartbeats import BrokerHeartbeat
from tests.controller.support import ControllerCluster


def profile(pid: int, seconds: float, out: Path, top: int) -> None:
    """py-spy --native over ``seconds`` of ``pid`` (1,000 samples a second): a flame graph to
    ``out``; with ``top``, a raw recording beside it and the ``top`` heaviest frames of the event
    loop's thread, inclusive, as shares of its busy samples (those not waiting in epoll)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    fmt = ["--format", "raw"] if top else []
    target = out.with_suffix(".txt") if top else out
    cmd = [spy, "record", "--native", "--rate", "1000", "--pid", str(pid)]
    cmd += ["--duration", str(int(seconds)), *fmt, "--output", str(target)]
    subprocess.run(cmd, check=True, capture_output=True)
    if not top:
        print(f"  profile: {target}")
        return
    inclusive: collections.Counter[str] = collections.Counter()
    busy = 0
    for line in target.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        if not any(f.startswith("uv_run ") for f in frames) or "epoll" in frames[-1]:
            continue  # another thread, or the loop waiting
        busy += int(n)
        for frame in set(frames):
            inclusive[frame] += int(n)
    print(f"  profile: {target} ({busy} busy samples of the loop's thread); inclusive:")
    for frame, samples in inclusive.most_common(top):
        print(f"    {100 * samples / busy:5.1f}%  {frame}")


async def main_async(args: argparse.Namespace) -> None:
    groups = max(1, args.brokers // 3)
    with tempfile.TemporaryDirectory(prefix="hb-bench-") as tmp:
        cluster = ControllerCluster(Path(tmp), config=CONFIG)
        procs = list(cluster.procs.values())
        load: Load | None = None
        try:
            cluster.start()
            lead = await leader_address(cluster, procs)
            leader = next(p for p in procs if p.address == lead)
            idle = await idle_cpu(leader, args.window / 2)
            load = Load(cluster.addresses, [p.address for p in procs], Column(1, 0, groups))
            await load.start()
            for task in load.tasks[1::2]:  # no topics to register: the route loops go
                task.cancel()
            await asyncio.sleep(2.0)  # every broker beating
            if await leader_address(cluster, procs) != lead:
                lead = await leader_address(cluster, procs)
                leader = next(p for p in procs if p.address == lead)
                print("the leader changed while the brokers joined (its idle CPU is the last's)")
            print(
                f"{len(load.brokers)} brokers, leader {lead} (pid {leader.pid}), idle CPU "
                f"{idle * 1e3:.1f} ms/s, load average {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            figures = []
            for i in range(args.windows):
                beats0 = load.beats
                us = await heartbeat_cpu(leader, load, args.window, idle)
                figures.append(us)
                print(
                    f"  window {i + 1}: {us:6.1f} us per heartbeat "
                    f"({(load.beats - beats0) / args.window:,.0f} a second, "
                    f"load average {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
            if await leader_address(cluster, procs) != lead:
                print("  the leader changed during the windows: the figures mix two leaders")
            print(
                f"CPU per heartbeat: median {statistics.median(figures):.1f} us, least "
                f"{min(figures):.1f} us over {len(figures)} windows of {args.window:g} s"
            )
            if args.profile:
                await asyncio.to_thread(
                    profile, leader.pid, args.window, Path(args.profile), args.top
                )
        finally:
            try:
                if load is not None:
                    await load.stop()
            finally:
                cluster.stop()  # by their PIDs


async def in_process(args: argparse.Namespace) -> None:
    """The leader's Python per heartbeat, without the loop's wake-up and read: three controllers
    in this process (tests/controller/support.py ServiceCluster), one registered broker, and
    its BROKER_HEARTBEAT frames handed to the leader's connection for it as reads
    (``data_received``), one per turn of the loop: the frame's decode, the dispatch, the
    handler, the answer's encode, its ``write`` to the socket and the loop's turn (with
    whatever else fell due in it: the controllers' Raft ticks), on this thread's CPU
    (``time.thread_time``). Not in it: the loop's wait for the socket and the read."""
    from protocol.remoting import encode_frame, request
    from tests.controller.support import FakeBroker, ServiceCluster

    with tempfile.TemporaryDirectory(prefix="hb-bench-") as tmp:
        async with ServiceCluster(Path(tmp)) as cluster:
            leader = await cluster.leader()
            broker = FakeBroker(cluster.addresses, "inproc-0000")
            try:
                await broker.start()
                await broker.join()
                if (await broker.heartbeat_as_a_broker()).code != 0:
                    raise RuntimeError("the broker's heartbeat was refused")
                svc = leader.service
                holder = svc.bindings.holder(broker.broker_name, broker.broker_id)
                conn = next(c for c in leader.server.connections if svc.connections.of(c) == holder)
                header, body = broker.beat().encode()
                reads = [
                    encode_frame(request(BrokerHeartbeat.code, 1 << 30 | i, header, body))
                    for i in range(args.beats)
                ]
                figures = []
                for _ in range(args.rounds):
                    if not leader.driver.holds_lease():
                        await asyncio.sleep(0.2)  # a heartbeat without the lease is refused
                    t0 = time.thread_time()
                    for data in reads:
                        conn.data_received(data)
                        await asyncio.sleep(0)  # one loop turn per read, as from the sockets
                    figures.append((time.thread_time() - t0) / len(reads) * 1e6)
                    await asyncio.sleep(0.1)  # the broker reads the answers
                print(
                    f"in process, the leader's CPU per heartbeat ({args.rounds} rounds of "
                    f"{args.beats}): median {statistics.median(figures):.2f} us, least "
                    f"{min(figures):.2f} us (load average {os.getloadavg()[0]:.1f})"
                )
            finally:
                await broker.stop()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", type=int, default=300, help="simulated brokers (3 a group)")
    parser.add_argument("--window", type=float, default=10.0, help="seconds per window")
    parser.add_argument("--windows", type=int, default=5, help="windows measured")
    parser.add_argument("--profile", default="", help="py-spy --native one more window to FILE")
    parser.add_argument("--top", type=int, default=0, help="with --profile: N heaviest frames")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="instead: the leader's Python per heartbeat, frames handed to its connection",
    )
    parser.add_argument("--beats", type=int, default=2000, help="--in-process: per round")
    parser.add_argument("--rounds", type=int, default=20, help="--in-process: rounds")
    return smoke.parse_args(parser, brokers=6, window=1.0, windows=1, beats=50, rounds=2)


def main() -> None:
    args = parse_args()
    if args.in_process:
        import uvloop

        uvloop.run(in_process(args))
    else:
        asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
