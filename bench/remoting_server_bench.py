"""The remoting server's own CPU per request (issue 34: a broker heartbeat under 50 us on the
active controller; what the server adds to each one, without Raft, the live table or the
election scan).

A child process serves one handler on :class:`remoting.server.RemotingServer` (uvloop, as the
daemons run, the collector tuned as theirs: :mod:`daemon.gc_tuning`): it parses a
BROKER_HEARTBEAT (904) and answers it with a HeartbeatAnswer, the frames a controller reads and
writes for each heartbeat. This process opens ``--connections`` connections to it and sends on
each one request at a time, ``--interval`` seconds apart (0: the next as soon as the answer is
in), as the simulated brokers of bench/scale_bench.py do (300 of them every 500 ms at its 10x
column). Per round of ``--seconds``: the CPU time of the child's loop thread (/proc/<pid>/schedstat,
in nanoseconds) over the requests answered. Printed per round and as the median and least.

    python bench/remoting_server_bench.py [--connections 300] [--interval 0.5] [--seconds 10]
        [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import smoke
from daemon.tasks import cancel_and_wait
from protocol.codes import ResponseCode
from protocol.controller_requests.heartbeats import BrokerHeartbeat, HeartbeatAnswer
from protocol.remoting import Frame, response
from remoting.client import RemotingClient
from remoting.server import Connection, RemotingServer


def loop_cpu(pid: int) -> float:
    """Seconds the main thread of ``pid`` (the server's loop) ran, from /proc/<pid>/schedstat:
    nanoseconds, where /proc/<pid>/stat counts 10 ms ticks."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


BEAT = BrokerHeartbeat(
    broker_name="scale-0001",
    broker_id=2,
    cluster="DefaultCluster",
    broker_address="127.0.0.1:10911",
    epoch=3,
    max_offset=123_456_789,
    confirm_offset=123_456_789,
    election_priority=0,
    heartbeat_timeout_ms=3000,
)


def answer(_conn: Connection, req: Frame) -> Frame:
    beat = BrokerHeartbeat.parse(req.header, req.body)
    header, body = HeartbeatAnswer(
        master_broker_id=1,
        master_epoch=beat.epoch,
        heartbeat_timeout_ms=beat.heartbeat_timeout_ms,
        auth_digest="",
        producer_id_limit=1000,
    ).encode()
    return response(req, ResponseCode.SUCCESS, header, body)


async def serve() -> None:
    from daemon.gc_tuning import tune_for_latency

    tune_for_latency()
    server = RemotingServer(name="bench")
    server.register(BEAT.code, answer)
    port = await server.start("127.0.0.1", 0)
    print(port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until closed
    await server.stop()


async def measure(args: argparse.Namespace) -> None:
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    conns: list[RemotingClient] = []
    tasks: list[asyncio.Task[None]] = []
    answered = 0
    try:
        assert child.stdout is not None
        port = int(await asyncio.to_thread(child.stdout.readline))
        conns = [
            await RemotingClient.connect(f"127.0.0.1:{port}", 10.0) for _ in range(args.connections)
        ]
        header, body = BEAT.encode()

        async def beat(conn: RemotingClient, delay: float) -> None:
            nonlocal answered
            await asyncio.sleep(delay)
            while True:
                resp = await conn.request(BEAT.code, header, body, timeout=10.0)
                if resp.code != ResponseCode.SUCCESS:
                    raise RuntimeError(f"answered {resp.code}: {resp.header}")
                answered += 1
                if args.interval:
                    await asyncio.sleep(args.interval)

        n = len(conns)
        tasks = [asyncio.create_task(beat(c, args.interval * i / n)) for i, c in enumerate(conns)]
        await asyncio.sleep(max(args.interval, 0.5) * 2)  # every connection going
        figures = []
        for r in range(args.rounds):
            n0, cpu0, t0 = answered, loop_cpu(child.pid), time.perf_counter()
            await asyncio.sleep(args.seconds)
            for task in tasks:
                if task.done():
                    task.result()  # a failed request ends the bench with its error
            done, cpu = answered - n0, loop_cpu(child.pid) - cpu0
            us = cpu / done * 1e6 if done else float("nan")
            figures.append(us)
            print(
                f"  round {r + 1}: {us:5.1f} us of the server's CPU per request "
                f"({done / (time.perf_counter() - t0):,.0f} a second, "
                f"load average {os.getloadavg()[0]:.1f})",
                flush=True,
            )
        print(
            f"server CPU per request ({args.connections} connections, interval "
            f"{args.interval:g} s): median {statistics.median(figures):.1f} us, "
            f"least {min(figures):.1f} us"
        )
    finally:
        await cancel_and_wait(tasks)
        for conn in conns:
            conn.close()
        if child.stdin is not None:
            child.stdin.close()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=300, help="client connections")
    parser.add_argument(
        "--interval", type=float, default=0.5, help="seconds between a connection's requests"
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds measured")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    return smoke.parse_args(parser, connections=4, seconds=1.0, rounds=1)


def main() -> None:
    args = parse_args()
    if args.serve:
        import uvloop

        uvloop.run(serve())
    else:
        import uvloop

        uvloop.run(measure(args))


if __name__ == "__main__":
    main()
