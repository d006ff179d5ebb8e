"""How the controllers' costs grow with the metadata (issue 34 item 1), printed as a growth table;
then the brokers' (item 2: queues and consumer groups, bench/scale_broker.py), then the clients'
(item 3: connections and a consumer group's rebalance, bench/scale_clients.py).

Three ``rmq-controller`` processes on loopback (fsync on), as tests/controller/support.py starts
them; per column (1x, 10x, 100x of ``--topics`` topics of 8 queues and ``--groups`` broker groups
of 3 brokers) a fresh cluster and a load generator in this process, in coroutines, speaking the
real requests: each simulated broker (tests/controller/support.py FakeBroker: its own connection
and its own server for the controllers' pushes) takes its id (1012, 1013), registers (1000),
heartbeats every 500 ms (904, what broker/replicas/heartbeat.py sends) and registers its group's
topics (103) on every controller every 30 s; the topics are created through the controllers'
admin request (UPDATE_AND_CREATE_TOPIC, 64 in flight; there is no batch creation), each pushed
to its group's brokers as a real cluster does.

Measured per column, on the active controller unless said:
  route lookup new      GET_ROUTEINFO_BY_TOPIC of a topic no lookup of the column asked before,
                        one at a time: p50, p99 (the controller builds the answer)
  route lookup again    the same topic asked again right after (its cached answer): p50, p99
  route lookup x100 new
                        a client's 100 topics, none asked before, looked up at once on one
                        connection: p50, p99
  route lookup x100 again
                        the same 100 topics at once again right after: p50, p99
                        (``--lookups`` single topics, ``--lookups``/10 batches of 100, at least
                        10, as many in every column as the smallest allows: its 1,000 topics
                        give 400 singles and 6 batches, every topic asked new once)
                        The lookups are timed in a process of their own (started by the bench,
                        its own loop and connection), not on this process's loop, which runs the
                        simulated brokers: the rows are the controller's answer time and the
                        network's, not the load generator's loop delays too. Printed with
                        them (not in the table): the timed asks' span and the share of it the
                        active controller's loop thread ran and waited, ready, for a core
                        (/proc/<pid>/schedstat): 400 single asks new and again take about
                        0.1 s, so their p99 (the fourth largest) is as much the machine's as
                        the controller's: a loop waiting for a core answers nobody
  CPU per heartbeat     the active controller's utime+stime (/proc/<pid>/stat) over a window of
                        heartbeats only, less its idle CPU (measured before any broker joined),
                        divided by the heartbeats answered
  RSS                   the active controller's VmRSS with all of it loaded
  snapshot size         the newest Raft snapshot file (``snapshot_every`` 1,000 entries here, so
                        every column has one)
  snapshot take/install the state machine's encoding (snapshot_parts, joined) and decoding
                        (prepare_restore, then the swap) of that snapshot, the least of 3, in a
                        process of their own set up as a controller is (daemon.gc_tuning: its
                        collector tuned, the decoding with the collector paused, the restored
                        state frozen), not in this one, whose own heap (the load generator's)
                        every full collection set off by the timed work scanned
  catch-up              a follower killed (-9) and restarted from its disk until its Raft commit
                        index reaches the leader's
  failover              kill -9 of the leader until a survivor commits a write, the median of
                        3, each once the controller killed before caught up again; each one's
                        phases are printed, in ms after the kill: from each survivor's log its
                        changes of role and leader, when it became the active controller
                        ("active") and first held a lease a quorum confirmed ("lease"), ticks
                        it ran late; and the bench's writes to each survivor (each answer's
                        count, the longest write)

The growth columns: ``cost x`` is the 10x (100x) figure over the 1x one; ``load x`` is the load
the cost should grow with: the topics' factor for the totals (RSS, snapshot, catch-up), 1 for a
per-operation cost (a lookup, a heartbeat, a failover), which should not grow at all; ``ratio``
is cost x / load x. The last line is ``worst growth: RATIO (MEASURE)``, the largest ratio.

The route lookups compare like with like: the controller keeps each topic's encoded answer
(controller/service/topics_routes.py), so a lookup is either a build (tens of µs of the
controller's CPU) or a cached answer (under a µs). Before, the rows ``route lookup`` and ``route
lookup x100`` asked random topics: 4,400 asks among 1,000 topics at 1x mostly hit the cache (every
topic asked about four times), among 100,000 at 100x almost all built, so their growth compared a
cache hit with a build. Now each column asks each topic new once (a build) and again (a hit),
each batch again as many times as makes 100 asks a row at least (the x100 rows' 6 batches 17
times each: their p99 was the largest of 6 before).
Before the lookups had a process of their own, the four rows were timed on this
process's loop, among the simulated brokers' heartbeats (30 brokers at 1x, 300 with
``--max-groups 100``), so they held that loop's delays too (tables in docs/architecture.md
before it keep that meaning).
Nothing is asserted: these are figures, taken on a shared machine (the load average is printed).

    python bench/scale_bench.py [--topics 1000] [--groups 10] [--columns 1,10,100] [--quick]
        [--items controllers,brokers,clients] [--broker-queues 1000] [--broker-groups 100]
        [--puts 5000] [--rounds 3] [--idle-s 10]
        [--clients 200] [--members 10]
        [--log-gib 1,10] [--keep-logs DIR]

``--quick`` runs the 1x and 10x columns; ``--smoke`` a tiny run for the test suite;
``--items`` which items' tables (each item's table, then one ``worst growth`` line over all);
``--log-gib`` adds the log sizes' recovery and retention (bench/scale_log.py; not in --quick).
Every process started here is ended by its PID, also on error.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime
import gc
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import scale_broker, scale_clients, scale_log, smoke
from bench.controller_bench import (
    Attempt,
    apply_header,
    first_write_after_kill,
    leader_address,
    percentile,
    process_cpu,
    run,
)
from bench.growth import NAME_WIDTH, PER_OP, Worst, print_growth, rss_mib, worst_line
from client.bootstrap import Bootstrap
from controller.metadata import ReplicasInfoManager
from controller.raft_driver import decode_snapshot
from daemon import gc_tuning
from daemon.tasks import turn_after
from protocol.codes import ResponseCode
from protocol.controller_requests.topics import RouteQuery, UpdateTopic
from remoting.client import ConnectionPool, RemotingClient
from storage.raftlog import DiskStorage
from tests.controller.support import ControllerCluster, ControllerProc, FakeBroker, metadata
from tests.support.bytecode import cache_bytecode
from tests.support.procs import ROOT
from tests.support.wait import wait_until

CLUSTER = "DefaultCluster"
QUEUES = 8
BROKERS_PER_GROUP = 3
HEARTBEAT_S = 0.5
FAILOVERS = 3
ROUTE_REGISTER_S = 30.0
CREATE_INFLIGHT = 64
CONFIG = {
    "snapshot_every": 1000,
    "route_expiry_ms": 90_000,
    "broker_heartbeat_timeout_max_ms": 10_000,
}

TOTAL = "topics"


@dataclass
class Column:
    factor: int
    topics: int
    groups: int
    figures: dict[str, float] = field(default_factory=dict)


MEASURES: tuple[tuple[str, str, str], ...] = (
    ("route lookup new p50", "ms", PER_OP),
    ("route lookup new p99", "ms", PER_OP),
    ("route lookup again p50", "ms", PER_OP),
    ("route lookup again p99", "ms", PER_OP),
    ("route lookup x100 new p50", "ms", PER_OP),
    ("route lookup x100 new p99", "ms", PER_OP),
    ("route lookup x100 again p50", "ms", PER_OP),
    ("route lookup x100 again p99", "ms", PER_OP),
    ("CPU per heartbeat", "us", PER_OP),
    ("active controller RSS", "MiB", TOTAL),
    ("snapshot size", "KiB", TOTAL),
    ("snapshot take", "ms", TOTAL),
    ("snapshot install", "ms", TOTAL),
    ("restarted follower catch-up", "ms", TOTAL),
    ("leader failover", "ms", PER_OP),
)
TERM = "Raft term at the end"
"""Not a cost: how many elections the column saw (1 or 2 on a quiet machine; more when the
shared machine held a controller past its election timeout)."""


def topic_name(i: int) -> str:
    return f"ScaleTopic{i:06d}"


def group_name(g: int) -> str:
    return f"scale-{g:04d}"


class Load:
    """The simulated brokers of one column and their heartbeat and route loops."""

    def __init__(self, controllers: str, addresses: list[str], col: Column) -> None:
        self.controllers = controllers
        self.addresses = addresses
        self.col = col
        self.brokers: list[FakeBroker] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.beats = 0

    def group_topics(self, g: int) -> dict[str, int]:
        return {topic_name(i): QUEUES for i in range(g, self.col.topics, self.col.groups)}

    async def start(self) -> None:
        sem = asyncio.Semaphore(32)

        async def join(g: int) -> list[FakeBroker]:
            # One after another in a group: each takes the group's next free id.
            async with sem:
                group = []
                for b in range(BROKERS_PER_GROUP):
                    broker = FakeBroker(
                        self.controllers, group_name(g), cluster=CLUSTER, register_code=f"c{g}-{b}"
                    )
                    broker.timeout_ms = 3000
                    await broker.start()
                    await broker.join()
                    group.append(broker)
                return group

        joined = await asyncio.gather(*(join(g) for g in range(self.col.groups)))
        self.brokers = [b for group in joined for b in group]
        for broker in self.brokers:
            self.tasks.append(asyncio.create_task(self._beat(broker)))
            self.tasks.append(asyncio.create_task(self._routes(broker)))

    async def _beat(self, broker: FakeBroker) -> None:
        # Spread as real brokers are, each at a fixed rate from its own phase (as the broker's
        # heartbeat loop): sleeping HEARTBEAT_S after each answer, a stall of this process's
        # loop or of the active controller's lined every broker due meanwhile up on one phase
        # for good, so the controller met them in bursts that grew with the brokers.
        loop = asyncio.get_running_loop()
        due = loop.time() + random.random() * HEARTBEAT_S
        while True:
            await asyncio.sleep(max(0.0, due - loop.time()))
            due = turn_after(due, HEARTBEAT_S, loop.time())
            try:
                resp = await broker.heartbeat()
                if resp.code == ResponseCode.SUCCESS:
                    self.beats += 1
            except Exception as exc:  # an election of the controllers: register, keep beating
                if (
                    getattr(exc, "code", None)
                    == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
                ):
                    try:
                        await broker.register()
                    except Exception:
                        pass

    async def _routes(self, broker: FakeBroker) -> None:
        g = int(broker.broker_name.rsplit("-", 1)[1])
        await asyncio.sleep(random.random() * 2.0)
        while True:
            for address in self.addresses:
                try:
                    await broker.register_routes(self.group_topics(g), address)
                except Exception:
                    pass  # a controller down (killed for the catch-up or failover)
            await asyncio.sleep(ROUTE_REGISTER_S)

    async def stop(self) -> None:
        """Every loop cancelled and every broker stopped, 10 s at most each (a call retrying
        against a controller being killed may take its time to see its cancellation)."""
        for task in self.tasks:
            task.cancel()
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=10)
        stops = [asyncio.ensure_future(b.stop()) for b in self.brokers]
        if stops:
            await asyncio.wait(stops, timeout=10)


async def create_topics(controllers: str, col: Column) -> float:
    """Every topic through UPDATE_AND_CREATE_TOPIC, ``CREATE_INFLIGHT`` at once; seconds."""
    pool = ConnectionPool(5.0)
    boot = Bootstrap(controllers, pool, timeout=10.0, busy_rounds=20)
    queue = list(range(col.topics))
    started = time.perf_counter()

    async def worker() -> None:
        while queue:
            i = queue.pop()
            ask = UpdateTopic(
                cluster=CLUSTER,
                broker_name=group_name(i % col.groups),
                topic=topic_name(i),
                queues=QUEUES,
            )
            await boot.call(ask.code, *ask.encode())

    try:
        await asyncio.gather(*(worker() for _ in range(CREATE_INFLIGHT)))
    finally:
        pool.close()
    return time.perf_counter() - started


BATCH = 100
"""A client's topics, looked up at once."""


def lookup_plan(col: Column, singles: int, fewest: int) -> tuple[list[list[str]], list[list[str]]]:
    """Topics no lookup of the column has asked: ``singles`` one-topic batches and batches of
    ``BATCH`` (fewer in --smoke) from the rest, ``singles`` / 10 of them (at least 10). The
    counts are what the column of ``fewest`` topics allows (at most half of them single, at
    least one batch), the same in every column: a p99 of 40 batches against one of 6 compared
    the largest of 40 with the largest of 6."""
    order = [topic_name(i) for i in random.sample(range(col.topics), col.topics)]
    n = max(1, min(singles, fewest // 2))
    size = max(1, min(BATCH, fewest - n))
    count = max(1, min(max(10, singles // 10), (fewest - n) // size))
    rest = order[n:]
    return [[t] for t in order[:n]], [rest[k * size : (k + 1) * size] for k in range(count)]


AGAIN_SAMPLES = 100
"""The fewest asks an ``again`` row times: each batch is asked again this many times over the
batches (at least once), so its p99 is one of 100 asks or more and not the largest of the 6
batches of 100 that 1,000 topics allow (a single late turn of a loop in those 6 read as the
row's p99 growing 2.7 times in one quiet run and 1.04 in the next)."""


async def lookups(address: str, batches: list[list[str]]) -> tuple[list[float], list[float]]:
    """Each batch's topics looked up at once on one connection, then the same batch again right
    after, :data:`AGAIN_SAMPLES` / ``len(batches)`` times (at least once): the seconds of each
    first ask (none of its topics asked before: the controller builds each answer) and of each
    ask again (the answers it kept)."""
    conn = await RemotingClient.connect(address, 2.0)
    new: list[float] = []
    again: list[float] = []
    repeats = max(1, -(-AGAIN_SAMPLES // max(1, len(batches))))
    try:
        for topics in batches:
            for took in (new, *([again] * repeats)):
                t0 = time.perf_counter()
                resps = await asyncio.gather(
                    *(
                        conn.request(RouteQuery.code, *RouteQuery(topic=t).encode(), timeout=10.0)
                        for t in topics
                    )
                )
                took.append(time.perf_counter() - t0)
                bad = [r for r in resps if r.code != ResponseCode.SUCCESS]
                if bad:
                    raise RuntimeError(f"route lookup failed: {bad[0].code} {bad[0].header}")
    finally:
        conn.close()
    return new, again


WARMUP_TOPIC = "ScaleLookupWarmup"
"""A topic no column creates: the probe's warm-up asks (their answers are errors) run its
request and decoding paths once before the timed ones, without making any timed topic's answer
one the controller keeps."""


async def lookups_apart(
    address: str, batches: list[list[str]], pid: int
) -> tuple[list[float], list[float], tuple[float, float, float]]:
    """:func:`lookups` timed in a process of its own (:func:`lookup_probe`), over its own
    connection: timed on this process's loop, which also runs the column's simulated brokers
    (300 at 100x, each heartbeating every 500 ms), a lookup's time held that loop's delays too,
    which grow with the brokers simulated, not only the controller's answer (issue 34). The
    probe's start is not timed; it is ended by its PID, also on error. Also returns the timed
    asks' span and, over it, the seconds the loop thread of ``pid`` (the controller asked) ran
    and waited for a core (:func:`loop_thread_sched`)."""
    code = "from bench.scale_bench import lookup_probe; lookup_probe()"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=Path(__file__).resolve().parent.parent,
    )
    try:
        ask = json.dumps({"address": address, "batches": batches, "pid": pid}).encode()
        out, err = await asyncio.wait_for(proc.communicate(ask), 600)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"route lookup probe exited {proc.returncode}: {err.decode()[-2000:]}")
    doc = json.loads(out.decode().splitlines()[-1])
    sched = (float(doc["span"]), float(doc["ran"]), float(doc["waited"]))
    return [float(x) for x in doc["new"]], [float(x) for x in doc["again"]], sched


def lookup_probe() -> None:
    """The lookup process: reads ``{"address", "batches", "pid"}`` (JSON) on stdin, runs
    :func:`lookups` on a loop of its own, prints ``{"new": [s...], "again": [s...], "span": s,
    "ran": s, "waited": s}`` (JSON): the timed asks' span, and what ``pid``'s loop thread ran
    and waited for a core over it."""
    ask = json.load(sys.stdin)
    gc.collect()
    gc.freeze()  # the imports' objects: no collection of this process scans them while timing

    async def probe() -> dict[str, Any]:
        conn = await RemotingClient.connect(ask["address"], 2.0)
        try:
            for _ in range(20):
                query = RouteQuery(topic=WARMUP_TOPIC)
                await conn.request(query.code, *query.encode(), timeout=10.0)
        finally:
            conn.close()
        sched0, t0 = loop_thread_sched(ask["pid"]), time.perf_counter()
        new, again = await lookups(ask["address"], ask["batches"])
        sched1, span = loop_thread_sched(ask["pid"]), time.perf_counter() - t0
        ran, waited = (b - a for a, b in zip(sched0, sched1, strict=True))
        return {"new": new, "again": again, "span": span, "ran": ran, "waited": waited}

    print(json.dumps(run(probe)), flush=True)


def asked(plan: list[list[str]]) -> str:
    """What a lookup plan asks, in words: "400 topics", "6 batches of 100"."""
    size = len(plan[0]) if plan else 0
    return f"{len(plan)} topics" if size == 1 else f"{len(plan)} batches of {size}"


def loop_thread_sched(pid: int) -> tuple[float, float]:
    """Seconds ``pid``'s main thread (the controller's event loop) has run on a core and has
    waited, ready, for one (/proc/<pid>/schedstat: the main thread's alone, not the worker
    threads'); (0, 0) once it is gone. What a lookup's tail waits for on a shared machine: a
    loop that is ready but not running answers nobody (issue 34: in the 10x column the active
    controller's loop thread waited for a core a quarter to a half of the lookups' time)."""
    try:
        ran, waited, _slices = Path(f"/proc/{pid}/schedstat").read_text().split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0, 0.0
    return int(ran) / 1e9, int(waited) / 1e9


async def idle_cpu(leader: ControllerProc, seconds: float) -> float:
    """The leader's CPU seconds per second with no broker and no client (Raft's ticks)."""
    cpu0 = process_cpu(leader.pid)
    await asyncio.sleep(seconds)
    return (process_cpu(leader.pid) - cpu0) / seconds


async def heartbeat_cpu(leader: ControllerProc, load: Load, seconds: float, idle: float) -> float:
    """Microseconds of the leader's CPU per heartbeat answered over ``seconds``, its idle CPU
    (``idle`` a second) taken off."""
    beats0, cpu0, t0 = load.beats, process_cpu(leader.pid), time.perf_counter()
    await asyncio.sleep(seconds)
    beats, cpu = load.beats - beats0, process_cpu(leader.pid) - cpu0
    cpu -= idle * (time.perf_counter() - t0)
    return max(cpu, 0.0) / beats * 1e6 if beats else float("nan")


def snapshot_figures(proc: ControllerProc, tmp: Path) -> tuple[float, float, float]:
    """(size KiB, take ms, install ms) of ``proc``'s newest snapshot, timed by
    :func:`snapshot_probe` in a process of its own."""
    snaps = sorted(proc.data_dir.rglob("*.snap"), key=lambda p: p.stat().st_mtime)
    if not snaps:
        return float("nan"), float("nan"), float("nan")
    raft_dir = snaps[-1].parent.parent
    copy = tmp / "snapshot-copy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(raft_dir, copy)
    code = "import sys; from bench.scale_bench import snapshot_probe; print(*snapshot_probe(sys.argv[1]))"
    out = subprocess.run(
        [sys.executable, "-c", code, str(copy)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        cwd=Path(__file__).resolve().parent.parent,
    ).stdout.split()
    return float(out[-3]), float(out[-2]), float(out[-1])


def snapshot_probe(raft_dir: str) -> tuple[float, float, float]:
    """(size KiB, take ms, install ms) of the snapshot in ``raft_dir``, timed as a controller
    runs them (controller/raft_driver.py): with the collector tuned as its daemon tunes it, the
    decoding with the collector paused and the restored state frozen, the encoding a part at a
    time. The least of 3: one timing on a shared machine swings 2 to 3 times. A full collection
    scans every live object, so timed in the bench's own process these figures grew with the
    load generator's heap, not only with the snapshot (issue 34: 3 to 10 times the topics)."""
    gc_tuning.tune_for_latency()
    storage = DiskStorage.open(raft_dir, segment_bytes=64 * 1024 * 1024, fsync=False)
    raw = storage.snapshot().data
    _, data = decode_snapshot(raw)
    manager = ReplicasInfoManager()
    install = take = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        with gc_tuning.collector_paused():
            swap = manager.prepare_restore(data)
        swap()
        gc.freeze()
        install = min(install, time.perf_counter() - t0)
        t0 = time.perf_counter()
        b"".join(manager.snapshot_parts())
        take = min(take, time.perf_counter() - t0)
    return len(raw) / 1024, take * 1000, install * 1000


async def commit_index(address: str) -> int:
    doc = await metadata(address)
    return -1 if doc is None else int(doc["commitIndex"])


async def catch_up(follower: ControllerProc, leader: ControllerProc) -> float:
    """kill -9 ``follower``, restart it from its disk; seconds until it has the leader's index."""
    follower.kill9()
    target = await commit_index(leader.address)
    t0 = time.perf_counter()
    follower.start()
    await reaches(follower, target)
    return time.perf_counter() - t0


async def reaches(proc: ControllerProc, target: int) -> None:
    """Wait until ``proc``'s Raft commit index is at least ``target`` (RuntimeError after 120 s)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120
    while await commit_index(proc.address) < target:
        if loop.time() > deadline:
            raise RuntimeError(f"{proc.name} did not catch up in 120 s")
        await asyncio.sleep(0.01)


async def failovers(cluster: ControllerCluster, procs: list[ControllerProc]) -> list[float]:
    """:func:`failover` ``FAILOVERS`` times (seconds each), each on the leader of the moment and
    once the controller killed before has caught up again: one failover on a shared machine
    swings from a third of a second to three (issue 34)."""
    took: list[float] = []
    for _ in range(FAILOVERS):
        lead = await leader_address(cluster, procs)
        leader = next(p for p in procs if p.address == lead)
        took.append(await failover(cluster, leader))
        new_lead = await leader_address(cluster, procs)
        await reaches(leader, await commit_index(new_lead))
    return took


async def failover(cluster: ControllerCluster, leader: ControllerProc) -> float:
    """kill -9 ``leader`` until a survivor commits a write: seconds. Prints the phases (from
    the survivors' logs and the bench's writes, in ms after the kill)."""
    procs = [p for p in cluster.procs.values() if p is not leader]
    offsets = {p.name: log_size(p) for p in procs}
    attempts: list[Attempt] = []
    t0, wall0 = time.perf_counter(), time.time()
    leader.kill9()
    await first_write_after_kill(
        [p.address for p in procs], apply_header(64, group="scale-failover"), attempts
    )
    # Until the answer came, not until the other survivor's write was cancelled too: that
    # teardown, on this process's loop busy with the brokers' heartbeats, added 100 to 400 ms
    # at 100x (issue 34).
    took = min(end for _a, _start, end, outcome in attempts if outcome == "SUCCESS") - t0
    leader.start()
    wait_until(leader.alive, f"{leader.name} to start", 10)
    print(f"    {leader.node_id} killed: {took * 1000:,.0f} ms", flush=True)
    for proc in procs:
        events = [f"{e} +{(ts - wall0) * 1000:,.0f}" for ts, e in phases(proc, offsets[proc.name])]
        print(f"      {proc.node_id}: " + (", ".join(events) or "-"), flush=True)
    for proc in procs:
        print(f"      writes to {proc.node_id}: {write_summary(proc.address, attempts, t0)}")
    return took


PHASE_EVENTS = (
    "raft role",
    "raft leader",
    "active controller",
    "standby controller",
    "raft tick late",
    "controller stood still",
)
"""The log lines that time a failover's phases on a survivor (controller/raft_driver.py)."""


def log_size(proc: ControllerProc) -> int:
    try:
        return proc.log_path.stat().st_size
    except FileNotFoundError:
        return 0


def phases(proc: ControllerProc, offset: int) -> list[tuple[float, str]]:
    """(wall time, what) of each :data:`PHASE_EVENTS` line ``proc`` logged past ``offset``."""
    with proc.log_path.open("rb") as f:
        f.seek(offset)
        lines = f.read().decode(errors="replace").splitlines()
    found: list[tuple[float, str]] = []
    for line in lines:
        if not line.startswith("{") or not any(e in line for e in PHASE_EVENTS):
            continue
        try:
            doc = json.loads(line)
            ts = datetime.datetime.fromisoformat(doc["timestamp"]).timestamp()
        except (ValueError, KeyError):
            continue
        event = doc.get("event", "")
        if event == "raft role":
            what = f"{doc.get('role')} (term {doc.get('term')})"
        elif event == "raft leader":
            what = f"leader {doc.get('leader')}"
        elif event == "raft leader lease":
            what = "lease"
        elif event in ("raft tick late", "controller stood still"):
            what = f"{event} {doc.get('late_ms')} ms"
        elif event in PHASE_EVENTS:
            what = event.split()[0]
        else:
            continue
        found.append((ts, what))
    return found


def write_summary(address: str, attempts: list[Attempt], t0: float) -> str:
    """The bench's writes to ``address`` during a failover: each outcome's count, and the
    longest write's span (ms after the kill)."""
    mine = [a for a in attempts if a[0] == address]
    if not mine:
        return "-"
    counts = collections.Counter(a[3] for a in mine)
    longest = max(mine, key=lambda a: a[2] - a[1])
    return (
        ", ".join(f"{k} x{n}" for k, n in counts.most_common())
        + f"; longest {(longest[2] - longest[1]) * 1000:,.0f} ms "
        + f"(+{(longest[1] - t0) * 1000:,.0f} to +{(longest[2] - t0) * 1000:,.0f}, {longest[3]})"
    )


async def measure(col: Column, args: argparse.Namespace, tmp: Path) -> None:
    cluster = ControllerCluster(tmp, config=CONFIG)
    procs = list(cluster.procs.values())
    load: Load | None = None
    f = col.figures
    try:
        cluster.start()
        lead = await leader_address(cluster, procs)
        idle = await idle_cpu(next(p for p in procs if p.address == lead), args.window / 2)
        addresses = [p.address for p in procs]
        load = Load(cluster.addresses, addresses, col)
        t0 = time.perf_counter()
        await load.start()
        joined = time.perf_counter() - t0
        created = await create_topics(cluster.addresses, col)
        print(
            f"  {col.factor}x: {len(load.brokers)} brokers joined in {joined:.1f} s, "
            f"{col.topics} topics created in {created:.1f} s "
            f"({col.topics / created:,.0f}/s)",
            flush=True,
        )
        lead = await leader_address(cluster, procs)
        leader = next(p for p in procs if p.address == lead)
        await asyncio.sleep(2 * HEARTBEAT_S)
        fewest = args.topics * min(int(x) for x in args.columns.split(","))
        singles, batches = lookup_plan(col, args.lookups, fewest)
        for kind, plan in (("route lookup", singles), ("route lookup x100", batches)):
            new, again, (span, ran, waited) = await lookups_apart(lead, plan, leader.pid)
            for when, took in (("new", new), ("again", again)):
                f[f"{kind} {when} p50"] = percentile(took, 0.5) * 1000
                f[f"{kind} {when} p99"] = percentile(took, 0.99) * 1000
            print(
                f"  {col.factor}x: {kind}: {asked(plan)} asked new, then again "
                f"({len(again)} asks again), in {span:.2f} s; "
                f"the active controller's loop thread ran {100 * ran / span:.0f}% of it and "
                f"waited for a core {100 * waited / span:.0f}% (load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
        f["CPU per heartbeat"] = await heartbeat_cpu(leader, load, args.window, idle)
        f["active controller RSS"] = rss_mib(leader.pid)
        # In a thread: run on this loop, the probe (a copy and a process decoding 100,000
        # topics three times: seconds at 100x) silenced every simulated broker's heartbeats,
        # the active controller declared all the groups' masters inactive and elected 100 again
        # right before the failovers (issue 34).
        size, take, install = await asyncio.to_thread(snapshot_figures, leader, tmp)
        f["snapshot size"], f["snapshot take"], f["snapshot install"] = size, take, install
        follower = next(p for p in procs if p is not leader)
        try:
            f["restarted follower catch-up"] = await catch_up(follower, leader) * 1000
            # On the leader of the moment, which an election since the lookups may have moved
            # (killing a follower instead measured one write: 88 ms at 100x).
            took = [t * 1000 for t in await failovers(cluster, procs)]
            print(
                f"  {col.factor}x: failovers " + ", ".join(f"{t:,.0f}" for t in took) + " ms",
                flush=True,
            )
            f["leader failover"] = statistics.median(took)
        except (RuntimeError, TimeoutError) as exc:
            print(f"  {col.factor}x: {exc!r}", flush=True)
        doc = await metadata(leader.address) or await metadata(follower.address) or {}
        f["Raft term at the end"] = float(doc.get("term", "nan"))
        print(f"  {col.factor}x figures: " + ", ".join(f"{k} {v:,.2f}" for k, v in f.items()))
    finally:
        try:
            if load is not None:
                await load.stop()
        finally:
            cluster.stop()  # by their PIDs, also when the teardown above is interrupted


def print_table(cols: list[Column]) -> Worst:
    """The controllers' growth table; returns its worst ratio."""
    print()
    print(
        "load: "
        + ", ".join(
            f"{c.factor}x = {c.topics:,} topics of {QUEUES} queues, {c.groups} groups, "
            f"{c.groups * BROKERS_PER_GROUP} brokers"
            for c in cols
        )
    )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (a shared machine)")
    worst = print_growth(
        MEASURES,
        [c.factor for c in cols],
        [c.figures for c in cols],
        [{TOTAL: c.topics} for c in cols],
    )
    print(
        f"{TERM + ' (elections)':{NAME_WIDTH}s}"
        + "".join(f"{c.figures.get(TERM, float('nan')):12,.0f}" for c in cols)
    )
    return worst


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=1000, help="topics at 1x")
    parser.add_argument("--groups", type=int, default=10, help="broker groups at 1x (3 brokers)")
    parser.add_argument("--columns", default="1,10,100", help="load factors")
    parser.add_argument("--quick", action="store_true", help="the 1x and 10x columns only")
    parser.add_argument(
        "--max-groups",
        type=int,
        default=0,
        help="at most this many broker groups in any column (0: no cap): the topics still grow",
    )
    parser.add_argument(
        "--lookups",
        type=int,
        default=400,
        help="topics looked up one at a time per column, each new then again (at most half "
        "the smallest column's topics); a tenth as many batches of 100 (at least 10, as many "
        "as the smallest column's other topics allow); the same counts in every column; timed "
        "in a process of their own, apart from the simulated brokers' loop",
    )
    parser.add_argument("--window", type=float, default=10.0, help="heartbeat CPU window, s")
    parser.add_argument(
        "--keep-logs",
        default="",
        metavar="DIR",
        help="copy the controllers' logs of each column to DIR/<factor>x (the failovers' "
        "phases printed come from them)",
    )
    parser.add_argument(
        "--items",
        default="controllers,brokers,clients",
        help="which items' tables: controllers (item 1), brokers (item 2), clients (item 3), "
        "comma-separated",
    )
    scale_broker.add_args(parser)
    scale_clients.add_args(parser)
    scale_log.add_args(parser)
    args = smoke.parse_args(
        parser,
        topics=10,
        groups=1,
        columns="1,3",
        lookups=40,
        window=1.0,
        broker_queues=16,
        broker_groups=4,
        puts=50,
        rounds=1,
        idle_s=0.5,
        offsets_persist_ms=500,
        commit_seconds=1.0,  # spans two of the smoke run's 500 ms persists, as 6 s spans a 5 s one
        clients=10,
        members=3,
        settle=0.5,
    )
    if args.quick:
        args.columns = "1,10"
    return args


async def main_async(args: argparse.Namespace) -> None:
    factors = [int(x) for x in args.columns.split(",")]
    items = set(args.items.split(","))
    worsts: list[Worst] = []
    took: dict[str, float] = {}  # each item's seconds: where a run's time goes
    t0 = time.perf_counter()
    if "controllers" in items:
        worsts.append(await controllers(factors, args))
        took["controllers"] = time.perf_counter() - t0
    if "brokers" in items:
        t0 = time.perf_counter()
        cols = scale_broker.columns(factors, args.broker_queues, args.broker_groups)
        await scale_broker.run_columns(cols, args)
        worsts.append(scale_broker.print_table(cols))
        took["brokers"] = time.perf_counter() - t0
    if "clients" in items:
        t0 = time.perf_counter()
        client_cols = scale_clients.columns(factors, args.clients, args.members)
        await scale_clients.run_columns(client_cols, args)
        worsts.append(scale_clients.print_table(client_cols))
        took["clients"] = time.perf_counter() - t0
    if args.log_gib:
        t0 = time.perf_counter()
        sizes = [float(x) for x in args.log_gib.split(",")]
        worsts.append(scale_log.run(sizes, args.log_body, Path(args.log_dir)))
        took["log sizes"] = time.perf_counter() - t0
    print("items took: " + ", ".join(f"{k} {v:.0f} s" for k, v in took.items()))
    print(worst_line(worsts))


async def controllers(factors: list[int], args: argparse.Namespace) -> Worst:
    """Item 1's columns and table; its worst ratio."""
    cols = []
    for factor in factors:
        # The broker groups: 10, 100, 700 (2,000 brokers at 3 a group... 2,100 here).
        groups = args.groups * factor if factor <= 10 else args.groups * min(factor, 70)
        if args.max_groups:
            groups = min(groups, args.max_groups)
        cols.append(Column(factor, args.topics * factor, groups))
    for col in cols:
        tmp = Path(tempfile.mkdtemp(prefix=f"scale-{col.factor}x-"))
        try:
            print(f"column {col.factor}x: {col.topics:,} topics, {col.groups} groups", flush=True)
            t0 = time.perf_counter()
            await measure(col, args, tmp)
            print(f"  {col.factor}x took {time.perf_counter() - t0:.0f} s", flush=True)
        finally:
            if args.keep_logs:
                kept = Path(args.keep_logs) / f"{col.factor}x"
                kept.mkdir(parents=True, exist_ok=True)
                for path in tmp.glob("*.log"):
                    shutil.copy(path, kept / path.name)
            shutil.rmtree(tmp, ignore_errors=True)
    return print_table(cols)


def main() -> int:
    args = parse_args()
    # The daemons start from bytecode, as installed ones do, not compiling every module again
    # at each start (where PYTHONDONTWRITEBYTECODE is set): that is no cost of the load.
    cache_bytecode(ROOT)
    started = time.perf_counter()
    run(lambda: main_async(args))
    print(f"took {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
