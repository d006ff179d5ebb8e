"""Replication benchmark: three controllers and one broker group of three replicas, all-ack.

Real processes on loopback, production segment size (1 GiB), flush async, 1 KiB messages.
Measures and prints (nothing is asserted):
  1. produce, one connection, 64 in flight, every send acknowledged by the whole SyncStateSet;
  2. produce in batches of 64 (8 requests in flight);
  3. produce one at a time: p50/p99 latency;
  3b. the same through the SDK producer (it knows only the controllers): 64 in flight with
     auto-batching on and off, and lone sends' p50 on and off (bench/sdk_phases.py; ``--profile``
     profiles the client side of the auto-batching phase);
  4. catch-up: a slave killed, N MiB written without it, restarted: MiB/s until it has it all;
  5. failover: kill -9 of the master to the first write acknowledged by the new master, seen by
     an SDK producer that only knows the controllers, over K rounds (the old master is restarted
     and back in the SyncStateSet before the next round);
  6. the same after SIGSTOP of the master (it is fenced; SIGCONT after the round);
  and the unexpected elections: master elections during the produce phases (no fault) and
  beyond one per SIGSTOP round, controller leader changes (Raft terms) over the same spans.
Each figure is printed with its ratio to the issue's target. NATS JetStream R3 (bench/nats_peer.py)
then runs on the same machine with the same payload, after our cluster is stopped, where
``nats-server`` is installed (its client nats-py comes with the ``bench`` extra that ``make bench`` installs): 64 in
flight and one at a time (JetStream has no batch publish), with ratios ours / NATS. Otherwise the
line says it was skipped; ``--no-peer`` skips it.

With ``--auth on`` the cluster runs with authentication (``auth_enabled``): every request is
signed, the produce phases as a normal user with pub on the topic. ``--auth both`` runs only
phase 1 on a cluster without and then with authentication and prints the ratio (the issue's
target: within 20%). ``--security on`` runs everything with authentication and TLS on every port
(mutual TLS inside the cluster, a test CA made with the openssl CLI); ``--security both`` runs
phases 1 and 3 without security, with TLS only, and with both, on a fresh cluster each time,
``--rounds`` times in a rotated order (a lone send's latency moves by 10-20% from one cluster to
the next on a small machine, so one cluster per mode compares luck as much as cost), then prints
each mode's medians and their ratios to the first; the catch-up runs in the first round.

The produce phases (1 to 3) send as a production client does (bench/master_link.py): a send the
master refuses with an answer the SDK retries (fenced: a master whose heartbeats went unanswered
for ``broker_heartbeat_timeout_ms``, a stall of its process or of the active controller's on a
loaded machine; not master after a failover; busy) is sent again once the controllers name the
group's master, the same broker or a new one, for up to 30 s; any other refusal ends the bench.
Each phase's figures count a retried send's whole time (its latency from its first attempt),
and a line under them says how many sends were retried and the refusals by code
("retried sends: 0 of N" in a run without one); the CPU figures are the first master's.

Phases 1 and 2 also print a slave's CPU seconds per 100k messages and the load average (the
rates are only comparable at similar loads; CPU per message much less depends on them).
A process's CPU time is read from its CPU-time clock in nanoseconds (bench/broker_bench.py's
``cpu_seconds``; /proc/PID/stat's 10 ms ticks only where that clock cannot be read).

``--idempotent both`` runs phases 1 to 3 without and with an idempotent producer's fields
(docs/idempotence.md), alternating on one cluster for ``--rounds`` rounds, and prints the ratios
of the rates and of the master's CPU per message, each as the medians' ratio and as the median
of the rounds' own on / off (``--batch-messages``: the batch phase's
messages, by default ``--messages``). It reads the master's CPU at each phase's start and end
once none of the master's threads is running (the kernel counts a running thread's time as of
its last scheduler tick, tens of ms late on a busy core), and prints the reading's step as a
share of each phase's least CPU time and how many readings found a thread still running. With
the median of the rounds' own on / off it prints a 90% bootstrap interval of that median (the
rounds resampled, seeded): on a shared machine the rounds scatter by far more than the step.
Then, for the single sends and the batches, each process's CPU per message on - off (the
master, a slave, the bench's own client), the median of the rounds' own differences with its
interval: all of them share the machine's cores, so the rate follows their sum.
``--spy DIR`` records the master and that slave with py-spy during phases 1, 2 and 3 and prints
their top functions (bench/profile_summary.py); ``--only-produce`` stops after phase 3.

    python bench/ha_bench.py [--messages N] [--catchup-mib M] [--kills K] [--stops S] [--no-peer]
        [--profile] [--auth off|on|both] [--security off|on|both] [--rounds R] [--only-produce]
        [--spy DIR] [--idempotent off|both] [--batch-messages N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import sdk_phases, smoke
from bench.broker_bench import (
    cpu_resolution,
    cpu_seconds,
    idle_cpu_seconds,
    pct,
    run_async,
    send_requests,
)
from bench.group_of_three import GroupOfThree, group_of_three, payload
from bench.master_link import MasterLink
from bench.nats_peer import run_nats_r3
from bench.profile_summary import fold, format_table
from client import Producer
from client.bootstrap import Bootstrap
from client.errors import ClientError
from protocol.codes import RequestCode, ResponseCode
from protocol.controller_requests.topics import RouteQuery
from protocol.remoting import Header
from protocol.request_auth import Credentials
from remoting.client import RemotingClient, signer_for
from remoting.errors import RemotingError
from tests.cluster.support import epoch_cache, full_sync_state_set, node_at, sync_state
from tests.controller.support import metadata
from tests.support.cluster import Cluster
from tests.support.procs import rmqctl

TOPIC = "HABench"
QUEUES = 8
TARGETS = {
    "single": 25_000.0,  # msg/s
    "batch": 100_000.0,  # msg/s
    "p50": 0.4,  # ms, one at a time (lower is better)
    "catchup": 300.0,  # MiB/s
    "kill_p50": 1.0,  # s (lower is better)
    "kill_max": 3.0,  # s (lower is better)
    "stop_max": 1.5,  # s (lower is better; issue 17)
}


def ratio(name: str, value: float, lower_is_better: bool = False) -> str:
    target = TARGETS[name]
    r = target / value if lower_is_better else value / target
    return f"ratio to target {r:.2f}"


async def _drive(
    link: MasterLink,
    code: int,
    payload: bytes,
    requests: int,
    workers: int,
    pid: int,
    slave_pid: int | None = None,
    producer_id: int | None = None,
) -> tuple[float, list[float], float, float]:
    """``requests`` requests of ``code`` from ``workers`` concurrent loops over ``link``:
    (seconds, latencies, the master's CPU seconds, a slave's CPU seconds or 0); with
    ``producer_id``, as an idempotent producer."""
    scpu0 = cpu_seconds(slave_pid) if slave_pid else 0.0
    calls0 = {p: syscalls(p) for p in (pid, slave_pid) if p}
    cpu0, t0, client0 = cpu_seconds(pid), time.perf_counter(), time.process_time()
    lat = await send_requests(
        link.conn,
        code,
        TOPIC,
        QUEUES,
        payload,
        requests,
        workers,
        timeout=30,
        producer_id=producer_id,
        link=link,
    )
    dt, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    scpu = (cpu_seconds(slave_pid) - scpu0) if slave_pid else 0.0
    _LAST_CPU["client"] = time.process_time() - client0
    _LAST_CPU["slave"] = scpu
    for p, (r0, w0) in calls0.items():
        r1, w1 = syscalls(p)
        role = "master" if p == pid else "slave"
        _SYSCALLS[role] = (r1 - r0, w1 - w0)
    return dt, lat, cpu, scpu


_SYSCALLS: dict[str, tuple[int, int]] = {}
"""The last phase's read and write system calls (role -> (reads, writes))."""
_LAST_CPU: dict[str, float] = {"client": 0.0, "slave": 0.0}
"""The last phase's CPU seconds of the bench process (the client's: it shares the machine) and
of a slave (0: not measured)."""


def syscalls(pid: int) -> tuple[int, int]:
    """(read-like, write-like) system calls of process ``pid`` so far (all its threads):
    ``syscr`` and ``syscw`` of /proc/PID/io (0, 0 where it cannot be read)."""
    try:
        fields = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    except OSError:
        return 0, 0
    return int(fields["syscr"]), int(fields["syscw"])


def _syscalls_line(messages: int) -> str:
    """Reads and writes per 100 messages of the last phase, master and slave."""
    parts = [
        f"{role} {r / messages * 100:.0f}r+{w / messages * 100:.0f}w"
        for role, (r, w) in _SYSCALLS.items()
    ]
    calls = "  syscalls/100 msg: " + ", ".join(parts) if parts else ""
    return calls + f"  client CPU {_LAST_CPU['client'] / messages * 100_000:5.2f} s/100k"


def _load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


@contextmanager
def spying(spy: Path | None, phase: str, pids: dict[str, int]) -> Iterator[None]:
    """With ``spy`` (a directory): py-spy records each of ``pids`` (role -> PID) while the block
    runs, into ``spy/<role>-<phase>.txt`` (raw), and prints each one's top functions."""
    if spy is None:
        yield
        return
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    spy.mkdir(parents=True, exist_ok=True)
    procs = {
        role: subprocess.Popen(
            [
                exe,
                "record",
                "-p",
                str(pid),
                "-o",
                str(spy / f"{role}-{phase}.txt"),
                "-f",
                "raw",
                "--nonblocking",
                "-r",
                "200",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for role, pid in pids.items()
    }
    time.sleep(0.5)  # attached before the phase starts
    try:
        yield
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        for proc in procs.values():
            proc.wait(timeout=60)
    for role in pids:
        path = spy / f"{role}-{phase}.txt"
        if path.exists():
            print(format_table(fold(path.read_text()), 20, f"{role}, {phase}: "), flush=True)


def _print_produce(
    what: str,
    p50: str,
    target: str,
    sent: int,
    size: int,
    phase: tuple[float, list[float], float, float],
    slave_pid: int | None,
) -> float:
    """Prints the line of a produce phase that sent ``sent`` messages of ``size`` bytes
    (``phase``: what :func:`_drive` measured; ``p50`` names a request's latency, ``target`` the
    phase's entry in TARGETS); returns msg/s."""
    dt, lat, cpu, scpu = phase
    rate = sent / dt
    print(
        f"produce, {what} {rate:>9,.0f} msg/s {sent * size / dt / 1e6:6.1f} MB/s"
        f"  {p50} {pct(lat, 0.5) * 1000:5.2f} ms  p99 {pct(lat, 0.99) * 1000:6.2f} ms"
        f"  master CPU {cpu / sent * 100_000:5.2f} s/100k  {ratio(target, rate)}"
        + (f"  slave CPU {scpu / sent * 100_000:5.2f} s/100k  {_load()}" if slave_pid else "")
        + _syscalls_line(sent),
        flush=True,
    )
    return rate


def print_retried(link: MasterLink, sends: int) -> None:
    """The line under a phase's figures: how many of its ``sends`` were refused and sent again
    (:class:`bench.master_link.MasterLink`), and the refusals by code; zeroes the counts."""
    retried, refusals = link.reset()
    print(
        f"  retried sends: {retried} of {sends}"
        + (" (refused: " + ", ".join(f"{k} {v}" for k, v in sorted(refusals.items())) + ")")
        * bool(refusals),
        flush=True,
    )


async def produce(
    link: MasterLink,
    n: int,
    body: bytes,
    pid: int,
    slave_pid: int | None = None,
    producer_id: int | None = None,
    *,
    batch: bool = False,
) -> float:
    """A produce phase of ``n`` messages: single sends 64 in flight, or with ``batch`` batches
    of 64, 8 in flight. Prints its lines (:func:`print_retried` the second); returns msg/s."""
    if not batch:
        phase = await _drive(
            link, RequestCode.SEND_MESSAGE, body, n, 64, pid, slave_pid, producer_id
        )
        rate = _print_produce(
            "64 in flight, all-ack R3 ", "p50", "single", n, len(body), phase, slave_pid
        )
        print_retried(link, n)
        return rate
    payload = msgpack.packb([{"body": body}] * 64)
    phase = await _drive(
        link, RequestCode.SEND_BATCH_MESSAGE, payload, n // 64, 8, pid, slave_pid, producer_id
    )
    sent = (n // 64) * 64
    rate = _print_produce(
        "batches of 64, all-ack R3", "batch p50", "batch", sent, len(body), phase, slave_pid
    )
    print_retried(link, n // 64)
    return rate


async def produce_one_at_a_time(
    link: MasterLink,
    n: int,
    body: bytes,
    pids: dict[str, int] | None = None,
    producer_id: int | None = None,
) -> float:
    cpu0 = {role: cpu_seconds(p) for role, p in (pids or {}).items()}
    client0 = time.process_time()
    lat = await send_requests(
        link.conn,
        RequestCode.SEND_MESSAGE,
        TOPIC,
        QUEUES,
        body,
        n,
        1,
        timeout=30,
        producer_id=producer_id,
        link=link,
    )
    p50 = pct(lat, 0.5) * 1000
    print(
        f"produce, one at a time, all-ack R3 p50 {p50:.3f} ms  p99 {pct(lat, 0.99) * 1000:.3f} ms"
        f"  ({n} sends)  {ratio('p50', p50, lower_is_better=True)}"
        + (
            "  CPU per send: "
            + ", ".join(
                f"{r} {(cpu_seconds(p) - cpu0[r]) / n * 1e6:.0f} us" for r, p in pids.items()
            )
            + f", client {(time.process_time() - client0) / n * 1e6:.0f} us"
            if pids
            else ""
        ),
        flush=True,
    )
    print_retried(link, n)
    return p50


async def catch_up(cluster: Cluster, boot: Bootstrap, mib: int, body: bytes) -> float:
    """Prints and returns the catch-up rate in MiB/s. The master is the one the controllers name
    once the group is whole again: an election before (a loaded machine's, which the produce
    phases report as unexpected) may have moved it from where the bench started it."""
    master = str((await full_sync_state_set(boot, cluster, timeout=120))["masterAddress"])
    slave = next(b for b in cluster.brokers if b.address != master)
    slave.kill9()
    link = MasterLink(boot, await RemotingClient.connect(master))
    payload = msgpack.packb([{"body": body}] * 64)
    per_request = 64 * len(body)
    count = mib * (1 << 20) // per_request
    requests = iter(range(count))

    async def worker() -> None:
        for i in requests:
            header: Header = {"topic": TOPIC, "queueId": i % QUEUES}
            on = link.conn
            resp = await on.request(RequestCode.SEND_BATCH_MESSAGE, header, payload, 60)
            if resp.code != ResponseCode.SUCCESS:
                await link.retry(
                    resp,
                    on,
                    RequestCode.SEND_BATCH_MESSAGE,
                    header,
                    payload,
                    60,
                    "batch failed during catch-up fill",
                )

    await asyncio.gather(*(worker() for _ in range(8)))
    master = link.conn.address  # another one after a failover during the fill
    link.close()
    target = int((await epoch_cache(master))["maxOffset"])
    slave.start()
    t_start = time.perf_counter()
    base: int | None = None
    t_first = 0.0
    while True:
        try:
            cache = await epoch_cache(slave.address)
        except (OSError, ClientError, Exception):  # not listening yet
            await asyncio.sleep(0.02)
            continue
        offset = int(cache["maxOffset"])
        if base is None:
            base, t_first = offset, time.perf_counter()
        if offset >= target:
            break
        await asyncio.sleep(0.02)
    t_end = time.perf_counter()
    behind = (target - base) / (1 << 20)
    rate = behind / max(t_end - t_first, 1e-9)
    print(
        f"catch-up of a slave {behind:,.0f} MiB behind: {rate:,.0f} MiB/s once serving "
        f"({t_end - t_first:.2f} s; {t_end - t_start:.2f} s including its restart)  "
        f"{ratio('catchup', rate)}",
        flush=True,
    )
    print_retried(link, count)
    await full_sync_state_set(boot, cluster, timeout=120)
    return rate


async def first_ack_after(producer: Producer, since: float, deadline_s: float = 30.0) -> float:
    """Seconds from ``since`` until a send is acknowledged (sends start after ``since``)."""
    i = 0
    while time.perf_counter() - since < deadline_s:
        try:
            await producer.send(TOPIC, f"failover-{i}".encode())
            return time.perf_counter() - since
        except ClientError:
            i += 1
    raise SystemExit(f"no acknowledged write within {deadline_s} s of the failure")


@dataclass
class Milestones:
    """When (seconds after the fault) the failover reached each step, as seen from outside."""

    elected: float = float("nan")
    """The controllers answer another master (the election is committed)."""
    writable: float = float("nan")
    """The new master acknowledged a write sent straight to it (its role flipped)."""
    routed: float = float("nan")
    """The controllers' route for the topic names the new master."""
    acked: float = float("nan")
    """The SDK producer's first acknowledged write."""


async def watch_failover(boot: Bootstrap, old: str, since: float, marks: Milestones) -> None:
    """Fill ``marks.elected``, ``.writable`` and ``.routed`` by polling every 10 ms (cancelled
    once the producer's write was acknowledged)."""
    new = ""
    conn: RemotingClient | None = None
    try:
        while new == "":
            doc = await sync_state(boot)
            address = doc.get("masterAddress") if doc else None
            if isinstance(address, str) and address and address != old:
                marks.elected, new = time.perf_counter() - since, address
            else:
                await asyncio.sleep(0.01)
        conn = await RemotingClient.connect(new)
        while marks.writable != marks.writable or marks.routed != marks.routed:
            if marks.writable != marks.writable:
                resp = await conn.request(
                    RequestCode.SEND_MESSAGE, {"topic": TOPIC, "queueId": 0}, b"probe", 5
                )
                if resp.code == ResponseCode.SUCCESS:
                    marks.writable = time.perf_counter() - since
            if marks.routed != marks.routed:
                try:
                    ask = RouteQuery(topic=TOPIC)
                    route = await boot.call(ask.code, *ask.encode(), timeout=2.0)
                    if new.encode() in (route.body or b""):
                        marks.routed = time.perf_counter() - since
                except (ClientError, RemotingError):
                    pass
            await asyncio.sleep(0.01)
    finally:
        if conn is not None:
            conn.close()


async def failovers(
    cluster: Cluster, boot: Bootstrap, rounds: int, how: str
) -> tuple[list[float], list[Milestones]]:
    times: list[float] = []
    steps: list[Milestones] = []
    async with Producer(
        cluster.controller_addresses, retries=3, send_timeout=1.0, fault_isolation=0.2
    ) as producer:
        for _ in range(rounds):
            doc = await full_sync_state_set(boot, cluster, timeout=120)
            await producer.send(TOPIC, b"warm")  # route cached, connection open
            master = node_at(cluster, doc["masterAddress"])
            marks = Milestones()
            since = time.perf_counter()
            if how == "kill":
                master.kill9()
            else:
                master.signal(signal.SIGSTOP)
            watcher = asyncio.create_task(watch_failover(boot, master.address, since, marks))
            marks.acked = await first_ack_after(producer, since)
            times.append(marks.acked)
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(watcher), 5.0)
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
            steps.append(marks)
            if how == "kill":
                master.restart()
            else:
                master.signal(signal.SIGCONT)
    await full_sync_state_set(boot, cluster, timeout=120)
    return times, steps


def report_steps(steps: list[Milestones]) -> None:
    """The failover broken down: median and max of each milestone over the rounds."""

    def line(name: str, values: list[float]) -> str:
        seen = sorted(v for v in values if v == v)
        if not seen:
            return f"{name} n/a"
        return f"{name} p50 {pct(seen, 0.5):.2f} s max {seen[-1]:.2f} s"

    print(
        "  breakdown (from the fault): "
        + ";  ".join(
            (
                line("elected", [s.elected for s in steps]),
                line("new master writable", [s.writable for s in steps]),
                line("routed", [s.routed for s in steps]),
                line("first SDK ack", [s.acked for s in steps]),
            )
        ),
        flush=True,
    )


def report_failovers(name: str, times: list[float], how: str) -> None:
    times = sorted(times)
    p50, mx = pct(times, 0.5), times[-1]
    if how == "kill":
        verdict = f"{ratio('kill_p50', p50, True)} (p50), {ratio('kill_max', mx, True)} (max)"
    else:
        verdict = ratio("stop_max", mx, lower_is_better=True) + " (max)"
    print(
        f"{name} over {len(times)}: p50 {p50:.2f} s  p90 {pct(times, 0.9):.2f} s  "
        f"max {mx:.2f} s  {verdict}",
        flush=True,
    )


async def controller_terms(cluster: Cluster) -> int:
    """The highest Raft term the controllers answer with (each election raises it)."""
    docs = [await metadata(a) for a in cluster.controller_addresses.split(";")]
    return max(int(d["term"]) for d in docs if d is not None)


async def master_epoch(boot: Bootstrap) -> int:
    doc = await sync_state(boot)
    return int(doc["masterEpoch"]) if doc else -1


def report_unexpected(master_elections: int, controller_elections: int, when: str) -> None:
    print(
        f"unexpected elections {when}: {master_elections} of a master, "
        f"{controller_elections} of a controller leader (target 0 and 0)",
        flush=True,
    )


PRODUCER_USER = Credentials("bench-producer", "bench-producer-Secret-1")


async def producer_connection(broker_a: GroupOfThree) -> MasterLink:
    """A connection to the master with the topic created on it, kept by a
    :class:`~bench.master_link.MasterLink`; with authentication on, signed as a normal user
    whose one rule allows pub and create on the topic (so every send is verified and decided as
    an application's would be)."""
    master = broker_a.master
    if broker_a.credentials is None:
        conn = await RemotingClient.connect(master)
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": TOPIC, "queues": QUEUES})
        return MasterLink(broker_a.boot, conn)
    env = dict(
        os.environ,
        RMQ_ACCESS_KEY=broker_a.credentials.access_key,
        RMQ_SECRET_KEY=broker_a.credentials.secret_key,
    )
    user, secret = PRODUCER_USER.access_key, PRODUCER_USER.secret_key
    for argv in (
        ["createUser", "-u", user, "-p", secret],
        ["createAcl", "-s", user, "-r", f"Topic:{TOPIC}", "-A", "pub,create"],
    ):
        done = rmqctl("-a", broker_a.addresses, *argv, env=env)
        if done.returncode != 0:
            raise SystemExit(f"rmqctl {argv[0]} failed: {done.stderr}")
    conn = await RemotingClient.connect(master, signer=signer_for(PRODUCER_USER))
    deadline = time.monotonic() + 30
    while True:  # the brokers learn the new user within a heartbeat
        resp = await conn.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": TOPIC, "queues": QUEUES}
        )
        if resp.code == ResponseCode.SUCCESS:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"the producer user was not accepted: {resp.header}")
        await asyncio.sleep(0.1)
    if not conn.session:
        # Over TLS a connection opened before the broker knew the user could not authenticate
        # once (it signs every request instead); an application's user exists before it
        # connects, so connect again, as it would.
        conn.close()
        conn = await RemotingClient.connect(master, signer=signer_for(PRODUCER_USER))
    return MasterLink(broker_a.boot, conn)


async def auth_comparison(args: argparse.Namespace) -> None:
    """Phase 1 on a cluster without authentication, then on one with it: the ratio."""
    body = payload(args.size)
    rates: dict[bool, float] = {}
    for auth in (False, True):
        async with group_of_three("rmq-ha-bench-", auth=auth) as broker_a:
            pid = node_at(broker_a.cluster, broker_a.master).pid
            link = await producer_connection(broker_a)
            print(f"authentication {'on' if auth else 'off'}:", flush=True)
            rates[auth] = await produce(link, args.messages, body, pid)
            link.close()
    print(
        f"P1 with authentication / without: {rates[True] / rates[False]:.2f} "
        "(target: at least 0.80)",
        flush=True,
    )


def _bootstrap_interval(values: list[float], draws: int = 2000, *, signed: bool = False) -> str:
    """The 5th and 95th percentiles of the median of ``values`` resampled with replacement
    ``draws`` times (seeded: a run's output is repeatable from its figures): how far a median of
    so many rounds that scatter so much can be off, which on a shared machine is far more than
    the CPU reading's step. ``signed``: differences, printed with their sign to 2 places."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    low, high = medians[draws // 20], medians[draws - draws // 20 - 1]
    return f"{low:+.2f} to {high:+.2f}" if signed else f"{low:.3f}-{high:.3f}"


async def idempotence_comparison(args: argparse.Namespace) -> None:
    """The three produce phases without and with idempotent producers' fields (issue 29,
    docs/idempotence.md) on one cluster, alternating off and on for ``--rounds`` rounds (the
    order rotated each round): each line, then the medians' ratios (target: within 5%) with the
    median of each round's own ratio and its bootstrap interval, and the master's CPU per
    message of each phase, on / off (the same two figures; steadier than the rates on a shared
    machine), then each process's CPU per message on - off in the single sends and batches."""
    body = payload(args.size)
    results: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    cpu: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    """The master's CPU microseconds per message of each phase, per round."""
    others: dict[bool, list[tuple[float, float, float, float]]] = {False: [], True: []}
    """A slave's and the client's CPU microseconds per message of the single sends and the
    batches, per round."""
    async with group_of_three("rmq-ha-bench-") as broker_a:
        pid = node_at(broker_a.cluster, broker_a.master).pid
        slave_pid = next(b.pid for b in broker_a.cluster.brokers if b.address != broker_a.master)
        pids = {"master": pid, "slave": slave_pid}
        link = await producer_connection(broker_a)
        print(
            f"3 controllers, broker-a x3, all-ack, flush async, {args.size} B messages, "
            f"{args.messages:,} single sends and {args.batch_messages // 64 * 64:,} messages in "
            f"batches a phase, {args.rounds} rounds; {_load()}",
            flush=True,
        )
        producer_ids = iter(range(1, 1_000_000))
        batched = args.batch_messages // 64 * 64
        step = cpu_resolution(pid)
        busy = 0  # readings taken while a thread of the master still ran
        spent: list[tuple[float, float, float]] = []  # the master's CPU seconds of each phase

        def reading() -> float:
            nonlocal busy
            seconds, idle = idle_cpu_seconds(pid)
            busy += not idle
            return seconds

        for r in range(args.rounds):
            for on in (False, True) if r % 2 == 0 else (True, False):
                print(f"round {r + 1}, idempotence {'on' if on else 'off'}:", flush=True)

                def ident() -> int | None:
                    return next(producer_ids) if on else None  # noqa: B023

                c0 = reading()
                single = await produce(link, args.messages, body, pid, slave_pid, ident())
                single_others = [_LAST_CPU[p] / args.messages * 1e6 for p in ("slave", "client")]
                c1 = reading()
                batch = await produce(
                    link, args.batch_messages, body, pid, slave_pid, ident(), batch=True
                )
                others[on].append(
                    (*single_others, *(_LAST_CPU[p] / batched * 1e6 for p in ("slave", "client")))
                )
                c2 = reading()
                p50 = await produce_one_at_a_time(link, args.one_at_a_time, body, pids, ident())
                c3 = reading()
                results[on].append((single, batch, p50))
                cpu[on].append(
                    (
                        (c1 - c0) / args.messages * 1e6,
                        (c2 - c1) / batched * 1e6,
                        (c3 - c2) / args.one_at_a_time * 1e6,
                    )
                )
                spent.append((c1 - c0, c2 - c1, c3 - c2))
        link.close()

    def median(
        on: bool, i: int, of: dict[bool, list[tuple[float, float, float]]] = results
    ) -> float:
        values = sorted(x[i] for x in of[on])
        return values[len(values) // 2]

    for i, name, higher in (
        (0, "64 in flight", True),
        (1, "batches of 64", True),
        (2, "one at a time p50", False),
    ):
        without, with_ = median(False, i), median(True, i)
        ratio_ = with_ / without if higher else without / with_
        # as a rate (1.0 = as fast), each round's on / off: its two phases run back to back,
        # so a drift of the machine's speed across the run moves it less than the medians
        paired = sorted(
            (on[i] / off[i] if higher else off[i] / on[i])
            for on, off in zip(results[True], results[False], strict=True)
        )
        print(
            f"idempotence on / off, {name}: {with_:,.3f} / {without:,.3f} = {ratio_:.3f} "
            f"(1.0 = as fast; target at least 0.95); median of the rounds' on / off "
            f"{statistics.median(paired):.3f} (90% bootstrap interval "
            f"{_bootstrap_interval(paired)})",
            flush=True,
        )
    for i, name in enumerate(("64 in flight", "batches of 64", "one at a time")):
        without, with_ = median(False, i, cpu), median(True, i, cpu)
        # each round's on / off, its two phases run back to back: the load drifts less
        # between them than across the run
        paired = sorted(on[i] / off[i] for on, off in zip(cpu[True], cpu[False], strict=True))
        print(
            f"master CPU per message on / off, {name}: {with_:.1f} / {without:.1f} us = "
            f"{with_ / without:.3f}, median of the rounds' on / off "
            f"{statistics.median(paired):.3f} (90% bootstrap interval "
            f"{_bootstrap_interval(paired)}; each round: on "
            + " ".join(f"{x[i]:.1f}" for x in cpu[True])
            + ", off "
            + " ".join(f"{x[i]:.1f}" for x in cpu[False])
            + ")",
            flush=True,
        )
    # Where the difference is: every process shares the machine's two cores (and the
    # request's path), so a microsecond more in any of them slows the phase.
    for j, name in ((0, "64 in flight"), (1, "batches of 64")):
        diffs = {
            "master": [on[j] - off[j] for on, off in zip(cpu[True], cpu[False], strict=True)],
            "a slave": [
                on[2 * j] - off[2 * j] for on, off in zip(others[True], others[False], strict=True)
            ],
            "the client": [
                on[2 * j + 1] - off[2 * j + 1]
                for on, off in zip(others[True], others[False], strict=True)
            ],
        }
        print(
            f"CPU per message on - off, {name} (us, the median of the rounds' own "
            "differences, 90% bootstrap interval): "
            + "; ".join(
                f"{who} {statistics.median(d):+.2f} ({_bootstrap_interval(d, signed=True)})"
                for who, d in diffs.items()
            ),
            flush=True,
        )
    least = [min(x[i] for x in spent) for i in range(3)]
    print(
        f"master CPU read {'in ns from its CPU-time clock' if step < 1e-6 else 'in ticks'} "
        f"({step * 1e3:g} ms a step), once none of its threads ran ({busy} of "
        f"{4 * 2 * args.rounds} readings were taken with one still running, after "
        "0.25 s): one step is "
        + ", ".join(
            f"{step / s * 100:.2g}% of {name}'s least ({s:.3f} s)"
            for name, s in zip(("64 in flight", "batches", "one at a time"), least, strict=True)
        ),
        flush=True,
    )
    print(f"after: {_load()}", flush=True)


async def security_comparison(args: argparse.Namespace) -> None:
    """Phases 1 and 3 on a cluster without security, with TLS only, and with authentication and
    TLS (mutual TLS inside the cluster on both), ``--rounds`` times, each round in a rotated
    order, and the ratios of each mode's medians to those without security. The catch-up
    (``--catchup-mib``) runs in the first round only."""
    body = payload(args.size)
    modes = {"off": (False, False), "TLS only": (False, True), "authentication + TLS": (True, True)}
    names = list(modes)
    p1: dict[str, list[float]] = {name: [] for name in names}
    p3: dict[str, list[float]] = {name: [] for name in names}
    catchup: dict[str, float] = {}
    for rnd in range(args.rounds):
        for name in names[rnd % 3 :] + names[: rnd % 3]:
            auth, tls = modes[name]
            async with group_of_three("rmq-ha-bench-", auth=auth, tls=tls) as broker_a:
                cluster, master = broker_a.cluster, broker_a.master
                pid = node_at(cluster, master).pid
                slave_pid = next(b.pid for b in cluster.brokers if b.address != master)
                link = await producer_connection(broker_a)
                print(
                    f"round {rnd + 1}/{args.rounds}, security {name}"
                    + (" (mutual TLS inside the cluster)" if tls else "")
                )
                p1[name].append(await produce(link, args.messages, body, pid, slave_pid))
                p3[name].append(
                    await produce_one_at_a_time(
                        link, args.one_at_a_time, body, {"master": pid, "slave": slave_pid}
                    )
                )
                link.close()
                if args.catchup_mib and rnd == 0:
                    catchup[name] = await catch_up(cluster, broker_a.boot, args.catchup_mib, body)
    rounds = f"median of {args.rounds} rounds" if args.rounds > 1 else "one round"
    for name in names:
        print(
            f"{name}: P1 {statistics.median(p1[name]):,.0f} msg/s, "
            f"P3 p50 {statistics.median(p3[name]):.3f} ms ({rounds}; P3 p50 per round: "
            + " ".join(f"{v:.3f}" for v in p3[name])
            + ")",
            flush=True,
        )
    for name in names[1:]:
        per_round = " ".join(f"{a / b:.2f}" for a, b in zip(p3[name], p3["off"], strict=True))
        print(
            f"{name} / off ({rounds}): "
            f"P1 {statistics.median(p1[name]) / statistics.median(p1['off']):.2f} "
            "(target: at least 0.80), "
            f"P3 p50 {statistics.median(p3[name]) / statistics.median(p3['off']):.2f} "
            f"(target: at most 1.20; each round: {per_round})"
            + (f", catch-up {catchup[name] / catchup['off']:.2f}" if catchup else "")
            + f"  {_load()}",
            flush=True,
        )


async def main_async(args: argparse.Namespace) -> None:
    if args.idempotent == "both":
        await idempotence_comparison(args)
        return
    if args.auth == "both":
        await auth_comparison(args)
        return
    if args.security == "both":
        await security_comparison(args)
        return
    body = payload(args.size)
    secure = args.security == "on"
    async with group_of_three(
        "rmq-ha-bench-", auth=args.auth == "on" or secure, tls=secure
    ) as broker_a:
        cluster, boot = broker_a.cluster, broker_a.boot
        master, doc = broker_a.master, broker_a.sync_state
        try:
            pid = node_at(cluster, master).pid
            slave_pid = next(b.pid for b in cluster.brokers if b.address != master)
            pids = {"master": pid, "slave": slave_pid}
            epoch0, term0 = int(doc["masterEpoch"]), await controller_terms(cluster)
            link = await producer_connection(broker_a)
            print(
                f"3 controllers, broker-a x3 (master {master}), all-ack, flush async, "
                f"{args.size} B messages, {args.messages:,} per produce phase, "
                f"authentication {'on' if secure else args.auth}, TLS {args.security}",
                flush=True,
            )
            with spying(args.spy, "p1", pids):
                ours_rate = await produce(link, args.messages, body, pid, slave_pid)
            with spying(args.spy, "p2", pids):
                await produce(link, args.messages, body, pid, slave_pid, batch=True)
            with spying(args.spy, "p3", pids):
                ours_p50 = await produce_one_at_a_time(link, args.one_at_a_time, body, pids)
            link.close()
            report_unexpected(
                await master_epoch(boot) - epoch0,
                await controller_terms(cluster) - term0,
                "during the produce phases (no fault injected)",
            )
            if args.only_produce:
                return
            await asyncio.sleep(1.5)  # slaves register the topic for routes
            sdk = await sdk_bench(cluster.controller_addresses, pid, body, args)
            if args.catchup_mib:
                await catch_up(cluster, boot, args.catchup_mib, body)
            if args.kills:
                times, steps = await failovers(cluster, boot, args.kills, "kill")
                report_failovers(
                    "failover, kill -9 of the master to the first acknowledged write", times, "kill"
                )
                report_steps(steps)
            if args.stops:
                epoch1, term1 = await master_epoch(boot), await controller_terms(cluster)
                times, steps = await failovers(cluster, boot, args.stops, "stop")
                report_failovers(
                    "failover, SIGSTOP of the master to the first acknowledged write", times, "stop"
                )
                report_steps(steps)
                # One election per round is the failover; any more is a false one.
                report_unexpected(
                    await master_epoch(boot) - epoch1 - args.stops,
                    await controller_terms(cluster) - term1,
                    f"over the {args.stops} SIGSTOP rounds (beyond one master election each)",
                )
        finally:
            for b in cluster.brokers:
                b.signal(signal.SIGCONT)
    # After cluster.stop(): the peer never shares the CPU with our processes.
    if args.no_peer:
        print("NATS JetStream R3: skipped (--no-peer)")
    else:
        await nats_peer(args, body, ours_rate, ours_p50, sdk)


async def sdk_bench(
    bootstrap: str, pid: int, body: bytes, args: argparse.Namespace
) -> tuple[float, float]:
    """The SDK phases: (msg/s with 64 in flight and auto-batching on, its lone sends' p50 ms)."""
    await sdk_phases.wait_routed(bootstrap, TOPIC)
    rates, lat = await sdk_phases.both_modes(
        bootstrap,
        TOPIC,
        body,
        messages=args.messages,
        lone=args.one_at_a_time,
        where=("R3", "R3"),
        target=TARGETS["single"],
        profile=args.profile,
        server_pid=pid,
    )
    return rates[True], pct(lat[True], 0.5)


async def nats_peer(
    args: argparse.Namespace,
    body: bytes,
    ours_rate: float,
    ours_p50: float,
    sdk: tuple[float, float],
) -> None:
    r = await run_nats_r3(args.size, args.messages, args.one_at_a_time, body)
    if r is None:
        return  # run_nats_r3 printed why
    print(
        f"NATS JetStream R3, 64 in flight    {r['rate']:>9,.0f} msg/s {r['mbps']:6.1f} MB/s"
        f"  p50 {r['p50_ms']:5.2f} ms  p99 {r['p99_ms']:6.2f} ms"
        f"  leader CPU {r['leader_cpu_s_per_100k']:5.2f} s/100k  {ratio('single', r['rate'])}",
        flush=True,
    )
    print("NATS JetStream R3, batches of 64: skipped (JetStream has no batch publish)", flush=True)
    p50 = r["one_p50_ms"]
    print(
        f"NATS JetStream R3, one at a time p50 {p50:.3f} ms  p99 {r['one_p99_ms']:.3f} ms"
        f"  ({r['one_sends']:.0f} sends)  {ratio('p50', p50, lower_is_better=True)}",
        flush=True,
    )
    print(f"ours / NATS, 64 in flight msg/s: {ours_rate / r['rate']:.2f}", flush=True)
    print(
        f"ours (SDK, auto-batch on) / NATS, 64 in flight msg/s: {sdk[0] / r['rate']:.2f}"
        "  (target: at least 2)",
        flush=True,
    )
    print(
        f"ours (SDK, auto-batch on) / NATS, one at a time p50 (NATS p50 / ours): "
        f"{p50 / sdk[1]:.2f}  (target: at least 1)",
        flush=True,
    )
    print(
        f"ours / NATS, one at a time p50 (lower is better, so NATS p50 / our p50): "
        f"{p50 / ours_p50:.2f}",
        flush=True,
    )


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--messages", type=int, default=100_000, help="messages per produce phase")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--one-at-a-time", type=int, default=2000, help="sends for the latency phase")
    p.add_argument("--catchup-mib", type=int, default=1024, help="MiB a slave falls behind")
    p.add_argument("--kills", type=int, default=20, help="kill -9 failover rounds")
    p.add_argument("--stops", type=int, default=5, help="SIGSTOP failover rounds")
    p.add_argument(
        "--no-peer", action="store_true", help="skip NATS JetStream R3 (bench/nats_peer.py)"
    )
    p.add_argument(
        "--only-produce",
        action="store_true",
        help="only the three produce phases on the connection (no SDK, catch-up, failover, peer)",
    )
    p.add_argument(
        "--spy",
        type=Path,
        metavar="DIR",
        help="py-spy record the master and one slave during phases 1, 2 and 3 into DIR and print "
        "their top functions (bench/profile_summary.py folds the files again)",
    )
    p.add_argument(
        "--profile", action="store_true", help="cProfile the client of the auto-batching phase"
    )
    p.add_argument(
        "--auth",
        choices=("off", "on", "both"),
        default="off",
        help="authentication on the cluster; both: phase 1 without and with it, and the ratio",
    )
    p.add_argument(
        "--security",
        choices=("off", "on", "both"),
        default="off",
        help="authentication and TLS on every port (mutual TLS inside the cluster); both: "
        "phases 1 and 3 and the catch-up (--catchup-mib) without and with, and the ratios",
    )
    p.add_argument(
        "--idempotent",
        choices=("off", "both"),
        default="off",
        help="both: the three produce phases without and with idempotent producers' fields "
        "(docs/idempotence.md), alternating on one cluster for --rounds rounds, and the ratios "
        "of the rates and of the master's CPU per message",
    )
    p.add_argument(
        "--batch-messages",
        type=int,
        default=None,
        help="with --idempotent both: messages of the batches-of-64 phase (default: --messages); "
        "that phase costs the master about a fifth of the single sends' CPU a message, so more "
        "messages give it as long a reading",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="with --security both: clusters per mode, each round in a rotated order; the ratios "
        "compare the medians (the catch-up runs in the first round only)",
    )
    args = smoke.parse_args(
        p, messages=300, one_at_a_time=50, catchup_mib=1, kills=1, stops=1, no_peer=True
    )
    if args.batch_messages is None:
        args.batch_messages = args.messages
    run_async(lambda: main_async(args))


if __name__ == "__main__":
    main()
