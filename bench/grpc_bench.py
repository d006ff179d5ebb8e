"""gRPC benchmark (issue 13): the official RocketMQ 5 Python client (rocketmq-python-client)
through the brokers' gRPC endpoints beside our SDK over remoting, in one run against one group.

One broker group of 3 in controller mode (all-ack, flush async), each broker with a gRPC port,
1 KiB messages, a topic of 8 queues. Phases, each side in turn:

* send, 64 in flight: our SDK (``Producer.send`` from 64 tasks, auto-batching on, its default,
  and off); the official client (``Producer.send_async`` with 64 futures outstanding);
* send, one at a time: p50 of a lone send;
* receive + ack: our SDK's POP ``SimpleConsumer`` (4 members, ``receive(32)`` then one batch
  ack) and the official ``SimpleConsumer`` (1 member, ``receive(32)``, then ``ack`` of each message:
  its ``ack_async`` does not work in client 5.1.x); the latter only where the brokers serve ReceiveMessage ("not available"
  otherwise).

Printed: messages per second, the client's own CPU seconds per 100k messages (the official
client runs in a process of its own; ours in this one), the master's CPU seconds per 100k (and
per send; for the official client's sends also the two slaves' together), and the ratio gRPC /
SDK against the issue's target of 0.5. The official client is given the master's gRPC endpoint,
but the route it gets lists all three brokers and it writes through the first of them in
address order (it sorts them): ``--through master`` (the default) moves the group's master to
that broker before the phases (an election naming it), so its writes are served in-process by
the master's send service; ``--through slave`` makes that broker a slave, whose endpoint hands
each write to the master as SEND_MESSAGE. Nothing is asserted.

Measured (10,000 messages a phase, shared 2-core machine at load average 6, two runs): SDK
5,131-11,868 msg/s (auto-batch on; off 4,948-5,496) at 2.3-2.4 s master CPU per 100k; the
official client 711-893 msg/s (0.08-0.14 of the SDK's, 0.15-0.28 of the 0.5 target) with the
client itself at 50-52 s CPU per 100k and the master at 24-26 s per 100k; one at a time p50
1.9-2.0 ms against the SDK's 0.54-0.57 ms. The client's own cost alone (half a millisecond of
CPU a message: its threads, futures and grpcio's Python layer) caps it near 2,000 msg/s with a
whole core to itself. On the broker, grpcio's asyncio server is the cost: a servicer that
answers SendMessage with a constant used 0.25 ms of CPU per RPC under the same 64-in-flight load
(uvloop), about what the master spends per gRPC send here, against 0.05 ms for a SEND_MESSAGE
over remoting. Receive + ack: our POP SimpleConsumer 4,916 msg/s, the official SimpleConsumer 269
msg/s (one member, one synchronous ack per message). Again on 2026-11-29 (load average 1.5 to 4;
the receive phase had stopped with a TypeError since pop_bench.pop took a group), our POP
SimpleConsumer timed to its last ack (it used to run to the other members' last empty long
poll, up to 1 s more): 18,383-19,271 msg/s; the official SimpleConsumer 448-578 msg/s (four
runs; 0.03 of ours) at 63-67 s client CPU per 100k.

Issue 26 (2026-11-29), master CPU per official-client send, 64 in flight, 10,000 messages,
``--through master``, runs of the code before (0b9a3e0: each send a SEND_MESSAGE over a loopback
connection to the broker itself) and after (the send service in-process) taken in turn, load
average 9-13 on the shared 2 cores: before 0.763, 0.795, 0.755 ms a send (757-800 msg/s, p50
76-81 ms); after 0.617, 0.624, 0.633 ms (836-940 msg/s, p50 61-68 ms): 0.14 ms (18%) less, the
slaves unchanged (29-33 s/100k together). ``--through slave`` (the forward path, the same
before and after; load 12-22): before 0.301 and 0.229 ms a send at the master, after 0.259 and
0.236, the slaves 66-83 s/100k together. The master's CPU depends on which endpoint the client
writes through: before ``--through`` a run measured whichever broker's port sorted first. The
figures of 24-26 s/100k above (and 22.5-24.8 at 0b9a3e0, load 1-4) are those of runs through a
slave (0.23-0.27 ms a send with ``--through slave``), where the master only stores a forwarded
SEND_MESSAGE; through the master, grpcio's server and the official client's protocol cost the
master about 0.6 ms a send.

    python bench/grpc_bench.py [--messages N] [--size BYTES] [--through master|slave]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import smoke
from bench.broker_bench import cpu_seconds, pct, run_async
from bench.group_of_three import GroupOfThree, group_of_three, payload
from bench.pop_bench import pop, produce
from bench.sdk_phases import create_routed, in_flight, lone_sends
from tests.cluster.support import full_sync_state_set, new_master
from tests.support.procs import free_port, rmqctl

TARGET = 0.5
TOPIC = "GrpcBench"
RECV_TOPIC = "GrpcBenchRecv"
SDK_RECV_TOPIC = "GrpcBenchSdkRecv"
SDK_RECV_GROUP = "GrpcBenchSdkRecv"

_OFFICIAL = r"""
import json, sys, threading, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer
from rocketmq import SimpleConsumer

endpoint, topic, recv_topic, n, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
body = (b"0123456789abcdef" * (size // 16 + 1))[:size]

def say(**kw):
    print(json.dumps(kw), flush=True)

def message():
    m = Message()
    m.topic = topic
    m.body = body
    return m

producer = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=10), (topic,))
producer.startup()
try:
    for _ in range(200):  # warm up: routes, channels, settings
        producer.send(message())
    slots = threading.Semaphore(64)
    lat = []
    failed = []
    def done(started, future):
        lat.append(time.perf_counter() - started)
        if future.exception() is not None:
            failed.append(repr(future.exception()))
        slots.release()
    say(phase="send")
    sys.stdin.readline()
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        slots.acquire()
        started = time.perf_counter()
        producer.send_async(message()).add_done_callback(lambda f, s=started: done(s, f))
    for _ in range(64):
        slots.acquire()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    lat.sort()
    say(phase="sent", rate=n / dt, cpu=cpu, p50=lat[len(lat) // 2] * 1000, failed=len(failed),
        error=failed[0] if failed else "")
    one = []
    for _ in range(max(n // 20, 50)):
        t = time.perf_counter()
        producer.send(message())
        one.append((time.perf_counter() - t) * 1000)
    one.sort()
    say(phase="one", p50=one[len(one) // 2], p99=one[int(len(one) * 0.99)], count=len(one))
finally:
    producer.shutdown()

say(phase="recv-ready")
sys.stdin.readline()
consumer = SimpleConsumer(ClientConfiguration(endpoint, Credentials(), request_timeout=10),
                          "GrpcBenchRecv", {recv_topic: FilterExpression()}, await_duration=2)
try:
    consumer.startup()
    first = consumer.receive(32, 60)
except Exception as e:
    say(phase="recv", available=False, error=f"{type(e).__name__}: {e}"[:300])
    sys.exit(0)
try:
    say(phase="recv-go")
    c0, t0 = time.process_time(), time.perf_counter()
    got = 0
    batch = first
    while got < n:
        for m in batch:  # ack_async() is broken in client 5.1.x (no future, no callback pool)
            consumer.ack(m)
        got += len(batch)
        if got < n:
            batch = consumer.receive(32, 60)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    say(phase="recv", available=True, rate=got / dt, cpu=cpu, count=got)
finally:
    consumer.shutdown()
"""


class Official:
    """The official client's script in its own process, phase by phase over its stdout."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def next(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            line = await asyncio.wait_for(self.proc.stdout.readline(), 300)
            if not line:
                err = await self.proc.stderr.read() if self.proc.stderr else b""
                raise RuntimeError(f"official client ended: {err.decode()[-2000:]}")
            if line.startswith(b"{"):
                out: dict[str, Any] = json.loads(line)
                return out

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")


def print_sends(
    who: str,
    door: str,
    sent: dict[str, Any],
    one: dict[str, Any],
    n: int,
    master_cpu: float,
    slaves_cpu: float | None = None,
) -> None:
    """The lines of an official client's ``n`` sends: 64 in flight (rate, p50, the client's and
    the master's CPU, the slaves' when given, the failures), then one at a time (p50)."""
    print(
        f"{who}, 64 in flight {door} {sent['rate']:>8,.0f} msg/s"
        f"  p50 {sent['p50']:6.2f} ms  client CPU {sent['cpu'] / n * 100_000:5.1f} s/100k"
        f"  master CPU {master_cpu / n * 100_000:5.1f} s/100k"
        f" ({master_cpu / n * 1000:.3f} ms a send)"
        + (
            f"  slaves' CPU {slaves_cpu / n * 100_000:5.1f} s/100k"
            if slaves_cpu is not None
            else ""
        )
        + (f"  ({sent['failed']} failed: {sent['error']})" if sent["failed"] else ""),
        flush=True,
    )
    print(f"{who}, one at a time: p50 {one['p50']:.3f} ms ({one['count']} sends)", flush=True)


async def main_async(args: argparse.Namespace) -> None:
    body = payload(args.size)
    n = args.messages
    ports = [free_port() for _ in range(3)]
    per_broker = [["--grpc-listen", f"127.0.0.1:{p}"] for p in ports]
    async with group_of_three("rmq-grpc-bench-", per_broker) as g:
        # The official client sorts a route's endpoints and writes through the first: the
        # master's, or a slave's that hands the writes on, as --through asks.
        first = min(range(3), key=lambda i: f"127.0.0.1:{ports[i]}")
        via = g.cluster.brokers[first].address
        master_address = await _place_master(g, via, args.through == "master")
        master = next(b for b in g.cluster.brokers if b.address == master_address)
        endpoint = f"127.0.0.1:{ports[g.cluster.brokers.index(master)]}"
        print(
            f"3 controllers, broker-a x3 (master {master_address}, gRPC {endpoint}), all-ack, "
            f"flush async, {args.size} B messages, {n:,} messages a phase, 8 queues; the "
            f"official client writes through the {args.through}'s gRPC endpoint",
            flush=True,
        )
        await create_routed(g.addresses, TOPIC, RECV_TOPIC, SDK_RECV_TOPIC)
        await run_phases(g, master.pid, endpoint, n, body, args.size)


async def _place_master(g: GroupOfThree, via: str, master_is_via: bool) -> str:
    """Move the group's master (an election, then all three in sync again) so that it is
    ``via`` (``master_is_via``) or is not; returns the master's address."""
    if (g.master == via) == master_is_via:
        return g.master
    state = rmqctl("--json", "getSyncStateSet", "-a", g.addresses, "-b", "broker-a")
    replicas = json.loads(state.stdout)["replicas"]
    wanted = next(r for r in replicas if (r["address"] == via) == master_is_via)
    elect = ["-a", g.addresses, "-b", "broker-a", "-i", str(wanted["brokerId"])]
    print(f"moving the master from {g.master} to {wanted['address']}", flush=True)
    done = rmqctl("electMaster", *elect)
    if done.returncode != 0:
        raise SystemExit(f"electMaster failed: {done.stderr.strip()}")
    await new_master(g.boot, g.cluster, g.master)
    doc = await full_sync_state_set(g.boot, g.cluster, timeout=120)
    address = str(doc["masterAddress"])
    if (address == via) != master_is_via:
        raise SystemExit(f"the master is {address}, not as wanted (through {via})")
    return address


async def run_phases(
    g: GroupOfThree, master_pid: int, endpoint: str, n: int, body: bytes, size: int
) -> None:
    def per_100k(seconds: float) -> float:
        return seconds / n * 100_000

    # -- our SDK ---------------------------------------------------------------------------------
    sdk = {}
    for auto_batch in (True, False):
        sdk[auto_batch] = await in_flight(
            g.addresses, TOPIC, n, body, auto_batch=auto_batch, server_pid=master_pid
        )
    lone = await lone_sends(g.addresses, TOPIC, body, max(n // 20, 50))
    for auto_batch, r in sdk.items():
        mode = "on, default" if auto_batch else "off"
        print(
            f"SDK   send, 64 in flight (auto-batch {mode}): {r.rate:>8,.0f} msg/s"
            f"  p50 {r.p50_ms:6.2f} ms  client CPU {r.client_cpu_per_100k:5.1f} s/100k"
            f"  master CPU {r.server_cpu_per_100k or 0:5.1f} s/100k",
            flush=True,
        )
    print(f"SDK   send, one at a time: p50 {pct(lone, 0.5):.3f} ms ({len(lone)} sends)", flush=True)

    # -- the official client ---------------------------------------------------------------------
    with tempfile.TemporaryDirectory(prefix="rmq-grpc-bench-home-") as home:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _OFFICIAL,
            endpoint,
            TOPIC,
            RECV_TOPIC,
            str(n),
            str(size),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={"HOME": home, "PATH": "/usr/bin:/bin"},
            cwd=home,
        )
        official = Official(proc)
        try:
            await official.next()  # warmed up, about to send
            slave_pids = [b.pid for b in g.cluster.brokers if b.pid != master_pid]
            s0 = cpu_seconds(master_pid)
            slaves0 = sum(cpu_seconds(pid) for pid in slave_pids)
            official.go()
            sent = await official.next()
            master_cpu = cpu_seconds(master_pid) - s0
            slaves_cpu = sum(cpu_seconds(pid) for pid in slave_pids) - slaves0
            one = await official.next()
            rate = sent["rate"]
            print_sends("gRPC  send", "(official client):", sent, one, n, master_cpu, slaves_cpu)
            best = sdk[True].rate
            print(
                f"ratio gRPC / SDK send (64 in flight): {rate / best:.2f} of auto-batch on, "
                f"{rate / sdk[False].rate:.2f} of off; target {TARGET} "
                f"({rate / best / TARGET:.2f} of the target)",
                flush=True,
            )
            print(
                f"ratio gRPC / SDK one-at-a-time p50: {one['p50'] / pct(lone, 0.5):.2f}",
                flush=True,
            )

            # -- receive + ack -------------------------------------------------------------------
            await produce(g.addresses, RECV_TOPIC, n, body)
            await produce(g.addresses, SDK_RECV_TOPIC, n, body)
            await official.next()  # recv-ready
            official.go()
            recv = await official.next()
            if recv["phase"] == "recv-go":
                recv = await official.next()
            sdk_rate, _again = await pop(g.addresses, SDK_RECV_TOPIC, SDK_RECV_GROUP, n, 4)
            print(f"SDK   POP receive + ack (4 members): {sdk_rate:>8,.0f} msg/s", flush=True)
            if not recv.get("available"):
                print(
                    f"gRPC  SimpleConsumer receive + ack: not available ({recv.get('error', '')})",
                    flush=True,
                )
            else:
                print(
                    f"gRPC  SimpleConsumer receive + ack (1 member): {recv['rate']:>8,.0f} msg/s"
                    f"  client CPU {per_100k(recv['cpu']):5.1f} s/100k"
                    f"  ({recv['rate'] / sdk_rate:.2f} of the SDK's)",
                    flush=True,
                )
            await asyncio.wait_for(proc.wait(), 120)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument(
        "--through",
        choices=("master", "slave"),
        default="master",
        help="whose gRPC endpoint the official client writes through: the master's (served "
        "in-process) or a slave's (handed to the master over the network); the group's master "
        "is moved to make it so",
    )
    args = smoke.parse_args(parser, messages=300)
    run_async(lambda: main_async(args))


if __name__ == "__main__":
    main()
